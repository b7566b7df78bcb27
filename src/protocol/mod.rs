//! Sans-IO MySQL protocol pieces: framing, handshake parsing and patching, response tracking and the
//! proxy's own ERR packets. Nothing here touches a socket, so all of it is tested with byte fixtures.

pub mod caps;
pub mod codec;
pub mod errors;
pub mod handshake;
pub mod response;
