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
//! With `--delay-ms N` it is instead the load benchmark's slow backend (`run.py --only hetero`):
//! every chunk read from a backend is written to the client N ms after it was read (at least N:
//! tokio's timer ticks in milliseconds, so up to N + 1), in order, by a writer task that sleeps on
//! the timer — no spinning, so the delay costs no CPU and does not depend on the load. A chunk is
//! what one read returns; a point select's response, a greeting and an auth OK are one chunk each
//! at this size, so each of them arrives N ms late, as from a server that answers N ms slower.
//! Client to backend is not delayed. Reads go on while earlier chunks wait (up to
//! [`DELAY_QUEUE`] of them), so the delay adds latency without capping throughput.
//!
//!     cargo build --release --example pump
//!     target/release/examples/pump 127.0.0.1:4000 127.0.0.1:3306 127.0.0.1:3307 --threads 2
//!     target/release/examples/pump /tmp/pump.sock /run/db1.sock /run/db2.sock
//!     target/release/examples/pump 127.0.0.1:4003 127.0.0.1:3308 --threads 1 --delay-ms 5

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// Chunks a delaying relay holds at once before it stops reading from the backend.
const DELAY_QUEUE: usize = 1024;
/// Read size of the delaying relay (copy_bidirectional's buffer is 8 KiB too).
const CHUNK: usize = 8 * 1024;

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
    let mut delay = None;
    while let Some(arg) = args.next() {
        if arg == "--delay-ms" {
            let ms: u64 = args
                .next()
                .and_then(|n| n.parse().ok())
                .expect("--delay-ms N");
            delay = (ms > 0).then_some(Duration::from_millis(ms));
        } else if arg == "--threads" {
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
        eprintln!("usage: pump LISTEN BACKEND... [--threads N] [--delay-ms N]");
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
            std::thread::spawn(move || serve(listener, &backends, &next, delay))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

fn serve(
    listener: StdListener,
    backends: &Arc<Vec<Addr>>,
    next: &AtomicUsize,
    delay: Option<Duration>,
) {
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
                        tokio::spawn(relay(client, pick(backends, next), delay));
                    }
                }
            }
            StdListener::Unix(l) => {
                let listener = tokio::net::UnixListener::from_std(l).expect("register");
                loop {
                    if let Ok((client, _)) = listener.accept().await {
                        tokio::spawn(relay(client, pick(backends, next), delay));
                    }
                }
            }
        }
    });
}

fn pick(backends: &[Addr], next: &AtomicUsize) -> Addr {
    backends[next.fetch_add(1, Ordering::Relaxed) % backends.len()].clone()
}

async fn relay<C>(client: C, backend: Addr, delay: Option<Duration>)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    match backend {
        Addr::Tcp(a) => {
            if let Ok(server) = tokio::net::TcpStream::connect(a).await {
                let _ = server.set_nodelay(true);
                copy_both(client, server, delay).await;
            }
        }
        Addr::Unix(p) => {
            if let Ok(server) = tokio::net::UnixStream::connect(p).await {
                copy_both(client, server, delay).await;
            }
        }
    }
}

async fn copy_both<C, S>(mut client: C, mut server: S, delay: Option<Duration>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some(delay) = delay else {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        return;
    };
    let (mut client_r, client_w) = tokio::io::split(client);
    let (server_r, mut server_w) = tokio::io::split(server);
    let upstream = async {
        let _ = tokio::io::copy(&mut client_r, &mut server_w).await;
        let _ = server_w.shutdown().await;
        // The client is done; the backend's last answers still come back through downstream.
        std::future::pending::<()>().await;
    };
    // The session ends when the backend's side does (its EOF or an error either way).
    tokio::select! {
        () = upstream => {}
        () = delayed_copy(server_r, client_w, delay) => {}
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, in order.
async fn delayed_copy<R, W>(mut from: R, mut to: W, delay: Duration)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Instant, Vec<u8>)>(DELAY_QUEUE);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            let due = Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
        // Dropping `tx` lets the writer finish the queue and stop.
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAY: Duration = Duration::from_millis(100);

    // The clock is paused (it jumps to the next timer whenever every task waits): the delays are
    // exact, whatever else the machine runs.
    #[tokio::test(start_paused = true)]
    async fn every_chunk_arrives_a_delay_after_it_was_read_in_order_then_eof() {
        let (mut backend, from) = tokio::io::duplex(64 * 1024);
        let (to, mut client) = tokio::io::duplex(64 * 1024);
        let relay = tokio::spawn(delayed_copy(from, to, DELAY));
        let start = Instant::now();
        backend.write_all(b"first").await.unwrap();
        let mut buf = [0u8; 5];
        client.read_exact(&mut buf).await.unwrap();
        let first = start.elapsed();
        assert_eq!(&buf, b"first");
        assert!(first >= DELAY, "the first chunk came after {first:?}");
        let sent: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        for part in sent.chunks(1000) {
            backend.write_all(part).await.unwrap();
        }
        drop(backend);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert!(
            got == sent,
            "bytes lost or reordered: {} of {}",
            got.len(),
            sent.len()
        );
        relay.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_chunk_does_not_hold_back_the_reading_of_the_next() {
        let (mut backend, from) = tokio::io::duplex(64 * 1024);
        let (to, mut client) = tokio::io::duplex(64 * 1024);
        tokio::spawn(delayed_copy(from, to, DELAY));
        let start = Instant::now();
        backend.write_all(b"a").await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        backend.write_all(b"b").await.unwrap();
        let mut buf = [0u8; 1];
        client.read_exact(&mut buf).await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        let second = start.elapsed();
        assert_eq!(&buf, b"b");
        // Delays one after the other would put "b" at 2 x DELAY or later.
        assert!(
            second < DELAY * 19 / 10,
            "the second chunk came after {second:?}"
        );
    }
}
