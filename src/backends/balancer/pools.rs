//! Pools and routes: which backends a client may get.
//!
//! A pool is a named group of the set's backends with its own policy (`pools:`; the top-level
//! `backends:` is the pool "default"). The routes pick a pool for each client, from what is known
//! of it when the choice is made: its address and listener at accept, and in deferred mode its
//! user and schema too. The set still holds every backend in one list, so health checks, metrics,
//! the script's `proxy.global.backends` and reload treat backends as they always did.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use super::{Backend, BackendSet};
use crate::backends::route::{ClientFacts, Routes};
use crate::config::{Config, Policy, PoolConfig};

/// A named group of backends and how it balances.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub(super) policy: Policy,
    /// Whether and how its sessions share server connections (`pooling:`).
    pub pooling: crate::config::Pooling,
    /// The round-robin and least-connections tie-break counter of this pool.
    pub(super) next: AtomicUsize,
    /// The same for the transactions of a pool across backends (`BackendSet::transaction_order`):
    /// apart, so that transactions do not skew where logins go.
    pub(super) next_transaction: AtomicUsize,
    pub(super) members: Vec<Arc<Backend>>,
    /// Every write committed through this proxy in the pool, as far as its sessions learned
    /// (`pooling.causal_reads: global`).
    written: std::sync::Mutex<crate::wire::sql::gtid::GtidPos>,
    /// Its read/write split series.
    pub split_metrics: crate::telemetry::metrics::SplitSeries,
}

impl Pool {
    pub fn members(&self) -> &[Arc<Backend>] {
        &self.members
    }

    /// A session learned a write's position on the pool's primary.
    pub fn learn_written(&self, position: &crate::wire::sql::gtid::GtidPos) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.merge(position);
    }

    /// Every write committed through this proxy in the pool, as far as known.
    pub fn written(&self) -> crate::wire::sql::gtid::GtidPos {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The pools of `backends`, in the order their first backend comes, keeping each pool's
/// counter from `previous` so a reload does not restart the rotation.
pub(super) fn group(
    backends: &[Arc<Backend>],
    previous: Option<&BackendSet>,
    metrics: &crate::telemetry::metrics::Metrics,
) -> Vec<Pool> {
    let mut pools: Vec<Pool> = Vec::new();
    for b in backends {
        match pools.iter_mut().find(|p| p.name == b.pool) {
            Some(p) => p.members.push(Arc::clone(b)),
            None => {
                let next = previous
                    .and_then(|s| s.pool(&b.pool))
                    .map_or(0, |p| p.next.load(Relaxed));
                pools.push(Pool {
                    name: b.pool.clone(),
                    policy: Policy::RoundRobin,
                    pooling: crate::config::Pooling::default(),
                    next: AtomicUsize::new(next),
                    next_transaction: AtomicUsize::new(0),
                    members: vec![Arc::clone(b)],
                    written: std::sync::Mutex::new(
                        previous
                            .and_then(|s| s.pool(&b.pool))
                            .map(Pool::written)
                            .unwrap_or_default(),
                    ),
                    split_metrics: metrics.split(&b.pool),
                });
            }
        }
    }
    pools
}

impl BackendSet {
    /// Sets each pool's policy, the routes, and whether backends are connected only after the
    /// client's HandshakeResponse (deferred).
    pub fn with_routing(mut self, pools: &[PoolConfig], routes: Routes, deferred: bool) -> Self {
        for p in &mut self.pools {
            if let Some(c) = pools.iter().find(|c| c.name == p.name) {
                p.policy = c.policy;
                p.pooling = c.pooling;
            }
        }
        self.routes = routes;
        self.deferred = deferred;
        self
    }

    /// [`with_routing`](Self::with_routing) as `config` says.
    pub fn with_routing_of(self, config: &Config) -> Self {
        let routes = Routes::new(&config.routes, config.default_pool.as_deref());
        let deferred = config.defers_connect();
        self.with_routing(&config.pools, routes, deferred)
    }

    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// Whether `who`'s sessions are read-only (its route says so).
    pub fn route_read_only(&self, who: &ClientFacts<'_>) -> bool {
        self.routes.read_only_for(who)
    }

    /// The pool for `who`, or None when no route matches and there is no default pool.
    pub fn route(&self, who: &ClientFacts<'_>) -> Option<&Pool> {
        self.pool(self.routes.pool_for(who)?)
    }

    /// Whether sessions greet their clients themselves and connect after the client's response.
    pub fn deferred(&self) -> bool {
        self.deferred
    }
}
