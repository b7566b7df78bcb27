//! Every client library of the test suite through a transaction-mode pool: PyMySQL, MySQL
//! Connector/Python (pure and C extension), PHP mysqli + PDO_mysql, Node mysql2, MariaDB
//! Connector/J, Perl DBD::MariaDB and the `mariadb` CLI. Each runs its usual script (connect, a
//! few queries, transactions, a server-side prepared statement where the library has one, quit)
//! on several connections at once, more than the pool's `max_server_connections`, so logins wait
//! for slots and sessions share connections. Each script checks its own results; the test then
//! checks every row it wrote is there, that the pool was used as [`Expect`] says (every
//! library's sessions share between transactions, their server-side prepared statements
//! included, which pin nothing; only the CLI's SQL `PREPARE` pins), and that every connection is back or closed once the clients
//! are gone.
//!
//! The scripts are written to a scratch directory and read their settings from the environment
//! (PORT, U, P, TABLE, WORKER, WORKERS, ROUNDS); scripts/install-deps.sh installs the libraries.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::mariadb::{scratch_dir, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::TestProxy;
use common::scripts::{
    connector_cext_ld_path, node_path, python, python_with, require, require_php_mysql, run_check,
};

/// Connections of one client at once, and rounds of queries and a transaction on each.
const WORKERS: usize = 4;
const ROUNDS: usize = 3;
/// Fewer than `WORKERS`: logins wait for slots, sessions share.
const MAX_SERVER_CONNECTIONS: usize = 2;

/// PyMySQL (no server-side prepares: its parameters are interpolated on the client) or MySQL
/// Connector/Python (`pure` or `cext`, with a prepared cursor).
const PYTHON: &str = r#"
import os, sys
E = os.environ
MODE = sys.argv[1]
T, W, ROUNDS = E["TABLE"], int(E["WORKER"]), int(E["ROUNDS"])
args = dict(host="127.0.0.1", port=int(E["PORT"]), user=E["U"], password=E["P"],
            database="test", autocommit=True)
if MODE == "pymysql":
    import pymysql
    conn = pymysql.connect(ssl_disabled=True, **args)
    def prepared_cursor():
        return conn.cursor()
else:
    import mysql.connector
    conn = mysql.connector.connect(use_pure=(MODE == "pure"), ssl_disabled=True, **args)
    def prepared_cursor():
        return conn.cursor(prepared=True)

def q(sql, params=None, cur=None):
    cur = cur or conn.cursor()
    cur.execute(sql, params)
    rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
    cur.close()
    return rows

def expect(got, want, what):
    if got != want:
        sys.exit(f"worker {W}: {what}: got {got!r}, want {want!r}")

for r in range(ROUNDS):
    k = W * 1000 + r
    expect(q("SELECT 1"), [(1,)], "SELECT 1")
    q("BEGIN")
    q(f"INSERT INTO {T} VALUES (%s, %s)", (k, f"py{k}"))
    expect(q(f"SELECT COUNT(*) FROM {T} WHERE id = %s", (k,)), [(1,)], "own row in the transaction")
    q("COMMIT")
    expect(q(f"SELECT v FROM {T} WHERE id = %s", (k,)), [(f"py{k}",)], "committed row")
got = q(f"SELECT v FROM {T} WHERE id = %s", (W * 1000,), prepared_cursor())
expect(got, [(f"py{W * 1000}",)], "prepared statement")
conn.close()
"#;

/// mysqli (server-side prepare) then PDO with emulated prepares off.
const PHP: &str = r#"<?php
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$t = getenv("TABLE"); $w = (int) getenv("WORKER"); $rounds = (int) getenv("ROUNDS");
function fail($m) { global $w; fwrite(STDERR, "worker $w: $m\n"); exit(1); }
$db = new mysqli("127.0.0.1", getenv("U"), getenv("P"), "test", (int) getenv("PORT"));
for ($r = 0; $r < $rounds; $r++) {
    $k = $w * 1000 + $r;
    if ($db->query("SELECT 1")->fetch_row()[0] != 1) fail("SELECT 1");
    $db->begin_transaction();
    $db->query("INSERT INTO $t VALUES ($k, 'php$k')");
    if ($db->query("SELECT COUNT(*) FROM $t WHERE id = $k")->fetch_row()[0] != 1) fail("own row");
    $db->commit();
}
$st = $db->prepare("SELECT v FROM $t WHERE id = ?");
$k = $w * 1000;
$st->bind_param("i", $k);
$st->execute();
$st->bind_result($v);
$st->fetch();
if ($v !== "php$k") fail("mysqli prepared statement: $v");
$st->close();
$db->close();

$pdo = new PDO("mysql:host=127.0.0.1;port=" . getenv("PORT") . ";dbname=test", getenv("U"),
    getenv("P"), [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_EMULATE_PREPARES => false]);
$k = $w * 1000 + 500;
if ($pdo->query("SELECT 1")->fetchColumn() != 1) fail("PDO SELECT 1");
$pdo->beginTransaction();
$pdo->exec("INSERT INTO $t VALUES ($k, 'pdo$k')");
$pdo->commit();
$s = $pdo->prepare("SELECT v FROM $t WHERE id = ?");
$s->execute([$k]);
if ($s->fetchColumn() !== "pdo$k") fail("PDO prepared statement");
$pdo = null;
"#;

/// mysql2: `query` interpolates on the client, `execute` prepares on the server.
const NODE: &str = r#"
const mysql = require('mysql2/promise');
const E = process.env, T = E.TABLE;
async function worker(w) {
  const c = await mysql.createConnection({host: '127.0.0.1', port: +E.PORT, user: E.U,
    password: E.P, database: 'test'});
  for (let r = 0; r < +E.ROUNDS; r++) {
    const k = w * 1000 + r;
    const [one] = await c.query('SELECT 1 AS x');
    if (one[0].x !== 1) throw new Error(`worker ${w}: SELECT 1 gave ${one[0].x}`);
    await c.beginTransaction();
    await c.query(`INSERT INTO ${T} VALUES (?, ?)`, [k, 'node' + k]);
    const [n] = await c.query(`SELECT COUNT(*) AS n FROM ${T} WHERE id = ?`, [k]);
    if (n[0].n !== 1) throw new Error(`worker ${w}: own row count ${n[0].n}`);
    await c.commit();
  }
  const [rows] = await c.execute(`SELECT v FROM ${T} WHERE id = ?`, [w * 1000]);
  if (rows[0].v !== 'node' + w * 1000) throw new Error(`worker ${w}: prepared gave ${rows[0].v}`);
  await c.ping();
  await c.end();
}
Promise.all([...Array(+E.WORKERS).keys()].map(worker))
  .catch(e => { console.error(e); process.exit(1); });
"#;

/// Connector/J with server-side prepares, one thread per connection.
const JAVA: &str = r#"
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;

public class PoolMix {
    static final String T = System.getenv("TABLE");

    public static void main(String[] args) throws Exception {
        int workers = Integer.parseInt(System.getenv("WORKERS"));
        String url = "jdbc:mariadb://127.0.0.1:" + System.getenv("PORT")
            + "/test?useServerPrepStmts=true&connectTimeout=10000";
        ExecutorService pool = Executors.newFixedThreadPool(workers);
        List<Future<Object>> all = new ArrayList<>();
        for (int w = 0; w < workers; w++) {
            final int id = w;
            all.add(pool.submit(() -> { run(url, id); return null; }));
        }
        for (Future<Object> f : all) f.get();
        pool.shutdown();
    }

    static void run(String url, int w) throws Exception {
        int rounds = Integer.parseInt(System.getenv("ROUNDS"));
        try (Connection c = DriverManager.getConnection(url, System.getenv("U"), System.getenv("P"))) {
            for (int r = 0; r < rounds; r++) {
                int k = w * 1000 + r;
                try (Statement s = c.createStatement()) {
                    try (ResultSet rs = s.executeQuery("SELECT 1")) {
                        rs.next();
                        if (rs.getInt(1) != 1) throw new IllegalStateException("SELECT 1");
                    }
                    c.setAutoCommit(false);
                    s.executeUpdate("INSERT INTO " + T + " VALUES (" + k + ", 'java" + k + "')");
                    c.commit();
                    c.setAutoCommit(true);
                }
            }
            try (PreparedStatement p = c.prepareStatement("SELECT v FROM " + T + " WHERE id = ?")) {
                p.setInt(1, w * 1000);
                try (ResultSet rs = p.executeQuery()) {
                    rs.next();
                    if (!rs.getString(1).equals("java" + w * 1000))
                        throw new IllegalStateException("prepared gave " + rs.getString(1));
                }
            }
            if (!c.isValid(10)) throw new IllegalStateException("isValid() false");
        }
    }
}
"#;

/// DBD::MariaDB: text protocol, then one server-side prepared statement.
const PERL: &str = r#"
use strict;
use warnings;
use DBI;
my ($t, $w, $rounds) = ($ENV{TABLE}, $ENV{WORKER}, $ENV{ROUNDS});
my $dbh = DBI->connect("DBI:MariaDB:database=test;host=127.0.0.1;port=$ENV{PORT}",
    $ENV{U}, $ENV{P}, {RaiseError => 1, PrintError => 0, AutoCommit => 1});
for my $r (0 .. $rounds - 1) {
    my $k = $w * 1000 + $r;
    my ($one) = $dbh->selectrow_array("SELECT 1");
    die "worker $w: SELECT 1 gave $one\n" unless $one == 1;
    $dbh->begin_work;
    $dbh->do("INSERT INTO $t VALUES ($k, 'perl$k')");
    my ($n) = $dbh->selectrow_array("SELECT COUNT(*) FROM $t WHERE id = $k");
    die "worker $w: own row count $n\n" unless $n == 1;
    $dbh->commit;
}
my $sth = $dbh->prepare("SELECT v FROM $t WHERE id = ?", {mariadb_server_prepare => 1});
$sth->execute($w * 1000);
my ($v) = $sth->fetchrow_array;
die "worker $w: prepared gave $v\n" unless $v eq "perl" . ($w * 1000);
$sth->finish;
$dbh->disconnect;
"#;

/// The database of this binary's tests.
fn db() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| MariaDb::start("pool-clients"))
}

/// A proxy whose default pool shares at most `MAX_SERVER_CONNECTIONS`.
fn pooled(backend: &str) -> TestProxy {
    let mut config = common::proxy::config(&[backend.to_owned()]);
    let (idle, wait) = (Duration::from_secs(5), Duration::from_secs(20));
    common::pooling::transaction_mode(&mut config, MAX_SERVER_CONNECTIONS, idle, wait);
    TestProxy::start_with(config)
}

/// A fresh table `test.<name>` (id, v) for one client's rows.
fn table(name: &str) -> String {
    db().root_exec(&format!(
        "DROP TABLE IF EXISTS test.{name}; \
         CREATE TABLE test.{name} (id INT PRIMARY KEY, v VARCHAR(40))"
    ));
    name.to_owned()
}

/// A script's text in a scratch file.
fn script_file(name: &str, text: &str) -> PathBuf {
    let dir = scratch_dir("pooling-clients");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the client script");
    path
}

/// The command with the settings every script reads.
fn client(program: &str, proxy: &TestProxy, table: &str, worker: usize) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PORT", proxy.addr.port().to_string())
        .env("U", BENCH_USER)
        .env("P", BENCH_PASS)
        .env("TABLE", table)
        .env("WORKER", worker.to_string())
        .env("WORKERS", WORKERS.to_string())
        .env("ROUNDS", ROUNDS.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `WORKERS` processes of one client at once.
fn run_workers(what: &str, make: impl Fn(usize) -> Command + Sync) {
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let cmd = make(w);
            s.spawn(move || run_check(&format!("{what} worker {w}"), cmd));
        }
    });
}

/// What the pool of `backend` counted: connections taken from it, pins by reason.
fn pool_counters(proxy: &TestProxy, backend: &str) -> (f64, BTreeMap<String, f64>) {
    let acquired = proxy
        .series(&format!(
            "mysql_lb_pool_acquired_total{{backend=\"{backend}\",pool=\"default\"}}"
        ))
        .unwrap_or(0.0);
    let metrics = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 metrics");
    let pins = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("mysql_lb_pool_pins_total{"))
        .filter_map(|l| {
            let reason = l.split("reason=\"").nth(1)?.split('"').next()?;
            let n: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((reason.to_owned(), n))
        })
        .collect();
    (acquired, pins)
}

/// PyMySQL, Connector/Python and DBD::MariaDB send `SET NAMES ..` at connect, Connector/J
/// `set autocommit=1, sql_mode = concat(@@sql_mode, ..)`: replayable settings (see
/// `sql::pins::replayable`), which become the session's state instead of pinning it, so these
/// sessions share as the others do.
const SET_NAMES: Expect = Expect::Shares { acquired: 8 };

/// How a client's sessions use the pool in step 1.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// They give their connections back between statements and transactions: at least this
    /// many acquisitions, and no pin but SQL `PREPARE`'s (a server-side prepared statement is
    /// shared, not pinned).
    Shares { acquired: usize },
}

/// Checks what every client test checks once its workers are done: `rows` rows in `table`,
/// the pool used as `expect` says, and no connection left in use.
fn check_pool(what: &str, proxy: &TestProxy, table: &str, rows: usize, expect: Expect) {
    let backend = db().tcp_addr();
    let n: usize = db()
        .root_query(&format!("SELECT COUNT(*) FROM test.{table}"))
        .trim()
        .parse()
        .expect("a count");
    assert_eq!(n, rows, "{what}: rows written");
    let (acquired, pins) = pool_counters(proxy, &backend);
    eprintln!("{what}: acquired_total {acquired}, pins {pins:?}");
    match expect {
        Expect::Shares { acquired: least } => {
            assert!(
                acquired >= least as f64,
                "{what}: {acquired} acquisitions, want {least} or more"
            );
            // Only SQL-level `PREPARE` (the CLI's script) pins: its statement lives on the
            // connection by name.
            assert!(
                pins.iter().all(|(r, &n)| n == 0.0 || r == "prepare"),
                "{what}: pinned: {pins:?}"
            );
        }
    }
    let pool = proxy.state.server_pools.get(&backend).expect("a pool");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counts = pool.counts();
        assert!(
            counts.open <= MAX_SERVER_CONNECTIONS,
            "{what}: {counts:?} over the limit"
        );
        if counts.open == counts.idle && counts.waiting == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {counts:?} after every client quit, want every open one idle"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn python_client(mode: &str, table_name: &str, ld_path: Option<&str>, expect: Expect) {
    let proxy = pooled(&db().tcp_addr());
    let t = table(table_name);
    let path = script_file("pool_mix.py", PYTHON);
    run_workers(mode, |w| {
        let mut cmd = client(&python(), &proxy, &t, w);
        if let Some(ld) = ld_path {
            cmd.env("LD_LIBRARY_PATH", ld);
        }
        cmd.arg(&path).arg(mode);
        cmd
    });
    check_pool(mode, &proxy, &t, WORKERS * ROUNDS, expect);
}

#[test]
fn pymysql_sessions_share_with_their_connect_settings_replayed() {
    python_with("pymysql");
    python_client("pymysql", "pc_pymysql", None, SET_NAMES);
}

#[test]
fn mysql_connector_python_pure_sessions_share_with_their_connect_settings_replayed() {
    python_with("mysql.connector");
    python_client("pure", "pc_connector_pure", None, SET_NAMES);
}

#[test]
fn mysql_connector_python_c_extension_sessions_share_with_their_connect_settings_replayed() {
    let ld_path = connector_cext_ld_path();
    python_client("cext", "pc_connector_cext", Some(&ld_path), SET_NAMES);
}

#[test]
fn php_mysqli_and_pdo_sessions_share_server_connections() {
    require_php_mysql();
    let proxy = pooled(&db().tcp_addr());
    let t = table("pc_php");
    let path = script_file("pool_mix.php", PHP);
    run_workers("php", |w| {
        let mut cmd = client("php", &proxy, &t, w);
        cmd.arg(&path);
        cmd
    });
    // mysqli and PDO: two sessions per worker.
    check_pool(
        "php",
        &proxy,
        &t,
        WORKERS * (ROUNDS + 1),
        Expect::Shares {
            acquired: WORKERS * ROUNDS,
        },
    );
}

#[test]
fn node_mysql2_connections_share_server_connections() {
    let root = node_path();
    let proxy = pooled(&db().tcp_addr());
    let t = table("pc_node");
    let path = script_file("pool_mix.js", NODE);
    let mut cmd = client("node", &proxy, &t, 0);
    cmd.env("NODE_PATH", &root).arg(&path);
    run_check("node mysql2", cmd);
    check_pool(
        "node",
        &proxy,
        &t,
        WORKERS * ROUNDS,
        Expect::Shares {
            acquired: WORKERS * ROUNDS,
        },
    );
}

#[test]
fn connector_j_sessions_share_with_their_connect_settings_replayed() {
    require(
        "java",
        &["-version"],
        "apt-get install default-jdk-headless",
    );
    let jar = Path::new("/usr/share/java/mariadb-java-client.jar");
    assert!(
        jar.exists(),
        "{} not found: apt-get install libmariadb-java",
        jar.display()
    );
    let proxy = pooled(&db().tcp_addr());
    let t = table("pc_java");
    // The source launcher wants the file named after its public class.
    let path = script_file("PoolMix.java", JAVA);
    let mut cmd = client("java", &proxy, &t, 0);
    cmd.env("CLASSPATH", jar).arg(&path);
    run_check("java connector/j", cmd);
    // `set autocommit=1, sql_mode = concat(@@sql_mode, ..)` at connect.
    check_pool("java", &proxy, &t, WORKERS * ROUNDS, SET_NAMES);
}

#[test]
fn perl_dbd_mariadb_sessions_share_with_their_connect_settings_replayed() {
    require(
        "perl",
        &["-MDBD::MariaDB", "-e", "exit 0"],
        "apt-get install -y libdbd-mariadb-perl",
    );
    let proxy = pooled(&db().tcp_addr());
    let t = table("pc_perl");
    let path = script_file("pool_mix.pl", PERL);
    run_workers("perl", |w| {
        let mut cmd = client("perl", &proxy, &t, w);
        cmd.arg(&path);
        cmd
    });
    check_pool("perl", &proxy, &t, WORKERS * ROUNDS, SET_NAMES);
}

#[test]
fn mariadb_cli_sessions_share_server_connections() {
    let proxy = pooled(&db().tcp_addr());
    let t = table("pc_cli");
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (proxy, t) = (&proxy, &t);
            s.spawn(move || {
                // The CLI sends each statement on its own.
                let mut sql = String::new();
                for r in 0..ROUNDS {
                    let k = w * 1000 + r;
                    sql += &format!(
                        "SELECT 1; BEGIN; INSERT INTO {t} VALUES ({k}, 'cli{k}'); \
                         SELECT COUNT(*) FROM {t} WHERE id = {k}; COMMIT; "
                    );
                }
                sql += &format!(
                    "PREPARE s FROM 'SELECT v FROM {t} WHERE id = ?'; EXECUTE s USING {};",
                    w * 1000
                );
                let out = client("mariadb", proxy, t, w)
                    .args([
                        "--no-defaults",
                        "--protocol=tcp",
                        "-h127.0.0.1",
                        &format!("-P{}", proxy.addr.port()),
                        &format!("-u{BENCH_USER}"),
                        &format!("-p{BENCH_PASS}"),
                        "--batch",
                        "--skip-column-names",
                        "test",
                        "-e",
                        &sql,
                    ])
                    .output()
                    .expect("run the mariadb CLI");
                let text = String::from_utf8_lossy(&out.stdout);
                // SELECT 1 and the count per round, then the prepared statement's row.
                let want = "1\n1\n".repeat(ROUNDS) + &format!("cli{}\n", w * 1000);
                assert!(
                    out.status.success() && text == want,
                    "worker {w}: {} {text:?} (want {want:?}) {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            });
        }
    });
    check_pool(
        "mariadb cli",
        &proxy,
        &t,
        WORKERS * ROUNDS,
        Expect::Shares {
            acquired: WORKERS * ROUNDS,
        },
    );
}
