//! Runtime operations on the admin endpoint against real MariaDB backends: drain keeps running
//! sessions and sends new clients elsewhere, maintenance holds whatever the health checks say and
//! across a reload, ready restores, a runtime weight changes the split, a Lua choice of a drained
//! backend is overruled, and bad requests get a 4xx with a JSON error (the token ones included).

mod common;

use std::time::Duration;

use common::mariadb::{shared_pair, MariaDb};
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;
use mysql_lb::config::{Config, HealthCheckConfig};

fn backends(pair: &[MariaDb; 2]) -> Vec<String> {
    pair.iter().map(MariaDb::tcp_addr).collect()
}

fn checked(pair: &[MariaDb; 2]) -> Config {
    let mut cfg = config(&backends(pair));
    cfg.health_check = HealthCheckConfig {
        interval: Duration::from_millis(200),
        timeout: Duration::from_secs(1),
        fall: 1,
        rise: 1,
        ..HealthCheckConfig::default()
    };
    cfg
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_keeps_a_running_session_and_sends_new_clients_elsewhere_until_ready() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let proxy = TestProxy::start(&backends(pair));
    let mut on_a = loop {
        let (conn, port) = proxy.connect().await;
        if port == a.port {
            break conn;
        }
        conn.disconnect().await.unwrap();
    };
    let name = a.tcp_addr();

    let (status, body) = proxy.admin_post(&format!("/backends/{name}/drain"), &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["admin_state"], "draining");
    let e = proxy.backend_entry(&name);
    assert_eq!(e["admin_state"], "draining", "{e}");
    assert_eq!(e["active_connections"], 1, "{e}");
    assert_eq!(e["state"], "up", "draining keeps its health state: {e}");

    let seen = proxy.spread(10).await;
    assert_eq!(
        seen.get(&b.port),
        Some(&10),
        "new clients go elsewhere: {seen:?}"
    );
    let port: u16 = on_a.query_first("SELECT @@port").await.unwrap().unwrap();
    assert_eq!(port, a.port, "the running session runs on");

    let (_, metrics) = proxy.admin_get("/metrics");
    let line = format!("mysql_lb_backend_admin_state{{backend=\"{name}\",state=\"draining\"}} 1");
    assert!(metrics.contains(&line), "{line} missing");
    let ready0 = format!("mysql_lb_backend_admin_state{{backend=\"{name}\",state=\"ready\"}} 0");
    assert!(metrics.contains(&ready0), "{ready0} missing");

    let (status, body) = proxy.admin_post(&format!("/backends/{name}/ready"), &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(proxy.backend_entry(&name)["admin_state"], "ready");
    let seen = proxy.spread(10).await;
    assert_eq!(seen.get(&a.port), Some(&5), "back in rotation: {seen:?}");
    on_a.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_survives_passing_health_checks_and_a_reload() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let cfg = checked(pair);
    let proxy = TestProxy::start_with(cfg.clone());
    let name = a.tcp_addr();
    let (status, body) = proxy.admin_post(&format!("/backends/{name}/maintenance"), &[]);
    assert_eq!(status, 200, "{body}");
    let (status, _) = proxy.admin_put(&format!("/backends/{name}/weight"), &[], b"9");
    assert_eq!(status, 200);

    // Several checks pass meanwhile.
    let checks_before = proxy.state.backends().backends()[0].stats.checks_ok.get();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let a_backend = std::sync::Arc::clone(&proxy.state.backends().backends()[0]);
    assert!(a_backend.stats.checks_ok.get() >= checks_before + 2);
    let e = proxy.backend_entry(&name);
    assert_eq!(
        (e["state"].as_str(), e["admin_state"].as_str()),
        (Some("down"), Some("maintenance")),
        "{e}"
    );
    let seen = proxy.spread(6).await;
    assert_eq!(seen.get(&b.port), Some(&6), "{seen:?}");

    // A reload keeps the backend (and its admin state) and re-applies the file's weight.
    let mut next = cfg;
    next.backends[1].weight = 2;
    let next = next.validate().unwrap();
    mysql_lb::control::reload::apply(&proxy.state, &next).expect("reload");
    let e = proxy.backend_entry(&name);
    assert_eq!(e["admin_state"], "maintenance", "{e}");
    assert_eq!(e["weight"], 1, "the file's weight again: {e}");
    assert_eq!(proxy.backend_entry(&b.tcp_addr())["weight"], 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let seen = proxy.spread(6).await;
    assert_eq!(
        seen.get(&b.port),
        Some(&6),
        "after the reload too: {seen:?}"
    );

    let (status, _) = proxy.admin_post(&format!("/backends/{name}/ready"), &[]);
    assert_eq!(status, 200);
    assert_eq!(proxy.backend_entry(&name)["state"], "up");
    let seen = proxy.spread(9).await;
    assert_eq!(
        seen.get(&a.port),
        Some(&3),
        "ready restores, at weight 1:2: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_weight_changes_the_split() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let proxy = TestProxy::start(&backends(pair));
    let path = format!("/backends/{}/weight", a.tcp_addr());
    let (status, body) = proxy.admin_put(&path, &[], br#"{"weight": 3}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["weight"], 3);
    let seen = proxy.spread(40).await;
    assert_eq!(
        (seen.get(&a.port), seen.get(&b.port)),
        (Some(&30), Some(&10)),
        "{seen:?}"
    );
    let (status, _) = proxy.admin_put(&path, &[], b"1");
    assert_eq!(status, 200);
    let seen = proxy.spread(20).await;
    assert_eq!(seen.get(&a.port), Some(&10), "{seen:?}");
}

fn assert_error(status: u16, body: &str, want: u16) {
    assert_eq!(status, want, "{body}");
    let v = json(body);
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_json_error_and_change_nothing() {
    let pair = shared_pair();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "tok-123\n").unwrap();
    let mut cfg = config(&backends(pair));
    cfg.admin_token_file = Some(token_file);
    let proxy = TestProxy::start_with(cfg);
    let name = pair[0].tcp_addr();
    let drain = format!("/backends/{name}/drain");
    let weight = format!("/backends/{name}/weight");
    let good = "Authorization: Bearer tok-123";

    let (s, body) = proxy.admin_post(&drain, &[]);
    assert_error(s, &body, 401);
    let (s, body) = proxy.admin_post(&drain, &["Authorization: Bearer tok-124"]);
    assert_error(s, &body, 401);
    let (s, body) = proxy.admin_put(&weight, &["Authorization: Bearer tok-12"], b"5");
    assert_error(s, &body, 401);
    assert_eq!(
        proxy.backend_entry(&name)["admin_state"],
        "ready",
        "GET needs no token"
    );

    let (s, body) = proxy.admin_post("/backends/nosuch:1/drain", &[good]);
    assert_error(s, &body, 404);
    for bad in [&b"0"[..], b"1000001", b"abc", b"{\"weight\": -1}", b""] {
        let (s, body) = proxy.admin_put(&weight, &[good], bad);
        assert_error(s, &body, 400);
    }
    let (s, body) = proxy.admin_get(&drain);
    assert_error(s, &body, 405);
    let (s, body) = proxy.admin_post(&weight, &[good]);
    assert_error(s, &body, 405);
    let (s, body) = proxy.admin_put(&weight, &[good], &vec![b'1'; 5000]);
    assert_error(s, &body, 413);
    let e = proxy.backend_entry(&name);
    assert_eq!(
        (e["admin_state"].as_str(), e["weight"].as_u64()),
        (Some("ready"), Some(1)),
        "{e}"
    );

    let (s, body) = proxy.admin_post(&drain, &[good]);
    assert_eq!(s, 200, "{body}");
    assert_eq!(proxy.backend_entry(&name)["admin_state"], "draining");
    let (s, body) = proxy.admin_put(&weight, &[good], b"7");
    assert_eq!(s, 200, "{body}");
    assert_eq!(proxy.backend_entry(&name)["weight"], 7);
    let (s, _) = proxy.admin_get("/healthz");
    assert_eq!(s, 200, "still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_choosing_a_draining_backend_is_overruled() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let script = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
    std::fs::write(
        script.path(),
        "function connect_server()\n  proxy.connection.backend_ndx = 1\nend\n",
    )
    .unwrap();
    let mut cfg = config(&backends(pair));
    cfg.balancer.script = Some(script.path().to_owned());
    let proxy = TestProxy::start_with(cfg);
    let seen = proxy.spread(4).await;
    assert_eq!(
        seen.get(&a.port),
        Some(&4),
        "the script pins backend 1: {seen:?}"
    );
    let (status, _) = proxy.admin_post(&format!("/backends/{}/drain", a.tcp_addr()), &[]);
    assert_eq!(status, 200);
    let seen = proxy.spread(4).await;
    assert_eq!(
        seen.get(&b.port),
        Some(&4),
        "not even the script's choice: {seen:?}"
    );
}
