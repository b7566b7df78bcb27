//! How a session ends: what the client is told (an ERR in sequence where the protocol still
//! allows one, with the `mysql-lb:` prefix) and the one log line and [`EndReason`] that say why.
//!
//! One exception: a backend lost in the command phase (it closed or reset the connection, e.g.
//! `KILL CONNECTION` of its thread or a crash) is passed on as a close, with no ERR of ours.
//! Drivers detect a lost connection themselves and retry, evict from a pool or reconnect on
//! exactly what they detect: Connector/J raises SQLNonTransientConnectionException with
//! SQLSTATE 08000 and code 0, Connector/Python InterfaceError 2013, mysql_async an I/O error.
//! No ERR can reproduce that (an ERR 2013 becomes OperationalError in Connector/Python and code
//! 2013 / SQLSTATE 08S01 in Connector/J), so the client sees what it would see directly, and the
//! log line names the backend. The server's own ERR before it closes (1927 for a KILL of an
//! idle session) is relayed unchanged like any other response.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use super::{Context, EndReason};
use crate::net::stream::PacketReadError;
use crate::proxy::auth::AuthError;
use crate::proxy::relay::RelayEnd;
use crate::wire::protocol::compress::CompressError;
use crate::wire::protocol::errors::{code, err_packet, pre_greeting_err, sqlstate_for};
use crate::wire::protocol::response::{TrackError, Tracker};

/// How a session's command phase ended: as its relay did, or, in a transaction-mode pool, with
/// no server connection to run its client's command on (the client was told so). The relay
/// itself never ends that way, so the end is the pooled session's, not one of [`RelayEnd`]'s.
#[derive(Debug)]
pub(super) enum SessionEnd {
    Relay(RelayEnd),
    NoServerConnection,
}

impl From<RelayEnd> for SessionEnd {
    fn from(end: RelayEnd) -> Self {
        SessionEnd::Relay(end)
    }
}

/// Tells the client (where it can still read it) why its connection phase failed, in the
/// client leg's sequence; logs it and says how the session ended.
pub(super) async fn handshake_failed<C: AsyncWrite + Unpin>(
    ctx: &Context<'_>,
    client: &mut C,
    e: AuthError,
    backend: &str,
) -> EndReason {
    let (next_seq, peer) = (ctx.next_seq, ctx.peer());
    match e {
        AuthError::Denied { code, ref message } => {
            info!(
                client = peer,
                backend, code, "authentication failed: {message}"
            );
            EndReason::AuthFailed
        }
        AuthError::CleartextPassword(ref exposure) => {
            warn!(
                client = peer,
                backend, "refused: {e} (allow_cleartext_passwords is off)"
            );
            send(
                client,
                &cleartext_err(next_seq, backend, &exposure.to_string()),
            )
            .await;
            EndReason::CleartextPassword
        }
        AuthError::BackendTls(_) => {
            warn!(client = peer, backend, "closing: {e}");
            send(
                client,
                &unknown_err(next_seq, &format!("backend {backend}: {e}")),
            )
            .await;
            EndReason::TlsHandshake
        }
        AuthError::BackendRead(_)
        | AuthError::BackendWrite(_)
        | AuthError::BackendTimeout(_)
        | AuthError::BackendGreeting(_)
        | AuthError::BackendGreetingRead(_)
        | AuthError::BackendRefused { .. } => {
            let cause = e.cause();
            warn!(
                client = peer,
                backend, "backend failed during authentication: {cause}"
            );
            let message = format!("backend {backend} failed during authentication: {cause}");
            send(client, &unknown_err(next_seq, &message)).await;
            EndReason::BackendNetwork
        }
        other => client_failed(ctx, client, other, backend).await,
    }
}

/// The client side's failures in the connection phase: a bad or unsupported handshake gets an
/// ERR it can still read, a client that left or timed out is only logged.
async fn client_failed<C: AsyncWrite + Unpin>(
    ctx: &Context<'_>,
    client: &mut C,
    e: AuthError,
    backend: &str,
) -> EndReason {
    let (next_seq, peer) = (ctx.next_seq, ctx.peer());
    let client_err = |message: String| {
        err_packet(
            next_seq,
            code::HANDSHAKE_ERROR,
            Some(sqlstate_for(code::HANDSHAKE_ERROR)),
            &message,
        )
    };
    match e {
        AuthError::InsecureTransport { ref user, mariadb } => {
            info!(client = peer, backend, user, "refused: {e}");
            send(client, &insecure_transport_err(next_seq, user, mariadb)).await;
            EndReason::TlsRequired
        }
        AuthError::OwnIdentity { ref user, .. } => {
            // The user name comes from the wire: Debug-quoted so it cannot forge log lines.
            warn!(client = peer, backend, user = ?user, "refused: {}", e.to_string().escape_debug());
            send(client, &own_identity_err(next_seq, user, backend)).await;
            EndReason::AuthFailed
        }
        AuthError::ClientTls(_) => {
            // Nothing can be said to a client whose TLS handshake failed.
            info!(client = peer, backend, "closing: {e}");
            EndReason::TlsHandshake
        }
        AuthError::ClientRead(PacketReadError::TooLarge { len, .. })
            if crate::wire::protocol::proxy_in::AS_PACKET_LENGTHS.contains(&len) =>
        {
            warn!(
                client = peer,
                backend,
                "closing: a PROXY protocol header came from a network not in accept_proxy_protocol"
            );
            EndReason::ProxyHeaderUnlisted
        }
        AuthError::ClientHandshake(_)
        | AuthError::ClientSequence(_)
        | AuthError::ClientWantsTls
        | AuthError::ClientSslRequestTwice
        | AuthError::ClientRead(PacketReadError::TooLarge { .. }) => {
            warn!(client = peer, backend, "closing: {e}");
            send(client, &client_err(format!("Bad handshake: {e}"))).await;
            EndReason::Malformed
        }
        AuthError::ClientNoPluginAuth => {
            warn!(client = peer, backend, "refused: {e}");
            let code = code::NOT_SUPPORTED_AUTH_MODE;
            let message = format!("{e}; use a client with plugin authentication (MySQL 5.5+)");
            let packet = err_packet(next_seq, code, Some(sqlstate_for(code)), &message);
            send(client, &packet).await;
            EndReason::Malformed
        }
        AuthError::ClientTimeout(_) => {
            info!(client = peer, backend, "closing: {e}");
            EndReason::ClientNetwork
        }
        AuthError::ClientRead(_) | AuthError::ClientWrite(_) => {
            info!(
                client = peer,
                backend,
                "client left during the handshake: {}",
                e.cause()
            );
            EndReason::ClientNetwork
        }
        other => {
            warn!(client = peer, backend, "closing: {other}");
            EndReason::Malformed
        }
    }
}

/// The log line of a backend that closed its connection: expected when idle, a lost server
/// mid-response.
fn backend_closed(peer: &str, backend: &str, pending: usize) {
    if pending == 0 {
        info!(client = peer, backend, "backend closed the idle connection");
    } else {
        warn!(
            client = peer,
            backend,
            pending,
            "backend closed the connection mid-response: closing the client's too, \
             as a lost server would"
        );
    }
}

/// The refusal of a login under the OS identity a unix-socket backend authenticates the proxy by.
fn own_identity_err(seq: u8, user: &str, backend: &str) -> Vec<u8> {
    let code = code::ACCESS_DENIED;
    let message = format!(
        "Access denied for user '{user}': backend {backend} is a unix socket, where the \
         server would authenticate this login by mysql-lb's own OS user; use another \
         account, or reach the server over TCP"
    );
    err_packet(seq, code, Some(sqlstate_for(code)), &message)
}

/// An ERR 1105 in the client's sequence.
fn unknown_err(seq: u8, message: &str) -> Vec<u8> {
    let code = code::UNKNOWN_ERROR;
    err_packet(seq, code, Some(sqlstate_for(code)), message)
}

/// The refusal of a login whose password would cross a plaintext backend leg in clear. Access
/// denied (1045, SQLSTATE 28000), as the server would deny a login it cannot accept: clients
/// and pools treat it as final rather than retrying, and the text says why and what to change.
fn cleartext_err(seq: u8, backend: &str, exposure: &str) -> Vec<u8> {
    let code = code::ACCESS_DENIED;
    let message = format!(
        "refused: {exposure}, but the leg to backend {backend} is plaintext TCP leaving this \
         host; the password was not forwarded. Encrypt that leg (`backend_tls.mode` or the \
         backend's `tls.mode`: required or stricter) or accept the risk with \
         `allow_cleartext_passwords: true` there"
    );
    err_packet(seq, code, Some(sqlstate_for(code)), &message)
}

/// The refusal of a plaintext client under `tls.require`, as the backend's own server would
/// refuse it: MariaDB denies access (1045, it has no error of its own for this), MySQL says
/// ER_SECURE_TRANSPORT_REQUIRED.
fn insecure_transport_err(seq: u8, user: &str, mariadb: bool) -> Vec<u8> {
    let (code, message) = if mariadb {
        (
            code::ACCESS_DENIED,
            format!(
                "Access denied for user '{user}': connections using insecure transport \
                 are prohibited (tls.require)"
            ),
        )
    } else {
        (
            code::SECURE_TRANSPORT_REQUIRED,
            "Connections using insecure transport are prohibited while \
             --require_secure_transport=ON."
                .to_owned(),
        )
    };
    err_packet(seq, code, Some(sqlstate_for(code)), &message)
}

/// Tells the client what it can still be told of how its command phase ended, logs why, and
/// says how the session ended.
pub(super) async fn relay_ended<C: AsyncRead + AsyncWrite + Unpin>(
    ctx: &Context<'_>,
    client: &mut C,
    end: SessionEnd,
    tracker: &Tracker,
    backend: &str,
) -> EndReason {
    let peer = ctx.peer();
    let end = match end {
        SessionEnd::Relay(end) => end,
        SessionEnd::NoServerConnection => {
            super::pooled::log_no_connection(peer, backend);
            return EndReason::NoBackend;
        }
    };
    match end {
        RelayEnd::IdleTimeout => {
            info!(
                client = peer,
                backend, "closing an idle session (idle_timeout)"
            );
            EndReason::IdleTimeout
        }
        // Only a pooled session's relay lets go of its backend, and it does not end there.
        RelayEnd::Released(..) | RelayEnd::Drained => {
            debug!(
                client = peer,
                backend, "closed between commands for shutdown"
            );
            EndReason::Shutdown
        }
        RelayEnd::ClientClosed { quit: true } => {
            debug!(client = peer, backend, "client quit");
            EndReason::ClientQuit
        }
        RelayEnd::ClientClosed { quit: false } => {
            info!(
                client = peer,
                backend, "client closed the connection without COM_QUIT"
            );
            EndReason::ClientNetwork
        }
        RelayEnd::ClientIo(e) if corrupt_frame(&e) => {
            warn!(
                client = peer,
                backend, "closing: client sent a bad compressed frame ({e})"
            );
            let message = format!("client sent a bad compressed frame ({e})");
            answer_between_commands(client, tracker, &message).await;
            EndReason::Malformed
        }
        RelayEnd::ClientIo(e) => {
            info!(client = peer, backend, "client connection failed: {e}");
            EndReason::ClientNetwork
        }
        RelayEnd::BackendIo(e) if corrupt_frame(&e) => {
            warn!(
                client = peer,
                backend, "closing: backend sent a bad compressed frame ({e}): closing the client's connection too"
            );
            EndReason::Malformed
        }
        RelayEnd::BackendClosed { pending, .. } => {
            backend_closed(peer, backend, pending);
            EndReason::BackendNetwork
        }
        RelayEnd::BackendIo(e) => {
            warn!(
                client = peer,
                backend,
                pending = tracker.pending(),
                "backend connection failed: {e}: closing the client's too, as a lost server would"
            );
            EndReason::BackendNetwork
        }
        RelayEnd::Protocol(e) => protocol_failed(client, e, tracker, peer, backend).await,
    }
}

/// The command phase ended on a protocol violation: the client gets an ERR where it can read one
/// in a response's place.
async fn protocol_failed<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    e: TrackError,
    tracker: &Tracker,
    peer: &str,
    backend: &str,
) -> EndReason {
    match e {
        TrackError::CleartextPassword { exposure, start } => {
            warn!(
                client = peer,
                backend,
                "refused: {exposure} during COM_CHANGE_USER, and the backend leg is plaintext \
             TCP leaving this host (allow_cleartext_passwords is off)"
            );
            // Where the backend's packet began in an earlier read, part of it went out: the
            // client has no whole packet to answer, and no ERR can be put in its place. The
            // client's own COM_CHANGE_USER was not forwarded: an ERR answers it unless earlier
            // commands still await theirs.
            let in_place = if exposure.from_client() {
                tracker.pending() == 0 && tracker.server_at_boundary()
            } else {
                start.is_some()
            };
            if in_place {
                let seq = tracker.next_server_seq();
                send(client, &cleartext_err(seq, backend, &exposure.to_string())).await;
            }
            EndReason::CleartextPassword
        }
        e => {
            warn!(client = peer, backend, "closing: {e}");
            answer_protocol_error(client, tracker, &e).await;
            EndReason::Malformed
        }
    }
}

/// An ERR 1105 to the client when it is between responses (it reads one in a response's place).
async fn answer_between_commands<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    tracker: &Tracker,
    message: &str,
) {
    if tracker.server_at_boundary() {
        send(
            client,
            &server_side_err(tracker, code::UNKNOWN_ERROR, message),
        )
        .await;
    }
}

/// Tells the client of a protocol violation where an ERR can still be read in place of a
/// response (a client's, between responses; a backend's, at a packet start).
async fn answer_protocol_error<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    tracker: &Tracker,
    e: &TrackError,
) {
    let can_inject = if e.is_client() {
        tracker.server_at_boundary()
    } else {
        e.start().is_some()
    };
    if can_inject {
        let code = protocol_error_code(e);
        send(client, &server_side_err(tracker, code, &e.to_string())).await;
        if matches!(
            code,
            code::NET_PACKET_TOO_LARGE | code::OPTION_PREVENTS_STATEMENT
        ) {
            // A client writing a huge packet reads only once it is written: closing with
            // its bytes unread would reset the connection and lose the ERR, so swallow
            // the rest first (bounded), as the server does.
            discard_input(client, 64 << 20, Duration::from_secs(2)).await;
        }
    }
}

/// A compressed leg's frame that does not decode (bad zlib data, a wrong declared length).
fn corrupt_frame(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<CompressError>().is_some())
}

fn protocol_error_code(e: &TrackError) -> u16 {
    use crate::wire::protocol::codec::FrameError;
    match e {
        TrackError::ClientFrame(FrameError::TooLarge { .. }) => code::NET_PACKET_TOO_LARGE,
        TrackError::ClientFrame(_) | TrackError::ClientOutOfOrder { .. } => {
            code::NET_PACKETS_OUT_OF_ORDER
        }
        TrackError::TooLongToGuard { .. } => code::OPTION_PREVENTS_STATEMENT,
        _ => code::UNKNOWN_ERROR,
    }
}

/// An ERR the client reads as its current command's answer (or its next command's).
fn server_side_err(tracker: &Tracker, code: u16, message: &str) -> Vec<u8> {
    err_packet(
        tracker.next_server_seq(),
        code,
        Some(sqlstate_for(code)),
        message,
    )
}

/// Reads and drops what the client still sends, up to `limit` bytes, `deadline` or its EOF.
async fn discard_input<C: AsyncRead + Unpin>(client: &mut C, limit: u64, deadline: Duration) {
    let mut sink = tokio::io::sink();
    let mut bounded = tokio::io::AsyncReadExt::take(&mut *client, limit);
    let _ = tokio::time::timeout(deadline, tokio::io::copy(&mut bounded, &mut sink)).await;
}

/// Best effort: the peer may already be gone, and a slow one must not hold the session open.
pub(super) async fn send<C: AsyncWrite + Unpin>(client: &mut C, packet: &[u8]) {
    let write = async {
        client.write_all(packet).await?;
        client.shutdown().await
    };
    match tokio::time::timeout(Duration::from_secs(1), write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!("could not deliver an error packet: {e}"),
        Err(_) => debug!("could not deliver an error packet: write timed out"),
    }
}

/// Refuses a client at once (used for admission): best effort, bounded in time.
pub async fn refuse<C: AsyncWrite + Unpin>(mut client: C, code: u16, message: &str) {
    send(&mut client, &pre_greeting_err(code, message)).await;
}
