//! One leg of a session (client or backend) as the relay sees it: the socket itself, or TLS over
//! it, with protocol compression optionally on top.
//!
//! A leg starts plain and is upgraded in place during the connection phase: TLS after an
//! SSLRequest, compression after the final OK. One enum rather than a generic per layer keeps the
//! relay compiled once per socket type instead of once per combination of layers, and costs one
//! branch per read or write. [`LegStream::Closed`] is what is left when an upgrade failed half
//! way (the socket went into the TLS handshake and did not come back): every I/O on it fails.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsStream;

use crate::net::stream::compressed::Compressed;
use crate::wire::protocol::compress::Role;

mod tls;
pub use tls::TlsSocket;

/// A leg's byte stream.
pub enum LegStream<S> {
    Plain(S),
    /// TLS past the handshake (see [`TlsSocket`]).
    Tls(Box<TlsSocket<S>>),
    /// Compressed frames over a plain or TLS leg: reads give plain packets, writes are framed.
    Compressed(Box<Compressed<LegStream<S>>>),
    Closed,
}

impl<S> LegStream<S> {
    /// The backend leg once its TLS handshake (by tokio-rustls) is done.
    pub fn tls(stream: TlsStream<S>) -> Self {
        Self::Tls(Box::new(TlsSocket::new(stream)))
    }

    /// Whether the leg is encrypted.
    /// The socket under any TLS and compression (None once closed).
    pub fn socket(&self) -> Option<&S> {
        match self {
            Self::Plain(s) => Some(s),
            Self::Tls(t) => Some(t.socket()),
            Self::Compressed(c) => c.get_ref().socket(),
            Self::Closed => None,
        }
    }

    pub fn is_tls(&self) -> bool {
        match self {
            Self::Tls(_) => true,
            Self::Compressed(c) => c.get_ref().is_tls(),
            _ => false,
        }
    }

    /// From here on the leg speaks compressed frames; `already_read` holds raw bytes read past
    /// the connection phase's last packet (the first frames).
    pub fn compress(&mut self, role: Role, already_read: BytesMut) {
        let inner = std::mem::replace(self, Self::Closed);
        *self = Self::Compressed(Box::new(Compressed::new(inner, role, already_read)));
    }

    /// Takes the plain socket out for an upgrade, leaving [`LegStream::Closed`] behind.
    pub fn take_plain(&mut self) -> io::Result<S> {
        match std::mem::replace(self, Self::Closed) {
            Self::Plain(s) => Ok(s),
            other => {
                *self = other;
                Err(io::Error::other("the leg is already upgraded"))
            }
        }
    }

    /// The negotiated TLS version and cipher suite, for the session's debug line.
    pub fn tls_description(&self) -> Option<String> {
        match self {
            Self::Compressed(c) => c.get_ref().tls_description(),
            Self::Tls(s) => Some(s.description()),
            _ => None,
        }
    }

    /// The peer's leaf certificate, when the leg is TLS and the peer sent one.
    pub fn peer_certificate(&self) -> Option<rustls_pki_types::CertificateDer<'static>> {
        if let Self::Compressed(c) = self {
            return c.get_ref().peer_certificate();
        }
        let Self::Tls(s) = self else { return None };
        s.peer_certificate()
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the connection was lost during the TLS handshake",
    )
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for LegStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Compressed(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Closed => Poll::Ready(Err(closed())),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for LegStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Compressed(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Closed => Poll::Ready(Err(closed())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Compressed(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Closed => Poll::Ready(Err(closed())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Compressed(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Closed => Poll::Ready(Ok(())),
        }
    }
}

/// A write from a buffer the writer may change: the relay's, whose bytes are never read again
/// once written. A TLS client leg seals a response where it lies instead of copying it into a
/// record buffer of its own (see [`TlsSocket::poll_write_from`]).
pub trait WriteFrom: AsyncWrite + Unpin {
    /// Writes `buf[range]` as `poll_write` does. The bytes accepted may be overwritten, and so
    /// may `buf`'s spare capacity; `buf`'s length is left as it was.
    fn poll_write_from(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        range: Range<usize>,
    ) -> Poll<io::Result<usize>>;
}

impl<S: AsyncRead + AsyncWrite + Unpin> WriteFrom for LegStream<S> {
    #[inline]
    fn poll_write_from(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        range: Range<usize>,
    ) -> Poll<io::Result<usize>> {
        match self {
            Self::Tls(s) => s.poll_write_from(cx, buf, range),
            _ => Pin::new(self).poll_write(cx, &buf[range]),
        }
    }
}

/// Memory a leg holds beyond the relay's buffers (a compressed leg's zlib states and frame
/// buffers, a TLS leg's waiting records), released with them once the session has been quiet for
/// a second.
pub trait ReleaseMemory {
    fn holds_memory(&self) -> bool;
    fn release_memory(&mut self);
}

impl<S> ReleaseMemory for LegStream<S> {
    fn holds_memory(&self) -> bool {
        match self {
            Self::Compressed(c) => c.holds_memory() || c.get_ref().holds_memory(),
            Self::Tls(t) => t.holds_memory(),
            _ => false,
        }
    }

    fn release_memory(&mut self) {
        match self {
            Self::Compressed(c) => {
                c.shrink();
                c.get_mut().release_memory();
            }
            Self::Tls(t) => t.release_memory(),
            _ => {}
        }
    }
}
