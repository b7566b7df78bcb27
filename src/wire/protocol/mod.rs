//! Sans-IO MySQL protocol pieces: framing, compressed-protocol frames, handshake parsing and
//! patching, response tracking, auth packets that carry a password in clear, ERR packets (the proxy's own, and reading servers'), the health
//! monitor's login and the small text result sets it reads, and PROXY protocol headers: those
//! sent to backends and those read from an L4 load balancer. Nothing here touches a socket, so
//! all of it is tested with byte fixtures.

pub mod caps;
pub mod cleartext;
pub mod cmd;
pub mod codec;
pub mod compress;
pub mod compress_server;
pub mod errors;
pub mod handshake;
pub mod login;
pub mod proxy_in;
pub mod proxy_out;
pub mod response;
pub mod resultset;
pub mod serving;
pub mod statement;
