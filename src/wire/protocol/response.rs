//! Command-phase tracking: which command each response answers and where it ends.
//!
//! Where a response ends depends on the command that asked for it (one rule per kind of command,
//! in `rules.rs`: generic result sets that end on an OK/EOF without SERVER_MORE_RESULTS_EXISTS,
//! cursors, prepare, one-packet replies, LOCAL INFILE, change-user's auth exchange, binlog
//! streams), and clients may pipeline, so the [`Tracker`] (`tracker.rs`) keeps a FIFO of
//! outstanding commands. It sees both directions of one session as the relay forwards them,
//! classifies each logical packet from its first bytes only, and yields one [`Completed`] per
//! finished command for latency metrics. The only bytes held back are a short command that may
//! still turn out to be a KILL (see [`may_become_kill`]), so the KILL mapping sees it whole, and,
//! in a transaction-mode pool, a prepared-statement command and what follows it (see
//! [`Tracker::pause_statements`]).
//! Violations it is sure of (sequence ids out of order, oversized packets, responses that cannot
//! be parsed) are errors that say which side sent them; the relay ends the session on them.
//! This file holds what both halves and the relay share: command bytes, what a scan reports, the
//! errors.

use std::time::Duration;

pub use super::statement::{
    is_sql_space, may_be_kill, may_become_kill, statement_start, CutInComment, MAX_KILL_PACKET,
};

use thiserror::Error;

use super::cleartext::Exposure;
use super::codec::FrameError;

mod rules;
mod tracker;

pub use tracker::{StatementAt, Tracker};

pub use super::cmd;

/// The bounded set of command kinds metrics are labelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    Query,
    Prepare,
    Execute,
    Other,
}

impl CommandKind {
    pub fn of(command: u8) -> Self {
        match command {
            cmd::QUERY => Self::Query,
            cmd::STMT_PREPARE => Self::Prepare,
            cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE | cmd::STMT_FETCH => Self::Execute,
            _ => Self::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Prepare => "prepare",
            Self::Execute => "execute",
            Self::Other => "other",
        }
    }

    pub const ALL: [CommandKind; 4] = [Self::Query, Self::Prepare, Self::Execute, Self::Other];
}

/// One command answered in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completed {
    pub command: u8,
    /// From the last byte written to the backend to the end of the response.
    pub latency: Duration,
    /// From the last byte written to the first response packet.
    pub first_byte: Duration,
    /// Result-set rows sent (text or binary), over every result of the response.
    pub rows: u64,
    /// Affected rows of the OK packets that ended its results, added up.
    pub affected: u64,
    /// The response was (or ended with) an ERR packet.
    pub error: bool,
    /// That ERR packet's error code (0 if none).
    pub error_code: u16,
    /// The statement id of a successful COM_STMT_PREPARE.
    pub prepared: Option<u32>,
    /// When the response ended (None only in hand-made values).
    pub at: Option<std::time::Instant>,
    /// What the relay's observer tagged the command with when it was sent (see
    /// [`Tracker::tag`]); 0 if nothing did.
    pub tag: u64,
    /// What the OK or EOF packet that ended the response says of the session; None when it
    /// ended otherwise (an ERR, a prepared statement's metadata, COM_STATISTICS' text).
    pub end: Option<EndStatus>,
}

/// The server's word on its session at the end of a response: status flags (in a transaction,
/// session state changed, a cursor open), warnings, and the last insert id of an OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndStatus {
    pub status: u16,
    pub warnings: u16,
    pub insert_id: u64,
}

impl Completed {
    pub fn kind(&self) -> CommandKind {
        CommandKind::of(self.command)
    }
}

/// What the client's bytes contained, for the relay to act on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientScan {
    /// A COM_QUIT was seen: the client is leaving politely.
    pub quit: bool,
    /// Commands added to the queue by this read.
    pub commands: usize,
    /// Bytes at the end of the buffer to hold back: the start of a short command that may be a
    /// KILL, not whole yet. The tracker has not counted them; the caller forwards what precedes
    /// them, keeps them, and passes them again at the front of the next buffer.
    pub held: usize,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TrackError {
    #[error("client: {0}")]
    ClientFrame(FrameError),
    #[error("backend: {0}")]
    BackendFrame(FrameError),
    #[error("client sent a packet with sequence id {got} where {expected} was expected")]
    ClientOutOfOrder {
        expected: u8,
        got: u8,
        start: Option<usize>,
    },
    #[error("backend sent a packet with sequence id {got} where {expected} was expected")]
    BackendOutOfOrder {
        expected: u8,
        got: u8,
        start: Option<usize>,
    },
    #[error("backend sent a malformed {what} (first byte {first:#04x})")]
    BackendMalformed {
        what: &'static str,
        first: u8,
        start: Option<usize>,
    },
    #[error("client pipelined more than {max} commands without reading a response")]
    TooManyPending { max: usize, start: Option<usize> },
    #[error(
        "{exposure} during COM_CHANGE_USER, and the backend leg is plaintext TCP leaving this host"
    )]
    CleartextPassword {
        exposure: Exposure,
        start: Option<usize>,
    },
    /// A session whose statements are guarded (on a replica, `Tracker::guard_statements`)
    /// sent one too long to read whole before forwarding it.
    #[error(
        "client sent a statement of {len} bytes to a backend that takes no writes: longer than \
         the {max} bytes the proxy reads whole to keep writes off it",
        max = tracker::MAX_GUARDED
    )]
    TooLongToGuard { len: usize, start: Option<usize> },
    /// Not a failure: the client scan stopped before a prepared-statement command (see
    /// [`Tracker::pause_statements`]); never leaves the tracker.
    #[error("client scan paused before a statement command")]
    Paused { start: usize },
}

impl TrackError {
    /// Offset in the scanned buffer where the offending packet began, if it began there.
    pub fn start(&self) -> Option<usize> {
        match *self {
            Self::ClientFrame(e) | Self::BackendFrame(e) => match e {
                FrameError::TooLarge { start, .. } | FrameError::ChunkOutOfOrder { start, .. } => {
                    start
                }
            },
            Self::ClientOutOfOrder { start, .. }
            | Self::BackendOutOfOrder { start, .. }
            | Self::BackendMalformed { start, .. }
            | Self::TooManyPending { start, .. }
            | Self::CleartextPassword { start, .. }
            | Self::TooLongToGuard { start, .. } => start,
            Self::Paused { start } => Some(start),
        }
    }

    /// True when the client's bytes were at fault.
    pub fn is_client(&self) -> bool {
        match self {
            Self::ClientFrame(_)
            | Self::ClientOutOfOrder { .. }
            | Self::TooManyPending { .. }
            | Self::TooLongToGuard { .. } => true,
            Self::CleartextPassword { exposure, .. } => exposure.from_client(),
            _ => false,
        }
    }
}

/// Generous: pipelining clients send a handful; this only bounds a misbehaving one.
pub const MAX_PENDING: usize = 4096;

impl From<FrameError> for TrackError {
    fn from(e: FrameError) -> Self {
        // The scanner closures of each direction map their own; this one serves the backend side.
        TrackError::BackendFrame(e)
    }
}

#[cfg(test)]
mod tests;
