//! How the proxy's own client fails: the step it was at ([`Stage`]) and the error that says which
//! step failed and why. The texts are what users read in the backend status and the "down" log
//! line of health checks, in a KILL's error and in replay's report: their wording (the login
//! stage is "login as monitor") predates KILL and replay using the client, and is kept.

use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::net::stream::PacketReadError;
use crate::wire::protocol::handshake::HandshakeError;

/// Where a connection of the proxy's own was when it failed or ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Connect,
    Greeting,
    Tls,
    Login,
    /// A statement, named by its text (or by its verb, for a KILL).
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

/// Why a connection of the proxy's own failed. Each variant is one step: what the server did
/// (refused, sent something unexpected, went silent) or what it lacks, with the cause.
#[derive(Debug, Error)]
pub enum Error {
    /// The TCP or unix-socket connect, or the PROXY protocol header after it.
    #[error("connect: {0}")]
    Connect(std::io::Error),
    /// The server's greeting does not parse.
    #[error("greeting: {0}")]
    Greeting(HandshakeError),
    /// TLS was required and is not possible: the server does not offer it, or sent bytes first.
    #[error("TLS: {0}")]
    Tls(&'static str),
    /// The caller's deadline passed while at `stage`.
    #[error("{stage}: no answer within {}", humantime::format_duration(*after))]
    TimedOut { stage: Stage, after: Duration },
    /// Reading or writing failed at `stage` (closed, reset, a packet over the bound).
    #[error("{stage}: {source}")]
    Io {
        stage: Stage,
        source: PacketReadError,
    },
    /// The server lacks a capability the login needs.
    #[error("greeting: server lacks {0}, which the monitor needs")]
    OldServer(&'static str),
    /// The server refused the login.
    #[error("login as monitor: {code} {message}")]
    Denied { code: u16, message: String },
    /// The account's auth plugin is not mysql_native_password, the only one the client speaks.
    #[error(
        "login as monitor: the account uses {0}; the monitor user must use mysql_native_password"
    )]
    UnsupportedPlugin(String),
    /// A packet that has no place at `stage`.
    #[error("{stage}: unexpected packet (first byte {first:#04x})")]
    Unexpected { stage: Stage, first: u8 },
    /// The server answered `query` with an error.
    #[error("{query}: {code} {message}")]
    QueryFailed {
        query: &'static str,
        code: u16,
        message: String,
    },
    /// `query`'s result set is not one the client reads (malformed, or over its bounds).
    #[error("{query}: malformed result: {detail}")]
    BadResult { query: &'static str, detail: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_stage_then_cause() {
        let e = Error::TimedOut {
            stage: Stage::Greeting,
            after: Duration::from_millis(500),
        };
        assert_eq!(e.to_string(), "greeting: no answer within 500ms");
        let e = Error::Denied {
            code: 1045,
            message: "Access denied for user 'mon'@'localhost' (using password: YES)".into(),
        };
        assert!(e
            .to_string()
            .starts_with("login as monitor: 1045 Access denied"));
    }
}
