//! Command-line flags (MySQL Proxy names where they exist) and how they override the file.

use std::fmt;
use std::path::{Path, PathBuf};

use super::address::*;
use super::*;

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
    /// This instance's id (0-255) among several, replacing `instance_id`; a StatefulSet pod
    /// name such as "mysql-lb-2" gives its ordinal.
    #[arg(long, value_name = "ID|POD_NAME")]
    pub instance_id: Option<String>,
    /// Runtime worker threads (default: one per CPU).
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<usize>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
    /// A tool run instead of the proxy (none: run the proxy).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Tools the binary also carries; each ignores the proxy's flags.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum Command {
    /// A live terminal view of a running mysql-lb's backends and top queries (its admin endpoint).
    Top(TopArgs),
    /// Replays a capture (`POST /capture/start` on the admin endpoint) against a server.
    Replay(ReplayArgs),
}

/// `mysql-lb replay`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The capture directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The server (or proxy) to replay against.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: String,
    /// The account replayed sessions log in as (mysql_native_password), unless
    /// `--account-map` names another for their captured user.
    #[arg(long, value_name = "USER", requires = "password_file")]
    pub user: Option<String>,
    /// A file holding its password (one line).
    #[arg(long, value_name = "PATH", requires = "user")]
    pub password_file: Option<PathBuf>,
    /// A file mapping captured users to accounts, one per line: `captured_user user password`
    /// (the password is the rest of the line; `#` starts a comment line).
    #[arg(long, value_name = "PATH", required_unless_present = "user")]
    pub account_map: Option<PathBuf>,
    /// Captured time divided by this, 0.1 to 100.
    #[arg(
        long,
        value_name = "X",
        default_value_t = 1.0,
        conflicts_with = "as_fast_as_possible"
    )]
    pub speed: f64,
    /// Each session's commands back to back, ignoring captured timing.
    #[arg(long)]
    pub as_fast_as_possible: bool,
    /// Skip statements that write (and the executions of such prepared statements).
    #[arg(long)]
    pub read_only: bool,
    /// Replay only the first N captured sessions.
    #[arg(long, value_name = "N")]
    pub sessions: Option<usize>,
    /// Write the report as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write the report as a self-contained HTML page here.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
    /// Digests in the printed table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
}

/// `mysql-lb top`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct TopArgs {
    /// The admin endpoint to watch.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4041")]
    pub admin: String,
    /// Time between refreshes, e.g. "2s", "500ms".
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub interval: humantime::Duration,
    /// The top queries' order (descending).
    #[arg(long, value_name = "KEY", default_value = "total")]
    pub sort: TopSort,
    /// Only this backend's queries.
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// A file holding the admin token, sent as bearer token.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Print one frame (after one interval, so rates have two samples) and exit; the default when
    /// stdout is not a terminal.
    #[arg(long)]
    pub once: bool,
}

/// What `mysql-lb top` (and `GET /queries?sort=`) orders the top queries by.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopSort {
    /// Total time spent (count × average).
    #[default]
    Total,
    Count,
    /// Average latency.
    Avg,
    P99,
    Errors,
    /// Rows sent plus rows affected.
    Rows,
}

impl TopSort {
    /// The name `GET /queries?sort=` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Total => "total",
            Self::Count => "count",
            Self::Avg => "avg",
            Self::P99 => "p99",
            Self::Errors => "errors",
            Self::Rows => "rows",
        }
    }

    /// The key after this one, as the `s` key cycles them.
    pub fn next(self) -> Self {
        match self {
            Self::Total => Self::Count,
            Self::Count => Self::Avg,
            Self::Avg => Self::P99,
            Self::P99 => Self::Errors,
            Self::Errors => Self::Rows,
            Self::Rows => Self::Total,
        }
    }
}

/// Flattens repeated and comma-separated flag values.
pub(super) fn split_list(values: &[String]) -> impl Iterator<Item = &str> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

pub(super) fn cli_error(flag: &str, error: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        origin: ConfigSource::CommandLine,
        key: flag.to_owned(),
        message: error.to_string(),
    }
}

/// Config key prefix -> the flag that can replace it.
pub(super) const FLAG_FOR_KEY: [(&str, &str); 12] = [
    ("instance_id", "--instance-id"),
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
pub(super) fn apply_cli(config: &mut Config, cli: &Cli) -> Result<Vec<&'static str>, ConfigError> {
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
                .map(|a| config.backend_from_flag(a, BackendKind::Rw))
                .map_err(|e| cli_error("--proxy-backend-addresses", e))
        })
        .collect::<Result<Vec<BackendConfig>, _>>()?;
    // Flags name backends of the default pool; the other pools' backends stay, after them.
    if !backends.is_empty() {
        config.backends.retain(|b| b.pool != DEFAULT_POOL);
        config.backends.splice(0..0, backends);
        replaced.push("backends");
    }
    for s in split_list(&cli.proxy_read_only_backend_addresses) {
        let address = s
            .parse()
            .map_err(|e| cli_error("--proxy-read-only-backend-addresses", e))?;
        let backend = config.backend_from_flag(address, BackendKind::Ro);
        let end = config
            .backends
            .iter()
            .take_while(|b| b.pool == DEFAULT_POOL)
            .count();
        config.backends.insert(end, backend);
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
        config.max_connections_chosen = true;
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
    if let Some(id) = &cli.instance_id {
        config.instances.instance_id =
            parse_instance_id(id).map_err(|m| cli_error("--instance-id", m))?;
        replaced.push("instance_id");
    }
    if let Some(format) = cli.log_format {
        config.log_format = format;
        replaced.push("log.format");
    }
    Ok(replaced)
}

/// Points a validation error at the flag when a flag supplied the value, else at the file.
pub(super) fn attribute(error: ConfigError, file: Option<&Path>, replaced: &[&str]) -> ConfigError {
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
