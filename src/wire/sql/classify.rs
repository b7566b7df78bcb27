//! What kind of statement a text is, from its first keyword(s): for the digest table (which
//! schema a `USE` switches to), replay's read-only mode and transaction pooling.
//!
//! Comments, hints, leading `(` and `;` are skipped; a leading executable comment
//! (`/*!40101 SET NAMES utf8 */`, as mysqldump writes them) is classified by its content, since
//! the server runs it. `WITH` is classified by the statement after its common table
//! expressions, `EXPLAIN ANALYZE` / MariaDB's `ANALYZE <statement>` by the statement they run.

use std::borrow::Cow;

use super::reading::{readings, Dialect, Reading};
use super::token::{tokens, tokens_as, Token, TokenKind, Tokens};

/// A statement's kind.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Statement<'a> {
    /// `SELECT`, and the table value constructors `VALUES ...` / `TABLE t`.
    Select,
    Insert,
    Update,
    Delete,
    Replace,
    /// `LOAD DATA` / `LOAD XML`.
    Load,
    /// `USE schema`: the schema name without its quotes (a doubled backtick inside is one).
    Use(Cow<'a, [u8]>),
    /// `BEGIN`, `BEGIN WORK`, `START TRANSACTION ...` (not MariaDB's `BEGIN NOT ATOMIC`).
    Begin,
    Commit,
    Rollback,
    /// `ROLLBACK [WORK] TO [SAVEPOINT] name`: the transaction stays open.
    RollbackToSavepoint,
    Savepoint,
    /// `RELEASE SAVEPOINT name`.
    ReleaseSavepoint,
    /// Any `SET` (session or global variables, `NAMES`, `TRANSACTION`, `PASSWORD`, ...).
    Set,
    /// `LOCK TABLE(S)`.
    LockTables,
    /// `UNLOCK TABLE(S)`.
    UnlockTables,
    /// `PREPARE name FROM ...`.
    Prepare,
    /// `EXECUTE name ...`.
    Execute,
    /// `DEALLOCATE PREPARE name` / `DROP PREPARE name`.
    Deallocate,
    Call,
    Do,
    Show,
    /// `EXPLAIN`, `DESCRIBE`, `DESC` (not `EXPLAIN ANALYZE`, which runs its statement).
    Explain,
    Create,
    Alter,
    Drop,
    Rename,
    Truncate,
    Grant,
    Revoke,
    /// Anything else (`FLUSH`, `KILL`, `HANDLER`, `XA`, `ANALYZE TABLE`, compound statements,
    /// text that is no statement).
    Other,
}

impl Statement<'_> {
    /// True for statements that change data or schema whenever they succeed.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Statement::Insert
                | Statement::Update
                | Statement::Delete
                | Statement::Replace
                | Statement::Load
                | Statement::Create
                | Statement::Alter
                | Statement::Drop
                | Statement::Rename
                | Statement::Truncate
                | Statement::Grant
                | Statement::Revoke
        )
    }

    /// True for statements that change no data by themselves: reads, `SHOW`, `EXPLAIN`, `USE`
    /// and transaction control. A `SELECT` may still call a stored function that writes, or
    /// write a file (`INTO OUTFILE`); `SET`, `CALL`, `EXECUTE`, `DO` and [`Other`](Self::Other)
    /// are neither read-only nor [writes](Self::is_write): they cannot be known from the text.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Statement::Select
                | Statement::Show
                | Statement::Explain
                | Statement::Use(_)
                | Statement::Begin
                | Statement::Commit
                | Statement::Rollback
                | Statement::RollbackToSavepoint
                | Statement::Savepoint
                | Statement::ReleaseSavepoint
        )
    }
}

/// Classifies `text` by its first keyword(s), reading executable comments as the digest does
/// (a leading one by its content): for labels, never for a decision that must hold.
pub fn classify(text: &[u8]) -> Statement<'_> {
    classify_tokens(tokens(text), true)
}

/// Classifies `text` as the server reads it in `reading`.
pub fn classify_as(text: &[u8], reading: Reading) -> Statement<'_> {
    classify_tokens(tokens_as(text, reading), true)
}

/// True only when `text` is one statement that is [read-only](Statement::is_read_only) in
/// every reading the server could take of it (see [`readings`]): replay's read-only mode runs
/// nothing else. A second statement after a `;`, in any reading, is not read-only.
pub fn read_only(text: &[u8]) -> bool {
    let Some(all) = readings(text, Dialect::default()) else {
        return false;
    };
    all.into_iter().all(|r| {
        classify_as(text, r).is_read_only() && {
            let mut toks = tokens_as(text, r);
            let mut after_semicolon = false;
            toks.all(|t| {
                let ok = !after_semicolon && t.kind != TokenKind::Unsure;
                after_semicolon |= t.is_operator(";");
                ok || (after_semicolon && t.is_operator(";"))
            })
        }
    })
}

/// True when `text` only reads the diagnostics area the previous statement left: `SHOW
/// WARNINGS`, `SHOW ERRORS`, `SHOW COUNT(*) WARNINGS` / `ERRORS` (a `LIMIT` after them
/// allowed), or a `SELECT` of nothing but `@@warning_count` / `@@error_count`. The server keeps
/// the area through these, so a pooled session that may read it keeps its connection while they
/// come. A wrong `false` only gives the connection back sooner, as before.
pub fn reads_diagnostics(text: &[u8]) -> bool {
    let mut toks = tokens(text).filter(|t| t.kind != TokenKind::Hint);
    let Some(head) = toks.next() else {
        return false;
    };
    let area = |t: &Token<'_>| t.is_word("WARNINGS") || t.is_word("ERRORS");
    if head.is_word("SHOW") {
        let Some(t) = toks.next() else {
            return false;
        };
        if area(&t) {
            return true;
        }
        let counted = t.is_word("COUNT")
            && toks.next().is_some_and(|t| t.is_operator("("))
            && toks.next().is_some_and(|t| t.is_operator("*"))
            && toks.next().is_some_and(|t| t.is_operator(")"));
        return counted && toks.next().is_some_and(|t| area(&t));
    }
    if !head.is_word("SELECT") {
        return false;
    }
    let counter = |t: &Token<'_>| {
        let name = t.text.strip_prefix(b"@@").unwrap_or_default();
        let name = match name.get(..8) {
            Some(p) if p.eq_ignore_ascii_case(b"session.") => &name[8..],
            _ => name,
        };
        name.eq_ignore_ascii_case(b"warning_count") || name.eq_ignore_ascii_case(b"error_count")
    };
    let mut any = false;
    for t in toks {
        match t.kind {
            TokenKind::Variable if counter(&t) => any = true,
            TokenKind::Operator if t.is_operator(",") || t.is_operator(";") => {}
            _ => return false,
        }
    }
    any
}

/// The first token that starts the statement: hints, `(` and `;` skipped.
fn first<'a>(toks: &mut Tokens<'a>) -> Option<Token<'a>> {
    toks.find(|t| !(t.kind == TokenKind::Hint || t.is_operator("(") || t.is_operator(";")))
}

fn classify_tokens(mut toks: Tokens<'_>, outer: bool) -> Statement<'_> {
    let Some(tok) = first(&mut toks) else {
        return Statement::Other;
    };
    if tok.kind == TokenKind::Unsure {
        return Statement::Other;
    }
    if tok.kind == TokenKind::ExecutableComment {
        return if outer {
            classify_tokens(tokens(executable_body(tok.text)), false)
        } else {
            Statement::Other
        };
    }
    let next_is = |toks: &Tokens<'_>, word: &str| {
        first_word(toks).is_some_and(|t: Token<'_>| t.is_word(word))
    };
    if !matches!(tok.kind, TokenKind::Keyword | TokenKind::Identifier) {
        return Statement::Other;
    }
    let w = |word: &str| tok.is_word(word);
    if w("SELECT") || w("VALUES") || w("TABLE") {
        Statement::Select
    } else if w("INSERT") {
        Statement::Insert
    } else if w("UPDATE") {
        Statement::Update
    } else if w("DELETE") {
        Statement::Delete
    } else if w("REPLACE") {
        Statement::Replace
    } else if w("WITH") {
        after_with(toks)
    } else if w("USE") {
        match toks.find(|t| t.kind != TokenKind::Hint) {
            Some(t) if t.is_name() || t.kind == TokenKind::String => Statement::Use(unquote(t)),
            _ => Statement::Other,
        }
    } else if w("BEGIN") {
        if next_is(&toks, "NOT") {
            Statement::Other
        } else {
            Statement::Begin
        }
    } else if w("START") {
        if next_is(&toks, "TRANSACTION") {
            Statement::Begin
        } else {
            Statement::Other
        }
    } else if w("COMMIT") {
        Statement::Commit
    } else if w("ROLLBACK") {
        let mut rest = toks.clone();
        let mut t = rest.next();
        if t.is_some_and(|t| t.is_word("WORK")) {
            t = rest.next();
        }
        if t.is_some_and(|t| t.is_word("TO")) {
            Statement::RollbackToSavepoint
        } else {
            Statement::Rollback
        }
    } else if w("SAVEPOINT") {
        Statement::Savepoint
    } else if w("RELEASE") {
        Statement::ReleaseSavepoint
    } else if w("SET") {
        Statement::Set
    } else if w("LOCK") {
        Statement::LockTables
    } else if w("UNLOCK") {
        Statement::UnlockTables
    } else if w("PREPARE") {
        Statement::Prepare
    } else if w("EXECUTE") {
        Statement::Execute
    } else if w("DEALLOCATE") {
        Statement::Deallocate
    } else if w("CALL") {
        Statement::Call
    } else if w("DO") {
        Statement::Do
    } else if w("LOAD") {
        Statement::Load
    } else if w("SHOW") {
        Statement::Show
    } else if w("EXPLAIN") || w("DESCRIBE") || w("DESC") {
        if next_is(&toks, "ANALYZE") {
            toks.next();
            classify_tokens(toks, false)
        } else {
            Statement::Explain
        }
    } else if w("ANALYZE") {
        if next_is(&toks, "TABLE")
            || next_is(&toks, "NO_WRITE_TO_BINLOG")
            || next_is(&toks, "LOCAL")
        {
            Statement::Other
        } else {
            classify_tokens(toks, false)
        }
    } else if w("CREATE") {
        Statement::Create
    } else if w("ALTER") {
        Statement::Alter
    } else if w("DROP") {
        if next_is(&toks, "PREPARE") {
            Statement::Deallocate
        } else {
            Statement::Drop
        }
    } else if w("RENAME") {
        Statement::Rename
    } else if w("TRUNCATE") {
        Statement::Truncate
    } else if w("GRANT") {
        Statement::Grant
    } else if w("REVOKE") {
        Statement::Revoke
    } else {
        Statement::Other
    }
}

/// The next token, if it is a word.
fn first_word<'a>(toks: &Tokens<'a>) -> Option<Token<'a>> {
    toks.clone()
        .find(|t| t.kind != TokenKind::Hint)
        .filter(|t| matches!(t.kind, TokenKind::Keyword | TokenKind::Identifier))
}

/// After `WITH`: the first statement keyword outside the common table expressions' parentheses.
fn after_with(toks: Tokens<'_>) -> Statement<'_> {
    let mut depth = 0usize;
    for t in toks {
        if t.is_operator("(") {
            depth += 1;
        } else if t.is_operator(")") {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t.kind == TokenKind::Keyword {
            for (word, kind) in [
                ("SELECT", Statement::Select),
                ("VALUES", Statement::Select),
                ("TABLE", Statement::Select),
                ("INSERT", Statement::Insert),
                ("UPDATE", Statement::Update),
                ("DELETE", Statement::Delete),
                ("REPLACE", Statement::Replace),
            ] {
                if t.is_keyword(word) {
                    return kind;
                }
            }
        }
    }
    Statement::Other
}

/// The statement inside `/*!50100 ... */` or `/*M!100100 ... */`.
fn executable_body(text: &[u8]) -> &[u8] {
    let body = text
        .strip_prefix(b"/*M!")
        .or_else(|| text.strip_prefix(b"/*!"))
        .unwrap_or_default();
    let digits = body.iter().take_while(|b| b.is_ascii_digit()).count();
    let body = body.get(digits..).unwrap_or_default();
    body.strip_suffix(b"*/").unwrap_or(body)
}

/// A name without its quotes: `` `a``b` `` is ``a`b``, `'db'` is `db`.
fn unquote(t: Token<'_>) -> Cow<'_, [u8]> {
    let text = t.text;
    let (quote, inner) = match text.first() {
        Some(&q @ (b'`' | b'\'' | b'"')) => {
            let inner = text.get(1..).unwrap_or_default();
            let closed = inner.last() == Some(&q) && {
                // Closed if the trailing run of quotes is odd (a doubled quote is content).
                inner.iter().rev().take_while(|&&b| b == q).count() % 2 == 1
            };
            let inner = if closed {
                inner.get(..inner.len() - 1).unwrap_or_default()
            } else {
                inner
            };
            (q, inner)
        }
        _ => return Cow::Borrowed(text),
    };
    let doubled = [quote, quote];
    let escaped =
        inner.windows(2).any(|w| w == doubled) || (quote != b'`' && inner.contains(&b'\\'));
    if !escaped {
        return Cow::Borrowed(inner);
    }
    let mut name = Vec::with_capacity(inner.len());
    let mut i = 0;
    while let Some(&b) = inner.get(i) {
        if b == quote && inner.get(i + 1) == Some(&quote) {
            name.push(quote);
            i += 2;
        } else if b == b'\\' && quote != b'`' {
            if let Some(&n) = inner.get(i + 1) {
                name.push(n);
            }
            i += 2;
        } else {
            name.push(b);
            i += 1;
        }
    }
    Cow::Owned(name)
}
