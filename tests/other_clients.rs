//! Client libraries other than mysql_async, the `mariadb` CLI and sysbench, through mysql-lb:
//! PyMySQL, MySQL Connector/Python (pure Python and its C extension), PHP mysqli + PDO_mysql
//! (mysqlnd), Node mysql2 and Perl DBD::MariaDB (libmariadb, with DBD's own auto-reconnect).
//! Each has its own implementation of the protocol, so each stresses the relay, the handshake
//! rewriting and the KILL mapping differently.
//!
//! The checks themselves are small scripts in tests/clients/; each compares the proxy with a
//! direct connection to the same server (values round-tripped, error codes and messages) and
//! exits non-zero with one line per mismatch. One MariaDB (with TLS, which the proxy must hide)
//! and one proxy (TCP and unix socket) serve every test; the tests take turns so that their
//! KILLs and timings do not interfere. scripts/install-deps.sh installs PHP, Node and
//! DBD::MariaDB with apt, and
//! the Python and Node libraries into `.test-clients/` (a venv and an npm prefix); a missing one
//! fails the test with the command that installs it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::scripts::{
    clients_dir, connector_cext_ld_path, node_path, python, python_with, require,
    require_php_mysql, run_check,
};
use mysql_lb::config::ListenAddr;

struct Fixture {
    db: MariaDb,
    proxy: TestProxy,
    /// Certificates, the proxy's unix socket and scratch files for LOAD DATA.
    dir: tempfile::TempDir,
    tls: bool,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("mlb-clients-")
            .tempdir()
            .expect("temp dir");
        let tls = make_cert(dir.path());
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let tls_args = [
            format!("--ssl-cert={}", cert.display()),
            format!("--ssl-key={}", key.display()),
        ];
        let args: Vec<&str> = if tls {
            tls_args.iter().map(String::as_str).collect()
        } else {
            Vec::new()
        };
        let db = MariaDb::start_with_args("clients", &args);
        let mut cfg = config(&[db.tcp_addr()]);
        cfg.listen = vec![
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenAddr::Unix(dir.path().join("proxy.sock")),
        ];
        cfg.admin_address = None;
        let proxy = TestProxy::start_with(cfg);
        Fixture {
            db,
            proxy,
            dir,
            tls,
        }
    })
}

/// A self-signed certificate for the backend; false (no TLS) when openssl is missing.
fn make_cert(dir: &Path) -> bool {
    Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdin(Stdio::null())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// One client script at a time: their KILL and timing checks assume a quiet server.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The command with the MLB_* settings every script reads.
fn script(program: &str) -> Command {
    let f = fixture();
    let mut cmd = Command::new(program);
    cmd.current_dir(clients_dir())
        .env("MLB_DIRECT_HOST", "127.0.0.1")
        .env("MLB_DIRECT_PORT", f.db.port.to_string())
        .env("MLB_PROXY_HOST", f.proxy.addr.ip().to_string())
        .env("MLB_PROXY_PORT", f.proxy.addr.port().to_string())
        .env(
            "MLB_PROXY_SOCKET",
            f.proxy.unix.as_ref().expect("a unix listener"),
        )
        .env("MLB_USER", BENCH_USER)
        .env("MLB_PASS", BENCH_PASS)
        .env("MLB_TMP", f.dir.path())
        .env("MLB_BACKEND_TLS", if f.tls { "1" } else { "0" })
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn pymysql() {
    python_with("pymysql");
    let _turn = turn();
    let mut cmd = script(&python());
    cmd.arg("pymysql_check.py");
    run_check("PyMySQL", cmd);
}

#[test]
fn mysql_connector_python_pure() {
    python_with("mysql.connector");
    let _turn = turn();
    let mut cmd = script(&python());
    cmd.args(["connector_check.py", "pure"]);
    run_check("mysql-connector-python (pure)", cmd);
}

#[test]
fn mysql_connector_python_c_extension() {
    let ld_path = connector_cext_ld_path();
    let _turn = turn();
    let mut cmd = script(&python());
    cmd.env("LD_LIBRARY_PATH", &ld_path)
        .args(["connector_check.py", "cext"]);
    run_check("mysql-connector-python (C extension)", cmd);
}

#[test]
fn php_mysqli_and_pdo() {
    require_php_mysql();
    let _turn = turn();
    let mut cmd = script("php");
    cmd.args([
        "-d",
        "memory_limit=1G",
        "-d",
        "mysqli.allow_local_infile=1",
        "php_check.php",
    ]);
    run_check("PHP mysqli/PDO", cmd);
}

#[test]
fn node_mysql2() {
    let root = node_path();
    let _turn = turn();
    let mut cmd = script("node");
    cmd.env("NODE_PATH", &root).arg("node_check.js");
    run_check("Node mysql2", cmd);
}

#[test]
fn perl_dbd_mariadb() {
    require(
        "perl",
        &["-MDBD::MariaDB", "-e", "exit 0"],
        "apt-get install -y libdbd-mariadb-perl",
    );
    let _turn = turn();
    let mut cmd = script("perl");
    cmd.arg("dbd_check.pl");
    run_check("Perl DBD::MariaDB", cmd);
}
