//! The server greeting and the client's first packet: read them, and clear the capability bits the
//! proxy does not support yet *in place* in the bytes being relayed.
//!
//! The handshake is forwarded byte-for-byte, never re-serialized: `mysql_common` drops capability
//! bits it does not know (0.38 knows all 32 MySQL bits but only MariaDB's extended bits 0..=5), so a
//! rebuilt packet would change what the two ends agree on. Patching therefore needs byte offsets,
//! which this module computes itself.
//!
//! Both packets are walked by hand rather than with `mysql_common::packets`: the offsets are needed
//! anyway, 0.38's `HandshakePacket` overflows an `i8` (a panic in debug builds) when the
//! auth-plugin-data length byte is 0x80..=0x87 and rejects greetings carrying status bits it does
//! not know, and its `HandshakeResponse` reads 0xFB/0xFF length prefixes as 0 and keeps connect
//! attributes in a `HashMap` (order lost). One walk per packet gives every field the proxy and the
//! health monitor need, so nothing is parsed twice.
//!
//! Every function takes a payload without its 4-byte packet header, returns an error on anything
//! short or malformed, and leaves the bytes untouched when it fails.
//!
//! The greeting's fields and patches are in `greeting.rs`, the client's first packet's in
//! `client.rs`, the bounds-checked cursor and capability-bit patcher both use in `bytes.rs`, the
//! packets a deferred connect writes itself in `deferred.rs`.

use std::fmt;

use crate::wire::protocol::caps::{self, Negotiated};

mod bytes;
mod client;
mod deferred;
mod greeting;

pub use client::{
    auth_answer, parse_client_first, patch_client_first, patch_client_first_with, set_client_bits,
    ssl_request_for,
};
pub use deferred::{nonce_from, response_for_backend, set_greeting_scramble, DEFERRED_PLUGIN};
pub use greeting::{
    greeting_capabilities, greeting_scramble, offer_in_greeting, parse_greeting, patch_greeting,
    patch_greeting_with, set_greeting_connection_id,
};

/// Which handshake packet an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    Greeting,
    ClientResponse,
}

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Packet::Greeting => "server greeting",
            Packet::ClientResponse => "client handshake response",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("{packet} is truncated: {what} is missing or cut short")]
    Truncated { packet: Packet, what: &'static str },
    #[error("server greeting has protocol version {0}, expected 10")]
    NotProtocol10(u8),
    /// The backend refused the connection before greeting (e.g. 1040, host blocked).
    #[error("server sent ERR {code} instead of a greeting: {message}")]
    ServerError { code: u16, message: String },
    #[error(
        "client handshake response lacks CLIENT_PROTOCOL_41: clients older than MySQL 4.1 are not supported"
    )]
    NotProtocol41,
    #[error("{packet} is malformed: {detail}")]
    Malformed { packet: Packet, detail: String },
}

/// A server's HandshakeV10, as read from the wire (every capability bit as sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub protocol_version: u8,
    pub server_version: String,
    pub connection_id: u32,
    /// Lower 16 bits | upper 16 bits << 16, exactly as sent.
    pub capabilities: u32,
    /// MariaDB's extended capabilities; 0 when `CLIENT_MYSQL` is set (the bytes are filler then).
    pub mariadb_capabilities: u32,
    pub charset: u8,
    pub status: u16,
    /// `None` without `CLIENT_PLUGIN_AUTH` or when the name is empty.
    pub auth_plugin: Option<String>,
    /// The version string contains "MariaDB" (MariaDB 10+ sends "5.5.5-10.11.x-MariaDB...").
    pub is_mariadb: bool,
}

/// The client's first packet: an SSLRequest (TLS follows) or the HandshakeResponse41 itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFirst {
    SslRequest { capabilities: u32 },
    Response(ClientResponse),
}

/// The fields of a HandshakeResponse41 the proxy needs. It deliberately has no auth-data field, so
/// neither `Debug` nor a careless log line can leak a scramble answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientResponse {
    pub capabilities: u32,
    /// 0 when the client's `CLIENT_MYSQL` bit is set.
    pub mariadb_capabilities: u32,
    pub max_packet_size: u32,
    pub charset: u8,
    pub user: String,
    pub database: Option<String>,
    /// `None` without `CLIENT_PLUGIN_AUTH` or when the name is empty.
    pub auth_plugin: Option<String>,
    /// Connect attributes in the order the client sent them.
    pub attributes: ConnectAttributes,
    /// The auth answer holds something beyond an empty password's lone NUL (its bytes are never
    /// kept): with a plugin that answers in clear, the response carries the password itself.
    pub answered: bool,
}

/// A HandshakeResponse's connect attributes, checked well formed and kept as sent: nothing in
/// the proxy reads them but a debug log line, so they become strings only when asked
/// ([`ConnectAttributes::pairs`]), not on every login.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectAttributes(Vec<u8>);

impl ConnectAttributes {
    /// Name/value pairs, in the client's order (bytes that are not UTF-8 replaced).
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut a = bytes::Reader::new(&self.0, Packet::ClientResponse);
        let mut pairs = Vec::new();
        // Checked when parsed: every pair is whole.
        while let (Ok(key), Ok(value)) = (a.lenenc_bytes("name"), a.lenenc_bytes("value")) {
            pairs.push((lossy(key), lossy(value)));
        }
        pairs
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for ConnectAttributes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.pairs()).finish()
    }
}

/// Capability bits to clear in both directions: always [`Strip::UNSUPPORTED`], plus whatever the
/// configuration turns off (e.g. `CLIENT_LOCAL_FILES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strip {
    pub capabilities: u32,
    pub mariadb_capabilities: u32,
}

impl Strip {
    pub const UNSUPPORTED: Strip = Strip {
        capabilities: caps::UNSUPPORTED,
        mariadb_capabilities: caps::MARIADB_UNSUPPORTED,
    };

    /// Also clears `bits` of the standard capabilities.
    pub const fn and(self, bits: u32) -> Strip {
        Strip {
            capabilities: self.capabilities | bits,
            mariadb_capabilities: self.mariadb_capabilities,
        }
    }
}

/// backend greeting ∩ forwarded client response (mariadb caps only when both have CLIENT_MYSQL
/// clear, else 0).
pub fn negotiate(greeting: &Greeting, response: &ClientResponse) -> Negotiated {
    let both_mariadb = (greeting.capabilities | response.capabilities) & caps::CLIENT_MYSQL == 0;
    Negotiated {
        capabilities: greeting.capabilities & response.capabilities,
        mariadb_capabilities: if both_mariadb {
            greeting.mariadb_capabilities & response.mariadb_capabilities
        } else {
            0
        },
    }
}

fn mariadb_bits(capabilities: u32, raw: u32) -> u32 {
    if capabilities & caps::CLIENT_MYSQL == 0 {
        raw
    } else {
        0
    }
}

/// The bytes as a string, anything not UTF-8 replaced. Names are almost always valid UTF-8 (ASCII
/// most of all), which `from_utf8` checks a word at a time.
fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn non_empty_lossy(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| lossy(bytes))
}

fn truncated(packet: Packet, what: &'static str) -> HandshakeError {
    HandshakeError::Truncated { packet, what }
}

#[cfg(test)]
mod tests;
