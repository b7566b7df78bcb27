//! The MySQL compressed protocol (`CLIENT_COMPRESS`, zlib) as a sans-IO frame codec.
//!
//! The relay and its tracker only understand plain packets, so a compressed leg is unwrapped into
//! the plain byte stream it carries (and plain bytes are wrapped back into frames) by a layer
//! between the socket and the relay; this module is that layer's byte logic, the stream wrapper
//! (`stream::compressed`) only moves bytes.
//!
//! # Frames
//! A frame is a 7-byte header — 3-byte little-endian length of the payload that follows, 1-byte
//! *compressed* sequence id, 3-byte little-endian length of the payload once inflated — then the
//! payload. An uncompressed length of 0 means the payload is stored as is; otherwise it is one
//! whole zlib stream (RFC 1950, as zlib's `compress()` writes it) that must inflate to exactly
//! that many bytes. Frames carry an arbitrary slice of the plain stream: several packets, or a
//! piece of one (a frame may end in the middle of a packet header). Neither length can exceed
//! 0xFFFFFF, so a plain stream is cut into frames of at most that much. Writers store payloads
//! under 50 bytes (`MIN_COMPRESS_LENGTH` in MySQL and MariaDB), and store anything zlib does not
//! shrink. Compression starts with the command phase: the greeting, the handshake response and
//! the auth exchange up to its OK are plain (seen with MariaDB 10.11 and `mariadb --compress`).
//!
//! # Sequence ids
//! Found in MariaDB's `sql/net_serv.cc` (server and old client) and Connector/C's
//! `libmariadb/ma_net.c`, and checked against captures of MariaDB 10.11 with `mariadb
//! --compress`:
//! - Each side keeps `compress_pkt_nr`. `net_clear()` before a command sets it to 0 on both
//!   sides; every frame written uses it and increments it; every frame read sets it to the
//!   read frame's sequence id + 1. So a command's first frame is 0, the server answers from 1,
//!   a LOAD DATA LOCAL upload continues from the server's last frame + 1 (captured: client
//!   frame 0 = query, server 1 = 0xFB request, client 2..=4 = file, server 5 and 6 = progress
//!   report and OK), and a long answer simply counts up, wrapping at 256.
//! - The MariaDB *server* rejects a frame whose id is not the one it expects ("packets out of
//!   order"), so when mysql-lb faces a backend ([`Role::Client`]) every new command must start
//!   a frame of its own with id 0. A new command is a packet with inner sequence id 0 at a
//!   logical packet boundary; not a continuation chunk after a 0xFFFFFF-long one (Connector/C
//!   even writes every chunk of a command with inner id 0 when compressing), and not a packet
//!   that follows one with id 255 without a frame read in between (a LOAD DATA upload whose
//!   inner ids wrapped). Everything else continues from the backend's last frame + 1.
//! - Connector/C does not check ids it reads (it adopts them); libmysqlclient and some other
//!   drivers do. When mysql-lb faces a client ([`Role::Server`]) it writes what a server writes:
//!   the client's last frame + 1, counting up.
//! - Reads here do not verify ids: the far end checks its own, a proxy that rejected what a
//!   server would accept only adds failures, and the wrapper needs the ids only to answer. The
//!   decoder reports the last id read ([`FrameDecoder::last_seq`]).
//! - The *inner* packets' ids are not those of the plain protocol: writers set the inner counter
//!   to the compressed one at every flush, so in one multi-statement answer the second result
//!   set's packets restart near the frame id (captured: 1..=5, then 2..=6, then 3..=5), and
//!   readers on a compressed connection never check inner ids. Whoever forwards decompressed
//!   packets to a plain peer, or tracks them, must renumber or ignore inner ids.
//!
//! # Memory
//! The decoder streams: it inflates into whatever room its caller gives and never past a
//! frame's declared length (a zip bomb costs one probe byte), so neither a frame's payload nor
//! its inflated form is ever held whole. The zlib states are created on first use, reset per
//! frame (no allocation per frame) and can be dropped between frames (`shrink`).

use bytes::{BufMut, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use thiserror::Error;

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 7;
/// Largest payload (stored or compressed) and largest uncompressed length of one frame.
pub const MAX_FRAME_PAYLOAD: usize = 0xFF_FFFF;
/// Payloads shorter than this are stored, as MySQL and MariaDB do.
pub const MIN_COMPRESS_LEN: usize = 50;
/// zlib's default level, which MySQL and MariaDB use.
pub const DEFAULT_LEVEL: u32 = 6;

/// A plain packet chunk of this length continues in the next chunk.
const MAX_CHUNK: usize = 0xFF_FFFF;
/// How much output [`FrameDecoder::decode`] makes room for at a time.
const DECODE_STEP: usize = 64 * 1024;
/// ... and between frames, before the next one's declared length is known.
const DECODE_FIRST: usize = 4 * 1024;

/// Which end of the connection mysql-lb plays on this leg; it decides the frame sequence ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// mysql-lb faces a client: frames written continue from the client's last frame + 1.
    Server,
    /// mysql-lb faces a backend: a new command restarts at 0, anything else continues from the
    /// backend's last frame + 1.
    Client,
}

/// What an inflated payload came to, for [`CompressError::LengthMismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inflated {
    Exactly(usize),
    MoreThanDeclared,
}

impl std::fmt::Display for Inflated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exactly(n) => write!(f, "{n} bytes"),
            Self::MoreThanDeclared => f.write_str("more"),
        }
    }
}

/// A frame that cannot be decoded; the stream cannot be followed past it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompressError {
    #[error(
        "compressed frame {seq} declares {declared} uncompressed bytes but inflates to {inflated}"
    )]
    LengthMismatch {
        seq: u8,
        declared: usize,
        inflated: Inflated,
    },
    #[error("compressed frame {seq} holds corrupt zlib data: {reason}")]
    Corrupt { seq: u8, reason: String },
}

/// What one [`FrameDecoder::decode_into`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Raw bytes consumed from the input.
    pub consumed: usize,
    /// Plain bytes written to the output.
    pub written: usize,
}

/// The frame being read.
#[derive(Debug, Clone, Copy)]
struct Frame {
    seq: u8,
    /// Payload bytes of this frame not consumed yet.
    payload_left: usize,
    /// Uncompressed length the header declared (0: stored).
    declared: usize,
    /// Plain bytes still owed by a compressed frame.
    out_left: usize,
    /// The zlib stream has ended (any payload left is ignored, as zlib's `uncompress` does).
    ended: bool,
}

/// Incremental decoder of one direction of a compressed connection.
pub struct FrameDecoder {
    inflate: Option<Decompress>,
    header: [u8; HEADER_LEN],
    header_len: usize,
    frame: Option<Frame>,
    last_seq: Option<u8>,
    frames: u64,
    failed: Option<CompressError>,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FrameDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("header_len", &self.header_len)
            .field("frame", &self.frame)
            .field("last_seq", &self.last_seq)
            .field("frames", &self.frames)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self {
            inflate: None,
            header: [0; HEADER_LEN],
            header_len: 0,
            frame: None,
            last_seq: None,
            frames: 0,
            failed: None,
        }
    }

    /// Sequence id of the last frame whose header was read.
    pub fn last_seq(&self) -> Option<u8> {
        self.last_seq
    }

    /// Frame headers read so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The fault that stopped decoding, if any.
    pub fn failure(&self) -> Option<&CompressError> {
        self.failed.as_ref()
    }

    /// True between frames: nothing of a frame has been read without its end.
    pub fn at_boundary(&self) -> bool {
        self.header_len == 0 && self.frame.is_none()
    }

    /// Plain bytes the frame being read still has to give (0 between frames).
    pub fn output_pending(&self) -> usize {
        match self.frame {
            Some(f) if f.declared == 0 => f.payload_left,
            Some(f) => f.out_left,
            None => 0,
        }
    }

    /// Drops the zlib state between frames; it is made again for the next compressed frame.
    pub fn shrink(&mut self) {
        if self.frame.is_none() {
            self.inflate = None;
        }
    }

    /// Whether an inflate state is allocated (what [`shrink`](Self::shrink) frees).
    pub fn holds_state(&self) -> bool {
        self.inflate.is_some()
    }

    /// Decodes all of `input`, appending the plain bytes to `out` (which grows only as output is
    /// actually produced). Returns the bytes consumed, all of them; on a fault `out` keeps the
    /// bytes that came before it.
    pub fn decode(&mut self, input: &[u8], out: &mut BytesMut) -> Result<usize, CompressError> {
        let mut consumed = 0;
        loop {
            let room = match self.output_pending() {
                0 => DECODE_FIRST,
                n => n.min(DECODE_STEP),
            };
            let start = out.len();
            out.resize(start + room, 0);
            let p = self.decode_into(&input[consumed..], &mut out[start..]);
            let written = p.as_ref().map_or(0, |p| p.written);
            out.truncate(start + written);
            let p = p?;
            consumed += p.consumed;
            if let Some(e) = &self.failed {
                return Err(e.clone());
            }
            if p.written < room {
                return Ok(consumed);
            }
        }
    }

    /// Decodes as much of `input` as fits into `out`. Stops when the input is used up or the
    /// output is full. A fault is returned by the first call that can give no bytes before it,
    /// and by every call after.
    pub fn decode_into(&mut self, input: &[u8], out: &mut [u8]) -> Result<Progress, CompressError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut p = Progress::default();
        match self.step_all(input, out, &mut p) {
            Ok(()) => Ok(p),
            Err(e) => {
                self.failed = Some(e.clone());
                if p.written > 0 {
                    // What came out before the fault is handed over; the next call reports it.
                    Ok(p)
                } else {
                    Err(e)
                }
            }
        }
    }

    fn step_all(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        p: &mut Progress,
    ) -> Result<(), CompressError> {
        loop {
            let Some(frame) = self.frame else {
                if !self.read_header(input, p) {
                    return Ok(());
                }
                continue;
            };
            if frame.payload_left == 0 && (frame.declared == 0 || frame.ended) {
                self.end_frame(frame)?;
                continue;
            }
            let avail = (input.len() - p.consumed).min(frame.payload_left);
            let moved = if frame.declared == 0 {
                let n = avail.min(out.len() - p.written);
                out[p.written..p.written + n].copy_from_slice(&input[p.consumed..p.consumed + n]);
                p.consumed += n;
                p.written += n;
                if let Some(f) = &mut self.frame {
                    f.payload_left -= n;
                }
                n > 0
            } else {
                let chunk = &input[p.consumed..p.consumed + avail];
                self.inflate_step(chunk, out, p)?
            };
            if moved {
                continue;
            }
            let out_full = frame.out_left > 0 && p.written == out.len();
            if frame.payload_left == 0 && frame.declared > 0 && !out_full {
                // All payload is in and zlib has nothing more to give: the stream is cut short.
                self.end_frame(frame)?;
            }
            return Ok(());
        }
    }

    /// Collects header bytes; true once a whole header was read and its frame begun.
    fn read_header(&mut self, input: &[u8], p: &mut Progress) -> bool {
        let take = (HEADER_LEN - self.header_len).min(input.len() - p.consumed);
        self.header[self.header_len..self.header_len + take]
            .copy_from_slice(&input[p.consumed..p.consumed + take]);
        self.header_len += take;
        p.consumed += take;
        if self.header_len < HEADER_LEN {
            return false;
        }
        self.header_len = 0;
        let h = self.header;
        let payload = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let declared = u32::from_le_bytes([h[4], h[5], h[6], 0]) as usize;
        let seq = h[3];
        self.last_seq = Some(seq);
        self.frames += 1;
        if declared > 0 {
            match &mut self.inflate {
                Some(d) => d.reset(true),
                None => self.inflate = Some(Decompress::new(true)),
            }
        }
        self.frame = Some(Frame {
            seq,
            payload_left: payload,
            declared,
            out_left: declared,
            ended: false,
        });
        true
    }

    /// The frame's payload is all consumed: a compressed one must have inflated exactly.
    fn end_frame(&mut self, f: Frame) -> Result<(), CompressError> {
        if f.declared > 0 {
            if !f.ended {
                return Err(CompressError::Corrupt {
                    seq: f.seq,
                    reason: format!(
                        "the zlib stream is cut short by the end of the frame ({} of {} bytes \
                         inflated)",
                        f.declared - f.out_left,
                        f.declared
                    ),
                });
            }
            if f.out_left > 0 {
                return Err(mismatch(f, Inflated::Exactly(f.declared - f.out_left)));
            }
        }
        self.frame = None;
        Ok(())
    }

    /// Feeds `chunk` (payload bytes of the current compressed frame) to zlib; false when no
    /// progress is possible without more input or more output room.
    fn inflate_step(
        &mut self,
        chunk: &[u8],
        out: &mut [u8],
        p: &mut Progress,
    ) -> Result<bool, CompressError> {
        let Self { frame, inflate, .. } = self;
        let (Some(f), Some(z)) = (frame.as_mut(), inflate.as_mut()) else {
            return Ok(false);
        };
        if f.ended {
            // Bytes after the end of the zlib stream: ignored, as zlib's uncompress() does.
            f.payload_left -= chunk.len();
            p.consumed += chunk.len();
            return Ok(!chunk.is_empty());
        }
        // Once everything declared is out, the stream may only end: one probe byte finds out.
        let probing = f.out_left == 0;
        let room = f.out_left.min(out.len() - p.written);
        if !probing && room == 0 {
            return Ok(false);
        }
        let mut probe = [0u8; 1];
        let dst: &mut [u8] = if probing {
            &mut probe
        } else {
            &mut out[p.written..p.written + room]
        };
        let (in_before, out_before) = (z.total_in(), z.total_out());
        // zlib decodes the last symbols of its input only once told that no input follows
        // (it may otherwise wait for bytes that would never come), so the rest of the frame's
        // payload goes with Finish. Not on a stream's first call: there Finish means "all the
        // output fits", which bounded output room cannot promise; such a call is followed by
        // one with no input, which finishes.
        let flush = if chunk.len() == f.payload_left && z.total_in() > 0 {
            FlushDecompress::Finish
        } else {
            FlushDecompress::None
        };
        let status = z.decompress(chunk, dst, flush);
        let used = (z.total_in() - in_before) as usize;
        let made = (z.total_out() - out_before) as usize;
        let status = status.map_err(|e| CompressError::Corrupt {
            seq: f.seq,
            reason: e.to_string(),
        })?;
        if probing && made > 0 {
            return Err(mismatch(*f, Inflated::MoreThanDeclared));
        }
        f.payload_left -= used;
        p.consumed += used;
        f.out_left -= made;
        p.written += made;
        if status == Status::StreamEnd {
            f.ended = true;
            if f.out_left > 0 {
                return Err(mismatch(*f, Inflated::Exactly(f.declared - f.out_left)));
            }
            return Ok(true);
        }
        if used == 0 && made == 0 {
            if chunk.is_empty() {
                return Ok(false);
            }
            return Err(CompressError::Corrupt {
                seq: f.seq,
                reason: "zlib made no progress".into(),
            });
        }
        Ok(true)
    }
}

fn mismatch(f: Frame, inflated: Inflated) -> CompressError {
    CompressError::LengthMismatch {
        seq: f.seq,
        declared: f.declared,
        inflated,
    }
}

/// Follows plain packet boundaries across writes, so the client role can start a frame at
/// every new command (see the module doc).
#[derive(Debug, Clone, Default)]
struct Boundaries {
    /// Payload bytes of the current chunk not seen yet.
    payload_left: usize,
    /// The chunk just finished was 0xFFFFFF long: the next header is a continuation.
    continuation: bool,
    /// Inner sequence id of the last header written since a frame was read.
    last_seq: Option<u8>,
    /// Bytes of a header begun at the end of the last write, not framed yet (`held_len` long).
    held: [u8; 3],
    held_len: usize,
}

/// The bytes `held ++ plain`, addressed as one stream without copying `plain`.
struct Joined<'a> {
    held: &'a [u8],
    plain: &'a [u8],
}

impl Joined<'_> {
    fn len(&self) -> usize {
        self.held.len() + self.plain.len()
    }

    fn at(&self, i: usize) -> u8 {
        match i.checked_sub(self.held.len()) {
            Some(j) => self.plain[j],
            None => self.held[i],
        }
    }

    /// `[from, to)` as a pair of slices, the held part first.
    fn range(&self, from: usize, to: usize) -> (&[u8], &[u8]) {
        let h = self.held.len();
        (
            &self.held[from.min(h)..to.min(h)],
            &self.plain[from.saturating_sub(h)..to.saturating_sub(h)],
        )
    }
}

/// Wraps plain bytes into frames, numbering them for its [`Role`].
pub struct FrameEncoder {
    role: Role,
    level: Compression,
    deflate: Option<Compress>,
    next_seq: u8,
    boundaries: Boundaries,
}

impl std::fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameEncoder")
            .field("role", &self.role)
            .field("level", &self.level.level())
            .field("next_seq", &self.next_seq)
            .field("boundaries", &self.boundaries)
            .finish_non_exhaustive()
    }
}

impl FrameEncoder {
    /// An encoder at zlib's default level.
    pub fn new(role: Role) -> Self {
        Self::with_level(role, DEFAULT_LEVEL)
    }

    /// `level` is zlib's 0 (store only) to 9 (smallest); larger values mean 9.
    pub fn with_level(role: Role, level: u32) -> Self {
        Self {
            role,
            level: Compression::new(level.min(9)),
            deflate: None,
            next_seq: 0,
            boundaries: Boundaries::default(),
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Sequence id the next frame written will carry (before any new-command restart).
    pub fn next_seq(&self) -> u8 {
        self.next_seq
    }

    /// Plain bytes held back because they are the start of a packet header whose end has not
    /// been written yet (client role only; the peer could not act on them anyway).
    pub fn held_back(&self) -> usize {
        self.boundaries.held_len
    }

    /// The sequence id for a frame about to be written, counted as written.
    pub fn take_seq(&mut self) -> u8 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        seq
    }

    /// The deflate state, made on first use; None when the level stores every frame.
    pub fn deflater(&mut self) -> Option<&mut Compress> {
        let level = self.level;
        (level.level() > 0).then(|| {
            self.deflate
                .get_or_insert_with(|| Compress::new(level, true))
        })
    }

    /// Call for every frame header read from the peer: the answer continues from it.
    pub fn on_frame_read(&mut self, seq: u8) {
        self.next_seq = seq.wrapping_add(1);
        self.boundaries.last_seq = None;
    }

    /// Drops the zlib state; it is made again for the next frame worth compressing.
    pub fn shrink(&mut self) {
        self.deflate = None;
    }

    /// Whether a deflate state is allocated (what [`shrink`](Self::shrink) frees).
    pub fn holds_state(&self) -> bool {
        self.deflate.is_some()
    }

    /// Wraps `plain` into frames appended to `out`. In the client role a trailing partial
    /// packet header is held back until the write that completes it (or [`finish`](Self::finish)).
    pub fn encode(&mut self, plain: &[u8], out: &mut BytesMut) {
        match self.role {
            Role::Server => self.put_frames(&[], plain, out),
            Role::Client => self.encode_client(plain, out),
        }
    }

    /// Frames whatever is held back (at shutdown: a header that will never be completed).
    pub fn finish(&mut self, out: &mut BytesMut) {
        let b = &mut self.boundaries;
        let held = b.held;
        let n = std::mem::take(&mut b.held_len);
        self.put_frames(&held[..n], &[], out);
    }

    fn encode_client(&mut self, plain: &[u8], out: &mut BytesMut) {
        let held = self.boundaries.held;
        let v = Joined {
            held: &held[..self.boundaries.held_len],
            plain,
        };
        let mut pos = 0;
        let mut segment = 0;
        let mut tail = v.len();
        while pos < v.len() {
            let b = &mut self.boundaries;
            if b.payload_left > 0 {
                let n = b.payload_left.min(v.len() - pos);
                b.payload_left -= n;
                pos += n;
                continue;
            }
            if v.len() - pos < 4 {
                tail = pos;
                break;
            }
            let len = u32::from_le_bytes([v.at(pos), v.at(pos + 1), v.at(pos + 2), 0]) as usize;
            let seq = v.at(pos + 3);
            let new_command = seq == 0 && !b.continuation && b.last_seq != Some(255);
            b.continuation = len == MAX_CHUNK;
            b.last_seq = Some(seq);
            b.payload_left = len;
            if new_command {
                let (a, c) = v.range(segment, pos);
                self.put_frames(a, c, out);
                segment = pos;
                self.next_seq = 0;
            }
            pos += 4;
        }
        let (a, c) = v.range(segment, tail);
        self.put_frames(a, c, out);
        let (a, c) = v.range(tail, v.len());
        let b = &mut self.boundaries;
        b.held_len = a.len() + c.len();
        let mut keep = [0u8; 3];
        keep[..a.len()].copy_from_slice(a);
        keep[a.len()..b.held_len].copy_from_slice(c);
        b.held = keep;
    }

    /// Frames `a ++ b`, cut into frames of at most [`MAX_FRAME_PAYLOAD`] bytes.
    fn put_frames(&mut self, mut a: &[u8], mut b: &[u8], out: &mut BytesMut) {
        while !a.is_empty() || !b.is_empty() {
            let take_a = a.len().min(MAX_FRAME_PAYLOAD);
            let take_b = b.len().min(MAX_FRAME_PAYLOAD - take_a);
            self.put_frame(&a[..take_a], &b[..take_b], out);
            a = &a[take_a..];
            b = &b[take_b..];
        }
    }

    /// One frame of `a ++ b` (at most [`MAX_FRAME_PAYLOAD`] bytes together).
    fn put_frame(&mut self, a: &[u8], b: &[u8], out: &mut BytesMut) {
        let total = a.len() + b.len();
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        let start = out.len();
        if total >= MIN_COMPRESS_LEN && self.level.level() > 0 {
            if let Some(n) = self.deflate_into(a, b, out) {
                out[start..start + HEADER_LEN].copy_from_slice(&frame_header(n, seq, total));
                return;
            }
            out.truncate(start);
        }
        out.reserve(HEADER_LEN + total);
        out.put_slice(&frame_header(total, seq, 0));
        out.put_slice(a);
        out.put_slice(b);
    }

    /// Appends a header's room and the zlib stream of `a ++ b` to `out`; the stream's length,
    /// or None when it would not be smaller than the input.
    fn deflate_into(&mut self, a: &[u8], b: &[u8], out: &mut BytesMut) -> Option<usize> {
        let total = a.len() + b.len();
        let start = out.len();
        out.resize(start + HEADER_LEN + total - 1, 0);
        let level = self.level;
        let z = self
            .deflate
            .get_or_insert_with(|| Compress::new(level, true));
        z.reset();
        let dst = &mut out[start + HEADER_LEN..];
        let first = z.compress(a, dst, FlushCompress::None).ok()?;
        if z.total_in() as usize != a.len() || first == Status::StreamEnd {
            return None;
        }
        let written = z.total_out() as usize;
        let last = z
            .compress(b, &mut dst[written..], FlushCompress::Finish)
            .ok()?;
        if last != Status::StreamEnd || z.total_in() as usize != total {
            return None;
        }
        let n = z.total_out() as usize;
        out.truncate(start + HEADER_LEN + n);
        Some(n)
    }
}

/// A frame header: payload length, sequence id, uncompressed length (0: stored).
pub fn frame_header(payload: usize, seq: u8, uncompressed: usize) -> [u8; HEADER_LEN] {
    let p = (payload as u32).to_le_bytes();
    let u = (uncompressed as u32).to_le_bytes();
    [p[0], p[1], p[2], seq, u[0], u[1], u[2]]
}

#[cfg(test)]
mod tests;
