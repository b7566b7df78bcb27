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

use std::sync::Arc;

use crate::wire::protocol::response::{cmd, Completed};
use crate::wire::sql::pins::{pins_for, replayable, Pin};
use crate::wire::sql::{reads_diagnostics, Dialect};

/// One statement of a session's replayable state, as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A `SET` or `USE` text ([`replayable`]).
    Query(Box<[u8]>),
    /// COM_INIT_DB's schema name.
    InitDb(Box<[u8]>),
}

/// The replayable state a session applied since its login, in order; a connection carries the
/// state of the session that last held it, and a session given a connection in another state
/// has it reset and this list run on it first. Empty: the login's state.
pub type State = Arc<Vec<Step>>;

/// A session's replayable state stops growing here; past it, a setting pins.
const MAX_STEPS: usize = 32;
const MAX_STATE_BYTES: usize = 16 * 1024;

/// Statement text read to decide on pins; a longer statement pins (its end is not read).
pub const TEXT_LIMIT: usize = 64 * 1024;

const SERVER_STATUS_IN_TRANS: u16 = 0x0001;
const SERVER_STATUS_AUTOCOMMIT: u16 = 0x0002;
const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;
const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;

/// Why a session keeps its server connection for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A statement that leaves state (see [`Pin`]).
    Statement(Pin),
    PreparedStatement,
    /// COM_STMT_SEND_LONG_DATA: the data waits on the connection for its execute.
    LongData,
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
            Reason::LongData => "long_data",
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
    /// The session may have changed its current role: `SET ROLE`, or a statement the text
    /// cannot see into (a call, a procedure, a prepared or compound statement, a text too long
    /// to read). MariaDB's COM_RESET_CONNECTION keeps the current role, so the login's role is
    /// set again after the reset that recycles such a connection (`ServerConn::restore_role`).
    role_changed: bool,
    /// The server's last answer said autocommit is off: every statement opens a transaction
    /// (a split sends the session's statements to the primary).
    autocommit_off: bool,
    /// The one COM_QUERY in flight only reads the diagnostics area (`SHOW WARNINGS`, ...),
    /// which the server keeps through it: what the last response left is kept for the next.
    reading_diagnostics: bool,
    /// The server may still hold this session's warnings or error, or an id it generated.
    diagnostics: bool,
    /// The server generated an id for this session (`LAST_INSERT_ID()`).
    insert_id: bool,
    /// The last statement changed rows (`ROW_COUNT()`).
    row_count: bool,
    /// The session's replayable settings so far (see [`State`]).
    state: State,
    state_bytes: usize,
    /// A replayable setting sent, waiting for its answer: the next COM_QUERY / COM_INIT_DB to
    /// complete (it was the only one in flight when sent).
    pending: Option<Step>,
    /// COM_QUERY and COM_INIT_DB sent and not answered yet.
    in_flight: usize,
    /// The login named a schema, so a reset connection goes back to it and `USE` can be
    /// replayed; without one, `USE` pins (nothing goes back to no schema).
    login_schema: bool,
    /// Prepared statements are the pool's to share (`super::statements`): a prepare does not
    /// pin by itself (its text may).
    shared_statements: bool,
    /// How the backend reads statements (which executable comments it runs).
    dialect: Dialect,
}

impl Holding {
    /// A session whose login named a schema (`login_schema`) or not.
    pub fn new(login_schema: bool) -> Self {
        Holding {
            login_schema,
            ..Holding::default()
        }
    }

    /// The session's prepared statements are shared by the pool (see `super::statements`),
    /// not pinned.
    pub fn share_statements(&mut self) {
        self.shared_statements = true;
    }

    /// Statements are read as a backend of `dialect` reads them (unknown: every reading).
    pub fn read_as(&mut self, dialect: Dialect) {
        self.dialect = dialect;
    }

    /// How statements are read (the backend's flavour and version).
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The settings a connection must carry to serve this session.
    pub fn state(&self) -> &State {
        &self.state
    }

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
        self.diagnostics || self.row_count || self.insert_id
    }

    /// Whether the only trace is a generated id, which `DO LAST_INSERT_ID(0)` clears without a
    /// reset (a reset also drops the connection's prepared statements).
    pub fn only_insert_id(&self) -> bool {
        self.insert_id && !self.diagnostics && !self.row_count
    }

    /// The connection was reset (COM_RESET_CONNECTION), or its insert id cleared when that was
    /// all: nothing of the session is left on it.
    pub fn reset_done(&mut self) {
        self.diagnostics = false;
        self.row_count = false;
        self.insert_id = false;
    }

    /// A statement packet as the relay forwards it (`payload` command byte first, at most
    /// [`TEXT_LIMIT`] of it). Returns the reason when this pins the session.
    pub fn statement(&mut self, command: u8, payload: &[u8]) -> Option<Reason> {
        if command == cmd::INIT_DB {
            self.in_flight += 1;
            let name = payload.get(1..).unwrap_or_default();
            if self.login_schema {
                self.replay_later(Step::InitDb(name.into()));
            }
            return None;
        }
        if command == cmd::STMT_SEND_LONG_DATA {
            return self.pin(Some(Reason::LongData));
        }
        let text = payload.get(1..).unwrap_or_default();
        // What was kept of a longer statement is its start: it may end anyhow.
        let reason = if payload.len() >= TEXT_LIMIT {
            Some(Reason::LongStatement)
        } else {
            pins_for(text, self.dialect).map(Reason::Statement)
        };
        self.role_changed |= may_change_role(reason, text);
        if command == cmd::STMT_PREPARE {
            // Its executes run this text: what it would leave as a query, they leave (pinned
            // now, as the prepare cannot say which execute will run it; a setting is not
            // replayed from a prepared statement).
            self.schema_moved |= matches!(
                reason,
                Some(
                    Reason::LongStatement
                        | Reason::Statement(Pin::Schema | Pin::MultiStatement | Pin::Unknown)
                )
            );
            return self.pin(reason);
        }
        if command != cmd::QUERY {
            return None;
        }
        self.in_flight += 1;
        self.reading_diagnostics =
            self.in_flight == 1 && self.keep_once && reason.is_none() && reads_diagnostics(text);
        let setting = match reason {
            Some(Reason::Statement(Pin::SessionVariable)) => true,
            Some(Reason::Statement(Pin::Schema)) => self.login_schema,
            _ => false,
        };
        if setting && replayable(text) && self.replay_later(Step::Query(text.into())) {
            return None;
        }
        self.schema_moved |= matches!(
            reason,
            Some(
                Reason::LongStatement
                    | Reason::Statement(Pin::Schema | Pin::MultiStatement | Pin::Unknown)
            )
        );
        self.pin(reason)
    }

    /// Takes a setting as replayable if it is the only statement in flight, nothing pins yet
    /// and the state stays small; false otherwise (it pins instead).
    fn replay_later(&mut self, step: Step) -> bool {
        let len = match &step {
            Step::Query(t) | Step::InitDb(t) => t.len(),
        };
        let fits = self.state.len() < MAX_STEPS && self.state_bytes + len <= MAX_STATE_BYTES;
        if self.pinned.is_some() || self.pending.is_some() || self.in_flight != 1 || !fits {
            return false;
        }
        self.pending = Some(step);
        true
    }

    /// Whether the session's connection, pinned, can be brought back to its key's login state
    /// when the session ends (COM_RESET_CONNECTION, then COM_INIT_DB of the login schema, if it
    /// had one). Not after COM_CHANGE_USER, nor when it had no login schema and may have left
    /// it (no command goes back to none).
    pub fn recyclable(&self, login_schema: &str) -> bool {
        let stranded = login_schema.is_empty() && self.schema_moved;
        !self.user_changed && !stranded
    }

    /// Whether the server said autocommit is off in its last answer.
    pub fn autocommit_off(&self) -> bool {
        self.autocommit_off
    }

    /// Whether the server says a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Whether the session may have changed its current role (see `role_changed`).
    pub fn role_changed(&self) -> bool {
        self.role_changed
    }

    /// The one COM_QUERY in flight was lost with its server before any answer, and will be
    /// sent again elsewhere (a read only, see `crate::wire::sql::retryable_read`): as if it
    /// had not been sent.
    pub fn forget_unanswered(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.pending = None;
    }

    /// A command answered in full. Returns the reason when this pins the session.
    pub fn completed(&mut self, c: &Completed) -> Option<Reason> {
        let setting = if matches!(c.command, cmd::QUERY | cmd::INIT_DB) {
            self.in_flight = self.in_flight.saturating_sub(1);
            self.pending.take()
        } else {
            None
        };
        if let Some(step) = setting {
            // A setting the server took is part of the session's state from now on (one it
            // refused changed nothing). The state-changed flag it raises is this setting's.
            if !c.error {
                self.state_bytes += match &step {
                    Step::Query(t) | Step::InitDb(t) => t.len(),
                };
                Arc::make_mut(&mut self.state).push(step);
            }
            self.after(c);
            return None;
        }
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
            cmd::STMT_PREPARE if !c.error && !self.shared_statements => {
                Some(Reason::PreparedStatement)
            }
            cmd::STMT_PREPARE => None,
            cmd::CHANGE_USER => {
                self.user_changed = true;
                Some(Reason::ChangeUser)
            }
            cmd::INIT_DB => {
                self.schema_moved = true;
                Some(Reason::InitDb)
            }
            // An empty packet (no command byte) or COM_SLEEP, which the server refuses (ERR
            // 1047) changing nothing but its diagnostics, as for a COM_PING it refused.
            cmd::SLEEP if c.error => None,
            cmd::SET_OPTION => Some(Reason::SetOption),
            cmd::RESET_CONNECTION => Some(Reason::ResetConnection),
            _ => Some(Reason::Command),
        };
        if let Some(end) = c.end {
            if end.status & SERVER_STATUS_CURSOR_EXISTS != 0 {
                reason = reason.or(Some(Reason::Cursor));
            }
            if end.status & SERVER_SESSION_STATE_CHANGED != 0 {
                reason = reason.or(Some(Reason::StateChanged));
            }
        }
        self.after(c);
        self.pin(reason)
    }

    /// What every answer says of the transaction and of what the next command may read.
    fn after(&mut self, c: &Completed) {
        if std::mem::take(&mut self.reading_diagnostics) && c.command == cmd::QUERY && !c.error {
            // The area it read is still there for the next command (`SHOW COUNT(*) ERRORS`,
            // then `SHOW ERRORS`); it raised nothing of its own.
            self.diagnostics = true;
            return;
        }
        match c.end {
            Some(end) => {
                self.in_transaction = end.status & SERVER_STATUS_IN_TRANS != 0;
                self.autocommit_off = end.status & SERVER_STATUS_AUTOCOMMIT == 0;
                self.keep_once = end.warnings > 0 || end.insert_id > 0 || c.affected > 0;
                self.diagnostics |= end.warnings > 0;
                self.insert_id |= end.insert_id > 0;
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
    }

    fn pin(&mut self, reason: Option<Reason>) -> Option<Reason> {
        if self.pinned.is_some() {
            return None;
        }
        self.pinned = reason;
        reason
    }
}

/// Whether a statement that pins for `reason` may have changed the session's current role
/// (see `Holding::role_changed`). A `SET` is looked at for the word, in any case, anywhere.
fn may_change_role(reason: Option<Reason>, text: &[u8]) -> bool {
    match reason {
        Some(Reason::LongStatement) => true,
        Some(Reason::Statement(pin)) => match pin {
            Pin::Function | Pin::Call | Pin::Prepare | Pin::MultiStatement | Pin::Unknown => true,
            Pin::SessionVariable => text.windows(4).any(|w| w.eq_ignore_ascii_case(b"ROLE")),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests;
