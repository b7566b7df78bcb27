//! What differs between the two connect modes, and only that: how the client's side of the
//! connection phase opens (the backend's greeting relayed once one is connected, or the proxy's
//! own greeting and the client's response read before any backend is chosen), what routes see,
//! how a client is refused, and how the login to the connected backend starts. Everything else
//! (routing, the connect, the plan of each leg, the command phase) is the one path in
//! `session::run`.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::warn;

use super::ending::send;
use super::transport;
use super::{Context, Origin};
use crate::backends::balancer::Backend;
use crate::backends::kill;
use crate::backends::route::ClientFacts;
use crate::net::leg::LegStream;
use crate::proxy::auth::{
    finish_deferred, relay_connection_phase, AuthError, Authenticated, ClientHello,
    HandshakeLimits, PatchedGreeting, TransportPlan,
};
use crate::proxy::state::ProxyState;
use crate::telemetry::metrics::Refusal;
use crate::wire::protocol::errors::{err_packet, pre_greeting_err, sqlstate_for};
use crate::wire::protocol::handshake::set_greeting_connection_id;

/// How a session's connection phase opens.
pub(super) enum Opening<'a> {
    /// The backend is connected at once and its greeting relayed (the proxy id put in it then).
    Immediate,
    /// The proxy greeted the client itself and read its HandshakeResponse (see `deferred`).
    Deferred {
        hello: ClientHello,
        /// The proxy id the client was greeted with, bound to the backend session once there
        /// is one.
        registration: Option<kill::Registration<'a>>,
    },
}

/// The login to a connected backend: the backend's greeting and the connection phase's limits.
pub(super) struct Login<'p> {
    pub(super) greeting: PatchedGreeting,
    pub(super) limits: HandshakeLimits,
    pub(super) plan: &'p TransportPlan<'p>,
}

impl<'a> Opening<'a> {
    /// Opens the connection phase as the backend set's connect mode says: nothing yet, or in
    /// deferred mode the proxy's greeting and the client's response (the client was told why
    /// where that failed, and the session's end is returned).
    pub(super) async fn open<C>(
        ctx: &mut Context<'a>,
        client: &mut LegStream<C>,
    ) -> Result<Opening<'a>, super::EndReason>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        if !ctx.set.deferred() {
            return Ok(Self::Immediate);
        }
        let (hello, registration) = super::deferred::greet(ctx, client).await?;
        Ok(Self::Deferred {
            hello,
            registration,
        })
    }

    /// What routes match on: in a deferred connect the user and schema too.
    pub(super) fn who<'o>(&'o self, from: &Origin<'o>) -> ClientFacts<'o> {
        match self {
            Self::Immediate => from.who(),
            Self::Deferred { hello, .. } => ClientFacts {
                user: Some(&hello.response.user),
                schema: hello.response.database.as_deref(),
                ..from.who()
            },
        }
    }

    /// Refuses the client with `message` (counted as having no backend): before any greeting
    /// an ERR with sequence id 0 and no SQLSTATE marker, after the proxy's own an ERR in the
    /// client's sequence (the context's `next_seq`) on its leg as it now is (TLS closed
    /// cleanly). `code` is the ERR's error code.
    pub(super) async fn refuse<C>(
        &self,
        ctx: &Context<'_>,
        client: &mut LegStream<C>,
        code: u16,
        message: &str,
    ) -> super::EndReason
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        warn!(client = ctx.peer(), "refused: {message}");
        ctx.state.metrics.rejected(Refusal::NoBackend);
        match self {
            Self::Immediate => send(client, &pre_greeting_err(code, message)).await,
            Self::Deferred { .. } => {
                let sqlstate = Some(sqlstate_for(code));
                let packet = err_packet(ctx.next_seq, code, sqlstate, message);
                send(client, &packet).await;
                transport::close_tls(client).await;
            }
        }
        super::EndReason::NoBackend
    }

    /// Why no route matched, naming the user where it is known.
    pub(super) fn unrouted(&self) -> String {
        match self {
            Self::Immediate => {
                "no route matches this client and no default_pool is configured".to_owned()
            }
            Self::Deferred { hello, .. } => format!(
                "no route matches user '{}' and no default_pool is configured",
                hello.response.user
            ),
        }
    }

    /// Logs the client in to `backend` and returns the proxy id it was greeted with, if it got
    /// one, beside the outcome. Immediate: the backend's greeting gets a proxy id registered
    /// for this backend session and is relayed with everything after it. Deferred: the reserved
    /// id is bound to this backend session and the client's response goes on rebuilt.
    pub(super) async fn log_in<C, B>(
        self,
        ctx: &mut Context<'a>,
        client: &mut LegStream<C>,
        backend: &mut LegStream<B>,
        target: &Arc<Backend>,
        login: Login<'_>,
    ) -> (
        Option<kill::Registration<'a>>,
        Result<Authenticated, AuthError>,
    )
    where
        C: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        let Login {
            mut greeting,
            limits,
            plan,
        } = login;
        let (state, next_seq): (&'a ProxyState, _) = (ctx.state, &mut ctx.next_seq);
        match self {
            Self::Immediate => {
                let peer = ctx.from.peer;
                let registration = register_proxy_id(&state.kills, target, &mut greeting, peer);
                let phase =
                    relay_connection_phase(client, backend, greeting, limits, plan, next_seq);
                (registration, phase.await)
            }
            Self::Deferred {
                hello,
                registration,
            } => {
                if let Some(r) = &registration {
                    r.bind(kill::Target::of(target, &greeting.greeting));
                }
                let phase =
                    finish_deferred(client, backend, hello, greeting, limits, plan, next_seq);
                (registration, phase.await)
            }
        }
    }
}

/// Clients see a proxy-unique connection id, so a KILL naming it can be mapped (see `kill`):
/// the greeting's id is replaced, and the session is registered until the guard drops.
fn register_proxy_id<'a>(
    kills: &'a kill::Registry,
    backend: &Arc<Backend>,
    greeting: &mut PatchedGreeting,
    peer: &str,
) -> Option<kill::Registration<'a>> {
    let registered = kills.register(kill::Target::of(backend, &greeting.greeting));
    match &registered {
        Some(r) => {
            if let Err(e) = set_greeting_connection_id(&mut greeting.packet[4..], r.id()) {
                warn!(
                    client = peer,
                    "greeting keeps the backend's id, KILL is not mapped: {e}"
                );
            }
        }
        None => warn!(
            client = peer,
            "every proxy connection id is in use: KILL is not mapped"
        ),
    }
    registered
}
