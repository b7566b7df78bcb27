use super::*;
use crate::wire::protocol::compress::{FrameDecoder, Role};

const MIB16: usize = 16 << 20;
/// What the relay hands a compressed leg per write at most.
const WRITE: usize = 64 * 1024;
/// What a session may hold beyond the stage and the head: one write's worth and zlib's last
/// flush.
const SLACK: usize = 2 * WRITE;

/// `len` bytes of `fill`, or of a pseudo-random sequence (which zlib cannot shrink) for None.
fn data(fill: Option<u8>, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            fill.unwrap_or_else(|| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
        })
        .collect()
}

/// One logical packet as plain chunks (0xFFFFFF-long ones continue), ids from `seq`.
fn logical(payload: &[u8], seq: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 16);
    let mut seq = seq;
    let mut rest = payload;
    loop {
        let n = rest.len().min(0xFF_FFFF);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        seq = seq.wrapping_add(1);
        if n < 0xFF_FFFF {
            return out;
        }
    }
}

/// A small packet, a logical packet of 16 MiB and more (two chunks), then a small packet.
fn stream(fill: Option<u8>) -> Vec<u8> {
    [
        logical(&data(Some(b'a'), 100), 1),
        logical(&data(fill, MIB16 + 10), 2),
        logical(&data(Some(b'z'), 3000), 4),
    ]
    .concat()
}

/// Writes `plain` in `piece`-byte writes, taking the frames out after each (as a socket
/// would), and checks what the framer holds every time. Returns the wire bytes.
fn frame_all(level: u32, plain: &[u8], piece: usize) -> Vec<u8> {
    let mut enc = FrameEncoder::with_level(Role::Server, level);
    let mut framer = ServerFramer::default();
    let mut out = BytesMut::new();
    let mut wire = Vec::new();
    for p in plain.chunks(piece) {
        framer.write(&mut enc, p, &mut out);
        assert!(
            framer.held() <= STAGE_MAX + HEAD_MAX + SLACK,
            "held {} bytes",
            framer.held()
        );
        assert!(
            framer.capacity() <= 2 * (STAGE_MAX + HEAD_MAX + SLACK),
            "capacity {} bytes",
            framer.capacity()
        );
        assert!(
            out.len() <= p.len() + HEAD_MAX + SLACK,
            "{} frame bytes out of a {}-byte write",
            out.len(),
            p.len()
        );
        wire.extend_from_slice(&out);
        out.clear();
    }
    framer.finish(&mut enc, &mut out);
    wire.extend_from_slice(&out);
    assert_eq!(
        framer.held(),
        0,
        "nothing held once the packets are complete"
    );
    wire
}

/// Each frame's sequence id and the range of the plain stream it carries.
fn frames(wire: &[u8]) -> Vec<(u8, std::ops::Range<usize>)> {
    let mut at = 0;
    let mut plain_at = 0;
    let mut out = Vec::new();
    while at < wire.len() {
        let h = &wire[at..at + HEADER_LEN];
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let unc = u32::from_le_bytes([h[4], h[5], h[6], 0]) as usize;
        let plain = if unc == 0 { len } else { unc };
        assert!(len <= MAX_FRAME_PAYLOAD && plain <= MAX_FRAME_PAYLOAD);
        out.push((h[3], plain_at..plain_at + plain));
        plain_at += plain;
        at += HEADER_LEN + len;
    }
    out
}

/// Checks that the wire decodes to `plain`, frames count up from 0, and every packet chunk lies
/// in the frame it starts in and at most the next one, its header in one frame.
fn check_wire(wire: &[u8], plain: &[u8]) {
    let mut decoded = BytesMut::new();
    let used = FrameDecoder::new().decode(wire, &mut decoded).unwrap();
    assert_eq!(used, wire.len());
    assert!(decoded[..] == plain[..], "the plain stream comes back");
    let frames = frames(wire);
    for (i, (seq, _)) in frames.iter().enumerate() {
        assert_eq!(usize::from(*seq), i % 256, "frame ids count up");
    }
    let frame_of = |pos: usize| frames.iter().position(|(_, r)| r.contains(&pos)).unwrap();
    let mut at = 0;
    while at < plain.len() {
        let len = u32::from_le_bytes([plain[at], plain[at + 1], plain[at + 2], 0]) as usize;
        let first = frame_of(at);
        assert_eq!(frame_of(at + 3), first, "the header at {at} spans frames");
        let last = frame_of(at + 4 + len - 1);
        assert!(
            last <= first + 1,
            "the packet at {at} spans frames {first}..={last}"
        );
        at += 4 + len;
    }
}

#[test]
fn a_16_mib_packet_that_compresses_well_passes_compressed_in_bounded_memory() {
    let plain = stream(Some(b'x'));
    let wire = frame_all(6, &plain, WRITE);
    check_wire(&wire, &plain);
    // 16 MiB of one byte deflates to about 16 KiB: all of it went compressed.
    assert!(wire.len() < 64 * 1024, "{} wire bytes", wire.len());
}

#[test]
fn a_16_mib_packet_that_does_not_compress_passes_stored_after_a_bounded_head() {
    let plain = stream(None);
    let wire = frame_all(6, &plain, WRITE);
    check_wire(&wire, &plain);
    let frames = frames(&wire);
    assert!(
        wire.len() < plain.len() + 1024,
        "{} wire bytes for {} plain",
        wire.len(),
        plain.len()
    );
    // The big packet's first chunk: a compressed head, then one stored frame to the chunk's end.
    assert!(frames.len() <= 8, "{} frames", frames.len());
}

#[test]
fn with_compression_off_a_16_mib_packet_passes_in_stored_frames_in_bounded_memory() {
    for fill in [Some(b'x'), None] {
        let plain = stream(fill);
        let wire = frame_all(0, &plain, WRITE);
        check_wire(&wire, &plain);
        assert_eq!(wire.len(), plain.len() + frames(&wire).len() * HEADER_LEN);
    }
}

#[test]
fn odd_write_sizes_keep_the_rules() {
    // Writes that cut headers and the stage's limit anywhere; smaller packets around the stage
    // limit too.
    let mut plain = stream(Some(b'q'));
    plain.extend(logical(&data(None, STAGE_MAX - 2), 0));
    plain.extend(logical(&data(Some(b'r'), STAGE_MAX + 3), 0));
    plain.extend(logical(&[], 1));
    for piece in [1000, 4093, WRITE + 1] {
        let wire = frame_all(1, &plain, piece);
        check_wire(&wire, &plain);
    }
}

#[test]
fn whole_packets_in_one_write_are_one_frame_as_before() {
    let plain = [
        logical(b"first row", 1),
        logical(&data(Some(b'w'), 5000), 2),
    ]
    .concat();
    let wire = frame_all(6, &plain, plain.len());
    assert_eq!(frames(&wire).len(), 1);
    check_wire(&wire, &plain);
}
