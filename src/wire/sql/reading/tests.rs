//! The readings a text gets, and what each reading changes: versions, `sql_mode` quoting and
//! the multibyte character sets.

use super::*;
use crate::wire::sql::pins::{pins, pins_for, Pin};
use crate::wire::sql::{read_only, tokens_as, TokenKind};

#[test]
fn greetings_name_the_flavour_and_version() {
    let maria = Server::from_greeting(b"5.5.5-10.11.6-MariaDB-0+deb12u1").unwrap();
    assert_eq!(
        maria,
        Server {
            mariadb: true,
            version: 101_106
        }
    );
    let mysql = Server::from_greeting(b"8.0.36-0ubuntu0.22.04.1").unwrap();
    assert_eq!(
        mysql,
        Server {
            mariadb: false,
            version: 80_036
        }
    );
    assert_eq!(Server::from_greeting(b"garbage"), None);
    assert_eq!(Server::from_greeting(b"\xff"), None);
}

#[test]
fn mariadb_skips_mysql_5_7_comments_and_runs_its_own_by_version() {
    let m = Server::MARIADB_10_11;
    assert!(m.runs(false, None));
    assert!(m.runs(false, Some(40_101)));
    assert!(!m.runs(false, Some(50_700)));
    assert!(!m.runs(false, Some(99_999)));
    assert!(m.runs(false, Some(100_100)));
    assert!(!m.runs(false, Some(110_000)));
    assert!(m.runs(true, Some(50_700)));
    let mysql = Server {
        mariadb: false,
        version: 80_036,
    };
    assert!(mysql.runs(false, Some(50_700)));
    assert!(
        !mysql.runs(true, Some(10_000)),
        "/*M! is a comment to MySQL"
    );
}

#[test]
fn a_plain_text_has_one_reading_and_each_feature_adds_its_own() {
    let one = |t: &[u8]| readings(t, Dialect::default()).unwrap().len();
    assert_eq!(one(b"SELECT c FROM t WHERE id = 1"), 1);
    assert_eq!(one(b"SELECT 'a\\'b'"), 2);
    assert_eq!(one(b"SELECT \"a\""), 2);
    assert_eq!(one(b"SELECT '\xbf\\'"), 4 * 2);
    // Both flavours: newest, oldest, and at the comment's version.
    assert_eq!(one(b"/*!40101 SET NAMES utf8 */"), 6);
    let known = Dialect {
        server: Some(Server::MARIADB_10_11),
    };
    assert_eq!(
        readings(b"/*!40101 SET NAMES utf8 */", known)
            .unwrap()
            .len(),
        1
    );
    let many: Vec<u8> = (0..70)
        .flat_map(|i| format!("/*!{:05} */", 40_000 + i).into_bytes())
        .collect();
    assert_eq!(readings(&many, Dialect::default()), None);
    assert_eq!(pins(&many), Some(Pin::Unknown));
}

#[test]
fn no_backslash_escapes_ends_a_string_at_its_backslash() {
    // Default: one string to the last quote; NO_BACKSLASH_ESCAPES: `'a\'`, then a variable.
    let text = b"SELECT 'a\\', @x := 1, '\\'";
    assert_eq!(pins(text), Some(Pin::UserVariable));
    let default = Reading {
        comments: Comments::Server(Server::MARIADB_10_11),
        ..Reading::DIGEST
    };
    assert!(!tokens_as(text, default).any(|t| t.kind == TokenKind::Variable));
}

#[test]
fn ansi_quotes_make_a_double_quote_a_name_without_escapes() {
    // Default: `"a\", @x := 1, "` is a string; ANSI_QUOTES: the name `a\`, then a variable.
    assert_eq!(
        pins(b"SELECT \"a\\\", @x := 1, \"b\""),
        Some(Pin::UserVariable)
    );
    assert_eq!(pins(b"SELECT \"a\" FROM t"), None);
}

#[test]
fn a_multibyte_character_neither_escapes_nor_closes() {
    // gbk: 0xBF 0x5C is one character, so the string ends at the quote after it.
    assert_eq!(
        pins(b"SELECT '\xbf\\', @x := 1, '\xbf\\'"),
        Some(Pin::UserVariable)
    );
    // big5 and sjis the same way, with their own lead bytes (0xA4, 0x95).
    assert_eq!(
        pins(b"SELECT '\xa4\\', @x := 1 -- '"),
        Some(Pin::UserVariable)
    );
    assert_eq!(
        pins(b"SELECT '\x95\\', GET_LOCK('l', 0) -- '"),
        Some(Pin::UserLock)
    );
    // A backtick as a second byte does not close a quoted name.
    assert_eq!(
        pins(b"SELECT a\xbf`, @x := 1 -- `"),
        Some(Pin::UserVariable)
    );
    // The same bytes without a trailing 0x5C / 0x60 read as one.
    assert_eq!(pins(b"SELECT '\xbf\xbf' FROM t"), None);
}

#[test]
fn read_only_holds_in_every_reading() {
    assert!(read_only(b"SELECT 1"));
    assert!(read_only(b"SELECT /*!40000 SQL_NO_CACHE */ c FROM t"));
    assert!(!read_only(b"/*!99999 SELECT 1 */ DELETE FROM t"));
    assert!(!read_only(b"SELECT 1; DELETE FROM t"));
    assert!(!read_only(b"SELECT 'a\\'; DELETE FROM t; -- '"));
    assert!(read_only(b"SELECT 1;"));
}

#[test]
fn a_known_server_settles_the_comments() {
    let on = |server| Dialect {
        server: Some(server),
    };
    let text = b"/*!50700 SET @x = 1 */ SELECT 1";
    assert_eq!(pins_for(text, on(Server::MARIADB_10_11)), None);
    let mysql = Server {
        mariadb: false,
        version: 80_036,
    };
    assert_eq!(pins_for(text, on(mysql)), Some(Pin::UserVariable));
    assert_eq!(pins(text), Some(Pin::UserVariable));
}
