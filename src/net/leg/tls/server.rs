//! The client leg past its handshake (mysql-lb is the TLS server): [`Records`] over the socket.
//!
//! Records are read into one buffer and opened there in place; their plaintext is copied once,
//! into the relay's buffer. What the relay writes is sealed where it lies in the relay's buffer
//! when it makes one record and nothing waits before it ([`Server::poll_write_from`]: the
//! relay never reads those bytes again), and goes out with one vectored write of header,
//! record and tag; that is every response up to 16 KiB, most of them. Anything else (a bulk
//! write, a write behind queued bytes) is copied once into one outgoing buffer and sealed there;
//! that buffer is sent as it is, and reused. Neither direction allocates per record. See
//! [`super::records`] for what a record may carry.
//!
//! End of stream as with rustls: zero bytes after the peer's close_notify, `UnexpectedEof` when
//! the socket ends without one (a truncation), `InvalidData` on a bad record or a fatal alert
//! (after one attempt to send the peer the alert that says why). An error is final: every later
//! read returns it again. Once close_notify or a fatal alert of ours is sealed, every write
//! fails (`BrokenPipe`): nothing may follow them on the wire.

use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::accept::Accepted;
use super::records::{Framing, Opened, RecordError, Records, MAX_PLAINTEXT};

/// Plaintext sealed per write: the relay's writes are rarely larger, and a larger one is taken
/// in parts.
const WRITE_CHUNK: usize = 4 * MAX_PLAINTEXT;
/// Sealed bytes the socket has not taken yet past which a write waits.
const QUEUE_LIMIT: usize = 64 * 1024;
/// Buffers no larger than these are kept while the session is quiet: reporting them to the
/// relay's shrinker would keep its timer armed for good, and the runtime then pays for a timer
/// at every park (a few hundred instructions per query). Queries are small; a response up to
/// the relay's initial buffer (8 KiB) fits the outgoing one with its record's overhead.
const READ_SMALL: usize = 4 * 1024;
const WRITE_SMALL: usize = 8 * 1024 + 64;

enum ReadEnd {
    Open,
    /// close_notify came: reads give zero bytes.
    Closed,
    /// The socket ended without close_notify.
    Truncated,
    Failed(RecordError),
}

/// An established TLS client leg over `S`.
pub struct Server<S> {
    io: S,
    records: Records,
    /// Records read from the socket into `rbuf[..filled]` (the rest is room, initialized once
    /// when the buffer grows, so reads need no uninitialized memory). `rbuf[next..filled]` is not opened yet; `plain` (before
    /// `next`) is the opened record's application data not yet handed out.
    rbuf: Vec<u8>,
    filled: usize,
    next: usize,
    /// The size of the record `rbuf[next..]` starts, when known and not whole yet.
    want: usize,
    plain: Range<usize>,
    /// Application data rustls decrypted during the handshake: handed out first.
    early: Vec<u8>,
    /// Sealed records; `wbuf[sent..]` is not sent yet.
    wbuf: Vec<u8>,
    sent: usize,
    end: ReadEnd,
    /// close_notify is sealed (the leg was shut down).
    closing: bool,
    description: String,
    peer_certificate: Option<CertificateDer<'static>>,
}

fn invalid(e: RecordError) -> io::Error {
    let kind = match e {
        RecordError::WriteClosed => io::ErrorKind::BrokenPipe,
        RecordError::KeyUsedUp => io::ErrorKind::Other,
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e)
}

impl<S> Server<S> {
    pub fn new(io: S, accepted: Accepted) -> Self {
        Self {
            io,
            records: accepted.records,
            next: 0,
            want: 0,
            plain: 0..0,
            filled: accepted.ciphertext.len(),
            // The handshake's buffer is large; the common case has nothing left in it.
            rbuf: if accepted.ciphertext.is_empty() {
                Vec::new()
            } else {
                accepted.ciphertext
            },
            early: accepted.plaintext,
            wbuf: Vec::new(),
            sent: 0,
            end: ReadEnd::Open,
            closing: false,
            description: accepted.description,
            peer_certificate: accepted.peer_certificate,
        }
    }

    pub fn socket(&self) -> &S {
        &self.io
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.peer_certificate.as_ref()
    }

    pub fn holds_memory(&self) -> bool {
        self.rbuf.len() > READ_SMALL
            || self.wbuf.capacity() > WRITE_SMALL
            || self.early.capacity() > 0
    }

    /// Frees the buffers that hold nothing waiting.
    pub fn release_memory(&mut self) {
        if self.next == self.filled && self.plain.is_empty() {
            self.rbuf = Vec::new();
            self.filled = 0;
            self.next = 0;
            self.plain = 0..0;
        }
        if self.sent == self.wbuf.len() {
            self.wbuf = Vec::new();
            self.sent = 0;
        }
        if self.early.is_empty() {
            self.early = Vec::new();
        }
    }

    /// Sealed bytes not sent yet.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.wbuf.len() - self.sent
    }

    /// See [`Records::limit_records_per_key`].
    #[cfg(test)]
    pub fn limit_records_per_key(&mut self, records: u64) {
        self.records.limit_records_per_key(records);
    }

    /// Seals a TLS 1.3 KeyUpdate and moves our sending keys on (sent with the next write or
    /// flush).
    pub fn refresh_traffic_keys(&mut self) -> io::Result<()> {
        self.compact_wbuf();
        self.records
            .update_tx(false, &mut self.wbuf)
            .map_err(invalid)
    }

    fn compact_wbuf(&mut self) {
        if self.sent == self.wbuf.len() {
            self.wbuf.clear();
        } else if self.sent > 0 {
            self.wbuf.drain(..self.sent);
        }
        self.sent = 0;
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Server<S> {
    /// Sends sealed records until none wait.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.wbuf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.wbuf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.wbuf.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Writes `buf[range]` as [`AsyncWrite::poll_write`] does, sealing it where it lies when it
    /// makes one record, ends `buf`, and nothing is queued before it: the record goes out with
    /// one vectored write of its header, `buf[range]` and its tag, and what the socket does not
    /// take is queued. Otherwise (a bulk write, a socket without vectored writes, keys due for
    /// renewal) it is copied and sealed as any write. Either way every byte is accepted or none.
    /// The accepted bytes and one byte of `buf`'s spare capacity are overwritten; `buf`'s
    /// length is left as it was.
    pub fn poll_write_from(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        range: Range<usize>,
    ) -> Poll<io::Result<usize>> {
        let room = self.records.trailer_room();
        let in_place = !range.is_empty()
            && range.len() <= MAX_PLAINTEXT
            && range.end == buf.len()
            && buf.capacity() - buf.len() >= room
            && self.sent == self.wbuf.len()
            && self.io.is_write_vectored();
        if !in_place {
            return Pin::new(self).poll_write(cx, &buf[range]);
        }
        if room > 0 {
            // Within the capacity: no reallocation moves the bytes.
            buf.extend_from_slice(&[0]);
        }
        let sealed = match self.records.seal_data_in_place(&mut buf[range.start..]) {
            Ok(Some(framing)) => self.send_in_place(cx, &framing, &buf[range.start..]),
            Ok(None) => {
                buf.truncate(range.end);
                return Pin::new(self).poll_write(cx, &buf[range]);
            }
            Err(e) => Err(invalid(e)),
        };
        buf.truncate(range.end);
        Poll::Ready(sealed.map(|()| range.len()))
    }

    /// Sends a record sealed in place with one vectored write; queues what the socket does not
    /// take (nothing is queued before it).
    fn send_in_place(
        &mut self,
        cx: &mut Context<'_>,
        framing: &Framing,
        body: &[u8],
    ) -> io::Result<()> {
        let parts = [framing.head(), body, &framing.tag];
        let slices = parts.map(io::IoSlice::new);
        let n = match Pin::new(&mut self.io).poll_write_vectored(cx, &slices) {
            Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => 0,
        };
        let total = parts.iter().map(|p| p.len()).sum::<usize>();
        if n < total {
            self.queue_unsent(&parts, n);
        }
        Ok(())
    }

    /// Queues what follows the first `sent` bytes of `parts`, for the next write or flush.
    #[cold]
    #[inline(never)]
    fn queue_unsent(&mut self, parts: &[&[u8]], mut sent: usize) {
        self.wbuf.clear();
        self.sent = 0;
        for part in parts {
            let skip = sent.min(part.len());
            sent -= skip;
            self.wbuf.extend_from_slice(&part[skip..]);
        }
    }

    /// A write once nothing more may be sealed. A TLS 1.2 key used up ends the stream with
    /// the close_notify it kept for last: it goes out before the error, as the relay drops
    /// the socket on a write error. Otherwise (our close_notify or fatal alert, whose one
    /// attempt to be sent was made) the write fails at once.
    #[cold]
    #[inline(never)]
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let reason = self.records.closed_reason();
        if reason == RecordError::KeyUsedUp {
            ready!(self.poll_send(cx))?;
        }
        Poll::Ready(Err(invalid(reason)))
    }

    /// The stream cannot go on: remembers why and makes one attempt to tell the peer.
    #[cold]
    #[inline(never)]
    fn fail(&mut self, cx: &mut Context<'_>, e: RecordError) -> io::Error {
        if let Some(alert) = e.alert() {
            self.compact_wbuf();
            if self.records.seal_alert(alert, &mut self.wbuf).is_ok() {
                let _ = self.poll_send(cx);
            }
        }
        self.end = ReadEnd::Failed(e.clone());
        invalid(e)
    }

    /// Opens the next whole record in the buffer; `false` when there is none (or the stream is
    /// over). Inlined: a read calls it up to three times, and a call each cost more than the
    /// checks.
    #[inline(always)]
    fn open_next(&mut self, cx: &mut Context<'_>) -> io::Result<bool> {
        if self.next == self.filled || !matches!(self.end, ReadEnd::Open) {
            return Ok(false);
        }
        match self.records.open(&mut self.rbuf[self.next..self.filled]) {
            Ok(Opened::Record { consumed, data }) => {
                self.want = 0;
                self.plain = self.next + data.start..self.next + data.end;
                self.next += consumed;
                Ok(true)
            }
            Ok(Opened::Closed { consumed }) => {
                self.next += consumed;
                self.end = ReadEnd::Closed;
                Ok(false)
            }
            Ok(Opened::Incomplete { total }) => {
                self.want = total;
                Ok(false)
            }
            Err(e) => Err(self.fail(cx, e)),
        }
    }

    /// Reads the socket once into the buffer, after what it holds. Called only when no whole
    /// record waits.
    #[inline(always)]
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.next == self.filled {
            // The common case: everything read was opened; the next read starts at the front.
            self.next = 0;
            self.filled = 0;
        } else {
            self.keep_record_begun();
        }
        self.plain = 0..0;
        if self.rbuf.len() < READ_SMALL.max(self.filled + 1024) {
            self.make_room();
        }
        let mut raw = ReadBuf::new(&mut self.rbuf[self.filled..]);
        ready!(Pin::new(&mut self.io).poll_read(cx, &mut raw))?;
        let n = raw.filled().len();
        self.filled += n;
        if n == 0 {
            self.end = ReadEnd::Truncated;
        }
        Poll::Ready(Ok(()))
    }

    /// Moves the record begun (the bytes not opened yet) to the front of the buffer.
    #[inline(never)]
    fn keep_record_begun(&mut self) {
        let len = self.filled - self.next;
        if self.next > 0 {
            self.rbuf.copy_within(self.next..self.filled, 0);
        }
        self.next = 0;
        self.filled = len;
    }

    /// Grows the buffer to hold the record begun, and a read worth a system call.
    #[inline(never)]
    fn make_room(&mut self) {
        let want = self.want.max(self.filled + 1024).max(READ_SMALL);
        if self.rbuf.len() < want {
            self.rbuf.resize(want.next_power_of_two(), 0);
        }
    }

    /// Hands out application data rustls decrypted during the handshake.
    #[cold]
    #[inline(never)]
    fn read_early(&mut self, buf: &mut ReadBuf<'_>) {
        let n = self.early.len().min(buf.remaining());
        buf.put_slice(&self.early[..n]);
        self.early.drain(..n);
        if self.early.is_empty() {
            self.early = Vec::new();
        }
    }

    /// What a read returns once the stream is over.
    #[cold]
    #[inline(never)]
    fn ended(&self) -> io::Result<()> {
        match &self.end {
            ReadEnd::Open | ReadEnd::Closed => Ok(()),
            ReadEnd::Truncated => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client's TLS stream ended without close_notify",
            )),
            ReadEnd::Failed(e) => Err(invalid(e.clone())),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Server<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.early.is_empty() {
            this.read_early(buf);
            return Poll::Ready(Ok(()));
        }
        let mut copied = false;
        loop {
            if !this.plain.is_empty() {
                let n = this.plain.len().min(buf.remaining());
                buf.put_slice(&this.rbuf[this.plain.start..this.plain.start + n]);
                this.plain.start += n;
                copied = true;
                if buf.remaining() == 0 || this.next == this.filled {
                    return Poll::Ready(Ok(()));
                }
            }
            match this.open_next(cx) {
                Ok(true) => continue,
                Ok(false) => {}
                // What follows the plaintext comes at the next read.
                Err(_) if copied => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e)),
            }
            if copied {
                return Poll::Ready(Ok(()));
            }
            if !matches!(this.end, ReadEnd::Open) {
                return Poll::Ready(this.ended());
            }
            ready!(this.poll_fill(cx))?;
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Server<S> {
    /// Seals up to 64 KiB of `buf` and sends what the socket takes; the rest goes out with
    /// the next write or flush.
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.wbuf.len() - this.sent >= QUEUE_LIMIT {
            ready!(this.poll_send(cx))?;
        }
        if this.records.write_closed() {
            return this.poll_closed(cx);
        }
        this.compact_wbuf();
        let n = buf.len().min(WRITE_CHUNK);
        let sealed = match this.records.seal_data(&buf[..n], &mut this.wbuf) {
            Ok(sealed) => sealed,
            Err(_) => return this.poll_closed(cx),
        };
        if let Poll::Ready(Err(e)) = this.poll_send(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(sealed))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Most flushes find nothing queued: a record sealed in place went out whole.
        if this.sent < this.wbuf.len() {
            ready!(this.poll_send(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    /// Sends close_notify, then shuts the socket's write side.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            this.closing = true;
            // After a fatal alert of ours, or a close_notify sealed when a key was used up,
            // the socket's shutdown is all that is left.
            if !this.records.write_closed() {
                this.compact_wbuf();
                this.records
                    .seal_alert(0, &mut this.wbuf)
                    .map_err(invalid)?;
            }
        }
        ready!(this.poll_send(cx))?;
        match ready!(Pin::new(&mut this.io).poll_shutdown(cx)) {
            // A peer that is already gone is shut down enough.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}
