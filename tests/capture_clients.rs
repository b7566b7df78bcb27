//! A capture of a mixed workload from several client libraries (PyMySQL's text protocol, PHP
//! mysqli's prepared statements, Node mysql2's prepared statements and pings, MariaDB
//! Connector/J's server-side prepared statements in a transaction and its `isValid()` ping),
//! each with its own protocol code, replayed onto a fresh server: every digest replays as often
//! as captured, with no new error, and the tables hold what the clients wrote.
//!
//! The Java client is a single source file run by the JDK's source launcher (`java -cp JAR
//! Mix.java`) against Debian's Connector/J jar, which scripts/install-deps.sh installs.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::mariadb::{scratch_dir, MariaDb};
use common::proxy::{http_request, TestProxy};
use common::scripts::{node_path, python, python_with, require, require_php_mysql, run_check};
use serde_json::Value;

const USER: &str = "mixapp";
const PASSWORD: &str = "Mx-7e2-pass";
const ROWS: u32 = 40;

const PYTHON: &str = r#"
import os, pymysql
c = pymysql.connect(host="127.0.0.1", port=int(os.environ["PORT"]), user=os.environ["U"],
                    password=os.environ["P"], database="test", autocommit=True)
with c.cursor() as cur:
    cur.execute("CREATE TABLE py_t (id INT PRIMARY KEY, v VARCHAR(40))")
    for i in range(int(os.environ["ROWS"])):
        cur.execute("INSERT INTO py_t VALUES (%s, %s)", (i, "py%d" % i))
    cur.execute("SELECT COUNT(*) FROM py_t WHERE v LIKE %s", ("py%",))
    assert cur.fetchone()[0] == int(os.environ["ROWS"])
c.ping(reconnect=False)
c.close()
"#;

const PHP: &str = r#"<?php
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$db = new mysqli("127.0.0.1", getenv("U"), getenv("P"), "test", (int) getenv("PORT"));
$db->query("CREATE TABLE php_t (id INT PRIMARY KEY, v VARCHAR(40))");
$ins = $db->prepare("INSERT INTO php_t VALUES (?, ?)");
for ($i = 0; $i < (int) getenv("ROWS"); $i++) {
    $v = "php$i";
    $ins->bind_param("is", $i, $v);
    $ins->execute();
}
$ins->close();
$sel = $db->prepare("SELECT v FROM php_t WHERE id = ?");
$id = 3;
$sel->bind_param("i", $id);
$sel->execute();
$sel->bind_result($v);
$sel->fetch();
if ($v !== "php3") { fwrite(STDERR, "got $v\n"); exit(1); }
$sel->close();
$db->close();
"#;

const NODE: &str = r#"
const mysql = require('mysql2/promise');
(async () => {
  const c = await mysql.createConnection({host: '127.0.0.1', port: +process.env.PORT,
    user: process.env.U, password: process.env.P, database: 'test'});
  await c.query('CREATE TABLE node_t (id INT PRIMARY KEY, v VARCHAR(40))');
  for (let i = 0; i < +process.env.ROWS; i++) {
    await c.execute('INSERT INTO node_t VALUES (?, ?)', [i, 'node' + i]);
  }
  const [rows] = await c.execute('SELECT COUNT(*) AS n FROM node_t WHERE id >= ?', [0]);
  if (rows[0].n !== +process.env.ROWS) throw new Error('count ' + rows[0].n);
  await c.ping();
  await c.end();
})().catch(e => { console.error(e); process.exit(1); });
"#;

/// Connector/J 2.x prepares on the client unless told otherwise; `useServerPrepStmts` makes it
/// send COM_STMT_PREPARE/EXECUTE. `executeUpdate()` one row at a time: a batch would go out as
/// MariaDB's COM_STMT_BULK_EXECUTE, which the capture does not take.
const JAVA: &str = r#"
import java.sql.*;

public class Mix {
    public static void main(String[] args) throws Exception {
        String url = "jdbc:mariadb://127.0.0.1:" + System.getenv("PORT")
            + "/test?useServerPrepStmts=true&connectTimeout=10000";
        int rows = Integer.parseInt(System.getenv("ROWS"));
        try (Connection c = DriverManager.getConnection(url, System.getenv("U"), System.getenv("P"))) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE java_t (id INT PRIMARY KEY, v VARCHAR(40))");
            }
            c.setAutoCommit(false);
            try (PreparedStatement ins = c.prepareStatement("INSERT INTO java_t VALUES (?, ?)")) {
                for (int i = 0; i < rows; i++) {
                    ins.setInt(1, i);
                    ins.setString(2, "java" + i);
                    ins.executeUpdate();
                }
            }
            c.commit();
            c.setAutoCommit(true);
            try (PreparedStatement sel = c.prepareStatement("SELECT COUNT(*) FROM java_t WHERE v LIKE ?")) {
                sel.setString(1, "java%");
                try (ResultSet r = sel.executeQuery()) {
                    r.next();
                    if (r.getInt(1) != rows) throw new IllegalStateException("count " + r.getInt(1));
                }
            }
            if (!c.isValid(10)) throw new IllegalStateException("isValid() false");
        }
    }
}
"#;
/// Debian's libmariadb-java (a symlink to the versioned jar).
const JAVA_DRIVER: &str = "/usr/share/java/mariadb-java-client.jar";

fn require_java() {
    require(
        "java",
        &["-version"],
        "apt-get install default-jdk-headless",
    );
    assert!(
        Path::new(JAVA_DRIVER).exists(),
        "{JAVA_DRIVER} not found: install it with `apt-get install libmariadb-java` (or run \
         scripts/install-deps.sh)"
    );
}

fn create_account(db: &MariaDb) {
    for host in ["%", "localhost"] {
        db.root_exec(&format!(
            "CREATE USER IF NOT EXISTS '{USER}'@'{host}' IDENTIFIED BY '{PASSWORD}'; \
             GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'{host}'"
        ));
    }
}

fn client(program: &str, script: &Path, port: u16) -> Command {
    let mut cmd = Command::new(program);
    cmd.arg(script)
        .env("PORT", port.to_string())
        .env("U", USER)
        .env("P", PASSWORD)
        .env("ROWS", ROWS.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_mixed_workload_from_several_client_libraries_replays_with_the_same_digest_counts() {
    python_with("pymysql");
    require_php_mysql();
    require_java();
    let node_modules = node_path();
    let (source, target) = std::thread::scope(|s| {
        let a = s.spawn(|| MariaDb::start("mix-source"));
        let b = s.spawn(|| MariaDb::start("mix-target"));
        (a.join().unwrap(), b.join().unwrap())
    });
    create_account(&source);
    create_account(&target);
    let proxy = TestProxy::start_with(common::proxy::with_digests(&[source.tcp_addr()]));
    let base = scratch_dir("capture-mix");
    let dir = base.join("cap");
    let (status, body) = http_request(
        proxy.admin.unwrap(),
        "POST",
        "/capture/start",
        &[],
        format!(r#"{{"dir":"{}"}}"#, dir.display()).as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let port = proxy.addr.port();
    let scripts = [("py", PYTHON), ("php", PHP), ("js", NODE)];
    for (ext, text) in scripts {
        std::fs::write(base.join(format!("mix.{ext}")), text).unwrap();
    }
    // The source launcher wants the file named after its public class.
    std::fs::write(base.join("Mix.java"), JAVA).unwrap();
    std::thread::scope(|s| {
        let py = client(&python(), &base.join("mix.py"), port);
        let php = client("php", &base.join("mix.php"), port);
        let mut node = client("node", &base.join("mix.js"), port);
        node.env("NODE_PATH", &node_modules);
        let mut java = client("java", &base.join("Mix.java"), port);
        java.env("CLASSPATH", JAVA_DRIVER);
        for (what, cmd) in [
            ("pymysql", py),
            ("php mysqli", php),
            ("node mysql2", node),
            ("java connector/j", java),
        ] {
            s.spawn(move || run_check(what, cmd));
        }
    });
    let (status, body) = proxy.admin_post("/capture/stop", &[]);
    assert_eq!(status, 200, "{body}");
    let capture: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(capture["capture"]["sessions"], 4, "one per client: {body}");
    assert_eq!(capture["capture"]["dropped"], 0, "{body}");

    let password = base.join("pw");
    std::fs::write(&password, PASSWORD).unwrap();
    let json = base.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
        .arg("replay")
        .arg(&dir)
        .args([
            "--target",
            &target.tcp_addr(),
            "--user",
            USER,
            "--password-file",
        ])
        .arg(&password)
        .args(["--speed", "2", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(out.status.success(), "{stdout}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["new_errors"], 0, "{report}");
    assert_eq!(report["skipped_commands"], 0, "{report}");
    let digests = report["digests"].as_array().unwrap();
    for d in digests {
        assert_eq!(d["replayed"], d["captured"], "{d}");
    }
    let kinds: Vec<&str> = digests.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in ["query", "prepare", "execute", "ping", "close"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    for (table, prefix) in [
        ("py_t", "py"),
        ("php_t", "php"),
        ("node_t", "node"),
        ("java_t", "java"),
    ] {
        let n = target.root_query(&format!(
            "SELECT COUNT(*) FROM test.{table} WHERE v LIKE '{prefix}%'"
        ));
        assert_eq!(n.trim(), ROWS.to_string(), "{table} on the target");
    }
}
