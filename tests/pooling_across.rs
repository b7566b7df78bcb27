//! A transaction-mode pool shared across its backends (`pooling.across_backends: true`), against
//! three real MariaDB servers: long-lived sessions spread their transactions over every backend
//! (each reached more than one), a drained backend's sessions move at their next transaction with
//! no error and the drained backend ends with no session and no connection, and a backend
//! SIGKILLed while sessions are between transactions costs no client an error.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::pooling::{counts, transaction_mode};
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;

/// Starts dedicated servers in parallel (these tests drain and kill them).
fn start_dedicated(names: &[&str]) -> Vec<MariaDb> {
    std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|n| s.spawn(move || MariaDb::start(n)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// A proxy whose default pool shares server connections across `dbs`, round robin.
fn across(dbs: &[MariaDb]) -> TestProxy {
    let backends: Vec<String> = dbs.iter().map(MariaDb::tcp_addr).collect();
    let mut c = config(&backends);
    transaction_mode(&mut c, 50, Duration::from_secs(60), Duration::from_secs(5));
    c.pools[0].pooling.across_backends = true;
    TestProxy::start_with(c)
}

fn entry(proxy: &TestProxy, name: &str) -> serde_json::Value {
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["backends"]
        .as_array()
        .and_then(|l| l.iter().find(|b| b["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no {name} in {body}"))
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
    for (port, n) in &per_backend {
        assert!(
            *n >= 330 / 6,
            "backend {port} ran {n} of 330: {per_backend:?}"
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
    let (_, metrics) = proxy.admin_get("/metrics");
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
        let e = entry(&proxy, &drained);
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
            entry(&proxy, &d.tcp_addr())["active_connections"]
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
}
