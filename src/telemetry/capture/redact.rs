//! What a capture and the digest table must not keep: the auth data of a COM_CHANGE_USER, and any
//! statement that may carry a password ([`secret`]).
//!
//! A COM_CHANGE_USER payload is rebuilt with an empty auth response; everything else (user,
//! schema, character set, plugin name, attributes) is kept so a replay knows who the session
//! became. A payload that does not parse keeps only its command byte: nothing after the user
//! name is trusted.
//!
//! [`secret`] reads the statement's tokens (the digest's tokenizer, so it agrees with it on where
//! a string or comment ends) and errs towards saying yes: a shape counts wherever it appears
//! (after a `;`, inside an executable comment `/*!40000 ... */` or `/*M!100100 ... */`, inside a
//! hint, in a string that reads as a statement such as `PREPARE s FROM '...'`), in any case, with
//! comments and hints between its words. A statement it flags loses its text and values, never
//! its digest or timing, so a false alarm costs a replay one statement, a miss leaks a password.

use std::borrow::Cow;

use crate::wire::protocol::caps::CLIENT_SECURE_CONNECTION;
use crate::wire::sql::{readings, tokens, tokens_as, Dialect, Reading, Token, TokenKind};

/// `payload` (command byte first) with its auth response emptied.
pub fn change_user(payload: &[u8], capabilities: u32) -> Vec<u8> {
    redacted(payload, capabilities).unwrap_or_else(|| payload.get(..1).unwrap_or_default().to_vec())
}

fn redacted(payload: &[u8], capabilities: u32) -> Option<Vec<u8>> {
    let (&command, rest) = payload.split_first()?;
    let user_end = rest.iter().position(|&b| b == 0)?;
    let after_user = &rest[user_end + 1..];
    let after_auth = if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let (&len, auth) = after_user.split_first()?;
        auth.get(len as usize..)?
    } else {
        let end = after_user.iter().position(|&b| b == 0)?;
        &after_user[end + 1..]
    };
    let mut out = Vec::with_capacity(payload.len());
    out.push(command);
    out.extend_from_slice(&rest[..=user_end]);
    // An empty auth response in either encoding: a zero length, or an empty NUL-ended string.
    out.push(0);
    out.extend_from_slice(after_auth);
    Some(out)
}

/// Strings inside strings (`PREPARE s FROM 'PREPARE t FROM ''...'''`) are read this deep.
const DEPTH: u8 = 4;

/// True if `text` (a COM_QUERY or COM_STMT_PREPARE text, or a prefix of one) may carry a
/// password or other credential: `CREATE`/`ALTER USER`, `SET PASSWORD`, `IDENTIFIED` (`GRANT ...
/// IDENTIFIED BY`, `IDENTIFIED VIA ... USING PASSWORD('x')`), `PASSWORD(`/`OLD_PASSWORD(`,
/// `CHANGE MASTER`, `CHANGE REPLICATION`, `MASTER_PASSWORD`, `SOURCE_PASSWORD`, `START
/// SLAVE|REPLICA ... PASSWORD`, `CREATE`/`ALTER SERVER` (its `OPTIONS (PASSWORD ...)`), and a
/// string after `CONNECTION` or `OPTION_LIST` (a FEDERATED or CONNECT table's
/// `'mysql://user:pw@host/...'`).
///
/// It is read the digest's way (every executable comment's words in line) and in every reading
/// a server could take (`sql::readings`: comments skipped by version, each `sql_mode` quoting
/// and multibyte character set), and is a secret if any reading finds one; a text with too many
/// readings to try is one.
pub fn secret(text: &[u8]) -> bool {
    if scan(text, 0, Reading::DIGEST) {
        return true;
    }
    match readings(text, Dialect::default()) {
        Some(all) => all.into_iter().any(|r| scan(text, 0, r)),
        None => true,
    }
}

/// One pass over `text`'s tokens in `reading`, an executable comment's tokens read in line
/// (its words join the words around it, as the server runs them).
fn scan(text: &[u8], depth: u8, reading: Reading) -> bool {
    let mut outer = tokens_as(text, reading);
    let mut inner = None;
    let mut m = Matcher::default();
    loop {
        let t = match inner.as_mut().and_then(Iterator::next) {
            Some(t) => t,
            None => {
                inner = None;
                match outer.next() {
                    Some(t) => t,
                    None => return false,
                }
            }
        };
        match t.kind {
            TokenKind::ExecutableComment if inner.is_none() => {
                inner = Some(tokens(comment_body(t.text)));
                continue;
            }
            // Comments do not nest: one inside an executable comment runs to its end.
            TokenKind::ExecutableComment | TokenKind::Hint => {
                if depth < DEPTH && scan(comment_body(t.text), depth + 1, Reading::DIGEST) {
                    return true;
                }
                continue;
            }
            TokenKind::String if depth < DEPTH => {
                let body = string_body(t.text);
                if reads_as_statement(&body) && scan(&body, depth + 1, Reading::DIGEST) {
                    return true;
                }
            }
            _ => {}
        }
        if m.step(t) {
            return true;
        }
    }
}

/// The last two tokens (hints and comments left out), and what earlier ones started.
#[derive(Default)]
struct Matcher<'a> {
    p1: Option<Token<'a>>,
    p2: Option<Token<'a>>,
    /// A `START SLAVE` / `START REPLICA` was seen: its `PASSWORD = '...'` follows.
    replica_start: bool,
}

fn word(t: Option<Token<'_>>, upper: &str) -> bool {
    t.is_some_and(|t| t.is_word(upper))
}

impl<'a> Matcher<'a> {
    /// Takes the next token; true once a shape is complete.
    fn step(&mut self, t: Token<'a>) -> bool {
        let (p1, p2) = (self.p1, self.p2);
        let w = |upper: &str| t.is_word(upper);
        let created =
            word(p1, "CREATE") || word(p1, "ALTER") || (word(p1, "REPLACE") && word(p2, "OR"));
        if (w("SLAVE") || w("REPLICA")) && word(p1, "START") {
            self.replica_start = true;
        }
        let hit = w("IDENTIFIED")
            || w("MASTER_PASSWORD")
            || w("SOURCE_PASSWORD")
            || ((w("USER") || w("SERVER")) && created)
            || ((w("MASTER") || w("REPLICATION")) && word(p1, "CHANGE"))
            || (w("PASSWORD") && (self.replica_start || set_statement(p1, p2)))
            || (t.is_operator("(") && (word(p1, "PASSWORD") || word(p1, "OLD_PASSWORD")))
            || (t.kind == TokenKind::String && credential_string(p1, p2));
        self.p2 = p1;
        self.p1 = Some(t);
        hit
    }
}

/// `p1` is a `SET` that starts a statement (`SET PASSWORD ...`, also inside a compound
/// statement's `BEGIN NOT ATOMIC ...`), not the `SET` of an `UPDATE t SET password = ...` or
/// `INSERT t SET ...`, which follows a table's name or a `)`.
fn set_statement(p1: Option<Token<'_>>, p2: Option<Token<'_>>) -> bool {
    word(p1, "SET")
        && !p2.is_some_and(|t| {
            let block = ["ATOMIC", "BEGIN", "THEN", "ELSE", "DO", "LOOP", "REPEAT"];
            (matches!(t.kind, TokenKind::Identifier | TokenKind::QuotedIdentifier)
                && !block.iter().any(|w| t.is_word(w)))
                || t.is_operator(")")
        })
}

/// A string right after `CONNECTION` or `OPTION_LIST`, or after their `=`.
fn credential_string(p1: Option<Token<'_>>, p2: Option<Token<'_>>) -> bool {
    let named = |t| word(t, "CONNECTION") || word(t, "OPTION_LIST");
    named(p1) || (p1.is_some_and(|t| t.is_operator("=")) && named(p2))
}

/// A string's content reads as a statement (what `PREPARE s FROM '...'`, `EXECUTE IMMEDIATE
/// '...'` or `SET @s = '...'` hold) when its first token is an executable comment or a word that
/// starts one: prose that merely says "identified" is left alone.
fn reads_as_statement(body: &[u8]) -> bool {
    const STARTS: [&str; 15] = [
        "CREATE", "ALTER", "SET", "GRANT", "CHANGE", "START", "SELECT", "DO", "PREPARE", "EXECUTE",
        "INSERT", "UPDATE", "REPLACE", "CALL", "BEGIN",
    ];
    match tokens(body).find(|t| t.kind != TokenKind::Hint) {
        Some(t) if t.kind == TokenKind::ExecutableComment => true,
        Some(t) => STARTS.iter().any(|s| t.is_word(s)),
        None => false,
    }
}

/// The text inside `/*!NNNNN ... */`, `/*M!NNNNNN ... */` or `/*+ ... */` (an unterminated one
/// runs to the end).
fn comment_body(text: &[u8]) -> &[u8] {
    let body = ["/*M!", "/*!", "/*+"]
        .iter()
        .find_map(|p| text.strip_prefix(p.as_bytes()))
        .unwrap_or(text);
    let digits = body.iter().take_while(|b| b.is_ascii_digit()).count();
    let body = body.get(digits..).unwrap_or_default();
    body.strip_suffix(b"*/").unwrap_or(body)
}

/// A string token's content, its escapes undone (`\x` is `x`, a doubled quote one quote); a
/// character set introducer or `N` before the quote is left out.
fn string_body(text: &[u8]) -> Cow<'_, [u8]> {
    let Some(open) = text.iter().position(|&b| b == b'\'' || b == b'"') else {
        return Cow::Borrowed(&[]);
    };
    let q = text[open];
    let inner = &text[open + 1..];
    let inner = match inner.last() {
        Some(&b) if b == q => &inner[..inner.len() - 1],
        _ => inner,
    };
    if !inner.iter().any(|&b| b == b'\\' || b == q) {
        return Cow::Borrowed(inner);
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while let Some(&b) = inner.get(i) {
        let escaped = b == b'\\' || (b == q && inner.get(i + 1) == Some(&q));
        if escaped {
            i += 1;
        }
        if let Some(&c) = inner.get(i) {
            out.push(c);
        }
        i += 1;
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape of the password family, as MariaDB and MySQL write them.
    const SECRET: &[&str] = &[
        "CREATE USER 'u'@'%' IDENTIFIED BY 'pw'",
        "create or replace user u identified by 'pw'",
        "CREATE USER IF NOT EXISTS u",
        "ALTER USER u IDENTIFIED BY 'pw'",
        "alter user u identified via ed25519 using password('pw')",
        "SET PASSWORD FOR 'u'@'%' = PASSWORD('pw')",
        "set password = 'pw'",
        "SET STATEMENT max_statement_time=1 FOR SET PASSWORD = PASSWORD('pw')",
        "BEGIN NOT ATOMIC SET PASSWORD FOR u = PASSWORD('pw'); END",
        "GRANT SELECT ON *.* TO u IDENTIFIED BY 'pw'",
        "GRANT USAGE ON *.* TO u@h IDENTIFIED WITH mysql_native_password AS '*ABC'",
        "CHANGE MASTER TO MASTER_HOST='h', MASTER_PASSWORD='pw'",
        "change master 'conn1' to master_user='r'",
        "CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD='pw'",
        "START REPLICA USER='r' PASSWORD='pw'",
        "START SLAVE PASSWORD = 'pw'",
        "CREATE TABLE f (a INT) ENGINE=FEDERATED CONNECTION='mysql://u:pw@h:3306/db/t'",
        "CREATE TABLE c (a INT) ENGINE=CONNECT TABLE_TYPE=MYSQL CONNECTION 'mysql://u:pw@h/db/t'",
        "ALTER TABLE f CONNECTION = 'mysql://u:pw@h/db/t'",
        "CREATE TABLE c (a INT) ENGINE=CONNECT OPTION_LIST='user=u,password=pw'",
        "CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'u', PASSWORD 'pw')",
        "ALTER SERVER s OPTIONS (PASSWORD 'pw')",
        "SELECT PASSWORD('pw')",
        "select old_password ('pw')",
        "UPDATE mysql.user SET authentication_string = PASSWORD('pw')",
        // Anywhere in the text, in executable comments, with comments and hints between words.
        "SELECT 1; CREATE USER u IDENTIFIED BY 'pw'",
        "/*!40000 CREATE USER u IDENTIFIED BY 'pw' */",
        "/*M!100100 ALTER USER u IDENTIFIED BY 'pw' */",
        "CREATE /*!USER*/ u",
        "/*!50000 CREATE */ USER u",
        "CREATE /* why */ USER u",
        "CREATE -- why\n USER u",
        "CREATE # why\n USER u",
        "SET /*+ hint */ PASSWORD = 'pw'",
        "SELECT /*+ IDENTIFIED */ 1",
        "SELECT 1 /*!99999 , PASSWORD('pw') */",
        "sElEcT 1; sEt PaSsWoRd = 'pw'",
        // A statement in a string, as PREPARE, EXECUTE IMMEDIATE and variables hold it.
        "PREPARE s FROM 'CREATE USER u IDENTIFIED BY ''pw'''",
        "EXECUTE IMMEDIATE \"ALTER USER u IDENTIFIED BY 'pw'\"",
        "SET @s = 'SET PASSWORD = PASSWORD(\\'pw\\')'",
        "PREPARE s FROM _utf8mb4'/*!40000 CREATE USER u */'",
        "PREPARE s FROM 'PREPARE t FROM ''CREATE USER u'''",
        // Conservative: any string that reads as such a statement, whatever it is for.
        "SELECT 'create user u identified by x'",
        // Cut short: what is there still counts.
        "CREATE USER u IDENTIFIED BY 'pw",
    ];

    /// Near misses: the words without the shape, or the shape's words as data.
    const PLAIN: &[&str] = &[
        "SELECT 'password'",
        "SELECT 'identified'",
        "SELECT 'a user identified by x'",
        "SELECT password FROM users",
        "SELECT * FROM t WHERE note = 'the bug was identified by QA'",
        "UPDATE users SET password = 'hash' WHERE id = 1",
        "INSERT users SET password = 'hash'",
        "UPDATE `users` SET password = ?",
        "SELECT user FROM mysql.user",
        "DROP USER u",
        "SELECT CONNECTION_ID()",
        "KILL CONNECTION 5",
        "SELECT 1 /* CREATE USER u IDENTIFIED BY 'pw' */",
        "SELECT 1 -- SET PASSWORD = 'pw'",
        "SELECT `identified`.x FROM t",
        "SHOW GRANTS FOR u",
        "SELECT master_pos_wait('f', 4)",
    ];

    #[test]
    fn a_password_a_server_reading_shows_is_a_secret() {
        // NO_BACKSLASH_ESCAPES ends the first string at its backslash: PASSWORD() runs.
        assert!(secret(b"SELECT 'a\\', PASSWORD('pw'), '\\'"));
        // gbk reads 0xBF 0x5C as one character, ending the string there.
        assert!(secret(b"SELECT '\xbf\\', PASSWORD('pw') -- '"));
    }

    #[test]
    fn every_password_shape_is_a_secret() {
        for s in SECRET {
            assert!(secret(s.as_bytes()), "not flagged: {s}");
        }
    }

    #[test]
    fn near_misses_are_no_secret() {
        for s in PLAIN {
            assert!(!secret(s.as_bytes()), "flagged: {s}");
        }
    }

    #[test]
    fn any_bytes_are_read_without_panic() {
        let odd: [&[u8]; 7] = [
            b"",
            b"'",
            b"/*!",
            b"/*M!1",
            b"\xff\xfe CREATE",
            b"'\\",
            b"CONNECTION =",
        ];
        for s in odd {
            assert!(!secret(s), "{s:?}");
        }
        // Strings in strings are read DEPTH deep, no deeper (and without a stack overflow).
        let mut s = String::from("CREATE USER u");
        for depth in 0..12 {
            assert_eq!(secret(s.as_bytes()), depth <= DEPTH, "{depth}: {s}");
            s = format!("PREPARE s FROM '{}'", s.replace('\'', "''"));
        }
    }

    #[test]
    fn the_auth_response_is_removed_and_the_rest_kept() {
        let mut p = vec![0x11];
        p.extend_from_slice(b"bob\0");
        p.push(20);
        p.extend_from_slice(&[0xAB; 20]);
        p.extend_from_slice(b"shop\0");
        p.extend_from_slice(&[45, 0]);
        p.extend_from_slice(b"mysql_native_password\0");
        let r = change_user(&p, CLIENT_SECURE_CONNECTION);
        let mut want = vec![0x11];
        want.extend_from_slice(b"bob\0\0shop\0");
        want.extend_from_slice(&[45, 0]);
        want.extend_from_slice(b"mysql_native_password\0");
        assert_eq!(r, want);
        assert!(!r.windows(2).any(|w| w == [0xAB, 0xAB]));
    }

    #[test]
    fn without_secure_connection_the_auth_is_a_nul_ended_string() {
        let r = change_user(b"\x11bob\0secret\0shop\0", 0);
        assert_eq!(r, b"\x11bob\0\0shop\0");
    }

    #[test]
    fn a_payload_that_does_not_parse_keeps_only_the_command_byte() {
        assert_eq!(change_user(b"\x11bob", CLIENT_SECURE_CONNECTION), b"\x11");
        assert_eq!(
            change_user(b"\x11bob\0\x30secret", CLIENT_SECURE_CONNECTION),
            b"\x11"
        );
        assert_eq!(change_user(b"", 0), b"");
    }
}
