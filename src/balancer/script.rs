//! The Lua connect hook: MySQL Proxy's `connect_server()` / `disconnect_client()` on Lua 5.4.
//!
//! People migrating from MySQL Proxy bring scripts that read `proxy.global.backends` and set
//! `proxy.connection.backend_ndx`; those run here unmodified. The shape follows from two needs:
//!
//! - **No global lock.** There is one Lua state per slot, as many slots as CPUs, each behind its
//!   own mutex. A thread takes its home slot, else any free one, so connects on different worker
//!   threads never wait for each other. The price: `proxy.global` is per state, not process-wide.
//! - **A broken script never refuses a client.** An error, a spent budget (see the `engine` module), an
//!   index out of range or a down backend leave the choice to the built-in policy; each failure is
//!   counted by reason in `mysql_lb_script_errors_total` and logged, at most once per
//!   [`WARN_INTERVAL`] per reason. A script that fails to load or reload keeps the previous one.

mod engine;

use std::cell::Cell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use prometheus::{IntCounter, IntCounterVec, Opts};
use tracing::{error, info, warn};

use super::{Backend, ClientInfo, Health, Rotation};
use crate::config::BalancerConfig;
use engine::Engine;

/// At most one warning per reason in this interval; the next one says how many were not logged.
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// Why the built-in policy served a connection instead of the script (the metric's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReason {
    /// The script could not be read, compiled or run at load (or reload).
    Load,
    /// A Lua error in `connect_server()` or `disconnect_client()`.
    Runtime,
    /// The call ran past `balancer.script_budget`.
    Budget,
    /// `backend_ndx` is not an index of `proxy.global.backends`.
    OutOfRange,
    /// `backend_ndx` names a backend that is out of rotation.
    BackendDown,
    /// A MySQL Proxy return value with no meaning here (`proxy.PROXY_SEND_RESULT`).
    Unsupported,
}

impl ErrorReason {
    pub const ALL: [ErrorReason; 6] = [
        Self::Load,
        Self::Runtime,
        Self::Budget,
        Self::OutOfRange,
        Self::BackendDown,
        Self::Unsupported,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::Runtime => "runtime",
            Self::Budget => "budget",
            Self::OutOfRange => "out_of_range",
            Self::BackendDown => "backend_down",
            Self::Unsupported => "unsupported",
        }
    }
}

/// Loading a script failed; the previous script (or the built-in policy) keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read Lua script {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("Lua script {}: {error}", path.display())]
    Lua { path: PathBuf, error: mlua::Error },
    #[error("Lua script {}: top-level code still running after {}", path.display(), humantime::format_duration(*budget))]
    Budget { path: PathBuf, budget: Duration },
}

/// `mysql_lb_script_errors_total{reason}` plus the rate limit of the matching warnings. Clones
/// share the counters.
#[derive(Clone)]
pub struct ScriptErrors {
    vec: IntCounterVec,
    by_reason: [IntCounter; ErrorReason::ALL.len()],
    limiter: Arc<WarnLimiter>,
}

impl fmt::Debug for ScriptErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptErrors").finish_non_exhaustive()
    }
}

impl Default for ScriptErrors {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptErrors {
    pub fn new() -> Self {
        // Fixed name and labels: creation cannot fail at run time.
        let vec = IntCounterVec::new(
            Opts::new(
                "script_errors_total",
                "Connections the Lua script failed to place (the built-in policy chose), and failed script loads, by reason.",
            )
            .namespace("mysql_lb"),
            &["reason"],
        )
        .expect("valid metric");
        let by_reason = ErrorReason::ALL.map(|r| vec.with_label_values(&[r.as_str()]));
        Self {
            vec,
            by_reason,
            limiter: Arc::new(WarnLimiter::new()),
        }
    }

    /// The counter vector, for registering in the metrics registry.
    pub fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(self.vec.clone())
    }

    pub fn get(&self, reason: ErrorReason) -> u64 {
        self.by_reason[reason as usize].get()
    }

    /// Counts a failed call and warns, unless this reason warned less than [`WARN_INTERVAL`] ago.
    fn record(&self, reason: ErrorReason, path: &Path, message: &str) {
        self.by_reason[reason as usize].inc();
        if let Some(suppressed) = self.limiter.allow(reason) {
            warn!(
                script = %path.display(),
                reason = reason.as_str(),
                suppressed,
                "Lua script failed, the built-in policy chose the backend: {message}"
            );
        }
    }
}

/// One slot per reason: when it last warned, and how many warnings were skipped since.
struct WarnLimiter {
    epoch: Instant,
    last: [AtomicU64; ErrorReason::ALL.len()],
    suppressed: [AtomicU64; ErrorReason::ALL.len()],
}

impl WarnLimiter {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last: Default::default(),
            suppressed: Default::default(),
        }
    }

    /// `Some(skipped since the last warning)` when this one may be logged.
    fn allow(&self, reason: ErrorReason) -> Option<u64> {
        let i = reason as usize;
        // +1 so that 0 means "never warned".
        let now = u64::try_from(self.epoch.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.last[i].load(Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= WARN_INTERVAL.as_millis() as u64;
        if due
            && self.last[i]
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            return Some(self.suppressed[i].swap(0, Relaxed));
        }
        self.suppressed[i].fetch_add(1, Relaxed);
        None
    }
}

/// The configured script, loaded into one Lua state per slot.
pub struct ScriptHost {
    path: PathBuf,
    budget: Duration,
    allow_unsafe: bool,
    backends: Vec<Arc<Backend>>,
    rotation: Rotation,
    slots: Box<[Mutex<Option<Engine>>]>,
    /// False until a load succeeds: connects then skip the slots entirely.
    loaded: AtomicBool,
    /// The loaded script defines `disconnect_client()`.
    has_disconnect: AtomicBool,
    errors: ScriptErrors,
}

impl fmt::Debug for ScriptHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptHost")
            .field("path", &self.path)
            .field("budget", &self.budget)
            .field("states", &self.slots.len())
            .field("loaded", &self.loaded)
            .finish_non_exhaustive()
    }
}

impl ScriptHost {
    /// Loads `path` into one state per available CPU. A failure is logged and counted, and the
    /// host then answers "no decision" until [`reload`](Self::reload) succeeds.
    pub(crate) fn new(
        path: PathBuf,
        config: &BalancerConfig,
        backends: Vec<Arc<Backend>>,
        rotation: Rotation,
        errors: ScriptErrors,
    ) -> Self {
        let states = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 64));
        let host = Self {
            path,
            budget: config.script_budget,
            allow_unsafe: config.script_allow_unsafe,
            backends,
            rotation,
            slots: (0..states).map(|_| Mutex::new(None)).collect(),
            loaded: AtomicBool::new(false),
            has_disconnect: AtomicBool::new(false),
            errors,
        };
        match host.install() {
            Ok(()) => info!(
                script = %host.path.display(),
                states,
                disconnect_client = host.wants_disconnect(),
                "Lua connect hook loaded"
            ),
            Err(e) => {
                host.errors.by_reason[ErrorReason::Load as usize].inc();
                error!(
                    "{e}; the built-in policy chooses backends until a reload (SIGHUP) succeeds"
                );
            }
        }
        host
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of Lua states (one per available CPU).
    pub fn states(&self) -> usize {
        self.slots.len()
    }

    /// Re-reads and loads the script into fresh states, then swaps them in. On failure the
    /// running script stays; the error is logged, counted and returned.
    pub fn reload(&self) -> Result<(), ScriptError> {
        match self.install() {
            Ok(()) => {
                info!(script = %self.path.display(), "Lua script reloaded");
                Ok(())
            }
            Err(e) => {
                self.errors.by_reason[ErrorReason::Load as usize].inc();
                error!("{e}; keeping the script that was running");
                Err(e)
            }
        }
    }

    fn install(&self) -> Result<(), ScriptError> {
        let source = std::fs::read(&self.path).map_err(|error| ScriptError::Read {
            path: self.path.clone(),
            error,
        })?;
        let mut fresh = Vec::with_capacity(self.slots.len());
        for _ in 0..self.slots.len() {
            fresh.push(Engine::load(
                &source,
                &self.path,
                &self.backends,
                self.allow_unsafe,
                self.budget,
            )?);
        }
        let has_disconnect = fresh.first().is_some_and(|e| e.has_disconnect);
        for (slot, engine) in self.slots.iter().zip(fresh) {
            let old = slot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .replace(engine);
            drop(old);
        }
        self.has_disconnect.store(has_disconnect, Relaxed);
        self.loaded.store(true, Relaxed);
        Ok(())
    }

    /// True when the loaded script defines `disconnect_client()`.
    pub fn wants_disconnect(&self) -> bool {
        self.has_disconnect.load(Relaxed)
    }

    /// Runs `connect_server()` for `client`: `Some(index)` of the backend it chose, or None for
    /// the built-in policy (no decision, or a failure that was counted).
    pub fn choose(&self, client: &ClientInfo<'_>, now: Instant) -> Option<usize> {
        if !self.loaded.load(Relaxed) {
            return None;
        }
        let view = |b: &Backend| (b.active(), self.rotation.health(b, now));
        let outcome = self.with_engine(|e| e.connect(&self.backends, &view, client))?;
        match outcome {
            Ok(Some(i)) if self.rotation.health(&self.backends[i], now) == Health::Down => {
                let b = &self.backends[i];
                self.errors.record(
                    ErrorReason::BackendDown,
                    &self.path,
                    &format!(
                        "connect_server chose backend_ndx {} ({}), which is down",
                        i + 1,
                        b.name
                    ),
                );
                None
            }
            Ok(choice) => choice,
            Err((reason, message)) => {
                self.errors.record(reason, &self.path, &message);
                None
            }
        }
    }

    /// Runs `disconnect_client()` for a client known by its address only (`client.username`,
    /// `default_db` and `proxy.connection.pool` are nil), which used backend `index`.
    pub fn disconnect(&self, addr: &str, index: Option<usize>, now: Instant) {
        self.disconnect_client(&ClientInfo::at(addr), index, now);
    }

    /// Runs `disconnect_client()` for `client`, which used backend `index` (None: no backend).
    pub fn disconnect_client(&self, client: &ClientInfo<'_>, index: Option<usize>, now: Instant) {
        if !self.loaded.load(Relaxed) || !self.wants_disconnect() {
            return;
        }
        let view = |b: &Backend| (b.active(), self.rotation.health(b, now));
        let outcome = self.with_engine(|e| e.disconnect(&self.backends, &view, client, index));
        if let Some(Err((reason, message))) = outcome {
            self.errors.record(reason, &self.path, &message);
        }
    }

    fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> Option<R> {
        let mut slot = self.lock_slot();
        slot.as_mut().map(f)
    }

    /// This thread's home slot if free, else any free one, else wait for the home slot.
    fn lock_slot(&self) -> MutexGuard<'_, Option<Engine>> {
        static NEXT_HOME: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static HOME: Cell<Option<usize>> = const { Cell::new(None) };
        }
        let home = HOME.with(|h| {
            h.get().unwrap_or_else(|| {
                let n = NEXT_HOME.fetch_add(1, Relaxed);
                h.set(Some(n));
                n
            })
        });
        let n = self.slots.len();
        for k in 0..n {
            match self.slots[(home + k) % n].try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        self.slots[home % n]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Loads the configured script once into a throwaway state, as `--check-config` should: a
/// missing file, a syntax error or a failing top-level chunk is reported. Without a script, Ok.
pub fn check(config: &crate::config::Config) -> Result<(), ScriptError> {
    let Some(path) = &config.balancer.script else {
        return Ok(());
    };
    let source = std::fs::read(path).map_err(|error| ScriptError::Read {
        path: path.clone(),
        error,
    })?;
    let set = super::BackendSet::new(
        &config.backends,
        config.down_cooloff,
        false,
        &crate::metrics::Metrics::new(),
    );
    Engine::load(
        &source,
        path,
        set.backends(),
        config.balancer.script_allow_unsafe,
        config.balancer.script_budget,
    )
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::BackendSet;
    use crate::config::{BackendAddr, BackendConfig, BackendKind};
    use crate::metrics::Metrics;
    use mlua::Table;
    use std::io::Write;

    fn backends(kinds: &[BackendKind]) -> Vec<BackendConfig> {
        kinds
            .iter()
            .enumerate()
            .map(|(i, &kind)| BackendConfig {
                name: format!("b{}", i + 1),
                address: BackendAddr::Tcp {
                    host: "127.0.0.1".into(),
                    port: 3306 + i as u16,
                },
                weight: 1,
                kind,
                tls: Default::default(),
                compression: false,
                pool: "default".into(),
            })
            .collect()
    }

    fn script(source: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
        f.write_all(source.as_bytes()).unwrap();
        f
    }

    fn set_with(
        source: &str,
        kinds: &[BackendKind],
        unsafe_libs: bool,
    ) -> (BackendSet, tempfile::NamedTempFile) {
        let f = script(source);
        let config = BalancerConfig {
            script: Some(f.path().to_owned()),
            script_budget: Duration::from_millis(10),
            script_allow_unsafe: unsafe_libs,
            ..BalancerConfig::default()
        };
        let set = BackendSet::new(
            &backends(kinds),
            Duration::from_secs(5),
            false,
            &Metrics::new(),
        )
        .with_balancer(&config);
        (set, f)
    }

    fn set(source: &str) -> (BackendSet, tempfile::NamedTempFile) {
        set_with(
            source,
            &[BackendKind::Rw, BackendKind::Rw, BackendKind::Ro],
            false,
        )
    }

    fn choose(set: &BackendSet, client: &str) -> Option<usize> {
        set.script()
            .unwrap()
            .choose(&ClientInfo::at(client), Instant::now())
    }

    #[test]
    fn connect_server_sees_the_backends_and_the_client() {
        let (s, _f) = set(r#"
            function connect_server()
                local b = proxy.global.backends
                assert(#b == 3)
                assert(b[1].dst.name == "127.0.0.1:3306" and b[1].dst.address == "127.0.0.1")
                assert(b[2].dst.port == 3307 and b[2].name == "b2" and b[2].weight == 1)
                assert(b[1].type == proxy.BACKEND_TYPE_RW and b[3].type == proxy.BACKEND_TYPE_RO)
                assert(b[1].state == proxy.BACKEND_STATE_UNKNOWN)
                assert(b[1].connected_clients == 0)
                local src = proxy.connection.client.src
                assert(src.name == "10.1.2.3:5000" and src.address == "10.1.2.3" and src.port == 5000)
                assert(proxy.connection.backend_ndx == 0)
                proxy.connection.backend_ndx = 2
            end"#);
        assert_eq!(choose(&s, "10.1.2.3:5000"), Some(1));
        for r in ErrorReason::ALL {
            assert_eq!(s.script_errors(r), 0, "{r:?}");
        }
    }

    /// A deferred-mode client: logs in as `user`, names `db`, routed to `pool`.
    fn known<'a>(user: &'a str, db: Option<&'a str>, pool: &'a str) -> ClientInfo<'a> {
        ClientInfo {
            addr: "10.9.8.7:4000",
            user: Some(user),
            default_db: db,
            pool: Some(pool),
        }
    }

    fn choose_for(set: &BackendSet, client: &ClientInfo<'_>) -> Option<usize> {
        set.script().unwrap().choose(client, Instant::now())
    }

    fn no_script_errors(set: &BackendSet) {
        for r in ErrorReason::ALL {
            assert_eq!(set.script_errors(r), 0, "{r:?}");
        }
    }

    #[test]
    fn connect_server_chooses_by_username_default_db_and_pool() {
        let (s, _f) = set(r#"
            function connect_server()
                local c = proxy.connection.client
                if c.username == "reporting" and c.default_db == "analytics"
                   and proxy.connection.pool == "reports" then
                    proxy.connection.backend_ndx = 3
                elseif c.username == "etl" and c.default_db == nil then
                    proxy.connection.backend_ndx = 2
                elseif proxy.connection.pool == "default" then
                    proxy.connection.backend_ndx = 1
                end
            end"#);
        let reporting = known("reporting", Some("analytics"), "reports");
        assert_eq!(choose_for(&s, &reporting), Some(2));
        assert_eq!(choose_for(&s, &known("etl", None, "reports")), Some(1));
        // "" is no database: nil, like a client that named none.
        assert_eq!(choose_for(&s, &known("etl", Some(""), "reports")), Some(1));
        assert_eq!(choose_for(&s, &known("etl", Some("x"), "default")), Some(0));
        assert_eq!(choose_for(&s, &known("other", Some("x"), "reports")), None);
        // Names are passed as they are, not as globs or lowercased.
        let cased = known("Reporting", Some("analytics"), "reports");
        assert_eq!(choose_for(&s, &cased), None);
        no_script_errors(&s);
    }

    #[test]
    fn many_distinct_users_each_arrive_as_themselves() {
        let (s, _f) = set(r#"
            function connect_server()
                local c = proxy.connection
                local n = tonumber(c.client.username:match("^user(%d+)$"))
                if c.client.default_db == "db" .. n and c.pool == "pool" .. n % 2 then
                    proxy.connection.backend_ndx = n % 3 + 1
                end
            end"#);
        for round in 0..2 {
            for n in 0..50 {
                let (user, db, pool) = (
                    format!("user{n}"),
                    format!("db{n}"),
                    format!("pool{}", n % 2),
                );
                let client = known(&user, Some(&db), &pool);
                assert_eq!(
                    choose_for(&s, &client),
                    Some(n % 3),
                    "{user}, round {round}"
                );
            }
        }
        no_script_errors(&s);
    }

    /// Chooses 1 when username, default_db and pool are all nil, else 2.
    const ALL_NIL: &str = r#"
        local function unknown()
            local c = proxy.connection
            return c.client.username == nil and c.client.default_db == nil and c.pool == nil
        end
        function connect_server()
            proxy.connection.backend_ndx = unknown() and 1 or 2
        end"#;

    #[test]
    fn immediate_mode_gives_nil_username_default_db_and_pool() {
        let (s, _f) = set(ALL_NIL);
        assert_eq!(choose(&s, "10.1.2.3:5000"), Some(0));
        assert_eq!(choose(&s, "unix:/run/lb.sock"), Some(0));
        assert_eq!(
            choose_for(&s, &known("u", None, "p")),
            Some(1),
            "the probe can fail"
        );
        no_script_errors(&s);
    }

    #[test]
    fn a_previous_clients_identity_never_leaks_into_the_next_call() {
        let (s, _f) = set(r#"
            calls = 0
            function connect_server()
                calls = calls + 1
                local c = proxy.connection
                local unknown = c.client.username == nil and c.client.default_db == nil
                    and c.pool == nil
                c.backend_ndx = unknown and 1 or 2
                if c.client.src.name == nil then c.backend_ndx = 3 end
                -- Replacement tables holding this client's values must not come back.
                c.client = { username = c.client.username, default_db = "kept", src = {} }
                proxy.connection = { client = c.client, pool = c.pool or "kept" }
            end"#);
        for _ in 0..3 {
            assert_eq!(choose_for(&s, &known("alice", Some("shop"), "p")), Some(1));
            assert_eq!(choose(&s, "1.1.1.1:1"), Some(0), "alice's identity leaked");
        }
        // One state (this thread's home slot) saw all six calls, so the leak was possible.
        let host = s.script().unwrap();
        let calls: Vec<i64> = host
            .slots
            .iter()
            .map(|slot| {
                let guard = slot.lock().unwrap();
                guard.as_ref().unwrap().lua.globals().get("calls").unwrap()
            })
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(calls, [6]);
        no_script_errors(&s);
    }

    #[test]
    fn non_string_values_assigned_to_the_identity_fields_harm_nothing() {
        let (s, _f) = set(r#"
            local n = 0
            function connect_server()
                n = n + 1
                local c = proxy.connection
                if c.client.username ~= "bob" or c.client.default_db ~= "db" or c.pool ~= "p" then
                    return
                end
                if n == 1 then
                    c.client.username, c.client.default_db = 42, { "table" }
                    c.pool = function() end
                elseif n == 2 then
                    c.client.username, c.client.default_db, c.pool = true, 1.5, coroutine.create(print)
                elseif n == 3 then
                    c.client = 7
                end
                proxy.connection.backend_ndx = 2
            end
            function disconnect_client()
                proxy.connection.client.username = {}
                proxy.connection.pool = 0
            end"#);
        let bob = known("bob", Some("db"), "p");
        for _ in 0..4 {
            assert_eq!(choose_for(&s, &bob), Some(1));
            s.script()
                .unwrap()
                .disconnect_client(&bob, Some(1), Instant::now());
        }
        no_script_errors(&s);
    }

    #[test]
    fn disconnect_client_sees_the_identity_it_is_given() {
        let (s, _f) = set(r#"
            seen = {}
            function disconnect_client()
                local c = proxy.connection
                seen[#seen + 1] = table.concat({
                    tostring(c.client.username), tostring(c.client.default_db), tostring(c.pool),
                    c.backend_ndx }, "/")
            end"#);
        let host = s.script().unwrap();
        let now = Instant::now();
        host.disconnect_client(&known("carol", Some("crm"), "sales"), Some(2), now);
        host.disconnect_client(&known("dave", None, "default"), None, now);
        host.disconnect("1.1.1.1:1", Some(0), now);
        let seen: Vec<String> = host
            .slots
            .iter()
            .flat_map(|slot| {
                let guard = slot.lock().unwrap();
                let t: Table = guard.as_ref().unwrap().lua.globals().get("seen").unwrap();
                t.sequence_values::<String>()
                    .map(Result::unwrap)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            seen,
            ["carol/crm/sales/3", "dave/nil/default/0", "nil/nil/nil/1"]
        );
        no_script_errors(&s);
    }

    #[test]
    fn connect_server_sees_the_deferred_login_and_nil_before_it() {
        let (s, _f) = set(r#"
            function connect_server()
                local c = proxy.connection
                if c.client.username == nil then
                    assert(c.client.default_db == nil and c.pool == nil)
                    return
                end
                assert(c.client.username == "carol" and c.client.default_db == "sales")
                assert(c.pool == "reporting")
                c.backend_ndx = 3
            end"#);
        let deferred = ClientInfo {
            addr: "10.1.2.3:5000",
            user: Some("carol"),
            default_db: Some("sales"),
            pool: Some("reporting"),
        };
        let script = s.script().unwrap();
        assert_eq!(script.choose(&deferred, Instant::now()), Some(2));
        // The next call's values replace the last one's: an immediate client sees nil.
        assert_eq!(choose(&s, "10.1.2.3:5001"), None);
        for r in ErrorReason::ALL {
            assert_eq!(s.script_errors(r), 0, "{r:?}");
        }
    }

    #[test]
    fn state_and_connected_clients_follow_the_set() {
        let (s, _f) = set(r#"
            function connect_server()
                local b = proxy.global.backends
                if b[1].state == proxy.BACKEND_STATE_UP and b[2].state == proxy.BACKEND_STATE_DOWN
                   and b[1].connected_clients == 1 then
                    proxy.connection.backend_ndx = 1
                end
            end"#);
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        let b = s.backends();
        s.mark_up(&b[0]);
        s.mark_down(&b[1], Instant::now());
        let _lease = s.lease(&b[0]);
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(0));
    }

    #[test]
    fn returning_nothing_or_zero_leaves_it_to_the_policy() {
        let (s, _f) = set("function connect_server() return end");
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 0 end");
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        let (s, _f) = set("x = 1 -- no connect_server at all");
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert_eq!(s.script_errors(ErrorReason::Load), 0);
    }

    #[test]
    fn float_indexes_that_are_integers_are_accepted() {
        let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 6 / 2 end");
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(2));
    }

    #[test]
    fn bad_choices_fall_back_and_are_counted_by_reason() {
        let cases = [
            (
                "function connect_server() error('boom') end",
                ErrorReason::Runtime,
            ),
            (
                "function connect_server() local t = nil; return t.x end",
                ErrorReason::Runtime,
            ),
            (
                "function connect_server() proxy.connection.backend_ndx = 4 end",
                ErrorReason::OutOfRange,
            ),
            (
                "function connect_server() proxy.connection.backend_ndx = -1 end",
                ErrorReason::OutOfRange,
            ),
            (
                "function connect_server() proxy.connection.backend_ndx = 1.5 end",
                ErrorReason::OutOfRange,
            ),
            (
                "function connect_server() proxy.connection.backend_ndx = 'two' end",
                ErrorReason::OutOfRange,
            ),
            (
                "function connect_server() while true do end end",
                ErrorReason::Budget,
            ),
            (
                "function connect_server() return proxy.PROXY_SEND_RESULT end",
                ErrorReason::Unsupported,
            ),
            (
                "function connect_server() coroutine.yield() end",
                ErrorReason::Runtime,
            ),
        ];
        for (source, reason) in cases {
            let (s, _f) = set(source);
            assert_eq!(choose(&s, "1.1.1.1:1"), None, "{source}");
            assert_eq!(s.script_errors(reason), 1, "{source}");
            // The state stays usable after the failure.
            assert_eq!(choose(&s, "1.1.1.1:1"), None, "{source}");
            assert_eq!(s.script_errors(reason), 2, "{source}");
        }
    }

    #[test]
    fn a_down_backend_chosen_falls_back_and_is_counted() {
        let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 1 end");
        s.mark_down(&s.backends()[0], Instant::now());
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert_eq!(s.script_errors(ErrorReason::BackendDown), 1);
    }

    /// The script runs past its budget: the choice falls back at once and counts as a budget error.
    fn budget_stops(script: &str) {
        let (s, _f) = set(script);
        let started = Instant::now();
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(s.script_errors(ErrorReason::Budget), 1);
    }

    #[test]
    fn the_budget_cannot_be_caught_with_pcall() {
        budget_stops(
            r#"
            function connect_server()
                while true do pcall(function() while true do end end) end
            end"#,
        );
    }

    #[test]
    fn the_budget_holds_inside_callbacks_that_cannot_yield() {
        budget_stops(
            r#"
            function connect_server()
                table.sort({3, 2, 1}, function(a, b) while true do end end)
            end"#,
        );
    }

    #[test]
    fn pcall_inside_a_callback_cannot_swallow_the_budget() {
        budget_stops(
            r#"
            function connect_server()
                table.sort({3, 2, 1}, function(a, b)
                    while true do pcall(function() while true do end end) end
                end)
            end"#,
        );
    }

    #[test]
    fn pcall_and_xpcall_still_catch_ordinary_errors() {
        let (s, _f) = set(r#"
            function connect_server()
                local ok, e = pcall(error, "x", 0)
                local ok2, e2 = xpcall(function() error("y", 0) end, function(m) return m .. "!" end)
                if not ok and e == "x" and not ok2 and e2 == "y!" and pcall(math.max, 1) then
                    proxy.connection.backend_ndx = 2
                end
            end"#);
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(1));
    }

    #[test]
    fn a_script_that_fails_to_load_leaves_the_policy_and_is_counted() {
        for source in [
            "function connect_server( end",
            "error('top-level failure')",
            "while true do end",
        ] {
            let (s, _f) = set(source);
            assert_eq!(s.script_errors(ErrorReason::Load), 1, "{source}");
            assert_eq!(choose(&s, "1.1.1.1:1"), None);
            let c = s.candidates_for(Instant::now(), &ClientInfo::at("1.1.1.1:1"), None);
            assert_eq!(c.len(), 3);
        }
    }

    #[test]
    fn reload_swaps_the_script_and_a_broken_one_keeps_the_old() {
        let (s, f) = set("function connect_server() proxy.connection.backend_ndx = 1 end");
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(0));
        std::fs::write(
            f.path(),
            "function connect_server() proxy.connection.backend_ndx = 3 end",
        )
        .unwrap();
        s.reload_script().unwrap();
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(2));
        std::fs::write(f.path(), "function connect_server( syntax error").unwrap();
        let e = s.reload_script().unwrap_err().to_string();
        assert!(e.contains(&f.path().display().to_string()), "{e}");
        assert_eq!(s.script_errors(ErrorReason::Load), 1);
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(2), "old script still runs");
    }

    #[test]
    fn the_script_choice_goes_first_and_the_policy_order_follows() {
        let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 3 end");
        let client = ClientInfo::at("1.1.1.1:1");
        for _ in 0..4 {
            let order: Vec<_> = s
                .candidates_for(Instant::now(), &client, None)
                .iter()
                .map(|b| b.index())
                .collect();
            assert_eq!(order.len(), 3);
            assert_eq!(order[0], 2, "{order:?}");
            let mut rest = order[1..].to_vec();
            rest.sort_unstable();
            assert_eq!(rest, [0, 1], "the fallbacks: {order:?}");
        }
    }

    #[test]
    fn check_reports_what_would_fail_to_load() {
        let mut config = crate::config::Config {
            backends: backends(&[BackendKind::Rw]),
            ..crate::config::Config::default()
        };
        check(&config).unwrap();
        let good = script("function connect_server() end");
        config.balancer.script = Some(good.path().to_owned());
        check(&config).unwrap();
        let bad = script("function connect_server( end");
        config.balancer.script = Some(bad.path().to_owned());
        let e = check(&config).unwrap_err().to_string();
        assert!(
            e.contains(&bad.path().display().to_string()) && e.contains("syntax error"),
            "{e}"
        );
        config.balancer.script = Some("/nonexistent/x.lua".into());
        assert!(check(&config)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }

    #[test]
    fn unsafe_libraries_are_absent_unless_allowed() {
        let probe = r#"
            function connect_server()
                if os == nil and io == nil and load == nil and loadfile == nil and dofile == nil
                   and require == nil and debug == nil then
                    proxy.connection.backend_ndx = 1
                else
                    proxy.connection.backend_ndx = 2
                end
            end"#;
        let kinds = [BackendKind::Rw, BackendKind::Rw];
        let (s, _f) = set_with(probe, &kinds, false);
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(0));
        let (s, _f) = set_with(probe, &kinds, true);
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(1));
        let (s, _f) = set_with(
            "function connect_server() proxy.connection.backend_ndx = os.time() > 0 and 2 or 1 end",
            &kinds,
            true,
        );
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(1));
    }

    #[test]
    fn memory_is_capped() {
        let (s, _f) = set("function connect_server() local s = string.rep('x', 1 << 30) end");
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert_eq!(s.script_errors(ErrorReason::Runtime), 1);
    }

    #[test]
    fn disconnect_client_hears_the_backend_and_the_client() {
        let (s, _f) = set(r#"
            seen = {}
            function connect_server() proxy.connection.backend_ndx = 2 end
            function disconnect_client()
                seen[#seen + 1] = proxy.connection.client.src.name .. "@" .. proxy.connection.backend_ndx
            end"#);
        let host = s.script().unwrap();
        assert!(host.wants_disconnect());
        let client = ClientInfo::at("[::1]:7000");
        let first = s.candidates_for(Instant::now(), &client, None).remove(0);
        assert_eq!(first.name, "b2");
        drop(s.lease_for(&first, &client));
        s.client_refused(&ClientInfo::at("unix:/tmp/x.sock"));
        // Every state saw its share; gather from all of them.
        let mut seen = Vec::new();
        for slot in host.slots.iter() {
            let guard = slot.lock().unwrap();
            let t: Table = guard.as_ref().unwrap().lua.globals().get("seen").unwrap();
            seen.extend(t.sequence_values::<String>().map(Result::unwrap));
        }
        seen.sort();
        assert_eq!(seen, ["[::1]:7000@2", "unix:/tmp/x.sock@0"]);
    }

    #[test]
    fn proxy_global_persists_between_calls_of_a_state() {
        let (s, _f) = set(r#"
            function connect_server()
                proxy.global.n = (proxy.global.n or 0) + 1
                if proxy.global.n >= 2 then proxy.connection.backend_ndx = 3 end
            end"#);
        let host = s.script().unwrap();
        // Same thread, same home slot.
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(2));
        assert!(host.states() >= 1);
    }

    #[test]
    fn warnings_are_rate_limited_per_reason() {
        let l = WarnLimiter::new();
        assert_eq!(l.allow(ErrorReason::Runtime), Some(0));
        assert_eq!(l.allow(ErrorReason::Runtime), None);
        assert_eq!(l.allow(ErrorReason::Runtime), None);
        assert_eq!(
            l.allow(ErrorReason::Budget),
            Some(0),
            "reasons are separate"
        );
        l.last[ErrorReason::Runtime as usize].store(1, Relaxed);
        let l = WarnLimiter {
            epoch: l.epoch - WARN_INTERVAL,
            ..l
        };
        assert_eq!(
            l.allow(ErrorReason::Runtime),
            Some(2),
            "says how many were skipped"
        );
    }

    #[test]
    fn metric_has_one_series_per_reason() {
        let e = ScriptErrors::new();
        e.record(ErrorReason::Budget, Path::new("x.lua"), "slow");
        let families = e.collector().collect();
        assert_eq!(families[0].name(), "mysql_lb_script_errors_total");
        assert_eq!(families[0].get_metric().len(), ErrorReason::ALL.len());
        assert_eq!(e.get(ErrorReason::Budget), 1);
    }
}
