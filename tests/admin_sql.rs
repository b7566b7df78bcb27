//! The SQL admin port against real MariaDB backends: the `mariadb` CLI, mysql_async, PyMySQL and
//! mysql-connector-python log in with the admin account (its hash made by the server's own
//! `PASSWORD()` / `ED25519_PASSWORD()`); a wrong password and a client's account are refused
//! there, and the admin account is refused on the proxy port; tables read with real SQL equal
//! `/backends` and `/queries` at the same moment; each command does what its HTTP twin does;
//! hostile bytes get an ERR and leave the port serving.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, tcp_opts, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;
use mysql_lb::config::{AdminAccount, AdminCredential, AdminSqlConfig, Config};

const ADMIN: &str = "radmin";
const ADMIN_PASS: &str = "admin-s3cret";

fn backends(pair: &[MariaDb; 2]) -> Vec<String> {
    pair.iter().map(MariaDb::tcp_addr).collect()
}

/// The hash a server stores for `password` (its own `PASSWORD()`).
fn native_hash(db: &MariaDb, password: &str) -> [u8; 20] {
    let text = db.root_query(&format!("SELECT PASSWORD('{password}')"));
    mysql_lb::config::parse_native_hash(text.trim()).expect("PASSWORD() prints *HEX")
}

fn with_admin(pair: &[MariaDb; 2], credential: AdminCredential) -> Config {
    let mut cfg = config(&backends(pair));
    cfg.admin_sql = Some(AdminSqlConfig {
        address: "127.0.0.1:0".parse().unwrap(),
        account: AdminAccount {
            user: ADMIN.into(),
            credential,
        },
    });
    cfg
}

fn admin_proxy(pair: &[MariaDb; 2]) -> TestProxy {
    TestProxy::start_with(with_admin(
        pair,
        AdminCredential::Native(native_hash(&pair[0], ADMIN_PASS)),
    ))
}

fn admin_addr(proxy: &TestProxy) -> SocketAddr {
    proxy.admin_sql.expect("the admin SQL port is on")
}

/// The `mariadb` CLI over TCP: batch output, no column names.
fn cli(addr: SocketAddr, user: &str, pass: &str, sql: &str) -> Output {
    let found = ["/usr/bin/mariadb", "/usr/local/bin/mariadb"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("the mariadb CLI not found: run scripts/install-deps.sh");
    Command::new(found)
        .args(["--no-defaults", "--batch", "--skip-column-names"])
        .args(["--connect-timeout=10", "--protocol=tcp", "-h", "127.0.0.1"])
        .arg(format!("-P{}", addr.port()))
        .arg(format!("--user={user}"))
        .arg(format!("--password={pass}"))
        .args(["-e", sql])
        .stdin(Stdio::null())
        .output()
        .expect("run the mariadb CLI")
}

fn ok_stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn refused_1045(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("1045"),
        "{what}: expected ERROR 1045, got {} / {err}",
        out.status
    );
}

async fn admin_conn(proxy: &TestProxy) -> mysql_async::Conn {
    let opts = tcp_opts(&admin_addr(proxy).to_string(), ADMIN, ADMIN_PASS);
    mysql_async::Conn::new(opts).await.expect("admin login")
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_connectors_log_in_and_a_wrong_password_or_a_client_account_is_refused() {
    let pair = shared_pair();
    let proxy = admin_proxy(pair);
    let addr = admin_addr(&proxy);

    let out = cli(addr, ADMIN, ADMIN_PASS, "SELECT count(*) FROM backends");
    assert_eq!(ok_stdout(&out, "CLI login"), "2");
    let out = cli(addr, ADMIN, ADMIN_PASS, "SHOW SERVERS");
    let servers = ok_stdout(&out, "SHOW SERVERS");
    for db in pair {
        assert!(servers.contains(&db.tcp_addr()), "{servers}");
    }
    refused_1045(&cli(addr, ADMIN, "wrong", "SELECT 1"), "wrong password");
    refused_1045(&cli(addr, ADMIN, "", "SELECT 1"), "no password");
    refused_1045(
        &cli(addr, BENCH_USER, BENCH_PASS, "SELECT 1"),
        "a client's account on the admin port",
    );
    refused_1045(
        &cli(proxy.addr, ADMIN, ADMIN_PASS, "SELECT 1"),
        "the admin account on the proxy port",
    );

    let mut conn = admin_conn(&proxy).await;
    let names: Vec<String> = conn
        .query("SELECT name FROM backends ORDER BY name")
        .await
        .expect("mysql_async reads a table");
    let mut expected = backends(pair);
    expected.sort();
    assert_eq!(names, expected);
    let e = conn
        .query_drop("UPDATE backends SET weight = 5")
        .await
        .expect_err("a write is refused");
    assert!(e.to_string().contains("only reads"), "{e}");
    conn.ping()
        .await
        .expect("the connection serves on after an error");
    conn.disconnect().await.unwrap();
    let e = mysql_async::Conn::new(tcp_opts(&addr.to_string(), ADMIN, "nope"))
        .await
        .expect_err("mysql_async with a wrong password");
    assert!(e.to_string().contains("1045"), "{e}");

    common::scripts::python_with("pymysql");
    let mut py = Command::new(common::scripts::python());
    py.arg(common::scripts::clients_dir().join("admin_check.py"))
        .env("MLB_ADMIN_PORT", addr.port().to_string())
        .env("MLB_ADMIN_USER", ADMIN)
        .env("MLB_ADMIN_PASS", ADMIN_PASS)
        .env("MLB_USER", BENCH_USER)
        .env("MLB_PASS", BENCH_PASS)
        .env("MLB_EXPECT_BACKENDS", "2")
        .stdin(Stdio::null());
    common::scripts::run_check("admin_check.py (PyMySQL, mysql-connector-python)", py);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ed25519_account_logs_in_with_the_cli() {
    let pair = shared_pair();
    let installed = pair[0].root_query(
        "SELECT COUNT(*) FROM information_schema.PLUGINS \
         WHERE PLUGIN_NAME = 'ed25519' AND PLUGIN_STATUS = 'ACTIVE'",
    );
    if installed.trim() == "0" {
        pair[0].root_exec("INSTALL SONAME 'auth_ed25519'");
    }
    // The plugin's library also holds the function that prints a password's public key.
    pair[0].root_exec(
        "CREATE FUNCTION IF NOT EXISTS ed25519_password RETURNS STRING SONAME 'auth_ed25519.so'",
    );
    let key = pair[0].root_query(&format!("SELECT ed25519_password('{ADMIN_PASS}')"));
    let key = mysql_lb::config::parse_ed25519_key(key.trim())
        .expect("ED25519_PASSWORD() prints 43 characters");
    let proxy = TestProxy::start_with(with_admin(pair, AdminCredential::Ed25519(key)));
    let addr = admin_addr(&proxy);
    let out = cli(
        addr,
        ADMIN,
        ADMIN_PASS,
        "SELECT count(*) FROM stats_mysql_connection_pool",
    );
    assert_eq!(ok_stdout(&out, "ed25519 login"), "2");
    refused_1045(
        &cli(addr, ADMIN, "wrong", "SELECT 1"),
        "ed25519, wrong password",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_equal_the_http_endpoint_at_the_same_moment() {
    let pair = shared_pair();
    let proxy = admin_proxy(pair);
    let mut client = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    for i in 0..7 {
        let _: Option<i64> = client
            .query_first(format!("SELECT {i} + 1 AS admin_sql_marker"))
            .await
            .unwrap();
    }
    client.disconnect().await.unwrap();
    let mut admin = admin_conn(&proxy).await;

    let (_, body) = proxy.admin_get("/queries?limit=10000");
    let http = json(&body);
    let row = http["queries"]
        .as_array()
        .and_then(|rows| {
            rows.iter().find(|r| {
                r["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("admin_sql_marker"))
            })
        })
        .unwrap_or_else(|| panic!("the marker's digest in /queries: {body}"))
        .clone();
    let digest = row["digest"].as_str().expect("a digest").to_owned();
    let sql: Vec<(i64, i64, i64, String, String)> = admin
        .query(format!(
            "SELECT count_star, sum_time, sum_rows_sent, username, digest_text \
             FROM stats_mysql_query_digest WHERE digest = '{digest}'"
        ))
        .await
        .unwrap();
    assert_eq!(sql.len(), 1, "{sql:?}");
    let (count, sum_us, rows_sent, user, text) = sql[0].clone();
    assert_eq!(count, 7);
    assert_eq!(count, row["count"].as_i64().unwrap(), "{row}");
    assert_eq!(rows_sent, 7);
    assert_eq!(user, BENCH_USER);
    assert_eq!(Some(text.as_str()), row["text"].as_str());
    let http_us = (row["sum_seconds"].as_f64().unwrap() * 1e6).round() as i64;
    assert!(
        (sum_us - http_us).abs() <= 1,
        "sum_time {sum_us} µs, /queries {http_us} µs"
    );

    let (_, body) = proxy.admin_get("/backends");
    let http = json(&body);
    for b in http["backends"].as_array().unwrap() {
        let name = b["name"].as_str().unwrap();
        let got: (i64, i64, i64, String) = admin
            .query_first(format!(
                "SELECT commands, total_connections, weight, state FROM backends \
                 WHERE name = '{name}'"
            ))
            .await
            .unwrap()
            .expect("the backend's row");
        assert_eq!(got.0, b["commands"].as_i64().unwrap(), "{name}: {b}");
        assert_eq!(
            got.1,
            b["total_connections"].as_i64().unwrap(),
            "{name}: {b}"
        );
        assert_eq!(got.2, b["weight"].as_i64().unwrap(), "{name}: {b}");
        assert_eq!(got.3, b["state"].as_str().unwrap(), "{name}: {b}");
        let pool: (i64, i64) = admin
            .query_first(format!(
                "SELECT ConnOK, Queries FROM stats_mysql_connection_pool WHERE backend = '{name}'"
            ))
            .await
            .unwrap()
            .expect("the pool row");
        assert_eq!(pool, (got.1, got.0), "{name}");
    }
    // Real SQL: a join, GROUP BY and ORDER BY over two tables.
    let joined: Vec<(String, i64)> = admin
        .query(
            "SELECT b.name, sum(d.count_star) AS n FROM backends b \
             JOIN stats_mysql_query_digest d ON d.backend = b.name \
             GROUP BY b.name ORDER BY n DESC",
        )
        .await
        .unwrap();
    assert!(
        joined.iter().map(|(_, n)| n).sum::<i64>() >= 7,
        "{joined:?}"
    );
    admin.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_does_what_its_http_twin_does() {
    let pair = shared_pair();
    let proxy = admin_proxy(pair);
    let mut admin = admin_conn(&proxy).await;
    let (a, b) = (pair[0].tcp_addr(), pair[1].tcp_addr());

    // DRAIN over SQL on a, over HTTP on b: the same state, the same answer's fields.
    let sql: (String, String, i64, i64) = admin
        .query_first(format!("DRAIN `{a}`"))
        .await
        .unwrap()
        .expect("DRAIN answers the backend's state");
    let (_, body) = proxy.admin_post(&format!("/backends/{b}/drain"), &[]);
    let http = json(&body);
    assert_eq!(sql.0, a);
    assert_eq!(sql.1, "draining");
    assert_eq!(http["admin_state"], "draining");
    assert_eq!(sql.2, http["weight"].as_i64().unwrap());
    assert_eq!(proxy.backend_entry(&a)["admin_state"], "draining");
    let states: Vec<(String, String)> = admin
        .query("SELECT backend, status FROM stats_mysql_connection_pool ORDER BY backend")
        .await
        .unwrap();
    assert!(
        states.iter().all(|(_, s)| s == "OFFLINE_SOFT"),
        "{states:?}"
    );

    for (sql_cmd, path, state) in [
        (
            format!("MAINTENANCE '{a}'"),
            format!("/backends/{b}/maintenance"),
            "maintenance",
        ),
        (
            format!("READY \"{a}\""),
            format!("/backends/{b}/ready"),
            "ready",
        ),
    ] {
        let _: Vec<mysql_async::Row> = admin.query(sql_cmd).await.unwrap();
        let (status, _) = proxy.admin_post(&path, &[]);
        assert_eq!(status, 200);
        assert_eq!(proxy.backend_entry(&a)["admin_state"], state);
        assert_eq!(proxy.backend_entry(&b)["admin_state"], state);
    }

    let _: Vec<mysql_async::Row> = admin.query(format!("WEIGHT `{a}` 7")).await.unwrap();
    let (status, _) = proxy.admin_put(&format!("/backends/{b}/weight"), &[], b"7");
    assert_eq!(status, 200);
    assert_eq!(proxy.backend_entry(&a)["weight"], 7);
    assert_eq!(proxy.backend_entry(&b)["weight"], 7);

    // The same refusals as HTTP's 400 and 404, as ERRs, and the connection serves on.
    for (bad, says) in [
        ("WEIGHT db1 0".to_owned(), "WEIGHT takes an integer"),
        ("DRAIN nosuch".to_owned(), "no backend named"),
        ("LOAD MYSQL SERVERS TO RUNTIME".to_owned(), "YAML file"),
        ("SHOW NONSENSE".to_owned(), "SHOW HELP"),
    ] {
        let e = admin.query_drop(&bad).await.expect_err(&bad);
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    let reload: Option<String> = admin.query_first("RELOAD").await.unwrap();
    assert!(
        reload.is_some_and(|r| r.contains("reloaded")),
        "RELOAD answers its outcome"
    );
    let help: Vec<(String, String)> = admin.query("SHOW HELP").await.unwrap();
    assert!(help.iter().any(|(c, _)| c == "SHOW POOLS"), "{help:?}");
    admin.disconnect().await.unwrap();
}

/// A raw connection's first packet from the admin port: (sequence id, payload).
fn read_packet(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).expect("a packet header");
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).expect("the payload");
    (head[3], payload)
}

fn err_code(payload: &[u8]) -> u16 {
    assert_eq!(payload.first(), Some(&0xFF), "an ERR packet: {payload:?}");
    u16::from_le_bytes([payload[1], payload[2]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bytes_get_an_err_and_leave_the_port_serving() {
    let pair = shared_pair();
    let proxy = admin_proxy(pair);
    let addr = admin_addr(&proxy);
    let open = || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (seq, greeting) = read_packet(&mut s);
        assert_eq!((seq, greeting[0]), (0, 10), "a protocol-10 greeting");
        s
    };

    // A handshake response that is garbage: ERR 1043.
    let mut s = open();
    s.write_all(&[5, 0, 0, 1, 1, 2, 3, 4, 5]).unwrap();
    let (_, p) = read_packet(&mut s);
    assert_eq!(err_code(&p), 1043);

    // A length past the port's bound: ERR 1153 before the payload is read.
    let mut s = open();
    s.write_all(&[0xFF, 0xFF, 0xFF, 1]).unwrap();
    let (_, p) = read_packet(&mut s);
    assert_eq!(err_code(&p), 1153);

    // Past the connection bound: ERR 1040 before any greeting.
    let held: Vec<TcpStream> = (0..mysql_lb::control::admin_sql::MAX_CONNECTIONS)
        .map(|_| open())
        .collect();
    let mut over = TcpStream::connect(addr).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (_, p) = read_packet(&mut over);
    assert_eq!(err_code(&p), 1040);
    drop(held);

    // Garbage after a good login: an ERR per command, and the session goes on.
    let mut conn = loop {
        match mysql_async::Conn::new(tcp_opts(&addr.to_string(), ADMIN, ADMIN_PASS)).await {
            Ok(c) => break c,
            // The held connections' slots come back as their tasks see the close.
            Err(e) if e.to_string().contains("1040") => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("admin login after the abuse: {e}"),
        }
    };
    for bad in [
        "SELECT * FROM nosuch",
        "SELECT 1; SELECT 2",
        "ATTACH DATABASE '/tmp/mysql-lb-admin-attack.db' AS x",
        "SELECT load_extension('/nonexistent.so')",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    ] {
        conn.query_drop(bad).await.expect_err(bad);
    }
    assert!(!std::path::Path::new("/tmp/mysql-lb-admin-attack.db").exists());
    let n: Option<i64> = conn
        .query_first("SELECT count(*) FROM backends")
        .await
        .unwrap();
    assert_eq!(n, Some(2));
    conn.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_new_transactions_until_resume_and_lets_running_ones_end() {
    let pair = shared_pair();
    let mut cfg = with_admin(
        pair,
        AdminCredential::Native(native_hash(&pair[0], ADMIN_PASS)),
    );
    cfg.backends.truncate(1);
    cfg.pooling.mode = mysql_lb::config::PoolingMode::Transaction;
    cfg.pooling.wait_timeout = Duration::from_secs(2);
    let proxy = TestProxy::start_with(cfg);
    let mut admin = admin_conn(&proxy).await;

    let mut running = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    // Connected before the pause: a connector's opening queries are transactions too.
    let mut waiting = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    running.query_drop("BEGIN").await.unwrap();
    let _: Option<i64> = running.query_first("SELECT 1").await.unwrap();

    let paused: (String, String, i64) = admin
        .query_first("PAUSE default")
        .await
        .unwrap()
        .expect("PAUSE answers the pool");
    assert_eq!(
        paused,
        ("default".into(), "1".into(), 1),
        "one transaction running"
    );
    // A new transaction waits at its start.
    let started = Instant::now();
    let held = tokio::spawn(async move {
        let v: Option<i64> = waiting.query_first("SELECT 2").await.unwrap();
        (v, waiting)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "a new transaction waits while paused");
    // The running one runs to its end, and the pool's connections go idle.
    let _: Option<i64> = running.query_first("SELECT 3").await.unwrap();
    running.query_drop("COMMIT").await.unwrap();
    let shown: Vec<mysql_async::Row> = admin.query("SHOW POOLS").await.unwrap();
    assert_eq!(shown.len(), 1);
    let (sv_active, paused_flag): (i64, i64) = admin
        .query_first(
            "SELECT open - idle, (SELECT count(*) FROM paused_pools) FROM stats_mysql_connection_pool",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (sv_active, paused_flag),
        (0, 1),
        "no connection in use while paused"
    );
    let resumed: (String, String, i64) = admin.query_first("RESUME").await.unwrap().unwrap();
    assert_eq!(resumed.1, "0");
    let (v, waiting) = held.await.unwrap();
    assert_eq!(v, Some(2));
    assert!(started.elapsed() >= Duration::from_millis(500));
    waiting.disconnect().await.unwrap();

    // Not resumed within wait_timeout: an ERR in the transaction's place, and the session goes on.
    let _: Vec<mysql_async::Row> = admin.query("PAUSE").await.unwrap();
    let e = running
        .query_drop("SELECT 4")
        .await
        .expect_err("paused past wait_timeout");
    assert!(e.to_string().contains("is paused"), "{e}");
    let _: Vec<mysql_async::Row> = admin.query("RESUME default").await.unwrap();
    let _: Vec<mysql_async::Row> = admin.query("RESUME").await.unwrap();
    let v: Option<i64> = running.query_first("SELECT 5").await.unwrap();
    assert_eq!(v, Some(5));
    running.disconnect().await.unwrap();
    let e = admin
        .query_drop("PAUSE nosuch")
        .await
        .expect_err("unknown pool");
    assert!(e.to_string().contains("no pool named"), "{e}");
    admin.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_works_as_on_the_client_leg_and_is_required_when_the_client_leg_requires_it() {
    let pair = shared_pair();
    let c = common::tls_server::certs();
    let mut cfg = with_admin(
        pair,
        AdminCredential::Native(native_hash(&pair[0], ADMIN_PASS)),
    );
    cfg.tls = Some(mysql_lb::config::ClientTls {
        cert: c.server.cert.clone(),
        key: c.server.key.clone(),
        ca: None,
        verify_client: false,
        min_version: mysql_lb::config::TlsVersion::V1_2,
        require: true,
        cipher_suites: mysql_lb::config::default_cipher_suites(),
    });
    let proxy = TestProxy::start_with(cfg);
    let addr = admin_addr(&proxy).to_string();
    let ssl = mysql_async::SslOpts::default()
        .with_root_certs(vec![c.ca.clone().into()])
        .with_disable_built_in_roots(true);
    let opts =
        mysql_async::OptsBuilder::from_opts(tcp_opts(&addr, ADMIN, ADMIN_PASS)).ssl_opts(ssl);
    let mut admin = mysql_async::Conn::new(opts)
        .await
        .expect("admin login over TLS");
    let n: Option<i64> = admin
        .query_first("SELECT count(*) FROM backends")
        .await
        .unwrap();
    assert_eq!(n, Some(2));
    // A wrong password over TLS is refused as in clear.
    admin.disconnect().await.unwrap();
    let ssl = mysql_async::SslOpts::default()
        .with_root_certs(vec![c.ca.clone().into()])
        .with_disable_built_in_roots(true);
    let wrong = mysql_async::OptsBuilder::from_opts(tcp_opts(&addr, ADMIN, "nope")).ssl_opts(ssl);
    let e = mysql_async::Conn::new(wrong)
        .await
        .expect_err("wrong password over TLS");
    assert!(e.to_string().contains("1045"), "{e}");
    // The mariadb CLI, over OpenSSL, verifying the server's certificate.
    let admin_at = admin_addr(&proxy);
    let found = ["/usr/bin/mariadb", "/usr/local/bin/mariadb"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("the mariadb CLI not found: run scripts/install-deps.sh");
    let out = Command::new(found)
        .args(["--no-defaults", "--batch", "--skip-column-names"])
        .args(["--connect-timeout=10", "--protocol=tcp", "-h", "127.0.0.1"])
        .arg(format!("-P{}", admin_at.port()))
        .arg(format!("--user={ADMIN}"))
        .arg(format!("--password={ADMIN_PASS}"))
        .arg("--ssl")
        .arg(format!("--ssl-ca={}", c.ca.display()))
        .arg("--ssl-verify-server-cert")
        .args([
            "-e",
            "SELECT count(*) FROM backends; SHOW GLOBAL STATUS LIKE 'Client\\_Connections%'",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run the mariadb CLI");
    let shown = ok_stdout(&out, "the CLI over TLS (OpenSSL)");
    assert!(shown.starts_with('2'), "{shown}");
    assert!(shown.contains("Client_Connections_connected"), "{shown}");
    // In clear: refused before any login, as the client leg refuses one.
    let e = mysql_async::Conn::new(tcp_opts(&addr, ADMIN, ADMIN_PASS))
        .await
        .expect_err("plaintext under tls.require");
    assert!(e.to_string().contains("3159"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_stops_a_sessions_statement_or_connection_over_the_kill_account() {
    let pair = shared_pair();
    for db in pair {
        common::create_kill_accounts(db);
    }
    let mut cfg = with_admin(
        pair,
        AdminCredential::Native(native_hash(&pair[0], ADMIN_PASS)),
    );
    cfg.kill = common::kill_account();
    let proxy = TestProxy::start_with(cfg);
    let mut admin = admin_conn(&proxy).await;

    let mut victim = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let id = victim.id();
    let clients: Vec<(i64, Option<String>)> = admin
        .query("SELECT SessionID, user FROM stats_mysql_processlist")
        .await
        .unwrap();
    assert!(
        clients
            .iter()
            .any(|(s, u)| *s == i64::from(id) && u.as_deref() == Some(BENCH_USER)),
        "SHOW CLIENTS lists the session by its id: {clients:?}"
    );
    let sleeping = tokio::spawn(async move {
        let started = Instant::now();
        let r: Result<Option<i64>, _> = victim.query_first("SELECT SLEEP(30)").await;
        (r, started.elapsed(), victim)
    });
    common::wait_until("the victim sleeps", || {
        pair.iter().any(|db| {
            db.root_query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(30)'")
                .trim()
                != "0"
        })
    });
    let killed: Vec<mysql_async::Row> = admin.query(format!("KILL QUERY {id}")).await.unwrap();
    assert_eq!(killed.len(), 1);
    let (r, took, mut victim) = sleeping.await.unwrap();
    assert!(took < Duration::from_secs(10), "{took:?}");
    match r {
        Err(e) => assert!(e.to_string().contains("1317"), "{e}"),
        Ok(v) => assert_eq!(v, Some(1), "an interrupted SLEEP returns 1"),
    }
    // The session goes on after its statement was stopped; KILL CONNECTION ends it.
    let v: Option<i64> = victim.query_first("SELECT 5").await.unwrap();
    assert_eq!(v, Some(5));
    let _: Vec<mysql_async::Row> = admin.query(format!("KILL {id}")).await.unwrap();
    victim
        .query_drop("SELECT 6")
        .await
        .expect_err("its connection was killed");

    let e = admin
        .query_drop("KILL 12345")
        .await
        .expect_err("no such session");
    assert!(e.to_string().contains("no session with id"), "{e}");
    admin.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_show_command_answers_with_its_columns() {
    let pair = shared_pair();
    let proxy = admin_proxy(pair);
    let mut client = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut admin = admin_conn(&proxy).await;
    for (show, first_column, at_least) in [
        ("SHOW POOLS", "pool", 2),
        ("SHOW SERVERS", "name", 2),
        ("SHOW CLIENTS", "SessionID", 1),
        ("SHOW PROCESSLIST", "SessionID", 1),
        ("SHOW STATS", "pool", 2),
        ("SHOW CONFIG", "key", 5),
        ("SHOW RULES", "rule_id", 0),
        ("SHOW TABLES", "Tables_in_main", 10),
        ("SHOW STATUS", "Variable_name", 10),
        ("SHOW VARIABLES LIKE 'version%'", "Variable_name", 2),
        ("SHOW DATABASES", "Database", 1),
        ("SHOW WARNINGS", "Level", 0),
        ("SHOW HELP", "command", 10),
    ] {
        let result = admin
            .query_iter(show)
            .await
            .unwrap_or_else(|e| panic!("{show}: {e}"));
        let columns: Vec<String> = result
            .columns_ref()
            .iter()
            .map(|c| c.name_str().into_owned())
            .collect();
        let rows: Vec<mysql_async::Row> = result.collect_and_drop().await.unwrap();
        assert_eq!(
            columns.first().map(String::as_str),
            Some(first_column),
            "{show}: {columns:?}"
        );
        assert!(rows.len() >= at_least, "{show}: {} rows", rows.len());
    }
    // The session the client holds is among the clients, by its id.
    let id = client.id();
    let listed: Option<i64> = admin
        .query_first(format!(
            "SELECT count(*) FROM stats_mysql_processlist WHERE SessionID = {id}"
        ))
        .await
        .unwrap();
    assert_eq!(listed, Some(1));
    client.query_drop("SELECT 1").await.unwrap();
    client.disconnect().await.unwrap();
    admin.disconnect().await.unwrap();
}
