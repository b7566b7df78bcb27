//! Listening sockets: binding them (one SO_REUSEPORT socket per worker for TCP), registering
//! them with a worker's reactor, and accepting one connection with the name of who connected.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::net::{TcpListener, UnixListener};

use super::{Accepted, ServerError};
use crate::config::{ListenAddr, TcpKeepalive};

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
pub(super) fn bind_tcp_group(
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
    pub(super) async fn accept(&self) -> io::Result<(Accepted, Peer, Arc<str>)> {
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
pub(super) fn peer_name(addr: SocketAddr) -> String {
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
pub(super) struct Peer {
    pub(super) name: String,
    pub(super) addr: Option<SocketAddr>,
}
