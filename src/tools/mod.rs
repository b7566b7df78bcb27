//! The subcommands that are clients of a running proxy or its captures, not part of it:
//! `mysql-lb top` (the admin endpoint on a terminal) and `mysql-lb replay` (a capture run
//! against a server).
//!
//! They use the wire and the proxy's own client, never its runtime.

pub mod replay;
pub mod top;
