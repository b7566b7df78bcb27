//! Routing into named pools (issue 12) against real MariaDB servers: by user, schema, client
//! network and listener, first match wins, the rest to `default_pool`; and the deferred connect
//! that makes user and schema routes possible, where mysql-lb greets the client itself and the
//! server's AuthSwitchRequest carries the real exchange.
//!
//! Pool "default" (`backends:`) is the first shared server (A), pool "reporting" the second (B);
//! `SELECT @@port` tells which one served a session. Every proxy is built from YAML text with
//! `Config::from_yaml_str`, so the tests go through the documented keys. What the server says
//! (its 1045, its unknown-user error) must reach the client unchanged, exactly as it does
//! directly; what mysql-lb itself refuses starts with `mysql-lb:`. The other client libraries run
//! tests/clients/route_check.{py,php,js}.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use common::mariadb::{
    closed_port, named_port, shared_pair, tcp_opts, MariaDb, BENCH_PASS, BENCH_USER,
};
use common::proxy::TestProxy;
use common::rawclient::{
    handshake_response, parse_err, parse_greeting, RawClient, CLIENT_LONG_FLAG,
    CLIENT_LONG_PASSWORD, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    CLIENT_TRANSACTIONS,
};
use common::scripts::{
    clients_dir, connector_cext_ld_path, node_path, python, python_with, require_php_mysql,
    run_check,
};
use common::tls_server::certs;
use mysql_async::prelude::Queryable;
use mysql_async::{ChangeUserOpts, Opts, OptsBuilder, SslOpts};
use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use mysql_lb::config::Config;

/// Every wait on a peer or a process.
const DEADLINE: Duration = Duration::from_secs(20);

/// Accounts on both servers, all privileges, `'name'@'%'`, mysql_native_password.
const NATIVE_USERS: [(&str, &str); 7] = [
    ("alice", "alicepw"),
    ("bob", "bobpw"),
    ("carol", "carolpw"),
    ("dave", "davepw"),
    ("etl_load", "etlpw"),
    ("rt_native", "natpw"),
    ("rt_sb", "sbpw"),
];
/// An ed25519 account on both servers.
const ED_USER: &str = "rt_ed";
const ED_PASS: &str = "edpw";
/// A schema only server B has: a session that reached A by mistake fails on it.
const B_ONLY_DB: &str = "sbroute";

fn pass_of(user: &str) -> &'static str {
    if user == BENCH_USER {
        return BENCH_PASS;
    }
    NATIVE_USERS
        .iter()
        .find(|(u, _)| *u == user)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("no test account {user}"))
}

/// The shared pair with this file's accounts and schemas, set up once per test binary.
fn servers() -> &'static [MariaDb; 2] {
    static ONCE: Once = Once::new();
    let pair = shared_pair();
    ONCE.call_once(|| {
        for db in pair {
            let installed = db.root_query(
                "SELECT COUNT(*) FROM information_schema.PLUGINS \
                 WHERE PLUGIN_NAME = 'ed25519' AND PLUGIN_STATUS = 'ACTIVE'",
            );
            if installed.trim() == "0" {
                db.root_exec("INSTALL SONAME 'auth_ed25519'");
            }
            let mut sql = String::from(
                "CREATE DATABASE IF NOT EXISTS reports; CREATE DATABASE IF NOT EXISTS staging; \
                 CREATE DATABASE IF NOT EXISTS lua_db; ",
            );
            for (user, pass) in NATIVE_USERS {
                sql += &format!(
                    "DROP USER IF EXISTS '{user}'@'%'; CREATE USER '{user}'@'%' IDENTIFIED VIA \
                     mysql_native_password USING PASSWORD('{pass}'); \
                     GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%'; "
                );
            }
            sql += &format!(
                "DROP USER IF EXISTS '{ED_USER}'@'%'; CREATE USER '{ED_USER}'@'%' IDENTIFIED VIA \
                 ed25519 USING PASSWORD('{ED_PASS}'); GRANT ALL PRIVILEGES ON *.* TO '{ED_USER}'@'%';"
            );
            db.root_exec(&sql);
        }
        pair[1].root_exec(&format!("CREATE DATABASE IF NOT EXISTS {B_ONLY_DB}"));
    });
    pair
}

fn ports() -> (u16, u16) {
    let [a, b] = servers();
    (a.port, b.port)
}

// ---------------------------------------------------------------------------------------------
// Configuration

/// `backends:` (pool "default": server A as `a1`) and pool "reporting" (server B as `r1`).
fn two_pools() -> String {
    let [a, b] = servers();
    format!(
        "backends:\n  - {{name: a1, address: \"{}\"}}\npools:\n  reporting:\n    backends:\n      \
         - {{name: r1, address: \"{}\"}}\n",
        a.tcp_addr(),
        b.tcp_addr()
    )
}

/// YAML for a test proxy: `body` after a free listener and admin port unless it sets them.
fn yaml(body: &str) -> String {
    let mut text = String::new();
    if !body.contains("listen:") {
        text += "listen: [\"127.0.0.1:0\"]\n";
    }
    if !body.contains("admin_address:") {
        text += "admin_address: \"127.0.0.1:0\"\n";
    }
    text += "connect_timeout: 2s\nshutdown_timeout: 5s\n";
    text + body
}

fn parse(body: &str) -> Config {
    let text = yaml(body);
    Config::from_yaml_str(&text)
        .unwrap_or_else(|e| panic!("the routing config is refused: {e}\n---\n{text}"))
}

fn start(body: &str) -> TestProxy {
    TestProxy::start_with(parse(body))
}

// ---------------------------------------------------------------------------------------------
// Clients

fn opts(addr: &str, user: &str, pass: &str, db: Option<&str>) -> Opts {
    OptsBuilder::from_opts(tcp_opts(addr, user, pass))
        .db_name(db)
        .into()
}

/// Logs in with mysql_async and returns (backend port, CURRENT_USER()).
async fn lands(opts: Opts, what: &str) -> (u16, String) {
    let mut conn = tokio::time::timeout(DEADLINE, mysql_async::Conn::new(opts))
        .await
        .unwrap_or_else(|_| panic!("{what}: no login within {DEADLINE:?}"))
        .unwrap_or_else(|e| panic!("{what}: login failed: {e}"));
    let row: (u16, String) = conn
        .query_first("SELECT @@port, CURRENT_USER()")
        .await
        .unwrap_or_else(|e| panic!("{what}: query: {e}"))
        .expect("a row");
    conn.disconnect().await.expect("disconnect");
    row
}

/// The server's refusal of a mysql_async login: (code, SQLSTATE, message).
async fn refusal(opts: Opts, what: &str) -> (u16, String, String) {
    let e = tokio::time::timeout(DEADLINE, mysql_async::Conn::new(opts))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {DEADLINE:?}"))
        .err()
        .unwrap_or_else(|| panic!("{what}: the login succeeded"));
    match e {
        mysql_async::Error::Server(s) => (s.code, s.state, s.message),
        other => panic!("{what}: expected an ERR packet, got {other}"),
    }
}

/// A raw client's login to `addr`, from `from_ip` if given (any 127.x.y.z on Linux): the port
/// of the server that answered `SELECT @@port`.
async fn raw_lands(
    addr: SocketAddr,
    from_ip: Option<&str>,
    user: &str,
    db: Option<&str>,
) -> Result<u16, String> {
    let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    if let Some(ip) = from_ip {
        let local: SocketAddr = format!("{ip}:0").parse().expect("an IPv4 address");
        socket
            .bind(local)
            .map_err(|e| format!("bind {local}: {e}"))?;
    }
    let login = async {
        let stream = socket
            .connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let mut client = RawClient::login(Box::new(stream), user, pass_of(user), db, 0, 0).await?;
        let rows = client.query_text("SELECT @@port").await?;
        client.quit().await?;
        rows.first()
            .and_then(|r| r.first())
            .and_then(|v| v.as_deref())
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("no port in {rows:?}"))
    };
    tokio::time::timeout(DEADLINE, login)
        .await
        .map_err(|_| format!("no login within {DEADLINE:?}"))?
}

/// The value of the sample of `name` whose labels include every pair in `labels`.
fn metric(proxy: &TestProxy, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let text = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 metrics");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The `mariadb` CLI over TCP: `--no-defaults`, batch output without column names.
fn cli(addr: &str, user: &str, pass: &str, extra: &[&str], sql: &str) -> Output {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    Command::new("mariadb")
        .args([
            "--no-defaults",
            "--protocol=tcp",
            "--batch",
            "--skip-column-names",
        ])
        .args(["--connect-timeout=10", "-h", host, "-P", port])
        .arg(format!("--user={user}"))
        .arg(format!("--password={pass}"))
        .args(extra)
        .args(["-e", sql])
        .stdin(Stdio::null())
        .output()
        .expect("run the mariadb CLI (scripts/install-deps.sh installs it)")
}

fn cli_ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: the mariadb CLI failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `SELECT @@port, CURRENT_USER()` through the CLI: (port, user).
fn cli_lands(addr: &str, user: &str, pass: &str, extra: &[&str], what: &str) -> (u16, String) {
    let out = cli(addr, user, pass, extra, "SELECT @@port, CURRENT_USER()");
    let text = cli_ok(&out, what);
    let first = text.lines().next().unwrap_or_default();
    let (port, who) = first
        .split_once('\t')
        .unwrap_or_else(|| panic!("{what}: two columns expected: {text}"));
    (port.parse().expect("a port"), who.to_string())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

// ---------------------------------------------------------------------------------------------
// Routes

#[tokio::test]
async fn routes_choose_pools_by_user_schema_client_network_and_listener_first_match_wins() {
    let (a, b) = ports();
    // Named in a route before the proxy starts.
    let second = named_port();
    let proxy = start(&format!(
        "listen: [\"127.0.0.1:0\", \"127.0.0.1:{second}\"]\n{}routes:\n\
         \x20 - {{user: bob, pool: reporting}}\n\
         \x20 - {{schema: reports, pool: reporting}}\n\
         \x20 - {{user: alice, pool: default}}\n\
         \x20 - {{user: \"etl_*\", schema: staging, pool: reporting}}\n\
         \x20 - {{client: 127.0.0.2/32, pool: reporting}}\n\
         \x20 - {{listener: \"127.0.0.1:{second}\", pool: reporting}}\n\
         default_pool: default\n",
        two_pools()
    ));
    let main = proxy.addr;
    let other: SocketAddr = format!("127.0.0.1:{second}").parse().unwrap();
    // (user, schema, expected server): to the first listener, from 127.0.0.1.
    let plain = [
        ("alice", None, a),               // alice's route
        ("bob", None, b),                 // bob's route
        ("alice", Some("reports"), b),    // the schema route comes before alice's
        (BENCH_USER, Some("reports"), b), // the schema route
        (BENCH_USER, Some("test"), a),    // no route: default_pool
        (BENCH_USER, None, a),            // no route, no schema: default_pool
        ("etl_load", Some("staging"), b), // glob user and schema both match
        ("etl_load", Some("test"), a),    // the glob user without its schema
    ];
    // (listener, from, user, expected server), without a schema.
    let placed = [
        (main, Some("127.0.0.2"), BENCH_USER, b), // the client network
        (main, Some("127.0.0.2"), "alice", a),    // alice's route comes before the CIDR
        (main, Some("127.0.0.3"), BENCH_USER, a), // outside the /32
        (other, None, BENCH_USER, b),             // the second listener
        (other, None, "alice", a),                // alice's route comes before the listener's
    ];
    let cases = plain
        .into_iter()
        .map(|(user, db, want)| (main, None, user, db, want))
        .chain(placed.map(|(to, from, user, want)| (to, from, user, None, want)));
    let mut on = HashMap::new();
    for (listener, from, user, db, want) in cases {
        let got = raw_lands(listener, from, user, db)
            .await
            .unwrap_or_else(|e| panic!("{user} {db:?} from {from:?} to {listener}: {e}"));
        assert_eq!(
            got, want,
            "{user} with schema {db:?} from {from:?} to {listener}: A is {a}, B is {b}"
        );
        *on.entry(got).or_insert(0.0) += 1.0;
    }
    // mysql_async (its own handshake code) the same way.
    let addr = proxy.addr_string();
    assert_eq!(lands(opts(&addr, "bob", "bobpw", None), "bob").await.0, b);
    let (port, who) = lands(opts(&addr, "alice", "alicepw", Some("reports")), "alice").await;
    assert_eq!((port, who.as_str()), (b, "alice@%"));
    *on.entry(b).or_insert(0.0) += 2.0;

    assert_pool_metrics(&proxy, on.get(&a).copied(), on.get(&b).copied());
}

/// Sessions counted per pool, one `mysql_lb_backend_pool` per backend, `"pool"` in `/backends`.
fn assert_pool_metrics(proxy: &TestProxy, on_default: Option<f64>, on_reporting: Option<f64>) {
    for (pool, count) in [("default", on_default), ("reporting", on_reporting)] {
        assert_eq!(
            metric(proxy, "mysql_lb_routed_sessions_total", &[("pool", pool)]),
            count,
            "sessions routed to {pool}"
        );
    }
    for (backend, pool) in [("a1", "default"), ("r1", "reporting")] {
        let labels = [("backend", backend), ("pool", pool)];
        assert_eq!(metric(proxy, "mysql_lb_backend_pool", &labels), Some(1.0));
    }
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON from /backends");
    let pools: Vec<(String, String)> = json["backends"]
        .as_array()
        .expect("a backends array")
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or("?").into(),
                b["pool"].as_str().unwrap_or("?").into(),
            )
        })
        .collect();
    assert_eq!(
        pools,
        [
            ("a1".into(), "default".into()),
            ("r1".into(), "reporting".into())
        ],
        "{body}"
    );
}

/// Listeners `[::1]:0`, 127.0.0.1 on a [`named_port`] (routes name it) and a unix socket in
/// `dir`: (YAML, the v4 address, the socket path).
fn three_listeners(dir: &Path, name: &str) -> (String, String, std::path::PathBuf) {
    let v4 = format!("127.0.0.1:{}", named_port());
    let sock = dir.join(format!("{name}.sock"));
    let yaml = format!(
        "listen: [\"[::1]:0\", \"{v4}\", \"unix:{}\"]\n",
        sock.display()
    );
    (yaml, v4, sock)
}

fn unix_opts(sock: &Path, user: &str) -> Opts {
    OptsBuilder::default()
        .socket(Some(sock.display().to_string()))
        .user(Some(user))
        .pass(Some(pass_of(user)))
        .into()
}

#[tokio::test]
async fn v6_clients_match_v6_networks_only_and_unix_clients_match_no_network() {
    let (a, b) = ports();
    let dir = tempfile::tempdir().unwrap();
    let carol = |addr: &str| opts(addr, "carol", "carolpw", None);

    // Every network, v4 and v6: still no unix client matches.
    let (listen, v4, sock) = three_listeners(dir.path(), "every");
    let proxy = start(&format!(
        "{listen}{}routes:\n  - {{client: 0.0.0.0/0, pool: reporting}}\n  \
         - {{client: \"::/0\", pool: reporting}}\n",
        two_pools()
    ));
    assert!(proxy.addr.is_ipv6(), "the first TCP listener is [::1]");
    assert_eq!(lands(carol(&proxy.addr_string()), "v6").await.0, b);
    assert_eq!(lands(carol(&v4), "v4").await.0, b);
    assert_eq!(
        lands(unix_opts(&sock, "carol"), "unix").await.0,
        a,
        "unix: no CIDR"
    );
    drop(proxy);

    // A v4 network does not take a v6 client; a unix listener route takes unix clients.
    let (listen, v4, sock) = three_listeners(dir.path(), "v4only");
    let proxy = start(&format!(
        "{listen}{}routes:\n  - {{client: 0.0.0.0/0, pool: reporting}}\n  \
         - {{listener: \"unix:{}\", pool: reporting}}\n",
        two_pools(),
        sock.display()
    ));
    assert_eq!(lands(carol(&proxy.addr_string()), "v6").await.0, a);
    assert_eq!(lands(carol(&v4), "v4").await.0, b);
    assert_eq!(lands(unix_opts(&sock, "carol"), "unix listener").await.0, b);
}

#[tokio::test]
async fn a_pool_balances_its_own_backends_by_its_own_policy_and_weights() {
    let (a, b) = ports();
    let [sa, sb] = servers();
    let proxy = start(&format!(
        "{}  spread:\n    policy: round_robin\n    backends:\n      \
         - {{name: s1, address: \"{}\", weight: 3}}\n      \
         - {{name: s2, address: \"{}\", weight: 1}}\nbalancer: {{policy: least_connections}}\n\
         routes:\n  - {{user: dave, pool: spread}}\n",
        two_pools(),
        sa.tcp_addr(),
        sb.tcp_addr()
    ));
    let addr = proxy.addr_string();
    let mut seen: HashMap<u16, usize> = HashMap::new();
    for _ in 0..8 {
        let (port, _) = lands(opts(&addr, "dave", "davepw", None), "dave").await;
        *seen.entry(port).or_default() += 1;
    }
    assert_eq!(
        (seen.get(&a).copied(), seen.get(&b).copied()),
        (Some(6), Some(2)),
        "weights 3:1 over 8 logins in pool spread: {seen:?}"
    );
    // Pool "default" still has its one backend; the pool's policy did not leak into it.
    for _ in 0..3 {
        assert_eq!(
            lands(opts(&addr, "carol", "carolpw", None), "carol")
                .await
                .0,
            a
        );
    }
}

#[tokio::test]
async fn default_pool_takes_unmatched_clients_and_without_one_they_are_refused() {
    let (a, b) = ports();
    let proxy = start(&format!(
        "{}routes:\n  - {{user: alice, pool: default}}\ndefault_pool: reporting\n",
        two_pools()
    ));
    let addr = proxy.addr_string();
    assert_eq!(
        lands(opts(&addr, "alice", "alicepw", None), "alice")
            .await
            .0,
        a
    );
    assert_eq!(
        lands(opts(&addr, "carol", "carolpw", None), "carol")
            .await
            .0,
        b
    );
    drop(proxy);

    // No `backends:`, so no pool "default": a client no route takes is refused by mysql-lb.
    let [_, sb] = servers();
    let proxy = start(&format!(
        "pools:\n  reporting:\n    backends:\n      - {{name: r1, address: \"{}\"}}\n\
         routes:\n  - {{user: bob, pool: reporting}}\n",
        sb.tcp_addr()
    ));
    let addr = proxy.addr_string();
    assert_eq!(lands(opts(&addr, "bob", "bobpw", None), "bob").await.0, b);
    let (code, _, message) = refusal(opts(&addr, "carol", "carolpw", None), "carol").await;
    assert!(
        message.starts_with("mysql-lb:"),
        "unmatched client without a default pool: {code} {message}"
    );
    assert_eq!(
        lands(opts(&addr, "bob", "bobpw", None), "bob again")
            .await
            .0,
        b
    );
}

// ---------------------------------------------------------------------------------------------
// Deferred connect

/// Routes that name users and a schema, so `connect_mode: auto` means deferred.
const DEFERRED_ROUTES: &str = "routes:\n\
  - {user: bob, pool: reporting}\n\
  - {user: rt_native, pool: reporting}\n\
  - {user: rt_ed, pool: reporting}\n\
  - {user: rt_sb, pool: reporting}\n\
  - {schema: reports, pool: reporting}\n";

/// Two pools behind [`DEFERRED_ROUTES`] plus `extra`, ready for deferred clients.
async fn deferred_proxy(extra: &str) -> TestProxy {
    let proxy = start(&format!("{}{DEFERRED_ROUTES}{extra}", two_pools()));
    let addr = proxy.addr_string();
    blocking(move || wait_deferred_ready(&addr)).await;
    proxy
}

/// Until mysql-lb knows a backend's greeting, a deferred client may be refused with "no backend
/// has greeted yet" (health checks learn it soon after start): waits that out, and fails on any
/// other refusal.
fn wait_deferred_ready(addr: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let out = cli(addr, BENCH_USER, BENCH_PASS, &[], "SELECT 1");
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("no backend has greeted yet") && Instant::now() < deadline,
            "a deferred login through {addr} failed: {err}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn native_and_ed25519_accounts_log_in_deferred_immediate_and_directly() {
    let (a, b) = ports();
    let deferred = deferred_proxy("").await;
    let immediate = start(&format!("{}connect_mode: immediate\n", two_pools()));
    let (d, i, direct) = (
        deferred.addr_string(),
        immediate.addr_string(),
        servers()[1].tcp_addr(),
    );
    blocking(move || {
        let ed = format!("{ED_USER}@%");
        let native = "rt_native@%".to_string();
        for (addr, want, how) in [
            (&d, b, "deferred"),
            (&i, a, "immediate"),
            (&direct, b, "direct"),
        ] {
            let got = cli_lands(addr, ED_USER, ED_PASS, &[], &format!("ed25519 {how}"));
            assert_eq!(got, (want, ed.clone()), "ed25519 account, {how}");
            let got = cli_lands(addr, "rt_native", "natpw", &[], &format!("native {how}"));
            assert_eq!(got, (want, native.clone()), "native account, {how}");
            // Opening with the other plugin: the server switches the client to the right one.
            let first = ["--default-auth=client_ed25519"];
            let got = cli_lands(addr, "rt_native", "natpw", &first, &format!("switch {how}"));
            assert_eq!(
                got,
                (want, native.clone()),
                "native account opened as ed25519, {how}"
            );
        }
    })
    .await;
    for (addr, want, how) in [
        (deferred.addr_string(), b, "deferred"),
        (immediate.addr_string(), a, "immediate"),
        (servers()[1].tcp_addr(), b, "direct"),
    ] {
        let got = lands(opts(&addr, "rt_native", "natpw", Some("test")), how).await;
        assert_eq!(got, (want, "rt_native@%".to_string()), "mysql_async, {how}");
    }
}

#[tokio::test]
async fn wrong_passwords_and_unknown_users_get_the_servers_own_error_unchanged() {
    let proxy = deferred_proxy("").await;
    let via = proxy.addr_string();
    let [sa, sb] = servers();
    let (da, db) = (sa.tcp_addr(), sb.tcp_addr());
    // (user, password, schema, the server the route leads to)
    let cases = [
        ("bob", "wrong", None, &db),
        ("bob", "", None, &db),
        ("nobody_here", "x", None, &da),
        ("nobody_here", "x", Some("reports"), &db),
    ];
    for (user, pass, schema, server) in cases {
        let what = format!("{user} / {pass:?} / {schema:?}");
        let direct = refusal(opts(server, user, pass, schema), &format!("{what} direct")).await;
        let proxied = refusal(opts(&via, user, pass, schema), &format!("{what} via")).await;
        assert_eq!(direct.0, 1045, "{what}: {direct:?}");
        assert_eq!(proxied, direct, "{what}: the server's own ERR, unchanged");
    }
    let (via2, db2) = (via.clone(), db.clone());
    blocking(move || {
        let direct = cli(&db2, ED_USER, "nope", &[], "SELECT 1");
        let proxied = cli(&via2, ED_USER, "nope", &[], "SELECT 1");
        assert!(!direct.status.success() && !proxied.status.success());
        let (d, p) = (
            String::from_utf8_lossy(&direct.stderr),
            String::from_utf8_lossy(&proxied.stderr),
        );
        assert!(d.contains("ERROR 1045 (28000)"), "{d}");
        assert_eq!(p, d, "ed25519 wrong password through deferred routing");
    })
    .await;
    // Nothing is left behind: the right password works at once.
    assert_eq!(
        lands(opts(&via, "bob", "bobpw", None), "bob").await.0,
        sb.port
    );
}

#[tokio::test]
async fn tls_on_the_client_leg_with_deferred_connect() {
    let (a, b) = ports();
    let c = certs();
    let proxy = deferred_proxy(&format!(
        "tls: {{cert: \"{}\", key: \"{}\", require: true}}\n",
        c.server.cert.display(),
        c.server.key.display()
    ))
    .await;
    let addr = proxy.addr_string();
    let ca = format!("--ssl-ca={}", c.ca.display());
    let cli_addr = addr.clone();
    blocking(move || {
        let tls = ["--ssl", ca.as_str(), "--ssl-verify-server-cert"];
        for (user, pass, want) in [
            ("bob", "bobpw", b),
            (ED_USER, ED_PASS, b),
            ("carol", "carolpw", a),
        ] {
            let what = format!("{user} over TLS");
            assert_eq!(
                cli_lands(&cli_addr, user, pass, &tls, &what),
                (want, format!("{user}@%")),
                "{what}"
            );
            // The CLI's own account of its connection (a client command: alone in -e).
            let status = cli_ok(&cli(&cli_addr, user, pass, &tls, "status"), &what);
            let ssl = status
                .lines()
                .find(|l| l.starts_with("SSL:"))
                .unwrap_or("no SSL: line");
            assert!(ssl.contains("Cipher in use"), "{user}: {ssl}");
        }
    })
    .await;
    let ssl = SslOpts::default()
        .with_root_certs(vec![c.ca.clone().into()])
        .with_disable_built_in_roots(true);
    for (user, pass, want) in [("bob", "bobpw", b), ("carol", "carolpw", a)] {
        let o = OptsBuilder::from_opts(opts(&addr, user, pass, None)).ssl_opts(ssl.clone());
        let got = lands(o.into(), &format!("mysql_async {user} over TLS")).await;
        assert_eq!(got, (want, format!("{user}@%")));
    }
    // `require: true`: the same client in plaintext is refused by mysql-lb.
    let (_, _, message) = refusal(opts(&addr, "bob", "bobpw", None), "plaintext bob").await;
    assert!(message.starts_with("mysql-lb:"), "{message}");
}

#[tokio::test]
async fn every_backend_of_a_pool_down_gets_1105_naming_the_pool_and_the_other_pool_serves() {
    let (a, _) = ports();
    let [sa, _] = servers();
    let (r1, r2) = (closed_port(), closed_port());
    let down = format!(
        "backends:\n  - {{name: a1, address: \"{}\"}}\npools:\n  reporting:\n    backends:\n      \
         - {{name: r1, address: \"{}\"}}\n      - {{name: r2, address: \"{}\"}}\n",
        sa.tcp_addr(),
        r1.address(),
        r2.address()
    );
    // Deferred: bob is routed by user.
    let proxy = start(&format!(
        "{down}routes:\n  - {{user: bob, pool: reporting}}\n"
    ));
    let addr = proxy.addr_string();
    let wait = addr.clone();
    blocking(move || wait_deferred_ready(&wait)).await;
    for _ in 0..2 {
        let (code, _, message) = refusal(opts(&addr, "bob", "bobpw", None), "bob").await;
        assert_eq!(code, 1105, "{message}");
        assert!(
            message.starts_with("mysql-lb:") && message.contains("reporting"),
            "names the pool: {message}"
        );
        assert_eq!(
            lands(opts(&addr, "carol", "carolpw", None), "carol")
                .await
                .0,
            a
        );
    }
    drop(proxy);

    // Immediate: a listener route, refused before any greeting.
    let second = named_port();
    let proxy = start(&format!(
        "listen: [\"127.0.0.1:0\", \"127.0.0.1:{second}\"]\n{down}routes:\n  \
         - {{listener: \"127.0.0.1:{second}\", pool: reporting}}\n"
    ));
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", second))
        .await
        .expect("connect the second listener");
    let err = tokio::time::timeout(DEADLINE, RawClient::greeted(Box::new(stream)))
        .await
        .expect("an answer in time")
        .err()
        .expect("refused");
    assert!(
        err.starts_with("1105: mysql-lb:") && err.contains("reporting"),
        "names the pool: {err}"
    );
    assert_eq!(raw_lands(proxy.addr, None, "carol", None).await, Ok(a));
}

#[tokio::test]
async fn a_refused_session_is_logged_with_its_pool() {
    let [sa, _] = servers();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    let r1 = closed_port();
    std::fs::write(
        &path,
        format!(
            "listen: [\"127.0.0.1:0\"]\nadmin_address: \"off\"\nlog: {{level: info}}\n\
             backends:\n  - {{name: a1, address: \"{}\"}}\npools:\n  reporting:\n    backends:\n      \
             - {{name: r1, address: \"{}\"}}\nroutes:\n  - {{user: bob, pool: reporting}}\n",
            sa.tcp_addr(),
            r1.address()
        ),
    )
    .unwrap();
    let mut d =
        common::daemon::Daemon::start(&["--config".into(), path.display().to_string()], None);
    let addr = d.proxy_addr().to_string();
    let wait = addr.clone();
    blocking(move || wait_deferred_ready(&wait)).await;
    let (code, _, _) = refusal(opts(&addr, "bob", "bobpw", None), "bob").await;
    assert_eq!(code, 1105);
    let line = blocking(move || d.wait_for_line("refused: ")).await;
    assert!(
        line.contains("reporting"),
        "the log line names the pool: {line}"
    );
}

#[tokio::test]
async fn the_first_deferred_client_of_a_fresh_proxy_succeeds_or_gets_a_clear_err_and_the_next_succeeds(
) {
    let (a, _) = ports();
    let proxy = start(&format!(
        "{}connect_mode: deferred\nhealth_check: {{interval: 0s}}\n",
        two_pools()
    ));
    let first = raw_lands(proxy.addr, None, "carol", None).await;
    eprintln!("the first deferred client of a fresh proxy: {first:?}");
    match &first {
        Ok(port) => assert_eq!(*port, a),
        Err(e) => assert!(
            e.split_once(": ").is_some_and(
                |(code, msg)| code.parse::<u16>().is_ok() && msg.starts_with("mysql-lb:")
            ),
            "the first client got neither a session nor a mysql-lb ERR: {e}"
        ),
    }
    assert_eq!(
        raw_lands(proxy.addr, None, "carol", None).await,
        Ok(a),
        "the second client (the first got {first:?})"
    );
}

#[tokio::test]
async fn the_lua_hook_sees_user_schema_and_pool_and_may_choose_a_backend_of_another_pool() {
    let (a, b) = ports();
    let [sa, sb] = servers();
    let script = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
    // Backend indices: pool "default" first (a1 = 1), then the pools in file order (r1 = 2),
    // whatever the order of the keys in the file.
    std::fs::write(
        script.path(),
        r#"
function connect_server()
  local c = proxy.connection
  if #proxy.global.backends ~= 2 then
    error("expected 2 backends, got " .. #proxy.global.backends)
  end
  if c.client.username == "carol" and c.pool == "default" then
    c.backend_ndx = 2
  elseif c.client.default_db == "lua_db" and c.pool == "reporting" then
    c.backend_ndx = 1
  end
end
"#,
    )
    .unwrap();
    let proxy = start(&format!(
        "pools:\n  reporting:\n    backends:\n      - {{name: r1, address: \"{}\"}}\n\
         backends:\n  - {{name: a1, address: \"{}\"}}\n\
         balancer: {{script: \"{}\"}}\nroutes:\n  - {{user: dave, pool: reporting}}\n",
        sb.tcp_addr(),
        sa.tcp_addr(),
        script.path().display()
    ));
    let addr = proxy.addr_string();
    let wait = addr.clone();
    blocking(move || wait_deferred_ready(&wait)).await;
    let cases = [
        (
            "carol",
            None,
            b,
            "the script moves carol from pool default to r1",
        ),
        ("dave", None, b, "dave's route, the script leaves it"),
        (
            "dave",
            Some("lua_db"),
            a,
            "the script sees default_db and pool reporting",
        ),
        (
            "alice",
            Some("lua_db"),
            a,
            "pool default and lua_db: the script leaves it",
        ),
        ("alice", None, a, "no route, no script choice"),
    ];
    for (user, db, want, why) in cases {
        let got = lands(opts(&addr, user, pass_of(user), db), user).await;
        assert_eq!(got.0, want, "{user} {db:?}: {why}");
    }
    for reason in mysql_lb::backends::balancer::script::ErrorReason::ALL {
        assert_eq!(
            proxy.state.backends().script_errors(reason),
            0,
            "{reason:?}"
        );
    }
}

/// A hand-made login with mysql_native_password that counts the AuthSwitchRequests.
struct CountedLogin {
    greeting_nonce: Vec<u8>,
    /// (plugin, nonce) of each AuthSwitchRequest, in order.
    switches: Vec<(String, Vec<u8>)>,
    port: u16,
    user: String,
}

async fn login_counting_switches(
    addr: SocketAddr,
    user: &str,
    pass: &str,
    removed_caps: u32,
) -> Result<CountedLogin, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut client = RawClient::greeted(Box::new(stream)).await?;
    let greeting = parse_greeting(&client.greeting_payload)?;
    let caps = (CLIENT_LONG_PASSWORD
        | CLIENT_LONG_FLAG
        | CLIENT_PROTOCOL_41
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH)
        & greeting.caps
        & !removed_caps;
    client.caps = caps;
    let auth = scramble_native(&greeting.nonce, pass.as_bytes()).map_or(Vec::new(), |s| s.to_vec());
    let response = handshake_response(caps, user, &auth, None, "mysql_native_password");
    client.send_packet(1, &response).await?;
    let mut switches = Vec::new();
    for _ in 0..4 {
        let (seq, reply) = client.read_packet().await?;
        match reply.first() {
            Some(0x00) => {
                let rows = client.query_text("SELECT @@port, CURRENT_USER()").await?;
                let row = rows.first().ok_or("no row")?;
                let cell = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
                return Ok(CountedLogin {
                    greeting_nonce: greeting.nonce,
                    switches,
                    port: cell(0).parse().map_err(|e| format!("port: {e}"))?,
                    user: cell(1),
                });
            }
            Some(0xff) => return Err(parse_err(&reply)),
            Some(0xfe) => {
                let rest = &reply[1..];
                let nul = rest.iter().position(|&b| b == 0).ok_or("no plugin name")?;
                let plugin = String::from_utf8_lossy(&rest[..nul]).into_owned();
                let data = &rest[nul + 1..];
                let nonce = data.strip_suffix(&[0]).unwrap_or(data).to_vec();
                let answer =
                    scramble_native(&nonce, pass.as_bytes()).map_or(Vec::new(), |s| s.to_vec());
                switches.push((plugin, nonce));
                client.send_packet(seq.wrapping_add(1), &answer).await?;
            }
            _ => return Err(format!("unexpected auth packet {reply:02x?}")),
        }
    }
    Err("no OK after 4 auth packets".into())
}

#[tokio::test]
async fn a_deferred_login_shows_the_client_exactly_one_auth_switch_with_a_fresh_nonce() {
    let (a, b) = ports();
    let deferred = deferred_proxy("").await;
    for (user, pass, want) in [("bob", "bobpw", b), ("carol", "carolpw", a)] {
        let login = login_counting_switches(deferred.addr, user, pass, 0)
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert_eq!(
            (login.port, login.user.as_str()),
            (want, format!("{user}@%").as_str())
        );
        assert_eq!(
            login.greeting_nonce.len(),
            20,
            "mysql-lb's own 20-byte nonce"
        );
        assert_eq!(login.switches.len(), 1, "{user}: {:?}", login.switches);
        let (plugin, nonce) = &login.switches[0];
        assert_eq!(plugin, "mysql_native_password");
        assert_eq!(nonce.len(), 20);
        assert_ne!(
            nonce, &login.greeting_nonce,
            "the server's fresh nonce, not the greeting's"
        );
    }
    // Immediate mode relays the server's own greeting: no switch for the same login.
    let immediate = start(&format!("{}connect_mode: immediate\n", two_pools()));
    let login = login_counting_switches(immediate.addr, "bob", "bobpw", 0)
        .await
        .expect("immediate login");
    assert_eq!((login.port, login.switches.len()), (a, 0));
}

#[tokio::test]
async fn a_client_without_plugin_auth_is_refused_in_deferred_mode_only() {
    let (a, _) = ports();
    let deferred = deferred_proxy("").await;
    for user in ["bob", "carol"] {
        let err = login_counting_switches(deferred.addr, user, pass_of(user), CLIENT_PLUGIN_AUTH)
            .await
            .err()
            .unwrap_or_else(|| panic!("{user} without CLIENT_PLUGIN_AUTH logged in"));
        // docs/src/routing.md documents 1251 (ER_NOT_SUPPORTED_AUTH_MODE), as a server says it.
        assert!(err.starts_with("1251: mysql-lb:"), "{user}: {err}");
    }
    let immediate = start(&format!("{}connect_mode: immediate\n", two_pools()));
    let login = login_counting_switches(immediate.addr, "carol", "carolpw", CLIENT_PLUGIN_AUTH)
        .await
        .expect("the same client in immediate mode");
    assert_eq!(login.port, a);
}

#[tokio::test]
async fn kill_query_is_mapped_in_deferred_mode_and_refused_from_another_pool() {
    let (_, b) = ports();
    let proxy = deferred_proxy("").await;
    let addr = proxy.addr_string();
    let login = |user: &'static str| {
        let addr = addr.clone();
        async move {
            RawClient::connect_tcp(&addr, user, pass_of(user), None, 0, 0)
                .await
                .unwrap_or_else(|e| panic!("{user}: {e}"))
        }
    };
    let mut victim = login("bob").await;
    let id = victim.connection_id;
    assert!(
        mysql_lb::backends::kill::is_proxy_id(id),
        "deferred greetings carry a proxy id: {id}"
    );
    let port = victim.query_text("SELECT @@port").await.unwrap();
    assert_eq!(port, vec![vec![Some(b.to_string())]]);
    let marker = "routing-kill-marker";
    common::start_sleeping(&mut victim, marker).await;

    // From pool default's server: refused, nothing killed.
    let mut stranger = login("carol").await;
    let err = stranger
        .query_text(&format!("KILL QUERY {id}"))
        .await
        .expect_err("a KILL across pools");
    assert!(err.starts_with("1095") && err.contains("mysql-lb"), "{err}");
    assert!(common::running_on_shared_backends(marker), "still sleeping");

    let mut killer = login("bob").await;
    let started = Instant::now();
    killer
        .query_results(&format!("KILL QUERY {id}"))
        .await
        .expect("KILL QUERY from the same pool");
    let err = victim.read_results().await.expect_err("interrupted");
    assert!(err.starts_with("1317"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "interrupted at once"
    );
    assert_eq!(
        victim.query_text("SELECT 'alive'").await.unwrap(),
        vec![vec![Some("alive".to_string())]]
    );
}

/// (backend port, CURRENT_USER()) of a running session.
async fn now(conn: &mut mysql_async::Conn) -> (u16, String) {
    conn.query_first("SELECT @@port, CURRENT_USER()")
        .await
        .expect("query")
        .expect("a row")
}

#[tokio::test]
async fn change_user_and_reset_inside_a_deferred_session_stay_on_its_backend() {
    let (_, b) = ports();
    let proxy = deferred_proxy("").await;
    let mut conn = mysql_async::Conn::new(opts(&proxy.addr_string(), "bob", "bobpw", None))
        .await
        .expect("bob logs in");
    assert_eq!(now(&mut conn).await, (b, "bob@%".into()));
    // alice's own sessions go to pool default; a change of user keeps the backend.
    for (user, pass) in [("alice", "alicepw"), ("rt_native", "natpw")] {
        conn.change_user(
            ChangeUserOpts::default()
                .with_user(Some(user.into()))
                .with_pass(Some(pass.into())),
        )
        .await
        .unwrap_or_else(|e| panic!("COM_CHANGE_USER to {user}: {e}"));
        assert_eq!(now(&mut conn).await, (b, format!("{user}@%")));
    }
    conn.reset().await.expect("COM_RESET_CONNECTION");
    assert_eq!(now(&mut conn).await.0, b);
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn sessions_keep_their_backend_across_a_reload_that_changes_routes() {
    let (a, b) = ports();
    let before = format!(
        "{}routes:\n  - {{user: bob, pool: reporting}}\n",
        two_pools()
    );
    let after = format!(
        "{}routes:\n  - {{user: carol, pool: reporting}}\n",
        two_pools()
    );
    let proxy = start(&before);
    let addr = proxy.addr_string();
    let wait = addr.clone();
    blocking(move || wait_deferred_ready(&wait)).await;
    let mut held = mysql_async::Conn::new(opts(&addr, "bob", "bobpw", None))
        .await
        .unwrap();
    assert_eq!(now(&mut held).await.0, b);
    assert_eq!(
        lands(opts(&addr, "carol", "carolpw", None), "carol")
            .await
            .0,
        a
    );

    mysql_lb::control::reload::apply(&proxy.state, &parse(&after)).expect("the reload is accepted");
    assert_eq!(
        now(&mut held).await.0,
        b,
        "bob's running session keeps its backend"
    );
    assert_eq!(
        lands(opts(&addr, "bob", "bobpw", None), "new bob").await.0,
        a
    );
    assert_eq!(
        lands(opts(&addr, "carol", "carolpw", None), "new carol")
            .await
            .0,
        b
    );
    assert_eq!(now(&mut held).await.0, b);
    held.disconnect().await.unwrap();
}

/// sysbench's number after `label` (first on the line that starts with it).
fn sysbench_number(report: &str, label: &str) -> Option<f64> {
    report.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(label)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn sysbench(port: u16, user: &str, pass: &str, args: &[&str]) -> String {
    let mut cmd = Command::new("sysbench");
    cmd.arg("oltp_point_select")
        .args(["--db-driver=mysql", "--mysql-host=127.0.0.1"])
        .arg(format!("--mysql-port={port}"))
        .arg(format!("--mysql-user={user}"))
        .arg(format!("--mysql-password={pass}"))
        .arg(format!("--mysql-db={B_ONLY_DB}"))
        .args(["--tables=1", "--table-size=1000"])
        .args(args)
        .stdin(Stdio::null());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run sysbench ({e}): run scripts/install-deps.sh"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sysbench {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn commands_per_backend(proxy: &TestProxy) -> HashMap<String, u64> {
    proxy
        .state
        .backends()
        .backends()
        .iter()
        .map(|b| (b.name.clone(), b.stats.total_commands()))
        .collect()
}

#[tokio::test]
async fn sysbench_point_selects_through_deferred_routing_reach_only_the_routed_pool() {
    let proxy = deferred_proxy("").await;
    let b = servers()[1].port;
    let port = proxy.addr.port();
    let before = commands_per_backend(&proxy);
    let report = blocking(move || {
        // The schema exists on B only: a session routed anywhere else fails at once.
        sysbench(b, BENCH_USER, BENCH_PASS, &["prepare"]);
        sysbench(
            port,
            "rt_sb",
            "sbpw",
            &["--threads=4", "--time=3", "--events=0", "run"],
        )
    })
    .await;
    let reads = sysbench_number(&report, "read:").unwrap_or(0.0);
    let errors =
        sysbench_number(&report, "ignored errors:").or(sysbench_number(&report, "errors:"));
    assert!(reads > 100.0, "point selects ran:\n{report}");
    assert_eq!(errors, Some(0.0), "{report}");
    let commands = commands_per_backend(&proxy);
    assert!(
        commands.get("r1").copied().unwrap_or(0) as f64 >= reads,
        "{commands:?}"
    );
    assert_eq!(
        commands.get("a1"),
        before.get("a1"),
        "nothing reached pool default: {commands:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Other client libraries: tests/clients/route_check.{py,php,js}

/// One deferred proxy for the client scripts.
fn script_proxy() -> &'static TestProxy {
    static PROXY: OnceLock<TestProxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        let proxy = start(&format!("{}{DEFERRED_ROUTES}", two_pools()));
        wait_deferred_ready(&proxy.addr_string());
        proxy
    })
}

/// One script at a time: the machine has two cores.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `program` in tests/clients with the MLB_* settings route_check.* reads.
fn route_script(program: &str) -> Command {
    let proxy = script_proxy();
    let (a, b) = ports();
    let mut cmd = Command::new(program);
    cmd.current_dir(clients_dir())
        .env("MLB_PROXY_HOST", "127.0.0.1")
        .env("MLB_PROXY_PORT", proxy.addr.port().to_string())
        .env("MLB_PORT_A", a.to_string())
        .env("MLB_PORT_B", b.to_string())
        .env("MLB_USER", BENCH_USER)
        .env("MLB_PASS", BENCH_PASS)
        .env("MLB_ROUTED_USER", "bob")
        .env("MLB_ROUTED_PASS", "bobpw")
        .env("MLB_ROUTED_SCHEMA", "reports")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn pymysql_through_deferred_routing() {
    python_with("pymysql");
    let mut cmd = route_script(&python());
    cmd.args(["route_check.py", "pymysql"]);
    let _turn = turn();
    run_check("PyMySQL routing", cmd);
}

#[test]
fn connector_python_pure_through_deferred_routing() {
    python_with("mysql.connector");
    let mut cmd = route_script(&python());
    cmd.args(["route_check.py", "pure"]);
    let _turn = turn();
    run_check("mysql-connector-python (pure) routing", cmd);
}

#[test]
fn connector_python_c_extension_through_deferred_routing() {
    let ld_path = connector_cext_ld_path();
    let mut cmd = route_script(&python());
    cmd.env("LD_LIBRARY_PATH", ld_path)
        .args(["route_check.py", "cext"]);
    let _turn = turn();
    run_check("mysql-connector-python (C extension) routing", cmd);
}

#[test]
fn php_mysqli_and_pdo_through_deferred_routing() {
    require_php_mysql();
    let mut cmd = route_script("php");
    cmd.arg("route_check.php");
    let _turn = turn();
    run_check("PHP mysqli/PDO routing", cmd);
}

#[test]
fn node_mysql2_through_deferred_routing() {
    let root = node_path();
    let mut cmd = route_script("node");
    cmd.env("NODE_PATH", root).arg("route_check.js");
    let _turn = turn();
    run_check("Node mysql2 routing", cmd);
}
