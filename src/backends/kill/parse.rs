//! Reading a KILL from a command packet: `KILL [HARD|SOFT] [CONNECTION|QUERY] n` in the forms
//! drivers send (quoted, parenthesised, negative, behind comments) and COM_PROCESS_KILL. Sans-IO.

use crate::wire::protocol::response::{cmd, is_sql_space, statement_start};

/// A KILL statement or COM_PROCESS_KILL, as parsed from a command packet's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRequest {
    /// The statement up to the id (e.g. `KILL QUERY `), reused when rewriting; empty for
    /// COM_PROCESS_KILL.
    pub prefix: String,
    /// The id as a non-negative number; a negative 32-bit literal is read as its two's complement.
    pub id: u64,
}

/// Parses `KILL [HARD|SOFT] [CONNECTION|QUERY] <n>` (optionally `;`-terminated, after leading
/// comments) or COM_PROCESS_KILL. `n` is a number, quoted (`'n'`, as PDO and mysql2 bind it) or
/// in parentheses, and may be negative (`-1073741823`: a signed 32-bit id). `KILL QUERY ID n`
/// names a *query* id, not a connection, and is None like everything else (KILL USER,
/// expressions): it passes untouched.
pub fn parse(payload: &[u8]) -> Option<KillRequest> {
    let (&command, body) = payload.split_first()?;
    if command == cmd::PROCESS_KILL {
        let id = u32::from_le_bytes(body.get(..4)?.try_into().ok()?);
        return Some(KillRequest {
            prefix: String::new(),
            id: u64::from(id),
        });
    }
    if command != cmd::QUERY {
        return None;
    }
    let start = statement_start(body).ok()?;
    // The first word is `KILL` or this is no KILL: most statements stop here, before their
    // words are split (a session whose every statement is read comes here for each).
    if !start
        .get(..4)
        .is_some_and(|w| w.eq_ignore_ascii_case(b"KILL"))
    {
        return None;
    }
    let sql = std::str::from_utf8(start).ok()?;
    let words = sql_words(sql)?;
    let (first, rest) = words.split_first()?;
    if !first.eq_ignore_ascii_case("KILL") {
        return None;
    }
    let allowed = ["HARD", "SOFT", "CONNECTION", "QUERY"];
    let keywords = rest
        .iter()
        .take_while(|w| allowed.iter().any(|a| w.eq_ignore_ascii_case(a)))
        .count();
    // What follows the keywords is the id, however spaced or commented: `( n )`, `n ;`.
    let id: String = rest[keywords..].concat();
    let id = parse_id(id.strip_suffix(';').unwrap_or(&id))?;
    Some(KillRequest {
        prefix: words[..=keywords].join(" ") + " ",
        id,
    })
}

/// The words of a statement, split at SQL whitespace and at comments (`/* */`, `#` and `-- ` to
/// the end of the line; sqlcommenter appends one). None for an unterminated or executable comment
/// (`/*!`, `/*M!`: its text is part of the statement, which is then not taken for a KILL).
fn sql_words(sql: &str) -> Option<Vec<&str>> {
    let bytes = sql.as_bytes();
    let mut words = Vec::new();
    let (mut i, mut word_start) = (0, 0);
    while i < bytes.len() {
        let rest = &bytes[i..];
        let skip_to = if is_sql_space(rest[0]) {
            Some(i + 1)
        } else if rest.starts_with(b"/*") {
            if rest.starts_with(b"/*!") || rest.starts_with(b"/*M!") {
                return None;
            }
            let end = rest[2..].windows(2).position(|w| w == b"*/")?;
            Some(i + 2 + end + 2)
        } else if rest[0] == b'#'
            || (rest.starts_with(b"--") && rest.get(2).is_some_and(|b| is_sql_space(*b)))
        {
            Some(
                rest.iter()
                    .position(|b| *b == b'\n')
                    .map_or(bytes.len(), |n| i + n + 1),
            )
        } else {
            None
        };
        match skip_to {
            Some(next) => {
                if i > word_start {
                    words.push(&sql[word_start..i]);
                }
                i = next;
                word_start = next;
            }
            None => i += 1,
        }
    }
    if bytes.len() > word_start {
        words.push(&sql[word_start..]);
    }
    Some(words)
}

/// `n`, `'n'`, `"n"` or `(n)`; a negative `-n` down to `i32::MIN` as the `u32` with the same bits.
fn parse_id(word: &str) -> Option<u64> {
    let unwrapped = [("'", "'"), ("\"", "\""), ("(", ")")]
        .iter()
        .find_map(|(open, close)| word.strip_prefix(open)?.strip_suffix(close));
    let word = unwrapped.unwrap_or(word);
    if word.starts_with('-') {
        let signed: i32 = word.parse().ok()?;
        return Some(u64::from(signed as u32));
    }
    word.parse().ok()
}
