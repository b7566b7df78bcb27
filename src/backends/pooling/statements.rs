//! Server-side prepared statements in a transaction-mode pool, sans-IO: a session's statements
//! live on no one connection, so it is given ids of the proxy's, and each server connection
//! keeps the statements it has prepared by their text, whichever session prepared them.
//!
//! - **Prepare.** The client's COM_STMT_PREPARE runs on the connection the session holds; the
//!   client gets the server's answer with the session's own id in the server's place
//!   ([`SessionStatements::add`]). When the connection had that text prepared already, the new
//!   server statement is closed and the old one kept ([`ConnStatements::insert`]).
//! - **Execute** (and COM_STMT_RESET, COM_STMT_FETCH, COM_STMT_SEND_LONG_DATA,
//!   COM_STMT_BULK_EXECUTE): on whichever connection the session holds then, after preparing the
//!   text there if that connection has not, with the id rewritten to that connection's. An
//!   execute that does not send its parameter types (`new_params_bound_flag` 0: "as last time")
//!   gets the session's last types written in ([`insert_types`]) unless the server statement
//!   was last executed with the same, since another session, or none, bound it on this
//!   connection.
//! - **Close** is the session's alone: its id is forgotten, the server statement stays for the
//!   connection's other sessions.
//!
//! A connection reset (COM_RESET_CONNECTION, COM_CHANGE_USER) drops the server's statements:
//! [`ConnStatements::clear`].

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use bytes::BytesMut;

use super::core::PreHashed;
use crate::wire::protocol::cmd;

/// MariaDB's id for "the statement this connection prepared last" (for a prepare and an execute
/// sent together).
pub const LAST_PREPARED: u32 = 0xFFFF_FFFF;

/// Statements a server connection keeps before it closes one to prepare another.
pub const MAX_PER_CONNECTION: usize = 256;

/// Statements one session may hold; the server's own default `max_prepared_stmt_count` is
/// 16,382 for all its connections together.
pub const MAX_PER_SESSION: usize = 4096;

/// The commands that name a statement by its id in bytes 1..5 of their payload.
pub fn names_statement(command: u8) -> bool {
    matches!(
        command,
        cmd::STMT_EXECUTE
            | cmd::STMT_SEND_LONG_DATA
            | cmd::STMT_CLOSE
            | cmd::STMT_RESET
            | cmd::STMT_FETCH
            | cmd::STMT_BULK_EXECUTE
    )
}

/// The commands a transaction-mode session hands to the pool's statement handling.
pub fn is_statement_command(command: u8) -> bool {
    command == cmd::STMT_PREPARE || names_statement(command)
}

/// One of a session's prepared statements.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub text: Arc<[u8]>,
    pub params: u16,
    /// The parameter types of the session's last execute that sent them (2 bytes each).
    pub types: Option<Arc<[u8]>>,
    /// Where a read/write split runs a transaction this statement begins, and whether it may
    /// write, as read from its text once (see `proxy/session/pooled/split.rs`).
    pub route: Option<(crate::wire::sql::route::Target, bool)>,
}

impl Prepared {
    /// An execute of this statement on a server statement last bound with `bound`, which sent
    /// `sent` types or none: types it sent become the session's and the server statement's;
    /// without, the session's last types are returned when the server statement is bound
    /// otherwise (they must be written into the execute, and `bound` becomes them once it is).
    /// None when nothing is to be written in (bound alike, or the session never sent types:
    /// the server answers that as it would directly).
    pub fn rebind(
        &mut self,
        bound: &mut Option<Arc<[u8]>>,
        sent: Option<&[u8]>,
    ) -> Option<Arc<[u8]>> {
        if let Some(sent) = sent {
            if self.types.as_deref() != Some(sent) {
                self.types = Some(Arc::from(sent));
            }
            if *bound != self.types {
                bound.clone_from(&self.types);
            }
            return None;
        }
        self.types.clone().filter(|t| bound.as_ref() != Some(t))
    }
}

/// A session's prepared statements by the ids it was given.
#[derive(Debug, Default)]
pub struct SessionStatements {
    next: u32,
    /// Keyed by ids the proxy gave out, so a plain fast hash will do.
    by_id: HashMap<u32, Prepared, BuildHasherDefault<PreHashed>>,
    /// The id of the session's last successful prepare (for [`LAST_PREPARED`]).
    last: Option<u32>,
}

impl SessionStatements {
    /// Takes a statement the server prepared; returns the id the client is given.
    /// None when the session holds [`MAX_PER_SESSION`] already.
    pub fn add(&mut self, text: Arc<[u8]>, params: u16) -> Option<u32> {
        if self.by_id.len() >= MAX_PER_SESSION {
            return None;
        }
        // Ids start at 1, as the server's do, and skip the two with a meaning of their own.
        loop {
            self.next = self.next.wrapping_add(1);
            if self.next != 0 && self.next != LAST_PREPARED && !self.by_id.contains_key(&self.next)
            {
                break;
            }
        }
        let id = self.next;
        let types = None;
        self.by_id.insert(
            id,
            Prepared {
                text,
                params,
                types,
                route: None,
            },
        );
        self.last = Some(id);
        Some(id)
    }

    /// The client's id as the session knows it ([`LAST_PREPARED`] resolved).
    pub fn resolve(&self, id: u32) -> Option<u32> {
        if id == LAST_PREPARED {
            return self.last;
        }
        self.by_id.contains_key(&id).then_some(id)
    }

    pub fn get(&self, id: u32) -> Option<&Prepared> {
        self.by_id.get(&id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Prepared> {
        self.by_id.get_mut(&id)
    }

    /// COM_STMT_CLOSE: the id is gone (its server statement stays, for other sessions).
    pub fn close(&mut self, id: u32) {
        self.by_id.remove(&id);
        if self.last == Some(id) {
            self.last = None;
        }
    }

    /// A prepare failed: as on the server, no statement is the last prepared.
    pub fn forget_last(&mut self) {
        self.last = None;
    }

    /// COM_RESET_CONNECTION or COM_CHANGE_USER: the session's statements are gone, as they
    /// would be directly.
    pub fn clear(&mut self) {
        self.by_id.clear();
        self.last = None;
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// A statement prepared on one server connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnServer {
    pub id: u32,
    pub params: u16,
    /// The parameter types the server statement was last executed with, if known.
    pub bound: Option<Arc<[u8]>>,
}

/// One server connection's prepared statements, by text.
#[derive(Debug, Default)]
pub struct ConnStatements {
    by_text: HashMap<Arc<[u8]>, OnServer>,
}

impl ConnStatements {
    pub fn get(&self, text: &[u8]) -> Option<&OnServer> {
        self.by_text.get(text)
    }

    pub fn get_mut(&mut self, text: &[u8]) -> Option<&mut OnServer> {
        self.by_text.get_mut(text)
    }

    /// Takes statement `id` the server just prepared for `text`. Returns the server ids to
    /// close: `id` itself when the text was prepared already (the older one, with its bound
    /// types, stays), or one taken out to make room.
    pub fn insert(&mut self, text: Arc<[u8]>, id: u32, params: u16) -> Option<u32> {
        if self.by_text.contains_key(&text) {
            return Some(id);
        }
        let evicted = if self.by_text.len() >= MAX_PER_CONNECTION {
            let any = self.by_text.keys().next().cloned();
            any.and_then(|k| self.by_text.remove(&k)).map(|s| s.id)
        } else {
            None
        };
        let bound = None;
        self.by_text.insert(text, OnServer { id, params, bound });
        evicted
    }

    /// Takes up to `n` statements out; returns their server ids, to close.
    pub fn evict(&mut self, n: usize) -> Vec<u32> {
        let texts: Vec<Arc<[u8]>> = self.by_text.keys().take(n).cloned().collect();
        texts
            .iter()
            .filter_map(|t| self.by_text.remove(t).map(|s| s.id))
            .collect()
    }

    /// The server statement for `text` failed (it is gone: a reprepare error): forget it.
    pub fn remove(&mut self, text: &[u8]) {
        self.by_text.remove(text);
    }

    /// The server dropped every statement of the connection (a reset).
    pub fn clear(&mut self) {
        self.by_text.clear();
    }

    pub fn len(&self) -> usize {
        self.by_text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_text.is_empty()
    }
}

/// What a COM_STMT_PREPARE's first answer packet says (payload given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrepareOk {
    pub id: u32,
    pub columns: u16,
    pub params: u16,
}

impl PrepareOk {
    /// None for anything but a well-formed STMT_PREPARE_OK.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        match payload {
            [0x00, a, b, c, d, c0, c1, p0, p1, ..] if payload.len() >= 9 => Some(PrepareOk {
                id: u32::from_le_bytes([*a, *b, *c, *d]),
                columns: u16::from_le_bytes([*c0, *c1]),
                params: u16::from_le_bytes([*p0, *p1]),
            }),
            _ => None,
        }
    }

    /// How many packets the whole answer has (this one included): the parameter and column
    /// definitions, each list closed by an EOF unless the session negotiated
    /// `CLIENT_DEPRECATE_EOF`.
    pub fn packets(&self, deprecate_eof: bool) -> usize {
        let eof = usize::from(!deprecate_eof);
        let list = |n: u16| if n == 0 { 0 } else { usize::from(n) + eof };
        1 + list(self.params) + list(self.columns)
    }
}

/// Where a COM_STMT_EXECUTE packet (header first) keeps what the pool reads of it, for a
/// statement of `params` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecuteHead {
    /// Its first `n` bytes are needed to say.
    NeedMore(usize),
    /// Parameters: the `new_params_bound_flag` at `flag_at`; the types that follow it when set.
    Params {
        flag_at: usize,
        types: Option<(usize, usize)>,
    },
    /// No parameters: nothing to rebind.
    NoParams,
}

/// Reads the head of COM_STMT_EXECUTE `packet` (header included).
pub fn execute_head(packet: &[u8], params: u16) -> ExecuteHead {
    // header 4, command 1, id 4, flags 1, iteration count 4
    const FIXED: usize = 14;
    if params == 0 {
        return ExecuteHead::NoParams;
    }
    let n = usize::from(params);
    let flag_at = FIXED + n.div_ceil(8);
    let Some(&flag) = packet.get(flag_at) else {
        return ExecuteHead::NeedMore(flag_at + 1);
    };
    if flag == 0 {
        return ExecuteHead::Params {
            flag_at,
            types: None,
        };
    }
    let types = (flag_at + 1, flag_at + 1 + 2 * n);
    if packet.len() < types.1 {
        return ExecuteHead::NeedMore(types.1);
    }
    ExecuteHead::Params {
        flag_at,
        types: Some(types),
    }
}

/// Writes `id` into the statement command at the front of `buf` (header included).
pub fn set_statement_id(buf: &mut [u8], id: u32) {
    if let Some(at) = buf.get_mut(5..9) {
        at.copy_from_slice(&id.to_le_bytes());
    }
}

/// The statement id of the statement command at the front of `buf`, once its bytes are there.
pub fn statement_id(buf: &[u8]) -> Option<u32> {
    buf.get(5..9)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The execute at the front of `buf` sends `types` at offset `at` (header included): after its
/// `new_params_bound_flag` (at `flag`, found by [`execute_head`] to be 0), which is set, or
/// after a bulk execute's flags. The packet grows by the types' length. False (nothing changed)
/// when it would reach 16 MiB (a packet in chunks is not rewritten), `at` is not read yet or
/// lies outside the packet's payload past its command byte, or `flag` is not between them.
#[must_use]
pub fn insert_types(buf: &mut BytesMut, at: usize, flag: Option<usize>, types: &[u8]) -> bool {
    let Some(header) = buf.get(..4) else {
        return false;
    };
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let grown = len + types.len();
    // Types go after the command byte, the flag between it and them.
    let inside = (5..=4 + len).contains(&at) && flag.is_none_or(|f| (5..at).contains(&f));
    if len >= 0xFF_FFFF || grown >= 0xFF_FFFF || buf.len() < at || !inside {
        return false;
    }
    let tail = buf.split_off(at);
    buf[..3].copy_from_slice(&(grown as u32).to_le_bytes()[..3]);
    if let Some(flag) = flag {
        buf[flag] = 1;
    }
    buf.extend_from_slice(types);
    buf.unsplit(tail);
    true
}

/// A COM_STMT_PREPARE packet for `text` (header included).
pub fn prepare_packet(text: &[u8]) -> Option<Vec<u8>> {
    command_packet(cmd::STMT_PREPARE, text)
}

/// A COM_STMT_CLOSE packet for server statement `id`.
pub fn close_packet(id: u32) -> Vec<u8> {
    command_packet(cmd::STMT_CLOSE, &id.to_le_bytes()).unwrap_or_default()
}

fn command_packet(command: u8, body: &[u8]) -> Option<Vec<u8>> {
    let len = 1 + body.len();
    if len >= 0xFF_FFFF {
        return None;
    }
    let mut p = Vec::with_capacity(4 + len);
    p.extend_from_slice(&(len as u32).to_le_bytes()[..3]);
    p.push(0);
    p.push(command);
    p.extend_from_slice(body);
    Some(p)
}

/// The server's name for a command in its "unknown statement" error.
pub fn handler_name(command: u8) -> &'static str {
    match command {
        cmd::STMT_EXECUTE => "mysqld_stmt_execute",
        cmd::STMT_FETCH => "mysqld_stmt_fetch",
        cmd::STMT_RESET => "mysqld_stmt_reset",
        cmd::STMT_BULK_EXECUTE => "mysqld_stmt_bulk_execute",
        cmd::STMT_SEND_LONG_DATA => "mysqld_stmt_send_long_data",
        _ => "mysqld_stmt_close",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execute(id: u32, bitmap: &[u8], flag: u8, rest: &[u8]) -> Vec<u8> {
        let mut payload = vec![cmd::STMT_EXECUTE];
        payload.extend_from_slice(&id.to_le_bytes());
        payload.push(0);
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(bitmap);
        payload.push(flag);
        payload.extend_from_slice(rest);
        let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
        p.push(0);
        p.extend_from_slice(&payload);
        p
    }

    #[test]
    fn session_ids_start_at_one_skip_the_reserved_and_resolve_the_last() {
        let mut s = SessionStatements::default();
        let a = s.add(Arc::from(&b"SELECT 1"[..]), 0).unwrap();
        let b = s.add(Arc::from(&b"SELECT ?"[..]), 1).unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(s.resolve(LAST_PREPARED), Some(2));
        assert_eq!(s.resolve(7), None);
        s.close(2);
        assert_eq!(s.resolve(LAST_PREPARED), None);
        assert_eq!(s.resolve(1), Some(1));
        s.next = LAST_PREPARED - 1;
        assert_eq!(s.add(Arc::from(&b"x"[..]), 0), Some(2));
        s.clear();
        assert!(s.is_empty());
    }

    #[test]
    fn sent_types_are_the_sessions_and_the_servers_and_missing_ones_are_written_in() {
        let mut p = Prepared {
            text: Arc::from(&b"SELECT ?"[..]),
            params: 1,
            types: None,
            route: None,
        };
        let mut bound = None;
        // Never sent: nothing to write in.
        assert_eq!(p.rebind(&mut bound, None), None);
        assert_eq!(p.rebind(&mut bound, Some(&[8, 0])), None);
        assert_eq!(
            (p.types.as_deref(), bound.as_deref()),
            (Some(&[8u8, 0][..]), Some(&[8u8, 0][..]))
        );
        // Bound alike: nothing to write in.
        assert_eq!(p.rebind(&mut bound, None), None);
        // Another session bound other types: the session's are written in.
        let mut other: Option<Arc<[u8]>> = Some(Arc::from(&[253u8, 0][..]));
        assert_eq!(p.rebind(&mut other, None).as_deref(), Some(&[8u8, 0][..]));
        assert_eq!(
            other.as_deref(),
            Some(&[253u8, 0][..]),
            "bound once written, not before"
        );
    }

    #[test]
    fn a_session_holds_a_bounded_number_of_statements() {
        let mut s = SessionStatements::default();
        for _ in 0..MAX_PER_SESSION {
            assert!(s.add(Arc::from(&b"SELECT 1"[..]), 0).is_some());
        }
        assert_eq!(s.add(Arc::from(&b"SELECT 1"[..]), 0), None);
    }

    #[test]
    fn a_connection_keeps_one_statement_per_text_and_makes_room() {
        let mut c = ConnStatements::default();
        let text: Arc<[u8]> = Arc::from(&b"SELECT ?"[..]);
        assert_eq!(c.insert(text.clone(), 5, 1), None);
        // The same text again: the new server statement is the one to close.
        assert_eq!(c.insert(text.clone(), 9, 1), Some(9));
        assert_eq!(c.get(&text).map(|s| s.id), Some(5));
        for i in 1..MAX_PER_CONNECTION {
            assert_eq!(
                c.insert(Arc::from(format!("S{i}").as_bytes()), 100 + i as u32, 0),
                None
            );
        }
        let evicted = c.insert(Arc::from(&b"one more"[..]), 999, 0);
        assert!(evicted.is_some());
        assert_eq!(c.len(), MAX_PER_CONNECTION);
        assert_eq!(c.evict(10).len(), 10);
        assert_eq!(c.len(), MAX_PER_CONNECTION - 10);
        c.clear();
        assert!(c.get(&text).is_none());
    }

    #[test]
    fn prepare_ok_counts_its_definitions() {
        let ok = [0x00, 7, 0, 0, 0, 3, 0, 2, 0, 0, 0, 0];
        let p = PrepareOk::parse(&ok).unwrap();
        assert_eq!((p.id, p.columns, p.params), (7, 3, 2));
        assert_eq!(p.packets(false), 1 + 3 + 4);
        assert_eq!(p.packets(true), 1 + 2 + 3);
        let none = PrepareOk::parse(&[0x00, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(none.packets(false), 1);
        assert_eq!(PrepareOk::parse(&[0xFF, 0x28, 0x04]), None);
        assert_eq!(PrepareOk::parse(&[0x00, 1]), None);
    }

    #[test]
    fn an_execute_head_says_where_its_types_are() {
        // Two parameters: one bitmap byte, then the flag.
        let bound = execute(3, &[0], 1, &[8, 0, 253, 0, 1, 2]);
        assert_eq!(
            execute_head(&bound, 2),
            ExecuteHead::Params {
                flag_at: 15,
                types: Some((16, 20))
            }
        );
        assert_eq!(execute_head(&bound[..18], 2), ExecuteHead::NeedMore(20));
        assert_eq!(execute_head(&bound[..15], 2), ExecuteHead::NeedMore(16));
        let again = execute(3, &[0], 0, &[1, 2]);
        assert_eq!(
            execute_head(&again, 2),
            ExecuteHead::Params {
                flag_at: 15,
                types: None
            }
        );
        assert_eq!(execute_head(&again, 0), ExecuteHead::NoParams);
        // Nine parameters take two bitmap bytes.
        let nine = execute(3, &[0, 0], 0, &[]);
        assert!(matches!(
            execute_head(&nine, 9),
            ExecuteHead::Params { flag_at: 16, .. }
        ));
    }

    #[test]
    fn an_execute_is_rewritten_with_its_id_and_the_sessions_types() {
        let again = execute(3, &[0], 0, &[0xAA, 0xBB]);
        let mut buf = BytesMut::from(&again[..]);
        buf.extend_from_slice(b"next command");
        set_statement_id(&mut buf, 42);
        assert_eq!(statement_id(&buf), Some(42));
        assert!(insert_types(&mut buf, 16, Some(15), &[8, 0, 253, 0]));
        let expected = execute(42, &[0], 1, &[8, 0, 253, 0, 0xAA, 0xBB]);
        assert_eq!(&buf[..expected.len()], &expected[..]);
        assert_eq!(&buf[expected.len()..], b"next command");
        // Places outside the packet's payload are refused, the packet untouched.
        let before = BytesMut::from(&again[..]);
        for (at, flag) in [
            (0, None),
            (3, None),
            (16, Some(2)),
            (16, Some(16)),
            (99, None),
        ] {
            let mut b = before.clone();
            assert!(
                !insert_types(&mut b, at, flag, &[8, 0]),
                "at {at}, flag {flag:?}"
            );
            assert_eq!(b, before);
        }
        // A packet at the 16 MiB limit is not rewritten.
        let mut big = BytesMut::from(&[0xFE, 0xFF, 0xFF, 0][..]);
        big.extend_from_slice(&[0u8; 20]);
        assert!(!insert_types(&mut big, 16, Some(15), &[8, 0, 8, 0]));
    }

    #[test]
    fn packets_the_pool_sends_of_its_own() {
        assert_eq!(
            close_packet(5),
            vec![5, 0, 0, 0, cmd::STMT_CLOSE, 5, 0, 0, 0]
        );
        assert_eq!(
            prepare_packet(b"SELECT 1").unwrap()[..5],
            [9, 0, 0, 0, cmd::STMT_PREPARE]
        );
        assert!(is_statement_command(cmd::STMT_PREPARE));
        assert!(!names_statement(cmd::STMT_PREPARE));
        assert!(!is_statement_command(cmd::QUERY));
    }
}
