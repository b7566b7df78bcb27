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

use super::statements::Reply;
use crate::config::{AdminAccount, AdminCredential};
use crate::control::admin::Recent;
use crate::net::leg::{LegStream, TlsSocket};
use crate::proxy::state::ProxyState;
use crate::wire::protocol::codec::MAX_CHUNK;
use crate::wire::protocol::errors::{code, err_packet, pre_greeting_err, sqlstate_for};
use crate::wire::protocol::handshake::{auth_answer, nonce_from, parse_client_first, ClientFirst};
use crate::wire::protocol::serving::{self, packet};
use crate::wire::protocol::{caps, cmd};

/// The longest packet the admin port reads (a statement, a login).
pub const MAX_PACKET: usize = 1 << 20;

/// An admin connection that sends nothing this long is closed (its slot is one of few).
const IDLE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// ER_UNKNOWN_COM_ERROR: a command the admin port does not answer.
const UNKNOWN_COMMAND: u16 = 1047;

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
}

/// Whether the login proved the password, and whether the client sent one.
struct Proof {
    proven: bool,
    sent: bool,
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
