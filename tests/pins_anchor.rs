//! `sql::pins` against the real server. MariaDB can say itself whether a statement changed the
//! session: with `session_track_state_change`, `session_track_schema` and
//! `session_track_system_variables='*'` on, and a client that negotiates
//! `CLIENT_SESSION_TRACK`, it sets `SERVER_SESSION_STATE_CHANGED` in the status of the OK/EOF
//! that ends the statement. So every corpus statement `pins` calls stateless must come back
//! without that flag, and statements known to change the session must come back with it (and
//! be pinned here). Statements that change the session without the server flagging them are
//! listed in `NOT_FLAGGED`, so a server that starts flagging them fails here too.

mod common;

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::rawclient::{
    parse_err, RawClient, CLIENT_DEPRECATE_EOF, CLIENT_SESSION_TRACK, COM_QUERY,
    SERVER_MORE_RESULTS_EXISTS,
};
use mysql_lb::wire::sql::pins::{pins, pins_for, Pin};
use mysql_lb::wire::sql::{Dialect, Server};

/// The corpus says what MariaDB 10.11 runs.
fn on_mariadb(text: &[u8]) -> Option<Pin> {
    pins_for(
        text,
        Dialect {
            server: Some(Server::MARIADB_10_11),
        },
    )
}

/// The unit tests' corpus: (statement, what `pins` says).
const CORPUS: &[(&str, Option<Pin>)] = include!("../src/wire/sql/pins/corpus.rs");

const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;
const SCHEMA: &str = "test";

/// Stateless corpus statements the server answers with an error here, with the reason: an
/// error carries no status, so nothing is checked for them but that they fail.
const MAY_FAIL: &[(&str, &str)] = &[
    (
        "TABLE t",
        "MySQL 8 syntax; MariaDB 10.11 has no TABLE statement",
    ),
    (
        "LOAD DATA INFILE '/nonexistent/pins' INTO TABLE t",
        "no such file on the server",
    ),
    ("KILL QUERY 999999", "no such thread"),
];

/// Statements that change the session state and that MariaDB flags (each run on a fresh
/// connection): system variables (with their new values in the OK), the schema, `SET` of a
/// user variable, temporary tables and prepared statements.
const FLAGGED: &[&str] = &[
    "SET autocommit = 0",
    "SET NAMES latin1",
    "SET sql_mode = ''",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "/*!40101 SET NAMES utf8 */",
    "USE sbtest",
    "SET @x = 1",
    "CREATE TEMPORARY TABLE pins_tmp (a INT)",
    "PREPARE pins_stmt FROM 'SELECT 1'",
    // MariaDB skips MySQL 5.7+ comments: the SET runs.
    "/*!99999 SELECT */ SET autocommit = 0",
    "/*!50700 SELECT 1 */ USE sbtest",
    "CREATE /*+ x */ TEMPORARY TABLE pins_tmp3 (a INT)",
];

/// Statements that change the session state but that MariaDB 10.11 does not flag: a user
/// variable set outside `SET`, user and table locks, the values `FOUND_ROWS()`,
/// `LAST_INSERT_ID()` and `LASTVAL()` return later, open handlers and XA transactions. `pins`
/// must still pin them; the server must still not flag them (else move them to `FLAGGED`).
const NOT_FLAGGED: &[&str] = &[
    "SELECT @x := 1",
    "SELECT GET_LOCK('pins_lock', 0)",
    "LOCK TABLES t READ",
    "SELECT SQL_CALC_FOUND_ROWS a FROM t LIMIT 1",
    "SELECT LAST_INSERT_ID(5)",
    "SELECT NEXTVAL(pins_seq)",
    "HANDLER t OPEN",
    "XA START 'pins'",
    "SELECT `GET_LOCK`('pins_lock2', 0)",
    "SELECT `LAST_INSERT_ID`(777)",
    "SELECT 1 /*!40000 # */ '\n, @x := 4 -- ' */\n */",
];

/// Stateless statements that MariaDB flags anyway, with the variable concerned: `SET STATEMENT
/// var = value FOR ...` reports `var` with the statement's value in the OK, although the
/// session's value is restored when the statement ends. The test checks both: the flag, and the
/// session value unchanged.
const FLAGGED_BUT_RESTORED: &[(&str, &str)] = &[(
    "SET STATEMENT max_statement_time = 10 FOR SELECT a FROM t",
    "max_statement_time",
)];

/// Tables and objects the corpus uses, in schema `test`.
const SETUP: &str = "\
CREATE TABLE test.t (a INT PRIMARY KEY AUTO_INCREMENT, b VARCHAR(20));
INSERT INTO test.t (b) VALUES ('a'), ('b');
CREATE TABLE test.t2 (a INT PRIMARY KEY AUTO_INCREMENT, b VARCHAR(20));
INSERT INTO test.t2 (b) VALUES ('c');
CREATE FULLTEXT INDEX pins_ft ON test.t2 (b);
CREATE SEQUENCE test.pins_seq;
CREATE USER 'pins_user'@'localhost';
";

/// Runs `sql` and returns the OR of the status flags of every OK/EOF that ends one of its
/// results, or the server's error.
async fn status_of(client: &mut RawClient, sql: &str) -> Result<u16, String> {
    client.send_command(COM_QUERY, sql.as_bytes()).await?;
    let mut flags = 0u16;
    loop {
        let (_, first) = client.read_logical().await?;
        let status = match first.first() {
            Some(0x00) => ok_status(&first)?,
            Some(0xff) => return Err(parse_err(&first)),
            Some(0xfb) => return Err("LOCAL INFILE request".to_string()),
            _ => {
                let (columns, _) = lenenc(&first, 0)?;
                for _ in 0..columns {
                    client.read_logical().await?;
                }
                let (_, eof) = client.read_logical().await?;
                if eof.first() != Some(&0xfe) {
                    return Err(format!("expected EOF after columns, got {eof:02x?}"));
                }
                loop {
                    let (_, row) = client.read_logical().await?;
                    match row.first() {
                        Some(0xff) => return Err(parse_err(&row)),
                        Some(0xfe) if row.len() < 9 => break eof_status(&row)?,
                        _ => {}
                    }
                }
            }
        };
        flags |= status;
        if status & SERVER_MORE_RESULTS_EXISTS == 0 {
            return Ok(flags);
        }
    }
}

/// A length-encoded integer at `at`: its value and the offset after it.
fn lenenc(p: &[u8], at: usize) -> Result<(u64, usize), String> {
    let bytes = |n: usize| {
        p.get(at + 1..at + 1 + n)
            .map(|b| b.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)))
            .ok_or_else(|| format!("short lenenc in {p:02x?}"))
    };
    match p.get(at) {
        Some(&b @ 0..=0xfa) => Ok((u64::from(b), at + 1)),
        Some(0xfc) => Ok((bytes(2)?, at + 3)),
        Some(0xfd) => Ok((bytes(3)?, at + 4)),
        Some(0xfe) => Ok((bytes(8)?, at + 9)),
        _ => Err(format!("bad lenenc in {p:02x?}")),
    }
}

/// OK: header, affected rows, last insert id, then the status flags.
fn ok_status(p: &[u8]) -> Result<u16, String> {
    let (_, at) = lenenc(p, 1)?;
    let (_, at) = lenenc(p, at)?;
    match p.get(at..at + 2) {
        Some(&[lo, hi]) => Ok(u16::from_le_bytes([lo, hi])),
        _ => Err(format!("short OK {p:02x?}")),
    }
}

/// EOF: header, warnings, then the status flags.
fn eof_status(p: &[u8]) -> Result<u16, String> {
    match p.get(3..5) {
        Some(&[lo, hi]) => Ok(u16::from_le_bytes([lo, hi])),
        _ => Err(format!("short EOF {p:02x?}")),
    }
}

async fn connect(db: &MariaDb) -> RawClient {
    let client = RawClient::connect_tcp(
        &db.tcp_addr(),
        BENCH_USER,
        BENCH_PASS,
        Some(SCHEMA),
        CLIENT_SESSION_TRACK,
        CLIENT_DEPRECATE_EOF,
    )
    .await
    .expect("log in with CLIENT_SESSION_TRACK");
    assert_ne!(
        client.caps & CLIENT_SESSION_TRACK,
        0,
        "CLIENT_SESSION_TRACK not negotiated"
    );
    client
}

#[tokio::test]
async fn the_server_flags_what_pins_pins_and_nothing_it_calls_stateless() {
    let db = MariaDb::start_with_args(
        "pins",
        &[
            "--session-track-state-change=ON",
            "--session-track-schema=ON",
            "--session-track-system-variables=*",
        ],
    );
    db.root_exec(SETUP);

    // Every stateless corpus statement, in order, on one connection.
    let mut client = connect(&db).await;
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (sql, want) in CORPUS {
        assert_eq!(
            on_mariadb(sql.as_bytes()),
            *want,
            "{sql:?}: the unit tests fail too"
        );
        if want.is_some() {
            continue;
        }
        if let Some((_, var)) = FLAGGED_BUT_RESTORED.iter().find(|(s, _)| s == sql) {
            let read = format!("SELECT @@SESSION.{var}");
            let before = client.query_text(&read).await.expect("read the variable");
            match status_of(&mut client, sql).await {
                Ok(flags) if flags & SERVER_SESSION_STATE_CHANGED != 0 => checked += 1,
                Ok(_) => wrong.push(format!(
                    "{sql:?}: no longer flagged: move it out of FLAGGED_BUT_RESTORED"
                )),
                Err(e) => wrong.push(format!("{sql:?}: {e}")),
            }
            let after = client.query_text(&read).await.expect("read the variable");
            if before != after {
                wrong.push(format!("{sql:?}: {var} was {before:?}, is {after:?}"));
            }
            continue;
        }
        let may_fail = MAY_FAIL.iter().find(|(s, _)| s == sql);
        match (status_of(&mut client, sql).await, may_fail) {
            (Ok(flags), None) => {
                checked += 1;
                if flags & SERVER_SESSION_STATE_CHANGED != 0 {
                    wrong.push(format!("{sql:?}: the server flags a session state change"));
                }
            }
            (Err(e), None) => wrong.push(format!("{sql:?}: {e}")),
            (Ok(_), Some((_, why))) => {
                wrong.push(format!("{sql:?}: succeeded, but listed as failing ({why})"))
            }
            (Err(_), Some(_)) => {}
        }
    }
    assert!(checked >= 60, "only {checked} stateless statements checked");

    // The state-changing statements, each on a fresh connection.
    for (sql, flagged) in FLAGGED
        .iter()
        .map(|s| (s, true))
        .chain(NOT_FLAGGED.iter().map(|s| (s, false)))
    {
        if on_mariadb(sql.as_bytes()).is_none() || pins(sql.as_bytes()).is_none() {
            wrong.push(format!("{sql:?}: changes the session but is not pinned"));
        }
        let mut client = connect(&db).await;
        match status_of(&mut client, sql).await {
            Ok(flags) if (flags & SERVER_SESSION_STATE_CHANGED != 0) != flagged => {
                wrong.push(format!(
                    "{sql:?}: the server's flag is {}, listed as {flagged}",
                    !flagged
                ))
            }
            Ok(_) => {}
            Err(e) => wrong.push(format!("{sql:?}: {e}")),
        }
        client.quit().await.expect("quit");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Why an executable comment the server runs is read as code to the `*/` its lexer reaches:
/// the server reads quotes inside it, so its `*/` may stand in a string (here `SELECT 'a*/'`),
/// and so does the lexer in a server's reading. And why a trailing comment after `;` is still one
/// statement here: MariaDB answers it with a second, empty OK, which changes nothing.
#[tokio::test]
async fn the_server_reads_quotes_inside_executable_comments() {
    let db = MariaDb::start("pins_lexer");
    let mut client = connect(&db).await;

    let quoted = "SELECT /*! 'a*/' */";
    let rows = client.query_text(quoted).await.expect("run it");
    assert_eq!(rows, vec![vec![Some("a*/".to_string())]]);
    assert_eq!(pins(quoted.as_bytes()), None);
    let read: Vec<_> = mysql_lb::wire::sql::tokens_as(
        quoted.as_bytes(),
        mysql_lb::wire::sql::Reading {
            comments: mysql_lb::wire::sql::Comments::Server(Server::MARIADB_10_11),
            ..mysql_lb::wire::sql::Reading::DIGEST
        },
    )
    .map(|t| t.text)
    .collect();
    assert_eq!(read, vec![&b"SELECT"[..], b"'a*/'"]);

    let trailing = "SELECT 1;  -- done";
    let results = client.query_results(trailing).await.expect("run it");
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results.get(1), Some(&Vec::new()), "{results:?}");
    assert_eq!(pins(trailing.as_bytes()), None);
    client.quit().await.expect("quit");
}
