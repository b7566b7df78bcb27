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
        &crate::telemetry::metrics::Metrics::new(),
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
mod tests;
