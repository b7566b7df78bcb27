//! The relay's two timers, both kept without touching a timer on every read: the idle timeout,
//! and the one that gives a grown buffer back once its session goes quiet. Both are
//! [`Gated`]: a relay poll that the timer did not cause costs one atomic load, not a waker
//! registration.

use std::task::Context;
use std::time::Instant;

use tokio::time::Sleep;

use super::{Direction, QUIET};
use crate::proxy::gate::Gated;

/// The idle timeout, kept without touching a timer per read: on expiry it works out when the
/// session really went quiet and waits again until that plus the timeout.
pub(super) struct IdleTimer {
    timeout: std::time::Duration,
    sleep: Gated<Sleep>,
    /// A new relay began on this timer (see [`restart`](Self::restart)), with no activity yet:
    /// the sleep's deadline is an earlier relay's, not this one's start.
    restarted: bool,
}

impl IdleTimer {
    pub(super) fn new(timeout: std::time::Duration) -> Self {
        Self {
            timeout,
            sleep: Gated::new(tokio::time::sleep(timeout)),
            restarted: false,
        }
    }

    /// A new relay begins (see `Relay::run`), without a clock read: until it sees activity,
    /// the first expiry only sets the timer a whole timeout ahead, so the new relay is never
    /// timed from an earlier one's deadline (at worst it ends a timeout later).
    pub(super) fn restart(&mut self) {
        self.restarted = true;
    }

    /// True when the session has been idle for the timeout: nothing in flight (`quiet`) and
    /// `last` activity (the client's last bytes or the end of the last response) that long ago.
    pub(super) fn expired(
        &mut self,
        cx: &mut Context<'_>,
        last: Option<Instant>,
        quiet: bool,
    ) -> bool {
        if self.sleep.poll_gated(cx).is_pending() {
            return false;
        }
        let now = tokio::time::Instant::now();
        let due = match last {
            Some(at) => tokio::time::Instant::from_std(at) + self.timeout,
            None if std::mem::take(&mut self.restarted) => now + self.timeout,
            None => self.sleep.get_ref().deadline(),
        };
        // The timer's millisecond granularity: a deadline less than that ahead has come.
        if quiet && due <= now + std::time::Duration::from_millis(1) {
            return true;
        }
        // A command in flight is never idle; once it is answered, its end counts as activity.
        let next = if quiet { due } else { now + self.timeout };
        self.sleep.get_mut().reset(next);
        let _ = self.sleep.poll_now(cx);
        false
    }
}

/// Gives grown buffers back after [`QUIET`]: armed when a buffer grows, it compares read counts
/// on expiry instead of being reset on every read.
#[derive(Default)]
pub(super) struct Shrinker {
    sleep: Option<Gated<Sleep>>,
    armed: bool,
    reads_at_arm: (u64, u64),
}

impl Shrinker {
    /// `legs_hold`: the legs hold memory of their own (see [`ReleaseMemory`](crate::net::leg::ReleaseMemory)).
    pub(super) fn arm_if_grown(
        &mut self,
        cx: &mut Context<'_>,
        up: &Direction,
        down: &Direction,
        legs_hold: bool,
    ) {
        if self.armed || !(up.grown() || down.grown() || legs_hold) {
            return;
        }
        let deadline = tokio::time::Instant::now() + QUIET;
        // Boxed once per session that ever grows; reset, not reallocated, after that. A timer
        // that fired holds no waker: the poll registers one for the new deadline.
        let sleep = match self.sleep.as_mut() {
            Some(sleep) => {
                sleep.get_mut().reset(deadline);
                sleep
            }
            None => self
                .sleep
                .insert(Gated::new(tokio::time::sleep_until(deadline))),
        };
        let _ = sleep.poll_now(cx);
        self.armed = true;
        self.reads_at_arm = (up.reads, down.reads);
    }

    /// True when both directions were quiet for the whole period: the legs' own memory may go
    /// too.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        up: &mut Direction,
        down: &mut Direction,
    ) -> bool {
        let Some(sleep) = self.sleep.as_mut().filter(|_| self.armed) else {
            return false;
        };
        if sleep.poll_gated(cx).is_pending() {
            return false;
        }
        self.armed = false;
        let up_quiet = up.reads == self.reads_at_arm.0;
        let down_quiet = down.reads == self.reads_at_arm.1;
        if up_quiet {
            up.shrink();
        }
        if down_quiet {
            down.shrink();
        }
        // Whatever is still large (busy, or holding unwritten bytes) is looked at again later;
        // legs that gave nothing back (activity) are re-armed by the relay.
        self.arm_if_grown(cx, up, down, !(up_quiet && down_quiet));
        up_quiet && down_quiet
    }
}
