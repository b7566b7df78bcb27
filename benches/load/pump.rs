//! The floor anchor of the load benchmark: a relay that knows nothing about MySQL.
//!
//! It accepts TCP clients, connects each to the next backend in turn and copies bytes both ways
//! until either side closes (tokio's `copy_bidirectional`: one read and one write per chunk, as
//! mysql-lb does), on `--threads N` single-threaded runtimes, each accepting on the same listener.
//! No parsing, no metrics, no admission, no health checks: what it costs per query is what any
//! user-space proxy pays the kernel for two loopback hops, so the gap between it and mysql-lb is
//! all that mysql-lb's own work can account for.
//!
//!     cargo build --release --example pump
//!     target/release/examples/pump 127.0.0.1:4000 127.0.0.1:3306 127.0.0.1:3307 --threads 2

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listen: Option<SocketAddr> = None;
    let mut backends: Vec<SocketAddr> = Vec::new();
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    while let Some(arg) = args.next() {
        if arg == "--threads" {
            threads = args
                .next()
                .and_then(|n| n.parse().ok())
                .expect("--threads N");
        } else {
            let addr = arg.parse().expect("addresses are ip:port");
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
    let listener = std::net::TcpListener::bind(listen).expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let backends = Arc::new(backends);
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let listener = listener.try_clone().expect("clone listener");
            let (backends, next) = (Arc::clone(&backends), Arc::clone(&next));
            std::thread::spawn(move || serve(listener, &backends, &next))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

fn serve(listener: std::net::TcpListener, backends: &Arc<Vec<SocketAddr>>, next: &AtomicUsize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener).expect("register");
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                continue;
            };
            let backend = backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()];
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
}
