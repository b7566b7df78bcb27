//! What a command packet's first bytes say about the statement in it: where the statement starts
//! after whitespace and comments, and whether it is (or may still become) a KILL.
//!
//! The tracker asks this of every short command, so it only looks at bytes, never allocates; the
//! KILL itself is parsed by `crate::backends::kill` once the packet is whole.

use super::cmd;

/// Longest command packet (payload) taken for a KILL: a KILL statement is a few dozen bytes, so
/// a longer one is not held back while it arrives.
pub const MAX_KILL_PACKET: usize = 512;

/// Whitespace as the server's SQL lexer sees it (ASCII whitespace plus vertical tab).
pub fn is_sql_space(b: u8) -> bool {
    b.is_ascii_whitespace() || b == 0x0B
}

/// `sql` ends inside a comment (or where one may begin): where the statement starts is not known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutInComment;

/// Where a statement starts after SQL whitespace and comments (`/* */`, `#` and `-- ` to the end of
/// the line), as ORMs and sqlcommenter put them before it. An executable comment (`/*!`, `/*M!`)
/// is where a statement starts, not a comment.
pub fn statement_start(mut sql: &[u8]) -> Result<&[u8], CutInComment> {
    loop {
        let start = sql
            .iter()
            .position(|b| !is_sql_space(*b))
            .unwrap_or(sql.len());
        sql = &sql[start..];
        let line_comment = sql.starts_with(b"#")
            || (sql.starts_with(b"--") && sql.get(2).is_some_and(|b| is_sql_space(*b)));
        if line_comment {
            let end = sql.iter().position(|b| *b == b'\n').ok_or(CutInComment)?;
            sql = &sql[end + 1..];
        } else if sql.starts_with(b"/*") && !sql.starts_with(b"/*!") && !sql.starts_with(b"/*M!") {
            let end = sql[2..]
                .windows(2)
                .position(|w| w == b"*/")
                .ok_or(CutInComment)?;
            sql = &sql[2 + end + 2..];
        } else if matches!(
            sql,
            [b'/'] | [b'-'] | [b'-', b'-'] | [b'/', b'*'] | [b'/', b'*', b'M']
        ) {
            // Cut where a comment may begin.
            return Err(CutInComment);
        } else {
            return Ok(sql);
        }
    }
}

/// True if the first bytes of a command packet (header included, possibly cut short) may still
/// turn out to be a KILL of at most [`MAX_KILL_PACKET`] bytes: the relay then waits for the rest
/// before forwarding it, so the whole statement can be mapped.
pub fn may_become_kill(partial: &[u8]) -> bool {
    let Some(header) = partial.get(..4) else {
        // Not even a header yet: the next bytes decide.
        return true;
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    if header[3] != 0 || len > MAX_KILL_PACKET {
        return false;
    }
    match partial[4..].split_first() {
        None | Some((&cmd::PROCESS_KILL, _)) => true,
        Some((&cmd::QUERY, sql)) => match statement_start(sql) {
            Ok(word) => {
                let n = word.len().min(4);
                word[..n].eq_ignore_ascii_case(&b"kill"[..n])
            }
            Err(CutInComment) => true,
        },
        _ => false,
    }
}

/// True if a command payload may be a KILL (`COM_PROCESS_KILL`, or a COM_QUERY whose statement,
/// after whitespace and comments, starts with `KILL`); cheap enough for every short command.
pub fn may_be_kill(payload: &[u8]) -> bool {
    match payload.split_first() {
        Some((&cmd::PROCESS_KILL, _)) => true,
        Some((&cmd::QUERY, sql)) => statement_start(sql)
            .is_ok_and(|sql| sql.len() >= 4 && sql[..4].eq_ignore_ascii_case(b"kill")),
        _ => false,
    }
}
