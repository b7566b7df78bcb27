//! Whether a backend is in rotation: down after a failed connect (for `down_cooloff`) or after
//! `fall` failed health checks (until `rise` pass), out while an operator drains it or holds it
//! in maintenance.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::{AdminState, Backend, BackendSet, CheckRecord, Transition};

/// A backend's state as a script sees it (`proxy.BACKEND_STATE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// In rotation but never reached yet (no connect or check has succeeded).
    Unknown,
    Up,
    Down,
}

/// Decides whether a backend is in rotation; shared by the set and its script host.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rotation {
    pub(super) epoch: Instant,
    /// With health checks running, only they bring a down backend back.
    pub(super) checked: bool,
}

impl Rotation {
    pub(super) fn nanos_since_epoch(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn is_up(&self, backend: &Backend, now: Instant) -> bool {
        if backend.admin_state() == AdminState::Maintenance {
            return false;
        }
        !backend.down.load(Relaxed)
            || (!self.checked && backend.down_until.load(Relaxed) <= self.nanos_since_epoch(now))
    }

    pub(crate) fn health(&self, backend: &Backend, now: Instant) -> Health {
        if !self.is_up(backend, now) {
            Health::Down
        } else if backend.seen_up.load(Relaxed) {
            Health::Up
        } else {
            Health::Unknown
        }
    }
}

impl BackendSet {
    /// Takes a backend out of rotation at once after a client's connect to it failed. Returns true
    /// if it was up, so the caller logs the change once.
    pub fn mark_down(&self, backend: &Backend, now: Instant) -> bool {
        let was_up = self.is_up(backend, now);
        let until = self.rotation.nanos_since_epoch(now + self.cooloff).max(1);
        backend.down_until.store(until, Relaxed);
        backend.passes.store(0, Relaxed);
        backend.set_down(true);
        backend.stats.connect_errors.inc();
        was_up
    }

    /// A client's connect succeeded: whatever the checks said, the backend serves. Returns true if
    /// it was down.
    pub fn mark_up(&self, backend: &Backend) -> bool {
        backend.seen_up.store(true, Relaxed);
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
            backend.seen_up.store(true, Relaxed);
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
}
