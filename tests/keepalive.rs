//! TCP keepalive: a peer that vanishes without a FIN or RST must not hold its session forever.
//!
//! The vanishing peer is real, on loopback only. Each test gets a network namespace of its own,
//! with nothing but its `lo`, and starts the proxy on a thread inside it: a namespace belongs to
//! a thread and to the threads it spawns, and a socket stays in the namespace it was made in, so
//! the proxy's listeners, workers and backend connections are all there. The leg under test is TCP
//! over the namespace's 127.0.0.1; the other leg is a unix socket, which crosses namespaces.
//!
//! To vanish, the namespace's loopback stops delivering: an nftables input chain with policy drop
//! discards every packet on arrival. Dropped on arrival, not on the way out, so the sending stack
//! gets no error either: each segment leaves and nothing comes back (no ACK, RST or ICMP), as when
//! a client's host loses power. (nftables rather than `tc netem`: some kernels, minimal VMs' among
//! them, lack netem.)
//! Needs root, iproute2 (`ip netns`) and nftables (`nft`), as the tests run here.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::netns::Netns;
use common::proxy::{config, TestProxy};
use common::rawclient::{RawClient, Stream};
use mysql_lb::config::{ListenAddr, TcpKeepalive};

/// Probes after 1 s of silence, 1 s apart, 2 unanswered: a vanished peer is dropped after ~3 s.
const SHORT: TcpKeepalive = TcpKeepalive {
    idle: Duration::from_secs(1),
    interval: Duration::from_secs(1),
    count: 2,
};
/// Far beyond the ~3 s the keepalive needs, far below "forever".
const DEADLINE: Duration = Duration::from_secs(30);
/// Session workers of each test's proxy, counted in its namespace.
const WORKERS: usize = 2;

/// The shared server's unix socket, usable from any namespace. Taken from this thread: a server
/// first started from inside a namespace would be stuck in it.
fn mariadb_socket() -> String {
    shared_pair()[0].socket.display().to_string()
}

/// The proxy, started inside `ns` in front of `backend`, listening on TCP there (and on `unix`).
fn proxy_inside(ns: &Netns, unix: Option<PathBuf>, backend: String) -> TestProxy {
    // A port taken here: the proxy can only bind it in a namespace of its own.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut cfg = config(&[backend]);
    cfg.listen = vec![ListenAddr::Tcp(taken.local_addr().unwrap())];
    cfg.listen.extend(unix.map(ListenAddr::Unix));
    cfg.tcp_keepalive = Some(SHORT);
    cfg.worker_threads = Some(WORKERS);
    // Metrics are read in-process: the cut would silence an admin listener in the namespace.
    cfg.admin_address = None;
    let proxy = ns.inside(move || TestProxy::start_with(cfg));
    // The workers start once the proxy runs, a moment after it reported its addresses.
    common::wait_until(
        "the proxy's session workers running in the namespace",
        || ns.threads_named("mysql-lb-w") == WORKERS,
    );
    drop(taken);
    proxy
}

/// Waits until the proxy has no client connection left; how long that took.
async fn until_no_sessions(proxy: &TestProxy) -> Duration {
    let start = Instant::now();
    loop {
        let open = proxy.series("mysql_lb_client_connections");
        if open == Some(0.0) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the session is still open {DEADLINE:?} after its peer vanished (gauge {open:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn login(stream: Box<dyn Stream>) -> RawClient {
    let mut client = RawClient::login(stream, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .expect("login through the proxy");
    let rows = client.query_text("SELECT 1").await.expect("SELECT 1");
    assert_eq!(rows, vec![vec![Some("1".to_owned())]]);
    client
}

/// A client in the namespace, logged in over TCP to the proxy there.
async fn client_inside(ns: &Netns, proxy: &TestProxy) -> RawClient {
    let target = proxy.addr;
    let stream = ns.inside(move || std::net::TcpStream::connect(target).expect("connect"));
    stream.set_nonblocking(true).unwrap();
    login(Box::new(tokio::net::TcpStream::from_std(stream).unwrap())).await
}

/// The session ends within a few keepalive periods (1 s + 2 × 1 s), counted with `reason`.
async fn dropped_by_keepalive(proxy: &TestProxy, reason: &str) {
    let took = until_no_sessions(proxy).await;
    assert!(
        took < Duration::from_secs(15),
        "keepalive (1 s + 2 × 1 s) took {took:?}"
    );
    let series = format!("mysql_lb_client_disconnections_total{{reason=\"{reason}\"}}");
    assert_eq!(proxy.series(&series), Some(1.0));
}

#[tokio::test]
async fn a_client_that_vanishes_is_dropped_by_keepalive() {
    let backend = mariadb_socket();
    let ns = Netns::new();
    let proxy = proxy_inside(&ns, None, backend);
    let client = client_inside(&ns, &proxy).await;
    assert_eq!(proxy.series("mysql_lb_client_connections"), Some(1.0));

    ns.cut();
    dropped_by_keepalive(&proxy, "client_network").await;
    drop(client);
}

#[tokio::test]
async fn a_client_that_vanishes_before_its_response_is_dropped_too() {
    // Keepalive probes only an idle connection: here the proxy has a response in flight to the
    // vanished client, retransmitted for ~15 minutes unless TCP_USER_TIMEOUT bounds it.
    let backend = mariadb_socket();
    let ns = Netns::new();
    let proxy = proxy_inside(&ns, None, backend);
    let mut client = client_inside(&ns, &proxy).await;
    const COM_QUERY: u8 = 0x03;
    client
        .send_command(COM_QUERY, b"SELECT SLEEP(1)")
        .await
        .unwrap();
    ns.cut();
    let took = until_no_sessions(&proxy).await;
    assert!(
        took < Duration::from_secs(15),
        "1 s of SLEEP then 3 s of retransmissions took {took:?}"
    );
    drop(client);
}

/// Relays between a TCP listener inside the namespace and the real MariaDB's unix socket, so the
/// proxy's backend connection runs over the loopback that will be cut.
async fn forward(listener: tokio::net::TcpListener, server: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let server = server.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::UnixStream::connect(server).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[tokio::test]
async fn a_backend_that_vanishes_is_dropped_by_keepalive() {
    let server = mariadb_socket();
    let ns = Netns::new();
    let listener = ns.inside(|| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"));
    listener.set_nonblocking(true).unwrap();
    let backend = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let forwarder = tokio::spawn(forward(listener, server));

    // The client comes in over a unix socket: only the backend leg is TCP.
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = proxy_inside(&ns, Some(dir.path().join("proxy.sock")), backend);
    let socket = proxy.unix.clone().expect("the proxy's unix listener");
    let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let mut client = login(Box::new(stream)).await;
    assert_eq!(proxy.series("mysql_lb_client_connections"), Some(1.0));

    ns.cut();
    dropped_by_keepalive(&proxy, "backend_network").await;
    // The client learns of it: its connection is closed, not left hanging.
    let next = tokio::time::timeout(DEADLINE, client.ping()).await;
    assert!(
        matches!(next, Ok(Err(_))),
        "the client's connection should be closed: {next:?}"
    );
    forwarder.abort();
}
