//! Backends and the choice of one per client connection.
//!
//! A [`BackendSet`] is immutable once built (a reload will build a new one and swap it), so the
//! hot path reads it without locks: state that changes per connection lives in atomics on each
//! [`Backend`]. Choosing is a separate step from accepting so other policies (least connections,
//! weights, a Lua hook) slot in behind [`BackendSet::candidates`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{BackendAddr, BackendConfig};
use crate::metrics::BackendStats;

/// One server behind the proxy.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    pub address: BackendAddr,
    pub weight: u32,
    /// Nanoseconds since the set's epoch until which the backend gets no new clients; 0 = up.
    down_until: AtomicU64,
    active: AtomicUsize,
    pub stats: BackendStats,
}

impl Backend {
    /// Client sessions currently relayed to this backend.
    pub fn active(&self) -> usize {
        self.active.load(Relaxed)
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
    }
}

/// The configured backends with their round-robin position and down state.
#[derive(Debug)]
pub struct BackendSet {
    backends: Vec<Arc<Backend>>,
    next: AtomicUsize,
    cooloff: Duration,
    epoch: Instant,
}

impl BackendSet {
    pub fn new(configs: &[BackendConfig], cooloff: Duration) -> Self {
        let backends = configs
            .iter()
            .map(|c| {
                Arc::new(Backend {
                    name: c.name.clone(),
                    address: c.address.clone(),
                    weight: c.weight,
                    down_until: AtomicU64::new(0),
                    active: AtomicUsize::new(0),
                    stats: BackendStats::default(),
                })
            })
            .collect();
        Self {
            backends,
            next: AtomicUsize::new(0),
            cooloff,
            epoch: Instant::now(),
        }
    }

    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    fn nanos_since_epoch(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// True when the backend is not cooling off after a failure.
    pub fn is_up(&self, backend: &Backend, now: Instant) -> bool {
        backend.down_until.load(Relaxed) <= self.nanos_since_epoch(now)
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

    /// Takes a backend out of rotation for the cool-off period. Returns true if it was up, so the
    /// caller logs the change once.
    pub fn mark_down(&self, backend: &Backend, now: Instant) -> bool {
        let was_up = self.is_up(backend, now);
        let until = self.nanos_since_epoch(now + self.cooloff).max(1);
        backend.down_until.store(until, Relaxed);
        backend.stats.connect_errors.fetch_add(1, Relaxed);
        was_up
    }

    /// Puts a backend back in rotation after a successful connect. Returns true if it was down.
    pub fn mark_up(&self, backend: &Backend) -> bool {
        backend.down_until.swap(0, Relaxed) != 0
    }

    /// Counts a session on `backend` until the lease is dropped.
    pub fn lease(&self, backend: &Arc<Backend>) -> Lease {
        backend.active.fetch_add(1, Relaxed);
        backend.stats.connections_total.fetch_add(1, Relaxed);
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
        BackendSet::new(&configs, Duration::from_secs(5))
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
