//! The admin loop's reads of the latency buckets over time: [`Recent`] keeps a snapshot every
//! [`SNAPSHOT_EVERY`] so `/backends` can give quantiles of about the last minute rather than since
//! start, and holds the [`History`] the status page's chart draws.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use super::history::History;
use crate::proxy::state::ProxyState;
use crate::telemetry::metrics::LATENCY_BUCKETS;

/// How often latency buckets are snapshotted, and how many snapshots make the "recent" window.
pub(super) const SNAPSHOT_EVERY: Duration = Duration::from_secs(10);
const SNAPSHOTS: usize = 7;

pub(super) type Buckets = [u64; LATENCY_BUCKETS.len() + 1];

/// Per-backend snapshots of the cumulative latency buckets, so `/backends` can report quantiles
/// of roughly the last minute rather than since start.
#[derive(Debug, Default)]
pub struct Recent {
    snapshots: Mutex<VecDeque<Vec<Buckets>>>,
    /// Queries per second and p99 per backend, one sample per [`super::history::EVERY`].
    pub(super) history: History,
}

impl Recent {
    pub(super) fn snapshot(&self, state: &ProxyState) {
        let now: Vec<Buckets> = state
            .backends()
            .backends()
            .iter()
            .map(|b| b.stats.latency_buckets())
            .collect();
        if let Ok(mut s) = self.snapshots.lock() {
            if s.len() == SNAPSHOTS {
                s.pop_front();
            }
            s.push_back(now);
        }
    }

    /// Bucket counts since the oldest snapshot for backend `i` (all of them if none is kept).
    pub(super) fn window(&self, i: usize, current: &Buckets) -> Buckets {
        let oldest = self
            .snapshots
            .lock()
            .ok()
            .and_then(|s| s.front().and_then(|v| v.get(i).copied()));
        let mut out = *current;
        if let Some(old) = oldest {
            for (o, b) in out.iter_mut().zip(old) {
                *o = o.saturating_sub(b);
            }
        }
        out
    }
}
