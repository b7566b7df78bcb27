//! Sans-IO SQL text handling: a tokenizer for MySQL/MariaDB statements, the statement
//! normalizer and its 64-bit digest (the key of the query-digest table), and a classifier of
//! statement kinds; beside them, MariaDB GTID positions ([`gtid`]) for read-your-writes
//! through a read/write split.
//!
//! Why its own tokenizer and not a parser: the digest runs on every `COM_QUERY` and
//! `COM_STMT_PREPARE` text, so it must be one allocation-free pass over bytes that may be
//! truncated, invalid UTF-8 or not SQL at all; and the same token stream will tell
//! session-state statements apart (`USE`, `SET`, `BEGIN`, `LOCK TABLES`, `PREPARE`, ...) for
//! transaction pooling. Nothing here imports the rest of the crate.
//!
//! # One lexer, read as the server reads
//!
//! Everything here reads text through one tokenizer ([`tokens_as`]), in a [`Reading`]: the
//! digest's (executable comments kept as single tokens, for grouping), or a server's, which
//! follows the server's lexer where what runs depends on it: executable comments run or skipped
//! by flavour and version, `#` and `-- ` to the end of the line even inside a running comment,
//! quotes inside one, `sql_mode`'s quoting and the multibyte character sets (see
//! [`readings`]). Decisions whose wrong answer leaks state or runs a write ([`pins::pins`],
//! [`read_only`]) take the worst answer over every reading the server could take.
//!
//! # Normalization rules
//!
//! [`normalize`] prints the tokens of the first `max_len` bytes; [`digest`] hashes exactly those
//! bytes (without building them), so two statements share a digest iff they normalize alike
//! (up to 64-bit collisions).
//!
//! - **Literals become `?`**: strings in either quote (backslash escapes, doubled quotes;
//!   `NO_BACKSLASH_ESCAPES` cannot be known from the text, so `'a\'` is read as unterminated),
//!   `N'..'`, numbers (`12`, `1.5`, `.5`, `1e10`, `2.5e-3`), `0x1F`, `X'1F'`, `0b01`, `b'01'`,
//!   a character set introducer with its literal (`_utf8mb4'x'`, `_binary 0x41`), `?`
//!   placeholders, and `NULL` except right after `IS` or `NOT` (`IS NULL`, `NOT NULL` stay
//!   keywords). `TRUE` and `FALSE` stay keywords. `"x"` is a string (the default `sql_mode`;
//!   under `ANSI_QUOTES` it would be a name).
//! - **Signs**: `+`/`-` right before a literal fold into it (`-1` is `?`) where they are unary:
//!   at the start, after an operator, `(`, `,`, `;` or a keyword (except value keywords such as
//!   `TRUE`, `CURRENT_TIMESTAMP`, `END`). After a name, a value or `)` they are binary:
//!   `a-1` is `a - ?`.
//! - **Lists**: a parenthesized list of only literals (signed or not) is `(...)` whatever its
//!   length (`IN (1)` and `IN (1, 2, 3)` alike), and a comma-separated run of such lists is one
//!   (`VALUES (1, 2), (3, 4)` is `VALUES (...)`). A list with anything else in it
//!   (`(1, NOW())`) is printed token by token.
//! - **Comments are dropped**: `-- ` (two dashes then whitespace, a control byte or the end),
//!   `#` to the end of the line, `/* ... */` (comments do not nest: the first `*/` ends one; an
//!   unterminated comment runs to the end). Optimizer hints `/*+ ... */` and executable comments
//!   `/*! ... */`, `/*!50100 ... */`, MariaDB's `/*M!100100 ... */` are kept, each as one token
//!   printed as its opener (with the version), its text whitespace-collapsed, ` */`.
//! - **Keywords** (a fixed list, see `keywords.rs`) are upper-cased; names are printed as
//!   written. A backticked name is printed without backticks when it reads back as the same
//!   name (so `` `t` `` and `t` are one digest), with them otherwise (`` `my table` ``,
//!   `` `select` ``, `` `123` ``); a bare word after a qualifier's `.` (`t.order`) or right
//!   before one (`user.id`) is a name, never a keyword, as in the servers' lexers. Variables
//!   (`@x`, `@@SESSION.x`) are lower-cased (their names are case-insensitive).
//! - **Spacing**: one space between tokens, none after `(` and `.`, none before `)`, `,`, `;`
//!   and `.`, none around the `@` of `'user'@'host'`, and none between a name or a
//!   function/type keyword and the `(` after it: `SELECT COUNT(*) FROM t WHERE a.b IN (...)`,
//!   `INSERT INTO t(a, b) VALUES (...)`, `VARCHAR(...)`. Whitespace and comments in the text
//!   therefore never matter.
//! - **Semicolons**: trailing `;` are dropped; a multi-statement text (`SELECT 1; SELECT 2`) is
//!   one digest of the whole text (`SELECT ?; SELECT ?`).
//! - **Truncation**: only the first `max_len` bytes are read, and the digest is that of the
//!   truncated prefix (a string cut off is still one `?`). Performance Schema also cuts at
//!   `max_digest_length` and appends `...`; here nothing is appended.
//! - **Bytes**: an unterminated string or quoted name runs to the end; bytes that are not UTF-8
//!   are printed as U+FFFD (a non-ASCII byte is a name byte, as in the servers); a control byte
//!   outside a token is printed as is.
//!
//! # Differences from Performance Schema
//!
//! MariaDB 10.11's `events_statements_summary_by_digest` (checked by `tests/digest_grouping.rs`)
//! groups differently where its lexer and grammar know more, or where these rules chose
//! otherwise:
//! - it prints every token space-separated and every name in backticks (`` `t` . `a` ``);
//! - `IN (1)` is `IN (?)`, apart from `IN (1, 2)` = `IN (...)`; a multi-row `VALUES (..), (..)`
//!   is `VALUES (...) /* , ... */`, apart from one row; and a bare run of values is folded too
//!   (`LIMIT ?, ...`, `SELECT ?, ...`): here only parenthesized lists are;
//! - `= -1` is `= - ?` (it folds a sign only after `(`, `,`, `+` or at the start), apart from
//!   `= 1`;
//! - it knows more keywords (`id` is MariaDB's `ID`, so `` `id` `` and `id` differ there), and
//!   prints aliases as their canonical keyword (`DISTINCT` as `DISTINCTROW`, `user` as
//!   `SYSTEM_USER`, `INT` as `INTEGER`);
//! - user variables are all one: `@x` and `@y` are both `@?`;
//! - MariaDB 10.11 has no optimizer hints: `/*+ ... */` is a plain comment there; and it digests
//!   the text inside executable comments token by token (`SELECT SQL_NO_CACHE * ...`), where
//!   here it is one token whose literals stay;
//! - it digests what its parser saw, so a statement with a syntax error gets a partial digest.

pub mod as_run;
mod classify;
mod digest;
pub mod functions;
pub mod gtid;
mod keywords;
pub mod pins;
mod reading;
mod retry;
pub mod route;
mod token;

pub use as_run::{as_run, AsRun};
pub use classify::{classify, classify_as, read_only, reads_diagnostics, Statement};
pub use digest::{
    digest, digest_cached, digest_folded, digest_remembered, normalize, Digest, DigestCache,
    RecentShapes,
};
pub use reading::{readings, Comments, Dialect, Multibyte, Reading, Server, MAX_READINGS};
pub use retry::retryable_read;
pub use token::{tokens, tokens_as, Token, TokenKind, Tokens};

#[cfg(test)]
mod tests;
