//! Whether a `COM_QUERY` text leaves session state on its server connection: the question
//! transaction pooling asks after every statement, since a session that left state behind must
//! keep ("pin") its connection instead of handing it back to the pool between transactions.
//!
//! It reads the [tokens](super::tokens) once, without allocating, and is conservative: a
//! statement it does not know is [`Pin::Unknown`] (pinned), never stateless. A statement is
//! stateless when its first keyword(s) say so (reads and writes of data, transaction control,
//! `SHOW`, non-temporary DDL, ...) and no token anywhere in it sets or reads session state:
//!
//! - the first keyword(s) pin for `SET` (except MariaDB's per-statement `SET STATEMENT .. FOR`,
//!   whose inner statement is classified instead), `USE`, `CREATE`/`DROP TEMPORARY`, `LOCK`,
//!   `UNLOCK`, `FLUSH .. WITH READ LOCK` / `FOR EXPORT`, `BACKUP LOCK`, `PREPARE`, `EXECUTE`,
//!   `DEALLOCATE`/`DROP PREPARE`, `HANDLER`, `XA`, `CALL`, and `COMMIT`/`ROLLBACK .. RELEASE`
//!   (the server closes the connection);
//! - any token pins for user variables (`@x`, `@'x'`, `` @`x` ``, read or written; `@@x` is a
//!   system variable read and does not), `SQL_CALC_FOUND_ROWS`, `GET_LOCK(` (and MySQL's
//!   `SERVICE_GET_READ_LOCKS(` / `SERVICE_GET_WRITE_LOCKS(`), `LAST_INSERT_ID(expr)` with an
//!   argument, `CONNECTION_ID(` (a client that reads its id will `KILL QUERY` it from another
//!   connection, which must then reach this one), the sequence functions (`NEXTVAL(`,
//!   `LASTVAL(`, `SETVAL(`, `NEXT VALUE FOR`, `PREVIOUS VALUE FOR`), and anything after a `;`
//!   ([`Pin::MultiStatement`]; a trailing `;` alone is one statement, and a `;` inside a
//!   routine's `BEGIN .. END` counts too).
//!
//! - any call pins ([`Pin::Function`]) unless it is of a built-in on the allow-list
//!   ([`super::functions`]) that leaves no state, by its bare name: a stored function can do
//!   anything a statement can (set `@v`, take a lock, create a temporary table, `SET ROLE`), and
//!   a name behind a qualifier (`db.f(`) or in backticks may be one. A `(` after a table's name
//!   (`INSERT INTO t (a)`, `WITH c (a) AS`) opens a column list, and the `(` of DDL (`CREATE`,
//!   `ALTER`, `GRANT`, `SHOW`, ...) open column, index and type lists, up to a `SELECT` or
//!   `WHERE` of `CREATE .. SELECT` / `SHOW .. WHERE`.
//!
//! Any other first word is [`Pin::Unknown`]. The reason returned is the first one met reading
//! left to right (`SET @x = 1` is a user variable, `SET a = @x` a session variable).
//!
//! Words match in any case; a function needs its `(`, and a quoted name before `(` is the
//! built-in of that name (`` `GET_LOCK`('l', 0) `` calls it on the server). Hints never pin
//! and are read as if absent (`CREATE /*+ x */ TEMPORARY TABLE`), and nothing inside a string
//! or a plain comment does.
//!
//! **Every reading.** Which executable comments run, where a string ends under `sql_mode`'s
//! `NO_BACKSLASH_ESCAPES` / `ANSI_QUOTES`, and in a multibyte character set, are the server's
//! to decide (see [`super::readings`]). [`pins`] reads the text in every reading the server
//! could take and pins when any does: `/*!99999 SELECT */ SET autocommit = 0` runs the `SET` on
//! MariaDB, which skips MySQL 5.7+ comments. [`pins_for`] takes the backend's flavour and
//! version from its greeting, which settles the comments. Where the server's lexer cannot be
//! followed (a comment not closed, an executable comment inside a running one), it is
//! [`Pin::Unknown`].
//!
//! What the text cannot show: a view whose column calls a stored function, or a trigger a
//! write fires, may set user variables or take user locks; `SELECT * FROM v` looks like any
//! other read. A statement such as `SELECT LAST_INSERT_ID()`, `SELECT FOUND_ROWS()` or
//! `SHOW WARNINGS` reads what the *previous* statement left; that is the caller's concern
//! (the previous statement ran on the same connection only if it was pinned or in a
//! transaction).
//!
//! # Checked against MariaDB
//!
//! `tests/pins_anchor.rs` runs the unit tests' corpus on MariaDB 10.11 with
//! `session_track_state_change`, `session_track_schema` and `session_track_system_variables='*'`
//! on, over a client that negotiates `CLIENT_SESSION_TRACK`:
//!
//! - every statement classified stateless here (82 that succeed there: reads, writes,
//!   transaction control, savepoints, `SHOW`, DDL, `GRANT`, executable comments, ...) comes back
//!   without `SERVER_SESSION_STATE_CHANGED` in its OK/EOF status; except `SET STATEMENT var = ..
//!   FOR ..`, which MariaDB flags (it reports `var` with the statement's value) although the
//!   session's value is restored afterwards, which the test checks;
//! - `SET` of system variables, `SET NAMES`, `USE`, `SET @x`, `CREATE TEMPORARY TABLE` and
//!   `PREPARE` are flagged by the server and pinned here;
//! - user variables set outside `SET` (`SELECT @x := 1`), `GET_LOCK`, `LOCK TABLES`,
//!   `SQL_CALC_FOUND_ROWS`, `LAST_INSERT_ID(5)`, `NEXTVAL`, `HANDLER .. OPEN` and `XA START`
//!   change the session without the server flagging them: the flag alone cannot replace this
//!   module, and the test asserts both that they are pinned here and that the server still
//!   does not flag them;
//! - the server reads quotes inside an executable comment it runs (`SELECT /*! 'a*/' */`
//!   selects `a*/`), and so does a server's reading here; and it answers a comment after
//!   the last `;` as a second, empty statement (an extra OK), which changes nothing.

use super::reading::{readings, Dialect, Reading};
use super::token::{tokens_as, Token, TokenKind, Tokens};

/// What a statement leaves on its server connection that a later statement of the same session
/// may depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pin {
    /// `SET` of a system variable, `NAMES`, `CHARACTER SET`, `TRANSACTION`, `ROLE`, ...
    SessionVariable,
    /// `USE schema`.
    Schema,
    /// A user variable `@x`, read or written.
    UserVariable,
    /// `CREATE TEMPORARY TABLE` / `DROP TEMPORARY TABLE`.
    TemporaryTable,
    /// `LOCK TABLES`, `UNLOCK TABLES`, `FLUSH TABLES .. WITH READ LOCK` / `FOR EXPORT`,
    /// `BACKUP LOCK`.
    LockTables,
    /// `GET_LOCK(..)` (and MySQL's locking service, `SERVICE_GET_READ_LOCKS(..)` /
    /// `SERVICE_GET_WRITE_LOCKS(..)`): a named lock held until released or the connection ends.
    UserLock,
    /// `SQL_CALC_FOUND_ROWS`, for a later `FOUND_ROWS()`.
    FoundRows,
    /// `LAST_INSERT_ID(expr)`: sets the value a later `LAST_INSERT_ID()` returns.
    LastInsertId,
    /// `PREPARE`, `EXECUTE`, `DEALLOCATE PREPARE`, `DROP PREPARE`, `EXECUTE IMMEDIATE`.
    Prepare,
    /// `HANDLER`: an open table cursor.
    Handler,
    /// `XA`: a distributed transaction bound to the connection.
    Xa,
    /// `CALL`: a procedure may do anything a session can.
    Call,
    /// Sequence functions: `NEXTVAL`, `LASTVAL`, `SETVAL`, `NEXT VALUE FOR`,
    /// `PREVIOUS VALUE FOR` (the last value is kept per session).
    Sequence,
    /// More than one statement in the text.
    MultiStatement,
    /// `COMMIT RELEASE` / `ROLLBACK RELEASE`: the server closes the connection.
    Release,
    /// `CONNECTION_ID()`: the session will name this server connection later (`KILL QUERY
    /// <id>` from another connection), so it must stay the one that answers to that id.
    ConnectionId,
    /// A call of a function the allow-list of built-ins does not know
    /// ([`super::functions`]): a stored function (or a built-in's name behind a qualifier or
    /// backticks, which may be one) can set variables, take locks, create temporary tables or
    /// change the current role, out of the text's sight.
    Function,
    /// A statement not known to be stateless (compound statements, `FLUSH`, `RESET`, text that
    /// is no statement, ...).
    Unknown,
}

impl Pin {
    /// Every reason, in declaration order.
    pub const ALL: [Pin; 18] = [
        Pin::SessionVariable,
        Pin::Schema,
        Pin::UserVariable,
        Pin::TemporaryTable,
        Pin::LockTables,
        Pin::UserLock,
        Pin::FoundRows,
        Pin::LastInsertId,
        Pin::Prepare,
        Pin::Handler,
        Pin::Xa,
        Pin::Call,
        Pin::Sequence,
        Pin::MultiStatement,
        Pin::Release,
        Pin::ConnectionId,
        Pin::Function,
        Pin::Unknown,
    ];

    /// The reason as a metric label (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            Pin::SessionVariable => "session_variable",
            Pin::Schema => "schema",
            Pin::UserVariable => "user_variable",
            Pin::TemporaryTable => "temporary_table",
            Pin::LockTables => "lock_tables",
            Pin::UserLock => "user_lock",
            Pin::FoundRows => "found_rows",
            Pin::LastInsertId => "last_insert_id",
            Pin::Prepare => "prepare",
            Pin::Handler => "handler",
            Pin::Xa => "xa",
            Pin::Call => "call",
            Pin::Sequence => "sequence",
            Pin::MultiStatement => "multi_statement",
            Pin::Release => "release",
            Pin::ConnectionId => "connection_id",
            Pin::Function => "function",
            Pin::Unknown => "unknown",
        }
    }
}

/// None when the statement, whatever it does to data, leaves no session state on the
/// connection in any reading a server could take of it; else the first reason found. When
/// unsure: `Some(Pin::Unknown)`.
pub fn pins(text: &[u8]) -> Option<Pin> {
    pins_for(text, Dialect::default())
}

/// [`pins`] for a backend known as `dialect` says (its version decides which executable
/// comments run).
pub fn pins_for(text: &[u8], dialect: Dialect) -> Option<Pin> {
    if plainly_stateless(text) {
        return None;
    }
    let Some(all) = readings(text, dialect) else {
        return Some(Pin::Unknown);
    };
    all.into_iter().find_map(|r| read_all(text, r))
}

/// Whether a statement that pins for session state can be run again, word for word, on another
/// connection of the same login to give that connection the same state: transaction pooling
/// replays such statements instead of pinning (a session's state is then the list of them).
///
/// True for `USE` and for a `SET` of session variables, `NAMES` or `CHARACTER SET` whose values
/// are literals, system variables, `DEFAULT` and a few pure functions of them (`CONCAT`,
/// `CONCAT_WS`, `REPLACE`, `LOWER`, `UPPER`, `TRIM`, `IFNULL`, `IF`, `COALESCE`). Not for a
/// one-shot `SET TRANSACTION` (it applies to the next transaction only), `SET ROLE` (no reset
/// undoes it), `GLOBAL` or `@@global.`
/// variables, `PASSWORD`, `DEFAULT ROLE`, user variables, any other function or a subquery (a
/// value that could differ on the next run), executable comments or a second statement.
pub fn replayable(text: &[u8]) -> bool {
    // A comment of any kind could read differently on another server; not worth it here.
    if text.windows(2).any(|w| w == b"/*") {
        return false;
    }
    match readings(text, Dialect::default()) {
        Some(all) => all.into_iter().all(|r| replayable_as(text, r)),
        None => false,
    }
}

/// [`replayable`] in one reading.
fn replayable_as(text: &[u8], reading: Reading) -> bool {
    const PURE: &[&str] = &[
        "CONCAT",
        "CONCAT_WS",
        "REPLACE",
        "LOWER",
        "UPPER",
        "TRIM",
        "IFNULL",
        "IF",
        "COALESCE",
    ];
    let mut all = tokens_as(text, reading).filter(|t| t.kind != TokenKind::Hint);
    let Some(head) = all.next() else {
        return false;
    };
    if head.is_word("USE") {
        // `USE name`, nothing after it (`USE db; INSERT ...` would run the insert again).
        let name = all.next();
        return name.is_some_and(|t| t.is_name() || t.kind == TokenKind::String)
            && all.next().is_none()
            && read_all(text, reading) == Some(Pin::Schema);
    }
    if !head.is_word("SET") {
        return false;
    }
    let mut previous: Option<Token<'_>> = None;
    for (i, t) in all.enumerate() {
        // `ROLE`: COM_RESET_CONNECTION keeps the current role (MariaDB 10.11), so a
        // connection cannot be taken back to the login's role by a reset.
        let refused_second = [
            "ROLE",
            "TRANSACTION",
            "GLOBAL",
            "PASSWORD",
            "DEFAULT",
            "STATEMENT",
            "PERSIST",
        ];
        if i == 0 && refused_second.iter().any(|w| t.is_word(w)) {
            return false;
        }
        let bad = match t.kind {
            TokenKind::Variable => {
                let global = t
                    .text
                    .get(..8)
                    .is_some_and(|p| p.eq_ignore_ascii_case(b"@@global"));
                t.text.get(1) != Some(&b'@') || global
            }
            TokenKind::ExecutableComment | TokenKind::Other | TokenKind::Unsure => true,
            TokenKind::Keyword | TokenKind::Identifier => {
                t.is_word("GLOBAL") || t.is_word("SELECT")
            }
            TokenKind::Operator if t.is_operator(";") => true,
            TokenKind::Operator if t.is_operator("(") => !previous
                .as_ref()
                .is_some_and(|p| PURE.iter().any(|f| p.is_word(f))),
            _ => false,
        };
        if bad {
            return false;
        }
        previous = Some(t);
    }
    read_all(text, reading) == Some(Pin::SessionVariable)
}

/// The reading by tokens, for every statement [`plainly_stateless`] does not settle.
fn read_all(text: &[u8], reading: Reading) -> Option<Pin> {
    statement(&mut Stream::new(text, reading)).err()
}

/// Settles, without tokenizing, the statements most traffic is made of: a `SELECT`, `INSERT`,
/// `UPDATE`, `DELETE` or `REPLACE` whose text holds nothing that could start a user variable
/// (`@`), a second statement (`;`), a call other than a pure built-in's written bare with its
/// `(` right after its name (`SUM(k)`, [`builtin_before`]; none when the text holds `#` or
/// `--`) or a comment the server runs (`/*`), nor, in any case and
/// anywhere (inside strings and names too), the letters of a word that pins inside such a
/// statement (`_LOCK`, `FOUND_ROWS`, `INSERT_ID`, `NEXT`, `PREVIOUS`, `CONNECTION_ID`, and `TVAL`
/// of the sequence functions). True only where [`read_all`] finds no pin in any reading (a
/// proptest holds the two together): none of these bytes is a string's or a comment's end in
/// any `sql_mode` or character set, so what they would hide they cannot; anything else goes
/// the long way.
///
/// A first pass looks at each byte and the next for the first two letters of these words
/// (each word's pair is its own, and rare in plain traffic), 16 bytes at a time
/// ([`any_pair_in`]). Only a text where some pair matches has its words compared
/// ([`no_pinning_word`]); a pair that starts no such word there costs that comparison, never a
/// wrong answer.
fn plainly_stateless(text: &[u8]) -> bool {
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let t = &text[start..];
    // The head's letters in either case (for a letter, `| 0x20` is its lower case and no
    // other byte's), then a space.
    let head = |word: &[u8]| {
        t.len() > word.len()
            && t.iter().zip(word).all(|(&b, &w)| b | 0x20 == w)
            && t[word.len()].is_ascii_whitespace()
    };
    let headed = match t.first().map(|b| b | 0x20) {
        Some(b's') => head(b"select"),
        Some(b'i') => head(b"insert"),
        Some(b'u') => head(b"update"),
        Some(b'd') => head(b"delete"),
        Some(b'r') => head(b"replace"),
        _ => false,
    };
    if !headed {
        return false;
    }
    if any_pair_in(t) {
        return no_pinning_word(t);
    }
    true
}

/// Bytes [`any_pair_in`] reads at a time: branch-free over a fixed width, the compiler turns
/// the test of a block into a few vector compares (this runs for every statement on the pooled
/// path, where a byte-at-a-time loop cost ~10 instructions a byte).
const BLOCK: usize = 16;

/// Whether some byte of `t` with the one after it (0 after the last) may start one of
/// [`plainly_stateless`]'s words. Blocks overlap at the end rather than copy a short tail.
fn any_pair_in(t: &[u8]) -> bool {
    let Some(last) = t.len().checked_sub(BLOCK + 1) else {
        // Padded with 0: no pair starts with it, and it completes none.
        let mut run = [0u8; BLOCK + 1];
        run[..t.len()].copy_from_slice(t);
        return pair_in_block(&run);
    };
    let mut start = 0;
    loop {
        let at = start.min(last);
        if t[at..].first_chunk().is_some_and(pair_in_block) {
            return true;
        }
        if at == last {
            break;
        }
        start += BLOCK;
    }
    // The last byte starts no pair, but may be `@` or `;` alone.
    t.last().is_some_and(|&b| starts_word(b, 0))
}

/// [`any_pair_in`] over one block: its [`BLOCK`] bytes and the one after.
fn pair_in_block(run: &[u8; BLOCK + 1]) -> bool {
    let mut hit = false;
    for (&a, &b) in run[..BLOCK].iter().zip(&run[1..]) {
        hit |= starts_word(a, b);
    }
    hit
}

/// Whether bytes `a`, `b` may start `@`, `;`, `(`, `/*` or a word [`no_pinning_word`] looks
/// for.
/// `| 0x20` is a letter's lower case (and maps no other byte onto a letter), so a pair of
/// letters matches in any case; `&` and `|`, not `&&` and `||`, keep it branch-free.
#[inline(always)]
fn starts_word(a: u8, b: u8) -> bool {
    let (x, y) = (a | 0x20, b | 0x20);
    (a == b'@')
        | (a == b';')
        | (a == b'(')
        | ((a == b'/') & (b == b'*'))
        | ((a == b'_') & (y == b'l'))
        | ((x == b'f') & (y == b'o'))
        | ((x == b't') & (y == b'v'))
        | ((x == b'i') & (y == b'n'))
        | ((x == b'n') & (y == b'e'))
        | ((x == b'p') & (y == b'r'))
        | ((x == b'c') & (y == b'o'))
}

/// [`plainly_stateless`]'s byte test, word by word: none of its words (nor `@`, `;`, `(`, `/*`)
/// starts anywhere in `t`.
fn no_pinning_word(t: &[u8]) -> bool {
    let at = |i: usize, word: &[u8]| {
        t.get(i..i + word.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(word))
    };
    // A comment could hide what stands between a name and its `(` (`db. -- x\n sum(`).
    let comments = t.contains(&b'#') || t.windows(2).any(|w| w == b"--");
    !t.iter().enumerate().any(|(i, &b)| match b {
        b'@' | b';' => true,
        b'(' => comments || !builtin_before(t, i),
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

/// Whether the `(` at `t[paren]` follows, with nothing between, a bare name of the allow-list
/// of pure built-ins (`SUM(k)`, `COUNT(*)`): not after a `.` (spaces allowed between), a quote
/// or a variable's `@`, so the tokens read it as that built-in's call too.
fn builtin_before(t: &[u8], paren: usize) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let start = t[..paren]
        .iter()
        .rposition(|&b| !word(b))
        .map_or(0, |p| p + 1);
    if start == paren || start == 0 {
        return false;
    }
    let before = t[..start].iter().rposition(|b| !b.is_ascii_whitespace());
    let bare = match before.map(|p| t[p]) {
        Some(b'.' | b'`' | b'\'' | b'"' | b'@' | b'\\') | None => false,
        Some(b) => b < 0x80 && !(start > 0 && t[start - 1] >= 0x80),
    };
    bare && super::functions::pure_builtin(&t[start..paren])
}

/// First keywords after which the statement is stateless unless a token says otherwise.
const STATELESS_HEADS: &[&str] = &[
    "SELECT",
    "VALUES",
    "TABLE",
    "WITH",
    "INSERT",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "SAVEPOINT",
    "SHOW",
    "EXPLAIN",
    "DESCRIBE",
    "DESC",
    "DO",
    "ALTER",
    "RENAME",
    "TRUNCATE",
    "GRANT",
    "REVOKE",
    "ANALYZE",
    "OPTIMIZE",
    "CHECK",
    "REPAIR",
    "CHECKSUM",
    "KILL",
    "HELP",
];

/// First keywords that pin whatever follows.
const PINNING_HEADS: &[(&str, Pin)] = &[
    ("USE", Pin::Schema),
    ("LOCK", Pin::LockTables),
    ("UNLOCK", Pin::LockTables),
    ("PREPARE", Pin::Prepare),
    ("EXECUTE", Pin::Prepare),
    ("DEALLOCATE", Pin::Prepare),
    ("HANDLER", Pin::Handler),
    ("XA", Pin::Xa),
    ("CALL", Pin::Call),
];

/// `Ok(())` for a stateless statement, `Err(reason)` for the first reason to pin.
fn statement(s: &mut Stream<'_>) -> Result<(), Pin> {
    loop {
        let head = s.head()?;
        let w = |word: &str| head.is_word(word);
        if NO_CALLS_HEADS.iter().any(|h| w(h)) {
            s.calls_checked = false;
            s.calls_from_select = w("CREATE") || w("SHOW");
        }
        if STATELESS_HEADS.iter().any(|h| w(h)) {
            return s.rest();
        }
        if let Some(&(_, pin)) = PINNING_HEADS.iter().find(|(h, _)| w(h)) {
            return Err(pin);
        }
        if w("SET") {
            // `SET @x = 1` is found as a user variable when the next token is read.
            if !s.next_is("STATEMENT")? {
                return Err(Pin::SessionVariable);
            }
            s.skip_to_for()?;
            continue;
        }
        return if w("COMMIT") || w("ROLLBACK") {
            s.transaction_end()
        } else if w("BEGIN") {
            // MariaDB's `BEGIN NOT ATOMIC` opens a compound statement.
            if s.next_is("NOT")? {
                Err(Pin::Unknown)
            } else {
                s.rest()
            }
        } else if w("START") {
            s.rest_if("TRANSACTION")
        } else if w("RELEASE") {
            s.rest_if("SAVEPOINT")
        } else if w("LOAD") {
            match s.next()? {
                Some(t) if t.is_word("DATA") || t.is_word("XML") => s.rest(),
                _ => Err(Pin::Unknown),
            }
        } else if w("CREATE") {
            let mut t = s.next()?;
            while t.is_some_and(|t| t.is_word("OR") || t.is_word("REPLACE")) {
                t = s.next()?;
            }
            if t.is_some_and(|t| t.is_word("TEMPORARY")) {
                Err(Pin::TemporaryTable)
            } else {
                s.rest()
            }
        } else if w("DROP") {
            match s.next()? {
                Some(t) if t.is_word("TEMPORARY") => Err(Pin::TemporaryTable),
                Some(t) if t.is_word("PREPARE") => Err(Pin::Prepare),
                _ => s.rest(),
            }
        } else if w("FLUSH") {
            s.flush()
        } else if w("BACKUP") {
            match s.next()? {
                Some(t) if t.is_word("LOCK") || t.is_word("UNLOCK") => Err(Pin::LockTables),
                _ => Err(Pin::Unknown),
            }
        } else {
            Err(Pin::Unknown)
        };
    }
}

/// A function whose `(` is awaited.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    UserLock,
    Sequence,
    LastInsertId,
    ConnectionId,
}

/// The tokens of a text as one reading has them (executable comments the server runs are read
/// as code there), hints left out, each passed through the token-level checks before the
/// statement rules see it.
struct Stream<'a> {
    outer: Tokens<'a>,
    /// A `;` was read: any further token is a second statement.
    after_semicolon: bool,
    /// The previous token is this function's name.
    call: Option<Call>,
    /// The previous token is the `(` of `LAST_INSERT_ID(`.
    last_insert_id_open: bool,
    /// How far into `NEXT VALUE FOR` / `PREVIOUS VALUE FOR` the last tokens are (0 to 2).
    value_for: u8,
    /// Calls are held against the allow-list of built-ins; off in DDL, whose `(` open column
    /// and type lists, until a `SELECT` or `WHERE` where [`Stream::calls_from_select`].
    calls_checked: bool,
    /// `CREATE TABLE .. SELECT f()` and `SHOW .. WHERE f()` run calls after those words.
    calls_from_select: bool,
    /// What a `(` right after the previous token would open.
    callee: Option<Callee>,
    /// The previous token is a `.`: the name after it is qualified.
    after_dot: bool,
    /// The next name is a table's or a common table expression's (after `INTO`, `INSERT`,
    /// `TABLE`, `WITH`, ...), so a `(` after it opens its column list.
    table_next: bool,
    /// The previous token is a `)`.
    after_close: bool,
    /// The previous token is an unquoted word, and which.
    previous_word: Option<PreviousWord>,
}

/// What [`Stream::check`] keeps of the word before the current token.
#[derive(Clone, Copy)]
struct PreviousWord {
    /// `FROM` or `JOIN`: a table (or a table function) comes next.
    after_from: bool,
}

fn not_a_word(t: &Token<'_>) -> bool {
    !matches!(t.kind, TokenKind::Keyword | TokenKind::Identifier)
}

/// What a name followed by `(` is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Callee {
    /// Syntax (`IN (`, `VALUES (`, `DECIMAL(`, `AGAINST (` after `MATCH (..)`), or a built-in
    /// that leaves no state, whatever comes between it and its `(`.
    Allowed,
    /// A built-in that leaves no state, when its `(` follows at once: MariaDB reads
    /// `sum (1)` or `sum/**/(1)` as a call of a stored function `sum` (for `COUNT`, `SUM`,
    /// `NOW`, `CAST`, ... whose keyword needs the `(` right after it,
    /// [`super::functions::needs_adjacent_paren`]).
    Builtin { end: usize },
    /// A table's name before its column list.
    Table,
    /// Anything else: a stored function may be behind it.
    Unknown,
}

/// Words after which the next name is a table's or a common table expression's.
const BEFORE_TABLE: &[&str] = &[
    "DELAYED",
    "HIGH_PRIORITY",
    "IGNORE",
    "INSERT",
    "INTO",
    "LOW_PRIORITY",
    "RECURSIVE",
    "REPLACE",
    "TABLE",
    "WITH",
];

/// First keywords of statements that run no call of their own: the `(` in them open column,
/// index and type lists (`CREATE TABLE t (a DECIMAL(10, 2))`, `GRANT UPDATE (a) ON t`).
const NO_CALLS_HEADS: &[&str] = &[
    "ALTER",
    "ANALYZE",
    "BEGIN",
    "CHECK",
    "CHECKSUM",
    "COMMIT",
    "CREATE",
    "DROP",
    "FLUSH",
    "GRANT",
    "HELP",
    "KILL",
    "OPTIMIZE",
    "RELEASE",
    "RENAME",
    "REPAIR",
    "REVOKE",
    "ROLLBACK",
    "SAVEPOINT",
    "SHOW",
    "START",
    "TRUNCATE",
];

/// Built-ins a pooled session may call without leaving state on its connection, beyond the
/// pure ones ([`super::functions::pure_builtin`]): they wait, read what the previous statement
/// left, or are read for a reason of their own above (`LAST_INSERT_ID(expr)`).
const STATELESS_IMPURE: &[&str] = &[
    "BENCHMARK",
    "FOUND_ROWS",
    "IS_FREE_LOCK",
    "IS_USED_LOCK",
    "LAST_INSERT_ID",
    "MASTER_GTID_WAIT",
    "MASTER_POS_WAIT",
    "RELEASE_ALL_LOCKS",
    "RELEASE_LOCK",
    "ROW_COUNT",
    "SLEEP",
];

/// Whether a call of `name` (unquoted, unqualified, its `(` right after it) leaves no state on
/// a pooled connection.
fn stateless_call(name: &[u8]) -> bool {
    super::functions::pure_builtin(name)
        || STATELESS_IMPURE
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f.as_bytes()))
}

impl<'a> Stream<'a> {
    fn new(text: &'a [u8], reading: Reading) -> Self {
        Stream {
            outer: tokens_as(text, reading),
            after_semicolon: false,
            call: None,
            last_insert_id_open: false,
            value_for: 0,
            calls_checked: true,
            calls_from_select: false,
            callee: None,
            after_dot: false,
            table_next: false,
            after_close: false,
            previous_word: None,
        }
    }

    /// The next token, after the token-level checks; `Ok(None)` at the end. Hints are left
    /// out: they never pin, and a keyword after one is read as if it were not there
    /// (`CREATE /*+ x */ TEMPORARY TABLE`).
    fn next(&mut self) -> Result<Option<Token<'a>>, Pin> {
        let t = loop {
            let Some(t) = self.outer.next() else {
                return Ok(None);
            };
            match t.kind {
                // Only in the digest's reading, which this is not.
                TokenKind::ExecutableComment | TokenKind::Unsure => return Err(Pin::Unknown),
                _ if self.after_semicolon => return Err(Pin::MultiStatement),
                TokenKind::Hint => continue,
                _ => break t,
            }
        };
        self.check(&t)?;
        Ok(Some(t))
    }

    /// The reasons any token may give, wherever it stands.
    fn check(&mut self, t: &Token<'_>) -> Result<(), Pin> {
        if self.after_semicolon {
            return Err(Pin::MultiStatement);
        }
        match t.kind {
            // A hint between a function's name and its `(` keeps the call.
            TokenKind::Hint => return Ok(()),
            TokenKind::Variable if t.text.get(1) != Some(&b'@') => {
                return Err(Pin::UserVariable);
            }
            _ => {}
        }
        if std::mem::take(&mut self.last_insert_id_open) && !t.is_operator(")") {
            return Err(Pin::LastInsertId);
        }
        let callee = self.callee.take();
        let after_dot = std::mem::take(&mut self.after_dot);
        let table_next = std::mem::take(&mut self.table_next);
        let named_call = self.call.take();
        match named_call {
            Some(call) if t.is_operator("(") => match call {
                Call::UserLock => return Err(Pin::UserLock),
                Call::Sequence => return Err(Pin::Sequence),
                Call::ConnectionId => return Err(Pin::ConnectionId),
                // `LAST_INSERT_ID(` pins only with an argument, read next.
                Call::LastInsertId => self.last_insert_id_open = true,
            },
            _ => {}
        }
        if named_call.is_none() && t.is_operator("(") {
            let called = match callee {
                Some(Callee::Unknown) => true,
                Some(Callee::Builtin { end }) => t.text.as_ptr() as usize != end,
                _ => false,
            };
            if called {
                return Err(Pin::Function);
            }
        }
        let after_close = std::mem::replace(&mut self.after_close, t.is_operator(")"));
        let previous_word = std::mem::take(&mut self.previous_word);
        let value_for = std::mem::take(&mut self.value_for);
        // A quoted name before `(` calls the built-in of that name (`` `GET_LOCK`('l', 0) ``).
        let function = match t.kind {
            TokenKind::Keyword | TokenKind::Identifier => t.text,
            TokenKind::QuotedIdentifier => t
                .text
                .get(1..t.text.len().saturating_sub(1))
                .unwrap_or_default(),
            _ => {
                if t.is_operator(";") {
                    self.after_semicolon = true;
                } else if t.is_operator(".") {
                    // `db.t (` is still a table's column list; `db.f(` a stored function.
                    self.after_dot = true;
                    self.table_next = callee == Some(Callee::Table);
                }
                return Ok(());
            }
        };
        if self.calls_from_select && (t.is_word("SELECT") || t.is_word("WHERE")) {
            self.calls_checked = true;
        }
        if self.calls_checked {
            let quoted = t.kind == TokenKind::QuotedIdentifier;
            let bare = !quoted && !after_dot;
            self.callee = Some(if table_next {
                Callee::Table
            } else if bare && super::functions::syntax_paren(t.text) {
                Callee::Allowed
            } else if bare && after_close && t.is_word("AGAINST") {
                // `MATCH (a) AGAINST (..)`: no call can follow a `)` at once.
                Callee::Allowed
            } else if bare && previous_word.is_some_and(|w| w.after_from) && t.is_word("JSON_TABLE")
            {
                // A table function where a table's name goes.
                Callee::Allowed
            } else if bare && stateless_call(t.text) {
                if super::functions::needs_adjacent_paren(t.text) {
                    Callee::Builtin {
                        end: t.text.as_ptr() as usize + t.text.len(),
                    }
                } else {
                    Callee::Allowed
                }
            } else {
                Callee::Unknown
            });
            self.table_next = !quoted && BEFORE_TABLE.iter().any(|w| t.is_word(w));
        }
        self.previous_word = (!not_a_word(t)).then(|| PreviousWord {
            after_from: t.is_word("FROM") || t.is_word("JOIN"),
        });
        let f = |word: &str| function.eq_ignore_ascii_case(word.as_bytes());
        if f("GET_LOCK") || f("SERVICE_GET_READ_LOCKS") || f("SERVICE_GET_WRITE_LOCKS") {
            self.call = Some(Call::UserLock);
        } else if f("NEXTVAL") || f("LASTVAL") || f("SETVAL") {
            self.call = Some(Call::Sequence);
        } else if f("LAST_INSERT_ID") {
            self.call = Some(Call::LastInsertId);
        } else if f("CONNECTION_ID") {
            self.call = Some(Call::ConnectionId);
        }
        if t.kind == TokenKind::QuotedIdentifier {
            return Ok(());
        }
        let w = |word: &str| t.is_word(word);
        if w("SQL_CALC_FOUND_ROWS") {
            return Err(Pin::FoundRows);
        }
        if w("NEXT") || w("PREVIOUS") {
            self.value_for = 1;
        } else if value_for == 1 && w("VALUE") {
            self.value_for = 2;
        } else if value_for == 2 && w("FOR") {
            return Err(Pin::Sequence);
        }
        Ok(())
    }

    /// The statement's first word, after hints and opening parentheses; `Unknown` for anything
    /// else (including no statement at all).
    fn head(&mut self) -> Result<Token<'a>, Pin> {
        loop {
            match self.next()? {
                Some(t) if t.kind == TokenKind::Hint || t.is_operator("(") => {}
                Some(t) if matches!(t.kind, TokenKind::Keyword | TokenKind::Identifier) => {
                    return Ok(t)
                }
                _ => return Err(Pin::Unknown),
            }
        }
    }

    /// Reads the next token: true if it is `word`.
    fn next_is(&mut self, word: &str) -> Result<bool, Pin> {
        Ok(self.next()?.is_some_and(|t| t.is_word(word)))
    }

    /// Reads the rest of a statement whose first keywords are stateless.
    fn rest(&mut self) -> Result<(), Pin> {
        while self.next()?.is_some() {}
        Ok(())
    }

    /// Stateless if the next word is `word`, else `Unknown`.
    fn rest_if(&mut self, word: &str) -> Result<(), Pin> {
        if self.next_is(word)? {
            self.rest()
        } else {
            Err(Pin::Unknown)
        }
    }

    /// After `COMMIT` / `ROLLBACK`: `RELEASE` (not `NO RELEASE`) closes the connection.
    fn transaction_end(&mut self) -> Result<(), Pin> {
        let mut after_no = false;
        while let Some(t) = self.next()? {
            if t.is_word("RELEASE") && !after_no {
                return Err(Pin::Release);
            }
            after_no = t.is_word("NO");
        }
        Ok(())
    }

    /// `SET STATEMENT var = value, ... FOR`: reads up to the `FOR` (outside parentheses).
    fn skip_to_for(&mut self) -> Result<(), Pin> {
        let mut depth = 0usize;
        while let Some(t) = self.next()? {
            if t.is_operator("(") {
                depth += 1;
            } else if t.is_operator(")") {
                depth = depth.saturating_sub(1);
            } else if depth == 0 && t.is_word("FOR") {
                return Ok(());
            }
        }
        Err(Pin::Unknown)
    }

    /// `FLUSH TABLES .. WITH READ LOCK` / `FOR EXPORT` lock tables; any other `FLUSH` is
    /// `Unknown`.
    fn flush(&mut self) -> Result<(), Pin> {
        while let Some(t) = self.next()? {
            if t.is_word("LOCK") || t.is_word("EXPORT") {
                return Err(Pin::LockTables);
            }
        }
        Err(Pin::Unknown)
    }
}

#[cfg(test)]
mod tests;
