//! Backends and the choice of one per client connection.
//!
//! A [`BackendSet`] is immutable once built (a reload will build a new one and swap it), so the
//! hot path reads it without locks: state that changes per connection lives in atomics on each
//! [`Backend`]. Choosing is a separate step from accepting so other policies (least connections,
//! weights, a Lua hook) slot in behind [`BackendSet::candidates`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{BackendAddr, BackendConfig};
use crate::metrics::{BackendStats, Metrics};

/// One server behind the proxy.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub address: BackendAddr,
    pub weight: u32,
    /// Out of rotation (after `fall` failed checks or a failed client connect).
    down: AtomicBool,
    /// Without health checks, a down backend returns after this (nanoseconds since the set's
    /// epoch); with them, only `rise` passed checks bring it back.
    down_until: AtomicU64,
    active: AtomicUsize,
    passes: AtomicU32,
    failures: AtomicU32,
    last_check: Mutex<Option<CheckRecord>>,
    pub stats: BackendStats,
}

/// The outcome of the latest health check, for the status endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRecord {
    pub at: std::time::SystemTime,
    /// None when the check passed, else why it failed.
    pub error: Option<String>,
}

/// A state change the caller should log (once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    WentDown,
    CameUp,
}

impl Backend {
    /// Client sessions currently relayed to this backend.
    pub fn active(&self) -> usize {
        self.active.load(Relaxed)
    }

    /// The latest health check's outcome, if one ran.
    pub fn last_check(&self) -> Option<CheckRecord> {
        self.last_check.lock().map(|g| g.clone()).unwrap_or(None)
    }

    fn set_down(&self, down: bool) -> bool {
        let was = self.down.swap(down, Relaxed);
        self.stats.up.set(i64::from(!down));
        was != down
    }
}

/// Holds a backend's active-connection count up for as long as a session uses it.
#[derive(Debug)]
pub struct Lease {
    backend: Arc<Backend>,
}

impl Lease {
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.backend.active.fetch_sub(1, Relaxed);
        self.backend.stats.connections.dec();
    }
}

/// The configured backends with their round-robin position and down state.
#[derive(Debug)]
pub struct BackendSet {
    backends: Vec<Arc<Backend>>,
    next: AtomicUsize,
    cooloff: Duration,
    /// With health checks running, only they bring a down backend back.
    checked: bool,
    epoch: Instant,
}

impl BackendSet {
    /// `checked` says whether health checks run (then they alone bring a down backend back).
    pub fn new(
        configs: &[BackendConfig],
        cooloff: Duration,
        checked: bool,
        metrics: &Metrics,
    ) -> Self {
        let backends = configs
            .iter()
            .map(|c| {
                Arc::new(Backend {
                    name: c.name.clone(),
                    address: c.address.clone(),
                    weight: c.weight,
                    down: AtomicBool::new(false),
                    down_until: AtomicU64::new(0),
                    active: AtomicUsize::new(0),
                    passes: AtomicU32::new(0),
                    failures: AtomicU32::new(0),
                    last_check: Mutex::new(None),
                    stats: metrics.backend(&c.name),
                })
            })
            .collect();
        Self {
            backends,
            next: AtomicUsize::new(0),
            cooloff,
            checked,
            epoch: Instant::now(),
        }
    }

    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    fn nanos_since_epoch(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// True when the backend is in rotation.
    pub fn is_up(&self, backend: &Backend, now: Instant) -> bool {
        !backend.down.load(Relaxed)
            || (!self.checked && backend.down_until.load(Relaxed) <= self.nanos_since_epoch(now))
    }

    /// The order in which to try backends for a new client: the round-robin choice among the up
    /// backends first, then the other up ones, then — only so a recovered server is not refused
    /// while its cool-off runs — those cooling off, soonest back first.
    pub fn candidates(&self, now: Instant) -> Vec<Arc<Backend>> {
        let (mut up, mut down): (Vec<_>, Vec<_>) =
            self.backends.iter().partition(|b| self.is_up(b, now));
        if !up.is_empty() {
            let start = self.next.fetch_add(1, Relaxed) % up.len();
            up.rotate_left(start);
        }
        down.sort_by_key(|b| b.down_until.load(Relaxed));
        up.into_iter().chain(down).cloned().collect()
    }

    /// Takes a backend out of rotation at once after a client's connect to it failed. Returns true
    /// if it was up, so the caller logs the change once.
    pub fn mark_down(&self, backend: &Backend, now: Instant) -> bool {
        let was_up = self.is_up(backend, now);
        let until = self.nanos_since_epoch(now + self.cooloff).max(1);
        backend.down_until.store(until, Relaxed);
        backend.passes.store(0, Relaxed);
        backend.set_down(true);
        backend.stats.connect_errors.inc();
        was_up
    }

    /// A client's connect succeeded: whatever the checks said, the backend serves. Returns true if
    /// it was down.
    pub fn mark_up(&self, backend: &Backend) -> bool {
        backend.down_until.store(0, Relaxed);
        backend.failures.store(0, Relaxed);
        backend.set_down(false)
    }

    /// Records a health check. A backend goes down after `fall` consecutive failures and comes back
    /// after `rise` consecutive passes; the transition, if any, is returned for logging.
    pub fn record_check(
        &self,
        backend: &Backend,
        error: Option<String>,
        fall: u32,
        rise: u32,
    ) -> Option<Transition> {
        let passed = error.is_none();
        if let Ok(mut last) = backend.last_check.lock() {
            *last = Some(CheckRecord {
                at: std::time::SystemTime::now(),
                error,
            });
        }
        if passed {
            backend.stats.checks_ok.inc();
            backend.failures.store(0, Relaxed);
            let passes = backend.passes.fetch_add(1, Relaxed).saturating_add(1);
            if passes >= rise && backend.down.load(Relaxed) && backend.set_down(false) {
                backend.down_until.store(0, Relaxed);
                return Some(Transition::CameUp);
            }
        } else {
            backend.stats.checks_failed.inc();
            backend.passes.store(0, Relaxed);
            let failures = backend.failures.fetch_add(1, Relaxed).saturating_add(1);
            if failures >= fall && backend.set_down(true) {
                // Only passing checks bring it back, never a cool-off.
                backend.down_until.store(u64::MAX, Relaxed);
                return Some(Transition::WentDown);
            }
        }
        None
    }

    /// Counts a session on `backend` until the lease is dropped.
    pub fn lease(&self, backend: &Arc<Backend>) -> Lease {
        backend.active.fetch_add(1, Relaxed);
        backend.stats.connections.inc();
        backend.stats.connections_total.inc();
        Lease {
            backend: Arc::clone(backend),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: u16) -> BackendSet {
        let configs: Vec<_> = (0..n)
            .map(|i| BackendConfig {
                name: format!("b{i}"),
                address: BackendAddr::Tcp {
                    host: "127.0.0.1".into(),
                    port: 3306 + i,
                },
                weight: 1,
            })
            .collect();
        BackendSet::new(&configs, Duration::from_secs(5), false, &Metrics::new())
    }

    #[test]
    fn checks_take_a_backend_down_after_fall_and_back_after_rise() {
        let s = set(2);
        let b = &s.backends()[0];
        let now = Instant::now();
        let fail = || Some("connection refused".to_owned());
        assert_eq!(s.record_check(b, fail(), 2, 3), None);
        assert!(s.is_up(b, now));
        assert_eq!(s.record_check(b, fail(), 2, 3), Some(Transition::WentDown));
        assert_eq!(s.record_check(b, fail(), 2, 3), None, "logged once");
        assert!(!s.is_up(b, now));
        assert_eq!(b.stats.up.get(), 0);
        assert_eq!(s.record_check(b, None, 2, 3), None);
        assert_eq!(
            s.record_check(b, fail(), 2, 3),
            None,
            "a failure resets the passes"
        );
        assert_eq!(s.record_check(b, None, 2, 3), None);
        assert_eq!(s.record_check(b, None, 2, 3), None);
        assert_eq!(s.record_check(b, None, 2, 3), Some(Transition::CameUp));
        assert!(s.is_up(b, now));
        assert_eq!(b.stats.up.get(), 1);
        assert_eq!(b.last_check().unwrap().error, None);
    }

    #[test]
    fn with_checks_a_failed_connect_needs_passes_to_come_back() {
        let configs = [BackendConfig {
            name: "b".into(),
            address: BackendAddr::Unix("/nonexistent".into()),
            weight: 1,
        }];
        let s = BackendSet::new(&configs, Duration::from_secs(1), true, &Metrics::new());
        let b = &s.backends()[0];
        let now = Instant::now();
        s.mark_down(b, now);
        assert!(
            !s.is_up(b, now + Duration::from_secs(10)),
            "no cool-off expiry when checked"
        );
        s.record_check(b, None, 2, 2);
        assert_eq!(s.record_check(b, None, 2, 2), Some(Transition::CameUp));
        assert!(s.is_up(b, now));
    }

    #[test]
    fn round_robin_spreads_evenly() {
        let s = set(3);
        let now = Instant::now();
        let mut counts = [0; 3];
        for _ in 0..30 {
            let first = &s.candidates(now)[0];
            counts[first.name[1..].parse::<usize>().unwrap()] += 1;
        }
        assert_eq!(counts, [10, 10, 10]);
    }

    #[test]
    fn down_backend_is_skipped_then_tried_last_then_back() {
        let s = set(3);
        let now = Instant::now();
        assert!(s.mark_down(&s.backends()[1], now));
        assert!(
            !s.mark_down(&s.backends()[1], now),
            "already down: no second log"
        );
        let mut firsts = Vec::new();
        for _ in 0..10 {
            let c = s.candidates(now);
            assert_eq!(c.len(), 3);
            assert_eq!(c[2].name, "b1", "the down backend comes last");
            firsts.push(c[0].name.clone());
        }
        assert_eq!(firsts.iter().filter(|n| *n == "b0").count(), 5);
        assert_eq!(firsts.iter().filter(|n| *n == "b2").count(), 5);
        // After the cool-off it is up again.
        let later = now + Duration::from_secs(6);
        assert!(s.is_up(&s.backends()[1], later));
        assert!(s.mark_up(&s.backends()[1]));
    }

    #[test]
    fn lease_counts_active_sessions() {
        let s = set(1);
        let b = Arc::clone(&s.backends()[0]);
        let l1 = s.lease(&b);
        let l2 = s.lease(&b);
        assert_eq!(b.active(), 2);
        drop(l1);
        assert_eq!(b.active(), 1);
        drop(l2);
        assert_eq!(b.active(), 0);
    }
}
