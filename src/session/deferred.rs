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
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::ending::{handshake_failed, send};
use super::{
    command_phase, connect_backend, connection_phase_failed, legs, no_backend_message, EndReason,
    Established, Origin,
};
use crate::auth::{decline, finish_deferred, greet_client, read_greeting, ClientHello, LegPlan};
use crate::balancer::{BackendSet, ClientInfo};
use crate::kill;
use crate::leg::LegStream;
use crate::metrics::Refusal;
use crate::protocol::errors::{code, err_packet, pre_greeting_err, sqlstate_for};
use crate::protocol::handshake::{
    greeting_scramble, nonce_from, set_greeting_connection_id, set_greeting_scramble, Greeting,
};
use crate::protocol::login::refused_login;
use crate::route::Who;
use crate::state::ProxyState;
use crate::stream::BackendStream;

/// Names no backend in logs of a session that has not chosen one yet.
const NO_BACKEND_YET: &str = "(not chosen yet)";

pub(super) async fn run<C>(
    shared: &Arc<ProxyState>,
    set: &Arc<BackendSet>,
    mut client: LegStream<C>,
    from: Origin<'_>,
    worker: usize,
    drain: &CancellationToken,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let peer = from.peer;
    let mut next_seq = 2;
    let (hello, registration) = match greet(shared, set, &mut client, from, &mut next_seq).await {
        Ok(greeted) => greeted,
        Err(reason) => return reason,
    };
    let user = hello.response.user.clone();
    let database = hello.response.database.clone();
    let who = Who {
        user: Some(&user),
        schema: database.as_deref(),
        ..from.who()
    };
    let Some(pool) = set.route(&who) else {
        let message = format!("no route matches user '{user}' and no default_pool is configured");
        return refuse_after_greeting(shared, &mut client, next_seq, peer, &message).await;
    };
    let info = ClientInfo {
        addr: peer,
        user: Some(&user),
        default_db: database.as_deref(),
        pool: Some(&pool.name),
    };
    let connect = connect_backend(shared, set, &info, pool, from.addrs);
    let (lease, connected, backend_greeting) = match connect.await {
        Ok(found) => found,
        Err(tried) => {
            let message = no_backend_message(set, pool, &tried);
            return refuse_after_greeting(shared, &mut client, next_seq, peer, &message).await;
        }
    };
    if let Some(r) = &registration {
        r.bind(kill::Target::of(lease.backend(), &backend_greeting));
    }
    let mut backend = LegStream::Plain(connected.stream);
    let legs = shared.leg_settings();
    let plan = legs::plan(
        shared,
        &legs,
        from.local,
        &connected.tls,
        &backend_greeting,
        lease.backend(),
    );
    let limits = shared.session.handshake_limits();
    let auth = finish_deferred(
        &mut client,
        &mut backend,
        hello,
        backend_greeting,
        limits,
        &plan,
        &mut next_seq,
    );
    let auth = match auth.await {
        Ok(auth) => auth,
        Err(e) => {
            return connection_phase_failed(shared, &mut client, e, next_seq, peer, &lease).await
        }
    };
    let session = Established {
        proxy_id: super::authenticated(registration.as_ref(), &auth),
        client,
        backend,
        auth,
        lease,
    };
    command_phase(shared, session, peer, worker, drain).await
}

/// Greets the client as a backend would and reads its HandshakeResponse; on failure the client
/// has been told (where it still can be) and the session's end is returned.
async fn greet<'a, C>(
    shared: &'a ProxyState,
    set: &BackendSet,
    client: &mut LegStream<C>,
    from: Origin<'_>,
    next_seq: &mut u8,
) -> Result<(ClientHello, Option<kill::Registration<'a>>), EndReason>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let peer = from.peer;
    let Some((mut greeting, template)) = greeting_for(shared, set).await else {
        let message = "no backend has greeted yet (a deferred connect greets clients as its \
                       backends do): every backend is unreachable";
        warn!(client = peer, "refused: {message}");
        shared.metrics.rejected(Refusal::NoBackend);
        send(client, &pre_greeting_err(code::UNKNOWN_ERROR, message)).await;
        return Err(EndReason::NoBackend);
    };
    let registration = own_greeting(&shared.kills, &mut greeting, peer);
    let legs = shared.leg_settings();
    let plan = LegPlan {
        client_tls: legs.tls.client.as_ref(),
        client_local: from.local,
        offer_compression: shared.session.offer_compression,
        backend_tls: None,
        backend_compression: false,
        mariadb: template.is_mariadb,
        // No backend yet: the guards run when the response goes to one (`legs::plan`), and
        // the client's answer to the proxy's own nonce goes nowhere.
        socket_identity: None,
        backend: "",
        guard_cleartext: false,
    };
    let limits = shared.session.handshake_limits();
    match greet_client(client, &mut greeting, limits, &plan, next_seq).await {
        Ok(hello) => Ok((hello, registration)),
        Err(e) => {
            let reason = handshake_failed(client, e, *next_seq, peer, NO_BACKEND_YET).await;
            legs::close_tls(client).await;
            Err(reason)
        }
    }
}

/// The greeting a deferred connect sends: learned from the backends' greetings, or, when none
/// has greeted yet (no health checks, the first client), from a connect made for it now. That
/// connect ends with a refused login, not a close, so the server does not count it against the
/// proxy's address (see `crate::auth::decline`).
async fn greeting_for(shared: &ProxyState, set: &BackendSet) -> Option<(BytesMut, Greeting)> {
    if let Some(found) = set.greeting_template() {
        return Some(found);
    }
    let within = shared.session.connect_timeout;
    for backend in set.candidates(Instant::now()) {
        let attempt = async {
            let mut stream = BackendStream::open(
                &backend.address,
                shared.session.tcp_keepalive.as_ref(),
                &shared.socket_identity,
            )
            .await
            .ok()?;
            let g = read_greeting(
                &mut stream,
                shared.session.max_handshake_packet_size,
                shared.session.strip,
            )
            .await
            .ok()?;
            Some((stream, g))
        };
        if let Ok(Some((stream, g))) = tokio::time::timeout(within, attempt).await {
            backend.learn_greeting(&g.packet, &g.greeting);
            let nonce = greeting_scramble(&g.packet[4..]);
            match nonce.map(|n| refused_login(g.backend_capabilities, &n)) {
                Ok(Ok(login)) => drop(tokio::spawn(decline(stream, g.rest, login, within))),
                _ => debug!(backend = %backend.name, "greeting read: no login to end it with"),
            }
            break;
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

/// Refuses a client the proxy greeted (its HandshakeResponse read): an ERR in its sequence.
async fn refuse_after_greeting<C>(
    shared: &ProxyState,
    client: &mut LegStream<C>,
    seq: u8,
    peer: &str,
    message: &str,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    warn!(client = peer, "refused: {message}");
    shared.metrics.rejected(Refusal::NoBackend);
    let packet = err_packet(
        seq,
        code::UNKNOWN_ERROR,
        Some(sqlstate_for(code::UNKNOWN_ERROR)),
        message,
    );
    send(client, &packet).await;
    legs::close_tls(client).await;
    EndReason::NoBackend
}
