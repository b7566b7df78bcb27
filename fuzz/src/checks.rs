//! The properties the fuzz targets check, one function per target, each taking raw fuzzer bytes.
//!
//! Kept free of any fuzzing crate so `tests/properties.rs` can include this very file and run the
//! same oracles under proptest and over the committed seeds and crash reproducers: a bug found by
//! either is checked by both. Every check panics (asserts) on a violated property; an `Err` from
//! the code under test is never a failure by itself, only a panic or a broken invariant is.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use mysql_lb::backends::kill;
use mysql_lb::wire::protocol::caps::{
    Negotiated, CLIENT_DEPRECATE_EOF, CLIENT_LOCAL_FILES, CLIENT_MYSQL, MARIADB_CLIENT_PROGRESS,
    MARIADB_UNSUPPORTED, UNSUPPORTED,
};
use mysql_lb::wire::protocol::codec::{FrameError, PacketScanner, MAX_CHUNK, PREFIX_LEN};
use mysql_lb::wire::protocol::compress::{
    CompressError, FrameDecoder, FrameEncoder, Role, HEADER_LEN, MAX_FRAME_PAYLOAD,
    MIN_COMPRESS_LEN,
};
use mysql_lb::wire::protocol::compress_server::{ServerFramer, HEAD_MAX, STAGE_MAX};
use mysql_lb::wire::protocol::handshake::{
    negotiate, parse_client_first, parse_greeting, patch_client_first, patch_greeting,
    patch_greeting_with, set_greeting_connection_id, ClientFirst, Greeting, Strip,
};
use mysql_lb::wire::protocol::response::{may_be_kill, TrackError, Tracker, MAX_PENDING};

// ---------------------------------------------------------------------------------------------
// codec

/// A logical packet as a scanner reported it, with offsets made absolute in the whole stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub first_seq: u8,
    pub last_seq: u8,
    pub first_chunk_len: usize,
    pub len: u64,
    pub prefix: Vec<u8>,
    pub start: Option<usize>,
    pub end: usize,
}

/// What scanning a stream gave: the packets, then the framing error that stopped it, if any
/// (its `start` made absolute too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    pub packets: Vec<Seen>,
    pub error: Option<FrameError>,
    pub at_boundary: bool,
}

/// Scans `chunks` in order as successive reads, checking every offset against the buffer it is
/// reported in.
pub fn scan_chunks(max_len: u64, chunks: &[&[u8]]) -> Scanned {
    let mut scanner = PacketScanner::new(max_len);
    let mut packets = Vec::new();
    let mut base = 0;
    for chunk in chunks {
        let result = scanner.scan(chunk, |p| {
            assert!(
                p.end >= 1 && p.end <= chunk.len(),
                "packet end {} outside a buffer of {} bytes",
                p.end,
                chunk.len()
            );
            let len = usize::try_from(p.len).unwrap_or(usize::MAX);
            if let Some(start) = p.start {
                assert!(
                    start + 4 + len <= p.end,
                    "packet start {start} + header + {} payload bytes passes its end {} \
                     (buffer of {} bytes)",
                    p.len,
                    p.end,
                    chunk.len()
                );
            }
            assert_eq!(
                p.prefix.len() as u64,
                p.len.min(PREFIX_LEN as u64),
                "prefix length"
            );
            assert!(p.first_chunk_len as u64 <= p.len);
            packets.push(Seen {
                first_seq: p.first_seq,
                last_seq: p.last_seq,
                first_chunk_len: p.first_chunk_len,
                len: p.len,
                prefix: p.prefix.to_vec(),
                start: p.start.map(|s| base + s),
                end: base + p.end,
            });
            Ok::<(), FrameError>(())
        });
        if let Err(e) = result {
            let start = frame_error_start(&e);
            if let Some(s) = start {
                assert!(
                    s + 4 <= chunk.len(),
                    "error start {s} without a whole header in a buffer of {} bytes",
                    chunk.len()
                );
            }
            return Scanned {
                packets,
                error: Some(with_frame_start(e, start.map(|s| base + s))),
                at_boundary: scanner.at_boundary(),
            };
        }
        base += chunk.len();
    }
    Scanned {
        packets,
        error: None,
        at_boundary: scanner.at_boundary(),
    }
}

pub fn frame_error_start(e: &FrameError) -> Option<usize> {
    match *e {
        FrameError::TooLarge { start, .. } | FrameError::ChunkOutOfOrder { start, .. } => start,
    }
}

fn with_frame_start(e: FrameError, start: Option<usize>) -> FrameError {
    match e {
        FrameError::TooLarge { len, max, .. } => FrameError::TooLarge { len, max, start },
        FrameError::ChunkOutOfOrder { expected, got, .. } => FrameError::ChunkOutOfOrder {
            expected,
            got,
            start,
        },
    }
}

/// Chunk sizes for a split chosen by `control`: the low nibble picks the largest chunk, bits 4..7
/// seed the sizes (0: every chunk that large).
pub fn split(stream: &[u8], control: u8) -> Vec<&[u8]> {
    const LARGEST: [usize; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 31, 33, 64, 255, 1024, 4096];
    let largest = LARGEST[usize::from(control & 0x0F)];
    let mut rng = XorShift(u64::from(control >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut chunks = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let size = if control >> 4 == 0 {
            largest
        } else {
            1 + (rng.next_u64() % largest as u64) as usize
        };
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// Byte 0 chooses the split (and, with bit 7, a small size limit); the rest is one direction of
/// a connection. Scanned whole and split, the same packets and the same error must come out.
pub fn codec(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let max_len = if control & 0x80 != 0 { 200 } else { 1 << 30 };
    let whole = scan_chunks(max_len, &[stream]);
    for p in &whole.packets {
        let start = p.start.expect("a packet in a single buffer starts in it");
        if p.first_chunk_len < MAX_CHUNK {
            let payload = &stream[start + 4..p.end];
            assert_eq!(payload.len() as u64, p.len);
            assert_eq!(p.prefix, payload[..payload.len().min(PREFIX_LEN)]);
            assert_eq!(p.first_seq, p.last_seq);
        }
    }
    if whole.error.is_none() {
        let consumed = whole.packets.last().map_or(0, |p| p.end);
        assert_eq!(
            whole.at_boundary,
            consumed == stream.len(),
            "at_boundary disagrees with the bytes left after the last packet"
        );
    }

    let parts = scan_chunks(max_len, &split(stream, control));
    assert_same_scan(&whole, &parts);
}

/// `parts` (a split scan) must report what `whole` did; a start it reports must be the true one.
pub fn assert_same_scan(whole: &Scanned, parts: &Scanned) {
    assert_eq!(
        parts.packets.len(),
        whole.packets.len(),
        "packet count differs"
    );
    for (i, (a, b)) in whole.packets.iter().zip(&parts.packets).enumerate() {
        assert_eq!(
            (
                a.first_seq,
                a.last_seq,
                a.first_chunk_len,
                a.len,
                &a.prefix,
                a.end
            ),
            (
                b.first_seq,
                b.last_seq,
                b.first_chunk_len,
                b.len,
                &b.prefix,
                b.end
            ),
            "packet {i}"
        );
        if b.start.is_some() {
            assert_eq!(
                b.start, a.start,
                "packet {i}: a split scan reported a start that is not the packet's"
            );
        }
    }
    match (&whole.error, &parts.error) {
        (None, None) => assert_eq!(whole.at_boundary, parts.at_boundary),
        (Some(a), Some(b)) => {
            assert_eq!(
                with_frame_start(*a, None),
                with_frame_start(*b, None),
                "framing error differs"
            );
            if let Some(s) = frame_error_start(b) {
                assert_eq!(Some(s), frame_error_start(a), "framing error start");
            }
        }
        (a, b) => panic!("framing error only on one side: whole {a:?}, split {b:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// greeting

/// Where the fixed 31-byte block of a parsable greeting starts (after the version's NUL).
fn greeting_fixed_start(payload: &[u8]) -> usize {
    let nul = payload[1..]
        .iter()
        .position(|&b| b == 0)
        .expect("a parsed greeting has a NUL-terminated version");
    nul + 2
}

fn changed_positions(a: &[u8], b: &[u8]) -> Vec<usize> {
    assert_eq!(a.len(), b.len(), "patching changed the length");
    (0..a.len()).filter(|&i| a[i] != b[i]).collect()
}

/// Parse, patch and re-id a server greeting: patching touches only capability bytes, is
/// idempotent, and the patched bytes parse to what the patch returned; failures touch nothing.
pub fn greeting(data: &[u8]) {
    let parsed = parse_greeting(data);
    let mut patched = data.to_vec();
    let after = patch_greeting(&mut patched);
    let mut with_id = data.to_vec();
    let new_id = 0x6000_0000 ^ data.len() as u32;
    let old_id = set_greeting_connection_id(&mut with_id, new_id);

    let (g, a) = match (parsed, after) {
        (Ok(g), Ok(a)) => (g, a),
        (Err(_), Err(_)) => {
            assert_eq!(patched, data, "a failed patch changed bytes");
            assert!(
                old_id.is_err(),
                "set id succeeded on an unparsable greeting"
            );
            assert_eq!(with_id, data, "a failed set id changed bytes");
            return;
        }
        (p, a) => panic!("parse and patch disagree: {p:?} vs {a:?}"),
    };
    let fixed = greeting_fixed_start(data);
    let caps_bytes = [fixed + 13, fixed + 14, fixed + 18, fixed + 19];
    let mariadb_bytes = fixed + 27..fixed + 31;
    for i in changed_positions(data, &patched) {
        assert!(
            caps_bytes.contains(&i) || mariadb_bytes.contains(&i),
            "patch changed byte {i}, not a capability byte (fixed block at {fixed})"
        );
    }
    if g.capabilities & CLIENT_MYSQL != 0 {
        assert_eq!(
            patched[mariadb_bytes.clone()],
            data[mariadb_bytes],
            "MySQL filler patched"
        );
    }
    let expected = Greeting {
        capabilities: g.capabilities & !UNSUPPORTED,
        mariadb_capabilities: g.mariadb_capabilities & !MARIADB_UNSUPPORTED,
        ..g.clone()
    };
    assert_eq!(a, expected, "patch result");
    assert_eq!(
        parse_greeting(&patched).expect("patched greeting parses"),
        a,
        "patched bytes parse differently from what patch returned"
    );
    let mut twice = patched.clone();
    assert_eq!(patch_greeting(&mut twice).expect("re-patch"), a);
    assert_eq!(twice, patched, "patch is not idempotent");

    let mut stricter = data.to_vec();
    let s = patch_greeting_with(&mut stricter, Strip::UNSUPPORTED.and(CLIENT_LOCAL_FILES))
        .expect("patch with extra bits");
    assert_eq!(s.capabilities, a.capabilities & !CLIENT_LOCAL_FILES);
    assert_eq!(parse_greeting(&stricter).expect("parses"), s);

    assert_eq!(
        old_id.expect("set id on a parsable greeting"),
        g.connection_id
    );
    for i in changed_positions(data, &with_id) {
        assert!((fixed..fixed + 4).contains(&i), "set id changed byte {i}");
    }
    let reparsed = parse_greeting(&with_id).expect("greeting with new id parses");
    assert_eq!(
        reparsed,
        Greeting {
            connection_id: new_id,
            ..g
        }
    );
}

// ---------------------------------------------------------------------------------------------
// handshake response

/// Parse and patch a client's first packet: patching touches only capability bytes, is
/// idempotent, keeps every parsed field but the cleared bits; failures touch nothing.
pub fn handshake_response(data: &[u8]) {
    let first = parse_client_first(data);
    let mut patched = data.to_vec();
    let result = patch_client_first(&mut patched);
    if let Err(e) = result {
        assert_eq!(patched, data, "a failed patch changed bytes ({e})");
        assert!(first.is_err(), "parsed but the patch failed: {e}");
        return;
    }
    let raw_caps = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    for i in changed_positions(data, &patched) {
        assert!(
            i < 4 || (28..32).contains(&i),
            "patch changed byte {i}, not a capability byte"
        );
        if raw_caps & CLIENT_MYSQL != 0 {
            assert!(i < 4, "MySQL client's filler patched (byte {i})");
        }
    }
    let patched_caps = u32::from_le_bytes([patched[0], patched[1], patched[2], patched[3]]);
    assert_eq!(patched_caps, raw_caps & !UNSUPPORTED);
    let mut twice = patched.clone();
    patch_client_first(&mut twice).expect("re-patch");
    assert_eq!(twice, patched, "patch is not idempotent");

    match first {
        Ok(ClientFirst::SslRequest { capabilities }) => {
            assert_eq!(data.len(), 32);
            assert_eq!(capabilities, raw_caps);
        }
        Ok(ClientFirst::Response(r)) => {
            assert_eq!(r.capabilities, raw_caps);
            if raw_caps & CLIENT_MYSQL != 0 {
                assert_eq!(r.mariadb_capabilities, 0);
            }
            match parse_client_first(&patched) {
                Ok(ClientFirst::Response(p)) => {
                    let mut expected = r.clone();
                    expected.capabilities &= !UNSUPPORTED;
                    expected.mariadb_capabilities &= !MARIADB_UNSUPPORTED;
                    assert_eq!(p, expected, "patched response parses to other fields");
                }
                other => panic!("a parsed response no longer parses once patched: {other:?}"),
            }
            for g in reference_greetings() {
                let n = negotiate(&g, &r);
                assert_eq!(n.capabilities & !(g.capabilities & r.capabilities), 0);
                if (g.capabilities | r.capabilities) & CLIENT_MYSQL != 0 {
                    assert_eq!(n.mariadb_capabilities, 0);
                } else {
                    assert_eq!(
                        n.mariadb_capabilities,
                        g.mariadb_capabilities & r.mariadb_capabilities
                    );
                }
            }
        }
        Err(_) => {}
    }
}

/// A MariaDB-like and a MySQL-like greeting to negotiate against.
fn reference_greetings() -> [Greeting; 2] {
    let mariadb = Greeting {
        protocol_version: 10,
        server_version: "5.5.5-10.11.19-MariaDB".into(),
        connection_id: 1,
        capabilities: 0x81FF_F7FE,
        mariadb_capabilities: 0x1D,
        charset: 45,
        status: 2,
        auth_plugin: Some("mysql_native_password".into()),
        is_mariadb: true,
    };
    let mysql = Greeting {
        server_version: "8.0.36".into(),
        capabilities: 0xDFFF_FFFF,
        mariadb_capabilities: 0,
        auth_plugin: Some("caching_sha2_password".into()),
        is_mariadb: false,
        ..mariadb.clone()
    };
    [mariadb, mysql]
}

// ---------------------------------------------------------------------------------------------
// tracker

/// One read the tracker is fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Bytes from the client; `written` calls `on_written` after the scan.
    Client {
        bytes: &'a [u8],
        written: bool,
    },
    Server(&'a [u8]),
}

/// A tracker run decoded from fuzzer bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerInput<'a> {
    pub caps: Negotiated,
    pub max_packet: u64,
    /// Renumber the client's / the server's sequence ids (see `Tracker::renumber`).
    pub renumber: (bool, bool),
    pub segments: Vec<Segment<'a>>,
}

const TRACKER_MAX_PACKET: [u64; 4] = [1 << 30, 16, 1024, MAX_CHUNK as u64 + 1];

/// Byte 0: bit 0 CLIENT_DEPRECATE_EOF, bit 1 MARIADB_CLIENT_PROGRESS, bits 2..3 the client's
/// packet size limit, bits 4 and 5 renumber the client's and the server's ids. Then segments: a tag byte (bit 0 server, else client; bit 1 "written"),
/// a little-endian u16 length (cut to what is left), the bytes.
pub fn decode_tracker(data: &[u8]) -> Option<TrackerInput<'_>> {
    let (&config, mut rest) = data.split_first()?;
    let mut caps = Negotiated::default();
    if config & 1 != 0 {
        caps.capabilities |= CLIENT_DEPRECATE_EOF;
    }
    if config & 2 != 0 {
        caps.mariadb_capabilities |= MARIADB_CLIENT_PROGRESS;
    }
    let max_packet = TRACKER_MAX_PACKET[usize::from((config >> 2) & 3)];
    let mut segments = Vec::new();
    while let Some((&tag, tail)) = rest.split_first() {
        let len = match tail {
            [lo, hi, ..] => usize::from(u16::from_le_bytes([*lo, *hi])),
            _ => 0,
        };
        let body = tail.get(2..).unwrap_or_default();
        let (bytes, tail) = body.split_at(len.min(body.len()));
        segments.push(if tag & 1 != 0 {
            Segment::Server(bytes)
        } else {
            Segment::Client {
                bytes,
                written: tag & 2 != 0,
            }
        });
        rest = tail;
    }
    Some(TrackerInput {
        caps,
        max_packet,
        renumber: (config & 0x10 != 0, config & 0x20 != 0),
        segments,
    })
}

/// The inverse of [`decode_tracker`], for building seeds and proptest inputs.
pub fn encode_tracker(config: u8, segments: &[Segment<'_>]) -> Vec<u8> {
    let mut out = vec![config];
    for s in segments {
        let (tag, bytes) = match *s {
            Segment::Client { bytes, written } => (if written { 2 } else { 0 }, bytes),
            Segment::Server(bytes) => (1, bytes),
        };
        for piece in bytes.chunks(usize::from(u16::MAX)) {
            out.push(tag);
            out.extend_from_slice(&(piece.len() as u16).to_le_bytes());
            out.extend_from_slice(piece);
        }
    }
    out
}

/// What a tracker run observed, for tests that go beyond "nothing broke".
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TrackerRun {
    /// Commands the client scans queued.
    pub commands: usize,
    /// Command bytes of the `Completed` reports, in order.
    pub completed: Vec<u8>,
    pub error: Option<TrackError>,
    pub pending: usize,
    pub idle: bool,
    /// The bytes the tracker let through, per direction, as rewritten: what a relay forwards
    /// (held client bytes last, as a relay would once the stream ends).
    pub client_out: Vec<u8>,
    pub server_out: Vec<u8>,
}

/// Feeds decoded segments to a tracker: it must never panic, keep `pending()` bounded and
/// consistent with what it reported, blame the side that sent the bytes, and report offsets
/// inside the buffer just scanned. Stops at the first error, as the relay does. A direction it
/// renumbers must change nothing but the sequence bytes of packet headers, and never be refused
/// for an id.
pub fn run_tracker(input: &TrackerInput<'_>) -> TrackerRun {
    let mut tracker = Tracker::new(input.caps, input.max_packet);
    tracker.renumber(input.renumber.0, input.renumber.1);
    let mut run = TrackerRun::default();
    let base = Instant::now();
    // Client bytes the tracker held back (a KILL not whole yet) come again first, as in the relay.
    let mut held = Vec::new();
    for (i, segment) in input.segments.iter().enumerate() {
        let now = base + Duration::from_micros(i as u64);
        let step = match *segment {
            Segment::Client { bytes, written } => {
                held.extend_from_slice(bytes);
                let buf = std::mem::take(&mut held);
                client_step(
                    &mut tracker,
                    &mut run,
                    buf,
                    &mut held,
                    written.then_some(now),
                )
            }
            Segment::Server(bytes) => server_step(&mut tracker, &mut run, bytes, now),
        };
        if let Err(e) = step {
            assert!(
                !renumbered_id_refused(&e, input.renumber),
                "a renumbered direction refused for its ids: {e}"
            );
            run.error = Some(e);
            break;
        }
        let pending = tracker.pending();
        assert!(pending <= MAX_PENDING, "pending {pending} over the bound");
        assert!(
            pending + run.completed.len() <= run.commands,
            "pending {pending} + completed {} > commands {}",
            run.completed.len(),
            run.commands
        );
        if tracker.idle() {
            assert_eq!(pending, 0);
        }
    }
    run.client_out.extend_from_slice(&held);
    run.pending = tracker.pending();
    run.idle = tracker.idle();
    run
}

/// One client read: `buf` is what was held plus the new bytes; what the tracker holds back
/// goes to `held`, what it lets through to `run.client_out`.
fn client_step(
    tracker: &mut Tracker,
    run: &mut TrackerRun,
    mut buf: Vec<u8>,
    held: &mut Vec<u8>,
    written: Option<Instant>,
) -> Result<(), TrackError> {
    let before = buf.clone();
    let result = tracker.on_client_mut(&mut buf);
    check_rewrites(&run.client_out, &before, &buf);
    match result {
        Ok(scan) => {
            run.commands += scan.commands;
            assert!(
                scan.held <= buf.len(),
                "held {} of {}",
                scan.held,
                buf.len()
            );
            for &(start, end) in tracker.kill_candidates() {
                check_kill_packet(&buf, start, end);
                assert!(end <= buf.len() - scan.held, "a held KILL reported whole");
            }
            let keep = buf.len() - scan.held;
            run.client_out.extend_from_slice(&buf[..keep]);
            *held = buf[keep..].to_vec();
            if let Some(now) = written {
                tracker.on_written(now);
            }
            Ok(())
        }
        Err(e) => {
            assert!(e.is_client(), "client bytes blamed on the backend: {e}");
            check_error_start(&e, &buf);
            run.client_out
                .extend_from_slice(&buf[..e.start().unwrap_or(0)]);
            Err(e)
        }
    }
}

fn server_step(
    tracker: &mut Tracker,
    run: &mut TrackerRun,
    bytes: &[u8],
    now: Instant,
) -> Result<(), TrackError> {
    let mut buf = bytes.to_vec();
    let completed = &mut run.completed;
    let result = tracker.on_server_mut(&mut buf, now, |c| {
        assert!(c.first_byte <= c.latency, "{c:?}");
        completed.push(c.command);
    });
    check_rewrites(&run.server_out, bytes, &buf);
    match result {
        Ok(()) => {
            run.server_out.extend_from_slice(&buf);
            Ok(())
        }
        Err(e) => {
            assert!(!e.is_client(), "backend bytes blamed on the client: {e}");
            check_error_start(&e, bytes);
            run.server_out
                .extend_from_slice(&buf[..e.start().unwrap_or(0)]);
            Err(e)
        }
    }
}

/// True for an error about sequence ids from a direction the tracker renumbers.
fn renumbered_id_refused(e: &TrackError, (client, server): (bool, bool)) -> bool {
    let chunk = |f: &FrameError| matches!(f, FrameError::ChunkOutOfOrder { .. });
    match e {
        TrackError::ClientOutOfOrder { .. } => client,
        TrackError::ClientFrame(f) => client && chunk(f),
        TrackError::BackendOutOfOrder { .. } => server,
        TrackError::BackendFrame(f) => server && chunk(f),
        _ => false,
    }
}

/// A scan of `before` (which continues the stream `sent`, a packet boundary apart from a
/// partial packet in progress) left `after`: every byte that differs must be the sequence byte
/// of a packet header, found by walking the headers from the start of the stream.
fn check_rewrites(sent: &[u8], before: &[u8], after: &[u8]) {
    assert_eq!(
        before.len(),
        after.len(),
        "a scan changed the buffer's length"
    );
    if before == after {
        return;
    }
    let stream = [sent, before].concat();
    let mut seq_bytes = Vec::new();
    let mut at = 0;
    while at + 4 <= stream.len() {
        seq_bytes.push(at + 3);
        at += 4 + u32::from_le_bytes([stream[at], stream[at + 1], stream[at + 2], 0]) as usize;
    }
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if b != a {
            assert!(
                seq_bytes.binary_search(&(sent.len() + i)).is_ok(),
                "byte {i} of the buffer changed ({b:#04x} -> {a:#04x}) and is no header's id"
            );
        }
    }
}

/// The fuzz target: decode, then [`run_tracker`].
pub fn tracker(data: &[u8]) {
    if let Some(input) = decode_tracker(data) {
        run_tracker(&input);
    }
}

fn check_error_start(e: &TrackError, buf: &[u8]) {
    if let Some(start) = e.start() {
        assert!(
            start + 4 <= buf.len(),
            "error start {start} without a whole header in a buffer of {} bytes ({e})",
            buf.len()
        );
    }
}

/// A KILL candidate must be one whole command packet lying in the buffer, as the relay slices it.
fn check_kill_packet(buf: &[u8], start: usize, end: usize) {
    let whole_packet = start + 4 < end
        && end <= buf.len()
        && u32::from_le_bytes([buf[start], buf[start + 1], buf[start + 2], 0]) as usize + 4
            == end - start;
    assert!(
        whole_packet,
        "kill offsets {start}..{end} in a buffer of {} bytes",
        buf.len()
    );
    let packet = &buf[start..end];
    let len = u32::from_le_bytes([packet[0], packet[1], packet[2], 0]) as usize;
    assert_eq!(len + 4, packet.len(), "kill offsets do not span one packet");
    assert_eq!(packet[3], 0, "a command packet has sequence id 0");
    assert!(may_be_kill(&packet[4..]));
    if let Some(k) = kill::parse(&packet[4..]) {
        assert!(k.prefix.is_empty() || k.prefix.to_ascii_uppercase().starts_with("KILL"));
    }
}

// ---------------------------------------------------------------------------------------------
// compress

/// What decoding raw frames gave: the plain bytes, and the fault that stopped it, if any.
#[derive(Debug)]
pub struct Decoded {
    pub plain: Vec<u8>,
    pub error: Option<CompressError>,
    pub at_boundary: bool,
    pub last_seq: Option<u8>,
}

/// Decodes `chunks` as successive reads, into output rooms of `room` bytes at a time.
pub fn decode_chunks(chunks: &[&[u8]], room: usize) -> Decoded {
    let mut d = FrameDecoder::new();
    let mut plain = Vec::new();
    let mut out = vec![0u8; room];
    for chunk in chunks {
        let mut pos = 0;
        loop {
            match d.decode_into(&chunk[pos..], &mut out) {
                Ok(p) => {
                    assert!(p.consumed <= chunk.len() - pos && p.written <= room);
                    plain.extend_from_slice(&out[..p.written]);
                    pos += p.consumed;
                    if p.consumed == 0 && p.written == 0 {
                        assert_eq!(pos, chunk.len(), "stalled with input left");
                        break;
                    }
                }
                Err(e) => {
                    return Decoded {
                        plain,
                        error: Some(e),
                        at_boundary: d.at_boundary(),
                        last_seq: d.last_seq(),
                    }
                }
            }
        }
    }
    let error = d.failure().cloned();
    Decoded {
        plain,
        error,
        at_boundary: d.at_boundary(),
        last_seq: d.last_seq(),
    }
}

/// The most plain bytes `raw` may decode to: what each header (whole or begun) declares.
fn declared_bound(raw: &[u8]) -> usize {
    let mut bound = 0;
    let mut pos = 0;
    while raw.len() - pos >= HEADER_LEN {
        let h = &raw[pos..pos + HEADER_LEN];
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let ulen = u32::from_le_bytes([h[4], h[5], h[6], 0]) as usize;
        bound += if ulen > 0 { ulen } else { len };
        pos += HEADER_LEN + len.min(raw.len() - pos - HEADER_LEN);
    }
    bound
}

/// The same fault, or the two that one frame may give depending on output room: zlib decodes
/// ahead as far as the room allows, so corrupt data past the declared length is found as
/// corruption with room to spare and as a too-long payload without.
fn same_fault(a: &CompressError, b: &CompressError) -> bool {
    use mysql_lb::wire::protocol::compress::Inflated::MoreThanDeclared;
    let seq = |e: &CompressError| match e {
        CompressError::Corrupt { seq, .. } | CompressError::LengthMismatch { seq, .. } => *seq,
    };
    let either = |e: &CompressError| {
        matches!(
            e,
            CompressError::Corrupt { .. }
                | CompressError::LengthMismatch {
                    inflated: MoreThanDeclared,
                    ..
                }
        )
    };
    match (a, b) {
        (CompressError::Corrupt { seq: x, .. }, CompressError::Corrupt { seq: y, .. }) => x == y,
        _ if either(a) && either(b) => seq(a) == seq(b),
        _ => a == b,
    }
}

/// Byte 0 chooses the split, the output room, the role and the level; the rest is decoded as
/// raw frames (whole and split: same bytes, same fault, never more than the headers declare)
/// and, as plain bytes, encoded and decoded back in both roles.
pub fn compress(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let whole = decode_chunks(&[rest], 64 * 1024);
    assert!(
        whole.plain.len() <= declared_bound(rest),
        "inflated past the declared lengths"
    );
    let room = [1, 7, 100, 4096][usize::from(control >> 6)];
    let parts = decode_chunks(&split(rest, control), room);
    match (&whole.error, &parts.error) {
        (None, None) => {
            assert!(
                whole.plain == parts.plain,
                "split decoding gave other bytes"
            );
            assert_eq!(whole.at_boundary, parts.at_boundary);
            assert_eq!(whole.last_seq, parts.last_seq);
        }
        (Some(a), Some(b)) => {
            assert!(same_fault(a, b), "faults differ: whole {a}, split {b}");
            let n = whole.plain.len().min(parts.plain.len());
            assert!(
                whole.plain[..n] == parts.plain[..n],
                "bytes before the fault differ"
            );
        }
        (a, b) => panic!("a fault on one side only: whole {a:?}, split {b:?}"),
    }
    let level = [0, 1, 6, 9][usize::from(control >> 4 & 3)];
    for role in [Role::Server, Role::Client] {
        round_trip(rest, &split(rest, control.rotate_left(3)), role, level);
    }
    framed_round_trip(rest, &split(rest, control.rotate_left(5)), level);
}

/// Writes `writes` through the server role's packet framer: it holds no more than its bounds,
/// numbers frames on from the client's, and its frames decode back to `plain`.
fn framed_round_trip(plain: &[u8], writes: &[&[u8]], level: u32) {
    let mut e = FrameEncoder::with_level(Role::Server, level);
    e.on_frame_read(0xFE);
    let mut framer = ServerFramer::default();
    let mut wire = BytesMut::new();
    for w in writes {
        framer.write(&mut e, w, &mut wire);
        assert!(framer.held() <= STAGE_MAX + HEAD_MAX + w.len() + (64 << 10));
    }
    framer.finish(&mut e, &mut wire);
    assert_eq!(framer.held(), 0);
    let mut pos = 0;
    let mut expected_seq = 0xFFu8;
    while pos < wire.len() {
        let h = &wire[pos..pos + HEADER_LEN];
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        assert_eq!(h[3], expected_seq, "frames count on from the client's + 1");
        expected_seq = expected_seq.wrapping_add(1);
        pos += HEADER_LEN + len;
    }
    let back = decode_chunks(&[&wire], 64 * 1024);
    assert!(back.error.is_none(), "own frames fail: {:?}", back.error);
    assert!(back.plain == plain, "the framer changed the bytes");
}

/// Encodes `writes` in `role`, checks every frame's header, and decodes them back to `plain`.
fn round_trip(plain: &[u8], writes: &[&[u8]], role: Role, level: u32) {
    let mut e = FrameEncoder::with_level(role, level);
    e.on_frame_read(0xFE);
    let mut wire = BytesMut::new();
    for w in writes {
        e.encode(w, &mut wire);
        assert!(e.held_back() < 4);
    }
    e.finish(&mut wire);
    assert_eq!(e.held_back(), 0);
    let mut pos = 0;
    let mut expected_seq = 0xFFu8;
    let mut framed = 0;
    while pos < wire.len() {
        let h = &wire[pos..pos + HEADER_LEN];
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let ulen = u32::from_le_bytes([h[4], h[5], h[6], 0]) as usize;
        assert!(len <= MAX_FRAME_PAYLOAD && ulen <= MAX_FRAME_PAYLOAD);
        if ulen == 0 {
            framed += len;
        } else {
            assert!(
                ulen >= MIN_COMPRESS_LEN && len < ulen,
                "compressed {ulen} into {len}"
            );
            framed += ulen;
        }
        if role == Role::Server {
            assert_eq!(
                h[3], expected_seq,
                "server frames count on from the client's + 1"
            );
            expected_seq = expected_seq.wrapping_add(1);
        }
        pos += HEADER_LEN + len;
    }
    assert_eq!(framed, plain.len());
    let back = decode_chunks(&[&wire], 64 * 1024);
    assert!(back.error.is_none(), "own frames fail: {:?}", back.error);
    assert!(back.plain == plain, "{role:?} round trip changed the bytes");
    assert!(back.at_boundary);
}

// ---------------------------------------------------------------------------------------------

/// Deterministic xorshift64 (seed 0 is mapped away from the fixed point).
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        if self.0 == 0 {
            self.0 = 0x2545_F491_4F6C_DD1D;
        }
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
