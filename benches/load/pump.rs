//! The floor anchor of the load benchmark: a relay that knows nothing about MySQL.
//!
//! It accepts clients (TCP, or a unix socket when the address is a path), connects each to the
//! next backend in turn (TCP or unix socket likewise) and copies bytes both ways
//! until either side closes (tokio's `copy_bidirectional`: one read and one write per chunk, as
//! mysql-lb does), on `--threads N` single-threaded runtimes, each accepting on the same listener.
//! No parsing, no metrics, no admission, no health checks: what it costs per query is what any
//! user-space proxy pays the kernel for two loopback hops, so the gap between it and mysql-lb is
//! all that mysql-lb's own work can account for.
//!
//!     cargo build --release --example pump
//!     target/release/examples/pump 127.0.0.1:4000 127.0.0.1:3306 127.0.0.1:3307 --threads 2
//!     target/release/examples/pump /tmp/pump.sock /run/db1.sock /run/db2.sock

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

#[derive(Clone, Debug)]
enum Addr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Addr {
    fn parse(s: &str) -> Self {
        if s.starts_with('/') {
            Self::Unix(s.into())
        } else {
            Self::Tcp(s.parse().expect("addresses are ip:port or /socket/path"))
        }
    }
}

enum StdListener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listen: Option<Addr> = None;
    let mut backends: Vec<Addr> = Vec::new();
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    while let Some(arg) = args.next() {
        if arg == "--threads" {
            threads = args
                .next()
                .and_then(|n| n.parse().ok())
                .expect("--threads N");
        } else {
            let addr = Addr::parse(&arg);
            if listen.is_none() {
                listen = Some(addr);
            } else {
                backends.push(addr);
            }
        }
    }
    let (Some(listen), false) = (listen, backends.is_empty()) else {
        eprintln!("usage: pump LISTEN BACKEND... [--threads N]");
        std::process::exit(2);
    };
    let listener = match &listen {
        Addr::Tcp(a) => {
            let l = std::net::TcpListener::bind(a).expect("bind");
            l.set_nonblocking(true).expect("non-blocking");
            StdListener::Tcp(l)
        }
        Addr::Unix(p) => {
            let _ = std::fs::remove_file(p);
            let l = std::os::unix::net::UnixListener::bind(p).expect("bind");
            l.set_nonblocking(true).expect("non-blocking");
            StdListener::Unix(l)
        }
    };
    let backends = Arc::new(backends);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let listener = match &listener {
                StdListener::Tcp(l) => StdListener::Tcp(l.try_clone().expect("clone listener")),
                StdListener::Unix(l) => StdListener::Unix(l.try_clone().expect("clone listener")),
            };
            let (backends, next) = (Arc::clone(&backends), Arc::clone(&next));
            std::thread::spawn(move || serve(listener, &backends, &next))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

fn serve(listener: StdListener, backends: &Arc<Vec<Addr>>, next: &AtomicUsize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        match listener {
            StdListener::Tcp(l) => {
                let listener = tokio::net::TcpListener::from_std(l).expect("register");
                loop {
                    if let Ok((client, _)) = listener.accept().await {
                        let _ = client.set_nodelay(true);
                        tokio::spawn(relay(client, pick(backends, next)));
                    }
                }
            }
            StdListener::Unix(l) => {
                let listener = tokio::net::UnixListener::from_std(l).expect("register");
                loop {
                    if let Ok((client, _)) = listener.accept().await {
                        tokio::spawn(relay(client, pick(backends, next)));
                    }
                }
            }
        }
    });
}

fn pick(backends: &[Addr], next: &AtomicUsize) -> Addr {
    backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()].clone()
}

async fn relay<C: AsyncRead + AsyncWrite + Unpin>(mut client: C, backend: Addr) {
    match backend {
        Addr::Tcp(a) => {
            if let Ok(mut server) = tokio::net::TcpStream::connect(a).await {
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        }
        Addr::Unix(p) => {
            if let Ok(mut server) = tokio::net::UnixStream::connect(p).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        }
    }
}
