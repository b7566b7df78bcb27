//! The `mysql-lb` binary as an operator runs it: flags, config validation, logging, fd limits,
//! and clients (the `mariadb` CLI) through the real process.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::{mariadb_cli, Daemon, BIN};
use common::mariadb::shared_pair;

fn example_config() -> String {
    format!("{}/config/mysql-lb.yaml", env!("CARGO_MANIFEST_DIR"))
}

/// The daemon in front of one shared backend on a free port, admin off, plus `extra` flags;
/// `soft_nofile` starts it under that soft RLIMIT_NOFILE.
fn in_front_of_one_backend(extra: &[&str], soft_nofile: Option<u64>) -> (Daemon, u16) {
    let mut args = vec![
        "--proxy-address=127.0.0.1:0".to_owned(),
        format!("--proxy-backend-addresses={}", shared_pair()[0].tcp_addr()),
        "--admin-address=off".to_owned(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let mut daemon = Daemon::start(&args, soft_nofile);
    let port = daemon.proxy_addr().port();
    (daemon, port)
}

/// A connection that was greeted (so it holds an admission slot) and stays silent.
fn hold_a_session(port: u16) -> std::net::TcpStream {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = [0u8; 5];
        if s.read_exact(&mut head).is_ok() && head[4] == 0x0A {
            return s;
        }
        assert!(Instant::now() < deadline, "never got a greeting on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn check_config_accepts_the_shipped_example() {
    let out = Command::new(BIN)
        .args(["--config", &example_config(), "--check-config"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
}

#[test]
fn check_config_names_an_unknown_key_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "backends: [\"127.0.0.1:3306\"]\nmax_conections: 5\n").unwrap();
    let out = Command::new(BIN)
        .args(["--config", path.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_conections"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn check_config_reads_the_tls_files_and_names_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let certs = common::certs::Certs::generate(dir.path());
    let check = |cert: &std::path::Path, key: &std::path::Path| {
        let path = dir.path().join("tls.yaml");
        let yaml = format!(
            "backends: [\"127.0.0.1:3306\"]\ntls: {{cert: {}, key: {}}}\n",
            cert.display(),
            key.display()
        );
        std::fs::write(&path, yaml).unwrap();
        Command::new(BIN)
            .args(["--config", path.to_str().unwrap(), "--check-config"])
            .output()
            .unwrap()
    };
    let good = check(&certs.server.cert, &certs.server.key);
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let bad = check(&certs.server.cert, &certs.client.key);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("tls.key does not match tls.cert"), "{err}");
}

#[test]
fn check_config_refuses_a_route_to_an_unknown_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("routes.yaml");
    let yaml = "backends: [\"127.0.0.1:3306\"]\npools:\n  reporting: {backends: [\"127.0.0.1:3307\"]}\nroutes:\n  - {user: report, pool: reporting}\n  - {schema: \"analytics*\", pool: reportng}\n";
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["--config", path.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"routes[1].pool: unknown pool "reportng" (pools: default, reporting)"#),
        "{err}"
    );
    // The same file with the pool spelled right passes and counts pools and routes.
    std::fs::write(&path, yaml.replace("reportng", "reporting")).unwrap();
    let out = Command::new(BIN)
        .args(["--config", path.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("2 backend(s) in 2 pool(s), 2 route(s)"),
        "{said}"
    );
}

#[test]
fn bad_flag_value_is_an_error_naming_the_flag() {
    let out = Command::new(BIN)
        .args([
            "--proxy-backend-addresses",
            "127.0.0.1:notaport",
            "--check-config",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--proxy-backend-addresses"), "{err}");
}

#[test]
fn flags_start_a_proxy_the_mariadb_cli_can_use_and_sigterm_stops_it() {
    let pair = shared_pair();
    let mut d = Daemon::start(
        &[
            "--proxy-address=127.0.0.1:0".to_owned(),
            format!(
                "--proxy-backend-addresses={},{}",
                pair[0].tcp_addr(),
                pair[1].tcp_addr()
            ),
            "--admin-address=off".into(),
            "--log-level=info".into(),
        ],
        None,
    );
    let port = d.proxy_addr().port();
    let mut ports = Vec::new();
    for _ in 0..4 {
        let out = mariadb_cli(port, "SELECT @@port");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ports.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    ports.sort();
    ports.dedup();
    assert_eq!(
        ports.len(),
        2,
        "round robin reached both backends: {ports:?}"
    );
    let status = d.stop();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
}

#[test]
fn json_logs_name_the_refused_client_and_the_reason() {
    let (mut d, port) =
        in_front_of_one_backend(&["--max-connections=1", "--log-format=json"], None);
    // Hold the only slot with a connection that got a greeting (an earlier probe may still hold
    // it for a moment), then be refused with the CLI.
    let holder = hold_a_session(port);
    let out = mariadb_cli(port, "SELECT 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1040"), "{err}");
    assert!(err.contains("Too many connections"), "{err}");
    let line = d.wait_for_line("too many connections");
    let json: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(json["level"], "WARN", "{line}");
    let text = line.to_lowercase();
    assert!(
        text.contains("127.0.0.1:"),
        "the line names the client: {line}"
    );
    drop(holder);
}

#[test]
fn starts_under_a_low_soft_fd_limit_and_raises_it() {
    let (mut d, port) = in_front_of_one_backend(&["--max-connections=2000"], Some(1024));
    d.wait_for_line("listening");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.child.id())).unwrap();
    let soft: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|s| s.parse().ok())
        .expect("soft limit in /proc/PID/limits");
    assert!(
        soft >= 2 * 2000 + 64,
        "soft limit raised to fit 2000 connections: {soft}"
    );
    d.wait_for_line("RLIMIT_NOFILE soft limit raised");
    let out = mariadb_cli(port, "SELECT 1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn max_open_files_too_small_lowers_max_connections_with_one_warning() {
    let (mut d, _port) =
        in_front_of_one_backend(&["--max-connections=1000", "--max-open-files=264"], None);
    let line = d.wait_for_line("max_connections lowered");
    assert!(line.contains("1000") && line.contains("100"), "{line}");
    d.wait_for_line("listening");
    let warnings = d
        .seen
        .iter()
        .filter(|l| l.contains("max_connections lowered"))
        .count();
    assert_eq!(warnings, 1);
}

/// Starts the daemon with the hard RLIMIT_NOFILE lowered to `hard` (soft with it), as a host
/// whose limit is below what the default max_connections needs.
fn under_a_hard_fd_limit(hard: u64, extra: &[&str]) -> Daemon {
    let mut args = vec![
        format!("--nofile={hard}:{hard}"),
        BIN.to_owned(),
        "--proxy-address=127.0.0.1:0".to_owned(),
        format!("--proxy-backend-addresses={}", shared_pair()[0].tcp_addr()),
        "--admin-address=off".to_owned(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Daemon::start_program("prlimit", &args)
}

#[test]
fn default_max_connections_is_fitted_to_the_fd_limit_without_a_warning() {
    let mut d = under_a_hard_fd_limit(1064, &[]);
    let line = d.wait_for_line("max_connections fitted to the file descriptor limit: 500");
    assert!(line.contains("INFO"), "{line}");
    d.wait_for_line("listening");
    let warnings: Vec<_> = d.seen.iter().filter(|l| l.contains("WARN")).collect();
    assert!(warnings.is_empty(), "a default start warned: {warnings:?}");
}

#[test]
fn chosen_max_connections_that_cannot_fit_is_warned_of() {
    let mut d = under_a_hard_fd_limit(1064, &["--max-connections=10000"]);
    let line = d.wait_for_line("max_connections lowered from 10000 to 500");
    assert!(line.contains("WARN"), "{line}");
}

#[test]
fn a_daemon_that_exits_at_start_fails_its_test_at_once_with_its_own_log() {
    // The port is held by a listener of the test's own: the daemon cannot bind it and exits.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut d = Daemon::start(
        &[
            format!("--proxy-address={}", taken.local_addr().unwrap()),
            format!("--proxy-backend-addresses={}", shared_pair()[0].tcp_addr()),
            "--admin-address=off".to_owned(),
        ],
        None,
    );
    let started = Instant::now();
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.proxy_addr()))
        .expect_err("no address from a daemon that could not bind");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("mysql-lb exited") && message.contains("in use"),
        "names the exit and carries the daemon's own reason: {message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed at once, not at the 30 s deadline: {:?}",
        started.elapsed()
    );
}
