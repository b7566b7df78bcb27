//! The proxy's own MySQL client: the connections mysql-lb opens to a backend on its own behalf
//! (health checks, KILLs run on another backend, the identity check, replay), and the way it ends
//! a backend handshake without counting as a connect error of the proxy's address (`decline`).
//!
//! It speaks just enough of the protocol for those: connect as a session would (PROXY protocol
//! header, TLS), a mysql_native_password login, text statements and a small bounded result-set
//! reader, so no client library (and no connection pool of its own) sits in the proxy. Every
//! byte read is bounded: the client never trusts a length or a row count from the server. Its
//! failures are one [`Error`] that names the [`Stage`] (connect, greeting, TLS, login, a query)
//! and the cause, so a health check, a KILL and replay report them alike.
//!
//! The connection is `conn.rs`; its errors `error.rs`; a handshake given up, `decline.rs`.

mod conn;
pub mod decline;
mod error;

pub use conn::OwnConnectOptions;
pub(crate) use conn::{greet, greeting_of, open, Conn, ResultSet};
pub use error::{Error, Stage};
