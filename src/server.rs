//! Listeners, admission and session tasks.
//!
//! Each listener (TCP or unix socket) runs its own accept loop. Admission is a semaphore sized to
//! `max_connections`: past it a client gets ERR 1040 at once instead of waiting, and the sessions
//! already running are untouched. When the process runs out of descriptors `accept` fails with
//! EMFILE; the loop then backs off briefly rather than spinning. Every worker thread
//! (`workers.rs`) runs an accept loop on every listener; a session lives on the worker that
//! accepted it, or on the least loaded one when the counts differ.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn, Instrument};

use crate::config::ListenAddr;
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
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, UnixSocketFile),
}

impl Listener {
    pub async fn bind(addr: &ListenAddr) -> Result<Self, ServerError> {
        let bind_err = |source| ServerError::Bind {
            addr: addr.clone(),
            source,
        };
        match addr {
            ListenAddr::Tcp(sa) => Ok(Self::Tcp(TcpListener::bind(sa).await.map_err(bind_err)?)),
            ListenAddr::Unix(path) => {
                remove_stale_socket(path).await?;
                let listener = UnixListener::bind(path).map_err(bind_err)?;
                Ok(Self::Unix(listener, UnixSocketFile(path.clone())))
            }
        }
    }

    /// The address actually bound (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> ListenAddr {
        match self {
            Self::Tcp(l) => l
                .local_addr()
                .map(ListenAddr::Tcp)
                .unwrap_or_else(|_| ListenAddr::Unix(PathBuf::new())),
            Self::Unix(_, file) => ListenAddr::Unix(file.0.clone()),
        }
    }
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

/// One worker's handle on a listener: a duplicate of the listening socket registered with that
/// worker's reactor. Every worker accepts on every listener; the kernel wakes them all and the
/// first to call `accept` takes the connection. The session stays on that worker unless another
/// has fewer sessions (`Placer::place`), so that bursts of connects still spread.
#[derive(Debug)]
pub enum Acceptor {
    Tcp(TcpListener),
    /// The listener and how clients are named in logs (`unix:PATH`).
    Unix(UnixListener, String),
}

/// A listener duplicated for a worker, not yet registered with its reactor.
#[derive(Debug)]
pub enum StdAcceptor {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, String),
}

impl Listener {
    /// A duplicate of the listening socket for another thread's runtime.
    pub fn try_clone_std(&self) -> io::Result<StdAcceptor> {
        use std::os::fd::AsFd;
        Ok(match self {
            Self::Tcp(l) => {
                StdAcceptor::Tcp(std::net::TcpListener::from(l.as_fd().try_clone_to_owned()?))
            }
            Self::Unix(l, file) => StdAcceptor::Unix(
                std::os::unix::net::UnixListener::from(l.as_fd().try_clone_to_owned()?),
                format!("unix:{}", file.0.display()),
            ),
        })
    }
}

impl StdAcceptor {
    /// Registers the duplicate with the current thread's runtime (it is already non-blocking:
    /// the flag belongs to the shared open file).
    pub fn register(self) -> io::Result<Acceptor> {
        Ok(match self {
            Self::Tcp(l) => Acceptor::Tcp(TcpListener::from_std(l)?),
            Self::Unix(l, name) => Acceptor::Unix(UnixListener::from_std(l)?, name),
        })
    }
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

/// Runs worker `me`'s accept loop on one listener until `sessions.drain` is cancelled. A session
/// runs on this worker unless `placer` says another has fewer; then the socket moves there.
pub async fn accept_loop(listener: Acceptor, sessions: Sessions, me: usize, placer: Arc<Placer>) {
    let Sessions {
        shared,
        admission,
        max_connections,
        tasks,
        drain: shutdown,
        abort,
    } = sessions;
    let mut last_emfile_log: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = accept(&listener) => a,
        };
        let (stream, peer) = match accepted {
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
                client = %peer,
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
                    warn!(client = %peer, "dropped: cannot move the connection to a worker: {e}");
                    continue;
                }
            }
        };
        let admitted = Admitted::new(Arc::clone(&shared.metrics), permit, placement);
        let session = run_session(
            Arc::clone(&shared),
            incoming,
            peer,
            admitted,
            shutdown.clone(),
            abort.clone(),
        );
        if worker == me {
            tasks.spawn(session);
        } else {
            tasks.spawn_on(session, placer.handle(worker));
        }
    }
}

/// An accepted connection: on the accepting worker's reactor, or unregistered on its way to
/// another worker.
enum Incoming {
    Here(Accepted),
    Moved(StdAccepted),
}

enum StdAccepted {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// One session, from its first byte to recording why it ended.
async fn run_session(
    shared: Arc<ProxyState>,
    stream: Incoming,
    peer: String,
    admitted: Admitted,
    drain: CancellationToken,
    abort: CancellationToken,
) {
    let span = tracing::info_span!("session", client = %peer);
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
        let session = async {
            match stream {
                Accepted::Tcp(s) => session::run(shared, s, &peer, worker, &drain).await,
                Accepted::Unix(s) => session::run(shared, s, &peer, worker, &drain).await,
            }
        };
        // Past the drain deadline (or on a second signal) sessions are dropped, which closes
        // both of their connections.
        let reason = tokio::select! {
            reason = session => reason,
            _ = abort.cancelled() => session::EndReason::Shutdown,
        };
        debug!(reason = reason.as_str(), "session ended");
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

enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Accepted {
    fn into_std(self) -> io::Result<StdAccepted> {
        Ok(match self {
            Self::Tcp(s) => StdAccepted::Tcp(s.into_std()?),
            Self::Unix(s) => StdAccepted::Unix(s.into_std()?),
        })
    }

    async fn refuse(self) {
        let message = "Too many connections";
        match self {
            Self::Tcp(s) => session::refuse(s, code::TOO_MANY_CONNECTIONS, message).await,
            Self::Unix(s) => session::refuse(s, code::TOO_MANY_CONNECTIONS, message).await,
        }
    }
}

impl StdAccepted {
    /// Registers the socket with the current worker's reactor (it is still non-blocking).
    fn register(self) -> io::Result<Accepted> {
        Ok(match self {
            Self::Tcp(s) => Accepted::Tcp(tokio::net::TcpStream::from_std(s)?),
            Self::Unix(s) => Accepted::Unix(tokio::net::UnixStream::from_std(s)?),
        })
    }
}

async fn accept(listener: &Acceptor) -> io::Result<(Accepted, String)> {
    match listener {
        Acceptor::Tcp(l) => {
            let (s, peer) = l.accept().await?;
            // Each write is a whole request or response: never hold it back for Nagle.
            if let Err(e) = s.set_nodelay(true) {
                debug!("TCP_NODELAY on a client socket: {e}");
            }
            Ok((Accepted::Tcp(s), peer.to_string()))
        }
        Acceptor::Unix(l, name) => {
            let (s, _) = l.accept().await?;
            Ok((Accepted::Unix(s), name.clone()))
        }
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
