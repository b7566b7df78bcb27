//! The test harness itself: real MariaDB instances and the raw client behave as the other
//! integration tests assume.

#[path = "common/mariadb.rs"]
mod mariadb;
#[path = "common/rawclient.rs"]
mod rawclient;

use std::time::Instant;

use mariadb::{shared_pair, MariaDb, BENCH_PASS, BENCH_USER};
use mysql_async::prelude::*;
use rawclient::{RawClient, CLIENT_DEPRECATE_EOF};

fn text(s: &str) -> Option<String> {
    Some(s.to_string())
}

async fn raw_login(db: &MariaDb, extra_caps: u32, removed_caps: u32) -> RawClient {
    RawClient::connect_tcp(
        &db.tcp_addr(),
        BENCH_USER,
        BENCH_PASS,
        Some("test"),
        extra_caps,
        removed_caps,
    )
    .await
    .expect("raw login as bench")
}

#[tokio::test]
async fn shared_pair_serves_bench_on_each_own_port() {
    for db in shared_pair() {
        let mut conn = mysql_async::Conn::new(db.opts(BENCH_USER, BENCH_PASS))
            .await
            .expect("connect as bench");
        let port: Option<u16> = conn.query_first("SELECT @@port").await.unwrap();
        assert_eq!(port, Some(db.port));
        let schemas: Vec<String> = conn.query("SHOW DATABASES").await.unwrap();
        for wanted in ["sbtest", "test"] {
            assert!(
                schemas.iter().any(|s| s == wanted),
                "{wanted} missing: {schemas:?}"
            );
        }
        conn.disconnect().await.unwrap();
    }
}

#[tokio::test]
async fn shared_pair_is_two_distinct_servers() {
    let [a, b] = shared_pair();
    assert_ne!(a.port, b.port);
    assert_ne!(a.datadir, b.datadir);
    assert_ne!(
        a.root_query("SELECT @@server_id"),
        b.root_query("SELECT @@server_id")
    );
    assert!(a.is_running() && b.is_running());
}

#[tokio::test]
async fn tcp_opts_keep_mysql_async_on_tcp() {
    let db = &shared_pair()[1];
    let mut conn = mysql_async::Conn::new(db.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let host: Option<String> = conn
        .query_first("SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
        .await
        .unwrap();
    let host = host.unwrap_or_default();
    assert!(host.starts_with("127.0.0.1:"), "connection went via {host}");
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn rawclient_logs_in_and_selects_one() {
    let mut client = raw_login(&shared_pair()[0], 0, 0).await;
    assert!(client.server_version.contains("MariaDB"));
    assert_eq!(
        client.query_text("SELECT 1").await.unwrap(),
        vec![vec![text("1")]]
    );
    assert_eq!(
        client.query_text("SELECT DATABASE(), NULL").await.unwrap(),
        vec![vec![text("test"), None]]
    );
    client.quit().await.unwrap();
}

#[tokio::test]
async fn rawclient_reads_multi_results_with_and_without_deprecate_eof() {
    for (extra, removed) in [(CLIENT_DEPRECATE_EOF, 0), (0, CLIENT_DEPRECATE_EOF)] {
        let mut client = raw_login(&shared_pair()[0], extra, removed).await;
        assert_eq!(client.caps & CLIENT_DEPRECATE_EOF, extra);
        let results = client
            .query_results("SELECT 1; DO 0; SELECT 'a' UNION ALL SELECT 'b'")
            .await
            .unwrap();
        assert_eq!(
            results,
            vec![
                vec![vec![text("1")]],
                vec![],
                vec![vec![text("a")], vec![text("b")]],
            ]
        );
        client.ping().await.unwrap();
    }
}

#[tokio::test]
async fn rawclient_reports_errors_as_code_and_message() {
    let db = &shared_pair()[0];
    let denied = RawClient::connect_tcp(&db.tcp_addr(), BENCH_USER, "wrong", None, 0, 0)
        .await
        .err()
        .expect("a wrong password must fail");
    assert!(denied.starts_with("1045: "), "{denied}");

    let mut client = raw_login(db, 0, 0).await;
    let err = client
        .query_text("SELECT * FROM no_such_table")
        .await
        .unwrap_err();
    assert!(err.starts_with("1146: "), "{err}");
    client.ping().await.expect("still in sync after an ERR");
}

#[tokio::test]
async fn rawclient_logs_in_over_the_unix_socket() {
    let db = &shared_pair()[1];
    let mut client = RawClient::connect_unix(&db.socket, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .unwrap();
    assert_eq!(
        client.query_text("SELECT CURRENT_USER()").await.unwrap(),
        vec![vec![text("bench@localhost")]]
    );
}

#[test]
fn dedicated_instance_survives_stop_restart_and_kill9() {
    let started = Instant::now();
    let mut db = MariaDb::start("restart-me");
    eprintln!("MariaDb::start took {:?}", started.elapsed());
    let port = db.port;
    db.root_exec(
        "CREATE TABLE test.t (id INT PRIMARY KEY) ENGINE=InnoDB; INSERT INTO test.t VALUES (1)",
    );
    assert!(db.is_running());

    db.stop();
    assert!(!db.is_running());
    assert!(std::net::TcpStream::connect(db.tcp_addr()).is_err());

    let restarted = Instant::now();
    db.restart();
    eprintln!("MariaDb::restart took {:?}", restarted.elapsed());
    assert_eq!(db.port, port);
    assert!(db.is_running());
    assert_eq!(db.root_query("SELECT COUNT(*) FROM test.t").trim(), "1");

    db.root_exec("INSERT INTO test.t VALUES (2)");
    db.kill9();
    assert!(!db.is_running());
    db.restart();
    assert_eq!(db.root_query("SELECT COUNT(*) FROM test.t").trim(), "2");

    let datadir = db.datadir.clone();
    drop(db);
    assert!(!datadir.exists(), "datadir left behind");
}
