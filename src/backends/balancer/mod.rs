//! Backends and the choice of one per client connection.
//!
//! A [`BackendSet`] is immutable once built (a reload will build a new one and swap it), so the
//! hot path reads it without locks: state that changes per connection lives in atomics on each
//! [`Backend`]. Choosing is a separate step from accepting: a built-in policy
//! ([`round_robin`], [`least_conn`], [`random`], each weighted) orders the up backends, and an
//! optional Lua [`script`] may put its own choice first. Only the first candidate is a choice;
//! the rest are the fallbacks a session tries when a connect fails.

pub mod ejection;
mod greeting;
pub mod latency;
pub mod least_conn;
pub mod pools;
pub mod roles;
mod rotation;
pub use rotation::Health;
pub(crate) use rotation::Rotation;
pub mod random;
pub mod round_robin;
pub mod script;

use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed,
};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::backends::route::Routes;
use crate::config::{
    BackendAddr, BackendConfig, BackendKind, BalancerConfig, EjectionConfig, Policy,
};
use crate::telemetry::metrics::{BackendStats, Metrics};
use arc_swap::ArcSwapOption;
pub use greeting::{GreetingTemplate, LearnedGreeting};
pub use pools::Pool;
use script::{ErrorReason, ScriptError, ScriptErrors, ScriptHost};

/// Backends handled without a heap allocation per pick.
const INLINE: usize = 16;

/// Who is connecting, as a script sees it (`proxy.connection.client.src`, and in deferred mode
/// `client.username`, `client.default_db` and `proxy.connection.pool`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientInfo<'a> {
    /// `ip:port` (`[v6]:port`), or `unix:PATH` for a unix socket listener.
    pub addr: &'a str,
    /// The user the client logs in as; known only in deferred mode.
    pub user: Option<&'a str>,
    /// The database the client names in its HandshakeResponse (deferred mode).
    pub default_db: Option<&'a str>,
    /// The pool the routes chose.
    pub pool: Option<&'a str>,
}

impl<'a> ClientInfo<'a> {
    /// A client known only by its address (before the greeting).
    pub fn at(addr: &'a str) -> Self {
        Self {
            addr,
            ..Self::default()
        }
    }
}

/// Which backends a transaction of a pool that splits reads from writes may run on (see
/// [`BackendSet::transaction_order_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Any: the pool does not split.
    Any,
    /// The pool's primary only.
    Primary,
    /// A replica, else the primary.
    Replica,
    /// A replica only (a read-only route's session, which never reaches the primary).
    ReplicaOnly,
}

/// One server behind the proxy.
#[derive(Debug)]
pub struct Backend {
    pub name: String,
    /// The pool it belongs to (`default` for the top-level `backends:`).
    pub pool: String,
    pub address: BackendAddr,
    pub kind: BackendKind,
    /// Its role in a replication cluster (see `roles`).
    pub role: roles::BackendRole,
    /// Mutable so a reload can change it while sessions keep the same backend (and its counts).
    weight: AtomicU32,
    /// Position in the set (a script's `backend_ndx` minus one); a reload may move it.
    index: AtomicUsize,
    /// A connect or a check has succeeded at least once (MySQL Proxy's state leaves UNKNOWN).
    seen_up: AtomicBool,
    /// Out of rotation (after `fall` failed checks or a failed client connect).
    down: AtomicBool,
    /// Without health checks, a down backend returns after this (nanoseconds since the set's
    /// epoch); with them, only `rise` passed checks bring it back.
    down_until: AtomicU64,
    active: AtomicUsize,
    passes: AtomicU32,
    failures: AtomicU32,
    last_check: Mutex<Option<CheckRecord>>,
    /// A clear-text password was seen crossing to this backend unencrypted (warned once).
    cleartext_warned: AtomicBool,
    /// Its latest greeting, for deferred connects to greet clients with.
    greeting: ArcSwapOption<LearnedGreeting>,
    /// What an operator set on the admin endpoint ([`AdminState`] as u8); kept across reloads.
    admin: AtomicU8,
    /// Sessions established on it, counted under its pool.
    pub routed: prometheus::IntCounter,
    /// Its recent command latency, for `least_latency`.
    pub latency: latency::LatencyScore,
    /// Outlier ejection: out for a backoff after its sessions kept failing; kept across reloads.
    pub ejection: ejection::Ejection,
    pub stats: BackendStats,
}

/// The outcome of the latest health check, for the status endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRecord {
    pub at: std::time::SystemTime,
    /// None when the check passed, else why it failed.
    pub error: Option<String>,
}

/// What an operator set on the admin endpoint, apart from (and above) the health state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// In rotation when healthy.
    Ready,
    /// No new clients; its sessions run on; health as the checks say.
    Draining,
    /// As draining, and reported down whatever the checks say until made ready again.
    Maintenance,
}

impl AdminState {
    pub const ALL: [AdminState; 3] = [Self::Ready, Self::Draining, Self::Maintenance];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Maintenance => "maintenance",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Draining,
            2 => Self::Maintenance,
            _ => Self::Ready,
        }
    }
}

/// A state change the caller should log (once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    WentDown,
    CameUp,
}

impl Backend {
    /// True the first time it is called: for a warning logged once per backend.
    pub fn first_cleartext_warning(&self) -> bool {
        !self
            .cleartext_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    }

    /// How messages name the backend: its name, with the address when the name is not it.
    pub fn label(&self) -> String {
        let address = self.address.to_string();
        if self.name == address {
            address
        } else {
            format!("{} ({address})", self.name)
        }
    }

    /// Client sessions currently relayed to this backend.
    pub fn active(&self) -> usize {
        self.active.load(Relaxed)
    }

    /// Position in the configuration, from 0.
    pub fn index(&self) -> usize {
        self.index.load(Relaxed)
    }

    /// Relative share for the weighted policies.
    pub fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }

    /// What an operator set: ready, draining or maintenance.
    pub fn admin_state(&self) -> AdminState {
        AdminState::from_u8(self.admin.load(Relaxed))
    }

    /// Sets the admin state and its gauges; returns the previous one.
    pub fn set_admin_state(&self, state: AdminState) -> AdminState {
        let old = AdminState::from_u8(self.admin.swap(state as u8, Relaxed));
        self.stats.set_admin_state(state.as_str());
        self.export_up();
        old
    }

    /// Changes the weight at runtime (a reload re-applies the file's); returns the previous one.
    pub fn set_weight(&self, weight: u32) -> u32 {
        self.weight.swap(weight.max(1), Relaxed)
    }

    /// The latest health check's outcome, if one ran.
    pub fn last_check(&self) -> Option<CheckRecord> {
        self.last_check.lock().map(|g| g.clone()).unwrap_or(None)
    }

    fn set_down(&self, down: bool) -> bool {
        let was = self.down.swap(down, Relaxed);
        self.export_up();
        was != down
    }

    /// `backend_up`: 1 when healthy and not in maintenance.
    fn export_up(&self) {
        let up = !self.down.load(Relaxed) && self.admin_state() != AdminState::Maintenance;
        self.stats.up.set(i64::from(up));
    }
}

/// Holds a backend's active-connection count up for as long as a session uses it, and tells the
/// script's `disconnect_client()` when the session ends.
#[derive(Debug)]
pub struct Lease {
    backend: Arc<Backend>,
    farewell: Option<Farewell>,
}

#[derive(Debug)]
struct Farewell {
    script: Arc<ScriptHost>,
    client: String,
}

impl Lease {
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// The session now runs on `backend` (a pool across backends moved it): its count in the
    /// active sessions, which the least-connections policy and a drain's progress read, goes
    /// with it. The script's `disconnect_client()` still hears of its end once, naming the
    /// backend it ended on.
    pub fn move_to(&mut self, backend: &Arc<Backend>) {
        if Arc::ptr_eq(&self.backend, backend) {
            return;
        }
        backend.active.fetch_add(1, Relaxed);
        backend.stats.connections.inc();
        let old = std::mem::replace(&mut self.backend, Arc::clone(backend));
        old.active.fetch_sub(1, Relaxed);
        old.stats.connections.dec();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(f) = self.farewell.take() {
            f.script
                .disconnect(&f.client, Some(self.backend.index()), Instant::now());
        }
        self.backend.active.fetch_sub(1, Relaxed);
        self.backend.stats.connections.dec();
    }
}

/// A connect in progress, counted in its backend's active sessions until it becomes a
/// [`Lease`] or is dropped.
#[derive(Debug)]
pub struct Attempt {
    backend: Arc<Backend>,
    /// The count passed on to a lease.
    leased: bool,
}

impl Attempt {
    /// The connect succeeded: the session keeps the count (and the script hears of its end, as
    /// [`BackendSet::lease_for`]).
    pub fn into_lease(mut self, set: &BackendSet, client: &ClientInfo<'_>) -> Lease {
        self.leased = true;
        set.counted_lease_for(&self.backend, client)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.leased {
            self.backend.active.fetch_sub(1, Relaxed);
        }
    }
}

/// The configured backends with their policy, optional script, and down state.
#[derive(Debug)]
pub struct BackendSet {
    backends: Vec<Arc<Backend>>,
    next: AtomicUsize,
    cooloff: Duration,
    rotation: Rotation,
    policy: Policy,
    rng: random::Rng,
    script: Option<Arc<ScriptHost>>,
    script_errors: ScriptErrors,
    pools: Vec<Pool>,
    routes: Routes,
    deferred: bool,
    ejection: EjectionConfig,
    /// Held while deciding an ejection, so two at once cannot both take a pool's last room.
    ejecting: Mutex<()>,
    /// The greeting deferred connects send, as last built (see `greeting`).
    template: ArcSwapOption<GreetingTemplate>,
}

impl BackendSet {
    /// `checked` says whether health checks run (then they alone bring a down backend back).
    /// The policy is round robin until [`with_balancer`](Self::with_balancer) says otherwise.
    pub fn new(
        configs: &[BackendConfig],
        cooloff: Duration,
        checked: bool,
        metrics: &Metrics,
    ) -> Self {
        Self::build(configs, cooloff, checked, metrics, None)
    }

    /// The set a reload asks for. A backend with the same name, address and type as one in `self`
    /// is the same [`Backend`] (its sessions, counts, health state and metrics carry over; its
    /// weight and position are updated); others are new, and those no longer configured get no
    /// new clients while their sessions run on. The policy and script come from `balancer`.
    pub fn rebuild(
        &self,
        configs: &[BackendConfig],
        cooloff: Duration,
        checked: bool,
        metrics: &Metrics,
        balancer: &BalancerConfig,
    ) -> Self {
        Self::build(configs, cooloff, checked, metrics, Some(self)).with_balancer(balancer)
    }

    fn build(
        configs: &[BackendConfig],
        cooloff: Duration,
        checked: bool,
        metrics: &Metrics,
        previous: Option<&BackendSet>,
    ) -> Self {
        let backends = configs
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let kept = previous.and_then(|p| {
                    p.backends.iter().find(|b| {
                        b.name == c.name
                            && b.address == c.address
                            && b.kind == c.kind
                            && b.role.configured() == c.role
                            && b.pool == c.pool
                    })
                });
                match kept {
                    Some(b) => {
                        b.weight.store(c.weight, Relaxed);
                        b.index.store(index, Relaxed);
                        Arc::clone(b)
                    }
                    None => Arc::new({
                        metrics.backend_pool(&c.name, &c.pool);
                        Backend {
                            name: c.name.clone(),
                            pool: c.pool.clone(),
                            address: c.address.clone(),
                            weight: AtomicU32::new(c.weight),
                            kind: c.kind,
                            role: roles::BackendRole::new(c.role),
                            index: AtomicUsize::new(index),
                            seen_up: AtomicBool::new(false),
                            down: AtomicBool::new(false),
                            down_until: AtomicU64::new(0),
                            active: AtomicUsize::new(0),
                            passes: AtomicU32::new(0),
                            failures: AtomicU32::new(0),
                            last_check: Mutex::new(None),
                            cleartext_warned: AtomicBool::new(false),
                            greeting: ArcSwapOption::empty(),
                            admin: AtomicU8::new(AdminState::Ready as u8),
                            routed: metrics.routed(&c.pool),
                            latency: latency::LatencyScore::default(),
                            ejection: ejection::Ejection::default(),
                            stats: metrics.backend(&c.name),
                        }
                    }),
                }
            })
            .collect::<Vec<_>>();
        let pools = pools::group(&backends, previous, metrics);
        Self {
            pools,
            routes: Routes::new(&[], Some(crate::config::DEFAULT_POOL)),
            deferred: false,
            backends,
            next: AtomicUsize::new(previous.map_or(0, |p| p.next.load(Relaxed))),
            cooloff,
            rotation: Rotation {
                // Down deadlines of kept backends are relative to the epoch: keep it.
                epoch: previous.map_or_else(Instant::now, |p| p.rotation.epoch),
                checked,
                trial_timeout: EjectionConfig::default().backoff,
            },
            ejection: EjectionConfig::off(),
            ejecting: Mutex::new(()),
            template: ArcSwapOption::empty(),
            policy: Policy::RoundRobin,
            rng: random::Rng::from_entropy(),
            script: None,
            script_errors: previous.map_or_else(ScriptErrors::new, |p| p.script_errors.clone()),
        }
    }

    /// Sets the built-in policy and loads the script, if any. A script that fails to load is
    /// logged and counted, and the policy serves alone until a reload succeeds.
    pub fn with_balancer(mut self, config: &BalancerConfig) -> Self {
        self.policy = config.policy;
        self.ejection = config.ejection;
        self.rotation.trial_timeout = config.ejection.backoff;
        if !config.ejection.enabled() {
            for b in &self.backends {
                if b.ejection.clear() {
                    b.stats.ejected.set(0);
                    tracing::info!(backend = %b.name, "ejection is off: ejected backend back in rotation");
                }
            }
        }
        for pool in &mut self.pools {
            pool.policy = config.policy;
        }
        self.script = config.script.as_ref().map(|path| {
            Arc::new(ScriptHost::new(
                path.clone(),
                config,
                self.backends.clone(),
                self.rotation,
                self.script_errors.clone(),
            ))
        });
        self
    }

    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// The backend named `name`, if configured.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Backend>> {
        self.backends.iter().find(|b| b.name == name)
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The script host, when a script is configured.
    pub fn script(&self) -> Option<&ScriptHost> {
        self.script.as_deref()
    }

    /// Re-reads the script file (SIGHUP). On failure the running script stays, and the error is
    /// logged, counted and returned. Without a configured script this does nothing.
    pub fn reload_script(&self) -> Result<(), ScriptError> {
        match &self.script {
            Some(s) => s.reload(),
            None => {
                tracing::info!("no Lua script configured (balancer.script): nothing to reload");
                Ok(())
            }
        }
    }

    /// `mysql_lb_script_errors_total{reason}`, for the metrics registry.
    pub fn script_errors_collector(&self) -> Box<dyn prometheus::core::Collector> {
        self.script_errors.collector()
    }

    /// Script failures counted so far for `reason`.
    pub fn script_errors(&self, reason: ErrorReason) -> u64 {
        self.script_errors.get(reason)
    }

    /// True when the backend is in rotation.
    pub fn is_up(&self, backend: &Backend, now: Instant) -> bool {
        self.rotation.is_up(backend, now)
    }

    /// The order in which to try backends for a new client, by the built-in policy: its choice
    /// among the up backends first, then the other up ones, then — only so a recovered server is
    /// not refused while its cool-off runs — those cooling off, soonest back first.
    pub fn candidates(&self, now: Instant) -> Vec<Arc<Backend>> {
        self.candidates_in(now, None)
    }

    /// As [`candidates`](Self::candidates), among `pool`'s backends by its policy (None: every
    /// backend by the set's policy).
    pub fn candidates_in(&self, now: Instant, pool: Option<&Pool>) -> Vec<Arc<Backend>> {
        let (members, policy, next) = match pool {
            Some(p) => (&p.members[..], p.policy, &p.next),
            None => (&self.backends[..], self.policy, &self.next),
        };
        // Draining and maintenance backends take no new clients, not even as a last resort.
        let (mut up, mut down): (Vec<_>, Vec<_>) = members
            .iter()
            .filter(|b| b.admin_state() == AdminState::Ready)
            .partition(|b| self.is_up(b, now));
        let trial = self.rotation.take_trial(&mut up, &mut down, now);
        if !up.is_empty() {
            let first = self.policy_pick(policy, next, &up);
            up.rotate_left(first);
        }
        down.sort_by_key(|b| self.rotation.back_at(b, now));
        trial.into_iter().chain(up).chain(down).cloned().collect()
    }

    /// Where a session of a pool across backends (`pooling.across_backends`) looks for its
    /// next transaction's connection: `pool`'s backends that are ready and up, the policy's
    /// choice first. Unlike [`candidates_in`](Self::candidates_in), no down backend comes last
    /// and no trial is claimed: a session moves only to a backend in rotation.
    /// Written into `up` (cleared first), which a session keeps between its transactions.
    pub fn transaction_order<'p>(
        &self,
        now: Instant,
        pool: &'p Pool,
        up: &mut Vec<&'p Arc<Backend>>,
    ) {
        self.transaction_order_for(now, pool, up, Want::Any);
    }

    /// [`transaction_order`](Self::transaction_order) for a transaction of a pool that splits
    /// reads from writes: only its primary ([`Want::Primary`]), or its replicas in the policy's
    /// order and the primary last ([`Want::Replica`]: a read goes to the primary when no
    /// replica has a connection for it).
    pub fn transaction_order_for<'p>(
        &self,
        now: Instant,
        pool: &'p Pool,
        up: &mut Vec<&'p Arc<Backend>>,
        want: Want,
    ) {
        up.clear();
        let at = self.rotation.nanos_since_epoch(now);
        let ready = |b: &&Arc<Backend>| {
            b.admin_state() == AdminState::Ready && self.rotation.is_up_at(b, at)
        };
        let primary = match want {
            Want::Any => None,
            Want::Primary | Want::Replica | Want::ReplicaOnly => match pool.primary() {
                roles::Primary::One(p) => Some(p),
                _ => None,
            },
        };
        match want {
            Want::Any => up.extend(pool.members.iter().filter(ready)),
            Want::Primary => up.extend(primary.filter(ready)),
            Want::Replica | Want::ReplicaOnly => {
                up.extend(pool.members.iter().filter(ready).filter(|b| {
                    primary.is_none_or(|p| !Arc::ptr_eq(p, b)) && b.role.serves_reads()
                }))
            }
        }
        if !up.is_empty() {
            let first = self.policy_pick(pool.policy, &pool.next_transaction, up);
            up.rotate_left(first);
        }
        if want == Want::Replica {
            up.extend(primary.filter(ready));
        }
    }

    /// Whether backend `name` is out of rotation (not ready, or down) in a pool across
    /// backends: its pooled sessions move to the others at their next transaction.
    pub fn leaving_across(&self, name: &str, now: Instant) -> bool {
        self.by_name(name).is_some_and(|b| {
            self.pool(&b.pool)
                .is_some_and(|p| p.pooling.across_backends)
                && self.out_of_rotation(b, now)
        })
    }

    /// Whether `backend` takes no transactions of a pool across backends now: not ready
    /// (drained, maintenance) or down (failed checks, ejected).
    pub fn out_of_rotation(&self, backend: &Backend, now: Instant) -> bool {
        backend.admin_state() != AdminState::Ready || !self.is_up(backend, now)
    }

    /// Like [`candidates_in`](Self::candidates_in), but a script's `connect_server()` may choose
    /// the first one for this client, from any pool; the policy's order follows as the fallback.
    pub fn candidates_for(
        &self,
        now: Instant,
        client: &ClientInfo<'_>,
        pool: Option<&Pool>,
    ) -> Vec<Arc<Backend>> {
        let chosen = self
            .script
            .as_ref()
            .and_then(|s| s.choose(client, now))
            .filter(|&i| {
                self.backends
                    .get(i)
                    .is_some_and(|b| b.admin_state() == AdminState::Ready)
            });
        let mut order = self.candidates_in(now, pool);
        if let Some(i) = chosen {
            if let Some(pos) = order.iter().position(|b| b.index() == i) {
                order[..=pos].rotate_right(1);
            } else if let Some(b) = self.backends.get(i) {
                order.insert(0, Arc::clone(b));
            }
        }
        order
    }

    /// The policy's choice, as an index into `up` (not empty).
    fn policy_pick(&self, policy: Policy, next: &AtomicUsize, up: &[&Arc<Backend>]) -> usize {
        match policy {
            Policy::RoundRobin => {
                let counter = next.fetch_add(1, Relaxed);
                with_inline(up, |b| b.weight(), |w| round_robin::pick(w, counter))
            }
            Policy::Random => {
                let r = self.rng.next_u64();
                with_inline(up, |b| b.weight(), |w| random::pick(w, r))
            }
            Policy::LeastLatency if up.len() > 1 => {
                let r = self.rng.next_u64();
                let n = up.len() as u64;
                let a = (r % n) as usize;
                // A second, different one: an offset of 1..n from the first.
                let b = (a + 1 + ((r >> 32) % (n - 1)) as usize) % up.len();
                latency::better_of(up, a, b)
            }
            Policy::LeastLatency => 0,
            Policy::LeastConnections => {
                let counter = next.fetch_add(1, Relaxed);
                with_inline(
                    up,
                    |b| (b.active(), b.weight()),
                    |loads| least_conn::pick(loads, counter),
                )
            }
        }
    }

    /// Counts a connect to `backend` in progress in its active sessions, so the choices made for
    /// other clients meanwhile (a burst of connects) see it; [`Attempt::into_lease`] keeps the
    /// count for the session, dropping the attempt (the connect failed) gives it back.
    pub fn attempt(&self, backend: &Arc<Backend>) -> Attempt {
        backend.active.fetch_add(1, Relaxed);
        Attempt {
            backend: Arc::clone(backend),
            leased: false,
        }
    }

    /// Counts a session on `backend` until the lease is dropped.
    pub fn lease(&self, backend: &Arc<Backend>) -> Lease {
        backend.active.fetch_add(1, Relaxed);
        self.counted_lease(backend)
    }

    /// A lease for a session already counted in `backend.active`.
    fn counted_lease(&self, backend: &Arc<Backend>) -> Lease {
        backend.stats.connections.inc();
        backend.stats.connections_total.inc();
        Lease {
            backend: Arc::clone(backend),
            farewell: None,
        }
    }

    /// Like [`lease`](Self::lease); when the script defines `disconnect_client()`, dropping the
    /// lease calls it for `client`.
    pub fn lease_for(&self, backend: &Arc<Backend>, client: &ClientInfo<'_>) -> Lease {
        backend.active.fetch_add(1, Relaxed);
        self.counted_lease_for(backend, client)
    }

    fn counted_lease_for(&self, backend: &Arc<Backend>, client: &ClientInfo<'_>) -> Lease {
        let mut lease = self.counted_lease(backend);
        lease.farewell = self
            .script
            .as_ref()
            .filter(|s| s.wants_disconnect())
            .map(|s| Farewell {
                script: Arc::clone(s),
                client: client.addr.to_owned(),
            });
        lease
    }

    /// A client that got no backend is leaving: the script's `disconnect_client()` still hears of
    /// it (with `backend_ndx` 0), as in MySQL Proxy.
    pub fn client_refused(&self, client: &ClientInfo<'_>) {
        if let Some(s) = self.script.as_ref().filter(|s| s.wants_disconnect()) {
            s.disconnect(client.addr, None, Instant::now());
        }
    }
}

/// Runs `f` over `key` of each of `up` without a heap allocation for the usual few backends.
fn with_inline<T: Copy + Default, R>(
    up: &[&Arc<Backend>],
    key: impl Fn(&Backend) -> T,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    if up.len() <= INLINE {
        let mut buf = [T::default(); INLINE];
        for (slot, b) in buf.iter_mut().zip(up) {
            *slot = key(b);
        }
        f(&buf[..up.len()])
    } else {
        f(&up.iter().map(|b| key(b)).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests;
