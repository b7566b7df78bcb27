//! Byte streams on either leg and whole-packet reads for the handshake.
//!
//! Sessions are generic over the client's stream (TCP or unix; TLS and compression over either
//! are `crate::net::leg`'s); backends are one enum so the balancer can hand out TCP and
//! unix-socket backends alike without boxing.
//! [`compressed::Compressed`] wraps either leg's stream when it speaks the compressed protocol.

pub mod compressed;
pub mod identity;
mod proxy;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::config::{BackendAddr, TcpKeepalive};
use identity::SocketIdentity;

/// A connection to a backend.
#[derive(Debug)]
pub enum BackendStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl BackendStream {
    /// Whether the peer has closed the connection (or reset it), asked of the kernel now: one
    /// `recv(MSG_PEEK | MSG_DONTWAIT)` of a byte, which sees a close that the runtime's cached
    /// readiness has not caught up with yet (a server killed a moment ago). Bytes waiting to be
    /// read are not a close: they are read through the leg's TLS or compression, if any.
    pub fn peer_closed(&self) -> bool {
        use std::os::fd::AsRawFd;
        let fd = match self {
            BackendStream::Tcp(s) => s.as_raw_fd(),
            BackendStream::Unix(s) => s.as_raw_fd(),
        };
        let mut byte = 0u8;
        // SAFETY: `fd` is this stream's open socket for the call's duration, and the buffer is
        // one byte that lives across it.
        let n = unsafe {
            libc::recv(
                fd,
                std::ptr::addr_of_mut!(byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match n {
            0 => true,
            n if n > 0 => false,
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }

    /// Connects within `timeout`; TCP connections get `TCP_NODELAY`, since every packet the proxy
    /// forwards is a whole request or response that must not wait for more.
    pub async fn connect(
        addr: &BackendAddr,
        timeout: Duration,
        identity: &SocketIdentity,
    ) -> io::Result<Self> {
        match tokio::time::timeout(timeout, Self::open(addr, None, identity)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "connect timed out after {}",
                    humantime::format_duration(timeout)
                ),
            )),
        }
    }

    /// As [`connect`](Self::connect) but with no deadline of its own, for a caller whose
    /// deadline covers more (a session's covers the greeting too: one timer per connect rather
    /// than two), and with keepalive probes on a TCP connection so a backend host that vanished
    /// does not hold the session forever (a unix socket's peer is on this machine). A unix
    /// socket is connected as `identity` (see [`identity`]).
    pub async fn open(
        addr: &BackendAddr,
        keepalive: Option<&TcpKeepalive>,
        identity: &SocketIdentity,
    ) -> io::Result<Self> {
        match addr {
            BackendAddr::Tcp { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                if let Some(k) = keepalive {
                    k.apply(socket2::SockRef::from(&s))?;
                }
                Ok(Self::Tcp(s))
            }
            BackendAddr::Unix(path) => Ok(Self::Unix(identity.connect(path).await?)),
        }
    }

    /// Reads what the socket holds now without waiting and without registering a waker:
    /// `WouldBlock` at once, with no system call, while the runtime has seen no readiness since
    /// the last read that would have blocked.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.try_read(buf),
            Self::Unix(s) => s.try_read(buf),
        }
    }
}

impl AsyncRead for BackendStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for BackendStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[derive(Debug, Error)]
pub enum PacketReadError {
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a packet")]
    Truncated,
    #[error("packet of {len} bytes exceeds the handshake limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads one whole packet (header included) from `stream`, keeping whatever follows it in `buf`.
/// Only for the handshake: packets are small and the size is checked before anything is buffered.
pub async fn read_packet<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max: usize,
) -> Result<BytesMut, PacketReadError> {
    loop {
        if buf.len() >= 4 {
            let len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
            if len > max {
                return Err(PacketReadError::TooLarge { len, max });
            }
            if buf.len() >= 4 + len {
                return Ok(buf.split_to(4 + len));
            }
            buf.reserve(4 + len - buf.len());
        } else {
            buf.reserve(256);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(if buf.is_empty() {
                PacketReadError::Closed
            } else {
                PacketReadError::Truncated
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_packets_one_at_a_time_and_keeps_the_rest() {
        let data: &[u8] = &[1, 0, 0, 0, 0xAA, 2, 0, 0, 1, 0xBB, 0xCC, 9];
        let mut stream = data;
        let mut buf = BytesMut::new();
        let p = read_packet(&mut stream, &mut buf, 100).await.unwrap();
        assert_eq!(&p[..], &[1, 0, 0, 0, 0xAA]);
        let p = read_packet(&mut stream, &mut buf, 100).await.unwrap();
        assert_eq!(&p[..], &[2, 0, 0, 1, 0xBB, 0xCC]);
        assert!(matches!(
            read_packet(&mut stream, &mut buf, 100).await,
            Err(PacketReadError::Truncated)
        ));
    }

    #[tokio::test]
    async fn refuses_oversized_length_before_reading_it() {
        let data: &[u8] = &[0xFF, 0xFF, 0xFF, 0];
        let mut stream = data;
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_packet(&mut stream, &mut buf, 1024).await,
            Err(PacketReadError::TooLarge { len: 0xFFFFFF, .. })
        ));
    }

    #[tokio::test]
    async fn clean_close_is_closed() {
        let mut stream: &[u8] = &[];
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_packet(&mut stream, &mut buf, 10).await,
            Err(PacketReadError::Closed)
        ));
    }
}
