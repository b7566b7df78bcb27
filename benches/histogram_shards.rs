//! What recording a command's latency costs when several worker threads share one backend.
//!
//! Every worker thread that relays to a backend records into that backend's histograms
//! (`BackendStats::record`: two observations, each a few atomic adds on the same cache lines), so
//! the lines bounce between cores. The alternative is one histogram set per worker, merged when
//! /metrics is scraped. This bench measures both from 1, 2 and 4 threads:
//!
//! - `shared`: every thread records into the same `BackendStats` (what the proxy does);
//! - `sharded`: each thread records into a `BackendStats` of its own, which is exactly the work a
//!   per-worker shard would do on the hot path (the merge happens at scrape time, off it).
//!
//! One iteration is one record by each of the N threads, so criterion's elements/s is records/s
//! over all threads; ns per record = 1 / that. `cargo bench --bench histogram_shards` measures;
//! `cargo test --benches` runs each case once.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use mysql_lb::metrics::{BackendStats, Metrics};
use mysql_lb::protocol::response::Completed;

const THREADS: [usize; 3] = [1, 2, 4];

/// Latencies spread over several buckets and all four command kinds, as a real mix would be.
fn samples() -> Vec<Completed> {
    let commands = [0x03, 0x16, 0x17, 0x0E];
    (0..64u64)
        .map(|i| Completed {
            command: commands[(i % 4) as usize],
            latency: Duration::from_micros(80 + i * i * 7),
            first_byte: Duration::from_micros(40 + i * 3),
        })
        .collect()
}

/// Runs `iters` records on each of `stats.len()` threads at once; returns the wall time from
/// the common start to the last thread's end.
fn record_concurrently(stats: &[BackendStats], samples: &[Completed], iters: u64) -> Duration {
    let start = Arc::new(Barrier::new(stats.len() + 1));
    std::thread::scope(|scope| {
        let workers: Vec<_> = stats
            .iter()
            .map(|s| {
                let start = Arc::clone(&start);
                scope.spawn(move || {
                    start.wait();
                    for i in 0..iters {
                        s.record(black_box(&samples[i as usize % samples.len()]));
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
        let shared_metrics = Metrics::new();
        let one = shared_metrics.backend("db1");
        let shared: Vec<BackendStats> = (0..threads).map(|_| one.clone()).collect();
        group.bench_with_input(BenchmarkId::new("shared", threads), &shared, |b, stats| {
            b.iter_custom(|iters| record_concurrently(stats, &samples, iters))
        });

        // One registry per thread only to get independent handles; a shard needs no registry.
        let own: Vec<Metrics> = (0..threads).map(|_| Metrics::new()).collect();
        let sharded: Vec<BackendStats> = own.iter().map(|m| m.backend("db1")).collect();
        group.bench_with_input(
            BenchmarkId::new("sharded", threads),
            &sharded,
            |b, stats| b.iter_custom(|iters| record_concurrently(stats, &samples, iters)),
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
