//! The `least_latency` policy's score: how slow each backend has been lately.
//!
//! Samples are the command latencies the histograms already record; nothing is added to the
//! per-command path. Once per [`TICK`] a task (`crate::control::tasks`) calls [`tick`], which reads each
//! backend's histogram totals and folds the interval's mean latency into a peak-sensitive moving
//! average:
//! - a mean above the average replaces it at once (a backend that turns slow is avoided within
//!   one tick);
//! - a mean below it pulls it down with weight `1 - exp(-TICK / DECAY)`;
//! - an interval without commands pulls it toward the backend's last health-check round trip
//!   the same way (toward zero without health checks), so a backend that stopped getting
//!   clients because it was slow gets some back once it may have recovered.
//!
//! A client then goes to the better of two up backends picked at random ("power of two
//! choices"), by `score = average × (active sessions + 1) / weight`. Comparing two rather than all
//! keeps a burst of new clients from all landing on the one backend that looked fastest.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::Backend;

/// How often the averages are updated.
pub const TICK: Duration = Duration::from_secs(1);
/// Time constant of the average's fall.
pub const DECAY: Duration = Duration::from_secs(10);
/// The lowest average a score uses: a backend with no samples yet is not free.
const FLOOR_NS: f64 = 1_000.0;

/// One backend's moving average and what the last tick saw of its histograms.
#[derive(Debug, Default)]
pub struct LatencyScore {
    /// The average, nanoseconds as f64 bits.
    average: AtomicU64,
    /// Commands and their latency sum (ns) at the last tick.
    seen_count: AtomicU64,
    seen_sum_ns: AtomicU64,
    /// The latest health check's round trip, ns (0: none yet).
    check_ns: AtomicU64,
}

impl LatencyScore {
    pub fn average(&self) -> Duration {
        Duration::from_nanos(f64::from_bits(self.average.load(Relaxed)) as u64)
    }

    /// Notes a passed health check's round trip.
    pub fn check_round_trip(&self, rtt: Duration) {
        let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.check_ns.store(ns, Relaxed);
    }

    /// Folds the histogram totals (`count` commands, `sum` seconds in all) into the average.
    pub fn update(&self, count: u64, sum: f64) {
        let sum_ns = (sum * 1e9) as u64;
        let count_delta = count.saturating_sub(self.seen_count.swap(count, Relaxed));
        let sum_delta = sum_ns.saturating_sub(self.seen_sum_ns.swap(sum_ns, Relaxed));
        let average = f64::from_bits(self.average.load(Relaxed));
        let sample = if count_delta > 0 {
            Some(sum_delta as f64 / count_delta as f64)
        } else {
            None
        };
        let next = fold(average, sample, self.check_ns.load(Relaxed) as f64);
        self.average.store(next.to_bits(), Relaxed);
    }

    /// The policy's score with `active` sessions at weight `weight`; lower is better.
    pub fn score(&self, active: usize, weight: u32) -> f64 {
        let average = f64::from_bits(self.average.load(Relaxed)).max(FLOOR_NS);
        average * (active as f64 + 1.0) / f64::from(weight.max(1))
    }
}

/// One tick of the average: `sample` is the interval's mean (None without commands), `check`
/// the last health-check round trip (0 for none).
fn fold(average: f64, sample: Option<f64>, check: f64) -> f64 {
    let alpha = 1.0 - (-TICK.as_secs_f64() / DECAY.as_secs_f64()).exp();
    match sample {
        Some(s) if s >= average => s,
        Some(s) => average + alpha * (s - average),
        None => average + alpha * (check - average),
    }
}

/// Of two candidates (indices into `up`, which has at least two), the one with the lower score.
pub fn better_of(up: &[&Arc<Backend>], a: usize, b: usize) -> usize {
    let score = |i: usize| up[i].latency.score(up[i].active(), up[i].weight());
    if score(b) < score(a) {
        b
    } else {
        a
    }
}

/// One tick for every backend of a set: folds what its histograms saw since the last tick into
/// its average.
pub fn tick(backends: &[Arc<Backend>]) {
    for b in backends {
        let (count, sum) = b.stats.latency_totals();
        b.latency.update(count, sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slower_interval_is_taken_at_once_a_faster_one_slowly() {
        let up = fold(1_000_000.0, Some(5_000_000.0), 0.0);
        assert_eq!(up, 5_000_000.0);
        let down = fold(5_000_000.0, Some(1_000_000.0), 0.0);
        assert!(down < 5_000_000.0 && down > 4_000_000.0, "{down}");
    }

    #[test]
    fn without_commands_the_average_falls_toward_the_check_round_trip() {
        let mut a = 50_000_000.0;
        for _ in 0..60 {
            a = fold(a, None, 200_000.0);
        }
        assert!(a < 1_000_000.0 && a > 200_000.0, "{a}");
        let mut b = 50_000_000.0;
        for _ in 0..60 {
            b = fold(b, None, 0.0);
        }
        assert!(b < 200_000.0, "{b}");
    }

    #[test]
    fn update_uses_the_interval_not_the_lifetime_totals() {
        let s = LatencyScore::default();
        s.update(1000, 1000.0 * 0.001); // 1 ms each
        assert_eq!(s.average(), Duration::from_millis(1));
        s.update(1010, 1.0 + 10.0 * 0.050); // 10 more at 50 ms
        assert_eq!(s.average(), Duration::from_millis(50));
        s.update(1010, 1.5); // nothing new: decays
        assert!(s.average() < Duration::from_millis(50));
    }

    #[test]
    fn score_grows_with_sessions_and_shrinks_with_weight() {
        let s = LatencyScore::default();
        s.update(10, 0.010);
        assert!(s.score(3, 1) > s.score(0, 1));
        assert!(s.score(0, 4) < s.score(0, 1));
        let empty = LatencyScore::default();
        assert!(empty.score(0, 1) > 0.0, "no samples is not free");
    }
}
