//! The server is the oracle for the read/write split's classifier (`sql::route::target`): every
//! statement it sends to a replica (`Target::Replica`) must be a read there. Each such text runs
//! on a real `read_only` MariaDB replica of a GTID cluster (`common::replication`) as `app`, a
//! user without `READ ONLY ADMIN`, in schema `app`, where the objects the statements name exist:
//! tables, a view, sequences, and stored functions that write (`f()`, `pins_f()`: `SQL SECURITY
//! INVOKER`, so the replica refuses their write with 1290; `` `count`(x) ``: `SQL SECURITY
//! DEFINER` of an account with `READ ONLY ADMIN`, so its write would land on the replica) and
//! one that sets a user variable (`g()`).
//!
//! The texts: every text of the pins corpus, and a few hundred `SELECT`s generated from a fixed
//! seed (columns, pure and impure calls, stored functions bare, qualified, backticked and with a
//! space before `(`, sequences, user and system variables, locking clauses, `INTO`, executable
//! comments `/*!` and `/*M!` of versions the server runs and skips, `UNION`, `WITH`, subqueries,
//! `EXPLAIN`). What this proves, for each text classified `Replica`:
//!
//! - the replica does not refuse it as a write (1290 `read_only`, 1792 read-only transaction,
//!   1036 read-only table, a write privilege denied), nor resolves a call in it to a stored
//!   function (1305 / 1630: a stored function may write); other errors (syntax, a table of
//!   another schema) are allowed, counted and printed;
//! - the replica's binary log takes nothing: `@@gtid_binlog_pos` is unchanged after each text
//!   and at the end, and no GTID of the replica's own server id is in its binary log;
//! - enough of them (50 or more) ran without an error, so the split is not trivially safe;
//! - the known writers (`SELECT f()`, `SELECT NEXTVAL(s)`, ...) are not classified `Replica`.
//!
//! The classifier is asked as for MariaDB 10.11 (`Server::MARIADB_10_11`, version 101100); the
//! generated executable comments avoid versions between that and the patch level of the server
//! the tests run, which the two would read differently.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::replication::{gtid_binlog_pos, own_gtids, Cluster, APP_PASS, APP_SCHEMA, APP_USER};
use common::steps::Rng;
use mysql_async::prelude::*;
use mysql_lb::wire::sql::pins::Pin;
use mysql_lb::wire::sql::route::{target, Target};
use mysql_lb::wire::sql::{Dialect, Server};

/// The pins unit tests' corpus: (statement, what `pins` says).
const CORPUS: &[(&str, Option<Pin>)] = include!("../src/wire/sql/pins/corpus.rs");

const DIALECT: Dialect = Dialect {
    server: Some(Server::MARIADB_10_11),
};

/// The generator's seed: the same texts every run.
const SEED: u64 = 0x7007_e0a1;
/// Distinct generated texts.
const GENERATED: usize = 500;
/// Texts classified `Replica` that must run without an error.
const MIN_RAN_OK: usize = 50;

/// The objects the corpus and the generated texts name, created on the primary as `bench`.
const SETUP: &[&str] = &[
    "CREATE TABLE app.t (a INT PRIMARY KEY AUTO_INCREMENT, b VARCHAR(20))",
    "INSERT INTO app.t (b) VALUES ('a'), ('b'), ('c')",
    "CREATE TABLE app.t2 (a INT PRIMARY KEY AUTO_INCREMENT, b VARCHAR(20))",
    "INSERT INTO app.t2 (b) VALUES ('c'), ('d')",
    "CREATE FULLTEXT INDEX pins_ft ON app.t2 (b)",
    "CREATE TABLE app.log (id INT PRIMARY KEY AUTO_INCREMENT, what VARCHAR(20))",
    "CREATE SEQUENCE app.s",
    "CREATE SEQUENCE app.pins_seq",
    "CREATE VIEW app.v AS SELECT a, b FROM app.t",
    // Writes; as the invoker, whom a read-only replica refuses (1290).
    "CREATE FUNCTION app.f() RETURNS INT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY INVOKER \
     BEGIN INSERT INTO app.log (what) VALUES ('f'); RETURN 1; END",
    "CREATE FUNCTION app.pins_f() RETURNS INT DETERMINISTIC MODIFIES SQL DATA \
     SQL SECURITY INVOKER BEGIN INSERT INTO app.log (what) VALUES ('pins_f'); RETURN 1; END",
    // Writes as its definer (`bench`, with READ ONLY ADMIN): a replica takes the write.
    "CREATE FUNCTION app.`count`(x INT) RETURNS INT DETERMINISTIC MODIFIES SQL DATA \
     BEGIN INSERT INTO app.log (what) VALUES ('count'); RETURN x; END",
    // Sets a user variable, writes nothing.
    "CREATE FUNCTION app.g() RETURNS INT DETERMINISTIC NO SQL BEGIN SET @g = 1; RETURN 1; END",
];

/// Statements that write, advance a sequence or take a row lock when they run: never `Replica`.
const KNOWN_WRITERS: &[&str] = &[
    "SELECT f()",
    "SELECT app.f()",
    "SELECT NEXTVAL(s)",
    "SELECT NEXT VALUE FOR s",
    "SELECT SETVAL(s, 100)",
    "SELECT `count`(a) FROM t",
    "SELECT count (a) FROM t",
    "SELECT COUNT/**/(a) FROM t",
    "SELECT app.count(a) FROM t",
    "SELECT a FROM t WHERE a = f()",
    "SELECT (SELECT f()) AS x",
    "WITH c AS (SELECT f() AS x) SELECT x FROM c",
    "SELECT 1 UNION SELECT f()",
    "SELECT 1 /*! , f() */",
    "SELECT 1 /*!100000 , f() */",
    "SELECT 1 /*M! , f() */",
    "SELECT 1 /*M!50700 , f() */",
    "/*!40000 SELECT f() */",
    "EXPLAIN SELECT f()",
    "SELECT a FROM t FOR UPDATE",
];

/// Error codes that say a statement tried to write, or called a stored function (which may
/// write): 1290 `read_only`, 1792 read-only transaction, 1036 read-only table, 1223 read lock,
/// 1305 / 1630 no such stored function.
const WRITE_ERRORS: &[u16] = &[1290, 1792, 1036, 1223, 1305, 1630];

/// Whether the server's error `code` / `message` says the statement tried to write.
fn tried_to_write(code: u16, message: &str) -> bool {
    if WRITE_ERRORS.contains(&code) {
        return true;
    }
    // 1142 / 1143: a privilege denied; only a read's is allowed.
    let denied = matches!(code, 1142 | 1143 | 1227);
    let upper = message.to_uppercase();
    denied
        && [
            "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "SUPER", "ADMIN", "EXECUTE",
        ]
        .iter()
        .any(|w| upper.contains(w))
}

// ---------------------------------------------------------------------------------------------
// The generator.

/// Expressions that are pure reads: (text, names a column of `t`).
const PURE: &[(&str, bool)] = &[
    ("a", true),
    ("b", true),
    ("t.a", true),
    ("1", false),
    ("'x'", false),
    ("\"y\"", false),
    ("NULL", false),
    ("a + 1", true),
    ("NOW()", false),
    ("CURRENT_TIMESTAMP", false),
    ("CONCAT(b, 'x')", true),
    ("COALESCE(a, 0)", true),
    ("UPPER(b)", true),
    ("LENGTH(b)", true),
    ("RAND()", false),
    ("COUNT(*)", false),
    ("SUM(a)", true),
    ("MAX(a)", true),
    ("IF(a > 1, 'y', 'n')", true),
    ("CASE WHEN a > 1 THEN 'y' ELSE 'n' END", true),
    ("CAST(a AS CHAR)", true),
    ("DATE_FORMAT(NOW(), '%Y')", false),
    ("(SELECT MAX(a) FROM t2)", false),
    ("EXISTS (SELECT 1 FROM t2 WHERE t2.a = t.a)", true),
    ("a IN (SELECT a FROM t2)", true),
    ("'@x'", false),
    ("`b`", true),
];

/// Expressions that write, advance a sequence, read or set per-session or per-server state,
/// wait, lock, or call a stored function.
const IMPURE: &[(&str, bool)] = &[
    ("SLEEP(0)", false),
    ("BENCHMARK(1, 1)", false),
    ("f()", false),
    ("app.f()", false),
    ("`f`()", false),
    ("pins_f()", false),
    ("g()", false),
    ("`count`(a)", true),
    ("count (a)", true),
    ("COUNT/**/(a)", true),
    ("app.count(a)", true),
    ("NEXTVAL(s)", false),
    ("NEXT VALUE FOR s", false),
    ("LASTVAL(s)", false),
    ("PREVIOUS VALUE FOR s", false),
    ("@x", false),
    ("@x := 1", false),
    ("@`x`", false),
    ("@@server_id", false),
    ("@@version", false),
    ("@@session.autocommit", false),
    ("@@global.read_only", false),
    ("LAST_INSERT_ID()", false),
    ("CONNECTION_ID()", false),
    ("FOUND_ROWS()", false),
    ("GET_LOCK('r', 0)", false),
    ("RELEASE_LOCK('r')", false),
    ("`CONCAT`(b, 'x')", true),
    ("`LEFT`(b, 1)", true),
    ("(SELECT f())", false),
    ("(SELECT NEXTVAL(s))", false),
];

/// Scalars for a `WHERE`, pure and not.
const WHERE: &[&str] = &[
    "1",
    "2",
    "LENGTH('ab')",
    "(SELECT MIN(a) FROM t2)",
    "ABS(-1)",
    "f()",
    "app.f()",
    "`count`(1)",
    "count (1)",
    "NEXTVAL(s)",
    "g()",
    "@x",
    "@@server_id",
];

/// `FROM` clauses that all expose `a`, `b` and `t.a`; `{w}` takes a [`WHERE`] scalar.
const FROMS: &[&str] = &[
    " FROM t",
    " FROM t WHERE a IN (SELECT a FROM t2)",
    " FROM t WHERE b LIKE 'a%'",
    " FROM t ORDER BY 1",
    " FROM (SELECT a, b FROM v) AS t",
    " FROM v AS t",
    " FROM t WHERE EXISTS (SELECT 1 FROM t2 WHERE t2.a = t.a)",
    " FROM t GROUP BY a, b",
    " FROM t WHERE a = {w}",
    " FROM t WHERE a < {w} OR b = 'x'",
    " FROM t JOIN (SELECT a AS ua FROM t2) AS u ON u.ua = t.a",
];

const SUFFIXES: &[&str] = &[
    "",
    "",
    "",
    "",
    "",
    " LIMIT 1",
    " FOR UPDATE",
    " LOCK IN SHARE MODE",
    " FOR SHARE",
    " INTO @x",
];

/// Executable-comment openers: versions MariaDB 10.11 runs and skips (5 digits from 50700 to
/// 99999 are MySQL's, skipped), MariaDB's own `/*M!`, and a lower-case `m` (a plain comment).
const OPENERS: &[&str] = &[
    "/*!",
    "/*!32302",
    "/*!40000",
    "/*!50700",
    "/*!99999",
    "/*!100000",
    "/*!101100",
    "/*!999999",
    "/*M!",
    "/*M!50700",
    "/*M!100000",
    "/*M!999999",
    "/*m!",
];

fn expr(rng: &mut Rng) -> (&'static str, bool) {
    if rng.chance(15) {
        rng.pick(IMPURE)
    } else {
        rng.pick(PURE)
    }
}

/// `SELECT` of `n` aliased expressions (`c0`, `c1`, ...), with a `FROM` when one names a column.
fn select(rng: &mut Rng, n: usize) -> String {
    let items: Vec<_> = (0..n).map(|_| expr(rng)).collect();
    let list = items
        .iter()
        .enumerate()
        .map(|(i, (e, _))| format!("{e} AS c{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let from = if items.iter().any(|(_, column)| *column) || rng.chance(40) {
        rng.pick(FROMS).replace("{w}", rng.pick(WHERE))
    } else {
        String::new()
    };
    format!("SELECT {list}{from}")
}

/// One text from the grammar.
fn generate(rng: &mut Rng) -> String {
    let n = 1 + rng.below(3);
    let text = match rng.below(11) {
        0..=2 => format!("{}{}", select(rng, n), rng.pick(SUFFIXES)),
        3 => {
            let all = if rng.chance(50) { " ALL" } else { "" };
            format!("{} UNION{all} {}", select(rng, n), select(rng, n))
        }
        4 => format!("({}) UNION ({})", select(rng, n), select(rng, n)),
        5 => match rng.below(2) {
            0 => format!("WITH c AS ({}) SELECT * FROM c", select(rng, n)),
            _ => format!(
                "WITH c AS ({}) SELECT c0 FROM c WHERE c0 IS NOT NULL{}",
                select(rng, n),
                rng.pick(SUFFIXES)
            ),
        },
        6 => match rng.below(3) {
            0 => format!("SELECT * FROM ({}) AS d", select(rng, n)),
            1 => format!("SELECT (SELECT {} FROM t LIMIT 1) AS c0", expr(rng).0),
            _ => format!(
                "SELECT a FROM t WHERE a IN (SELECT a FROM t2 WHERE a <> {})",
                rng.pick(WHERE)
            ),
        },
        7 => {
            let open = rng.pick(OPENERS);
            match rng.below(4) {
                0 => format!("SELECT 1 AS c0 {open} , {} AS cz */ FROM t", expr(rng).0),
                1 => format!(
                    "SELECT a AS c0 {open} , {} AS cz */ FROM t",
                    rng.pick(IMPURE).0
                ),
                2 => format!("{open} {} */", select(rng, n)),
                _ => format!(
                    "{} {open} {} */",
                    select(rng, n),
                    rng.pick(&["FOR UPDATE", "INTO @x", "UNION SELECT f()", "LIMIT 1"])
                ),
            }
        }
        8 => format!("EXPLAIN {}", select(rng, n)),
        9 => match rng.below(3) {
            0 => format!("SELECT @x := {} AS c0", expr(rng).0),
            1 => format!("VALUES (1, 'x'), (2, {})", rng.pick(WHERE)),
            _ => format!("SELECT * FROM v WHERE a = {}", rng.pick(WHERE)),
        },
        _ => format!("SELECT * FROM t{}", rng.pick(SUFFIXES)),
    };
    if rng.chance(10) {
        text.to_lowercase()
    } else {
        text
    }
}

/// [`GENERATED`] distinct texts, the same every run.
fn generated() -> Vec<String> {
    let mut rng = Rng(SEED);
    let mut seen = BTreeSet::new();
    let mut texts = Vec::new();
    for _ in 0..GENERATED * 20 {
        if texts.len() == GENERATED {
            break;
        }
        let text = generate(&mut rng);
        if seen.insert(text.clone()) {
            texts.push(text);
        }
    }
    texts
}

// ---------------------------------------------------------------------------------------------
// The oracle.

async fn connect_app(db: &common::mariadb::MariaDb) -> mysql_async::Conn {
    let opts =
        mysql_async::OptsBuilder::from_opts(db.opts(APP_USER, APP_PASS)).db_name(Some(APP_SCHEMA));
    mysql_async::Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("{APP_USER} logs in to {}: {e}", db.name))
}

async fn binlog_pos(conn: &mut mysql_async::Conn) -> String {
    conn.query_first::<String, _>("SELECT @@global.gtid_binlog_pos")
        .await
        .expect("read @@gtid_binlog_pos")
        .unwrap_or_default()
}

#[test]
fn known_writers_are_not_sent_to_a_replica() {
    let wrong: Vec<_> = KNOWN_WRITERS
        .iter()
        .filter(|text| target(text.as_bytes(), DIALECT) == Target::Replica)
        .collect();
    assert!(wrong.is_empty(), "classified Replica: {wrong:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_split_sends_to_a_replica_runs_there_as_a_read() {
    let cluster = Cluster::start("route-oracle", 1).await;
    for sql in SETUP {
        cluster.exec(0, sql).await;
    }
    cluster.wait_caught_up().await;
    let replica = cluster.replicas()[0];
    let before = gtid_binlog_pos(replica);

    let mut conn = connect_app(replica).await;
    // The oracle sees a write: the replica refuses f()'s as the invoker's.
    match conn.query_drop("SELECT f()").await {
        Err(mysql_async::Error::Server(e)) if e.code == 1290 => {}
        other => panic!("SELECT f() on the replica: expected error 1290, got {other:?}"),
    }

    let corpus: Vec<String> = CORPUS.iter().map(|(text, _)| text.to_string()).collect();
    let generated = generated();
    let mut replica_texts = 0;
    let mut ran_ok = 0;
    let mut errors: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut pos = binlog_pos(&mut conn).await;
    for text in corpus.iter().chain(&generated) {
        if target(text.as_bytes(), DIALECT) != Target::Replica {
            continue;
        }
        replica_texts += 1;
        match conn.query_drop(text.as_str()).await {
            Ok(()) => ran_ok += 1,
            Err(mysql_async::Error::Server(e)) if tried_to_write(e.code, &e.message) => wrong.push(
                format!("{text:?}: refused as a write: {} {}", e.code, e.message),
            ),
            Err(mysql_async::Error::Server(e)) => errors
                .entry(e.code)
                .or_default()
                .push(format!("{text:?}: {}", e.message)),
            Err(e) => {
                wrong.push(format!("{text:?}: {e}"));
                conn = connect_app(replica).await;
            }
        }
        let now = binlog_pos(&mut conn).await;
        if now != pos {
            wrong.push(format!(
                "{text:?}: the replica's gtid_binlog_pos moved from {pos:?} to {now:?}"
            ));
            pos = now;
        }
    }
    drop(conn.disconnect().await);

    let failed: usize = errors.values().map(Vec::len).sum();
    let by_code = errors
        .iter()
        .map(|(code, texts)| format!("{code}: {}", texts.len()))
        .collect::<Vec<_>>()
        .join(", ");
    for (code, texts) in &errors {
        for text in texts {
            println!("error {code}: {text}");
        }
    }
    println!(
        "route oracle: {} texts ({} corpus, {} generated), {replica_texts} classified replica, \
         {ran_ok} ran ok, {failed} failed (by code: {by_code}), {} wrong",
        corpus.len() + generated.len(),
        corpus.len(),
        generated.len(),
        wrong.len()
    );

    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(
        gtid_binlog_pos(replica),
        before,
        "the replica's binary log took a write"
    );
    let own = own_gtids(replica);
    assert!(own.is_empty(), "the replica took writes: {own:?}");
    assert!(
        ran_ok >= MIN_RAN_OK,
        "only {ran_ok} texts classified Replica ran without an error"
    );
}
