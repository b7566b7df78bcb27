//! The connection phase of a deferred connect, in two halves around the choice of a backend:
//! [`greet_client`] greets the client with a learned greeting and the proxy's nonce and reads who
//! it is; [`finish_deferred`] sends the chosen backend a HandshakeResponse with no auth data that
//! names a plugin no account uses, so the backend's AuthSwitchRequest (the account's plugin, the
//! backend's nonce) is the one auth switch the client sees, and relays the rest as usual.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};

use super::*;
use crate::wire::protocol::caps::CLIENT_PLUGIN_AUTH;
use crate::wire::protocol::codec::header;
use crate::wire::protocol::handshake::response_for_backend;

/// What the client said before any backend was chosen.
#[derive(Debug)]
pub struct ClientHello {
    /// Its HandshakeResponse, as sent (header included).
    packet: BytesMut,
    /// 1, or 2 after an SSLRequest.
    client_seq: u8,
    /// The response's fields (who, which database, which plugin).
    pub response: ClientResponse,
    /// Bytes the client sent past its response.
    client_buf: BytesMut,
    /// The capabilities the proxy's greeting offered.
    offered: u32,
}

/// Sends the client the proxy's greeting (a full packet), takes its leg to TLS if it asks, and
/// reads its HandshakeResponse. A client without `CLIENT_PLUGIN_AUTH` cannot be switched to the
/// account's plugin, so it is refused here.
pub async fn greet_client<C>(
    client: &mut LegStream<C>,
    greeting: &mut BytesMut,
    limits: HandshakeLimits,
    plan: &TransportPlan<'_>,
    next_seq: &mut u8,
) -> Result<ClientHello, AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let run = async {
        send_greeting(client, greeting, plan).await?;
        let offered = greeting_capabilities(&greeting[4..]).map_err(AuthError::BackendGreeting)?;
        let mut client_buf = BytesMut::with_capacity(512);
        let Response { packet, client_seq } =
            client_response(client, &mut client_buf, plan, limits.max_packet, next_seq).await?;
        let response = match parse_client_first(&packet[4..]) {
            Ok(ClientFirst::Response(r)) => r,
            Ok(ClientFirst::SslRequest { .. }) => return Err(AuthError::ClientSslRequestTwice),
            Err(e) => return Err(AuthError::ClientHandshake(e)),
        };
        if response.capabilities & CLIENT_PLUGIN_AUTH == 0 {
            return Err(AuthError::ClientNoPluginAuth);
        }
        Ok(ClientHello {
            packet,
            client_seq,
            response,
            client_buf,
            offered,
        })
    };
    tokio::time::timeout(limits.timeout, run)
        .await
        .unwrap_or_else(|_| {
            Err(AuthError::ClientTimeout(
                humantime::format_duration(limits.timeout).to_string(),
            ))
        })
}

/// Logs the client in to the chosen backend, whose greeting is `greeting`: the response built
/// from the client's goes to the backend (after our own SSLRequest where the plan says TLS), then
/// every auth packet is relayed both ways until the backend's OK or ERR.
pub async fn finish_deferred<C, B>(
    client: &mut LegStream<C>,
    backend: &mut LegStream<B>,
    hello: ClientHello,
    greeting: PatchedGreeting,
    limits: HandshakeLimits,
    plan: &TransportPlan<'_>,
    next_seq: &mut u8,
) -> Result<Authenticated, AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let ClientHello {
        packet: sent,
        client_seq,
        client_buf,
        offered,
        ..
    } = hello;
    let mut turn = Side::Backend;
    let run = async {
        let mut payload = response_for_backend(&sent[4..]).map_err(AuthError::ClientHandshake)?;
        // What the client may assume is what the proxy's greeting offered; a bit it set beyond
        // that must not reach a backend that would act on it (TLS and compression are per leg).
        set_client_bits(&mut payload, 0, !offered & !(CLIENT_SSL | CLIENT_COMPRESS))
            .map_err(AuthError::ClientHandshake)?;
        let mut packet = BytesMut::with_capacity(4 + payload.len());
        packet.extend_from_slice(&header(payload.len(), 1));
        packet.extend_from_slice(&payload);
        let response = ForBackend {
            packet,
            client_seq,
            client_buf,
            plugin_known: false,
            greeting,
        };
        log_in(client, backend, response, limits, plan, next_seq, &mut turn).await
    };
    let result = tokio::time::timeout(limits.timeout, run).await;
    result.unwrap_or_else(|_| Err(timed_out(turn, limits.timeout)))
}
