//! Connecting a backend for a session: the balancer's candidates in order until one greets,
//! each opened with the PROXY protocol header it is configured for, its greeting read under
//! the connect deadline, and its TLS mode checked against what the greeting offered. Both
//! connect modes connect here, once they know the client's pool.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tracing::{info, warn};

use super::Context;
use crate::backends::balancer::ejection::Failure;
use crate::backends::balancer::{AdminState, Backend, BackendSet, ClientInfo, Lease, Pool};
use crate::backends::pooling::{LoginPermit, PoolError};
use crate::config::BackendAddr;
use crate::net::stream::BackendStream;
use crate::proxy::auth::{read_greeting, AuthError, PatchedGreeting};
use crate::proxy::state::{ProxyState, TransportSettings};
use crate::wire::protocol::caps::CLIENT_SSL;

/// Why no backend took a session: what each candidate said, and whether each one failed only
/// because its transaction-mode pool was full (no login slot came free in `wait_timeout`).
pub(super) struct NotConnected {
    pub(super) tried: Vec<String>,
    pub(super) full: bool,
    /// Every backend tried is up and refused the login itself (its own ERR, such as 1040 Too
    /// many connections), or had no room in its pool: none is down.
    pub(super) refused: bool,
}

/// Tries backends in the balancer's order (a script may choose the first for this client) until
/// one greets; returns what each failed one said. A backend with `proxy_protocol` is first sent
/// the header naming the session's [`Origin::addrs`].
pub(super) async fn connect_backend(
    ctx: &Context<'_>,
    client: &ClientInfo<'_>,
    pool: &Pool,
) -> Result<(Lease, Connected, PatchedGreeting), NotConnected> {
    let set = ctx.set;
    let mut tried = Vec::new();
    let mut full = 0;
    let mut refused = 0;
    tracing::Span::current().record("pool", pool.name.as_str());
    let mut candidates = set.candidates_for(Instant::now(), client, Some(pool));
    spread_logins(ctx, client, pool, &mut candidates);
    if ctx.read_only {
        // A read-only route's login never reaches the primary either.
        candidates.retain(|b| !pool.takes_writes(b));
    }
    for backend in candidates {
        // A transaction-mode pool's login waits for a slot before it opens a connection.
        let slot = match login_slot(ctx.state, pool, &backend).await {
            Ok(slot) => slot,
            Err(e) => {
                info!(backend = %backend.name, "no login slot: {e}");
                tried.push(format!("{}: {e}", backend.label()));
                full += 1;
                continue;
            }
        };
        let started = Instant::now();
        // Counted in the backend's active sessions from now, so clients choosing meanwhile see it.
        let counted = set.attempt(&backend);
        let result = open_backend(ctx, &backend).await;
        match result {
            Ok((mut stream, greeting)) => {
                stream.slot = slot;
                backend.learn_greeting(&greeting.packet, &greeting.greeting);
                backend
                    .stats
                    .connect
                    .observe(started.elapsed().as_secs_f64());
                if set.mark_up(&backend) {
                    info!(backend = %backend.name, "backend back in rotation: connect succeeded");
                }
                return Ok((counted.into_lease(set, client), stream, greeting));
            }
            Err((reason, broken)) => {
                if !broken {
                    info!(backend = %backend.name, "backend refused a connection: {reason}");
                    refused += 1;
                } else {
                    let now = Instant::now();
                    set.session_failed(&backend, Failure::Connect, &reason, now);
                    if set.mark_down(&backend, now) {
                        warn!(backend = %backend.name, address = %backend.address, "backend marked down: {reason}");
                    }
                }
                tried.push(format!("{}: {reason}", backend.label()));
            }
        }
    }
    set.client_refused(client);
    let all_refused = !tried.is_empty() && full + refused == tried.len();
    let full = full > 0 && full == tried.len();
    if tried.is_empty() {
        tried.push("no backend configured".to_owned());
    }
    Err(NotConnected {
        tried,
        full,
        refused: all_refused,
    })
}

/// Connects `backend` and reads its greeting under one deadline (one timer per connect); whether
/// the connect had completed says which of the two the backend missed. Err carries the reason
/// and whether the backend itself is unreachable or broken (taken out of rotation) rather than
/// alive and refusing, e.g. its own "Too many connections".
async fn open_backend(
    ctx: &Context<'_>,
    backend: &Backend,
) -> Result<(Connected, PatchedGreeting), (String, bool)> {
    let (state, transport, addrs) = (ctx.state, ctx.transport, ctx.from.addrs);
    let connected = AtomicBool::new(false);
    let attempt = async {
        let mut stream = BackendStream::open(
            &backend.address,
            state.session.tcp_keepalive.as_ref(),
            &state.socket_identity,
        )
        .await
        .map_err(|e| (e.to_string(), true))?;
        connected.store(true, Relaxed);
        if let Some(version) = transport.proxy_protocol(&backend.name) {
            let sent = stream.send_proxy_header(version, addrs).await;
            sent.map_err(|e| (format!("sending the PROXY protocol header: {e}"), true))?;
        }
        let greeting = read_greeting(
            &mut stream,
            state.session.max_handshake_packet_size,
            state.session.strip,
        )
        .await
        .map_err(|e| {
            let broken = !matches!(e, AuthError::BackendRefused { .. });
            (e.to_string(), broken)
        })?;
        let tls = backend_tls(transport, backend, &greeting).map_err(|e| (e, true))?;
        Ok((
            Connected {
                stream,
                tls,
                slot: None,
            },
            greeting,
        ))
    };
    match tokio::time::timeout(state.session.connect_timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err((
            format!(
                "{} within {}",
                if connected.load(Relaxed) {
                    "no greeting"
                } else {
                    "connect timed out"
                },
                humantime::format_duration(state.session.connect_timeout)
            ),
            true,
        )),
    }
}

/// A backend connection that greeted, and how its leg goes on.
pub(super) struct Connected {
    pub(super) stream: BackendStream,
    /// The leg switches to TLS during the connection phase, with this connector and name.
    pub(super) tls: Option<(TlsConnector, ServerName<'static>)>,
    /// In a transaction-mode pool, the login slot the connection holds.
    pub(super) slot: Option<LoginSlot>,
}

/// A login's place in a transaction-mode pool's count: given back (the login failed) when
/// dropped, unless it was turned into a pooled session ([`LoginPermit::logged_in`]).
pub(super) type LoginSlot = LoginPermit;

/// In a pool across backends, a login whose user is known (deferred connect) goes first to the
/// backend in rotation with the fewest connections of its user and schema, a full pool last:
/// each user's connections come to cover the backends, so its sessions can move to any of them.
/// A split pool's primary goes first while the user has none there.
/// The policy's order breaks ties; a script's `connect_server()` choice is kept as it is.
fn spread_logins(
    ctx: &Context<'_>,
    client: &ClientInfo<'_>,
    pool: &Pool,
    candidates: &mut [Arc<Backend>],
) {
    let Some(user) = client.user else {
        return;
    };
    if !pool.pooling.across_backends || ctx.set.script().is_some() {
        return;
    }
    let now = Instant::now();
    let in_rotation = candidates
        .iter()
        .take_while(|b| b.admin_state() == AdminState::Ready && ctx.set.is_up(b, now))
        .count();
    let schema = client.default_db.unwrap_or_default();
    // In a pool that splits reads from writes, the primary comes first while its user has no
    // connection there: its writes need one, and only a login makes it.
    let split = pool.pooling.read_write_split;
    candidates[..in_rotation].sort_by_cached_key(|b| {
        let (n, full) = match ctx.state.server_pools.get(&b.name) {
            // A split counts the logins of a burst placed before this one.
            Some(p) if split => {
                let (n, full) = p.connections_of(user, schema);
                (n + p.placed_recently(user, schema), full)
            }
            Some(p) => p.connections_of(user, schema),
            None => (0, false),
        };
        // Of backends with as many, a replica first: most of a split's statements are reads,
        // and each connection there takes reads only.
        let primary = split && pool.takes_writes(b);
        let needed = primary && n == 0;
        (full, !needed, n, primary)
    });
    if split {
        if let Some(p) = candidates
            .first()
            .and_then(|b| ctx.state.server_pools.get(&b.name))
        {
            p.placed(user, schema);
        }
    }
}

/// Waits for a login slot of `backend`'s pool when `pool` shares connections; Ok(None) when it
/// does not.
async fn login_slot(
    state: &ProxyState,
    pool: &Pool,
    backend: &Backend,
) -> Result<Option<LoginSlot>, PoolError> {
    if !pool.pooling.shares() {
        return Ok(None);
    }
    let backend_pool = state
        .server_pools
        .of(&pool.name, &backend.name, pool.pooling);
    backend_pool.login_slot().await.map(Some)
}

/// Whether the backend leg switches to TLS, from the backend's mode and its greeting. A backend
/// that cannot meet its mode (no TLS offered under `required`) fails like one that did not greet.
fn backend_tls(
    transport: &TransportSettings,
    backend: &Backend,
    greeting: &PatchedGreeting,
) -> Result<Option<(TlsConnector, ServerName<'static>)>, String> {
    let Some(leg) = transport.tls.backend(&backend.name) else {
        return Ok(None);
    };
    let offered = greeting.backend_capabilities & CLIENT_SSL != 0;
    let unix = matches!(backend.address, BackendAddr::Unix(_));
    match leg.uses_tls(offered, unix) {
        Ok(true) => Ok(leg
            .connector
            .as_ref()
            .map(|c| (c.clone(), leg.server_name.clone()))),
        Ok(false) => Ok(None),
        Err(reason) => Err(format!("tls mode {} but {reason}", leg.mode.as_str())),
    }
}

/// "all backends are down" (naming the pool when there are several), or what else kept the
/// client from every backend.
pub(super) fn no_backend_message(set: &BackendSet, pool: &Pool, not: &NotConnected) -> String {
    let tried = not.tried.join("; ");
    if not.full {
        // The backends are up; their pools had no room for one more login.
        format!("Too many connections: {tried}")
    } else if not.refused {
        // Up, and answering: a full server's 1040 is no outage.
        format!("every backend refused the connection (none is down); tried {tried}")
    } else if set.pools().len() > 1 {
        format!("all backends of pool {} are down; tried {tried}", pool.name)
    } else {
        format!("all backends are down; tried {tried}")
    }
}
