//! `accept_proxy_protocol`: mysql-lb behind an L4 load balancer that sends a PROXY protocol
//! header (v1 or v2), on real MariaDB. The balancer is a stand-in in this test: a TCP forwarder
//! whose connections to mysql-lb come from 127.0.0.2 (the listed network), write a header naming
//! 10.9.8.7, then splice. Clients from 127.0.0.1 are not in the list.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::mariadb::{named_port, shared_pair, tcp_opts, BENCH_PASS, BENCH_USER};
use common::pp::{balancer, connect_from, v1, v2, Haproxy};
use common::proxy::http_get;
use mysql_async::prelude::Queryable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BALANCER_IP: &str = "127.0.0.2";
const CLIENT: &str = "10.9.8.7";

/// mysql-lb as a process (its log lines are read), with `extra` YAML appended: default pool on
/// the first shared backend, pool `lb` on the second, and 127.0.0.2 in accept_proxy_protocol.
struct Lb {
    daemon: Daemon,
    port: u16,
    admin: SocketAddr,
}

fn start(extra: &str) -> (Lb, tempfile::NamedTempFile) {
    let pair = shared_pair();
    let yaml = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin_address: \"127.0.0.1:0\"\n\
         log: {{level: \"info,mysql_lb=debug\"}}\n\
         backends: [\"{}\"]\npools: {{lb: {{backends: [\"{}\"]}}}}\n\
         accept_proxy_protocol: [\"{BALANCER_IP}\"]\n{extra}",
        pair[0].tcp_addr(),
        pair[1].tcp_addr()
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    let mut daemon = Daemon::start(
        &["--config".to_owned(), file.path().display().to_string()],
        None,
    );
    let (port, admin) = (daemon.proxy_addr().port(), daemon.admin_addr());
    (
        Lb {
            daemon,
            port,
            admin,
        },
        file,
    )
}

async fn port_via(addr: SocketAddr) -> u16 {
    let mut conn = mysql_async::Conn::new(tcp_opts(&addr.to_string(), BENCH_USER, BENCH_PASS))
        .await
        .expect("a session through the balancer");
    let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
    conn.disconnect().await.unwrap();
    port
}

fn metric(lb: &Lb, reason: &str) -> u64 {
    let (_, body) = http_get(lb.admin, "/metrics").expect("metrics");
    let series = format!("mysql_lb_proxy_protocol_rejected_total{{reason=\"{reason}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in:\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_and_v2_headers_make_the_carried_address_the_client_for_logs_and_routes() {
    let pair = shared_pair();
    let (mut lb, _file) = start("routes: [{client: \"10.9.8.0/24\", pool: lb}]\n");
    for (version, header) in [
        (1, v1(format!("{CLIENT}:5555").parse().unwrap(), lb.port)),
        (2, v2(format!("{CLIENT}:5556").parse().unwrap(), lb.port)),
    ] {
        let addr = balancer(BALANCER_IP, lb.port, header).await;
        assert_eq!(
            port_via(addr).await,
            pair[1].port,
            "v{version}: the route by client network saw {CLIENT}"
        );
        // The session's own lines name the carried client; its span says which balancer.
        let source = format!("client=\"{CLIENT}:{}\"", 5554 + version);
        let line = lb.daemon.wait_for_line(&format!("client quit {source}"));
        assert!(line.contains("via=127.0.0.2:"), "{line}");
    }
    // A client connecting directly (127.0.0.1, not a balancer) sends no header and is routed
    // by its own address.
    let direct: SocketAddr = format!("127.0.0.1:{}", lb.port).parse().unwrap();
    assert_eq!(port_via(direct).await, pair[0].port);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lua_hook_sees_the_carried_address_as_client_src() {
    let pair = shared_pair();
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        script.path(),
        format!(
            "function connect_server()\n\
             if proxy.connection.client.src.address == \"{CLIENT}\" \
             and proxy.connection.client.src.port == 6000 then\n\
             proxy.connection.backend_ndx = 2 else proxy.connection.backend_ndx = 1 end\nend\n"
        ),
    )
    .unwrap();
    // One pool of both backends here, so the script's index 2 is the second backend.
    let pair_yaml = format!(
        "listen: [\"127.0.0.1:0\"]\nbackends: [\"{}\", \"{}\"]\n",
        pair[0].tcp_addr(),
        pair[1].tcp_addr()
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        format!(
            "{}admin_address: off\naccept_proxy_protocol: [\"{BALANCER_IP}\"]\n\
             balancer: {{script: \"{}\"}}\n",
            pair_yaml,
            script.path().display()
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(
        &["--config".to_owned(), file.path().display().to_string()],
        None,
    );
    let port = daemon.proxy_addr().port();
    let header = v2(format!("{CLIENT}:6000").parse().unwrap(), port);
    let via = balancer(BALANCER_IP, port, header).await;
    for _ in 0..3 {
        assert_eq!(
            port_via(via).await,
            pair[1].port,
            "client.src is {CLIENT}:6000"
        );
    }
    // LOCAL (a balancer's own health check) keeps the connection's address: 127.0.0.2.
    let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    let via = balancer(BALANCER_IP, port, local).await;
    assert_eq!(port_via(via).await, pair[0].port);
}

/// Reads until mysql-lb closes the connection; how long that took.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    read.await
        .unwrap_or_else(|_| panic!("still open after {limit:?}"));
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_from_an_unlisted_network_is_refused_and_normal_clients_keep_working() {
    let pair = shared_pair();
    let (mut lb, _file) = start("");
    let mut steady = mysql_async::Conn::new(tcp_opts(
        &format!("127.0.0.1:{}", lb.port),
        BENCH_USER,
        BENCH_PASS,
    ))
    .await
    .unwrap();
    for header in [
        v1(format!("{CLIENT}:7000").parse().unwrap(), lb.port),
        v2(format!("{CLIENT}:7001").parse().unwrap(), lb.port),
    ] {
        // From 127.0.0.1, which is not in accept_proxy_protocol.
        let mut s = connect_from("127.0.0.1", lb.port).await;
        s.write_all(&header).await.unwrap();
        closed_within(&mut s, Duration::from_secs(10)).await;
        lb.daemon.wait_for_new_line(
            "closing: a PROXY protocol header came from a network not in accept_proxy_protocol",
        );
    }
    // Counted as the session task ends, just after the connection is closed.
    common::wait_until("both unlisted headers counted", || {
        metric(&lb, "unlisted") == 2
    });
    let port: u16 = steady.query_first("SELECT @@port").await.unwrap().unwrap();
    assert_eq!(port, pair[0].port);
    steady.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_truncated_and_oversized_headers_close_at_once_without_disturbing_others() {
    let (mut lb, _file) = start("handshake_timeout: 60s\n");
    let via = balancer(
        BALANCER_IP,
        lb.port,
        v1(format!("{CLIENT}:8000").parse().unwrap(), lb.port),
    )
    .await;
    let mut steady = mysql_async::Conn::new(tcp_opts(&via.to_string(), BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut oversized = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x04\x00".to_vec();
    oversized.extend_from_slice(&[0; 64]);
    let cases: [(&[u8], bool, &str); 4] = [
        (
            b"PROXY TCP4 10.9.8.7 127.0.0.1 +5555 4040\r\n",
            false,
            "PROXY v1 header is malformed",
        ),
        (
            b"PROXY TCP6 10.9.8.7 127.0.0.1 5555 4040\r\n",
            false,
            "PROXY v1 header is malformed",
        ),
        (&oversized, false, "more than the 1024 accepted"),
        (
            b"PROXY TCP4 10.9.8.7 12",
            true,
            "after 22 bytes of a PROXY protocol header",
        ),
    ];
    for (bytes, then_close, line) in cases {
        let mut s = connect_from(BALANCER_IP, lb.port).await;
        s.write_all(bytes).await.unwrap();
        if then_close {
            s.shutdown().await.unwrap();
        }
        // Far below handshake_timeout: refused on the bytes themselves.
        let took = closed_within(&mut s, Duration::from_secs(20)).await;
        assert!(took < Duration::from_secs(20), "{line}: {took:?}");
        lb.daemon.wait_for_new_line(line);
    }
    assert_eq!(metric(&lb, "malformed"), 4);
    let n: u16 = steady.query_first("SELECT 7").await.unwrap().unwrap();
    assert_eq!(n, 7, "the session through the balancer was not disturbed");
    steady.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_client_that_sends_no_header_is_closed_after_handshake_timeout() {
    let (mut lb, _file) = start("handshake_timeout: 1s\n");
    let mut s = connect_from(BALANCER_IP, lb.port).await;
    let took = closed_within(&mut s, Duration::from_secs(20)).await;
    assert!(took >= Duration::from_millis(900), "closed after {took:?}");
    lb.daemon.wait_for_line(
        "closing: no PROXY protocol header within 1s from a network in accept_proxy_protocol",
    );
    assert_eq!(metric(&lb, "timeout"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_send_proxy_v2_and_v1_in_front_carry_the_client_address() {
    let pair = shared_pair();
    // HAProxy connects from 127.0.0.2 (listed); the header names the test client, 127.0.0.1,
    // which the route sends to pool `lb`: a session there proves the header was used.
    let (mut lb, _file) = start("routes: [{client: 127.0.0.1, pool: lb}]\n");
    // HAProxy's config names its ports before it starts.
    let (v2_port, v1_port) = (named_port(), named_port());
    let dir = tempfile::tempdir().unwrap();
    let _haproxy = Haproxy::start(
        dir.path(),
        &format!(
            "global\n    maxconn 64\ndefaults\n    mode tcp\n    timeout connect 5s\n    \
             timeout client 60s\n    timeout server 60s\n\
             listen mysql\n    bind 127.0.0.1:{v2_port}\n    option httpchk GET /healthz\n    \
             server lb 127.0.0.1:{p} send-proxy-v2 source {BALANCER_IP} check port {a} inter 200ms\n\
             listen mysql_v1\n    bind 127.0.0.1:{v1_port}\n    \
             server lb 127.0.0.1:{p} send-proxy source {BALANCER_IP}\n",
            p = lb.port,
            a = lb.admin.port()
        ),
    );
    for port in [v2_port, v1_port] {
        common::daemon::wait_connectable(port);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        assert_eq!(
            port_via(addr).await,
            pair[1].port,
            "through haproxy on {port}"
        );
        lb.daemon
            .wait_for_new_line("client quit client=\"127.0.0.1:");
    }
    // Its health checks went to /healthz on the admin port, so no PROXY header was refused.
    assert_eq!(metric(&lb, "malformed") + metric(&lb, "timeout"), 0);
}
