//! One shared server connection as the pool keeps it: alive or not (a read that does not wait),
//! brought back to its login's state (COM_RESET_CONNECTION, COM_INIT_DB) or to a session's
//! settings, and closed politely.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::holding::{State, Step};
use super::statements::{close_packet, prepare_packet, ConnStatements, PrepareOk};
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;

/// A server connection past its login, as the pool keeps it.
pub struct ServerConn {
    pub leg: LegStream<BackendStream>,
    /// The server's id of the connection (`CONNECTION_ID()`), for KILL.
    pub thread_id: u32,
    /// The replayable settings it carries beyond its login's (see [`State`]).
    pub state: State,
    /// The prepared statements it holds (see `super::statements`).
    pub statements: ConnStatements,
}

/// A COM_STMT_PREPARE's whole answer as the server sent it.
pub struct PrepareAnswer {
    /// Its packets, headers included, sequence ids 1, 2, … as the client expects them.
    pub bytes: Vec<u8>,
    /// The STMT_PREPARE_OK, or None for an ERR (`bytes` is then that one packet).
    pub ok: Option<PrepareOk>,
}

/// A prepare's answer larger than this ends the connection (thousands of columns' definitions
/// stay far below it).
const MAX_PREPARE_ANSWER: usize = 16 * 1024 * 1024;

impl std::fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerConn({})", self.thread_id)
    }
}

impl ServerConn {
    /// True when the server closed the connection or sent something unasked while it was idle
    /// (a `wait_timeout`, a KILL, a shutdown): it must not take a statement. One read attempt
    /// that does not wait. On a plain leg it asks the socket directly: the runtime's readiness
    /// says at once (one atomic load, no system call, no waker swapped in and out) that nothing
    /// came since the last read that would have blocked, which is how every relay leaves it; a
    /// TLS or compressed leg may hold bytes of its own, so it is read through.
    pub fn is_stale(&mut self) -> bool {
        let mut byte = [0u8; 1];
        if let LegStream::Plain(socket) = &self.leg {
            return !matches!(
                socket.try_read(&mut byte),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            );
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = ReadBuf::new(&mut byte);
        !matches!(
            Pin::new(&mut self.leg).poll_read(&mut cx, &mut buf),
            Poll::Pending
        )
    }

    /// [`is_stale`](Self::is_stale), and the kernel asked whether the server closed it since
    /// the runtime last looked ([`BackendStream::peer_closed`]): for a session about to move
    /// to this connection's backend, which may have died a moment ago.
    pub fn is_stale_now(&mut self) -> bool {
        self.is_stale() || self.leg.socket().is_none_or(BackendStream::peer_closed)
    }

    /// Brings a connection back to the state a login of its key leaves (after a session pinned
    /// it, or left warnings or an insert id on it): COM_RESET_CONNECTION (transaction rolled
    /// back, temporary tables dropped, locks released, variables, diagnostics and prepared
    /// statements gone, the login's character set kept), then COM_INIT_DB of the login schema
    /// when there was one, both sent at once. False if the server did not answer both with an
    /// OK within a second: the connection must close.
    pub async fn reset(&mut self, schema: &str) -> bool {
        let mut commands: Vec<(u8, &[u8])> = vec![(0x1F, &[])];
        if !schema.is_empty() {
            commands.push((0x02, schema.as_bytes()));
        }
        let done = self.run(&commands).await;
        if done {
            self.state = State::default();
        }
        done
    }

    /// Sets the login's role again after a reset, which keeps the current role (MariaDB
    /// 10.11): the account's default role as the server lists it for the logged-in user
    /// (`information_schema.APPLICABLE_ROLES`, `IS_DEFAULT`), else none. Two round trips, only
    /// for a connection whose session may have changed its role. False when either fails or
    /// the answer cannot be read: the connection must close.
    pub async fn restore_role(&mut self, deprecate_eof: bool) -> bool {
        const DEFAULT_ROLE: &[u8] = b"SELECT ROLE_NAME FROM information_schema.APPLICABLE_ROLES \
            WHERE IS_DEFAULT = 'YES' AND GRANTEE = CURRENT_USER()";
        let asked = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            self.query_one_value(DEFAULT_ROLE, deprecate_eof),
        )
        .await;
        let role = match asked {
            Ok(Ok(role)) => role,
            _ => return false,
        };
        let set = match role {
            Some(name) => {
                let mut text = b"SET ROLE `".to_vec();
                for &b in &name {
                    if b == b'`' {
                        text.push(b'`');
                    }
                    text.push(b);
                }
                text.push(b'`');
                text
            }
            None => b"SET ROLE NONE".to_vec(),
        };
        self.run(&[(0x03, &set)]).await
    }

    /// `@@last_gtid`: the GTID of the last transaction this connection wrote (MariaDB), for a
    /// split's read-your-writes. None when the query failed or was not answered within a
    /// second: the connection must close.
    pub async fn last_gtid(&mut self, deprecate_eof: bool) -> Option<Vec<u8>> {
        let asked = self.query_one_value(b"SELECT @@last_gtid", deprecate_eof);
        match tokio::time::timeout(std::time::Duration::from_secs(1), asked).await {
            Ok(Ok(value)) => Some(value.unwrap_or_default()),
            _ => None,
        }
    }

    /// A MySQL server's `@@gtid_executed` after a write transaction committed on this
    /// connection: a position that covers it (and everything else the server executed; MySQL
    /// has no `@@last_gtid`). None as for [`last_gtid`](Self::last_gtid).
    pub async fn gtid_executed(&mut self, deprecate_eof: bool) -> Option<Vec<u8>> {
        let asked = self.query_one_value(b"SELECT @@GLOBAL.gtid_executed", deprecate_eof);
        match tokio::time::timeout(std::time::Duration::from_secs(1), asked).await {
            Ok(Ok(value)) => Some(value.unwrap_or_default()),
            _ => None,
        }
    }

    /// `@@read_only` of the server: whether a write it refused with ERR 1290 was refused for
    /// being read-only (the error alone could be a `SIGNAL`, or another option's). None when
    /// the query failed or was not answered within a second: the connection must close.
    pub async fn read_only(&mut self, deprecate_eof: bool) -> Option<bool> {
        let asked = self.query_one_value(b"SELECT @@read_only", deprecate_eof);
        match tokio::time::timeout(std::time::Duration::from_secs(1), asked).await {
            // As the health check reads it: `0` or `OFF` is writable.
            Ok(Ok(value)) => Some(
                value
                    .as_deref()
                    .is_some_and(|v| v != b"0" && !v.eq_ignore_ascii_case(b"OFF")),
            ),
            _ => None,
        }
    }

    /// `MASTER_GTID_WAIT(position, within)` on a replica's connection, the proxy's own command
    /// before the client's read: Some(true) once the replica has applied `position`,
    /// Some(false) when `within` passed first (the server's -1). None when the query failed:
    /// the connection must close.
    pub async fn gtid_wait(
        &mut self,
        position: &str,
        within: std::time::Duration,
        deprecate_eof: bool,
    ) -> Option<bool> {
        // A position is digits, dashes and commas (`GtidPos`'s display), and for a MySQL set
        // hex digits and colons: nothing to quote.
        if !position
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || matches!(b, b'-' | b',' | b':'))
        {
            return Some(false);
        }
        let text = gtid_wait_query(position, within);
        let asked = self.query_one_value(text.as_bytes(), deprecate_eof);
        let bound = within + std::time::Duration::from_secs(1);
        match tokio::time::timeout(bound, asked).await {
            Ok(Ok(value)) => Some(value.as_deref() == Some(b"0")),
            _ => None,
        }
    }

    /// Runs a text query and returns the first column of its first row (None: no row, or
    /// NULL). Rows past the first are read and dropped.
    async fn query_one_value(
        &mut self,
        text: &[u8],
        deprecate_eof: bool,
    ) -> std::io::Result<Option<Vec<u8>>> {
        use tokio::io::AsyncWriteExt;
        let len = 1 + text.len();
        let mut packet = vec![len as u8, (len >> 8) as u8, (len >> 16) as u8, 0, 0x03];
        packet.extend_from_slice(text);
        self.leg.write_all(&packet).await?;
        self.leg.flush().await?;
        let mut bytes = Vec::new();
        let mut seq = 1u8;
        let mut next = |bytes: &mut Vec<u8>| {
            bytes.clear();
            let s = seq;
            seq = seq.wrapping_add(1);
            s
        };
        let s = next(&mut bytes);
        let at = self.read_packet(&mut bytes, s).await?;
        let columns = match bytes.get(at) {
            Some(&n @ 1..=0xFA) => n,
            _ => return Err(malformed("the answer is no result set")),
        };
        for _ in 0..columns {
            let s = next(&mut bytes);
            self.read_packet(&mut bytes, s).await?;
        }
        if !deprecate_eof {
            let s = next(&mut bytes);
            self.read_packet(&mut bytes, s).await?;
        }
        let mut value = None;
        let mut first = true;
        loop {
            let s = next(&mut bytes);
            let at = self.read_packet(&mut bytes, s).await?;
            let row = &bytes[at..];
            match row.first() {
                Some(0xFF) => return Err(malformed("the query failed")),
                Some(0xFE) if row.len() < 0xFF_FFFF => return Ok(value),
                Some(0xFB) if first => {}
                Some(&n) if first && n < 0xFB => {
                    value = row.get(1..1 + usize::from(n)).map(<[u8]>::to_vec);
                }
                Some(_) if first => return Err(malformed("a value longer than 250 bytes")),
                _ => {}
            }
            first = false;
        }
    }

    /// Sends a COM_STMT_PREPARE packet (header included; sent with sequence id 0) and reads its
    /// whole answer; `deprecate_eof` as the session negotiated. An I/O error, or an answer the
    /// pool cannot follow, means the connection must close.
    pub async fn prepare(
        &mut self,
        packet: &[u8],
        deprecate_eof: bool,
    ) -> std::io::Result<PrepareAnswer> {
        use tokio::io::AsyncWriteExt;
        let mut first = packet.to_vec();
        if let Some(seq) = first.get_mut(3) {
            *seq = 0;
        }
        self.leg.write_all(&first).await?;
        self.leg.flush().await?;
        let mut bytes = Vec::new();
        let payload = self.read_packet(&mut bytes, 1).await?;
        let ok = PrepareOk::parse(&bytes[payload..]);
        let Some(ok) = ok else {
            return match bytes.get(payload) {
                Some(0xFF) => Ok(PrepareAnswer { bytes, ok: None }),
                _ => Err(malformed(
                    "a prepare's answer is neither STMT_PREPARE_OK nor ERR",
                )),
            };
        };
        for i in 1..ok.packets(deprecate_eof) {
            self.read_packet(&mut bytes, (i + 1) as u8).await?;
        }
        Ok(PrepareAnswer {
            bytes,
            ok: Some(ok),
        })
    }

    /// Prepares `text` for the pool's own use (a session executes it here for the first time).
    pub async fn prepare_text(
        &mut self,
        text: &[u8],
        deprecate_eof: bool,
    ) -> std::io::Result<PrepareAnswer> {
        let packet = prepare_packet(text).ok_or_else(|| malformed("statement too long"))?;
        self.prepare(&packet, deprecate_eof).await
    }

    /// Closes server statement `id` (no answer comes).
    pub async fn close_statement(&mut self, id: u32) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.leg.write_all(&close_packet(id)).await?;
        self.leg.flush().await
    }

    /// Appends one packet of an answer to `out`, with sequence id `seq`; returns where its
    /// payload starts in `out`.
    async fn read_packet(&mut self, out: &mut Vec<u8>, seq: u8) -> std::io::Result<usize> {
        use tokio::io::AsyncReadExt;
        let mut header = [0u8; 4];
        self.leg.read_exact(&mut header).await?;
        let len =
            usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        if len == 0xFF_FFFF || out.len() + 4 + len > MAX_PREPARE_ANSWER {
            return Err(malformed("a prepare's answer is too large"));
        }
        header[3] = seq;
        out.extend_from_slice(&header);
        let at = out.len();
        out.resize(at + len, 0);
        self.leg.read_exact(&mut out[at..]).await?;
        Ok(at)
    }

    /// Sets the connection's `LAST_INSERT_ID()` back to 0, as after a login, when a session's
    /// generated id is all it left (see `Holding::only_insert_id`). False if the server did not
    /// answer with an OK within a second: the connection must close.
    pub async fn forget_insert_id(&mut self) -> bool {
        self.run(&[(0x03, b"DO LAST_INSERT_ID(0)")]).await
    }

    /// `COMMIT` of the transaction open on the connection, the proxy's own statement (what a
    /// `BEGIN` the client sent would do first): Some(true) when the server committed it,
    /// Some(false) when it answered otherwise (an ERR: the connection is as it was), None when
    /// it did not answer within a second (the connection must close).
    pub async fn commit(&mut self) -> Option<bool> {
        let asked = async {
            use tokio::io::AsyncWriteExt;
            self.leg.write_all(&[7, 0, 0, 0, 0x03]).await?;
            self.leg.write_all(b"COMMIT").await?;
            self.leg.flush().await?;
            self.read_ok().await
        };
        match tokio::time::timeout(std::time::Duration::from_secs(1), asked).await {
            Ok(Ok(ok)) => Some(ok),
            _ => None,
        }
    }

    /// Whether the connection carries exactly `state`'s settings.
    pub fn carries(&self, state: &State) -> bool {
        Arc::ptr_eq(&self.state, state) || self.state == *state
    }

    /// Brings the connection to `state` (a session's settings, see [`State`]): when
    /// it carries other settings, reset first (COM_RESET_CONNECTION, COM_INIT_DB of the login
    /// `schema`), then each setting run again, all in one write. False if the server did not
    /// answer each with an OK within a second: the connection must close.
    pub async fn adopt(&mut self, state: &State, schema: &str) -> bool {
        if self.carries(state) {
            return true;
        }
        let mut commands: Vec<(u8, &[u8])> = Vec::new();
        if !self.state.is_empty() {
            commands.push((0x1F, &[]));
            if !schema.is_empty() {
                commands.push((0x02, schema.as_bytes()));
            }
        }
        for step in state.iter() {
            commands.push(match step {
                Step::Query(text) => (0x03, text),
                Step::InitDb(name) => (0x02, name),
            });
        }
        let done = self.run(&commands).await;
        if done {
            self.state = Arc::clone(state);
        }
        done
    }

    /// Sends `commands` (command byte, body) in one write and reads their answers: true if
    /// each is an OK, within a second.
    async fn run(&mut self, commands: &[(u8, &[u8])]) -> bool {
        if commands.iter().any(|&(command, _)| command == 0x1F) {
            // COM_RESET_CONNECTION drops the connection's prepared statements.
            self.statements.clear();
        }
        let steps = async {
            use tokio::io::AsyncWriteExt;
            let mut packets = Vec::new();
            for (command, body) in commands {
                let len = 1 + body.len();
                if len >= 0xFF_FFFF {
                    return Ok::<bool, std::io::Error>(false);
                }
                packets.extend_from_slice(&[len as u8, (len >> 8) as u8, (len >> 16) as u8, 0]);
                packets.push(*command);
                packets.extend_from_slice(body);
            }
            self.leg.write_all(&packets).await?;
            self.leg.flush().await?;
            let mut ok = true;
            for _ in commands {
                ok &= self.read_ok().await?;
            }
            Ok(ok)
        };
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(1), steps).await,
            Ok(Ok(true))
        )
    }

    /// Reads a one-packet answer to a command: true for an OK.
    async fn read_ok(&mut self) -> std::io::Result<bool> {
        use tokio::io::AsyncReadExt;
        let mut header = [0u8; 4];
        self.leg.read_exact(&mut header).await?;
        let len =
            usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        if len > 64 * 1024 {
            return Ok(false);
        }
        let mut payload = vec![0u8; len];
        self.leg.read_exact(&mut payload).await?;
        Ok(payload.first() == Some(&0x00) && header[3] == 1)
    }

    /// Ends the connection and waits (up to a second) until the server has closed its end:
    /// only then does the server no longer count it against its `max_connections`, and may
    /// its pool slot go to a login.
    pub async fn close(mut self) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ends = async {
            self.leg.write_all(&[1, 0, 0, 0, 0x01]).await?;
            self.leg.flush().await?;
            let mut sink = [0u8; 256];
            while self.leg.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), ends).await;
    }

    /// Ends the connection politely, as far as it can without waiting: COM_QUIT if the socket
    /// takes it now, then the close.
    pub fn quit(mut self) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let leg = Pin::new(&mut self.leg);
        if let Poll::Ready(Ok(5)) = leg.poll_write(&mut cx, &[1, 0, 0, 0, 0x01]) {
            let _ = Pin::new(&mut self.leg).poll_flush(&mut cx);
        }
    }
}

fn malformed(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// The wait a replica's read makes for `position` (see [`ServerConn::gtid_wait`]): MariaDB's
/// `MASTER_GTID_WAIT` for its domains, MySQL's `WAIT_FOR_EXECUTED_GTID_SET` for a set of
/// `uuid:interval` items (a `:` tells them apart). Both answer 0 once the replica has applied
/// it (MariaDB -1, MySQL 1 past the timeout, in seconds with decimals).
pub fn gtid_wait_query(position: &str, within: std::time::Duration) -> String {
    let function = if position.contains(':') {
        "WAIT_FOR_EXECUTED_GTID_SET"
    } else {
        "MASTER_GTID_WAIT"
    };
    format!(
        "SELECT {function}('{position}', {}.{:03})",
        within.as_secs(),
        within.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_wait_takes_the_servers_own_function() {
        let within = Duration::from_millis(1500);
        assert_eq!(
            super::gtid_wait_query("0-1-42,1-2-7", within),
            "SELECT MASTER_GTID_WAIT('0-1-42,1-2-7', 1.500)"
        );
        // MySQL's, as its manual writes a set (a fixture: no MySQL server runs here).
        assert_eq!(
            super::gtid_wait_query("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", within),
            "SELECT WAIT_FOR_EXECUTED_GTID_SET('3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5', 1.500)"
        );
    }
}
