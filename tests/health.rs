//! Background health checks against real MariaDB servers: what one check reports, and how the
//! proxy takes a failing backend out of rotation and puts it back (a stopped server, a replica
//! whose replication stopped).

mod common;

use std::time::{Duration, Instant};

use common::daemon::{Daemon, BIN};
use common::mariadb::{closed_port, new_temp_dir, shared_pair, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, http_get, TestProxy};
use common::wait_until;
use mysql_async::prelude::*;
use mysql_lb::backends::client;
use mysql_lb::backends::health::{check_backend, CheckError};
use mysql_lb::config::{BackendAddr, HealthCheckConfig, Secret};

const INTERVAL: Duration = Duration::from_millis(500);

fn addr(db_addr: &str) -> BackendAddr {
    db_addr.parse().expect("backend address")
}

fn checks(user: Option<(&str, &str)>) -> HealthCheckConfig {
    HealthCheckConfig {
        interval: INTERVAL,
        timeout: Duration::from_secs(1),
        fall: 2,
        rise: 2,
        user: user.map(|(u, _)| u.to_owned()),
        password: user.map(|(_, p)| Secret::new(p)),
        password_file: None,
        max_replication_lag: None,
    }
}

fn proxy_with_checks(backends: &[String], checks: HealthCheckConfig) -> TestProxy {
    let mut cfg = config(backends);
    cfg.health_check = checks;
    TestProxy::start_with(cfg)
}

/// Polls `backends()[i].stats.up` until it equals `want`; panics with the last check's error.
async fn wait_up(proxy: &TestProxy, i: usize, want: i64, within: Duration) -> Duration {
    let start = Instant::now();
    let backend = std::sync::Arc::clone(&proxy.state.backends().backends()[i]);
    while backend.stats.up.get() != want {
        assert!(
            start.elapsed() < within,
            "{}: up stayed {} for {within:?}, want {want}; last check: {:?}",
            backend.name,
            backend.stats.up.get(),
            backend.last_check()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// `@@port` of the server each of `n` new clients through the proxy lands on.
async fn ports_reached(proxy: &TestProxy, n: usize) -> Vec<u16> {
    let mut ports = Vec::with_capacity(n);
    for _ in 0..n {
        let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
            .await
            .expect("client connects through the proxy");
        let port: u16 = conn
            .query_first("SELECT @@port")
            .await
            .expect("query")
            .expect("a row");
        conn.disconnect().await.expect("disconnect");
        ports.push(port);
    }
    ports
}

#[tokio::test]
async fn check_passes_on_a_live_server_with_and_without_login() {
    let db = &shared_pair()[0];
    let ok = check_backend(&addr(&db.tcp_addr()), &checks(None))
        .await
        .expect("greeting-only check passes");
    assert_eq!(ok.replication_lag, None);
    check_backend(
        &addr(&db.tcp_addr()),
        &checks(Some((BENCH_USER, BENCH_PASS))),
    )
    .await
    .expect("login + SELECT 1 passes");
    let socket = BackendAddr::Unix(db.socket.clone());
    check_backend(&socket, &checks(Some((BENCH_USER, BENCH_PASS))))
        .await
        .expect("a unix-socket backend is checked the same way");
}

#[tokio::test]
async fn replication_check_passes_a_server_that_is_not_a_replica() {
    let db = &shared_pair()[0];
    let mut cfg = checks(Some((BENCH_USER, BENCH_PASS)));
    cfg.max_replication_lag = Some(Duration::from_secs(5));
    let ok = check_backend(&addr(&db.tcp_addr()), &cfg)
        .await
        .expect("a primary passes");
    assert_eq!(ok.replication_lag, None);
}

#[tokio::test]
async fn check_with_a_wrong_password_reports_the_servers_denial() {
    let db = &shared_pair()[0];
    let err = check_backend(&addr(&db.tcp_addr()), &checks(Some((BENCH_USER, "wrong"))))
        .await
        .expect_err("wrong password fails");
    assert!(
        matches!(
            err,
            CheckError::Client(client::Error::Denied { code: 1045, .. })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("login as monitor: 1045 Access denied for user 'bench'"),
        "{text}"
    );
}

#[tokio::test]
async fn check_as_a_user_of_another_auth_plugin_says_the_monitor_needs_native_password() {
    // shared_pair()[1] is this binary's own; the plugin stays loaded for its other tests.
    let db = &shared_pair()[1];
    db.root_exec(
        "SET @have = (SELECT COUNT(*) FROM information_schema.plugins \
                      WHERE plugin_name = 'ed25519'); \
         EXECUTE IMMEDIATE IF(@have = 0, 'INSTALL SONAME ''auth_ed25519''', 'DO 0'); \
         CREATE USER IF NOT EXISTS 'mon_ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('x');",
    );
    let err = check_backend(&addr(&db.tcp_addr()), &checks(Some(("mon_ed", "x"))))
        .await
        .expect_err("ed25519 is not spoken by the monitor");
    assert_eq!(
        err.to_string(),
        "login as monitor: the account uses client_ed25519; \
         the monitor user must use mysql_native_password"
    );
}

#[tokio::test]
async fn check_of_a_closed_port_fails_at_connect() {
    let closed = closed_port();
    let err = check_backend(&addr(&closed.address()), &checks(None))
        .await
        .expect_err("nothing listens there");
    assert!(
        matches!(err, CheckError::Client(client::Error::Connect(_))),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("connect: "), "{err}");
}

#[tokio::test]
async fn check_of_a_server_that_never_greets_times_out_at_the_greeting() {
    // Accepts (the kernel completes the handshake from the backlog) but never writes a byte.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = addr(&silent.local_addr().unwrap().to_string());
    let mut cfg = checks(None);
    cfg.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = check_backend(&target, &cfg).await.expect_err("no greeting");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.to_string(), "greeting: no answer within 300ms");
}

#[tokio::test]
async fn stopped_backend_leaves_rotation_within_two_intervals_and_returns_after_restart() {
    let live = &shared_pair()[0];
    let mut victim = MariaDb::start("hc-victim");
    let proxy = proxy_with_checks(&[live.tcp_addr(), victim.tcp_addr()], checks(None));
    assert_eq!(proxy.state.backends().backends()[1].stats.up.get(), 1);

    victim.stop();
    let took = wait_up(&proxy, 1, 0, Duration::from_secs(3)).await;
    eprintln!("stopped backend marked down after {took:?}");
    let error = proxy.state.backends().backends()[1]
        .last_check()
        .and_then(|c| c.error)
        .expect("a failed check is recorded");
    assert!(error.starts_with("connect: "), "{error}");
    assert_eq!(proxy.state.backends().backends()[0].stats.up.get(), 1);
    let ports = ports_reached(&proxy, 10).await;
    assert!(ports.iter().all(|&p| p == live.port), "{ports:?}");

    victim.restart();
    let took = wait_up(&proxy, 1, 1, Duration::from_secs(5)).await;
    eprintln!("restarted backend back up after {took:?}");
    let ports = ports_reached(&proxy, 4).await;
    assert!(ports.contains(&victim.port), "{ports:?}");
    assert!(ports.contains(&live.port), "{ports:?}");
}

/// Status of the replica's default connection, by column name.
async fn replica_status(replica: &MariaDb) -> Option<mysql_async::Row> {
    let mut conn = mysql_async::Conn::new(replica.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect("replica connects");
    let row = conn
        .query_first("SHOW SLAVE STATUS")
        .await
        .expect("SHOW SLAVE STATUS");
    conn.disconnect().await.expect("disconnect");
    row
}

async fn wait_replicating(replica: &MariaDb) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row = replica_status(replica)
            .await
            .expect("replica has a status row");
        let io: Option<String> = row.get("Slave_IO_Running");
        let sql: Option<String> = row.get("Slave_SQL_Running");
        if io.as_deref() == Some("Yes") && sql.as_deref() == Some("Yes") {
            return;
        }
        let last_error: Option<String> = row.get("Last_IO_Error");
        assert!(
            Instant::now() < deadline,
            "replication not running: IO={io:?} SQL={sql:?} last IO error={last_error:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A primary (binary log on) and a replica of it applying events `delay` seconds late, started
/// in parallel and replicating.
async fn replication(name: &str, delay: u32) -> (MariaDb, MariaDb) {
    let (primary, replica) = std::thread::scope(|s| {
        let primary = s.spawn(|| {
            MariaDb::start_with_args(
                &format!("{name}-p"),
                &["--log-bin=mysql-bin", "--binlog-format=ROW"],
            )
        });
        let replica = s.spawn(|| MariaDb::start(&format!("{name}-r")));
        let join = |h: std::thread::ScopedJoinHandle<'_, MariaDb>| {
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        };
        (join(primary), join(replica))
    });
    // Kept out of the binary log: a delayed replica would otherwise start out behind.
    primary.root_exec(
        "SET sql_log_bin = 0; \
         CREATE USER 'repl'@'%' IDENTIFIED BY 'repl'; \
         GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';",
    );
    replica.root_exec(&format!(
        "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, \
         MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_CONNECT_RETRY=1, \
         MASTER_DELAY={delay}; \
         START SLAVE;",
        primary.port
    ));
    wait_replicating(&replica).await;
    (primary, replica)
}

fn replica_checks() -> HealthCheckConfig {
    HealthCheckConfig {
        max_replication_lag: Some(Duration::from_secs(5)),
        ..checks(Some((BENCH_USER, BENCH_PASS)))
    }
}

/// Waits for the first check of every backend and asserts that it passed.
async fn wait_first_checks_passed(proxy: &TestProxy) {
    for b in proxy.state.backends().backends() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while b.last_check().is_none() {
            assert!(Instant::now() < deadline, "{} never checked", b.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(b.last_check().and_then(|c| c.error), None, "{}", b.name);
    }
}

fn last_error(proxy: &TestProxy, i: usize) -> String {
    proxy.state.backends().backends()[i]
        .last_check()
        .and_then(|c| c.error)
        .expect("a failed check is recorded")
}

#[tokio::test]
async fn replica_with_stopped_replication_leaves_rotation_and_returns_when_restarted() {
    let (primary, replica) = replication("hc-stop", 0).await;
    let ok = check_backend(&addr(&replica.tcp_addr()), &replica_checks())
        .await
        .expect("a running replica passes");
    assert!(
        ok.replication_lag
            .is_some_and(|lag| lag <= Duration::from_secs(5)),
        "{ok:?}"
    );
    let proxy = proxy_with_checks(&[primary.tcp_addr(), replica.tcp_addr()], replica_checks());
    wait_first_checks_passed(&proxy).await;

    replica.root_exec("STOP SLAVE;");
    // Two failed checks 500 ms apart; the slack is for two busy cores.
    let took = wait_up(&proxy, 1, 0, Duration::from_secs(5)).await;
    eprintln!("replica with replication stopped marked down after {took:?}");
    let error = last_error(&proxy, 1);
    assert_eq!(error, "replication stopped (Slave_IO_Running=No)");
    let (_, metrics) = proxy.admin_get("/metrics");
    let lag = metric_value(&metrics, &lag_series(&replica.tcp_addr()));
    assert!(lag.is_some_and(f64::is_nan), "unknown lag is NaN: {lag:?}");
    assert_eq!(proxy.state.backends().backends()[0].stats.up.get(), 1);
    let ports = ports_reached(&proxy, 10).await;
    assert!(ports.iter().all(|&p| p == primary.port), "{ports:?}");

    replica.root_exec("START SLAVE;");
    let took = wait_up(&proxy, 1, 1, Duration::from_secs(10)).await;
    eprintln!("replica back up after {took:?}");
    let ports = ports_reached(&proxy, 4).await;
    assert!(ports.contains(&replica.port), "{ports:?}");
}

#[tokio::test]
async fn replica_lagging_beyond_the_limit_leaves_rotation() {
    // The replica holds every event back for 30 s: after a write its lag grows past 5 s.
    let (primary, replica) = replication("hc-lag", 30).await;
    let proxy = proxy_with_checks(&[primary.tcp_addr(), replica.tcp_addr()], replica_checks());
    wait_first_checks_passed(&proxy).await;

    primary
        .root_exec("CREATE TABLE test.lag (id INT PRIMARY KEY); INSERT INTO test.lag VALUES (1);");
    // The lag reaches 6 s, then two failed checks.
    let took = wait_up(&proxy, 1, 0, Duration::from_secs(15)).await;
    eprintln!("lagging replica marked down after {took:?}");
    let error = last_error(&proxy, 1);
    assert!(
        error.starts_with("replication lag ") && error.ends_with(" exceeds 5s"),
        "{error}"
    );
    let ports = ports_reached(&proxy, 6).await;
    assert!(ports.iter().all(|&p| p == primary.port), "{ports:?}");
    // The lag is exported per backend; the primary, not a replica, has no series.
    let (_, metrics) = proxy.admin_get("/metrics");
    let lag = metric_value(&metrics, &lag_series(&replica.tcp_addr()));
    assert!(lag.is_some_and(|l| l > 5.0), "{lag:?}");
    assert!(
        !metrics.contains(&lag_series(&primary.tcp_addr())),
        "a primary has no lag series"
    );
}

fn lag_series(backend: &str) -> String {
    format!("mysql_lb_backend_replication_lag_seconds{{backend=\"{backend}\"}}")
}

/// The value of the series `name{labels}` in a Prometheus text exposition.
fn metric_value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// A monitor account whose password appears nowhere else (not the user name, not the tests'
/// other passwords), so finding it in output means it leaked.
const FILE_USER: &str = "mon_file";
const FILE_PASS: &str = "Pw-only-in-a-file-7f3a";

fn create_file_user(db: &MariaDb) {
    db.root_exec(&format!(
        "CREATE USER IF NOT EXISTS '{FILE_USER}'@'%' IDENTIFIED BY '{FILE_PASS}'"
    ));
}

/// `health_check` logging in as [`FILE_USER`] with the password in `file`, read by validation
/// as at start.
fn checks_from_file(db: &MariaDb, file: &std::path::Path) -> HealthCheckConfig {
    let mut cfg = config(&[db.tcp_addr()]);
    cfg.health_check = HealthCheckConfig {
        user: Some(FILE_USER.to_owned()),
        password_file: Some(file.to_owned()),
        ..checks(None)
    };
    cfg.validate().expect("valid config").health_check
}

#[tokio::test]
async fn a_check_logs_in_with_the_password_from_password_file() {
    let db = &shared_pair()[0];
    create_file_user(db);
    let dir = new_temp_dir("health-password-file");
    let (right, wrong) = (dir.join("right"), dir.join("wrong"));
    std::fs::write(&right, format!("{FILE_PASS}\n")).unwrap();
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    check_backend(&addr(&db.tcp_addr()), &checks_from_file(db, &right))
        .await
        .expect("login with the file's password (its newline trimmed) passes");
    let err = check_backend(&addr(&db.tcp_addr()), &checks_from_file(db, &wrong))
        .await
        .expect_err("another password in the file is denied");
    assert!(
        matches!(
            err,
            CheckError::Client(client::Error::Denied { code: 1045, .. })
        ),
        "{err:?}"
    );
}

#[test]
fn the_password_from_the_file_shows_in_no_log_check_config_or_backends() {
    let db = &shared_pair()[0];
    create_file_user(db);
    let dir = new_temp_dir("health-password-leak");
    let secret = dir.join("monitor-password");
    std::fs::write(&secret, format!("{FILE_PASS}\n")).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "listen: ['127.0.0.1:0']\nbackends: [{{address: '{}'}}]\nadmin_address: '127.0.0.1:0'\n\
             health_check: {{interval: 200ms, user: {FILE_USER}, password_file: '{}'}}\n\
             log: {{level: trace}}\n",
            db.tcp_addr(),
            secret.display()
        ),
    )
    .unwrap();
    let check = std::process::Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .arg("--check-config")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{said}");
    assert!(!said.contains(FILE_PASS), "{said}");

    let mut daemon = Daemon::start(&["--config".to_owned(), path.display().to_string()], None);
    let admin = daemon.admin_addr();
    let backends = || {
        http_get(admin, "/backends")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    // A check that logged in: last_check ok, which a wrong or empty password would not be.
    wait_until("a health check that logged in", || {
        serde_json::from_str::<serde_json::Value>(&backends())
            .is_ok_and(|v| v["backends"][0]["last_check"]["ok"] == true)
    });
    let body = backends();
    assert!(!body.contains(FILE_PASS), "{body}");
    assert!(daemon.stop().success());
    let log = daemon.whole_log().join("\n");
    assert!(log.contains("listening"), "the whole log was read: {log}");
    assert!(!log.contains(FILE_PASS), "{log}");
}
