//! One health check of one backend: the stages it goes through (connect, greeting, TLS, login,
//! queries, over the proxy's own client, `crate::backends::client`) under one overall timeout
//! that names the stage it interrupted.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::error::{CheckError, SHOW_SLAVE_STATUS};
use super::replication::evaluate_replication;
use crate::backends::client::{self, Conn, OwnConnectOptions, ResultSet, Stage};
use crate::config::{BackendAddr, HealthCheckConfig};

/// ER_PARSE_ERROR: the server does not know `SHOW REPLICA STATUS` (MariaDB < 10.5, MySQL < 8.0.22).
const ER_PARSE_ERROR: u16 = 1064;

/// The login's query: the server answers a statement, and says whether it takes writes (a
/// pool's roles follow it, `balancer::roles`).
const SELECT_READ_ONLY: &str = "SELECT @@read_only";
/// The same on MariaDB, with the GTID position the server has applied (read-your-writes
/// through a split sends a read where it is covered without a wait).
const SELECT_READ_ONLY_GTID: &str = "SELECT @@read_only, @@gtid_current_pos";
/// The same on MySQL 5.6.5 and later: its GTID set (empty with `gtid_mode=OFF`).
const SELECT_READ_ONLY_EXECUTED: &str = "SELECT @@read_only, @@GLOBAL.gtid_executed";

/// The login's query for the server `greeting` (the packet, header first) names: its
/// `@@read_only`, and the GTID position it has applied where it has one.
fn login_query(greeting: &[u8]) -> &'static str {
    let version = greeting
        .get(5..)
        .and_then(|v| v.split(|b| *b == 0).next())
        .unwrap_or_default();
    match crate::wire::sql::Server::from_greeting(version) {
        Some(s) if s.mariadb => SELECT_READ_ONLY_GTID,
        Some(s) if s.version >= 50_605 => SELECT_READ_ONLY_EXECUTED,
        _ if greeting.windows(7).any(|w| w == b"MariaDB") => SELECT_READ_ONLY_GTID,
        _ => SELECT_READ_ONLY,
    }
}
const SHOW_REPLICA_STATUS: &str = "SHOW REPLICA STATUS";

/// A passed check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckOk {
    /// Set when replication was checked and the server is a replica.
    pub replication_lag: Option<Duration>,
    /// The greeting as the server sent it (deferred connects greet clients with it).
    pub greeting: Vec<u8>,
    /// `@@read_only`, when the check logged in.
    pub read_only: Option<bool>,
    /// `@@gtid_current_pos` of a MariaDB server, `@@gtid_executed` of a MySQL one, when the
    /// check logged in.
    pub gtid_position: Option<String>,
}

/// One check of one backend: connect and read the greeting; with `cfg.user`, log in and read
/// `@@read_only`; with `cfg.max_replication_lag`, also judge replication (a server that is not a
/// replica passes). Everything together must finish within `cfg.timeout`.
pub async fn check_backend(
    address: &BackendAddr,
    cfg: &HealthCheckConfig,
) -> Result<CheckOk, CheckError> {
    check_backend_with(address, OwnConnectOptions::default(), cfg).await
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
        Err(_) => Err(client::Error::TimedOut {
            stage,
            after: cfg.timeout,
        }
        .into()),
    }
}

/// `SHOW REPLICA STATUS`, or `SHOW SLAVE STATUS` on a server that does not know the former.
async fn replica_status<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    stage: &mut Stage,
) -> Result<ResultSet, client::Error> {
    *stage = Stage::Query(SHOW_REPLICA_STATUS);
    match conn.query(SHOW_REPLICA_STATUS).await {
        Err(client::Error::QueryFailed {
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
        // server refuses, on its own task (see `client::greet`).
        let greeting = client::greet(address, leg, cfg.timeout, stage).await?;
        return Ok(CheckOk {
            greeting,
            ..CheckOk::default()
        });
    };
    let password = cfg.password.as_ref().map_or("", |p| p.expose());
    let (mut conn, greeting) =
        client::open(address, leg, (user, password), cfg.timeout, stage).await?;
    let mut ok = CheckOk {
        greeting,
        ..CheckOk::default()
    };
    let query = login_query(&ok.greeting);
    *stage = Stage::Query(query);
    let answer = conn.query(query).await?;
    let row = answer.rows.first();
    ok.read_only = row.and_then(|row| row.first()).map(|v| {
        v.as_deref()
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("OFF"))
    });
    ok.gtid_position = row.and_then(|row| row.get(1)).and_then(Clone::clone);
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

    /// A greeting packet (header, protocol 10, the version, NUL, then the rest), as the
    /// protocol documentation lays it out; no MySQL server runs here, so MySQL's are fixtures.
    fn greeting(version: &str) -> Vec<u8> {
        let mut payload = vec![10];
        payload.extend_from_slice(version.as_bytes());
        payload.push(0);
        payload.extend_from_slice(&[1, 0, 0, 0]);
        let mut packet = vec![payload.len() as u8, 0, 0, 0];
        packet.extend_from_slice(&payload);
        packet
    }

    #[test]
    fn the_login_asks_each_server_for_the_position_it_keeps() {
        for (version, query) in [
            ("5.5.5-10.11.6-MariaDB-0+deb12u1", SELECT_READ_ONLY_GTID),
            ("11.4.2-MariaDB", SELECT_READ_ONLY_GTID),
            ("8.0.36", SELECT_READ_ONLY_EXECUTED),
            ("8.4.0-commercial", SELECT_READ_ONLY_EXECUTED),
            ("5.6.5-m8-log", SELECT_READ_ONLY_EXECUTED),
            ("5.6.4-log", SELECT_READ_ONLY),
            ("5.5.62", SELECT_READ_ONLY),
            ("garbage", SELECT_READ_ONLY),
        ] {
            assert_eq!(login_query(&greeting(version)), query, "{version}");
        }
        assert_eq!(login_query(&[]), SELECT_READ_ONLY);
    }
}
