//! Client libraries over TLS and compression, directly to MariaDB and through mysql-lb:
//! PyMySQL, MySQL Connector/Python (pure and C extension), PHP mysqli + PDO_mysql (mysqlnd) and
//! Node mysql2, each with TLS required and the server's certificate verified against the test
//! CA, with its compression switch, and with both (PyMySQL has no compression).
//!
//! The checks are tests/clients/tls_check.{py,php,js}: a query, what the library and the server
//! each say the session uses, a 20 MiB BLOB both ways, LOAD DATA LOCAL INFILE, and a refusal when
//! the client trusts another CA. The `*_direct` tests are the reference: the same script against
//! the TLS MariaDB itself. Through mysql-lb the backend leg is TLS (verify_identity) and
//! uncompressed, whatever the client leg is, and the scripts are told so.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use common::mariadb::{MariaDb, ServerTls, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::scripts::{
    clients_dir, connector_cext_ld_path, node_path, python, python_with, require_php_mysql,
    run_check,
};
use common::tls_server::certs;
use mysql_lb::config::{BackendTls, BackendTlsMode, ClientTls, TlsVersion};

struct Fixture {
    db: MariaDb,
    proxy: TestProxy,
    scratch: std::path::PathBuf,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let c = certs();
        let db = MariaDb::start_tls(
            "tls-clients",
            &ServerTls {
                cert: &c.server.cert,
                key: &c.server.key,
                ca: Some(&c.ca),
                require_secure_transport: false,
            },
        );
        let mut cfg = config(&[db.tcp_addr()]);
        cfg.admin_address = None;
        cfg.tls = Some(ClientTls {
            cert: c.server.cert.clone(),
            key: c.server.key.clone(),
            ca: None,
            verify_client: false,
            min_version: TlsVersion::V1_2,
            require: false,
            cipher_suites: mysql_lb::config::default_cipher_suites(),
        });
        cfg.compression = true;
        for b in &mut cfg.backends {
            b.tls = BackendTls {
                mode: BackendTlsMode::VerifyIdentity,
                ca: Some(c.ca.clone()),
                ..BackendTls::default()
            };
            b.compression = false;
        }
        let proxy = TestProxy::start_with(cfg);
        Fixture {
            db,
            proxy,
            scratch: common::mariadb::scratch_dir("tls-clients"),
        }
    })
}

/// One script at a time: each holds several 20 MiB buffers.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone, Copy)]
enum Target {
    Direct,
    Proxy,
}

/// `program` in tests/clients with the MLB_* settings for `target`, connecting as `host`.
fn script(program: &str, target: Target, host: &str) -> Command {
    let f = fixture();
    let c = certs();
    let mut cmd = Command::new(program);
    let (port, backend_tls, backend_compression) = match target {
        Target::Direct => (f.db.port, "client", "client"),
        Target::Proxy => (f.proxy.addr.port(), "1", "OFF"),
    };
    cmd.current_dir(clients_dir())
        .env("MLB_HOST", host)
        .env("MLB_PORT", port.to_string())
        .env("MLB_USER", BENCH_USER)
        .env("MLB_PASS", BENCH_PASS)
        .env("MLB_CA", &c.ca)
        .env("MLB_OTHER_CA", &c.other_ca)
        .env("MLB_TMP", &f.scratch)
        .env("MLB_EXPECT_BACKEND_TLS", backend_tls)
        .env("MLB_EXPECT_BACKEND_COMPRESSION", backend_compression)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn pymysql(target: Target) {
    python_with("pymysql");
    let mut cmd = script(&python(), target, "127.0.0.1");
    cmd.args(["tls_check.py", "pymysql"]);
    let _turn = turn();
    run_check("PyMySQL over TLS", cmd);
}

fn connector(target: Target, cext: bool) {
    python_with("mysql.connector");
    let mut cmd = script(&python(), target, "localhost");
    if cext {
        cmd.env("LD_LIBRARY_PATH", connector_cext_ld_path());
    }
    cmd.args(["tls_check.py", if cext { "cext" } else { "pure" }]);
    let _turn = turn();
    run_check("mysql-connector-python over TLS/compression", cmd);
}

fn php(target: Target) {
    require_php_mysql();
    // `localhost` would make mysqlnd use a unix socket.
    let mut cmd = script("php", target, "127.0.0.1");
    cmd.args([
        "-d",
        "memory_limit=1G",
        "-d",
        "mysqli.allow_local_infile=1",
        "tls_check.php",
    ]);
    let _turn = turn();
    run_check("PHP mysqli/PDO over TLS/compression", cmd);
}

fn node(target: Target) {
    let root = node_path();
    let mut cmd = script("node", target, "localhost");
    cmd.env("NODE_PATH", root).arg("tls_check.js");
    let _turn = turn();
    run_check("Node mysql2 over TLS/compression", cmd);
}

#[test]
fn pymysql_direct() {
    pymysql(Target::Direct);
}

#[test]
fn pymysql_through_proxy() {
    pymysql(Target::Proxy);
}

#[test]
fn connector_python_pure_direct() {
    connector(Target::Direct, false);
}

#[test]
fn connector_python_pure_through_proxy() {
    connector(Target::Proxy, false);
}

#[test]
fn connector_python_cext_direct() {
    connector(Target::Direct, true);
}

#[test]
fn connector_python_cext_through_proxy() {
    connector(Target::Proxy, true);
}

#[test]
fn php_mysqli_and_pdo_direct() {
    php(Target::Direct);
}

#[test]
fn php_mysqli_and_pdo_through_proxy() {
    php(Target::Proxy);
}

#[test]
fn node_mysql2_direct() {
    node(Target::Direct);
}

#[test]
fn node_mysql2_through_proxy() {
    node(Target::Proxy);
}
