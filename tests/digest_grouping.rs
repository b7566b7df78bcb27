//! `sql::digest` against the real server: statements are run on a MariaDB with Performance
//! Schema on, each alone between two `TRUNCATE`s of `events_statements_summary_by_digest`, so
//! the row left is that statement's server `DIGEST`. Which statements share a digest must be the
//! same in both for every statement the two agree on by design; where they differ by design
//! (listed in `DIFFER`, each with the reason), the test checks that both still behave as
//! documented, so a server that changes its rules fails here instead of going unnoticed.

mod common;

use std::collections::HashMap;

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use mysql_lb::wire::sql::{digest, Digest};

const SCHEMA: &str = "digests";
const MAX_LEN: usize = 1024;

/// Statements both sides group alike: equal digests here iff equal `DIGEST` there. Grouped by
/// the normalized text they share (the blank lines are only for the reader).
const AGREE: &[&str] = &[
    // different literals, case, spacing, comments, backticks, a trailing `;`
    "SELECT * FROM t WHERE a = 1",
    "select * from t where a=2",
    "SELECT * FROM `t` WHERE `a` = 3",
    "SELECT * FROM t /* comment */ WHERE a = 4",
    "SELECT * FROM t WHERE a = 5 -- trailing",
    "SELECT *\n  FROM t\n\tWHERE a = 'x'",
    "SELECT * FROM t WHERE a = NULL",
    "SELECT * FROM t WHERE a = 0x1F",
    "SELECT * FROM t /* /* */ WHERE a = 6",
    "SELECT * FROM t WHERE a = 7 /*traceparent='00-4bf92f35-00f067aa-01',route='/x'*/",
    "SELECT * FROM t WHERE a = 8;",
    //
    "SELECT * FROM t WHERE b = 1",
    //
    "SELECT b FROM t WHERE a IN (1, 2)",
    "SELECT b FROM t WHERE a IN (1,2,3,4,5,6,7)",
    "SELECT b FROM t WHERE a IN (-1, 'x', NULL)",
    //
    "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y')",
    "insert into t (a, b) values (3, 'z'), (4, 'w'), (5, 'v')",
    //
    "SELECT a - 1 FROM t",
    "SELECT a-2 FROM t",
    //
    "SELECT a FROM t WHERE a IS NULL",
    "SELECT a FROM t WHERE a IS NOT NULL",
    //
    "UPDATE t SET b = 'q' WHERE a = 1",
    "update t set b='r' where a=2",
    //
    "DELETE FROM t WHERE a = 99",
    "DELETE FROM `t` WHERE a = 100",
    //
    "SELECT COUNT(*) FROM t WHERE b LIKE 'x%'",
    "select count(*) from t where b like 'y%'",
    //
    "SELECT t.a, t.b FROM t WHERE t.a = 1",
    "SELECT `t`.`a`, `t`.`b` FROM `t` WHERE `t`.a = 2",
    //
    "SELECT a FROM t ORDER BY a LIMIT 1",
    "SELECT a FROM t ORDER BY a LIMIT 10",
    //
    "SELECT a FROM t WHERE b = 'it''s'",
    "SELECT a FROM t WHERE b = \"a\\\"b\"",
    "SELECT a FROM t WHERE b = N'x'",
    "SELECT a FROM t WHERE b = b'1'",
    //
    "SELECT 1",
    "SELECT -1",
    "SELECT +2.5e-3",
    "SELECT .5",
    //
    "BEGIN",
    "begin",
    //
    "COMMIT",
    "commit;",
];

/// Pairs the two group differently by design: (a, b, same digest here, same `DIGEST` on
/// MariaDB 10.11, why).
const DIFFER: &[(&str, &str, bool, bool, &str)] = &[
    (
        "SELECT b FROM t WHERE a IN (1)",
        "SELECT b FROM t WHERE a IN (1, 2)",
        true,
        false,
        "the server prints a one-value list as (?) and longer ones as (...); here every literal list is (...)",
    ),
    (
        "INSERT INTO t (a, b) VALUES (1, 'x')",
        "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y')",
        true,
        false,
        "the server prints several rows as VALUES (...) /* , ... */, one row as VALUES (...); here both are VALUES (...)",
    ),
    (
        "SELECT * FROM t WHERE a = -1",
        "SELECT * FROM t WHERE a = 1",
        true,
        false,
        "the server keeps the sign after = (= - ?); here a sign after an operator folds into the literal",
    ),
    (
        "SELECT 1, 2",
        "SELECT 1, 2, 3",
        false,
        true,
        "the server folds any run of values (SELECT ?, ...); here only parenthesized lists fold",
    ),
    (
        "SELECT @x",
        "SELECT @y",
        false,
        true,
        "the server prints every user variable as @?; here variables keep their names",
    ),
    (
        "SELECT /*+ NO_ICP(t) */ a FROM t",
        "SELECT a FROM t",
        false,
        true,
        "MariaDB 10.11 has no optimizer hints (a plain comment there); here hints are kept",
    ),
    (
        "SELECT /*!40001 SQL_NO_CACHE */ a FROM t WHERE a = 1",
        "SELECT SQL_NO_CACHE a FROM t WHERE a = 2",
        false,
        true,
        "the server digests an executable comment's content as tokens; here it is one token",
    ),
    (
        "SELECT a FROM t WHERE b = _utf8mb4'x'",
        "SELECT a FROM t WHERE b = 'x'",
        true,
        false,
        "the server prints a charset introducer as (_charset) ?; here it is part of the literal",
    ),
    (
        "SELECT a FROM t WHERE b = X'41'",
        "SELECT a FROM t WHERE b = 'x'",
        true,
        false,
        "MariaDB 10.11 prints X'..' as (unknown), apart from other literals; here it is ?",
    ),
    (
        "SELECT id FROM u",
        "SELECT `id` FROM u",
        true,
        false,
        "ID is a MariaDB keyword (printed ID, unlike `id`); here id is not in the keyword list",
    ),
    (
        "SELECT DISTINCT a FROM t",
        "SELECT DISTINCTROW a FROM t",
        false,
        true,
        "the server prints keyword aliases as one keyword; here keywords are printed as written",
    ),
    (
        "SELECT CAST(a AS CHAR) FROM t",
        "SELECT CAST(a AS CHARACTER) FROM t",
        false,
        true,
        "the server prints CHAR as CHARACTER; here keywords are printed as written",
    ),
];

/// Runs `sql` alone and returns its server (DIGEST, DIGEST_TEXT).
async fn server_digest(conn: &mut Conn, sql: &str) -> (String, String) {
    conn.query_drop("TRUNCATE performance_schema.events_statements_summary_by_digest")
        .await
        .expect("truncate the digest summary");
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed on the server: {e}"));
    let rows: Vec<(String, String)> = conn
        .exec(
            "SELECT DIGEST, DIGEST_TEXT FROM performance_schema.events_statements_summary_by_digest \
             WHERE SCHEMA_NAME = ? AND DIGEST_TEXT NOT LIKE 'TRUNCATE%'",
            (SCHEMA,),
        )
        .await
        .expect("read the digest summary");
    assert_eq!(
        rows.len(),
        1,
        "{sql:?}: expected one digest row, got {rows:?}"
    );
    rows.into_iter().next().unwrap_or_default()
}

fn ours(sql: &str) -> Digest {
    digest(sql.as_bytes(), MAX_LEN)
}

#[tokio::test]
async fn digests_group_statements_as_performance_schema_does() {
    let db = MariaDb::start_with_args("digest", &["--performance-schema=ON"]);
    db.root_exec(&format!(
        "CREATE DATABASE {SCHEMA}; \
         CREATE TABLE {SCHEMA}.t (a INT, b VARCHAR(20), c VARCHAR(20)); \
         CREATE TABLE {SCHEMA}.u (id INT)"
    ));
    let opts = OptsBuilder::from_opts(db.opts(BENCH_USER, BENCH_PASS)).db_name(Some(SCHEMA));
    let mut conn = Conn::new(opts).await.expect("connect to the server");

    let mut server = HashMap::new();
    for sql in AGREE {
        server.insert(*sql, server_digest(&mut conn, sql).await);
    }
    let mut mismatches = Vec::new();
    for (i, a) in AGREE.iter().enumerate() {
        for b in &AGREE[i + 1..] {
            let here = ours(a) == ours(b);
            let there = server[a].0 == server[b].0;
            if here != there {
                mismatches.push(format!(
                    "{a:?} / {b:?}: same digest here {here}, on the server {there} \
                     (server: {:?} / {:?}; here: {:?} / {:?})",
                    server[a].1,
                    server[b].1,
                    mysql_lb::wire::sql::normalize(a.as_bytes(), MAX_LEN),
                    mysql_lb::wire::sql::normalize(b.as_bytes(), MAX_LEN),
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // Not vacuous: the agreed statements form many groups, most with several members.
    let mut sizes: HashMap<&str, usize> = HashMap::new();
    for (d, _) in server.values() {
        *sizes.entry(d.as_str()).or_default() += 1;
    }
    assert!(sizes.len() >= 15, "{} server groups", sizes.len());
    assert!(
        sizes.values().filter(|&&n| n >= 2).count() >= 12,
        "{sizes:?}"
    );

    let mut wrong = Vec::new();
    for (a, b, same_here, same_there, why) in DIFFER {
        let here = ours(a) == ours(b);
        let (da, ta) = server_digest(&mut conn, a).await;
        let (db_, tb) = server_digest(&mut conn, b).await;
        let there = da == db_;
        if here != *same_here || there != *same_there {
            wrong.push(format!(
                "{a:?} / {b:?}: same here {here} (documented {same_here}), on the server \
                 {there} (documented {same_there}; {ta:?} / {tb:?}): {why}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    conn.disconnect().await.expect("disconnect");
}
