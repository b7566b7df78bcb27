//! One health check of one backend: the stages it goes through (connect, greeting, TLS, login,
//! queries) under one overall timeout that names the stage it interrupted, and the errors that
//! say which stage failed and why.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::conn::{self, Conn, ResultSet};
use super::error::SHOW_SLAVE_STATUS;
pub use super::error::{CheckError, Stage};
use super::replication::evaluate_replication;
use crate::config::{BackendAddr, HealthCheckConfig};
use crate::net::stream::identity::SocketIdentity;
use crate::net::tls::BackendTlsConnector;
use crate::wire::protocol::proxy_out::Version as ProxyVersion;

/// ER_PARSE_ERROR: the server does not know `SHOW REPLICA STATUS` (MariaDB < 10.5, MySQL < 8.0.22).
const ER_PARSE_ERROR: u16 = 1064;

const SELECT_1: &str = "SELECT 1";
const SHOW_REPLICA_STATUS: &str = "SHOW REPLICA STATUS";

/// A passed check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckOk {
    /// Set when replication was checked and the server is a replica.
    pub replication_lag: Option<Duration>,
    /// The greeting as the server sent it (deferred connects greet clients with it).
    pub greeting: Vec<u8>,
}

/// Connects `address` as a session would (`leg`: its PROXY protocol header in the proxy's own
/// name, TLS as its mode says) only to read its greeting, as a check without an account does:
/// the connection ends with a login the server refuses, on its own task. Returns the greeting
/// as the server sent it; `within` bounds it all.
pub(crate) async fn greeting_of(
    address: &BackendAddr,
    leg: &OwnConnectOptions,
    within: Duration,
) -> Result<Vec<u8>, CheckError> {
    let mut stage = Stage::Connect;
    let greeted = conn::greet(address, leg, within, &mut stage);
    match tokio::time::timeout(within, greeted).await {
        Ok(result) => result,
        Err(_) => Err(CheckError::TimedOut {
            stage,
            after: within,
        }),
    }
}

/// One check of one backend: connect and read the greeting; with `cfg.user`, log in and run
/// `SELECT 1`; with `cfg.max_replication_lag`, also judge replication (a server that is not a
/// replica passes). Everything together must finish within `cfg.timeout`.
pub async fn check_backend(
    address: &BackendAddr,
    cfg: &HealthCheckConfig,
) -> Result<CheckOk, CheckError> {
    check_backend_with(address, OwnConnectOptions::default(), cfg).await
}

/// How a connection of the proxy's own to a backend (a health check, a KILL run elsewhere, the
/// identity check) starts, as a session's to that backend would.
#[derive(Debug, Clone)]
pub struct OwnConnectOptions {
    /// The backend leg's TLS (see [`check_backend_with`]).
    pub tls: Option<Arc<BackendTlsConnector>>,
    /// A PROXY protocol header first, in the proxy's own name (the check socket's address as
    /// source), so a backend that requires one from the proxy does not refuse the check.
    pub proxy_protocol: Option<ProxyVersion>,
    /// Who a unix-socket backend sees as the check's peer: the sessions' identity.
    pub socket_identity: Arc<SocketIdentity>,
}

impl Default for OwnConnectOptions {
    /// No TLS, no PROXY header, and this process's own OS identity (for a check run by hand).
    fn default() -> Self {
        OwnConnectOptions {
            tls: None,
            proxy_protocol: None,
            socket_identity: Arc::new(SocketIdentity::own()),
        }
    }
}

/// As [`check_backend`], with the backend leg as sessions use it (TLS, a PROXY protocol
/// header). Where a session would switch to TLS, so does the check (before logging in, if it
/// does), so a backend whose certificate no longer verifies, or that stopped offering TLS its
/// mode requires, is taken out of rotation rather than failing every client.
pub async fn check_backend_with(
    address: &BackendAddr,
    leg: OwnConnectOptions,
    cfg: &HealthCheckConfig,
) -> Result<CheckOk, CheckError> {
    let mut stage = Stage::Connect;
    let outcome =
        tokio::time::timeout(cfg.timeout, check_stages(address, &leg, cfg, &mut stage)).await;
    match outcome {
        Ok(result) => result,
        Err(_) => Err(CheckError::TimedOut {
            stage,
            after: cfg.timeout,
        }),
    }
}

/// `SHOW REPLICA STATUS`, or `SHOW SLAVE STATUS` on a server that does not know the former.
async fn replica_status<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    stage: &mut Stage,
) -> Result<ResultSet, CheckError> {
    *stage = Stage::Query(SHOW_REPLICA_STATUS);
    match conn.query(SHOW_REPLICA_STATUS).await {
        Err(CheckError::QueryFailed {
            code: ER_PARSE_ERROR,
            ..
        }) => {
            *stage = Stage::Query(SHOW_SLAVE_STATUS);
            conn.query(SHOW_SLAVE_STATUS).await
        }
        other => other,
    }
}

async fn check_stages(
    address: &BackendAddr,
    leg: &OwnConnectOptions,
    cfg: &HealthCheckConfig,
    stage: &mut Stage,
) -> Result<CheckOk, CheckError> {
    let Some(user) = cfg.user.as_deref() else {
        // All a check without credentials can have; the connection ends with a login the
        // server refuses, on its own task (see `conn::greet`).
        let greeting = conn::greet(address, leg, cfg.timeout, stage).await?;
        return Ok(CheckOk {
            greeting,
            ..CheckOk::default()
        });
    };
    let password = cfg.password.as_ref().map_or("", |p| p.expose());
    let (mut conn, greeting) =
        conn::open(address, leg, (user, password), cfg.timeout, stage).await?;
    let mut ok = CheckOk {
        greeting,
        ..CheckOk::default()
    };
    *stage = Stage::Query(SELECT_1);
    conn.query(SELECT_1).await?;
    if let Some(limit) = cfg.max_replication_lag {
        let status = replica_status(&mut conn, stage).await?;
        ok.replication_lag = evaluate_replication(&status, limit)?;
    }
    conn.quit().await;
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_stage_then_cause() {
        let e = CheckError::TimedOut {
            stage: Stage::Greeting,
            after: Duration::from_millis(500),
        };
        assert_eq!(e.to_string(), "greeting: no answer within 500ms");
        let e = CheckError::Denied {
            code: 1045,
            message: "Access denied for user 'mon'@'localhost' (using password: YES)".into(),
        };
        assert!(e
            .to_string()
            .starts_with("login as monitor: 1045 Access denied"));
    }
}
