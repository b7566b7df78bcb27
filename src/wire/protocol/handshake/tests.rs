//! Byte-fixture tests for the handshake packets: real captures from MariaDB 10.11 and its CLI,
//! packets laid out as the protocol documentation says (MySQL 8 has no server here), and
//! mysql_common as a second reader.

use super::*;
use crate::wire::protocol::caps::*;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{HandshakePacket, HandshakeResponse};
use mysql_common::proto::MyDeserialize;

/// A real MariaDB 10.11.19 greeting (captured with socat from `mariadbd`), header stripped.
const MARIADB_GREETING_HEX: &str =
    "0a352e352e352d31302e31312e31392d4d6172696144422d302b646562313275310005000000543e7558353f\
    7a6c00fef7080200ff81150000000000001d00000030454e36626b74265a73542b006d7973716c5f6e617469\
    76655f70617373776f726400";

/// The `mariadb` 10.11 CLI's HandshakeResponse to it (`-ubench -pbench sbtest`), header stripped.
const MARIADB_CLI_RESPONSE_HEX: &str =
    "8ca2bf000000100021000000000000000000000000000000000000001d00000062656e63680014ba8735c22c\
    fe4ffc7874f03b4d44640bd9157c27736274657374006d7973716c5f6e61746976655f70617373776f726400\
    7e035f6f73054c696e75780c5f636c69656e745f6e616d650a6c69626d617269616462045f70696404373336\
    340f5f636c69656e745f76657273696f6e06332e332e3230095f706c6174666f726d067838365f36340c7072\
    6f6772616d5f6e616d65056d7973716c0c5f7365727665725f686f7374093132372e302e302e31";

fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

pub(super) fn mariadb_greeting() -> Vec<u8> {
    unhex(MARIADB_GREETING_HEX)
}

fn mariadb_cli_response() -> Vec<u8> {
    unhex(MARIADB_CLI_RESPONSE_HEX)
}

/// A HandshakeV10 as the documented wire format lays it out. `mariadb_caps` goes in the last 4
/// reserved bytes whatever the CLIENT_MYSQL bit says (a MySQL server sends zeros there).
fn greeting(version: &str, capabilities: u32, mariadb_caps: u32, plugin: Option<&str>) -> Vec<u8> {
    let scramble = b"abcdefghijklmnopqrst";
    let mut p = vec![10];
    p.extend_from_slice(version.as_bytes());
    p.push(0);
    p.extend_from_slice(&0x0102_0304u32.to_le_bytes());
    p.extend_from_slice(&scramble[..8]);
    p.push(0);
    p.extend_from_slice(&(capabilities as u16).to_le_bytes());
    p.push(0xFF);
    p.extend_from_slice(&0x0002u16.to_le_bytes());
    p.extend_from_slice(&((capabilities >> 16) as u16).to_le_bytes());
    p.push(if plugin.is_some() { 21 } else { 0 });
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&mariadb_caps.to_le_bytes());
    if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        p.extend_from_slice(&scramble[8..]);
        p.push(0);
    }
    if let Some(name) = plugin {
        p.extend_from_slice(name.as_bytes());
        p.push(0);
    }
    p
}

/// MySQL 8.0-like: every bit but 29 (CLIENT_PROGRESS_OBSOLETE), CLIENT_MYSQL set.
fn mysql8_greeting() -> Vec<u8> {
    greeting("8.0.36", 0xDFFF_FFFF, 0, Some("caching_sha2_password"))
}

use crate::wire::protocol::codec::put_lenenc_bytes as lenenc;

struct Resp<'a> {
    caps: u32,
    mariadb_caps: u32,
    user: &'a str,
    auth: &'a [u8],
    db: Option<&'a str>,
    plugin: Option<&'a str>,
    attrs: &'a [(&'a str, &'a str)],
}

impl Resp<'_> {
    /// HandshakeResponse41 laid out as `caps` says (the flags decide the fields, not the options).
    fn build(&self) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&self.caps.to_le_bytes());
        p.extend_from_slice(&0x0100_0000u32.to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 19]);
        p.extend_from_slice(&self.mariadb_caps.to_le_bytes());
        p.extend_from_slice(self.user.as_bytes());
        p.push(0);
        if self.caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            lenenc(&mut p, self.auth);
        } else if self.caps & CLIENT_SECURE_CONNECTION != 0 {
            p.push(self.auth.len() as u8);
            p.extend_from_slice(self.auth);
        } else {
            p.extend_from_slice(self.auth);
            p.push(0);
        }
        if self.caps & CLIENT_CONNECT_WITH_DB != 0 {
            p.extend_from_slice(self.db.unwrap_or_default().as_bytes());
            p.push(0);
        }
        if self.caps & CLIENT_PLUGIN_AUTH != 0 {
            p.extend_from_slice(self.plugin.unwrap_or_default().as_bytes());
            p.push(0);
        }
        if self.caps & CLIENT_CONNECT_ATTRS != 0 {
            let mut block = Vec::new();
            for (k, v) in self.attrs {
                lenenc(&mut block, k.as_bytes());
                lenenc(&mut block, v.as_bytes());
            }
            lenenc(&mut p, &block);
        }
        p
    }
}

const BASE_CLIENT: u32 = CLIENT_PROTOCOL_41
    | CLIENT_SECURE_CONNECTION
    | CLIENT_TRANSACTIONS
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_DEPRECATE_EOF;

fn full_response() -> Resp<'static> {
    Resp {
        caps: BASE_CLIENT
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_PLUGIN_AUTH
            | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CLIENT_CONNECT_ATTRS
            | CLIENT_SSL
            | CLIENT_COMPRESS,
        mariadb_caps: MARIADB_CLIENT_PROGRESS | MARIADB_CLIENT_CACHE_METADATA,
        user: "app",
        auth: b"SECRETAUTH-0123456789",
        db: Some("shop"),
        plugin: Some("client_ed25519"),
        attrs: &[("_client_name", "libmariadb"), ("_os", "Linux"), ("a", "")],
    }
}

fn response_of(payload: &[u8]) -> ClientResponse {
    match parse_client_first(payload) {
        Ok(ClientFirst::Response(r)) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

fn is_truncated(e: &HandshakeError, expected: Packet) -> bool {
    matches!(e, HandshakeError::Truncated { packet, .. } if *packet == expected)
}

/// Bytes that differ between two equal-length buffers.
fn diff_positions(a: &[u8], b: &[u8]) -> Vec<usize> {
    assert_eq!(a.len(), b.len());
    (0..a.len()).filter(|&i| a[i] != b[i]).collect()
}

mod client;
mod greeting;
mod hostile;
