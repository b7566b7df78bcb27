//! The server is the oracle: generated statements run on a real MariaDB, which says what each
//! one did to the session and to the data; the proxy's SQL layer must have read them so.
//!
//! `tests/pins_anchor.rs` checks a fixed corpus; this test generates thousands of statements
//! from fixed seeds, built to sit where a lexer can disagree with the server's: comments of
//! every form (version-gated executable comments on both sides of the server's version,
//! `/*M!`, hints, `#` and `-- ` inside executable comments, unterminated and nested ones),
//! quotes and escapes under `ANSI_QUOTES` / `NO_BACKSLASH_ESCAPES`, multibyte character sets
//! whose second byte can be `\` or `` ` `` (gbk, sjis, cp932, big5), backticked built-ins and
//! multi-statements, around statements that change the session and ones that do not.
//!
//! Each statement runs on a session reset with `COM_RESET_CONNECTION` (then given the case's
//! `sql_mode` and `SET NAMES`). What it changed is read two ways: the server's own report
//! (`SERVER_SESSION_STATE_CHANGED` with every session tracker on), and direct reads against a
//! baseline taken just before (the planted user variables, the user lock, `LOCK TABLES`,
//! temporary tables, prepared statements, the sequence's `LASTVAL`, `LAST_INSERT_ID()`,
//! `FOUND_ROWS()` beyond the rows sent, session variables). Then:
//!
//! - a statement that changed the session must be pinned (`pins(text).is_some()`);
//! - a statement that changed rows of the scratch table must not be read-only
//!   ([`lexer_says_read_only`]);
//! - a statement whose result shows the connection's id (`CONNECTION_ID()`) must be pinned: a
//!   pooled session would see another connection's id next time;
//! - the statement kind the server ran (the first word of its digest text in
//!   `performance_schema.events_statements_history`) must be the kind `classify` reads;
//! - marker aliases (`mkq1`..) placed inside executable comments show which comments the
//!   server ran (they are in its digest text) and which ours read ([`lexer_runs_markers`]).
//!
//! The misreadings known when it was written ([`KNOWN`]) run first, every time. The session is
//! reset with `COM_RESET_CONNECTION`, which keeps the current schema: each case starts with
//! `USE test` again.
//!
//! CI runs a few thousand cases (bounded in time too); `SQL_ORACLE_CASES=100000` runs more,
//! `SQL_ORACLE_SEED=n` starts from another seed. A failure prints, per shape of statement and
//! kind of disagreement, up to three statements shrunk to what still fails, as escaped bytes,
//! with the seed and what differed.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::rawclient::{
    RawClient, Rows, Tracked, CLIENT_MULTI_STATEMENTS, CLIENT_SESSION_TRACK,
    SERVER_SESSION_STATE_CHANGED,
};
use common::steps::Rng;
use mysql_lb::wire::sql::pins::pins;
use mysql_lb::wire::sql::{
    classify, classify_as, tokens_as, Comments, Multibyte, Reading, Server, Statement, TokenKind,
};

/// Cases per run in CI (all seeds together), unless `SQL_ORACLE_CASES` says otherwise.
const DEFAULT_CASES: usize = 2400;
/// Seeds CI runs, each for an equal share of the cases.
const SEEDS: [u64; 3] = [0x5eed_0001, 0x5eed_0002, 0x5eed_0003];
/// Running cases stops here even if some are left (the report says how many ran).
const TIME_BUDGET: Duration = Duration::from_secs(35);
/// Examples kept per shape and kind of failure.
const EXAMPLES: usize = 2;
/// Re-runs a failing statement may take while being shrunk, and the time all shrinking may
/// take (after it, examples are shown as generated).
const SHRINK_STEPS: usize = 80;
const SHRINK_BUDGET: Duration = Duration::from_secs(15);

/// The finding for a statement that shows `CONNECTION_ID()`: one group whatever the shape,
/// since today every such statement is unpinned.
const CONNECTION_ID_SHOWN: &str = "connection id shown but not pinned";

const SCHEMA: &str = "test";

/// The scratch objects, in schema `test`: `o` is the table statements write (no
/// AUTO_INCREMENT: only `LAST_INSERT_ID(n)` moves `LAST_INSERT_ID()`), `lockprobe` is never
/// named by a case (reading it fails under `LOCK TABLES`), `oseq` the sequence.
const SETUP: &str = "\
CREATE TABLE test.o (id INT PRIMARY KEY, v INT, s VARBINARY(40));
INSERT INTO test.o VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c'), (4, 4, 'd'), (5, 5, 'e');
CREATE TABLE test.lockprobe (x INT);
CREATE SEQUENCE test.oseq;
CREATE DATABASE oracle_other;
CREATE TABLE oracle_other.o (id INT PRIMARY KEY, v INT, s VARBINARY(40));
";

/// Puts the scratch objects back as [`SETUP`] left them, whatever a case (or a statement
/// being shrunk) did to them: ids 6..=20 inserted, values changed, a base table named like a
/// temporary one created.
const RESTORE: &str = "\
DELETE FROM test.o; \
INSERT INTO test.o VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c'), (4, 4, 'd'), (5, 5, 'e'); \
DROP TABLE IF EXISTS test.tmp_a, oracle_other.tmp_a";

/// How often the scratch table is restored (writes keep changing its checksum meanwhile).
const RESTORE_EVERY: usize = 100;

/// Every probe holds this marker, so the digest history can leave them out.
const PROBE_MARK: &str = "oracle_probe";

/// The replay's read-only test: true only when every reading the server could take is
/// read-only.
fn lexer_says_read_only(text: &[u8]) -> bool {
    mysql_lb::wire::sql::read_only(text)
}

/// The reading the server takes of a case: MariaDB 10.11's comments, the case's `sql_mode`
/// quoting and character set.
fn server_reading(case: &Case) -> Reading {
    let mode = case.sql_mode.unwrap_or("").to_ascii_uppercase();
    let multibyte = match case.charset.map(str::to_ascii_lowercase).as_deref() {
        Some("gbk") => Multibyte::Gbk,
        Some("big5") => Multibyte::Big5,
        Some("sjis" | "cp932") => Multibyte::Sjis,
        _ => Multibyte::None,
    };
    Reading {
        comments: Comments::Server(Server::MARIADB_10_11),
        backslash_escapes: !mode.contains("NO_BACKSLASH_ESCAPES"),
        ansi_quotes: mode.contains("ANSI_QUOTES") || mode.contains("ANSI,") || mode == "ANSI",
        multibyte,
    }
}

/// Whether the server's reading of a case is a `SET STATEMENT .. FOR ..`.
fn set_statement(case: &Case) -> bool {
    let mut words =
        tokens_as(&case.text, server_reading(case)).filter(|t| t.kind != TokenKind::Hint);
    words.next().is_some_and(|t| t.is_word("SET"))
        && words.next().is_some_and(|t| t.is_word("STATEMENT"))
}

/// The kind of statement the server's reading of a case is.
fn server_kind<'a>(case: &Case, text: &'a [u8]) -> Statement<'a> {
    classify_as(text, server_reading(case))
}

/// Which marker aliases `mkq0`..`mkq9` the lexer's reading of the case runs: every word
/// outside comments, executable comments run or skipped as MariaDB 10.11 does.
fn lexer_runs_markers(case: &Case, text: &[u8]) -> Vec<u8> {
    let mut found: Vec<u8> = tokens_as(text, server_reading(case))
        .filter(|t| matches!(t.kind, TokenKind::Identifier | TokenKind::Keyword))
        .filter_map(|t| match t.text {
            [b'm' | b'M', b'k' | b'K', b'q' | b'Q', d @ b'0'..=b'9'] => Some(*d - b'0'),
            _ => None,
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

// ---------------------------------------------------------------------------------------------
// The generator.

/// One generated statement and the session it runs in.
#[derive(Clone, Debug)]
struct Case {
    /// Which template built it: failures are grouped by it.
    shape: &'static str,
    /// `SET SESSION sql_mode` before the statement (`None`: the server's default).
    sql_mode: Option<&'static str>,
    /// `SET NAMES` before the statement (`None`: the login's utf8mb4).
    charset: Option<&'static str>,
    text: Vec<u8>,
}

/// The misreadings known when this test was written, run before the generated cases so every
/// run covers them: (sql_mode, SET NAMES, text).
const KNOWN: &[(Option<&str>, Option<&str>, &[u8])] = &[
    (None, None, b"/*!99999 SELECT */ SET autocommit=0"),
    (None, None, b"/*!50700 SELECT */ UPDATE o SET v = v + 1"),
    (None, None, b"CREATE /*+ x */ TEMPORARY TABLE tmp_a (x INT)"),
    (None, None, b"SELECT `GET_LOCK`('ol', 0)"),
    (None, None, b"SELECT `LAST_INSERT_ID`(777)"),
    (None, None, b"SELECT 1 /*!40000 # */ /*\n, @a := 1 */"),
    (None, None, b"SELECT 1 /*!40000 #*/ '\n, @a := 1 */ , 'x'"),
    (None, None, b"SELECT /*! 'a*/' */, @a := 1"),
    (
        Some("ANSI_QUOTES"),
        None,
        b"SELECT 1 AS \"x\\\", @a := 1 AS \"y\"",
    ),
    (
        Some("NO_BACKSLASH_ESCAPES"),
        None,
        b"SELECT 'x\\', @a := 1, 'y'",
    ),
    (None, Some("gbk"), b"SELECT '\xb5\\', @a := 1, 'y'"),
    (None, Some("sjis"), b"SELECT '\x95\\', @a := 1, 'y'"),
    (
        None,
        Some("big5"),
        b"SELECT '\xa5\\'; SET autocommit = 0; SELECT 'y'",
    ),
    (None, Some("gbk"), b"SELECT 1 AS `\xb5`` , @a := 1 AS `y`"),
    (None, None, b"SELECT CONNECTION_ID()"),
    (None, None, b"SELECT 1; UPDATE o SET v = v + 1"),
];

/// Statements that change the session, tokens separated by single spaces (comments are
/// injected at the spaces).
const STATEFUL: &[&str] = &[
    "SET autocommit = 0",
    "SET @@session.autocommit = 0",
    "SET SESSION sql_select_limit = 7",
    "SET time_zone = '+01:00'",
    "SET NAMES latin1",
    "SET @a = 1",
    "SELECT @b := 2",
    "SELECT 3 INTO @c",
    "USE oracle_other",
    "CREATE TEMPORARY TABLE tmp_a ( x INT )",
    "CREATE OR REPLACE TEMPORARY TABLE tmp_a ( x INT )",
    "SELECT GET_LOCK ( 'ol' , 0 )",
    "SELECT `GET_LOCK` ( 'ol' , 0 )",
    "SELECT `get_lock`('ol', 0)",
    "SELECT LAST_INSERT_ID ( 777 )",
    "SELECT `LAST_INSERT_ID` ( 777 )",
    "SELECT SQL_CALC_FOUND_ROWS v FROM o LIMIT 1",
    "PREPARE ps1 FROM 'SELECT 1'",
    "LOCK TABLES o READ",
    "LOCK TABLE o WRITE",
    "SELECT NEXTVAL ( oseq )",
    "SELECT `NEXTVAL` ( oseq )",
    "SELECT NEXT VALUE FOR oseq",
    "SELECT SETVAL ( oseq , 50 )",
    "SELECT CONNECTION_ID ( )",
    "SELECT `CONNECTION_ID` ( )",
];

/// Expressions that change the session (or show the connection), for a `SELECT` list.
const STATEFUL_EXPR: &[&str] = &[
    "@a := 1",
    "@x := 'q'",
    "GET_LOCK ( 'ol' , 0 )",
    "`GET_LOCK` ( 'ol' , 0 )",
    "LAST_INSERT_ID ( 777 )",
    "`LAST_INSERT_ID` ( 777 )",
    "`last_insert_id`(777)",
    "NEXTVAL ( oseq )",
    "`NEXTVAL` ( oseq )",
    "NEXT VALUE FOR oseq",
    "CONNECTION_ID ( )",
    "`CONNECTION_ID` ( )",
    "( SELECT @b := 2 )",
];

/// Statements that leave no session state; the writes change the scratch table.
const STATELESS: &[&str] = &[
    "SELECT 1",
    "SELECT v FROM o WHERE id = 1",
    "SELECT * FROM o",
    "DO 1",
    "SHOW TABLES",
    "INSERT INTO o ( id , v ) VALUES ( 7 , 1 ) ON DUPLICATE KEY UPDATE v = v + 1",
    "UPDATE o SET v = v + 1 WHERE id = 2",
    "REPLACE INTO o ( id , v ) VALUES ( 8 , 2 )",
    "DELETE FROM o WHERE id = 9",
    "INSERT INTO o ( id , v ) SELECT 10 , 1 ON DUPLICATE KEY UPDATE v = v + 1",
];

/// Writes only (each changes the scratch table when it runs).
const WRITES: &[&str] = &[
    "INSERT INTO o ( id , v ) VALUES ( 11 , 1 ) ON DUPLICATE KEY UPDATE v = v + 1",
    "UPDATE o SET v = v + 1 WHERE id = 3",
    "REPLACE INTO o ( id , v ) VALUES ( 12 , 2 )",
    "UPDATE o SET v = v + 1",
];

/// Heads a hidden prefix may carry.
const HEADS: &[&str] = &[
    "SELECT",
    "SELECT 1 ,",
    "SELECT 1 ;",
    "DO",
    "DROP",
    "SHOW",
    "CREATE",
    "SET STATEMENT max_statement_time = 10 FOR",
    "SELECT 1 UNION",
    "(",
];

/// Executable-comment openers: no version, versions below and above MariaDB 10.11's (5 digits
/// from 50700 to 99999 are MySQL's and skipped), 6 digits, and MariaDB's `/*M!`.
const OPENERS: &[&str] = &[
    "/*!",
    "/*!40000",
    "/*!32302",
    "/*!50699",
    "/*!50700",
    "/*!99999",
    "/*!100000",
    "/*!101100",
    "/*!999999",
    "/*!4000",
    "/*M!",
    "/*M!100000",
    "/*M!999999",
    "/*M!50700",
];

/// Comments injected between tokens.
const COMMENTS: &[&str] = &[
    "/* c */",
    "/**/",
    "/*+ c */",
    "/*+ NO_RANGE_OPTIMIZATION(o) */",
    "#c\n",
    "-- c\n",
    "--\tc\n",
    "/*!*/",
    "/*! */",
    "/*!40000 */",
    "/*!99999 junk */",
    "/*!50700 junk */",
    "/*!999999 junk */",
    "/*M!999999 junk */",
    "/*M!100000 */",
    "/*!99999 /* n */ junk */",
    "\n",
];

const MODES: &[&str] = &[
    "ANSI_QUOTES",
    "NO_BACKSLASH_ESCAPES",
    "ANSI_QUOTES,NO_BACKSLASH_ESCAPES",
    "ANSI",
];

/// Character sets with lead bytes that may be followed by 0x5C or 0x60 in one character.
const CHARSETS: &[(&str, &[u8])] = &[
    ("gbk", &[0x81, 0xb5, 0xfe]),
    ("sjis", &[0x81, 0x95, 0xe0]),
    ("cp932", &[0x81, 0x95, 0xfc]),
    ("big5", &[0xa1, 0xa5, 0xf9]),
];

impl Case {
    fn new(shape: &'static str, text: impl Into<Vec<u8>>) -> Case {
        Case {
            shape,
            sql_mode: None,
            charset: None,
            text: text.into(),
        }
    }
}

/// Inserts up to `n` comments at random token boundaries (single spaces) of `text`.
fn inject(rng: &mut Rng, text: &str, n: usize) -> Vec<u8> {
    let gaps: Vec<usize> = text.match_indices(' ').map(|(i, _)| i).collect();
    if gaps.is_empty() {
        return text.as_bytes().to_vec();
    }
    let chosen: Vec<usize> = (0..n).map(|_| rng.pick(&gaps)).collect();
    let mut out = Vec::with_capacity(text.len() + 32 * n);
    for (i, &b) in text.as_bytes().iter().enumerate() {
        if b == b' ' && chosen.contains(&i) {
            out.push(b' ');
            out.extend_from_slice(rng.pick(COMMENTS).as_bytes());
        }
        out.push(b);
    }
    out
}

fn opener(rng: &mut Rng) -> &'static str {
    rng.pick(OPENERS)
}

fn stateful_or_write(rng: &mut Rng) -> &'static str {
    if rng.chance(70) {
        rng.pick(STATEFUL)
    } else {
        rng.pick(WRITES)
    }
}

/// One case from the grammar.
fn generate(rng: &mut Rng) -> Case {
    let mut case = match rng.below(11) {
        0 | 1 => {
            let base = if rng.chance(75) {
                stateful_or_write(rng)
            } else {
                rng.pick(STATELESS)
            };
            let n = 1 + rng.below(2);
            let mut text = inject(rng, base, n);
            if rng.chance(25) {
                // A hint where the statement's second keyword is expected (`CREATE /*+ x */
                // TEMPORARY`): the server (no hints in 10.11) reads a plain comment.
                text = base.replacen(' ', " /*+ x */ ", 1).into_bytes();
            }
            let shape = if text.windows(3).any(|w| w == b"/*+") {
                "hint between tokens"
            } else {
                "comment between tokens"
            };
            Case::new(shape, text)
        }
        2 => {
            // A prefix the server may skip, before a statement it runs.
            let glue = if rng.chance(20) { "" } else { " " };
            let text = format!(
                "{}{glue}{} */ {}",
                opener(rng),
                rng.pick(HEADS),
                stateful_or_write(rng)
            );
            Case::new("executable comment hides the head", text)
        }
        3 => {
            // A statement wholly or partly inside an executable comment.
            let text = match rng.below(3) {
                0 => format!("{} {} */", opener(rng), stateful_or_write(rng)),
                1 => format!("SELECT 1 {} , {} */", opener(rng), rng.pick(STATEFUL_EXPR)),
                _ => format!("{} ; {} */", rng.pick(STATELESS), opener(rng)),
            };
            Case::new("executable comment holds the state", text)
        }
        4 => marker_case(rng),
        5 => {
            // `#` / `-- ` inside an executable comment run to the end of the line, past `*/`.
            let line = rng.pick(&["#", "-- ", "#*/", "-- */"]);
            let (open, close) = rng.pick(&[
                ("/*", ""),
                ("'", ", 'x'"),
                ("\"", ", \"x\""),
                ("`", ", 1 AS `x`"),
                ("", ""),
                ("-- ", ""),
            ]);
            let text = format!(
                "SELECT 1 {} {line} */ {open}\n, {} */ {close}",
                opener(rng),
                rng.pick(STATEFUL_EXPR)
            );
            Case::new("line comment inside executable comment", text)
        }
        6 => {
            // Quotes inside an executable comment hold a `*/` or not.
            let q = rng.pick(&["'a*/'", "\"a*/\"", "`a*/`", "'a\\'*/'", "'a''*/'", "@'x*/'"]);
            let text = match rng.below(3) {
                0 => format!(
                    "SELECT 1 {} , {q} , {} */",
                    opener(rng),
                    rng.pick(STATEFUL_EXPR)
                ),
                1 => format!(
                    "SELECT 1 {} , {q} */ , {} , 'y'",
                    opener(rng),
                    rng.pick(STATEFUL_EXPR)
                ),
                _ => format!(
                    "{} {q} */ {}",
                    opener(rng),
                    rng.pick(STATEFUL).replacen("SELECT", "SELECT 1 ,", 1)
                ),
            };
            Case::new("quote inside executable comment", text)
        }
        7 => {
            let mut case = escape_case(rng, b"\\");
            case.sql_mode = Some(rng.pick(MODES));
            case.shape = "sql_mode changes quoting";
            case
        }
        8 => {
            let (charset, leads) = rng.pick(CHARSETS);
            let lead = rng.pick(leads);
            let trail = if rng.chance(60) { b'\\' } else { b'`' };
            let mut case = escape_case(rng, &[lead, trail]);
            case.charset = Some(charset);
            case.shape = "multibyte second byte";
            if rng.chance(20) {
                case.sql_mode = Some(rng.pick(MODES));
            }
            case
        }
        9 => {
            let sep = rng.pick(&[";", " ;", "; ", ";\n", " -- c\n;", " #c\n;", "/**/;"]);
            let second = if rng.chance(70) {
                stateful_or_write(rng).to_string()
            } else {
                format!("{} {} */", opener(rng), stateful_or_write(rng))
            };
            Case::new(
                "multi-statement",
                format!("{}{sep} {second}", rng.pick(STATELESS)),
            )
        }
        _ => noise_case(rng),
    };
    // Some cases of every shape run under another sql_mode or character set.
    if case.sql_mode.is_none() && rng.chance(8) {
        case.sql_mode = Some(rng.pick(MODES));
    }
    if case.charset.is_none() && rng.chance(8) {
        case.charset = Some(rng.pick(CHARSETS).0);
    }
    case
}

/// Marker aliases inside executable comments of every version: the digest says which ran.
fn marker_case(rng: &mut Rng) -> Case {
    let mut text = b"SELECT 1 AS mkq0".to_vec();
    for m in 1..=1 + rng.below(3) {
        let open = opener(rng);
        let body = match rng.below(6) {
            0 => format!(", 2 AS mkq{m}"),
            1 => format!(", 2 AS mkq{m} /* n */"),
            2 => format!("/* n */ , 2 AS mkq{m}"),
            3 => format!(", '*/' AS mkq{m}"),
            4 => format!(", 2 AS mkq{m} #x\n"),
            _ => format!(",2 AS mkq{m}"),
        };
        let glue = if rng.chance(25) { "" } else { " " };
        text.extend_from_slice(format!(" {open}{glue}{body} */").as_bytes());
    }
    if rng.chance(10) {
        // Unterminated.
        text.truncate(text.len() - 3);
    }
    Case::new("which executable comments run", text)
}

/// A string or name that ends in `bytes` right before its quote, so a reader that takes the
/// last byte for an escape (or a backtick for the closing one) misplaces the end; then a
/// stateful expression, then a closing literal.
fn escape_case(rng: &mut Rng, bytes: &[u8]) -> Case {
    let (open, close) = rng.pick(&[("'", "'y'"), ("\"", "\"y\""), ("`", "`y`")]);
    let expr = rng.pick(STATEFUL_EXPR).as_bytes();
    let mut text = Vec::new();
    match rng.below(4) {
        0 | 1 => {
            let as_name = open == "`" || rng.chance(50);
            text.extend_from_slice(if as_name { b"SELECT 1 AS " } else { b"SELECT " });
            text.extend_from_slice(open.as_bytes());
            text.extend_from_slice(bytes);
            text.extend_from_slice(open.as_bytes());
            text.extend_from_slice(b" , ");
            text.extend_from_slice(expr);
            text.extend_from_slice(if as_name { b" AS " } else { b" , " });
            text.extend_from_slice(close.as_bytes());
        }
        2 => {
            // The same inside an executable comment.
            text.extend_from_slice(b"SELECT 1 ");
            text.extend_from_slice(opener(rng).as_bytes());
            text.extend_from_slice(b" , ");
            text.extend_from_slice(open.as_bytes());
            text.extend_from_slice(bytes);
            text.extend_from_slice(open.as_bytes());
            text.extend_from_slice(b" */ , ");
            text.extend_from_slice(expr);
            text.extend_from_slice(b" , ");
            text.extend_from_slice(close.as_bytes());
        }
        _ => {
            // A statement head after the string, as a second statement.
            text.extend_from_slice(b"SELECT ");
            text.extend_from_slice(open.as_bytes());
            text.extend_from_slice(bytes);
            text.extend_from_slice(open.as_bytes());
            text.extend_from_slice(b" ; ");
            text.extend_from_slice(stateful_or_write(rng).as_bytes());
            text.extend_from_slice(b" ; SELECT ");
            text.extend_from_slice(close.as_bytes());
        }
    }
    Case::new("escapes", text)
}

/// Random runs of lexically interesting pieces, most of them no valid statement.
fn noise_case(rng: &mut Rng) -> Case {
    const PIECES: &[&[u8]] = &[
        b"SELECT ",
        b"SET ",
        b"@a:=1",
        b"@a",
        b"1",
        b" , ",
        b"GET_LOCK('ol',0)",
        b"`GET_LOCK`('ol',0)",
        b"LAST_INSERT_ID(777)",
        b"CREATE TEMPORARY TABLE tmp_a (x INT)",
        b"autocommit=0",
        b"'",
        b"\"",
        b"`",
        b"\\",
        b"#",
        b"-- ",
        b"/*",
        b"*/",
        b"/*!",
        b"/*!99999",
        b"/*!40000",
        b"/*M!100000",
        b"/*+",
        b"\n",
        b";",
        b" ",
        b"\xb5",
        b"\x00",
        b"AS ",
        b"x",
    ];
    let mut text = if rng.chance(50) {
        b"SELECT 1 ".to_vec()
    } else {
        Vec::new()
    };
    for _ in 0..3 + rng.below(10) {
        text.extend_from_slice(rng.pick(PIECES));
    }
    Case::new("noise", text)
}

// ---------------------------------------------------------------------------------------------
// Running a case and reading what it did.

/// The session read directly: (what, value), in a fixed order.
const SESSION_READS: &[(&str, &str)] = &[
    ("@a", "@a"),
    ("@b", "@b"),
    ("@c", "@c"),
    ("@x", "@x"),
    (
        "user lock 'ol' held",
        "IS_USED_LOCK('ol') = CONNECTION_ID()",
    ),
    ("@@autocommit", "@@autocommit"),
    ("DATABASE()", "DATABASE()"),
    ("@@character_set_client", "@@character_set_client"),
    ("@@sql_mode", "@@sql_mode"),
    ("@@time_zone", "@@time_zone"),
    ("@@sql_select_limit", "@@sql_select_limit"),
    ("LASTVAL(oseq)", "LASTVAL(test.oseq)"),
    ("LAST_INSERT_ID()", "LAST_INSERT_ID()"),
];

/// What the session and the scratch table looked like at one moment.
#[derive(Debug, PartialEq, Clone)]
struct Snapshot {
    session: Vec<Option<String>>,
    prepared: Option<String>,
    /// `CHECKSUM TABLE` of `test.o`.
    table: Option<String>,
    /// Whether each temporary table name exists (`CHECKSUM TABLE` gives NULL for none).
    temporary: Vec<bool>,
    /// A base table named like a temporary one exists (a statement being shrunk made one).
    base_tables: bool,
    /// The latest statement event of the thread (only in the baseline).
    history_base: Option<String>,
}

const TEMP_TABLES: &[&str] = &["test.tmp_a", "oracle_other.tmp_a"];

/// What one statement did, as observed.
#[derive(Debug, Default)]
struct Observed {
    /// The session changes seen: (what changed, how), empty for none.
    session: Vec<(String, String)>,
    /// The scratch table changed.
    wrote: bool,
    /// A result cell equal to the connection's id.
    shows_connection_id: bool,
    /// The digest texts of the statements the server ran, in order.
    digests: Vec<String>,
    error: Option<String>,
}

/// One disagreement between the server and our reading.
#[derive(Debug)]
struct Finding {
    kind: &'static str,
    /// What in particular (the state that changed, the kinds read): failures are grouped by it.
    what: String,
    detail: String,
}

type Findings = Vec<Finding>;

fn finding(kind: &'static str, what: impl Into<String>, detail: impl Into<String>) -> Finding {
    Finding {
        kind,
        what: what.into(),
        detail: detail.into(),
    }
}

struct Oracle {
    client: RawClient,
    thread_id: String,
    cases_run: usize,
    /// `SQL_ORACLE_TRACE` is set: print every case and what it did.
    trace: bool,
    /// The last case left a base table where a temporary one is looked for.
    dirty: bool,
    /// A second session: a result cell equal to the first one's connection id is its id only
    /// if the same statement shows this one's id there.
    twin: RawClient,
}

fn one_row(rows: &Rows, what: &str) -> Result<Vec<Option<String>>, String> {
    rows.first()
        .cloned()
        .ok_or_else(|| format!("{what}: no row"))
}

async fn login(db: &MariaDb) -> RawClient {
    let client = RawClient::connect_tcp(
        &db.tcp_addr(),
        BENCH_USER,
        BENCH_PASS,
        Some(SCHEMA),
        CLIENT_SESSION_TRACK | CLIENT_MULTI_STATEMENTS,
        0,
    )
    .await
    .expect("log in with CLIENT_SESSION_TRACK");
    assert_ne!(client.caps & CLIENT_SESSION_TRACK, 0, "no session tracking");
    assert_ne!(
        client.caps & CLIENT_MULTI_STATEMENTS,
        0,
        "no multi-statements"
    );
    client
}

/// What a session needs after `COM_RESET_CONNECTION` to be the one `case` runs in. The reset
/// keeps the current schema (a case's `USE` would outlive it), so that is set again too.
fn session_setup(case: &Case) -> String {
    let mut sql = format!("USE {SCHEMA}");
    if let Some(mode) = case.sql_mode {
        sql.push_str(&format!("; SET SESSION sql_mode = '{mode}'"));
    }
    if let Some(charset) = case.charset {
        sql.push_str(&format!("; SET NAMES {charset}"));
    }
    sql
}

/// Where in a response cells equal `value`: (result, row, column).
fn cells_equal(results: &[Rows], value: &str) -> Vec<(usize, usize, usize)> {
    let mut at = Vec::new();
    for (r, rows) in results.iter().enumerate() {
        for (i, row) in rows.iter().enumerate() {
            for (c, cell) in row.iter().enumerate() {
                if cell.as_deref() == Some(value) {
                    at.push((r, i, c));
                }
            }
        }
    }
    at
}

impl Oracle {
    /// Runs `case` on the twin session: true if it shows the twin's own id at one of `at`.
    async fn twin_shows_its_id(
        &mut self,
        case: &Case,
        at: &[(usize, usize, usize)],
    ) -> Result<bool, String> {
        let twin = &mut self.twin;
        twin.reset_connection().await?;
        twin.query_tracked(session_setup(case).as_bytes()).await?;
        let ran = twin.query_tracked(&case.text).await?;
        let id = twin.connection_id.to_string();
        let there = cells_equal(&ran.results, &id);
        twin.reset_connection().await?;
        Ok(at.iter().any(|p| there.contains(p)))
    }

    async fn connect(db: &MariaDb) -> Oracle {
        let mut client = login(db).await;
        let rows = client
            .query_text(
                "SELECT THREAD_ID FROM performance_schema.threads \
                 WHERE PROCESSLIST_ID = CONNECTION_ID()",
            )
            .await
            .expect("read the thread id");
        let thread_id = rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .expect("performance_schema knows the thread");
        Oracle {
            client,
            thread_id,
            cases_run: 0,
            trace: std::env::var_os("SQL_ORACLE_TRACE").is_some(),
            dirty: false,
            twin: login(db).await,
        }
    }

    async fn query(&mut self, sql: &str) -> Result<Tracked, String> {
        self.client.query_tracked(sql.as_bytes()).await
    }

    /// Runs a probe that must succeed; returns its results.
    async fn probe(&mut self, sql: &str) -> Result<Vec<Rows>, String> {
        let tracked = self.query(sql).await?;
        match tracked.error {
            Some(e) => Err(format!("probe {sql:?} failed: {e}")),
            None => Ok(tracked.results),
        }
    }

    async fn snapshot(&mut self) -> Result<Snapshot, String> {
        let reads: Vec<&str> = SESSION_READS.iter().map(|(_, sql)| *sql).collect();
        let sql = format!(
            "SELECT /*{PROBE_MARK}*/ {}, \
               (SELECT MAX(EVENT_ID) FROM performance_schema.events_statements_history \
                 WHERE THREAD_ID = {tid});\
             SELECT /*{PROBE_MARK}*/ COUNT(*) FROM performance_schema.prepared_statements_instances \
               WHERE OWNER_THREAD_ID = {tid};\
             SELECT /*{PROBE_MARK}*/ COUNT(*) FROM information_schema.TABLES \
               WHERE TABLE_NAME = 'tmp_a';\
             CHECKSUM TABLE /*{PROBE_MARK}*/ test.o, {}",
            reads.join(", "),
            TEMP_TABLES.join(", "),
            tid = self.thread_id,
        );
        let results = self.probe(&sql).await?;
        let [session, prepared, base_tables, checksums] = results.as_slice() else {
            return Err(format!("snapshot: {} results", results.len()));
        };
        let mut session = one_row(session, "session reads")?;
        let history_base = session.pop().flatten();
        let prepared = one_row(prepared, "prepared")?.pop().flatten();
        // A base table of that name hides whether a temporary one exists too.
        let base_tables = one_row(base_tables, "base tables")?.pop().flatten() != Some("0".into());
        let checksum = |row: Option<&Vec<Option<String>>>| row.and_then(|r| r.get(1).cloned());
        Ok(Snapshot {
            session,
            prepared,
            table: checksum(checksums.first()).flatten(),
            temporary: (1..=TEMP_TABLES.len())
                .map(|i| !base_tables && checksum(checksums.get(i)).flatten().is_some())
                .collect(),
            base_tables,
            history_base,
        })
    }

    /// Resets the session and sets it up as `case` wants.
    async fn prepare(&mut self, case: &Case) -> Result<(), String> {
        self.client.reset_connection().await?;
        if self.cases_run % RESTORE_EVERY == 0 || std::mem::take(&mut self.dirty) {
            self.probe(RESTORE).await?;
        }
        self.cases_run += 1;
        self.probe(&session_setup(case)).await?;
        Ok(())
    }

    /// Runs `case` on a fresh session and reports what it changed.
    async fn observe(&mut self, case: &Case) -> Result<Observed, String> {
        self.prepare(case).await?;
        let before = self.snapshot().await?;
        let ran = self.client.query_tracked(&case.text).await?;
        let mut seen = Observed {
            error: ran.error.clone(),
            ..Observed::default()
        };
        let at = cells_equal(&ran.results, &self.client.connection_id.to_string());

        // First, what reads the previous statement.
        let after = self
            .probe(&format!("SELECT /*{PROBE_MARK}*/ FOUND_ROWS()"))
            .await?;
        let row = one_row(after.first().unwrap_or(&Vec::new()), "FOUND_ROWS")?;
        let number = |i: usize| -> i64 {
            row.get(i)
                .cloned()
                .flatten()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let sent = ran.results.iter().map(Vec::len).max().unwrap_or(0).max(1);
        if number(0) > sent as i64 {
            seen.session.push((
                "FOUND_ROWS()".to_string(),
                format!(
                    "FOUND_ROWS() is {} after {sent} rows sent (SQL_CALC_FOUND_ROWS ran)",
                    number(0)
                ),
            ));
        }
        // MariaDB flags `SET STATEMENT var = .. FOR ..` with the statement's value, although
        // the session's is restored when it ends: the flag counts there only if the variable
        // (the one the grammar uses) still differs from the server's default.
        let restored = if ran.status & SERVER_SESSION_STATE_CHANGED != 0 && set_statement(case) {
            let rows = self
                .probe(&format!(
                    "SELECT /*{PROBE_MARK}*/ @@session.max_statement_time = @@global.max_statement_time"
                ))
                .await?;
            rows.first()
                .and_then(|r| r.first())
                .is_some_and(|row| row.first() == Some(&Some("1".to_string())))
        } else {
            false
        };
        if ran.status & SERVER_SESSION_STATE_CHANGED != 0 && !restored {
            seen.session.push((
                "the server's flag".to_string(),
                format!(
                    "the server flagged a session state change ({})",
                    describe_session_state(&ran.session_state)
                ),
            ));
        }
        let locked = self
            .query(&format!(
                "SELECT /*{PROBE_MARK}*/ 1 FROM test.lockprobe LIMIT 0"
            ))
            .await?;
        if let Some(e) = locked.error {
            if e.starts_with("1100:") {
                seen.session.push((
                    "LOCK TABLES".to_string(),
                    "LOCK TABLES is in force".to_string(),
                ));
            } else {
                return Err(format!("lock probe: {e}"));
            }
            self.probe("UNLOCK TABLES").await?;
        }

        let now = self.snapshot().await?;
        self.dirty = now.base_tables;
        for (i, (what, _)) in SESSION_READS.iter().enumerate() {
            let (was, is) = (before.session.get(i), now.session.get(i));
            if was != is {
                seen.session.push((
                    what.to_string(),
                    format!(
                        "{what} was {:?}, is {:?}",
                        was.cloned().flatten(),
                        is.cloned().flatten()
                    ),
                ));
            }
        }
        if before.prepared != now.prepared {
            seen.session.push((
                "prepared statements".to_string(),
                format!(
                    "prepared statements were {:?}, are {:?}",
                    before.prepared, now.prepared
                ),
            ));
        }
        for (i, name) in TEMP_TABLES.iter().enumerate() {
            if before.temporary.get(i) != now.temporary.get(i) {
                seen.session.push((
                    "temporary table".to_string(),
                    format!("temporary table {name} now exists"),
                ));
            }
        }
        if before.table != now.table {
            seen.wrote = true;
        }

        // After the snapshot: the twin's run may move the sequence and write the table.
        if !at.is_empty() {
            seen.shows_connection_id = self.twin_shows_its_id(case, &at).await?;
        }

        let base = before.history_base.unwrap_or_else(|| "0".to_string());
        let history = self
            .probe(&format!(
                "SELECT IFNULL(DIGEST_TEXT, '') FROM performance_schema.events_statements_history \
                 WHERE THREAD_ID = {} AND EVENT_ID > {base} \
                   AND SQL_TEXT NOT LIKE '%{PROBE_MARK}%' AND SQL_TEXT NOT LIKE 'UNLOCK TABLES%' \
                 ORDER BY EVENT_ID",
                self.thread_id
            ))
            .await?;
        seen.digests = history
            .first()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| r.first().cloned().flatten())
                    .collect()
            })
            .unwrap_or_default();
        Ok(seen)
    }

    /// Runs `case` and returns what our reading got wrong about it.
    async fn check(&mut self, case: &Case) -> Result<Findings, String> {
        let seen = self.observe(case).await?;
        if self.trace {
            eprintln!("{}: {seen:?}", describe(case));
        }
        let text = case.text.as_slice();
        let mut findings = Findings::new();
        let pin = pins(text);
        // The most particular change names the group: a direct read after the server's flag.
        if let (None, Some((what, _))) = (pin, seen.session.last()) {
            let detail: Vec<&str> = seen.session.iter().map(|(_, d)| d.as_str()).collect();
            findings.push(finding(
                "session change not pinned",
                state_class(what),
                detail.join("; "),
            ));
        }
        if pin.is_none() && seen.shows_connection_id {
            findings.push(finding(
                CONNECTION_ID_SHOWN,
                "CONNECTION_ID()",
                "a result cell is CONNECTION_ID()",
            ));
        }
        if seen.wrote && lexer_says_read_only(text) {
            let ours = server_kind(case, text);
            findings.push(finding(
                "write read as read-only",
                format!("classify says {ours:?}"),
                format!("the scratch table changed; classify says {ours:?}"),
            ));
        }
        if seen.error.is_none() && seen.digests.len() == 1 {
            let digest = &seen.digests[0];
            if let Some(kind) = digest_kind(digest) {
                let ours = server_kind(case, text);
                if std::mem::discriminant(&ours) != std::mem::discriminant(&kind) {
                    let what = if ours == Statement::Other {
                        "classify says Other"
                    } else {
                        "classify reads another kind"
                    };
                    findings.push(finding(
                        "statement kind differs from the server's",
                        what,
                        format!("the server ran {digest:?}; classify says {ours:?}"),
                    ));
                }
            }
            if case.shape == "which executable comments run" {
                let ran = server_markers(digest);
                let ours = lexer_runs_markers(case, text);
                if ran != ours {
                    let extra = ours.iter().any(|m| !ran.contains(m));
                    let missing = ran.iter().any(|m| !ours.contains(m));
                    let what = match (extra, missing) {
                        (true, false) => "ours runs one the server skips",
                        (false, true) => "ours skips one the server runs",
                        _ => "both",
                    };
                    findings.push(finding(
                        "executable comments run differ",
                        what,
                        format!(
                            "the server ran markers {ran:?} ({digest:?}); our reading runs {ours:?}"
                        ),
                    ));
                }
            }
        }
        Ok(findings)
    }
}

/// The kind of session state an observation is about, to group failures.
fn state_class(what: &str) -> &'static str {
    match what {
        "@a" | "@b" | "@c" | "@x" => "user variable",
        "user lock 'ol' held" => "user lock",
        "LASTVAL(oseq)" => "sequence",
        "LAST_INSERT_ID()" => "LAST_INSERT_ID",
        "FOUND_ROWS()" => "FOUND_ROWS",
        "temporary table" => "temporary table",
        "LOCK TABLES" => "LOCK TABLES",
        "prepared statements" => "prepared statement",
        "DATABASE()" => "schema",
        _ => "session variable",
    }
}

/// The kind of statement a digest text starts with, for the kinds worth comparing.
fn digest_kind(digest: &str) -> Option<Statement<'static>> {
    let word = digest
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .find(|w| !w.is_empty())?;
    Some(match word {
        "SELECT" => Statement::Select,
        "INSERT" => Statement::Insert,
        "UPDATE" => Statement::Update,
        "DELETE" => Statement::Delete,
        "REPLACE" => Statement::Replace,
        "SET" => Statement::Set,
        "USE" => Statement::Use(Default::default()),
        "CREATE" => Statement::Create,
        "DROP" => Statement::Drop,
        "LOCK" => Statement::LockTables,
        "PREPARE" => Statement::Prepare,
        "DO" => Statement::Do,
        "SHOW" => Statement::Show,
        _ => return None,
    })
}

/// The marker aliases in a digest text (printed as `` `mkq1` ``).
fn server_markers(digest: &str) -> Vec<u8> {
    let mut found: Vec<u8> = (0..10u8)
        .filter(|m| digest.contains(&format!("`mkq{m}`")))
        .collect();
    found.dedup();
    found
}

/// The session-state-change blocks, as `type:value` entries (system variables as
/// `name=value`).
fn describe_session_state(blocks: &[Vec<u8>]) -> String {
    let mut out = Vec::new();
    for block in blocks {
        let mut at = 0;
        while let Some(&kind) = block.get(at) {
            let Some((data, next)) = lenenc_str(block, at + 1) else {
                out.push("?".to_string());
                break;
            };
            at = next;
            let entry = match kind {
                0 => {
                    let name = lenenc_str(data, 0);
                    let value = name.and_then(|(_, n)| lenenc_str(data, n));
                    format!(
                        "{}={}",
                        String::from_utf8_lossy(name.map(|n| n.0).unwrap_or_default()),
                        String::from_utf8_lossy(value.map(|v| v.0).unwrap_or_default())
                    )
                }
                1 => format!(
                    "schema {}",
                    String::from_utf8_lossy(lenenc_str(data, 0).map(|s| s.0).unwrap_or_default())
                ),
                2 => "state".to_string(),
                other => format!("type {other}"),
            };
            out.push(entry);
        }
    }
    out.join(", ")
}

/// A length-encoded string at `at` (lengths below 251 only: tracked entries are short).
fn lenenc_str(p: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::from(*p.get(at).filter(|&&b| b < 0xfb)?);
    Some((p.get(at + 1..at + 1 + len)?, at + 1 + len))
}

/// `text` as a Rust byte-string literal body: printable ASCII as is, the rest escaped.
fn escaped(text: &[u8]) -> String {
    text.iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect()
}

fn describe(case: &Case) -> String {
    let mut s = format!("b\"{}\"", escaped(&case.text));
    if let Some(mode) = case.sql_mode {
        let _ = write!(s, " [sql_mode={mode}]");
    }
    if let Some(charset) = case.charset {
        let _ = write!(s, " [SET NAMES {charset}]");
    }
    s
}

/// Drops space-separated pieces of a failing statement while it still fails the same way.
async fn shrink(
    oracle: &mut Oracle,
    case: &Case,
    kind: &str,
    what: &str,
) -> Result<(Case, String), String> {
    let mut best = case.clone();
    let mut why = String::new();
    let mut steps = 0;
    let mut progress = true;
    while progress && steps < SHRINK_STEPS {
        progress = false;
        let cuts: Vec<usize> = best
            .text
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b' ' || b == b'\n')
            .map(|(i, _)| i)
            .collect();
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied());
        bounds.push(best.text.len());
        for w in bounds.windows(2) {
            if steps >= SHRINK_STEPS {
                break;
            }
            steps += 1;
            let mut candidate = best.clone();
            candidate.text.drain(w[0]..w[1]);
            if candidate.text.is_empty() {
                continue;
            }
            let found = oracle.check(&candidate).await?;
            if let Some(f) = found.iter().find(|f| f.kind == kind && f.what == what) {
                why = f.detail.clone();
                best = candidate;
                progress = true;
                break;
            }
        }
    }
    if why.is_empty() {
        why = oracle
            .check(&best)
            .await?
            .into_iter()
            .find(|f| f.kind == kind && f.what == what)
            .map(|f| f.detail)
            .unwrap_or_default();
    }
    Ok((best, why))
}

/// Failures are grouped by (kind, shape of statement, what in particular).
type Group = (&'static str, &'static str, String);

/// One failing case, as kept for the report.
struct Example {
    seed: u64,
    index: usize,
    case: Case,
    detail: String,
}

#[tokio::test]
async fn every_statement_reads_as_the_server_runs_it() {
    let cases: usize = std::env::var("SQL_ORACLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let seeds: Vec<u64> = match std::env::var("SQL_ORACLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(seed) => vec![seed],
        None => SEEDS.to_vec(),
    };
    let budget = if std::env::var("SQL_ORACLE_CASES").is_ok() {
        Duration::from_secs(3600)
    } else {
        TIME_BUDGET
    };

    let db = MariaDb::start_with_args(
        "sql_oracle",
        &[
            "--performance-schema=ON",
            // The history is read only when the current events are collected too.
            "--performance-schema-consumer-events-statements-current=ON",
            "--performance-schema-consumer-events-statements-history=ON",
            "--performance-schema-events-statements-history-size=30",
            "--session-track-state-change=ON",
            "--session-track-schema=ON",
            "--session-track-system-variables=*",
        ],
    );
    db.root_exec(SETUP);
    let mut oracle = Oracle::connect(&db).await;

    let started = Instant::now();
    let mut failures: BTreeMap<Group, Vec<Example>> = BTreeMap::new();
    let mut counts: BTreeMap<Group, usize> = BTreeMap::new();
    let mut run = 0usize;
    let per_seed = cases.div_ceil(seeds.len());
    let known = KNOWN.iter().map(|&(sql_mode, charset, text)| Case {
        shape: "known misreading",
        sql_mode,
        charset,
        text: text.to_vec(),
    });
    // The known cases are seed 0.
    let mut cases_of: Vec<(u64, Box<dyn Iterator<Item = Case>>)> = vec![(0, Box::new(known))];
    for &seed in &seeds {
        let mut rng = Rng(seed);
        cases_of.push((
            seed,
            Box::new((0..per_seed).map(move |_| generate(&mut rng))),
        ));
    }
    'seeds: for (seed, generated) in cases_of {
        for (index, case) in generated.enumerate() {
            if started.elapsed() > budget {
                break 'seeds;
            }
            let findings = match oracle.check(&case).await {
                Ok(f) => f,
                Err(e) => panic!(
                    "seed {seed:#x} case {index}: {} broke the oracle: {e}",
                    describe(&case)
                ),
            };
            run += 1;
            for Finding { kind, what, detail } in findings {
                let shape = if kind == CONNECTION_ID_SHOWN {
                    "any shape"
                } else {
                    case.shape
                };
                let group = (kind, shape, what);
                *counts.entry(group.clone()).or_default() += 1;
                let kept = failures.entry(group).or_default();
                let shorter = kept.iter().any(|e| e.case.text.len() > case.text.len());
                if kept.len() < EXAMPLES || shorter {
                    kept.push(Example {
                        seed,
                        index,
                        case: case.clone(),
                        detail,
                    });
                    kept.sort_by_key(|e| e.case.text.len());
                    kept.truncate(EXAMPLES);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "sql_oracle: {run} cases in {elapsed:?} ({} failing shapes)",
        failures.len()
    );
    assert!(
        run >= cases.min(500),
        "only {run} of {cases} cases ran within {budget:?}"
    );

    let mut report = String::new();
    let shrinking = Instant::now();
    let mut shown: Vec<Vec<u8>> = Vec::new();
    for (group, examples) in &mut failures {
        let (kind, shape, what) = group;
        let _ = writeln!(
            report,
            "\n== {kind} | {shape} | {what}: {} cases",
            counts[group]
        );
        for example in examples.iter_mut() {
            let (small, why) = if shrinking.elapsed() < SHRINK_BUDGET {
                shrink(&mut oracle, &example.case, kind, what)
                    .await
                    .unwrap_or_else(|e| panic!("shrinking {}: {e}", describe(&example.case)))
            } else {
                (example.case.clone(), String::new())
            };
            if shown.contains(&small.text) {
                continue;
            }
            shown.push(small.text.clone());
            let _ =
                writeln!(
                report,
                "  seed {:#x} case {}: {}\n    shrunk: {}\n    pins: {:?}; classify: {:?}\n    {}",
                example.seed,
                example.index,
                describe(&example.case),
                describe(&small),
                pins(&small.text),
                classify(&small.text),
                if why.is_empty() { &example.detail } else { &why },
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{run} generated statements; where the server and our reading disagree \
         (rerun one seed with SQL_ORACLE_SEED):{report}"
    );
}
