//! The connection phase: greeting, the client's response and the auth exchange.
//!
//! The proxy never needs passwords: it forwards the backend's greeting (nonce included) and relays
//! the client's answers, only clearing capability bits it does not support in both directions so
//! the two ends agree (MariaDB keeps a client's flags as sent, and some clients set flags the
//! greeting did not offer). Packets are read whole here — they are small and capped — and
//! whatever follows the final OK stays buffered for the command relay.

use std::time::Duration;

use bytes::BytesMut;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use rustls_pki_types::ServerName;
use tokio::io::AsyncReadExt;
use tokio_rustls::{TlsConnector, TlsStream};

use crate::net::leg::LegStream;
use crate::net::stream::identity::SocketIdentity;
use crate::net::stream::{read_packet, PacketReadError};
use crate::net::tls::ClientTlsAcceptor;
use crate::wire::protocol::caps::{Negotiated, CLIENT_COMPRESS, CLIENT_SSL};
use crate::wire::protocol::errors::ServerErr;
use crate::wire::protocol::handshake::{
    greeting_capabilities, negotiate, offer_in_greeting, parse_client_first,
    patch_client_first_with, patch_greeting_with, set_client_bits, ssl_request_for, ClientFirst,
    ClientResponse, Greeting, HandshakeError, Strip,
};

#[cfg(test)]
mod cleartext_tests;
mod deferred;
mod exchange;
mod upgrade;
pub use crate::backends::client::decline::decline;
use crate::backends::client::decline::{abandon_greeted, abandon_login};
use crate::wire::protocol::cleartext::{self, sends_cleartext, Exposure};
pub use deferred::{finish_deferred, greet_client, ClientHello};
use exchange::{exchange, Sequences};
use upgrade::{client_response, forward_response};

/// Why the connection phase failed, and on which side.
#[derive(Debug, Error)]
pub enum AuthError {
    #[error("backend greeting: {0}")]
    BackendGreetingRead(PacketReadError),
    #[error("backend greeting: {0}")]
    BackendGreeting(HandshakeError),
    #[error("backend refused the connection with error {code}: {message}")]
    BackendRefused { code: u16, message: String },
    #[error("backend during authentication: {0}")]
    BackendRead(PacketReadError),
    #[error("client during handshake: {0}")]
    ClientRead(PacketReadError),
    #[error("client sent a bad handshake response: {0}")]
    ClientHandshake(HandshakeError),
    #[error("client sent its handshake response with sequence id {0}, expected 1")]
    ClientSequence(u8),
    #[error("client asked for TLS, which is not configured here (see `tls:`)")]
    ClientWantsTls,
    #[error("client cannot be switched to another auth plugin (no CLIENT_PLUGIN_AUTH), which a deferred connect needs")]
    ClientNoPluginAuth,
    #[error("client sent a second SSLRequest inside TLS")]
    ClientSslRequestTwice,
    #[error("client TLS handshake: {0}")]
    ClientTls(std::io::Error),
    #[error("client did not switch to TLS, which `tls.require` demands of TCP clients")]
    InsecureTransport {
        user: String,
        /// Refuse as MariaDB does (1045) rather than as MySQL (3159).
        mariadb: bool,
    },
    #[error(
        "client logs in as `{user}`, the OS user {identity} that unix-socket backend {backend} \
         authenticates mysql-lb's own connections as"
    )]
    OwnIdentity {
        user: String,
        backend: String,
        identity: String,
    },
    #[error("backend TLS handshake: {0}")]
    BackendTls(std::io::Error),
    #[error("client did not finish the handshake within {0}")]
    ClientTimeout(String),
    #[error("backend did not answer within {0} during authentication")]
    BackendTimeout(String),
    #[error("{0}, and the backend leg is plaintext TCP leaving this host")]
    CleartextPassword(Exposure),
    #[error("authentication failed with error {code}: {message}")]
    Denied { code: u16, message: String },
    #[error("client write: {0}")]
    ClientWrite(std::io::Error),
    #[error("backend write: {0}")]
    BackendWrite(std::io::Error),
}

impl AuthError {
    /// The cause, without the side and phase for messages that already name them ("backend X
    /// failed during authentication: …", "client left during the handshake: …").
    pub fn cause(&self) -> String {
        match self {
            Self::BackendRead(e) | Self::ClientRead(e) => e.to_string(),
            Self::BackendWrite(e) | Self::ClientWrite(e) => e.to_string(),
            Self::BackendTimeout(d) => format!("no answer within {d}"),
            other => other.to_string(),
        }
    }
}

/// What the command relay needs from a finished connection phase.
#[derive(Debug)]
pub struct Authenticated {
    pub negotiated: Negotiated,
    pub user: String,
    /// The schema the client asked for in its handshake response ("" if none).
    pub schema: String,
    /// The character set (collation id) of the client's handshake response.
    pub charset: u8,
    /// Bytes the client sent after its last auth packet (a pipelined first command).
    pub client_pending: BytesMut,
    /// Bytes the backend sent after its OK.
    pub backend_pending: BytesMut,
    /// The client leg speaks compressed frames from here (the client asked for it).
    pub client_compressed: bool,
    /// The backend leg speaks compressed frames from here.
    pub backend_compressed: bool,
    /// The auth plugin that ran sends the password as it is (PAM's dialog, clear_password).
    pub cleartext_password: bool,
    /// The exchange was guarded against passwords in clear (see [`TransportPlan::guard_cleartext`]);
    /// so must COM_CHANGE_USER's be.
    pub guard_cleartext: bool,
}

/// A greeting read from a backend, patched and ready to forward.
#[derive(Debug)]
pub struct PatchedGreeting {
    pub packet: BytesMut,
    pub greeting: Greeting,
    /// The capabilities the backend offered, before patching.
    pub backend_capabilities: u32,
    /// Bytes read past the greeting (none from a well-behaved server).
    pub rest: BytesMut,
}

/// Reads and patches a backend's greeting. An ERR in its place (the server's own "too many
/// connections", "host blocked", ...) is reported with the server's code and message.
pub async fn read_greeting<B: AsyncRead + Unpin>(
    backend: &mut B,
    max: usize,
    strip: Strip,
) -> Result<PatchedGreeting, AuthError> {
    let mut rest = BytesMut::with_capacity(256);
    let mut packet = read_packet(backend, &mut rest, max)
        .await
        .map_err(AuthError::BackendGreetingRead)?;
    if packet.get(4) == Some(&0xFF) {
        let ServerErr { code, message } = ServerErr::parse_lenient(&packet[4..]);
        return Err(AuthError::BackendRefused { code, message });
    }
    let backend_capabilities =
        greeting_capabilities(&packet[4..]).map_err(AuthError::BackendGreeting)?;
    let greeting =
        patch_greeting_with(&mut packet[4..], strip).map_err(AuthError::BackendGreeting)?;
    Ok(PatchedGreeting {
        packet,
        greeting,
        backend_capabilities,
        rest,
    })
}

/// What the connection phase does on each leg besides relaying: TLS and compression are decided
/// per leg, independently of what the other leg does.
pub struct TransportPlan<'a> {
    /// TLS offered to the client (CLIENT_SSL set in the greeting it gets).
    pub client_tls: Option<&'a ClientTlsAcceptor>,
    /// The client came over a unix socket, which counts as secure as it does for a server.
    pub client_local: bool,
    /// CLIENT_COMPRESS set in the greeting the client gets.
    pub offer_compression: bool,
    /// The backend leg switches to TLS (an SSLRequest of ours, then the handshake with this
    /// connector and name) before the client's response is forwarded.
    pub backend_tls: Option<(&'a TlsConnector, ServerName<'static>)>,
    /// The backend leg is compressed (the backend offered it and it is configured).
    pub backend_compression: bool,
    /// The backend is MariaDB: refusals of our own take MariaDB's codes where it has its own.
    pub mariadb: bool,
    /// Set when the backend is a unix socket: the OS identity it authenticates our connection
    /// as, under whose name no client may log in (see `crate::net::stream::identity`).
    pub socket_identity: Option<&'a SocketIdentity>,
    /// The backend's name, for refusals.
    pub backend: &'a str,
    /// The backend leg is plaintext TCP to another host and cleartext passwords are not allowed
    /// on it: once the client leg is secure, a password in clear is refused (see [`cleartext`]).
    pub guard_cleartext: bool,
}

/// The client's HandshakeResponse and the sequence ids it has on each leg.
struct Response {
    packet: BytesMut,
    /// 1, or 2 after an SSLRequest.
    client_seq: u8,
}

/// Relays the connection phase after the greeting was chosen: forwards the greeting, the client's
/// response (patched) and then every auth packet both ways until the backend's OK or ERR, taking
/// either leg to TLS on the way where `plan` says so.
pub async fn relay_connection_phase<C, B>(
    client: &mut LegStream<C>,
    backend: &mut LegStream<B>,
    mut greeting: PatchedGreeting,
    limits: HandshakeLimits,
    plan: &TransportPlan<'_>,
    next_seq: &mut u8,
) -> Result<Authenticated, AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let max = limits.max_packet;
    // Whose packet the exchange waits for, so a timeout blames the right side.
    let mut turn = Side::Client;
    let run = async {
        let mut client_buf = BytesMut::with_capacity(512);
        // Awaited where it is made: a future bound to a name keeps its room in this state
        // machine beside the login's (see `session::run`).
        let first = async {
            send_greeting(client, &mut greeting.packet, plan).await?;
            client_response(client, &mut client_buf, plan, max, next_seq).await
        }
        .await;
        let Response { packet, client_seq } = match first {
            Ok(response) => response,
            Err(e) => {
                // The client left or spoke nonsense before its login: the backend gets one
                // that it refuses, which it does not count against the proxy's address.
                let caps = greeting.backend_capabilities;
                abandon_greeted(backend, &mut greeting.rest, &greeting.packet[4..], caps).await;
                return Err(e);
            }
        };
        turn = Side::Backend;
        let response = ForBackend {
            packet,
            client_seq,
            client_buf,
            plugin_known: true,
            greeting,
        };
        log_in(client, backend, response, limits, plan, next_seq, &mut turn).await
    };
    let result = tokio::time::timeout(limits.timeout, run).await;
    result.unwrap_or_else(|_| Err(timed_out(turn, limits.timeout)))
}

/// The response the backend gets, and what the client leg has seen so far.
struct ForBackend {
    /// The HandshakeResponse for the backend (header included), not yet patched.
    packet: BytesMut,
    /// The client-leg sequence id of the client's response: 1, or 2 after an SSLRequest.
    client_seq: u8,
    /// Bytes the client sent after its response.
    client_buf: BytesMut,
    /// The response names the plugin the client answered with (not so in a deferred connect,
    /// where the backend's auth switch names it).
    plugin_known: bool,
    /// The backend's greeting.
    greeting: PatchedGreeting,
}

/// The client's response checked before anything of it reaches the backend: parsed and
/// patched, not a login under the OS identity a unix-socket backend authenticates the proxy by,
/// and, in a session guarded against passwords in clear, not carrying one. Returns the parsed
/// response, what the two ends share, and whether the session is guarded.
fn vet_response(
    packet: &mut [u8],
    greeting: &PatchedGreeting,
    plan: &TransportPlan<'_>,
    checks: Vet,
) -> Result<(ClientResponse, Negotiated, bool), AuthError> {
    let (parsed, negotiated) = patch_response(&mut packet[4..], greeting, checks.strip)?;
    if let Some(identity) = plan.socket_identity.filter(|id| !id.admits(&parsed.user)) {
        return Err(AuthError::OwnIdentity {
            user: parsed.user,
            backend: plan.backend.to_owned(),
            identity: identity.describe(),
        });
    }
    // A client decides from its own leg whether to answer in clear; the proxy from both.
    let guard = plan.guard_cleartext && (checks.client_tls || plan.client_local);
    if guard && checks.plugin_known {
        if let Some(exposure) =
            cleartext::in_response(parsed.auth_plugin.as_deref(), parsed.answered)
        {
            return Err(AuthError::CleartextPassword(exposure));
        }
    }
    Ok((parsed, negotiated, guard))
}

/// What [`vet_response`] needs besides the packet and the plan.
#[derive(Clone, Copy)]
struct Vet {
    strip: Strip,
    client_tls: bool,
    /// The response names the plugin it answered with (not so in a deferred connect).
    plugin_known: bool,
}

/// From the response on: patches it for the backend leg, sends it (after taking that leg to TLS
/// where planned), and relays every auth packet both ways until the backend's OK or ERR.
async fn log_in<C, B>(
    client: &mut LegStream<C>,
    backend: &mut LegStream<B>,
    response: ForBackend,
    limits: HandshakeLimits,
    plan: &TransportPlan<'_>,
    next_seq: &mut u8,
    turn: &mut Side,
) -> Result<Authenticated, AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let ForBackend {
        mut packet,
        client_seq,
        mut client_buf,
        plugin_known,
        mut greeting,
    } = response;
    let checks = Vet {
        strip: limits.strip,
        client_tls: client.is_tls(),
        plugin_known,
    };
    let vetted = vet_response(&mut packet, &greeting, plan, checks);
    let (parsed, negotiated, guard) = match vetted {
        Ok(v) => v,
        Err(e) => {
            // Refused before it reached the backend, which gets a login it refuses instead
            // of an abandoned handshake (see `decline`).
            let caps = greeting.backend_capabilities;
            abandon_greeted(backend, &mut greeting.rest, &greeting.packet[4..], caps).await;
            return Err(e);
        }
    };
    let backend_seq = forward_response(backend, &mut packet, &greeting, plan).await?;
    let mut backend_buf = greeting.rest;
    let mut seqs = Sequences {
        backend_ahead: backend_seq.wrapping_sub(client_seq),
        next: next_seq,
        plugin: parsed.auth_plugin.clone().filter(|_| plugin_known),
        guard,
    };
    exchange(
        client,
        backend,
        &mut client_buf,
        &mut backend_buf,
        limits.max_packet,
        &mut seqs,
        turn,
    )
    .await?;
    Ok(authenticated(
        parsed,
        negotiated,
        plan,
        &seqs,
        client_buf,
        backend_buf,
    ))
}

/// The phase's timeout, blaming the side whose packet was awaited.
fn timed_out(turn: Side, limit: Duration) -> AuthError {
    let limit = humantime::format_duration(limit).to_string();
    match turn {
        Side::Client => AuthError::ClientTimeout(limit),
        Side::Backend => AuthError::BackendTimeout(limit),
    }
}

/// What a finished exchange leaves for the command phase.
fn authenticated(
    parsed: ClientResponse,
    negotiated: Negotiated,
    plan: &TransportPlan<'_>,
    seqs: &Sequences<'_>,
    client_pending: BytesMut,
    backend_pending: BytesMut,
) -> Authenticated {
    Authenticated {
        cleartext_password: seqs.plugin.as_deref().is_some_and(sends_cleartext),
        guard_cleartext: seqs.guard,
        negotiated,
        client_compressed: parsed.capabilities & CLIENT_COMPRESS != 0,
        backend_compressed: plan.backend_compression,
        user: parsed.user,
        schema: parsed.database.unwrap_or_default(),
        charset: parsed.charset,
        client_pending,
        backend_pending,
    }
}

/// The greeting as the client leg offers it: CLIENT_SSL and CLIENT_COMPRESS set where this leg
/// provides them, whatever the backend offered.
async fn send_greeting<C>(
    client: &mut LegStream<C>,
    packet: &mut BytesMut,
    plan: &TransportPlan<'_>,
) -> Result<(), AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let mut offers = 0;
    if plan.client_tls.is_some() {
        offers |= CLIENT_SSL;
    }
    if plan.offer_compression {
        offers |= CLIENT_COMPRESS;
    }
    offer_in_greeting(&mut packet[4..], offers).map_err(AuthError::BackendGreeting)?;
    client
        .write_all(packet)
        .await
        .map_err(AuthError::ClientWrite)
}

/// Sizes and time the connection phase may take.
#[derive(Debug, Clone, Copy)]
pub struct HandshakeLimits {
    pub max_packet: usize,
    pub timeout: Duration,
    pub strip: Strip,
}

/// Parses the client's HandshakeResponse payload and clears the bits to strip in place. Returns
/// the response as the backend receives it (patched flags) and what the two ends then share.
fn patch_response(
    payload: &mut [u8],
    greeting: &PatchedGreeting,
    strip: Strip,
) -> Result<(ClientResponse, Negotiated), AuthError> {
    let mut parsed = match parse_client_first(payload) {
        Ok(ClientFirst::Response(r)) => r,
        Ok(ClientFirst::SslRequest { .. }) => return Err(AuthError::ClientSslRequestTwice),
        Err(e) => return Err(AuthError::ClientHandshake(e)),
    };
    patch_client_first_with(payload, strip).map_err(AuthError::ClientHandshake)?;
    let client_caps = parsed.capabilities;
    parsed.capabilities &= !strip.capabilities;
    parsed.mariadb_capabilities &= !strip.mariadb_capabilities;
    let negotiated = negotiate(&greeting.greeting, &parsed);
    debug!(
        user = %parsed.user,
        database = parsed.database.as_deref().unwrap_or(""),
        plugin = parsed.auth_plugin.as_deref().unwrap_or(""),
        client_caps = format_args!("{:#010x}", client_caps),
        negotiated_caps = format_args!("{:#010x}", negotiated.capabilities),
        mariadb_caps = format_args!("{:#010x}", negotiated.mariadb_capabilities),
        attributes = ?parsed.attributes,
        "client handshake response"
    );
    // The client's own wish for compression is kept for the client leg.
    parsed.capabilities |= client_caps & CLIENT_COMPRESS;
    Ok((parsed, negotiated))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Backend,
}
