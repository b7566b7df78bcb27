//! The server greeting (HandshakeV10): one walk that reads every field and says where each lies,
//! and the in-place patches of its capability bits, connection id and scramble.

use std::ops::Range;

use super::bytes::{clear_bits, set_bits, Reader};
use super::{
    lossy, mariadb_bits, non_empty_lossy, truncated, Greeting, HandshakeError, Packet, Strip,
};
use crate::wire::protocol::caps;
use crate::wire::protocol::errors::ServerErr;

// Greeting layout after the NUL-terminated server version: offsets into the fixed 31-byte block.
pub(super) const G_CONNECTION_ID: usize = 0;
/// Auth-plugin-data part 1: the first 8 bytes of the scramble.
pub(super) const G_SCRAMBLE_1: usize = 4;
pub(super) const G_SCRAMBLE_1_LEN: usize = 8;
pub(super) const G_CAPS_LOWER: usize = 13;
pub(super) const G_CHARSET: usize = 15;
pub(super) const G_STATUS: usize = 16;
pub(super) const G_CAPS_UPPER: usize = 18;
pub(super) const G_AUTH_DATA_LEN: usize = 20;
/// The last 4 of the 10 reserved bytes.
pub(super) const G_MARIADB_CAPS: usize = 27;
pub(super) const G_FIXED_LEN: usize = 31;

pub fn parse_greeting(payload: &[u8]) -> Result<Greeting, HandshakeError> {
    read_greeting(payload).map(|(greeting, _)| greeting)
}

/// The capability flags a greeting offers, read without building its strings.
pub fn greeting_capabilities(payload: &[u8]) -> Result<u32, HandshakeError> {
    locate(payload).map(|layout| layout.capabilities)
}

/// Clears caps::UNSUPPORTED in the capability bytes (lower 2 bytes after filler, upper 2 bytes after
/// status) and caps::MARIADB_UNSUPPORTED in the MariaDB extended caps (the last 4 of the 10 reserved
/// bytes, only when CLIENT_MYSQL (bit 0) is clear). Returns the parsed Greeting as it is AFTER
/// patching. On error the payload is left untouched.
pub fn patch_greeting(payload: &mut [u8]) -> Result<Greeting, HandshakeError> {
    patch_greeting_with(payload, Strip::UNSUPPORTED)
}

/// As [`patch_greeting`], clearing the bits of `strip`.
pub fn patch_greeting_with(payload: &mut [u8], strip: Strip) -> Result<Greeting, HandshakeError> {
    let layout = locate(payload)?;
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
    if layout.capabilities & caps::CLIENT_MYSQL == 0 {
        clear_bits(
            payload,
            fixed + G_MARIADB_CAPS,
            4,
            strip.mariadb_capabilities,
            g,
        )?;
    }
    let mut greeting = layout.greeting(payload);
    greeting.capabilities &= !strip.capabilities;
    greeting.mariadb_capabilities &= !strip.mariadb_capabilities;
    Ok(greeting)
}

/// Sets standard capability `bits` in a greeting: what the proxy itself offers on the client
/// leg (TLS, compression) whatever the backend offered.
pub fn offer_in_greeting(payload: &mut [u8], bits: u32) -> Result<(), HandshakeError> {
    let layout = locate(payload)?;
    let g = Packet::Greeting;
    set_bits(payload, layout.fixed + G_CAPS_LOWER, 2, bits, g)?;
    set_bits(payload, layout.fixed + G_CAPS_UPPER, 2, bits >> 16, g)
}

/// Overwrites the 4-byte connection id (for later use: proxy-unique ids). Returns the old id.
pub fn set_greeting_connection_id(payload: &mut [u8], id: u32) -> Result<u32, HandshakeError> {
    let layout = locate(payload)?;
    let at = layout.fixed + G_CONNECTION_ID;
    let slot = payload
        .get_mut(at..at + 4)
        .ok_or_else(|| truncated(Packet::Greeting, "connection id"))?;
    let old = u32::from_le_bytes([slot[0], slot[1], slot[2], slot[3]]);
    slot.copy_from_slice(&id.to_le_bytes());
    Ok(old)
}

/// The scramble (nonce) a client's auth answer is computed from: auth-plugin-data part 1 and, with
/// `CLIENT_SECURE_CONNECTION`, part 2 without its trailing NUL. Errors as [`parse_greeting`] does.
pub fn greeting_scramble(payload: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let layout = locate(payload)?;
    let part1_at = layout.fixed + G_SCRAMBLE_1;
    let part1 = payload
        .get(part1_at..part1_at + G_SCRAMBLE_1_LEN)
        .ok_or_else(|| truncated(Packet::Greeting, "auth-plugin-data part 1"))?;
    let part2 = payload
        .get(layout.scramble_2)
        .ok_or_else(|| truncated(Packet::Greeting, "auth-plugin-data part 2"))?;
    Ok([part1, part2.strip_suffix(&[0]).unwrap_or(part2)].concat())
}

/// Where a greeting's fields lie in its payload, and its flags: everything the in-place patches
/// need, found without allocating. [`Layout::greeting`] builds the strings, for those who read
/// them.
pub(super) struct Layout {
    /// The server version, without its NUL.
    version: Range<usize>,
    /// Start of the fixed 31-byte block after the server version.
    pub(super) fixed: usize,
    /// Auth-plugin-data part 2 with its NUL (empty without `CLIENT_SECURE_CONNECTION`).
    pub(super) scramble_2: Range<usize>,
    /// The capability flags as found (before any patch).
    capabilities: u32,
}

impl Layout {
    /// The greeting as `payload` (the one this layout was found in, maybe patched since) says.
    /// Which fields are there (the plugin name, MariaDB's capabilities) follows the flags as
    /// found, as the walk did; the flags reported are the payload's.
    fn greeting(&self, payload: &[u8]) -> Greeting {
        let fixed = &payload[self.fixed..self.fixed + G_FIXED_LEN];
        let u32_at =
            |at: usize| u32::from(u16_at(fixed, at)) | u32::from(u16_at(fixed, at + 2)) << 16;
        let capabilities = fixed_capabilities(fixed);
        let raw_mariadb = u32_at(G_MARIADB_CAPS);
        let server_version = lossy(&payload[self.version.clone()]);
        Greeting {
            protocol_version: 10,
            is_mariadb: server_version.contains("MariaDB"),
            server_version,
            connection_id: u32_at(G_CONNECTION_ID),
            capabilities,
            mariadb_capabilities: mariadb_bits(self.capabilities, raw_mariadb),
            charset: fixed[G_CHARSET],
            status: u16_at(fixed, G_STATUS),
            auth_plugin: if self.capabilities & caps::CLIENT_PLUGIN_AUTH != 0 {
                // Some MySQL versions omit the trailing NUL (MySQL bug #59453): accept both.
                let mut r = Reader::new(payload, Packet::Greeting);
                r.pos = self.scramble_2.end;
                non_empty_lossy(r.nul_terminated_or_rest())
            } else {
                None
            },
        }
    }
}

/// A little-endian u16 at `at` of the fixed block (whole: [`locate`] took all of it).
fn u16_at(fixed: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([fixed[at], fixed[at + 1]])
}

/// The capability flags of the fixed block: lower 16 bits | upper 16 bits << 16.
fn fixed_capabilities(fixed: &[u8]) -> u32 {
    u32::from(u16_at(fixed, G_CAPS_LOWER)) | u32::from(u16_at(fixed, G_CAPS_UPPER)) << 16
}

/// Parses the greeting and says where its parts lie.
pub(super) fn read_greeting(payload: &[u8]) -> Result<(Greeting, Layout), HandshakeError> {
    let layout = locate(payload)?;
    Ok((layout.greeting(payload), layout))
}

/// One walk over the greeting: checks every field is there and says where each lies.
pub(super) fn locate(payload: &[u8]) -> Result<Layout, HandshakeError> {
    let mut r = Reader::new(payload, Packet::Greeting);
    let protocol_version = r.u8("protocol version")?;
    match protocol_version {
        10 => {}
        0xFF => return Err(server_error(payload)),
        other => return Err(HandshakeError::NotProtocol10(other)),
    }
    let version_start = r.pos;
    let version_len = r.nul_terminated("server version")?.len();
    let version = version_start..version_start + version_len;
    let fixed_start = r.pos;
    let fixed = r.take(G_FIXED_LEN, "capability flags and reserved bytes")?;

    // Whole (taken above): its fields are read at their offsets.
    let capabilities = fixed_capabilities(fixed);
    let auth_data_len = fixed[G_AUTH_DATA_LEN];

    let scramble_2_start = r.pos;
    if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
        // Part 2 of the scramble: max(13, total length - 8), NUL included.
        let len = usize::from(auth_data_len).saturating_sub(8).max(13);
        r.take(len, "auth-plugin-data part 2")?;
    }
    // The auth plugin's name follows (read by `Layout::greeting`, which alone needs it).
    Ok(Layout {
        version,
        fixed: fixed_start,
        scramble_2: scramble_2_start..r.pos,
        capabilities,
    })
}

/// An ERR packet sent in place of a greeting (no SQLSTATE marker expected, accepted if present).
fn server_error(payload: &[u8]) -> HandshakeError {
    match ServerErr::parse(payload) {
        Some(ServerErr { code, message }) => HandshakeError::ServerError { code, message },
        None => truncated(Packet::Greeting, "ERR code"),
    }
}
