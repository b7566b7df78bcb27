//! Packet framing for a relay: finds logical packets in a byte stream without copying it.
//!
//! The relay forwards every read as it came, so it cannot own a decoded packet; instead it feeds each
//! read through a [`PacketScanner`] that keeps the few bytes of state a packet boundary needs across
//! reads (a split header, the first bytes of the payload for classification, the chunks of a packet
//! of 16 MiB or more) and reports each logical packet once it has been seen whole. Nothing here
//! allocates, and sizes are checked from the header before any payload is accepted.
//! Behind a compressed leg the inner sequence ids do not follow the plain numbering (servers and
//! Connector/C restart them from the frame counter), so a scan can also rewrite each header's
//! sequence byte in place as it completes ([`PacketScanner::scan_renumbering`]): a chunk's header
//! may lie in an earlier read than the packet's end, so waiting for the end would be too late.

use thiserror::Error;

/// A chunk of this size says "the logical packet continues in the next chunk".
pub const MAX_CHUNK: usize = 0xFF_FFFF;
/// How many leading payload bytes are kept for classification: enough for an OK packet's two
/// length-encoded integers and its status flags, a STMT_OK header, or a column count.
pub const PREFIX_LEN: usize = 32;

/// One logical packet, reported when its last byte has been scanned.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Sequence id of the first chunk.
    pub first_seq: u8,
    /// Sequence id of the last chunk (equal to `first_seq` unless the packet was ≥ 16 MiB).
    pub last_seq: u8,
    /// Length of the first chunk: `MAX_CHUNK` marks a packet of 16 MiB or more.
    pub first_chunk_len: usize,
    /// Length of the whole logical payload.
    pub len: u64,
    /// The first `min(len, PREFIX_LEN)` payload bytes.
    pub prefix: &'a [u8],
    /// Offset of the packet's header in the buffer being scanned, when it started in that buffer.
    pub start: Option<usize>,
    /// Offset just past the packet's last byte in the buffer being scanned.
    pub end: usize,
}

impl Packet<'_> {
    /// The first payload byte (the packet type for most server packets), if any.
    pub fn first_byte(&self) -> Option<u8> {
        self.prefix.first().copied()
    }
}

/// Framing errors: the stream can no longer be followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("packet of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        len: u64,
        max: u64,
        start: Option<usize>,
    },
    #[error("packet chunk out of order: expected sequence id {expected}, got {got}")]
    ChunkOutOfOrder {
        expected: u8,
        got: u8,
        start: Option<usize>,
    },
}

/// What [`PacketScanner::advance`] stopped at.
enum Event {
    NeedMore,
    Header { start: Option<usize> },
    Packet,
}

/// The caller's side of [`PacketScanner::scan_renumbering`].
pub trait Renumber {
    type Error: From<FrameError>;
    /// The sequence id the packet whose first header just completed must carry, or `None` to
    /// leave it as sent.
    fn first_seq(&mut self) -> Option<u8>;
    /// A logical packet ended in `buf` (the buffer being scanned, rewritten up to here).
    fn packet(&mut self, p: Packet<'_>, buf: &[u8]) -> Result<(), Self::Error>;
}

/// Incremental scanner over one direction of a connection.
#[derive(Debug, Clone)]
pub struct PacketScanner {
    max_len: u64,
    header: [u8; 4],
    header_len: usize,
    /// Payload bytes left in the current chunk; meaningful while `in_payload`.
    remaining: usize,
    in_payload: bool,
    chunk_len: usize,
    /// The current chunk continues a logical packet whose earlier chunk was `MAX_CHUNK` long.
    continuation: bool,
    first_seq: u8,
    last_seq: u8,
    first_chunk_len: usize,
    total: u64,
    /// The prefix bytes of the current packet kept from earlier buffers (only a packet that
    /// spans reads needs them; one that ends where it began is classified from the buffer).
    prefix: [u8; PREFIX_LEN],
    prefix_len: usize,
    /// Where in the buffer being scanned the current packet's prefix bytes not yet in `prefix`
    /// begin: its payload's start, or 0 when it began in an earlier buffer.
    prefix_from: Option<usize>,
    start: Option<usize>,
}

impl PacketScanner {
    pub fn new(max_len: u64) -> Self {
        Self {
            max_len,
            header: [0; 4],
            header_len: 0,
            remaining: 0,
            in_payload: false,
            chunk_len: 0,
            continuation: false,
            first_seq: 0,
            last_seq: 0,
            first_chunk_len: 0,
            total: 0,
            prefix: [0; PREFIX_LEN],
            prefix_len: 0,
            prefix_from: None,
            start: None,
        }
    }

    /// How many prefix bytes the current packet has in all (its first chunk's, up to
    /// `PREFIX_LEN`).
    fn prefix_wanted(&self) -> usize {
        self.first_chunk_len.min(PREFIX_LEN)
    }

    /// The buffer ends inside the current packet: keeps the prefix bytes it holds.
    fn save_prefix(&mut self, buf: &[u8]) {
        if let Some(from) = self.prefix_from.take() {
            let keep = (self.prefix_wanted() - self.prefix_len).min(buf.len() - from);
            self.prefix[self.prefix_len..self.prefix_len + keep]
                .copy_from_slice(&buf[from..from + keep]);
            self.prefix_len += keep;
        }
    }

    /// True between packets: nothing of a packet has been seen without its end.
    pub fn at_boundary(&self) -> bool {
        self.header_len == 0 && !self.in_payload && !self.continuation
    }

    /// Scans `buf`, calling `on_packet` for every logical packet that ends in it.
    pub fn scan<E: From<FrameError>>(
        &mut self,
        buf: &[u8],
        mut on_packet: impl FnMut(Packet<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.enter();
        let mut pos = 0;
        loop {
            if let Some((len, seq)) = self.whole_at(buf, pos) {
                let p = self.whole_packet(buf, pos, len, seq)?;
                pos = p.end;
                on_packet(p)?;
                continue;
            }
            match self.advance(buf, &mut pos) {
                Event::NeedMore => {
                    self.save_prefix(buf);
                    return Ok(());
                }
                Event::Header { start } => self.begin_chunk(start, pos)?,
                Event::Packet => on_packet(self.packet(buf, pos))?,
            }
        }
    }

    /// Between packets, a whole packet of one chunk at `pos`: its length and sequence id. None
    /// when its bytes are not all here, or for a 16 MiB chunk: the general path takes those.
    #[inline(always)]
    fn whole_at(&self, buf: &[u8], pos: usize) -> Option<(usize, u8)> {
        if self.header_len != 0 || self.in_payload || self.continuation {
            return None;
        }
        let h = buf.get(pos..pos + 4)?;
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        (len < MAX_CHUNK && buf.len() - (pos + 4) >= len).then_some((len, h[3]))
    }

    /// The packet [`whole_at`](Self::whole_at) found, read in place: most packets take this way,
    /// which keeps no state across it.
    #[inline(always)]
    fn whole_packet<'a>(
        &self,
        buf: &'a [u8],
        pos: usize,
        len: usize,
        seq: u8,
    ) -> Result<Packet<'a>, FrameError> {
        if len as u64 > self.max_len {
            return Err(FrameError::TooLarge {
                len: len as u64,
                max: self.max_len,
                start: Some(pos),
            });
        }
        let payload = pos + 4;
        Ok(Packet {
            first_seq: seq,
            last_seq: seq,
            first_chunk_len: len,
            len: len as u64,
            prefix: &buf[payload..payload + len.min(PREFIX_LEN)],
            start: Some(pos),
            end: payload + len,
        })
    }

    /// As [`scan`](Self::scan), but a chunk whose sequence id is not the one the plain protocol
    /// expects is renumbered instead of refused: its header's sequence byte is overwritten in
    /// `buf`. A continuation chunk must carry the previous chunk's id + 1; the id of a packet's
    /// first chunk is whatever [`Renumber::first_seq`] says when that header completes (after
    /// every earlier packet went to [`Renumber::packet`]). Every [`Packet`] reports the ids as
    /// rewritten.
    pub fn scan_renumbering<R: Renumber>(
        &mut self,
        buf: &mut [u8],
        sink: &mut R,
    ) -> Result<(), R::Error> {
        self.enter();
        let mut pos = 0;
        loop {
            if let Some((len, mut seq)) = self.whole_at(buf, pos) {
                if let Some(expected) = sink.first_seq().filter(|&expected| expected != seq) {
                    buf[pos + 3] = expected;
                    seq = expected;
                }
                let buf = &*buf;
                let p = self.whole_packet(buf, pos, len, seq)?;
                pos = p.end;
                sink.packet(p, buf)?;
                continue;
            }
            match self.advance(buf, &mut pos) {
                Event::NeedMore => {
                    self.save_prefix(buf);
                    return Ok(());
                }
                Event::Header { start } => {
                    let expected = if self.continuation {
                        Some(self.last_seq.wrapping_add(1))
                    } else {
                        sink.first_seq()
                    };
                    // The sequence byte is the header's last: it always lies in this buffer.
                    if let Some(seq) = expected.filter(|&seq| seq != self.header[3]) {
                        self.header[3] = seq;
                        buf[pos - 1] = seq;
                    }
                    self.begin_chunk(start, pos)?;
                }
                Event::Packet => {
                    let buf = &*buf;
                    sink.packet(self.packet(buf, pos), buf)?
                }
            }
        }
    }

    /// Starts a scan of a new buffer.
    fn enter(&mut self) {
        if self.in_payload || self.continuation {
            // The packet in progress began in an earlier buffer: no offset in this one.
            self.start = None;
            if self.prefix_len < self.prefix_wanted() {
                self.prefix_from = Some(0);
            }
        }
    }

    /// Consumes `buf` from `pos` up to the next thing the caller acts on: a chunk header just
    /// completed (the caller applies it with [`begin_chunk`](Self::begin_chunk) before the next
    /// call), a logical packet ended at `pos`, or the end of the buffer.
    #[inline(always)]
    fn advance(&mut self, buf: &[u8], pos: &mut usize) -> Event {
        loop {
            if !self.in_payload {
                if *pos == buf.len() {
                    return Event::NeedMore;
                }
                if self.header_len == 0 {
                    if let Some(header) = buf.get(*pos..*pos + 4) {
                        // The common case, a whole header in this buffer: no partial copy.
                        self.header = [header[0], header[1], header[2], header[3]];
                        *pos += 4;
                        return Event::Header {
                            start: Some(*pos - 4),
                        };
                    }
                }
                let take = (4 - self.header_len).min(buf.len() - *pos);
                self.header[self.header_len..self.header_len + take]
                    .copy_from_slice(&buf[*pos..*pos + take]);
                let whole_header_here = self.header_len == 0 && take == 4;
                self.header_len += take;
                *pos += take;
                if self.header_len < 4 {
                    return Event::NeedMore;
                }
                self.header_len = 0;
                return Event::Header {
                    start: whole_header_here.then(|| *pos - 4),
                };
            }
            let take = self.remaining.min(buf.len() - *pos);
            self.remaining -= take;
            *pos += take;
            if self.remaining > 0 {
                return Event::NeedMore;
            }
            self.in_payload = false;
            if self.chunk_len == MAX_CHUNK {
                self.continuation = true;
                continue;
            }
            self.continuation = false;
            return Event::Packet;
        }
    }

    /// The logical packet that just ended at `end` of `buf`.
    #[inline]
    fn packet<'a>(&'a mut self, buf: &'a [u8], end: usize) -> Packet<'a> {
        let wanted = self.prefix_wanted();
        let prefix = match self.prefix_from {
            // Nothing kept from earlier buffers: the prefix is read where it lies.
            Some(from) if self.prefix_len == 0 => {
                self.prefix_from = None;
                &buf[from..from + wanted]
            }
            Some(_) => {
                self.save_prefix(buf);
                &self.prefix[..self.prefix_len]
            }
            None => &self.prefix[..self.prefix_len],
        };
        Packet {
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            first_chunk_len: self.first_chunk_len,
            len: self.total,
            prefix,
            start: self.start,
            end,
        }
    }

    fn begin_chunk(&mut self, start: Option<usize>, payload: usize) -> Result<(), FrameError> {
        let len = u32::from_le_bytes([self.header[0], self.header[1], self.header[2], 0]) as usize;
        let seq = self.header[3];
        if self.continuation {
            let expected = self.last_seq.wrapping_add(1);
            if seq != expected {
                return Err(FrameError::ChunkOutOfOrder {
                    expected,
                    got: seq,
                    start,
                });
            }
            self.total += len as u64;
        } else {
            self.first_seq = seq;
            self.first_chunk_len = len;
            self.total = len as u64;
            self.prefix_len = 0;
            self.prefix_from = Some(payload);
            self.start = start;
        }
        if self.total > self.max_len {
            return Err(FrameError::TooLarge {
                len: self.total,
                max: self.max_len,
                start,
            });
        }
        self.last_seq = seq;
        self.chunk_len = len;
        self.remaining = len;
        self.in_payload = true;
        Ok(())
    }
}

/// Appends `n` as a length-encoded integer (the writer beside [`read_lenenc_int`]).
pub fn put_lenenc_int(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&n.to_le_bytes()[..2]);
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(0xFD);
            out.extend_from_slice(&n.to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Appends `bytes` as a length-encoded string (the writer beside [`lenenc_bytes`]).
pub fn put_lenenc_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_lenenc_int(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Why a length-encoded value could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LenencError {
    #[error("length-encoded value cut short")]
    Truncated,
    /// 0xFB (NULL in a row) or 0xFF (an ERR header) where a length was expected.
    #[error("invalid length prefix 0x{0:02X}")]
    Invalid(u8),
}

/// Reads a length-encoded integer at `pos`; returns the value and the offset after it.
pub fn read_lenenc_int(buf: &[u8], pos: usize) -> Result<(u64, usize), LenencError> {
    let first = *buf.get(pos).ok_or(LenencError::Truncated)?;
    let width = match first {
        0..=0xFA => return Ok((u64::from(first), pos + 1)),
        0xFC => 2,
        0xFD => 3,
        0xFE => 8,
        bad => return Err(LenencError::Invalid(bad)),
    };
    let bytes = buf
        .get(pos + 1..pos + 1 + width)
        .ok_or(LenencError::Truncated)?;
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        value |= u64::from(*b) << (8 * i);
    }
    Ok((value, pos + 1 + width))
}

/// As [`read_lenenc_int`], for callers that only need to know whether it was there.
pub fn lenenc_int(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    read_lenenc_int(buf, pos).ok()
}

/// Reads a length-encoded string at `pos`; returns its bytes and the offset after it. A length
/// past the end of `buf` (up to 2^64 - 1 on the wire) is `Truncated`, never an allocation.
pub fn lenenc_bytes(buf: &[u8], pos: usize) -> Result<(&[u8], usize), LenencError> {
    let (len, start) = read_lenenc_int(buf, pos)?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| start.checked_add(len))
        .ok_or(LenencError::Truncated)?;
    let bytes = buf.get(start..end).ok_or(LenencError::Truncated)?;
    Ok((bytes, end))
}

/// Appends a packet header for a payload of `len` bytes (`len` must be below `MAX_CHUNK`).
pub fn header(len: usize, seq: u8) -> [u8; 4] {
    let l = (len as u32).to_le_bytes();
    [l[0], l[1], l[2], seq]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = header(payload.len(), seq).to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[derive(Debug, PartialEq)]
    struct Seen {
        first_seq: u8,
        last_seq: u8,
        len: u64,
        prefix: Vec<u8>,
        start: Option<usize>,
        end: usize,
    }

    fn scan_all(scanner: &mut PacketScanner, buf: &[u8]) -> Result<Vec<Seen>, FrameError> {
        let mut seen = Vec::new();
        scanner.scan(buf, |p| {
            seen.push(Seen {
                first_seq: p.first_seq,
                last_seq: p.last_seq,
                len: p.len,
                prefix: p.prefix.to_vec(),
                start: p.start,
                end: p.end,
            });
            Ok::<(), FrameError>(())
        })?;
        Ok(seen)
    }

    #[test]
    fn finds_each_packet_in_one_buffer() {
        let mut stream = packet(1, b"\x01");
        stream.extend(packet(2, b"abc"));
        stream.extend(packet(3, b""));
        let mut s = PacketScanner::new(1 << 30);
        let seen = scan_all(&mut s, &stream).unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1].prefix, b"abc");
        assert_eq!(seen[1].start, Some(5));
        assert_eq!(seen[1].end, 12);
        assert_eq!(seen[2].len, 0);
        assert_eq!(seen[2].end, stream.len());
        assert!(s.at_boundary());
    }

    #[test]
    fn same_packets_whatever_the_split() {
        let mut stream = packet(0, &[7u8; 40]);
        stream.extend(packet(1, b"xy"));
        stream.extend(packet(2, b""));
        let whole = scan_all(&mut PacketScanner::new(1 << 30), &stream).unwrap();
        for split in 0..=stream.len() {
            let mut s = PacketScanner::new(1 << 30);
            let mut a = scan_all(&mut s, &stream[..split]).unwrap();
            let b = scan_all(&mut s, &stream[split..]).unwrap();
            let b_len = b.len();
            a.extend(b);
            assert_eq!(a.len(), whole.len(), "split at {split}");
            for (x, y) in a.iter().zip(&whole) {
                assert_eq!(
                    (x.first_seq, x.len, &x.prefix),
                    (y.first_seq, y.len, &y.prefix)
                );
            }
            assert!(s.at_boundary());
            assert!(b_len <= 3);
        }
    }

    #[test]
    fn a_prefix_read_across_three_buffers_is_whole() {
        let payload: Vec<u8> = (0..40).collect();
        let mut stream = packet(0, &payload);
        stream.extend(packet(1, b"xy"));
        for (a, b) in [(4, 9), (6, 20), (10, 34), (4, 4), (5, 44), (3, 38)] {
            let mut s = PacketScanner::new(1 << 30);
            let mut seen = scan_all(&mut s, &stream[..a]).unwrap();
            seen.extend(scan_all(&mut s, &stream[a..b]).unwrap());
            seen.extend(scan_all(&mut s, &stream[b..]).unwrap());
            assert_eq!(seen.len(), 2, "cuts at {a} and {b}");
            assert_eq!(
                seen[0].prefix,
                &payload[..PREFIX_LEN],
                "cuts at {a} and {b}"
            );
            assert_eq!(seen[1].prefix, b"xy");
        }
    }

    #[test]
    fn a_packet_begun_in_an_earlier_buffer_has_no_start_in_this_one() {
        let mut stream = packet(1, b"0123456789");
        stream.extend(packet(2, b"ab"));
        let mut s = PacketScanner::new(1 << 30);
        assert!(scan_all(&mut s, &stream[..8]).unwrap().is_empty());
        let seen = scan_all(&mut s, &stream[8..]).unwrap();
        assert_eq!(seen[0].start, None, "began in the previous buffer");
        assert_eq!(seen[0].end, 6);
        assert_eq!(seen[1].start, Some(6));
        // Also across a 16 MiB continuation.
        let mut big = header(MAX_CHUNK, 0).to_vec();
        big.extend(std::iter::repeat_n(0, MAX_CHUNK));
        big.extend(packet(1, b"x"));
        let mut s = PacketScanner::new(1 << 30);
        assert!(scan_all(&mut s, &big[..MAX_CHUNK + 4]).unwrap().is_empty());
        let seen = scan_all(&mut s, &big[MAX_CHUNK + 4..]).unwrap();
        assert_eq!(seen[0].start, None);
    }

    #[test]
    fn byte_at_a_time() {
        let mut stream = packet(5, b"hello world");
        stream.extend(packet(6, b"!"));
        let mut s = PacketScanner::new(1 << 30);
        let mut n = 0;
        for b in &stream {
            n += scan_all(&mut s, std::slice::from_ref(b)).unwrap().len();
        }
        assert_eq!(n, 2);
    }

    #[test]
    fn large_packet_is_one_logical_packet() {
        let mut stream = header(MAX_CHUNK, 3).to_vec();
        stream.extend(std::iter::repeat_n(0xAB, MAX_CHUNK));
        stream.extend(packet(4, b"tail"));
        stream.extend(packet(5, b"next"));
        let mut s = PacketScanner::new(1 << 30);
        let seen = scan_all(&mut s, &stream).unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].first_seq, 3);
        assert_eq!(seen[0].last_seq, 4);
        assert_eq!(seen[0].len, MAX_CHUNK as u64 + 4);
        assert_eq!(seen[0].prefix.len(), PREFIX_LEN);
        assert_eq!(seen[1].prefix, b"next");
    }

    #[test]
    fn exact_multiple_of_chunk_ends_with_empty_chunk() {
        let mut stream = header(MAX_CHUNK, 0).to_vec();
        stream.extend(std::iter::repeat_n(1, MAX_CHUNK));
        let mut s = PacketScanner::new(1 << 30);
        assert!(scan_all(&mut s, &stream).unwrap().is_empty());
        assert!(!s.at_boundary());
        let seen = scan_all(&mut s, &packet(1, b"")).unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].len, MAX_CHUNK as u64);
    }

    #[test]
    fn oversized_packet_is_refused_from_its_header() {
        let mut s = PacketScanner::new(100);
        let mut stream = packet(0, b"ok");
        stream.extend(header(101, 0));
        let err = scan_all(&mut s, &stream).unwrap_err();
        assert_eq!(
            err,
            FrameError::TooLarge {
                len: 101,
                max: 100,
                start: Some(6)
            }
        );
    }

    #[test]
    fn oversized_across_chunks_is_refused() {
        let mut s = PacketScanner::new(MAX_CHUNK as u64 + 10);
        let mut stream = header(MAX_CHUNK, 0).to_vec();
        stream.extend(std::iter::repeat_n(0, MAX_CHUNK));
        stream.extend(header(11, 1));
        assert!(matches!(
            scan_all(&mut s, &stream),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn chunk_with_wrong_sequence_is_refused() {
        let mut s = PacketScanner::new(1 << 30);
        let mut stream = header(MAX_CHUNK, 0).to_vec();
        stream.extend(std::iter::repeat_n(0, MAX_CHUNK));
        stream.extend(packet(7, b""));
        assert!(matches!(
            scan_all(&mut s, &stream),
            Err(FrameError::ChunkOutOfOrder {
                expected: 1,
                got: 7,
                ..
            })
        ));
    }

    #[test]
    fn lenenc_ints() {
        assert_eq!(lenenc_int(&[0xFA], 0), Some((250, 1)));
        assert_eq!(lenenc_int(&[0xFC, 1, 2], 0), Some((0x0201, 3)));
        assert_eq!(lenenc_int(&[0xFD, 1, 2, 3], 0), Some((0x030201, 4)));
        assert_eq!(
            lenenc_int(&[0xFE, 1, 0, 0, 0, 0, 0, 0, 1], 0),
            Some((1 | 1 << 56, 9))
        );
        assert_eq!(lenenc_int(&[0xFC, 1], 0), None);
        assert_eq!(lenenc_int(&[0xFB], 0), None);
        assert_eq!(lenenc_int(&[], 0), None);
    }

    #[test]
    fn lenenc_bytes_round_trip_at_every_width() {
        for len in [0usize, 250, 251, 0xFFFF, 0x1_0000, 0xFF_FFFF, 0x100_0000] {
            let data = vec![7u8; len];
            let mut out = Vec::new();
            put_lenenc_bytes(&mut out, &data);
            let (n, at) = lenenc_int(&out, 0).expect("a length prefix");
            assert_eq!((n as usize, out.len() - at), (len, len), "length {len}");
            let (bytes, end) = lenenc_bytes(&out, 0).expect("a whole string");
            assert_eq!((bytes.len(), end), (len, out.len()), "length {len}");
        }
    }

    #[test]
    fn lenenc_errors_say_truncated_or_invalid() {
        assert_eq!(read_lenenc_int(&[], 0), Err(LenencError::Truncated));
        assert_eq!(
            read_lenenc_int(&[0xFD, 1, 2], 0),
            Err(LenencError::Truncated)
        );
        assert_eq!(read_lenenc_int(&[0xFB], 0), Err(LenencError::Invalid(0xFB)));
        assert_eq!(
            read_lenenc_int(&[0xFF, 1], 0),
            Err(LenencError::Invalid(0xFF))
        );
        assert_eq!(read_lenenc_int(&[9, 0xFC, 1, 2], 1), Ok((0x0201, 4)));
        assert_eq!(
            lenenc_bytes(&[3, b'a', b'b'], 0),
            Err(LenencError::Truncated)
        );
        assert_eq!(
            lenenc_bytes(&[2, b'a', b'b', 1, b'c'], 3),
            Ok((&b"c"[..], 5))
        );
        // 2^64 - 1 bytes claimed: refused from the length alone.
        let huge = [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, b'a'];
        assert_eq!(lenenc_bytes(&huge, 0), Err(LenencError::Truncated));
    }
}
