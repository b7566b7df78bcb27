//! The sans-IO wire: the MySQL protocol (framing, handshake, where each response ends, the
//! proxy's own packets) and SQL text as the server reads it (lexer, digests, statement kinds,
//! what a statement leaves on a connection).
//!
//! Plain functions over bytes, unit-tested with byte fixtures, fuzzed and property-tested. The
//! wing imports nothing else of the crate (`scripts/module_cycles.py --wings` checks it in CI), so
//! every other wing may use it and it could be a crate of its own.

pub mod protocol;
pub mod sql;
