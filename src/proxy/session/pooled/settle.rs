//! A session whose client left in the middle of a statement: the rest of the statement's
//! answer is read to a command boundary and thrown away, so the server connection is in sync
//! again and can serve the user's other sessions.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};

use super::Pooled;
use crate::backends::pooling::ServerConn;
use crate::net::leg::LegStream;
use crate::proxy::relay::{relay, Observer, RelayEnd, Steering, Stop};
use crate::wire::protocol::response::{Completed, Tracker};

/// Reads, within `within`, the rest of the answers to commands whose client left, as far as a
/// command boundary, and throws them away; true once there (the connection is in sync again).
/// The tracker has seen every byte read from the server, so it goes on where the session's
/// relay stopped; the commands' ends still reach the observer (a transaction they opened, a
/// pin).
pub(super) async fn settle(
    held: &mut ServerConn,
    tracker: &mut Tracker,
    stop: Stop<'_>,
    observer: &mut Pooled<'_, '_>,
    within: std::time::Duration,
) -> bool {
    let mut nobody = LegStream::Plain(Nobody);
    let mut settling = Settling(observer);
    let rest = relay(
        &mut nobody,
        &mut held.leg,
        tracker,
        BytesMut::new(),
        BytesMut::new(),
        stop,
        &mut settling,
    );
    match tokio::time::timeout(within, rest).await {
        Ok(RelayEnd::Released(..) | RelayEnd::Drained) => tracker.idle(),
        _ => false,
    }
}

/// The client side of [`settle`]: sends nothing, takes and drops everything.
struct Nobody;

impl AsyncRead for Nobody {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Pending
    }
}

impl AsyncWrite for Nobody {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The session's observer while [`settle`] reads, steering the relay to end at the first
/// boundary.
struct Settling<'a, 'b, 'r>(&'a mut Pooled<'b, 'r>);

impl Observer for Settling<'_, '_, '_> {
    fn completed(&mut self, c: &Completed) {
        self.0.completed(c);
    }

    fn relayed(&mut self, to_backend: bool, n: usize) {
        self.0.relayed(to_backend, n);
    }
}

impl Steering for Settling<'_, '_, '_> {
    fn releasable(&self) -> bool {
        true
    }

    fn keeps_backend(&self) -> bool {
        true
    }
}
