//! Transaction pooling (`pooling.mode: transaction`) against real MariaDB servers: sessions of
//! one user share server connections between transactions, a session that changes state keeps
//! its connection, and no session ever sees another's state.

mod common;

use std::time::{Duration, Instant};

use common::mariadb::shared_pair;
use common::pooling::{open_connections, pool_reaches, server_id};
use common::proxy::TestProxy;
use mysql_async::prelude::*;

/// A proxy on `backends` whose default pool shares connections.
fn pooled(backends: &[String], max: usize, idle: Duration) -> TestProxy {
    common::pooling::pooled(backends, max, idle, Duration::from_secs(3))
}

async fn connect(proxy: &TestProxy) -> mysql_async::Conn {
    mysql_async::Conn::new(proxy.opts("bench", "bench"))
        .await
        .expect("connect through the pool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_of_one_user_share_one_server_connection_between_transactions() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(
        std::slice::from_ref(&backend),
        4,
        Duration::from_millis(500),
    );
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    // Each logged in on a connection of its own; once idle, one is enough for both.
    open_connections(&proxy, &backend, 1).await;
    let (x, y) = (server_id(&mut a).await, server_id(&mut b).await);
    assert_eq!(x, y, "both sessions run on the one connection left");
    a.query_drop("CREATE TABLE IF NOT EXISTS test.pool_tx (id INT PRIMARY KEY)")
        .await
        .unwrap();
    a.query_drop("DELETE FROM test.pool_tx").await.unwrap();

    // A transaction holds the connection: the other session waits for its end, then sees the
    // committed row.
    a.query_drop("BEGIN").await.unwrap();
    a.query_drop("INSERT INTO test.pool_tx VALUES (1)")
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let n: u64 = b
            .query_first("SELECT COUNT(*) FROM test.pool_tx")
            .await
            .unwrap()
            .unwrap();
        (n, started.elapsed(), b)
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    a.query_drop("COMMIT").await.unwrap();
    let (n, waited, mut b) = waiting.await.unwrap();
    assert_eq!(n, 1, "it ran after the commit, on the same connection");
    assert!(
        waited >= Duration::from_millis(300),
        "it waited: {waited:?}"
    );
    assert_eq!(server_id(&mut b).await, x);
    pool_reaches(&proxy, &backend, "1 open, 1 idle", |c| {
        c.open == 1 && c.idle == 1
    })
    .await;
    // `/backends` shows the shared connections.
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let pool = &json["backends"][0]["server_pool"];
    assert_eq!(pool["open"], 1, "{body}");
    assert_eq!(pool["idle"], 1, "{body}");
    assert_eq!(pool["max"], 4, "{body}");
    a.disconnect().await.unwrap();
    b.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_sets_state_keeps_its_connection_and_its_end_brings_it_back_clean() {
    let db = &shared_pair()[1];
    let backend = db.tcp_addr();
    let proxy = pooled(
        std::slice::from_ref(&backend),
        4,
        Duration::from_millis(500),
    );
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    open_connections(&proxy, &backend, 1).await;
    a.query_drop("SET @v = 42, SESSION sql_mode = 'ANSI_QUOTES'")
        .await
        .unwrap();
    let v: Option<u64> = a.query_first("SELECT @v").await.unwrap().unwrap();
    assert_eq!(v, Some(42), "the session keeps its own state");
    // The other session has no connection until the pinned one comes back, reset.
    let waiting = tokio::spawn(async move {
        let row: (Option<u64>, String) = b
            .query_first("SELECT @v, @@sql_mode")
            .await
            .unwrap()
            .unwrap();
        (row, b)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "no other connection to run on");
    a.disconnect().await.unwrap();
    let ((v, mode), b) = waiting.await.unwrap();
    assert_eq!(v, None, "another session's user variable never shows");
    assert!(!mode.contains("ANSI_QUOTES"), "nor its sql_mode: {mode}");
    let pins = proxy
        .series(&format!(
            "mysql_lb_pool_pins_total{{backend=\"{backend}\",pool=\"default\",reason=\"user_variable\"}}"
        ))
        .unwrap_or(0.0);
    // Reading a user variable pins too (it is a session's own state): both sessions did.
    assert_eq!(pins, 2.0);
    b.disconnect().await.unwrap();
}

/// Production pools mostly run behind a deferred connect (the default for backends off this
/// host): the proxy greets, reads the login, then logs in on a fresh server connection that
/// joins the pool as in an immediate connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_connect_logs_in_and_shares_as_an_immediate_one_does() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let mut config = common::proxy::config(std::slice::from_ref(&backend));
    config.connect_mode = mysql_lb::config::ConnectMode::Deferred;
    let (idle, wait) = (Duration::from_millis(500), Duration::from_secs(3));
    common::pooling::transaction_mode(&mut config, 4, idle, wait);
    let proxy = TestProxy::start_with(config);
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    open_connections(&proxy, &backend, 1).await;
    let (x, y) = (server_id(&mut a).await, server_id(&mut b).await);
    assert_eq!(x, y, "both sessions run on the one connection left");
    // Settings are replayed on the shared connection, each session reading its own.
    a.query_drop("SET time_zone = '+05:00'").await.unwrap();
    let theirs: String = b.query_first("SELECT @@time_zone").await.unwrap().unwrap();
    let ours: String = a.query_first("SELECT @@time_zone").await.unwrap().unwrap();
    assert_eq!((ours.as_str(), theirs.as_str()), ("+05:00", "SYSTEM"));
    // A wrong password is refused by the server, as directly.
    let refused = mysql_async::Conn::new(proxy.opts("bench", "wrong")).await;
    let code = match refused {
        Err(mysql_async::Error::Server(e)) => e.code,
        other => panic!("a refused login, got {other:?}"),
    };
    assert_eq!(code, 1045);
    a.disconnect().await.unwrap();
    b.disconnect().await.unwrap();
}
