//! What the command at the front of a transaction-mode session's client buffer is, sans-IO:
//! the session reads its client itself between transactions and before each prepared-statement
//! command (`crate::proxy::session::pooled`), and every decision it takes on those bytes (wait for
//! more, relay, run a prepare, name a statement) is taken here, over a plain byte slice, so
//! the fuzz target `pooled_front` can drive it with any client input and no socket.
//!
//! Every answer is total: any bytes give a verdict or a "need more" larger than what is there,
//! and a verdict never changes as more bytes follow (they belong to later packets).
//!
//! An empty packet (header `00 00 00 seq`, no command byte) is a command of its own: MariaDB's
//! `do_command` dispatches it as COM_SLEEP, which a client may not send, and answers it with
//! ERR 1047 "Unknown command". The pool treats it as any other non-statement command (it is
//! relayed on a server connection, which answers it as it would directly); the bytes after it
//! are the next packet's, never its command byte.

use crate::wire::protocol::cmd;

use super::statements::{is_statement_command, names_statement};

/// A packet's header length, and the payload length that means "more chunks follow".
const HEADER: usize = 4;
const MAX_CHUNK: usize = 0xFF_FFFF;

/// The command at the front of a client buffer, as far as its header and command byte say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// At least `n` bytes in all are needed to say (`n` is more than the buffer holds).
    NeedMore(usize),
    /// A packet with no payload: relayed, the server answers it with an ERR.
    Empty,
    /// COM_QUIT alone in its packet, sequence id 0: the session ends without forwarding it.
    Quit,
    /// Any other command: relayed as it is.
    Relayed(u8),
    /// A prepared-statement command: see [`statement`].
    Statement(u8),
}

/// The payload length in the header at the front of `buf`, once the header is there.
pub fn payload_len(buf: &[u8]) -> Option<usize> {
    let h = buf.get(..3)?;
    Some(usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16)
}

/// What the command at the front of `buf` is.
pub fn command(buf: &[u8]) -> Command {
    let Some(len) = payload_len(buf).filter(|_| buf.len() >= HEADER) else {
        return Command::NeedMore(HEADER);
    };
    if len == 0 {
        return Command::Empty;
    }
    let Some(&byte) = buf.get(HEADER) else {
        return Command::NeedMore(HEADER + 1);
    };
    if len == 1 && byte == cmd::QUIT && buf[3] == 0 {
        return Command::Quit;
    }
    if is_statement_command(byte) {
        Command::Statement(byte)
    } else {
        Command::Relayed(byte)
    }
}

/// What the prepared-statement command at the front of `buf` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statement {
    /// At least `n` bytes in all are needed to say (`n` is more than the buffer holds).
    NeedMore(usize),
    /// Not a prepared-statement command (or no command byte): [`command`] says what it is.
    NotStatement,
    /// COM_STMT_PREPARE, whole in the buffer: its text is `buf[5..end]` (`end >= 5`).
    Prepare { end: usize },
    /// A COM_STMT_PREPARE of 16 MiB or more (in chunks): refused, never held whole.
    PrepareTooLarge,
    /// A command naming the client's statement `id`; its first chunk ends at `end`.
    Named { command: u8, id: u32, end: usize },
    /// A command too short to name a statement: answered with an ERR.
    Malformed { command: u8 },
}

/// Reads the prepared-statement command at the front of `buf` as far as the pool needs it:
/// a prepare whole, another up to its statement id.
pub fn statement(buf: &[u8]) -> Statement {
    let command = match command(buf) {
        Command::NeedMore(n) => return Statement::NeedMore(n),
        Command::Statement(c) => c,
        Command::Empty | Command::Quit | Command::Relayed(_) => return Statement::NotStatement,
    };
    let Some(len) = payload_len(buf) else {
        return Statement::NeedMore(HEADER);
    };
    let end = HEADER + len;
    if command == cmd::STMT_PREPARE {
        if len >= MAX_CHUNK {
            return Statement::PrepareTooLarge;
        }
        if buf.len() < end {
            return Statement::NeedMore(end);
        }
        return Statement::Prepare { end };
    }
    debug_assert!(names_statement(command));
    // The command byte and a four-byte id.
    if len < 5 {
        return Statement::Malformed { command };
    }
    match buf.get(5..9) {
        Some(b) => Statement::Named {
            command,
            id: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            end,
        },
        None => Statement::NeedMore(9),
    }
}

/// Where the packet at the front of `buf` ends, every chunk of it, when it is all there.
/// Err(n): at least `n` bytes in all are needed to say.
pub fn packet_end(buf: &[u8]) -> Result<usize, usize> {
    let mut at = 0usize;
    loop {
        let Some(len) = buf.get(at..).and_then(payload_len) else {
            return Err(at + HEADER);
        };
        let end = at + HEADER + len;
        if buf.len() < end {
            return Err(end);
        }
        if len < MAX_CHUNK {
            return Ok(end);
        }
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_packet_is_a_command_of_its_own_and_the_next_byte_is_not_its_command() {
        // The reproducer: an empty packet, then a packet whose length byte is 0x16.
        let buf = [0, 0, 0, 0, 0x16, 0, 0, 0, 0x03];
        assert_eq!(command(&buf), Command::Empty);
        assert_eq!(statement(&buf), Statement::NotStatement);
        assert_eq!(packet_end(&buf), Ok(4));
        assert_eq!(command(&buf[4..]), Command::Relayed(cmd::QUERY));
        assert_eq!(command(&buf[..3]), Command::NeedMore(4));
    }

    #[test]
    fn a_prepare_is_whole_before_it_is_read_and_a_named_command_has_its_id() {
        let mut prepare = vec![9, 0, 0, 0, cmd::STMT_PREPARE];
        prepare.extend_from_slice(b"SELECT 1");
        assert_eq!(statement(&prepare[..5]), Statement::NeedMore(13));
        assert_eq!(statement(&prepare), Statement::Prepare { end: 13 });
        // A prepare with no text at all: its text is the empty range 5..5.
        assert_eq!(
            statement(&[1, 0, 0, 0, cmd::STMT_PREPARE]),
            Statement::Prepare { end: 5 }
        );
        let execute = [10, 0, 0, 0, cmd::STMT_EXECUTE, 7, 0, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(statement(&execute[..6]), Statement::NeedMore(9));
        let named = Statement::Named {
            command: cmd::STMT_EXECUTE,
            id: 7,
            end: 14,
        };
        assert_eq!(statement(&execute), named);
        assert_eq!(
            statement(&[2, 0, 0, 0, cmd::STMT_CLOSE, 1]),
            Statement::Malformed {
                command: cmd::STMT_CLOSE
            }
        );
        assert_eq!(
            statement(&[0xFF, 0xFF, 0xFF, 0, cmd::STMT_PREPARE]),
            Statement::PrepareTooLarge
        );
        assert_eq!(command(&[1, 0, 0, 0, cmd::QUIT]), Command::Quit);
        assert_eq!(
            command(&[2, 0, 0, 0, cmd::QUIT, 0]),
            Command::Relayed(cmd::QUIT)
        );
    }

    #[test]
    fn a_packet_in_chunks_ends_after_its_last() {
        let mut big = vec![0xFF, 0xFF, 0xFF, 0];
        big.resize(4 + MAX_CHUNK, 0x03);
        assert_eq!(packet_end(&big), Err(4 + MAX_CHUNK + 4));
        big.extend_from_slice(&[0, 0, 0, 1]);
        assert_eq!(packet_end(&big), Ok(big.len()));
        assert_eq!(packet_end(&[5, 0, 0, 0, 3]), Err(9));
        assert_eq!(packet_end(&[]), Err(4));
    }
}
