//! Configuration: a YAML file plus command-line flags (MySQL Proxy names where they exist), flags win.
//!
//! The file is read into a raw serde struct (`deny_unknown_fields` everywhere, addresses and sizes parsed
//! inside serde) so serde_yaml's errors carry the key path and the line; the raw struct is then turned
//! into the typed [`Config`], and `validate(self)` checks what serde cannot (ranges, duplicates) with
//! errors that name the key. Listen addresses that are host names are resolved once, here, with the
//! system resolver (first result): the daemon binds what the name meant at start-up.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::limits::FD_RESERVE;

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

/// Command-line flags. Every value flag overrides the file's key of the same meaning.
#[derive(clap::Parser, Debug, Clone, Default)]
#[command(
    name = "mysql-lb",
    version,
    about = "A load-balancing MySQL/MariaDB wire-protocol proxy"
)]
pub struct Cli {
    /// YAML configuration file (see config/mysql-lb.yaml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen address, host:port or a unix socket path; repeatable or comma-separated. Replaces `listen`.
    #[arg(long = "proxy-address", value_name = "ADDR")]
    pub proxy_address: Vec<String>,
    /// Backend address, host:port or a unix socket path; repeatable or comma-separated. Replaces `backends`.
    #[arg(long = "proxy-backend-addresses", value_name = "ADDR")]
    pub proxy_backend_addresses: Vec<String>,
    /// Read-only backend (type ro), host:port or a unix socket path; repeatable or comma-separated.
    /// Added to the backends (from the file or --proxy-backend-addresses).
    #[arg(long = "proxy-read-only-backend-addresses", value_name = "ADDR")]
    pub proxy_read_only_backend_addresses: Vec<String>,
    /// Lua script whose connect_server() chooses the backend (MySQL Proxy compatible). Replaces
    /// `balancer.script`.
    #[arg(long = "proxy-lua-script", value_name = "FILE")]
    pub proxy_lua_script: Option<PathBuf>,
    /// Built-in balancing policy (also the fallback of a script). Replaces `balancer.policy`.
    #[arg(long, value_name = "POLICY")]
    pub balancer: Option<Policy>,
    /// RLIMIT_NOFILE to ask for (default: 2 x max-connections + 64).
    #[arg(long, value_name = "N")]
    pub max_open_files: Option<u64>,
    /// Maximum number of concurrent client connections.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Backend connect + greeting timeout, e.g. "2s", "500ms".
    #[arg(long, value_name = "DURATION")]
    pub connect_timeout: Option<humantime::Duration>,
    /// tracing filter directive, e.g. "info" or "info,mysql_lb=debug".
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Log line format.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Admin HTTP listener (/metrics, /healthz, /backends), "ip:port"; "off" disables it.
    #[arg(long, value_name = "ADDR")]
    pub admin_address: Option<String>,
    /// Runtime worker threads (default: one per CPU).
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<usize>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
}

/// Where the proxy accepts clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Where a backend server listens. `host` is kept as written (a name is resolved at connect time) and
/// without brackets for IPv6.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BackendAddr {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Label in logs and metrics; defaults to the address as displayed.
    pub name: String,
    pub address: BackendAddr,
    /// Relative share for weighted balancing; > 0.
    pub weight: u32,
    /// Read-write or read-only, as Lua scripts see it (`type`); the built-in policies use both.
    pub kind: BackendKind,
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
}

impl Default for BalancerConfig {
    fn default() -> Self {
        Self {
            policy: Policy::RoundRobin,
            script: None,
            script_budget: DEFAULT_SCRIPT_BUDGET,
            script_allow_unsafe: false,
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
    pub backends: Vec<BackendConfig>,
    pub max_connections: usize,
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
    /// On SIGTERM/SIGINT, sessions get this long to reach a command boundary before they are
    /// closed regardless.
    pub shutdown_timeout: Duration,
    /// Logical packet size limit in the command phase.
    pub max_packet_size: u64,
    /// Cap for each handshake/auth packet.
    pub max_handshake_packet_size: usize,
    /// tracing `EnvFilter` directive.
    pub log_level: String,
    pub log_format: LogFormat,
    /// Admin HTTP listener; None disables it.
    pub admin_address: Option<SocketAddr>,
    /// Record each command's latency in the per-backend histograms (on by default; off only to
    /// measure what recording costs).
    pub record_latency: bool,
    /// When false, CLIENT_LOCAL_FILES is cleared in both directions so no LOAD DATA LOCAL INFILE
    /// can run through the proxy.
    pub allow_local_infile: bool,
    pub health_check: HealthCheckConfig,
    pub balancer: BalancerConfig,
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
    /// When set, the check logs in (mysql_native_password) and runs `SELECT 1`.
    pub user: Option<String>,
    pub password: Option<String>,
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
            max_replication_lag: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: vec![ListenAddr::Tcp(DEFAULT_LISTEN)],
            backends: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_open_files: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            down_cooloff: DEFAULT_DOWN_COOLOFF,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            shutdown_timeout: Duration::from_secs(30),
            idle_timeout: None,
            worker_threads: None,
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            max_handshake_packet_size: DEFAULT_MAX_HANDSHAKE_PACKET_SIZE,
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
            admin_address: Some(DEFAULT_ADMIN),
            record_latency: true,
            allow_local_infile: true,
            health_check: HealthCheckConfig::default(),
            balancer: BalancerConfig::default(),
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

/// An address that does not parse; the message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AddressError(String);

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            BackendAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            BackendAddr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// `Some(path)` when `s` names a unix socket: anything containing '/', with an optional `unix:` prefix.
fn unix_path(s: &str) -> Result<Option<PathBuf>, AddressError> {
    let (explicit, path) = match s.strip_prefix("unix:") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if !explicit && !path.contains('/') {
        return Ok(None);
    }
    if path.is_empty() {
        return Err(AddressError(format!("`{s}`: empty unix socket path")));
    }
    if path.len() > MAX_UNIX_PATH_LEN {
        return Err(AddressError(format!(
            "`{s}`: unix socket path is {} bytes, the limit is {MAX_UNIX_PATH_LEN}",
            path.len()
        )));
    }
    Ok(Some(PathBuf::from(path)))
}

/// Splits "host:port" / "[v6]:port"; the host comes back without brackets.
fn split_host_port<'a>(s: &'a str, example: &str) -> Result<(&'a str, &'a str), AddressError> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(AddressError(format!(
            "`{s}`: expected host:port (e.g. {example}) or a unix socket path"
        )));
    };
    if let Some(inner) = host.strip_prefix('[') {
        let Some(inner) = inner.strip_suffix(']') else {
            return Err(AddressError(format!("`{s}`: unbalanced '[' in host")));
        };
        if inner.parse::<Ipv6Addr>().is_err() {
            return Err(AddressError(format!(
                "`{s}`: `{inner}` is not an IPv6 address"
            )));
        }
        return Ok((inner, port));
    }
    if host.contains(':') {
        return Err(AddressError(format!(
            "`{s}`: IPv6 addresses must be in brackets, e.g. [::1]:3306"
        )));
    }
    if host.contains(|c: char| c.is_whitespace() || c == '[' || c == ']') {
        return Err(AddressError(format!("`{s}`: invalid host `{host}`")));
    }
    Ok((host, port))
}

fn parse_port(s: &str, port: &str, allow_zero: bool) -> Result<u16, AddressError> {
    let range = if allow_zero { "0-65535" } else { "1-65535" };
    match port.parse::<u16>() {
        Ok(0) if !allow_zero => Err(AddressError(format!(
            "`{s}`: port 0 is not a valid backend port"
        ))),
        Ok(p) => Ok(p),
        Err(_) => Err(AddressError(format!(
            "`{s}`: invalid port `{port}` (expected {range})"
        ))),
    }
}

impl FromStr for ListenAddr {
    type Err = AddressError;

    /// `host:port` (port 0 picks a free port; an empty host means 0.0.0.0, as in MySQL Proxy), or a unix
    /// socket path. A host name is resolved now and the first address is used.
    fn from_str(s: &str) -> Result<Self, AddressError> {
        let s = s.trim();
        if let Some(path) = unix_path(s)? {
            return Ok(ListenAddr::Unix(path));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr::Tcp(addr));
        }
        let (host, port) = split_host_port(s, "127.0.0.1:4040")?;
        let port = parse_port(s, port, true)?;
        if host.is_empty() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port,
            )));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(ip, port)));
        }
        match (host, port).to_socket_addrs() {
            Ok(mut addrs) => addrs.next().map(ListenAddr::Tcp).ok_or_else(|| {
                AddressError(format!("`{s}`: host `{host}` resolves to no address"))
            }),
            Err(e) => Err(AddressError(format!(
                "`{s}`: cannot resolve host `{host}`: {e}"
            ))),
        }
    }
}

impl FromStr for BackendAddr {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        let s = s.trim();
        if let Some(path) = unix_path(s)? {
            return Ok(BackendAddr::Unix(path));
        }
        let (host, port) = split_host_port(s, "127.0.0.1:3306")?;
        if host.is_empty() {
            return Err(AddressError(format!("`{s}`: empty host")));
        }
        let port = parse_port(s, port, false)?;
        Ok(BackendAddr::Tcp {
            host: host.to_owned(),
            port,
        })
    }
}

/// Parses a YAML string scalar with `FromStr`, so serde_yaml puts the key path and line on the error.
struct ParseVisitor<T>(&'static str, PhantomData<T>);

const IPV6_QUOTE_HINT: &str =
    "got a YAML sequence; quote bracketed IPv6 addresses, e.g. \"[::1]:3306\"";

impl<'de, T: FromStr<Err = AddressError>> Visitor<'de> for ParseVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<T, A::Error> {
        Err(de::Error::custom(IPV6_QUOTE_HINT))
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(ParseVisitor(
            "a listen address (host:port or unix socket path)",
            PhantomData,
        ))
    }
}

impl<'de> Deserialize<'de> for BackendAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(ParseVisitor(
            "a backend address (host:port or unix socket path)",
            PhantomData,
        ))
    }
}

/// A byte count: an integer, or a string with a binary unit ("64MiB", "1G").
struct ByteSize(u64);

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{s}`: expected a byte count like 65536, \"64KiB\" or \"1GiB\""))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use B, KiB, MiB or GiB; units are binary)"
            ))
        }
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("`{s}`: too large"))
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count (integer, or a string like \"64MiB\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("{v}: must not be negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map(ByteSize).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Vec<ListenAddr>>,
    #[serde(default)]
    backends: Vec<RawBackend>,
    max_connections: Option<usize>,
    max_open_files: Option<u64>,
    #[serde(default, with = "humantime_serde")]
    connect_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    down_cooloff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    handshake_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    shutdown_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    idle_timeout: Option<Duration>,
    worker_threads: Option<usize>,
    max_packet_size: Option<ByteSize>,
    max_handshake_packet_size: Option<ByteSize>,
    #[serde(default)]
    log: RawLog,
    admin_address: Option<String>,
    record_latency: Option<bool>,
    allow_local_infile: Option<bool>,
    #[serde(default)]
    health_check: RawHealthCheck,
    #[serde(default)]
    balancer: RawBalancer,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalancer {
    policy: Option<Policy>,
    script: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    script_budget: Option<Duration>,
    script_allow_unsafe: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealthCheck {
    #[serde(default, with = "humantime_serde")]
    interval: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
    fall: Option<u32>,
    rise: Option<u32>,
    user: Option<String>,
    password: Option<String>,
    #[serde(default, with = "humantime_serde")]
    max_replication_lag: Option<Duration>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    level: Option<String>,
    format: Option<LogFormat>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackendMap {
    address: BackendAddr,
    name: Option<String>,
    weight: Option<u32>,
    #[serde(rename = "type")]
    kind: Option<BackendKind>,
}

/// A backend entry: a plain address string, or a map. Written by hand rather than `untagged` because
/// an untagged enum swallows the inner error ("did not match any variant") and loses the unknown key.
enum RawBackend {
    Short(BackendAddr),
    Full(RawBackendMap),
}

impl<'de> Deserialize<'de> for RawBackend {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawBackend;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a backend address string or a map with `address`, `name`, `weight`, `type`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawBackend, E> {
                v.parse().map(RawBackend::Short).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawBackend, A::Error> {
                RawBackendMap::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawBackend::Full)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<RawBackend, A::Error> {
                Err(de::Error::custom(IPV6_QUOTE_HINT))
            }
        }
        d.deserialize_any(V)
    }
}

impl RawBackend {
    fn into_backend(self) -> BackendConfig {
        let (address, name, weight, kind) = match self {
            RawBackend::Short(address) => (address, None, None, None),
            RawBackend::Full(m) => (m.address, m.name, m.weight, m.kind),
        };
        BackendConfig::new(address, name, weight, kind.unwrap_or_default())
    }
}

impl BackendConfig {
    fn new(
        address: BackendAddr,
        name: Option<String>,
        weight: Option<u32>,
        kind: BackendKind,
    ) -> Self {
        BackendConfig {
            name: name.unwrap_or_else(|| address.to_string()),
            address,
            weight: weight.unwrap_or(1),
            kind,
        }
    }
}

impl RawConfig {
    fn parse(s: &str) -> Result<RawConfig, ConfigError> {
        // An empty (or comment-only) file is an empty mapping, not an error.
        let raw: Option<RawConfig> =
            serde_yaml::from_str(s).map_err(|error| ConfigError::Yaml {
                origin: ConfigSource::Text,
                error,
            })?;
        Ok(raw.unwrap_or_default())
    }

    fn into_config(self) -> Result<Config, ConfigError> {
        let d = Config::default();
        let max_handshake_packet_size = match self.max_handshake_packet_size {
            Some(ByteSize(n)) => usize::try_from(n).map_err(|_| {
                ConfigError::invalid("max_handshake_packet_size", format!("{n} is too large"))
            })?,
            None => d.max_handshake_packet_size,
        };
        Ok(Config {
            listen: self.listen.unwrap_or(d.listen),
            backends: self
                .backends
                .into_iter()
                .map(RawBackend::into_backend)
                .collect(),
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            max_open_files: self.max_open_files,
            connect_timeout: self.connect_timeout.unwrap_or(d.connect_timeout),
            down_cooloff: self.down_cooloff.unwrap_or(d.down_cooloff),
            handshake_timeout: self.handshake_timeout.unwrap_or(d.handshake_timeout),
            shutdown_timeout: self.shutdown_timeout.unwrap_or(d.shutdown_timeout),
            idle_timeout: self.idle_timeout.filter(|t| !t.is_zero()),
            worker_threads: self.worker_threads,
            max_packet_size: self.max_packet_size.map_or(d.max_packet_size, |s| s.0),
            max_handshake_packet_size,
            log_level: self.log.level.unwrap_or(d.log_level),
            log_format: self.log.format.unwrap_or(d.log_format),
            admin_address: match self.admin_address {
                None => d.admin_address,
                Some(a) => {
                    parse_admin_address(&a).map_err(|m| ConfigError::invalid("admin_address", m))?
                }
            },
            record_latency: self.record_latency.unwrap_or(d.record_latency),
            allow_local_infile: self.allow_local_infile.unwrap_or(d.allow_local_infile),
            health_check: {
                let h = self.health_check;
                let dh = d.health_check;
                HealthCheckConfig {
                    interval: h.interval.unwrap_or(dh.interval),
                    timeout: h.timeout.unwrap_or(dh.timeout),
                    fall: h.fall.unwrap_or(dh.fall),
                    rise: h.rise.unwrap_or(dh.rise),
                    user: h.user,
                    password: h.password,
                    max_replication_lag: h.max_replication_lag,
                }
            },
            balancer: {
                let b = self.balancer;
                let db = d.balancer;
                BalancerConfig {
                    policy: b.policy.unwrap_or(db.policy),
                    script: b.script,
                    script_budget: b.script_budget.unwrap_or(db.script_budget),
                    script_allow_unsafe: b.script_allow_unsafe.unwrap_or(db.script_allow_unsafe),
                }
            },
        })
    }
}

/// The admin listener: an IP literal with a port, or "off"/"" to disable it.
fn parse_admin_address(s: &str) -> Result<Option<SocketAddr>, String> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("`{s}`: expected ip:port (e.g. 127.0.0.1:4041) or \"off\""))
}

/// Flattens repeated and comma-separated flag values.
fn split_list(values: &[String]) -> impl Iterator<Item = &str> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn cli_error(flag: &str, error: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        origin: ConfigSource::CommandLine,
        key: flag.to_owned(),
        message: error.to_string(),
    }
}

/// Config key prefix -> the flag that can replace it.
const FLAG_FOR_KEY: [(&str, &str); 11] = [
    ("worker_threads", "--worker-threads"),
    ("balancer.policy", "--balancer"),
    ("balancer.script", "--proxy-lua-script"),
    ("admin_address", "--admin-address"),
    ("listen", "--proxy-address"),
    ("backends", "--proxy-backend-addresses"),
    ("max_connections", "--max-connections"),
    ("max_open_files", "--max-open-files"),
    ("connect_timeout", "--connect-timeout"),
    ("log.level", "--log-level"),
    ("log.format", "--log-format"),
];

/// Applies the flags over `config`; returns the config keys they replaced.
fn apply_cli(config: &mut Config, cli: &Cli) -> Result<Vec<&'static str>, ConfigError> {
    let mut replaced = Vec::new();
    let listen = split_list(&cli.proxy_address)
        .map(|s| s.parse().map_err(|e| cli_error("--proxy-address", e)))
        .collect::<Result<Vec<ListenAddr>, _>>()?;
    if !listen.is_empty() {
        config.listen = listen;
        replaced.push("listen");
    }
    let backends = split_list(&cli.proxy_backend_addresses)
        .map(|s| {
            s.parse()
                .map(|a| BackendConfig::new(a, None, None, BackendKind::Rw))
                .map_err(|e| cli_error("--proxy-backend-addresses", e))
        })
        .collect::<Result<Vec<BackendConfig>, _>>()?;
    if !backends.is_empty() {
        config.backends = backends;
        replaced.push("backends");
    }
    for s in split_list(&cli.proxy_read_only_backend_addresses) {
        let address = s
            .parse()
            .map_err(|e| cli_error("--proxy-read-only-backend-addresses", e))?;
        config
            .backends
            .push(BackendConfig::new(address, None, None, BackendKind::Ro));
    }
    if let Some(path) = &cli.proxy_lua_script {
        config.balancer.script = Some(path.clone());
        replaced.push("balancer.script");
    }
    if let Some(policy) = cli.balancer {
        config.balancer.policy = policy;
        replaced.push("balancer.policy");
    }
    if let Some(n) = cli.max_connections {
        config.max_connections = n;
        replaced.push("max_connections");
    }
    if let Some(n) = cli.max_open_files {
        config.max_open_files = Some(n);
        replaced.push("max_open_files");
    }
    if let Some(t) = cli.connect_timeout {
        config.connect_timeout = t.into();
        replaced.push("connect_timeout");
    }
    if let Some(level) = &cli.log_level {
        config.log_level.clone_from(level);
        replaced.push("log.level");
    }
    if let Some(n) = cli.worker_threads {
        config.worker_threads = Some(n);
        replaced.push("worker_threads");
    }
    if let Some(a) = &cli.admin_address {
        config.admin_address =
            parse_admin_address(a).map_err(|m| cli_error("--admin-address", m))?;
        replaced.push("admin_address");
    }
    if let Some(format) = cli.log_format {
        config.log_format = format;
        replaced.push("log.format");
    }
    Ok(replaced)
}

/// Points a validation error at the flag when a flag supplied the value, else at the file.
fn attribute(error: ConfigError, file: Option<&Path>, replaced: &[&str]) -> ConfigError {
    let ConfigError::Invalid { key, message, .. } = error else {
        return error;
    };
    for (prefix, flag) in FLAG_FOR_KEY {
        if let Some(rest) = key.strip_prefix(prefix) {
            if replaced.contains(&prefix) && (rest.is_empty() || rest.starts_with(['[', '.'])) {
                return ConfigError::Invalid {
                    origin: ConfigSource::CommandLine,
                    key: format!("{flag}{rest}"),
                    message,
                };
            }
        }
    }
    let origin = file.map_or(ConfigSource::Text, |p| ConfigSource::File(p.to_owned()));
    ConfigError::Invalid {
        origin,
        key,
        message,
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

    pub fn validate(self) -> Result<Config, ConfigError> {
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
        if self.backends.is_empty() {
            return Err(ConfigError::invalid(
                "backends",
                "no backend configured; list them under `backends:` or pass --proxy-backend-addresses",
            ));
        }
        let mut names = HashMap::new();
        for (i, b) in self.backends.iter().enumerate() {
            if b.name.trim().is_empty() || b.name.contains(char::is_control) {
                return Err(ConfigError::invalid(
                    format!("backends[{i}].name"),
                    "must be non-empty printable text",
                ));
            }
            if b.weight == 0 {
                return Err(ConfigError::invalid(
                    format!("backends[{i}].weight"),
                    "must be > 0",
                ));
            }
            if let Some(first) = names.insert(b.name.as_str(), i) {
                return Err(ConfigError::invalid(
                    format!("backends[{i}].name"),
                    format!(
                        "duplicate backend name `{}` (same as backends[{first}]); give each a distinct `name:`",
                        b.name
                    ),
                ));
            }
        }
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
        check_log_filter(&self.log_level).map_err(|m| ConfigError::invalid("log.level", m))?;
        if self.worker_threads == Some(0) {
            return Err(ConfigError::invalid(
                "worker_threads",
                "must be > 0 (leave it out for one per CPU)",
            ));
        }
        let h = &self.health_check;
        if h.timeout.is_zero() {
            return Err(ConfigError::invalid("health_check.timeout", "must be > 0"));
        }
        if h.fall == 0 || h.rise == 0 {
            let key = if h.fall == 0 {
                "health_check.fall"
            } else {
                "health_check.rise"
            };
            return Err(ConfigError::invalid(key, "must be > 0"));
        }
        if h.password.is_some() && h.user.is_none() {
            return Err(ConfigError::invalid(
                "health_check.password",
                "set health_check.user too",
            ));
        }
        if self.balancer.script_budget.is_zero() {
            return Err(ConfigError::invalid(
                "balancer.script_budget",
                "must be > 0",
            ));
        }
        if let Some(path) = &self.balancer.script {
            check_readable_file(path).map_err(|m| ConfigError::invalid("balancer.script", m))?;
        }
        if h.max_replication_lag.is_some() && h.user.is_none() {
            return Err(ConfigError::invalid(
                "health_check.max_replication_lag",
                "reading replication status needs a login: set health_check.user (with REPLICATION CLIENT/SLAVE MONITOR privilege)",
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn err(yaml: &str) -> String {
        Config::from_yaml_str(yaml).unwrap_err().to_string()
    }

    fn tcp(host: &str, port: u16) -> BackendAddr {
        BackendAddr::Tcp {
            host: host.to_owned(),
            port,
        }
    }

    fn write_temp(yaml: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, yaml.as_bytes()).unwrap();
        f
    }

    #[test]
    fn defaults_match_the_documented_values() {
        let c = Config::default();
        assert_eq!(c.listen, vec!["127.0.0.1:4040".parse().unwrap()]);
        assert!(c.backends.is_empty());
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(c.max_open_files, None);
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.down_cooloff, Duration::from_secs(5));
        assert_eq!(c.handshake_timeout, Duration::from_secs(10));
        assert_eq!(c.max_packet_size, 1_073_741_824);
        assert_eq!(c.max_handshake_packet_size, 65_536);
        assert_eq!(c.log_level, "info");
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn minimal_yaml_takes_defaults_for_everything_else() {
        let c = Config::from_yaml_str("backends: [\"127.0.0.1:3306\"]").unwrap();
        assert_eq!(
            c,
            Config {
                backends: vec![BackendConfig {
                    name: "127.0.0.1:3306".into(),
                    address: tcp("127.0.0.1", 3306),
                    weight: 1,
                    kind: BackendKind::Rw
                }],
                ..Config::default()
            }
        );
    }

    #[test]
    fn full_yaml_example_parses() {
        let c = Config::from_yaml_str(
            r#"
listen: ["127.0.0.1:4040", "/run/mysql-lb/mysql-lb.sock"]
backends:
  - address: 127.0.0.1:3306
    name: db1
    weight: 3
  - 127.0.0.1:3307
max_connections: 500
max_open_files: 20064
connect_timeout: 500ms
down_cooloff: 1m
handshake_timeout: 3s
max_packet_size: 64MiB
max_handshake_packet_size: 4096
log: { level: "info,mysql_lb=debug", format: json }
"#,
        )
        .unwrap();
        assert_eq!(
            c.listen,
            vec![
                ListenAddr::Tcp("127.0.0.1:4040".parse().unwrap()),
                ListenAddr::Unix("/run/mysql-lb/mysql-lb.sock".into())
            ]
        );
        assert_eq!(c.backends[0].name, "db1");
        assert_eq!(c.backends[0].weight, 3);
        assert_eq!(c.backends[1].address, tcp("127.0.0.1", 3307));
        assert_eq!(c.max_connections, 500);
        assert_eq!(c.max_open_files, Some(20064));
        assert_eq!(c.connect_timeout, Duration::from_millis(500));
        assert_eq!(c.down_cooloff, Duration::from_secs(60));
        assert_eq!(c.handshake_timeout, Duration::from_secs(3));
        assert_eq!(c.max_packet_size, 64 << 20);
        assert_eq!(c.max_handshake_packet_size, 4096);
        assert_eq!(c.log_level, "info,mysql_lb=debug");
        assert_eq!(c.log_format, LogFormat::Json);
    }

    #[test]
    fn shorthand_backend_string_gets_address_as_name_and_weight_one() {
        let c = Config::from_yaml_str("backends:\n  - db.example:3306\n").unwrap();
        assert_eq!(
            c.backends,
            vec![BackendConfig {
                name: "db.example:3306".into(),
                address: tcp("db.example", 3306),
                weight: 1,
                kind: BackendKind::Rw
            }]
        );
    }

    #[test]
    fn unknown_top_level_key_names_key_and_line() {
        let e = err("backends: [\"127.0.0.1:3306\"]\nfoo: 1\n");
        assert!(e.contains("unknown field `foo`"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn unknown_key_inside_backend_map_names_key_and_line() {
        let e = err("backends:\n  - address: 127.0.0.1:3306\n    wieght: 2\n");
        assert!(e.contains("unknown field `wieght`"), "{e}");
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn unknown_key_inside_log_names_key() {
        let e = err("backends: [\"h:1\"]\nlog: { level: info, colour: true }\n");
        assert!(e.contains("unknown field `colour`"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn bad_duration_names_key_and_line() {
        let e = err("backends: [\"h:1\"]\nconnect_timeout: 2 parsecs\n");
        assert!(e.contains("connect_timeout"), "{e}");
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn bad_backend_address_names_backend_index() {
        let e = err("backends:\n  - address: 127.0.0.1:99999\n");
        assert!(e.contains("backends[0].address"), "{e}");
        assert!(e.contains("invalid port"), "{e}");
        assert!(e.contains("line 2"), "{e}");

        let e = err("backends:\n  - h:1\n  - nohostport\n");
        assert!(e.contains("backends[1]"), "{e}");
        assert!(e.contains("expected host:port"), "{e}");
    }

    #[test]
    fn unquoted_bracketed_ipv6_gets_a_quoting_hint() {
        let e = err("backends:\n  - [::1]:3306\n");
        assert!(e.contains("backends[0]"), "{e}");
        assert!(e.contains("quote"), "{e}");
    }

    #[test]
    fn sizes_accept_integers_and_binary_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("16 MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("1MB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("99999999999999GiB")
            .unwrap_err()
            .contains("too large"));
        let e = err("backends: [\"h:1\"]\nmax_packet_size: -5\n");
        assert!(e.contains("max_packet_size"), "{e}");
    }

    #[test]
    fn ipv6_backend_is_stored_without_brackets_and_displayed_with_them() {
        let a: BackendAddr = "[::1]:3306".parse().unwrap();
        assert_eq!(a, tcp("::1", 3306));
        assert_eq!(a.to_string(), "[::1]:3306");
        let c = Config::from_yaml_str("backends: [\"[::1]:3306\"]").unwrap();
        assert_eq!(c.backends[0].name, "[::1]:3306");
        assert!("::1:3306"
            .parse::<BackendAddr>()
            .unwrap_err()
            .to_string()
            .contains("brackets"));
        assert!("[nope]:3306".parse::<BackendAddr>().is_err());
        let l: ListenAddr = "[::1]:4040".parse().unwrap();
        assert_eq!(l.to_string(), "[::1]:4040");
    }

    #[test]
    fn backend_addresses_reject_bad_ports_and_hosts() {
        for bad in ["h:0", "h:65536", "h:", ":3306", "h", "a b:1", "h:x"] {
            assert!(bad.parse::<BackendAddr>().is_err(), "{bad}");
        }
        assert_eq!("h:65535".parse::<BackendAddr>().unwrap(), tcp("h", 65535));
    }

    #[test]
    fn unix_paths_for_listen_and_backends() {
        assert_eq!(
            "/tmp/my.sock".parse::<BackendAddr>().unwrap(),
            BackendAddr::Unix("/tmp/my.sock".into())
        );
        assert_eq!(
            "./rel/my.sock".parse::<BackendAddr>().unwrap(),
            BackendAddr::Unix("./rel/my.sock".into())
        );
        let l: ListenAddr = "/run/x.sock".parse().unwrap();
        assert_eq!(l, ListenAddr::Unix("/run/x.sock".into()));
        assert_eq!(l.to_string(), "unix:/run/x.sock");
        // Display round-trips.
        assert_eq!(l.to_string().parse::<ListenAddr>().unwrap(), l);
        let long = format!("/{}", "x".repeat(200));
        assert!(long
            .parse::<ListenAddr>()
            .unwrap_err()
            .to_string()
            .contains("limit"));
        assert!("unix:".parse::<BackendAddr>().is_err());
    }

    #[test]
    fn listen_accepts_port_zero_empty_host_and_localhost() {
        let l: ListenAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(l, ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()));
        let l: ListenAddr = ":4040".parse().unwrap();
        assert_eq!(l, ListenAddr::Tcp("0.0.0.0:4040".parse().unwrap()));
        let ListenAddr::Tcp(a) = "localhost:4040".parse::<ListenAddr>().unwrap() else {
            panic!("localhost is not a unix path");
        };
        assert!(a.ip().is_loopback());
        assert_eq!(a.port(), 4040);
        assert!("127.0.0.1:70000".parse::<ListenAddr>().is_err());
    }

    #[test]
    fn validate_rejects_missing_backends_with_a_hint() {
        let e = err("listen: [\"127.0.0.1:4040\"]\n");
        assert!(e.contains("backends"), "{e}");
        assert!(e.contains("--proxy-backend-addresses"), "{e}");
        // An empty file is the same as no keys.
        assert!(err("# nothing\n").contains("no backend configured"));
    }

    #[test]
    fn validate_errors_name_the_key() {
        let cases = [
            (
                "listen: []\nbackends: [\"h:1\"]",
                "listen: no listen address",
            ),
            (
                "listen: [\"127.0.0.1:1\", \"127.0.0.1:1\"]\nbackends: [\"h:1\"]",
                "listen[1]: duplicate",
            ),
            (
                "backends: [\"h:1\", {address: \"h:1\"}]",
                "backends[1].name: duplicate backend name `h:1`",
            ),
            (
                "backends: [{address: \"h:1\", weight: 0}]",
                "backends[0].weight: must be > 0",
            ),
            (
                "backends: [{address: \"h:1\", name: \"\"}]",
                "backends[0].name",
            ),
            (
                "backends: [h:1]\nmax_connections: 0",
                "max_connections: must be > 0",
            ),
            (
                "backends: [h:1]\nmax_open_files: 10",
                "max_open_files: 10 is too small",
            ),
            (
                "backends: [h:1]\nconnect_timeout: 0s",
                "connect_timeout: must be > 0",
            ),
            (
                "backends: [h:1]\nhandshake_timeout: 0s",
                "handshake_timeout: must be > 0",
            ),
            (
                "backends: [h:1]\nmax_packet_size: 100",
                "max_packet_size: 100 is too small",
            ),
            (
                "backends: [h:1]\nmax_handshake_packet_size: 32MiB",
                "max_handshake_packet_size",
            ),
            (
                "backends: [h:1]\nlog: {level: debgu}",
                "log.level: `debgu` is not a level",
            ),
            (
                "backends: [h:1]\nlog: {level: \"\"}",
                "log.level: must not be empty",
            ),
        ];
        for (yaml, want) in cases {
            let e = err(yaml);
            assert!(e.contains(want), "{yaml:?}: got {e:?}, want {want:?}");
        }
        // Two port-0 listeners are fine, and so is a zero cool-off.
        Config::from_yaml_str(
            "listen: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\nbackends: [h:1]\ndown_cooloff: 0s",
        )
        .unwrap();
    }

    #[test]
    fn cli_flags_override_the_file() {
        let f = write_temp(
            "listen: [\"127.0.0.1:5000\"]\nbackends: [\"h:1\", \"h:2\"]\nmax_connections: 7\nlog: {level: warn}\n",
        );
        let cli = Cli::parse_from([
            "mysql-lb",
            "--config",
            f.path().to_str().unwrap(),
            "--proxy-address",
            "127.0.0.1:6000",
            "--proxy-backend-addresses",
            "db:3306",
            "--max-connections",
            "9",
            "--max-open-files",
            "5000",
            "--connect-timeout",
            "750ms",
            "--log-level",
            "debug",
            "--log-format",
            "json",
        ]);
        let c = Config::load(&cli).unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:6000".parse().unwrap()]);
        assert_eq!(c.backends.len(), 1);
        assert_eq!(c.backends[0].address, tcp("db", 3306));
        assert_eq!(c.max_connections, 9);
        assert_eq!(c.max_open_files, Some(5000));
        assert_eq!(c.connect_timeout, Duration::from_millis(750));
        assert_eq!(c.log_level, "debug");
        assert_eq!(c.log_format, LogFormat::Json);
        // Untouched keys keep the file's / default values.
        assert_eq!(c.handshake_timeout, Duration::from_secs(10));
    }

    #[test]
    fn cli_lists_may_be_repeated_and_comma_separated() {
        let cli = Cli::parse_from([
            "mysql-lb",
            "--proxy-backend-addresses",
            "a:1, b:2",
            "--proxy-backend-addresses=/tmp/c.sock",
            "--proxy-address",
            "127.0.0.1:0,/tmp/lb.sock",
        ]);
        let c = Config::load(&cli).unwrap();
        let names: Vec<_> = c.backends.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["a:1", "b:2", "/tmp/c.sock"]);
        assert_eq!(
            c.listen,
            vec![
                ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                ListenAddr::Unix("/tmp/lb.sock".into())
            ]
        );
    }

    #[test]
    fn cli_errors_name_the_flag() {
        let cli = Cli::parse_from(["mysql-lb", "--proxy-backend-addresses", "a:1,b:0"]);
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(
            e.starts_with("command line: --proxy-backend-addresses:"),
            "{e}"
        );
        let cli = Cli::parse_from(["mysql-lb", "--proxy-backend-addresses", "a:1,a:1"]);
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(
            e.starts_with("command line: --proxy-backend-addresses[1].name: duplicate"),
            "{e}"
        );
        let cli = Cli::parse_from(["mysql-lb"]);
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(e.contains("--proxy-backend-addresses"), "{e}");
    }

    #[test]
    fn file_errors_name_the_file() {
        let f = write_temp("backends: [\"h:1\"]\nmax_connections: 0\n");
        let cli = Cli {
            config: Some(f.path().to_owned()),
            ..Cli::default()
        };
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: max_connections", f.path().display())),
            "{e}"
        );
        let f = write_temp("backends: [\"h:1\"]\nbogus: 1\n");
        let cli = Cli {
            config: Some(f.path().to_owned()),
            ..Cli::default()
        };
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(e.starts_with(&f.path().display().to_string()), "{e}");
        assert!(
            e.contains("unknown field `bogus`") && e.contains("line 2"),
            "{e}"
        );
        let cli = Cli {
            config: Some("/nonexistent/mysql-lb.yaml".into()),
            ..Cli::default()
        };
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/mysql-lb.yaml"), "{e}");
    }

    #[test]
    fn balancer_keys_and_backend_type_parse() {
        let script = write_temp("function connect_server() end\n");
        let c = Config::from_yaml_str(&format!(
            "backends:\n  - h:1\n  - {{address: h:2, type: ro, weight: 3}}\nbalancer:\n  policy: least_connections\n  script: {}\n  script_budget: 25ms\n  script_allow_unsafe: true\n",
            script.path().display()
        ))
        .unwrap();
        assert_eq!(c.backends[0].kind, BackendKind::Rw);
        assert_eq!(c.backends[1].kind, BackendKind::Ro);
        assert_eq!(
            c.balancer,
            BalancerConfig {
                policy: Policy::LeastConnections,
                script: Some(script.path().to_owned()),
                script_budget: Duration::from_millis(25),
                script_allow_unsafe: true,
            }
        );
        let d = Config::from_yaml_str("backends: [h:1]\nbalancer: {policy: random}").unwrap();
        assert_eq!(d.balancer.policy, Policy::Random);
        assert_eq!(d.balancer.script_budget, Duration::from_millis(10));
        assert!(!d.balancer.script_allow_unsafe);
        assert_eq!(Config::default().balancer.policy, Policy::RoundRobin);
    }

    #[test]
    fn balancer_errors_name_the_key() {
        let e = err("backends: [h:1]\nbalancer:\n  polcy: random\n");
        assert!(
            e.contains("unknown field `polcy`") && e.contains("line 3"),
            "{e}"
        );
        let e = err("backends: [h:1]\nbalancer: {policy: fastest}\n");
        assert!(
            e.contains("balancer.policy") && e.contains("fastest"),
            "{e}"
        );
        let e = err("backends: [{address: h:1, type: rx}]\n");
        assert!(e.contains("backends[0].type"), "{e}");
        let e = err("backends: [h:1]\nbalancer: {script: /nonexistent/x.lua}\n");
        assert!(
            e.contains("balancer.script: cannot read /nonexistent/x.lua"),
            "{e}"
        );
        let e = err("backends: [h:1]\nbalancer: {script_budget: 0s}\n");
        assert!(e.contains("balancer.script_budget: must be > 0"), "{e}");
    }

    #[test]
    fn mysql_proxy_flags_set_script_policy_and_read_only_backends() {
        let script = write_temp("-- empty\n");
        let f = write_temp("backends: [\"h:1\"]\n");
        let cli = Cli::parse_from([
            "mysql-lb",
            "--config",
            f.path().to_str().unwrap(),
            "--proxy-lua-script",
            script.path().to_str().unwrap(),
            "--balancer",
            "least_connections",
            "--proxy-read-only-backend-addresses",
            "r:1,r:2",
            "--proxy-read-only-backend-addresses=/tmp/r.sock",
        ]);
        let c = Config::load(&cli).unwrap();
        let kinds: Vec<_> = c
            .backends
            .iter()
            .map(|b| (b.name.as_str(), b.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("h:1", BackendKind::Rw),
                ("r:1", BackendKind::Ro),
                ("r:2", BackendKind::Ro),
                ("/tmp/r.sock", BackendKind::Ro)
            ]
        );
        assert_eq!(c.balancer.script.as_deref(), Some(script.path()));
        assert_eq!(c.balancer.policy, Policy::LeastConnections);

        // Read-only backends alone are enough.
        let cli = Cli::parse_from(["mysql-lb", "--proxy-read-only-backend-addresses", "r:1"]);
        assert_eq!(
            Config::load(&cli).unwrap().backends[0].kind,
            BackendKind::Ro
        );

        let cli = Cli::parse_from(["mysql-lb", "--proxy-read-only-backend-addresses", "r:0"]);
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(
            e.starts_with("command line: --proxy-read-only-backend-addresses:"),
            "{e}"
        );
        let cli = Cli::parse_from([
            "mysql-lb",
            "--proxy-backend-addresses",
            "h:1",
            "--proxy-lua-script",
            "/nonexistent/s.lua",
        ]);
        let e = Config::load(&cli).unwrap_err().to_string();
        assert!(
            e.starts_with("command line: --proxy-lua-script: cannot read"),
            "{e}"
        );
    }

    #[test]
    fn shipped_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mysql-lb.yaml");
        let cli = Cli {
            config: Some(path),
            ..Cli::default()
        };
        let c = Config::load(&cli).unwrap();
        let addrs: Vec<_> = c.backends.iter().map(|b| b.address.to_string()).collect();
        assert_eq!(addrs, ["127.0.0.1:3306", "127.0.0.1:3307"]);
        assert_eq!(c.listen, Config::default().listen);
    }
}
