//! Running and steering the proxy from outside its sessions: the admin HTTP endpoint
//! (`admin`), the SQL admin port (`admin_sql`), the long-running loops over the proxy state (`tasks`), live reload (`reload`) and
//! the start-up check of the unix-socket identity (`identity_check`).
//!
//! The top floor below `lib.rs`: it reads and swaps `ProxyState`; nothing below imports it.

pub mod admin;
pub mod admin_sql;
pub mod identity_check;
pub mod reload;
pub mod tasks;
