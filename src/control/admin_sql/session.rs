//! One admin connection: the greeting, TLS, the login checked against the configured hash, then
//! one statement at a time until the client quits.
//!
//! The login is refused the way a server refuses it (ERR 1045 after the plugin exchange, the
//! same answer for an unknown user as for a wrong password), and logged with the caller's
//! address. A packet over [`MAX_PACKET`] or a malformed one ends the connection with an ERR.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info};

use super::commands::{self, BackendOp, Show, Statement};
use super::engine::{self, QueryError};
use crate::config::{AdminAccount, AdminCredential};
use crate::control::admin::{ops, Recent};
use crate::net::leg::{LegStream, TlsSocket};
use crate::proxy::state::ProxyState;
use crate::wire::protocol::codec::MAX_CHUNK;
use crate::wire::protocol::errors::{code, err_packet, pre_greeting_err, sqlstate_for};
use crate::wire::protocol::handshake::{auth_answer, nonce_from, parse_client_first, ClientFirst};
use crate::wire::protocol::serving::{self, packet, ResultSet};
use crate::wire::protocol::{caps, cmd};

/// The longest packet the admin port reads (a statement, a login).
pub const MAX_PACKET: usize = 1 << 20;

/// An admin connection that sends nothing this long is closed (its slot is one of few).
const IDLE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// ER_UNKNOWN_COM_ERROR, ER_PARSE_ERROR, ER_NOT_SUPPORTED_AUTH_MODE's neighbours.
const UNKNOWN_COMMAND: u16 = 1047;
const PARSE_ERROR: u16 = 1064;

type Leg = LegStream<TcpStream>;

/// One accepted admin connection.
pub(super) struct AdminSession {
    pub state: Arc<ProxyState>,
    pub recent: Arc<Recent>,
    pub peer: SocketAddr,
    pub id: u32,
    /// The port listens on loopback: off it, only TLS logins are served, whatever a reload
    /// made of `tls.require` since.
    pub loopback: bool,
}

/// How a connection ends early: with an ERR the client was sent, or without a word.
enum Ended {
    /// The ERR packet the client was sent (or is about to be, by [`AdminSession::said`]), and
    /// why, for the log.
    Refused(Vec<u8>, String),
    Gone(String),
}

/// What a statement is answered with.
enum Reply {
    Ok,
    Rows(ResultSet),
    Err(u16, String),
}

impl AdminSession {
    /// Serves the connection to its end; `slot` None: over [`super::MAX_CONNECTIONS`].
    pub async fn run(self, mut stream: TcpStream, slot: Option<OwnedSemaphorePermit>) {
        let _ = stream.set_nodelay(true);
        if slot.is_none() {
            let refusal =
                pre_greeting_err(code::TOO_MANY_CONNECTIONS, "too many admin connections");
            let _ = stream.write_all(&refusal).await;
            info!(caller = %self.peer, "admin SQL connection refused: {} already open", super::MAX_CONNECTIONS);
            return;
        }
        let timeout = self.state.session.handshake_timeout;
        let leg = match tokio::time::timeout(timeout, self.login(stream)).await {
            Ok(Ok(leg)) => leg,
            Ok(Err(Ended::Refused(_, why))) => {
                info!(caller = %self.peer, "admin SQL login refused: {why}");
                return;
            }
            Ok(Err(Ended::Gone(why))) => {
                debug!(caller = %self.peer, "admin SQL connection ended in its login: {why}");
                return;
            }
            Err(_) => {
                info!(caller = %self.peer, "admin SQL login timed out");
                return;
            }
        };
        if let Err(why) = self.commands(leg).await {
            debug!(caller = %self.peer, "admin SQL connection ended: {why}");
        }
    }

    /// Greets, switches to TLS when asked, and checks the login; the leg once it is accepted.
    async fn login(&self, stream: TcpStream) -> Result<Leg, Ended> {
        let transport = self.state.transport_settings();
        let tls = transport.tls.client.as_ref();
        let mut random = [0u8; 32];
        getrandom::getrandom(&mut random)
            .map_err(|e| Ended::Gone(format!("no randomness: {e}")))?;
        let nonce = nonce_from(&random);
        let offered = serving::ADMIN_CAPABILITIES | tls.map_or(0, |_| caps::CLIENT_SSL);
        let mut leg = LegStream::Plain(stream);
        let greeting = serving::greeting(super::VERSION, self.id, &nonce, offered);
        send(&mut leg, &packet(0, &greeting)).await?;
        let (mut seq, mut first) = read_packet(&mut leg).await?;
        let mut parsed = parse_client_first(&first);
        if let Ok(ClientFirst::SslRequest { .. }) = parsed {
            let Some(tls) = tls else {
                return Err(Ended::Gone("TLS asked for, and none offered".into()));
            };
            let LegStream::Plain(socket) = leg else {
                return Err(Ended::Gone("TLS asked for twice".into()));
            };
            let secured = TlsSocket::accept(Arc::clone(&tls.config), socket)
                .await
                .map_err(|e| Ended::Gone(format!("TLS handshake: {e}")))?;
            leg = LegStream::Tls(Box::new(secured));
            (seq, first) = read_packet(&mut leg).await?;
            parsed = parse_client_first(&first);
        }
        let refuse = |seq: u8, code: u16, message: String| {
            Ended::Refused(
                err_packet(seq, code, Some(sqlstate_for(code)), &message),
                message,
            )
        };
        let response = match parsed {
            Ok(ClientFirst::Response(r)) => r,
            Ok(ClientFirst::SslRequest { .. }) => {
                return Err(Ended::Gone("a second SSLRequest".into()))
            }
            Err(e) => {
                let message = format!("bad handshake: {e}");
                let ended = refuse(seq.wrapping_add(1), code::HANDSHAKE_ERROR, message);
                return Err(self.said(&mut leg, ended).await);
            }
        };
        if (tls.is_some_and(|t| t.require) || !self.loopback) && !leg.is_tls() {
            let message = "connections using insecure transport are prohibited (tls.require)";
            let ended = refuse(
                seq.wrapping_add(1),
                code::SECURE_TRANSPORT_REQUIRED,
                message.into(),
            );
            return Err(self.said(&mut leg, ended).await);
        }
        let account = self.account();
        let answered = self
            .prove(
                &mut leg,
                &mut seq,
                &first,
                &response,
                account.as_ref(),
                &nonce,
            )
            .await?;
        let user_matches = account.as_ref().is_some_and(|a| a.user == response.user);
        if !(answered.proven && user_matches) {
            let message = format!(
                "Access denied for user '{}'@'{}' (using password: {})",
                response.user,
                self.peer.ip(),
                if answered.sent { "YES" } else { "NO" }
            );
            let ended = refuse(seq.wrapping_add(1), code::ACCESS_DENIED, message);
            return Err(self.said(&mut leg, ended).await);
        }
        send(&mut leg, &packet(seq.wrapping_add(1), &serving::ok())).await?;
        info!(caller = %self.peer, user = %response.user, tls = leg.is_tls(), "admin SQL login");
        Ok(leg)
    }

    /// Writes a refusal's packet, and hands the refusal back for the log.
    async fn said(&self, leg: &mut Leg, ended: Ended) -> Ended {
        if let Ended::Refused(p, _) = &ended {
            let _ = leg.write_all(p).await;
            let _ = leg.flush().await;
        }
        ended
    }

    /// The account in force now (a reload may change it; None when the port's block is gone).
    fn account(&self) -> Option<AdminAccount> {
        let applied = match self.state.applied.lock() {
            Ok(c) => c.admin_sql.clone(),
            Err(poisoned) => poisoned.into_inner().admin_sql.clone(),
        };
        applied.map(|a| a.account)
    }

    /// The plugin exchange: the client's first answer when it is already the account's plugin,
    /// else an AuthSwitchRequest and its answer; whether it proves the account's password.
    async fn prove(
        &self,
        leg: &mut Leg,
        seq: &mut u8,
        first: &[u8],
        response: &crate::wire::protocol::handshake::ClientResponse,
        account: Option<&AdminAccount>,
        nonce: &[u8; 20],
    ) -> Result<Proof, Ended> {
        let plugin = response.auth_plugin.as_deref();
        let plugin_auth = response.capabilities & caps::CLIENT_PLUGIN_AUTH != 0;
        // Without an account (the block removed by a reload) the exchange still runs as for a
        // native one, so the answer looks the same as a wrong password's.
        let native = [0u8; 20];
        match account.map(|a| &a.credential) {
            Some(AdminCredential::Ed25519(public)) => {
                if !plugin_auth {
                    let message = "the admin account uses client_ed25519; this client cannot \
                                   switch plugins"
                        .to_owned();
                    let p = err_packet(
                        seq.wrapping_add(1),
                        code::NOT_SUPPORTED_AUTH_MODE,
                        Some(sqlstate_for(code::NOT_SUPPORTED_AUTH_MODE)),
                        &message,
                    );
                    return Err(self.said(leg, Ended::Refused(p, message)).await);
                }
                let mut random = [0u8; 32];
                getrandom::getrandom(&mut random)
                    .map_err(|e| Ended::Gone(format!("no randomness: {e}")))?;
                let answer = self
                    .switch(leg, seq, serving::ED25519_PLUGIN, &random)
                    .await?;
                Ok(Proof {
                    proven: serving::ed25519_matches(public, &random, &answer),
                    sent: !answer.is_empty(),
                })
            }
            credential => {
                let stored = match credential {
                    Some(AdminCredential::Native(h)) => h,
                    _ => &native,
                };
                let answer = if !plugin_auth || plugin == Some(serving::NATIVE_PLUGIN) {
                    auth_answer(first)
                        .map_err(|e| Ended::Gone(format!("bad handshake: {e}")))?
                        .to_vec()
                } else {
                    self.switch(leg, seq, serving::NATIVE_PLUGIN, nonce).await?
                };
                Ok(Proof {
                    proven: credential.is_some() && serving::native_matches(stored, nonce, &answer),
                    sent: !answer.is_empty(),
                })
            }
        }
    }

    /// Asks the client to answer with `plugin` and `data`; its answer.
    async fn switch(
        &self,
        leg: &mut Leg,
        seq: &mut u8,
        plugin: &str,
        data: &[u8],
    ) -> Result<Vec<u8>, Ended> {
        let ask = packet(seq.wrapping_add(1), &serving::auth_switch(plugin, data));
        send(leg, &ask).await?;
        let (answered_seq, answer) = read_packet(leg).await?;
        *seq = answered_seq;
        Ok(answer)
    }

    /// One statement at a time until COM_QUIT or the client goes.
    async fn commands(&self, mut leg: Leg) -> Result<(), String> {
        loop {
            let (seq, payload) = tokio::time::timeout(IDLE, read_packet(&mut leg))
                .await
                .map_err(|_| format!("idle for {}s", IDLE.as_secs()))?
                .map_err(describe)?;
            let seq = seq.wrapping_add(1);
            let reply = match payload.split_first() {
                Some((&cmd::QUIT, _)) => return Ok(()),
                Some((&(cmd::PING | cmd::INIT_DB | cmd::RESET_CONNECTION), _)) => Reply::Ok,
                Some((&cmd::QUERY, text)) => self.query(&String::from_utf8_lossy(text)).await,
                Some((&cmd::FIELD_LIST, _)) => {
                    send(&mut leg, &packet(seq, &serving::eof()))
                        .await
                        .map_err(describe)?;
                    continue;
                }
                Some((&other, _)) => Reply::Err(
                    UNKNOWN_COMMAND,
                    format!(
                        "the admin port answers COM_QUERY and COM_PING, not command 0x{other:02X}"
                    ),
                ),
                None => Reply::Err(UNKNOWN_COMMAND, "an empty packet is no command".into()),
            };
            let bytes = match reply {
                Reply::Ok => packet(seq, &serving::ok()),
                Reply::Rows(rows) => rows.encode(seq).unwrap_or_else(|e| {
                    err_packet(seq, code::UNKNOWN_ERROR, Some("HY000"), &e.to_string())
                }),
                Reply::Err(c, message) => err_packet(seq, c, Some(sqlstate_for(c)), &message),
            };
            send(&mut leg, &bytes).await.map_err(describe)?;
        }
    }

    /// Answers one COM_QUERY.
    async fn query(&self, text: &str) -> Reply {
        match commands::parse(text) {
            Statement::Empty | Statement::Ignored => Reply::Ok,
            Statement::Variables(names) => Reply::Rows(super::variables::select(&names)),
            Statement::ShowVariables(pattern) => {
                Reply::Rows(super::variables::show(pattern.as_deref()))
            }
            Statement::Show(what) => self.sql(show_sql(what).to_owned()).await,
            Statement::Backend { name, op } => {
                let change = match op {
                    BackendOp::SetState(s) => ops::Change::State(s),
                    BackendOp::Weight(w) => ops::Change::Weight(w),
                };
                match ops::apply(&self.state, self.peer, &name, change) {
                    Ok(json) => Reply::Rows(backend_row(&json)),
                    Err(e) => Reply::Err(code::UNKNOWN_ERROR, e.to_string()),
                }
            }
            Statement::Reload => {
                info!(caller = %self.peer, "RELOAD asked on the admin SQL port");
                match self.state.reload_requests.ask().await {
                    Ok(said) => {
                        let mut rs = ResultSet::text(&["reload"]);
                        rs.rows.push(vec![Some(said)]);
                        Reply::Rows(rs)
                    }
                    Err(e) => Reply::Err(code::UNKNOWN_ERROR, e),
                }
            }
            Statement::Kill { id, query } => self.kill(id, query).await,
            Statement::Pause(pool) => self.pause(pool.as_deref(), true),
            Statement::Resume(pool) => self.pause(pool.as_deref(), false),
            Statement::ProxySqlConfig => Reply::Err(
                code::UNKNOWN_ERROR,
                "mysql-lb reads its configuration from its YAML file: edit the file, then RELOAD"
                    .into(),
            ),
            Statement::Malformed(m) => Reply::Err(PARSE_ERROR, m),
            Statement::Sql(sql) => self.sql(sql.to_owned()).await,
        }
    }

    /// `KILL [QUERY|CONNECTION] id`: the session greeted with `id` has its statement (or its
    /// server connection, which ends the session) killed on its server, over the `kill:`
    /// account, as a client's KILL is run on another backend. The operator's own act: the
    /// account is the proxy's, and the admin port is no client's.
    async fn kill(&self, id: u32, query: bool) -> Reply {
        let Some(target) = self.state.kills.lookup(id) else {
            return Reply::Err(
                code::UNKNOWN_ERROR,
                format!("no session with id {id} (SHOW CLIENTS lists them)"),
            );
        };
        if target.thread_id == crate::backends::kill::NO_THREAD {
            return Reply::Err(
                code::UNKNOWN_ERROR,
                format!(
                    "session {id} holds no server connection now (a pooled session between \
                     transactions): nothing of it runs to stop"
                ),
            );
        }
        if !self.state.killer.configured() {
            return Reply::Err(
                code::UNKNOWN_ERROR,
                "KILL on the admin port runs on the session's server over the kill: account; \
                 configure kill.user"
                    .into(),
            );
        }
        let what = if query { "QUERY" } else { "CONNECTION" };
        let elsewhere = crate::backends::kill::Elsewhere {
            backend: std::sync::Arc::clone(&target.backend),
            statement: format!("KILL {what} {}", target.thread_id),
            proxy_id: id,
        };
        info!(caller = %self.peer, target = id, backend = %target.backend.name, thread = target.thread_id, "KILL {what} asked on the admin SQL port");
        let leg = self.state.own_connect_options(&target.backend);
        let turn = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let answer = self.state.killer.run(&elsewhere, leg, turn).await;
        if let Some(e) = answer
            .get(4..)
            .and_then(crate::wire::protocol::errors::ServerErr::parse)
        {
            return Reply::Err(e.code, e.message);
        }
        let mut rs = ResultSet::text(&["id", "backend", "thread_id", "killed"]);
        rs.rows.push(vec![
            Some(id.to_string()),
            Some(target.backend.name.clone()),
            Some(target.thread_id.to_string()),
            Some(what.to_lowercase()),
        ]);
        Reply::Rows(rs)
    }

    /// `PAUSE` (`hold`) or `RESUME` `pool` (None: every pool): the pools named and the server
    /// connections they have in use now (a paused pool's reach 0 as their transactions end).
    fn pause(&self, pool: Option<&str>, hold: bool) -> Reply {
        let set = self.state.backends();
        if let Some(p) = pool {
            if set.pool(p).is_none() {
                return Reply::Err(code::UNKNOWN_ERROR, format!("no pool named {p:?}"));
            }
        }
        let pauses = &self.state.pauses;
        let changed = if hold {
            pauses.pause(pool)
        } else {
            pauses.resume(pool)
        };
        let what = if hold { "paused" } else { "resumed" };
        info!(caller = %self.peer, pool = pool.unwrap_or("*"), changed, "pool {what} on the admin SQL port");
        let mut rs = ResultSet::text(&["pool", "paused", "server_connections_in_use"]);
        for p in set.pools() {
            if pool.is_some_and(|name| name != p.name) {
                continue;
            }
            let in_use: usize = p
                .members()
                .iter()
                .filter_map(|b| self.state.server_pools.get(&b.name))
                .map(|sp| {
                    let c = sp.counts();
                    c.open.saturating_sub(c.idle)
                })
                .sum();
            rs.rows.push(vec![
                Some(p.name.clone()),
                Some(u8::from(pauses.holds(&p.name)).to_string()),
                Some(in_use.to_string()),
            ]);
        }
        Reply::Rows(rs)
    }

    /// Runs `sql` over a fresh snapshot, off the runtime's thread.
    async fn sql(&self, sql: String) -> Reply {
        let state = Arc::clone(&self.state);
        let recent = Arc::clone(&self.recent);
        let ran = tokio::task::spawn_blocking(move || {
            let db = engine::open()?;
            super::tables::fill(&db, &state, &recent)
                .map_err(|e| QueryError::Sql(format!("the snapshot failed: {e}")))?;
            super::meta::fill(&db, &state)
                .map_err(|e| QueryError::Sql(format!("the snapshot failed: {e}")))?;
            engine::query(&db, &sql)
        })
        .await;
        match ran {
            Ok(Ok(rows)) => Reply::Rows(rows),
            Ok(Err(e)) => Reply::Err(
                match e {
                    QueryError::Sql(_) | QueryError::NotAllowed(_) => PARSE_ERROR,
                    QueryError::TooLarge | QueryError::TooSlow => code::UNKNOWN_ERROR,
                },
                e.to_string(),
            ),
            Err(e) => Reply::Err(code::UNKNOWN_ERROR, format!("the query failed: {e}")),
        }
    }
}

/// Whether the login proved the password, and whether the client sent one.
struct Proof {
    proven: bool,
    sent: bool,
}

/// The SQL each `SHOW` runs over the snapshot.
fn show_sql(what: Show) -> &'static str {
    match what {
        Show::Pools => {
            "SELECT hostgroup AS pool, backend, ConnUsed AS cl_active, waiting AS cl_waiting, \
             open - idle AS sv_active, idle AS sv_idle, open AS sv_open, \
             max_server_connections AS sv_max, status, \
             (SELECT count(*) > 0 FROM paused_pools WHERE pool IN (hostgroup, '*')) AS paused \
             FROM stats_mysql_connection_pool ORDER BY hostgroup, backend"
        }
        Show::Servers => {
            "SELECT name, pool, address, state, admin_state, role, weight, \
             active_connections, commands, recent_p50_seconds, recent_p99_seconds \
             FROM backends ORDER BY pool, name"
        }
        Show::Clients | Show::Processlist => {
            "SELECT * FROM stats_mysql_processlist ORDER BY SessionID"
        }
        Show::Stats => {
            "SELECT hostgroup AS pool, backend, Queries AS total_query_count, \
             Bytes_data_sent AS total_sent, Bytes_data_recv AS total_received, \
             ConnOK AS total_connections, ConnERR AS connect_errors, \
             Latency_us AS avg_latency_us, p99_us FROM stats_mysql_connection_pool \
             ORDER BY hostgroup, backend"
        }
        Show::Config => "SELECT * FROM config ORDER BY key",
        Show::Rules => "SELECT * FROM mysql_query_rules ORDER BY rule_id",
        Show::Tables => "SELECT name AS Tables_in_main FROM tables ORDER BY name",
        Show::Databases => "SELECT 'main' AS `Database`",
        Show::Warnings => "SELECT '' AS Level, 0 AS Code, '' AS Message WHERE 0",
        Show::Status => {
            "SELECT Variable_Name AS Variable_name, Variable_Value AS Value FROM stats_mysql_global"
        }
        Show::Help => "SELECT command, what FROM help ORDER BY rowid",
    }
}

/// The answer of an operation: the backend's new state, as the HTTP endpoint returns it.
fn backend_row(json: &serde_json::Value) -> ResultSet {
    let mut rs = ResultSet::text(&["name", "admin_state", "weight", "active_connections"]);
    let field = |k: &str| match &json[k] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    };
    rs.rows.push(vec![
        field("name"),
        field("admin_state"),
        field("weight"),
        field("active_connections"),
    ]);
    rs
}

async fn send(leg: &mut Leg, bytes: &[u8]) -> Result<(), Ended> {
    leg.write_all(bytes)
        .await
        .map_err(|e| Ended::Gone(format!("write: {e}")))?;
    leg.flush()
        .await
        .map_err(|e| Ended::Gone(format!("write: {e}")))
}

fn describe(e: Ended) -> String {
    match e {
        Ended::Refused(_, why) | Ended::Gone(why) => why,
    }
}

/// One packet: its sequence id and payload. A packet of [`MAX_PACKET`] or more is refused
/// before its payload is read.
async fn read_packet<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
) -> Result<(u8, Vec<u8>), Ended> {
    let mut head = [0u8; 4];
    io.read_exact(&mut head)
        .await
        .map_err(|e| Ended::Gone(format!("read: {e}")))?;
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    if len > MAX_PACKET || len >= MAX_CHUNK {
        let message = format!("a packet of {len} bytes is over the admin port's {MAX_PACKET}");
        let refusal = err_packet(
            head[3].wrapping_add(1),
            code::NET_PACKET_TOO_LARGE,
            Some(sqlstate_for(code::NET_PACKET_TOO_LARGE)),
            &message,
        );
        let _ = io.write_all(&refusal).await;
        let _ = io.flush().await;
        return Err(Ended::Refused(refusal, message));
    }
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload)
        .await
        .map_err(|e| Ended::Gone(format!("read: {e}")))?;
    Ok((head[3], payload))
}
