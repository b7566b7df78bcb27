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

use crate::protocol::caps::{Negotiated, CLIENT_COMPRESS};
use crate::protocol::errors::ServerErr;
use crate::protocol::handshake::{
    negotiate, parse_client_first, parse_greeting, patch_client_first_with, patch_greeting_with,
    ClientFirst, ClientResponse, Greeting, HandshakeError, Strip,
};
use crate::stream::{read_packet, PacketReadError};

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
    #[error("client asked for TLS, which mysql-lb does not offer yet")]
    ClientWantsTls,
    #[error(
        "client asked for protocol compression, which was not offered and its backend does not \
         support; connect without compression"
    )]
    ClientWantsCompression,
    #[error("client did not finish the handshake within {0}")]
    ClientTimeout(String),
    #[error("backend did not answer within {0} during authentication")]
    BackendTimeout(String),
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
    /// Bytes the client sent after its last auth packet (a pipelined first command).
    pub client_pending: BytesMut,
    /// Bytes the backend sent after its OK.
    pub backend_pending: BytesMut,
    /// The client asked for the compressed protocol although the greeting did not offer it, and
    /// it was passed on: from here both sides speak compressed frames.
    pub compressed: bool,
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
    let backend_capabilities = parse_greeting(&packet[4..])
        .map_err(AuthError::BackendGreeting)?
        .capabilities;
    let greeting =
        patch_greeting_with(&mut packet[4..], strip).map_err(AuthError::BackendGreeting)?;
    Ok(PatchedGreeting {
        packet,
        greeting,
        backend_capabilities,
        rest,
    })
}

/// Relays the connection phase after the greeting was chosen: forwards the greeting, the client's
/// response (patched) and then every auth packet both ways until the backend's OK or ERR.
pub async fn relay_connection_phase<C, B>(
    client: &mut C,
    backend: &mut B,
    greeting: PatchedGreeting,
    max: usize,
    timeout: Duration,
    strip: Strip,
    next_seq: &mut u8,
) -> Result<Authenticated, AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    // Whose packet the exchange waits for, so a timeout blames the right side.
    let mut turn = Side::Client;
    let run = async {
        client
            .write_all(&greeting.packet)
            .await
            .map_err(AuthError::ClientWrite)?;
        let mut client_buf = BytesMut::with_capacity(512);
        let mut response = read_packet(client, &mut client_buf, max)
            .await
            .map_err(AuthError::ClientRead)?;
        if response[3] != 1 {
            return Err(AuthError::ClientSequence(response[3]));
        }
        *next_seq = 2;
        let (parsed, negotiated) = patch_response(&mut response[4..], &greeting, strip)?;
        backend
            .write_all(&response)
            .await
            .map_err(AuthError::BackendWrite)?;
        turn = Side::Backend;
        let mut backend_buf = greeting.rest;
        exchange(
            client,
            backend,
            &mut client_buf,
            &mut backend_buf,
            max,
            next_seq,
            &mut turn,
        )
        .await?;
        Ok(Authenticated {
            negotiated,
            compressed: parsed.capabilities & CLIENT_COMPRESS != 0,
            user: parsed.user,
            client_pending: client_buf,
            backend_pending: backend_buf,
        })
    };
    let result = tokio::time::timeout(timeout, run).await;
    result.unwrap_or_else(|_| {
        let limit = humantime::format_duration(timeout).to_string();
        Err(match turn {
            Side::Client => AuthError::ClientTimeout(limit),
            Side::Backend => AuthError::BackendTimeout(limit),
        })
    })
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
        Ok(ClientFirst::SslRequest { .. }) => return Err(AuthError::ClientWantsTls),
        Err(e) => return Err(AuthError::ClientHandshake(e)),
    };
    let strip = compression_strip(parsed.capabilities, greeting.backend_capabilities, strip)?;
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
    Ok((parsed, negotiated))
}

/// Some clients (mysqlnd, Connector/Python's pure mode) ask for compression even when the
/// greeting does not offer it, and switch to compressed frames after the OK whatever the server
/// said. Clearing the bit would leave them talking compressed to a plain server (a hang); pass it
/// on when the backend offers compression, else refuse.
fn compression_strip(
    client_caps: u32,
    backend_caps: u32,
    strip: Strip,
) -> Result<Strip, AuthError> {
    if client_caps & CLIENT_COMPRESS == 0 {
        Ok(strip)
    } else if backend_caps & CLIENT_COMPRESS != 0 {
        Ok(Strip {
            capabilities: strip.capabilities & !CLIENT_COMPRESS,
            ..strip
        })
    } else {
        Err(AuthError::ClientWantsCompression)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Backend,
}

/// Relays auth packets both ways until the backend sends OK (0x00) or ERR (0xFF). Either side may
/// speak next depending on the plugin (auth switch, ed25519, caching_sha2 more-data, PAM dialog),
/// so both are read at once rather than guessing whose turn it is. `next_seq` follows the exchange
/// so an error of our own can be sent in sequence.
async fn exchange<C, B>(
    client: &mut C,
    backend: &mut B,
    client_buf: &mut BytesMut,
    backend_buf: &mut BytesMut,
    max: usize,
    next_seq: &mut u8,
    turn: &mut Side,
) -> Result<(), AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        // Both futures only read into their own buffers, and `read_packet` keeps partial data in
        // them, so dropping the one that loses the race loses nothing.
        tokio::select! {
            packet = read_packet(backend, backend_buf, max) => {
                let packet = packet.map_err(AuthError::BackendRead)?;
                client.write_all(&packet).await.map_err(AuthError::ClientWrite)?;
                *next_seq = packet[3].wrapping_add(1);
                *turn = Side::Client;
                match packet.get(4) {
                    Some(0x00) => return Ok(()),
                    Some(0xFF) => {
                        let ServerErr { code, message } = ServerErr::parse_lenient(&packet[4..]);
                        return Err(AuthError::Denied { code, message });
                    }
                    _ => {}
                }
            }
            packet = read_packet(client, client_buf, max) => {
                let packet = packet.map_err(AuthError::ClientRead)?;
                backend.write_all(&packet).await.map_err(AuthError::BackendWrite)?;
                *next_seq = packet[3].wrapping_add(1);
                *turn = Side::Backend;
            }
        }
    }
}
