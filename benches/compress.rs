//! CPU cost of the compressed protocol per query, so a compressed session's price can be stated.
//!
//! Two cases, each framed (encode) and unframed (decode) on both legs' sides, at zlib level 6
//! (the servers' default) and level 1:
//! - a point select round trip, the query and response bytes captured from sysbench
//!   `oltp_point_select` against MariaDB 10.11 (`fixtures/point_select.bin`): the 40-byte query is
//!   stored (under 50 bytes), the 197-byte response compressed;
//! - a 1,000-row text result set shaped like sysbench's `SELECT c FROM sbtest` rows (120-byte
//!   `c` columns of digit groups), written in 16 KiB pieces as the relay writes;
//! - one 16 MiB value (level 6 only), of one repeated byte and of 16 byte values in a hashed
//!   order that zlib makes about 17 times smaller, written in 64 KiB pieces (the client leg
//!   sends a value that shrinks less than ~128 times mostly stored: see docs/src/compression.md).
//!
//! Responses go through the client leg's stream (`Compressed` in the server role, as mysql-lb
//! writes to a compressed client), queries through the backend leg's encoder.
//!
//! Before criterion runs, one line per case gives plain MB/s and ns per round trip, and the
//! memory the zlib states take (counted by a wrapping allocator). `cargo bench --bench compress`
//! measures; `cargo test --benches` runs everything once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{Criterion, Throughput};

use mysql_lb::net::stream::compressed::Compressed;
use mysql_lb::wire::protocol::compress::{FrameDecoder, FrameEncoder, Role};
use tokio::io::AsyncWrite;

const POINT_SELECT: &[u8] = include_bytes!("fixtures/point_select.bin");
const WRITE_SIZE: usize = 16 * 1024;
const VALUE_WRITE_SIZE: usize = 64 * 1024;
const ROWS: usize = 1000;

/// Counts live heap bytes, to report what the zlib states cost.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The first command-phase query and its response from the capture (records are
/// `direction | u32 LE length | bytes`; greeting, response and OK come first).
fn point_select() -> (Vec<u8>, Vec<u8>) {
    let mut records = Vec::new();
    let mut b = POINT_SELECT;
    while let [dir, l0, l1, l2, l3, rest @ ..] = b {
        let len = u32::from_le_bytes([*l0, *l1, *l2, *l3]) as usize;
        records.push((*dir, rest[..len].to_vec()));
        b = &rest[len..];
    }
    let (q, r) = (&records[3], &records[4]);
    assert_eq!((q.0, r.0), (b'c', b's'));
    assert_eq!(q.1[4], 0x03, "a COM_QUERY");
    (q.1.clone(), r.1.clone())
}

/// Column count, one column definition, EOF, `rows` rows of a 120-byte `c`, EOF.
fn result_set(rows: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = 1u8;
    let mut put = |payload: &[u8], out: &mut Vec<u8>| {
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes()[..3]);
        out.push(seq);
        seq = seq.wrapping_add(1);
        out.extend_from_slice(payload);
    };
    put(&[1], &mut out);
    put(b"\x03def\x06sbtest\x07sbtest1\x07sbtest1\x01c\x01c\x0c\x2d\x00\xe0\x01\x00\x00\xfe\x01\x10\x00\x00\x00", &mut out);
    put(&[0xfe, 0, 0, 0x22, 0], &mut out);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..rows {
        let mut c = Vec::with_capacity(121);
        c.push(119);
        for group in 0..10 {
            if group > 0 {
                c.push(b'-');
            }
            for _ in 0..11 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.push(b'0' + (x % 10) as u8);
            }
        }
        c.truncate(120);
        put(&c, &mut out);
    }
    put(&[0xfe, 0, 0, 0x22, 0], &mut out);
    out
}

/// Frames `writes` as one leg would and unframes them as the other: one direction's work.
fn one_way(
    enc: &mut FrameEncoder,
    dec: &mut FrameDecoder,
    writes: &[&[u8]],
    wire: &mut BytesMut,
    plain: &mut BytesMut,
) {
    wire.clear();
    plain.clear();
    for w in writes {
        enc.encode(w, wire);
    }
    dec.decode(wire, plain).expect("own frames decode");
}

/// Writes `writes` through `leg` (the client leg's stream, server role, over a Vec that takes
/// every byte at once) and unframes what it wrote: the response's way through mysql-lb.
fn through_leg(
    leg: &mut Compressed<Vec<u8>>,
    dec: &mut FrameDecoder,
    writes: &[&[u8]],
    plain: &mut BytesMut,
) -> usize {
    let mut cx = Context::from_waker(Waker::noop());
    leg.get_mut().clear();
    plain.clear();
    for w in writes {
        let mut at = 0;
        while at < w.len() {
            match Pin::new(&mut *leg).poll_write(&mut cx, &w[at..]) {
                Poll::Ready(Ok(n)) => at += n,
                other => panic!("a write to a Vec: {other:?}"),
            }
        }
    }
    dec.decode(leg.get_ref(), plain).expect("own frames decode");
    leg.get_ref().len()
}

struct Session {
    client_enc: FrameEncoder,
    server_dec: FrameDecoder,
    client_leg: Compressed<Vec<u8>>,
    client_dec: FrameDecoder,
    wire: BytesMut,
    plain: BytesMut,
}

impl Session {
    fn new(level: u32) -> Self {
        Self {
            client_enc: FrameEncoder::with_level(Role::Client, level),
            server_dec: FrameDecoder::new(),
            client_leg: Compressed::with_level(Vec::new(), Role::Server, BytesMut::new(), level),
            client_dec: FrameDecoder::new(),
            wire: BytesMut::new(),
            plain: BytesMut::new(),
        }
    }

    /// Query one way, response the other; returns the response's wire bytes.
    fn round_trip(&mut self, query: &[u8], response: &[&[u8]]) -> usize {
        one_way(
            &mut self.client_enc,
            &mut self.server_dec,
            &[query],
            &mut self.wire,
            &mut self.plain,
        );
        let wire = through_leg(
            &mut self.client_leg,
            &mut self.client_dec,
            response,
            &mut self.plain,
        );
        self.client_enc
            .on_frame_read(self.client_dec.last_seq().unwrap_or(0));
        wire
    }
}

fn summary(name: &str, level: u32, query: &[u8], response: &[u8], writes: usize) {
    let pieces: Vec<&[u8]> = response.chunks(writes).collect();
    let mut s = Session::new(level);
    let wire = s.round_trip(query, &pieces);
    assert_eq!(&s.plain[..], response, "round trip changed the response");
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < Duration::from_millis(700) || n < 3 {
        for _ in 0..16 {
            black_box(s.round_trip(black_box(query), black_box(&pieces)));
        }
        n += 16;
    }
    let per = started.elapsed() / n as u32;
    let plain = (query.len() + response.len()) as f64;
    println!(
        "compress {name:<24} level {level}: {:>9} ns per round trip, {:>7.1} MB/s of plain bytes, response {} -> {} bytes on the wire",
        per.as_nanos(),
        plain / per.as_secs_f64() / 1e6,
        response.len(),
        wire
    );
}

fn state_sizes() {
    let before = LIVE.load(Ordering::Relaxed);
    let mut enc = FrameEncoder::new(Role::Server);
    let mut wire = BytesMut::with_capacity(4096);
    let with_buffer = LIVE.load(Ordering::Relaxed);
    enc.encode(&[b'a'; 200], &mut wire);
    let deflate = LIVE.load(Ordering::Relaxed) - with_buffer;
    let mut dec = FrameDecoder::new();
    let mut plain = BytesMut::with_capacity(4096);
    let with_buffer2 = LIVE.load(Ordering::Relaxed);
    dec.decode(&wire, &mut plain).expect("decodes");
    let inflate = LIVE.load(Ordering::Relaxed) - with_buffer2;
    println!(
        "compress zlib state per stream: deflate {} KiB, inflate {} KiB (dropped by shrink(); {} KiB before first use)",
        deflate / 1024,
        inflate / 1024,
        (with_buffer - before) / 1024
    );
}

/// A 16 MiB text-protocol value as its plain chunks (0xFFFFFF-long ones continue); `fill`
/// gives the byte at each offset.
fn big_value(fill: impl Fn(usize) -> u8) -> Vec<u8> {
    let len = 16 << 20;
    let mut payload = vec![0xFE];
    payload.extend_from_slice(&(len as u64).to_le_bytes());
    payload.extend((0..len).map(fill));
    let mut out = Vec::with_capacity(payload.len() + 16);
    let mut seq = 1u8;
    for chunk in payload.chunks(0xFF_FFFF) {
        out.extend_from_slice(&(chunk.len() as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(chunk);
        seq = seq.wrapping_add(1);
    }
    out
}

fn varied(i: usize) -> u8 {
    let x = (i as u64 ^ 0x9E37_79B9_7F4A_7C15).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    b'a' + ((x ^ (x >> 31)) >> 60) as u8
}

fn main() {
    let (query, response) = point_select();
    let rows = result_set(ROWS);
    let values = [
        ("value_16_mib_repeated", big_value(|_| b'x')),
        ("value_16_mib_varied", big_value(varied)),
    ];
    state_sizes();
    for level in [6, 1] {
        summary("point_select", level, &query, &response, WRITE_SIZE);
        summary("result_1000_rows", level, &query, &rows, WRITE_SIZE);
    }
    for (name, value) in &values {
        summary(name, 6, &query, value, VALUE_WRITE_SIZE);
    }

    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut g = c.benchmark_group("compress");
    for level in [6, 1] {
        let point = [&response[..]];
        g.throughput(Throughput::Bytes((query.len() + response.len()) as u64));
        g.bench_function(format!("point_select_round_trip_level_{level}"), |b| {
            let mut s = Session::new(level);
            b.iter(|| s.round_trip(black_box(&query), black_box(&point)))
        });
        let pieces: Vec<&[u8]> = rows.chunks(WRITE_SIZE).collect();
        g.throughput(Throughput::Bytes((query.len() + rows.len()) as u64));
        g.bench_function(format!("result_1000_rows_level_{level}"), |b| {
            let mut s = Session::new(level);
            b.iter(|| s.round_trip(black_box(&query), black_box(&pieces)))
        });
    }
    for (name, value) in &values {
        let pieces: Vec<&[u8]> = value.chunks(VALUE_WRITE_SIZE).collect();
        g.throughput(Throughput::Bytes((query.len() + value.len()) as u64));
        g.bench_function(format!("{name}_level_6"), |b| {
            let mut s = Session::new(6);
            b.iter(|| s.round_trip(black_box(&query), black_box(&pieces)))
        });
    }
    g.finish();
    c.final_summary();
}
