//! TCP keepalive: a peer that vanishes without a FIN or RST must not hold its session forever.
//!
//! The vanishing peer is real: a network namespace joined to this one by a veth pair, whose link
//! is then set down, so every packet to it is silently dropped (no RST, no ICMP), as when a
//! client's host loses power. Needs root and iproute2 (`ip netns`), as the tests run here.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use mysql_lb::config::{ListenAddr, TcpKeepalive};

/// Probes after 1 s of silence, 1 s apart, 2 unanswered: a vanished peer is dropped after ~3 s.
const SHORT: TcpKeepalive = TcpKeepalive {
    idle: Duration::from_secs(1),
    interval: Duration::from_secs(1),
    count: 2,
};
/// Far beyond the ~3 s the keepalive needs, far below "forever".
const DEADLINE: Duration = Duration::from_secs(30);

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with a veth pair: `host` here, `peer` inside it. Removed when dropped.
struct Netns {
    name: String,
    host_dev: String,
    peer_dev: String,
    host: Ipv4Addr,
    peer: Ipv4Addr,
}

impl Netns {
    fn new() -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = std::process::id().wrapping_mul(4) + NEXT.fetch_add(1, Ordering::Relaxed);
        // A /30 per namespace out of 10.0.0.0/8, unlikely to meet another test run's.
        let base = (10u32 << 24) | ((n & 0x3F_FFFF) << 2);
        let ns = Netns {
            name: format!("mlbka{n}"),
            host_dev: format!("mlk{n}a"),
            peer_dev: format!("mlk{n}b"),
            host: Ipv4Addr::from(base + 1),
            peer: Ipv4Addr::from(base + 2),
        };
        ip(&["netns", "add", &ns.name]);
        ip(&[
            "link",
            "add",
            &ns.host_dev,
            "type",
            "veth",
            "peer",
            "name",
            &ns.peer_dev,
        ]);
        ip(&["link", "set", &ns.peer_dev, "netns", &ns.name]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host),
            "dev",
            &ns.host_dev,
        ]);
        ip(&["link", "set", &ns.host_dev, "up"]);
        ns.exec(&[
            "addr",
            "add",
            &format!("{}/30", ns.peer),
            "dev",
            &ns.peer_dev,
        ]);
        ns.exec(&["link", "set", &ns.peer_dev, "up"]);
        ns
    }

    fn exec(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// The peer's side goes down: from now on packets to it vanish without an answer.
    fn cut(&self) {
        self.exec(&["link", "set", &self.peer_dev, "down"]);
    }

    /// Runs `f` on a thread that has joined the namespace: sockets it creates live there.
    fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("namespace file");
            // SAFETY: a valid descriptor of a network namespace; only this thread moves.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("thread in the namespace")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .output();
    }
}

fn gauge(proxy: &TestProxy, series: &str) -> Option<f64> {
    let (_, metrics) = proxy.admin_get("/metrics");
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Waits until the proxy has no client connection left; how long that took.
async fn until_no_sessions(proxy: &TestProxy) -> Duration {
    let start = Instant::now();
    loop {
        let open = gauge(proxy, "mysql_lb_client_connections");
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

fn proxy_with_short_keepalive(listen: SocketAddr, backend: String) -> TestProxy {
    let mut cfg = config(&[backend]);
    cfg.listen = vec![ListenAddr::Tcp(listen)];
    cfg.tcp_keepalive = Some(SHORT);
    TestProxy::start_with(cfg)
}

async fn login(stream: tokio::net::TcpStream) -> RawClient {
    let mut client = RawClient::login(Box::new(stream), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .expect("login through the proxy");
    let rows = client.query_text("SELECT 1").await.expect("SELECT 1");
    assert_eq!(rows, vec![vec![Some("1".to_owned())]]);
    client
}

#[tokio::test]
async fn a_client_that_vanishes_is_dropped_by_keepalive() {
    let ns = Netns::new();
    let proxy =
        proxy_with_short_keepalive(SocketAddr::from((ns.host, 0)), shared_pair()[0].tcp_addr());
    let target = proxy.addr;
    let std_stream = ns.inside(move || std::net::TcpStream::connect(target).expect("connect"));
    std_stream.set_nonblocking(true).unwrap();
    let client = login(tokio::net::TcpStream::from_std(std_stream).unwrap()).await;
    assert_eq!(gauge(&proxy, "mysql_lb_client_connections"), Some(1.0));

    ns.cut();
    let took = until_no_sessions(&proxy).await;
    assert!(
        took < Duration::from_secs(15),
        "keepalive (1 s + 2 × 1 s) took {took:?}"
    );
    assert_eq!(
        gauge(
            &proxy,
            "mysql_lb_client_disconnections_total{reason=\"client_network\"}"
        ),
        Some(1.0)
    );
    drop(client);
}

#[tokio::test]
async fn a_client_that_vanishes_before_its_response_is_dropped_too() {
    // Keepalive probes only an idle connection: here the proxy has a response in flight to the
    // vanished client, retransmitted for ~15 minutes unless TCP_USER_TIMEOUT bounds it.
    let ns = Netns::new();
    let proxy =
        proxy_with_short_keepalive(SocketAddr::from((ns.host, 0)), shared_pair()[0].tcp_addr());
    let target = proxy.addr;
    let std_stream = ns.inside(move || std::net::TcpStream::connect(target).expect("connect"));
    std_stream.set_nonblocking(true).unwrap();
    let mut client = login(tokio::net::TcpStream::from_std(std_stream).unwrap()).await;
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

/// Relays between a listener inside the namespace and a real MariaDB here, so the proxy's
/// backend connection crosses the veth link that will be cut.
async fn forward(listener: tokio::net::TcpListener, server: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let server = server.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(server).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[tokio::test]
async fn a_backend_that_vanishes_is_dropped_by_keepalive() {
    let ns = Netns::new();
    let peer = ns.peer;
    let listener = ns.inside(move || std::net::TcpListener::bind((peer, 0)).expect("bind"));
    listener.set_nonblocking(true).unwrap();
    let backend = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let forwarder = tokio::spawn(forward(listener, shared_pair()[0].tcp_addr()));

    let proxy = proxy_with_short_keepalive("127.0.0.1:0".parse().unwrap(), backend);
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut client = login(stream).await;
    assert_eq!(gauge(&proxy, "mysql_lb_client_connections"), Some(1.0));

    ns.cut();
    let took = until_no_sessions(&proxy).await;
    assert!(
        took < Duration::from_secs(15),
        "keepalive (1 s + 2 × 1 s) took {took:?}"
    );
    assert_eq!(
        gauge(
            &proxy,
            "mysql_lb_client_disconnections_total{reason=\"backend_network\"}"
        ),
        Some(1.0)
    );
    // The client learns of it: its connection is closed, not left hanging.
    let next = tokio::time::timeout(DEADLINE, client.ping()).await;
    assert!(
        matches!(next, Ok(Err(_))),
        "the client's connection should be closed: {next:?}"
    );
    forwarder.abort();
}
