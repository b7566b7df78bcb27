//! A byte stream that speaks the compressed protocol on the wire and plain packets to its user.
//!
//! It sits between a leg's socket (or TLS stream) and the relay, so the relay, its tracker, KILL
//! mapping and metrics see the plain packets as on an uncompressed leg. All framing, zlib and
//! sequence-id rules live in [`crate::wire::protocol::compress`]; this only moves bytes. Reads inflate
//! straight into the caller's buffer; writes are framed into an out-buffer that is bounded (a
//! peer that stops reading stalls the writer, as a socket would) and drained on flush.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::io::poll_read_buf;

use crate::wire::protocol::compress::{FrameDecoder, FrameEncoder, Role, DEFAULT_LEVEL};
use crate::wire::protocol::compress_server::ServerFramer;

/// Un-sent frame bytes above which writes wait for the inner stream.
const OUT_HIGH_WATER: usize = 64 * 1024;
/// Plain bytes framed per write call at most (writers loop, as with any short write).
const WRITE_CHUNK: usize = 64 * 1024;
/// Raw bytes asked of the inner stream per read.
const READ_CHUNK: usize = 8 * 1024;
/// Capacity kept by [`Compressed::shrink`].
const KEEP: usize = 8 * 1024;
/// Output room made ready for a read when no frame says how much is coming.
const INFLATE_ROOM: usize = 8 * 1024;

/// Byte counts on both sides of the wrapper.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Raw bytes read from the inner stream.
    pub wire_read: u64,
    /// Plain bytes handed to the reader.
    pub plain_read: u64,
    /// Plain bytes accepted from the writer.
    pub plain_written: u64,
    /// Raw bytes written to the inner stream.
    pub wire_written: u64,
}

/// `S` with the compressed protocol unwrapped on reads and applied on writes.
#[derive(Debug)]
pub struct Compressed<S> {
    inner: S,
    decoder: FrameDecoder,
    encoder: FrameEncoder,
    /// Raw bytes read but not decoded yet.
    raw_in: BytesMut,
    /// Frames not written to `inner` yet.
    raw_out: BytesMut,
    /// Frames read whose ids the encoder has been told of.
    frames_seen: u64,
    eof: bool,
    counters: Counters,
    /// Server role: frames whole packets, holding back a bounded part of an incomplete one.
    framer: ServerFramer,
}

impl<S> Compressed<S> {
    /// `already_read` holds raw (compressed) bytes read from `inner` during the handshake.
    pub fn new(inner: S, role: Role, already_read: BytesMut) -> Self {
        Self::with_level(inner, role, already_read, DEFAULT_LEVEL)
    }

    /// As [`new`](Self::new) with a zlib level (0 stores every frame, 9 compresses most).
    pub fn with_level(inner: S, role: Role, already_read: BytesMut, level: u32) -> Self {
        Self {
            inner,
            decoder: FrameDecoder::new(),
            encoder: FrameEncoder::with_level(role, level),
            raw_in: already_read,
            raw_out: BytesMut::new(),
            frames_seen: 0,
            eof: false,
            counters: Counters::default(),
            framer: ServerFramer::default(),
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Gives back memory after a large transfer: buffers that are empty keep at most 8 KiB, and
    /// the zlib states (a few hundred KiB together) are dropped between frames, to be made again
    /// on next use. Cheap to call when there is nothing to give back.
    pub fn shrink(&mut self) {
        for buf in [&mut self.raw_in, &mut self.raw_out] {
            if buf.is_empty() && buf.capacity() > KEEP {
                *buf = BytesMut::new();
            }
        }
        self.framer.shrink(KEEP);
        self.decoder.shrink();
        if self.raw_out.is_empty() && !self.framer.is_open() {
            self.encoder.shrink();
        }
    }

    /// Whether [`shrink`](Self::shrink) would give anything back.
    pub fn holds_memory(&self) -> bool {
        self.raw_in.capacity() > KEEP
            || self.raw_out.capacity() > KEEP
            || self.framer.capacity() > KEEP
            || self.decoder.holds_state()
            || self.encoder.holds_state()
    }

    /// Tells the encoder of frames read since it was last told, so its answers number on.
    fn sync_seq(&mut self) {
        if self.decoder.frames() != self.frames_seen {
            self.frames_seen = self.decoder.frames();
            if let Some(seq) = self.decoder.last_seq() {
                self.encoder.on_frame_read(seq);
            }
        }
    }

    /// Inflates buffered raw bytes into `buf`; the plain bytes written. A fault is returned
    /// only when no bytes came before it (the next call returns it then).
    fn decode_buffered(&mut self, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
        let mut total = 0;
        // Output may also be waiting inside zlib when the last read had too little room.
        while buf.remaining() > 0 && (!self.raw_in.is_empty() || self.decoder.output_pending() > 0)
        {
            let want = self.decoder.output_pending().max(INFLATE_ROOM);
            let dst = buf.initialize_unfilled_to(want.min(buf.remaining()));
            let p = match self.decoder.decode_into(&self.raw_in, dst) {
                Ok(p) => p,
                Err(_) if total > 0 => break,
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            };
            self.raw_in.advance(p.consumed);
            buf.advance(p.written);
            total += p.written;
            self.sync_seq();
            if p.consumed == 0 && p.written == 0 {
                break;
            }
        }
        if total == 0 {
            if let Some(e) = self.decoder.failure() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e.clone()));
            }
        }
        Ok(total)
    }
}

impl<S: AsyncWrite + Unpin> Compressed<S> {
    /// Writes out-buffered frames until none are left or `inner` is not ready.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.raw_out.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.raw_out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.raw_out.advance(n);
            self.counters.wire_written += n as u64;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Compressed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let n = this.decode_buffered(buf)?;
            if n > 0 {
                this.counters.plain_read += n as u64;
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                if this.raw_in.is_empty() && this.decoder.at_boundary() {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a compressed frame",
                )));
            }
            if this.raw_in.capacity() - this.raw_in.len() < READ_CHUNK / 2 {
                this.raw_in.reserve(READ_CHUNK);
            }
            let got = ready!(poll_read_buf(
                Pin::new(&mut this.inner),
                cx,
                &mut this.raw_in
            ))?;
            this.counters.wire_read += got as u64;
            this.eof = got == 0;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Compressed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.raw_out.len() > OUT_HIGH_WATER {
            // Bounded memory: room first. A partial drain that leaves too much is still a wait.
            if let Poll::Ready(r) = this.poll_drain(cx) {
                r?;
            }
            if this.raw_out.len() > OUT_HIGH_WATER {
                return Poll::Pending;
            }
        }
        let take = buf.len().min(WRITE_CHUNK);
        match this.encoder.role() {
            Role::Client => this.encoder.encode(&buf[..take], &mut this.raw_out),
            Role::Server => this
                .framer
                .write(&mut this.encoder, &buf[..take], &mut this.raw_out),
        }
        this.counters.plain_written += take as u64;
        // Send at once when the inner stream can take it; a Pending here only means the bytes
        // wait in the out-buffer, and the flush that follows delivers them.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(take))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.framer.finish(&mut this.encoder, &mut this.raw_out);
        this.encoder.finish(&mut this.raw_out);
        ready!(this.poll_drain(cx))?;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
