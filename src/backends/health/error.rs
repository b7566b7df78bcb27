//! How a health check fails: as the proxy's own client fails (`crate::backends::client::Error`,
//! which names the stage), or because the server, though it answered, is a replica unfit to
//! serve. The message is what the backend status and the "down" log line show. Apart from
//! `check.rs`, which runs the stages, so that judging replication (`replication.rs`) can name
//! its errors without depending on the check that calls it.

use std::time::Duration;

use thiserror::Error;

use crate::backends::client;

/// The query that reads replication status on servers without `SHOW REPLICA STATUS`.
pub(super) const SHOW_SLAVE_STATUS: &str = "SHOW SLAVE STATUS";

/// Why a check failed.
#[derive(Debug, Error)]
pub enum CheckError {
    /// Connecting, logging in or a query failed, or the check ran out of time at a stage.
    #[error(transparent)]
    Client(#[from] client::Error),
    /// The replica status has no column the check needs, or a value that does not parse.
    #[error("{SHOW_SLAVE_STATUS}: malformed result: {detail}")]
    BadStatus { detail: String },
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
