//! Transaction pooling without a password store: in a pool with `pooling.mode: transaction`,
//! server connections are shared among the sessions of one user between transactions.
//!
//! No password is kept. Every client logs in on a fresh server connection, relayed as in session
//! mode, so the server checks each client's credentials itself; that connection then joins the
//! backend's pool under the session's [`Key`]: the user, the schema and character set it logged
//! in with, the capabilities negotiated, how the backend leg is encrypted or compressed, and the
//! client's address when the backend is sent a PROXY header (the server then matches accounts by
//! it). A session's statements run on any idle connection of its key, which holds exactly the
//! state of a fresh login of that key, because a session that changes state keeps its
//! connection for good (`holding`). A connection is never logged in to again: no
//! `COM_CHANGE_USER`, whose answer to the greeting's nonce could be replayed.
//!
//! `core` is the bookkeeping (slots, idle lists, waiters; sans-IO), [`BackendPool`] the lock and
//! the waiting around it, [`ServerPools`] one pool per backend, in `ProxyState`. A session holds
//! its share of a pool only through the guards of `guard` (a login's slot, its place among its
//! key's sessions, the connection it holds), so however it ends the counts are given back;
//! `command` reads the client's bytes the session handles itself.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use thiserror::Error;
use tokio::sync::oneshot;

use crate::config::Pooling;
use crate::telemetry::metrics::Metrics;

pub mod command;
mod conn;
mod core;
mod guard;
pub mod holding;
mod metrics;
pub mod statements;

use self::core::{Acquired, Core, Slot, Waiter};
pub use conn::{PrepareAnswer, ServerConn};
use guard::Pending;
pub use guard::{Held, LoginPermit, Member};
pub use holding::{Holding, Reason, State, Step};
use metrics::{Families, PoolMetrics};

/// What sessions share connections under: a connection holds exactly the state a login of this
/// key leaves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyData {
    pub user: String,
    pub schema: String,
    /// The collation id of the HandshakeResponse.
    pub charset: u8,
    /// Negotiated capabilities (standard, MariaDB's).
    pub capabilities: (u32, u32),
    /// The backend leg: TLS, compression.
    pub tls: bool,
    pub compressed: bool,
    /// The client's address, when the backend is told it in a PROXY header.
    pub origin: Option<IpAddr>,
}

/// A [`KeyData`] shared by its session and the pool, hashed once: the pool looks it up twice
/// per transaction.
#[derive(Debug, Clone)]
pub struct Key {
    data: Arc<KeyData>,
    hash: u64,
}

impl Key {
    /// Whether `other` is this key's very data (see [`ServerPools::key`]).
    #[cfg(test)]
    fn shares_data(&self, other: &Key) -> bool {
        Arc::ptr_eq(&self.data, &other.data)
    }
}

impl std::ops::Deref for Key {
    type Target = KeyData;
    fn deref(&self) -> &KeyData {
        &self.data
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.hash == other.hash && (Arc::ptr_eq(&self.data, &other.data) || self.data == other.data)
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A server connection as the pool hands it around: boxed once at its login, so that each
/// transaction's trips (the idle list, a session's guard, a waiter's channel) move a pointer,
/// not the connection (some 200 bytes, moved several times per transaction).
pub type Conn = Box<ServerConn>;

impl Waiter<Conn> for oneshot::Sender<Conn> {
    fn offer(self, value: Conn) -> Result<(), Conn> {
        self.send(value)
    }

    fn left(&self) -> bool {
        self.is_closed()
    }
}

impl Waiter<()> for oneshot::Sender<()> {
    fn offer(self, value: ()) -> Result<(), ()> {
        self.send(value)
    }

    fn left(&self) -> bool {
        self.is_closed()
    }
}

type Inner = Core<Key, Conn, oneshot::Sender<Conn>, oneshot::Sender<()>>;

/// Why a session got no connection.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PoolError {
    #[error(
        "no server connection of backend {backend} came free within {waited:?} \
         (pooling.max_server_connections {limit}, all in use)"
    )]
    Timeout {
        backend: String,
        waited: std::time::Duration,
        limit: usize,
    },
    #[error(
        "no server connection of user '{user}' is left on backend {backend}: the last ones \
         closed (the server ended them, or a session left one mid-statement or with state of its \
         own) or are held for good by sessions that changed their state, and only a login makes \
         another; reconnect"
    )]
    Starved { user: String, backend: String },
    #[error(
        "a shared server connection could not be given this session's settings again (a SET or \
         USE that succeeded before failed when run again, or the connection failed); reconnect"
    )]
    Replay,
    /// A pool that splits reads from writes has no primary to take this transaction (or the
    /// session's user has no connection there), after waiting `waited` for one.
    #[error("{why} (waited {waited:?})")]
    NoPrimary {
        why: String,
        waited: std::time::Duration,
    },
}

/// One backend's shared connections.
pub struct BackendPool {
    backend: String,
    inner: Mutex<(Inner, Pooling)>,
    metrics: PoolMetrics,
    /// In a pool across backends: how many keys have connections here and on no other backend
    /// of the pool (their sessions cannot move), as last counted ([`ServerPools::count_spread`]).
    keys_only_here: std::sync::atomic::AtomicUsize,
    /// Logins placed here in the last second, by user and schema, not yet counted among its
    /// connections: a burst of logins of one user (a client's pool opening) sees the ones
    /// before it (see [`placed`](Self::placed)).
    placing: Mutex<Vec<(String, String, std::time::Instant)>>,
}

impl std::fmt::Debug for BackendPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BackendPool({})", self.backend)
    }
}

impl BackendPool {
    fn lock(&self) -> MutexGuard<'_, (Inner, Pooling)> {
        // A panic while holding it cannot leave the counts worse than a lost update.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pooling(&self) -> Pooling {
        self.lock().1
    }

    /// Waits for a slot for a login (a fresh server connection); Err when none came free in
    /// `wait_timeout`. The slot is the permit's until it is dropped (the login failed) or
    /// turned into a session ([`LoginPermit::logged_in`]).
    pub async fn login_slot(self: &Arc<Self>) -> Result<LoginPermit, PoolError> {
        let started = Instant::now();
        let (receiver, pooling) = {
            let mut guard = self.lock();
            let (core, pooling) = &mut *guard;
            let mut rx = None;
            let slot = core.login(|| {
                let (tx, r) = oneshot::channel();
                rx = Some(r);
                tx
            });
            let pooling = *pooling;
            self.metrics.update(core);
            match slot {
                Slot::Free => return Ok(LoginPermit::new(Arc::clone(self))),
                // The slot of this connection, once the server let go of it.
                Slot::Freed(conn) => (Err(conn), pooling),
                Slot::Wait => (Ok(rx), pooling),
            }
        };
        let receiver = match receiver {
            Ok(receiver) => receiver,
            Err(conn) => {
                // The slot is the login's from now, even if it is cancelled while it waits.
                let permit = LoginPermit::new(Arc::clone(self));
                conn.close().await;
                return Ok(permit);
            }
        };
        let Some(receiver) = receiver else {
            return Ok(LoginPermit::new(Arc::clone(self)));
        };
        // A slot handed over as the wait ends (its timeout, or the login cancelled) is given
        // back, not lost.
        let mut pending = Pending::new(receiver, |()| self.login_failed());
        let got = pending.recv(pooling.wait_timeout).await;
        self.metrics.waited(started.elapsed());
        match got {
            Some(Some(())) => Ok(LoginPermit::new(Arc::clone(self))),
            _ => {
                self.metrics.failed("timeout");
                Err(PoolError::Timeout {
                    backend: self.backend.clone(),
                    waited: pooling.wait_timeout,
                    limit: pooling.max_server_connections,
                })
            }
        }
    }

    /// A login that had a slot failed.
    fn login_failed(&self) {
        let mut guard = self.lock();
        guard.0.login_failed();
        self.metrics.update(&guard.0);
    }

    /// A login succeeded: its session holds the new connection. Returns the pool's own copy
    /// of the key, whose lookups then compare one pointer rather than the key's strings.
    fn logged_in(&self, key: &Key) -> Key {
        let mut guard = self.lock();
        let key = guard.0.logged_in(key);
        self.metrics.update(&guard.0);
        key
    }

    /// A connection for a session of `key` on worker `worker`: an idle one that is still
    /// alive, or the next one released, within `wait_timeout`.
    pub async fn acquire(
        self: &Arc<Self>,
        key: &Key,
        worker: usize,
        state: &State,
    ) -> Result<Held, PoolError> {
        let started = Instant::now();
        loop {
            let (receiver, pooling) = {
                let mut guard = self.lock();
                let (core, pooling) = &mut *guard;
                let mut rx = None;
                let like = |c: &Conn| c.carries(state);
                let got = core.acquire_like(key, worker, like, || {
                    let (tx, r) = oneshot::channel();
                    rx = Some(r);
                    tx
                });
                self.metrics.update(core);
                match got {
                    Acquired::Got(mut conn) => {
                        if conn.is_stale() {
                            core.closed(key);
                            self.metrics.update(core);
                            drop(guard);
                            drop(conn);
                            continue;
                        }
                        self.metrics.acquired.inc();
                        return Ok(Held::new(conn, Arc::clone(self), key.clone()));
                    }
                    Acquired::Starved => {
                        self.metrics.failed("starved");
                        return Err(self.starved(key));
                    }
                    Acquired::Wait => (rx, *pooling),
                }
            };
            let Some(receiver) = receiver else {
                continue;
            };
            let left = pooling.wait_timeout.saturating_sub(started.elapsed());
            // A connection handed over as the wait ends (its timeout, or the session cancelled)
            // goes back to the pool, not lost with the channel.
            let mut pending = Pending::new(receiver, |conn| self.release(key, conn, worker));
            let got = pending.recv(left).await;
            drop(pending);
            self.metrics.waited(started.elapsed());
            match got {
                Some(Some(mut conn)) => {
                    if conn.is_stale() {
                        self.closed(key);
                        continue;
                    }
                    self.metrics.acquired.inc();
                    return Ok(Held::new(conn, Arc::clone(self), key.clone()));
                }
                // Let go because nothing is left to wait for.
                Some(None) => {
                    self.metrics.failed("starved");
                    return Err(self.starved(key));
                }
                None => {
                    self.metrics.failed("timeout");
                    return Err(PoolError::Timeout {
                        backend: self.backend.clone(),
                        waited: pooling.wait_timeout,
                        limit: pooling.max_server_connections,
                    });
                }
            }
        }
    }

    /// [`acquire`](Self::acquire) when it needs no wait: an idle connection of `key` that is
    /// still alive (Some(Ok)), or none left to wait for (Some(Err)); None when the session
    /// would wait (nothing was queued: [`acquire`](Self::acquire) does that). A session takes
    /// this way first at every transaction: no clock read, no future.
    pub fn try_acquire(
        self: &Arc<Self>,
        key: &Key,
        worker: usize,
        state: &State,
    ) -> Option<Result<Held, PoolError>> {
        loop {
            let mut guard = self.lock();
            let core = &mut guard.0;
            let got = core.take_idle(key, worker, |c: &Conn| c.carries(state));
            match got {
                Acquired::Got(conn) => {
                    match self.hand_out(guard, key, conn, ServerConn::is_stale) {
                        Some(held) => return Some(Ok(held)),
                        None => continue,
                    }
                }
                Acquired::Starved => {
                    drop(guard);
                    self.metrics.failed("starved");
                    return Some(Err(self.starved(key)));
                }
                Acquired::Wait => return None,
            }
        }
    }

    /// An idle connection of `key` that is still alive, or None at once: no waiting, no place
    /// in line (see [`Core::take_idle`]); `local`: only one of `worker`'s thread.
    pub fn try_idle(
        self: &Arc<Self>,
        key: &Key,
        worker: usize,
        state: &State,
        local: bool,
    ) -> Option<Held> {
        loop {
            let mut guard = self.lock();
            let core = &mut guard.0;
            let like = |c: &Conn| c.carries(state);
            let conn = if local {
                core.take_idle_local(key, worker, like)?
            } else {
                match core.take_idle(key, worker, like) {
                    Acquired::Got(conn) => conn,
                    _ => return None,
                }
            };
            if let Some(held) = self.hand_out(guard, key, conn, ServerConn::is_stale_now) {
                return Some(held);
            }
        }
    }

    /// An idle connection just taken out under `guard`, to its session unless `stale` says it
    /// must not take a statement (then it is counted closed and closed: None). `stale` runs
    /// after the lock is let go: [`ServerConn::is_stale_now`] asks the kernel, and no other
    /// session of the pool waits on that.
    fn hand_out(
        self: &Arc<Self>,
        guard: MutexGuard<'_, (Inner, Pooling)>,
        key: &Key,
        mut conn: Conn,
        stale: fn(&mut ServerConn) -> bool,
    ) -> Option<Held> {
        self.metrics.update(&guard.0);
        drop(guard);
        if stale(&mut conn) {
            let mut guard = self.lock();
            guard.0.closed(key);
            self.metrics.update(&guard.0);
            drop(guard);
            drop(conn);
            return None;
        }
        self.metrics.acquired.inc();
        Some(Held::new(conn, Arc::clone(self), key.clone()))
    }

    /// How many connections of `user` logged in to `schema` are open here, and whether the pool
    /// is full: where a login of a pool across backends goes (the fewest of its kind first).
    pub fn connections_of(&self, user: &str, schema: &str) -> (usize, bool) {
        let guard = self.lock();
        let n = guard
            .0
            .connections_of(|k| k.user == user && k.schema == schema);
        (n, guard.0.open() >= guard.1.max_server_connections)
    }

    /// A login of `user` to `schema` goes here: for a second, later logins count it as one of
    /// its connections (its own counts it once it has logged in).
    pub fn placed(&self, user: &str, schema: &str) {
        let now = std::time::Instant::now();
        let mut placing = self.placing.lock().unwrap_or_else(|e| e.into_inner());
        placing.retain(|(_, _, at)| now.duration_since(*at) < std::time::Duration::from_secs(1));
        if placing.len() < 4096 {
            placing.push((user.to_owned(), schema.to_owned(), now));
        }
    }

    /// Logins of `user` to `schema` placed here in the last second.
    pub fn placed_recently(&self, user: &str, schema: &str) -> usize {
        let now = std::time::Instant::now();
        let placing = self.placing.lock().unwrap_or_else(|e| e.into_inner());
        placing
            .iter()
            .filter(|(u, s, at)| {
                u == user
                    && s == schema
                    && now.duration_since(*at) < std::time::Duration::from_secs(1)
            })
            .count()
    }

    /// Whether `key` has a connection here, idle or in use: a wait here can end with one.
    pub fn has_connections(&self, key: &Key) -> bool {
        self.lock().0.key_counts(key).0 > 0
    }

    /// A session of `key` moved here from another backend's pool (see [`Member::move_to`]).
    fn joined(&self, key: &Key) -> Key {
        let mut guard = self.lock();
        let key = guard.0.joined(key);
        self.metrics.moves.inc();
        key
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    fn starved(&self, key: &Key) -> PoolError {
        PoolError::Starved {
            user: key.user.clone(),
            backend: self.backend.clone(),
        }
    }

    /// A session gives back a connection it holds, unpinned and at a command boundary.
    fn release(self: &Arc<Self>, key: &Key, conn: Conn, worker: usize) {
        let closed = {
            let mut guard = self.lock();
            let closed = guard.0.release(key, conn, worker, Instant::now());
            self.metrics.update(&guard.0);
            closed
        };
        self.close_all(closed);
    }

    /// Closes connections the pool let go, each slot freed once the server let go of it, on a
    /// task of its own (nobody waits for it).
    fn close_all(self: &Arc<Self>, closed: Vec<Conn>) {
        if closed.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let pool = Arc::clone(self);
                drop(runtime.spawn(async move {
                    for conn in closed {
                        conn.close().await;
                        pool.close_done();
                    }
                }));
            }
            // Outside a runtime (nothing in the proxy): closed without waiting.
            Err(_) => {
                for conn in closed {
                    conn.quit();
                    self.close_done();
                }
            }
        }
    }

    fn close_done(&self) {
        let mut guard = self.lock();
        guard.0.close_done();
        self.metrics.update(&guard.0);
    }

    /// Counts a read sent once more on a connection of this pool, its first server lost.
    pub fn count_retry(&self) {
        self.metrics.retries.inc();
    }

    /// Counts a reset of a connection of this pool ([`ServerConn::reset`]) and how it went.
    pub fn count_reset(&self, reason: &'static str, ok: bool) {
        self.metrics.reset(reason, ok);
    }

    /// A connection a session held is gone (the server closed it, or it failed).
    fn closed(&self, key: &Key) {
        let mut guard = self.lock();
        guard.0.closed(key);
        self.metrics.update(&guard.0);
    }

    /// The session holding a connection of `key` pinned it, for `reason`.
    fn pinned(&self, key: &Key, reason: Reason) {
        self.metrics.pinned(reason);
        let mut guard = self.lock();
        guard.0.pinned(key);
        self.metrics.update(&guard.0);
    }

    /// A pinned session's connection was brought back to its key's login state
    /// ([`ServerConn::reset`]): it counts as shared again.
    fn unpinned(&self, key: &Key) {
        let mut guard = self.lock();
        guard.0.unpinned(key);
        self.metrics.update(&guard.0);
    }

    /// A session ended (one that pinned its connection was [`unpinned`](Self::unpinned) first;
    /// the connection it held counts as closed or released on its own, see [`Member`]).
    fn session_ended(&self, key: &Key) {
        let mut guard = self.lock();
        guard.0.session_ended(key, false);
        self.metrics.update(&guard.0);
    }

    /// Closes idle connections past their idle timeout that their keys can spare (`leaving`:
    /// every one they can spare, the backend being out of rotation in a pool across backends,
    /// whose sessions run elsewhere). A key `keep` names keeps one (unless `leaving`).
    pub fn expire(self: &Arc<Self>, now: Instant, leaving: bool, keep: impl Fn(&Key) -> bool) {
        let closed = {
            let mut guard = self.lock();
            let timeout = if leaving {
                std::time::Duration::ZERO
            } else {
                guard.1.idle_timeout
            };
            let closed = guard.0.expire(now, timeout, |k| !leaving && keep(k));
            self.metrics.update(&guard.0);
            closed
        };
        self.close_all(closed);
    }

    /// Closes every idle connection (at the end of the drain).
    pub fn close_idle(&self) {
        let closed = {
            let mut guard = self.lock();
            let closed = guard.0.close_idle();
            self.metrics.update(&guard.0);
            closed
        };
        closed.into_iter().for_each(|conn| conn.quit());
    }

    fn reconfigure(&self, pooling: Pooling) {
        let closed = {
            let mut guard = self.lock();
            let closed = guard.0.set_limit(pooling.max_server_connections);
            guard.1 = pooling;
            self.metrics.update(&guard.0);
            closed
        };
        closed.into_iter().for_each(|conn| conn.quit());
    }

    /// Idle connections and gauges, for `/backends` and tests.
    pub fn counts(&self) -> PoolCounts {
        let guard = self.lock();
        PoolCounts {
            open: guard.0.open(),
            idle: guard.0.idle(),
            waiting: guard.0.waiting(),
        }
    }
}

/// A pool's gauges at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    /// Connections open, logins in flight included.
    pub open: usize,
    pub idle: usize,
    /// Sessions and logins waiting for a connection.
    pub waiting: usize,
}

impl BackendPool {
    /// The keys with connections open here.
    fn keys(&self) -> Vec<Key> {
        self.lock().0.keys_with_connections().cloned().collect()
    }

    /// Sessions here that pinned their connection (they stay on this backend until they end),
    /// transactions that moved here, and reads sent again here (a pool across backends).
    pub fn sessions_counts(&self) -> (usize, u64, u64) {
        let pinned = self.lock().0.pinned_sessions();
        (pinned, self.metrics.moves.get(), self.metrics.retries.get())
    }

    /// Connections sessions holding none took here (about one per transaction or autocommit
    /// statement; a session's first runs on its login's): `mysql_lb_pool_acquired_total`.
    pub fn acquired(&self) -> u64 {
        self.metrics.acquired.get()
    }

    /// In a pool across backends: keys whose connections are all on this backend, as last
    /// counted (0 in a pool per backend).
    pub fn keys_only_here(&self) -> usize {
        self.keys_only_here
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_keys_only_here(&self, n: usize) {
        self.keys_only_here
            .store(n, std::sync::atomic::Ordering::Relaxed);
        self.metrics.keys_only_here.set(n as i64);
    }
}

/// Every backend's pool, by backend name; created when a transaction-mode session first needs
/// one, kept across reloads (a reload updates its limits).
pub struct ServerPools {
    pools: Mutex<HashMap<String, Arc<BackendPool>>>,
    families: Families,
    seed: std::hash::RandomState,
    /// One shared copy of each key's data while sessions hold it: keys compare by pointer,
    /// also in another backend's pool (a pool across backends looks its sessions' keys up in
    /// every backend's pool, at every transaction).
    interned: Mutex<Interned>,
}

/// [`ServerPools::key`]'s table: each key's data, held weakly (it lives as long as a session or
/// a pool holds it), its dead entries dropped as it doubles.
#[derive(Default)]
struct Interned {
    keys: HashMap<KeyData, std::sync::Weak<KeyData>>,
    /// Entries after the last sweep of dead ones.
    swept: usize,
}

impl std::fmt::Debug for ServerPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerPools")
    }
}

impl ServerPools {
    /// Registers the pool metrics with `metrics` (once, at start).
    pub fn new(metrics: &Metrics) -> Self {
        ServerPools {
            pools: Mutex::default(),
            families: Families::register(metrics),
            seed: std::hash::RandomState::new(),
            interned: Mutex::default(),
        }
    }

    /// The key a session's connections are shared under: hashed with the proxy's seed (random,
    /// so that user names chosen to collide cannot slow the pool's lookups), its data shared
    /// with every key equal to it.
    pub fn key(&self, data: KeyData) -> Key {
        use std::hash::BuildHasher;
        let hash = self.seed.hash_one(&data);
        let mut interned = self.interned.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(data) = interned.keys.get(&data).and_then(std::sync::Weak::upgrade) {
            return Key { data, hash };
        }
        if interned.keys.len() >= 2 * interned.swept.max(64) {
            interned.keys.retain(|_, w| w.strong_count() > 0);
            interned.swept = interned.keys.len();
        }
        let data = Arc::new(data);
        interned
            .keys
            .insert(KeyData::clone(&data), Arc::downgrade(&data));
        Key { data, hash }
    }

    /// How many keys [`key`](Self::key)'s table holds, dead ones not yet swept included.
    #[cfg(test)]
    fn interned_len(&self) -> usize {
        let interned = self.interned.lock().unwrap_or_else(|e| e.into_inner());
        interned.keys.len()
    }

    /// The pool of `backend` (of pool `pool`), its limits set to `pooling`.
    pub fn of(&self, pool: &str, backend: &str, pooling: Pooling) -> Arc<BackendPool> {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = pools.get(backend) {
            if found.pooling() != pooling {
                found.reconfigure(pooling);
            }
            return Arc::clone(found);
        }
        let created = Arc::new(BackendPool {
            backend: backend.to_owned(),
            inner: Mutex::new((Core::new(pooling.max_server_connections), pooling)),
            metrics: PoolMetrics::new(&self.families, pool, backend),
            keys_only_here: Default::default(),
            placing: Mutex::new(Vec::new()),
        });
        pools.insert(backend.to_owned(), Arc::clone(&created));
        created
    }

    /// Runs [`BackendPool::expire`] on every pool (once a second, from `tasks`); `leaving`
    /// says which backends' sessions move elsewhere (drained, in maintenance, down or ejected in
    /// a pool across backends), whose idle connections close as soon as their keys can spare
    /// them.
    ///
    /// `across` names the pool across backends a backend belongs to (None: not such a pool).
    /// There a key's sessions count in the backend their last transaction ran on, so a key
    /// with sessions anywhere in the pool keeps one connection on every backend, however long
    /// idle: its writes need the primary's, its reads a replica's, and only a login makes one
    /// (a key whose sessions all ran reads on replicas for an idle timeout would otherwise lose
    /// its primary connection, and its next write with it).
    pub fn expire(
        &self,
        now: Instant,
        leaving: impl Fn(&str) -> bool,
        across: impl Fn(&str) -> Option<String>,
    ) {
        let pools: Vec<Arc<BackendPool>> = {
            let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.values().cloned().collect()
        };
        let groups: Vec<Option<String>> = pools.iter().map(|p| across(&p.backend)).collect();
        let mut sessions: HashMap<&str, HashSet<Key>> = HashMap::new();
        for (pool, group) in pools.iter().zip(&groups) {
            if let Some(group) = group {
                let keys = pool
                    .lock()
                    .0
                    .keys_with_sessions()
                    .cloned()
                    .collect::<Vec<_>>();
                sessions.entry(group.as_str()).or_default().extend(keys);
            }
        }
        for (pool, group) in pools.iter().zip(&groups) {
            let keep = group.as_deref().and_then(|g| sessions.get(g));
            let leaving = leaving(&pool.backend);
            pool.expire(now, leaving, |k| keep.is_some_and(|s| s.contains(k)));
        }
    }

    /// Puts a reloaded `pooling:` in force in the pools already made: `pooling_of` says a
    /// backend's (None: it left, or its pool no longer shares; its pool keeps its limits and
    /// empties as its sessions end).
    pub fn reconfigure(&self, pooling_of: impl Fn(&str) -> Option<Pooling>) {
        let pools: Vec<Arc<BackendPool>> = {
            let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.values().cloned().collect()
        };
        for pool in pools {
            match pooling_of(&pool.backend) {
                Some(pooling) if pooling.shares() && pool.pooling() != pooling => {
                    pool.reconfigure(pooling)
                }
                _ => {}
            }
        }
    }

    /// Runs [`BackendPool::close_idle`] on every pool: once the drain has ended the sessions,
    /// the connections they gave back are closed with COM_QUIT rather than left open for as
    /// long as the proxy's state lives.
    pub fn close_idle(&self) {
        let pools: Vec<Arc<BackendPool>> = {
            let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.values().cloned().collect()
        };
        for pool in pools {
            pool.close_idle();
        }
    }

    /// For the backends of one pool across backends (`members`, by name): counts on each the
    /// keys whose connections are on that backend alone, whose sessions cannot move (their
    /// users' logins all went there). Once a second, from `tasks`.
    pub fn count_spread<'n>(&self, members: impl Iterator<Item = &'n str>) {
        let pools: Vec<Arc<BackendPool>> = members.filter_map(|m| self.get(m)).collect();
        let keys: Vec<Vec<Key>> = pools.iter().map(|p| p.keys()).collect();
        for (i, pool) in pools.iter().enumerate() {
            let alone = keys[i]
                .iter()
                .filter(|k| {
                    keys.iter()
                        .enumerate()
                        .all(|(j, other)| j == i || !other.contains(k))
                })
                .count();
            pool.set_keys_only_here(alone);
        }
    }

    /// The pool of `backend`, if one was made.
    pub fn get(&self, backend: &str) -> Option<Arc<BackendPool>> {
        let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.get(backend).cloned()
    }
}
