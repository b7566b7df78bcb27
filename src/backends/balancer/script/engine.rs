//! One Lua state with the script loaded: the sandbox, the `proxy` tables, and the budgeted call.
//!
//! Per call, one internal Lua function (the trampoline) writes the fields that change into the
//! `proxy` tables and calls the script's hook, so a connect costs one call into Lua instead of
//! one per field (about 1 µs instead of 2.5). The call runs in a reused coroutine under an
//! instruction-count hook that reads the clock: past the budget it yields the coroutine, which
//! `pcall` cannot catch; where a yield is impossible (inside a C function's callback such as a
//! `table.sort` comparator) the next look raises an error instead, and the sandbox's `pcall` and
//! `xpcall` pass errors on once the budget is spent.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{
    Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Thread, ThreadStatus,
    Value, Variadic, VmState,
};
use tracing::info;

use super::{ErrorReason, ScriptError};
use crate::backends::balancer::{Backend, ClientInfo, Health};
use crate::config::{BackendAddr, BackendKind};

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

/// The budget clock one state's hook reads: nanoseconds since `epoch`.
struct Clock {
    epoch: Instant,
    deadline: AtomicU64,
    timed_out: AtomicBool,
    /// The hook's last answer past the deadline was a yield.
    yield_tried: AtomicBool,
}

impl Clock {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn start(&self, budget: Duration) {
        let budget = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.timed_out.store(false, Relaxed);
        self.yield_tried.store(false, Relaxed);
        self.deadline
            .store(self.now().saturating_add(budget), Relaxed);
    }
}

/// Why a call failed, for the counter and the warning.
type Failure = (ErrorReason, String);

/// One Lua state with the script loaded and the `proxy` tables it reads.
pub(super) struct Engine {
    pub(super) lua: Lua,
    clock: Arc<Clock>,
    budget: Duration,
    /// Reused coroutine each call runs in, so the budget hook can yield it.
    runner: Thread,
    /// [`TRAMPOLINE`]: writes a call's context into the `proxy` tables and calls the hook, so a
    /// connect costs one call into Lua rather than one per field.
    trampoline: Function,
    /// Reused for the per-backend arguments of the trampoline.
    args: Vec<i64>,
    pub(super) has_disconnect: bool,
}

/// Internal, compiled before the script runs so the script cannot change what it captures.
/// Arguments: the hook (1 = connect_server, 2 = disconnect_client), the client's name, address
/// and port, its username, default_db and pool (each nil when unknown), `backend_ndx`, then
/// `connected_clients, state` for each backend in order. Returns whether the hook is defined, its
/// first result, and `backend_ndx` after it ran. Every field is written on every call, and the
/// tables holding them are put back, so nothing of one client (or of a script's replacement
/// tables) is seen in the next call.
const TRAMPOLINE: &str = r##"
local G, proxy, tables, connection, client, src = ...
local rawget, select, type = rawget, select, type
local hooks = { "connect_server", "disconnect_client" }
return function(which, name, address, port, username, default_db, pool, ndx, ...)
    for i = 1, select("#", ...), 2 do
        local b = tables[(i + 1) // 2]
        b.connected_clients, b.state = select(i, ...)
    end
    proxy.connection, connection.client, client.src = connection, client, src
    src.name, src.address, src.port = name, address, port
    client.username, client.default_db = username, default_db
    connection.pool, connection.backend_ndx = pool, ndx
    local hook = rawget(G, hooks[which])
    if type(hook) ~= "function" then
        return false
    end
    local returned = hook()
    return true, returned, connection.backend_ndx
end
"##;

/// Internal: once a call's budget is spent, `pcall` and `xpcall` pass errors on instead of
/// catching them, so a script cannot swallow the budget error in a loop.
const GUARD_PCALL: &str = r##"
local G, spent = ...
local raw_pcall, raw_xpcall, error = pcall, xpcall, error
local function pass(ok, ...)
    if not ok and spent() then
        error((...), 0)
    end
    return ok, ...
end
G.pcall = function(f, ...)
    return pass(raw_pcall(f, ...))
end
G.xpcall = function(f, handler, ...)
    return pass(raw_xpcall(f, handler, ...))
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
    pub(super) fn load(
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
            yield_tried: AtomicBool::new(false),
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
        sandbox(&lua, &globals, path, allow_unsafe)?;
        let ProxyTable {
            proxy,
            tables,
            connection,
            client,
            src,
        } = proxy_table(&lua, backends)?;
        globals.raw_set("proxy", &proxy)?;
        let trampoline: Function = lua
            .load(TRAMPOLINE)
            .set_name("=mysql-lb")
            .call((&globals, proxy, tables, connection, client, src))?;
        install_budget(&lua, &globals, clock)?;
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
    pub(super) fn connect(
        &mut self,
        backends: &[Arc<Backend>],
        view: &dyn Fn(&Backend) -> (usize, Health),
        client: &ClientInfo<'_>,
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
    pub(super) fn disconnect(
        &mut self,
        backends: &[Arc<Backend>],
        view: &dyn Fn(&Backend) -> (usize, Health),
        client: &ClientInfo<'_>,
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
        client: &ClientInfo<'_>,
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
        let (address, port) = split_client(client.addr);
        // A client that named no database has none: nil, never "".
        let default_db = client.default_db.filter(|db| !db.is_empty());
        let per_backend = Variadic::from(per_backend);
        let args = (
            hook as i64,
            client.addr,
            address,
            port,
            client.user,
            default_db,
            client.pool,
            backend_ndx,
            per_backend,
        );
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

/// Removes what loads code (unless allowed) and sends `print` to the log.
fn sandbox(lua: &Lua, globals: &Table, path: &Path, allow_unsafe: bool) -> mlua::Result<()> {
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
    )
}

/// MySQL Proxy's `proxy` table, and the pieces of it the trampoline updates per call.
struct ProxyTable {
    proxy: Table,
    /// The backend tables in order, the trampoline's own (the script may change `list`).
    tables: Table,
    connection: Table,
    /// `proxy.connection.client`: `username` and `default_db` (deferred connect only).
    client: Table,
    /// `proxy.connection.client.src`.
    src: Table,
}

fn proxy_table(lua: &Lua, backends: &[Arc<Backend>]) -> mlua::Result<ProxyTable> {
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
        let t = backend_table(lua, b)?;
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
    connection.raw_set("client", &client)?;
    connection.raw_set("backend_ndx", 0)?;
    proxy.raw_set("connection", &connection)?;
    Ok(ProxyTable {
        proxy,
        tables,
        connection,
        client,
        src,
    })
}

/// Stops a call that runs past its budget: an instruction-count hook checks the clock, and
/// `pcall`/`xpcall` are guarded so a script cannot catch the stop.
fn install_budget(lua: &Lua, globals: &Table, clock: &Arc<Clock>) -> mlua::Result<()> {
    let spent_clock = Arc::clone(clock);
    let spent = lua.create_function(move |_, ()| Ok(spent_clock.timed_out.load(Relaxed)))?;
    lua.load(GUARD_PCALL)
        .set_name("=mysql-lb")
        .call::<()>((globals, spent))?;
    let hook_clock = Arc::clone(clock);
    lua.set_global_hook(
        HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        move |_, _| {
            if hook_clock.now() < hook_clock.deadline.load(Relaxed) {
                return Ok(VmState::Continue);
            }
            hook_clock.timed_out.store(true, Relaxed);
            // Yield first: pcall cannot catch it. Still running at the next look means the
            // yield was impossible here (inside a C function's callback): raise an error
            // then, which the guarded pcall/xpcall pass on; and alternate, so a yield is
            // tried again once back in plain Lua code.
            if hook_clock.yield_tried.fetch_xor(true, Relaxed) {
                return Err(mlua::Error::runtime("script budget exceeded"));
            }
            Ok(VmState::Yield)
        },
    )
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
    t.raw_set("weight", i64::from(b.weight()))?;
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
pub(super) fn split_client(addr: &str) -> (&str, i64) {
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

    #[test]
    fn client_addresses_split_into_address_and_port() {
        assert_eq!(split_client("10.0.0.1:3306"), ("10.0.0.1", 3306));
        assert_eq!(split_client("[::1]:5000"), ("::1", 5000));
        assert_eq!(split_client("unix:/run/lb.sock"), ("/run/lb.sock", 0));
        assert_eq!(split_client("weird"), ("weird", 0));
    }

    #[test]
    fn backend_ndx_nil_or_zero_is_no_decision_else_an_index_in_range() {
        assert_eq!(backend_index(&Value::Nil, 2), Ok(None));
        assert_eq!(backend_index(&Value::Integer(0), 2), Ok(None));
        assert_eq!(backend_index(&Value::Integer(2), 2), Ok(Some(1)));
        assert_eq!(backend_index(&Value::Number(1.0), 2), Ok(Some(0)));
        for bad in [
            Value::Integer(3),
            Value::Integer(-1),
            Value::Number(1.5),
            Value::Boolean(true),
        ] {
            let e = backend_index(&bad, 2).unwrap_err();
            assert_eq!(e.0, ErrorReason::OutOfRange, "{bad:?}");
        }
    }
}
