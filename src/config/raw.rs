//! The YAML file as serde reads it (every struct `deny_unknown_fields`), turned into [`Config`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::address::*;
use super::backend::RawBackend;
use super::*;

/// A byte count: an integer, or a string with a binary unit ("64MiB", "1G").
pub(super) struct ByteSize(u64);

pub(super) fn parse_size(s: &str) -> Result<u64, String> {
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
pub(super) struct RawConfig {
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
    shutdown_delay: Option<Duration>,
    watch_config: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    idle_timeout: Option<Duration>,
    tcp_keepalive: Option<super::keepalive::RawKeepalive>,
    worker_threads: Option<usize>,
    max_packet_size: Option<ByteSize>,
    max_handshake_packet_size: Option<ByteSize>,
    #[serde(default)]
    log: RawLog,
    admin_address: Option<String>,
    admin_token_file: Option<PathBuf>,
    peer_token_file: Option<PathBuf>,
    admin_sql: Option<super::admin_sql::RawAdminSql>,
    #[serde(default)]
    query_rules: Vec<super::rules::RawRule>,
    #[serde(default)]
    kill: super::kill::RawKill,
    #[serde(default)]
    digests: super::digests::RawDigests,
    allow_local_infile: Option<bool>,
    backend_socket_user: Option<String>,
    #[serde(default)]
    health_check: RawHealthCheck,
    #[serde(default)]
    balancer: RawBalancer,
    tls: Option<super::tls::RawClientTls>,
    compression: Option<bool>,
    #[serde(default)]
    backend_tls: super::tls::RawBackendTls,
    backend_compression: Option<bool>,
    #[serde(default)]
    pools: super::pools::RawPools,
    pooling: Option<super::pooling::RawPooling>,
    #[serde(default)]
    routes: Vec<super::pools::RawRoute>,
    default_pool: Option<String>,
    connect_mode: Option<super::ConnectMode>,
    reuse_port: Option<bool>,
    instance_id: Option<i64>,
    peers: Option<Vec<super::instances::RawPeer>>,
    peers_from: Option<super::instances::RawPeersFrom>,
    proxy_protocol: Option<ProxyProtocol>,
    #[serde(default)]
    accept_proxy_protocol: Vec<super::accept_proxy::RawCidr>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBalancer {
    policy: Option<Policy>,
    script: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    script_budget: Option<Duration>,
    script_allow_unsafe: Option<bool>,
    ejection: Option<super::ejection::RawEjection>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealthCheck {
    #[serde(default, with = "humantime_serde")]
    interval: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
    fall: Option<u32>,
    rise: Option<u32>,
    user: Option<String>,
    password: Option<String>,
    password_file: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    max_replication_lag: Option<Duration>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    level: Option<String>,
    format: Option<LogFormat>,
}

impl Config {
    /// A backend named by a command-line flag, with the file's backend defaults.
    pub(super) fn backend_from_flag(
        &self,
        address: BackendAddr,
        kind: BackendKind,
    ) -> BackendConfig {
        let mut b = BackendConfig::new(address, None, None, kind);
        b.role = super::roles::declared(None, Some(kind));
        b.tls = self.backend_tls.clone();
        b.compression = self.backend_compression;
        b
    }
}

impl RawConfig {
    pub(super) fn parse(s: &str) -> Result<RawConfig, ConfigError> {
        // An empty (or comment-only) file is an empty mapping, not an error.
        let raw: Option<RawConfig> =
            serde_yaml::from_str(s).map_err(|error| ConfigError::Yaml {
                origin: ConfigSource::Text,
                error,
            })?;
        Ok(raw.unwrap_or_default())
    }

    /// `--balancer` replaces `balancer.policy` before the pools without a `policy:` inherit it.
    pub(super) fn with_policy_flag(mut self, policy: Option<Policy>) -> RawConfig {
        if policy.is_some() {
            self.balancer.policy = policy;
        }
        self
    }

    pub(super) fn into_config(self) -> Result<Config, ConfigError> {
        let d = Config::default();
        let max_handshake_packet_size = match self.max_handshake_packet_size {
            Some(ByteSize(n)) => usize::try_from(n).map_err(|_| {
                ConfigError::invalid("max_handshake_packet_size", format!("{n} is too large"))
            })?,
            None => d.max_handshake_packet_size,
        };
        let backend_tls = self.backend_tls.over(&BackendTls::default());
        let backend_compression = self.backend_compression.unwrap_or(false);
        let pooling = match self.pooling {
            Some(p) => p.into_pooling("pooling")?,
            None => super::Pooling::default(),
        };
        let (backends, pools) = super::pools::build_pools(
            self.backends,
            self.pools,
            (self.balancer.policy.unwrap_or(d.balancer.policy), pooling),
            &backend_tls,
            backend_compression,
        )?;
        let routes: Vec<RouteConfig> = self
            .routes
            .into_iter()
            .map(super::pools::RawRoute::into_route)
            .collect();
        Ok(Config {
            listen: self.listen.unwrap_or(d.listen),
            backends,
            pools,
            pooling,
            connect_mode: self.connect_mode.unwrap_or_default(),
            routes,
            default_pool: self.default_pool,
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            max_connections_chosen: self.max_connections.is_some(),
            max_open_files: self.max_open_files,
            connect_timeout: self.connect_timeout.unwrap_or(d.connect_timeout),
            down_cooloff: self.down_cooloff.unwrap_or(d.down_cooloff),
            handshake_timeout: self.handshake_timeout.unwrap_or(d.handshake_timeout),
            shutdown_timeout: self.shutdown_timeout.unwrap_or(d.shutdown_timeout),
            lifecycle: super::LifecycleConfig::from_raw(self.shutdown_delay, self.watch_config),
            idle_timeout: self.idle_timeout.filter(|t| !t.is_zero()),
            tcp_keepalive: self.tcp_keepalive.map_or(d.tcp_keepalive, |k| k.0),
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
            admin_token_file: self.admin_token_file,
            admin_token: None,
            peer_token_file: self.peer_token_file,
            peer_token: None,
            admin_sql: self.admin_sql.map(|a| a.into_config()).transpose()?,
            query_rules: super::rules::into_config(self.query_rules)?,
            kill: self.kill.into_config(),
            digests: self.digests.into_config()?,
            allow_local_infile: self.allow_local_infile.unwrap_or(d.allow_local_infile),
            backend_socket_user: self.backend_socket_user,
            health_check: self.health_check.into_config(d.health_check)?,
            balancer: {
                let b = self.balancer;
                let db = d.balancer;
                BalancerConfig {
                    policy: b.policy.unwrap_or(db.policy),
                    script: b.script,
                    script_budget: b.script_budget.unwrap_or(db.script_budget),
                    script_allow_unsafe: b.script_allow_unsafe.unwrap_or(db.script_allow_unsafe),
                    ejection: super::ejection::RawEjection::into_config(b.ejection),
                }
            },
            tls: self.tls.map(super::tls::RawClientTls::into_tls),
            compression: self.compression.unwrap_or(d.compression),
            backend_tls,
            backend_compression,
            instances: super::instances::build(
                self.reuse_port,
                self.instance_id,
                self.peers,
                self.peers_from,
            )?,
            proxy_protocol: self.proxy_protocol.unwrap_or_default(),
            accept_proxy_protocol: self
                .accept_proxy_protocol
                .into_iter()
                .map(|c| c.0)
                .collect(),
        })
    }
}

impl RawHealthCheck {
    /// The `health_check:` section, with `d`'s value for every key not given.
    fn into_config(self, d: HealthCheckConfig) -> Result<HealthCheckConfig, ConfigError> {
        if self.password.is_some() && self.password_file.is_some() {
            return Err(ConfigError::invalid(
                "health_check.password_file",
                "set either health_check.password or health_check.password_file, not both",
            ));
        }
        Ok(HealthCheckConfig {
            interval: self.interval.unwrap_or(d.interval),
            timeout: self.timeout.unwrap_or(d.timeout),
            fall: self.fall.unwrap_or(d.fall),
            rise: self.rise.unwrap_or(d.rise),
            user: self.user,
            password: self.password.map(super::Secret::new),
            password_file: self.password_file,
            max_replication_lag: self.max_replication_lag,
        })
    }
}
