//! The byte streams of a leg: a session side's socket with TLS and compression over it
//! (`leg`), connecting to a backend and reading handshakes off it (`stream`, with the OS identity
//! unix-socket connects are made under), and the TLS material each leg uses (`tls`). Beside them,
//! the one HTTP/1.1 client (`http_client`), for the few requests mysql-lb makes to an admin
//! endpoint (a peer's, or the one `top` watches).
//!
//! Whatever runs over a leg sees plain MySQL packets; this wing knows nothing of sessions,
//! pools or backends' state.

pub mod http_client;
pub mod leg;
pub mod stream;
pub mod tls;
