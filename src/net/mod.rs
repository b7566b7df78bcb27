//! The byte streams of a leg: a session side's socket with TLS and compression over it
//! (`leg`), connecting to a backend and reading handshakes off it (`stream`, with the OS identity
//! unix-socket connects are made under), and the TLS material each leg uses (`tls`).
//!
//! Whatever runs over a leg sees plain MySQL packets; this wing knows nothing of sessions,
//! pools or backends' state.

pub mod leg;
pub mod stream;
pub mod tls;
