//! One connection of the proxy's own to a backend: connect as a session would (PROXY protocol
//! header, TLS), log in with mysql_native_password, run text statements, read bounded result
//! sets. Health checks, KILLs run on another backend and replay all connect this way, so the
//! proxy logs in one way only; a connection that only wants the greeting ends with a refused
//! login ([`super::decline`]) rather than a close.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::decline::decline;
use super::{Error, Stage};
use crate::config::BackendAddr;
use crate::net::leg::LegStream;
use crate::net::stream::identity::SocketIdentity;
use crate::net::stream::{read_packet, BackendStream, PacketReadError};
use crate::net::tls::BackendTlsConnector;
use crate::wire::protocol::caps::{CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, CLIENT_SSL};
use crate::wire::protocol::codec::header;
use crate::wire::protocol::errors::ServerErr;
use crate::wire::protocol::handshake::{
    greeting_scramble, parse_greeting, set_client_bits, ssl_request_for,
};
use crate::wire::protocol::login::{
    native_answer, native_login, AuthSwitch, LoginError, NATIVE_PLUGIN, REFUSED_PASSWORD,
    REFUSED_USER,
};
use crate::wire::protocol::proxy_out::Version as ProxyVersion;
use crate::wire::protocol::resultset::{column_count, column_name, is_eof, text_row};

/// How a connection of the proxy's own to a backend (a health check, a KILL run elsewhere, the
/// identity check) starts, as a session's to that backend would.
#[derive(Debug, Clone)]
pub struct OwnConnectOptions {
    /// The backend leg's TLS: where a session would switch to TLS, so does this connection
    /// (before logging in, if it does).
    pub tls: Option<Arc<BackendTlsConnector>>,
    /// A PROXY protocol header first, in the proxy's own name (the connection's own address as
    /// source), so a backend that requires one from the proxy does not refuse it.
    pub proxy_protocol: Option<ProxyVersion>,
    /// Who a unix-socket backend sees as the connection's peer: the sessions' identity.
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

/// Largest packet the client accepts; status rows are a few KiB.
const MAX_PACKET: usize = 1 << 20;
/// Result sets the client reads are one row (or one per replication channel).
const MAX_ROWS: usize = 64;
const MAX_COLUMNS: usize = 512;
const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
/// `user`'s mysql_native_password login for the greeting `payload`.
fn login_packet(
    payload: &[u8],
    capabilities: u32,
    user: &str,
    password: &str,
) -> Result<Vec<u8>, Error> {
    let nonce = greeting_scramble(payload).map_err(Error::Greeting)?;
    native_login(capabilities, &nonce, user, password).map_err(|e| match e {
        LoginError::MissingCapability(name) => Error::OldServer(name),
        LoginError::UserTooLong => Error::BadResult {
            query: "login",
            detail: "user name too long".to_owned(),
        },
    })
}

impl Conn<LegStream<BackendStream>> {
    /// An SSLRequest, then the TLS handshake; `login`, the response to send next, gets
    /// CLIENT_SSL and sequence id 2 to match.
    async fn start_tls(
        &mut self,
        leg: &BackendTlsConnector,
        login: Option<&mut Vec<u8>>,
        server_caps: u32,
    ) -> Result<(), Error> {
        let Some(connector) = &leg.connector else {
            return Ok(());
        };
        if !self.buf.is_empty() {
            return Err(Error::Tls("it sent bytes after its greeting"));
        }
        let request = match login {
            Some(response) => {
                let _ = set_client_bits(&mut response[4..], CLIENT_SSL, 0);
                response[3] = 2;
                ssl_request_for(&response[4..]).map_err(Error::Greeting)?
            }
            None => ssl_request_only(server_caps),
        };
        let mut packet = vec![request.len() as u8, 0, 0, 1];
        packet.extend_from_slice(&request);
        self.write(Stage::Tls, &packet).await?;
        let plain = self.stream.take_plain().map_err(|e| Error::Io {
            stage: Stage::Tls,
            source: PacketReadError::Io(e),
        })?;
        let tls = connector
            .connect(leg.server_name.clone(), plain)
            .await
            .map_err(|e| Error::Io {
                stage: Stage::Tls,
                source: PacketReadError::Io(e),
            })?;
        self.stream = LegStream::tls(tokio_rustls::TlsStream::Client(tls));
        Ok(())
    }
}

/// An SSLRequest for a connection that does not log in: protocol 4.1 and TLS, nothing else asked.
fn ssl_request_only(server_caps: u32) -> [u8; 32] {
    let caps = (CLIENT_PROTOCOL_41 | CLIENT_SSL | CLIENT_SECURE_CONNECTION) & server_caps
        | CLIENT_PROTOCOL_41
        | CLIENT_SSL;
    let mut request = [0u8; 32];
    request[..4].copy_from_slice(&caps.to_le_bytes());
    request[4..8].copy_from_slice(&(1u32 << 24).to_le_bytes());
    request[8] = 33; // utf8mb3_general_ci, what the client's queries need
    request
}

/// The proxy's side of one connection: the stream and what was read past the last packet.
pub(crate) struct Conn<S> {
    stream: S,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    async fn read(&mut self, stage: Stage) -> Result<BytesMut, Error> {
        read_packet(&mut self.stream, &mut self.buf, MAX_PACKET)
            .await
            .map_err(|source| Error::Io { stage, source })
    }

    async fn write(&mut self, stage: Stage, packet: &[u8]) -> Result<(), Error> {
        self.stream.write_all(packet).await.map_err(|e| Error::Io {
            stage,
            source: PacketReadError::Io(e),
        })
    }

    /// `response` (a HandshakeResponse41 with mysql_native_password), then at most one
    /// AuthSwitchRequest.
    async fn login(&mut self, response: &[u8], password: &str) -> Result<(), Error> {
        self.write(Stage::Login, response).await?;
        let reply = self.read(Stage::Login).await?;
        let seq = reply[3];
        match reply.get(4) {
            Some(0x00) => return Ok(()),
            Some(0xFF) => return Err(denied(&reply[4..])),
            Some(0xFE) => {}
            other => {
                return Err(Error::Unexpected {
                    stage: Stage::Login,
                    first: other.copied().unwrap_or(0),
                })
            }
        }
        let switch = AuthSwitch::parse(&reply[4..]);
        if switch.plugin != NATIVE_PLUGIN.as_bytes() {
            return Err(Error::UnsupportedPlugin(
                String::from_utf8_lossy(switch.plugin).into_owned(),
            ));
        }
        let packet = native_answer(switch.data, password, seq.wrapping_add(1));
        self.write(Stage::Login, &packet).await?;
        let reply = self.read(Stage::Login).await?;
        match reply.get(4) {
            Some(0x00) => Ok(()),
            Some(0xFF) => Err(denied(&reply[4..])),
            other => Err(Error::Unexpected {
                stage: Stage::Login,
                first: other.copied().unwrap_or(0),
            }),
        }
    }

    /// Runs a text query and reads its whole (bounded) result set; an OK reply is an empty one.
    pub(crate) async fn query(&mut self, sql: &'static str) -> Result<ResultSet, Error> {
        let stage = Stage::Query(sql);
        self.write(stage, &command(COM_QUERY, sql.as_bytes()))
            .await?;
        let first = self.read(stage).await?;
        let bad = |detail: &str| Error::BadResult {
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
pub(crate) struct ResultSet {
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    pub(crate) fn column(&self, names: &[&str]) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| names.iter().any(|n| c.eq_ignore_ascii_case(n)))
    }
}

fn denied(payload: &[u8]) -> Error {
    let ServerErr { code, message } = ServerErr::parse_lenient(payload);
    Error::Denied { code, message }
}

fn query_failed(query: &'static str, payload: &[u8]) -> Error {
    let ServerErr { code, message } = ServerErr::parse_lenient(payload);
    Error::QueryFailed {
        query,
        code,
        message,
    }
}

/// A command packet with sequence id 0 (the client's commands are tiny).
fn command(code: u8, arg: &[u8]) -> Vec<u8> {
    let mut packet = header(1 + arg.len(), 0).to_vec();
    packet.push(code);
    packet.extend_from_slice(arg);
    packet
}

/// Connects `address` as a session to it would (`leg`: a PROXY protocol header in the proxy's
/// own name, TLS where a session would switch to it), reads the greeting and builds `user`'s
/// login for it (after the SSLRequest, if TLS was taken). Returns the connection, the greeting as
/// the server sent it and the login, not yet sent. `stage` follows the steps so a caller's timeout
/// can name the one it interrupted; `timeout` bounds the TCP connect.
async fn start(
    address: &BackendAddr,
    leg: &OwnConnectOptions,
    (user, password): (&str, &str),
    timeout: Duration,
    stage: &mut Stage,
) -> Result<(Conn<LegStream<BackendStream>>, Vec<u8>, Vec<u8>), Error> {
    *stage = Stage::Connect;
    let mut stream = BackendStream::connect(address, timeout, &leg.socket_identity)
        .await
        .map_err(Error::Connect)?;
    if let Some(version) = leg.proxy_protocol {
        let own = stream.own_addrs();
        stream
            .send_proxy_header(version, own)
            .await
            .map_err(Error::Connect)?;
    }
    *stage = Stage::Greeting;
    let mut conn = Conn {
        stream: LegStream::Plain(stream),
        buf: BytesMut::with_capacity(1024),
    };
    let greeting = conn.read(Stage::Greeting).await?;
    let payload = &greeting[4..];
    let parsed = parse_greeting(payload).map_err(Error::Greeting)?;
    let mut login = login_packet(payload, parsed.capabilities, user, password)?;
    if let Some(tls) = leg.tls.as_deref() {
        let unix = matches!(address, BackendAddr::Unix(_));
        let offered = parsed.capabilities & CLIENT_SSL != 0;
        if tls.uses_tls(offered, unix).map_err(Error::Tls)? {
            *stage = Stage::Tls;
            conn.start_tls(tls, Some(&mut login), parsed.capabilities)
                .await?;
        }
    }
    Ok((conn, greeting.to_vec(), login))
}

/// Connects as [`start`] does and logs in as `account` (user, password). Returns the connection
/// and the greeting as the server sent it.
pub(crate) async fn open(
    address: &BackendAddr,
    leg: &OwnConnectOptions,
    account: (&str, &str),
    timeout: Duration,
    stage: &mut Stage,
) -> Result<(Conn<LegStream<BackendStream>>, Vec<u8>), Error> {
    let (mut conn, greeting, login) = start(address, leg, account, timeout, stage).await?;
    *stage = Stage::Login;
    conn.login(&login, account.1).await?;
    Ok((conn, greeting))
}

/// Connects `address` as a session would (`leg`: its PROXY protocol header in the proxy's own
/// name, TLS as its mode says) only to read its greeting, as a health check without an account
/// does: the connection ends with a login the server refuses, on its own task. Returns the
/// greeting as the server sent it; `within` bounds it all.
pub(crate) async fn greeting_of(
    address: &BackendAddr,
    leg: &OwnConnectOptions,
    within: Duration,
) -> Result<Vec<u8>, Error> {
    let mut stage = Stage::Connect;
    let greeted = greet(address, leg, within, &mut stage);
    match tokio::time::timeout(within, greeted).await {
        Ok(result) => result,
        Err(_) => Err(Error::TimedOut {
            stage,
            after: within,
        }),
    }
}

/// Connects as [`start`] does, for the greeting alone: the connection then ends with a login the
/// server refuses, on its own task ([`decline`]), so that the server does not count an aborted
/// handshake against the proxy's address. Returns the greeting as the server sent it.
pub(crate) async fn greet(
    address: &BackendAddr,
    leg: &OwnConnectOptions,
    timeout: Duration,
    stage: &mut Stage,
) -> Result<Vec<u8>, Error> {
    let account = (REFUSED_USER, REFUSED_PASSWORD);
    let (conn, greeting, login) = start(address, leg, account, timeout, stage).await?;
    tokio::spawn(decline(conn.stream, conn.buf, login, timeout));
    Ok(greeting)
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// Runs a statement that answers with OK (e.g. `KILL QUERY 42`); `what` names it in errors.
    pub(crate) async fn execute(&mut self, what: &'static str, sql: &str) -> Result<(), Error> {
        let stage = Stage::Query(what);
        self.write(stage, &command(COM_QUERY, sql.as_bytes()))
            .await?;
        let reply = self.read(stage).await?;
        match reply.get(4) {
            Some(0x00) => Ok(()),
            Some(0xFF) => Err(query_failed(what, &reply[4..])),
            other => Err(Error::Unexpected {
                stage,
                first: other.copied().unwrap_or(0),
            }),
        }
    }

    /// The stream and what was read past the last packet, for a caller that speaks the command
    /// phase itself (the replay's client, `crate::tools::replay`).
    pub(crate) fn into_parts(self) -> (S, BytesMut) {
        (self.stream, self.buf)
    }

    /// Polite goodbye so the server does not log an aborted connection; a failure here changes
    /// nothing.
    pub(crate) async fn quit(&mut self) {
        if let Err(e) = self.stream.write_all(&command(COM_QUIT, b"")).await {
            tracing::debug!(error = %e, "COM_QUIT not sent");
        }
    }
}
