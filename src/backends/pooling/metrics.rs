//! The pools' Prometheus series: families registered once per proxy, one set of series per
//! (pool, backend).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};

use super::{Inner, Reason};
use crate::telemetry::metrics::Metrics;

/// The metric families every pool's series belong to.
#[derive(Clone)]
pub(super) struct Families {
    connections: IntGaugeVec,
    waiting: IntGaugeVec,
    wait: HistogramVec,
    pins: IntCounterVec,
    acquired: IntCounterVec,
    moves: IntCounterVec,
    retries: IntCounterVec,
    keys_only_here: IntGaugeVec,
    failed: IntCounterVec,
    resets: IntCounterVec,
}

impl Families {
    /// The families, registered with `metrics` (a registry that has them already, as a second
    /// proxy in one test process, keeps its own and these count unexported).
    pub(super) fn register(metrics: &Metrics) -> Families {
        let labels = ["pool", "backend"];
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric name")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric name")
        };
        let families = Families {
            connections: gauge(
                "mysql_lb_pool_server_connections",
                "Server connections of a transaction-mode pool by state (idle, in_use; \
                 logins in flight count as in use)",
                &["pool", "backend", "state"],
            ),
            waiting: gauge(
                "mysql_lb_pool_waiting",
                "Sessions and logins waiting for a server connection",
                &labels,
            ),
            wait: HistogramVec::new(
                HistogramOpts::new(
                    "mysql_lb_pool_wait_seconds",
                    "How long a session or login waited for a server connection",
                )
                .buckets(vec![
                    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
                ]),
                &labels,
            )
            .expect("a valid metric name"),
            pins: counter(
                "mysql_lb_pool_pins_total",
                "Sessions that kept their server connection for good, by reason",
                &["pool", "backend", "reason"],
            ),
            acquired: counter(
                "mysql_lb_pool_acquired_total",
                "Server connections taken from the pool by a session (reuses)",
                &labels,
            ),
            moves: counter(
                "mysql_lb_pool_session_moves_total",
                "Transactions a session of a pool across backends (`pooling.across_backends`) \
                 began on this backend after its previous one ran on another",
                &labels,
            ),
            retries: counter(
                "mysql_lb_pool_retries_total",
                "Reads in autocommit sent once more to this backend, their own server lost \
                 before it answered (a pool across backends)",
                &labels,
            ),
            keys_only_here: gauge(
                "mysql_lb_pool_keys_only_here",
                "In a pool across backends: keys (user, schema, ...) whose server connections \
                 are all on this backend, so their sessions cannot move to another",
                &labels,
            ),
            failed: counter(
                "mysql_lb_pool_wait_failed_total",
                "Sessions and logins that got no server connection (timeout, starved)",
                &["pool", "backend", "reason"],
            ),
            resets: counter(
                "mysql_lb_pool_resets_total",
                "Server connections reset (COM_RESET_CONNECTION) before another session gets \
                 them, by why: traces (warnings, an error, an insert id or a row count left \
                 on it), session_end (a session ended in a transaction or with traces), pinned \
                 (a pinned session ended); outcome failed when the connection closed instead",
                &["pool", "backend", "reason", "outcome"],
            ),
        };
        for c in [
            Box::new(families.connections.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(families.waiting.clone()),
            Box::new(families.wait.clone()),
            Box::new(families.pins.clone()),
            Box::new(families.acquired.clone()),
            Box::new(families.moves.clone()),
            Box::new(families.retries.clone()),
            Box::new(families.keys_only_here.clone()),
            Box::new(families.failed.clone()),
            Box::new(families.resets.clone()),
        ] {
            let _ = metrics.register(c);
        }
        families
    }
}

/// One pool's series.
pub(super) struct PoolMetrics {
    idle: prometheus::IntGauge,
    in_use: prometheus::IntGauge,
    waiting: prometheus::IntGauge,
    wait: prometheus::Histogram,
    pins: IntCounterVec,
    pub(super) acquired: prometheus::IntCounter,
    pub(super) moves: prometheus::IntCounter,
    pub(super) retries: prometheus::IntCounter,
    pub(super) keys_only_here: prometheus::IntGauge,
    failed: IntCounterVec,
    resets: IntCounterVec,
    labels: [String; 2],
}

impl PoolMetrics {
    pub(super) fn new(f: &Families, pool: &str, backend: &str) -> Self {
        PoolMetrics {
            idle: f.connections.with_label_values(&[pool, backend, "idle"]),
            in_use: f.connections.with_label_values(&[pool, backend, "in_use"]),
            waiting: f.waiting.with_label_values(&[pool, backend]),
            wait: f.wait.with_label_values(&[pool, backend]),
            pins: f.pins.clone(),
            acquired: f.acquired.with_label_values(&[pool, backend]),
            moves: f.moves.with_label_values(&[pool, backend]),
            retries: f.retries.with_label_values(&[pool, backend]),
            keys_only_here: f.keys_only_here.with_label_values(&[pool, backend]),
            failed: f.failed.clone(),
            resets: f.resets.clone(),
            labels: [pool.to_owned(), backend.to_owned()],
        }
    }

    pub(super) fn update(&self, core: &Inner) {
        let (idle, waiting) = core.idle_and_waiting();
        self.idle.set(idle as i64);
        self.in_use.set(core.open().saturating_sub(idle) as i64);
        self.waiting.set(waiting as i64);
    }

    pub(super) fn waited(&self, d: std::time::Duration) {
        self.wait.observe(d.as_secs_f64());
    }

    pub(super) fn pinned(&self, reason: Reason) {
        let [pool, backend] = &self.labels;
        self.pins
            .with_label_values(&[pool, backend, reason.as_str()])
            .inc();
    }

    pub(super) fn reset(&self, reason: &str, ok: bool) {
        let [pool, backend] = &self.labels;
        let outcome = if ok { "ok" } else { "failed" };
        self.resets
            .with_label_values(&[pool, backend, reason, outcome])
            .inc();
    }

    pub(super) fn failed(&self, reason: &str) {
        let [pool, backend] = &self.labels;
        self.failed
            .with_label_values(&[pool, backend, reason])
            .inc();
    }
}
