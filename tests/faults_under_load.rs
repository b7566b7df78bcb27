//! Faults under load (three real MariaDB backends): a backend killed with SIGKILL mid-run costs
//! only the sessions on it, new clients keep getting in, and it rejoins after a restart.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mariadb::MariaDb;
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;

struct Worker {
    port: u16,
    ok: u64,
    errors: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_backend_under_load_fails_only_its_sessions() {
    let mut dbs: Vec<MariaDb> = (0..3)
        .map(|i| MariaDb::start(&format!("load{i}")))
        .collect();
    let mut cfg = config(&dbs.iter().map(MariaDb::tcp_addr).collect::<Vec<_>>());
    cfg.health_check.interval = Duration::from_millis(300);
    cfg.health_check.rise = 2;
    let proxy = TestProxy::start_with(cfg);
    let stop = Arc::new(AtomicBool::new(false));

    let mut workers = Vec::new();
    for _ in 0..12 {
        let opts = proxy.opts("bench", "bench");
        let stop = Arc::clone(&stop);
        workers.push(tokio::spawn(async move {
            let mut conn = mysql_async::Conn::new(opts).await.expect("worker connects");
            let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
            let mut w = Worker {
                port,
                ok: 0,
                errors: 0,
            };
            // Bounded: at most 100k queries, and the test stops the loop after a few seconds.
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match conn.query_first::<u16, _>("SELECT @@port").await {
                    Ok(Some(p)) if p == port => w.ok += 1,
                    _ => {
                        w.errors += 1;
                        break;
                    }
                }
            }
            w
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let victim = dbs[1].port;
    dbs[1].kill9();
    let killed_at = Instant::now();

    // New clients: every connect succeeds (on the live backends), from the first one on.
    let mut first_ok = None;
    for _ in 0..20 {
        let mut conn = mysql_async::Conn::new(proxy.opts("bench", "bench"))
            .await
            .expect("a new client gets in while a backend is dead");
        let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
        assert_ne!(port, victim, "no new client goes to the dead backend");
        first_ok.get_or_insert(killed_at.elapsed());
        conn.disconnect().await.unwrap();
    }
    let first_ok = first_ok.unwrap();
    assert!(
        first_ok < Duration::from_secs(1),
        "new clients get in within 1 s: {first_ok:?}"
    );

    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut per_port: HashMap<u16, (u64, u64)> = HashMap::new();
    for w in workers {
        let w = w.await.unwrap();
        let e = per_port.entry(w.port).or_default();
        e.0 += w.ok;
        e.1 += w.errors;
    }
    println!("per backend (ok, errors): {per_port:?}");
    for (port, (ok, errors)) in &per_port {
        assert!(*ok > 0, "backend {port} served queries");
        if *port == victim {
            assert!(*errors > 0, "sessions on the killed backend fail");
        } else {
            assert_eq!(*errors, 0, "sessions on live backend {port} are untouched");
        }
    }
    assert!(
        per_port.contains_key(&victim),
        "round robin put sessions on the victim"
    );

    // Restart: the backend rejoins once its health checks pass.
    dbs[1].restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut conn = mysql_async::Conn::new(proxy.opts("bench", "bench"))
            .await
            .unwrap();
        let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
        conn.disconnect().await.unwrap();
        if port == victim {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted backend never rejoined"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
