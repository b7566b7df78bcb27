//! Health checks: one check of one backend, and the parts it is made of.
//!
//! A check is a short client session of its own rather than a TCP probe, because a server that
//! accepts connections can still be unusable: it may never greet (hung), refuse logins, or be a
//! replica whose replication stopped or fell behind. It runs over the proxy's own client
//! (`crate::backends::client`: mysql_native_password login, text queries, a small bounded
//! result-set reader), whose errors it reports as they are; what it adds is the judgement of a
//! replica.
//!
//! One check ([`check_backend`] and its stages) is `check.rs`; its errors `error.rs`; judging
//! `SHOW REPLICA STATUS` is `replication.rs`. The schedule (a loop per backend, rise/fall,
//! rounds that follow reloads) is a task of `crate::control::tasks`.

mod check;
mod error;
mod replication;

pub use check::{check_backend, check_backend_with, CheckOk};
pub use error::CheckError;
