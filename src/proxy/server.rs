//! Accept loops, admission and session tasks; the listening sockets themselves are in `listen.rs`.
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
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument};

use crate::config::ListenAddr;
use crate::proxy::session;
use crate::proxy::state::ProxyState;
use crate::proxy::workers::{Placement, Placer};
use crate::telemetry::metrics::Refusal;
use crate::wire::protocol::errors::code;

mod listen;
use listen::Peer;
pub use listen::{Acceptor, Listener, StdAcceptor, UnixSocketFile};

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: ListenAddr, source: io::Error },
    #[error("cannot listen on {path}: another process is accepting connections there")]
    SocketInUse { path: PathBuf },
    #[error("cannot start the worker threads: {0}")]
    Workers(io::Error),
    #[error("{0}")]
    Tls(#[from] crate::net::tls::TlsError),
    #[error("backend_socket_user: {0}")]
    SocketIdentity(#[from] crate::net::stream::identity::IdentityError),
}

/// How sessions end and what they share: every accept loop has a copy.
#[derive(Debug, Clone)]
pub struct Sessions {
    pub state: Arc<ProxyState>,
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
        state,
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
            state.metrics.rejected(Refusal::TooManyConnections);
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
        let admitted = Admitted::new(Arc::clone(&state.metrics), permit, placement);
        let session = run_session(
            Arc::clone(&state),
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
/// abort), through [`crate::proxy::gate::Gated`], which locks a token only to register and when it
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
    state: Arc<ProxyState>,
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
        tcp_peer.filter(|a| session::proxied::from_balancer(&state.accept_proxy_protocol, *a));
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
                        session::proxied::run(state, s, (via, &listener), worker, &drain).await
                    }
                    None => {
                        let local = local.or_else(|| s.local_addr().ok());
                        let addrs = tcp_peer.zip(local);
                        let from = session::Origin::tcp(&peer, &listener, addrs);
                        session::run(state, s, from, worker, &drain).await
                    }
                },
                Accepted::Unix(s) => {
                    let from = session::Origin::unix(&peer, &listener);
                    session::run(state, s, from, worker, &drain).await
                }
            }
        });
        // Past the drain deadline (or on a second signal) sessions are dropped, which closes
        // both of their connections.
        let reason = tokio::select! {
            biased;
            reason = session => reason,
            _ = crate::proxy::gate::cancelled(&abort) => session::EndReason::Shutdown,
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
    metrics: Arc<crate::telemetry::metrics::Metrics>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    placement: Placement,
}

impl Admitted {
    fn new(
        metrics: Arc<crate::telemetry::metrics::Metrics>,
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
    use super::listen::{bind_tcp_group, peer_name};
    use crate::config::TcpKeepalive;
    use socket2::SockRef;
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
