//! `sql::functions` against the real server: every name of the allow-list is a built-in of
//! MariaDB 10.11, in whatever way it is called, and never a stored function's name.
//!
//! MariaDB resolves a name followed by `(` that is neither in its grammar nor among its native
//! functions as a stored function of the current schema, and when there is none it says so:
//! error 1305 (`ER_SP_DOES_NOT_EXIST`), or 1630 (`ER_FUNC_INEXISTENT_NAME_COLLISION`) for a name
//! that is also a built-in's keyword. A built-in answers with a result, a syntax error (1064),
//! a wrong parameter count (1582) or a type error instead. So, in a schema without stored
//! functions (and with one selected: without a current schema the answer would be 1046, "No
//! database selected"), a call of an allowed name with zero to three arguments must never
//! answer 1305 or 1630, nor may a word of `syntax_paren` followed by `(`. The test also pins
//! down the ways a built-in's name does reach a stored function (a space before its `(`, its
//! name in backticks, a constructor's argument count), which callers must keep out.

mod common;

// The module itself, compiled into this test too: its lists are private to the crate.
#[path = "../src/wire/sql/functions.rs"]
#[allow(dead_code)] // the crate's callers are not compiled here
mod functions;

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};

const ER_SP_DOES_NOT_EXIST: u16 = 1305;
const ER_FUNC_INEXISTENT_NAME_COLLISION: u16 = 1630;

use functions::ADJACENT_PAREN;

/// The error code the server answers `sql` with, None when it succeeds.
async fn error_of(conn: &mut Conn, sql: &str) -> Option<u16> {
    match conn.query_drop(sql).await {
        Ok(()) => None,
        Err(mysql_async::Error::Server(e)) => Some(e.code),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// Whether the server resolved the call in `sql` as a stored function's (none exists).
async fn stored(conn: &mut Conn, sql: &str) -> bool {
    matches!(
        error_of(conn, sql).await,
        Some(ER_SP_DOES_NOT_EXIST | ER_FUNC_INEXISTENT_NAME_COLLISION)
    )
}

async fn connect(db: &MariaDb, schema: &str) -> Conn {
    let opts = OptsBuilder::from_opts(db.opts(BENCH_USER, BENCH_PASS)).db_name(Some(schema));
    Conn::new(opts).await.expect("connect")
}

#[tokio::test]
async fn every_allowed_name_is_a_built_in_and_no_syntax_word_is_a_call() {
    let db = MariaDb::start("functions");
    let version = db.root_query("SELECT VERSION()");
    assert!(
        version.starts_with("10.11."),
        "the lists are anchored on 10.11: {version}"
    );
    let mut conn = connect(&db, "test").await;
    let mut wrong = Vec::new();

    let mut checked = 0;
    for name in functions::PURE {
        assert!(
            functions::pure_builtin(name.as_bytes())
                && mysql_lb::wire::sql::functions::pure_builtin(name.to_lowercase().as_bytes()),
            "{name}"
        );
        for args in ["", "1", "1, 1", "1, 1, 1"] {
            let sql = format!("SELECT {name}({args})");
            if stored(&mut conn, &sql).await {
                wrong.push(format!("{sql}: resolved as a stored function"));
            }
            checked += 1;
        }
        // A space before the `(`: still the built-in, except for the lexer's function keywords.
        let spaced = format!("SELECT {name} ()");
        let adjacent = ADJACENT_PAREN.binary_search(name).is_ok();
        if stored(&mut conn, &spaced).await != adjacent {
            wrong.push(format!(
                "{spaced}: {} a stored function, ADJACENT_PAREN says otherwise",
                if adjacent { "not" } else { "is" }
            ));
        }
    }
    assert!(checked >= 1600, "only {checked} calls checked");

    // Not in MariaDB 10.11: each is a stored function's name there (else move it to PURE).
    for name in functions::MYSQL_ONLY {
        assert!(functions::pure_builtin(name.as_bytes()), "{name}");
        let sql = format!("SELECT {name}()");
        if error_of(&mut conn, &sql).await != Some(ER_SP_DOES_NOT_EXIST) {
            wrong.push(format!("{sql}: MariaDB knows it, move it to PURE"));
        }
    }

    for word in functions::SYNTAX {
        assert!(functions::syntax_paren(word.as_bytes()), "{word}");
        for sql in [format!("SELECT {word}(1)"), format!("SELECT {word} (1)")] {
            if stored(&mut conn, &sql).await {
                wrong.push(format!("{sql}: resolved as a stored function"));
            }
        }
    }
    for pair in ADJACENT_PAREN.windows(2) {
        assert!(pair[0] < pair[1], "ADJACENT_PAREN: {pair:?}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A stored function is not a built-in, and the ways a built-in's name reaches one.
#[tokio::test]
async fn stored_functions_are_not_built_ins() {
    let db = MariaDb::start("functions_stored");
    db.root_exec(
        "CREATE DATABASE shadow;
         CREATE FUNCTION shadow.f() RETURNS INT RETURN 1;
         CREATE FUNCTION shadow.`sum`(a INT) RETURNS INT RETURN 42;
         CREATE FUNCTION shadow.`left`(a TEXT, b INT) RETURNS TEXT RETURN 'stored';
         CREATE FUNCTION shadow.`abs`(a INT) RETURNS INT RETURN 43;
         CREATE FUNCTION shadow.`point`(a INT) RETURNS INT RETURN 44;
         CREATE FUNCTION shadow.`json_table`(a INT) RETURNS INT RETURN 45;",
    );
    let mut conn = connect(&db, "shadow").await;
    let one: Option<i64> = conn.query_first("SELECT f()").await.expect("SELECT f()");
    assert_eq!(one, Some(1));
    assert!(!mysql_lb::wire::sql::functions::pure_builtin(b"f"));
    assert!(!functions::pure_builtin(b"F"));

    // Bare and adjacent: the built-ins, whatever the schema holds.
    let row: Option<(i64, String, i64)> = conn
        .query_first("SELECT sum(1), left('abc', 1), abs(-1)")
        .await
        .expect("the built-ins");
    assert_eq!(row, Some((1, "a".to_string(), 1)));
    // A space before the `(` of a lexer's function keyword: the stored function (`LEFT` is a
    // reserved word, and stays the built-in).
    let spaced: Option<(i64, String)> = conn
        .query_first("SELECT sum (1), left ('abc', 1)")
        .await
        .expect("spaced");
    assert_eq!(spaced, Some((42, "a".to_string())));
    // Backticks: the stored function, unless the name is one of MariaDB's native functions.
    let quoted: Option<(i64, String, i64)> = conn
        .query_first("SELECT `sum`(1), `left`('abc', 1), `abs`(-1)")
        .await
        .expect("quoted");
    assert_eq!(quoted, Some((42, "stored".to_string(), 1)));
    // A qualifier: always the stored function.
    let qualified: Option<i64> = conn
        .query_first("SELECT shadow.abs(-1)")
        .await
        .expect("qualified");
    assert_eq!(qualified, Some(43));
    // A constructor with an argument count it does not take, and JSON_TABLE in an expression:
    // the stored function (hence both are left out of the allow-list).
    let odd: Option<(i64, i64, i64)> = conn
        .query_first("SELECT point(1), json_table(1), point(1, 2) IS NOT NULL")
        .await
        .expect("constructor");
    assert_eq!(odd, Some((44, 45, 1)));
    for name in ["point", "json_table"] {
        assert!(!functions::pure_builtin(name.as_bytes()), "{name}");
    }
}
