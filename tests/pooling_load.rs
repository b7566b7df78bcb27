//! Transaction pooling under load, measured on the servers: thousands of client connections
//! through a transaction-mode pool onto three MariaDB servers that accept only 60 connections
//! each. The proxy runs as its own process (its descriptors and the test's are counted apart);
//! every number asserted is read from the servers (`Max_used_connections`,
//! `Threads_connected`, `Connection_errors_max_connections`), never from the proxy's own count.

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::mariadb::{scratch_dir, MariaDb, BENCH_PASS, BENCH_USER};
use common::rawclient::RawClient;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Each server's `max_connections`: the pool must fit under it.
const SERVER_MAX: u64 = 60;
/// The pool's `max_server_connections` per backend: room is left under `SERVER_MAX` for the
/// proxy's health checks and the test's own root connection.
const POOL_MAX: u64 = 50;
/// Connections a server may see beside the pool's: the test's monitoring root connection and
/// one health check.
const BESIDE_POOL: u64 = 2;
const _: () = assert!(POOL_MAX + BESIDE_POOL < SERVER_MAX);
const TABLES: u32 = 4;
const TABLE_SIZE: u32 = 10_000;

/// The tests take the whole machine (thousands of connections): one at a time, on one set of
/// servers.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Three servers limited to `SERVER_MAX` connections, the sysbench tables loaded on each.
fn backends() -> &'static [MariaDb; 3] {
    static DBS: OnceLock<[MariaDb; 3]> = OnceLock::new();
    DBS.get_or_init(|| {
        let limit = format!("--max-connections={SERVER_MAX}");
        let dbs = std::thread::scope(|s| {
            let start = |name: &'static str| {
                let limit = limit.clone();
                s.spawn(move || MariaDb::start_with_args(name, &[&limit]))
            };
            let handles = [start("pload-a"), start("pload-b"), start("pload-c")];
            handles.map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        });
        std::thread::scope(|s| {
            for db in &dbs {
                s.spawn(move || {
                    let out = sysbench(
                        "oltp_read_write",
                        db.port,
                        &["--threads=4".to_string()],
                        "prepare",
                    );
                    checked(out, &format!("sysbench prepare on {}", db.tcp_addr()));
                });
            }
        });
        dbs
    })
}

/// `sysbench TEST <extra...> ACTION` against 127.0.0.1:`port`, with server-side prepared
/// statements (sysbench's default), which a pooled session shares rather than pins.
fn sysbench(test: &str, port: u16, extra: &[String], action: &str) -> Output {
    Command::new(common::sysbench::binary())
        .arg(test)
        .args([
            "--db-driver=mysql".to_string(),
            "--mysql-host=127.0.0.1".to_string(),
            format!("--mysql-port={port}"),
            format!("--mysql-user={BENCH_USER}"),
            format!("--mysql-password={BENCH_PASS}"),
            "--mysql-db=sbtest".to_string(),
            format!("--tables={TABLES}"),
            format!("--table-size={TABLE_SIZE}"),
            "--db-ps-mode=auto".to_string(),
            "--report-interval=0".to_string(),
        ])
        .args(extra)
        .arg(action)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run sysbench: {e}"))
}

fn checked(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A global status variable of `db`, read over its unix socket as root.
fn status(db: &MariaDb, name: &str) -> u64 {
    let out = db.root_query(&format!("SHOW GLOBAL STATUS LIKE '{name}'"));
    out.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}: no {name} in {out:?}", db.name))
}

/// Resets `Max_used_connections` (to the connections open now) and the error counters.
fn flush_status(dbs: &[MariaDb]) {
    for db in dbs {
        db.root_exec("FLUSH STATUS");
    }
}

/// The proxy in front of `dbs`, its default pool in transaction mode, as its own process.
fn pooled_proxy(dbs: &[MariaDb], max_connections: usize, idle_timeout: &str) -> (Daemon, u16) {
    let backends: Vec<String> = dbs
        .iter()
        .map(|db| format!("  - {}", db.tcp_addr()))
        .collect();
    // Listening on port 0; warnings only, but for the announcement that says which port.
    let yaml = format!(
        "listen: [\"127.0.0.1:0\"]\n\
         backends:\n{}\n\
         max_connections: {max_connections}\n\
         admin_address: off\n\
         log:\n  level: \"warn,mysql_lb::proxy::server=info\"\n\
         pooling:\n  mode: transaction\n  max_server_connections: {POOL_MAX}\n  \
         idle_timeout: {idle_timeout}\n  wait_timeout: 30s\n",
        backends.join("\n")
    );
    let path = scratch_dir("pooling-load").join("proxy.yaml");
    std::fs::write(&path, yaml).expect("write the proxy's config");
    let mut daemon = Daemon::start(&["--config".into(), path.display().to_string()], None);
    let port = daemon.proxy_addr().port();
    (daemon, port)
}

/// The highest `Threads_connected` of each server, sampled every 200 ms until `stop`.
fn sample_connected(dbs: &'static [MariaDb; 3], stop: Arc<AtomicBool>) -> [u64; 3] {
    let mut peak = [0; 3];
    while !stop.load(Ordering::Relaxed) {
        for (p, db) in peak.iter_mut().zip(dbs) {
            *p = (*p).max(status(db, "Threads_connected"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    peak
}

/// Raises this process's descriptor limit toward `want` (the hard one too, where allowed);
/// returns the soft limit in force.
fn raise_nofile(want: u64) -> u64 {
    let (soft, hard) = rlimit::Resource::NOFILE.get().expect("RLIMIT_NOFILE");
    if want > hard {
        // Only root may raise the hard limit; otherwise the soft one goes up to the hard.
        let _ = rlimit::Resource::NOFILE.set(want, want);
    }
    let _ = rlimit::increase_nofile_limit(want.max(soft));
    rlimit::Resource::NOFILE.get().expect("RLIMIT_NOFILE").0
}

#[test]
fn two_thousand_clients_share_fewer_than_sixty_connections_per_server() {
    let _serial = serial();
    let dbs = backends();
    raise_nofile(8_000);
    let (mut proxy, port) = pooled_proxy(dbs, 4_000, "10s");
    for test in ["oltp_point_select", "oltp_read_write"] {
        flush_status(dbs);
        let executes_before: u64 = dbs.iter().map(|db| status(db, "Com_stmt_execute")).sum();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || sample_connected(dbs, stop))
        };
        let started = Instant::now();
        let out = sysbench(
            test,
            port,
            &[
                "--threads=2000".to_string(),
                "--time=5".to_string(),
                // Any error fails the run but a deadlock between two of the 2,000 writers
                // (InnoDB's 1213 on 40,000 rows; the same directly), which sysbench retries.
                "--mysql-ignore-errors=1213".to_string(),
            ],
            "run",
        );
        stop.store(true, Ordering::Relaxed);
        let sampled = sampler.join().expect("sampler");
        let report = checked(
            out,
            &format!("sysbench {test}, 2000 threads, through the pool"),
        );
        let queries = common::sysbench::field(&report, "total:");
        let errors = common::sysbench::field(&report, "ignored errors:");
        let max_used: Vec<u64> = dbs
            .iter()
            .map(|db| status(db, "Max_used_connections"))
            .collect();
        let refused: Vec<u64> = dbs
            .iter()
            .map(|db| status(db, "Connection_errors_max_connections"))
            .collect();
        println!(
            "{test}: 2000 client threads, {queries} queries in {:?}, {errors} errors; per server: \
             Max_used_connections {max_used:?}, peak Threads_connected {sampled:?}, \
             refused for max_connections {refused:?}",
            started.elapsed()
        );
        assert!(queries > 0.0, "{test}: no queries:\n{report}");
        // The statements ran prepared, and the servers hold them per connection and text,
        // not per client: at most the pool's connections × sysbench's texts (its
        // oltp_read_write prepares at most 10 statements per table), far below the 2,000
        // clients' own.
        let executes: u64 = dbs.iter().map(|db| status(db, "Com_stmt_execute")).sum();
        assert!(
            (executes - executes_before) as f64 >= queries * 0.8,
            "{test}: {} executes for {queries} queries: the statements did not run prepared",
            executes - executes_before
        );
        let held: Vec<u64> = dbs
            .iter()
            .map(|db| status(db, "Prepared_stmt_count"))
            .collect();
        println!("{test}: prepared statements held per server {held:?}");
        for (db, held) in dbs.iter().zip(&held) {
            let most = (POOL_MAX + BESIDE_POOL) * 10 * u64::from(TABLES);
            assert!(
                *held <= most,
                "{}: {held} prepared statements (at most {most})",
                db.name
            );
        }
        // sysbench exits non-zero on any error it does not ignore (`checked`); the only ones
        // ignored are deadlocks, and a read-only test has none.
        if test == "oltp_point_select" {
            assert_eq!(errors, 0.0, "{test}: errors:\n{report}");
        }
        for (i, db) in dbs.iter().enumerate() {
            assert_eq!(refused[i], 0, "{}: refused connections (1040)", db.name);
            assert!(
                max_used[i] <= POOL_MAX + BESIDE_POOL,
                "{}: {} connections at once, above the pool's {POOL_MAX} (+{BESIDE_POOL})",
                db.name,
                max_used[i]
            );
        }
    }
    assert!(
        proxy.child.try_wait().expect("wait").is_none(),
        "the proxy died"
    );
}

#[test]
fn ten_thousand_idle_clients_and_fifty_busy_ones_hold_about_fifty_server_connections() {
    let _serial = serial();
    let dbs = backends();
    // The test holds one descriptor per idle client, and so does the proxy, a process of its
    // own that inherits the hard limit: with every pool in transaction mode it sizes
    // `max_connections` at one descriptor per client plus the pools' shared connections
    // (`mysql_lb::config::limits::Budget`). Where even that does not fit, as many clients as fit are
    // used, said in the output.
    let soft = raise_nofile(25_000);
    let (_, hard) = rlimit::Resource::NOFILE.get().expect("RLIMIT_NOFILE");
    let shared = 3 * POOL_MAX;
    let fit = soft
        .saturating_sub(1_000)
        .min(hard.saturating_sub(64 + shared + 250));
    let idle_clients = 10_000.min(usize::try_from(fit).unwrap_or(0));
    assert!(
        idle_clients >= 2_000,
        "RLIMIT_NOFILE {soft} leaves room for only {idle_clients} idle clients"
    );
    if idle_clients < 10_000 {
        println!("RLIMIT_NOFILE {soft}: {idle_clients} idle clients instead of 10000");
    }
    // A short idle timeout: the connections the logins left close before the busy phase.
    let (mut proxy, port) = pooled_proxy(dbs, idle_clients + 200, "1s");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let idle = rt.block_on(login_many(port, idle_clients));
    println!(
        "{idle_clients} idle clients logged in through the pool in {:?}",
        started.elapsed()
    );
    // Every login took a fresh server connection; idle, they close down to one per server.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connected: Vec<u64> = dbs
            .iter()
            .map(|db| status(db, "Threads_connected"))
            .collect();
        if connected.iter().all(|&n| n <= 1 + BESIDE_POOL) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "idle connections never closed: Threads_connected {connected:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    flush_status(dbs);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || sample_connected(dbs, stop))
    };
    let out = sysbench(
        "oltp_read_write",
        port,
        &[
            "--threads=50".to_string(),
            "--time=5".to_string(),
            // A deadlock between two writers is the workload's (the same directly); sysbench
            // retries it. Any other error fails the run.
            "--mysql-ignore-errors=1213".to_string(),
        ],
        "run",
    );
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.join().expect("sampler");
    let report = checked(
        out,
        "sysbench oltp_read_write, 50 threads, beside the idle clients",
    );
    let queries = common::sysbench::field(&report, "total:");
    let max_used: Vec<u64> = dbs
        .iter()
        .map(|db| status(db, "Max_used_connections"))
        .collect();
    let total: u64 = max_used.iter().sum();
    println!(
        "{idle_clients} idle + 50 busy clients: {queries} queries; per server \
         Max_used_connections {max_used:?} ({total} in all), peak Threads_connected {sampled:?}"
    );
    assert!(queries > 0.0, "no queries:\n{report}");
    // The 50 busy sessions hold at most one connection each; beside them each server keeps the
    // one idle connection of the user, plus the test's root connection and a health check.
    let bound = 50 + 3 * (1 + BESIDE_POOL);
    assert!(
        total <= bound,
        "{total} server connections at once for 50 busy clients (bound {bound})"
    );
    assert!(
        sampled.iter().sum::<u64>() <= bound,
        "sampled Threads_connected {sampled:?} above {bound}"
    );
    // The idle clients are still there, and still served.
    let alive = rt.block_on(ping_some(idle, 100));
    assert_eq!(alive, 100, "idle clients answer after the busy phase");
    assert!(
        proxy.child.try_wait().expect("wait").is_none(),
        "the proxy died"
    );
}

/// Logs `n` clients in through the proxy at `port`, 100 at a time; panics on the first failure.
async fn login_many(port: u16, n: usize) -> Vec<RawClient> {
    let addr = format!("127.0.0.1:{port}");
    let gate = Arc::new(Semaphore::new(100));
    let mut logins = JoinSet::new();
    for _ in 0..n {
        let (addr, gate) = (addr.clone(), Arc::clone(&gate));
        logins.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("semaphore");
            let login = RawClient::connect_tcp(&addr, BENCH_USER, BENCH_PASS, None, 0, 0);
            tokio::time::timeout(Duration::from_secs(60), login)
                .await
                .unwrap_or_else(|_| Err("login timed out".into()))
        });
    }
    let mut clients = Vec::with_capacity(n);
    while let Some(done) = logins.join_next().await {
        match done.expect("login task") {
            Ok(c) => clients.push(c),
            Err(e) => panic!("login {} of {n} failed: {e}", clients.len() + 1),
        }
    }
    clients
}

/// Pings `k` of `clients`; how many answered.
async fn ping_some(clients: Vec<RawClient>, k: usize) -> usize {
    let mut answered = 0;
    let step = (clients.len() / k).max(1);
    for mut c in clients.into_iter().step_by(step).take(k) {
        if tokio::time::timeout(Duration::from_secs(10), c.ping())
            .await
            .is_ok_and(|r| r.is_ok())
        {
            answered += 1;
        }
    }
    answered
}
