//! Command-phase relaying through mysql-lb against real MariaDB servers, driven by mysql_async.

mod common;

use common::mariadb::shared_pair;
use common::proxy::TestProxy;
use mysql_async::prelude::*;

fn pair_proxy() -> TestProxy {
    let pair = shared_pair();
    TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()])
}

#[tokio::test]
async fn round_robin_spreads_twenty_connections_evenly() {
    let pair = shared_pair();
    let proxy = pair_proxy();
    let mut per_port = std::collections::HashMap::<u16, usize>::new();
    for _ in 0..20 {
        let mut conn = mysql_async::Conn::new(proxy.opts("bench", "bench"))
            .await
            .unwrap();
        let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
        *per_port.entry(port).or_default() += 1;
        conn.disconnect().await.unwrap();
    }
    for db in pair.iter() {
        let n = per_port.get(&db.port).copied().unwrap_or(0);
        assert!(
            (9..=11).contains(&n),
            "backend {} got {n} of 20: {per_port:?}",
            db.port
        );
    }
}

#[tokio::test]
async fn metrics_endpoint_exports_per_backend_histograms() {
    let proxy = pair_proxy();
    let mut conn = mysql_async::Conn::new(proxy.opts("bench", "bench"))
        .await
        .unwrap();
    for _ in 0..5 {
        let one: u8 = conn.query_first("SELECT 1").await.unwrap().unwrap();
        assert_eq!(one, 1);
    }
    conn.disconnect().await.unwrap();
    let (status, body) = proxy.admin_get("/metrics");
    assert_eq!(status, 200);
    let queries: f64 = body
        .lines()
        .filter(|l| {
            l.starts_with("mysql_lb_backend_query_duration_seconds_count{")
                && l.contains("command=\"query\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        queries >= 5.0,
        "at least our 5 queries are counted:\n{body}"
    );
    for b in proxy.state.backends().backends() {
        let series = format!("mysql_lb_backend_up{{backend=\"{}\"}} 1", b.name);
        assert!(body.contains(&series), "missing {series}");
    }
    let (status, body) = proxy.admin_get("/healthz");
    assert_eq!(status, 200, "{body}");
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["backends"].as_array().unwrap().len(), 2, "{json}");
}

#[tokio::test]
async fn a_burst_of_sessions_spreads_evenly_over_the_workers() {
    // Every worker accepts on the listener and the first one the kernel runs wins: without the
    // placement rule a burst of connects lands on one worker (seen: 8 of 8 sysbench threads).
    let pair = shared_pair();
    let mut cfg = common::proxy::config(&[pair[0].tcp_addr()]);
    cfg.worker_threads = Some(2);
    let proxy = TestProxy::start_with(cfg);
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(proxy.connect().await.0);
    }
    let (_, metrics) = proxy.admin_get("/metrics");
    let sessions = |w: &str| {
        let series = format!("mysql_lb_worker_sessions{{worker=\"{w}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse::<i64>().ok())
    };
    assert_eq!(
        (sessions("0"), sessions("1")),
        (Some(4), Some(4)),
        "{metrics}"
    );
    for conn in held {
        conn.disconnect().await.unwrap();
    }
}

/// A client that sends COM_QUIT and waits for the close sees the backend close first; that is
/// still the client's quit, not a backend failure, in the disconnect metric.
#[tokio::test]
async fn com_quit_counts_as_client_quit_even_when_the_backend_closes_first() {
    use common::rawclient::RawClient;
    let proxy = TestProxy::start(&[shared_pair()[0].tcp_addr()]);
    let sessions = 5;
    for _ in 0..sessions {
        let mut c = RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0)
            .await
            .expect("login through the proxy");
        c.send_command(0x01, &[]).await.unwrap();
        assert!(
            c.read_packet().await.is_err(),
            "COM_QUIT is answered by the close"
        );
    }
    let count = |reason: &str| -> u64 {
        let (_, body) = proxy.admin_get("/metrics");
        let needle = format!("mysql_lb_client_disconnections_total{{reason=\"{reason}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(&needle))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while count("client_quit") < sessions && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(count("client_quit"), sessions);
    assert_eq!(count("backend_network"), 0);
}
