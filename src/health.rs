//! Background health checks: each backend is probed on its own schedule and taken out of rotation
//! after `fall` consecutive failures, put back after `rise` consecutive passes.
//!
//! A check is a short client session of its own rather than a TCP probe, because a server that
//! accepts connections can still be unusable: it may never greet (hung), refuse logins, or be a
//! replica whose replication stopped or fell behind. The monitor speaks just enough of the
//! protocol for that — mysql_native_password login, text queries, a small bounded result-set
//! reader — so no client library (and no connection pool) sits in the proxy. Every byte read is
//! bounded: a check never trusts a length or a row count from the server.
//!
//! The wire parts are plain functions over payloads (unit-tested below); [`check_backend`] strings
//! them together under one overall timeout that names the stage it interrupted.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::auth::decline;
use crate::balancer::{Backend, Transition};
use crate::config::{BackendAddr, HealthCheckConfig};
use crate::leg::Leg;
use crate::protocol::caps::CLIENT_SSL;
use crate::protocol::codec::header;
use crate::protocol::errors::ServerErr;
use crate::protocol::handshake::{
    greeting_scramble, parse_greeting, set_client_bits, ssl_request_for, HandshakeError,
};
use crate::protocol::login::{
    native_answer, native_login, AuthSwitch, LoginError, NATIVE_PLUGIN, REFUSED_PASSWORD,
    REFUSED_USER,
};
use crate::protocol::proxy_out::Version as ProxyVersion;
use crate::protocol::resultset::{column_count, column_name, is_eof, text_row};
use crate::state::ProxyState;
use crate::stream::{read_packet, BackendStream, PacketReadError};
use crate::tls::BackendLeg;

/// Largest packet a check accepts; status rows are a few KiB.
const MAX_PACKET: usize = 1 << 20;
/// Result sets the monitor reads are one row (or one per replication channel).
const MAX_ROWS: usize = 64;
const MAX_COLUMNS: usize = 512;
const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
/// ER_PARSE_ERROR: the server does not know `SHOW REPLICA STATUS` (MariaDB < 10.5, MySQL < 8.0.22).
const ER_PARSE_ERROR: u16 = 1064;

const SELECT_1: &str = "SELECT 1";
const SHOW_REPLICA_STATUS: &str = "SHOW REPLICA STATUS";
const SHOW_SLAVE_STATUS: &str = "SHOW SLAVE STATUS";

/// Column names in MariaDB and MySQL < 8.0.22, then MySQL's newer ones.
const IO_RUNNING: [&str; 2] = ["Slave_IO_Running", "Replica_IO_Running"];
const SQL_RUNNING: [&str; 2] = ["Slave_SQL_Running", "Replica_SQL_Running"];
const SECONDS_BEHIND: [&str; 2] = ["Seconds_Behind_Master", "Seconds_Behind_Source"];

/// A passed check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckOk {
    /// Set when replication was checked and the server is a replica.
    pub replication_lag: Option<Duration>,
    /// The greeting as the server sent it (deferred connects greet clients with it).
    pub greeting: Vec<u8>,
}

/// Where a check was when it failed or ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Connect,
    Greeting,
    Tls,
    Login,
    Query(&'static str),
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Connect => f.write_str("connect"),
            Stage::Greeting => f.write_str("greeting"),
            Stage::Tls => f.write_str("TLS handshake"),
            Stage::Login => f.write_str("login as monitor"),
            Stage::Query(q) => f.write_str(q),
        }
    }
}

/// Why a check failed; the message is what the backend status and the "down" log line show.
#[derive(Debug, Error)]
pub enum CheckError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("greeting: {0}")]
    Greeting(HandshakeError),
    #[error("TLS: {0}")]
    Tls(&'static str),
    #[error("{stage}: no answer within {}", humantime::format_duration(*after))]
    TimedOut { stage: Stage, after: Duration },
    #[error("{stage}: {source}")]
    Io {
        stage: Stage,
        source: PacketReadError,
    },
    #[error("greeting: server lacks {0}, which the monitor needs")]
    OldServer(&'static str),
    #[error("login as monitor: {code} {message}")]
    Denied { code: u16, message: String },
    #[error(
        "login as monitor: the account uses {0}; the monitor user must use mysql_native_password"
    )]
    UnsupportedPlugin(String),
    #[error("{stage}: unexpected packet (first byte {first:#04x})")]
    Unexpected { stage: Stage, first: u8 },
    #[error("{query}: {code} {message}")]
    QueryFailed {
        query: &'static str,
        code: u16,
        message: String,
    },
    #[error("{query}: malformed result: {detail}")]
    BadResult { query: &'static str, detail: String },
    #[error("replication stopped ({column}={value})")]
    ReplicationStopped { column: String, value: String },
    #[error("replication lag unknown ({column} is NULL)")]
    LagUnknown { column: String },
    #[error(
        "replication lag {} exceeds {}",
        humantime::format_duration(*lag),
        humantime::format_duration(*limit)
    )]
    LagTooHigh { lag: Duration, limit: Duration },
}

/// Checks every backend every `cfg.interval` until `shutdown`; returns at once if interval is zero.
///
/// One task per backend so a hung server delays only its own checks; start times are spread over
/// one interval so a large set does not open all its connections in the same instant.
pub async fn run(shared: Arc<ProxyState>, cfg: HealthCheckConfig, shutdown: CancellationToken) {
    if cfg.interval.is_zero() {
        return;
    }
    if cfg.user.is_none() {
        // Said because server logs show it, as "Access denied for user 'mysql-lb-no-login'".
        info!(
            "health checks without health_check.user read the greeting, then end with a login \
             as '{REFUSED_USER}' that the server refuses (an authentication error, which does \
             not count toward max_connect_errors, unlike closing after the greeting)"
        );
    }
    let cfg = Arc::new(cfg);
    let mut reloads = shared.reloads();
    loop {
        // One round per backend set: a reload ends the round and the next checks the new set
        // (kept backends keep their counts, so no check history is lost).
        let round = shutdown.child_token();
        let tasks = TaskTracker::new();
        let set = shared.backends();
        let count = u32::try_from(set.backends().len())
            .unwrap_or(u32::MAX)
            .max(1);
        let start = Instant::now();
        for (i, backend) in (0u32..).zip(set.backends()) {
            let first = start + cfg.interval * i / count;
            tasks.spawn(check_loop(
                Arc::clone(&shared),
                Arc::clone(backend),
                Arc::clone(&cfg),
                first,
                round.clone(),
            ));
        }
        tasks.close();
        let reloaded = tokio::select! {
            _ = shutdown.cancelled() => false,
            changed = reloads.changed() => changed.is_ok(),
        };
        round.cancel();
        tasks.wait().await;
        if !reloaded {
            return;
        }
    }
}

fn check_leg(shared: &ProxyState, backend: &Backend) -> CheckLeg {
    let legs = shared.legs();
    CheckLeg {
        tls: legs.tls.backend(&backend.name).cloned(),
        proxy_protocol: legs.proxy_protocol(&backend.name),
    }
}

async fn check_loop(
    shared: Arc<ProxyState>,
    backend: Arc<Backend>,
    cfg: Arc<HealthCheckConfig>,
    first: Instant,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval_at(first, cfg.interval);
    // A slow check pushes the next one back rather than firing a burst to catch up.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let started = std::time::Instant::now();
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = check_backend_with(&backend.address, check_leg(&shared, &backend), &cfg) => r,
        };
        if cfg.max_replication_lag.is_some() {
            let lag = match &result {
                Ok(ok) => ok.replication_lag.map(|d| d.as_secs_f64()),
                Err(CheckError::LagTooHigh { lag, .. }) => Some(lag.as_secs_f64()),
                Err(_) => Some(f64::NAN),
            };
            shared.metrics.replication_lag(&backend.name, lag);
        }
        let error = match result {
            Ok(ok) => {
                debug!(backend = %backend.name, lag = ?ok.replication_lag, "health check passed");
                backend.learn_raw_greeting(&ok.greeting, shared.session.strip);
                backend.latency.check_round_trip(started.elapsed());
                None
            }
            Err(e) => {
                debug!(backend = %backend.name, error = %e, "health check failed");
                Some(e.to_string())
            }
        };
        let reason = error.clone();
        match shared
            .backends()
            .record_check(&backend, error, cfg.fall, cfg.rise)
        {
            Some(Transition::WentDown) => warn!(
                backend = %backend.name,
                reason = reason.as_deref().unwrap_or(""),
                "backend down: {} failed health checks in a row", cfg.fall
            ),
            Some(Transition::CameUp) => info!(
                backend = %backend.name,
                "backend up: {} passed health checks in a row", cfg.rise
            ),
            None => {}
        }
    }
}

/// One check of one backend: connect and read the greeting; with `cfg.user`, log in and run
/// `SELECT 1`; with `cfg.max_replication_lag`, also judge replication (a server that is not a
/// replica passes). Everything together must finish within `cfg.timeout`.
pub async fn check_backend(
    address: &BackendAddr,
    cfg: &HealthCheckConfig,
) -> Result<CheckOk, CheckError> {
    check_backend_with(address, CheckLeg::default(), cfg).await
}

/// How a check's backend connection starts, as a session's to that backend would.
#[derive(Debug, Clone, Default)]
pub struct CheckLeg {
    /// The backend leg's TLS (see [`check_backend_with`]).
    pub tls: Option<Arc<BackendLeg>>,
    /// A PROXY protocol header first, in the proxy's own name (the check socket's address as
    /// source), so a backend that requires one from the proxy does not refuse the check.
    pub proxy_protocol: Option<ProxyVersion>,
}

/// As [`check_backend`], with the backend leg as sessions use it (TLS, a PROXY protocol
/// header). Where a session would switch to TLS, so does the check (before logging in, if it
/// does), so a backend whose certificate no longer verifies, or that stopped offering TLS its
/// mode requires, is taken out of rotation rather than failing every client.
pub async fn check_backend_with(
    address: &BackendAddr,
    leg: CheckLeg,
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

/// The check user's mysql_native_password login for the greeting `payload`.
fn login_packet(
    payload: &[u8],
    capabilities: u32,
    user: &str,
    password: &str,
) -> Result<Vec<u8>, CheckError> {
    let nonce = greeting_scramble(payload).map_err(CheckError::Greeting)?;
    native_login(capabilities, &nonce, user, password).map_err(|e| match e {
        LoginError::MissingCapability(name) => CheckError::OldServer(name),
        LoginError::UserTooLong => CheckError::BadResult {
            query: "login",
            detail: "user name too long".to_owned(),
        },
    })
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
    leg: &CheckLeg,
    cfg: &HealthCheckConfig,
    stage: &mut Stage,
) -> Result<CheckOk, CheckError> {
    let mut stream = BackendStream::connect(address, cfg.timeout)
        .await
        .map_err(CheckError::Connect)?;
    if let Some(version) = leg.proxy_protocol {
        let own = stream.own_addrs();
        stream
            .send_proxy_header(version, own)
            .await
            .map_err(CheckError::Connect)?;
    }
    let tls = leg.tls.as_deref();
    *stage = Stage::Greeting;
    let mut conn = Conn {
        stream: Leg::Plain(stream),
        buf: BytesMut::with_capacity(1024),
    };
    let greeting = conn.read(Stage::Greeting).await?;
    let payload = &greeting[4..];
    let parsed = parse_greeting(payload).map_err(CheckError::Greeting)?;
    let password = cfg.password.as_deref().unwrap_or("");
    // Without an account, a login the server refuses (see `crate::auth::decline`).
    let mut login = match cfg.user.as_deref() {
        Some(user) => login_packet(payload, parsed.capabilities, user, password)?,
        None => login_packet(payload, parsed.capabilities, REFUSED_USER, REFUSED_PASSWORD)?,
    };
    if let Some(leg) = tls {
        let unix = matches!(address, BackendAddr::Unix(_));
        let offered = parsed.capabilities & CLIENT_SSL != 0;
        if leg.uses_tls(offered, unix).map_err(CheckError::Tls)? {
            *stage = Stage::Tls;
            conn.start_tls(leg, &mut login).await?;
        }
    }
    if cfg.user.is_none() {
        // All a check without credentials can have. The refused login ends the handshake on
        // its own task: it does not change the verdict, nor delay it.
        tokio::spawn(decline(conn.stream, conn.buf, login, cfg.timeout));
        return Ok(CheckOk {
            greeting: greeting.to_vec(),
            ..CheckOk::default()
        });
    }
    *stage = Stage::Login;
    conn.login(&login, password).await?;

    *stage = Stage::Query(SELECT_1);
    conn.query(SELECT_1).await?;
    let mut ok = CheckOk {
        greeting: greeting.to_vec(),
        ..CheckOk::default()
    };
    if let Some(limit) = cfg.max_replication_lag {
        let status = replica_status(&mut conn, stage).await?;
        ok.replication_lag = evaluate_replication(&status, limit)?;
    }
    // Polite goodbye so the server does not log an aborted connection; a failure here changes
    // nothing about the verdict.
    if let Err(e) = conn.stream.write_all(&command(COM_QUIT, b"")).await {
        debug!(error = %e, "health check: COM_QUIT not sent");
    }
    Ok(ok)
}

impl Conn<Leg<BackendStream>> {
    /// An SSLRequest, then the TLS handshake; `login`, the response to send next, gets
    /// CLIENT_SSL and sequence id 2 to match.
    async fn start_tls(&mut self, leg: &BackendLeg, login: &mut [u8]) -> Result<(), CheckError> {
        let Some(connector) = &leg.connector else {
            return Ok(());
        };
        if !self.buf.is_empty() {
            return Err(CheckError::Tls("it sent bytes after its greeting"));
        }
        let _ = set_client_bits(&mut login[4..], CLIENT_SSL, 0);
        login[3] = 2;
        let request = ssl_request_for(&login[4..]).map_err(CheckError::Greeting)?;
        let mut packet = vec![request.len() as u8, 0, 0, 1];
        packet.extend_from_slice(&request);
        self.write(Stage::Tls, &packet).await?;
        let plain = self.stream.take_plain().map_err(|e| CheckError::Io {
            stage: Stage::Tls,
            source: PacketReadError::Io(e),
        })?;
        let tls = connector
            .connect(leg.server_name.clone(), plain)
            .await
            .map_err(|e| CheckError::Io {
                stage: Stage::Tls,
                source: PacketReadError::Io(e),
            })?;
        self.stream = Leg::Tls(Box::new(tokio_rustls::TlsStream::Client(tls)));
        Ok(())
    }
}

/// The monitor's side of one connection: the stream and what was read past the last packet.
struct Conn<S> {
    stream: S,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    async fn read(&mut self, stage: Stage) -> Result<BytesMut, CheckError> {
        read_packet(&mut self.stream, &mut self.buf, MAX_PACKET)
            .await
            .map_err(|source| CheckError::Io { stage, source })
    }

    async fn write(&mut self, stage: Stage, packet: &[u8]) -> Result<(), CheckError> {
        self.stream
            .write_all(packet)
            .await
            .map_err(|e| CheckError::Io {
                stage,
                source: PacketReadError::Io(e),
            })
    }

    /// `response` (a HandshakeResponse41 with mysql_native_password), then at most one
    /// AuthSwitchRequest.
    async fn login(&mut self, response: &[u8], password: &str) -> Result<(), CheckError> {
        self.write(Stage::Login, response).await?;
        let reply = self.read(Stage::Login).await?;
        let seq = reply[3];
        match reply.get(4) {
            Some(0x00) => return Ok(()),
            Some(0xFF) => return Err(denied(&reply[4..])),
            Some(0xFE) => {}
            other => {
                return Err(CheckError::Unexpected {
                    stage: Stage::Login,
                    first: other.copied().unwrap_or(0),
                })
            }
        }
        let switch = AuthSwitch::parse(&reply[4..]);
        if switch.plugin != NATIVE_PLUGIN.as_bytes() {
            return Err(CheckError::UnsupportedPlugin(
                String::from_utf8_lossy(switch.plugin).into_owned(),
            ));
        }
        let packet = native_answer(switch.data, password, seq.wrapping_add(1));
        self.write(Stage::Login, &packet).await?;
        let reply = self.read(Stage::Login).await?;
        match reply.get(4) {
            Some(0x00) => Ok(()),
            Some(0xFF) => Err(denied(&reply[4..])),
            other => Err(CheckError::Unexpected {
                stage: Stage::Login,
                first: other.copied().unwrap_or(0),
            }),
        }
    }

    /// Runs a text query and reads its whole (bounded) result set; an OK reply is an empty one.
    async fn query(&mut self, sql: &'static str) -> Result<ResultSet, CheckError> {
        let stage = Stage::Query(sql);
        self.write(stage, &command(COM_QUERY, sql.as_bytes()))
            .await?;
        let first = self.read(stage).await?;
        let bad = |detail: &str| CheckError::BadResult {
            query: sql,
            detail: detail.to_owned(),
        };
        let columns = match first.get(4) {
            Some(0x00) => return Ok(ResultSet::default()),
            Some(0xFF) => return Err(query_failed(sql, &first[4..])),
            _ => match column_count(&first[4..]) {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                None => return Err(bad("no column count")),
            },
        };
        if columns == 0 || columns > MAX_COLUMNS {
            return Err(bad(&format!("{columns} columns")));
        }
        let mut set = ResultSet::default();
        for _ in 0..columns {
            let def = self.read(stage).await?;
            set.columns
                .push(column_name(&def[4..]).ok_or_else(|| bad("column definition"))?);
        }
        let eof = self.read(stage).await?;
        if !is_eof(&eof[4..]) {
            return Err(bad("no EOF after column definitions"));
        }
        loop {
            let packet = self.read(stage).await?;
            let payload = &packet[4..];
            if is_eof(payload) {
                return Ok(set);
            }
            if payload.first() == Some(&0xFF) {
                return Err(query_failed(sql, payload));
            }
            if set.rows.len() == MAX_ROWS {
                return Err(bad(&format!("more than {MAX_ROWS} rows")));
            }
            set.rows
                .push(text_row(payload, columns).ok_or_else(|| bad("row"))?);
        }
    }
}

/// A text-protocol result set: column names and rows of nullable strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ResultSet {
    columns: Vec<String>,
    rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    fn column(&self, names: &[&str]) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| names.iter().any(|n| c.eq_ignore_ascii_case(n)))
    }
}

/// Passes a server that is not a replica (no row); fails a replica whose IO or SQL thread is not
/// running, whose lag is unknown (NULL) or above `limit`. Returns the largest lag seen.
fn evaluate_replication(
    status: &ResultSet,
    limit: Duration,
) -> Result<Option<Duration>, CheckError> {
    if status.rows.is_empty() {
        return Ok(None);
    }
    let find = |names: &[&str]| {
        status.column(names).ok_or_else(|| CheckError::BadResult {
            query: SHOW_SLAVE_STATUS,
            detail: format!("no column {}", names[0]),
        })
    };
    let io = find(&IO_RUNNING)?;
    let sql = find(&SQL_RUNNING)?;
    let behind = find(&SECONDS_BEHIND)?;
    let mut worst = Duration::ZERO;
    for row in &status.rows {
        for &i in &[io, sql] {
            let value = row.get(i).cloned().flatten();
            if value.as_deref() != Some("Yes") {
                return Err(CheckError::ReplicationStopped {
                    column: status.columns[i].clone(),
                    value: value.unwrap_or_else(|| "NULL".to_owned()),
                });
            }
        }
        let lag = match row.get(behind).cloned().flatten() {
            None => {
                return Err(CheckError::LagUnknown {
                    column: status.columns[behind].clone(),
                })
            }
            Some(text) => match text.trim().parse::<u64>() {
                Ok(secs) => Duration::from_secs(secs),
                Err(_) => {
                    return Err(CheckError::BadResult {
                        query: SHOW_SLAVE_STATUS,
                        detail: format!("{} is {text:?}", status.columns[behind]),
                    })
                }
            },
        };
        if lag > limit {
            return Err(CheckError::LagTooHigh { lag, limit });
        }
        worst = worst.max(lag);
    }
    Ok(Some(worst))
}

fn denied(payload: &[u8]) -> CheckError {
    let ServerErr { code, message } = ServerErr::parse_lenient(payload);
    CheckError::Denied { code, message }
}

fn query_failed(query: &'static str, payload: &[u8]) -> CheckError {
    let ServerErr { code, message } = ServerErr::parse_lenient(payload);
    CheckError::QueryFailed {
        query,
        code,
        message,
    }
}

/// A command packet with sequence id 0 (the monitor's commands are tiny).
fn command(code: u8, arg: &[u8]) -> Vec<u8> {
    let mut packet = header(1 + arg.len(), 0).to_vec();
    packet.push(code);
    packet.extend_from_slice(arg);
    packet
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(io: &str, sql: &str, behind: Option<&str>) -> ResultSet {
        ResultSet {
            columns: [
                "Slave_IO_State",
                "Slave_IO_Running",
                "Slave_SQL_Running",
                "Seconds_Behind_Master",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![vec![
                Some("Waiting for master to send event".into()),
                Some(io.into()),
                Some(sql.into()),
                behind.map(String::from),
            ]],
        }
    }

    const LIMIT: Duration = Duration::from_secs(10);

    #[test]
    fn running_replica_within_limit_passes_with_its_lag() {
        let r = evaluate_replication(&status("Yes", "Yes", Some("3")), LIMIT).unwrap();
        assert_eq!(r, Some(Duration::from_secs(3)));
        let r = evaluate_replication(&status("Yes", "Yes", Some("10")), LIMIT).unwrap();
        assert_eq!(r, Some(LIMIT), "at the limit is still fine");
    }

    #[test]
    fn not_a_replica_passes() {
        let empty = ResultSet {
            rows: Vec::new(),
            ..status("Yes", "Yes", Some("0"))
        };
        assert_eq!(evaluate_replication(&empty, LIMIT).unwrap(), None);
        assert_eq!(
            evaluate_replication(&ResultSet::default(), LIMIT).unwrap(),
            None,
            "an OK instead of a result set"
        );
    }

    #[test]
    fn stopped_threads_fail_naming_the_thread() {
        let e = evaluate_replication(&status("Yes", "No", Some("0")), LIMIT).unwrap_err();
        assert_eq!(e.to_string(), "replication stopped (Slave_SQL_Running=No)");
        let e = evaluate_replication(&status("Connecting", "Yes", None), LIMIT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replication stopped (Slave_IO_Running=Connecting)"
        );
    }

    #[test]
    fn unknown_or_excessive_lag_fails() {
        let e = evaluate_replication(&status("Yes", "Yes", None), LIMIT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replication lag unknown (Seconds_Behind_Master is NULL)"
        );
        let e = evaluate_replication(&status("Yes", "Yes", Some("30")), LIMIT).unwrap_err();
        assert_eq!(e.to_string(), "replication lag 30s exceeds 10s");
        let e = evaluate_replication(&status("Yes", "Yes", Some("soon")), LIMIT).unwrap_err();
        assert!(matches!(e, CheckError::BadResult { .. }), "{e}");
    }

    #[test]
    fn mysql_8_column_names_are_understood() {
        let mut s = status("Yes", "No", Some("0"));
        s.columns = [
            "Replica_IO_State",
            "Replica_IO_Running",
            "Replica_SQL_Running",
            "Seconds_Behind_Source",
        ]
        .map(String::from)
        .to_vec();
        let e = evaluate_replication(&s, LIMIT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replication stopped (Replica_SQL_Running=No)"
        );
        s.columns.pop();
        assert!(matches!(
            evaluate_replication(&s, LIMIT),
            Err(CheckError::BadResult { .. })
        ));
    }

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
