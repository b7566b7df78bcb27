//! Whether a backend is in rotation: down after a failed connect (for `down_cooloff`) or after
//! `fall` failed health checks (until `rise` pass), out while ejected for failing sessions (see
//! [`ejection`](super::ejection)), out while an operator drains it or holds it in maintenance.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::ejection::{Failure, Standing, Verdict};
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
    /// How long a trial session holds other clients off an ejected backend.
    pub(super) trial_timeout: Duration,
}

impl Rotation {
    pub(super) fn nanos_since_epoch(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn is_up(&self, backend: &Backend, now: Instant) -> bool {
        self.is_up_at(backend, self.nanos_since_epoch(now))
    }

    /// [`is_up`](Self::is_up) at `at` nanoseconds since the epoch (one clock reading for many
    /// backends).
    pub(super) fn is_up_at(&self, backend: &Backend, at: u64) -> bool {
        if backend.admin_state() == AdminState::Maintenance {
            return false;
        }
        if matches!(
            backend.ejection.standing(at, self.trial_timeout),
            Standing::Ejected | Standing::OnTrial
        ) {
            return false;
        }
        !backend.down.load(Relaxed) || (!self.checked && backend.down_until.load(Relaxed) <= at)
    }

    /// Moves out of `up` the backends whose ejection ended and returns the one whose trial this
    /// pick hands out (it goes first); the others wait in `down` for that trial's verdict.
    pub(super) fn take_trial<'a>(
        &self,
        up: &mut Vec<&'a Arc<Backend>>,
        down: &mut Vec<&'a Arc<Backend>>,
        now: Instant,
    ) -> Option<&'a Arc<Backend>> {
        if up.iter().all(|b| !b.ejection.is_out()) {
            return None;
        }
        let at = self.nanos_since_epoch(now);
        let mut trial = None;
        let mut i = 0;
        while i < up.len() {
            let b = up[i];
            if !b.ejection.is_out() {
                i += 1;
                continue;
            }
            up.remove(i);
            if trial.is_none() && b.ejection.claim_trial(at, self.trial_timeout) {
                info!(backend = %b.name, "trial session for an ejected backend");
                trial = Some(b);
            } else {
                down.push(b);
            }
        }
        trial
    }

    /// When a backend out of rotation is due back, for ordering the last resorts.
    pub(super) fn back_at(&self, backend: &Backend, now: Instant) -> u64 {
        let ejected = backend
            .ejection
            .remaining(self.nanos_since_epoch(now))
            .map_or(0, |d| self.nanos_since_epoch(now + d));
        backend.down_until.load(Relaxed).max(ejected)
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
        // What its server said of its role no longer holds (as when its checks take it down,
        // which they then do not report again): an `auto` primary lost takes no writes, and a
        // replica promoted meanwhile is the one primary.
        backend.role.forget();
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

impl BackendSet {
    /// A session failed on `backend`'s side: counted, and when its sessions keep failing the
    /// backend is ejected (logged once, with `reason`, the latest failure).
    pub fn session_failed(&self, backend: &Backend, failure: Failure, reason: &str, now: Instant) {
        backend.stats.session_failures[failure as usize].inc();
        let config = &self.ejection;
        if !config.enabled() {
            return;
        }
        let at = self.rotation.nanos_since_epoch(now);
        let _deciding = self.ejecting.lock();
        let verdict = backend
            .ejection
            .failed(at, config, || self.room_to_eject(backend));
        match verdict {
            Verdict::Counted => {}
            Verdict::Ejected {
                backoff,
                streak,
                failures,
            } => {
                backend.stats.ejections.inc();
                backend.stats.ejected.set(1);
                let why = if failures == 0 {
                    "its trial session failed".to_owned()
                } else {
                    format!(
                        "{failures} failed sessions within {}",
                        humantime::format_duration(config.window)
                    )
                };
                warn!(
                    backend = %backend.name,
                    backoff = %humantime::format_duration(backoff),
                    ejection = streak,
                    "backend ejected: {why} (last: {}: {reason}); a trial session follows the backoff",
                    failure.as_str()
                );
            }
            Verdict::Spared { ejected, members } => warn!(
                backend = %backend.name,
                "backend not ejected despite {} failed sessions within {}: {ejected} of the {members} backends of pool {} are ejected already (max_share {})",
                config.failures,
                humantime::format_duration(config.window),
                backend.pool,
                config.max_share
            ),
        }
    }

    /// A session's connection phase completed on `backend`: ends an ejection whose backoff is over
    /// (the trial's success).
    pub fn session_succeeded(&self, backend: &Backend, now: Instant) {
        if !backend.ejection.is_out() {
            return;
        }
        if backend
            .ejection
            .succeeded(self.rotation.nanos_since_epoch(now))
        {
            backend.stats.ejected.set(0);
            info!(backend = %backend.name, "ejected backend back in rotation: its trial session succeeded");
        }
    }

    /// Where `backend` stands on ejection at `now`, and how much of its backoff is left.
    pub fn ejection_of(&self, backend: &Backend, now: Instant) -> (Standing, Option<Duration>) {
        let at = self.rotation.nanos_since_epoch(now);
        (
            backend.ejection.standing(at, self.rotation.trial_timeout),
            backend.ejection.remaining(at),
        )
    }

    /// Whether `backend`'s pool can lose one more backend to ejection; else how many of how many
    /// are out.
    fn room_to_eject(&self, backend: &Backend) -> Result<(), (usize, usize)> {
        let members = self
            .pools
            .iter()
            .find(|p| p.name == backend.pool)
            .map_or(&[][..], |p| &p.members[..]);
        let out = members.iter().filter(|b| b.ejection.is_out()).count();
        if out < self.ejection.allowed(members.len()) {
            Ok(())
        } else {
            Err((out, members.len()))
        }
    }
}
