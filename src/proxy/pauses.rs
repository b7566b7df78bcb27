//! `PAUSE` and `RESUME` (the SQL admin port's, PgBouncer's habit): while a pool is paused, its
//! transaction-mode sessions hold each new transaction at its start, without a server
//! connection, until it is resumed or `pooling.wait_timeout` passes (then the client gets an
//! ERR in the transaction's place). A transaction already running runs to its end, so a paused
//! pool's server connections all go idle: the moment for a manual switchover.
//!
//! Nothing is paused most of the time, so a transaction's start pays one relaxed atomic load;
//! only while something is paused does it take the mutex.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

/// Which pools are paused (`None` in the set: every pool).
#[derive(Debug, Default)]
pub struct Pauses {
    any: AtomicBool,
    paused: Mutex<BTreeSet<Option<String>>>,
    resumed: Notify,
}

impl Pauses {
    /// Pauses `pool` (None: every pool); false when it already was.
    pub fn pause(&self, pool: Option<&str>) -> bool {
        let mut paused = self.lock();
        let new = paused.insert(pool.map(str::to_owned));
        self.any.store(true, Ordering::Release);
        new
    }

    /// Resumes `pool` (None: everything paused, every pool); false when it was not paused.
    pub fn resume(&self, pool: Option<&str>) -> bool {
        let mut paused = self.lock();
        let was = match pool {
            None => {
                let any = !paused.is_empty();
                paused.clear();
                any
            }
            Some(p) => paused.remove(&Some(p.to_owned())),
        };
        self.any.store(!paused.is_empty(), Ordering::Release);
        drop(paused);
        self.resumed.notify_waiters();
        was
    }

    /// Whether a new transaction of `pool` must wait now.
    #[inline]
    pub fn holds(&self, pool: &str) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let paused = self.lock();
        paused.contains(&None) || paused.contains(&Some(pool.to_owned()))
    }

    /// The paused pools, for `SHOW POOLS`-style answers (`*` for every pool).
    pub fn list(&self) -> Vec<String> {
        self.lock()
            .iter()
            .map(|p| p.clone().unwrap_or_else(|| "*".to_owned()))
            .collect()
    }

    /// Returns once `pool` is no longer paused.
    pub async fn until_resumed(&self, pool: &str) {
        loop {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            // Registered before the check, so a resume between the two is not missed.
            resumed.as_mut().enable();
            if !self.holds(pool) {
                return;
            }
            resumed.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<Option<String>>> {
        match self.paused.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_pool_or_every_pool_is_held_until_resumed() {
        let p = Pauses::default();
        assert!(!p.holds("a"));
        assert!(p.pause(Some("a")));
        assert!(!p.pause(Some("a")));
        assert!(p.holds("a") && !p.holds("b"));
        assert!(p.pause(None));
        assert!(p.holds("b"));
        assert!(p.resume(None));
        assert!(!p.holds("a") && !p.holds("b"));
        assert!(!p.resume(Some("a")));
    }

    #[tokio::test]
    async fn a_waiter_wakes_at_the_resume() {
        let p = Arc::new(Pauses::default());
        p.pause(Some("a"));
        let waiter = tokio::spawn({
            let p = Arc::clone(&p);
            async move { p.until_resumed("a").await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        p.resume(Some("a"));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
