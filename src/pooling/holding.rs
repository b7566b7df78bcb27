//! Whether a session in a transaction-mode pool may give its server connection back, from what
//! it sent and what the server answered: sans-IO, fed by the relay's observer.
//!
//! A session keeps its connection while the server says a transaction is open
//! (`SERVER_STATUS_IN_TRANS` in the OK/EOF that ended the last response), for one more command
//! after a response with warnings, an error or changed rows (so `SHOW WARNINGS`, `GET
//! DIAGNOSTICS`, `ROW_COUNT()` and `LAST_INSERT_ID()` right after it see its own), and for good
//! once it left state on the connection that another session must not see or that it may still
//! need: a statement `sql::pins` names, a prepared statement, `COM_CHANGE_USER`, `COM_INIT_DB`,
//! `COM_SET_OPTION`, `COM_RESET_CONNECTION`, a cursor, a statement too long to read whole, or the
//! server saying the session state changed (`SERVER_SESSION_STATE_CHANGED`, when the client
//! asked for session tracking). When unsure, it pins.
//!
//! What such a response leaves outlives that one command on the server: MariaDB keeps the
//! warnings and errors of a statement through every later statement that uses no table and
//! raises none (`SELECT 1`, `SHOW WARNINGS`, `SELECT @@warning_count`) and through `COM_PING`;
//! `LAST_INSERT_ID()` stays until the next generated id; `ROW_COUNT()` until the next statement.
//! A connection that may still hold any of them ([`Holding::leaves_traces`]) is reset before
//! another session gets it; the session itself reads them only with its next command.

use crate::protocol::response::{cmd, Completed};
use crate::sql::pins::{pins, Pin};

/// Statement text read to decide on pins; a longer statement pins (its end is not read).
pub const TEXT_LIMIT: usize = 64 * 1024;

const SERVER_STATUS_IN_TRANS: u16 = 0x0001;
const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;
const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;

/// Why a session keeps its server connection for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A statement that leaves state (see [`Pin`]).
    Statement(Pin),
    PreparedStatement,
    ChangeUser,
    InitDb,
    SetOption,
    ResetConnection,
    Cursor,
    StateChanged,
    /// A statement longer than [`TEXT_LIMIT`].
    LongStatement,
    /// A command the pool does not know to be stateless (replication, debug, ...).
    Command,
}

impl Reason {
    /// The `reason` label of `mysql_lb_pool_pins_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Statement(pin) => pin.as_str(),
            Reason::PreparedStatement => "prepared_statement",
            Reason::ChangeUser => "change_user",
            Reason::InitDb => "init_db",
            Reason::SetOption => "set_option",
            Reason::ResetConnection => "reset_connection",
            Reason::Cursor => "cursor",
            Reason::StateChanged => "session_state_changed",
            Reason::LongStatement => "long_statement",
            Reason::Command => "command",
        }
    }
}

/// One session's hold on its connection.
#[derive(Debug, Default, Clone)]
pub struct Holding {
    pinned: Option<Reason>,
    in_transaction: bool,
    /// The last response left something the next command may read.
    keep_once: bool,
    /// The session may have left its login schema (`USE`, COM_INIT_DB, or a statement that
    /// could hold a `USE`): a reset connection cannot be brought back to "no schema".
    schema_moved: bool,
    /// The session logged in again as someone (COM_CHANGE_USER).
    user_changed: bool,
    /// The server may still hold this session's warnings or error, or an id it generated.
    diagnostics: bool,
    /// The last statement changed rows (`ROW_COUNT()`).
    row_count: bool,
}

impl Holding {
    /// Why the session keeps its connection for good, if it does.
    pub fn pinned(&self) -> Option<Reason> {
        self.pinned
    }

    /// Whether the connection may go back to the pool at the next command boundary.
    pub fn releasable(&self) -> bool {
        self.pinned.is_none() && !self.in_transaction && !self.keep_once
    }

    /// Whether the connection may hold something of this session's that another session could
    /// read (warnings, an error, `LAST_INSERT_ID()`, `ROW_COUNT()`): it must be reset before
    /// it is shared again.
    pub fn leaves_traces(&self) -> bool {
        self.diagnostics || self.row_count
    }

    /// The connection was reset (COM_RESET_CONNECTION): nothing of the session is left on it.
    pub fn reset_done(&mut self) {
        self.diagnostics = false;
        self.row_count = false;
    }

    /// A statement packet as the relay forwards it (`payload` command byte first, at most
    /// [`TEXT_LIMIT`] of it). Returns the reason when this pins the session.
    pub fn statement(&mut self, command: u8, payload: &[u8]) -> Option<Reason> {
        if command != cmd::QUERY {
            return None;
        }
        let text = payload.get(1..).unwrap_or_default();
        let reason = if text.len() >= TEXT_LIMIT {
            Some(Reason::LongStatement)
        } else {
            pins(text).map(Reason::Statement)
        };
        self.schema_moved |= matches!(
            reason,
            Some(
                Reason::LongStatement
                    | Reason::Statement(Pin::Schema | Pin::MultiStatement | Pin::Unknown)
            )
        );
        self.pin(reason)
    }

    /// Whether the session's connection, pinned, can be brought back to its key's login state
    /// when the session ends (COM_RESET_CONNECTION, then COM_INIT_DB of the login schema, if it
    /// had one). Not after COM_CHANGE_USER, nor when it had no login schema and may have left
    /// it (no command goes back to none).
    pub fn recyclable(&self, login_schema: &str) -> bool {
        let stranded = login_schema.is_empty() && self.schema_moved;
        !self.user_changed && !stranded
    }

    /// A command answered in full. Returns the reason when this pins the session.
    pub fn completed(&mut self, c: &Completed) -> Option<Reason> {
        let mut reason = match c.command {
            cmd::QUERY
            | cmd::PING
            | cmd::STATISTICS
            | cmd::FIELD_LIST
            | cmd::PROCESS_KILL
            | cmd::PROCESS_INFO
            | cmd::STMT_EXECUTE
            | cmd::STMT_FETCH
            | cmd::STMT_CLOSE
            | cmd::STMT_RESET
            | cmd::STMT_SEND_LONG_DATA
            | cmd::STMT_BULK_EXECUTE => None,
            cmd::STMT_PREPARE if !c.error => Some(Reason::PreparedStatement),
            cmd::STMT_PREPARE => None,
            cmd::CHANGE_USER => {
                self.user_changed = true;
                Some(Reason::ChangeUser)
            }
            cmd::INIT_DB => {
                self.schema_moved = true;
                Some(Reason::InitDb)
            }
            cmd::SET_OPTION => Some(Reason::SetOption),
            cmd::RESET_CONNECTION => Some(Reason::ResetConnection),
            _ => Some(Reason::Command),
        };
        match c.end {
            Some(end) => {
                self.in_transaction = end.status & SERVER_STATUS_IN_TRANS != 0;
                if end.status & SERVER_STATUS_CURSOR_EXISTS != 0 {
                    reason = reason.or(Some(Reason::Cursor));
                }
                if end.status & SERVER_SESSION_STATE_CHANGED != 0 {
                    reason = reason.or(Some(Reason::StateChanged));
                }
                self.keep_once = end.warnings > 0 || end.insert_id > 0 || c.affected > 0;
                self.diagnostics |= end.warnings > 0 || end.insert_id > 0;
            }
            // An ERR leaves the transaction as it was; its diagnostics are the next command's
            // to read.
            None => {
                self.keep_once = c.error;
                self.diagnostics |= c.error;
            }
        }
        // Only a statement replaces the row count (an error sets it to -1).
        if matches!(c.command, cmd::QUERY | cmd::STMT_EXECUTE) {
            self.row_count = c.affected > 0;
        }
        self.pin(reason)
    }

    fn pin(&mut self, reason: Option<Reason>) -> Option<Reason> {
        if self.pinned.is_some() {
            return None;
        }
        self.pinned = reason;
        reason
    }
}

#[cfg(test)]
mod tests;
