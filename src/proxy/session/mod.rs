//! One client connection from accept to close: choose and connect a backend, relay the connection
//! phase, relay the command phase, and say in one log line why it ended.
//!
//! Every failure the client can still be told about gets a MySQL ERR packet (before the greeting:
//! sequence id 0 and no SQLSTATE marker) whose message starts `mysql-lb:`; the rest are closed with
//! a logged reason. Nothing here can disturb another session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::backends::balancer::ejection::Failure;
use crate::backends::balancer::{ClientInfo, Lease};
use crate::backends::kill;
use crate::backends::pooling::{self, holding::TEXT_LIMIT};
use crate::backends::route::{peer_ip, ClientFacts};
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;
use crate::proxy::auth::{AuthError, Authenticated, PatchedGreeting};
use crate::proxy::relay::{relay, RelayEnd};
use crate::proxy::state::ProxyState;
use crate::wire::protocol::errors::code;
use crate::wire::protocol::response::Tracker;

mod connect;
mod context;
mod deferred;
mod ending;
mod opening;
mod pooled;
pub mod proxied;
mod recorder;
mod rules;
mod transport;

use connect::{connect_backend, no_backend_message, Connected};
use context::Context;
pub use ending::refuse;
use ending::{handshake_failed, relay_ended, SessionEnd};
use opening::{Login, Opening};
use recorder::Recorder;

/// Why a session ended; the label set for disconnect metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    ClientQuit,
    ClientNetwork,
    AuthFailed,
    BackendNetwork,
    Malformed,
    NoBackend,
    Shutdown,
    IdleTimeout,
    /// A TLS handshake failed on either leg (the log line names the side).
    TlsHandshake,
    /// A plaintext TCP client refused under `tls.require`.
    TlsRequired,
    /// A login whose password would have crossed a plaintext backend leg in clear.
    CleartextPassword,
    /// A connection from `accept_proxy_protocol` without a valid PROXY protocol header in time.
    ProxyHeader,
    /// A PROXY protocol header from a network not in `accept_proxy_protocol`.
    ProxyHeaderUnlisted,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientQuit => "client_quit",
            Self::ClientNetwork => "client_network",
            Self::AuthFailed => "auth_failed",
            Self::BackendNetwork => "backend_network",
            Self::Malformed => "malformed_packet",
            Self::NoBackend => "no_backend",
            Self::Shutdown => "shutdown",
            Self::IdleTimeout => "idle_timeout",
            Self::TlsHandshake => "tls_handshake",
            Self::TlsRequired => "tls_required",
            Self::CleartextPassword => "cleartext_password",
            Self::ProxyHeader => "proxy_header",
            Self::ProxyHeaderUnlisted => "proxy_header_unlisted",
        }
    }
}

/// Where a client came from: its name in logs (`ip:port`, or the socket for a unix listener),
/// whether it is local (a unix socket, secure as a server counts it), the listener's name
/// (`listen:` as displayed), which routes may match, and its socket addresses. Behind a load
/// balancer in `accept_proxy_protocol`, `peer` and `addrs` are the client its PROXY header named.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub peer: &'a str,
    pub local: bool,
    pub listener: &'a str,
    /// The client's address and the one it connected to: what backends are told in a PROXY
    /// protocol header, read from here alone. None for a unix-socket client (the header then
    /// says the connection is the proxy's own).
    pub addrs: Option<(SocketAddr, SocketAddr)>,
}

impl<'a> Origin<'a> {
    /// `addrs`: the client's address, then the local address it connected to.
    pub fn tcp(peer: &'a str, listener: &'a str, addrs: Option<(SocketAddr, SocketAddr)>) -> Self {
        Self {
            peer,
            local: false,
            listener,
            addrs,
        }
    }

    pub fn unix(peer: &'a str, listener: &'a str) -> Self {
        Self {
            peer,
            local: true,
            listener,
            addrs: None,
        }
    }

    /// What routes match on before the client has said who it is.
    fn who(&self) -> ClientFacts<'a> {
        ClientFacts {
            user: None,
            schema: None,
            client: match self.addrs {
                Some((client, _)) => Some(client.ip()),
                None if self.local => None,
                None => peer_ip(self.peer),
            },
            listener: self.listener,
        }
    }
}

/// Runs one client session to its end. `worker` is the index of the worker thread running it
/// (its latency samples go to that worker's shard). Once `drain` is cancelled the session ends
/// at its next command boundary. The backend is connected at once and its greeting relayed, or,
/// in deferred mode, after the proxy greeted the client and read who it is; from the route on,
/// both modes take the same path and differ only in how the login starts ([`Opening`]).
pub async fn run<C>(
    state: Arc<ProxyState>,
    client: C,
    from: Origin<'_>,
    worker: usize,
    drain: &CancellationToken,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = LegStream::Plain(client);
    let (set, transport) = (state.backends(), state.transport_settings());
    let mut ctx = Context::new(&state, &set, &transport, from, worker, drain);
    // Futures are awaited where they are made, never bound to a name first: a named one keeps
    // its room in this state machine after it is done, beside every later one (its size would
    // be the sum of its steps, not the largest).
    let opening = match Opening::open(&mut ctx, &mut client).await {
        Ok(opening) => opening,
        Err(reason) => return reason,
    };
    let who = opening.who(&from);
    let Some(pool) = set.route(&who) else {
        let message = opening.unrouted();
        return opening
            .refuse(&ctx, &mut client, code::UNKNOWN_ERROR, &message)
            .await;
    };
    ctx.read_only = set.route_read_only(&who);
    let info = ClientInfo {
        addr: from.peer,
        user: who.user,
        default_db: who.schema,
        pool: Some(&pool.name),
    };
    let found = match connect_backend(&ctx, &info, pool).await {
        Ok(found) => found,
        Err(not) => {
            let message = no_backend_message(&set, pool, &not);
            // A pool with no room for one more login answers as a full server does.
            let code = if not.full {
                code::TOO_MANY_CONNECTIONS
            } else {
                code::UNKNOWN_ERROR
            };
            return opening.refuse(&ctx, &mut client, code, &message).await;
        }
    };
    log_in_and_serve(&mut ctx, client, opening, found).await
}

/// From a connected backend on: the login as `opening` starts it, then the command phase.
async fn log_in_and_serve<'a, C>(
    ctx: &mut Context<'a>,
    mut client: LegStream<C>,
    opening: Opening<'a>,
    found: (Lease, Connected, PatchedGreeting),
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (lease, mut connected, greeting) = found;
    let slot = connected.slot.take();
    let thread_id = greeting.greeting.connection_id;
    let server =
        crate::wire::sql::Server::from_greeting(greeting.greeting.server_version.as_bytes());
    let mut backend = LegStream::Plain(connected.stream);
    let plan = transport::plan(ctx, &connected.tls, &greeting, lease.backend());
    let login = Login {
        greeting,
        limits: ctx.state.session.handshake_limits(),
        plan: &plan,
    };
    let target = lease.backend();
    let (registration, auth) = opening
        .log_in(ctx, &mut client, &mut backend, target, login)
        .await;
    let auth = match auth {
        Ok(auth) => auth,
        Err(e) => return connection_phase_failed(ctx, &mut client, e, &lease).await,
    };
    let session = Established {
        proxy_id: authenticated(registration.as_ref(), &auth),
        client,
        backend,
        auth,
        lease,
        server,
    };
    let joined = slot.map(|slot| pooled::Joined {
        key: pool_key(ctx, &session),
        slot,
        thread_id,
        server,
        registration: registration.as_ref(),
    });
    command_phase(ctx, session, joined).await
}

/// A session past its connection phase.
struct Established<C, B> {
    client: LegStream<C>,
    backend: LegStream<B>,
    auth: Authenticated,
    lease: Lease,
    /// The proxy id its client was greeted with, if it got one.
    proxy_id: Option<u32>,
    /// How its backend's server reads statements, from its greeting.
    server: Option<crate::wire::sql::Server>,
}

/// The key a transaction-mode pool shares the session's server connections under: who it
/// logged in as, and how its backend leg goes.
fn pool_key<C, B>(ctx: &Context<'_>, session: &Established<C, B>) -> pooling::Key {
    let auth = &session.auth;
    let origin = ctx
        .transport
        .proxy_protocol(&session.lease.backend().name)
        .and(ctx.from.addrs)
        .map(|(client, _)| client.ip());
    ctx.state.server_pools.key(pooling::KeyData {
        user: auth.user.clone(),
        schema: auth.schema.clone(),
        charset: auth.charset,
        capabilities: (
            auth.negotiated.capabilities,
            auth.negotiated.mariadb_capabilities,
        ),
        tls: session.backend.is_tls(),
        compressed: auth.backend_compressed,
        origin,
    })
}

/// Relays the command phase to its end, then closes both legs. A session of a transaction-mode
/// pool (`joined`) relays on the server connections the pool hands it (see `pooled`).
async fn command_phase<C>(
    ctx: &Context<'_>,
    session: Established<C, BackendStream>,
    joined: Option<pooled::Joined<'_>>,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let Established {
        mut client,
        mut backend,
        mut auth,
        mut lease,
        proxy_id,
        server,
    } = session;
    let state = ctx.state;
    transport::established(ctx, lease.backend(), &client, &backend, &auth);
    lease.backend().routed.inc();
    state
        .backends()
        .session_succeeded(lease.backend(), Instant::now());
    let (up, down) = transport::start_compression(&mut client, &mut backend, &mut auth);
    let mut tracker = tracker_for(state, &auth);
    // Its own handle on the backend: a pooled session's lease moves with it (`pooled`).
    let home = Arc::clone(lease.backend());
    let mut recorder = Recorder::new(ctx, &home, &auth, proxy_id);
    // In a pool with roles a write never reaches a backend that takes none, whoever the client
    // is (a user with READ ONLY ADMIN is not stopped by the replica's read_only). A split
    // sends none there by itself.
    let guarded = ctx
        .set
        .pool(&home.pool)
        .is_some_and(|p| p.has_roles() && !p.pooling.read_write_split);
    if guarded {
        tracker.guard_statements();
        recorder.guard_writes();
    }
    let client_ip = ctx.from.addrs.map(|(client, _)| client.ip());
    let mariadb = server.is_some_and(|s| s.mariadb);
    if let Some(r) = rules::SessionRules::start(state, &auth.schema, client_ip, ctx.peer(), mariadb)
    {
        tracker.guard_statements();
        recorder.follow_rules(r);
    }
    let limit = recorder.statement_limit();
    if limit > 0 || joined.is_some() {
        // A pooled session reads statements to see what pins it.
        let pooled = if joined.is_some() { TEXT_LIMIT } else { 0 };
        tracker.report_statements(limit.max(pooled));
    }
    let end = match joined {
        None => {
            let (client, tracker) = (&mut client, &mut tracker);
            let ended = relay(
                client,
                &mut backend,
                tracker,
                up,
                down,
                ctx.stop,
                &mut recorder,
            );
            SessionEnd::Relay(ended.await)
        }
        Some(joined) => {
            let backend = std::mem::replace(&mut backend, LegStream::Closed);
            let start = pooled::Start { backend, up, down };
            let (client, tracker) = (&mut client, &mut tracker);
            pooled::relay_pooled(
                ctx,
                client,
                tracker,
                &mut recorder,
                start,
                joined,
                &mut lease,
            )
            .await
        }
    };
    if let Some(cause) = cut_mid_command(&end, &tracker) {
        state.backends().session_failed(
            lease.backend(),
            Failure::MidCommand,
            &cause,
            Instant::now(),
        );
    }
    let backend_name = &lease.backend().name;
    let reason = relay_ended(ctx, &mut client, end, &tracker, backend_name).await;
    transport::close_tls(&mut client).await;
    transport::close_tls(&mut backend).await;
    reason
}

/// The tracker of a session's command phase, as its connection phase left the legs.
fn tracker_for(state: &ProxyState, auth: &Authenticated) -> Tracker {
    let mut tracker = Tracker::new(auth.negotiated, state.session.max_packet_size);
    // Inside compressed frames the peers number packets by the frame counter: each direction
    // read from a compressed leg is renumbered to the plain protocol's ids as it passes.
    tracker.renumber(auth.client_compressed, auth.backend_compressed);
    if auth.guard_cleartext {
        tracker.guard_cleartext();
    }
    tracker
}

/// Ends a session whose connection phase failed; a backend whose TLS handshake failed (its
/// certificate does not verify, or it cannot do TLS) leaves rotation, since every client would
/// fail the same way, until a health check or the cool-off brings it back.
async fn connection_phase_failed<C: AsyncRead + AsyncWrite + Unpin>(
    ctx: &Context<'_>,
    client: &mut LegStream<C>,
    e: AuthError,
    lease: &Lease,
) -> EndReason {
    let backend = lease.backend();
    let set = ctx.state.backends();
    let now = Instant::now();
    if matches!(e, AuthError::BackendTls(_)) && set.mark_down(backend, now) {
        warn!(backend = %backend.name, "backend marked down: {e}");
    }
    match &e {
        AuthError::BackendTls(_)
        | AuthError::BackendRead(_)
        | AuthError::BackendWrite(_)
        | AuthError::BackendTimeout(_) => {
            set.session_failed(backend, Failure::Handshake, &e.cause(), now)
        }
        // The backend answered, if only to refuse the login.
        AuthError::Denied { .. } => set.session_succeeded(backend, now),
        _ => {}
    }
    let reason = handshake_failed(ctx, client, e, &backend.name).await;
    transport::close_tls(client).await;
    reason
}

/// Records who the session's client authenticated as (a KILL across backends needs the same
/// user name); returns its proxy id.
fn authenticated(
    registration: Option<&kill::Registration<'_>>,
    auth: &Authenticated,
) -> Option<u32> {
    let registration = registration?;
    registration.set_user(Some(&auth.user));
    Some(registration.id())
}

/// Why the relay's end counts against the backend: it closed the connection, or the connection
/// failed, while a command was unanswered. None for every other end (an idle backend closing
/// after its `wait_timeout` is not a failure).
fn cut_mid_command(end: &SessionEnd, tracker: &Tracker) -> Option<String> {
    match end {
        SessionEnd::Relay(RelayEnd::BackendClosed { pending }) if *pending > 0 => Some(format!(
            "closed the connection with {pending} command(s) unanswered"
        )),
        SessionEnd::Relay(RelayEnd::BackendIo(e)) if tracker.pending() > 0 => Some(e.to_string()),
        _ => None,
    }
}
