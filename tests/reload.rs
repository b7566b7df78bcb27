//! Live reload with the real binary and SIGHUP, against real MariaDB backends: backends come and
//! go and weights change without dropping a session; an invalid configuration is refused.

mod common;

use common::daemon::Daemon;
use common::mariadb::{shared_pair, MariaDb};
use common::proxy::spread_at;
use mysql_async::prelude::*;

/// The listener on port 0, learnt from the daemon: the same text at every reload.
fn write_config(path: &std::path::Path, backends: &[(&MariaDb, u32)], extra: &str) {
    let mut yaml = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin_address: \"off\"\nlog: {{ level: info }}\n\
         health_check: {{ interval: 300ms }}\n{extra}backends:\n"
    );
    for (db, weight) in backends {
        yaml += &format!(
            "  - {{ address: \"{}\", name: \"port{}\", weight: {weight} }}\n",
            db.tcp_addr(),
            db.port
        );
    }
    std::fs::write(path, yaml).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_and_removes_backends_and_changes_weights_without_dropping_sessions() {
    let pair = shared_pair();
    let third = MariaDb::start("reload-third");
    let (a, b, c) = (&pair[0], &pair[1], &third);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    write_config(&path, &[(a, 1), (b, 1)], "");
    let mut d = Daemon::start(&["--config".into(), path.display().to_string()], None);
    let port = d.proxy_addr().port();

    // A session on b, the backend about to be removed.
    let mut on_b = loop {
        let opts = common::mariadb::tcp_opts(&format!("127.0.0.1:{port}"), "bench", "bench");
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        let p: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
        if p == b.port {
            break conn;
        }
        conn.disconnect().await.unwrap();
    };

    // Replace b by c, with a weighted 3:1 against c.
    write_config(&path, &[(a, 3), (c, 1)], "");
    d.signal(libc::SIGHUP);
    d.wait_for_line("configuration reloaded");
    let seen = spread_at(&format!("127.0.0.1:{port}"), 40).await;
    assert_eq!(
        seen.get(&b.port),
        None,
        "the removed backend gets no new client: {seen:?}"
    );
    let (on_a, on_c) = (
        seen.get(&a.port).copied().unwrap_or(0),
        seen.get(&c.port).copied().unwrap_or(0),
    );
    assert_eq!(on_a + on_c, 40);
    assert!(
        (28..=32).contains(&on_a),
        "3:1 over 40 connections: {seen:?}"
    );

    // The session on the removed backend runs on.
    let p: u16 = on_b.query_first("SELECT @@port").await.unwrap().unwrap();
    assert_eq!(p, b.port, "the removed backend's session is untouched");

    // An invalid configuration is refused; routing stays as it was.
    std::fs::write(&path, "backends: [\"127.0.0.1:1\"]\nno_such_key: 1\n").unwrap();
    d.signal(libc::SIGHUP);
    let line = d.wait_for_line("reload refused");
    assert!(line.contains("no_such_key"), "{line}");
    let seen = spread_at(&format!("127.0.0.1:{port}"), 8).await;
    assert!(
        seen.keys().all(|p| *p == a.port || *p == c.port),
        "still a and c: {seen:?}"
    );
    let p: u16 = on_b.query_first("SELECT @@port").await.unwrap().unwrap();
    assert_eq!(p, b.port);
    on_b.disconnect().await.unwrap();

    // A start-time setting changed on reload is named, not silently ignored.
    write_config(&path, &[(a, 1), (c, 1)], "max_connections: 77\n");
    d.signal(libc::SIGHUP);
    d.wait_for_line("`max_connections` changed");
    let status = d.stop();
    assert!(status.success(), "{status:?}");
    drop(third);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_turn_off_and_on_at_reload_and_log_slow_queries() {
    let pair = shared_pair();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    let config = |digests: &str| {
        let yaml = format!(
            "listen: [\"127.0.0.1:0\"]\nadmin_address: \"127.0.0.1:0\"\nlog: {{ level: info }}\n\
             digests: {digests}\nbackends: [\"{}\"]\n",
            pair[0].tcp_addr()
        );
        std::fs::write(&path, yaml).unwrap();
    };
    config("{ enabled: true, slow_query_threshold: 50ms }");
    let mut d = Daemon::start(&["--config".into(), path.display().to_string()], None);
    let (port, admin) = (d.proxy_addr().port(), d.admin_addr());
    let entries = || {
        let (s, body) = common::proxy::http_get(admin, "/queries").unwrap();
        assert_eq!(s, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        (
            v["enabled"].as_bool().unwrap(),
            v["entries"].as_u64().unwrap(),
        )
    };
    let run = |sql: &'static str| async move {
        let opts = common::mariadb::tcp_opts(&format!("127.0.0.1:{port}"), "bench", "bench");
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        conn.query_drop(sql).await.unwrap();
        conn.disconnect().await.unwrap();
    };

    run("SELECT SLEEP(0.1)").await;
    let line = d.wait_for_line("slow query");
    assert!(line.contains("SLEEP"), "{line}");
    assert!(
        line.contains(&pair[0].tcp_addr()),
        "names the backend: {line}"
    );
    assert!(line.contains("latency_ms"), "{line}");
    assert!(entries().0);
    assert!(entries().1 > 0);

    config("{ enabled: false }");
    d.signal(libc::SIGHUP);
    d.wait_for_line("configuration reloaded");
    let (s, _) = common::proxy::http_request(admin, "POST", "/queries/reset", &[], b"").unwrap();
    assert_eq!(s, 200);
    run("SELECT 1").await;
    assert_eq!(entries(), (false, 0), "off: nothing is kept");

    config("{ enabled: true }");
    d.signal(libc::SIGHUP);
    d.wait_for_new_line("configuration reloaded");
    run("SELECT 2").await;
    let (on, n) = entries();
    assert!(on && n > 0, "on again: {n} rows");
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}
