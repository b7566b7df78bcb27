//! Pools and routes: which backends a client may get.
//!
//! A pool is a named group of the set's backends with its own policy (`pools:`; the top-level
//! `backends:` is the pool "default"). The routes pick a pool for each client, from what is known
//! of it when the choice is made: its address and listener at accept, and in deferred mode its
//! user and schema too. The set still holds every backend in one list, so health checks, metrics,
//! the script's `proxy.global.backends` and reload treat backends as they always did.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use bytes::BytesMut;

use super::{Backend, BackendSet};
use crate::config::{Config, Policy, PoolConfig};
use crate::protocol::handshake::{patch_greeting_with, Greeting, Strip};
use crate::route::{Routes, Who};

/// A named group of backends and how it balances.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub(super) policy: Policy,
    /// The round-robin and least-connections tie-break counter of this pool.
    pub(super) next: AtomicUsize,
    pub(super) members: Vec<Arc<Backend>>,
}

impl Pool {
    pub fn members(&self) -> &[Arc<Backend>] {
        &self.members
    }
}

/// The pools of `backends`, in the order their first backend comes, keeping each pool's
/// counter from `previous` so a reload does not restart the rotation.
pub(super) fn group(backends: &[Arc<Backend>], previous: Option<&BackendSet>) -> Vec<Pool> {
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
                    next: AtomicUsize::new(next),
                    members: vec![Arc::clone(b)],
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

    /// The pool for `who`, or None when no route matches and there is no default pool.
    pub fn route(&self, who: &Who<'_>) -> Option<&Pool> {
        self.pool(self.routes.pool_for(who)?)
    }

    /// Whether sessions greet their clients themselves and connect after the client's response.
    pub fn deferred(&self) -> bool {
        self.deferred
    }

    /// The greeting a deferred connect sends (before its nonce and id are set): the first learned
    /// backend greeting, with only the capabilities every backend that greeted so far offered.
    /// None until some backend has greeted.
    pub fn greeting_template(&self) -> Option<(BytesMut, Greeting)> {
        let mut learned = self.backends.iter().filter_map(|b| b.greeting.load_full());
        let first = learned.next()?;
        let (mut common, mut mariadb) = (
            first.greeting.capabilities,
            first.greeting.mariadb_capabilities,
        );
        for g in learned {
            common &= g.greeting.capabilities;
            mariadb &= g.greeting.mariadb_capabilities;
        }
        let mut packet = BytesMut::from(&first.packet[..]);
        let strip = Strip {
            capabilities: first.greeting.capabilities & !common,
            mariadb_capabilities: first.greeting.mariadb_capabilities & !mariadb,
        };
        let greeting = patch_greeting_with(&mut packet[4..], strip).ok()?;
        Some((packet, greeting))
    }
}

/// A backend's greeting as clients get it, kept for deferred connects.
#[derive(Debug)]
pub struct LearnedGreeting {
    /// The whole packet, header included, with the proxy's capability patches applied.
    pub packet: Vec<u8>,
    pub greeting: Greeting,
}

impl Backend {
    /// Keeps `packet` (a greeting as patched for clients) as this backend's greeting, unless one
    /// with the same version and capabilities is already kept (every connect greets anew; only a
    /// changed server is worth a store).
    pub fn learn_greeting(&self, packet: &[u8], greeting: &Greeting) {
        let kept = self.greeting.load();
        let same = kept.as_ref().is_some_and(|k| {
            k.greeting.capabilities == greeting.capabilities
                && k.greeting.mariadb_capabilities == greeting.mariadb_capabilities
                && k.greeting.server_version == greeting.server_version
                && k.greeting.auth_plugin == greeting.auth_plugin
                && k.greeting.charset == greeting.charset
        });
        if !same {
            self.greeting.store(Some(Arc::new(LearnedGreeting {
                packet: packet.to_vec(),
                greeting: greeting.clone(),
            })));
        }
    }

    /// As [`learn_greeting`](Self::learn_greeting) for a greeting as the server sent it (a
    /// health check's), patched with `strip` first; a greeting that does not parse is ignored.
    pub fn learn_raw_greeting(&self, packet: &[u8], strip: Strip) {
        let mut packet = packet.to_vec();
        if let Some(payload) = packet.get_mut(4..) {
            if let Ok(greeting) = patch_greeting_with(payload, strip) {
                self.learn_greeting(&packet, &greeting);
            }
        }
    }
}
