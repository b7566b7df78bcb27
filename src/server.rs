//! Listeners, admission and session tasks.
//!
//! Each listener (TCP or unix socket) runs its own accept loop. Admission is a semaphore sized to
//! `max_connections`: past it a client gets ERR 1040 at once instead of waiting, and the sessions
//! already running are untouched. When the process runs out of descriptors `accept` fails with
//! EMFILE; the loop then backs off briefly rather than spinning.
//!
//! Spreading sessions over the worker threads (`workers.rs`) costs as little as it can: each
//! worker has its own SO_REUSEPORT socket of every TCP listener, so the kernel wakes one worker
//! per connection (not all of them, with all but one finding nothing to accept), and that worker
//! keeps the session unless the workers are uneven (`Placer::place`). A unix socket cannot be
//! balanced by the kernel, so every worker accepts on it (see [`Listener`]).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use thiserror::Error;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument};

use crate::config::{ListenAddr, TcpKeepalive};
use crate::metrics::Refusal;
use crate::protocol::errors::code;
use crate::session;
use crate::state::ProxyState;
use crate::workers::{Placement, Placer};

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: ListenAddr, source: io::Error },
    #[error("cannot listen on {path}: another process is accepting connections there")]
    SocketInUse { path: PathBuf },
    #[error("cannot start the worker threads: {0}")]
    Workers(io::Error),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("backend_socket_user: {0}")]
    SocketIdentity(#[from] crate::stream::identity::IdentityError),
}

/// A bound listener. TCP: one socket per worker, all bound to the same address with SO_REUSEPORT,
/// so the kernel hands each new connection to one worker's queue and wakes only that worker. A
/// unix socket has no such balancing (SO_REUSEPORT does nothing for it): every worker accepts on
/// it, and the first one the kernel runs takes the connection. One accepting worker handing
/// sessions over was measured too: it wakes fewer threads but connected at 0.6–0.8× the rate on
/// the load benchmark's shared 2-core machine, every connection waiting for that one thread.
#[derive(Debug)]
pub enum Listener {
    /// The address bound, and its sockets until [`acceptors`](Self::acceptors) hands them out.
    Tcp(SocketAddr, Vec<std::net::TcpListener>),
    Unix(std::os::unix::net::UnixListener, UnixSocketFile),
}

/// Connections waiting to be accepted, per listening socket (what tokio uses too).
const BACKLOG: i32 = 1024;

impl Listener {
    /// Binds `addr` for `workers` worker threads; accepted TCP connections get `keepalive`. With
    /// `shared_port` (`reuse_port: true`) a TCP port other mysql-lb processes listen on is shared
    /// with them rather than refused.
    pub async fn bind(
        addr: &ListenAddr,
        workers: usize,
        keepalive: Option<&TcpKeepalive>,
        shared_port: bool,
    ) -> Result<Self, ServerError> {
        let bind_err = |source| ServerError::Bind {
            addr: addr.clone(),
            source,
        };
        match addr {
            ListenAddr::Tcp(sa) => bind_tcp_group(*sa, workers.max(1), keepalive, shared_port)
                .map(|(addr, group)| Self::Tcp(addr, group))
                .map_err(bind_err),
            ListenAddr::Unix(path) => {
                remove_stale_socket(path).await?;
                let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_err)?;
                listener.set_nonblocking(true).map_err(bind_err)?;
                Ok(Self::Unix(listener, UnixSocketFile(path.clone())))
            }
        }
    }

    /// The address actually bound (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> ListenAddr {
        match self {
            Self::Tcp(addr, _) => ListenAddr::Tcp(*addr),
            Self::Unix(_, file) => ListenAddr::Unix(file.0.clone()),
        }
    }

    /// Who accepts on this listener among `workers` workers: each worker one of the TCP sockets
    /// (handed over, not duplicated: a worker that cannot use its socket closes it, and the
    /// kernel then sends its share of connections to the others rather than to a queue nobody
    /// reads); every worker a duplicate of the unix socket.
    pub fn acceptors(&mut self, workers: usize) -> io::Result<Vec<(usize, StdAcceptor)>> {
        use std::os::fd::AsFd;
        match self {
            Self::Tcp(addr, group) => {
                let name: Arc<str> = Arc::from(ListenAddr::Tcp(*addr).to_string());
                Ok(std::mem::take(group)
                    .into_iter()
                    .enumerate()
                    .map(|(worker, l)| {
                        (
                            worker % workers.max(1),
                            StdAcceptor::Tcp(l, Arc::clone(&name)),
                        )
                    })
                    .collect())
            }
            Self::Unix(l, file) => (0..workers.max(1))
                .map(|worker| {
                    let dup =
                        std::os::unix::net::UnixListener::from(l.as_fd().try_clone_to_owned()?);
                    let name = Arc::from(format!("unix:{}", file.0.display()));
                    Ok((worker, StdAcceptor::Unix(dup, name)))
                })
                .collect(),
        }
    }
}

/// `n` listening sockets sharing `addr` through SO_REUSEPORT. A plain bind comes first, so that
/// an address someone already listens on fails as it would for a single socket: otherwise a
/// second mysql-lb of the same user would silently share the port with the first. With `shared`
/// that sharing is what is asked for: the first socket sets SO_REUSEPORT too.
///
/// TCP_NODELAY (every write is a whole request or response: never hold it back for Nagle) and
/// the keepalive options are set here once: Linux copies a listening socket's options to each
/// socket it accepts, which spares every connection a `setsockopt` per option.
fn bind_tcp_group(
    addr: SocketAddr,
    n: usize,
    keepalive: Option<&TcpKeepalive>,
    shared: bool,
) -> io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    let probe = tcp_socket(addr, shared)?;
    let addr = probe
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("bound address is not an IP address"))?;
    drop(probe);
    let group = (0..n)
        .map(|_| {
            let socket = tcp_socket(addr, true)?;
            socket.set_tcp_nodelay(true)?;
            if let Some(k) = keepalive {
                k.apply(SockRef::from(&socket))?;
            }
            socket.listen(BACKLOG)?;
            Ok(socket.into())
        })
        .collect::<io::Result<_>>()?;
    Ok((addr, group))
}

fn tcp_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    // As tokio's bind does: a restart need not wait for the last run's TIME_WAIT sockets.
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// Removes the socket file when the listener goes away.
#[derive(Debug)]
pub struct UnixSocketFile(PathBuf);

impl Drop for UnixSocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A socket file left by a process that died is removed; one with a live listener is an error.
async fn remove_stale_socket(path: &Path) -> Result<(), ServerError> {
    if !path.exists() {
        return Ok(());
    }
    if tokio::net::UnixStream::connect(path).await.is_ok() {
        return Err(ServerError::SocketInUse {
            path: path.to_owned(),
        });
    }
    std::fs::remove_file(path).map_err(|source| ServerError::Bind {
        addr: ListenAddr::Unix(path.to_owned()),
        source,
    })
}

/// One worker's listening socket, registered with that worker's reactor.
#[derive(Debug)]
pub enum Acceptor {
    /// The listener, its name (`listen:` as displayed, `ip:port`), and the address its
    /// connections arrive at when that is always the same one (bound to one IP rather than a
    /// wildcard), so no session asks the kernel for it.
    Tcp(TcpListener, Arc<str>, Option<SocketAddr>),
    /// The listener and its name, which also names its clients in logs (`unix:PATH`).
    Unix(UnixListener, Arc<str>),
}

/// A worker's listening socket, not yet registered with its reactor.
#[derive(Debug)]
pub enum StdAcceptor {
    /// The socket and the listener's name (`listen:` as displayed), as routes match it.
    Tcp(std::net::TcpListener, Arc<str>),
    Unix(std::os::unix::net::UnixListener, Arc<str>),
}

impl StdAcceptor {
    /// Registers the socket with the current thread's runtime (it is already non-blocking:
    /// the flag belongs to the shared open file).
    pub fn register(self) -> io::Result<Acceptor> {
        Ok(match self {
            Self::Tcp(l, name) => {
                let bound = l.local_addr()?;
                let fixed = (!bound.ip().is_unspecified()).then_some(bound);
                Acceptor::Tcp(TcpListener::from_std(l)?, name, fixed)
            }
            Self::Unix(l, name) => Acceptor::Unix(UnixListener::from_std(l)?, name),
        })
    }
}

impl Acceptor {
    /// One connection, with the client's name for logs and the listener's name for routes.
    /// TCP connections come with TCP_NODELAY and keepalive set: see `bind_tcp_group`.
    async fn accept(&self) -> io::Result<(Accepted, Peer, Arc<str>)> {
        match self {
            Self::Tcp(l, name, local) => {
                let (s, peer) = l.accept().await?;
                let peer = Peer {
                    name: peer_name(peer),
                    addr: Some(peer),
                };
                Ok((Accepted::Tcp(s, *local), peer, Arc::clone(name)))
            }
            Self::Unix(l, name) => {
                let (s, _) = l.accept().await?;
                let peer = Peer {
                    name: name.to_string(),
                    addr: None,
                };
                Ok((Accepted::Unix(s), peer, Arc::clone(name)))
            }
        }
    }
}

/// `ip:port`, as `SocketAddr`'s `Display` writes it. An IPv4 peer (nearly every client) is written
/// digit by digit: the general formatter costs about as much as the rest of an accept.
fn peer_name(addr: SocketAddr) -> String {
    let SocketAddr::V4(v4) = addr else {
        return addr.to_string();
    };
    let mut name = String::with_capacity(21);
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            name.push('.');
        }
        push_decimal(&mut name, u32::from(octet));
    }
    name.push(':');
    push_decimal(&mut name, u32::from(v4.port()));
    name
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Who connected: the name logs and the connection list show, and a TCP client's address.
struct Peer {
    name: String,
    addr: Option<SocketAddr>,
}

/// How sessions end and what they share: every accept loop has a copy.
#[derive(Debug, Clone)]
pub struct Sessions {
    pub shared: Arc<ProxyState>,
    pub admission: Arc<Semaphore>,
    pub max_connections: usize,
    /// Tracks every session task, whichever worker runs it.
    pub tasks: TaskTracker,
    /// Cancelled to drain: sessions end at their next command boundary.
    pub drain: CancellationToken,
    /// Cancelled to close every session at once.
    pub abort: CancellationToken,
}

/// Runs worker `me`'s accept loop on one listening socket until `sessions.drain` is cancelled. A
/// session runs on this worker unless `placer` finds the workers uneven; then the socket moves
/// to the least loaded one.
pub async fn accept_loop(listener: Acceptor, sessions: Sessions, me: usize, placer: Arc<Placer>) {
    let Sessions {
        shared,
        admission,
        max_connections,
        tasks,
        drain: shutdown,
        abort,
    } = sessions;
    let tokens = WorkerTokens::new(&shutdown, &abort, placer.len());
    let mut last_emfile_log: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let (stream, peer, listener_name) = match accepted {
            Ok(a) => a,
            Err(e) if is_fd_exhaustion(&e) => {
                if last_emfile_log.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                    error!("accept failed, out of file descriptors ({e}); backing off");
                    last_emfile_log = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => {
                debug!("accept failed: {e}");
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&admission).try_acquire_owned() else {
            warn!(
                client = %peer.name,
                "refused: too many connections (max_connections = {max_connections})"
            );
            shared.metrics.rejected(Refusal::TooManyConnections);
            tasks.spawn(stream.refuse());
            continue;
        };
        let placement = placer.place(me);
        let worker = placement.worker();
        let incoming = if worker == me {
            Incoming::Here(stream)
        } else {
            // Registered with this worker's reactor: deregister, and register on the other.
            match stream.into_std() {
                Ok(s) => Incoming::Moved(s),
                Err(e) => {
                    warn!(client = %peer.name, "dropped: cannot move the connection to a worker: {e}");
                    continue;
                }
            }
        };
        let admitted = Admitted::new(Arc::clone(&shared.metrics), permit, placement);
        let session = run_session(
            Arc::clone(&shared),
            incoming,
            (peer, listener_name),
            admitted,
            tokens.drain(worker),
            tokens.abort(worker),
        );
        if worker == me {
            tasks.spawn(session);
        } else {
            tasks.spawn_on(session, placer.handle(worker));
        }
    }
}

/// The drain and abort tokens as each worker's sessions see them: one child of each per worker.
///
/// A session waits on both for its whole life (the relay for the drain, `run_session` for the
/// abort), through [`crate::gate::Gated`], which locks a token only to register and when it
/// fires. Children of their own keep even those locks (a session's start and end) within one
/// worker thread; cancelling the parent still reaches every child.
struct WorkerTokens(Vec<(CancellationToken, CancellationToken)>);

impl WorkerTokens {
    fn new(drain: &CancellationToken, abort: &CancellationToken, workers: usize) -> Self {
        Self(
            (0..workers.max(1))
                .map(|_| (drain.child_token(), abort.child_token()))
                .collect(),
        )
    }

    fn drain(&self, worker: usize) -> CancellationToken {
        self.0[worker % self.0.len()].0.clone()
    }

    fn abort(&self, worker: usize) -> CancellationToken {
        self.0[worker % self.0.len()].1.clone()
    }
}

/// An accepted connection: on the accepting worker's reactor, or unregistered on its way to
/// another worker.
enum Incoming {
    Here(Accepted),
    Moved(StdAccepted),
}

enum StdAccepted {
    Tcp(std::net::TcpStream, Option<SocketAddr>),
    Unix(std::os::unix::net::UnixStream),
}

/// One session, from its first byte to recording why it ended.
async fn run_session(
    shared: Arc<ProxyState>,
    stream: Incoming,
    (Peer { name: peer, addr }, listener): (Peer, Arc<str>),
    admitted: Admitted,
    drain: CancellationToken,
    abort: CancellationToken,
) {
    // `pool` is recorded once the session is routed, so every later line of it names its pool.
    // From a load balancer in `accept_proxy_protocol`, `client` is recorded once its PROXY header
    // named the client, and the balancer's own address is `via`.
    let tcp_peer = addr;
    let balancer =
        tcp_peer.filter(|a| session::proxied::from_balancer(&shared.accept_proxy_protocol, *a));
    let span = match balancer {
        Some(via) => tracing::info_span!(
            "session",
            client = tracing::field::Empty,
            via = %via,
            pool = tracing::field::Empty
        ),
        None => tracing::info_span!("session", client = %peer, pool = tracing::field::Empty),
    };
    async move {
        let stream = match stream {
            Incoming::Here(s) => s,
            Incoming::Moved(s) => match s.register() {
                Ok(s) => s,
                Err(e) => {
                    warn!("dropped: the worker cannot register the connection: {e}");
                    admitted.metrics.disconnected("client_network");
                    return;
                }
            },
        };
        let worker = admitted.placement.worker();
        // Boxed: the session's state machine is several KiB, and unboxed it would be copied
        // whole each time the task is moved on its way to a worker (tracked, spawned, into its
        // cell); boxed, those moves carry a pointer.
        let session = Box::pin(async {
            match stream {
                Accepted::Tcp(s, local) => match balancer {
                    Some(via) => {
                        session::proxied::run(shared, s, (via, &listener), worker, &drain).await
                    }
                    None => {
                        let local = local.or_else(|| s.local_addr().ok());
                        let addrs = tcp_peer.zip(local);
                        let from = session::Origin::tcp(&peer, &listener, addrs);
                        session::run(shared, s, from, worker, &drain).await
                    }
                },
                Accepted::Unix(s) => {
                    let from = session::Origin::unix(&peer, &listener);
                    session::run(shared, s, from, worker, &drain).await
                }
            }
        });
        // Past the drain deadline (or on a second signal) sessions are dropped, which closes
        // both of their connections.
        let reason = tokio::select! {
            biased;
            reason = session => reason,
            _ = crate::gate::cancelled(&abort) => session::EndReason::Shutdown,
        };
        debug!(reason = reason.as_str(), "session ended");
        if reason == session::EndReason::ProxyHeaderUnlisted {
            admitted.metrics.proxy_protocol_rejected("unlisted");
        }
        admitted.metrics.disconnected(reason.as_str());
    }
    .instrument(span)
    .await
}

/// An admitted client: holds its `max_connections` slot and its place on a worker, and counts
/// in the connections gauge, until dropped — also when the session task panics or is torn down.
struct Admitted {
    metrics: Arc<crate::metrics::Metrics>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    placement: Placement,
}

impl Admitted {
    fn new(
        metrics: Arc<crate::metrics::Metrics>,
        permit: tokio::sync::OwnedSemaphorePermit,
        placement: Placement,
    ) -> Self {
        metrics.client_connections.inc();
        Self {
            metrics,
            _permit: permit,
            placement,
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.metrics.client_connections.dec();
    }
}

/// A TCP connection comes with the address it arrived at where its listener knows it.
enum Accepted {
    Tcp(tokio::net::TcpStream, Option<SocketAddr>),
    Unix(tokio::net::UnixStream),
}

impl Accepted {
    fn into_std(self) -> io::Result<StdAccepted> {
        Ok(match self {
            Self::Tcp(s, local) => StdAccepted::Tcp(s.into_std()?, local),
            Self::Unix(s) => StdAccepted::Unix(s.into_std()?),
        })
    }

    async fn refuse(self) {
        let message = "Too many connections";
        match self {
            Self::Tcp(s, _) => session::refuse(s, code::TOO_MANY_CONNECTIONS, message).await,
            Self::Unix(s) => session::refuse(s, code::TOO_MANY_CONNECTIONS, message).await,
        }
    }
}

impl StdAccepted {
    /// Registers the socket with the current worker's reactor (it is still non-blocking).
    fn register(self) -> io::Result<Accepted> {
        Ok(match self {
            Self::Tcp(s, local) => Accepted::Tcp(tokio::net::TcpStream::from_std(s)?, local),
            Self::Unix(s) => Accepted::Unix(tokio::net::UnixStream::from_std(s)?),
        })
    }
}

/// EMFILE (per process) and ENFILE (system wide) on Linux.
fn is_fd_exhaustion(e: &io::Error) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    matches!(e.raw_os_error(), Some(ENFILE | EMFILE))
}

/// Logs where the proxy listens.
pub fn announce(listeners: &[Listener]) {
    for l in listeners {
        info!(address = %l.local_addr(), "listening");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_peer_is_named_as_its_address_displays() {
        for addr in [
            "127.0.0.1:3306",
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.0.20.1:9",
            "192.168.100.7:50000",
            "[::1]:3306",
            "[fe80::1:2]:10",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(peer_name(addr), addr.to_string());
        }
    }

    use super::*;

    fn local(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_tcp_listener_is_one_socket_per_worker_on_one_port() {
        let (addr, group) = bind_tcp_group(local(0), 3, None, false).unwrap();
        assert_ne!(addr.port(), 0);
        let ports: Vec<u16> = group
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        assert_eq!(ports, vec![addr.port(); 3]);
    }

    #[test]
    fn a_port_already_listened_on_is_refused_even_with_reuseport() {
        let (addr, _group) = bind_tcp_group(local(0), 2, None, false).unwrap();
        // A second mysql-lb (same user, SO_REUSEPORT too) must not silently share the port.
        let second = bind_tcp_group(addr, 2, None, false).unwrap_err();
        assert_eq!(second.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn a_shared_port_is_joined_only_when_both_sides_share() {
        let (addr, _first) = bind_tcp_group(local(0), 2, None, true).unwrap();
        let (joined, group) = bind_tcp_group(addr, 2, None, true).unwrap();
        assert_eq!((joined, group.len()), (addr, 2));
        // A lone instance still refuses the port another one listens on, shared or not.
        let lone = bind_tcp_group(addr, 1, None, false).unwrap_err();
        assert_eq!(lone.kind(), io::ErrorKind::AddrInUse);
        // Not a mysql-lb (no SO_REUSEPORT): nobody joins it.
        let other = std::net::TcpListener::bind(local(0)).unwrap();
        let taken = bind_tcp_group(other.local_addr().unwrap(), 1, None, true).unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AddrInUse);
    }

    #[test]
    fn accepted_connections_inherit_nodelay_and_keepalive_from_the_listener() {
        let keepalive = TcpKeepalive {
            idle: Duration::from_secs(7),
            interval: Duration::from_secs(3),
            count: 4,
        };
        let (addr, group) = bind_tcp_group(local(0), 1, Some(&keepalive), false).unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        group[0].set_nonblocking(false).unwrap();
        let (accepted, _) = group[0].accept().unwrap();
        let s = SockRef::from(&accepted);
        assert!(s.tcp_nodelay().unwrap());
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), Duration::from_secs(7));
        assert_eq!(s.tcp_keepalive_interval().unwrap(), Duration::from_secs(3));
        assert_eq!(s.tcp_keepalive_retries().unwrap(), 4);
        assert_eq!(
            s.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(7 + 3 * 4))
        );
    }

    /// A listener bound to one address names it for its connections (the destination a PROXY
    /// protocol header carries); a wildcard one leaves it to each connection's own socket.
    #[tokio::test]
    async fn a_listener_on_one_address_knows_where_its_connections_arrive() {
        let wildcard = SocketAddr::from(([0, 0, 0, 0], 0));
        for (bind, known) in [(local(0), true), (wildcard, false)] {
            let (addr, mut group) = bind_tcp_group(bind, 1, None, false).unwrap();
            let acceptor = StdAcceptor::Tcp(group.remove(0), Arc::from("test"))
                .register()
                .unwrap();
            let client = tokio::net::TcpStream::connect(local(addr.port()))
                .await
                .unwrap();
            let (accepted, peer, _) = acceptor.accept().await.unwrap();
            assert_eq!(peer.name, client.local_addr().unwrap().to_string());
            assert_eq!(peer.addr, Some(client.local_addr().unwrap()));
            let Accepted::Tcp(s, arrived) = accepted else {
                panic!("a TCP listener accepts TCP connections");
            };
            assert_eq!(arrived.is_some(), known, "{bind}");
            if let Some(arrived) = arrived {
                assert_eq!(arrived, s.local_addr().unwrap());
                assert_eq!(arrived, client.peer_addr().unwrap());
            }
        }
    }
}
