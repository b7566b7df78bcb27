//! MariaDB Connector/J (Debian's `libmariadb-java`) through mysql-lb, compared with a direct
//! connection to the same server: `Statement.cancel()` (a `KILL QUERY` on a new connection that
//! names the greeting's connection id, which the driver keeps in a signed 32-bit int), and a
//! session whose server connection is killed mid-statement; and against mysql-lb's SQL admin
//! port.
//!
//! The Java side is tests/clients/JavaCheck.java, compiled with `javac` into a temp dir at test
//! time; it prints `key=value` lines compared here. Missing java or the driver fails the test with
//! the command that installs them (scripts/install-deps.sh), never skips it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::TestProxy;

/// Where Debian's libmariadb-java puts the driver (a symlink to the versioned jar).
const DRIVER_JAR: &str = "/usr/share/java/mariadb-java-client.jar";
const INSTALL: &str = "run scripts/install-deps.sh (apt-get install default-jdk-headless \
                       libmariadb-java)";
/// Generous for a loaded 2-core machine: a JVM start plus the check itself.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// `SELECT SLEEP(10)` cancelled after about 1 s: anything near 10 s means the cancel did nothing.
const CANCELLED_WITHIN: Duration = Duration::from_secs(5);
/// `SELECT SLEEP(10)` cancelled after 500 ms over three backends: the cancel's own connection
/// and the proxy's to the target's backend fit in the rest.
const CANCELLED_ACROSS_WITHIN: Duration = Duration::from_secs(2);

struct Fixture {
    db: MariaDb,
    proxy: TestProxy,
    /// The compiled JavaCheck class.
    classes: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let classes = compile();
        let db = MariaDb::start("java");
        let proxy = TestProxy::start(&[db.tcp_addr()]);
        Fixture { db, proxy, classes }
    })
}

/// One check at a time: each kills statements on the shared server.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

fn compile() -> tempfile::TempDir {
    for tool in ["java", "javac"] {
        let works = Command::new(tool)
            .arg("-version")
            .stdin(Stdio::null())
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(works, "`{tool} -version` failed: {INSTALL}");
    }
    assert!(
        Path::new(DRIVER_JAR).exists(),
        "{DRIVER_JAR} not found: {INSTALL}"
    );
    let dir = tempfile::Builder::new()
        .prefix("mlb-java-")
        .tempdir()
        .expect("temp dir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/JavaCheck.java");
    let out = Command::new("javac")
        .arg("-d")
        .arg(dir.path())
        .arg("-cp")
        .arg(DRIVER_JAR)
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .expect("run javac");
    assert!(
        out.status.success(),
        "javac {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

#[derive(Clone, Copy, Debug)]
enum Via {
    Direct,
    Proxy,
}

/// Runs `JavaCheck MODE` against the server or the proxy; returns its `key=value` lines.
fn run_java(mode: &str, via: Via) -> BTreeMap<String, String> {
    let f = fixture();
    let (host, port) = match via {
        Via::Direct => ("127.0.0.1".to_string(), f.db.port),
        Via::Proxy => (f.proxy.addr.ip().to_string(), f.proxy.addr.port()),
    };
    run_java_at(&[mode], &host, port, (BENCH_USER, BENCH_PASS))
}

/// Runs `JavaCheck MODE...` against `host:port` (the fixture's server as the direct one) as
/// `account`; returns its `key=value` lines.
fn run_java_at(
    mode: &[&str],
    host: &str,
    port: u16,
    (user, pass): (&str, &str),
) -> BTreeMap<String, String> {
    let f = fixture();
    let via = format!("{host}:{port}");
    let extra = &mode[1..];
    let mode = mode[0];
    let classpath: PathBuf = f.classes.path().to_path_buf();
    let classpath = format!("{}:{DRIVER_JAR}", classpath.display());
    let mut child = Command::new("java")
        .args([
            "-cp",
            &classpath,
            "JavaCheck",
            mode,
            host,
            &port.to_string(),
        ])
        .args(["127.0.0.1", &f.db.port.to_string(), user, pass])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start java: {e}; {INSTALL}"));
    let start = Instant::now();
    while child.try_wait().expect("wait for java").is_none() {
        if start.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("java's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "JavaCheck {mode} {via} ({:.1?}):\n{stdout}{}",
        start.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "JavaCheck {mode} {via} failed ({}):\n{stdout}",
        out.status
    );
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn field<'a>(lines: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    lines
        .get(key)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no `{key}=` line in {lines:?}"))
}

/// Connector/J cancels through a new connection (`KILL QUERY <id>`, the id as its signed int
/// holds it); through mysql-lb that must interrupt the statement as it does directly.
#[test]
fn statement_cancel_interrupts_the_query_as_directly() {
    let _turn = turn();
    let direct = run_java("cancel", Via::Direct);
    let proxied = run_java("cancel", Via::Proxy);
    for (via, lines) in [("direct", &direct), ("proxy", &proxied)] {
        assert!(
            !lines.contains_key("cancel_error"),
            "{via}: cancel() failed: {lines:?}"
        );
        let elapsed: u64 = field(lines, "elapsed_ms").parse().expect("a number");
        assert!(
            Duration::from_millis(elapsed) < CANCELLED_WITHIN,
            "{via}: SELECT SLEEP(10) ran {elapsed} ms: cancel() did not interrupt it"
        );
        assert_eq!(field(lines, "after"), "ok 1", "{via}: session usable after");
    }
    assert!(
        field(&direct, "outcome").starts_with("exception "),
        "directly the driver reports the interruption: {direct:?}"
    );
    assert_eq!(
        field(&proxied, "outcome"),
        field(&direct, "outcome"),
        "the same exception, SQLState and code through the proxy"
    );
}

/// The server connection behind a session is killed mid-statement (MariaDB closes it without an
/// ERR): the driver must see it as the lost connection it sees directly, so pools evict it.
#[test]
fn backend_connection_killed_mid_statement_looks_as_directly() {
    let _turn = turn();
    let direct = run_java("lost", Via::Direct);
    let proxied = run_java("lost", Via::Proxy);
    for (via, lines) in [("direct", &direct), ("proxy", &proxied)] {
        assert_eq!(field(lines, "killed"), "yes", "{via}: {lines:?}");
        assert_eq!(field(lines, "valid"), "false", "{via}: isValid() after");
        assert_eq!(field(lines, "new_connection"), "ok 1", "{via}");
    }
    assert_eq!(
        field(&direct, "exception"),
        "java.sql.SQLNonTransientConnectionException"
    );
    for key in ["exception", "sqlstate", "code"] {
        assert_eq!(
            field(&proxied, key),
            field(&direct, key),
            "{key} through the proxy vs directly"
        );
    }
}

/// Connector/J's `cancel()` through mysql-lb over three backends, each statement and each
/// cancel on a new connection (round robin puts the cancel on another backend than its
/// statement): every statement is interrupted soon after its cancel, as directly. Needs the
/// `kill:` account (an account with CONNECTION ADMIN) to run the KILL on the right backend.
#[test]
fn statement_cancel_interrupts_the_query_over_three_backends() {
    let _turn = turn();
    let f = fixture();
    let pair = common::mariadb::shared_pair();
    let servers = [&f.db, &pair[0], &pair[1]];
    for db in servers {
        common::create_kill_accounts(db);
    }
    let mut cfg = common::proxy::config(&servers.map(|db| db.tcp_addr()));
    cfg.kill = common::kill_account();
    let proxy = TestProxy::start_with(cfg);
    const ATTEMPTS: usize = 20;
    let lines = run_java_at(
        &["cancels", &ATTEMPTS.to_string()],
        &proxy.addr.ip().to_string(),
        proxy.addr.port(),
        ("app", "app"),
    );
    assert!(!lines.contains_key("cancel_error"), "{lines:?}");
    for i in 0..ATTEMPTS {
        let line = field(&lines, &format!("attempt.{i}"));
        let (outcome, millis) = line.split_once(' ').expect("OUTCOME MILLIS");
        let millis: u64 = millis.parse().expect("a number");
        assert_eq!(
            outcome, "exception_70100_1317",
            "attempt {i}: the driver reports the interruption ({line})"
        );
        assert!(
            Duration::from_millis(millis) < CANCELLED_ACROSS_WITHIN,
            "attempt {i}: SELECT SLEEP(10) ran {millis} ms, cancelled after 500 ms"
        );
    }
}

#[test]
fn connector_j_reads_the_sql_admin_port_and_a_wrong_password_is_refused() {
    let _turn = turn();
    let f = fixture();
    let hash = f.db.root_query("SELECT PASSWORD('java-admin')");
    let mut cfg = common::proxy::config(&[f.db.tcp_addr()]);
    cfg.admin_sql = Some(mysql_lb::config::AdminSqlConfig {
        address: "127.0.0.1:0".parse().unwrap(),
        account: mysql_lb::config::AdminAccount {
            user: "jadmin".into(),
            credential: mysql_lb::config::AdminCredential::Native(
                mysql_lb::config::parse_native_hash(hash.trim()).expect("PASSWORD() prints *HEX"),
            ),
        },
    });
    let proxy = TestProxy::start_with(cfg);
    let admin = proxy.admin_sql.expect("the admin port");
    let lines = run_java_at(
        &["admin"],
        &admin.ip().to_string(),
        admin.port(),
        ("jadmin", "java-admin"),
    );
    assert_eq!(field(&lines, "backends"), "1");
    assert_eq!(field(&lines, "pools"), "1");
    assert_eq!(field(&lines, "pools_first_column"), "pool");
    assert_eq!(field(&lines, "grouped"), "up:1");
    assert_eq!(field(&lines, "wrong"), "1045");
}
