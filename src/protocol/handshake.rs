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

use std::fmt;
use std::ops::Range;

use crate::protocol::caps::{self, Negotiated};
use crate::protocol::codec::{lenenc_bytes, LenencError};
use crate::protocol::errors::ServerErr;

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
    pub attributes: Vec<(String, String)>,
    /// The auth answer holds something beyond an empty password's lone NUL (its bytes are never
    /// kept): with a plugin that answers in clear, the response carries the password itself.
    pub answered: bool,
}

mod deferred;
pub use deferred::{nonce_from, response_for_backend, set_greeting_scramble, DEFERRED_PLUGIN};

// Greeting layout after the NUL-terminated server version: offsets into the fixed 31-byte block.
const G_CONNECTION_ID: usize = 0;
/// Auth-plugin-data part 1: the first 8 bytes of the scramble.
const G_SCRAMBLE_1: usize = 4;
const G_SCRAMBLE_1_LEN: usize = 8;
const G_CAPS_LOWER: usize = 13;
const G_CAPS_UPPER: usize = 18;
/// The last 4 of the 10 reserved bytes.
const G_MARIADB_CAPS: usize = 27;
const G_FIXED_LEN: usize = 31;

// HandshakeResponse41 / SSLRequest layout: a fixed 32-byte header.
const R_CAPS: usize = 0;
const R_MARIADB_CAPS: usize = 28;
const R_HEADER_LEN: usize = 32;

pub fn parse_greeting(payload: &[u8]) -> Result<Greeting, HandshakeError> {
    read_greeting(payload).map(|(greeting, _)| greeting)
}

/// Clears caps::UNSUPPORTED in the capability bytes (lower 2 bytes after filler, upper 2 bytes after
/// status) and caps::MARIADB_UNSUPPORTED in the MariaDB extended caps (the last 4 of the 10 reserved
/// bytes, only when CLIENT_MYSQL (bit 0) is clear). Returns the parsed Greeting as it is AFTER
/// patching. On error the payload is left untouched.
pub fn patch_greeting(payload: &mut [u8]) -> Result<Greeting, HandshakeError> {
    patch_greeting_with(payload, Strip::UNSUPPORTED)
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

/// As [`patch_greeting`], clearing the bits of `strip`.
pub fn patch_greeting_with(payload: &mut [u8], strip: Strip) -> Result<Greeting, HandshakeError> {
    let (mut greeting, layout) = read_greeting(payload)?;
    let fixed = layout.fixed;
    let g = Packet::Greeting;
    clear_bits(payload, fixed + G_CAPS_LOWER, 2, strip.capabilities, g)?;
    clear_bits(
        payload,
        fixed + G_CAPS_UPPER,
        2,
        strip.capabilities >> 16,
        g,
    )?;
    if greeting.capabilities & caps::CLIENT_MYSQL == 0 {
        clear_bits(
            payload,
            fixed + G_MARIADB_CAPS,
            4,
            strip.mariadb_capabilities,
            g,
        )?;
    }
    greeting.capabilities &= !strip.capabilities;
    greeting.mariadb_capabilities &= !strip.mariadb_capabilities;
    Ok(greeting)
}

/// Sets standard capability `bits` in a greeting: what the proxy itself offers on the client
/// leg (TLS, compression) whatever the backend offered.
pub fn offer_in_greeting(payload: &mut [u8], bits: u32) -> Result<(), HandshakeError> {
    let (_, layout) = read_greeting(payload)?;
    let g = Packet::Greeting;
    set_bits(payload, layout.fixed + G_CAPS_LOWER, 2, bits, g)?;
    set_bits(payload, layout.fixed + G_CAPS_UPPER, 2, bits >> 16, g)
}

/// Sets then clears standard capability bits of a client's SSLRequest or HandshakeResponse41:
/// what the backend leg asks for (TLS, compression) is decided apart from the client leg.
pub fn set_client_bits(payload: &mut [u8], set: u32, clear: u32) -> Result<(), HandshakeError> {
    client_capabilities(payload)?;
    let r = Packet::ClientResponse;
    set_bits(payload, R_CAPS, 4, set, r)?;
    clear_bits(payload, R_CAPS, 4, clear, r)
}

/// The SSLRequest that goes before `response` (a HandshakeResponse41 payload) on a leg that
/// switches to TLS: the response's first 32 bytes (capabilities, max packet size, character set,
/// filler and MariaDB's extended capabilities) with CLIENT_SSL set.
pub fn ssl_request_for(response: &[u8]) -> Result<[u8; R_HEADER_LEN], HandshakeError> {
    client_capabilities(response)?;
    let mut request = [0u8; R_HEADER_LEN];
    let head = response
        .get(..R_HEADER_LEN)
        .ok_or_else(|| truncated(Packet::ClientResponse, "fixed header"))?;
    request.copy_from_slice(head);
    set_bits(
        &mut request,
        R_CAPS,
        4,
        caps::CLIENT_SSL,
        Packet::ClientResponse,
    )?;
    Ok(request)
}

/// Overwrites the 4-byte connection id (for later use: proxy-unique ids). Returns the old id.
pub fn set_greeting_connection_id(payload: &mut [u8], id: u32) -> Result<u32, HandshakeError> {
    let (greeting, layout) = read_greeting(payload)?;
    let at = layout.fixed + G_CONNECTION_ID;
    let slot = payload
        .get_mut(at..at + 4)
        .ok_or_else(|| truncated(Packet::Greeting, "connection id"))?;
    slot.copy_from_slice(&id.to_le_bytes());
    Ok(greeting.connection_id)
}

/// SSLRequest = exactly 32 bytes with CLIENT_SSL set (mysql_common does not recognise it). A
/// response without CLIENT_PROTOCOL_41 is an error (HandshakeError::NotProtocol41).
pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst, HandshakeError> {
    let capabilities = client_capabilities(payload)?;
    if payload.len() == R_HEADER_LEN && capabilities & caps::CLIENT_SSL != 0 {
        return Ok(ClientFirst::SslRequest { capabilities });
    }
    parse_response(payload, capabilities).map(ClientFirst::Response)
}

/// Clears caps::UNSUPPORTED in bytes 0..4 and caps::MARIADB_UNSUPPORTED in bytes 28..32 (MariaDB
/// ext caps, only when the client's CLIENT_MYSQL bit is clear). Works for both SSLRequest and full
/// response. Errors (touching nothing) if the payload is shorter than 32 bytes or is not protocol 4.1,
/// where bytes 2..4 would not be capabilities at all. A patched SSLRequest no longer says SSL, so
/// until TLS lands the session should refuse an SSLRequest rather than forward it.
pub fn patch_client_first(payload: &mut [u8]) -> Result<(), HandshakeError> {
    patch_client_first_with(payload, Strip::UNSUPPORTED)
}

/// As [`patch_client_first`], clearing the bits of `strip`.
pub fn patch_client_first_with(payload: &mut [u8], strip: Strip) -> Result<(), HandshakeError> {
    let capabilities = client_capabilities(payload)?;
    let r = Packet::ClientResponse;
    clear_bits(payload, R_CAPS, 4, strip.capabilities, r)?;
    if capabilities & caps::CLIENT_MYSQL == 0 {
        clear_bits(payload, R_MARIADB_CAPS, 4, strip.mariadb_capabilities, r)?;
    }
    Ok(())
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

/// The scramble (nonce) a client's auth answer is computed from: auth-plugin-data part 1 and, with
/// `CLIENT_SECURE_CONNECTION`, part 2 without its trailing NUL. Errors as [`parse_greeting`] does.
pub fn greeting_scramble(payload: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let (_, layout) = read_greeting(payload)?;
    let part1_at = layout.fixed + G_SCRAMBLE_1;
    let part1 = payload
        .get(part1_at..part1_at + G_SCRAMBLE_1_LEN)
        .ok_or_else(|| truncated(Packet::Greeting, "auth-plugin-data part 1"))?;
    let part2 = payload
        .get(layout.scramble_2)
        .ok_or_else(|| truncated(Packet::Greeting, "auth-plugin-data part 2"))?;
    Ok([part1, part2.strip_suffix(&[0]).unwrap_or(part2)].concat())
}

/// Where a greeting's fields lie in its payload.
struct Layout {
    /// Start of the fixed 31-byte block after the server version.
    fixed: usize,
    /// Auth-plugin-data part 2 with its NUL (empty without `CLIENT_SECURE_CONNECTION`).
    scramble_2: Range<usize>,
}

/// Parses the greeting and says where its parts lie.
fn read_greeting(payload: &[u8]) -> Result<(Greeting, Layout), HandshakeError> {
    let mut r = Reader::new(payload, Packet::Greeting);
    let protocol_version = r.u8("protocol version")?;
    match protocol_version {
        10 => {}
        0xFF => return Err(server_error(payload)),
        other => return Err(HandshakeError::NotProtocol10(other)),
    }
    let version = r.nul_terminated("server version")?;
    let fixed_start = r.pos;
    let fixed = r.take(G_FIXED_LEN, "capability flags and reserved bytes")?;

    let mut f = Reader::new(fixed, Packet::Greeting);
    let connection_id = f.u32("connection id")?;
    f.take(8 + 1, "auth-plugin-data part 1")?;
    let caps_lower = f.u16("capability flags")?;
    let charset = f.u8("character set")?;
    let status = f.u16("status flags")?;
    let caps_upper = f.u16("capability flags")?;
    let auth_data_len = f.u8("auth-plugin-data length")?;
    f.take(6, "reserved bytes")?;
    let raw_mariadb_capabilities = f.u32("MariaDB capabilities")?;
    let capabilities = u32::from(caps_lower) | u32::from(caps_upper) << 16;

    let scramble_2_start = r.pos;
    if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
        // Part 2 of the scramble: max(13, total length - 8), NUL included.
        let len = usize::from(auth_data_len).saturating_sub(8).max(13);
        r.take(len, "auth-plugin-data part 2")?;
    }
    let scramble_2 = scramble_2_start..r.pos;
    let auth_plugin = if capabilities & caps::CLIENT_PLUGIN_AUTH != 0 {
        // Some MySQL versions omit the trailing NUL (MySQL bug #59453): accept both.
        non_empty_lossy(r.nul_terminated_or_rest())
    } else {
        None
    };

    let server_version = String::from_utf8_lossy(version).into_owned();
    let greeting = Greeting {
        protocol_version,
        is_mariadb: server_version.contains("MariaDB"),
        server_version,
        connection_id,
        capabilities,
        mariadb_capabilities: mariadb_bits(capabilities, raw_mariadb_capabilities),
        charset,
        status,
        auth_plugin,
    };
    let layout = Layout {
        fixed: fixed_start,
        scramble_2,
    };
    Ok((greeting, layout))
}

/// An ERR packet sent in place of a greeting (no SQLSTATE marker expected, accepted if present).
fn server_error(payload: &[u8]) -> HandshakeError {
    match ServerErr::parse(payload) {
        Some(ServerErr { code, message }) => HandshakeError::ServerError { code, message },
        None => truncated(Packet::Greeting, "ERR code"),
    }
}

/// The client's capability flags, once the packet is known to be a 4.1 packet with a full header.
fn client_capabilities(payload: &[u8]) -> Result<u32, HandshakeError> {
    let capabilities = Reader::new(payload, Packet::ClientResponse).u32("capability flags")?;
    if capabilities & caps::CLIENT_PROTOCOL_41 == 0 {
        return Err(HandshakeError::NotProtocol41);
    }
    if payload.len() < R_HEADER_LEN {
        return Err(truncated(Packet::ClientResponse, "fixed-length header"));
    }
    Ok(capabilities)
}

/// One walk over a HandshakeResponse41: every field the proxy needs, in wire order.
fn parse_response(payload: &[u8], capabilities: u32) -> Result<ClientResponse, HandshakeError> {
    let mut r = Reader::new(payload, Packet::ClientResponse);
    r.take(4, "capability flags")?;
    let max_packet_size = r.u32("max packet size")?;
    let charset = r.u8("character set")?;
    r.take(19, "filler")?;
    let raw_mariadb_capabilities = r.u32("MariaDB capabilities")?;
    let user = lossy(r.nul_terminated("user name")?);
    let answered = !matches!(skip_auth_data(&mut r, capabilities)?, [] | [0]);
    let database = if capabilities & caps::CLIENT_CONNECT_WITH_DB != 0 {
        Some(lossy(r.nul_terminated("database name")?))
    } else {
        None
    };
    let auth_plugin = if capabilities & caps::CLIENT_PLUGIN_AUTH != 0 {
        // Like the greeting's, the name may lack its NUL when nothing follows it.
        non_empty_lossy(r.nul_terminated_or_rest())
    } else {
        None
    };
    let attributes = if capabilities & caps::CLIENT_CONNECT_ATTRS != 0 {
        read_attributes(r.lenenc_bytes("connect attributes")?)?
    } else {
        Vec::new()
    };
    // Anything after (MySQL's zstd level byte) is not ours to judge.
    Ok(ClientResponse {
        capabilities,
        mariadb_capabilities: mariadb_bits(capabilities, raw_mariadb_capabilities),
        max_packet_size,
        charset,
        user,
        database,
        auth_plugin,
        attributes,
        answered,
    })
}

/// The auth answer, read past and never kept (see [`ClientResponse`]); its length form depends
/// on the flags.
fn skip_auth_data<'a>(r: &mut Reader<'a>, capabilities: u32) -> Result<&'a [u8], HandshakeError> {
    if capabilities & caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        r.lenenc_bytes("auth data")
    } else if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
        let len = r.u8("auth data length")?;
        r.take(usize::from(len), "auth data")
    } else {
        r.nul_terminated("auth data")
    }
}

/// The connect-attributes block: name/value pairs of length-encoded strings, in the client's order.
fn read_attributes(block: &[u8]) -> Result<Vec<(String, String)>, HandshakeError> {
    let mut a = Reader::new(block, Packet::ClientResponse);
    let mut attributes = Vec::new();
    while !a.is_empty() {
        let key = a.lenenc_bytes("connect attribute name")?;
        let value = a.lenenc_bytes("connect attribute value")?;
        attributes.push((lossy(key), lossy(value)));
    }
    Ok(attributes)
}

fn mariadb_bits(capabilities: u32, raw: u32) -> u32 {
    if capabilities & caps::CLIENT_MYSQL == 0 {
        raw
    } else {
        0
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn non_empty_lossy(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| lossy(bytes))
}

fn truncated(packet: Packet, what: &'static str) -> HandshakeError {
    HandshakeError::Truncated { packet, what }
}

/// Clears `mask`'s bits in the `width`-byte little-endian field at `at`.
fn clear_bits(
    payload: &mut [u8],
    at: usize,
    width: usize,
    mask: u32,
    packet: Packet,
) -> Result<(), HandshakeError> {
    patch_bits(payload, at, width, packet, |byte, m| byte & !m, mask)
}

fn set_bits(
    payload: &mut [u8],
    at: usize,
    width: usize,
    mask: u32,
    packet: Packet,
) -> Result<(), HandshakeError> {
    patch_bits(payload, at, width, packet, |byte, m| byte | m, mask)
}

/// Applies `op` to each byte of the `width`-byte capability field at `at` with the matching
/// byte of `mask`.
fn patch_bits(
    payload: &mut [u8],
    at: usize,
    width: usize,
    packet: Packet,
    op: fn(u8, u8) -> u8,
    mask: u32,
) -> Result<(), HandshakeError> {
    let field = payload
        .get_mut(at..at + width)
        .ok_or_else(|| truncated(packet, "capability flags"))?;
    for (byte, mask_byte) in field.iter_mut().zip(mask.to_le_bytes()) {
        *byte = op(*byte, mask_byte);
    }
    Ok(())
}

/// A bounds-checked cursor: every read either succeeds or names what was missing.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    packet: Packet,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], packet: Packet) -> Self {
        Self {
            buf,
            pos: 0,
            packet,
        }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        rest
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HandshakeError> {
        let bytes = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or_else(|| truncated(self.packet, what))?;
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], HandshakeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HandshakeError> {
        self.array::<1>(what).map(|[b]| b)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HandshakeError> {
        self.array(what).map(u16::from_le_bytes)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, HandshakeError> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A NUL-terminated string (NUL consumed, not returned); the NUL is required.
    fn nul_terminated(&mut self, what: &'static str) -> Result<&'a [u8], HandshakeError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| truncated(self.packet, what))?;
        let s = self.take(len, what)?;
        self.pos += 1;
        Ok(s)
    }

    /// A NUL-terminated string, or everything left when the NUL is missing.
    fn nul_terminated_or_rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match rest.iter().position(|&b| b == 0) {
            Some(len) => {
                self.pos += len + 1;
                rest.get(..len).unwrap_or_default()
            }
            None => self.rest(),
        }
    }

    fn lenenc_bytes(&mut self, what: &'static str) -> Result<&'a [u8], HandshakeError> {
        match lenenc_bytes(self.buf, self.pos) {
            Ok((bytes, next)) => {
                self.pos = next;
                Ok(bytes)
            }
            Err(LenencError::Truncated) => Err(truncated(self.packet, what)),
            Err(LenencError::Invalid(bad)) => Err(HandshakeError::Malformed {
                packet: self.packet,
                detail: format!("{what} has an invalid length prefix 0x{bad:02X}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::caps::*;
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
    fn greeting(
        version: &str,
        capabilities: u32,
        mariadb_caps: u32,
        plugin: Option<&str>,
    ) -> Vec<u8> {
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

    use crate::protocol::codec::put_lenenc_bytes as lenenc;

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

    // ---- greeting ----

    #[test]
    fn parses_real_mariadb_10_11_greeting() {
        let g = parse_greeting(&mariadb_greeting()).unwrap();
        assert_eq!(g.protocol_version, 10);
        assert_eq!(g.server_version, "5.5.5-10.11.19-MariaDB-0+deb12u1");
        assert!(g.is_mariadb);
        assert_eq!(g.connection_id, 5);
        assert_eq!(g.capabilities, 0x81FF_F7FE);
        assert_eq!(g.capabilities & CLIENT_MYSQL, 0);
        assert_eq!(
            g.mariadb_capabilities,
            MARIADB_CLIENT_PROGRESS
                | MARIADB_CLIENT_STMT_BULK_OPERATIONS
                | MARIADB_CLIENT_EXTENDED_METADATA
                | MARIADB_CLIENT_CACHE_METADATA
        );
        assert_eq!(g.charset, 8);
        assert_eq!(g.status, 0x0002);
        assert_eq!(g.auth_plugin.as_deref(), Some("mysql_native_password"));
    }

    #[test]
    fn parses_mysql8_greeting() {
        let g = parse_greeting(&mysql8_greeting()).unwrap();
        assert_eq!(g.server_version, "8.0.36");
        assert!(!g.is_mariadb);
        assert_eq!(g.connection_id, 0x0102_0304);
        assert_eq!(g.capabilities, 0xDFFF_FFFF);
        assert_eq!(
            g.mariadb_capabilities, 0,
            "CLIENT_MYSQL set: the filler is not caps"
        );
        assert_eq!(g.charset, 0xFF);
        assert_eq!(g.auth_plugin.as_deref(), Some("caching_sha2_password"));
    }

    #[test]
    fn keeps_mariadb_extended_bits_mysql_common_drops() {
        let payload = greeting("5.5.5-11.8.2-MariaDB", 0x81FF_F7FE, 0xFFFF_FFFF, Some("x"));
        assert_eq!(
            parse_greeting(&payload).unwrap().mariadb_capabilities,
            0xFFFF_FFFF
        );
        let mc = HandshakePacket::deserialize((), &mut ParseBuf(&payload)).unwrap();
        assert_eq!(mc.mariadb_ext_capabilities().bits(), 0x3F);
    }

    #[test]
    fn greeting_fields_agree_with_mysql_common() {
        for payload in [mariadb_greeting(), mysql8_greeting()] {
            let ours = parse_greeting(&payload).unwrap();
            let mc = HandshakePacket::deserialize((), &mut ParseBuf(&payload)).unwrap();
            assert_eq!(ours.protocol_version, mc.protocol_version());
            assert_eq!(ours.server_version.as_bytes(), mc.server_version_ref());
            assert_eq!(ours.connection_id, mc.connection_id());
            assert_eq!(ours.charset, mc.default_collation());
            assert_eq!(ours.status, mc.status_flags().bits());
            assert_eq!(
                ours.auth_plugin.as_deref().map(str::as_bytes),
                mc.auth_plugin_name_ref()
            );
            assert_eq!(
                ours.capabilities & mc.capabilities().bits(),
                mc.capabilities().bits()
            );
        }
    }

    #[test]
    fn greeting_without_plugin_auth_has_no_plugin() {
        let caps =
            CLIENT_MYSQL | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_TRANSACTIONS;
        let g = parse_greeting(&greeting("5.0.96", caps, 0, None)).unwrap();
        assert_eq!(g.auth_plugin, None);
        assert_eq!(g.capabilities, caps);

        // Neither a plugin name nor part 2 of the scramble: the fixed block is all there is.
        let bare = greeting("4.1.22", CLIENT_MYSQL | CLIENT_PROTOCOL_41, 0, None);
        assert_eq!(parse_greeting(&bare).unwrap().auth_plugin, None);
    }

    #[test]
    fn greeting_plugin_name_without_trailing_nul_is_accepted() {
        let mut payload = mysql8_greeting();
        payload.pop();
        let g = parse_greeting(&payload).unwrap();
        assert_eq!(g.auth_plugin.as_deref(), Some("caching_sha2_password"));
    }

    #[test]
    fn greeting_with_auth_data_length_above_127_does_not_panic() {
        // mysql_common 0.38 computes `len as i8 - 8`, which overflows for 0x80..=0x87.
        for len in [0x80u8, 0x84, 0x87, 0xFF] {
            let mut payload = mysql8_greeting();
            let fixed = payload.iter().position(|&b| b == 0).unwrap() + 1;
            payload[fixed + 20] = len;
            // Part 2 is now longer than the packet holds.
            let err = parse_greeting(&payload).unwrap_err();
            assert!(is_truncated(&err, Packet::Greeting), "{err}");
        }
    }

    #[test]
    fn err_packet_instead_of_greeting_is_reported_with_its_message() {
        let mut payload = vec![0xFF];
        payload.extend_from_slice(&1040u16.to_le_bytes());
        payload.extend_from_slice(b"Too many connections");
        match parse_greeting(&payload) {
            Err(HandshakeError::ServerError {
                code: 1040,
                message,
            }) => {
                assert_eq!(message, "Too many connections")
            }
            other => panic!("{other:?}"),
        }
        let with_state = [&[0xFF, 0x15, 0x04][..], b"#28000Access denied"].concat();
        match parse_greeting(&with_state) {
            Err(HandshakeError::ServerError {
                code: 1045,
                message,
            }) => {
                assert_eq!(message, "Access denied")
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_greeting(&[0xFF, 0x10]).is_err());
    }

    #[test]
    fn greeting_other_than_protocol_10_is_rejected() {
        let mut payload = mysql8_greeting();
        payload[0] = 9;
        assert!(matches!(
            parse_greeting(&payload),
            Err(HandshakeError::NotProtocol10(9))
        ));
    }

    #[test]
    fn errors_name_the_packet() {
        let e = parse_greeting(&mariadb_greeting()[..40]).unwrap_err();
        assert!(
            e.to_string().starts_with("server greeting is truncated"),
            "{e}"
        );
        let e = parse_client_first(&mariadb_cli_response()[..40]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("client handshake response is truncated"),
            "{e}"
        );
    }

    // ---- greeting patching ----

    #[test]
    fn patch_greeting_clears_only_unsupported_bits() {
        let all_caps = !CLIENT_MYSQL;
        let mut payload = greeting("5.5.5-10.11.19-MariaDB", all_caps, 0xFFFF_FFFF, Some("x"));
        let g = patch_greeting(&mut payload).unwrap();
        for cleared in [
            CLIENT_SSL,
            CLIENT_COMPRESS,
            CLIENT_ZSTD_COMPRESSION_ALGORITHM,
            CLIENT_OPTIONAL_RESULTSET_METADATA,
            CLIENT_QUERY_ATTRIBUTES,
        ] {
            assert_eq!(g.capabilities & cleared, 0, "bit {cleared:#x} left set");
        }
        assert_eq!(g.mariadb_capabilities & MARIADB_CLIENT_CACHE_METADATA, 0);
        for kept in [
            CLIENT_DEPRECATE_EOF,
            CLIENT_SESSION_TRACK,
            CLIENT_MULTI_STATEMENTS,
            CLIENT_MULTI_RESULTS,
            CLIENT_PS_MULTI_RESULTS,
            CLIENT_PLUGIN_AUTH,
            CLIENT_CONNECT_ATTRS,
            CLIENT_LOCAL_FILES,
            1 << 28,
        ] {
            assert_ne!(g.capabilities & kept, 0, "bit {kept:#x} cleared");
        }
        for kept in [
            MARIADB_CLIENT_PROGRESS,
            MARIADB_CLIENT_STMT_BULK_OPERATIONS,
            MARIADB_CLIENT_EXTENDED_METADATA,
            1 << 5,
            1 << 31,
        ] {
            assert_ne!(
                g.mariadb_capabilities & kept,
                0,
                "MariaDB bit {kept:#x} cleared"
            );
        }
        assert_eq!(g.capabilities, all_caps & !UNSUPPORTED);
        assert_eq!(g.mariadb_capabilities, !MARIADB_UNSUPPORTED);
    }

    #[test]
    fn patch_greeting_returns_what_the_patched_bytes_say() {
        for original in [mariadb_greeting(), mysql8_greeting()] {
            let mut payload = original.clone();
            let returned = patch_greeting(&mut payload).unwrap();
            assert_eq!(returned, parse_greeting(&payload).unwrap());
            let before = parse_greeting(&original).unwrap();
            assert_eq!(returned.capabilities, before.capabilities & !UNSUPPORTED);
            assert_eq!(returned.server_version, before.server_version);
        }
    }

    #[test]
    fn patch_greeting_is_idempotent() {
        for original in [mariadb_greeting(), mysql8_greeting()] {
            let mut once = original.clone();
            let first = patch_greeting(&mut once).unwrap();
            let mut twice = once.clone();
            let second = patch_greeting(&mut twice).unwrap();
            assert_eq!(once, twice);
            assert_eq!(first, second);
        }
    }

    #[test]
    fn patched_mariadb_greeting_differs_only_in_capability_bytes() {
        let all_caps = !CLIENT_MYSQL;
        let original = greeting(
            "5.5.5-10.11.19-MariaDB",
            all_caps,
            0xFFFF_FFFF,
            Some("ed25519"),
        );
        let mut patched = original.clone();
        patch_greeting(&mut patched).unwrap();
        let fixed = original.iter().position(|&b| b == 0).unwrap() + 1;
        let allowed = [
            fixed + G_CAPS_LOWER,
            fixed + G_CAPS_LOWER + 1,
            fixed + G_CAPS_UPPER,
            fixed + G_CAPS_UPPER + 1,
            fixed + G_MARIADB_CAPS,
        ];
        let changed = diff_positions(&original, &patched);
        assert!(!changed.is_empty());
        assert!(
            changed.iter().all(|i| allowed.contains(i)),
            "changed {changed:?}"
        );

        // The captured greeting offers COMPRESS and CACHE_METADATA among what we strip.
        let original = mariadb_greeting();
        let mut patched = original.clone();
        patch_greeting(&mut patched).unwrap();
        let fixed = original.iter().position(|&b| b == 0).unwrap() + 1;
        assert_eq!(
            diff_positions(&original, &patched),
            vec![fixed + G_CAPS_LOWER, fixed + G_MARIADB_CAPS]
        );
        assert_eq!(patched[fixed + G_CAPS_LOWER], 0xDE);
        assert_eq!(patched[fixed + G_MARIADB_CAPS], 0x0D);
    }

    #[test]
    fn patched_mysql_greeting_keeps_its_filler_untouched() {
        // CLIENT_MYSQL set: the reserved bytes are not capabilities, whatever they contain.
        let original = greeting(
            "8.0.36",
            0xDFFF_FFFF,
            0xFFFF_FFFF,
            Some("caching_sha2_password"),
        );
        let mut patched = original.clone();
        let g = patch_greeting(&mut patched).unwrap();
        assert_eq!(g.mariadb_capabilities, 0);
        let fixed = original.iter().position(|&b| b == 0).unwrap() + 1;
        let filler = fixed + 21..fixed + G_FIXED_LEN;
        assert_eq!(patched[filler.clone()], original[filler]);
        let changed = diff_positions(&original, &patched);
        assert_eq!(
            changed,
            vec![
                fixed + G_CAPS_LOWER,
                fixed + G_CAPS_LOWER + 1,
                fixed + G_CAPS_UPPER + 1
            ]
        );
    }

    // MySQL 8.0 fixtures, written byte by byte from the protocol documentation
    // (Protocol::HandshakeV10, Protocol::HandshakeResponse41) because no MySQL 8 server can be
    // installed here (Debian 12 ships MariaDB only). They offer and set CLIENT_QUERY_ATTRIBUTES
    // (bit 27, MySQL 8.0.23+), which would put a parameter-count prefix before every COM_QUERY.

    /// A MySQL 8.0.36 greeting: capabilities 0xDFFF_FFFF (QUERY_ATTRIBUTES among them).
    const MYSQL8_GREETING_HEX: &str = "\
        0a 382e302e333600 0b000000 3a236b1f51196c0e 00 ffff ff 0200 ffdf 15 00000000000000000000\
        5a0f402e67391c675d3e461900 63616368696e675f736861325f70617373776f726400";
    /// The same after patching: COMPRESS (bit 5) and SSL (bit 11) in the lower two bytes,
    /// OPTIONAL_RESULTSET_METADATA, ZSTD and QUERY_ATTRIBUTES (bits 25-27) in the upper two.
    const MYSQL8_GREETING_PATCHED_HEX: &str = "\
        0a 382e302e333600 0b000000 3a236b1f51196c0e 00 dff7 ff 0200 ffd1 15 00000000000000000000\
        5a0f402e67391c675d3e461900 63616368696e675f736861325f70617373776f726400";
    /// A MySQL 8.0 client's HandshakeResponse41 to it: capabilities 0x09FF_A68D (LONG_PASSWORD,
    /// LONG_FLAG, CONNECT_WITH_DB, LOCAL_FILES, PROTOCOL_41, INTERACTIVE, TRANSACTIONS,
    /// SECURE_CONNECTION, MULTI_*, PS_MULTI_RESULTS, PLUGIN_AUTH, CONNECT_ATTRS,
    /// PLUGIN_AUTH_LENENC_CLIENT_DATA, CAN_HANDLE_EXPIRED_PASSWORDS, SESSION_TRACK,
    /// DEPRECATE_EOF, QUERY_ATTRIBUTES), max packet 16 MiB, utf8mb4, user bench, a 32-byte
    /// caching_sha2 scramble, database test, one connection attribute.
    const MYSQL8_RESPONSE_HEX: &str = "\
        8da6ff09 00000001 ff 0000000000000000000000000000000000000000000000 62656e636800\
        20 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f 7465737400\
        63616368696e675f736861325f70617373776f726400\
        16 0c5f636c69656e745f6e616d65 086c69626d7973716c";

    #[test]
    fn mysql8_greeting_offering_query_attributes_has_it_cleared_and_nothing_else_changed() {
        let original = unhex(MYSQL8_GREETING_HEX);
        assert_ne!(
            parse_greeting(&original).unwrap().capabilities & CLIENT_QUERY_ATTRIBUTES,
            0,
            "the fixture offers it"
        );
        let mut patched = original.clone();
        let g = patch_greeting(&mut patched).unwrap();
        assert_eq!(patched, unhex(MYSQL8_GREETING_PATCHED_HEX));
        assert_eq!(g.capabilities & CLIENT_QUERY_ATTRIBUTES, 0);
        assert_eq!(g.capabilities, 0xDFFF_FFFF & !UNSUPPORTED);
        assert_eq!(g.server_version, "8.0.36");
        assert_eq!(g.connection_id, 11);
    }

    #[test]
    fn mysql8_response_setting_query_attributes_has_it_cleared_and_nothing_else_changed() {
        let original = unhex(MYSQL8_RESPONSE_HEX);
        let before = response_of(&original);
        assert_eq!(before.capabilities, 0x09FF_A68D);
        assert_eq!(before.user, "bench");
        let mut patched = original.clone();
        patch_client_first(&mut patched).unwrap();
        assert_eq!(
            patched[..4],
            0x01FF_A68Du32.to_le_bytes(),
            "only bit 27 was set of ours"
        );
        assert_eq!(patched[4..], original[4..]);
        let after = response_of(&patched);
        assert_eq!(
            after.capabilities,
            before.capabilities & !CLIENT_QUERY_ATTRIBUTES
        );
        assert_eq!(after.database.as_deref(), Some("test"));
        assert_eq!(after.auth_plugin.as_deref(), Some("caching_sha2_password"));
        assert_eq!(after.attributes, before.attributes);
        assert_eq!(after.attributes.len(), 1);

        let mut greeting = unhex(MYSQL8_GREETING_HEX);
        let g = patch_greeting(&mut greeting).unwrap();
        assert!(!negotiate(&g, &after).has(CLIENT_QUERY_ATTRIBUTES));
    }

    #[test]
    fn failed_patch_leaves_the_bytes_alone() {
        let full = mysql8_greeting();
        let mut cut = full[..full.len() - 30].to_vec();
        let before = cut.clone();
        assert!(patch_greeting(&mut cut).is_err());
        assert!(set_greeting_connection_id(&mut cut, 7).is_err());
        assert_eq!(cut, before);
    }

    #[test]
    fn set_connection_id_overwrites_only_the_id() {
        let original = mariadb_greeting();
        let mut payload = original.clone();
        assert_eq!(
            set_greeting_connection_id(&mut payload, 0xA1B2_C3D4).unwrap(),
            5
        );
        assert_eq!(parse_greeting(&payload).unwrap().connection_id, 0xA1B2_C3D4);
        let fixed = original.iter().position(|&b| b == 0).unwrap() + 1;
        assert_eq!(
            diff_positions(&original, &payload),
            (fixed..fixed + 4).collect::<Vec<_>>()
        );
    }

    // ---- scramble ----

    #[test]
    fn scramble_is_both_parts_without_the_nul() {
        let captured = mariadb_greeting();
        let mc = HandshakePacket::deserialize((), &mut ParseBuf(&captured)).unwrap();
        let scramble = greeting_scramble(&captured).unwrap();
        assert_eq!(scramble.len(), 20);
        assert_eq!(scramble, mc.nonce());
        assert_eq!(
            greeting_scramble(&mysql8_greeting()).unwrap(),
            b"abcdefghijklmnopqrst"
        );
    }

    #[test]
    fn scramble_with_odd_auth_data_lengths_stays_bounded() {
        // 0 and 0x80..: lengths that crash or confuse other parsers; part 2 is at least 13 bytes.
        for len in [0u8, 21, 0x80, 0x87] {
            let mut payload = mysql8_greeting();
            let fixed = payload.iter().position(|&b| b == 0).unwrap() + 1;
            payload[fixed + 20] = len;
            let r = greeting_scramble(&payload);
            if len <= 21 {
                assert_eq!(r.unwrap(), b"abcdefghijklmnopqrst", "len {len}");
            } else {
                assert!(is_truncated(&r.unwrap_err(), Packet::Greeting), "len {len}");
            }
        }
        let bare = greeting("4.1.22", CLIENT_MYSQL | CLIENT_PROTOCOL_41, 0, None);
        assert_eq!(
            greeting_scramble(&bare).unwrap(),
            b"abcdefgh",
            "part 1 only"
        );
    }

    #[test]
    fn scramble_of_a_bad_greeting_is_the_parse_error() {
        let full = mariadb_greeting();
        for cut in [0, 1, 10, 30, 50] {
            assert!(greeting_scramble(&full[..cut]).is_err(), "cut at {cut}");
        }
        let refused = [&[0xFF, 0x10, 0x04][..], b"Too many connections"].concat();
        assert!(matches!(
            greeting_scramble(&refused),
            Err(HandshakeError::ServerError { code: 1040, .. })
        ));
    }

    // ---- client response ----

    #[test]
    fn parses_real_mariadb_cli_response() {
        let r = response_of(&mariadb_cli_response());
        assert_eq!(r.capabilities, 0x00BF_A28C);
        assert_eq!(r.capabilities & CLIENT_MYSQL, 0);
        assert_eq!(r.mariadb_capabilities, 0x1D);
        assert_eq!(r.max_packet_size, 0x0010_0000);
        assert_eq!(r.charset, 0x21);
        assert_eq!(r.user, "bench");
        assert_eq!(r.database.as_deref(), Some("sbtest"));
        assert_eq!(r.auth_plugin.as_deref(), Some("mysql_native_password"));
        let names: Vec<&str> = r.attributes.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "_os",
                "_client_name",
                "_pid",
                "_client_version",
                "_platform",
                "program_name",
                "_server_host"
            ]
        );
        assert_eq!(
            r.attributes[1],
            ("_client_name".into(), "libmariadb".into())
        );
        assert_eq!(r.attributes[6], ("_server_host".into(), "127.0.0.1".into()));
    }

    #[test]
    fn parses_response_with_lenenc_auth_db_plugin_and_attrs() {
        let r = response_of(&full_response().build());
        assert_eq!(r.user, "app");
        assert_eq!(r.database.as_deref(), Some("shop"));
        assert_eq!(r.auth_plugin.as_deref(), Some("client_ed25519"));
        assert_eq!(r.charset, 45);
        assert_eq!(r.max_packet_size, 0x0100_0000);
        assert_eq!(
            r.mariadb_capabilities,
            MARIADB_CLIENT_PROGRESS | MARIADB_CLIENT_CACHE_METADATA
        );
        assert_eq!(
            r.attributes,
            vec![
                ("_client_name".to_string(), "libmariadb".to_string()),
                ("_os".to_string(), "Linux".to_string()),
                ("a".to_string(), String::new()),
            ]
        );
    }

    #[test]
    fn parses_response_with_long_lenenc_auth_data() {
        // Over 250 bytes: the length takes the 0xFC two-byte form.
        let auth = vec![0xAB; 300];
        let resp = Resp {
            auth: &auth,
            ..full_response()
        };
        let payload = resp.build();
        assert!(payload.windows(3).any(|w| w == [0xFC, 0x2C, 0x01]));
        let r = response_of(&payload);
        assert_eq!(r.database.as_deref(), Some("shop"));
        assert_eq!(r.attributes.len(), 3);
    }

    #[test]
    fn parses_response_with_one_byte_auth_length_and_with_nul_terminated_auth() {
        let secure = Resp {
            caps: BASE_CLIENT | CLIENT_CONNECT_WITH_DB | CLIENT_PLUGIN_AUTH,
            attrs: &[],
            ..full_response()
        };
        let r = response_of(&secure.build());
        assert_eq!(
            (r.user.as_str(), r.database.as_deref()),
            ("app", Some("shop"))
        );
        assert!(r.attributes.is_empty());

        let legacy = Resp {
            caps: (BASE_CLIENT & !CLIENT_SECURE_CONNECTION) | CLIENT_CONNECT_WITH_DB,
            auth: b"12345678",
            ..full_response()
        };
        let r = response_of(&legacy.build());
        assert_eq!(r.database.as_deref(), Some("shop"));
        assert_eq!(r.auth_plugin, None);
    }

    #[test]
    fn parses_response_with_zero_length_auth_data() {
        for extra in [CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, 0] {
            let resp = Resp {
                caps: BASE_CLIENT
                    | CLIENT_CONNECT_WITH_DB
                    | CLIENT_PLUGIN_AUTH
                    | CLIENT_CONNECT_ATTRS
                    | extra,
                auth: b"",
                ..full_response()
            };
            let r = response_of(&resp.build());
            assert_eq!(r.user, "app");
            assert_eq!(r.database.as_deref(), Some("shop"));
            assert_eq!(r.auth_plugin.as_deref(), Some("client_ed25519"));
            assert_eq!(r.attributes.len(), 3);
        }
    }

    #[test]
    fn parses_response_without_db_plugin_or_attrs() {
        let resp = Resp {
            caps: BASE_CLIENT | CLIENT_MYSQL,
            mariadb_caps: 0xFFFF_FFFF,
            ..full_response()
        };
        let r = response_of(&resp.build());
        assert_eq!(r.user, "app");
        assert_eq!(r.database, None);
        assert_eq!(r.auth_plugin, None);
        assert!(r.attributes.is_empty());
        assert_eq!(
            r.mariadb_capabilities, 0,
            "CLIENT_MYSQL set: bytes 28..32 are filler"
        );
    }

    #[test]
    fn response_fields_agree_with_mysql_common() {
        let payload = mariadb_cli_response();
        let r = response_of(&payload);
        let mc = HandshakeResponse::deserialize((), &mut ParseBuf(&payload)).unwrap();
        let mut ours: Vec<_> = r.attributes.clone();
        let mut theirs: Vec<_> = mc.connect_attributes().unwrap().into_iter().collect();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs);
        assert_eq!(r.user.as_bytes(), mc.user());
    }

    #[test]
    fn response_without_protocol_41_is_rejected() {
        let resp = Resp {
            caps: full_response().caps & !CLIENT_PROTOCOL_41,
            ..full_response()
        };
        let mut payload = resp.build();
        assert!(matches!(
            parse_client_first(&payload),
            Err(HandshakeError::NotProtocol41)
        ));
        let before = payload.clone();
        assert!(matches!(
            patch_client_first(&mut payload),
            Err(HandshakeError::NotProtocol41)
        ));
        assert_eq!(payload, before);
    }

    #[test]
    fn detects_ssl_request() {
        let caps = BASE_CLIENT | CLIENT_SSL | CLIENT_PLUGIN_AUTH;
        let ssl_request = full_response().build()[..32].to_vec();
        let mut ssl_request = ssl_request;
        ssl_request[..4].copy_from_slice(&caps.to_le_bytes());
        assert_eq!(
            parse_client_first(&ssl_request).unwrap(),
            ClientFirst::SslRequest { capabilities: caps }
        );

        // Without CLIENT_SSL a 32-byte packet is a response that stops before the user name.
        ssl_request[..4].copy_from_slice(&(caps & !CLIENT_SSL).to_le_bytes());
        let err = parse_client_first(&ssl_request).unwrap_err();
        assert!(is_truncated(&err, Packet::ClientResponse), "{err}");

        // The full response after TLS keeps CLIENT_SSL set and is still a response.
        assert!(matches!(
            parse_client_first(&full_response().build()),
            Ok(ClientFirst::Response(_))
        ));
    }

    #[test]
    fn patch_client_first_clears_unsupported_bits_in_response_and_ssl_request() {
        let original = full_response().build();
        let mut patched = original.clone();
        patch_client_first(&mut patched).unwrap();
        let r = response_of(&patched);
        assert_eq!(r.capabilities, full_response().caps & !UNSUPPORTED);
        assert_ne!(r.capabilities & CLIENT_DEPRECATE_EOF, 0);
        assert_eq!(r.mariadb_capabilities, MARIADB_CLIENT_PROGRESS);
        let changed = diff_positions(&original, &patched);
        assert!(
            changed.iter().all(|&i| i < 4 || (28..32).contains(&i)),
            "{changed:?}"
        );
        assert!(changed.contains(&28));

        let mut ssl = original[..32].to_vec();
        patch_client_first(&mut ssl).unwrap();
        assert_eq!(ssl, patched[..32]);
        ssl[..4].copy_from_slice(&(full_response().caps & !CLIENT_SSL).to_le_bytes());
        patch_client_first(&mut ssl).unwrap();
        assert_eq!(ssl, patched[..32]);
    }

    #[test]
    fn patch_client_first_is_idempotent() {
        for original in [mariadb_cli_response(), full_response().build()] {
            let mut once = original.clone();
            patch_client_first(&mut once).unwrap();
            let mut twice = once.clone();
            patch_client_first(&mut twice).unwrap();
            assert_eq!(once, twice);
        }
    }

    #[test]
    fn patch_client_first_leaves_mysql_clients_filler_alone() {
        let resp = Resp {
            caps: full_response().caps | CLIENT_MYSQL,
            mariadb_caps: 0xFFFF_FFFF,
            ..full_response()
        };
        let original = resp.build();
        let mut patched = original.clone();
        patch_client_first(&mut patched).unwrap();
        assert_eq!(patched[4..], original[4..]);
    }

    #[test]
    fn patch_client_first_rejects_short_packets() {
        for len in 0..32 {
            let mut payload = full_response().build()[..len].to_vec();
            let before = payload.clone();
            assert!(patch_client_first(&mut payload).is_err(), "len {len}");
            assert_eq!(payload, before);
        }
    }

    #[test]
    fn client_response_debug_has_no_auth_bytes() {
        let resp = full_response();
        let r = response_of(&resp.build());
        let debug = format!("{r:?} {:?}", ClientFirst::Response(r.clone()));
        assert!(!debug.contains("SECRETAUTH"), "{debug}");
        let as_numbers = format!("{:?}", &resp.auth[..4]);
        assert!(
            !debug.contains(&as_numbers[1..as_numbers.len() - 1]),
            "{debug}"
        );
    }

    // ---- negotiation ----

    #[test]
    fn negotiate_intersects_forwarded_flags() {
        let mut g = mariadb_greeting();
        let greeting = patch_greeting(&mut g).unwrap();
        let mut r = mariadb_cli_response();
        patch_client_first(&mut r).unwrap();
        let response = response_of(&r);
        let n = negotiate(&greeting, &response);
        assert_eq!(n.capabilities, 0x81FF_F7FE & 0x00BF_A28C);
        assert!(n.has(CLIENT_SESSION_TRACK));
        assert!(!n.has(CLIENT_DEPRECATE_EOF), "the CLI did not ask for it");
        assert_eq!(
            n.mariadb_capabilities,
            MARIADB_CLIENT_PROGRESS
                | MARIADB_CLIENT_STMT_BULK_OPERATIONS
                | MARIADB_CLIENT_EXTENDED_METADATA
        );
        assert!(!n.has_mariadb(MARIADB_CLIENT_CACHE_METADATA));
    }

    #[test]
    fn negotiate_has_no_mariadb_caps_unless_both_sides_clear_client_mysql() {
        let greeting = parse_greeting(&mariadb_greeting()).unwrap();
        let mut response = response_of(&mariadb_cli_response());
        response.capabilities |= CLIENT_MYSQL;
        response.mariadb_capabilities = 0x1D;
        assert_eq!(negotiate(&greeting, &response).mariadb_capabilities, 0);

        let mysql = parse_greeting(&mysql8_greeting()).unwrap();
        let mut response = response_of(&mariadb_cli_response());
        response.capabilities &= !CLIENT_MYSQL;
        assert_eq!(negotiate(&mysql, &response).mariadb_capabilities, 0);
    }

    // ---- hostile input ----

    #[test]
    fn every_truncation_of_a_greeting_is_handled() {
        for full in [mariadb_greeting(), mysql8_greeting()] {
            // Both fixtures end in a 21-character plugin name and its NUL. Cutting inside the name is
            // indistinguishable from MySQL's missing NUL, so only shorter cuts must fail.
            let plugin_start = full.len() - 22;
            for len in 0..full.len() {
                let mut cut = full[..len].to_vec();
                let parsed = parse_greeting(&cut);
                assert_eq!(greeting_scramble(&cut).is_ok(), parsed.is_ok(), "len {len}");
                let _ = set_greeting_connection_id(&mut cut.clone(), 1);
                let patched = patch_greeting(&mut cut);
                assert_eq!(parsed.is_ok(), patched.is_ok());
                if len < plugin_start {
                    assert!(parsed.is_err(), "len {len} parsed");
                }
            }
        }
    }

    #[test]
    fn every_truncation_of_a_response_is_an_error() {
        for full in [mariadb_cli_response(), full_response().build()] {
            for len in 0..full.len() {
                let cut = &full[..len];
                if len == 32
                    && matches!(parse_client_first(cut), Ok(ClientFirst::SslRequest { .. }))
                {
                    continue;
                }
                assert!(parse_client_first(cut).is_err(), "len {len}");
                let _ = patch_client_first(&mut cut.to_vec());
            }
        }
    }

    #[test]
    fn garbage_is_rejected() {
        let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        for bytes in [
            Vec::new(),
            vec![0],
            vec![0xFF],
            vec![10],
            vec![10, 0],
            http.clone(),
        ] {
            assert!(parse_greeting(&bytes).is_err(), "{bytes:?}");
            assert!(parse_client_first(&bytes).is_err(), "{bytes:?}");
        }

        // Attributes block claiming 2^64-1 bytes.
        let mut huge = Resp {
            attrs: &[],
            ..full_response()
        }
        .build();
        huge.pop();
        huge.extend_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(is_truncated(
            &parse_client_first(&huge).unwrap_err(),
            Packet::ClientResponse
        ));

        // 0xFB / 0xFF are not lengths (mysql_common would read them as 0).
        let mut bad_prefix = Resp {
            attrs: &[],
            ..full_response()
        }
        .build();
        let auth_at = R_HEADER_LEN + "app".len() + 1;
        bad_prefix[auth_at] = 0xFB;
        assert!(matches!(
            parse_client_first(&bad_prefix),
            Err(HandshakeError::Malformed {
                packet: Packet::ClientResponse,
                ..
            })
        ));

        // An attribute whose value runs past the block.
        let mut overrun = full_response().build();
        let last = overrun.len() - 1;
        overrun[last - 2] = 5; // the last key "a" now claims 5 bytes
        assert!(parse_client_first(&overrun).is_err());
    }

    /// Deterministic xorshift64 so a failure reproduces.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn byte(&mut self) -> u8 {
            self.next() as u8
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn exercise_everything(bytes: &[u8]) {
        let greeting = parse_greeting(bytes);
        assert_eq!(greeting_scramble(bytes).is_ok(), greeting.is_ok());
        let mut copy = bytes.to_vec();
        let patched = patch_greeting(&mut copy);
        assert_eq!(greeting.is_ok(), patched.is_ok());
        if patched.is_err() {
            assert_eq!(copy, bytes, "failed greeting patch changed bytes");
        }
        let _ = set_greeting_connection_id(&mut bytes.to_vec(), 42);
        let first = parse_client_first(bytes);
        let mut copy = bytes.to_vec();
        if patch_client_first(&mut copy).is_err() {
            assert_eq!(copy, bytes, "failed response patch changed bytes");
        }
        if let (Ok(g), Ok(ClientFirst::Response(r))) = (greeting, first) {
            let _ = negotiate(&g, &r);
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let len = rng.below(160);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
            // Give some inputs a plausible first byte / 4.1 flag so parsing goes deeper.
            if let Some(first) = bytes.first_mut() {
                if rng.below(2) == 0 {
                    *first = 10;
                }
            }
            if bytes.len() > 1 && rng.below(2) == 0 {
                bytes[1] |= 0x02;
            }
            exercise_everything(&bytes);
        }
    }

    #[test]
    fn mutated_fixtures_never_panic() {
        let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
        let fixtures = [
            mariadb_greeting(),
            mysql8_greeting(),
            mariadb_cli_response(),
            full_response().build(),
        ];
        for _ in 0..20_000 {
            let mut bytes = fixtures[rng.below(fixtures.len())].clone();
            for _ in 0..=rng.below(4) {
                let at = rng.below(bytes.len());
                bytes[at] = rng.byte();
            }
            let keep = bytes.len() - rng.below(8).min(bytes.len());
            bytes.truncate(keep);
            exercise_everything(&bytes);
        }
    }

    #[test]
    fn offering_tls_and_compression_sets_only_those_greeting_bits() {
        let mut g = mariadb_greeting();
        let before = parse_greeting(&g).unwrap();
        patch_greeting_with(&mut g, Strip::UNSUPPORTED).unwrap();
        let stripped = g.clone();
        offer_in_greeting(&mut g, CLIENT_SSL | CLIENT_COMPRESS).unwrap();
        let after = parse_greeting(&g).unwrap();
        assert_ne!(after.capabilities & CLIENT_SSL, 0);
        assert_ne!(after.capabilities & CLIENT_COMPRESS, 0);
        let expected = (before.capabilities & !caps::UNSUPPORTED) | CLIENT_SSL | CLIENT_COMPRESS;
        assert_eq!(after.capabilities, expected);
        let lower = read_greeting(&g).unwrap().1.fixed + G_CAPS_LOWER;
        let changed: Vec<usize> = (0..g.len()).filter(|&i| g[i] != stripped[i]).collect();
        assert!(
            !changed.is_empty() && changed.iter().all(|&i| i == lower || i == lower + 1),
            "only the lower capability bytes change: {changed:?}"
        );
    }

    #[test]
    fn the_ssl_request_is_the_responses_first_32_bytes_with_ssl_set() {
        let mut response = mariadb_cli_response();
        set_client_bits(&mut response, CLIENT_COMPRESS, CLIENT_LOCAL_FILES).unwrap();
        let request = ssl_request_for(&response).unwrap();
        let caps = u32::from_le_bytes(request[..4].try_into().unwrap());
        let response_caps = u32::from_le_bytes(response[..4].try_into().unwrap());
        assert_eq!(caps, response_caps | CLIENT_SSL);
        assert_ne!(response_caps & CLIENT_COMPRESS, 0);
        assert_eq!(response_caps & CLIENT_LOCAL_FILES, 0);
        assert_eq!(&request[4..], &response[4..32]);
        assert!(matches!(
            parse_client_first(&request),
            Ok(ClientFirst::SslRequest { .. })
        ));
    }

    #[test]
    fn the_ssl_request_refuses_a_short_or_pre_41_response() {
        assert!(ssl_request_for(&mariadb_cli_response()[..20]).is_err());
        let mut old = mariadb_cli_response();
        old[1] &= !((CLIENT_PROTOCOL_41 >> 8) as u8);
        assert!(ssl_request_for(&old).is_err());
        assert!(set_client_bits(&mut old, CLIENT_SSL, 0).is_err());
    }
}
