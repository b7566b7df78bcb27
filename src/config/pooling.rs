//! `pooling:` (the default pool's, at the top level) and `pools.NAME.pooling:`: whether a pool's
//! sessions share server connections between transactions, and the bounds of that sharing.
//!
//! Session mode (the default) is one server connection per client connection for life.
//! Transaction mode lets a session that holds no state give its connection back between
//! transactions; see `crate::backends::pooling`.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// How a pool's sessions hold server connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolingMode {
    /// One server connection per client connection, for its whole life.
    #[default]
    Session,
    /// Server connections are shared between transactions among the sessions of one user.
    Transaction,
}

/// A pool's `pooling:` as applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pooling {
    pub mode: PoolingMode,
    /// Server connections per backend of the pool, logins in progress included.
    pub max_server_connections: usize,
    /// An idle server connection is closed after this long (one per user with live sessions
    /// is kept).
    pub idle_timeout: Duration,
    /// How long a statement or a login waits for a server connection before an ERR.
    pub wait_timeout: Duration,
    /// Whether a session may run each transaction on any backend of its pool, on a connection
    /// of its key another client logged in (the operator's statement that every backend of the
    /// pool has the same accounts: replicas of one primary, a Galera cluster).
    pub across_backends: bool,
    /// Each transaction goes where its first statement may run: a pure read in autocommit to a
    /// replica, everything else to the pool's primary (`wire::sql::route`). Needs roles in the
    /// pool and `across_backends`.
    pub read_write_split: bool,
    /// What a read sent to a replica must see (with `read_write_split`).
    pub causal_reads: CausalReads,
    /// How long a read waits for a replica to apply what it must see before it goes to the
    /// primary instead.
    pub causal_timeout: Duration,
    /// Where a split's read goes when no replica may take it (every one down, drained or past
    /// `health_check.max_replication_lag`).
    pub reads_without_replica: ReadsWithoutReplica,
}

/// Where a split's read goes when no replica may take it (`pooling.reads_without_replica`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadsWithoutReplica {
    /// To the primary, as any read no replica has a connection for.
    #[default]
    Primary,
    /// Nowhere: an ERR naming the replicas and why each is out (for a primary that must not
    /// take the replicas' reads).
    Error,
}

/// Which writes a read sent to a replica must see (`pooling.causal_reads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CausalReads {
    /// Whatever the replica has applied.
    None,
    /// The session's own writes (read-your-writes).
    #[default]
    Session,
    /// Every write committed through this proxy's pool before the read began.
    Global,
}

impl Default for Pooling {
    fn default() -> Self {
        Pooling {
            mode: PoolingMode::Session,
            max_server_connections: 100,
            idle_timeout: Duration::from_secs(60),
            wait_timeout: Duration::from_secs(5),
            across_backends: false,
            read_write_split: false,
            causal_reads: CausalReads::default(),
            causal_timeout: Duration::from_secs(1),
            reads_without_replica: ReadsWithoutReplica::Primary,
        }
    }
}

impl Pooling {
    /// Whether sessions share server connections.
    pub fn shares(&self) -> bool {
        self.mode == PoolingMode::Transaction
    }
}

/// `pooling:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPooling {
    mode: Option<PoolingMode>,
    max_server_connections: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    idle_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    wait_timeout: Option<Duration>,
    across_backends: Option<bool>,
    read_write_split: Option<bool>,
    causal_reads: Option<CausalReads>,
    #[serde(default, with = "humantime_serde")]
    causal_timeout: Option<Duration>,
    reads_without_replica: Option<ReadsWithoutReplica>,
}

impl RawPooling {
    /// The applied settings; `key` names where they were written, for errors.
    pub(super) fn into_pooling(self, key: &str) -> Result<Pooling, ConfigError> {
        let d = Pooling::default();
        let pooling = Pooling {
            mode: self.mode.unwrap_or(d.mode),
            max_server_connections: self
                .max_server_connections
                .unwrap_or(d.max_server_connections),
            idle_timeout: self.idle_timeout.unwrap_or(d.idle_timeout),
            wait_timeout: self.wait_timeout.unwrap_or(d.wait_timeout),
            across_backends: self.across_backends.unwrap_or(d.across_backends),
            read_write_split: self.read_write_split.unwrap_or(d.read_write_split),
            causal_reads: self.causal_reads.unwrap_or(d.causal_reads),
            causal_timeout: self.causal_timeout.unwrap_or(d.causal_timeout),
            reads_without_replica: self
                .reads_without_replica
                .unwrap_or(d.reads_without_replica),
        };
        if pooling.read_write_split && !pooling.across_backends {
            return Err(ConfigError::invalid(
                format!("{key}.read_write_split"),
                "needs `mode: transaction` and `across_backends: true`: a transaction goes to \
                 the backend its first statement may run on, on a connection of its user there",
            ));
        }
        if pooling.across_backends && !pooling.shares() {
            return Err(ConfigError::invalid(
                format!("{key}.across_backends"),
                "needs `mode: transaction`: only sessions that share server connections can \
                 take another backend's",
            ));
        }
        if pooling.max_server_connections < 2 {
            return Err(ConfigError::invalid(
                format!("{key}.max_server_connections"),
                "must be at least 2: every login takes a fresh server connection, so a second \
                 session of a user needs room for its own before the two can share one",
            ));
        }
        for (field, value) in [
            ("idle_timeout", pooling.idle_timeout),
            ("wait_timeout", pooling.wait_timeout),
            ("causal_timeout", pooling.causal_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::invalid(
                    format!("{key}.{field}"),
                    "must be > 0",
                ));
            }
        }
        Ok(pooling)
    }
}
