//! Health checks: one check of one backend, and the parts it is made of.
//!
//! A check is a short client session of its own rather than a TCP probe, because a server that
//! accepts connections can still be unusable: it may never greet (hung), refuse logins, or be a
//! replica whose replication stopped or fell behind. The monitor speaks just enough of the
//! protocol for that — mysql_native_password login, text queries, a small bounded result-set
//! reader — so no client library (and no connection pool) sits in the proxy. Every byte read is
//! bounded: a check never trusts a length or a row count from the server.
//!
//! One check ([`check_backend`], its stages and errors) is `check.rs`; the client side of the
//! connection it runs over is `conn.rs`; judging `SHOW REPLICA STATUS` is `replication.rs`. The
//! schedule (a loop per backend, rise/fall, rounds that follow reloads) is a task of
//! `crate::control::tasks`.

mod check;
mod conn;
mod error;
mod replication;

pub(crate) use check::greeting_of;
pub use check::{check_backend, check_backend_with, CheckError, CheckOk, OwnConnectOptions, Stage};
pub(crate) use conn::open as open_connection;
