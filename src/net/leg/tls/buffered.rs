//! The backend leg past its handshake (mysql-lb is the TLS client): rustls' buffered connection
//! driven directly by the relay's reads and writes, without tokio-rustls.
//!
//! The handshake stays with tokio-rustls (`TlsConnector::connect`); once it is done,
//! [`Buffered::new`] takes the socket and the rustls connection out of its stream. tokio-rustls
//! reads the socket through an adapter that turns every "not ready" into an `io::Error`, reads at
//! most 4 KiB per system call, and after handing out one record's plaintext goes back to the
//! socket for more. Here one poll reads up to 16 KiB of records with one read into a stack
//! buffer, gives them to rustls, and hands out every decrypted byte that fits; the socket is read
//! again only when rustls has no plaintext left. A write encrypts what the relay wrote (one
//! record per 16 KiB) and sends what rustls queued at once.
//!
//! rustls' own per-record costs remain (a `Vec` per record each way, see [`super`]); the client
//! leg has a record layer of its own ([`super::server`]), the backend leg keeps rustls': it
//! counts once per backend connection, not once per client, and is usually plaintext.
//!
//! Everything TLS is rustls': records, alerts, key updates, close_notify. End of stream is as
//! rustls' reader says: zero bytes after the peer's close_notify, `UnexpectedEof` when the
//! socket ended without one (a truncation), `InvalidData` on a bad record (after one attempt to
//! send the alert rustls queued about it).

use std::io::{self, BufRead, Write};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::{CommonState, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsStream;

/// Ciphertext read per system call: a full-size record in one read.
const READ_CHUNK: usize = 16 * 1024;
/// rustls' `read_tls` refuses more records once it holds more than this much plaintext
/// (`DEFAULT_RECEIVED_PLAINTEXT_LIMIT` in rustls 0.23, not exported); records it cannot take yet
/// wait in [`Buffered::unread`].
const PLAINTEXT_LIMIT: usize = 16 * 1024;

/// An established TLS connection over `S`.
pub struct Buffered<S> {
    io: S,
    conn: Connection,
    /// Records read from the socket that rustls could not take yet (it held 16 KiB of
    /// plaintext, which happens only in bulk transfers): they go to rustls before the socket is
    /// read again. Freed with the relay's buffers once the session is quiet.
    unread: Vec<u8>,
    /// The socket ended and rustls was told: never read it again.
    eof: bool,
    /// close_notify is queued (the leg was shut down).
    closing: bool,
}

impl<S> Buffered<S> {
    /// The socket under the records.
    pub fn socket(&self) -> &S {
        &self.io
    }

    /// Takes over the socket and the connection of a stream whose handshake is complete.
    pub fn new(stream: TlsStream<S>) -> Self {
        let (io, conn) = match stream {
            TlsStream::Client(s) => {
                let (io, conn) = s.into_inner();
                (io, Connection::Client(conn))
            }
            TlsStream::Server(s) => {
                let (io, conn) = s.into_inner();
                (io, Connection::Server(conn))
            }
        };
        Self {
            io,
            conn,
            unread: Vec::new(),
            eof: false,
            closing: false,
        }
    }

    /// The negotiated parameters and the peer's certificates.
    pub fn state(&self) -> &CommonState {
        &self.conn
    }

    /// Moves our sending keys on (TLS 1.3 only).
    pub fn refresh_traffic_keys(&mut self) -> io::Result<()> {
        self.conn
            .refresh_traffic_keys()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Whether records wait in a buffer of their own (see [`ReleaseMemory`](crate::net::leg::ReleaseMemory)).
    pub fn holds_memory(&self) -> bool {
        self.unread.capacity() > 0
    }

    /// Frees the buffer of waiting records if none wait.
    pub fn release_memory(&mut self) {
        if self.unread.is_empty() {
            self.unread = Vec::new();
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Buffered<S> {
    /// Gives rustls more records: those waiting, else one read of the socket. Called only while
    /// rustls holds no plaintext. `Ready(Ok(()))` also when the socket ended (`self.eof` is then
    /// set and rustls knows).
    #[inline(never)]
    fn poll_records(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.unread.is_empty() {
            let mut unread = std::mem::take(&mut self.unread);
            let taken = self.decrypt(cx, &unread);
            if let Ok(n) = taken {
                unread.drain(..n);
            }
            self.unread = unread;
            return Poll::Ready(taken.map(drop));
        }
        let mut raw = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut raw = ReadBuf::uninit(&mut raw);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut raw))?;
        let mut records = raw.filled();
        if records.is_empty() {
            // An empty read tells rustls the socket ended: its reader then reports a clean
            // close (after close_notify) or a truncation.
            self.eof = true;
            self.conn.read_tls(&mut records)?;
            return Poll::Ready(Ok(()));
        }
        let n = self.decrypt(cx, records)?;
        self.unread.extend_from_slice(&records[n..]);
        Poll::Ready(Ok(()))
    }

    /// Hands `records` to rustls until it holds the most plaintext it takes; returns how many
    /// bytes it took.
    fn decrypt(&mut self, cx: &mut Context<'_>, records: &[u8]) -> io::Result<usize> {
        let mut rest = records;
        let mut plaintext = 0;
        while !rest.is_empty() && plaintext <= PLAINTEXT_LIMIT {
            // Reading from the slice advances it. 0: close_notify came, nothing after it counts.
            if self.conn.read_tls(&mut rest)? == 0 {
                return Ok(records.len());
            }
            match self.conn.process_new_packets() {
                Ok(state) => plaintext = state.plaintext_bytes_to_read(),
                Err(e) => {
                    // rustls queued an alert telling the peer why: one attempt to send it.
                    let _ = self.poll_send(cx);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
        }
        Ok(records.len() - rest.len())
    }

    /// Sends everything rustls queued; `Ready(Ok)` once nothing is left.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.conn.wants_write() {
            let mut out = SyncWrite {
                io: &mut self.io,
                cx,
            };
            match self.conn.write_tls(&mut out) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Buffered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // rustls wants to read while it holds no plaintext and the peer has not closed.
        while !this.eof && this.conn.wants_read() {
            ready!(this.poll_records(cx))?;
        }
        let mut copied = false;
        while buf.remaining() > 0 && !(copied && this.conn.wants_read()) {
            match this.conn.reader().into_first_chunk() {
                Ok([]) => break,
                Ok(chunk) => {
                    let n = chunk.len().min(buf.remaining());
                    buf.put_slice(&chunk[..n]);
                    this.conn.reader().consume(n);
                    copied = true;
                }
                // What follows the plaintext (an end, an error) comes at the next read.
                Err(_) if copied => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Not reached past the handshake (rustls then wants to read); poll again
                    // rather than hang if it ever is.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Buffered<S> {
    /// Encrypts as much of `buf` as rustls takes (its outgoing buffer is limited) and sends it;
    /// bytes the socket does not take yet stay queued for the next write or flush.
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            let n = this.conn.writer().write(buf)?;
            let sent = this.poll_send(cx)?;
            match (n, sent) {
                (0, Poll::Pending) => return Poll::Pending,
                // The queue was full and is empty now: room for `buf`.
                (0, Poll::Ready(())) => continue,
                (n, _) => return Poll::Ready(Ok(n)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    /// Sends close_notify, then shuts the socket's write side.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.conn.send_close_notify();
            this.closing = true;
        }
        ready!(this.poll_send(cx))?;
        match ready!(Pin::new(&mut this.io).poll_shutdown(cx)) {
            // A peer that is already gone is shut down enough.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}

/// rustls writes records through `std::io::Write`: "not ready" becomes `WouldBlock`.
struct SyncWrite<'a, 'b, S> {
    io: &'a mut S,
    cx: &'a mut Context<'b>,
}

impl<S: AsyncWrite + Unpin> Write for SyncWrite<'_, '_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.io).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
