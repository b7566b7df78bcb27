//! The relay's per-read work, measured apart from any socket: packet scanning, response tracking
//! and handshake patching over byte streams captured from a real MariaDB 10.11.
//!
//! The fixtures (`benches/fixtures/*.bin`, made by `benches/load/capture.py`, format described
//! there) are one sysbench connection each, recorded read by read by a relay between sysbench and
//! the server: `oltp_point_select` (100 point selects) and `oltp_read_only` (two transactions of
//! point and range queries). A 10,000-row result set is built from the captured 100-row range
//! query by repeating its rows with fresh sequence ids, and fed in 16 KiB reads as a relay would
//! see it. Everything is parsed and checked once before the timed loops, which only scan.
//!
//! `cargo bench --bench hot_path` measures; `cargo test --benches` runs each bench once.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use mysql_lb::wire::protocol::caps::Negotiated;
use mysql_lb::wire::protocol::codec::{header, FrameError, PacketScanner};
use mysql_lb::wire::protocol::handshake::{self, ClientFirst};
use mysql_lb::wire::protocol::response::Tracker;

const POINT_SELECT: &[u8] = include_bytes!("fixtures/point_select.bin");
const READ_ONLY: &[u8] = include_bytes!("fixtures/read_only.bin");
const MAX_PACKET: u64 = 1 << 30;
const READ_SIZE: usize = 16 * 1024;
const BIG_ROWS: usize = 10_000;

/// One command and its response, each as the list of reads the relay saw.
struct Exchange {
    client: Vec<Vec<u8>>,
    server: Vec<Vec<u8>>,
}

/// A captured connection, split into its handshake and command phase.
struct Capture {
    greeting: Vec<u8>,
    response: Vec<u8>,
    caps: Negotiated,
    exchanges: Vec<Exchange>,
}

fn records(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let [dir, a, b, c, d, rest @ ..] = bytes {
        let len = u32::from_le_bytes([*a, *b, *c, *d]) as usize;
        assert!(rest.len() >= len, "fixture truncated");
        out.push((*dir, rest[..len].to_vec()));
        bytes = &rest[len..];
    }
    assert!(bytes.is_empty(), "fixture has a torn record header");
    out
}

/// The payload of a read holding exactly one packet.
fn single_payload(read: &[u8]) -> Vec<u8> {
    let len = u32::from_le_bytes([read[0], read[1], read[2], 0]) as usize;
    assert_eq!(read.len(), len + 4, "expected one whole packet in the read");
    read[4..].to_vec()
}

fn load(fixture: &[u8]) -> Capture {
    let recs = records(fixture);
    // Greeting, handshake response, auth OK (the bench account uses the server's default
    // plugin, so there is no auth switch); the command phase follows.
    let [(b's', greeting), (b'c', response), (b's', ok), rest @ ..] = recs.as_slice() else {
        panic!("fixture does not start with greeting, response, OK");
    };
    assert_eq!(ok[4], 0x00, "auth did not end with OK");
    let mut greeting = single_payload(greeting);
    let mut response = single_payload(response);
    let pristine = (greeting.clone(), response.clone());
    // Negotiate as the relay does: over the bits actually forwarded.
    let g = handshake::patch_greeting(&mut greeting).expect("fixture greeting parses");
    handshake::patch_client_first(&mut response).expect("fixture response parses");
    let ClientFirst::Response(r) =
        handshake::parse_client_first(&response).expect("fixture response parses")
    else {
        panic!("fixture has an SSLRequest");
    };
    let caps = handshake::negotiate(&g, &r);

    let mut exchanges: Vec<Exchange> = Vec::new();
    for (dir, bytes) in rest {
        match (*dir, exchanges.last_mut()) {
            (b'c', Some(last)) if last.server.is_empty() => last.client.push(bytes.clone()),
            (b'c', _) => exchanges.push(Exchange {
                client: vec![bytes.clone()],
                server: Vec::new(),
            }),
            (b's', Some(last)) => last.server.push(bytes.clone()),
            _ => panic!("server bytes before any command"),
        }
    }
    // The last command is COM_QUIT, which has no response.
    if exchanges.last().is_some_and(|e| e.server.is_empty()) {
        exchanges.pop();
    }
    Capture {
        greeting: pristine.0,
        response: pristine.1,
        caps,
        exchanges,
    }
}

/// Splits a stream into (seq, payload) packets (whole packets only, under 16 MiB).
fn packets(stream: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let len = u32::from_le_bytes([stream[pos], stream[pos + 1], stream[pos + 2], 0]) as usize;
        out.push((stream[pos + 3], &stream[pos + 4..pos + 4 + len]));
        pos += 4 + len;
    }
    out
}

/// The captured `SELECT c … BETWEEN` (100 rows) grown to `rows` rows: column count, column
/// definition, EOF, rows cycling through the captured ones, EOF; sequence ids renumbered.
fn big_result(capture: &Capture, rows: usize) -> (Vec<u8>, Vec<u8>) {
    let range = capture
        .exchanges
        .iter()
        .find(|e| {
            let q = String::from_utf8_lossy(&e.client[0][5..]).into_owned();
            q.contains("BETWEEN") && q.starts_with("SELECT c ") && !q.contains("ORDER")
        })
        .expect("fixture has a simple range query");
    let server: Vec<u8> = range.server.concat();
    let pkts = packets(&server);
    let columns = usize::from(pkts[0].1[0]);
    let head = &pkts[..columns + 2];
    let (eof, body) = pkts[columns + 2..].split_last().expect("rows and EOF");
    assert_eq!(eof.1[0], 0xFE, "range result ends with EOF");
    let mut out = Vec::new();
    for (seq, payload) in head {
        out.extend_from_slice(&header(payload.len(), *seq));
        out.extend_from_slice(payload);
    }
    let mut seq = head.last().map_or(0, |p| p.0);
    for i in 0..rows {
        seq = seq.wrapping_add(1);
        let payload = body[i % body.len()].1;
        out.extend_from_slice(&header(payload.len(), seq));
        out.extend_from_slice(payload);
    }
    out.extend_from_slice(&header(eof.1.len(), seq.wrapping_add(1)));
    out.extend_from_slice(eof.1);
    (range.client.concat(), out)
}

fn scan_reads(scanner: &mut PacketScanner, reads: &[Vec<u8>]) -> usize {
    let mut n = 0;
    for read in reads {
        scanner
            .scan(read, |_| {
                n += 1;
                Ok::<(), FrameError>(())
            })
            .expect("fixture scans");
    }
    n
}

/// Plays exchanges through a tracker the way the relay calls it; returns commands completed.
fn track(tracker: &mut Tracker, exchanges: &[Exchange], now: Instant) -> usize {
    let mut done = 0;
    for e in exchanges {
        for read in &e.client {
            tracker.on_client(read).expect("client bytes track");
        }
        tracker.on_written(now);
        for read in &e.server {
            tracker
                .on_server(read, now, |c| {
                    black_box(c);
                    done += 1;
                })
                .expect("server bytes track");
        }
    }
    done
}

fn server_reads(exchanges: &[Exchange]) -> Vec<Vec<u8>> {
    exchanges.iter().flat_map(|e| e.server.clone()).collect()
}

fn bytes(reads: &[Vec<u8>]) -> u64 {
    reads.iter().map(|r| r.len() as u64).sum()
}

fn benches(c: &mut Criterion) {
    let point = load(POINT_SELECT);
    let read_only = load(READ_ONLY);
    let (big_query, big_stream) = big_result(&read_only, BIG_ROWS);
    let big = [Exchange {
        client: vec![big_query],
        server: big_stream.chunks(READ_SIZE).map(<[u8]>::to_vec).collect(),
    }];
    let point_reads = server_reads(&point.exchanges);
    let ro_reads = server_reads(&read_only.exchanges);
    let now = Instant::now();

    // Checked once here so the timed loops measure work, not surprises.
    let mut s = PacketScanner::new(MAX_PACKET);
    assert_eq!(scan_reads(&mut s, &point_reads), 100 * 5);
    assert_eq!(scan_reads(&mut s, &big[0].server), 3 + BIG_ROWS + 1);
    assert!(s.at_boundary());
    let mut t = Tracker::new(point.caps, MAX_PACKET);
    assert_eq!(track(&mut t, &point.exchanges, now), 100);
    assert!(t.idle());
    let mut t = Tracker::new(read_only.caps, MAX_PACKET);
    assert_eq!(
        track(&mut t, &read_only.exchanges, now),
        read_only.exchanges.len()
    );
    assert_eq!(track(&mut t, &big, now), 1);
    assert!(t.idle());

    let mut g = c.benchmark_group("scan");
    g.throughput(Throughput::Bytes(bytes(&point_reads)));
    g.bench_function("point_select_100_responses", |b| {
        let mut s = PacketScanner::new(MAX_PACKET);
        b.iter(|| scan_reads(&mut s, black_box(&point_reads)))
    });
    g.throughput(Throughput::Bytes(bytes(&ro_reads)));
    g.bench_function("read_only_2_transactions", |b| {
        let mut s = PacketScanner::new(MAX_PACKET);
        b.iter(|| scan_reads(&mut s, black_box(&ro_reads)))
    });
    g.throughput(Throughput::Bytes(big_stream.len() as u64));
    g.bench_function("result_10k_rows_16KiB_reads", |b| {
        let mut s = PacketScanner::new(MAX_PACKET);
        b.iter(|| scan_reads(&mut s, black_box(&big[0].server)))
    });
    g.finish();

    let mut g = c.benchmark_group("tracker");
    g.throughput(Throughput::Elements(point.exchanges.len() as u64));
    g.bench_function("point_select_round_trips", |b| {
        let mut t = Tracker::new(point.caps, MAX_PACKET);
        b.iter(|| track(&mut t, black_box(&point.exchanges), now))
    });
    g.throughput(Throughput::Elements(read_only.exchanges.len() as u64));
    g.bench_function("read_only_2_transactions", |b| {
        let mut t = Tracker::new(read_only.caps, MAX_PACKET);
        b.iter(|| track(&mut t, black_box(&read_only.exchanges), now))
    });
    g.throughput(Throughput::Bytes(big_stream.len() as u64));
    g.bench_function("result_10k_rows_16KiB_reads", |b| {
        let mut t = Tracker::new(read_only.caps, MAX_PACKET);
        b.iter(|| track(&mut t, black_box(&big), now))
    });
    g.finish();

    let mut g = c.benchmark_group("handshake");
    g.bench_function("patch_greeting", |b| {
        b.iter_batched_ref(
            || point.greeting.clone(),
            |greeting| handshake::patch_greeting(greeting).expect("greeting patches"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("patch_client_first", |b| {
        b.iter_batched_ref(
            || point.response.clone(),
            |response| handshake::patch_client_first(response).expect("response patches"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("parse_client_first", |b| {
        b.iter(|| {
            handshake::parse_client_first(black_box(&point.response)).expect("response parses")
        })
    });
    g.finish();
}

criterion_group! {
    name = hot_path;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(hot_path);
