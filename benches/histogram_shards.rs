//! What recording a command's latency costs when several worker threads share one backend.
//!
//! Every worker thread that relays to a backend records into that backend's histograms
//! (`BackendStats::record`: two observations, each a few atomic adds on the same cache lines), so
//! the lines bounce between cores. The alternative is one histogram set per worker, merged when
//! /metrics is scraped. This bench measures both from 1, 2 and 4 threads:
//!
//! - `shared`: every thread records into the same histograms (a `Metrics` that knows of one
//!   worker keeps one shard per backend, so every worker index lands on it);
//! - `sharded`: thread i records as worker i, on its own shard (what the proxy does; the merge
//!   happens at scrape time, off the hot path).
//!
//! One iteration is one record by each of the N threads, so criterion's elements/s is records/s
//! over all threads; ns per record = 1 / that. `cargo bench --bench histogram_shards` measures;
//! `cargo test --benches` runs each case once.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use mysql_lb::telemetry::metrics::{BackendStats, Metrics};
use mysql_lb::wire::protocol::response::Completed;

const THREADS: [usize; 3] = [1, 2, 4];

/// Latencies spread over several buckets and all four command kinds, as a real mix would be.
fn samples() -> Vec<Completed> {
    let commands = [0x03, 0x16, 0x17, 0x0E];
    (0..64u64)
        .map(|i| Completed {
            command: commands[(i % 4) as usize],
            latency: Duration::from_micros(80 + i * i * 7),
            first_byte: Duration::from_micros(40 + i * 3),
            ..Completed::default()
        })
        .collect()
}

/// Runs `iters` records as each of `threads` workers at once; returns the wall time from the
/// common start to the last thread's end.
fn record_concurrently(
    stats: &BackendStats,
    threads: usize,
    samples: &[Completed],
    iters: u64,
) -> Duration {
    let start = Arc::new(Barrier::new(threads + 1));
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let start = Arc::clone(&start);
                scope.spawn(move || {
                    start.wait();
                    for i in 0..iters {
                        stats.record(worker, black_box(&samples[i as usize % samples.len()]));
                    }
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        for w in workers {
            w.join().expect("recording thread panicked");
        }
        began.elapsed()
    })
}

fn bench_recording(c: &mut Criterion) {
    let samples = samples();
    let mut group = c.benchmark_group("record_latency");
    for threads in THREADS {
        group.throughput(Throughput::Elements(threads as u64));
        let one_worker = Metrics::new();
        let shared = one_worker.backend("db1");
        group.bench_with_input(BenchmarkId::new("shared", threads), &shared, |b, stats| {
            b.iter_custom(|iters| record_concurrently(stats, threads, &samples, iters))
        });

        let per_worker = Metrics::new();
        for worker in 0..threads {
            per_worker.worker_sessions(worker);
        }
        let sharded = per_worker.backend("db1");
        group.bench_with_input(
            BenchmarkId::new("sharded", threads),
            &sharded,
            |b, stats| b.iter_custom(|iters| record_concurrently(stats, threads, &samples, iters)),
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_recording
}
criterion_main!(benches);
