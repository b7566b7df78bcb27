//! How a health check fails: the stage it was in, and the error that says which stage failed and
//! why (the message the backend status and the "down" log line show). Apart from `check.rs`,
//! which runs the stages, so that judging replication (`replication.rs`) can name its errors
//! without depending on the check that calls it.

use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::net::stream::PacketReadError;
use crate::wire::protocol::handshake::HandshakeError;

/// The query that reads replication status on servers without `SHOW REPLICA STATUS`.
pub(super) const SHOW_SLAVE_STATUS: &str = "SHOW SLAVE STATUS";

/// Where a check was when it failed or ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Connect,
    Greeting,
    Tls,
    Login,
    Query(&'static str),
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Connect => f.write_str("connect"),
            Stage::Greeting => f.write_str("greeting"),
            Stage::Tls => f.write_str("TLS handshake"),
            Stage::Login => f.write_str("login as monitor"),
            Stage::Query(q) => f.write_str(q),
        }
    }
}

/// Why a check failed; the message is what the backend status and the "down" log line show.
#[derive(Debug, Error)]
pub enum CheckError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("greeting: {0}")]
    Greeting(HandshakeError),
    #[error("TLS: {0}")]
    Tls(&'static str),
    #[error("{stage}: no answer within {}", humantime::format_duration(*after))]
    TimedOut { stage: Stage, after: Duration },
    #[error("{stage}: {source}")]
    Io {
        stage: Stage,
        source: PacketReadError,
    },
    #[error("greeting: server lacks {0}, which the monitor needs")]
    OldServer(&'static str),
    #[error("login as monitor: {code} {message}")]
    Denied { code: u16, message: String },
    #[error(
        "login as monitor: the account uses {0}; the monitor user must use mysql_native_password"
    )]
    UnsupportedPlugin(String),
    #[error("{stage}: unexpected packet (first byte {first:#04x})")]
    Unexpected { stage: Stage, first: u8 },
    #[error("{query}: {code} {message}")]
    QueryFailed {
        query: &'static str,
        code: u16,
        message: String,
    },
    #[error("{query}: malformed result: {detail}")]
    BadResult { query: &'static str, detail: String },
    #[error("replication stopped ({column}={value})")]
    ReplicationStopped { column: String, value: String },
    #[error("replication lag unknown ({column} is NULL)")]
    LagUnknown { column: String },
    #[error(
        "replication lag {} exceeds {}",
        humantime::format_duration(*lag),
        humantime::format_duration(*limit)
    )]
    LagTooHigh { lag: Duration, limit: Duration },
}
