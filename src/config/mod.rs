//! Configuration: a YAML file plus command-line flags (MySQL Proxy names where they exist), flags win.
//!
//! The file is read into a raw serde struct (`deny_unknown_fields` everywhere, addresses and sizes parsed
//! inside serde) so serde_yaml's errors carry the key path and the line; the raw struct is then turned
//! into the typed [`Config`], and `validate(self)` checks what serde cannot (ranges, duplicates) with
//! errors that name the key. Listen addresses that are host names are resolved once, here, with the
//! system resolver (first result): the daemon binds what the name meant at start-up.

pub mod cidr;
pub mod limits;

mod accept_proxy;
mod address;
mod admin_sql;
mod backend;
mod cli;
mod digests;
mod ejection;
mod instances;
mod keepalive;
mod kill;
mod lifecycle;
mod pooling;
mod pools;
mod proxy_protocol;
mod raw;
mod roles;
mod rules;
mod secret;
mod tls;

pub use address::{AddressError, BackendAddr, ListenAddr};
pub use admin_sql::{
    parse_ed25519_key, parse_native_hash, AdminAccount, AdminCredential, AdminSqlConfig,
};
pub use backend::DEFAULT_POOL;
pub use cli::{Cli, Command, ReplayArgs, TopArgs, TopSort};
pub use digests::DigestConfig;
pub use ejection::EjectionConfig;
pub use instances::{parse_instance_id, InstanceConfig, Peer, PeerTemplate, PeerUrl};
pub use keepalive::TcpKeepalive;
pub use kill::KillConfig;
pub use lifecycle::LifecycleConfig;
pub use pooling::{CausalReads, Pooling, PoolingMode, ReadsWithoutReplica};
pub use pools::{ConnectMode, PoolConfig, RouteConfig};
pub use proxy_protocol::ProxyProtocol;
pub use rules::{compile as compile_rule_pattern, QueryRule, RuleRoute};
pub use secret::Secret;
pub use tls::{
    default_cipher_suites, BackendTls, BackendTlsMode, ClientTls, TlsVersion, CIPHER_SUITES,
};

use cli::{apply_cli, attribute};
use raw::RawConfig;

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::limits::{Budget, FD_RESERVE};

const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4040);
const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4041);
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_DOWN_COOLOFF: Duration = Duration::from_secs(5);
const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_MAX_PACKET_SIZE: u64 = 1 << 30;
const DEFAULT_MAX_HANDSHAKE_PACKET_SIZE: usize = 65_536;
const DEFAULT_SCRIPT_BUDGET: Duration = Duration::from_millis(10);
const MIN_PACKET_SIZE: u64 = 1024;
/// A handshake packet is a single wire chunk, so it cannot exceed the 3-byte length field.
const MAX_HANDSHAKE_PACKET_SIZE: usize = 0xFF_FFFF;
/// `sun_path` is 108 bytes on Linux, including the terminating NUL.
const MAX_UNIX_PATH_LEN: usize = 107;
const LOG_LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Label in logs and metrics; defaults to the address as displayed.
    pub name: String,
    pub address: BackendAddr,
    /// Relative share for weighted balancing; > 0.
    pub weight: u32,
    /// Read-write or read-only, as Lua scripts see it (`type`); the built-in policies use both.
    pub kind: BackendKind,
    /// The backend leg's TLS (`backend_tls` with this backend's `tls:` keys over it).
    pub tls: BackendTls,
    /// Compress the backend leg when the backend offers it (`backend_compression`, or this
    /// backend's `compression`).
    pub compression: bool,
    /// Its own `proxy_protocol:` (None: the global one, see [`Config::proxy_protocol_of`]).
    pub proxy_protocol: Option<ProxyProtocol>,
    /// The pool it belongs to: [`DEFAULT_POOL`] for `backends:` and command-line backends, else
    /// its `pools:` key.
    pub pool: String,
    /// Its role in a replication cluster; None in a pool without roles (see `roles.rs`).
    pub role: Option<Role>,
}

/// A backend's role in a replication cluster (`role:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Takes the pool's writes.
    Primary,
    /// Takes reads only; a write is refused before it reaches it.
    Replica,
    /// Whatever the server says in each health check: writable (`@@read_only = 0`) is the
    /// primary, read-only a replica.
    Auto,
}

/// A backend's role, MySQL Proxy's `BACKEND_TYPE_RW` / `BACKEND_TYPE_RO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Rw,
    Ro,
}

/// How a backend is chosen when no script decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Policy {
    /// Weighted round robin, interleaved (weights 3:1 give A B A A).
    #[default]
    RoundRobin,
    /// Fewest active sessions relative to weight.
    LeastConnections,
    /// The better of two random up backends by recent latency × (sessions + 1) / weight.
    LeastLatency,
    /// Weighted random.
    Random,
}

/// Backend choice: a built-in policy, optionally overridden per connection by a Lua script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancerConfig {
    pub policy: Policy,
    /// Lua file defining `connect_server()` / `disconnect_client()`; reloaded on SIGHUP.
    pub script: Option<PathBuf>,
    /// Time one script call may run before the built-in policy takes over.
    pub script_budget: Duration,
    /// Opens `os`, `io`, `package`/`require`, `load*` and `dofile` to the script.
    pub script_allow_unsafe: bool,
    /// Takes backends whose sessions keep failing out of rotation for a while.
    pub ejection: EjectionConfig,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        Self {
            policy: Policy::RoundRobin,
            script: None,
            script_budget: DEFAULT_SCRIPT_BUDGET,
            script_allow_unsafe: false,
            ejection: EjectionConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: Vec<ListenAddr>,
    /// Every backend of every pool, pools in `pools` order ("default" first), each pool's
    /// backends in file order.
    pub backends: Vec<BackendConfig>,
    /// Every pool that has backends, "default" (`backends:`) first when present, then `pools:` in
    /// file order. `validate` adds the pools of backends built in code or given by flags.
    pub pools: Vec<PoolConfig>,
    /// The top-level `pooling:`: the "default" pool's, however its backends are given.
    pub pooling: Pooling,
    /// `routes:` in file order; the first whose conditions all match picks the pool.
    pub routes: Vec<RouteConfig>,
    /// The pool of clients no route matches; None refuses them. `validate` resolves None to
    /// "default" when that pool exists (as an absent `default_pool:` means).
    pub default_pool: Option<String>,
    /// When the backend is connected: at accept, or after the client's HandshakeResponse
    /// (as written; [`Config::defers_connect`] says which `auto` means).
    pub connect_mode: ConnectMode,
    pub max_connections: usize,
    /// Whether `max_connections` was chosen (file or flag) rather than defaulted: a default is
    /// fitted to the descriptor limit quietly, a chosen value that cannot be honoured is warned of.
    pub max_connections_chosen: bool,
    /// None: derived from max_connections (see `limits`).
    pub max_open_files: Option<u64>,
    /// Backend connect + greeting.
    pub connect_timeout: Duration,
    /// A backend whose connect failed gets no clients for this long; zero disables the cool-off.
    pub down_cooloff: Duration,
    /// The client must finish the handshake within it.
    pub handshake_timeout: Duration,
    /// Runtime worker threads (None: one per CPU). Each thread runs whole sessions, so fewer
    /// threads mean fewer cross-thread wake-ups on a machine shared with the servers.
    pub worker_threads: Option<usize>,
    /// Close a session whose client sent nothing for this long while no command was in flight
    /// (None: never).
    pub idle_timeout: Option<Duration>,
    /// Keepalive on accepted client TCP connections and on backend TCP connections (None: off).
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// On SIGTERM/SIGINT, sessions get this long to reach a command boundary before they are
    /// closed regardless.
    pub shutdown_timeout: Duration,
    /// `shutdown_delay` and `watch_config`.
    pub lifecycle: LifecycleConfig,
    /// Logical packet size limit in the command phase.
    pub max_packet_size: u64,
    /// Cap for each handshake/auth packet.
    pub max_handshake_packet_size: usize,
    /// tracing `EnvFilter` directive.
    pub log_level: String,
    pub log_format: LogFormat,
    /// Admin HTTP listener; None disables it.
    pub admin_address: Option<SocketAddr>,
    /// `admin_token_file`: a file whose trimmed content is the bearer token the admin endpoint's
    /// POST/PUT operations require. Needed to bind the admin listener off loopback.
    pub admin_token_file: Option<PathBuf>,
    /// The token read from `admin_token_file` by [`Config::validate`].
    pub admin_token: Option<AdminToken>,
    /// `peer_token_file`: the token instances send each other instead of the admin token; the
    /// admin endpoint accepts it for `GET /connections/{id}` only.
    pub peer_token_file: Option<PathBuf>,
    /// The token read from `peer_token_file` by [`Config::validate`].
    pub peer_token: Option<AdminToken>,
    /// `query_rules:` in file order (see `rules.rs`); reloadable.
    pub query_rules: Vec<QueryRule>,
    /// `admin_sql:`: the SQL admin port and its account (None: off).
    pub admin_sql: Option<AdminSqlConfig>,
    /// `kill:`: the account that runs KILLs on other backends (see `kill.rs`).
    pub kill: KillConfig,
    /// `digests:`: the live query digest table (see `digests.rs`).
    pub digests: DigestConfig,
    /// When false, CLIENT_LOCAL_FILES is cleared in both directions so no LOAD DATA LOCAL INFILE
    /// can run through the proxy.
    pub allow_local_infile: bool,
    /// `backend_socket_user`: the OS user unix-socket backends see as their peer when mysql-lb
    /// runs as root (None: `nobody`); see `crate::net::stream::identity`. Fixed at start.
    pub backend_socket_user: Option<String>,
    pub health_check: HealthCheckConfig,
    pub balancer: BalancerConfig,
    /// The client leg's TLS (None: CLIENT_SSL is not offered).
    pub tls: Option<ClientTls>,
    /// Offer CLIENT_COMPRESS to clients (a client may then compress its leg).
    pub compression: bool,
    /// `backend_tls` and `backend_compression`: what backends given without their own keys get
    /// (those from the command line too).
    pub backend_tls: BackendTls,
    pub backend_compression: bool,
    /// `reuse_port`, `instance_id`, `peers` and `peers_from` (see `instances.rs`).
    pub instances: InstanceConfig,
    /// `proxy_protocol`: the header backends without their own key are sent.
    pub proxy_protocol: ProxyProtocol,
    /// `accept_proxy_protocol`: TCP clients from these networks must send a PROXY protocol
    /// header first, and the address it carries is the client's (empty: no header is read).
    pub accept_proxy_protocol: Vec<crate::config::cidr::Cidr>,
}

/// Background health checks of every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    /// Time between checks of one backend; zero disables checking (then a failed backend returns
    /// to rotation after `down_cooloff`).
    pub interval: Duration,
    /// Budget for one check (connect, greeting, and the optional login and queries).
    pub timeout: Duration,
    /// Consecutive failures that take an up backend out of rotation.
    pub fall: u32,
    /// Consecutive successes that put a down backend back.
    pub rise: u32,
    /// When set, the check logs in (mysql_native_password) and reads `@@read_only` (a pool's
    /// roles follow it).
    pub user: Option<String>,
    /// `password`, or the content of `password_file` once [`Config::validate`] has read it.
    pub password: Option<Secret>,
    /// `password_file`: read by [`Config::validate`] (at start and at each reload) into
    /// `password`, replacing it (the file has both keys refused when it is read).
    pub password_file: Option<PathBuf>,
    /// When set (needs `user`), a replica lagging more than this, or with replication stopped,
    /// is taken out of rotation.
    pub max_replication_lag: Option<Duration>,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            fall: 2,
            rise: 2,
            user: None,
            password: None,
            password_file: None,
            max_replication_lag: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: vec![ListenAddr::Tcp(DEFAULT_LISTEN)],
            backends: Vec::new(),
            pools: Vec::new(),
            pooling: Pooling::default(),
            routes: Vec::new(),
            default_pool: None,
            connect_mode: ConnectMode::Auto,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_chosen: false,
            max_open_files: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            down_cooloff: DEFAULT_DOWN_COOLOFF,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            shutdown_timeout: Duration::from_secs(30),
            lifecycle: LifecycleConfig::default(),
            idle_timeout: None,
            tcp_keepalive: Some(TcpKeepalive::default()),
            worker_threads: None,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            max_handshake_packet_size: DEFAULT_MAX_HANDSHAKE_PACKET_SIZE,
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
            admin_address: Some(DEFAULT_ADMIN),
            admin_token_file: None,
            admin_token: None,
            peer_token_file: None,
            peer_token: None,
            admin_sql: None,
            query_rules: Vec::new(),
            kill: KillConfig::default(),
            digests: DigestConfig::default(),
            allow_local_infile: true,
            backend_socket_user: None,
            health_check: HealthCheckConfig::default(),
            balancer: BalancerConfig::default(),
            tls: None,
            compression: true,
            backend_tls: BackendTls::default(),
            backend_compression: false,
            instances: InstanceConfig::default(),
            proxy_protocol: ProxyProtocol::Off,
            accept_proxy_protocol: Vec::new(),
        }
    }
}

/// Where a bad value came from, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    /// Text given to [`Config::from_yaml_str`], or a `Config` built in code.
    Text,
    CommandLine,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File(path) => write!(f, "{}", path.display()),
            ConfigSource::Text => f.write_str("config"),
            ConfigSource::CommandLine => f.write_str("command line"),
        }
    }
}

/// Messages are complete on their own (file, key, line, cause), so print them with `{}`; the wrapped
/// errors are kept as fields rather than `source()` so `{:#}` chains do not repeat them.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// serde_yaml's message names the key path and "at line X column Y".
    #[error("{origin}: {error}")]
    Yaml {
        origin: ConfigSource,
        error: serde_yaml::Error,
    },
    #[error("{origin}: {key}: {message}")]
    Invalid {
        origin: ConfigSource,
        key: String,
        message: String,
    },
}

impl ConfigError {
    fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            origin: ConfigSource::Text,
            key: key.into(),
            message: message.into(),
        }
    }

    fn in_file(self, path: &Path) -> Self {
        match self {
            ConfigError::Yaml { error, .. } => ConfigError::Yaml {
                origin: ConfigSource::File(path.to_owned()),
                error,
            },
            ConfigError::Invalid { key, message, .. } => ConfigError::Invalid {
                origin: ConfigSource::File(path.to_owned()),
                key,
                message,
            },
            other => other,
        }
    }
}

/// The admin endpoint's bearer token; Debug never shows it.
pub type AdminToken = Secret;

/// Reads the token (trimmed; must not be empty) from `path`.
fn read_admin_token(path: &Path) -> Result<AdminToken, String> {
    let token = secret::read_file(path, "token")?;
    match token.expose().trim() {
        "" => Err(format!("{} holds no token", path.display())),
        trimmed => Ok(Secret::new(trimmed)),
    }
}

/// Rejects bare words that are not levels: EnvFilter would read "debgu" as a target name and
/// silently log nothing.
fn check_log_filter(filter: &str) -> Result<(), String> {
    if filter.trim().is_empty() {
        return Err("must not be empty (e.g. \"info\")".to_owned());
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        if bare && !LOG_LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{directive}` is not a level ({}); write target=level for a target",
                LOG_LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter)
        .map(drop)
        .map_err(|e| format!("invalid filter `{filter}`: {e}"))
}

/// The script is loaded (and reloaded) later; a missing file is caught here, a Lua error there.
fn check_readable_file(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => std::fs::File::open(path)
            .map(drop)
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        Ok(_) => Err(format!("{} is not a file", path.display())),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

impl Config {
    /// What each client connection costs in descriptors (see [`Budget`]): one, with the shared
    /// server connections counted once, when every pool with backends is in transaction mode;
    /// else two.
    pub fn descriptor_budget(&self) -> Budget {
        let mut shared = 0u64;
        let mut names: Vec<&str> = self.backends.iter().map(|b| b.pool.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let pooling = self
                .pools
                .iter()
                .find(|p| p.name == name)
                .map(|p| p.pooling)
                .or((name == DEFAULT_POOL).then_some(self.pooling))
                .unwrap_or_default();
            if pooling.mode != PoolingMode::Transaction {
                return Budget::SESSION;
            }
            let backends = self.backends.iter().filter(|b| b.pool == name).count() as u64;
            shared = shared
                .saturating_add(backends.saturating_mul(pooling.max_server_connections as u64));
        }
        if shared == 0 {
            return Budget::SESSION;
        }
        Budget {
            per_connection: 1,
            shared,
        }
    }

    /// Reads `cli.config` if given (YAML), applies the CLI flags over it, then validates.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let file = cli.config.as_deref();
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                    path: path.to_owned(),
                    error,
                })?;
                RawConfig::parse(&text)
                    .map(|raw| raw.with_policy_flag(cli.balancer))
                    .and_then(RawConfig::into_config)
                    .map_err(|e| e.in_file(path))?
            }
            None => Config::default(),
        };
        let replaced = apply_cli(&mut config, cli)?;
        config.validate().map_err(|e| attribute(e, file, &replaced))
    }

    /// File contents to a validated config, without flags.
    pub fn from_yaml_str(s: &str) -> Result<Config, ConfigError> {
        RawConfig::parse(s)?.into_config()?.validate()
    }

    /// Checks what serde cannot (ranges, duplicates, combinations); each error names its key.
    /// Also completes what a config built in code or by flags leaves implicit: the pools of its
    /// backends, and `default_pool` (see [`Config::pools`]).
    pub fn validate(mut self) -> Result<Config, ConfigError> {
        self.complete_pools();
        self.validate_roles()?;
        roles::resolve(&mut self.backends);
        self.validate_listen()?;
        self.validate_pools()?;
        self.validate_backends()?;
        self.validate_routes()?;
        self.validate_limits()?;
        keepalive::validate(self.tcp_keepalive.as_ref())?;
        instances::validate(&mut self.instances)?;
        accept_proxy::validate(&self.accept_proxy_protocol, &self.listen)?;
        check_log_filter(&self.log_level).map_err(|m| ConfigError::invalid("log.level", m))?;
        if self.worker_threads == Some(0) {
            return Err(ConfigError::invalid(
                "worker_threads",
                "must be > 0 (leave it out for one per CPU)",
            ));
        }
        self.validate_admin()?;
        if let Some(admin) = &self.admin_sql {
            admin_sql::validate(admin, self.tls.as_ref().is_some_and(|t| t.require))?;
        }
        self.lifecycle.validate()?;
        self.health_check.validate()?;
        self.kill.validate()?;
        self.balancer.validate()?;
        tls::validate_client(self.tls.as_ref())?;
        for (i, b) in self.backends.iter().enumerate() {
            tls::validate_backend(&format!("{}.tls", self.backend_key(i)), &b.tls)?;
        }
        Ok(self)
    }

    /// Reads the admin token, and refuses an admin listener off loopback without one: its
    /// operations change the rotation.
    fn validate_admin(&mut self) -> Result<(), ConfigError> {
        self.admin_token = match &self.admin_token_file {
            Some(path) => Some(
                read_admin_token(path).map_err(|m| ConfigError::invalid("admin_token_file", m))?,
            ),
            None => None,
        };
        self.peer_token = match &self.peer_token_file {
            Some(path) => Some(
                read_admin_token(path).map_err(|m| ConfigError::invalid("peer_token_file", m))?,
            ),
            None => None,
        };
        if let Some(addr) = self.admin_address {
            if !addr.ip().is_loopback() && self.admin_token.is_none() {
                return Err(ConfigError::invalid(
                    "admin_address",
                    format!(
                        "{addr} is not a loopback address: set admin_token_file so that its \
                         operations need a token"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_listen(&self) -> Result<(), ConfigError> {
        if self.listen.is_empty() {
            return Err(ConfigError::invalid(
                "listen",
                "no listen address; set `listen:` or --proxy-address",
            ));
        }
        let mut seen = HashMap::new();
        for (i, addr) in self.listen.iter().enumerate() {
            // Port 0 asks for any free port, so two of them do not collide.
            if matches!(addr, ListenAddr::Tcp(a) if a.port() == 0) {
                continue;
            }
            if let Some(first) = seen.insert(addr, i) {
                return Err(ConfigError::invalid(
                    format!("listen[{i}]"),
                    format!("duplicate listen address {addr} (same as listen[{first}])"),
                ));
            }
        }
        Ok(())
    }

    fn validate_backends(&self) -> Result<(), ConfigError> {
        if self.backends.is_empty() {
            return Err(ConfigError::invalid(
                "backends",
                "no backend configured; list them under `backends:` (or `pools:`) or pass --proxy-backend-addresses",
            ));
        }
        let mut names = HashMap::new();
        for (i, b) in self.backends.iter().enumerate() {
            let key = self.backend_key(i);
            if b.name.trim().is_empty() || b.name.contains(char::is_control) {
                return Err(ConfigError::invalid(
                    format!("{key}.name"),
                    "must be non-empty printable text",
                ));
            }
            if b.weight == 0 {
                return Err(ConfigError::invalid(format!("{key}.weight"), "must be > 0"));
            }
            if let Some(first) = names.insert(b.name.as_str(), i) {
                return Err(ConfigError::invalid(
                    format!("{key}.name"),
                    format!(
                        "duplicate backend name `{}` (same as {}); give each a distinct `name:`",
                        b.name,
                        self.backend_key(first)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Connection counts, descriptors, timeouts and packet sizes.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(ConfigError::invalid("max_connections", "must be > 0"));
        }
        if let Some(n) = self.max_open_files {
            let min = FD_RESERVE + 2;
            if n < min {
                return Err(ConfigError::invalid(
                    "max_open_files",
                    format!("{n} is too small: at least {min} ({FD_RESERVE} reserved + 2 per connection)"),
                ));
            }
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("handshake_timeout", self.handshake_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::invalid(key, "must be > 0"));
            }
        }
        if self.max_packet_size < MIN_PACKET_SIZE {
            return Err(ConfigError::invalid(
                "max_packet_size",
                format!(
                    "{} is too small: at least {MIN_PACKET_SIZE}",
                    self.max_packet_size
                ),
            ));
        }
        if !(MIN_PACKET_SIZE as usize..=MAX_HANDSHAKE_PACKET_SIZE)
            .contains(&self.max_handshake_packet_size)
        {
            return Err(ConfigError::invalid(
                "max_handshake_packet_size",
                format!(
                    "{} is out of range {MIN_PACKET_SIZE}..={MAX_HANDSHAKE_PACKET_SIZE}",
                    self.max_handshake_packet_size
                ),
            ));
        }
        Ok(())
    }
}

impl HealthCheckConfig {
    /// Also reads `password_file` into `password`.
    fn validate(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.password_file {
            let password = secret::read_file(path, "password")
                .map_err(|m| ConfigError::invalid("health_check.password_file", m))?;
            self.password = Some(password);
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::invalid("health_check.timeout", "must be > 0"));
        }
        if self.fall == 0 || self.rise == 0 {
            let key = if self.fall == 0 {
                "health_check.fall"
            } else {
                "health_check.rise"
            };
            return Err(ConfigError::invalid(key, "must be > 0"));
        }
        if self.password.is_some() && self.user.is_none() {
            let key = match self.password_file {
                Some(_) => "health_check.password_file",
                None => "health_check.password",
            };
            return Err(ConfigError::invalid(key, "set health_check.user too"));
        }
        if self.max_replication_lag.is_some() && self.user.is_none() {
            return Err(ConfigError::invalid(
                "health_check.max_replication_lag",
                "reading replication status needs a login: set health_check.user (with REPLICATION CLIENT/SLAVE MONITOR privilege)",
            ));
        }
        Ok(())
    }
}

impl BalancerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.script_budget.is_zero() {
            return Err(ConfigError::invalid(
                "balancer.script_budget",
                "must be > 0",
            ));
        }
        if let Some(path) = &self.script {
            check_readable_file(path).map_err(|m| ConfigError::invalid("balancer.script", m))?;
        }
        self.ejection.validate()
    }
}

#[cfg(test)]
mod tests;
