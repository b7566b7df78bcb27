//! The PROXY protocol header written first on a backend connection (encoded by
//! `crate::wire::protocol::proxy_out`): on a session's behalf with its client's addresses, or on the
//! proxy's own behalf (a health check) with the connection's own.

use std::io;
use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;

use super::BackendStream;
use crate::wire::protocol::proxy_out::{encode, Version};

impl BackendStream {
    /// Writes the header saying the connection is from `addrs.0` to `addrs.1` (None: the
    /// proxy's own, v2 LOCAL or v1 UNKNOWN). Written before the greeting is read: servers read
    /// it in place of the client's first packet, and one sent now costs no round trip.
    pub async fn send_proxy_header(
        &mut self,
        version: Version,
        addrs: Option<(SocketAddr, SocketAddr)>,
    ) -> io::Result<()> {
        self.write_all(encode(version, addrs).as_bytes()).await
    }

    /// This connection's own addresses as a header names them: local as source, the backend
    /// as destination. None for a unix socket, which has no IP addresses.
    pub fn own_addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        match self {
            Self::Tcp(s) => Some((s.local_addr().ok()?, s.peer_addr().ok()?)),
            Self::Unix(_) => None,
        }
    }
}
