//! The statement corpus (shared with `tests/pins_anchor.rs`), byte-level corner cases, and
//! properties over arbitrary bytes.

use proptest::prelude::*;

use super::{pins, pins_for, plainly_stateless, read_all, Pin};
use crate::wire::sql::{readings, Dialect, Server};

/// The corpus says what MariaDB 10.11 runs (`tests/pins_anchor.rs` checks it there).
fn on_mariadb(text: &[u8]) -> Option<Pin> {
    pins_for(
        text,
        Dialect {
            server: Some(Server::MARIADB_10_11),
        },
    )
}

/// The token reading in every reading of `text`, without the byte shortcut.
fn read_every(text: &[u8]) -> Option<Pin> {
    match readings(text, Dialect::default()) {
        Some(all) => all.into_iter().find_map(|r| read_all(text, r)),
        None => Some(Pin::Unknown),
    }
}

/// (statement, expected): see `corpus.rs`.
const CORPUS: &[(&str, Option<Pin>)] = include!("corpus.rs");

#[test]
fn corpus_statements_pin_as_expected() {
    let wrong: Vec<String> = CORPUS
        .iter()
        .filter(|(sql, want)| on_mariadb(sql.as_bytes()) != *want)
        .map(|(sql, want)| {
            let got = on_mariadb(sql.as_bytes());
            format!("{sql:?}: got {got:?}, want {want:?}")
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn corpus_is_large_and_covers_every_reason() {
    assert!(CORPUS.len() >= 80, "{} statements", CORPUS.len());
    for pin in Pin::ALL {
        assert!(
            CORPUS.iter().any(|(_, want)| *want == Some(pin)),
            "no statement pins for {pin:?}"
        );
    }
}

#[test]
fn labels_are_distinct_snake_case() {
    let mut labels: Vec<&str> = Pin::ALL.iter().map(|p| p.as_str()).collect();
    assert!(labels
        .iter()
        .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), Pin::ALL.len());
    assert_eq!(Pin::UserVariable.as_str(), "user_variable");
    assert_eq!(Pin::MultiStatement.as_str(), "multi_statement");
}

#[test]
fn bytes_that_are_not_utf8_do_not_hide_a_reason() {
    assert_eq!(pins(b"SELECT '\xff\xfe' FROM t"), None);
    assert_eq!(pins(b"SELECT \xff\xfe FROM t"), None);
    assert_eq!(pins(b"SELECT '\xff', @x"), Some(Pin::UserVariable));
    assert_eq!(pins(b"\xffSELECT 1"), Some(Pin::Unknown));
    assert_eq!(pins(b"SELECT 1\x00"), None);
}

#[test]
fn truncated_text_never_panics_and_stays_conservative() {
    assert_eq!(pins(b"SELECT 'abc"), None);
    assert_eq!(pins(b"SELECT `abc"), None);
    assert_eq!(pins(b"SELECT @'abc"), Some(Pin::UserVariable));
    // Not closed: the server refuses the text; the safe answer.
    assert_eq!(pins(b"SELECT 1 /* lone"), Some(Pin::Unknown));
    assert_eq!(pins(b"/*"), Some(Pin::Unknown));
    assert_eq!(pins(b"/*!"), Some(Pin::Unknown));
    assert_eq!(pins(b"/*M!"), Some(Pin::Unknown));
    assert_eq!(pins(b"SELECT LAST_INSERT_ID("), None);
    assert_eq!(pins(b"SELECT GET_LOCK"), None);
    assert_eq!(pins(b"SELECT NEXT VALUE"), None);
    assert_eq!(pins(b"SET"), Some(Pin::SessionVariable));
    assert_eq!(pins(b"SET STATEMENT x = 1"), Some(Pin::Unknown));
}

#[test]
fn executable_comment_contents_are_read_as_statements() {
    assert_eq!(pins(b"/*!50001 SET @x = 1 */"), Some(Pin::UserVariable));
    assert_eq!(
        pins(b"/*M!100100 LOCK TABLES t READ */"),
        Some(Pin::LockTables)
    );
    assert_eq!(pins(b"/*!*/ SELECT 1"), None);
    assert_eq!(pins(b"SELECT GET_LOCK /*!*/ ('a', 1)"), Some(Pin::UserLock));
    assert_eq!(pins(b"/*!50001 SELECT 'a*/"), Some(Pin::Unknown));
    assert_eq!(pins(b"/*! SELECT `a */"), Some(Pin::Unknown));
    assert_eq!(pins(b"/*! SELECT @'a */"), Some(Pin::UserVariable));
    assert_eq!(pins(b"/*! SELECT X'4 */"), Some(Pin::Unknown));
    assert_eq!(pins(b"/*! SELECT 'a' */"), None);
    assert_eq!(pins(b"/*! SELECT _utf8mb4'a''b' */"), None);
    // The outer comment's digits are its version, not part of the statement.
    assert_eq!(on_mariadb(b"/*!50001SELECT 1*/"), None);
    // A server older than 5.0.1 would skip it all: no statement, not known stateless.
    assert_eq!(pins(b"/*!50001SELECT 1*/"), Some(Pin::Unknown));
}

#[test]
fn keywords_need_their_shape() {
    // A word after a `.` is a name in the tokenizer, but still counts here (conservative).
    assert_eq!(pins(b"SELECT d.GET_LOCK('a', 1)"), Some(Pin::UserLock));
    // A quoted name before `(` is the built-in of that name, as on the server.
    assert_eq!(pins(b"SELECT `GET_LOCK`('a', 1)"), Some(Pin::UserLock));
    assert_eq!(
        pins(b"SELECT service_get_write_locks('ns', 'a', 0)"),
        Some(Pin::UserLock)
    );
    assert_eq!(pins(b"SELECT LAST_INSERT_ID(/* none */)"), None);
    assert_eq!(pins(b"SELECT LAST_INSERT_ID(@x)"), Some(Pin::UserVariable));
    assert_eq!(pins(b"SELECT next, value FOR"), None);
    assert_eq!(pins(b"SELECT next next value for s"), Some(Pin::Sequence));
    assert_eq!(pins(b"COMMIT NO RELEASE"), None);
    assert_eq!(pins(b"ROLLBACK AND CHAIN"), None);
    assert_eq!(
        pins(b"SET STATEMENT a = (1) FOR SET b = 2"),
        Some(Pin::SessionVariable)
    );
    assert_eq!(
        pins(b"SET STATEMENT a = 1 FOR SET STATEMENT b = 2 FOR SELECT 1"),
        None
    );
    assert_eq!(
        pins(b"SET STATEMENT a = @v FOR SELECT 1"),
        Some(Pin::UserVariable)
    );
    assert_eq!(pins(b"((SELECT 1))"), None);
    assert_eq!(pins(b"/*+ hint */ SELECT 1"), None);
    assert_eq!(pins(b"CREATE USER u@localhost"), None);
}

#[test]
fn long_texts_take_linear_time() {
    // Deep nesting of constructs that could recurse: none of these may blow the stack.
    let sets = "SET STATEMENT a = 1 FOR ".repeat(20_000) + "SELECT 1";
    assert_eq!(pins(sets.as_bytes()), None);
    let comments = "/*!".repeat(50_000);
    assert_eq!(pins(comments.as_bytes()), Some(Pin::Unknown));
    let parens = "(".repeat(100_000) + "SELECT 1";
    assert_eq!(pins(parens.as_bytes()), None);
}

/// Comments a client or driver may append; none of them may change the verdict.
const COMMENTS: &[&str] = &["\n/* c */", "\n-- c", "\n# c", " /* @x; SET x = 1 */"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_byte_shortcut_settles_only_what_the_token_reading_finds_stateless(
        head in prop::sample::select(vec!["SELECT", "insert", "Update", "DELETE", "REPLACE", " SELECT", "\tselect"]),
        words in proptest::collection::vec(
            prop::sample::select(vec![
                "c", "FROM", "t", "WHERE", "id", "=", "1", "'s'", "'", "\"", "`", "`q`", "(",
                ")", ",", "*", "INTO", "VALUES", "SET", "LIMIT", "@", "@x", "@@y", ";", "/*!",
                "/*", "*/", "--", "#", "\n", "GET_LOCK", "RELEASE_LOCK", "SQL_CALC_FOUND_ROWS",
                "LAST_INSERT_ID", "NEXTVAL", "LASTVAL", "SETVAL", "NEXT", "VALUE", "FOR",
                "PREVIOUS", "UNION", "SELECT", "M!", "\\", "x'41'", "1e3", ".",
            ]),
            0..24,
        ),
        glue in proptest::collection::vec(prop::sample::select(vec!["", " "]), 24),
    ) {
        let mut text = head.to_owned();
        text.push(' ');
        for (w, g) in words.iter().zip(glue.iter().cycle()) {
            text.push_str(w);
            text.push_str(g);
        }
        if plainly_stateless(text.as_bytes()) {
            prop_assert_eq!(read_every(text.as_bytes()), None, "{:?}", text);
        }
    }

    #[test]
    fn any_bytes_never_panic_and_a_comment_changes_nothing(
        data in proptest::collection::vec(any::<u8>(), 0..200),
        which in 0..COMMENTS.len(),
    ) {
        let verdict = pins(&data);
        let mut more = data.clone();
        more.extend_from_slice(COMMENTS.get(which).map_or(&b""[..], |c| c.as_bytes()));
        if verdict != Some(Pin::Unknown) {
            prop_assert_eq!(pins(&more), verdict);
        }
    }

    #[test]
    fn sql_like_text_never_panics_and_a_comment_changes_nothing(
        words in proptest::collection::vec(
            prop::sample::select(vec![
                "SELECT", "SET", "@x", "@@y", "'s'", "`q`", "(", ")", ";", "/*!", "*/", "/*+",
                "/*", "--", "#", "\n", "GET_LOCK", "NEXT", "VALUE", "FOR", "LAST_INSERT_ID",
                "COMMIT", "RELEASE", "NO", "CREATE", "TEMPORARY", "STATEMENT", "'", "\"", "`",
                "\\", "1", ",", "@", "M!", "50001",
            ]),
            0..30,
        ),
        glue in proptest::collection::vec(prop::sample::select(vec!["", " "]), 30),
        which in 0..COMMENTS.len(),
    ) {
        let mut text = String::new();
        for (w, g) in words.iter().zip(glue.iter().cycle()) {
            text.push_str(w);
            text.push_str(g);
        }
        let verdict = pins(text.as_bytes());
        text.push_str(COMMENTS.get(which).copied().unwrap_or(""));
        // A comment left open swallows what follows; then anything goes but stateless.
        if verdict != Some(Pin::Unknown) {
            prop_assert_eq!(pins(text.as_bytes()), verdict, "{:?}", text);
        }
    }
}

#[test]
fn the_byte_shortcut_takes_plain_traffic_and_leaves_the_rest_to_the_tokens() {
    for plain in [
        "SELECT c FROM sbtest1 WHERE id=5032",
        "select c from sbtest1 where id between 1 and 100 order by c",
        "UPDATE sbtest1 SET k=k+1 WHERE id=7",
        "  DELETE FROM t WHERE id = 3",
        "REPLACE INTO t SELECT * FROM t2",
    ] {
        assert!(plainly_stateless(plain.as_bytes()), "{plain}");
        assert_eq!(read_every(plain.as_bytes()), None, "{plain}");
    }
    for long_way in [
        "SELECT @x",
        "SELECT GET_LOCK('a', 1)",
        "SELECT SQL_CALC_FOUND_ROWS * FROM t",
        "SELECT LAST_INSERT_ID(5)",
        "SELECT NEXTVAL(s)",
        "SELECT 1; SELECT 2",
        "SELECT /*! @x := 1 */ 1",
        "SET x = 1",
        "SELECT\tget_lock('a', 1)",
        "SELECT(1)",
        // A `(` may open a call: the tokens say whether it is one.
        "INSERT INTO t (id, k, c, pad) VALUES (1, 2, 'a', 'b')",
        "SELECT sum (k) FROM t",
        "SELECT db.SUM(k) FROM t",
        "SELECT db . SUM(k) FROM t",
        "SELECT `SUM`(k) FROM t",
        "SELECT f(k) FROM t",
        "SELECT SUM(k) FROM t -- x",
        "SELECT SUM(k) FROM t # x",
        "SELECT GET_LOCK('a', 1)",
    ] {
        assert!(!plainly_stateless(long_way.as_bytes()), "{long_way}");
    }
    for plain_call in [
        "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100",
        "SELECT COUNT(*), MAX(a) FROM t",
        "UPDATE t SET a = CONCAT(a, 'x') WHERE id = 1",
    ] {
        assert!(plainly_stateless(plain_call.as_bytes()), "{plain_call}");
        assert_eq!(read_every(plain_call.as_bytes()), None, "{plain_call}");
    }
    for stateless_long_way in [
        "INSERT INTO t (id, k, c, pad) VALUES (1, 2, 'a', 'b')",
        "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100",
    ] {
        assert_eq!(
            read_every(stateless_long_way.as_bytes()),
            None,
            "{stateless_long_way}"
        );
    }
}

#[test]
fn session_settings_made_of_literals_can_be_replayed_and_nothing_else() {
    use super::replayable;
    for yes in [
        "SET NAMES utf8mb4",
        "SET NAMES 'utf8mb4' COLLATE 'utf8mb4_general_ci'",
        "SET @@session.autocommit = ON",
        "set autocommit=1, sql_mode = concat(@@sql_mode,',STRICT_TRANS_TABLES')",
        "SET character_set_results = NULL",
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "SET time_zone = '+00:00'",
        "SET SESSION sql_mode = DEFAULT",
        "SET character_set_server = utf8mb4, collation_server = utf8mb4_general_ci",
        "USE test",
    ] {
        assert!(replayable(yes.as_bytes()), "{yes}");
    }
    for no in [
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET GLOBAL max_connections = 10",
        "SET @@global.sql_mode = ''",
        "SET @x = 1",
        "SET a = @x",
        "SET PASSWORD = PASSWORD('x')",
        "SET DEFAULT ROLE r1",
        // COM_RESET_CONNECTION keeps the current role: no reset takes a connection back.
        "SET ROLE r1",
        "SET timestamp = UNIX_TIMESTAMP()",
        "SET sql_mode = (SELECT 'ANSI')",
        "SET NAMES utf8; SELECT 1",
        "SET STATEMENT max_statement_time=1 FOR SELECT 1",
        "SELECT 1",
        "SET /*! @x = 1 */ a = 1",
        "",
    ] {
        assert!(!replayable(no.as_bytes()), "{no}");
    }
}

/// The byte shortcut as first written, a byte at a time: [`plainly_stateless`] compares each
/// byte and the next a block at a time first, and must answer exactly as this does.
fn shortcut_by_bytes(text: &[u8]) -> bool {
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let t = &text[start..];
    let headed = [&b"SELECT"[..], b"INSERT", b"UPDATE", b"DELETE", b"REPLACE"]
        .iter()
        .any(|h| {
            t.get(..h.len()).is_some_and(|w| w.eq_ignore_ascii_case(h))
                && t.get(h.len()).is_some_and(u8::is_ascii_whitespace)
        });
    let at = |i: usize, word: &[u8]| {
        t.get(i..i + word.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(word))
    };
    headed
        && !t.iter().enumerate().any(|(i, &b)| match b {
            b'@' | b';' => true,
            b'(' => {
                t.contains(&b'#')
                    || t.windows(2).any(|w| w == b"--")
                    || !super::builtin_before(t, i)
            }
            b'/' => t.get(i + 1) == Some(&b'*'),
            b'_' => at(i, b"_LOCK"),
            b'F' | b'f' => at(i, b"FOUND_ROWS"),
            b'T' | b't' => at(i, b"TVAL"),
            b'I' | b'i' => at(i, b"INSERT_ID"),
            b'N' | b'n' => at(i, b"NEXT"),
            b'P' | b'p' => at(i, b"PREVIOUS"),
            b'C' | b'c' => at(i, b"CONNECTION_ID"),
            _ => false,
        })
}

proptest::proptest! {
    #[test]
    fn the_shortcut_answers_as_it_did_byte_by_byte(
        head in prop::sample::select(vec!["SELECT", "select", " INSERT", "UPDATE", "DeLeTe", "REPLACE", "SET"]),
        words in proptest::collection::vec(
            prop::sample::select(vec![
                "_LOCK", "_lo", "_L", "FOUND_ROWS", "found_row", "Fo", "TVAL", "tv", "INSERT_ID",
                "insert_i", "In", "NEXT", "nex", "Ne", "PREVIOUS", "previou", "Pr", "CONNECTION_ID",
                "connection_i", "Co", "/*", "/", "*", "@", ";", "(", "SUM(", "sum (", ".", "`", "c", "id=5", " ", "\t", "x", "\u{e9}",
            ]),
            0..16,
        ),
        noise in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut text = head.as_bytes().to_vec();
        text.push(b' ');
        for w in &words {
            text.extend_from_slice(w.as_bytes());
        }
        proptest::prop_assert_eq!(plainly_stateless(&text), shortcut_by_bytes(&text), "{:?}", text);
        text.extend_from_slice(&noise);
        proptest::prop_assert_eq!(plainly_stateless(&text), shortcut_by_bytes(&text), "{:?}", text);
    }
}

#[test]
fn the_shortcut_finds_a_word_at_every_offset_across_its_blocks() {
    // Blocks of 16 bytes, the last one overlapping: a word straddling an edge, or a lone `@`
    // or `;` as the last byte, must still send the text the long way.
    for word in [
        "@",
        ";",
        // After a space: no built-in's call (`x(` is MariaDB's `X()`).
        " (",
        "/*",
        "_lock",
        "FOUND_ROWS",
        "tval",
        "Insert_Id",
        "NEXT",
        "previous",
    ] {
        for pad in 0..40 {
            let text = format!("SELECT {}{word}", "x".repeat(pad));
            assert_eq!(
                plainly_stateless(text.as_bytes()),
                shortcut_by_bytes(text.as_bytes()),
                "{text}"
            );
            assert!(!plainly_stateless(text.as_bytes()), "{text}");
            let text = format!("{text} {}", "y".repeat(pad));
            assert!(!plainly_stateless(text.as_bytes()), "{text}");
        }
    }
}
