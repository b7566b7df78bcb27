//! The command front of a transaction-mode session, kept apart from `checks.rs` (the relay's
//! protocol code): the bytes a pooled session reads itself between transactions and before a
//! prepared-statement command, walked as the session walks them. On any client bytes
//! [`mysql_lb::backends::pooling::command`] never panics, asks only for more than it has, gives a verdict
//! that more bytes do not change, and every range it names lies inside the packet it read (a
//! prepare's text, a statement id, an execute's types, the packet's end); the statement
//! bookkeeping and rewrites the session runs on those answers (`pooling::statements`) never
//! panic and change only what they say.

use bytes::BytesMut;
use mysql_lb::backends::pooling::command::{
    command, packet_end, payload_len, statement, Command, Statement,
};
use mysql_lb::backends::pooling::statements::{
    execute_head, insert_types, is_statement_command, set_statement_id, statement_id, ExecuteHead,
    SessionStatements,
};
use mysql_lb::wire::protocol::cmd;

/// The client's bytes as they have arrived: `stream[pos..pos + have]` is the session's buffer,
/// filled `largest` bytes a read at most.
struct Client<'s> {
    stream: &'s [u8],
    pos: usize,
    have: usize,
    largest: usize,
}

impl Client<'_> {
    fn buf(&self) -> &[u8] {
        &self.stream[self.pos..self.pos + self.have]
    }

    fn rest(&self) -> &[u8] {
        &self.stream[self.pos..]
    }

    /// Reads until the buffer holds `n` bytes; false when the client closed first.
    fn fill(&mut self, n: usize) -> bool {
        while self.have < n {
            let left = self.stream.len() - self.pos - self.have;
            if left == 0 {
                return false;
            }
            self.have += left.min(self.largest);
        }
        true
    }

    /// Drops the packet at the front, every chunk of it; false when the client closed first.
    fn consume(&mut self) -> bool {
        match packet_end(self.rest()) {
            Ok(end) => {
                self.pos += end;
                self.have = self.have.saturating_sub(end);
                true
            }
            Err(n) => {
                assert!(
                    n > self.rest().len(),
                    "packet_end asks for {n} of {} bytes",
                    self.rest().len()
                );
                false
            }
        }
    }
}

/// Byte 0: the low nibble is the largest read (1..=15 bytes; 0: everything at once), the high
/// one the parameter count of every statement the client prepares; the rest is what the client
/// sends.
pub fn pooled_front(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let largest = match usize::from(control & 0x0F) {
        0 => usize::MAX,
        n => n,
    };
    let params = u16::from(control >> 4);
    let mut client = Client {
        stream,
        pos: 0,
        have: 0,
        largest,
    };
    let mut session = SessionStatements::default();
    // Every command consumes at least its 4-byte header.
    for _ in 0..=stream.len() / 4 + 1 {
        if !next(&mut client, &mut session, params) {
            return;
        }
    }
    panic!("the front made no progress");
}

/// One command at the front, as the session handles it; false once the session ends.
fn next(client: &mut Client<'_>, session: &mut SessionStatements, params: u16) -> bool {
    let verdict = loop {
        match command(client.buf()) {
            Command::NeedMore(n) => {
                assert!(
                    n > client.have,
                    "command asks for {n} with {} there",
                    client.have
                );
                if !client.fill(n) {
                    return false;
                }
            }
            verdict => break verdict,
        }
    };
    assert_eq!(
        command(client.rest()),
        verdict,
        "the verdict changed with the bytes after"
    );
    let buf = client.buf();
    match verdict {
        Command::NeedMore(_) => unreachable!("waited for above"),
        Command::Quit => return false,
        Command::Empty => {
            assert_eq!(payload_len(buf), Some(0));
            assert_eq!(
                packet_end(buf),
                Ok(4),
                "an empty packet is its header alone"
            );
        }
        Command::Relayed(c) => {
            assert_eq!(buf.get(4), Some(&c));
            assert!(!is_statement_command(c));
        }
        Command::Statement(c) => {
            assert_eq!(buf.get(4), Some(&c));
            assert!(payload_len(buf).is_some_and(|l| l > 0));
            return statement_command(client, session, params);
        }
    }
    client.consume()
}

/// A prepared-statement command at the front, as `session::pooled::prepared` reads it.
fn statement_command(
    client: &mut Client<'_>,
    session: &mut SessionStatements,
    params: u16,
) -> bool {
    let head = loop {
        match statement(client.buf()) {
            Statement::NeedMore(n) => {
                assert!(
                    n > client.have,
                    "statement asks for {n} with {} there",
                    client.have
                );
                if !client.fill(n) {
                    return false;
                }
            }
            head => break head,
        }
    };
    assert_eq!(
        statement(client.rest()),
        head,
        "the head changed with the bytes after"
    );
    let buf = client.buf();
    let len = payload_len(buf).unwrap_or_default();
    match head {
        Statement::NeedMore(_) => unreachable!("waited for above"),
        Statement::NotStatement => panic!("a statement command read as none"),
        Statement::PrepareTooLarge => assert!(len >= 0xFF_FFFF),
        Statement::Malformed { command } => {
            assert_eq!(buf.get(4), Some(&command));
            assert!(len < 5);
        }
        Statement::Prepare { end } => {
            assert_eq!(end, 4 + len);
            assert!(
                end <= buf.len() && end >= 5,
                "prepare ends at {end} of {}",
                buf.len()
            );
            let text = &buf[5..end];
            if session.len() < 64 {
                let _ = session.add(text.into(), params);
            }
        }
        Statement::Named { command, id, end } => {
            assert_eq!(end, 4 + len);
            assert!(end >= 9);
            assert_eq!(statement_id(buf), Some(id));
            if let Some(id) = session.resolve(id) {
                match command {
                    cmd::STMT_CLOSE => session.close(id),
                    cmd::STMT_EXECUTE => {
                        let known = session.get(id).map(|p| p.params);
                        if !execute(client, known.unwrap_or(params), end) {
                            return false;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    client.consume()
}

/// An execute of a statement of `params` parameters whose first chunk ends at `end`: its head
/// read within that chunk (as `types_place` does), then rewritten as the session would (its
/// id, the session's types written in when it sent none).
fn execute(client: &mut Client<'_>, params: u16, end: usize) -> bool {
    let head = loop {
        let buf = client.buf();
        match execute_head(buf.get(..end).unwrap_or(buf), params) {
            ExecuteHead::NeedMore(n) if n <= end => {
                if !client.fill(n) {
                    return false;
                }
            }
            head => break head,
        }
    };
    let ExecuteHead::Params { flag_at, types } = head else {
        return true;
    };
    let buf = client.buf();
    assert!(
        flag_at < end.min(buf.len()),
        "flag at {flag_at} past the packet ({end})"
    );
    if let Some((from, to)) = types {
        assert!(
            from == flag_at + 1 && to <= end && to <= buf.len(),
            "types {from}..{to} past {end}"
        );
        return true;
    }
    let mut packet = BytesMut::from(buf);
    set_statement_id(&mut packet, 0x0102_0304);
    assert_eq!(statement_id(&packet), Some(0x0102_0304));
    let before = packet.clone();
    let types = vec![0xFD; 2 * usize::from(params)];
    if insert_types(&mut packet, flag_at + 1, Some(flag_at), &types) {
        assert_eq!(packet.len(), before.len() + types.len());
        assert_eq!(payload_len(&packet), Some(end - 4 + types.len()));
        assert_eq!(packet[flag_at], 1);
        assert_eq!(&packet[4..flag_at], &before[4..flag_at]);
        assert_eq!(&packet[flag_at + 1..flag_at + 1 + types.len()], &types[..]);
        assert_eq!(&packet[flag_at + 1 + types.len()..], &before[flag_at + 1..]);
    } else {
        assert_eq!(packet, before, "a refused rewrite changed the packet");
    }
    true
}
