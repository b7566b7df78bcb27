//! The query digest table against a real MariaDB: statements through mysql-lb are counted per
//! digest, command kind, backend, user and schema, with their errors, rows and affected rows;
//! prepared statements count under their text's digest; `USE` moves later statements to the new
//! schema; samples need the token; a reset empties the table; the table stays within
//! `digests.max_entries` under 100,000 distinct statements with its totals exact; and a proxy
//! with digests off keeps none.

mod common;

use std::time::Duration;

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::proxy::{config, http_request, with_digests, TestProxy};
use mysql_async::prelude::*;
use serde_json::Value;

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn queries(proxy: &TestProxy, query: &str) -> Value {
    let (status, body) = proxy.admin_get(&format!("/queries?{query}"));
    assert_eq!(status, 200, "{body}");
    json(&body)
}

/// The digest id mysql-lb gives `text` (as `/queries` prints it).
fn digest_of(text: &str) -> String {
    mysql_lb::wire::sql::digest(text.as_bytes(), 1024).to_string()
}

/// The row of (`text`'s digest, `kind`) among `rows`.
fn row<'a>(rows: &'a Value, text: &str, kind: &str) -> &'a Value {
    let digest = digest_of(text);
    rows["queries"]
        .as_array()
        .expect("queries")
        .iter()
        .find(|r| r["digest"] == digest.as_str() && r["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} row for {text:?} ({digest}) in {rows:#}"))
}

/// One session through `proxy` that runs `sql` and quits.
async fn one_statement(proxy: &TestProxy, sql: &str) {
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect("login through the proxy");
    conn.query_drop(sql).await.expect("the statement");
    conn.disconnect().await.expect("quit");
}

fn setup_schema(schema: &str) {
    for db in shared_pair() {
        db.root_exec(&format!(
            "DROP DATABASE IF EXISTS {schema}; CREATE DATABASE {schema}; \
             CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(10), n INT); \
             INSERT INTO {schema}.t VALUES (1, 'a', 0), (2, 'b', 0), (3, 'c', 0); \
             GRANT ALL ON {schema}.* TO '{BENCH_USER}'@'%'"
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_are_counted_per_digest_kind_user_and_schema() {
    let pair = shared_pair();
    setup_schema("digest_a");
    // One backend, so every row is on it.
    let proxy = TestProxy::start_with(with_digests(&[pair[0].tcp_addr()]));
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let (s, body) = proxy.admin_post("/queries/reset", &[]);
    assert_eq!(s, 200, "{body}");

    conn.query_drop("USE digest_a").await.unwrap();
    for id in 1..=7 {
        let _: Vec<String> = conn
            .query(format!("SELECT v FROM t WHERE id = {id}"))
            .await
            .unwrap();
    }
    conn.query_drop("UPDATE t SET n = n + 1 WHERE id <= 2")
        .await
        .unwrap();
    for _ in 0..2 {
        assert!(conn.query_drop("SELECT nope FROM t").await.is_err());
    }
    let stmt = conn.prep("SELECT v FROM t WHERE id = ?").await.unwrap();
    for id in 1..=5 {
        let _: Vec<String> = conn.exec(&stmt, (id,)).await.unwrap();
    }
    conn.query_drop("USE mysql").await.unwrap();
    conn.query_drop("SELECT 1").await.unwrap();
    conn.disconnect().await.unwrap();

    let all = queries(&proxy, "user=bench&schema=digest_a&limit=100");
    let select = row(&all, "SELECT v FROM t WHERE id = 1", "query");
    assert_eq!(select["count"], 7, "{select}");
    assert_eq!(select["rows_sent"], 3, "ids 1-3 exist: {select}");
    assert_eq!(select["errors"], 0);
    assert_eq!(select["backend"], pair[0].tcp_addr());
    assert_eq!(select["pool"], "default");
    assert!(select["p99_seconds"].as_f64().unwrap() > 0.0, "{select}");
    assert!(
        select["min_seconds"].as_f64() <= select["avg_seconds"].as_f64()
            && select["avg_seconds"].as_f64() <= select["max_seconds"].as_f64(),
        "{select}"
    );
    let update = row(&all, "UPDATE t SET n = n + 1 WHERE id <= 2", "query");
    assert_eq!(
        (update["count"].as_u64(), update["rows_affected"].as_u64()),
        (Some(1), Some(2))
    );
    let bad = row(&all, "SELECT nope FROM t", "query");
    assert_eq!(
        (bad["count"].as_u64(), bad["errors"].as_u64()),
        (Some(2), Some(2))
    );
    let exec = row(&all, "SELECT v FROM t WHERE id = ?", "execute");
    assert_eq!(
        (exec["count"].as_u64(), exec["rows_sent"].as_u64()),
        (Some(5), Some(3))
    );
    let prep = row(&all, "SELECT v FROM t WHERE id = ?", "prepare");
    assert_eq!(prep["count"], 1, "{prep}");
    assert_eq!(exec["text"], prep["text"]);
    // Samples are the statements as sent (no token is configured: every caller may see them).
    assert!(select["sample"]
        .as_str()
        .unwrap()
        .starts_with("SELECT v FROM t WHERE id = "));

    // After `USE mysql` the same session's statements count under the new schema.
    let after = queries(&proxy, "user=bench&schema=mysql");
    assert_eq!(row(&after, "SELECT 1", "query")["count"], 1, "{after}");
    let before = queries(&proxy, "user=bench&schema=digest_a&limit=100");
    assert!(
        before["queries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["digest"] != digest_of("SELECT 1").as_str()),
        "{before}"
    );
    // Sorted by count, descending, and cut to the limit.
    let top = queries(&proxy, "sort=count&limit=1&user=bench");
    assert_eq!(top["queries"].as_array().unwrap().len(), 1);
    assert_eq!(top["queries"][0]["count"], 7, "{top}");
    let (s, body) = proxy.admin_get("/queries?sort=bogus");
    assert_eq!(s, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_and_reset_need_the_token_when_one_is_set() {
    let pair = shared_pair();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "tok-q\n").unwrap();
    let mut cfg = with_digests(&[pair[0].tcp_addr()]);
    cfg.admin_token_file = Some(token_file);
    let proxy = TestProxy::start_with(cfg);
    one_statement(&proxy, "SELECT 'secret-literal'").await;
    let admin = proxy.admin.unwrap();
    let get = |headers: &[&str]| {
        let (s, body) = http_request(admin, "GET", "/queries?limit=1000", headers, b"").unwrap();
        assert_eq!(s, 200, "{body}");
        json(&body)
    };
    let anonymous = get(&[]);
    let r = row(&anonymous, "SELECT 'x'", "query");
    assert!(r["sample"].is_null(), "no token, no sample: {r}");
    assert!(!anonymous.to_string().contains("secret-literal"));
    let with_token = get(&["Authorization: Bearer tok-q"]);
    assert_eq!(
        row(&with_token, "SELECT 'x'", "query")["sample"],
        "SELECT 'secret-literal'"
    );

    let (s, _) = proxy.admin_post("/queries/reset", &[]);
    assert_eq!(s, 401);
    assert!(
        get(&[])["entries"].as_u64().unwrap() > 0,
        "a refused reset keeps the rows"
    );
    let (s, body) = proxy.admin_post("/queries/reset", &["Authorization: Bearer tok-q"]);
    assert_eq!(s, 200, "{body}");
    assert_eq!(get(&[])["entries"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_stays_within_its_bound_with_exact_totals() {
    const CONNS: usize = 4;
    const EACH: usize = 25_000;
    let pair = shared_pair();
    let mut cfg = with_digests(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    cfg.digests.max_entries = 64;
    let proxy = TestProxy::start_with(cfg);
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(
            mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
                .await
                .unwrap(),
        );
    }
    let (s, _) = proxy.admin_post("/queries/reset", &[]);
    assert_eq!(s, 200);
    let started = std::time::Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(c, mut conn)| {
            tokio::spawn(async move {
                for i in 0..EACH {
                    // A distinct alias is a distinct digest.
                    conn.query_drop(format!("SELECT {i} AS c{c}_{i}"))
                        .await
                        .unwrap();
                }
                conn.disconnect().await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("bounded run")
            .unwrap();
    }
    println!("{} statements in {:?}", CONNS * EACH, started.elapsed());
    let all = queries(&proxy, "limit=10000");
    let rows = all["queries"].as_array().unwrap();
    let total: u64 = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(total, (CONNS * EACH) as u64, "totals stay exact");
    assert_eq!(all["statements"], total);
    let others = rows.iter().filter(|r| r["other"] == true).count();
    assert!(others <= 2, "one (other) row per backend at most: {others}");
    assert!(
        rows.len() - others <= 64,
        "{} rows for a bound of 64",
        rows.len() - others
    );
    assert!(
        all["folded"].as_u64().unwrap() > 90_000,
        "{}",
        all["folded"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digests_are_on_by_default_and_off_keeps_nothing() {
    let pair = shared_pair();
    for enabled in [None, Some(false)] {
        let mut cfg = config(&[pair[0].tcp_addr()]);
        if let Some(enabled) = enabled {
            cfg.digests.enabled = enabled;
        }
        let proxy = TestProxy::start_with(cfg);
        one_statement(&proxy, "SELECT 1").await;
        let all = queries(&proxy, "");
        if enabled.is_none() {
            assert_eq!(all["enabled"], true, "on by default");
            assert!(all["entries"].as_u64().unwrap() > 0, "{all}");
        } else {
            assert_eq!(all["enabled"], false);
            assert_eq!(all["entries"], 0, "{all}");
        }
    }
}

/// Without a token the endpoint is on loopback; a browser led there by a rebound DNS name sends
/// that name as Host, and gets nothing (samples carry literals).
#[test]
fn a_foreign_host_name_reads_nothing_without_a_token() {
    use std::io::{Read, Write};
    let pair = shared_pair();
    let proxy = TestProxy::start_with(with_digests(&[pair[0].tcp_addr()]));
    let ask = |host: &str| {
        let mut s = std::net::TcpStream::connect(proxy.admin.unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /queries HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
        let mut response = String::new();
        s.read_to_string(&mut response).unwrap();
        response
    };
    let refused = ask("rebound.example:4041");
    assert!(refused.starts_with("HTTP/1.0 403"), "{refused}");
    assert!(!refused.contains("\"queries\""), "{refused}");
    let served = ask(&format!("127.0.0.1:{}", proxy.admin.unwrap().port()));
    assert!(served.starts_with("HTTP/1.0 200"), "{served}");
}

/// 200 sessions, all open at once, each running 40 distinct 4 KiB statements (digests with a
/// 4 KiB text and a 4 KiB sample): where each session used to keep its own statements' texts
/// (about 64 MiB here), the proxy process (its own, so the test's memory does not count) grows
/// by no more than the figure of docs/src/digests.md: `max_text_bytes`, plus about 1.6 KiB per
/// row and 4.5 KiB per session, plus allocator slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_of_distinct_long_statements_stay_within_the_text_budget() {
    use common::daemon::Daemon;
    use common::mariadb::{scratch_dir, tcp_opts};
    const SESSIONS: usize = 200;
    const EACH: usize = 40;
    const BUDGET: u64 = 4 << 20;
    const ROWS: u64 = 1000;
    let pair = shared_pair();
    let path = scratch_dir("digest-text-budget").join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: ['127.0.0.1:0']\nbackends: [{{address: '{}'}}]\n\
             admin_address: '127.0.0.1:0'\nlog: {{level: info}}\n\
             digests: {{enabled: true, max_entries: {ROWS}, max_query_length: 8192, \
             sample_length: 4096, max_text_bytes: {BUDGET}}}\n",
            pair[0].tcp_addr()
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&["--config".to_owned(), path.display().to_string()], None);
    let (addr, admin) = (daemon.proxy_addr().to_string(), daemon.admin_addr());
    let mut conns = Vec::new();
    for _ in 0..SESSIONS {
        let mut c = mysql_async::Conn::new(tcp_opts(&addr, BENCH_USER, BENCH_PASS))
            .await
            .unwrap();
        c.query_drop("SELECT 1").await.unwrap();
        conns.push(c);
    }
    let before = daemon.rss_kib();
    let mut groups: Vec<Vec<(usize, mysql_async::Conn)>> = (0..8).map(|_| Vec::new()).collect();
    for (i, c) in conns.into_iter().enumerate() {
        groups[i % 8].push((i, c));
    }
    let tasks: Vec<_> = groups
        .into_iter()
        .map(|group| {
            tokio::spawn(async move {
                let mut kept = Vec::new();
                for (i, mut c) in group {
                    for j in 0..EACH {
                        // Distinct aliases: a distinct digest of about 4 KiB.
                        let columns: Vec<String> =
                            (0..230).map(|k| format!("1 AS a{i}_{j}_{k}")).collect();
                        let sql = format!("SELECT {}", columns.join(", "));
                        c.query_drop(&sql).await.unwrap();
                    }
                    kept.push(c);
                }
                kept
            })
        })
        .collect();
    let mut open = Vec::new();
    for t in tasks {
        let kept = tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("bounded run")
            .unwrap();
        open.extend(kept);
    }
    let after = daemon.rss_kib();
    println!(
        "RSS {before} KiB with {SESSIONS} sessions open, {after} KiB after {} distinct statements",
        SESSIONS * EACH
    );
    let (status, body) = http_request(admin, "GET", "/queries?limit=1", &[], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    let all = json(&body);
    let used = all["text_bytes"].as_u64().unwrap();
    println!("texts: {used} bytes of {BUDGET}");
    assert_eq!(all["max_text_bytes"], BUDGET);
    assert!(used <= BUDGET && used > BUDGET / 2, "{all}");
    // Each session's own (its client's setup queries, `SELECT 1`) and the long ones.
    let statements = all["statements"].as_u64().unwrap();
    assert!(
        statements >= (SESSIONS * (EACH + 1)) as u64,
        "every statement counted: {statements}"
    );
    let figure_kib = BUDGET / 1024 + ROWS * 16 / 10 + SESSIONS as u64 * 45 / 10;
    let slack_kib = 8 * 1024;
    assert!(
        after.saturating_sub(before) <= figure_kib + slack_kib,
        "RSS grew {} KiB, over {figure_kib} KiB + {slack_kib} KiB of slack",
        after - before
    );
    for c in open {
        c.disconnect().await.unwrap();
    }
}
