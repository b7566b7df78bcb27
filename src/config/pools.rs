//! `pools:`, `routes:`, `default_pool:` and `connect_mode:`: which backends a client may get.
//!
//! The top-level `backends:` list stays what it always was, now the pool named "default"; more
//! named pools sit under `pools:` (a YAML map, read in file order so backend indices are stable).
//! `Config.backends` keeps every backend of every pool in one flat list, so health checks, metrics
//! and reload see backends as before and only routing and the balancer look at `pool`. Routes are
//! checked against the pools and listeners here; they are compiled for matching in `crate::backends::route`.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::backend::RawBackend;
use super::{BackendConfig, BackendTls, Config, ConfigError, ListenAddr, Policy, DEFAULT_POOL};
use crate::config::cidr::Cidr;

/// A named group of backends with its own balancing policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    pub name: String,
    /// The pool's `policy:`, else `balancer.policy`.
    pub policy: Policy,
    /// The pool's `pooling:` (the top-level one for "default").
    pub pooling: super::Pooling,
}

/// One `routes:` entry: every condition given must match for the client to go to `pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// Glob (`*`, `?`) over the user name of the HandshakeResponse; case-sensitive.
    pub user: Option<String>,
    /// Glob over the database the HandshakeResponse names (a client naming none never matches).
    pub schema: Option<String>,
    /// The client's address (unix-socket clients never match).
    pub client: Option<Cidr>,
    /// A `listen:` entry, as `ListenAddr` displays it (`127.0.0.1:3307`, `unix:/path`).
    pub listener: Option<String>,
    pub pool: String,
    /// Its sessions never reach the pool's primary: every transaction runs on a replica, and a
    /// statement that may write is refused (a pool with `read_write_split` only).
    pub read_only: bool,
}

impl RouteConfig {
    /// Whether matching needs the HandshakeResponse (a deferred backend connect).
    pub fn needs_identity(&self) -> bool {
        self.user.is_some() || self.schema.is_some()
    }

    fn has_condition(&self) -> bool {
        self.needs_identity() || self.client.is_some() || self.listener.is_some()
    }
}

/// When a session connects its backend (`connect_mode:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectMode {
    /// Deferred when a route names a user or schema, or some backend is reached over TCP at an
    /// address other than loopback (see [`Config::defers_connect`]); else immediate.
    #[default]
    Auto,
    /// After mysql-lb greeted the client itself and read its HandshakeResponse (user, schema).
    Deferred,
    /// At accept: the backend's greeting is relayed to the client (routes on client address and
    /// listener only).
    Immediate,
}

impl Config {
    /// Whether sessions greet their clients themselves and connect a backend only after the
    /// client's HandshakeResponse.
    ///
    /// `auto` defers for backends that can block the proxy: a server counts every handshake that
    /// ends before a login (a client that connects and closes, as load balancer health checks,
    /// port scans and Kubernetes `tcpSocket` probes do) against the proxy's address, and
    /// `max_connect_errors` of them block it (error 1129) for every client. Loopback and unix
    /// socket connections are never blocked, so those keep the cheaper immediate connect.
    pub fn defers_connect(&self) -> bool {
        match self.connect_mode {
            ConnectMode::Deferred => true,
            ConnectMode::Immediate => false,
            ConnectMode::Auto => {
                self.routes.iter().any(RouteConfig::needs_identity)
                    // A split places each login by its user (`proxy/session/connect.rs`).
                    || self.pools.iter().any(|p| p.pooling.read_write_split)
                    || self.backends.iter().any(|b| b.address.is_blockable())
            }
        }
    }

    /// The warning to log at start when `connect_mode: immediate` connects backends that can
    /// block the proxy's address.
    pub fn connect_mode_warning(&self) -> Option<String> {
        if self.connect_mode != ConnectMode::Immediate {
            return None;
        }
        let remote: Vec<&str> = self
            .backends
            .iter()
            .filter(|b| b.address.is_blockable())
            .map(|b| b.name.as_str())
            .collect();
        if remote.is_empty() {
            return None;
        }
        Some(format!(
            "connect_mode: immediate opens a backend connection for every client connection, \
             TCP probes and port scans included; mysql-lb ends it with a refused login when the \
             client leaves (servers log an access denied), but a client silent past the \
             server's connect_timeout still counts as a connect error on {}, and \
             max_connect_errors of those block this host there (error 1129); auto (the default) \
             connects only once the client has sent its login",
            remote.join(", ")
        ))
    }
}

/// One `pools:` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    policy: Option<Policy>,
    pooling: Option<super::pooling::RawPooling>,
    #[serde(default)]
    backends: Vec<RawBackend>,
}

/// `pools:` in file order (a serde map into a HashMap would lose it).
#[derive(Default)]
pub(super) struct RawPools(Vec<(String, RawPool)>);

impl<'de> Deserialize<'de> for RawPools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawPools;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of pool name to {policy, backends}")
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawPools, E> {
                Ok(RawPools::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPools, A::Error> {
                let mut pools: Vec<(String, RawPool)> = Vec::new();
                while let Some((name, pool)) = map.next_entry::<String, RawPool>()? {
                    if pools.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!("duplicate pool name `{name}`")));
                    }
                    pools.push((name, pool));
                }
                Ok(RawPools(pools))
            }
        }
        d.deserialize_map(V)
    }
}

/// Backends and pools from `backends:` and `pools:`: the flat list ("default" first) and one
/// `PoolConfig` per pool. A pool with no backend is kept, for `validate` to name.
pub(super) fn build_pools(
    default_backends: Vec<RawBackend>,
    pools: RawPools,
    (policy, pooling): (Policy, super::Pooling),
    tls: &BackendTls,
    compression: bool,
) -> Result<(Vec<BackendConfig>, Vec<PoolConfig>), ConfigError> {
    let mut backends: Vec<BackendConfig> = default_backends
        .into_iter()
        .map(|b| b.into_backend(tls, compression))
        .collect();
    let mut configs = Vec::with_capacity(pools.0.len() + 1);
    if !backends.is_empty() {
        configs.push(PoolConfig {
            name: DEFAULT_POOL.to_owned(),
            policy,
            pooling,
        });
    }
    for (name, raw) in pools.0 {
        if name == DEFAULT_POOL {
            return Err(ConfigError::invalid(
                format!("pools.{name}"),
                "\"default\" is the pool of the top-level `backends:` list (with balancer.policy); \
                 list those backends there, or name this pool otherwise and set default_pool",
            ));
        }
        backends.extend(raw.backends.into_iter().map(|b| {
            let mut b = b.into_backend(tls, compression);
            b.pool.clone_from(&name);
            b
        }));
        let pooling = match raw.pooling {
            Some(p) => p.into_pooling(&format!("pools.{name}.pooling"))?,
            None => super::Pooling::default(),
        };
        configs.push(PoolConfig {
            name,
            policy: raw.policy.unwrap_or(policy),
            pooling,
        });
    }
    Ok((backends, configs))
}

/// One `routes:` entry as written; addresses and networks are parsed by serde, so a bad one is
/// reported with its line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    user: Option<String>,
    schema: Option<String>,
    #[serde(default, deserialize_with = "cidr")]
    client: Option<Cidr>,
    listener: Option<ListenAddr>,
    pool: String,
    #[serde(default)]
    read_only: bool,
}

/// Parses inside `deserialize_str`, so serde_yaml puts the key path on the error.
fn cidr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cidr>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Cidr;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a network such as 10.0.0.0/8 or \"fd00::/8\", or an IP address")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Cidr, E> {
            v.parse().map_err(E::custom)
        }
    }
    d.deserialize_str(V).map(Some)
}

impl RawRoute {
    pub(super) fn into_route(self) -> RouteConfig {
        RouteConfig {
            user: self.user,
            schema: self.schema,
            client: self.client,
            listener: self.listener.map(|l| l.to_string()),
            pool: self.pool,
            read_only: self.read_only,
        }
    }
}

impl Config {
    /// Gives every backend's pool a `PoolConfig` (backends built in code or given by flags have
    /// none yet), groups `backends` by pool in pool order, and resolves an absent `default_pool`.
    pub(super) fn complete_pools(&mut self) {
        for b in &self.backends {
            if !self.pools.iter().any(|p| p.name == b.pool) {
                let pool = PoolConfig {
                    name: b.pool.clone(),
                    policy: self.balancer.policy,
                    // The top-level `pooling:` is the default pool's, backends from flags too.
                    pooling: if b.pool == DEFAULT_POOL {
                        self.pooling
                    } else {
                        super::Pooling::default()
                    },
                };
                if b.pool == DEFAULT_POOL {
                    self.pools.insert(0, pool);
                } else {
                    self.pools.push(pool);
                }
            }
        }
        let pools = &self.pools;
        // Stable: each pool's backends keep their order.
        self.backends
            .sort_by_key(|b| pools.iter().position(|p| p.name == b.pool));
        if self.default_pool.is_none() && self.pool_exists(DEFAULT_POOL) {
            self.default_pool = Some(DEFAULT_POOL.to_owned());
        }
    }

    fn pool_exists(&self, name: &str) -> bool {
        self.pools.iter().any(|p| p.name == name)
    }

    /// Where backend `i` of the flat list was written: `backends[j]` or `pools.NAME.backends[j]`.
    pub(super) fn backend_key(&self, i: usize) -> String {
        let Some(b) = self.backends.get(i) else {
            return format!("backends[{i}]");
        };
        let j = self.backends[..i]
            .iter()
            .filter(|o| o.pool == b.pool)
            .count();
        if b.pool == DEFAULT_POOL {
            format!("backends[{j}]")
        } else {
            format!("pools.{}.backends[{j}]", b.pool)
        }
    }

    fn unknown_pool(&self, key: String, name: &str) -> ConfigError {
        let names: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
        ConfigError::invalid(
            key,
            format!("unknown pool \"{name}\" (pools: {})", names.join(", ")),
        )
    }

    /// Pool names, a backend in every pool, and `default_pool`.
    pub(super) fn validate_pools(&self) -> Result<(), ConfigError> {
        for (i, p) in self.pools.iter().enumerate() {
            if p.name.trim().is_empty() || p.name.contains(char::is_control) {
                return Err(ConfigError::invalid(
                    "pools",
                    format!("pool name {:?} must be non-empty printable text", p.name),
                ));
            }
            if self.pools[..i].iter().any(|o| o.name == p.name) {
                return Err(ConfigError::invalid(
                    format!("pools.{}", p.name),
                    "duplicate pool name",
                ));
            }
            if !self.backends.iter().any(|b| b.pool == p.name) {
                return Err(ConfigError::invalid(
                    format!("pools.{}.backends", p.name),
                    "no backend: a pool needs at least one",
                ));
            }
        }
        if let Some(name) = &self.default_pool {
            if !self.pool_exists(name) {
                return Err(self.unknown_pool("default_pool".to_owned(), name));
            }
        }
        Ok(())
    }

    /// Each route: a condition, sound patterns, a known pool and listener; and `connect_mode`.
    pub(super) fn validate_routes(&self) -> Result<(), ConfigError> {
        for (i, r) in self.routes.iter().enumerate() {
            let key = |field: &str| format!("routes[{i}].{field}");
            if !r.has_condition() {
                return Err(ConfigError::invalid(
                    format!("routes[{i}]"),
                    "no condition: give user, schema, client or listener \
                     (for clients no route matches, use default_pool)",
                ));
            }
            for (field, pattern) in [("user", &r.user), ("schema", &r.schema)] {
                if let Some(p) = pattern {
                    check_pattern(p, field).map_err(|m| ConfigError::invalid(key(field), m))?;
                }
            }
            if let Some(l) = &r.listener {
                let listen: Vec<String> = self.listen.iter().map(ToString::to_string).collect();
                if !listen.contains(l) {
                    return Err(ConfigError::invalid(
                        key("listener"),
                        format!(
                            "`{l}` is not a listen address (listen: {})",
                            listen.join(", ")
                        ),
                    ));
                }
            }
            if !self.pool_exists(&r.pool) {
                return Err(self.unknown_pool(key("pool"), &r.pool));
            }
            let splits = self
                .pools
                .iter()
                .any(|p| p.name == r.pool && p.pooling.read_write_split);
            if r.read_only && !splits {
                return Err(ConfigError::invalid(
                    key("read_only"),
                    format!(
                        "needs pool {} to split reads from writes (`pooling.read_write_split: \
                         true`): only a split sends each transaction to a replica",
                        r.pool
                    ),
                ));
            }
        }
        if self.connect_mode == super::ConnectMode::Immediate {
            if let Some(i) = self.routes.iter().position(RouteConfig::needs_identity) {
                return Err(ConfigError::invalid(
                    "connect_mode",
                    format!(
                        "immediate connects before the client names its user and schema, \
                         but routes[{i}] matches on them; use auto or deferred"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A user or schema glob: anything but empty or control characters.
fn check_pattern(pattern: &str, what: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err(format!(
            "empty pattern (it could only match an empty {what}); use \"*\" for any"
        ));
    }
    if pattern.contains(char::is_control) {
        return Err(format!("pattern {pattern:?} contains a control character"));
    }
    Ok(())
}
