//! Whether a statement may run a second time, on another server, when the server it was sent to
//! was lost before answering: a transaction-mode pool across backends sends such a statement
//! once more instead of failing the client (see `proxy/session/pooled.rs`).
//!
//! The first server may have run it before it died, so only a statement whose second run
//! changes nothing and whose answer a client cannot tell from the first's qualifies: one
//! `SELECT` (or `SHOW`, `EXPLAIN`, a `WITH ... SELECT`, a parenthesized `SELECT`) in every
//! reading the server could take of the text ([`readings`]), with
//! - no function call but the pure built-ins of [`super::functions`] (a stored function may write, `SLEEP`
//!   waits, `GET_LOCK` locks, `NEXTVAL` advances a sequence; a call after a qualifier or in
//!   backticks may be a stored function of the same name),
//! - no `NEXT VALUE FOR` / `PREVIOUS VALUE FOR` (MariaDB's sequences),
//! - no `INTO` (a file, a dump, user variables), no user variable at all (`@x := 1` assigns),
//! - nothing the lexer cannot follow ([`TokenKind::Unsure`]),
//! - nothing that pins a pooled session ([`pins`](super::pins::pins)), so that "one statement"
//!   means the same here as where the pool decides what a session may share: the pool reads
//!   `SELECT 1;;` as a second, empty statement after the first and pins for it (MariaDB 10.11
//!   answers it as one; a server may not), and a retry takes the same cautious reading.
//!
//! Anything else is not retried: the safe answer is the lost connection, as without a pool.

use super::classify::{classify_as, read_only, Statement};
use super::functions::{pure_builtin, syntax_paren};
use super::reading::{readings, Dialect};
use super::token::{tokens_as, Token, TokenKind};

/// True only when `text` may be sent again to another server after the first was lost before
/// answering it (see the module's docs).
pub fn retryable_read(text: &[u8], dialect: Dialect) -> bool {
    if !read_only(text) || super::pins::pins(text).is_some() {
        return false;
    }
    let Some(all) = readings(text, dialect) else {
        return false;
    };
    all.into_iter().all(|reading| {
        let reads = matches!(
            classify_as(text, reading),
            Statement::Select | Statement::Show | Statement::Explain
        );
        reads && {
            let toks: Vec<Token<'_>> = tokens_as(text, reading).collect();
            toks.iter().enumerate().all(|(i, t)| {
                let next = toks.get(i + 1);
                let calls = next.is_some_and(|n| n.is_operator("("));
                match t.kind {
                    TokenKind::Unsure => false,
                    TokenKind::Variable => t.text.starts_with(b"@@"),
                    TokenKind::QuotedIdentifier => !calls,
                    TokenKind::Keyword | TokenKind::Identifier => {
                        let sequence = (t.is_word("NEXT") || t.is_word("PREVIOUS"))
                            && next.is_some_and(|n| n.is_word("VALUE"));
                        let call_ok = !calls
                            || (!(i > 0 && toks[i - 1].is_operator("."))
                                && (pure_builtin(t.text)
                                    || t.kind == TokenKind::Keyword && syntax_paren(t.text)));
                        !t.is_word("INTO") && !sequence && call_ok
                    }
                    _ => true,
                }
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retryable(text: &str) -> bool {
        retryable_read(text.as_bytes(), Dialect::default())
    }

    #[test]
    fn plain_reads_and_pure_built_ins_are_retried() {
        for text in [
            "SELECT c FROM sbtest1 WHERE id=5012",
            "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100",
            "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c",
            "select count(*) from t where a in (1, 2) and exists (select 1 from u)",
            "SELECT @@port, @@version",
            "SHOW TABLES",
            "(SELECT 1) UNION (SELECT 2)",
            "WITH x AS (SELECT 1 AS a) SELECT a FROM x",
            "SELECT * FROM t FOR UPDATE",
            "SELECT 1;",
            "SELECT 1; -- done",
        ] {
            assert!(retryable(text), "{text}");
        }
    }

    #[test]
    fn anything_that_may_act_or_cannot_be_read_is_not() {
        for text in [
            "DELETE FROM t",
            "UPDATE t SET a = 1",
            "SELECT f(1)",
            "SELECT db.count(1)",
            "SELECT `count`(1)",
            "SELECT SLEEP(1)",
            "SELECT GET_LOCK('x', 1)",
            "SELECT NEXTVAL(s)",
            "SELECT NEXT VALUE FOR s",
            "SELECT PREVIOUS VALUE FOR s",
            "SELECT 1 INTO @x",
            "SELECT * FROM t INTO OUTFILE '/tmp/x'",
            "SELECT @x := 1",
            "SELECT @x",
            "SELECT 1; DELETE FROM t",
            // Found by the sql_digest fuzz target: an empty second statement pins, so the text
            // is not read as one read.
            "SELECT 1;;",
            "SELECT 1; ;",
            "select a.id as iD1_0_ from a;;;",
            "SELECT 1 /*!99999 , f(1) */",
            "SELECT 1 /*! ; DELETE FROM t */",
            "/*!DELETE FROM t*/",
            "SELECT 1 /* unterminated",
            "SET @a = 1",
            "CALL p()",
            "DO 1",
            "BEGIN",
            "USE db",
            "",
        ] {
            assert!(!retryable(text), "{text}");
        }
    }
}
