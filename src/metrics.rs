//! Prometheus metrics: an owned registry in a [`Metrics`] struct passed by `Arc`, no globals.
//!
//! Label lookups hash and lock, so nothing on the hot path does one: every backend resolves its
//! label values once into a [`BackendStats`] of plain handles, and recording a command is then one
//! histogram observation (atomic adds) per histogram. Command kinds are a fixed set of four, so the
//! series count stays bounded by the number of backends.

use prometheus::core::Metric as _;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::protocol::response::{CommandKind, Completed};

/// 100 µs to 10 s, roughly 1-2.5-5 per decade: fine enough for p50/p99 of fast point queries and
/// still covering slow reports.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Why clients were refused before reaching a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    TooManyConnections,
    NoBackend,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooManyConnections => "too_many_connections",
            Self::NoBackend => "no_backend",
        }
    }
}

/// Every metric the proxy exports.
pub struct Metrics {
    registry: Registry,
    query_duration: HistogramVec,
    first_byte: HistogramVec,
    connect_duration: HistogramVec,
    backend_connections: IntGaugeVec,
    backend_connections_total: IntCounterVec,
    connect_errors: IntCounterVec,
    backend_up: IntGaugeVec,
    bytes: IntCounterVec,
    health_checks: IntCounterVec,
    replication_lag: GaugeVec,
    worker_sessions: IntGaugeVec,
    pub client_connections: IntGauge,
    client_rejected: IntCounterVec,
    disconnections: IntCounterVec,
    pub open_fds_limit: IntGauge,
    pub max_connections: IntGauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("mysql_lb")
}

fn histogram(name: &str, help: &str) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace("mysql_lb")
        .buckets(LATENCY_BUCKETS.to_vec())
}

impl Metrics {
    pub fn new() -> Self {
        // Every name and label set below is fixed and valid, so creation cannot fail at run time.
        let registry = Registry::new();
        let m = Self {
            query_duration: HistogramVec::new(
                histogram(
                    "backend_query_duration_seconds",
                    "Time from a command's last byte written to the backend to the end of its response.",
                ),
                &["backend", "command"],
            )
            .expect("valid metric"),
            first_byte: HistogramVec::new(
                histogram(
                    "backend_first_byte_seconds",
                    "Time from a command's last byte written to the backend to its first response packet.",
                ),
                &["backend", "command"],
            )
            .expect("valid metric"),
            connect_duration: HistogramVec::new(
                histogram(
                    "backend_connect_duration_seconds",
                    "Time to connect to a backend and read its greeting.",
                ),
                &["backend"],
            )
            .expect("valid metric"),
            backend_connections: IntGaugeVec::new(
                opts("backend_connections", "Client sessions currently relayed to a backend."),
                &["backend"],
            )
            .expect("valid metric"),
            backend_connections_total: IntCounterVec::new(
                opts("backend_connections_total", "Client sessions given to a backend."),
                &["backend"],
            )
            .expect("valid metric"),
            connect_errors: IntCounterVec::new(
                opts(
                    "backend_connect_errors_total",
                    "Failed attempts to connect to a backend for a client (refused, timed out, bad greeting).",
                ),
                &["backend"],
            )
            .expect("valid metric"),
            backend_up: IntGaugeVec::new(
                opts("backend_up", "1 when the backend is in rotation, 0 when it is out."),
                &["backend"],
            )
            .expect("valid metric"),
            bytes: IntCounterVec::new(
                opts(
                    "backend_bytes_total",
                    "Bytes relayed, by direction (to_backend, from_backend).",
                ),
                &["backend", "direction"],
            )
            .expect("valid metric"),
            health_checks: IntCounterVec::new(
                opts("backend_health_checks_total", "Health checks by result (ok, failed)."),
                &["backend", "result"],
            )
            .expect("valid metric"),
            replication_lag: GaugeVec::new(
                opts(
                    "backend_replication_lag_seconds",
                    "Seconds_Behind_Master at the latest health check (with \
                     health_check.max_replication_lag); NaN when unknown (replication stopped or \
                     the check failed); absent for a server that is not a replica.",
                ),
                &["backend"],
            )
            .expect("valid metric"),
            worker_sessions: IntGaugeVec::new(
                opts(
                    "worker_sessions",
                    "Client sessions on each worker thread (see worker_threads).",
                ),
                &["worker"],
            )
            .expect("valid metric"),
            client_connections: IntGauge::with_opts(opts(
                "client_connections",
                "Client connections currently open.",
            ))
            .expect("valid metric"),
            client_rejected: IntCounterVec::new(
                opts(
                    "client_rejected_total",
                    "Clients refused before reaching a backend, by reason.",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            disconnections: IntCounterVec::new(
                opts("client_disconnections_total", "Client sessions ended, by reason."),
                &["reason"],
            )
            .expect("valid metric"),
            open_fds_limit: IntGauge::with_opts(opts(
                "open_fds_limit",
                "The RLIMIT_NOFILE soft limit the proxy runs with.",
            ))
            .expect("valid metric"),
            max_connections: IntGauge::with_opts(opts(
                "max_connections",
                "Client connections admitted at once (after fitting the fd limit).",
            ))
            .expect("valid metric"),
            registry,
        };
        m.register_all();
        m
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.query_duration.clone()),
            Box::new(self.first_byte.clone()),
            Box::new(self.connect_duration.clone()),
            Box::new(self.backend_connections.clone()),
            Box::new(self.backend_connections_total.clone()),
            Box::new(self.connect_errors.clone()),
            Box::new(self.backend_up.clone()),
            Box::new(self.bytes.clone()),
            Box::new(self.health_checks.clone()),
            Box::new(self.replication_lag.clone()),
            Box::new(self.worker_sessions.clone()),
            Box::new(self.client_connections.clone()),
            Box::new(self.client_rejected.clone()),
            Box::new(self.disconnections.clone()),
            Box::new(self.open_fds_limit.clone()),
            Box::new(self.max_connections.clone()),
            Box::new(prometheus::process_collector::ProcessCollector::for_self()),
        ];
        for c in collectors {
            // Names are distinct by construction; a duplicate would be a programming error.
            self.registry.register(c).expect("metric registered once");
        }
    }

    /// Handles for one backend, created once with the backend; its series appear at once (zero).
    pub fn backend(&self, name: &str) -> BackendStats {
        let per_kind = |vec: &HistogramVec| {
            CommandKind::ALL.map(|k| vec.with_label_values(&[name, k.as_str()]))
        };
        let stats = BackendStats {
            query: per_kind(&self.query_duration),
            first_byte: per_kind(&self.first_byte),
            connect: self.connect_duration.with_label_values(&[name]),
            connections: self.backend_connections.with_label_values(&[name]),
            connections_total: self.backend_connections_total.with_label_values(&[name]),
            connect_errors: self.connect_errors.with_label_values(&[name]),
            up: self.backend_up.with_label_values(&[name]),
            bytes_to_backend: self.bytes.with_label_values(&[name, "to_backend"]),
            bytes_from_backend: self.bytes.with_label_values(&[name, "from_backend"]),
            checks_ok: self.health_checks.with_label_values(&[name, "ok"]),
            checks_failed: self.health_checks.with_label_values(&[name, "failed"]),
        };
        stats.up.set(1);
        stats
    }

    /// Registers a collector owned elsewhere (e.g. the Lua host's error counter).
    pub fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> prometheus::Result<()> {
        self.registry.register(collector)
    }

    pub fn rejected(&self, reason: Refusal) {
        self.client_rejected
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// The session count of worker `index` (a handle; the series appears at 0).
    pub fn worker_sessions(&self, index: usize) -> IntGauge {
        self.worker_sessions
            .with_label_values(&[index.to_string().as_str()])
    }

    /// The replication lag a health check saw: `Some(seconds)` (NaN when unknown), or `None` for
    /// a server that is not a replica, which removes the series.
    pub fn replication_lag(&self, backend: &str, seconds: Option<f64>) {
        match seconds {
            Some(s) => self.replication_lag.with_label_values(&[backend]).set(s),
            None => {
                let _ = self.replication_lag.remove_label_values(&[backend]);
            }
        }
    }

    pub fn disconnected(&self, reason: &str) {
        self.disconnections.with_label_values(&[reason]).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!("encoding metrics: {e}");
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// One backend's metric handles.
#[derive(Debug, Clone)]
pub struct BackendStats {
    query: [Histogram; 4],
    first_byte: [Histogram; 4],
    pub connect: Histogram,
    pub connections: IntGauge,
    pub connections_total: IntCounter,
    pub connect_errors: IntCounter,
    pub up: IntGauge,
    pub bytes_to_backend: IntCounter,
    pub bytes_from_backend: IntCounter,
    pub checks_ok: IntCounter,
    pub checks_failed: IntCounter,
}

fn index(kind: CommandKind) -> usize {
    match kind {
        CommandKind::Query => 0,
        CommandKind::Prepare => 1,
        CommandKind::Execute => 2,
        CommandKind::Other => 3,
    }
}

impl BackendStats {
    pub fn record(&self, c: &Completed) {
        let i = index(c.kind());
        self.query[i].observe(c.latency.as_secs_f64());
        self.first_byte[i].observe(c.first_byte.as_secs_f64());
    }

    /// Completed commands of every kind.
    pub fn total_commands(&self) -> u64 {
        self.query.iter().map(Histogram::get_sample_count).sum()
    }

    /// Cumulative bucket counts of all kinds together, for percentile estimates.
    pub fn latency_buckets(&self) -> [u64; LATENCY_BUCKETS.len() + 1] {
        let mut out = [0u64; LATENCY_BUCKETS.len() + 1];
        for h in &self.query {
            let proto = h.metric();
            let hist = proto.get_histogram();
            for (slot, b) in out.iter_mut().zip(hist.get_bucket()) {
                *slot += b.cumulative_count();
            }
            out[LATENCY_BUCKETS.len()] += hist.get_sample_count();
        }
        out
    }
}

/// Estimates a quantile from cumulative bucket counts (the last slot is the total), interpolating
/// linearly inside the bucket as Prometheus' `histogram_quantile` does. None without samples.
pub fn quantile(cumulative: &[u64], q: f64) -> Option<f64> {
    let total = *cumulative.last()?;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut lower_bound = 0.0;
    let mut lower_count = 0u64;
    for (i, &count) in cumulative.iter().enumerate() {
        let upper = LATENCY_BUCKETS.get(i).copied();
        if count as f64 >= rank {
            let Some(upper) = upper else {
                // Past the last bucket: all we know is "more than the largest bound".
                return Some(lower_bound);
            };
            let in_bucket = (count - lower_count) as f64;
            let frac = if in_bucket > 0.0 {
                (rank - lower_count as f64) / in_bucket
            } else {
                1.0
            };
            return Some(lower_bound + (upper - lower_bound) * frac);
        }
        lower_bound = upper.unwrap_or(lower_bound);
        lower_count = count;
    }
    Some(lower_bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn completed(command: u8, micros: u64) -> Completed {
        Completed {
            command,
            latency: Duration::from_micros(micros),
            first_byte: Duration::from_micros(micros / 2),
        }
    }

    #[test]
    fn records_by_kind_and_renders_histograms() {
        let m = Metrics::new();
        let b = m.backend("db1");
        b.record(&completed(0x03, 300));
        b.record(&completed(0x0E, 50));
        assert_eq!(b.total_commands(), 2);
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains(
            "mysql_lb_backend_query_duration_seconds_bucket{backend=\"db1\",command=\"query\",le=\"0.0005\"} 1"
        ), "{text}");
        assert!(text.contains(
            "mysql_lb_backend_query_duration_seconds_count{backend=\"db1\",command=\"other\"} 1"
        ));
        assert!(text.contains("mysql_lb_backend_up{backend=\"db1\"} 1"));
    }

    #[test]
    fn every_kind_has_a_series_before_any_command() {
        let m = Metrics::new();
        let _b = m.backend("db2");
        let text = String::from_utf8(m.render()).unwrap();
        for kind in CommandKind::ALL {
            let series = format!(
                "mysql_lb_backend_query_duration_seconds_count{{backend=\"db2\",command=\"{}\"}} 0",
                kind.as_str()
            );
            assert!(text.contains(&series), "missing {series}");
        }
    }

    #[test]
    fn quantiles_from_buckets() {
        let m = Metrics::new();
        let b = m.backend("db");
        for _ in 0..99 {
            b.record(&completed(0x03, 200)); // bucket (0.0001, 0.00025]
        }
        b.record(&completed(0x03, 40_000)); // bucket (0.025, 0.05]
        let buckets = b.latency_buckets();
        let p50 = quantile(&buckets, 0.5).unwrap();
        assert!(p50 > 0.0001 && p50 <= 0.00025, "{p50}");
        let p999 = quantile(&buckets, 0.999).unwrap();
        assert!(p999 > 0.025 && p999 <= 0.05, "{p999}");
        assert_eq!(quantile(&[0; 17], 0.5), None);
    }
}
