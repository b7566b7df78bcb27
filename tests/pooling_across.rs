//! A transaction-mode pool shared across its backends (`pooling.across_backends: true`), against
//! three real MariaDB servers: long-lived sessions spread their transactions over every backend
//! (each reached more than one), a drained backend's sessions move at their next transaction with
//! no error and the drained backend ends with no session and no connection, and a backend
//! SIGKILLed while sessions are between transactions costs no client an error.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::mariadb::{start_dedicated, MariaDb, BENCH_PASS, BENCH_USER};
use common::pooling::{counts, transaction_mode};
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;

/// A proxy whose default pool shares server connections across `dbs`, round robin.
fn across(dbs: &[MariaDb]) -> TestProxy {
    let backends: Vec<String> = dbs.iter().map(MariaDb::tcp_addr).collect();
    let mut c = config(&backends);
    transaction_mode(&mut c, 50, Duration::from_secs(60), Duration::from_secs(5));
    c.pools[0].pooling.across_backends = true;
    TestProxy::start_with(c)
}

async fn sessions(proxy: &TestProxy, n: usize) -> Vec<mysql_async::Conn> {
    let mut out = Vec::new();
    for _ in 0..n {
        let conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
            .await
            .expect("login through the proxy");
        out.push(conn);
    }
    out
}

/// The sessions on each worker thread (`mysql_lb_worker_sessions`), from a `/metrics` page.
fn worker_sessions(metrics: &str) -> Vec<usize> {
    metrics
        .lines()
        .filter(|l| l.starts_with("mysql_lb_worker_sessions{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// Each session in turn runs `SELECT @@port` (autocommit: one transaction each) `rounds`
/// times; returns the ports each session's statements ran on, and the errors.
async fn rounds(conns: &mut [mysql_async::Conn], rounds: usize) -> (Vec<Vec<u16>>, Vec<String>) {
    let mut ports = vec![Vec::new(); conns.len()];
    let mut errors = Vec::new();
    for _ in 0..rounds {
        for (i, conn) in conns.iter_mut().enumerate() {
            match conn.query_first::<u16, _>("SELECT @@port").await {
                Ok(Some(port)) => ports[i].push(port),
                Ok(None) => errors.push(format!("session {i}: no row")),
                Err(e) => errors.push(format!("session {i}: {e}")),
            }
        }
    }
    (ports, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_spread_over_the_backends_and_a_drain_moves_them_without_an_error() {
    let dbs =
        tokio::task::block_in_place(|| start_dedicated(&["across-a", "across-b", "across-c"]));
    let proxy = across(&dbs);
    // 11 sessions, logged in round robin over 3 backends: 4, 4 and 3 login connections.
    let mut conns = sessions(&proxy, 11).await;
    let (ports, errors) = rounds(&mut conns, 30).await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut per_backend: BTreeMap<u16, usize> = BTreeMap::new();
    for p in ports.iter().flatten() {
        *per_backend.entry(*p).or_default() += 1;
    }
    assert_eq!(
        per_backend.len(),
        3,
        "every backend ran statements: {per_backend:?}"
    );
    // How even the spread is depends on the worker threads: a session takes an idle connection
    // of its own thread first, so a backend whose connections all live on one thread serves
    // only that thread's sessions. Each of those still starts its rotation there once in three
    // transactions (11 sessions a round: 30 rounds give every session each of the 3 starts 10
    // times), so a backend runs at least 10 per session of the thread with the fewest.
    let (_, metrics) = proxy.admin_get("/metrics");
    let fewest = worker_sessions(&metrics)
        .into_iter()
        .filter(|&n| n > 0)
        .min()
        .expect("the sessions count on a worker");
    for (port, n) in &per_backend {
        assert!(
            *n >= 10 * fewest,
            "backend {port} ran {n} of 330, below 10 per session of the worker with the \
             fewest ({fewest}): {per_backend:?}"
        );
    }
    let moved = ports
        .iter()
        .filter(|p| p.iter().collect::<BTreeSet<_>>().len() > 1)
        .count();
    assert_eq!(
        moved, 11,
        "every session reached more than one backend: {ports:?}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("mysql_lb_pool_session_moves_total{") && !l.ends_with(" 0")),
        "moves are counted"
    );

    // Drain the first backend: the sessions' next transactions run elsewhere, with no error.
    let drained = dbs[0].tcp_addr();
    let (status, body) = proxy.admin_post(&format!("/backends/{drained}/drain"), &[]);
    assert_eq!(status, 200, "{body}");
    let (ports, errors) = rounds(&mut conns, 10).await;
    assert!(
        errors.is_empty(),
        "a drain costs no client an error: {errors:?}"
    );
    assert!(
        ports.iter().flatten().all(|&p| p != dbs[0].port),
        "nothing runs on the drained backend: {ports:?}"
    );
    // Its sessions moved out as their transactions ended, and its idle connections close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = proxy.backend_entry(&drained);
        let open = counts(&proxy, &drained).open;
        if e["active_connections"] == 0 && open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the drained backend still has {} sessions and {open} connections",
            e["active_connections"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let others: u64 = dbs[1..]
        .iter()
        .map(|d| {
            proxy.backend_entry(&d.tcp_addr())["active_connections"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(others, 11, "every session counts on a backend in rotation");

    // Back to ready: transactions reach it again.
    let (status, body) = proxy.admin_post(&format!("/backends/{drained}/ready"), &[]);
    assert_eq!(status, 200, "{body}");
    let (ports, errors) = rounds(&mut conns, 6).await;
    assert!(errors.is_empty(), "{errors:?}");
    let _ = ports;
    let pool_sum = |field: &str| -> u64 {
        dbs.iter()
            .map(|d| {
                proxy.backend_entry(&d.tcp_addr())["server_pool"][field]
                    .as_u64()
                    .unwrap()
            })
            .sum()
    };
    assert!(pool_sum("moved_in") > 0, "/backends counts the moves");
    // A session that pins its connection (a user variable) stays on its backend, and
    // /backends shows it pinned there.
    conns[0].query_drop("SET @pinned = 1").await.unwrap();
    assert_eq!(pool_sum("pinned_sessions"), 1);
    let (ports, errors) = rounds(&mut conns, 6).await;
    assert!(errors.is_empty(), "{errors:?}");
    let stayed: BTreeSet<u16> = ports[0].iter().copied().collect();
    assert_eq!(stayed.len(), 1, "a pinned session stays: {stayed:?}");
    for conn in conns {
        conn.disconnect().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_between_transactions_costs_no_client_an_error() {
    let mut dbs = tokio::task::block_in_place(|| {
        start_dedicated(&["across-k-a", "across-k-b", "across-k-c"])
    });
    let proxy = across(&dbs);
    let mut conns = sessions(&proxy, 11).await;
    let (_, errors) = rounds(&mut conns, 6).await;
    assert!(errors.is_empty(), "{errors:?}");
    let killed = dbs[1].port;
    tokio::task::block_in_place(|| dbs[1].kill9());
    // Every session is between transactions: its next ones run on the two live backends.
    let (ports, errors) = rounds(&mut conns, 10).await;
    assert!(errors.is_empty(), "no client error: {errors:?}");
    assert!(ports.iter().flatten().all(|&p| p != killed), "{ports:?}");
    let live: BTreeSet<u16> = ports.iter().flatten().copied().collect();
    assert_eq!(live.len(), 2, "both live backends serve: {live:?}");
    for conn in conns {
        conn.disconnect().await.unwrap();
    }
}

/// Reads in autocommit from 8 concurrent clients while one of three backends is SIGKILLed: a
/// read in flight there is sent once more to a live backend (it has not started reaching its
/// client), so no client sees an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_under_autocommit_reads_costs_no_client_an_error() {
    let mut dbs = tokio::task::block_in_place(|| {
        start_dedicated(&["across-l-a", "across-l-b", "across-l-c"])
    });
    let proxy = across(&dbs);
    // Captured: a read sent again is one command with one response in the capture.
    let dir = common::mariadb::scratch_dir("across-lost-capture").join("cap");
    start_capture(&proxy, &serde_json::json!({ "dir": dir }));
    let conns = sessions(&proxy, 8).await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let done = std::sync::Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            let mut ports = Vec::new();
            for _ in 0..400 {
                match conn.query_first::<u16, _>("SELECT @@port").await {
                    Ok(Some(p)) => ports.push(p),
                    Ok(None) => errors.push(format!("client {i}: no row")),
                    Err(e) => errors.push(format!("client {i}: {e}")),
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let _ = conn.disconnect().await;
            (ports, errors)
        }));
    }
    // A third of the way in, the second backend dies.
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.load(std::sync::atomic::Ordering::Relaxed) < 8 * 400 / 3 {
        assert!(Instant::now() < deadline, "the load did not progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = dbs[1].port;
    tokio::task::block_in_place(|| dbs[1].kill9());
    let at_kill = done.load(std::sync::atomic::Ordering::Relaxed);
    let mut errors = Vec::new();
    let mut after: BTreeMap<u16, usize> = BTreeMap::new();
    for t in tasks {
        let (ports, e) = t.await.expect("client task");
        errors.extend(e);
        for p in ports {
            *after.entry(p).or_default() += 1;
        }
    }
    assert!(errors.is_empty(), "no client error: {errors:?}");
    assert!(at_kill < 8 * 400, "the kill came while the load ran");
    let (_, metrics) = proxy.admin_get("/metrics");
    let retries: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("mysql_lb_pool_retries_total{"))
        .filter_map(|l| l.rsplit(" ").next()?.parse::<u64>().ok())
        .sum();
    eprintln!("statements per backend: {after:?}; reads sent again: {retries}; killed {killed}");
    assert!(after.len() >= 2, "{after:?}");

    let (status, text) = proxy.admin_post("/capture/stop", &[]);
    assert_eq!(status, 200, "{text}");
    let loaded = mysql_lb::tools::replay::load::load(&dir).expect("load the capture");
    assert_eq!(loaded.sessions.len(), 8);
    for s in &loaded.sessions {
        let reads: Vec<_> = s
            .steps
            .iter()
            .filter(|st| st.payload == b"\x03SELECT @@port")
            .collect();
        assert_eq!(reads.len(), 400, "session {}: one record per read", s.id);
        assert!(
            reads
                .iter()
                .all(|st| st.response.is_some_and(|r| !r.error && r.rows == 1)),
            "session {}: every read answered, with its one row",
            s.id
        );
    }
}

fn start_capture(proxy: &TestProxy, body: &serde_json::Value) {
    let (status, text) = common::proxy::http_request(
        proxy.admin.expect("admin endpoint"),
        "POST",
        "/capture/start",
        &["Content-Type: application/json"],
        body.to_string().as_bytes(),
    )
    .expect("admin response");
    assert_eq!(status, 200, "{text}");
}

/// `sysbench TEST ... ACTION` against 127.0.0.1:`port` (small tables, prepared statements as
/// sysbench's default), started in the background.
fn sysbench(test: &str, port: u16, extra: &[&str], action: &str) -> std::process::Child {
    std::process::Command::new(common::sysbench::binary())
        .arg(test)
        .args([
            "--db-driver=mysql".to_string(),
            "--mysql-host=127.0.0.1".to_string(),
            format!("--mysql-port={port}"),
            format!("--mysql-user={BENCH_USER}"),
            format!("--mysql-password={BENCH_PASS}"),
            "--mysql-db=sbtest".to_string(),
            "--tables=2".to_string(),
            "--table-size=2000".to_string(),
            "--report-interval=0".to_string(),
        ])
        .args(extra)
        .arg(action)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sysbench: {e}"))
}

fn finished(child: std::process::Child, what: &str) -> String {
    let out = child.wait_with_output().expect("sysbench ran");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// sysbench `oltp_read_only` (8 long-lived threads, prepared statements) through a pool across
/// three backends; one is drained mid-run: sysbench ends with 0 errors, and within seconds
/// of the drain the drained backend has no session and no server connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_under_sysbench_read_only_costs_no_error_and_empties_the_backend() {
    let dbs = tokio::task::block_in_place(|| {
        let dbs = start_dedicated(&["across-s-a", "across-s-b", "across-s-c"]);
        for db in &dbs {
            db.root_exec("CREATE DATABASE IF NOT EXISTS sbtest");
            let prepare = sysbench("oltp_read_only", db.port, &[], "prepare");
            finished(prepare, &format!("sysbench prepare on {}", db.tcp_addr()));
        }
        dbs
    });
    let proxy = across(&dbs);
    let port = proxy.addr.port();
    let run = sysbench("oltp_read_only", port, &["--threads=8", "--time=9"], "run");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let drained = dbs[0].tcp_addr();
    let (status, body) = proxy.admin_post(&format!("/backends/{drained}/drain"), &[]);
    assert_eq!(status, 200, "{body}");
    let drain_at = Instant::now();
    let emptied = loop {
        let e = proxy.backend_entry(&drained);
        if e["active_connections"] == 0 && counts(&proxy, &drained).open == 0 {
            break drain_at.elapsed();
        }
        assert!(
            drain_at.elapsed() < Duration::from_secs(5),
            "5 s after the drain the backend has {} sessions and {:?}",
            e["active_connections"],
            counts(&proxy, &drained)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let questions = |db: &MariaDb| -> u64 {
        let out = db.root_query("SHOW GLOBAL STATUS LIKE 'Questions'");
        out.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("Questions")
    };
    let before = questions(&dbs[0]);
    let report = tokio::task::block_in_place(|| finished(run, "sysbench run through the proxy"));
    let after = questions(&dbs[0]);
    // Only the test's own status queries reach it after it emptied.
    assert!(
        after - before < 10,
        "the drained backend kept serving: {before} -> {after}"
    );
    let errors = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("ignored errors:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no error count in:\n{report}"));
    assert_eq!(errors, 0, "{report}");
    eprintln!("drained backend empty {emptied:?} after the drain");
}

/// Transactions that each insert a unique key, from 6 clients over a pool across three
/// backends, beside sysbench `oltp_read_write` (4 threads), while one backend is SIGKILLed: no
/// key is inserted on two backends (a write is never sent twice), a client fails only with a
/// transaction open on the killed backend, and the others run on. sysbench stops at its first
/// error (it cannot go on after a lost connection: 1.0.20 crashes when told to ignore one), so
/// it either completes or ends on a lost connection (2013, 2006: a statement in flight on the
/// killed server), never on anything a statement run twice would give (a duplicate key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_under_writes_runs_no_statement_twice() {
    let mut dbs = tokio::task::block_in_place(|| {
        let dbs = start_dedicated(&["across-w-a", "across-w-b", "across-w-c"]);
        for db in &dbs {
            db.root_exec(
                "CREATE DATABASE IF NOT EXISTS uk; \
                 CREATE TABLE IF NOT EXISTS uk.keys (k INT PRIMARY KEY, port INT); \
                 CREATE DATABASE IF NOT EXISTS sbtest",
            );
            let prepare = sysbench("oltp_read_write", db.port, &[], "prepare");
            finished(prepare, &format!("sysbench prepare on {}", db.tcp_addr()));
        }
        dbs
    });
    let proxy = across(&dbs);
    let read_write = sysbench(
        "oltp_read_write",
        proxy.addr.port(),
        &["--threads=4", "--time=8", "--mysql-ignore-errors=none"],
        "run",
    );
    let mut tasks = Vec::new();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for c in 0..6u32 {
        let opts = proxy.opts(BENCH_USER, BENCH_PASS);
        let done = std::sync::Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut conn = mysql_async::Conn::new(opts.clone()).await.expect("login");
            let (mut committed, mut failed) = (Vec::new(), Vec::new());
            for i in 0..150u32 {
                let k = c * 1000 + i;
                let ran = async {
                    conn.query_drop("BEGIN").await?;
                    conn.query_drop(format!("INSERT INTO uk.keys VALUES ({k}, @@port)"))
                        .await?;
                    conn.query_drop("COMMIT").await
                }
                .await;
                match ran {
                    Ok(()) => committed.push(k),
                    Err(e) => {
                        failed.push(format!("{k}: {e}"));
                        // As an application does: a new connection, and on.
                        conn = mysql_async::Conn::new(opts.clone())
                            .await
                            .expect("login again");
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let _ = conn.disconnect().await;
            (committed, failed)
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.load(std::sync::atomic::Ordering::Relaxed) < 6 * 150 / 3 {
        assert!(Instant::now() < deadline, "the load did not progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::task::block_in_place(|| dbs[1].kill9());
    let (mut committed, mut failed) = (Vec::new(), Vec::new());
    for t in tasks {
        let (c, f) = t.await.expect("client task");
        committed.extend(c);
        failed.extend(f);
    }
    assert!(
        failed.len() <= 6,
        "only transactions open on the killed backend fail: {failed:?}"
    );
    let out = tokio::task::block_in_place(|| read_write.wait_with_output()).expect("sysbench ran");
    let report =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let lost = ["error 2013", "errno = 2013", "error 2006", "errno = 2006"];
    assert!(
        out.status.success() || lost.iter().any(|e| report.contains(e)),
        "sysbench oltp_read_write ended on something else than a lost connection ({}):\n{report}",
        out.status
    );
    assert!(
        !report.contains("error 1062") && !report.contains("errno = 1062"),
        "a duplicate key: a statement ran twice\n{report}"
    );
    tokio::task::block_in_place(|| dbs[1].restart());
    let mut seen: BTreeMap<u32, Vec<u16>> = BTreeMap::new();
    for db in &dbs {
        for line in db.root_query("SELECT k FROM uk.keys").lines() {
            if let Ok(k) = line.trim().parse::<u32>() {
                seen.entry(k).or_default().push(db.port);
            }
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, ports)| ports.len() > 1).collect();
    assert!(twice.is_empty(), "keys inserted on two backends: {twice:?}");
    let lost: Vec<_> = committed.iter().filter(|k| !seen.contains_key(k)).collect();
    eprintln!(
        "{} committed, {} failed ({failed:?}), {} committed keys not found after the restart",
        committed.len(),
        failed.len(),
        lost.len()
    );
    assert!(
        committed.len() >= 6 * 150 - 6,
        "{} committed",
        committed.len()
    );
}

/// A login whose user is known (deferred connect) goes to the backend with the fewest
/// connections of its user and schema: 6 logins of one user over backends weighted 3:1:1 land
/// 2, 2 and 2 (the weights alone would give the first 3 or more), and `/backends` says no key
/// sits on one backend only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_of_one_user_spread_over_the_backends() {
    let dbs = tokio::task::block_in_place(|| {
        start_dedicated(&["across-p-a", "across-p-b", "across-p-c"])
    });
    let backends: Vec<String> = dbs.iter().map(MariaDb::tcp_addr).collect();
    let mut c = config(&backends);
    transaction_mode(&mut c, 50, Duration::from_secs(60), Duration::from_secs(5));
    c.pools[0].pooling.across_backends = true;
    c.backends[0].weight = 3;
    c.connect_mode = mysql_lb::config::ConnectMode::Deferred;
    let proxy = TestProxy::start_with(c);
    let mut conns = sessions(&proxy, 6).await;
    let opened: Vec<usize> = backends.iter().map(|b| counts(&proxy, b).open).collect();
    assert_eq!(
        opened,
        vec![2, 2, 2],
        "one user's logins spread over the backends"
    );
    let (_, errors) = rounds(&mut conns, 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    // A second user logs in once: its key sits on one backend only, which is counted (once a
    // second) there, and nowhere for the first user.
    tokio::task::block_in_place(|| {
        for db in &dbs {
            db.root_exec(
                "CREATE USER IF NOT EXISTS 'lone'@'%' IDENTIFIED BY 'lone'; \
                 CREATE USER IF NOT EXISTS 'lone'@'localhost' IDENTIFIED BY 'lone'; \
                 GRANT SELECT ON *.* TO 'lone'@'%'; GRANT SELECT ON *.* TO 'lone'@'localhost'",
            );
        }
    });
    let mut lone = mysql_async::Conn::new(proxy.opts("lone", "lone"))
        .await
        .expect("the second user logs in");
    let _: Option<u16> = lone.query_first("SELECT @@port").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let only_here = loop {
        let per: Vec<u64> = backends
            .iter()
            .map(|b| {
                proxy.backend_entry(b)["server_pool"]["keys_only_here"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        if per.iter().sum::<u64>() == 1 {
            break per;
        }
        assert!(
            Instant::now() < deadline,
            "keys only on one backend: {per:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (_, metrics) = proxy.admin_get("/metrics");
    let ones = metrics
        .lines()
        .filter(|l| l.starts_with("mysql_lb_pool_keys_only_here{") && l.ends_with(" 1"))
        .count();
    assert_eq!(ones, 1, "{only_here:?}");
    lone.disconnect().await.unwrap();
    for conn in conns {
        conn.disconnect().await.unwrap();
    }
}

/// KILL QUERY naming a session of a pool across backends reaches the statement it runs now,
/// on whichever backend that is: the victim's transactions move between kills (every other
/// round its last backend is drained, so it must), the killer is another session of the same
/// user (it runs the KILL wherever its own transaction lands, the proxy's `kill:` account doing
/// it on another backend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_query_follows_the_session_to_its_backend_of_the_moment() {
    use common::rawclient::RawClient;
    let dbs = tokio::task::block_in_place(|| {
        let dbs = start_dedicated(&["across-kill-a", "across-kill-b", "across-kill-c"]);
        for db in &dbs {
            common::create_kill_accounts(db);
        }
        dbs
    });
    let backends: Vec<String> = dbs.iter().map(MariaDb::tcp_addr).collect();
    let mut c = config(&backends);
    transaction_mode(&mut c, 50, Duration::from_secs(60), Duration::from_secs(5));
    c.pools[0].pooling.across_backends = true;
    c.kill = common::kill_account();
    let proxy = TestProxy::start_with(c);
    let addr = proxy.addr_string();
    let login = || RawClient::connect_tcp(&addr, "app", "app", None, 0, 0);
    // Logins on each backend, so that the user's transactions can run on every one.
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(login().await.expect("login"));
    }
    let mut victim = login().await.expect("victim logs in");
    let victim_id = victim.connection_id;
    let mut killer = login().await.expect("killer logs in");
    let mut ports = BTreeSet::new();
    let mut last: Option<u16> = None;
    for round in 0..6 {
        // Every other round, the backend the victim last ran on is drained: its next
        // transaction must run on another one (the policy may keep it where it was otherwise).
        let drained = last.filter(|_| round % 2 == 1).map(|port| {
            let name = format!("127.0.0.1:{port}");
            let (status, body) = proxy.admin_post(&format!("/backends/{name}/drain"), &[]);
            assert_eq!(status, 200, "{body}");
            name
        });
        let marker = format!("across-kill-{round}");
        victim
            .send_command(
                0x03,
                format!("SELECT SLEEP(30), '{marker}', @@port").as_bytes(),
            )
            .await
            .expect("send the victim's query");
        let port = running_on(&dbs, &marker);
        ports.insert(port);
        if let Some(name) = &drained {
            assert_ne!(
                Some(port),
                last,
                "round {round}: the drained backend ran it"
            );
            let (status, body) = proxy.admin_post(&format!("/backends/{name}/ready"), &[]);
            assert_eq!(status, 200, "{body}");
        }
        last = Some(port);
        let what = format!("round {round} on {port}");
        kill_interrupts(
            &mut killer,
            &mut victim,
            victim_id,
            &mut others,
            round,
            &what,
        )
        .await;
    }
    assert!(
        ports.len() > 1,
        "the victim ran on one backend only: {ports:?}"
    );
}

/// By session: the backend its start record names, the backend each of its `SELECT @@port`
/// ran on (the start record's, then each move record's from where it is), and its moves.
fn captured_backends(dir: &std::path::Path) -> BTreeMap<u64, (String, Vec<String>, usize)> {
    use mysql_lb::telemetry::capture::format::{decode_file, Body};
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // Per session: where it started, where each command ran, how many moves.
    let mut out: BTreeMap<u64, (String, Vec<String>, usize)> = BTreeMap::new();
    let mut now: BTreeMap<u64, String> = BTreeMap::new();
    for f in files {
        let d = decode_file(&std::fs::read(&f).unwrap()).unwrap();
        assert!(d.stopped.is_none(), "{}: {:?}", f.display(), d.stopped);
        for r in d.records {
            let s = out.entry(r.session).or_default();
            match r.body {
                Body::SessionStart(start) => {
                    s.0.clone_from(&start.backend);
                    now.insert(r.session, start.backend);
                }
                Body::Moved { backend } => {
                    s.2 += 1;
                    now.insert(r.session, backend);
                }
                Body::Command(c) if c.payload == b"\x03SELECT @@port" => {
                    s.1.push(now[&r.session].clone());
                }
                _ => {}
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_says_which_backend_each_statement_of_a_moving_session_ran_on() {
    let dbs = tokio::task::block_in_place(|| start_dedicated(&["across-cap-a", "across-cap-b"]));
    let proxy = across(&dbs);
    let dir = common::mariadb::scratch_dir("across-capture").join("cap");
    // Only the sessions that start on the first backend: they are captured wherever they go.
    let first = dbs[0].tcp_addr();
    start_capture(&proxy, &serde_json::json!({ "dir": dir, "backend": first }));
    let mut conns = sessions(&proxy, 6).await;
    let (mut ports, errors) = rounds(&mut conns, 6).await;
    assert!(errors.is_empty(), "{errors:?}");
    // A session may keep finding its own thread's connection where it is: a drain of the first
    // backend makes its sessions move, and they may come back once it is ready.
    for op in ["drain", "ready"] {
        let (status, text) = proxy.admin_post(&format!("/backends/{first}/{op}"), &[]);
        assert_eq!(status, 200, "{text}");
        let (more, errors) = rounds(&mut conns, 6).await;
        assert!(errors.is_empty(), "{errors:?}");
        for (p, m) in ports.iter_mut().zip(more) {
            p.extend(m);
        }
    }
    for conn in conns {
        conn.disconnect().await.unwrap();
    }
    let (status, text) = proxy.admin_post("/capture/stop", &[]);
    assert_eq!(status, 200, "{text}");

    let captured = captured_backends(&dir);
    // Six logins round robin over two backends: three start on the first.
    assert_eq!(captured.len(), 3, "{captured:?}");
    let ran: Vec<Vec<String>> = ports
        .iter()
        .map(|p| p.iter().map(|port| format!("127.0.0.1:{port}")).collect())
        .collect();
    for (id, (start, backends, _)) in &captured {
        assert_eq!(start, &first, "session {id} started where the filter says");
        assert!(
            ran.contains(backends),
            "session {id}'s captured backends {backends:?} are one client's: {ran:?}"
        );
    }
    assert!(
        captured
            .values()
            .any(|(_, b, moves)| *moves > 0 && b.iter().collect::<BTreeSet<_>>().len() == 2),
        "a captured session moved and ran on both backends: {captured:?}"
    );

    // The replay's loader reads the moves.
    let loaded = mysql_lb::tools::replay::load::load(&dir).expect("load the capture");
    let moves: usize = loaded.sessions.iter().map(|s| s.moves.len()).sum();
    assert_eq!(moves, captured.values().map(|c| c.2).sum::<usize>());
    for s in &loaded.sessions {
        let backends: Vec<&str> = s
            .steps
            .iter()
            .filter(|st| st.payload == b"\x03SELECT @@port")
            .map(|st| s.backend_of(st))
            .collect();
        assert_eq!(
            backends, captured[&s.id].1,
            "the loader places each command where the capture does"
        );
    }
}

/// The client matrix's `kill_query` case through a pool across backends, without a `kill:`
/// account: a session reads `SELECT CONNECTION_ID()` (the server's own id, which pins it to its
/// connection), runs a long query, and another session of its user sends `KILL QUERY` of that
/// id. The killer's statements land on any backend, where the id names nothing or a stranger;
/// the proxy knows which of its pooled sessions holds that thread, and the KILL runs on the
/// killer's own connection there (the server deciding with the killer's privileges). The same
/// for the proxy id the victim was greeted with. Victims sit on more than one backend, so at
/// least one KILL had to leave the backend the killer's last statement ran on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_query_of_a_connection_id_reaches_its_backend_without_a_kill_account() {
    use common::rawclient::RawClient;
    let dbs = tokio::task::block_in_place(|| {
        let dbs = start_dedicated(&["across-cid-a", "across-cid-b", "across-cid-c"]);
        for db in &dbs {
            common::create_kill_accounts(db);
        }
        dbs
    });
    // Servers that have run a while number their connections apart; fresh ones alike, which
    // would make each victim's id name connections on several backends (that case is answered
    // with an ERR naming them: `kill::tests`).
    for (k, db) in dbs.iter().enumerate() {
        for _ in 0..k * 25 {
            let conn = mysql_async::Conn::new(db.opts(BENCH_USER, BENCH_PASS))
                .await
                .expect("a direct connection");
            conn.disconnect().await.expect("disconnect");
        }
    }
    let proxy = across(&dbs);
    let addr = proxy.addr_string();
    // `app` may kill its own user's threads only.
    let login = || RawClient::connect_tcp(&addr, "app", "app", None, 0, 0);
    // Logins spread over the backends: the user's key has connections on each.
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(login().await.expect("login"));
    }
    let mut victims = Vec::new();
    for _ in 0..3 {
        let mut v = login().await.expect("victim logs in");
        let rows = v.query_text("SELECT CONNECTION_ID()").await.expect("id");
        let id: u32 = rows[0][0].as_deref().unwrap().parse().unwrap();
        victims.push((v, id));
    }
    let mut killer = login().await.expect("killer logs in");
    let mut ports = BTreeSet::new();
    for round in 0..6 {
        let (victim, server_id) = &mut victims[round % 3];
        let by_server_id = round < 3;
        let id = if by_server_id {
            *server_id
        } else {
            victim.connection_id
        };
        let marker = format!("across-cid-{round}");
        victim
            .send_command(0x03, format!("SELECT SLEEP(30), '{marker}'").as_bytes())
            .await
            .expect("send the victim's query");
        let port = running_on(&dbs, &marker);
        ports.insert(port);
        // The killer's own statements move on between rounds.
        killer
            .query_text("SELECT 1")
            .await
            .expect("the killer runs");
        let what = format!("round {round} (server id: {by_server_id}) on {port}");
        kill_interrupts(&mut killer, victim, id, &mut others, round, &what).await;
    }
    assert!(
        ports.len() > 1,
        "the victims sat on one backend only: {ports:?}"
    );
    // Another user's KILL of the same id is the server's to refuse: it reaches the victim's
    // backend as that user's, and the server answers 1095.
    let (victim, server_id) = &mut victims[0];
    victim
        .send_command(0x03, b"SELECT SLEEP(2)")
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut stranger = RawClient::connect_tcp(&addr, "eve", "eve", None, 0, 0)
        .await
        .expect("another user logs in");
    let refused = stranger
        .query_results(&format!("KILL QUERY {server_id}"))
        .await
        .expect_err("another user's KILL is refused");
    assert!(refused.starts_with("1095"), "{refused}");
    let slept = victim
        .read_results()
        .await
        .expect("the victim's query ran to its end");
    assert_eq!(slept[0][0][0].as_deref(), Some("0"), "{slept:?}");
}

/// The port of the server of `dbs` whose processlist shows a statement holding `marker`
/// (waits up to 10 s).
fn running_on(dbs: &[MariaDb], marker: &str) -> u16 {
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(db) = dbs.iter().find(|db| {
                db.root_query("SELECT INFO FROM information_schema.PROCESSLIST")
                    .contains(marker)
            }) {
                break db.port;
            }
            assert!(Instant::now() < deadline, "{marker} never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// `killer` sends `KILL QUERY id`, and the statement `victim` runs is interrupted (1317)
/// within 5 s; the victim runs on (its connection is kept for the error's next command), then
/// `round % 3 + 1` other sessions run a statement each, so that the round robin puts the next
/// round elsewhere.
async fn kill_interrupts(
    killer: &mut common::rawclient::RawClient,
    victim: &mut common::rawclient::RawClient,
    id: u32,
    others: &mut [common::rawclient::RawClient],
    round: usize,
    what: &str,
) {
    let started = Instant::now();
    killer
        .query_results(&format!("KILL QUERY {id}"))
        .await
        .unwrap_or_else(|e| panic!("{what}: KILL QUERY {id} answered {e}"));
    let err = victim
        .read_results()
        .await
        .expect_err("the victim's query was interrupted");
    assert!(err.starts_with("1317"), "{what}: {err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{what}");
    victim
        .query_text("SELECT 1")
        .await
        .expect("the victim runs on");
    for o in others.iter_mut().take(round % 3 + 1) {
        o.query_text("SELECT 1")
            .await
            .expect("another session runs");
    }
}
