//! A deferred connect: the proxy greets the client itself, reads who it is, and only then routes
//! and connects a backend.
//!
//! The greeting is a backend's (learned from sessions and health checks, so clients see the same
//! version and capabilities as directly) with the proxy's own nonce and connection id. The
//! client's answer to that nonce is thrown away: the backend is sent a response with no auth
//! data that names a plugin no account uses, and its AuthSwitchRequest (the account's real
//! plugin, the backend's nonce) is relayed to the client, which then authenticates to the
//! backend itself. Errors before a backend is chosen come from the proxy, in the client's
//! sequence; from then on they are the backend's own, relayed unchanged.

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{debug, warn};

use super::ending::{handshake_failed, send};
use super::{transport, Context, EndReason};
use crate::backends::balancer::{BackendSet, GreetingTemplate};
use crate::backends::client;
use crate::backends::kill;
use crate::net::leg::LegStream;
use crate::proxy::auth::{greet_client, ClientHello, TransportPlan};
use crate::proxy::state::ProxyState;
use crate::telemetry::metrics::Refusal;
use crate::wire::protocol::errors::{code, pre_greeting_err};
use crate::wire::protocol::handshake::{
    nonce_from, set_greeting_connection_id, set_greeting_scramble,
};

/// Names no backend in logs of a session that has not chosen one yet.
const NO_BACKEND_YET: &str = "(not chosen yet)";

/// Greets the client as a backend would and reads its HandshakeResponse; on failure the client
/// has been told (where it still can be) and the session's end is returned.
pub(super) async fn greet<'a, C>(
    ctx: &mut Context<'a>,
    client: &mut LegStream<C>,
) -> Result<(ClientHello, Option<kill::Registration<'a>>), EndReason>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (state, peer): (&'a ProxyState, _) = (ctx.state, ctx.peer());
    let Some(template) = greeting_for(state, ctx.set).await else {
        let message = "no backend has greeted yet (a deferred connect greets clients as its \
                       backends do): every backend is unreachable";
        warn!(client = peer, "refused: {message}");
        state.metrics.rejected(Refusal::NoBackend);
        send(client, &pre_greeting_err(code::UNKNOWN_ERROR, message)).await;
        return Err(EndReason::NoBackend);
    };
    let mut greeting = BytesMut::from(&template.packet[..]);
    let registration = own_greeting(&state.kills, &mut greeting, peer);
    let plan = TransportPlan {
        client_tls: ctx.transport.tls.client.as_ref(),
        client_local: ctx.from.local,
        offer_compression: state.session.offer_compression,
        backend_tls: None,
        backend_compression: false,
        mariadb: template.greeting.is_mariadb,
        // No backend yet: the guards run when the response goes to one (`transport::plan`), and
        // the client's answer to the proxy's own nonce goes nowhere.
        socket_identity: None,
        backend: "",
        guard_cleartext: false,
    };
    let limits = state.session.handshake_limits();
    match greet_client(client, &mut greeting, limits, &plan, &mut ctx.next_seq).await {
        Ok(hello) => Ok((hello, registration)),
        Err(e) => {
            let reason = handshake_failed(ctx, client, e, NO_BACKEND_YET).await;
            transport::close_tls(client).await;
            Err(reason)
        }
    }
}

/// The greeting a deferred connect sends: learned from the backends' greetings, or, when none
/// has greeted yet (no health checks, the first client), from a connection made for it now,
/// the way a health check without an account makes one (`client::greeting_of`): with the PROXY
/// protocol header and TLS each backend is configured for, in the proxy's own name, ended with
/// a refused login rather than a close, so the server does not count it against the proxy's
/// address (see `client::decline`).
async fn greeting_for(state: &ProxyState, set: &BackendSet) -> Option<Arc<GreetingTemplate>> {
    if let Some(found) = set.greeting_template() {
        return Some(found);
    }
    let within = state.session.connect_timeout;
    for backend in set.candidates(Instant::now()) {
        let leg = state.own_connect_options(&backend);
        match client::greeting_of(&backend.address, &leg, within).await {
            Ok(greeting) => {
                backend.learn_raw_greeting(&greeting, state.session.strip);
                break;
            }
            Err(e) => debug!(backend = %backend.name, "no greeting to learn: {e}"),
        }
    }
    set.greeting_template()
}

/// Puts the proxy's connection id and a fresh nonce in the greeting. The id is reserved now
/// and bound to the backend session once there is one, so a KILL naming it is mapped.
fn own_greeting<'a>(
    kills: &'a kill::Registry,
    greeting: &mut BytesMut,
    peer: &str,
) -> Option<kill::Registration<'a>> {
    let registration = kills.reserve();
    match &registration {
        Some(r) => {
            if let Err(e) = set_greeting_connection_id(&mut greeting[4..], r.id()) {
                warn!(client = peer, "greeting without a proxy id: {e}");
            }
        }
        None => warn!(
            client = peer,
            "every proxy connection id is in use: KILL is not mapped"
        ),
    }
    // The nonce guards nothing here (the client's answer to it goes nowhere), but clients
    // expect one that differs per connection; without the system's randomness it is the time's.
    let mut random = [0u8; 20];
    if getrandom::getrandom(&mut random).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for (i, r) in random.iter_mut().enumerate() {
            *r = (nanos >> (i % 16 * 8)) as u8 ^ i as u8;
        }
    }
    if let Err(e) = set_greeting_scramble(&mut greeting[4..], &nonce_from(&random)) {
        warn!(client = peer, "greeting keeps the backend's nonce: {e}");
    }
    registration
}
