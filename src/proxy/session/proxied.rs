//! Sessions that arrive through an L4 load balancer in `accept_proxy_protocol`: the PROXY
//! protocol header is read before anything else, and the address it carries becomes the
//! client's for the whole session (logs, routes, the Lua hook, the header sent on to backends).
//!
//! Reading is buffered (a v1 line has no length up front), so bytes behind the header that came
//! in the same read are kept and handed to the session in front of the socket ([`Prefixed`]).
//! MySQL clients wait for the greeting, so normally there are none and the session gets the
//! plain socket back.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{EndReason, Origin};
use crate::config::cidr::Cidr;
use crate::proxy::state::ProxyState;
use crate::wire::protocol::proxy_in::{self, Header, ProxyHeaderError, MAX_HEADER_LEN};

/// Why no session followed a connection from a listed network.
#[derive(Debug, Error)]
pub enum ReadHeaderError {
    #[error("client closed the connection before sending a PROXY protocol header")]
    Closed,
    #[error("client closed the connection after {got} bytes of a PROXY protocol header")]
    Truncated { got: usize },
    #[error("{0}")]
    Header(#[from] ProxyHeaderError),
    #[error("client connection failed while reading its PROXY protocol header: {0}")]
    Io(#[from] io::Error),
}

/// Whether connections from `peer` must start with a PROXY header.
pub fn from_balancer(networks: &[Cidr], peer: SocketAddr) -> bool {
    networks.iter().any(|n| n.contains(peer.ip()))
}

/// Reads the header at the start of `stream`, returning it and whatever followed it in the
/// same read. Never reads more than [`MAX_HEADER_LEN`] bytes before a verdict.
pub async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<(Header, BytesMut), ReadHeaderError> {
    let mut buf = BytesMut::with_capacity(MAX_HEADER_LEN);
    loop {
        if let Some((header, consumed)) = proxy_in::parse(&buf)? {
            buf.advance(consumed);
            return Ok((header, buf));
        }
        // The parser decides within MAX_HEADER_LEN bytes; the buffer never needs to grow.
        if buf.len() >= MAX_HEADER_LEN {
            return Err(ProxyHeaderError::V2TooLong { len: buf.len() }.into());
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(match buf.len() {
                0 => ReadHeaderError::Closed,
                got => ReadHeaderError::Truncated { got },
            });
        }
    }
}

/// Runs a session from a load balancer: its header first (within `handshake_timeout`), then
/// the session as the client the header names. A LOCAL or UNKNOWN header leaves the balancer's
/// own address as the client's. Every failure here is one log line and a closed connection.
pub(crate) async fn run(
    state: Arc<ProxyState>,
    mut stream: TcpStream,
    (peer, listener): (SocketAddr, &str),
    worker: usize,
    drain: &CancellationToken,
) -> EndReason {
    let timeout = state.session.handshake_timeout;
    let read = tokio::time::timeout(timeout, read_header(&mut stream)).await;
    let (header, rest) = match read {
        Ok(Ok(found)) => found,
        Err(_) => {
            warn!(
                "closing: no PROXY protocol header within {} from a network in \
                 accept_proxy_protocol",
                humantime::format_duration(timeout)
            );
            state.metrics.proxy_protocol_rejected("timeout");
            return EndReason::ProxyHeader;
        }
        Ok(Err(ReadHeaderError::Closed)) => {
            // A load balancer's TCP health check: connect, then close.
            debug!("closed before sending a PROXY protocol header");
            return EndReason::ClientNetwork;
        }
        Ok(Err(e)) => {
            warn!("closing: {e}");
            state.metrics.proxy_protocol_rejected("malformed");
            return EndReason::ProxyHeader;
        }
    };
    let client = header.source.unwrap_or(peer);
    let name = client.to_string();
    tracing::Span::current().record("client", name.as_str());
    debug!(version = header.version, "PROXY protocol header read");
    // Backends sent a PROXY header of their own are told the carried addresses; the listener's
    // address stands in for a destination the header did not give.
    let destination = header.destination.or_else(|| stream.local_addr().ok());
    let from = Origin::tcp(&name, listener, destination.map(|d| (client, d)));
    if rest.is_empty() {
        super::run(state, stream, from, worker, drain).await
    } else {
        super::run(state, Prefixed::new(rest, stream), from, worker, drain).await
    }
}

/// A stream with bytes already read from it put back in front.
#[derive(Debug)]
pub struct Prefixed<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: BytesMut, inner: S) -> Self {
        Self { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = this.prefix.len().min(buf.remaining());
        buf.put_slice(&this.prefix[..n]);
        this.prefix.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn bytes_behind_the_header_in_the_same_read_reach_the_session() {
        let (mut lb, mut proxy) = tokio::io::duplex(4096);
        lb.write_all(b"PROXY TCP4 10.9.8.7 10.0.0.1 5555 3306\r\n\x01\x00\x00\x00\x0e")
            .await
            .unwrap();
        let (header, rest) = read_header(&mut proxy).await.unwrap();
        assert_eq!(header.source, Some("10.9.8.7:5555".parse().unwrap()));
        let mut session = Prefixed::new(rest, proxy);
        lb.write_all(b"more").await.unwrap();
        let mut got = [0u8; 9];
        session.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"\x01\x00\x00\x00\x0emore");
    }

    #[tokio::test]
    async fn a_header_split_over_reads_is_assembled() {
        let (mut lb, mut proxy) = tokio::io::duplex(4096);
        let reader = tokio::spawn(async move { read_header(&mut proxy).await });
        for piece in [
            &b"\r\n\r\n\0\r"[..],
            b"\nQUIT\n\x21\x11\x00",
            b"\x0c\x0a\x09\x08\x07",
        ] {
            lb.write_all(piece).await.unwrap();
            tokio::task::yield_now().await;
        }
        lb.write_all(&[10, 0, 0, 1, 0x15, 0xb3, 0x0c, 0xea])
            .await
            .unwrap();
        let (header, rest) = reader.await.unwrap().unwrap();
        assert_eq!(header.source, Some("10.9.8.7:5555".parse().unwrap()));
        assert_eq!(header.destination, Some("10.0.0.1:3306".parse().unwrap()));
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn a_close_mid_header_is_truncated_and_a_bare_close_is_not() {
        let (mut lb, mut proxy) = tokio::io::duplex(4096);
        lb.write_all(b"PROXY TCP4 10.9").await.unwrap();
        drop(lb);
        let e = read_header(&mut proxy).await.unwrap_err();
        assert!(matches!(e, ReadHeaderError::Truncated { got: 15 }), "{e}");
        let (lb, mut proxy) = tokio::io::duplex(64);
        drop(lb);
        let e = read_header(&mut proxy).await.unwrap_err();
        assert!(matches!(e, ReadHeaderError::Closed), "{e}");
    }

    #[test]
    fn only_listed_networks_are_balancers() {
        let nets: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()];
        assert!(from_balancer(&nets, "10.1.2.3:4".parse().unwrap()));
        assert!(from_balancer(&nets, "[::1]:4".parse().unwrap()));
        assert!(!from_balancer(&nets, "127.0.0.1:4".parse().unwrap()));
        assert!(!from_balancer(&[], "10.1.2.3:4".parse().unwrap()));
    }
}
