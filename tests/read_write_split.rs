//! One address for a MariaDB GTID replication cluster (`pooling.read_write_split`): a primary
//! and two `read_only` replicas started by the harness (`common::replication`), their roles
//! followed from `@@read_only` (`role: auto`), and sessions of a user without `READ ONLY
//! ADMIN` (`app`) and of one with it (`bench`, `ALL`): writes run on the primary, pure reads
//! on the replicas, no client sees an error, and no write ever lands on a replica (no GTID of a
//! replica's own server id in any binary log, which a privileged user's write there would
//! leave, as it did before the split: the cluster forked).

mod common;

use std::time::{Duration, Instant};

use common::mariadb::{BENCH_PASS, BENCH_USER};
use common::pooling::transaction_mode;
use common::proxy::{config, TestProxy};
use common::replication::{com_select, own_gtids, Cluster, APP_PASS, APP_USER};
use mysql_async::prelude::*;
use mysql_lb::backends::balancer::roles::Primary;
use mysql_lb::config::{CausalReads, HealthCheckConfig, Role, Secret};

/// A proxy over `cluster` whose default pool splits reads from writes, its backends' roles
/// followed from the servers (checked every 100 ms); causal reads `session`, waiting at most
/// 100 ms.
fn split_proxy(cluster: &Cluster) -> TestProxy {
    TestProxy::start_with(split_config(cluster))
}

fn split_config(cluster: &Cluster) -> mysql_lb::config::Config {
    let mut c = config(&cluster.addrs());
    for b in &mut c.backends {
        b.role = Some(Role::Auto);
    }
    c.health_check = HealthCheckConfig {
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(1),
        fall: 2,
        rise: 1,
        user: Some(BENCH_USER.to_owned()),
        password: Some(Secret::new(BENCH_PASS)),
        ..HealthCheckConfig::default()
    };
    transaction_mode(&mut c, 50, Duration::from_secs(60), Duration::from_secs(5));
    c.pools[0].pooling.across_backends = true;
    c.pools[0].pooling.read_write_split = true;
    c.pools[0].pooling.causal_timeout = Duration::from_millis(100);
    c
}

/// Waits until the proxy's default pool has the cluster's primary as its one primary.
async fn wait_roles(proxy: &TestProxy, cluster: &Cluster) {
    let want = cluster.primary().tcp_addr();
    let started = Instant::now();
    loop {
        let set = proxy.state.backends();
        let pool = set.pool("default").expect("the default pool");
        let replicas_known = pool
            .members()
            .iter()
            .filter(|b| b.name != want)
            .all(|b| b.role.serves_reads());
        if matches!(pool.primary(), Primary::One(p) if p.name == want) && replicas_known {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "roles not followed within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn login(proxy: &TestProxy, user: &str, pass: &str) -> mysql_async::Conn {
    let opts = mysql_async::OptsBuilder::from_opts(proxy.opts(user, pass)).db_name(Some("app"));
    mysql_async::Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("{user} logs in through the proxy: {e}"))
}

/// Every replica's binary log holds no GTID of its own server id: no write ran there.
fn no_write_on_a_replica(cluster: &Cluster) {
    for r in cluster.replicas() {
        let own = own_gtids(r);
        assert!(own.is_empty(), "{} took writes: {own:?}", r.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_run_on_the_primary_reads_on_the_replicas_and_no_write_reaches_a_replica() {
    let cluster = Cluster::start("rws-basic", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.kv (id INT PRIMARY KEY, v INT, who VARCHAR(16)) ENGINE=InnoDB",
        )
        .await;
    cluster.wait_caught_up().await;
    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;

    // Six sessions of each user: logins spread over the three servers, some on a replica.
    let mut sessions = Vec::new();
    for i in 0..12 {
        let (user, pass) = if i % 2 == 0 {
            (APP_USER, APP_PASS)
        } else {
            (BENCH_USER, BENCH_PASS)
        };
        sessions.push((user, login(&proxy, user, pass).await));
    }
    let before: Vec<u64> = cluster.servers().iter().map(com_select).collect();
    let mut errors = Vec::new();
    for round in 0..20 {
        for (i, (user, conn)) in sessions.iter_mut().enumerate() {
            let id = i as i32 * 1000 + round;
            let steps = [
                format!("INSERT INTO kv VALUES ({id}, {round}, '{user}')"),
                format!("UPDATE kv SET v = v + 1 WHERE id = {id}"),
                "SELECT COUNT(*) FROM kv".to_owned(),
                format!("SELECT v FROM kv WHERE id = {}", id - 1),
                "BEGIN".to_owned(),
                format!("SELECT v FROM kv WHERE id = {id} FOR UPDATE"),
                format!("UPDATE kv SET v = v + 1 WHERE id = {id}"),
                "COMMIT".to_owned(),
            ];
            for sql in &steps {
                if let Err(e) = conn.query_drop(sql).await {
                    errors.push(format!("{user} session {i}: {sql}: {e}"));
                }
            }
        }
    }
    assert!(errors.is_empty(), "{} errors: {errors:#?}", errors.len());
    // A read-only transaction runs on a replica whole; a write in it is refused, and not on
    // the replica.
    let (_, conn) = &mut sessions[1];
    conn.query_drop("START TRANSACTION READ ONLY")
        .await
        .unwrap();
    let n: Option<u64> = conn.query_first("SELECT COUNT(*) FROM kv").await.unwrap();
    assert!(n.is_some());
    let refused = conn
        .query_drop("INSERT INTO kv VALUES (999999, 0, 'ro')")
        .await
        .expect_err("a write in a read-only transaction");
    assert!(
        matches!(&refused, mysql_async::Error::Server(e) if e.code == 1792),
        "{refused}"
    );
    conn.query_drop("COMMIT").await.unwrap();

    let after: Vec<u64> = cluster.servers().iter().map(com_select).collect();
    let selects: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("Com_select per server (primary first): {selects:?}");
    // 12 sessions x 20 rounds x 2 autocommit reads: the first right after an UPDATE runs on
    // the primary (the session keeps its connection for the command after changed rows, which
    // may read `ROW_COUNT()`), the second (240) may run on a replica; the `FOR UPDATE` (240)
    // runs on the primary. The health checks add about 10 a second to every server alike.
    let on_replicas: u64 = selects[1..].iter().sum();
    assert!(on_replicas >= 200, "reads on the replicas: {selects:?}");
    assert!(selects[1..].iter().all(|&n| n > 50), "{selects:?}");
    for (_, conn) in sessions {
        conn.disconnect().await.unwrap();
    }
    cluster.wait_caught_up().await;
    no_write_on_a_replica(&cluster);
    // Every write ran, once, on the primary: 12 x 20 rows, each updated twice.
    let rows = cluster
        .primary()
        .root_query("SELECT COUNT(*), SUM(v) FROM app.kv");
    let want_sum: i32 = (0..20).map(|r| (r + 2) * 12).sum();
    assert_eq!(rows.trim(), format!("240\t{want_sum}"));
    assert!(!own_gtids(cluster.primary()).is_empty());
}

/// Sessions each write a value in a transaction, then read it back in autocommit, `pairs`
/// times; returns how many reads returned an older value than the session had just written.
async fn stale_reads(proxy: &TestProxy, sessions: usize, pairs: usize) -> usize {
    let mut conns = Vec::new();
    for _ in 0..sessions {
        conns.push(login(proxy, APP_USER, APP_PASS).await);
    }
    let mut stale = 0;
    for n in 1..=pairs {
        for (id, conn) in conns.iter_mut().enumerate() {
            conn.query_drop("BEGIN").await.unwrap();
            conn.query_drop(format!("UPDATE kv SET v = {n} WHERE id = {id}"))
                .await
                .unwrap();
            conn.query_drop("COMMIT").await.unwrap();
            let v: Option<usize> = conn
                .query_first(format!("SELECT v FROM kv WHERE id = {id}"))
                .await
                .unwrap();
            if v != Some(n) {
                stale += 1;
            }
        }
    }
    for conn in conns {
        conn.disconnect().await.unwrap();
    }
    stale
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reads_its_own_writes_on_lagging_replicas_and_without_causal_reads_it_would_not()
{
    let cluster = Cluster::start("rws-causal", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.kv (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; \
             INSERT INTO app.kv VALUES (0, 0), (1, 0), (2, 0), (3, 0)",
        )
        .await;
    cluster.wait_caught_up().await;
    // Server 1 applies every event a second late; server 2 as fast as it can.
    cluster.delay_replica(1, 1).await;
    let (sessions, pairs) = (4, 25);

    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;
    let started = Instant::now();
    let before: Vec<u64> = cluster.servers().iter().map(com_select).collect();
    let stale = stale_reads(&proxy, sessions, pairs).await;
    let took = started.elapsed();
    let after: Vec<u64> = cluster.servers().iter().map(com_select).collect();
    eprintln!(
        "Com_select per server (primary, delayed, prompt): {:?}",
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>()
    );
    let series = |s: &str| proxy.series(s).unwrap_or(0.0);
    let covered = series("mysql_lb_causal_reads_total{outcome=\"covered\",pool=\"default\"}");
    let waited = series("mysql_lb_causal_reads_total{outcome=\"waited\",pool=\"default\"}");
    let timed_out = series("mysql_lb_causal_reads_total{outcome=\"timed_out\",pool=\"default\"}");
    eprintln!(
        "causal reads: {stale} stale of {} in {took:?}; covered {covered}, waited {waited}, \
         timed out {timed_out}",
        sessions * pairs
    );
    assert_eq!(
        stale, 0,
        "a read returned a value older than its session's write"
    );
    // `/backends` says each backend's role and the GTID position it is known to have applied.
    let primary = proxy.backend_entry(&cluster.primary().tcp_addr());
    assert_eq!(primary["role"], "primary", "{primary}");
    assert_eq!(primary["takes_writes"], true, "{primary}");
    let applied = primary["gtid_applied"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(applied.starts_with("0-1-"), "{primary}");
    let replica = proxy.backend_entry(&cluster.server(2).tcp_addr());
    assert_eq!(replica["role"], "replica", "{replica}");
    assert_eq!(replica["read_only"], true, "{replica}");
    assert!(
        covered + waited + timed_out >= 10.0,
        "reads went to replicas and were held to the session's writes"
    );
    drop(proxy);

    // The control, both replicas a second late: without causal reads, reads that run on a
    // replica return the rows as they were before the session's write.
    cluster.delay_replica(2, 1).await;
    let mut c = split_config(&cluster);
    c.pools[0].pooling.causal_reads = CausalReads::None;
    let proxy = TestProxy::start_with(c);
    wait_roles(&proxy, &cluster).await;
    let stale = stale_reads(&proxy, sessions, pairs).await;
    eprintln!(
        "without causal reads: {stale} stale of {}",
        sessions * pairs
    );
    assert!(
        stale > 0,
        "the control saw no stale read: the test proves nothing"
    );
    drop(proxy);
    cluster.delay_replica(1, 0).await;
    cluster.delay_replica(2, 0).await;
    cluster.wait_caught_up().await;
    no_write_on_a_replica(&cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_split_a_privileged_write_on_a_replica_is_refused_naming_it() {
    let cluster = Cluster::start("rws-guard", 2).await;
    cluster
        .exec(0, "CREATE TABLE app.g (id INT PRIMARY KEY) ENGINE=InnoDB")
        .await;
    cluster.wait_caught_up().await;
    // Session mode: each client on the backend its login went to, round robin.
    let mut c = split_config(&cluster);
    c.pools = Vec::new();
    let proxy = TestProxy::start_with(c);
    wait_roles(&proxy, &cluster).await;
    let primary = cluster.primary().tcp_addr();
    let (mut on_primary, mut on_replica) = (0, 0);
    for i in 0..6 {
        let mut conn = login(&proxy, BENCH_USER, BENCH_PASS).await;
        let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
        let mine = port == cluster.primary().port;
        let written = conn.query_drop(format!("INSERT INTO g VALUES ({i})")).await;
        let big = format!(
            "INSERT INTO g VALUES ({}) /* {} */",
            100 + i,
            "x".repeat(70_000)
        );
        let big_written = conn.query_drop(&big).await;
        let reads: Option<u64> = conn
            .query_first("SELECT COUNT(*) FROM g")
            .await
            .ok()
            .flatten();
        if mine {
            on_primary += 1;
            written.expect("a write on the primary runs");
            big_written.expect("a long write on the primary runs");
        } else {
            on_replica += 1;
            match written {
                Err(mysql_async::Error::Server(e)) => {
                    assert_eq!(e.code, 1290, "{e:?}");
                    assert!(
                        e.message.contains("replica") && e.message.contains(&primary),
                        "the error names the replica's primary: {}",
                        e.message
                    );
                }
                other => panic!("a write on a replica: {other:?}"),
            }
            // A statement too long to read whole before forwarding ends the session with an
            // ERR rather than reach the replica.
            assert!(big_written.is_err(), "a long write on a replica");
            continue;
        }
        assert!(reads.is_some(), "reads run where the session is");
        conn.disconnect().await.unwrap();
    }
    assert!(
        on_primary > 0 && on_replica > 0,
        "{on_primary} / {on_replica}"
    );
    cluster.wait_caught_up().await;
    no_write_on_a_replica(&cluster);
}

/// Runs sysbench `test` (`prepare`, `run`...) as `app` against 127.0.0.1:`port`, schema `app`.
fn sysbench(port: u16, test: &str, extra: &[&str], action: &str) -> String {
    let out = std::process::Command::new(common::sysbench::binary())
        .arg(test)
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            &format!("--mysql-port={port}"),
            &format!("--mysql-user={APP_USER}"),
            &format!("--mysql-password={APP_PASS}"),
            "--mysql-db=app",
            "--tables=2",
            "--table-size=2000",
        ])
        .args(extra)
        .arg(action)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run sysbench: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sysbench {test} {action} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sysbench_read_write_through_the_split_has_no_error_and_reads_on_the_replicas() {
    let cluster = Cluster::start("rws-sysbench", 2).await;
    let primary_port = cluster.primary().port;
    tokio::task::block_in_place(|| {
        sysbench(primary_port, "oltp_read_write", &[], "prepare");
    });
    cluster.wait_caught_up().await;
    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;
    let before: Vec<u64> = cluster.servers().iter().map(com_select).collect();
    let port = proxy.addr.port();
    // Autocommit statements (`--skip_trx`): its reads may run on a replica; then the default,
    // BEGIN .. COMMIT transactions, which run on the primary whole. Prepared statements (the
    // default) and text queries. Without a transaction, sysbench's DELETE and INSERT of one
    // random id race between its threads (ERR 1062, directly as through the proxy): those
    // runs update rows only (`--delete_inserts=0`).
    let mut reports = Vec::new();
    for extra in [
        &[
            "--skip_trx=on",
            "--delete_inserts=0",
            "--threads=4",
            "--events=400",
            "--time=0",
        ][..],
        &["--threads=4", "--events=200", "--time=0"][..],
        &[
            "--skip_trx=on",
            "--delete_inserts=0",
            "--db-ps-mode=disable",
            "--threads=4",
            "--events=400",
            "--time=0",
        ][..],
    ] {
        let report =
            tokio::task::block_in_place(|| sysbench(port, "oltp_read_write", extra, "run"));
        let errors = common::sysbench::field(&report, "ignored errors:");
        let queries = common::sysbench::field(&report, "total:");
        eprintln!("sysbench oltp_read_write {extra:?}: {queries} queries, {errors} errors");
        // sysbench stops at any error but the deadlocks and lock waits it retries ("ignored":
        // 1213, 1020, 1205), which concurrent BEGIN .. COMMIT transactions of its own meet
        // directly too: a few of those, nothing else.
        assert!(errors <= queries / 200.0, "{extra:?}:\n{report}");
        reports.push(report);
    }
    let after: Vec<u64> = cluster.servers().iter().map(com_select).collect();
    let selects: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("Com_select per server (primary first): {selects:?}");
    // The servers' counts include the proxy's own statements (`@@last_gtid` after a write on
    // the primary, `MASTER_GTID_WAIT` on a replica) and the health checks: the proxy's count of
    // transactions by role says where the clients' statements ran. The two `--skip_trx` runs
    // sent 2 x 400 x 14 SELECTs, each its own transaction; the one right after an UPDATE runs
    // on the primary (the session keeps its connection for the command after changed rows).
    let on = |role: &str| {
        proxy
            .series(&format!(
                "mysql_lb_split_transactions_total{{pool=\"default\",role=\"{role}\"}}"
            ))
            .unwrap_or(0.0)
    };
    let (replica, primary) = (on("replica"), on("primary"));
    let no_replica = proxy
        .series("mysql_lb_split_reads_on_primary_total{pool=\"default\",reason=\"no_replica\"}")
        .unwrap_or(0.0);
    eprintln!(
        "transactions on a replica: {replica}, on the primary: {primary} (reads there for want of a replica connection: {no_replica})"
    );
    assert!(
        replica >= 0.5 * (2.0 * 400.0 * 14.0),
        "most autocommit SELECTs on the replicas: {replica} (primary {primary})"
    );
    assert!(selects[1] > 0 && selects[2] > 0, "{selects:?}");
    cluster.wait_caught_up().await;
    no_write_on_a_replica(&cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_under_writes_moves_them_to_the_new_primary() {
    let mut cluster = Cluster::start("rws-switch", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.sw (id INT AUTO_INCREMENT PRIMARY KEY, who INT) ENGINE=InnoDB",
        )
        .await;
    cluster.wait_caught_up().await;
    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for who in 0..4 {
        let mut conn = login(&proxy, APP_USER, APP_PASS).await;
        let stop = std::sync::Arc::clone(&stop);
        writers.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u32, Vec::new());
            let started = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(30)
            {
                match conn
                    .query_drop(format!("INSERT INTO sw (who) VALUES ({who})"))
                    .await
                {
                    Ok(()) => ok += 1,
                    Err(mysql_async::Error::Server(e)) => {
                        eprintln!("writer {who}: {} {}", e.code, e.message);
                        errors.push(e.code)
                    }
                    Err(e) => panic!("writer {who}: {e}"),
                }
                let _: Option<u64> = conn.query_first("SELECT COUNT(*) FROM sw").await.unwrap();
            }
            (ok, errors)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Switchovers back and forth until one of them caught a write in the moment between the
    // old primary going read-only and the next health check (the window is random in the
    // check interval, so one switchover alone might miss it): that write is refused by the
    // server, withheld from the client and run again on the new primary.
    let mut timings = Vec::new();
    let mut replayed = 0;
    for (round, to) in [1, 0, 1, 0, 1].into_iter().enumerate() {
        let started = Instant::now();
        cluster.switchover(to).await;
        let switched = started.elapsed();
        wait_roles(&proxy, &cluster).await;
        let followed = started.elapsed();
        assert!(
            followed < Duration::from_secs(2),
            "round {round}: {followed:?}"
        );
        timings.push((switched, followed));
        tokio::time::sleep(Duration::from_millis(300)).await;
        replayed = refused_writes(&proxy, "replayed");
        if replayed > 0 && round >= 1 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut errors) = (0, Vec::new());
    for w in writers {
        let (o, e) = w.await.unwrap();
        ok += o;
        errors.extend(e);
    }
    let forwarded = refused_writes(&proxy, "forwarded");
    eprintln!(
        "switchovers (took, followed after) {timings:?}: {ok} writes, errors {errors:?}, \
         refused writes run again {replayed}, refusals forwarded {forwarded}"
    );
    // A write the old primary refused (1290) before the proxy saw it read-only ran again on
    // the new primary: no client saw an error.
    assert!(errors.is_empty(), "{errors:?}");
    assert!(replayed > 0, "no switchover caught a write in its window");
    assert_eq!(forwarded, 0);
    let primary = cluster.primary_index();
    let after: u64 = cluster
        .server(primary)
        .root_query("SELECT COUNT(*) FROM app.sw")
        .trim()
        .parse()
        .unwrap();
    assert!(
        after as u32 == ok,
        "every acknowledged write is on the primary, once: {after} / {ok}"
    );
    cluster.wait_caught_up().await;
    assert!(
        own_gtids(cluster.server(2)).is_empty(),
        "no write on the replica"
    );
    assert!(
        !own_gtids(cluster.server(1)).is_empty(),
        "writes on the new primary"
    );
}

/// `mysql_lb_split_refused_writes_total{outcome}` of the default pool.
fn refused_writes(proxy: &TestProxy, outcome: &str) -> u64 {
    let (_, metrics) = proxy.admin_get("/metrics");
    metrics
        .lines()
        .filter(|l| l.starts_with("mysql_lb_split_refused_writes_total{"))
        .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The primary is SIGKILLed under reads and writes, and the harness promotes a replica (as a
/// failover tool would): reads on the replicas go on with no error, a write in flight may get
/// the lost connection (it may have committed), later writes wait for the promotion and run on
/// the new primary, and every write acknowledged after the promotion is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_primary_costs_reads_nothing_and_writes_wait_for_the_promotion() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut cluster = Cluster::start("rws-lost", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.lp (id INT AUTO_INCREMENT PRIMARY KEY, who INT) ENGINE=InnoDB",
        )
        .await;
    cluster.wait_caught_up().await;
    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for who in 0..4 {
        let mut conn = login(&proxy, APP_USER, APP_PASS).await;
        let stop = Arc::clone(&stop);
        readers.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u32, Vec::new());
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(40) {
                match conn.query_first::<u64, _>("SELECT COUNT(*) FROM lp").await {
                    Ok(_) => ok += 1,
                    Err(e) => errors.push(format!("reader {who}: {e}")),
                }
            }
            (ok, errors)
        }));
    }
    let proxy_opts = proxy.opts(APP_USER, APP_PASS);
    let mut writers = Vec::new();
    for who in 0..2 {
        let mut conn = login(&proxy, APP_USER, APP_PASS).await;
        let stop = Arc::clone(&stop);
        let opts = mysql_async::OptsBuilder::from_opts(proxy_opts.clone()).db_name(Some("app"));
        writers.push(tokio::spawn(async move {
            // (acknowledged at, id), and what failed.
            let (mut acked, mut failed) = (Vec::new(), Vec::new());
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(40) {
                let write = conn.exec_drop("INSERT INTO lp (who) VALUES (?)", (who,));
                match tokio::time::timeout(Duration::from_secs(15), write).await {
                    Ok(Ok(())) => acked.push((Instant::now(), conn.last_insert_id().unwrap())),
                    Ok(Err(e)) => {
                        failed.push((Instant::now(), e.to_string()));
                        if !matches!(e, mysql_async::Error::Server(_)) {
                            // The connection is gone: log in again.
                            conn = loop {
                                match mysql_async::Conn::new(opts.clone()).await {
                                    Ok(c) => break c,
                                    Err(e) => {
                                        failed.push((Instant::now(), format!("login: {e}")));
                                        tokio::time::sleep(Duration::from_millis(50)).await;
                                    }
                                }
                            };
                        }
                    }
                    Err(_) => panic!("writer {who}: a write hung for 15 s"),
                }
            }
            (acked, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    // Server 1, unless server 2 received more of the old primary's log.
    let new_primary = cluster.kill_primary_and_promote(1).await;
    let promoted = Instant::now();
    // The proxy follows: the new primary is the pool's one primary.
    let want = cluster.primary().tcp_addr();
    loop {
        let set = proxy.state.backends();
        let pool = set.pool("default").unwrap();
        if matches!(pool.primary(), Primary::One(p) if p.name == want) {
            break;
        }
        assert!(
            promoted.elapsed() < Duration::from_secs(5),
            "promotion ({:?} after the kill) not followed: {}",
            promoted - killed,
            proxy.admin_get("/backends").1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let followed = promoted.elapsed();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut reads, mut read_errors) = (0, Vec::new());
    for r in readers {
        let (ok, errors) = r.await.unwrap();
        reads += ok;
        read_errors.extend(errors);
    }
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for w in writers {
        let (a, f) = w.await.unwrap();
        acked.extend(a);
        failed.extend(f);
    }
    let after_promotion: Vec<u64> = acked
        .iter()
        .filter(|(at, _)| *at > promoted)
        .map(|(_, id)| *id)
        .collect();
    let failures: Vec<(Duration, &str)> = failed
        .iter()
        .map(|(at, e)| (at.saturating_duration_since(killed), e.as_str()))
        .collect();
    eprintln!(
        "kill and promotion took {:?}, followed {followed:?} later: {reads} reads, read errors \
         {read_errors:?}; {} writes acknowledged ({} after the promotion), failures (since the \
         kill) {failures:?}",
        promoted - killed,
        acked.len(),
        after_promotion.len()
    );
    assert!(read_errors.is_empty(), "{read_errors:?}");
    assert!(reads > 100, "reads went on: {reads}");
    assert!(
        after_promotion.len() > 10,
        "writes ran on the new primary: {}",
        after_promotion.len()
    );
    // Only writes in flight at the kill, or sent before the proxy saw the primary gone, fail;
    // none once the new primary is followed.
    let followed_at = promoted + followed;
    for (at, e) in &failed {
        assert!(
            *at < followed_at,
            "a write failed after the promotion was followed: {e}"
        );
    }
    assert!(failed.len() <= 8, "{failures:?}");
    // Every write acknowledged after the promotion is on the new primary.
    let ids: std::collections::BTreeSet<u64> = cluster
        .server(new_primary)
        .root_query("SELECT id FROM app.lp")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for id in &after_promotion {
        assert!(
            ids.contains(id),
            "acknowledged write {id} is not on the new primary"
        );
    }
}

/// A key's sessions that only read, on the replicas, for longer than `idle_timeout` keep their
/// user's connection on the primary (only a login makes one): their next write runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_only_read_for_an_idle_timeout_keep_their_primary_connection() {
    let cluster = Cluster::start("rws-keep", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.kp (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
        )
        .await;
    cluster.wait_caught_up().await;
    let mut c = split_config(&cluster);
    transaction_mode(&mut c, 50, Duration::from_secs(1), Duration::from_secs(5));
    c.pools[0].pooling.across_backends = true;
    c.pools[0].pooling.read_write_split = true;
    let proxy = TestProxy::start_with(c);
    wait_roles(&proxy, &cluster).await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(login(&proxy, APP_USER, APP_PASS).await);
    }
    let primary = cluster.primary().tcp_addr();
    let open_on_primary = || {
        let (_, body) = proxy.admin_get("/backends");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == primary.as_str())
            .map(|b| b["server_pool"]["open"].as_u64().unwrap_or(0))
            .unwrap_or(0)
    };
    assert!(open_on_primary() > 0, "a login made one on the primary");
    // Three idle timeouts of reads only: every transaction runs on a replica.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        for s in &mut sessions {
            let _: Option<u64> = s.query_first("SELECT COUNT(*) FROM kp").await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        open_on_primary() >= 1,
        "the user's last connection on the primary was closed"
    );
    for (i, s) in sessions.iter_mut().enumerate() {
        s.query_drop(format!("INSERT INTO kp VALUES ({i}, {i})"))
            .await
            .unwrap_or_else(|e| panic!("session {i}'s write after reads only: {e}"));
        // A write's session keeps its connection for one more command (`ROW_COUNT()`,
        // `LAST_INSERT_ID()` read right after it): this one lets it go for the next session.
        s.query_drop("DO 0").await.unwrap();
    }
    let rows = cluster.primary().root_query("SELECT COUNT(*) FROM app.kp");
    assert_eq!(rows.trim(), "3");
}

/// No replica in rotation: reads run on the primary (`no_replica`), or, with
/// `pooling.reads_without_replica: error`, get an ERR naming each replica and why it is out
/// (here: past `health_check.max_replication_lag`, the replicas applying events 4 s late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_replica_in_rotation_reads_run_on_the_primary_or_are_refused() {
    let cluster = Cluster::start("rws-norep", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.nr (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=InnoDB",
        )
        .await;
    cluster.wait_caught_up().await;
    // By default: drained replicas leave the reads to the primary, counted.
    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;
    let mut s = login(&proxy, APP_USER, APP_PASS).await;
    for r in cluster.replicas() {
        let (status, body) = proxy.admin_post(&format!("/backends/{}/drain", r.tcp_addr()), &[]);
        assert_eq!(status, 200, "{body}");
    }
    for _ in 0..5 {
        let _: Option<u64> = s.query_first("SELECT COUNT(*) FROM nr").await.unwrap();
    }
    let (_, metrics) = proxy.admin_get("/metrics");
    let on_primary = metrics
        .lines()
        .find(|l| {
            l.starts_with("mysql_lb_split_reads_on_primary_total{")
                && l.contains("reason=\"no_replica\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(on_primary >= 5, "{on_primary}");
    drop(s);
    drop(proxy);
    // Refused: the replicas lag past the limit.
    let mut c = split_config(&cluster);
    c.health_check.max_replication_lag = Some(Duration::from_secs(1));
    c.pools[0].pooling.reads_without_replica = mysql_lb::config::ReadsWithoutReplica::Error;
    let proxy = TestProxy::start_with(c);
    wait_roles(&proxy, &cluster).await;
    let mut s = login(&proxy, APP_USER, APP_PASS).await;
    let _: Option<u64> = s.query_first("SELECT COUNT(*) FROM nr").await.unwrap();
    for i in cluster.replica_indices() {
        cluster.delay_replica(i, 4).await;
    }
    let lagging = || {
        let set = proxy.state.backends();
        let pool = set.pool("default").unwrap();
        pool.members().iter().filter(|b| b.role.lagging()).count()
    };
    let started = Instant::now();
    let refused = loop {
        s.query_drop("INSERT INTO nr (v) VALUES (1)").await.unwrap();
        s.query_drop("DO 0").await.unwrap();
        if lagging() == 2 {
            match s.query_first::<u64, _>("SELECT COUNT(*) FROM nr").await {
                Err(mysql_async::Error::Server(e)) => break e,
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replicas never went out for their lag"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(refused.code, 1105, "{}", refused.message);
    assert!(
        refused.message.contains("past max_replication_lag")
            && refused.message.contains("reads_without_replica"),
        "{}",
        refused.message
    );
    // The session goes on; writes still run.
    s.query_drop("INSERT INTO nr (v) VALUES (2)").await.unwrap();
    for i in cluster.replica_indices() {
        cluster.delay_replica(i, 0).await;
    }
}

/// A read-only route (`routes[].read_only`): its sessions' logins and transactions never reach
/// the primary, their reads, settings and read transactions run on replicas, and every
/// statement that may write is refused with ERR 1290 before it is sent anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_route_never_reaches_the_primary_and_refuses_writes() {
    let cluster = Cluster::start("rws-ro", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.ro (id INT PRIMARY KEY, v INT) ENGINE=InnoDB",
        )
        .await;
    cluster.exec(0, "INSERT INTO app.ro VALUES (1, 10)").await;
    cluster.wait_caught_up().await;
    let mut c = split_config(&cluster);
    c.routes = vec![mysql_lb::config::RouteConfig {
        user: Some(APP_USER.into()),
        schema: None,
        client: None,
        listener: None,
        pool: "default".into(),
        read_only: true,
    }];
    let proxy = TestProxy::start_with(c);
    wait_roles(&proxy, &cluster).await;
    let mut sessions = Vec::new();
    for _ in 0..4 {
        sessions.push(login(&proxy, APP_USER, APP_PASS).await);
    }
    for (i, s) in sessions.iter_mut().enumerate() {
        for _ in 0..5 {
            let v: Option<u32> = s
                .query_first("SELECT v FROM ro WHERE id = 1")
                .await
                .unwrap();
            assert_eq!(v, Some(10));
        }
        // Settings and a read transaction run on a replica too.
        s.query_drop(format!("SET @mine = {i}")).await.unwrap();
        let mine: Option<u32> = s.query_first("SELECT @mine").await.unwrap();
        assert_eq!(mine, Some(i as u32));
        s.query_drop("BEGIN").await.unwrap();
        let _: Option<u32> = s
            .query_first("SELECT v FROM ro WHERE id = 1")
            .await
            .unwrap();
        s.query_drop("COMMIT").await.unwrap();
        let port: Option<u16> = s.query_first("SELECT @@port").await.unwrap();
        assert_ne!(
            port,
            Some(cluster.primary().port),
            "session {i} on the primary"
        );
        for write in [
            "INSERT INTO ro VALUES (2, 20)",
            "UPDATE ro SET v = 11 WHERE id = 1",
            "CREATE TABLE ro2 (id INT)",
            "SELECT v FROM ro WHERE id = 1; DELETE FROM ro",
        ] {
            match s.query_drop(write).await {
                Err(mysql_async::Error::Server(e)) => {
                    assert_eq!(e.code, 1290, "{write}: {}", e.message);
                    assert!(e.message.contains("read-only"), "{}", e.message);
                }
                other => panic!("{write} was not refused: {other:?}"),
            }
        }
        match s.prep("INSERT INTO ro VALUES (?, ?)").await {
            Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1290),
            other => panic!("a prepared write was not refused: {other:?}"),
        }
        let v: Option<u32> = s
            .exec_first("SELECT v FROM ro WHERE id = ?", (1,))
            .await
            .unwrap();
        assert_eq!(v, Some(10), "session {i} reads on after the refusals");
    }
    // Nothing of the user's reached the primary: no connection was made or taken there.
    let (_, body) = proxy.admin_get("/backends");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let primary = cluster.primary().tcp_addr();
    let on_primary = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == primary.as_str())
        .unwrap()["server_pool"]
        .clone();
    // No pool of the primary was even made (or it took nothing).
    assert!(
        on_primary.is_null() || on_primary["acquired"] == 0 && on_primary["open"] == 0,
        "{on_primary}"
    );
    let rows = cluster
        .primary()
        .root_query("SELECT COUNT(*), SUM(v) FROM app.ro");
    assert_eq!(rows.split_whitespace().collect::<Vec<_>>(), ["1", "10"]);
    no_write_on_a_replica(&cluster);
}

/// Writers of `BEGIN; INSERT; COMMIT` that, as sysbench does, begin again after an error
/// without a rollback: a switchover leaves their transactions open on the old primary, which
/// refuses their writes. Their next `BEGIN` commits what is open there (as the server would),
/// and begins on the new primary: every writer goes on, and no error comes after the switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_left_open_on_an_old_primary_begin_again_on_the_new_one() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut cluster = Cluster::start("rws-txsw", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.tx (id INT AUTO_INCREMENT PRIMARY KEY, who INT) ENGINE=InnoDB",
        )
        .await;
    cluster.wait_caught_up().await;
    let proxy = split_proxy(&cluster);
    wait_roles(&proxy, &cluster).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for who in 0..4 {
        let mut conn = login(&proxy, APP_USER, APP_PASS).await;
        let stop = Arc::clone(&stop);
        writers.push(tokio::spawn(async move {
            // (when, what): committed transactions and errors.
            let (mut committed, mut errors) = (Vec::new(), Vec::new());
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
                let mut run = async || -> Result<(), mysql_async::Error> {
                    conn.query_drop("BEGIN").await?;
                    conn.query_drop(format!("INSERT INTO tx (who) VALUES ({who})"))
                        .await?;
                    conn.query_drop("COMMIT").await
                };
                match run().await {
                    Ok(()) => committed.push(Instant::now()),
                    Err(mysql_async::Error::Server(e)) => errors.push((Instant::now(), e.code)),
                    Err(e) => panic!("writer {who}: {e}"),
                }
            }
            (committed, errors)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.switchover(1).await;
    wait_roles(&proxy, &cluster).await;
    let followed = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut late = Vec::new();
    let mut all_errors = 0;
    for (i, w) in writers.into_iter().enumerate() {
        let (committed, errors) = w.await.unwrap();
        all_errors += errors.len();
        let after = committed.iter().filter(|at| **at > followed).count();
        assert!(
            after >= 5,
            "writer {i} committed {after} transactions after the switch"
        );
        late.extend(
            errors
                .into_iter()
                .filter(|(at, _)| *at > followed + Duration::from_millis(500)),
        );
    }
    eprintln!(
        "errors around the switch: {all_errors}, after it: {}",
        late.len()
    );
    assert!(late.is_empty(), "errors after the switch: {late:?}");
    cluster.wait_caught_up().await;
    assert!(
        own_gtids(cluster.server(2)).is_empty(),
        "no write on the replica"
    );
}

/// Where the digest table saw statements whose text contains `marker`: (backend, count) rows.
fn digest_backends(proxy: &TestProxy, marker: &str) -> Vec<(String, u64)> {
    let (_, body) = proxy.admin_get("/queries?limit=10000");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    json["queries"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["text"].as_str().is_some_and(|t| t.contains(marker)))
        .map(|r| {
            (
                r["backend"].as_str().unwrap_or_default().to_owned(),
                r["count"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_rules_route_a_read_to_the_primary_and_a_known_pure_function_to_a_replica() {
    let cluster = Cluster::start("rws-rules", 2).await;
    cluster
        .exec(
            0,
            "CREATE TABLE app.rt (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; \
             INSERT INTO app.rt VALUES (1, 1); \
             CREATE FUNCTION app.pure_fn() RETURNS INT DETERMINISTIC NO SQL RETURN 7",
        )
        .await;
    cluster.wait_caught_up().await;
    let mut cfg = split_config(&cluster);
    let rule = |name: &str, pattern: &str, route: mysql_lb::config::RuleRoute| {
        mysql_lb::config::QueryRule {
            pattern: Some(pattern.into()),
            route: Some(route),
            ..mysql_lb::config::QueryRule::named(name)
        }
    };
    use mysql_lb::config::RuleRoute::{Primary, Replica};
    cfg.query_rules = vec![
        rule("fresh", r"as fresh_read from", Primary),
        rule("pure", r"pure_fn", Replica),
        rule("no-write-on-replica", r"^insert into rt", Replica),
    ];
    let proxy = TestProxy::start_with(cfg);
    wait_roles(&proxy, &cluster).await;
    let primary = cluster.primary().tcp_addr();
    // Six sessions of the user: its logins spread over the servers, so its key has connections
    // on the replicas for reads to take.
    let mut idle = Vec::new();
    for _ in 0..5 {
        idle.push(login(&proxy, APP_USER, APP_PASS).await);
    }
    let mut conn = login(&proxy, APP_USER, APP_PASS).await;
    for i in 0..10 {
        // A new literal each time: the digest is one, the text is not.
        let _: Option<i64> = conn
            .query_first(format!(
                "SELECT v AS fresh_read FROM rt WHERE {i} = {i} AND id = 1"
            ))
            .await
            .unwrap();
        let _: Option<i64> = conn
            .query_first(format!(
                "SELECT v AS plain_read FROM rt WHERE {i} = {i} AND id = 1"
            ))
            .await
            .unwrap();
    }
    // A function call pins its session (the proxy cannot see inside it): on the replica the
    // rule sent it to, where its next calls run too.
    let mut calls = login(&proxy, APP_USER, APP_PASS).await;
    for _ in 0..10 {
        let v: Option<i64> = calls.query_first("SELECT pure_fn() AS fnv").await.unwrap();
        assert_eq!(v, Some(7));
    }
    calls.disconnect().await.unwrap();
    // The writes after the reads: a session's reads right after its writes may wait for the
    // replicas or take the primary (causal reads), which is not what this test looks at.
    for i in 0..10 {
        conn.query_drop(format!("INSERT INTO rt VALUES ({}, 0)", 100 + i))
            .await
            .unwrap();
    }
    conn.disconnect().await.unwrap();
    for c in idle {
        c.disconnect().await.unwrap();
    }
    let fresh = digest_backends(&proxy, "fresh_read");
    assert!(
        !fresh.is_empty() && fresh.iter().all(|(b, _)| *b == primary),
        "{fresh:?}"
    );
    let plain = digest_backends(&proxy, "plain_read");
    assert!(
        plain.iter().any(|(b, _)| *b != primary),
        "unruled reads reach replicas: {plain:?}"
    );
    let pure = digest_backends(&proxy, "pure_fn");
    assert!(
        !pure.is_empty() && pure.iter().all(|(b, _)| *b != primary),
        "a routed function runs on replicas: {pure:?}"
    );
    let inserts = digest_backends(&proxy, "INSERT INTO rt");
    assert!(inserts.iter().all(|(b, _)| *b == primary), "{inserts:?}");
    assert_eq!(inserts.iter().map(|(_, n)| n).sum::<u64>(), 10);
    cluster.wait_caught_up().await;
    no_write_on_a_replica(&cluster);
    let routed = proxy
        .series("mysql_lb_query_rule_hits_total{action=\"route\",rule=\"fresh\"}")
        .unwrap_or(0.0);
    assert!(routed >= 10.0, "{routed}");
}
