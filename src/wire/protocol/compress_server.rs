//! How mysql-lb frames what it writes to a compressed client: whole packets per frame, as servers
//! do, in bounded memory.
//!
//! Clients read a packet out of the frame it starts in and at most one more (Connector/Python's
//! pure reader takes exactly one more frame when a packet does not fit, and needs every header
//! inside one frame), so no packet may span more than two frames. Servers hold a whole packet
//! (up to 16 MiB) and compress it; a proxy holding that per session holds gigabytes for a few
//! hundred sessions reading large values. So, for each write of plain bytes:
//! - whole packets are framed at once (the common case, framed from the caller's slice);
//! - a packet not complete yet is staged until it is, up to [`STAGE_MAX`] bytes;
//! - past that, the packet chunk goes on through zlib into an *open* frame, of which only the
//!   compressed bytes are held. The frame closes at the chunk's end, or once its compressed bytes
//!   reach [`HEAD_MAX`] (or its plain bytes a frame's largest payload); then the rest of the chunk,
//!   whose length the packet header gave, follows as one stored frame written as it arrives.
//!
//! A large value that compresses well goes out compressed whole (16 MiB of one repeated byte
//! makes ~16 KiB); of one that does not, only the first [`HEAD_MAX`] of compressed bytes are, and
//! the rest is sent as it is. Either way the two-frame rule holds and a session holds at most
//! about `STAGE_MAX + HEAD_MAX` plus the zlib state, whatever the packet size.

use bytes::{BufMut, BytesMut};
use flate2::{FlushCompress, Status};

use super::compress::{frame_header, FrameEncoder, HEADER_LEN, MAX_FRAME_PAYLOAD};

/// Plain bytes of an incomplete packet staged before it goes on through an open frame.
pub const STAGE_MAX: usize = 64 * 1024;
/// Compressed bytes an open frame holds at most before its packet chunk goes on stored.
pub const HEAD_MAX: usize = 128 * 1024;
/// Output room made ready for zlib at a time.
const DEFLATE_ROOM: usize = 32 * 1024;
/// Bytes in a plain packet header.
const PACKET_HEADER: usize = 4;

/// Follows plain packet boundaries (chunk by chunk: a 0xFFFFFF-long chunk counts as a packet).
#[derive(Debug, Default, Clone, Copy)]
struct Aligner {
    /// Bytes of the current packet's header seen (0 at a boundary or in a payload).
    header: [u8; PACKET_HEADER],
    header_len: usize,
    /// Payload bytes of the current chunk still to come.
    payload_left: usize,
}

impl Aligner {
    /// Feeds `bytes`; returns how many of them end at the last packet boundary in them (0: none).
    fn feed(&mut self, bytes: &[u8]) -> usize {
        let mut boundary = 0;
        let mut i = 0;
        while i < bytes.len() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len() - i);
                self.payload_left -= n;
                i += n;
            } else {
                self.header[self.header_len] = bytes[i];
                self.header_len += 1;
                i += 1;
                if self.header_len < PACKET_HEADER {
                    continue;
                }
                self.header_len = 0;
                let h = self.header;
                self.payload_left = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
            }
            if self.payload_left == 0 && self.header_len == 0 {
                boundary = i;
            }
        }
        boundary
    }
}

/// The server role's writer over a [`FrameEncoder`] (which numbers the frames).
#[derive(Debug, Default)]
pub struct ServerFramer {
    aligner: Aligner,
    /// The start of a packet not complete yet (nothing else).
    staged: BytesMut,
    /// Header room, then the zlib stream of the open frame so far.
    head: Vec<u8>,
    /// Plain bytes in the open frame; None when no frame is open.
    open: Option<usize>,
    /// Bytes of the current chunk still owed to the stored frame already begun.
    tail: usize,
}

impl ServerFramer {
    /// Frames `plain` into `out` as far as the rules above allow; holds back the rest.
    pub fn write(&mut self, enc: &mut FrameEncoder, plain: &[u8], out: &mut BytesMut) {
        let mut rest = plain;
        while !rest.is_empty() {
            let n = if self.tail > 0 {
                let n = self.tail.min(rest.len());
                out.extend_from_slice(&rest[..n]);
                self.aligner.payload_left -= n;
                self.tail -= n;
                n
            } else if self.open.is_some() {
                self.feed_open(enc, rest, out)
            } else {
                self.stage(enc, rest, out)
            };
            rest = &rest[n..];
        }
    }

    /// Frames whatever is held (at shutdown: a packet that will never be completed).
    pub fn finish(&mut self, enc: &mut FrameEncoder, out: &mut BytesMut) {
        if self.open.is_some() {
            self.close(enc, out);
        }
        if !self.staged.is_empty() {
            let staged = std::mem::take(&mut self.staged);
            enc.encode(&staged, out);
        }
    }

    /// Bytes held back: staged plain bytes and the open frame's compressed ones.
    pub fn held(&self) -> usize {
        self.staged.len() + self.head.len()
    }

    /// Buffer capacity held, whether in use or not.
    pub fn capacity(&self) -> usize {
        self.staged.capacity() + self.head.capacity()
    }

    /// True while a frame is open: the encoder's zlib state is in use.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Gives back buffer capacity not in use.
    pub fn shrink(&mut self, keep: usize) {
        if self.staged.is_empty() && self.staged.capacity() > keep {
            self.staged = BytesMut::new();
        }
        if self.open.is_none() {
            self.head = Vec::new();
        }
    }

    /// No frame open and no stored frame owed: frames `rest` up to its last packet boundary and
    /// stages the rest, or opens a frame once the packet outgrows the stage. Returns the bytes
    /// of `rest` taken.
    fn stage(&mut self, enc: &mut FrameEncoder, rest: &[u8], out: &mut BytesMut) -> usize {
        let mut ahead = self.aligner;
        let boundary = ahead.feed(rest);
        if boundary > 0 {
            if self.staged.is_empty() {
                enc.encode(&rest[..boundary], out);
            } else {
                self.staged.extend_from_slice(&rest[..boundary]);
                enc.encode(&self.staged, out);
                self.staged.clear();
            }
            if boundary == rest.len() {
                self.aligner = ahead;
            } else {
                self.aligner.feed(&rest[..boundary]);
            }
            return boundary;
        }
        if self.staged.len() + rest.len() <= STAGE_MAX || self.staged.len() < PACKET_HEADER {
            // Also the header's missing bytes first: a frame is opened only inside a payload.
            let n = if self.staged.len() + rest.len() <= STAGE_MAX {
                rest.len()
            } else {
                PACKET_HEADER - self.staged.len()
            };
            self.staged.extend_from_slice(&rest[..n]);
            self.aligner.feed(&rest[..n]);
            return n;
        }
        self.open_frame(enc, out);
        0
    }

    /// Moves the staged start of a packet into a new open frame; with compression off, into a
    /// stored frame holding the whole rest of the chunk.
    fn open_frame(&mut self, enc: &mut FrameEncoder, out: &mut BytesMut) {
        let staged = std::mem::take(&mut self.staged);
        let Some(z) = enc.deflater() else {
            out.put_slice(&frame_header(staged.len(), enc.take_seq(), 0));
            out.put_slice(&staged);
            self.begin_tail(enc, out);
            return;
        };
        z.reset();
        self.head.clear();
        self.head.resize(HEADER_LEN, 0);
        deflate(z, &staged, &mut self.head, FlushCompress::None);
        self.open = Some(staged.len());
        // The stage's buffer goes back now: a large packet is on its way, and the next one may
        // be far off.
    }

    /// Feeds payload bytes of the current chunk to the open frame; closes it at the chunk's end,
    /// or when it is full, and then begins the stored frame for the chunk's rest.
    fn feed_open(&mut self, enc: &mut FrameEncoder, rest: &[u8], out: &mut BytesMut) -> usize {
        let plain = self.open.unwrap_or(0);
        let n = rest
            .len()
            .min(self.aligner.payload_left)
            .min(MAX_FRAME_PAYLOAD - plain);
        if let Some(z) = enc.deflater() {
            deflate(z, &rest[..n], &mut self.head, FlushCompress::None);
        }
        self.aligner.payload_left -= n;
        self.open = Some(plain + n);
        let full = self.head.len() - HEADER_LEN >= HEAD_MAX || plain + n == MAX_FRAME_PAYLOAD;
        if self.aligner.payload_left == 0 {
            self.close(enc, out);
        } else if full {
            self.close(enc, out);
            self.begin_tail(enc, out);
        }
        n
    }

    /// Begins the stored frame that carries the rest of the current chunk as it arrives.
    fn begin_tail(&mut self, enc: &mut FrameEncoder, out: &mut BytesMut) {
        let len = self.aligner.payload_left;
        out.put_slice(&frame_header(len, enc.take_seq(), 0));
        self.tail = len;
    }

    /// Ends the open frame's zlib stream and appends the frame to `out`.
    fn close(&mut self, enc: &mut FrameEncoder, out: &mut BytesMut) {
        let Some(plain) = self.open.take() else {
            return;
        };
        if let Some(z) = enc.deflater() {
            deflate(z, &[], &mut self.head, FlushCompress::Finish);
        }
        let header = frame_header(self.head.len() - HEADER_LEN, enc.take_seq(), plain);
        self.head[..HEADER_LEN].copy_from_slice(&header);
        out.extend_from_slice(&self.head);
        self.head.clear();
    }
}

/// Runs all of `input` through `z` into `out` (which grows as zlib writes); with Finish, until
/// the stream has ended.
fn deflate(z: &mut flate2::Compress, input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) {
    let mut at = 0;
    loop {
        if out.capacity() - out.len() < DEFLATE_ROOM / 2 {
            // Exact: doubling would let a head of HEAD_MAX hold twice that.
            out.reserve_exact(DEFLATE_ROOM);
        }
        let before = z.total_in();
        // Deflating into a Vec with room cannot fail: zlib reports errors only for misuse.
        let status = z.compress_vec(&input[at..], out, flush).ok();
        at += (z.total_in() - before) as usize;
        let done = match flush {
            FlushCompress::Finish => status == Some(Status::StreamEnd),
            _ => at == input.len() && out.capacity() > out.len(),
        };
        if done || status.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
