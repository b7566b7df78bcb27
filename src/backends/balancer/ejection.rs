//! Outlier ejection: a backend whose sessions keep failing leaves rotation for a backoff, then
//! earns its way back with one trial session.
//!
//! What counts as a failure is what a client would call the backend's fault: a connect or
//! greeting that fails or times out, a connection phase the backend stops answering, a command
//! the backend closes the connection under. `failures` of them within `window` eject the backend
//! for `backoff`; each ejection that follows within `max_backoff` of the last return doubles the
//! time (up to `max_backoff`). When the time is up the next new client is the trial: if its
//! connection phase completes the backend is back, if it fails the backend is ejected again,
//! for longer. Never more than `max_share` of a pool is ejected at once, so a fault on the
//! proxy's side (its network, a bad password everywhere) cannot empty a pool.
//!
//! Failures are rare and ejections rarer, so the state is a few atomics read on each pick plus a
//! small locked list of recent failure times touched only when something failed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use crate::config::EjectionConfig;

/// Why a session counted against its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Connect, greeting or the backend leg's TLS failed or timed out.
    Connect,
    /// The backend stopped answering (or closed) during the connection phase.
    Handshake,
    /// The backend closed the connection, or it failed, while a command was in flight.
    MidCommand,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Handshake => "connection phase",
            Self::MidCommand => "closed mid-command",
        }
    }
}

/// Where a backend stands, at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Not ejected.
    In,
    /// Ejected, its backoff still running.
    Ejected,
    /// Its backoff is over and no trial is running: the next client may be the trial.
    TrialDue,
    /// A trial session is on its way; others wait for its verdict.
    OnTrial,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::Ejected => "ejected",
            Self::TrialDue => "trial_due",
            Self::OnTrial => "on_trial",
        }
    }
}

/// What a failure did, for the caller to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Counted; the backend stays.
    Counted,
    /// Ejected for `backoff`, the `streak`-th ejection in a row; `failures` within the window
    /// (0 when a trial failed).
    Ejected {
        backoff: Duration,
        streak: u32,
        failures: usize,
    },
    /// Enough failures to eject, but `ejected` of the pool's `members` already are.
    Spared { ejected: usize, members: usize },
}

/// One backend's ejection state. Times are nanoseconds since the set's epoch (0 = never).
#[derive(Debug, Default)]
pub struct Ejection {
    /// Ejected until then; 0 when not ejected. Stays set through the trial.
    until: AtomicU64,
    /// When the running trial was handed out; 0 when none.
    trial: AtomicU64,
    /// Ejections in a row.
    streak: AtomicU32,
    /// When the last trial succeeded.
    returned: AtomicU64,
    /// Failure times within the window, oldest first.
    recent: Mutex<VecDeque<u64>>,
}

impl Ejection {
    /// Where the backend stands at `now`. A trial with no verdict after `trial_timeout` (its
    /// session went elsewhere, or hangs) no longer holds others back.
    pub fn standing(&self, now: u64, trial_timeout: Duration) -> Standing {
        let until = self.until.load(Relaxed);
        if until == 0 {
            return Standing::In;
        }
        if now < until {
            return Standing::Ejected;
        }
        let trial = self.trial.load(Relaxed);
        if trial != 0 && now.saturating_sub(trial) < nanos(trial_timeout) {
            Standing::OnTrial
        } else {
            Standing::TrialDue
        }
    }

    /// True while ejected or on trial (counts against the pool's share).
    pub fn is_out(&self) -> bool {
        self.until.load(Relaxed) != 0
    }

    /// Remaining backoff at `now`, if ejected.
    pub fn remaining(&self, now: u64) -> Option<Duration> {
        let until = self.until.load(Relaxed);
        (until != 0).then(|| Duration::from_nanos(until.saturating_sub(now)))
    }

    /// Ejections in a row so far.
    pub fn streak(&self) -> u32 {
        self.streak.load(Relaxed)
    }

    /// Hands out the trial: true for exactly one caller once the backoff is over.
    pub fn claim_trial(&self, now: u64, trial_timeout: Duration) -> bool {
        let trial = self.trial.load(Relaxed);
        if self.standing(now, trial_timeout) != Standing::TrialDue {
            return false;
        }
        self.trial
            .compare_exchange(trial, now.max(1), Relaxed, Relaxed)
            .is_ok()
    }

    /// A session's connection phase completed on this backend. Returns true when that ends an
    /// ejection (the trial, or any session once the backoff is over).
    pub fn succeeded(&self, now: u64) -> bool {
        let until = self.until.load(Relaxed);
        if until == 0 || now < until {
            return false;
        }
        if self
            .until
            .compare_exchange(until, 0, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        self.trial.store(0, Relaxed);
        self.returned.store(now.max(1), Relaxed);
        if let Ok(mut recent) = self.recent.lock() {
            recent.clear();
        }
        true
    }

    /// Ends any ejection at once (ejection turned off by a reload).
    pub fn clear(&self) -> bool {
        self.trial.store(0, Relaxed);
        self.streak.store(0, Relaxed);
        self.until.swap(0, Relaxed) != 0
    }

    /// Records a failure at `now`. `room` says whether the pool may lose one more backend; it is
    /// asked only when this failure would eject.
    pub fn failed(
        &self,
        now: u64,
        config: &EjectionConfig,
        room: impl FnOnce() -> Result<(), (usize, usize)>,
    ) -> Verdict {
        if !config.enabled() {
            return Verdict::Counted;
        }
        let until = self.until.load(Relaxed);
        if until != 0 {
            if now < until {
                // A session that began before the ejection: already accounted for.
                return Verdict::Counted;
            }
            // The trial (or a session after the backoff) failed: out again, for longer.
            return self.eject(now, config, 0);
        }
        let Ok(mut recent) = self.recent.lock() else {
            return Verdict::Counted;
        };
        let horizon = now.saturating_sub(nanos(config.window));
        while recent.front().is_some_and(|&t| t < horizon) {
            recent.pop_front();
        }
        recent.push_back(now);
        let failures = recent.len();
        if failures < config.failures as usize {
            return Verdict::Counted;
        }
        // Start counting afresh either way: a spared backend is asked again after as many more.
        recent.clear();
        drop(recent);
        match room() {
            Ok(()) => self.eject(now, config, failures),
            Err((ejected, members)) => Verdict::Spared { ejected, members },
        }
    }

    fn eject(&self, now: u64, config: &EjectionConfig, failures: usize) -> Verdict {
        let returned = self.returned.load(Relaxed);
        let calm = returned != 0 && now.saturating_sub(returned) >= nanos(config.max_backoff);
        let streak = if calm || self.streak.load(Relaxed) == 0 {
            1
        } else {
            self.streak.load(Relaxed).saturating_add(1)
        };
        self.streak.store(streak, Relaxed);
        let backoff = config.backoff_for(streak);
        self.trial.store(0, Relaxed);
        self.until
            .store(now.saturating_add(nanos(backoff)).max(1), Relaxed);
        Verdict::Ejected {
            backoff,
            streak,
            failures,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const TRIAL: Duration = Duration::from_secs(5);

    fn config() -> EjectionConfig {
        EjectionConfig {
            failures: 3,
            window: Duration::from_secs(10),
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(40),
            max_share: 0.5,
        }
    }

    fn fail(e: &Ejection, at: u64) -> Verdict {
        e.failed(at, &config(), || Ok(()))
    }

    #[test]
    fn failures_within_the_window_eject() {
        let e = Ejection::default();
        assert_eq!(fail(&e, S), Verdict::Counted);
        assert_eq!(fail(&e, 2 * S), Verdict::Counted);
        assert_eq!(e.standing(2 * S, TRIAL), Standing::In);
        let v = fail(&e, 3 * S);
        assert_eq!(
            v,
            Verdict::Ejected {
                backoff: Duration::from_secs(10),
                streak: 1,
                failures: 3
            }
        );
        assert_eq!(e.standing(12 * S, TRIAL), Standing::Ejected);
        assert_eq!(e.remaining(5 * S), Some(Duration::from_secs(8)));
    }

    #[test]
    fn failures_spread_wider_than_the_window_do_not() {
        let e = Ejection::default();
        for i in 0..10 {
            assert_eq!(fail(&e, i * 6 * S), Verdict::Counted, "failure {i}");
        }
        assert_eq!(e.standing(60 * S, TRIAL), Standing::In);
    }

    #[test]
    fn one_trial_then_back_on_success() {
        let e = Ejection::default();
        for t in 1..=3 {
            fail(&e, t * S);
        }
        assert!(!e.claim_trial(12 * S, TRIAL), "backoff runs until 13 s");
        assert_eq!(e.standing(13 * S, TRIAL), Standing::TrialDue);
        assert!(e.claim_trial(13 * S, TRIAL));
        assert!(!e.claim_trial(13 * S, TRIAL), "only one trial at a time");
        assert_eq!(e.standing(14 * S, TRIAL), Standing::OnTrial);
        assert!(e.succeeded(14 * S));
        assert_eq!(e.standing(14 * S, TRIAL), Standing::In);
        assert!(!e.succeeded(15 * S), "restored once");
    }

    #[test]
    fn a_trial_without_verdict_times_out() {
        let e = Ejection::default();
        for t in 1..=3 {
            fail(&e, t * S);
        }
        assert!(e.claim_trial(13 * S, TRIAL));
        assert_eq!(e.standing(17 * S, TRIAL), Standing::OnTrial);
        assert_eq!(e.standing(18 * S, TRIAL), Standing::TrialDue);
        assert!(e.claim_trial(18 * S, TRIAL));
    }

    #[test]
    fn failed_trials_double_the_backoff_up_to_the_cap() {
        let e = Ejection::default();
        for t in 1..=3 {
            fail(&e, t * S);
        }
        let mut at = 13 * S;
        let mut seen = Vec::new();
        for _ in 0..4 {
            assert!(e.claim_trial(at, TRIAL));
            match fail(&e, at) {
                Verdict::Ejected {
                    backoff, failures, ..
                } => {
                    assert_eq!(failures, 0, "a failed trial ejects on its own");
                    seen.push(backoff.as_secs());
                    at += backoff.as_secs() * S;
                }
                other => panic!("expected an ejection, got {other:?}"),
            }
        }
        assert_eq!(seen, [20, 40, 40, 40]);
        assert_eq!(e.streak(), 5);
    }

    #[test]
    fn the_streak_starts_over_after_a_calm_max_backoff() {
        let e = Ejection::default();
        for t in 1..=3 {
            fail(&e, t * S);
        }
        assert!(e.succeeded(13 * S));
        // Failing again soon after: the second ejection is longer.
        for t in 14..=16 {
            fail(&e, t * S);
        }
        assert_eq!(e.streak(), 2);
        assert!(e.succeeded(36 * S));
        // Then calm for max_backoff (40 s): the next ejection is the first of a new streak.
        let mut v = Verdict::Counted;
        for t in 76..=78 {
            v = fail(&e, t * S);
        }
        assert!(matches!(v, Verdict::Ejected { streak: 1, .. }), "{v:?}");
    }

    #[test]
    fn sessions_from_before_the_ejection_do_not_extend_it() {
        let e = Ejection::default();
        for t in 1..=3 {
            fail(&e, t * S);
        }
        assert_eq!(fail(&e, 4 * S), Verdict::Counted);
        assert_eq!(e.remaining(4 * S), Some(Duration::from_secs(9)));
        assert!(
            !e.succeeded(5 * S),
            "a success during the backoff ends nothing"
        );
    }

    #[test]
    fn no_room_in_the_pool_spares_and_counts_afresh() {
        let e = Ejection::default();
        let full = || Err((1, 2));
        e.failed(S, &config(), full);
        e.failed(2 * S, &config(), full);
        assert_eq!(
            e.failed(3 * S, &config(), full),
            Verdict::Spared {
                ejected: 1,
                members: 2
            }
        );
        assert_eq!(e.standing(3 * S, TRIAL), Standing::In);
        assert_eq!(
            e.failed(4 * S, &config(), full),
            Verdict::Counted,
            "counting starts over"
        );
    }

    #[test]
    fn off_never_ejects() {
        let e = Ejection::default();
        for t in 1..100 {
            assert_eq!(
                e.failed(t * S, &EjectionConfig::off(), || Ok(())),
                Verdict::Counted
            );
        }
        assert!(!e.is_out());
    }
}
