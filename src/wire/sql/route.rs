//! Where a statement may run when a pool splits reads from writes (`pooling.read_write_split`):
//! on a replica, or only on the primary. Sans-IO, asked once per transaction by the pooled
//! session (its first statement decides the whole transaction).
//!
//! A replica gets only what is provably a pure read in every reading the server could take of
//! the text: what [`retryable_read`] sends again after a lost server (one `SELECT`, `WITH ..
//! SELECT`, `VALUES` or `TABLE`, or an `EXPLAIN`; no call but the pure built-ins of
//! [`super::functions`]; no `INTO`, user variable, sequence or anything that pins), and on top
//! of it:
//! - no locking clause (`FOR UPDATE`, `FOR SHARE`, `LOCK IN SHARE MODE`): a lock is the
//!   primary's to take, and the retry, which reads it as a read, has no say here;
//! - no system variable (`@@server_id`, `@@read_only`, `@@gtid_binlog_pos` differ by server:
//!   an application asking them asks about the server it writes to);
//! - no `SHOW` (`SHOW MASTER STATUS`, `SHOW PROCESSLIST` answer for one server).
//!
//! `START TRANSACTION READ ONLY` opens a transaction the server refuses writes in: it goes to a
//! replica whole. Everything else goes to the primary, where a session that is unsure runs.
//! What the text cannot show (a view or trigger that writes) is documented where the split is.

use super::classify::{classify_as, Statement};
use super::reading::{readings, Dialect};
use super::retry::retryable_read;
use super::token::{tokens_as, TokenKind};

/// Where a transaction that starts with a statement may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A pure read in autocommit: any replica (or the primary).
    Replica,
    /// `START TRANSACTION READ ONLY`: the whole transaction on one replica.
    ReadOnlyTransaction,
    /// Anything else.
    Primary,
}

/// Where the transaction `text` starts may run (see the module's docs).
pub fn target(text: &[u8], dialect: Dialect) -> Target {
    if plainly_replica(text) {
        return Target::Replica;
    }
    target_by_tokens(text, dialect)
}

/// Settles, without tokenizing, the reads most traffic is made of (`SELECT c FROM t WHERE
/// id = 5`): a text that starts with `SELECT` and holds, anywhere (inside strings and names
/// too, in any case), none of `(` (a call), `@` (a variable), `;` (a second statement), `/`
/// and `#` and `--` (comments, executable ones included), nor the letters of `FOR`, `LOCK`,
/// `INTO` and `FOUND_ROWS` (a locking clause, `INTO`, `NEXT VALUE FOR`, `SQL_CALC_FOUND_ROWS`,
/// which pins). What any of these could hide
/// behind a quote they cannot, since they are looked for in the bytes whatever quotes
/// surround them; the rest is what [`target_by_tokens`] finds a pure read in every reading (a
/// proptest holds the two together). A read this way costs a pass over its bytes, not four
/// tokenizations.
fn plainly_replica(text: &[u8]) -> bool {
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let t = &text[start..];
    let headed =
        t.len() > 6 && t[..6].eq_ignore_ascii_case(b"select") && t[6].is_ascii_whitespace();
    if !headed {
        return false;
    }
    let at = |i: usize, word: &[u8]| {
        t.get(i..i + word.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(word))
    };
    !t.iter().enumerate().any(|(i, &b)| match b {
        b'(' | b'@' | b';' | b'/' | b'#' => true,
        b'-' => t.get(i + 1) == Some(&b'-'),
        b'F' | b'f' => at(i, b"FOR") || at(i, b"FOUND_ROWS"),
        b'L' | b'l' => at(i, b"LOCK"),
        b'I' | b'i' => at(i, b"INTO"),
        // Bytes no lexer reads the same in every character set: the long way.
        0x80.. => true,
        _ => false,
    })
}

/// [`target`] by the tokens of every reading.
fn target_by_tokens(text: &[u8], dialect: Dialect) -> Target {
    if read_only_transaction(text, dialect) {
        return Target::ReadOnlyTransaction;
    }
    if !retryable_read(text, dialect) {
        return Target::Primary;
    }
    let Some(all) = readings(text, dialect) else {
        return Target::Primary;
    };
    let replica = all.into_iter().all(|reading| {
        let kind = classify_as(text, reading);
        if !matches!(kind, Statement::Select | Statement::Explain) {
            return false;
        }
        let mut previous_for = false;
        tokens_as(text, reading).all(|t| {
            let locks =
                (previous_for && (t.is_word("UPDATE") || t.is_word("SHARE"))) || t.is_word("LOCK");
            previous_for = t.is_word("FOR");
            !locks && t.kind != TokenKind::Variable
        })
    });
    if replica {
        Target::Replica
    } else {
        Target::Primary
    }
}

/// Whether a statement may run on the replica a session's transaction is on: a pure read
/// ([`Target::Replica`]), or the end of that transaction or a savepoint in it (`COMMIT`,
/// `ROLLBACK`, `SAVEPOINT`, `RELEASE SAVEPOINT`, `ROLLBACK TO`), in every reading. Anything
/// else (a write, DDL, which would commit the read-only transaction first and run alone) is
/// kept off the replica.
pub fn replica_may_continue(text: &[u8], dialect: Dialect) -> bool {
    if target(text, dialect) == Target::Replica {
        return true;
    }
    if super::pins::pins_for(text, dialect).is_some() {
        return false;
    }
    let Some(all) = readings(text, dialect) else {
        return false;
    };
    all.into_iter().all(|reading| {
        matches!(
            classify_as(text, reading),
            Statement::Commit
                | Statement::Rollback
                | Statement::RollbackToSavepoint
                | Statement::Savepoint
                | Statement::ReleaseSavepoint
        )
    })
}

/// Whether a session relayed to a backend that takes no writes (a replica, outside a split)
/// must not send `text` there: a write or DDL in any reading, a procedure, a prepared or
/// loaded statement, anything the lexer does not know (`FLUSH`, `ANALYZE TABLE`, ... which the
/// binary log may carry), a call the allow-list of built-ins does not know (a stored function
/// may write), or a second statement. `KILL` is not refused. A user with `READ ONLY ADMIN`
/// (MariaDB's `ALL`) is not stopped by the replica's `read_only`, so the proxy stops it.
pub fn replica_refuses(text: &[u8], dialect: Dialect) -> bool {
    use super::pins::{pins_for, Pin};
    if matches!(
        pins_for(text, dialect),
        Some(Pin::Function | Pin::MultiStatement | Pin::Call | Pin::Prepare | Pin::Unknown)
    ) {
        // `Unknown` is also any statement pins does not list; `KILL` is listed stateless.
        return true;
    }
    let Some(all) = readings(text, dialect) else {
        return true;
    };
    all.into_iter().any(|reading| {
        let kind = classify_as(text, reading);
        kind.is_write()
            || matches!(
                kind,
                Statement::Call | Statement::Execute | Statement::Prepare | Statement::Load
            )
            || (kind == Statement::Other
                && !tokens_as(text, reading)
                    .find(|t| t.kind != TokenKind::Hint)
                    .is_some_and(|t| t.is_word("KILL")))
            || unknown_call(text, reading)
    })
}

/// Whether a call in `text`, as `reading` has it, may be of a stored function: the pins stop
/// at their first reason (`SET @a = f()` is a user variable), this looks at every call.
fn unknown_call(text: &[u8], reading: super::reading::Reading) -> bool {
    let toks: Vec<_> = tokens_as(text, reading)
        .filter(|t| t.kind != TokenKind::Hint)
        .collect();
    toks.iter().enumerate().any(|(i, t)| {
        let calls = toks.get(i + 1).is_some_and(|n| n.is_operator("("));
        if !calls {
            return false;
        }
        let qualified = i > 0 && toks[i - 1].is_operator(".");
        match t.kind {
            TokenKind::QuotedIdentifier => true,
            TokenKind::Keyword | TokenKind::Identifier => {
                qualified
                    || !(super::functions::pure_builtin(t.text)
                        || super::functions::syntax_paren(t.text)
                        || i > 0 && is_table_word(&toks[i - 1]))
            }
            _ => false,
        }
    })
}

/// A word after which a name is a table's, whose `(` opens its column list.
fn is_table_word(t: &super::token::Token<'_>) -> bool {
    [
        "INTO",
        "TABLE",
        "INSERT",
        "REPLACE",
        "IGNORE",
        "WITH",
        "RECURSIVE",
        "JOIN",
        "FROM",
    ]
    .iter()
    .any(|w| t.is_word(w))
}

/// `START TRANSACTION READ ONLY` (with `WITH CONSISTENT SNAPSHOT` or not) in every reading,
/// and nothing after it.
fn read_only_transaction(text: &[u8], dialect: Dialect) -> bool {
    let Some(all) = readings(text, dialect) else {
        return false;
    };
    all.into_iter().all(|reading| {
        let mut words = tokens_as(text, reading).filter(|t| t.kind != TokenKind::Hint);
        let start = words.next().is_some_and(|t| t.is_word("START"))
            && words.next().is_some_and(|t| t.is_word("TRANSACTION"));
        if !start {
            return false;
        }
        let mut read_only = false;
        let mut previous_read = false;
        for t in words {
            let ok = t.is_word("READ")
                || (previous_read && t.is_word("ONLY"))
                || t.is_word("WITH")
                || t.is_word("CONSISTENT")
                || t.is_word("SNAPSHOT")
                || t.is_operator(",")
                || t.is_operator(";");
            if !ok {
                return false;
            }
            read_only |= previous_read && t.is_word("ONLY");
            previous_read = t.is_word("READ");
        }
        read_only
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(text: &str) -> Target {
        target(text.as_bytes(), Dialect::default())
    }

    #[test]
    fn pure_reads_in_autocommit_go_to_a_replica() {
        for text in [
            "SELECT c FROM sbtest1 WHERE id=5012",
            "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100",
            "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c",
            "select count(*) from t where a in (1, 2) and exists (select 1 from u)",
            "WITH x AS (SELECT 1 AS a) SELECT a FROM x",
            "(SELECT 1) UNION (SELECT 2)",
            "SELECT NOW(), CONCAT(a, 'x'), COALESCE(b, 0) FROM t",
            "EXPLAIN SELECT * FROM t",
            "SELECT 1;",
        ] {
            assert_eq!(route(text), Target::Replica, "{text}");
        }
    }

    #[test]
    fn the_byte_shortcut_takes_plain_reads_and_leaves_the_rest_to_the_tokens() {
        for plain in [
            "SELECT c FROM sbtest1 WHERE id=5012",
            "  select c from sbtest1 where id between 1 and 100 order by c",
            "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c",
            "SELECT 'a b' FROM t WHERE x > -1",
        ] {
            assert!(plainly_replica(plain.as_bytes()), "{plain}");
            assert_eq!(
                target_by_tokens(plain.as_bytes(), Dialect::default()),
                Target::Replica
            );
        }
        for long_way in [
            "SELECT SUM(k) FROM t",
            "SELECT a FROM t FOR UPDATE",
            "SELECT a FROM t LOCK IN SHARE MODE",
            "SELECT a INTO OUTFILE 'x' FROM t",
            "SELECT @@server_id",
            "SELECT 1; DELETE FROM t",
            "SELECT 1 /*! , f() */",
            "SELECT 1 -- x",
            "SELECT 1 # x",
            "SELECT format FROM t",
            "SELECT 'a;b' FROM t",
            "SELECT '\u{e9}' FROM t",
            "SHOW TABLES",
            "SELECTa FROM t",
        ] {
            assert!(!plainly_replica(long_way.as_bytes()), "{long_way}");
        }
    }

    #[test]
    fn the_shortcut_agrees_with_the_tokens_on_the_pins_corpus() {
        use crate::wire::sql::pins::Pin;
        const CORPUS: &[(&str, Option<Pin>)] = include!("pins/corpus.rs");
        for (text, _) in CORPUS {
            if plainly_replica(text.as_bytes()) {
                assert_eq!(
                    target_by_tokens(text.as_bytes(), Dialect::default()),
                    Target::Replica,
                    "{text}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn the_shortcut_never_says_more_than_the_tokens(
            words in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "t", "FROM", "WHERE", "=", "1", "'x'", "\"y\"", "`z`", "ORDER BY",
                    "BETWEEN", "AND", "UNION", "SELECT", "f", "\\", "'", "\"", "`", ",", "*",
                    "DELETE", "INSERT", "SET", "\n", "\t", "0x41", "_utf8mb4", "N'a'", "LIMIT",
                    "FOR", "INTO", "LOCK", "SQL_CALC_FOUND_ROWS", "-", "+", "<", ">", "!", "?", ".", "e",
                ]),
                0..12,
            ),
        ) {
            let text = format!("SELECT {}", words.join(" "));
            if plainly_replica(text.as_bytes()) {
                proptest::prop_assert_eq!(
                    target_by_tokens(text.as_bytes(), Dialect::default()),
                    Target::Replica,
                    "{}",
                    text
                );
            }
        }
    }

    #[test]
    fn read_only_transactions_go_to_a_replica_whole() {
        for text in [
            "START TRANSACTION READ ONLY",
            "start transaction read only, with consistent snapshot",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        ] {
            assert_eq!(route(text), Target::ReadOnlyTransaction, "{text}");
        }
    }

    #[test]
    fn a_transaction_on_a_replica_takes_reads_and_its_end_only() {
        let may = |t: &str| replica_may_continue(t.as_bytes(), Dialect::default());
        for yes in [
            "SELECT a FROM t",
            "COMMIT",
            "ROLLBACK",
            "SAVEPOINT s",
            "ROLLBACK TO s",
        ] {
            assert!(may(yes), "{yes}");
        }
        for no in [
            "INSERT INTO t VALUES (1)",
            "CREATE TABLE t2 (a INT)",
            "SELECT f()",
            "COMMIT; INSERT INTO t VALUES (1)",
            "COMMIT RELEASE",
            "SET autocommit = 0",
        ] {
            assert!(!may(no), "{no}");
        }
    }

    #[test]
    fn a_replica_outside_a_split_refuses_writes_and_what_may_write() {
        let refuses = |t: &str| replica_refuses(t.as_bytes(), Dialect::default());
        for ok in [
            "SELECT a FROM t WHERE id = 1",
            "SELECT NOW(), COUNT(*) FROM t",
            "SELECT * FROM t FOR UPDATE",
            "SET NAMES utf8mb4",
            "SET @x = 1",
            "SET autocommit = 0",
            "USE app",
            "BEGIN",
            "COMMIT",
            "SHOW TABLES",
            "KILL QUERY 5",
            "DO 1",
            "SELECT @@read_only",
        ] {
            assert!(!refuses(ok), "{ok}");
        }
        for no in [
            "INSERT INTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "DELETE FROM t",
            "REPLACE INTO t VALUES (1)",
            "CREATE TABLE t (a INT)",
            "DROP TABLE t",
            "ALTER TABLE t ADD b INT",
            "TRUNCATE t",
            "GRANT SELECT ON *.* TO u",
            "CALL p()",
            "PREPARE s FROM 'DELETE FROM t'",
            "EXECUTE s",
            "LOAD DATA INFILE '/tmp/x' INTO TABLE t",
            "SELECT f()",
            "SET @a = f()",
            "SELECT 1; DELETE FROM t",
            "/*!DELETE FROM t*/",
            "FLUSH TABLES",
            "ANALYZE TABLE t",
            "SELECT 1 /* unterminated",
        ] {
            assert!(refuses(no), "{no}");
        }
    }

    #[test]
    fn everything_else_goes_to_the_primary() {
        for text in [
            "INSERT INTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "DELETE FROM t",
            "BEGIN",
            "START TRANSACTION",
            "START TRANSACTION READ WRITE",
            "START TRANSACTION READ ONLY; INSERT INTO t VALUES (1)",
            "SELECT * FROM t FOR UPDATE",
            "SELECT * FROM t WHERE id = 1 FOR SHARE",
            "SELECT * FROM t LOCK IN SHARE MODE",
            "SELECT @@server_id",
            "SELECT @@global.gtid_binlog_pos",
            "SELECT @x",
            "SELECT f(1)",
            "SELECT db.count(1)",
            "SELECT `count`(1)",
            "SELECT * FROM t WHERE a = f()",
            "SELECT SLEEP(1)",
            "SELECT LAST_INSERT_ID()",
            "SELECT FOUND_ROWS()",
            "SELECT GET_LOCK('a', 1)",
            "SELECT NEXTVAL(s)",
            "SELECT 1 INTO @x",
            "SELECT * FROM t INTO OUTFILE '/tmp/x'",
            "SHOW TABLES",
            "SHOW SLAVE STATUS",
            "SET autocommit = 0",
            "CALL p()",
            "DO 1",
            "SELECT 1; DELETE FROM t",
            "/*!DELETE FROM t*/",
            "SELECT 1 /*!99999 , f(1) */",
            "SELECT 1 /* unterminated",
            "",
        ] {
            assert_eq!(route(text), Target::Primary, "{text}");
        }
    }
}
