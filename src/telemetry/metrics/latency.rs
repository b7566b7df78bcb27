//! Per-backend latency histograms and byte counters, one shard per worker thread, merged when
//! /metrics is scraped.
//!
//! Every worker that relays to a backend records each command there and counts the bytes of
//! every read. With one histogram (or counter) per backend, every worker's atomic adds land on
//! the same cache lines, which then bounce between cores: `cargo bench --bench histogram_shards`
//! measured 2–3× the cost per record at 2 threads on a 2-core machine. A shard is written by its
//! worker only; the scrape (and the admin endpoint) adds the shards up, so the exposition is
//! exactly what one histogram or counter would show.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc, Metric as _};
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{Histogram, HistogramOpts, IntCounter};

use super::LATENCY_BUCKETS;
use crate::wire::protocol::response::{CommandKind, Completed};

/// One histogram family with `backend` and `command` labels, e.g. the query durations.
#[derive(Debug, Clone, Copy)]
pub(super) struct Family {
    pub name: &'static str,
    pub help: &'static str,
}

pub(super) const QUERY_DURATION: Family = Family {
    name: "backend_query_duration_seconds",
    help: "Time from a command's last byte written to the backend to the end of its response.",
};

pub(super) const FIRST_BYTE: Family = Family {
    name: "backend_first_byte_seconds",
    help: "Time from a command's last byte written to the backend to its first response packet.",
};

const NAMESPACE: &str = "mysql_lb";

impl Family {
    fn fq_name(self) -> String {
        format!("{NAMESPACE}_{}", self.name)
    }

    /// A histogram of this family for one backend and kind, registered nowhere: a shard.
    fn shard(self, backend: &str, kind: CommandKind) -> Histogram {
        let opts = HistogramOpts::new(self.name, self.help)
            .namespace(NAMESPACE)
            .buckets(LATENCY_BUCKETS.to_vec())
            .const_label("backend", backend)
            .const_label("command", kind.as_str());
        // The name, help, labels and buckets are fixed and valid.
        Histogram::with_opts(opts).expect("valid histogram")
    }
}

/// `mysql_lb_backend_bytes_total{backend,direction}`.
const BYTES_NAME: &str = "backend_bytes_total";
const BYTES_HELP: &str = "Bytes relayed, by direction (to_backend, from_backend).";
/// The `direction` label of [`Shard::bytes`], in index order.
const DIRECTIONS: [&str; 2] = ["to_backend", "from_backend"];

/// One worker's histograms for one backend, indexed by [`kind_index`], and its byte counters,
/// indexed as [`DIRECTIONS`].
#[derive(Debug)]
struct Shard {
    query: [Histogram; 4],
    first_byte: [Histogram; 4],
    bytes: [IntCounter; 2],
}

/// A byte counter of one backend and direction, registered nowhere: a shard.
fn bytes_shard(backend: &str, direction: &str) -> IntCounter {
    let opts = prometheus::Opts::new(BYTES_NAME, BYTES_HELP)
        .namespace(NAMESPACE)
        .const_label("backend", backend)
        .const_label("direction", direction);
    // The name, help and labels are fixed and valid.
    IntCounter::with_opts(opts).expect("valid counter")
}

/// One backend's latency histograms: a shard per worker.
#[derive(Debug)]
pub struct BackendLatency {
    shards: Box<[Shard]>,
}

fn kind_index(kind: CommandKind) -> usize {
    match kind {
        CommandKind::Query => 0,
        CommandKind::Prepare => 1,
        CommandKind::Execute => 2,
        CommandKind::Other => 3,
    }
}

impl BackendLatency {
    fn new(backend: &str, workers: usize) -> Self {
        let shards = (0..workers.max(1))
            .map(|_| Shard {
                query: CommandKind::ALL.map(|k| QUERY_DURATION.shard(backend, k)),
                first_byte: CommandKind::ALL.map(|k| FIRST_BYTE.shard(backend, k)),
                bytes: DIRECTIONS.map(|d| bytes_shard(backend, d)),
            })
            .collect();
        Self { shards }
    }

    /// Records on `worker`'s shard; an index past the shards (a worker started after this backend
    /// was created) shares one, which costs speed, never a sample.
    pub fn record(&self, worker: usize, c: &Completed) {
        let shard = &self.shards[worker % self.shards.len()];
        let i = kind_index(c.kind());
        shard.query[i].observe(c.latency.as_secs_f64());
        shard.first_byte[i].observe(c.first_byte.as_secs_f64());
    }

    /// Counts `n` bytes read from the client (`to_backend`) or from the backend, on `worker`'s
    /// shard.
    pub fn relayed(&self, worker: usize, to_backend: bool, n: u64) {
        let shard = &self.shards[worker % self.shards.len()];
        shard.bytes[usize::from(!to_backend)].inc_by(n);
    }

    /// Bytes relayed in each direction ([`DIRECTIONS`] order), over every shard.
    pub fn bytes(&self) -> [u64; 2] {
        [0, 1].map(|i| self.shards.iter().map(|s| s.bytes[i].get()).sum())
    }

    /// The byte counters' series for this backend, each the sum of its shards.
    fn merged_bytes(&self) -> Vec<proto::Metric> {
        (0..DIRECTIONS.len())
            .map(|i| {
                let mut parts = self.shards.iter().map(|s| s.bytes[i].metric());
                let mut total = parts.next().expect("at least one shard");
                let sum: f64 = parts.map(|p| p.get_counter().get_value()).sum();
                let mut counter = total.get_counter().clone();
                counter.set_value(counter.get_value() + sum);
                total.set_counter(counter);
                total
            })
            .collect()
    }

    /// Completed commands of every kind, over every shard.
    pub fn total_commands(&self) -> u64 {
        self.shards
            .iter()
            .flat_map(|s| &s.query)
            .map(Histogram::get_sample_count)
            .sum()
    }

    /// Completed commands of every kind over every shard, and their latency sum in seconds.
    pub fn totals(&self) -> (u64, f64) {
        self.shards
            .iter()
            .flat_map(|s| &s.query)
            .fold((0, 0.0), |(n, sum), h| {
                (n + h.get_sample_count(), sum + h.get_sample_sum())
            })
    }

    /// Cumulative bucket counts of all kinds and shards together (the last slot is the total).
    pub fn buckets(&self) -> [u64; LATENCY_BUCKETS.len() + 1] {
        let mut out = [0u64; LATENCY_BUCKETS.len() + 1];
        for h in self.shards.iter().flat_map(|s| &s.query) {
            let proto = h.metric();
            let hist = proto.get_histogram();
            for (slot, b) in out.iter_mut().zip(hist.get_bucket()) {
                *slot += b.cumulative_count();
            }
            out[LATENCY_BUCKETS.len()] += hist.get_sample_count();
        }
        out
    }

    /// One family's series for this backend, each the sum of its shards.
    fn merged(&self, family: fn(&Shard) -> &[Histogram; 4]) -> Vec<proto::Metric> {
        (0..CommandKind::ALL.len())
            .map(|i| {
                let mut parts = self.shards.iter().map(|s| family(s)[i].metric());
                let mut total = parts.next().expect("at least one shard");
                for part in parts {
                    add_histogram(&mut total, part.get_histogram());
                }
                total
            })
            .collect()
    }
}

/// Adds `part`'s counts and sum into `total` (same buckets, by construction).
fn add_histogram(total: &mut proto::Metric, part: &proto::Histogram) {
    let mut sum = total.get_histogram().clone();
    sum.set_sample_count(sum.get_sample_count() + part.get_sample_count());
    sum.set_sample_sum(sum.get_sample_sum() + part.get_sample_sum());
    let buckets = sum
        .get_bucket()
        .iter()
        .zip(part.get_bucket())
        .map(|(a, b)| {
            let mut bucket = a.clone();
            bucket.set_cumulative_count(a.cumulative_count() + b.cumulative_count());
            bucket
        })
        .collect();
    sum.set_bucket(buckets);
    total.set_histogram(sum);
}

/// Every backend's latency histograms, exported as the two families.
#[derive(Debug)]
pub(super) struct Latencies {
    /// By backend name: a backend re-created under the same name (a reload) keeps its series,
    /// as a labelled histogram would.
    backends: Mutex<HashMap<String, Arc<BackendLatency>>>,
    descs: [Desc; 3],
}

impl Latencies {
    pub(super) fn new() -> Self {
        let desc = |f: Family| {
            let labels = vec!["backend".to_owned(), "command".to_owned()];
            Desc::new(f.fq_name(), f.help.to_owned(), labels, HashMap::new()).expect("valid desc")
        };
        let bytes = Desc::new(
            format!("{NAMESPACE}_{BYTES_NAME}"),
            BYTES_HELP.to_owned(),
            vec!["backend".to_owned(), "direction".to_owned()],
            HashMap::new(),
        )
        .expect("valid desc");
        Self {
            backends: Mutex::new(HashMap::new()),
            descs: [desc(QUERY_DURATION), desc(FIRST_BYTE), bytes],
        }
    }

    /// The histograms of backend `name`, with `workers` shards when they are new.
    pub(super) fn backend(&self, name: &str, workers: usize) -> Arc<BackendLatency> {
        let mut backends = self.backends.lock().unwrap_or_else(PoisonError::into_inner);
        let latency = backends
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(BackendLatency::new(name, workers)));
        Arc::clone(latency)
    }

    fn family(&self, family: Family, shard: fn(&Shard) -> &[Histogram; 4]) -> MetricFamily {
        let backends = self.backends.lock().unwrap_or_else(PoisonError::into_inner);
        let mut mf = MetricFamily::default();
        mf.set_name(family.fq_name());
        mf.set_help(family.help.to_owned());
        mf.set_field_type(MetricType::HISTOGRAM);
        mf.set_metric(backends.values().flat_map(|b| b.merged(shard)).collect());
        mf
    }

    fn bytes_family(&self) -> MetricFamily {
        let backends = self.backends.lock().unwrap_or_else(PoisonError::into_inner);
        let mut mf = MetricFamily::default();
        mf.set_name(format!("{NAMESPACE}_{BYTES_NAME}"));
        mf.set_help(BYTES_HELP.to_owned());
        mf.set_field_type(MetricType::COUNTER);
        mf.set_metric(backends.values().flat_map(|b| b.merged_bytes()).collect());
        mf
    }
}

impl Collector for Latencies {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        vec![
            self.family(QUERY_DURATION, |s| &s.query),
            self.family(FIRST_BYTE, |s| &s.first_byte),
            self.bytes_family(),
        ]
    }
}

/// The registry owns a boxed collector; [`super::Metrics`] keeps this handle on the same one.
#[derive(Debug, Clone)]
pub(super) struct SharedLatencies(pub Arc<Latencies>);

impl Collector for SharedLatencies {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}
