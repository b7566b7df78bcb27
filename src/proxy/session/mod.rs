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
use crate::backends::route::{peer_ip, Who};
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;
use crate::proxy::auth::{AuthError, Authenticated};
use crate::proxy::relay::{relay, RelayEnd, Stop};
use crate::proxy::state::ProxyState;
use crate::telemetry::digest;
use crate::wire::protocol::errors::code;
use crate::wire::protocol::response::Tracker;

mod connect;
mod deferred;
mod ending;
mod legs;
mod opening;
mod pooled;
pub mod proxied;
mod recorder;

use connect::{connect_backend, no_backend_message};
pub use ending::refuse;
use ending::{handshake_failed, relay_ended};
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
    fn who(&self) -> Who<'a> {
        Who {
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
    shared: Arc<ProxyState>,
    client: C,
    from: Origin<'_>,
    worker: usize,
    drain: &CancellationToken,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = LegStream::Plain(client);
    let set = shared.backends();
    let legs = shared.leg_settings();
    let peer = from.peer;
    // The client-leg sequence id an ERR of the proxy's own takes next.
    let mut next_seq = 2;
    // Futures are awaited where they are made, never bound to a name first: a named one keeps
    // its room in this state machine after it is done, beside every later one (its size would
    // be the sum of its steps, not the largest).
    let opening =
        match Opening::open(&shared, (&set, &legs), &mut client, from, &mut next_seq).await {
            Ok(opening) => opening,
            Err(reason) => return reason,
        };
    let who = opening.who(&from);
    let Some(pool) = set.route(&who) else {
        let message = opening.unrouted();
        let refusal = (code::UNKNOWN_ERROR, message.as_str());
        return opening
            .refuse(&shared, &mut client, (peer, next_seq), refusal)
            .await;
    };
    let info = ClientInfo {
        addr: peer,
        user: who.user,
        default_db: who.schema,
        pool: Some(&pool.name),
    };
    let (lease, mut connected, greeting) =
        match connect_backend((&shared, &legs), &set, &info, pool, from.addrs).await {
            Ok(found) => found,
            Err(not) => {
                let message = no_backend_message(&set, pool, &not);
                // A pool with no room for one more login answers as a full server does.
                let code = if not.full {
                    code::TOO_MANY_CONNECTIONS
                } else {
                    code::UNKNOWN_ERROR
                };
                return opening
                    .refuse(&shared, &mut client, (peer, next_seq), (code, &message))
                    .await;
            }
        };
    let slot = connected.slot.take();
    let thread_id = greeting.greeting.connection_id;
    let server =
        crate::wire::sql::Server::from_greeting(greeting.greeting.server_version.as_bytes());
    let mut backend = LegStream::Plain(connected.stream);
    let plan = legs::plan(
        &shared,
        &legs,
        from.local,
        &connected.tls,
        &greeting,
        lease.backend(),
    );
    let login = Login {
        greeting,
        limits: shared.session.handshake_limits(),
        plan: &plan,
    };
    let (registration, auth) = opening
        .log_in(
            (&shared.kills, peer),
            (&mut client, &mut backend),
            lease.backend(),
            login,
            &mut next_seq,
        )
        .await;
    let auth = match auth {
        Ok(auth) => auth,
        Err(e) => {
            return connection_phase_failed(&shared, &mut client, e, next_seq, peer, &lease).await
        }
    };
    let session = Established {
        proxy_id: authenticated(registration.as_ref(), &auth),
        client,
        backend,
        auth,
        lease,
    };
    match slot {
        Some(slot) => {
            let origin = legs
                .proxy_protocol(&session.lease.backend().name)
                .and(from.addrs)
                .map(|(client, _)| client.ip());
            let joined = pooled::Joined {
                slot,
                thread_id,
                server,
                origin,
                registration: registration.as_ref(),
            };
            command_phase(&shared, session, peer, worker, drain, Some(joined)).await
        }
        None => command_phase(&shared, session, peer, worker, drain, None).await,
    }
}

/// A session past its connection phase.
struct Established<C, B> {
    client: LegStream<C>,
    backend: LegStream<B>,
    auth: Authenticated,
    lease: Lease,
    /// The proxy id its client was greeted with, if it got one.
    proxy_id: Option<u32>,
}

/// Relays the command phase to its end, then closes both legs. A session of a transaction-mode
/// pool (`joined`) relays on the server connections the pool hands it (see `pooled`).
async fn command_phase<C>(
    shared: &Arc<ProxyState>,
    session: Established<C, BackendStream>,
    peer: &str,
    worker: usize,
    drain: &CancellationToken,
    joined: Option<pooled::Joined<'_>>,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let Established {
        mut client,
        mut backend,
        mut auth,
        lease,
        proxy_id,
    } = session;
    legs::established(shared, peer, lease.backend(), &client, &backend, &auth);
    lease.backend().routed.inc();
    shared
        .backends()
        .session_succeeded(lease.backend(), Instant::now());
    let (client_pending, backend_pending) =
        legs::start_compression(&mut client, &mut backend, &mut auth);
    let mut tracker = Tracker::new(auth.negotiated, shared.session.max_packet_size);
    // Inside compressed frames the peers number packets by the frame counter: each direction
    // read from a compressed leg is renumbered to the plain protocol's ids as it passes.
    tracker.renumber(auth.client_compressed, auth.backend_compressed);
    if auth.guard_cleartext {
        tracker.guard_cleartext();
    }
    let leased = lease.backend();
    let ident = || digest::Ident::new(&leased.name, &leased.pool, &auth.user, &auth.schema);
    let digests = digest::Session::start(&shared.digests, worker, ident);
    let who = crate::telemetry::capture::Who {
        user: &auth.user,
        schema: &auth.schema,
        pool: &leased.pool,
        backend: &leased.name,
        client: peer,
        capabilities: auth.negotiated.capabilities,
        charset: auth.charset,
    };
    let mut observer = Recorder::new(shared, leased, worker, &auth.user, proxy_id, digests, who);
    let limit = observer.statement_limit();
    if limit > 0 || joined.is_some() {
        // A pooled session reads statements to see what pins it.
        let pooled = if joined.is_some() { TEXT_LIMIT } else { 0 };
        tracker.report_statements(limit.max(pooled));
    }
    let stop = Stop {
        drain,
        idle_timeout: shared.session.idle_timeout,
    };
    let pending = (client_pending, backend_pending);
    let end = match joined {
        None => {
            relay(
                &mut client,
                &mut backend,
                &mut tracker,
                pending.0,
                pending.1,
                stop,
                &mut observer,
            )
            .await
        }
        Some(joined) => {
            let key = shared.server_pools.key(pooling::KeyData {
                user: auth.user.clone(),
                schema: auth.schema.clone(),
                charset: auth.charset,
                capabilities: (
                    auth.negotiated.capabilities,
                    auth.negotiated.mariadb_capabilities,
                ),
                tls: backend.is_tls(),
                compressed: auth.backend_compressed,
                origin: joined.origin(),
            });
            let backend = std::mem::replace(&mut backend, LegStream::Closed);
            let session = (joined, key);
            let (tracker, observer) = (&mut tracker, &mut observer);
            pooled::relay_pooled(
                &mut client,
                backend,
                tracker,
                pending,
                stop,
                observer,
                session,
                (worker, peer),
            )
            .await
        }
    };
    if let Some(cause) = cut_mid_command(&end, &tracker) {
        shared.backends().session_failed(
            lease.backend(),
            Failure::MidCommand,
            &cause,
            Instant::now(),
        );
    }
    let backend_name = &lease.backend().name;
    let reason = relay_ended(&mut client, end, &tracker, peer, backend_name).await;
    legs::close_tls(&mut client).await;
    legs::close_tls(&mut backend).await;
    reason
}

/// Ends a session whose connection phase failed; a backend whose TLS handshake failed (its
/// certificate does not verify, or it cannot do TLS) leaves rotation, since every client would
/// fail the same way, until a health check or the cool-off brings it back.
async fn connection_phase_failed<C: AsyncRead + AsyncWrite + Unpin>(
    shared: &ProxyState,
    client: &mut LegStream<C>,
    e: AuthError,
    next_seq: u8,
    peer: &str,
    lease: &Lease,
) -> EndReason {
    let backend = lease.backend();
    let set = shared.backends();
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
    let reason = handshake_failed(client, e, next_seq, peer, &backend.name).await;
    legs::close_tls(client).await;
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
fn cut_mid_command(end: &RelayEnd, tracker: &Tracker) -> Option<String> {
    match end {
        RelayEnd::BackendClosed { pending } if *pending > 0 => Some(format!(
            "closed the connection with {pending} command(s) unanswered"
        )),
        RelayEnd::BackendIo(e) if tracker.pending() > 0 => Some(e.to_string()),
        _ => None,
    }
}
