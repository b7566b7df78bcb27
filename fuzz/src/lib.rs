//! Fuzz targets' shared oracles for mysql-lb: see [`checks`]. The targets in `fuzz_targets/` are
//! one line each, so a crash reproduces the same way under `cargo fuzz run`, under
//! `tests/properties.rs` (which includes `checks.rs` too), and in a debugger.

pub mod checks;
pub mod gtid_pos;
pub mod pooled_front;
pub mod proxy_in;
pub mod query_rules;
pub mod sql_digest;
pub mod tls_records;
