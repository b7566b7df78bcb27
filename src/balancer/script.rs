//! The Lua connect hook: MySQL Proxy's `connect_server()` / `disconnect_client()` on Lua 5.4.
//!
//! People migrating from MySQL Proxy bring scripts that read `proxy.global.backends` and set
//! `proxy.connection.backend_ndx`; those run here unmodified. The shape follows from three needs:
//!
//! - **No global lock.** There is one Lua state per slot, as many slots as CPUs, each behind its
//!   own mutex. A thread takes its home slot, else any free one, so connects on different worker
//!   threads never wait for each other. The price: `proxy.global` is per state, not process-wide.
//! - **Cheap calls.** The `proxy` tables are built once per state; a call only writes the fields
//!   that change (each backend's `connected_clients` and `state`, the client's address).
//! - **A broken script never refuses a client.** Every call runs in a reused coroutine under an
//!   instruction-count hook that checks the clock: past the budget the hook yields the coroutine,
//!   which `pcall` cannot catch (where a yield is impossible, it raises an error one budget later).
//!   An error, a spent budget, an index out of range or a down backend leave the choice to the
//!   built-in policy; each such failure is counted by reason and logged, at most once per
//!   [`WARN_INTERVAL`] per reason.

use std::cell::Cell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use mlua::{
    Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Thread, ThreadStatus,
    Value, Variadic, VmState,
};
use prometheus::{IntCounter, IntCounterVec, Opts};
use tracing::{error, info, warn};

use super::{Backend, ClientInfo, Health, Rotation};
use crate::config::{BackendAddr, BackendKind, BalancerConfig};

/// `proxy.BACKEND_STATE_*` and `proxy.BACKEND_TYPE_*`, with MySQL Proxy's values.
const BACKEND_STATE_UNKNOWN: i64 = 0;
const BACKEND_STATE_UP: i64 = 1;
const BACKEND_STATE_DOWN: i64 = 2;
const BACKEND_TYPE_RW: i64 = 1;
const BACKEND_TYPE_RO: i64 = 2;
/// MySQL Proxy's hook return codes; only "no decision" is acted on at connect time.
const PROXY_SEND_QUERY: i64 = 1;
const PROXY_SEND_RESULT: i64 = 2;
const PROXY_SEND_INJECTION: i64 = 3;
const PROXY_IGNORE_RESULT: i64 = 4;

/// The script's top-level code (run at load) gets more time than a call.
const LOAD_BUDGET: Duration = Duration::from_secs(1);
/// VM instructions between two looks at the clock: a few microseconds of Lua, a few ns of check.
const HOOK_EVERY: u32 = 1000;
/// Per state; a runaway `string.rep` fails instead of eating the host's memory.
const MEMORY_LIMIT: usize = 64 << 20;
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
        let outcome = self.with_engine(|e| e.connect(&self.backends, &view, client.addr))?;
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

    /// Runs `disconnect_client()` for `client`, which used backend `index` (None: no backend).
    pub fn disconnect(&self, client: &str, index: Option<usize>, now: Instant) {
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

/// Calls `reload` (off the async workers: it compiles Lua) on every SIGHUP until `shutdown`.
/// `reload` logs and counts its own failures.
pub async fn reload_on_hangup<F>(reload: F, shutdown: tokio_util::sync::CancellationToken)
where
    F: Fn() -> Result<(), ScriptError> + Send + Sync + 'static,
{
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            warn!("cannot listen for SIGHUP ({e}); the Lua script will not be reloaded");
            return;
        }
    };
    let reload = Arc::new(reload);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = hangup.recv() => if got.is_none() { return },
        }
        info!("SIGHUP received: reloading the Lua script");
        let r = Arc::clone(&reload);
        match tokio::task::spawn_blocking(move || r()).await {
            Ok(Ok(())) => {}
            // Already logged and counted by the reload itself.
            Ok(Err(_)) => {}
            Err(e) => error!("Lua script reload task failed: {e}"),
        }
    }
}

/// The budget clock one state's hook reads: nanoseconds since `epoch`.
struct Clock {
    epoch: Instant,
    deadline: AtomicU64,
    timed_out: AtomicBool,
}

impl Clock {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn start(&self, budget: Duration) {
        let budget = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.timed_out.store(false, Relaxed);
        self.deadline
            .store(self.now().saturating_add(budget), Relaxed);
    }
}

/// Why a call failed, for the counter and the warning.
type Failure = (ErrorReason, String);

/// One Lua state with the script loaded and the `proxy` tables it reads.
struct Engine {
    lua: Lua,
    clock: Arc<Clock>,
    budget: Duration,
    /// Reused coroutine each call runs in, so the budget hook can yield it.
    runner: Thread,
    /// [`TRAMPOLINE`]: writes a call's context into the `proxy` tables and calls the hook, so a
    /// connect costs one call into Lua rather than one per field.
    trampoline: Function,
    /// Reused for the per-backend arguments of the trampoline.
    args: Vec<i64>,
    has_disconnect: bool,
}

/// Internal, compiled before the script runs so the script cannot change what it captures.
/// Arguments: the hook (1 = connect_server, 2 = disconnect_client), the client's name, address
/// and port, `backend_ndx`, then `connected_clients, state` for each backend in order. Returns
/// whether the hook is defined, its first result, and `backend_ndx` after it ran.
const TRAMPOLINE: &str = r##"
local G, tables, connection, src = ...
local rawget, select, type = rawget, select, type
local hooks = { "connect_server", "disconnect_client" }
return function(which, name, address, port, ndx, ...)
    for i = 1, select("#", ...), 2 do
        local b = tables[(i + 1) // 2]
        b.connected_clients, b.state = select(i, ...)
    end
    src.name, src.address, src.port = name, address, port
    connection.backend_ndx = ndx
    local hook = rawget(G, hooks[which])
    if type(hook) ~= "function" then
        return false
    end
    local returned = hook()
    return true, returned, connection.backend_ndx
end
"##;

/// The trampoline's hook selector.
#[derive(Debug, Clone, Copy)]
enum Hook {
    ConnectServer = 1,
    DisconnectClient = 2,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Self::ConnectServer => "connect_server",
            Self::DisconnectClient => "disconnect_client",
        }
    }
}

impl Engine {
    fn load(
        source: &[u8],
        path: &Path,
        backends: &[Arc<Backend>],
        allow_unsafe: bool,
        budget: Duration,
    ) -> Result<Engine, ScriptError> {
        let lua_err = |error| ScriptError::Lua {
            path: path.to_owned(),
            error,
        };
        let libs = if allow_unsafe {
            StdLib::ALL_SAFE
        } else {
            StdLib::COROUTINE | StdLib::TABLE | StdLib::STRING | StdLib::UTF8 | StdLib::MATH
        };
        let lua = Lua::new_with(libs, LuaOptions::default()).map_err(lua_err)?;
        let clock = Arc::new(Clock {
            epoch: Instant::now(),
            deadline: AtomicU64::new(u64::MAX),
            timed_out: AtomicBool::new(false),
        });
        let (mut engine, chunk) =
            Self::prepare(lua, source, path, backends, allow_unsafe, budget, &clock)
                .map_err(lua_err)?;
        match engine.run(chunk, (), LOAD_BUDGET) {
            Ok(_) => {}
            Err(RunError::Budget) => {
                return Err(ScriptError::Budget {
                    path: path.to_owned(),
                    budget: LOAD_BUDGET,
                })
            }
            Err(RunError::Lua(error)) => return Err(lua_err(error)),
            Err(RunError::Yielded) => {
                return Err(lua_err(mlua::Error::runtime(
                    "top-level code called coroutine.yield outside a coroutine of its own",
                )))
            }
        }
        engine.has_disconnect = matches!(
            engine.lua.globals().raw_get::<Value>("disconnect_client"),
            Ok(Value::Function(_))
        );
        if !matches!(
            engine.lua.globals().raw_get::<Value>("connect_server"),
            Ok(Value::Function(_))
        ) {
            info!(script = %path.display(), "the script defines no connect_server(): the built-in policy chooses every backend");
        }
        Ok(engine)
    }

    /// Builds the sandbox and the `proxy` tables, and compiles the chunk (syntax errors here).
    fn prepare(
        lua: Lua,
        source: &[u8],
        path: &Path,
        backends: &[Arc<Backend>],
        allow_unsafe: bool,
        budget: Duration,
        clock: &Arc<Clock>,
    ) -> mlua::Result<(Engine, Function)> {
        lua.set_memory_limit(MEMORY_LIMIT)?;
        let globals = lua.globals();
        if !allow_unsafe {
            for name in ["load", "loadfile", "dofile", "loadstring", "require"] {
                globals.raw_set(name, Value::Nil)?;
            }
        }
        let script_name = path.display().to_string();
        globals.raw_set(
            "print",
            lua.create_function(move |_, args: Variadic<Value>| {
                let line = args
                    .iter()
                    .map(|v| v.to_string().unwrap_or_else(|_| v.type_name().to_owned()))
                    .collect::<Vec<_>>()
                    .join("\t");
                info!(target: "mysql_lb::script", script = %script_name, "{line}");
                Ok(())
            })?,
        )?;

        let proxy = lua.create_table()?;
        for (name, value) in [
            ("BACKEND_STATE_UNKNOWN", BACKEND_STATE_UNKNOWN),
            ("BACKEND_STATE_UP", BACKEND_STATE_UP),
            ("BACKEND_STATE_DOWN", BACKEND_STATE_DOWN),
            ("BACKEND_TYPE_UNKNOWN", 0),
            ("BACKEND_TYPE_RW", BACKEND_TYPE_RW),
            ("BACKEND_TYPE_RO", BACKEND_TYPE_RO),
            ("PROXY_SEND_QUERY", PROXY_SEND_QUERY),
            ("PROXY_SEND_RESULT", PROXY_SEND_RESULT),
            ("PROXY_SEND_INJECTION", PROXY_SEND_INJECTION),
            ("PROXY_IGNORE_RESULT", PROXY_IGNORE_RESULT),
            ("MYSQLD_PACKET_OK", 0),
            ("MYSQLD_PACKET_RAW", 0xfa),
            ("MYSQLD_PACKET_ERR", 0xff),
        ] {
            proxy.raw_set(name, value)?;
        }
        // `list` is the script's to read (or even change); `tables` is the trampoline's own.
        let list = lua.create_table()?;
        let tables = lua.create_table()?;
        for b in backends {
            let t = backend_table(&lua, b)?;
            list.raw_push(&t)?;
            tables.raw_push(t)?;
        }
        let global = lua.create_table()?;
        global.raw_set("backends", list)?;
        global.raw_set("config", lua.create_table()?)?;
        proxy.raw_set("global", global)?;
        let src = lua.create_table()?;
        let client = lua.create_table()?;
        client.raw_set("src", &src)?;
        let connection = lua.create_table()?;
        connection.raw_set("client", client)?;
        connection.raw_set("backend_ndx", 0)?;
        proxy.raw_set("connection", &connection)?;
        globals.raw_set("proxy", proxy)?;
        let trampoline: Function = lua
            .load(TRAMPOLINE)
            .set_name("=mysql-lb")
            .call((&globals, tables, connection, src))?;

        let hook_clock = Arc::clone(clock);
        let grace =
            u64::try_from(budget.max(Duration::from_millis(1)).as_nanos()).unwrap_or(u64::MAX);
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                let now = hook_clock.now();
                let deadline = hook_clock.deadline.load(Relaxed);
                if now < deadline {
                    return Ok(VmState::Continue);
                }
                hook_clock.timed_out.store(true, Relaxed);
                if now >= deadline.saturating_add(grace) {
                    // Still running a budget later: the yield was impossible here (inside a
                    // metamethod or a C function's callback), so raise instead.
                    return Err(mlua::Error::runtime("script budget exceeded"));
                }
                Ok(VmState::Yield)
            },
        )?;
        let chunk = lua
            .load(source)
            .set_name(format!("@{}", path.display()))
            .into_function()?;
        let runner = lua.create_thread(chunk.clone())?;
        drop(globals);
        Ok((
            Engine {
                lua,
                clock: Arc::clone(clock),
                budget,
                runner,
                trampoline,
                args: Vec::with_capacity(2 * backends.len()),
                has_disconnect: false,
            },
            chunk,
        ))
    }

    /// Runs `connect_server()`: Ok(None) for no decision, Ok(Some(index)) for a valid index.
    fn connect(
        &mut self,
        backends: &[Arc<Backend>],
        view: &dyn Fn(&Backend) -> (usize, Health),
        client: &str,
    ) -> Result<Option<usize>, Failure> {
        let Some((returned, ndx)) = self.call(Hook::ConnectServer, backends, view, client, 0)?
        else {
            return Ok(None);
        };
        if matches!(returned, Value::Integer(PROXY_SEND_RESULT))
            || matches!(returned, Value::Number(n) if n == PROXY_SEND_RESULT as f64)
        {
            return Err((
                ErrorReason::Unsupported,
                "connect_server returned proxy.PROXY_SEND_RESULT, which mysql-lb does not support at connect time".to_owned(),
            ));
        }
        backend_index(&ndx, backends.len())
    }

    /// Runs `disconnect_client()` with `backend_ndx` naming the backend the client used.
    fn disconnect(
        &mut self,
        backends: &[Arc<Backend>],
        view: &dyn Fn(&Backend) -> (usize, Health),
        client: &str,
        index: Option<usize>,
    ) -> Result<(), Failure> {
        let ndx = index.map_or(0, |i| i as i64 + 1);
        self.call(Hook::DisconnectClient, backends, view, client, ndx)
            .map(drop)
    }

    /// Runs `hook` through the trampoline. None when the script does not define it, else its
    /// first result and `backend_ndx` afterwards.
    fn call(
        &mut self,
        hook: Hook,
        backends: &[Arc<Backend>],
        view: &dyn Fn(&Backend) -> (usize, Health),
        client: &str,
        backend_ndx: i64,
    ) -> Result<Option<(Value, Value)>, Failure> {
        let mut per_backend = std::mem::take(&mut self.args);
        per_backend.clear();
        for b in backends {
            let (active, health) = view(b);
            per_backend.push(i64::try_from(active).unwrap_or(i64::MAX));
            per_backend.push(match health {
                Health::Unknown => BACKEND_STATE_UNKNOWN,
                Health::Up => BACKEND_STATE_UP,
                Health::Down => BACKEND_STATE_DOWN,
            });
        }
        let (address, port) = split_client(client);
        let per_backend = Variadic::from(per_backend);
        let args = (hook as i64, client, address, port, backend_ndx, per_backend);
        let result = self.run(self.trampoline.clone(), args, self.budget);
        let name = hook.name();
        let mut values = match result {
            Ok(v) => v.into_iter(),
            Err(RunError::Budget) => {
                return Err((
                    ErrorReason::Budget,
                    format!(
                        "{name} still running after {}",
                        humantime::format_duration(self.budget)
                    ),
                ))
            }
            Err(RunError::Yielded) => {
                return Err((
                    ErrorReason::Runtime,
                    format!("{name} called coroutine.yield outside a coroutine of its own"),
                ))
            }
            Err(RunError::Lua(e)) => return Err((ErrorReason::Runtime, format!("{name}: {e}"))),
        };
        if !matches!(values.next(), Some(Value::Boolean(true))) {
            return Ok(None);
        }
        let returned = values.next().unwrap_or(Value::Nil);
        let ndx = values.next().unwrap_or(Value::Nil);
        Ok(Some((returned, ndx)))
    }

    /// Runs `f(args)` in the reused coroutine within `budget`; returns its results.
    fn run(
        &mut self,
        f: Function,
        args: impl mlua::IntoLuaMulti,
        budget: Duration,
    ) -> Result<MultiValue, RunError> {
        if self.runner.reset(f.clone()).is_err() {
            // A thread that ended in an error reports it again on reset; start a fresh one.
            self.runner = self.lua.create_thread(f).map_err(RunError::Lua)?;
        }
        self.clock.start(budget);
        let result = self.runner.resume::<MultiValue>(args);
        self.clock.deadline.store(u64::MAX, Relaxed);
        let timed_out = self.clock.timed_out.load(Relaxed);
        match result {
            Ok(_) if timed_out && self.runner.status() == ThreadStatus::Resumable => {
                Err(RunError::Budget)
            }
            Ok(_) if self.runner.status() == ThreadStatus::Resumable => Err(RunError::Yielded),
            Ok(v) => Ok(v),
            Err(_) if timed_out => Err(RunError::Budget),
            Err(e) => Err(RunError::Lua(e)),
        }
    }
}

enum RunError {
    Budget,
    Yielded,
    Lua(mlua::Error),
}

/// `proxy.global.backends[i]`: `dst.name`, `dst.address`, `dst.port`, `type`, plus mysql-lb's
/// `name` and `weight`; `connected_clients` and `state` are written per call.
fn backend_table(lua: &Lua, b: &Backend) -> mlua::Result<Table> {
    let dst = lua.create_table()?;
    dst.raw_set("name", b.address.to_string())?;
    match &b.address {
        BackendAddr::Tcp { host, port } => {
            dst.raw_set("address", host.as_str())?;
            dst.raw_set("port", i64::from(*port))?;
        }
        BackendAddr::Unix(path) => {
            dst.raw_set("address", path.display().to_string())?;
            dst.raw_set("port", 0)?;
        }
    }
    let t = lua.create_table()?;
    t.raw_set("dst", dst)?;
    t.raw_set("name", b.name.as_str())?;
    t.raw_set("weight", i64::from(b.weight))?;
    t.raw_set(
        "type",
        match b.kind {
            BackendKind::Rw => BACKEND_TYPE_RW,
            BackendKind::Ro => BACKEND_TYPE_RO,
        },
    )?;
    t.raw_set("connected_clients", 0)?;
    t.raw_set("state", BACKEND_STATE_UNKNOWN)?;
    Ok(t)
}

/// `backend_ndx` after `connect_server()`: nil or 0 is no decision, 1..=count a choice.
fn backend_index(ndx: &Value, count: usize) -> Result<Option<usize>, Failure> {
    let n = match *ndx {
        Value::Nil => return Ok(None),
        Value::Integer(n) => Some(n),
        Value::Number(x) if x.fract() == 0.0 && x.abs() < 1e15 => Some(x as i64),
        _ => None,
    };
    match n {
        Some(0) => Ok(None),
        Some(n) if n >= 1 && (n as u64) <= count as u64 => Ok(Some(n as usize - 1)),
        _ => Err((
            ErrorReason::OutOfRange,
            format!(
                "proxy.connection.backend_ndx = {} is not between 1 and #proxy.global.backends ({count})",
                ndx.to_string().unwrap_or_else(|_| ndx.type_name().to_owned())
            ),
        )),
    }
}

/// ("ip", port) from "ip:port" / "[v6]:port"; ("PATH", 0) from "unix:PATH".
fn split_client(addr: &str) -> (&str, i64) {
    if let Some(path) = addr.strip_prefix("unix:") {
        return (path, 0);
    }
    match addr.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u16>() {
            Ok(port) => (
                host.strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host),
                i64::from(port),
            ),
            Err(_) => (addr, 0),
        },
        None => (addr, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::BackendSet;
    use crate::config::BackendConfig;
    use crate::metrics::Metrics;
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
            .choose(&ClientInfo { addr: client }, Instant::now())
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

    #[test]
    fn the_budget_cannot_be_caught_with_pcall() {
        let (s, _f) = set(r#"
            function connect_server()
                while true do pcall(function() while true do end end) end
            end"#);
        let started = Instant::now();
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(s.script_errors(ErrorReason::Budget), 1);
    }

    #[test]
    fn the_budget_holds_inside_callbacks_that_cannot_yield() {
        let (s, _f) = set(r#"
            function connect_server()
                table.sort({3, 2, 1}, function(a, b) while true do end end)
            end"#);
        let started = Instant::now();
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(s.script_errors(ErrorReason::Budget), 1);
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
            let c = s.candidates_for(Instant::now(), &ClientInfo { addr: "1.1.1.1:1" });
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
        let client = ClientInfo { addr: "[::1]:7000" };
        let first = s.candidates_for(Instant::now(), &client).remove(0);
        assert_eq!(first.name, "b2");
        drop(s.lease_for(&first, &client));
        s.client_refused(&ClientInfo {
            addr: "unix:/tmp/x.sock",
        });
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
    fn client_addresses_split_into_address_and_port() {
        assert_eq!(split_client("10.0.0.1:3306"), ("10.0.0.1", 3306));
        assert_eq!(split_client("[::1]:5000"), ("::1", 5000));
        assert_eq!(split_client("unix:/run/lb.sock"), ("/run/lb.sock", 0));
        assert_eq!(split_client("weird"), ("weird", 0));
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
#[cfg(test)]
mod probe {
    use super::*;
    use crate::balancer::BackendSet;
    use crate::config::BackendConfig;
    use crate::metrics::Metrics;
    #[test]
    #[ignore]
    fn probe_cost() {
        let configs: Vec<_> = (0..2)
            .map(|i| BackendConfig {
                name: format!("b{i}"),
                address: BackendAddr::Tcp {
                    host: "127.0.0.1".into(),
                    port: 3306 + i,
                },
                weight: 1,
                kind: BackendKind::Rw,
            })
            .collect();
        for src in [
            "function connect_server() end",
            "x=1",
            "function connect_server() proxy.connection.backend_ndx = 1 end",
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/config/scripts/least-connected.lua"
            ))
            .unwrap(),
        ] {
            let f = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(f.path(), src).unwrap();
            let set = BackendSet::new(&configs, Duration::from_secs(5), false, &Metrics::new())
                .with_balancer(&BalancerConfig {
                    script: Some(f.path().into()),
                    ..BalancerConfig::default()
                });
            let host = set.script().unwrap();
            let client = ClientInfo {
                addr: "10.0.0.1:4000",
            };
            let n = 200_000;
            let t = Instant::now();
            for _ in 0..n {
                std::hint::black_box(host.choose(&client, Instant::now()));
            }
            println!(
                "{:>60}: {:.0} ns",
                src.lines().next().unwrap(),
                t.elapsed().as_nanos() as f64 / n as f64
            );
        }
    }
}
