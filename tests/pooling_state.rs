//! Session state through a transaction-mode pool, checked against the server itself: each
//! scenario is a script of two sessions of one user, A and B, interleaved (A's first step, B's
//! first, A's second, ...), run once on two direct connections to MariaDB and once through a
//! pool whose sessions share one server connection. A sets some state and reads it back, B reads
//! the same thing; through the pool each must get exactly what it got directly (A sees its own
//! state, B never sees A's).
//!
//! A step that waits for the shared connection (the other session holds it: a transaction, one
//! more command after changed rows or warnings, or for good once pinned) is left waiting while
//! the script goes on with the other session; once A's steps are all done, A ends, and a pinned
//! connection is reset and handed to B. Where that order changes what B reads (a lock A held is
//! free by then), the scenario says so and what B reads instead.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, start_dedicated, MariaDb};
use common::pooling::open_connections;
use common::proxy::TestProxy;
use common::rawclient::RawClient;
use common::steps::Steps;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, OptsBuilder, Row, Value};

/// One statement of a session's script.
#[derive(Clone, Debug)]
enum Step {
    /// A text-protocol statement (COM_QUERY); every result set's rows are kept.
    Q(&'static str),
    /// A binary-protocol prepared statement (COM_STMT_PREPARE + COM_STMT_EXECUTE).
    Exec(&'static str, Vec<Value>),
    /// COM_PING.
    Ping,
}

use Step::{Exec, Ping, Q};

/// A step's outcome: its rows as SQL literals, or the server's error code.
type Outcome = Result<Vec<Vec<String>>, String>;

struct Scenario {
    name: &'static str,
    a: Vec<Step>,
    b: Vec<Step>,
    /// The `reason` label A's session pins its connection with; None when A's state must not
    /// pin (it is shared between its statements).
    pin: Option<&'static str>,
    /// A leaves warnings, an error, an insert id or a row count on the shared connection: it
    /// is reset before B gets it (`mysql_lb_pool_resets_total{reason="traces"}`, or
    /// `reason="insert_id"` when an insert id was all).
    traces: bool,
    /// A's steps whose outcome through the pool cannot be the direct one in step 1, and what it
    /// is instead (why in a comment at the scenario).
    a_pooled: Vec<(usize, Outcome)>,
    /// The same for B.
    b_pooled: Vec<(usize, Outcome)>,
}

/// `direct` with the steps of `differs` replaced.
fn expected(direct: &[Outcome], differs: &[(usize, Outcome)]) -> Vec<Outcome> {
    let mut want = direct.to_vec();
    for (i, outcome) in differs {
        want[*i] = outcome.clone();
    }
    want
}

fn rows(rows: &[&[&str]]) -> Outcome {
    Ok(rows
        .iter()
        .map(|r| r.iter().map(|v| format!("'{v}'")).collect())
        .collect())
}

fn scenarios() -> Vec<Scenario> {
    let char_reads = "SELECT @@character_set_client, @@character_set_connection, \
                      @@character_set_results, @@collation_connection";
    vec![
        Scenario {
            name: "SET NAMES",
            a: vec![Q("SET NAMES latin1"), Q(char_reads), Q("SELECT 'é'")],
            b: vec![Q(char_reads), Q(char_reads)],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "SET CHARACTER SET",
            a: vec![Q("SET CHARACTER SET latin1"), Q(char_reads)],
            b: vec![Q(char_reads), Q(char_reads)],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "USE",
            a: vec![
                Q("USE mysql"),
                Q("SELECT DATABASE()"),
                Q("SELECT COUNT(*) > 0 FROM user"),
            ],
            b: vec![Q("SELECT DATABASE()"), Q("SELECT COUNT(*) FROM ps_rows")],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "autocommit=0",
            a: vec![
                Q("SET autocommit = 0"),
                Q("INSERT INTO ps_rows VALUES (10, 10)"),
                Q("SELECT @@autocommit, COUNT(*) FROM ps_rows"),
                Q("ROLLBACK"),
                Q("SELECT @@autocommit, COUNT(*) FROM ps_rows"),
            ],
            b: vec![
                Q("SELECT @@autocommit"),
                Q("SELECT COUNT(*) FROM ps_rows"),
                Q("SELECT @@autocommit, COUNT(*) FROM ps_rows"),
            ],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "SET SESSION TRANSACTION ISOLATION LEVEL",
            a: vec![
                Q("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
                Q("SELECT @@tx_isolation"),
            ],
            b: vec![Q("SELECT @@tx_isolation"), Q("SELECT @@tx_isolation")],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "sql_mode",
            a: vec![
                Q("SET SESSION sql_mode = 'ANSI_QUOTES'"),
                Q("SELECT @@sql_mode"),
                Q("SELECT \"v\" FROM ps_rows LIMIT 1"),
            ],
            b: vec![Q("SELECT @@sql_mode"), Q("SELECT \"v\"")],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "time_zone",
            a: vec![
                Q("SET time_zone = '+05:00'"),
                Q("SELECT @@time_zone, FROM_UNIXTIME(0)"),
            ],
            b: vec![Q("SELECT @@time_zone"), Q("SELECT FROM_UNIXTIME(0)")],
            // Replayed, not pinned: the one connection takes each session's settings in turn.
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "user variables",
            a: vec![
                Q("SET @ps_v = 42"),
                Q("SELECT @ps_v"),
                Q("SELECT @ps_w := 7"),
                Q("SELECT @ps_v + @ps_w"),
            ],
            b: vec![Q("SELECT @ps_v"), Q("SELECT @ps_w")],
            pin: Some("user_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "temporary table",
            a: vec![
                Q("CREATE TEMPORARY TABLE ps_tmp (x INT)"),
                Q("INSERT INTO ps_tmp VALUES (1), (2)"),
                Q("SELECT COUNT(*) FROM ps_tmp"),
            ],
            b: vec![
                Q("SELECT COUNT(*) FROM ps_tmp"),
                Q("SELECT COUNT(*) FROM ps_tmp"),
            ],
            pin: Some("temporary_table"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "GET_LOCK",
            a: vec![
                Q("SELECT GET_LOCK('ps_lock', 0)"),
                Q("SELECT IS_USED_LOCK('ps_lock') = CONNECTION_ID()"),
                Q("SELECT RELEASE_LOCK('ps_lock'), GET_LOCK('ps_lock', 0)"),
            ],
            b: vec![Q("SELECT IS_FREE_LOCK('ps_lock')")],
            pin: Some("user_lock"),
            traces: false,
            // Directly B sees A's lock taken. Through the pool B has no connection while A's is
            // pinned; it runs once A ended, on A's connection reset, which released the lock.
            a_pooled: vec![],
            b_pooled: vec![(0, rows(&[&["1"]]))],
        },
        Scenario {
            name: "LOCK TABLES",
            a: vec![
                Q("LOCK TABLES ps_rows READ"),
                Q("SELECT COUNT(*) FROM ps_auto"),
                Q("SELECT COUNT(*) FROM ps_rows"),
            ],
            b: vec![
                Q("SELECT COUNT(*) FROM ps_auto"),
                Q("SELECT COUNT(*) FROM ps_rows"),
            ],
            pin: Some("lock_tables"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "SQL_CALC_FOUND_ROWS + FOUND_ROWS()",
            a: vec![
                Q("SELECT SQL_CALC_FOUND_ROWS id FROM ps_rows ORDER BY id LIMIT 1"),
                Q("SELECT FOUND_ROWS()"),
                Q("SELECT FOUND_ROWS()"),
            ],
            b: vec![
                Q("SELECT id FROM ps_rows WHERE id < 3 ORDER BY id"),
                Q("SELECT FOUND_ROWS()"),
            ],
            pin: Some("found_rows"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "FOUND_ROWS() after a plain SELECT",
            a: vec![
                Q("SELECT id FROM ps_rows ORDER BY id"),
                Q("SELECT FOUND_ROWS()"),
            ],
            b: vec![Q("SELECT id FROM ps_rows ORDER BY id LIMIT 1")],
            pin: None,
            traces: false,
            // A limitation of step 1: without SQL_CALC_FOUND_ROWS, FOUND_ROWS() counts the
            // rows of the connection's previous SELECT, here B's, which ran between A's two
            // statements on the one shared connection (a count, not data).
            a_pooled: vec![(1, rows(&[&["1"]]))],
            b_pooled: vec![],
        },
        Scenario {
            name: "text PREPARE / EXECUTE",
            a: vec![
                Q("PREPARE ps_s FROM 'SELECT ? + 1'"),
                Q("EXECUTE ps_s USING 41"),
                Q("EXECUTE ps_s USING 1"),
            ],
            b: vec![Q("EXECUTE ps_s USING 1")],
            pin: Some("prepare"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "binary prepared statements",
            a: vec![
                Exec("SELECT ? + 1", vec![Value::Int(41)]),
                Exec("SELECT v FROM ps_rows WHERE id = ?", vec![Value::Int(2)]),
                Exec("SELECT ? + 1", vec![Value::Int(1)]),
            ],
            b: vec![
                Exec("SELECT ? * 2", vec![Value::Int(4)]),
                Exec("SELECT ? + 1", vec![Value::Int(0)]),
            ],
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "LAST_INSERT_ID() after an INSERT",
            a: vec![
                Q("INSERT INTO ps_auto (v) VALUES (1)"),
                Q("SELECT LAST_INSERT_ID()"),
                Q("SELECT COUNT(*) FROM ps_rows"),
                Q("SELECT LAST_INSERT_ID()"),
            ],
            b: vec![
                Q("SELECT LAST_INSERT_ID()"),
                Q("INSERT INTO ps_auto (v) VALUES (2)"),
                Q("SELECT LAST_INSERT_ID()"),
            ],
            pin: None,
            traces: true,
            // A reads its id with the command right after the INSERT; later, its connection
            // may be another (this one was reset before B got it): step 1 answers 0.
            a_pooled: vec![(3, rows(&[&["0"]]))],
            b_pooled: vec![],
        },
        Scenario {
            name: "SHOW WARNINGS after a warning",
            a: vec![
                Q("SELECT CAST('1x' AS SIGNED)"),
                Q("SHOW WARNINGS"),
                Q("SHOW WARNINGS"),
                Q("SELECT @@warning_count"),
                // Not a read of the diagnostics area: the connection is wiped after it.
                Q("SELECT 1"),
            ],
            b: vec![
                Q("SHOW WARNINGS"),
                Q("SELECT @@warning_count"),
                Q("SHOW WARNINGS"),
            ],
            pin: None,
            traces: true,
            // Reads of the diagnostics area keep the connection for the next one: A reads its
            // warnings as directly, then its connection is reset for B.
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "SHOW WARNINGS after an error",
            a: vec![
                Q("SELECT * FROM ps_missing"),
                Q("SHOW WARNINGS"),
                Q("SELECT @@error_count"),
                Q("SELECT 1"),
            ],
            b: vec![Q("SHOW WARNINGS"), Q("SELECT @@error_count")],
            pin: None,
            traces: true,
            // As above: the error is A's to read while it only reads the diagnostics area.
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "an error counted, then read twice",
            a: vec![
                Q("SELECT * FROM ps_missing"),
                Q("SHOW COUNT(*) ERRORS"),
                Q("SHOW ERRORS"),
                Q("SHOW WARNINGS"),
                Q("SELECT @@session.error_count, @@warning_count"),
                Q("SELECT 1"),
            ],
            b: vec![Q("SHOW ERRORS"), Q("SHOW COUNT(*) ERRORS")],
            pin: None,
            traces: true,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "warnings read twice, then a statement",
            a: vec![
                Q("SELECT CAST('1x' AS SIGNED)"),
                Q("SHOW WARNINGS"),
                Q("SELECT @@warning_count"),
                Q("SHOW COUNT(*) WARNINGS"),
                Q("SELECT 1"),
                Q("SHOW WARNINGS"),
            ],
            b: vec![
                Q("SHOW WARNINGS"),
                Q("SHOW WARNINGS"),
                Q("SHOW WARNINGS"),
                Q("SHOW WARNINGS"),
            ],
            pin: None,
            traces: true,
            // Directly `SELECT 1` keeps A's warning too; through the pool only reads of the
            // diagnostics area do (`SHOW WARNINGS`, `@@warning_count`, `SHOW COUNT(*)`).
            a_pooled: vec![(5, rows(&[]))],
            b_pooled: vec![],
        },
        Scenario {
            name: "warnings across a COM_PING",
            a: vec![Q("SELECT CAST('1x' AS SIGNED)"), Ping, Q("SHOW WARNINGS")],
            b: vec![Q("SHOW WARNINGS"), Q("SHOW WARNINGS")],
            pin: None,
            traces: true,
            // The COM_PING was A's next command: its warning is gone after it.
            a_pooled: vec![(2, rows(&[]))],
            b_pooled: vec![],
        },
        Scenario {
            name: "ROW_COUNT() after an UPDATE",
            a: vec![
                Q("UPDATE ps_rows SET v = v + 1"),
                Q("SELECT ROW_COUNT()"),
                Q("SELECT ROW_COUNT()"),
            ],
            b: vec![
                Q("SELECT ROW_COUNT()"),
                Q("UPDATE ps_rows SET v = v + 1 WHERE id = 1"),
                Q("SELECT ROW_COUNT()"),
            ],
            pin: None,
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "ROW_COUNT() across a COM_PING",
            a: vec![
                Q("UPDATE ps_rows SET v = v + 1"),
                Ping,
                Q("SELECT ROW_COUNT()"),
            ],
            b: vec![Q("SELECT ROW_COUNT()"), Q("SELECT ROW_COUNT()")],
            pin: None,
            traces: true,
            // The COM_PING was A's next command; the connection was reset before B got it, and
            // B's first ROW_COUNT() reads the reset's OK (0), never A's UPDATE (3); directly
            // it reads the SELECT mysql_async sent at login (-1).
            a_pooled: vec![(2, rows(&[&["-1"]]))],
            b_pooled: vec![(0, rows(&[&["0"]]))],
        },
        // The server's reading, not the first keyword's: each of these was read as stateless
        // and leaked its state to the next session before the SQL layer read statements as
        // the server runs them.
        Scenario {
            name: "a SET behind a comment MariaDB skips",
            a: vec![
                Q("/*!99999 SELECT */ SET autocommit = 0"),
                Q("SELECT @@autocommit"),
            ],
            b: vec![Q("SELECT @@autocommit"), Q("SELECT @@autocommit")],
            pin: Some("session_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "SET NAMES behind a comment MariaDB skips",
            a: vec![Q("/*!50700 SELECT 1 */ SET NAMES latin1"), Q(char_reads)],
            b: vec![Q(char_reads), Q(char_reads)],
            pin: Some("session_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "USE behind a comment MariaDB skips",
            a: vec![Q("/*!99999 SELECT */ USE mysql"), Q("SELECT DATABASE()")],
            b: vec![Q("SELECT DATABASE()"), Q("SELECT DATABASE()")],
            pin: Some("schema"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a temporary table behind a comment MariaDB skips",
            a: vec![
                Q("/*!99999 SELECT */ CREATE TEMPORARY TABLE ps_tmp_c (x INT)"),
                Q("SELECT COUNT(*) FROM ps_tmp_c"),
            ],
            b: vec![Q("SELECT COUNT(*) FROM ps_tmp_c")],
            pin: Some("temporary_table"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a hint between CREATE and TEMPORARY",
            a: vec![
                Q("CREATE /*+ x */ TEMPORARY TABLE ps_tmp_h (x INT)"),
                Q("SELECT COUNT(*) FROM ps_tmp_h"),
            ],
            b: vec![Q("SELECT COUNT(*) FROM ps_tmp_h")],
            pin: Some("temporary_table"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "GET_LOCK called by a backticked name",
            a: vec![
                Q("SELECT `GET_LOCK`('ps_lock_q', 0)"),
                Q("SELECT IS_FREE_LOCK('ps_lock_q')"),
            ],
            b: vec![Q("SELECT IS_FREE_LOCK('ps_lock_q')")],
            pin: Some("user_lock"),
            traces: false,
            // As for GET_LOCK: B runs once A ended and its connection was reset.
            a_pooled: vec![],
            b_pooled: vec![(0, rows(&[&["1"]]))],
        },
        Scenario {
            name: "LAST_INSERT_ID(n) called by a backticked name",
            a: vec![
                Q("SELECT `LAST_INSERT_ID`(777)"),
                Q("SELECT LAST_INSERT_ID()"),
            ],
            b: vec![Q("SELECT LAST_INSERT_ID()"), Q("SELECT LAST_INSERT_ID()")],
            pin: Some("last_insert_id"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a user variable past a # inside a running comment",
            a: vec![
                Q("SELECT 1 /*!40000 # */ '\n, @ps_h := 4 -- ' */\n */"),
                Q("SELECT @ps_h"),
            ],
            b: vec![Q("SELECT @ps_h"), Q("SELECT @ps_h")],
            pin: Some("user_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a user variable after 70,000 bytes of string",
            a: vec![
                Q(Box::leak(
                    format!("SELECT LENGTH('{}'), @ps_long := 48", "x".repeat(70_000))
                        .into_boxed_str(),
                )),
                Q("SELECT @ps_long"),
            ],
            b: vec![Q("SELECT @ps_long"), Q("SELECT @ps_long")],
            pin: Some("long_statement"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a prepared SET of a user variable",
            a: vec![
                Exec("SET @ps_pv = ?", vec![Value::Int(5)]),
                Q("SELECT @ps_pv"),
            ],
            b: vec![Q("SELECT @ps_pv"), Q("SELECT @ps_pv")],
            pin: Some("user_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a user variable after a backslash under NO_BACKSLASH_ESCAPES",
            a: vec![
                Q("SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'"),
                // The server reads 'a\', then the variable, then '\'.
                Q("SELECT 'a\\', @ps_nb := 1, '\\'"),
                Q("SELECT @ps_nb"),
            ],
            b: vec![Q("SELECT @@sql_mode"), Q("SELECT @ps_nb, @@sql_mode")],
            pin: Some("user_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "CONNECTION_ID()",
            a: vec![Q("SELECT CONNECTION_ID() > 0"), Q("SELECT 1")],
            b: vec![Q("SELECT 2")],
            pin: Some("connection_id"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a stored function that sets a user variable",
            a: vec![Q("SELECT ps_setv()"), Q("SELECT @ps_fv")],
            b: vec![Q("SELECT @ps_fv"), Q("SELECT @ps_fv")],
            // The text shows a call the allow-list of built-ins does not know.
            pin: Some("function"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a stored function behind a qualifier",
            a: vec![Q("SELECT test.ps_setv()"), Q("SELECT @ps_fv")],
            b: vec![Q("SELECT @ps_fv"), Q("SELECT @ps_fv")],
            pin: Some("function"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a stored function in an UPDATE",
            a: vec![
                Q("UPDATE ps_rows SET v = ps_setv() WHERE id = 1"),
                Q("SELECT @ps_fv"),
            ],
            b: vec![Q("SELECT @ps_fv"), Q("SELECT @ps_fv")],
            pin: Some("function"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "SET ROLE",
            a: vec![Q("SET ROLE ps_role"), Q("SELECT CURRENT_ROLE()")],
            b: vec![Q("SELECT CURRENT_ROLE()"), Q("SELECT CURRENT_ROLE()")],
            // Not replayed (COM_RESET_CONNECTION keeps the role): it pins, and the reset that
            // hands A's connection to B sets the login's role again.
            pin: Some("session_variable"),
            traces: false,
            a_pooled: vec![],
            b_pooled: vec![],
        },
        Scenario {
            name: "a transaction",
            a: vec![
                Q("BEGIN"),
                Q("INSERT INTO ps_rows VALUES (11, 11)"),
                Q("SELECT COUNT(*) FROM ps_rows"),
                Q("COMMIT"),
            ],
            b: vec![
                Q("SELECT COUNT(*) FROM ps_rows"),
                Q("SELECT COUNT(*) FROM ps_rows"),
            ],
            pin: None,
            traces: false,
            // Directly B counts before A's commit; through the pool it waits for the commit.
            a_pooled: vec![],
            b_pooled: vec![(0, rows(&[&["4"]])), (1, rows(&[&["4"]]))],
        },
    ]
}

/// The tables every run starts from: `test.ps_rows` (ids 1..=3), `test.ps_auto` empty with its
/// counter at 1.
fn reset_tables(db: &MariaDb) {
    db.root_exec(
        "CREATE TABLE IF NOT EXISTS test.ps_rows (id INT PRIMARY KEY, v INT); \
         CREATE TABLE IF NOT EXISTS test.ps_auto (id INT AUTO_INCREMENT PRIMARY KEY, v INT); \
         TRUNCATE test.ps_rows; TRUNCATE test.ps_auto; \
         INSERT INTO test.ps_rows VALUES (1, 1), (2, 2), (3, 3);",
    );
    // A stored function that leaves a user variable, and a role `bench` may take.
    db.root_exec(
        "DELIMITER //\n\
         CREATE FUNCTION IF NOT EXISTS test.ps_setv() RETURNS INT \
         BEGIN SET @ps_fv = 57; RETURN 1; END//\n\
         DELIMITER ;\n\
         CREATE ROLE IF NOT EXISTS ps_role; \
         GRANT SELECT ON test.* TO ps_role; \
         GRANT ps_role TO 'bench'@'%'; GRANT ps_role TO 'bench'@'localhost';",
    );
}

/// Logs in as `bench` to the schema `test`.
fn login(addr: &str) -> Opts {
    OptsBuilder::from_opts(common::mariadb::tcp_opts(addr, "bench", "bench"))
        .db_name(Some("test"))
        .into()
}

fn format_row(row: Row) -> Vec<String> {
    row.unwrap().into_iter().map(|v| v.as_sql(true)).collect()
}

async fn run_step(conn: &mut Conn, step: &Step) -> Outcome {
    let failed = |e: mysql_async::Error| match e {
        mysql_async::Error::Server(e) => format!("ERR {}", e.code),
        e => panic!("not a server error: {e}"),
    };
    let mut out = Vec::new();
    match step {
        Q(sql) => {
            let mut result = conn.query_iter(*sql).await.map_err(failed)?;
            while !result.is_empty() {
                let rows: Vec<Row> = result.collect().await.map_err(failed)?;
                out.extend(rows.into_iter().map(format_row));
            }
        }
        Exec(sql, params) => {
            let rows: Vec<Row> = conn.exec(*sql, params.clone()).await.map_err(failed)?;
            out.extend(rows.into_iter().map(format_row));
        }
        Ping => conn.ping().await.map_err(failed)?,
    }
    Ok(out)
}

/// [`run_step`] as the session task runs it.
fn run_boxed(conn: &mut Conn, step: Step) -> Pin<Box<dyn Future<Output = Outcome> + Send + '_>> {
    Box::pin(async move { run_step(conn, &step).await })
}

/// One session's script on its own task (see `common::steps`).
type Session = Steps<Step, Outcome>;

/// Tells `s` its next step and gives it `window` to end; a step still waiting (for the shared
/// connection) is left running.
async fn step(s: &mut Session, step: &Step, window: Duration) {
    s.tell(Some(step.clone()));
    s.settle(window).await;
}

/// Waits for every step told, then ends the session; its outcomes.
async fn finish(mut s: Session, what: &str) -> Vec<Outcome> {
    assert!(
        s.settle(Duration::from_secs(10)).await,
        "{what}: steps still waiting after 10 s: {:?}",
        s.outcomes
    );
    s.tell(None);
    s.outcomes
}

/// What a run of a scenario gave, and which of B's steps had to wait.
#[derive(Debug)]
struct Run {
    a: Vec<Outcome>,
    b: Vec<Outcome>,
    /// B had a step left waiting when A ended.
    b_waited_for_a: bool,
}

/// Runs `s` with A and B logged in at `addr`; `window` is how long a step gets before the
/// script goes on without it.
async fn run(s: &Scenario, a: Conn, b: Conn, window: Duration) -> Run {
    let mut a = Session::start(a, run_boxed);
    let mut b = Session::start(b, run_boxed);
    for i in 0..s.a.len().max(s.b.len()) {
        if let Some(step) = s.a.get(i) {
            self::step(&mut a, step, window).await;
        }
        if let Some(step) = s.b.get(i) {
            self::step(&mut b, step, window).await;
        }
    }
    let a_done = a.settle(Duration::from_secs(10)).await;
    let b_waited_for_a = a_done && !b.settle(window).await;
    let a = finish(a, &format!("{}: A", s.name)).await;
    let b = finish(b, &format!("{}: B", s.name)).await;
    Run {
        a,
        b,
        b_waited_for_a,
    }
}

/// A proxy on `backend` whose default pool shares connections (idle ones close after 300 ms).
fn pooled(backend: &str) -> TestProxy {
    let (idle, wait) = (Duration::from_millis(300), Duration::from_secs(10));
    common::pooling::pooled(&[backend.to_owned()], 4, idle, wait)
}

/// The sum of a counter's series whose labels start with `prefix`.
fn counter_sum(proxy: &TestProxy, prefix: &str) -> f64 {
    let metrics = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 metrics");
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two sessions through `proxy` that share its backend's one connection.
async fn two_sharing(proxy: &TestProxy, backend: &str) -> (Conn, Conn) {
    let opts = login(&proxy.addr_string());
    let a = Conn::new(opts.clone()).await.expect("A through the pool");
    let b = Conn::new(opts).await.expect("B through the pool");
    open_connections(proxy, backend, 1).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_sees_its_own_state_and_never_another_s_as_directly() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let mut failures = Vec::new();
    for s in scenarios() {
        reset_tables(db);
        let opts = login(&backend);
        let direct = run(
            &s,
            Conn::new(opts.clone()).await.unwrap(),
            Conn::new(opts).await.unwrap(),
            Duration::from_secs(2),
        )
        .await;

        reset_tables(db);
        let proxy = pooled(&backend);
        let (a, b) = two_sharing(&proxy, &backend).await;
        let pooled_run = run(&s, a, b, Duration::from_millis(300)).await;
        let pins = counter_sum(&proxy, "mysql_lb_pool_pins_total{");
        let a_pins = match s.pin {
            Some(reason) => proxy
                .series(&format!(
                    "mysql_lb_pool_pins_total{{backend=\"{backend}\",pool=\"default\",reason=\"{reason}\"}}"
                ))
                .unwrap_or(0.0),
            None => 0.0,
        };
        let resets = |reason: &str, outcome: &str| {
            proxy
                .series(&format!(
                    "mysql_lb_pool_resets_total{{backend=\"{backend}\",outcome=\"{outcome}\",pool=\"default\",reason=\"{reason}\"}}"
                ))
                .unwrap_or(0.0)
        };
        // A generated id alone is cleared with `DO LAST_INSERT_ID(0)` (reason `insert_id`).
        let traces_reset = resets("traces", "ok") + resets("insert_id", "ok");
        let failed_resets = ["traces", "insert_id", "session_end", "pinned"]
            .iter()
            .map(|r| resets(r, "failed"))
            .sum::<f64>();
        let open = proxy
            .state
            .server_pools
            .get(&backend)
            .expect("a pool")
            .counts();
        drop(proxy);

        let want_a = expected(&direct.a, &s.a_pooled);
        let want_b = expected(&direct.b, &s.b_pooled);
        if pooled_run.a != want_a {
            failures.push(format!(
                "{}: A got {:?} through the pool, want {:?} (directly {:?})",
                s.name, pooled_run.a, want_a, direct.a
            ));
        }
        if pooled_run.b != want_b {
            failures.push(format!(
                "{}: B got {:?} through the pool, want {:?} (directly {:?}; A directly {:?})",
                s.name, pooled_run.b, want_b, direct.b, direct.a
            ));
        }
        if s.traces != (traces_reset > 0.0) {
            failures.push(format!(
                "{}: {traces_reset} resets for traces, want some: {}",
                s.name, s.traces
            ));
        }
        if failed_resets > 0.0 {
            failures.push(format!("{}: {failed_resets} resets failed", s.name));
        }
        match s.pin {
            // A pinned the one connection: B waited for A's end (and may have pinned too).
            Some(reason) => {
                if a_pins < 1.0 {
                    failures.push(format!("{}: A did not pin for {reason}", s.name));
                }
                if !pooled_run.b_waited_for_a {
                    failures.push(format!(
                        "{}: B did not wait for A's pinned connection",
                        s.name
                    ));
                }
            }
            None => {
                if pins != 0.0 {
                    failures.push(format!("{}: {pins} pins, want the state shared", s.name));
                }
                if open.open != 1 {
                    failures.push(format!("{}: {open:?} at the end, want 1 open", s.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What a fresh login of `bench` to `test` reads, B's script in the reset scenario.
const FRESH_READS: &str = "SELECT @@character_set_client, @@character_set_connection, \
     @@character_set_results, @@collation_connection, DATABASE(), @ps_v, \
     IS_FREE_LOCK('ps_end'), @@autocommit, @@sql_mode, @@time_zone, @@tx_isolation, \
     LAST_INSERT_ID()";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_session_s_end_hands_the_next_session_a_connection_as_fresh_as_a_login() {
    let db = &shared_pair()[1];
    let backend = db.tcp_addr();
    reset_tables(db);
    let mut fresh = Conn::new(login(&backend)).await.unwrap();
    let want = run_step(&mut fresh, &Q(FRESH_READS)).await;
    let want_tmp = run_step(&mut fresh, &Q("SELECT COUNT(*) FROM ps_tmp_end")).await;
    let want_stmt = run_step(&mut fresh, &Q("EXECUTE ps_end_s")).await;
    fresh.disconnect().await.unwrap();

    let proxy = pooled(&backend);
    let (mut a, mut b) = two_sharing(&proxy, &backend).await;
    let id_a: u64 = a
        .query_first("SELECT @@pseudo_thread_id")
        .await
        .unwrap()
        .unwrap();
    for sql in [
        "SET NAMES latin1",
        "USE mysql",
        "SET @ps_v = 1",
        "CREATE TEMPORARY TABLE test.ps_tmp_end (x INT)",
        "SELECT GET_LOCK('ps_end', 0)",
        "SET autocommit = 0",
        "INSERT INTO test.ps_auto (v) VALUES (5)",
        "SET sql_mode = 'ANSI_QUOTES', time_zone = '+03:00'",
        "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "PREPARE ps_end_s FROM 'SELECT 1'",
    ] {
        a.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let _: Vec<u8> = a.exec("SELECT ?", (1,)).await.unwrap();
    // A's session ends with a transaction open, pinned: the connection comes back reset.
    a.disconnect().await.unwrap();
    let got = run_step(&mut b, &Q(FRESH_READS)).await;
    let got_tmp = run_step(&mut b, &Q("SELECT COUNT(*) FROM ps_tmp_end")).await;
    let got_stmt = run_step(&mut b, &Q("EXECUTE ps_end_s")).await;
    let id_b: u64 = b
        .query_first("SELECT @@pseudo_thread_id")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(id_b, id_a, "B runs on the connection A pinned");
    let resets = proxy.series(&format!(
        "mysql_lb_pool_resets_total{{backend=\"{backend}\",outcome=\"ok\",pool=\"default\",reason=\"pinned\"}}"
    ));
    assert_eq!(resets, Some(1.0), "A's connection was reset once");
    assert_eq!(got, want, "B reads what a fresh login reads");
    assert_eq!(got_tmp, want_tmp, "A's temporary table is gone");
    assert_eq!(got_stmt, want_stmt, "A's prepared statement is gone");
    let n: u64 = b
        .query_first("SELECT COUNT(*) FROM test.ps_auto")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0, "A's open transaction was rolled back");
    b.disconnect().await.unwrap();
}

/// A client that sends COM_QUIT and waits for the server to close (as Node mysql2's `end()`
/// does) is closed at once, whether its session holds its connection for good or for one more
/// command; its connection goes back to the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_com_quit_closes_the_client_s_side_while_the_session_holds_its_connection() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    reset_tables(db);
    let proxy = pooled(&backend);
    let addr = proxy.addr_string();
    for (holding, sql) in [
        ("pinned", "SET @ps_quit = 1"),
        ("one more command", "UPDATE test.ps_rows SET v = v + 1"),
    ] {
        let mut client = RawClient::connect_tcp(&addr, "bench", "bench", Some("test"), 0, 0)
            .await
            .expect("log in through the pool");
        client.query_results(sql).await.expect(sql);
        client.send_command(0x01, &[]).await.expect("COM_QUIT");
        let closed = tokio::time::timeout(Duration::from_secs(2), client.read_packet()).await;
        assert!(
            matches!(closed, Ok(Err(_))),
            "{holding}: the proxy did not close after COM_QUIT: {closed:?}"
        );
    }
    let pool = proxy.state.server_pools.get(&backend).expect("a pool");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.counts().open != pool.counts().idle {
        assert!(Instant::now() < deadline, "{:?}", pool.counts());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        pool.counts().idle >= 1,
        "the connections came back: {:?}",
        pool.counts()
    );
}

/// What the statement's text cannot show: a view whose column calls a stored function that sets
/// a user variable. A server with `session_track_state_change = ON` (set globally by the
/// operator; the proxy sets nothing) flags that statement's answer as a session state change,
/// and the session pins its connection: another session of the user never reads the variable,
/// and the session itself does, as directly. MariaDB 10.11 flags it to a client that asked for
/// session tracking (`CLIENT_SESSION_TRACK`), and in the EOF of a result set to one that did not;
/// not in the closing OK of a client with `CLIENT_DEPRECATE_EOF` and no tracking (mysql_async),
/// which is left as the documented gap. The sessions here are raw clients of each kind that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_calling_a_stateful_function_pins_when_the_server_tracks_state_changes() {
    use common::rawclient::{RawClient, CLIENT_DEPRECATE_EOF, CLIENT_SESSION_TRACK};
    let dbs = tokio::task::block_in_place(|| start_dedicated(&["ps-view"]));
    let db = &dbs[0];
    reset_tables(db);
    db.root_exec(
        "CREATE VIEW IF NOT EXISTS test.ps_view AS SELECT test.ps_setv() AS x; \
         SET GLOBAL session_track_state_change = ON;",
    );
    let backend = db.tcp_addr();
    for caps in [0, CLIENT_SESSION_TRACK | CLIENT_DEPRECATE_EOF] {
        let proxy = common::pooling::pooled(
            std::slice::from_ref(&backend),
            4,
            Duration::from_secs(60),
            Duration::from_secs(5),
        );
        let addr = proxy.addr_string();
        let login = || RawClient::connect_tcp(&addr, "bench", "bench", Some("test"), caps, 0);
        let mut a = login().await.expect("A through the pool");
        let mut b = login().await.expect("B through the pool");
        open_connections(&proxy, &backend, 2).await;
        let x = a.query_text("SELECT x FROM ps_view").await.unwrap();
        assert_eq!(x, vec![vec![Some("1".to_owned())]]);
        let metrics = String::from_utf8(proxy.state.metrics.render()).unwrap();
        let state_pins: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("mysql_lb_pool_pins_total{"))
            .filter(|l| l.contains("session_state_changed"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(
            state_pins, 1.0,
            "caps {caps:#x}: A pinned for the state change"
        );
        for _ in 0..10 {
            let seen = b.query_text("SELECT @ps_fv").await.unwrap();
            assert_eq!(
                seen,
                vec![vec![None]],
                "caps {caps:#x}: B reads A's variable"
            );
        }
        let own = a.query_text("SELECT @ps_fv").await.unwrap();
        assert_eq!(own, vec![vec![Some("57".to_owned())]], "caps {caps:#x}");
    }
}
