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
//! the waiting around it, [`ServerPools`] one pool per backend, in `ProxyState`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::config::Pooling;
use crate::leg::LegStream;
use crate::metrics::Metrics;
use crate::stream::BackendStream;

mod core;
pub mod holding;

use self::core::{Acquired, Core, Slot, Waiter};
pub use holding::{Holding, Reason, State, Step};

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
    /// Hashed with `seed` ([`ServerPools::key`]: one per proxy, random, so that user names
    /// chosen to collide cannot slow the pool's lookups).
    fn new(data: KeyData, seed: &std::hash::RandomState) -> Key {
        use std::hash::BuildHasher;
        let hash = seed.hash_one(&data);
        Key {
            data: Arc::new(data),
            hash,
        }
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

/// A server connection past its login, as the pool keeps it.
pub struct ServerConn {
    pub leg: LegStream<BackendStream>,
    /// The server's id of the connection (`CONNECTION_ID()`), for KILL.
    pub thread_id: u32,
    /// The replayable settings it carries beyond its login's (see [`holding::State`]).
    pub state: State,
}

impl std::fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerConn({})", self.thread_id)
    }
}

impl ServerConn {
    /// True when the server closed the connection or sent something unasked while it was idle
    /// (a `wait_timeout`, a KILL, a shutdown): it must not take a statement. One read attempt
    /// that does not wait.
    pub fn is_stale(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        !matches!(
            Pin::new(&mut self.leg).poll_read(&mut cx, &mut buf),
            Poll::Pending
        )
    }

    /// Brings a connection back to the state a login of its key leaves (after a session pinned
    /// it, or left warnings or an insert id on it): COM_RESET_CONNECTION (transaction rolled
    /// back, temporary tables dropped, locks released, variables, diagnostics and prepared
    /// statements gone, the login's character set kept), then COM_INIT_DB of the login schema
    /// when there was one, both sent at once. False if the server did not answer both with an
    /// OK within a second: the connection must close.
    pub async fn reset(&mut self, schema: &str) -> bool {
        let mut commands: Vec<(u8, &[u8])> = vec![(0x1F, &[])];
        if !schema.is_empty() {
            commands.push((0x02, schema.as_bytes()));
        }
        let done = self.run(&commands).await;
        if done {
            self.state = State::default();
        }
        done
    }

    /// Whether the connection carries exactly `state`'s settings.
    pub fn carries(&self, state: &State) -> bool {
        Arc::ptr_eq(&self.state, state) || self.state == *state
    }

    /// Brings the connection to `state` (a session's settings, see [`holding::State`]): when
    /// it carries other settings, reset first (COM_RESET_CONNECTION, COM_INIT_DB of the login
    /// `schema`), then each setting run again, all in one write. False if the server did not
    /// answer each with an OK within a second: the connection must close.
    pub async fn adopt(&mut self, state: &State, schema: &str) -> bool {
        if self.carries(state) {
            return true;
        }
        let mut commands: Vec<(u8, &[u8])> = Vec::new();
        if !self.state.is_empty() {
            commands.push((0x1F, &[]));
            if !schema.is_empty() {
                commands.push((0x02, schema.as_bytes()));
            }
        }
        for step in state.iter() {
            commands.push(match step {
                Step::Query(text) => (0x03, text),
                Step::InitDb(name) => (0x02, name),
            });
        }
        let done = self.run(&commands).await;
        if done {
            self.state = Arc::clone(state);
        }
        done
    }

    /// Sends `commands` (command byte, body) in one write and reads their answers: true if
    /// each is an OK, within a second.
    async fn run(&mut self, commands: &[(u8, &[u8])]) -> bool {
        let steps = async {
            use tokio::io::AsyncWriteExt;
            let mut packets = Vec::new();
            for (command, body) in commands {
                let len = 1 + body.len();
                if len >= 0xFF_FFFF {
                    return Ok::<bool, std::io::Error>(false);
                }
                packets.extend_from_slice(&[len as u8, (len >> 8) as u8, (len >> 16) as u8, 0]);
                packets.push(*command);
                packets.extend_from_slice(body);
            }
            self.leg.write_all(&packets).await?;
            self.leg.flush().await?;
            let mut ok = true;
            for _ in commands {
                ok &= self.read_ok().await?;
            }
            Ok(ok)
        };
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(1), steps).await,
            Ok(Ok(true))
        )
    }

    /// Reads a one-packet answer to a command: true for an OK.
    async fn read_ok(&mut self) -> std::io::Result<bool> {
        use tokio::io::AsyncReadExt;
        let mut header = [0u8; 4];
        self.leg.read_exact(&mut header).await?;
        let len =
            usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        if len > 64 * 1024 {
            return Ok(false);
        }
        let mut payload = vec![0u8; len];
        self.leg.read_exact(&mut payload).await?;
        Ok(payload.first() == Some(&0x00) && header[3] == 1)
    }

    /// Ends the connection and waits (up to a second) until the server has closed its end:
    /// only then does the server no longer count it against its `max_connections`, and may
    /// its pool slot go to a login.
    pub async fn close(mut self) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ends = async {
            self.leg.write_all(&[1, 0, 0, 0, 0x01]).await?;
            self.leg.flush().await?;
            let mut sink = [0u8; 256];
            while self.leg.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), ends).await;
    }

    /// Ends the connection politely, as far as it can without waiting: COM_QUIT if the socket
    /// takes it now, then the close.
    pub fn quit(mut self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let leg = Pin::new(&mut self.leg);
        if let Poll::Ready(Ok(5)) = leg.poll_write(&mut cx, &[1, 0, 0, 0, 0x01]) {
            let _ = Pin::new(&mut self.leg).poll_flush(&mut cx);
        }
    }
}

impl Waiter<ServerConn> for oneshot::Sender<ServerConn> {
    fn offer(self, value: ServerConn) -> Result<(), ServerConn> {
        self.send(value)
    }
}

impl Waiter<()> for oneshot::Sender<()> {
    fn offer(self, value: ()) -> Result<(), ()> {
        self.send(value)
    }
}

type Inner = Core<Key, ServerConn, oneshot::Sender<ServerConn>, oneshot::Sender<()>>;

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
}

/// One backend's shared connections.
pub struct BackendPool {
    backend: String,
    inner: Mutex<(Inner, Pooling)>,
    metrics: PoolMetrics,
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
    /// `wait_timeout`. On Ok the caller must report [`logged_in`](Self::logged_in) or
    /// [`login_failed`](Self::login_failed).
    pub async fn login_slot(&self) -> Result<(), PoolError> {
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
                Slot::Free => return Ok(()),
                // The slot of this connection, once the server let go of it.
                Slot::Freed(conn) => (Err(conn), pooling),
                Slot::Wait => (Ok(rx), pooling),
            }
        };
        let receiver = match receiver {
            Ok(receiver) => receiver,
            Err(conn) => {
                conn.close().await;
                return Ok(());
            }
        };
        let Some(receiver) = receiver else {
            return Ok(());
        };
        let got = tokio::time::timeout(pooling.wait_timeout, receiver).await;
        self.metrics.waited(started.elapsed());
        match got {
            Ok(Ok(())) => Ok(()),
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
    pub fn login_failed(&self) {
        let mut guard = self.lock();
        guard.0.login_failed();
        self.metrics.update(&guard.0);
    }

    /// A login succeeded: its session holds the new connection.
    pub fn logged_in(&self, key: &Key) {
        let mut guard = self.lock();
        guard.0.logged_in(key);
        self.metrics.update(&guard.0);
    }

    /// A connection for a session of `key` on worker `worker`: an idle one that is still
    /// alive, or the next one released, within `wait_timeout`.
    pub async fn acquire(
        &self,
        key: &Key,
        worker: usize,
        state: &State,
    ) -> Result<ServerConn, PoolError> {
        let started = Instant::now();
        loop {
            let (receiver, pooling) = {
                let mut guard = self.lock();
                let (core, pooling) = &mut *guard;
                let mut rx = None;
                let like = |c: &ServerConn| c.carries(state);
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
                        return Ok(conn);
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
            let got = tokio::time::timeout(left, receiver).await;
            self.metrics.waited(started.elapsed());
            match got {
                Ok(Ok(mut conn)) => {
                    if conn.is_stale() {
                        self.closed(key);
                        continue;
                    }
                    self.metrics.acquired.inc();
                    return Ok(conn);
                }
                // Let go because nothing is left to wait for.
                Ok(Err(_)) => {
                    self.metrics.failed("starved");
                    return Err(self.starved(key));
                }
                Err(_) => {
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

    fn starved(&self, key: &Key) -> PoolError {
        PoolError::Starved {
            user: key.user.clone(),
            backend: self.backend.clone(),
        }
    }

    /// A session gives back a connection it holds, unpinned and at a command boundary.
    pub fn release(self: &Arc<Self>, key: &Key, conn: ServerConn, worker: usize) {
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
    fn close_all(self: &Arc<Self>, closed: Vec<ServerConn>) {
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

    /// Counts a reset of a connection of this pool ([`ServerConn::reset`]) and how it went.
    pub fn count_reset(&self, reason: &'static str, ok: bool) {
        self.metrics.reset(reason, ok);
    }

    /// A connection a session held is gone (the server closed it, or it failed).
    pub fn closed(&self, key: &Key) {
        let mut guard = self.lock();
        guard.0.closed(key);
        self.metrics.update(&guard.0);
    }

    /// The session holding a connection of `key` pinned it, for `reason`.
    pub fn pinned(&self, key: &Key, reason: Reason) {
        self.metrics.pinned(reason);
        let mut guard = self.lock();
        guard.0.pinned(key);
        self.metrics.update(&guard.0);
    }

    /// A session that pinned a connection ends with it brought back to its key's login state
    /// ([`ServerConn::reset`]): it is shared again.
    pub fn recycle(self: &Arc<Self>, key: &Key, conn: ServerConn, worker: usize) {
        {
            let mut guard = self.lock();
            guard.0.unpinned(key);
            guard.0.session_ended(key, false);
        }
        self.release(key, conn, worker);
    }

    /// A session ended; its pinned connection, if it had one, closes with it.
    pub fn session_ended(&self, key: &Key, pinned: bool) {
        let mut guard = self.lock();
        guard.0.session_ended(key, pinned);
        self.metrics.update(&guard.0);
    }

    /// Closes idle connections past their idle timeout that their keys can spare.
    pub fn expire(self: &Arc<Self>, now: Instant) {
        let closed = {
            let mut guard = self.lock();
            let timeout = guard.1.idle_timeout;
            let closed = guard.0.expire(now, timeout);
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
        closed.into_iter().for_each(ServerConn::quit);
    }

    fn reconfigure(&self, pooling: Pooling) {
        let closed = {
            let mut guard = self.lock();
            let closed = guard.0.set_limit(pooling.max_server_connections);
            guard.1 = pooling;
            self.metrics.update(&guard.0);
            closed
        };
        closed.into_iter().for_each(ServerConn::quit);
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

/// Every backend's pool, by backend name; created when a transaction-mode session first needs
/// one, kept across reloads (a reload updates its limits).
pub struct ServerPools {
    pools: Mutex<HashMap<String, Arc<BackendPool>>>,
    families: Families,
    seed: std::hash::RandomState,
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
        }
    }

    /// The key a session's connections are shared under.
    pub fn key(&self, data: KeyData) -> Key {
        Key::new(data, &self.seed)
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
        });
        pools.insert(backend.to_owned(), Arc::clone(&created));
        created
    }

    /// Runs [`BackendPool::expire`] on every pool (once a second, from `tasks`).
    pub fn expire(&self, now: Instant) {
        let pools: Vec<Arc<BackendPool>> = {
            let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
            pools.values().cloned().collect()
        };
        for pool in pools {
            pool.expire(now);
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

    /// The pool of `backend`, if one was made.
    pub fn get(&self, backend: &str) -> Option<Arc<BackendPool>> {
        let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools.get(backend).cloned()
    }
}

/// The metric families every pool's series belong to.
#[derive(Clone)]
struct Families {
    connections: IntGaugeVec,
    waiting: IntGaugeVec,
    wait: HistogramVec,
    pins: IntCounterVec,
    acquired: IntCounterVec,
    failed: IntCounterVec,
    resets: IntCounterVec,
}

impl Families {
    /// The families, registered with `metrics` (a registry that has them already, as a second
    /// proxy in one test process, keeps its own and these count unexported).
    fn register(metrics: &Metrics) -> Families {
        let labels = ["pool", "backend"];
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric name")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric name")
        };
        let families = Families {
            connections: gauge(
                "mysql_lb_pool_server_connections",
                "Server connections of a transaction-mode pool by state (idle, in_use; \
                 logins in flight count as in use)",
                &["pool", "backend", "state"],
            ),
            waiting: gauge(
                "mysql_lb_pool_waiting",
                "Sessions and logins waiting for a server connection",
                &labels,
            ),
            wait: HistogramVec::new(
                HistogramOpts::new(
                    "mysql_lb_pool_wait_seconds",
                    "How long a session or login waited for a server connection",
                )
                .buckets(vec![
                    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
                ]),
                &labels,
            )
            .expect("a valid metric name"),
            pins: counter(
                "mysql_lb_pool_pins_total",
                "Sessions that kept their server connection for good, by reason",
                &["pool", "backend", "reason"],
            ),
            acquired: counter(
                "mysql_lb_pool_acquired_total",
                "Server connections taken from the pool by a session (reuses)",
                &labels,
            ),
            failed: counter(
                "mysql_lb_pool_wait_failed_total",
                "Sessions and logins that got no server connection (timeout, starved)",
                &["pool", "backend", "reason"],
            ),
            resets: counter(
                "mysql_lb_pool_resets_total",
                "Server connections reset (COM_RESET_CONNECTION) before another session gets \
                 them, by why: traces (warnings, an error, an insert id or a row count left \
                 on it), session_end (a session ended in a transaction or with traces), pinned \
                 (a pinned session ended); outcome failed when the connection closed instead",
                &["pool", "backend", "reason", "outcome"],
            ),
        };
        for c in [
            Box::new(families.connections.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(families.waiting.clone()),
            Box::new(families.wait.clone()),
            Box::new(families.pins.clone()),
            Box::new(families.acquired.clone()),
            Box::new(families.failed.clone()),
            Box::new(families.resets.clone()),
        ] {
            let _ = metrics.register(c);
        }
        families
    }
}

/// One pool's series.
struct PoolMetrics {
    idle: prometheus::IntGauge,
    in_use: prometheus::IntGauge,
    waiting: prometheus::IntGauge,
    wait: prometheus::Histogram,
    pins: IntCounterVec,
    acquired: prometheus::IntCounter,
    failed: IntCounterVec,
    resets: IntCounterVec,
    labels: [String; 2],
}

impl PoolMetrics {
    fn new(f: &Families, pool: &str, backend: &str) -> Self {
        PoolMetrics {
            idle: f.connections.with_label_values(&[pool, backend, "idle"]),
            in_use: f.connections.with_label_values(&[pool, backend, "in_use"]),
            waiting: f.waiting.with_label_values(&[pool, backend]),
            wait: f.wait.with_label_values(&[pool, backend]),
            pins: f.pins.clone(),
            acquired: f.acquired.with_label_values(&[pool, backend]),
            failed: f.failed.clone(),
            resets: f.resets.clone(),
            labels: [pool.to_owned(), backend.to_owned()],
        }
    }

    fn update(&self, core: &Inner) {
        let idle = core.idle();
        self.idle.set(idle as i64);
        self.in_use.set(core.open().saturating_sub(idle) as i64);
        self.waiting.set(core.waiting() as i64);
    }

    fn waited(&self, d: std::time::Duration) {
        self.wait.observe(d.as_secs_f64());
    }

    fn pinned(&self, reason: Reason) {
        let [pool, backend] = &self.labels;
        self.pins
            .with_label_values(&[pool, backend, reason.as_str()])
            .inc();
    }

    fn reset(&self, reason: &str, ok: bool) {
        let [pool, backend] = &self.labels;
        let outcome = if ok { "ok" } else { "failed" };
        self.resets
            .with_label_values(&[pool, backend, reason, outcome])
            .inc();
    }

    fn failed(&self, reason: &str) {
        let [pool, backend] = &self.labels;
        self.failed
            .with_label_values(&[pool, backend, reason])
            .inc();
    }
}
