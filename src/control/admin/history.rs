//! Each backend's queries per second and p99 over the last minutes, for the status page's chart.
//!
//! Sampled once per [`EVERY`] by the admin loop from the latency histograms the proxy keeps
//! anyway (one more read of the buckets `/backends` already reads): the difference between two
//! ticks gives the statements completed in between (their count) and their p99 (estimated from
//! the buckets, as Prometheus' `histogram_quantile` does). Nothing is added to a query's path.
//! Bounded: [`POINTS`] samples per backend in the set in force, a backend gone from the set is
//! forgotten at the next tick.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::recent::Buckets;
use crate::proxy::state::ProxyState;
use crate::telemetry::metrics::{quantile, LATENCY_BUCKETS};

/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(1);
/// Samples kept per backend: five minutes at [`EVERY`].
pub const POINTS: usize = 300;

/// One sample of one backend: statements per second since the previous sample and their p99
/// (none when no statement completed in between).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub at_unix_ms: u64,
    pub qps: f64,
    pub p99_seconds: Option<f64>,
}

/// One backend's samples, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub backend: String,
    pub points: Vec<Point>,
}

/// A backend's last buckets and its kept samples.
#[derive(Debug)]
struct Track {
    backend: String,
    last: Buckets,
    at: Instant,
    points: VecDeque<Point>,
}

/// The samples of every backend in the set, in the set's order.
#[derive(Debug, Default)]
pub struct History {
    tracks: Mutex<Vec<Track>>,
}

/// The sample between buckets `prev` and `now`, `seconds` apart: `None` when no time passed or
/// the counts went backwards (a reload replaced the backend and its counters).
pub fn point(prev: &Buckets, now: &Buckets, seconds: f64, at_unix_ms: u64) -> Option<Point> {
    if seconds <= 0.0 || now.iter().zip(prev).any(|(n, p)| n < p) {
        return None;
    }
    let mut delta = *now;
    for (d, p) in delta.iter_mut().zip(prev) {
        *d -= p;
    }
    Some(Point {
        at_unix_ms,
        qps: delta[LATENCY_BUCKETS.len()] as f64 / seconds,
        p99_seconds: quantile(&delta, 0.99),
    })
}

impl History {
    /// Takes one sample of every backend in `state`'s set.
    pub fn sample(&self, state: &ProxyState) {
        let now = Instant::now();
        let at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let current: Vec<(String, Buckets)> = state
            .backends()
            .backends()
            .iter()
            .map(|b| (b.name.clone(), b.stats.latency_buckets()))
            .collect();
        if let Ok(mut tracks) = self.tracks.lock() {
            let old = std::mem::take(&mut *tracks);
            *tracks = advance(old, current, now, at_unix_ms);
        }
    }

    /// Every backend's samples, oldest first.
    pub fn series(&self) -> Vec<Series> {
        self.tracks.lock().map_or_else(
            |_| Vec::new(),
            |tracks| {
                tracks
                    .iter()
                    .map(|t| Series {
                        backend: t.backend.clone(),
                        points: t.points.iter().copied().collect(),
                    })
                    .collect()
            },
        )
    }
}

/// The tracks after one tick: one per backend of `current`, in its order, each with the new
/// sample appended (the oldest dropped past [`POINTS`]); a backend seen for the first time starts
/// with its buckets only.
fn advance(
    mut old: Vec<Track>,
    current: Vec<(String, Buckets)>,
    now: Instant,
    at_unix_ms: u64,
) -> Vec<Track> {
    current
        .into_iter()
        .map(|(backend, buckets)| {
            let Some(i) = old.iter().position(|t| t.backend == backend) else {
                return Track {
                    backend,
                    last: buckets,
                    at: now,
                    points: VecDeque::new(),
                };
            };
            let mut t = old.swap_remove(i);
            let seconds = now.saturating_duration_since(t.at).as_secs_f64();
            match point(&t.last, &buckets, seconds, at_unix_ms) {
                Some(p) => {
                    if t.points.len() == POINTS {
                        t.points.pop_front();
                    }
                    t.points.push_back(p);
                }
                // Counters reset: start again from these.
                None if seconds > 0.0 => t.points.clear(),
                None => {}
            }
            t.last = buckets;
            t.at = now;
            t
        })
        .collect()
}

/// `GET /history`: every backend's samples as `[unix_ms, qps, p99_seconds]` triples.
pub fn json(series: &[Series]) -> Value {
    let list: Vec<Value> = series
        .iter()
        .map(|s| {
            let points: Vec<Value> = s
                .points
                .iter()
                .map(|p| json!([p.at_unix_ms, p.qps, p.p99_seconds]))
                .collect();
            json!({ "backend": s.backend, "points": points })
        })
        .collect();
    json!({
        "every_seconds": EVERY.as_secs_f64(),
        "max_points": POINTS,
        "series": list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(per_bucket: &[(usize, u64)]) -> Buckets {
        let mut plain = [0u64; LATENCY_BUCKETS.len() + 1];
        for &(i, n) in per_bucket {
            plain[i] += n;
        }
        // Cumulative, with the total in the last slot.
        let mut sum = 0;
        for b in &mut plain {
            sum += *b;
            *b = sum;
        }
        plain
    }

    #[test]
    fn a_point_is_the_difference_between_two_ticks() {
        let prev = buckets(&[(3, 100)]);
        // 50 more in the 1 ms bucket, 50 in the 10 ms one, over 2 s.
        let now = buckets(&[(3, 150), (6, 50)]);
        let p = point(&prev, &now, 2.0, 7).expect("a point");
        assert_eq!(p.at_unix_ms, 7);
        assert!((p.qps - 50.0).abs() < 1e-9, "{p:?}");
        let p99 = p.p99_seconds.expect("a p99");
        assert!(p99 > 0.005 && p99 <= 0.01, "{p99}");
        let idle = point(&now, &now, 1.0, 8).expect("an idle point");
        assert_eq!((idle.qps, idle.p99_seconds), (0.0, None));
        assert_eq!(point(&now, &prev, 1.0, 9), None, "counters went backwards");
        assert_eq!(point(&prev, &now, 0.0, 9), None, "no time passed");
    }

    #[test]
    fn tracks_follow_the_set_and_stay_bounded() {
        let t0 = Instant::now();
        let set = |n: u64| vec![("r1".to_owned(), buckets(&[(0, n)]))];
        let mut tracks = advance(Vec::new(), set(0), t0, 0);
        assert!(tracks[0].points.is_empty(), "the first tick is a baseline");
        for i in 1..=(POINTS as u64 + 5) {
            tracks = advance(tracks, set(i * 10), t0 + EVERY * i as u32, i);
        }
        assert_eq!(tracks[0].points.len(), POINTS);
        assert_eq!(tracks[0].points.front().map(|p| p.at_unix_ms), Some(6));
        assert!(tracks[0].points.iter().all(|p| (p.qps - 10.0).abs() < 1e-6));
        let later = t0 + EVERY * (POINTS as u32 + 6);
        let other = vec![("r2".to_owned(), buckets(&[]))];
        let tracks = advance(tracks, other, later, 0);
        assert_eq!(tracks.len(), 1);
        assert_eq!(tracks[0].backend, "r2", "r1 left the set and is forgotten");
    }
}
