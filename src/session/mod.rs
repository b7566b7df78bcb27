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
use tracing::{info, warn};

use crate::auth::{
    read_greeting, relay_connection_phase, AuthError, Authenticated, PatchedGreeting,
};
use crate::balancer::ejection::Failure;
use crate::balancer::{Backend, BackendSet, ClientInfo, Lease, Pool};
use crate::config::BackendAddr;
use crate::kill;
use crate::leg::LegStream;
use crate::metrics::Refusal;
use crate::protocol::caps::CLIENT_SSL;
use crate::protocol::errors::{code, pre_greeting_err};
use crate::protocol::handshake::set_greeting_connection_id;
use crate::protocol::response::Tracker;
use crate::relay::{relay, RelayEnd, Stop};
use crate::route::{peer_ip, Who};
use crate::state::{LegSettings, ProxyState};
use crate::stream::BackendStream;
use rustls_pki_types::ServerName;
use tokio_rustls::TlsConnector;

mod deferred;
mod ending;
mod legs;
pub mod proxied;
mod recorder;

pub use ending::refuse;
use ending::{handshake_failed, relay_ended, send};
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
            client: if self.local { None } else { peer_ip(self.peer) },
            listener: self.listener,
        }
    }
}

/// Runs one client session to its end. `worker` is the index of the worker thread running it
/// (its latency samples go to that worker's shard). Once `drain` is cancelled the session ends
/// at its next command boundary. The backend is connected at once and its greeting relayed, or,
/// in deferred mode, after the proxy greeted the client and read who it is.
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
    if set.deferred() {
        return deferred::run(&shared, &set, client, from, worker, drain).await;
    }
    let peer = from.peer;
    let Some(pool) = set.route(&from.who()) else {
        return refuse_unrouted(&shared, &mut client, peer).await;
    };
    let info = ClientInfo {
        pool: Some(&pool.name),
        ..ClientInfo::at(peer)
    };
    let connect = connect_backend(&shared, &set, &info, pool, from.addrs);
    let (lease, backend, mut greeting) = match connect.await {
        Ok(found) => found,
        Err(tried) => {
            return refuse_no_backend(&shared, &mut client, peer, (&set, pool), &tried).await
        }
    };
    let Connected {
        stream,
        tls: backend_tls,
    } = backend;
    let mut backend = LegStream::Plain(stream);
    let _registered = register_proxy_id(&shared.kills, lease.backend(), &mut greeting, peer);
    let legs = shared.leg_settings();
    let plan = legs::plan(
        &shared,
        &legs,
        from.local,
        &backend_tls,
        &greeting,
        lease.backend(),
    );
    let mut next_seq = 2;
    let limits = shared.session.handshake_limits();
    let auth = relay_connection_phase(
        &mut client,
        &mut backend,
        greeting,
        limits,
        &plan,
        &mut next_seq,
    );
    let auth = match auth.await {
        Ok(auth) => auth,
        Err(e) => {
            return connection_phase_failed(&shared, &mut client, e, next_seq, peer, &lease).await
        }
    };
    let session = Established {
        proxy_id: authenticated(_registered.as_ref(), &auth),
        client,
        backend,
        auth,
        lease,
    };
    command_phase(&shared, session, peer, worker, drain).await
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

/// Relays the command phase to its end, then closes both legs.
async fn command_phase<C, B>(
    shared: &Arc<ProxyState>,
    session: Established<C, B>,
    peer: &str,
    worker: usize,
    drain: &CancellationToken,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
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
    let mut observer = Recorder::new(shared, lease.backend(), worker, &auth.user, proxy_id);
    let end = relay(
        &mut client,
        &mut backend,
        &mut tracker,
        client_pending,
        backend_pending,
        Stop {
            drain,
            idle_timeout: shared.session.idle_timeout,
        },
        &mut observer,
    )
    .await;
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

/// Tells a client that no backend of its pool could be connected (before any greeting), naming
/// the pool and each backend tried.
async fn refuse_no_backend<C>(
    shared: &ProxyState,
    client: &mut C,
    peer: &str,
    (set, pool): (&BackendSet, &Pool),
    tried: &[String],
) -> EndReason
where
    C: AsyncWrite + Unpin,
{
    let message = no_backend_message(set, pool, tried);
    warn!(client = peer, pool = %pool.name, "refused: {message}");
    shared.metrics.rejected(Refusal::NoBackend);
    send(client, &pre_greeting_err(code::UNKNOWN_ERROR, &message)).await;
    EndReason::NoBackend
}

/// "all backends are down", naming the pool when there are several.
fn no_backend_message(set: &BackendSet, pool: &Pool, tried: &[String]) -> String {
    let tried = tried.join("; ");
    if set.pools().len() > 1 {
        format!("all backends of pool {} are down; tried {tried}", pool.name)
    } else {
        format!("all backends are down; tried {tried}")
    }
}

/// Tells a client that no route matches it and there is no default pool.
async fn refuse_unrouted<C>(shared: &ProxyState, client: &mut C, peer: &str) -> EndReason
where
    C: AsyncWrite + Unpin,
{
    let message = "no route matches this client and no default_pool is configured";
    warn!(client = peer, "refused: {message}");
    shared.metrics.rejected(Refusal::NoBackend);
    send(client, &pre_greeting_err(code::UNKNOWN_ERROR, message)).await;
    EndReason::NoBackend
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

/// Clients see a proxy-unique connection id, so a KILL naming it can be mapped (see `kill`):
/// the greeting's id is replaced, and the session is registered until the guard drops.
fn register_proxy_id<'a>(
    kills: &'a kill::Registry,
    backend: &Arc<Backend>,
    greeting: &mut PatchedGreeting,
    peer: &str,
) -> Option<kill::Registration<'a>> {
    let registered = kills.register(kill::Target {
        backend: Arc::clone(backend),
        thread_id: greeting.greeting.connection_id,
        user: None,
    });
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

/// Tries backends in the balancer's order (a script may choose the first for this client) until
/// one greets; returns what each failed one said. A backend with `proxy_protocol` is first sent
/// the header naming `addrs` (the session's [`Origin::addrs`]).
async fn connect_backend(
    shared: &ProxyState,
    set: &BackendSet,
    client: &ClientInfo<'_>,
    pool: &Pool,
    addrs: Option<(SocketAddr, SocketAddr)>,
) -> Result<(Lease, Connected, PatchedGreeting), Vec<String>> {
    let mut tried = Vec::new();
    let legs = shared.leg_settings();
    tracing::Span::current().record("pool", pool.name.as_str());
    for backend in set.candidates_for(Instant::now(), client, Some(pool)) {
        let started = Instant::now();
        // Counted in the backend's active sessions from now, so clients choosing meanwhile see it.
        let counted = set.attempt(&backend);
        let result = open_backend(shared, &legs, &backend, addrs).await;
        match result {
            Ok((stream, greeting)) => {
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
    if tried.is_empty() {
        tried.push("no backend configured".to_owned());
    }
    Err(tried)
}

/// Connects `backend` and reads its greeting under one deadline (one timer per connect); whether
/// the connect had completed says which of the two the backend missed. Err carries the reason
/// and whether the backend itself is unreachable or broken (taken out of rotation) rather than
/// alive and refusing, e.g. its own "Too many connections".
async fn open_backend(
    shared: &ProxyState,
    legs: &LegSettings,
    backend: &Backend,
    addrs: Option<(SocketAddr, SocketAddr)>,
) -> Result<(Connected, PatchedGreeting), (String, bool)> {
    let connected = std::sync::atomic::AtomicBool::new(false);
    let attempt = async {
        let mut stream = BackendStream::open(
            &backend.address,
            shared.session.tcp_keepalive.as_ref(),
            &shared.socket_identity,
        )
        .await
        .map_err(|e| (e.to_string(), true))?;
        connected.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(version) = legs.proxy_protocol(&backend.name) {
            let sent = stream.send_proxy_header(version, addrs).await;
            sent.map_err(|e| (format!("sending the PROXY protocol header: {e}"), true))?;
        }
        let greeting = read_greeting(
            &mut stream,
            shared.session.max_handshake_packet_size,
            shared.session.strip,
        )
        .await
        .map_err(|e| {
            let broken = !matches!(e, AuthError::BackendRefused { .. });
            (e.to_string(), broken)
        })?;
        let tls = backend_tls(legs, backend, &greeting).map_err(|e| (e, true))?;
        Ok((Connected { stream, tls }, greeting))
    };
    match tokio::time::timeout(shared.session.connect_timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err((
            format!(
                "{} within {}",
                if connected.load(std::sync::atomic::Ordering::Relaxed) {
                    "no greeting"
                } else {
                    "connect timed out"
                },
                humantime::format_duration(shared.session.connect_timeout)
            ),
            true,
        )),
    }
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

/// A backend connection that greeted, and how its leg goes on.
struct Connected {
    stream: BackendStream,
    /// The leg switches to TLS during the connection phase, with this connector and name.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// Whether the backend leg switches to TLS, from the backend's mode and its greeting. A backend
/// that cannot meet its mode (no TLS offered under `required`) fails like one that did not greet.
fn backend_tls(
    legs: &LegSettings,
    backend: &Backend,
    greeting: &PatchedGreeting,
) -> Result<Option<(TlsConnector, ServerName<'static>)>, String> {
    let Some(leg) = legs.tls.backend(&backend.name) else {
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
