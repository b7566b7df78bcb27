//! A TLS leg past its handshake, driven directly by the relay's reads and writes: the client
//! leg through a record layer of our own, the backend leg through rustls' connection.
//!
//! The reason is the cost per query. Counted with callgrind on a point select (one small record
//! each way), a client leg through rustls' buffered connection added about 5,000 instructions
//! over plaintext: some 2,000 in AES-GCM, 2,300 in rustls' handling of the two records (it
//! copies each received record's plaintext into a `Vec`, encrypts each record sent into a new
//! `Vec`, sends those through a `writev` list, and grows its incoming buffer 4 KiB at a time).
//! Its unbuffered API keeps the `Vec`s. With the record layer below, the client leg adds about
//! 3,000 instructions per point select, two thirds of them AES-GCM (and ring's handling of each
//! record, some 350 instructions a record). So:
//!
//! - Client leg (mysql-lb is the server): rustls drives the handshake through its unbuffered
//!   API ([`accept`]) and hands over the traffic secrets and a `KernelConnection`, which
//!   derives the next keys on a TLS 1.3 key update. Records are then sealed and opened in place
//!   with ring's AEAD ([`records`], [`server`]); a response that makes one record is sealed in
//!   the relay's own buffer.
//! - Backend leg (mysql-lb is the client): tokio-rustls' handshake, then rustls' connection
//!   without tokio-rustls' adapter ([`buffered`]). One backend connection serves many clients
//!   in pooled mode and is usually plaintext, so its cost per query matters less.
//!
//! One type for both keeps [`LegStream`](super::LegStream) as it was: a branch per call.

mod accept;
mod buffered;
mod records;
mod server;

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use rustls::ServerConfig;
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsStream;

use buffered::Buffered;
use server::Server;

/// An established TLS connection over `S`.
pub struct TlsSocket<S>(Inner<S>);

// Both are large (AES key schedules, rustls' state) and the socket is boxed in `LegStream`:
// boxing the larger variant as well would add a pointer chase per call for nothing.
#[allow(clippy::large_enum_variant)]
enum Inner<S> {
    Server(Server<S>),
    Buffered(Buffered<S>),
}

impl<S> TlsSocket<S> {
    /// Takes over the socket and the connection of a stream whose handshake (by tokio-rustls)
    /// is complete.
    pub fn new(stream: TlsStream<S>) -> Self {
        Self(Inner::Buffered(Buffered::new(stream)))
    }

    /// The socket under the records.
    pub fn socket(&self) -> &S {
        match &self.0 {
            Inner::Server(s) => s.socket(),
            Inner::Buffered(b) => b.socket(),
        }
    }

    /// The negotiated version and cipher suite ("TLSv1.3 TLS13_AES_128_GCM_SHA256").
    pub fn description(&self) -> String {
        match &self.0 {
            Inner::Server(s) => s.description().to_owned(),
            Inner::Buffered(b) => crate::net::tls::describe(b.state()),
        }
    }

    /// The peer's leaf certificate, when it sent one.
    pub fn peer_certificate(&self) -> Option<CertificateDer<'static>> {
        match &self.0 {
            Inner::Server(s) => s.peer_certificate().cloned(),
            Inner::Buffered(b) => b
                .state()
                .peer_certificates()?
                .first()
                .map(|c| c.clone().into_owned()),
        }
    }

    /// Whether records wait in a buffer of their own (see [`ReleaseMemory`](crate::net::leg::ReleaseMemory)).
    pub fn holds_memory(&self) -> bool {
        match &self.0 {
            Inner::Server(s) => s.holds_memory(),
            Inner::Buffered(b) => b.holds_memory(),
        }
    }

    /// Frees the buffers that hold nothing waiting.
    pub fn release_memory(&mut self) {
        match &mut self.0 {
            Inner::Server(s) => s.release_memory(),
            Inner::Buffered(b) => b.release_memory(),
        }
    }

    /// Moves our sending keys on (TLS 1.3 only): a KeyUpdate goes out with the next write or
    /// flush.
    pub fn refresh_traffic_keys(&mut self) -> io::Result<()> {
        match &mut self.0 {
            Inner::Server(s) => s.refresh_traffic_keys(),
            Inner::Buffered(b) => b.refresh_traffic_keys(),
        }
    }

    /// Lowers the records our TLS server side seals under one key, so tests reach the limit.
    #[cfg(test)]
    pub fn limit_records_per_key(&mut self, records: u64) {
        match &mut self.0 {
            Inner::Server(s) => s.limit_records_per_key(records),
            Inner::Buffered(_) => panic!("only our own record layer has the limit"),
        }
    }

    /// Sealed bytes of our own TLS server side not sent yet.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        match &self.0 {
            Inner::Server(s) => s.queued(),
            Inner::Buffered(_) => 0,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsSocket<S> {
    /// The server side of a handshake on `io` (the client leg). `config` must have
    /// `enable_secret_extraction`.
    pub async fn accept(config: Arc<ServerConfig>, mut io: S) -> io::Result<Self> {
        let accepted = accept::accept(config, &mut io).await?;
        Ok(Self(Inner::Server(Server::new(io, accepted))))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsSocket<S> {
    /// Writes `buf[range]`, sealing it in place on the client leg (see
    /// [`WriteFrom`](super::WriteFrom)); the backend leg copies it into rustls.
    pub fn poll_write_from(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        range: Range<usize>,
    ) -> Poll<io::Result<usize>> {
        match &mut self.0 {
            Inner::Server(s) => s.poll_write_from(cx, buf, range),
            Inner::Buffered(b) => Pin::new(b).poll_write(cx, &buf[range]),
        }
    }
}

// Inlined: a call of its own for the dispatch cost about 20 instructions per read, three reads
// per query.
impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsSocket<S> {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Inner::Server(s) => Pin::new(s).poll_read(cx, buf),
            Inner::Buffered(b) => Pin::new(b).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsSocket<S> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Inner::Server(s) => Pin::new(s).poll_write(cx, buf),
            Inner::Buffered(b) => Pin::new(b).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Inner::Server(s) => Pin::new(s).poll_flush(cx),
            Inner::Buffered(b) => Pin::new(b).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Inner::Server(s) => Pin::new(s).poll_shutdown(cx),
            Inner::Buffered(b) => Pin::new(b).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests;
