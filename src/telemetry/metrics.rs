//! Prometheus metrics: an owned registry in a [`Metrics`] struct passed by `Arc`, no globals.
//!
//! Label lookups hash and lock, so nothing on the hot path does one: every backend resolves its
//! label values once into a [`BackendStats`] of plain handles. Recording a command is two
//! histogram observations (atomic adds) on the recording worker's own shard of that backend's
//! histograms (see [`latency`]), so workers do not contend for cache lines. Command kinds are a
//! fixed set of four, so the series count stays bounded by the number of backends.

mod latency;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::wire::protocol::response::Completed;
use latency::{BackendLatency, Latencies, SharedLatencies};

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
    latencies: Arc<Latencies>,
    /// Worker threads seen so far: each new backend gets one latency shard per worker.
    workers: AtomicUsize,
    backends: BackendFamilies,
    worker_sessions: IntGaugeVec,
    pub client_connections: IntGauge,
    client_rejected: IntCounterVec,
    proxy_protocol_rejected: IntCounterVec,
    disconnections: IntCounterVec,
    pub open_fds_limit: IntGauge,
    pub max_connections: IntGauge,
    tls_sessions: IntCounterVec,
    compressed_sessions: IntCounterVec,
    certificate_expiry: IntGaugeVec,
    pools: PoolFamilies,
    peer_requests: IntCounterVec,
    /// Statements a query rule matched, by rule and what it did (see `crate::backends::rules`).
    pub query_rule_hits: IntCounterVec,
    /// Capture records dropped because the writer's queue was full (see `crate::telemetry::capture`).
    pub capture_dropped: IntCounter,
}

/// Which pool each backend is in, and the sessions each pool got.
struct PoolFamilies {
    backend_pool: IntGaugeVec,
    routed: IntCounterVec,
    split_transactions: IntCounterVec,
    reads_on_primary: IntCounterVec,
    causal_reads: IntCounterVec,
    causal_wait: HistogramVec,
    writes_replayed: IntCounterVec,
    reads_refused: IntCounterVec,
}

/// A pool's read/write split series, resolved once per pool (see [`Metrics::split`]).
#[derive(Debug, Clone)]
pub struct SplitSeries {
    /// Transactions that ran on a replica, and on the primary.
    pub on_replica: IntCounter,
    pub on_primary: IntCounter,
    /// Reads that ran on the primary because no replica had a connection for them, or because
    /// no replica applied the session's writes within `causal_timeout`.
    pub read_no_replica: IntCounter,
    pub read_causal_timeout: IntCounter,
    pub read_lag: IntCounter,
    /// Reads answered with an ERR because no replica was in rotation
    /// (`pooling.reads_without_replica: error`).
    pub read_refused: IntCounter,
    /// Reads on a replica known to have applied what they must see (no wait), that waited
    /// for it, and that gave up waiting.
    pub causal_covered: IntCounter,
    pub causal_waited: IntCounter,
    pub causal_timed_out: IntCounter,
    /// How long the waits took.
    pub causal_wait: Histogram,
    /// Autocommit writes a primary refused for having gone read-only, run again on the new
    /// primary (`replayed`), or whose refusal reached the client because it was not for that
    /// (`forwarded`: the server was writable when asked).
    pub write_replayed: IntCounter,
    pub write_refusal_forwarded: IntCounter,
}

impl PoolFamilies {
    fn new() -> Self {
        Self {
            backend_pool: int_gauge_vec(
                "backend_pool",
                "1 for the pool each backend is in (join on `backend` to group other series by pool).",
                &["backend", "pool"],
            ),
            routed: int_counter_vec(
                "routed_sessions_total",
                "Sessions established, by the pool of their backend.",
                &["pool"],
            ),
            split_transactions: int_counter_vec(
                "split_transactions_total",
                "Transactions of a pool with pooling.read_write_split, by the role of the backend \
                 they ran on (primary, replica).",
                &["pool", "role"],
            ),
            reads_on_primary: int_counter_vec(
                "split_reads_on_primary_total",
                "Reads a replica could have taken that ran on the primary, by why: no_replica \
                 (no replica had a connection of the session's user free, or none was in \
                 rotation), lag (every replica was out, one for its replication lag), \
                 causal_timeout (no replica applied what the read must see within \
                 pooling.causal_timeout).",
                &["pool", "reason"],
            ),
            causal_reads: int_counter_vec(
                "causal_reads_total",
                "Reads on a replica under pooling.causal_reads, by outcome: covered (the replica \
                 was known to have applied what the read must see), waited (MASTER_GTID_WAIT \
                 returned in time), timed_out (the read went to the primary).",
                &["pool", "outcome"],
            ),
            causal_wait: HistogramVec::new(
                HistogramOpts::new(
                    "causal_wait_seconds",
                    "Time reads waited on a replica for the writes they must see.",
                )
                .namespace("mysql_lb")
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["pool"],
            )
            .expect("valid metric"),
            writes_replayed: int_counter_vec(
                "split_refused_writes_total",
                "Autocommit writes of a split that the primary refused with ERR 1290, by \
                 outcome: replayed (the server had gone read-only: the write ran again on the \
                 new primary, the client saw no error), forwarded (it had not: the client got \
                 the error).",
                &["pool", "outcome"],
            ),
            reads_refused: int_counter_vec(
                "split_reads_refused_total",
                "Reads of a split answered with an ERR because no replica was in rotation \
                 (pooling.reads_without_replica: error).",
                &["pool"],
            ),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The per-backend families other than latency, labelled by `backend` (and one more label).
struct BackendFamilies {
    connect_duration: HistogramVec,
    connections: IntGaugeVec,
    connections_total: IntCounterVec,
    connect_errors: IntCounterVec,
    up: IntGaugeVec,
    health_checks: IntCounterVec,
    admin_state: IntGaugeVec,
    ejections: IntCounterVec,
    ejected: IntGaugeVec,
    session_failures: IntCounterVec,
    replication_lag: GaugeVec,
    role_changes: IntCounterVec,
}

// Every name, help text and label set below is fixed and valid, so creation cannot fail at run
// time: the `expect`s state that.

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("mysql_lb")
}

fn int_gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::with_opts(opts(name, help)).expect("valid metric")
}

fn int_gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(opts(name, help), labels).expect("valid metric")
}

fn int_counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(opts(name, help), labels).expect("valid metric")
}

impl BackendFamilies {
    fn new() -> Self {
        let connect_duration = HistogramOpts::new(
            "backend_connect_duration_seconds",
            "Time to connect to a backend and read its greeting.",
        )
        .namespace("mysql_lb")
        .buckets(LATENCY_BUCKETS.to_vec());
        let replication_lag = opts(
            "backend_replication_lag_seconds",
            "Seconds_Behind_Master at the latest health check (with \
             health_check.max_replication_lag); NaN when unknown (replication stopped or the \
             check failed); absent for a server that is not a replica.",
        );
        let backend = &["backend"];
        Self {
            connect_duration: HistogramVec::new(connect_duration, backend).expect("valid metric"),
            connections: int_gauge_vec(
                "backend_connections",
                "Client sessions currently relayed to a backend.",
                backend,
            ),
            connections_total: int_counter_vec(
                "backend_connections_total",
                "Client sessions given to a backend.",
                backend,
            ),
            connect_errors: int_counter_vec(
                "backend_connect_errors_total",
                "Failed attempts to connect to a backend for a client (refused, timed out, bad greeting).",
                backend,
            ),
            up: int_gauge_vec(
                "backend_up",
                "1 when the backend is in rotation, 0 when it is out.",
                backend,
            ),
            health_checks: int_counter_vec(
                "backend_health_checks_total",
                "Health checks by result (ok, failed).",
                &["backend", "result"],
            ),
            admin_state: int_gauge_vec(
                "backend_admin_state",
                "1 for the admin state set on the admin endpoint (ready, draining, maintenance), \
                 0 for the others.",
                &["backend", "state"],
            ),
            ejections: int_counter_vec(
                "backend_ejections_total",
                "Times the backend was ejected (outlier ejection: its sessions kept failing).",
                backend,
            ),
            ejected: int_gauge_vec(
                "backend_ejected",
                "1 while the backend is ejected (its backoff or its trial running), else 0.",
                backend,
            ),
            session_failures: int_counter_vec(
                "backend_session_failures_total",
                "Client sessions that failed on the backend's side, by kind (connect, handshake, \
                 mid_command): what outlier ejection counts.",
                &["backend", "kind"],
            ),
            replication_lag: GaugeVec::new(replication_lag, backend).expect("valid metric"),
            role_changes: int_counter_vec(
                "backend_role_changes_total",
                "Times a health check found a backend with `role:` (auto, or configured) \
                 writable after read-only or the other way round.",
                backend,
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.connect_duration.clone()),
            Box::new(self.connections.clone()),
            Box::new(self.connections_total.clone()),
            Box::new(self.connect_errors.clone()),
            Box::new(self.up.clone()),
            Box::new(self.health_checks.clone()),
            Box::new(self.admin_state.clone()),
            Box::new(self.ejections.clone()),
            Box::new(self.ejected.clone()),
            Box::new(self.session_failures.clone()),
            Box::new(self.replication_lag.clone()),
            Box::new(self.role_changes.clone()),
        ]
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Self {
            registry: Registry::new(),
            latencies: Arc::new(Latencies::new()),
            workers: AtomicUsize::new(1),
            backends: BackendFamilies::new(),
            worker_sessions: int_gauge_vec(
                "worker_sessions",
                "Client sessions on each worker thread (see worker_threads).",
                &["worker"],
            ),
            client_connections: int_gauge(
                "client_connections",
                "Client connections currently open.",
            ),
            client_rejected: int_counter_vec(
                "client_rejected_total",
                "Clients refused before reaching a backend, by reason.",
                &["reason"],
            ),
            proxy_protocol_rejected: int_counter_vec(
                "proxy_protocol_rejected_total",
                "Connections closed over their PROXY protocol header: malformed (also truncated or \
                 oversized) or timeout from a network in accept_proxy_protocol, unlisted when one \
                 came from elsewhere.",
                &["reason"],
            ),
            disconnections: int_counter_vec(
                "client_disconnections_total",
                "Client sessions ended, by reason.",
                &["reason"],
            ),
            open_fds_limit: int_gauge(
                "open_fds_limit",
                "The RLIMIT_NOFILE soft limit the proxy runs with.",
            ),
            max_connections: int_gauge(
                "max_connections",
                "Client connections admitted at once (after fitting the fd limit).",
            ),
            tls_sessions: int_counter_vec(
                "tls_sessions_total",
                "Sessions established with TLS, per leg (client, backend).",
                &["leg"],
            ),
            compressed_sessions: int_counter_vec(
                "compressed_sessions_total",
                "Sessions established with protocol compression, per leg (client, backend).",
                &["leg"],
            ),
            certificate_expiry: int_gauge_vec(
                "tls_certificate_expiry_timestamp_seconds",
                "notAfter of a TLS certificate, unix seconds. leg client: the one mysql-lb serves to \
                 clients; leg backend: the one a backend presented at its latest handshake; leg \
                 backend_client: the one mysql-lb presents to a backend.",
                &["leg", "backend"],
            ),
            pools: PoolFamilies::new(),
            capture_dropped: IntCounter::with_opts(opts(
                "capture_dropped_total",
                "Capture records dropped because the capture writer's queue was full (the \
                 sessions were not slowed; the capture misses those commands or responses).",
            ))
            .expect("valid metric"),
            query_rule_hits: int_counter_vec(
                "query_rule_hits_total",
                "Statements a query rule matched, by rule and what was done: error (refused, \
                 never sent), timeout (sent with the rule's max_statement_time, MariaDB), \
                 limited (ran with one of max_concurrency's turns), over_limit (refused: no \
                 turn within max_concurrency_wait), route (a split sent its transaction where \
                 the rule says), matched (nothing applied: a rule that only logs, or a timeout \
                 on a server that is not MariaDB).",
                &["rule", "action"],
            ),
            peer_requests: int_counter_vec(
                "peer_requests_total",
                "Lookups of another instance's connection id (a KILL naming it) at that peer's \
                 admin endpoint, by peer and outcome: found, not_found, error, timeout.",
                &["peer", "outcome"],
            ),
        };
        m.register_all();
        // Registered apart from `register_all`'s list, and its series shown at zero.
        m.registry
            .register(Box::new(m.proxy_protocol_rejected.clone()))
            .expect("metric registered once");
        for reason in ["malformed", "timeout", "unlisted"] {
            m.proxy_protocol_rejected.with_label_values(&[reason]);
        }
        for leg in ["client", "backend"] {
            m.tls_sessions.with_label_values(&[leg]);
            m.compressed_sessions.with_label_values(&[leg]);
        }
        m
    }

    fn register_all(&self) {
        let mut collectors = self.backends.collectors();
        collectors.extend::<[Box<dyn prometheus::core::Collector>; 22]>([
            Box::new(self.capture_dropped.clone()),
            Box::new(self.peer_requests.clone()),
            Box::new(self.query_rule_hits.clone()),
            Box::new(self.pools.backend_pool.clone()),
            Box::new(self.pools.routed.clone()),
            Box::new(self.pools.split_transactions.clone()),
            Box::new(self.pools.reads_on_primary.clone()),
            Box::new(self.pools.causal_reads.clone()),
            Box::new(self.pools.causal_wait.clone()),
            Box::new(self.pools.writes_replayed.clone()),
            Box::new(self.pools.reads_refused.clone()),
            Box::new(self.tls_sessions.clone()),
            Box::new(self.compressed_sessions.clone()),
            Box::new(SharedLatencies(Arc::clone(&self.latencies))),
            Box::new(self.worker_sessions.clone()),
            Box::new(self.client_connections.clone()),
            Box::new(self.client_rejected.clone()),
            Box::new(self.disconnections.clone()),
            Box::new(self.open_fds_limit.clone()),
            Box::new(self.max_connections.clone()),
            Box::new(self.certificate_expiry.clone()),
            Box::new(prometheus::process_collector::ProcessCollector::for_self()),
        ]);
        for c in collectors {
            // Names are distinct by construction; a duplicate would be a programming error.
            self.registry.register(c).expect("metric registered once");
        }
    }

    /// Handles for one backend, created once with the backend; its series appear at once (zero).
    pub fn backend(&self, name: &str) -> BackendStats {
        let f = &self.backends;
        let stats = BackendStats {
            latency: self
                .latencies
                .backend(name, self.workers.load(Ordering::Relaxed)),
            connect: f.connect_duration.with_label_values(&[name]),
            connections: f.connections.with_label_values(&[name]),
            connections_total: f.connections_total.with_label_values(&[name]),
            connect_errors: f.connect_errors.with_label_values(&[name]),
            up: f.up.with_label_values(&[name]),
            checks_ok: f.health_checks.with_label_values(&[name, "ok"]),
            checks_failed: f.health_checks.with_label_values(&[name, "failed"]),
            admin_states: ["ready", "draining", "maintenance"]
                .map(|state| (state, f.admin_state.with_label_values(&[name, state]))),
            ejections: f.ejections.with_label_values(&[name]),
            ejected: f.ejected.with_label_values(&[name]),
            session_failures: ["connect", "handshake", "mid_command"]
                .map(|kind| f.session_failures.with_label_values(&[name, kind])),
        };
        stats.up.set(1);
        stats.set_admin_state("ready");
        stats
    }

    /// Counts an established session's encrypted and compressed legs.
    pub fn session_legs(&self, tls: [bool; 2], compressed: [bool; 2]) {
        for (leg, (t, c)) in ["client", "backend"]
            .into_iter()
            .zip(tls.into_iter().zip(compressed))
        {
            if t {
                self.tls_sessions.with_label_values(&[leg]).inc();
            }
            if c {
                self.compressed_sessions.with_label_values(&[leg]).inc();
            }
        }
    }

    /// Registers a collector owned elsewhere (e.g. the Lua host's error counter).
    pub fn register(
        &self,
        collector: Box<dyn prometheus::core::Collector>,
    ) -> prometheus::Result<()> {
        self.registry.register(collector)
    }

    /// Says which pool `backend` is in.
    pub fn backend_pool(&self, backend: &str, pool: &str) {
        self.pools
            .backend_pool
            .with_label_values(&[backend, pool])
            .set(1);
    }

    /// The count of sessions established on backends of `pool` (a handle, resolved once per
    /// backend).
    pub fn routed(&self, pool: &str) -> prometheus::IntCounter {
        self.pools.routed.with_label_values(&[pool])
    }

    /// The read/write split series of `pool` (handles, resolved once per pool).
    pub fn split(&self, pool: &str) -> SplitSeries {
        let f = &self.pools;
        SplitSeries {
            on_replica: f.split_transactions.with_label_values(&[pool, "replica"]),
            on_primary: f.split_transactions.with_label_values(&[pool, "primary"]),
            read_no_replica: f.reads_on_primary.with_label_values(&[pool, "no_replica"]),
            read_causal_timeout: f
                .reads_on_primary
                .with_label_values(&[pool, "causal_timeout"]),
            causal_covered: f.causal_reads.with_label_values(&[pool, "covered"]),
            causal_waited: f.causal_reads.with_label_values(&[pool, "waited"]),
            causal_timed_out: f.causal_reads.with_label_values(&[pool, "timed_out"]),
            causal_wait: f.causal_wait.with_label_values(&[pool]),
            read_lag: f.reads_on_primary.with_label_values(&[pool, "lag"]),
            read_refused: f.reads_refused.with_label_values(&[pool]),
            write_replayed: f.writes_replayed.with_label_values(&[pool, "replayed"]),
            write_refusal_forwarded: f.writes_replayed.with_label_values(&[pool, "forwarded"]),
        }
    }

    pub fn rejected(&self, reason: Refusal) {
        self.client_rejected
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// The session count of worker `index` (a handle; the series appears at 0). Also counts the
    /// worker in, so backends created from then on keep a latency shard for it.
    pub fn worker_sessions(&self, index: usize) -> IntGauge {
        self.workers.fetch_max(index + 1, Ordering::Relaxed);
        self.worker_sessions
            .with_label_values(&[index.to_string().as_str()])
    }

    /// The replication lag a health check saw: `Some(seconds)` (NaN when unknown), or `None` for
    /// a server that is not a replica, which removes the series.
    pub fn replication_lag(&self, backend: &str, seconds: Option<f64>) {
        let lag = &self.backends.replication_lag;
        match seconds {
            Some(s) => lag.with_label_values(&[backend]).set(s),
            None => {
                let _ = lag.remove_label_values(&[backend]);
            }
        }
    }

    /// A health check found `backend` writable after read-only, or the other way round.
    pub fn role_changed(&self, backend: &str) {
        self.backends
            .role_changes
            .with_label_values(&[backend])
            .inc();
    }

    /// A certificate's expiry: `leg` is `client` (served to clients; `backend` is ""),
    /// `backend` (presented by backend `backend`) or `backend_client` (presented to it).
    pub fn set_certificate_expiry(&self, leg: &str, backend: &str, not_after: i64) {
        self.certificate_expiry
            .with_label_values(&[leg, backend])
            .set(not_after);
    }

    /// Removes a certificate's expiry series (TLS turned off, backend removed).
    pub fn remove_certificate_expiry(&self, leg: &str, backend: &str) {
        // Absent already is the state wanted.
        let _ = self.certificate_expiry.remove_label_values(&[leg, backend]);
    }

    /// The handles `crate::backends::kill::peer` counts its lookups with.
    pub fn peer_requests(&self) -> IntCounterVec {
        self.peer_requests.clone()
    }

    /// A connection closed over its PROXY protocol header: `malformed`, `timeout` or `unlisted`.
    pub fn proxy_protocol_rejected(&self, reason: &str) {
        self.proxy_protocol_rejected
            .with_label_values(&[reason])
            .inc();
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
    latency: Arc<BackendLatency>,
    pub connect: Histogram,
    pub connections: IntGauge,
    pub connections_total: IntCounter,
    pub connect_errors: IntCounter,
    pub up: IntGauge,
    pub checks_ok: IntCounter,
    pub checks_failed: IntCounter,
    /// `mysql_lb_backend_admin_state{backend,state}`, one gauge per state, in AdminState order.
    pub admin_states: [(&'static str, IntGauge); 3],
    pub ejections: IntCounter,
    pub ejected: IntGauge,
    /// `backend_session_failures_total{kind}`: connect, handshake, mid_command.
    pub session_failures: [IntCounter; 3],
}

impl BackendStats {
    /// Records a completed command from worker thread `worker` (its index, as in
    /// `mysql_lb_worker_sessions{worker}`) on that worker's shard.
    pub fn record(&self, worker: usize, c: &Completed) {
        self.latency.record(worker, c);
    }

    /// Counts `n` bytes read from the client (`to_backend`) or the backend, on worker `worker`'s
    /// shard.
    pub fn relayed(&self, worker: usize, to_backend: bool, n: usize) {
        self.latency.relayed(worker, to_backend, n as u64);
    }

    /// Bytes relayed to and from the backend, over every worker.
    pub fn bytes(&self) -> [u64; 2] {
        self.latency.bytes()
    }

    /// Completed commands of every kind and the sum of their latencies (seconds).
    pub fn latency_totals(&self) -> (u64, f64) {
        self.latency.totals()
    }

    /// Sets the admin state gauge of `state` to 1 and the others to 0.
    pub fn set_admin_state(&self, state: &str) {
        for (name, g) in &self.admin_states {
            g.set(i64::from(*name == state));
        }
    }

    /// Completed commands of every kind.
    pub fn total_commands(&self) -> u64 {
        self.latency.total_commands()
    }

    /// Cumulative bucket counts of all kinds together, for percentile estimates.
    pub fn latency_buckets(&self) -> [u64; LATENCY_BUCKETS.len() + 1] {
        self.latency.buckets()
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
    use crate::wire::protocol::response::CommandKind;
    use std::time::Duration;

    fn completed(command: u8, micros: u64) -> Completed {
        Completed {
            command,
            latency: Duration::from_micros(micros),
            first_byte: Duration::from_micros(micros / 2),
            ..Completed::default()
        }
    }

    #[test]
    fn records_by_kind_and_renders_histograms() {
        let m = Metrics::new();
        let b = m.backend("db1");
        b.record(0, &completed(0x03, 300));
        b.record(0, &completed(0x0E, 50));
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
    fn bytes_counted_by_several_workers_render_as_one_counter_per_direction() {
        let m = Metrics::new();
        for worker in 0..3 {
            m.worker_sessions(worker);
        }
        let b = m.backend("db1");
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text
            .contains("mysql_lb_backend_bytes_total{backend=\"db1\",direction=\"to_backend\"} 0"));
        b.relayed(0, true, 100);
        b.relayed(1, true, 20);
        b.relayed(2, false, 7);
        b.relayed(5, false, 1);
        assert_eq!(b.bytes(), [120, 8]);
        let text = String::from_utf8(m.render()).unwrap();
        assert!(
            text.contains("# TYPE mysql_lb_backend_bytes_total counter"),
            "{text}"
        );
        assert!(text.contains(
            "mysql_lb_backend_bytes_total{backend=\"db1\",direction=\"to_backend\"} 120"
        ));
        assert!(text.contains(
            "mysql_lb_backend_bytes_total{backend=\"db1\",direction=\"from_backend\"} 8"
        ));
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

    /// Exactly representable latencies (multiples of 2^-9 s), so sums agree in any order, spread
    /// from the 2.5 ms bucket to past the last bound, one bucket bound (0.25) included.
    fn exact_latencies() -> impl Iterator<Item = (u8, Duration)> {
        let commands = [0x03, 0x16, 0x17, 0x0E, 0x03];
        (0..14u32).flat_map(move |p| {
            commands
                .into_iter()
                .take(1 + p as usize % 5)
                .map(move |c| (c, Duration::from_nanos(1_953_125 << p)))
        })
    }

    /// The exposition lines of one family.
    fn family_lines(text: &str, family: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(family))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn sharded_latency_renders_as_one_histogram_per_backend_and_kind() {
        let m = Metrics::new();
        for worker in 0..3 {
            m.worker_sessions(worker);
        }
        let stats = [m.backend("db1"), m.backend("db2")];

        // The same samples through plain labelled histograms, as /metrics showed them before
        // they were sharded.
        let reference = Registry::new();
        let family = |name: &str, help: &str| {
            let opts = HistogramOpts::new(name, help)
                .namespace("mysql_lb")
                .buckets(LATENCY_BUCKETS.to_vec());
            let vec = HistogramVec::new(opts, &["backend", "command"]).unwrap();
            reference.register(Box::new(vec.clone())).unwrap();
            vec
        };
        let query = family(latency::QUERY_DURATION.name, latency::QUERY_DURATION.help);
        let first = family(latency::FIRST_BYTE.name, latency::FIRST_BYTE.help);
        for (i, (command, latency)) in exact_latencies().enumerate() {
            let c = Completed {
                command,
                latency,
                first_byte: latency / 2,
                ..Completed::default()
            };
            let backend = i % 2;
            // Every worker records on every backend, and some index past the workers.
            stats[backend].record(i % 4, &c);
            let labels = [["db1", "db2"][backend], c.kind().as_str()];
            query
                .with_label_values(&labels)
                .observe(latency.as_secs_f64());
            first
                .with_label_values(&labels)
                .observe(c.first_byte.as_secs_f64());
        }
        // A kind nobody recorded still has its zero series on both sides.
        for backend in ["db1", "db2"] {
            for kind in CommandKind::ALL {
                query.with_label_values(&[backend, kind.as_str()]);
                first.with_label_values(&[backend, kind.as_str()]);
            }
        }
        let mut expected = Vec::new();
        TextEncoder::new()
            .encode(&reference.gather(), &mut expected)
            .unwrap();
        let expected = String::from_utf8(expected).unwrap();
        let rendered = String::from_utf8(m.render()).unwrap();
        for name in [
            "backend_query_duration_seconds",
            "backend_first_byte_seconds",
        ] {
            let want = family_lines(&expected, name);
            assert!(want.len() > 2 * 4 * 19, "{name}: {} lines", want.len());
            assert_eq!(family_lines(&rendered, name), want, "{name}");
        }
        let total: u64 = stats.iter().map(BackendStats::total_commands).sum();
        assert_eq!(total, exact_latencies().count() as u64);
    }

    #[test]
    fn a_backend_recreated_under_its_name_keeps_its_latency_series() {
        let m = Metrics::new();
        m.worker_sessions(1);
        m.backend("db").record(1, &completed(0x03, 300));
        let again = m.backend("db");
        again.record(0, &completed(0x03, 300));
        assert_eq!(again.total_commands(), 2);
        let text = String::from_utf8(m.render()).unwrap();
        assert!(
            text.contains(
                "mysql_lb_backend_query_duration_seconds_count{backend=\"db\",command=\"query\"} 2"
            ),
            "{text}"
        );
    }

    #[test]
    fn certificate_expiry_is_set_per_leg_and_backend_and_removed() {
        let m = Metrics::new();
        m.set_certificate_expiry("client", "", 2_000_000_000);
        m.set_certificate_expiry("backend", "db1", 1_900_000_000);
        m.remove_certificate_expiry("backend", "db2");
        let text = String::from_utf8(m.render()).unwrap();
        let family = "mysql_lb_tls_certificate_expiry_timestamp_seconds";
        assert!(
            text.contains(&format!(
                "{family}{{backend=\"\",leg=\"client\"}} 2000000000"
            )),
            "{text}"
        );
        assert!(text.contains(&format!(
            "{family}{{backend=\"db1\",leg=\"backend\"}} 1900000000"
        )));
        m.remove_certificate_expiry("client", "");
        let text = String::from_utf8(m.render()).unwrap();
        let expiry: Vec<&str> = text.lines().filter(|l| l.starts_with(family)).collect();
        assert!(
            !expiry.iter().any(|l| l.contains("leg=\"client\"}")),
            "{text}"
        );
        assert!(
            expiry.iter().any(|l| l.contains("leg=\"backend\"}")),
            "{text}"
        );
    }

    #[test]
    fn quantiles_from_buckets() {
        let m = Metrics::new();
        let b = m.backend("db");
        for _ in 0..99 {
            b.record(0, &completed(0x03, 200)); // bucket (0.0001, 0.00025]
        }
        b.record(0, &completed(0x03, 40_000)); // bucket (0.025, 0.05]
        let buckets = b.latency_buckets();
        let p50 = quantile(&buckets, 0.5).unwrap();
        assert!(p50 > 0.0001 && p50 <= 0.00025, "{p50}");
        let p999 = quantile(&buckets, 0.999).unwrap();
        assert!(p999 > 0.025 && p999 <= 0.05, "{p999}");
        assert_eq!(quantile(&[0; 17], 0.5), None);
    }
}
