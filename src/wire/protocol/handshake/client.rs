//! The client's first packet (an SSLRequest or a HandshakeResponse41): one walk that reads every
//! field the proxy needs, and the in-place patches of its capability bits.

use super::bytes::{clear_bits, set_bits, Reader};
use super::{
    lossy, mariadb_bits, non_empty_lossy, truncated, ClientFirst, ClientResponse,
    ConnectAttributes, HandshakeError, Packet, Strip,
};
use crate::wire::protocol::caps;

// HandshakeResponse41 / SSLRequest layout: a fixed 32-byte header.
pub(super) const R_CAPS: usize = 0;
pub(super) const R_MARIADB_CAPS: usize = 28;
pub(super) const R_HEADER_LEN: usize = 32;

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

/// The client's capability flags, once the packet is known to be a 4.1 packet with a full header.
pub(super) fn client_capabilities(payload: &[u8]) -> Result<u32, HandshakeError> {
    let capabilities = Reader::new(payload, Packet::ClientResponse).u32("capability flags")?;
    if capabilities & caps::CLIENT_PROTOCOL_41 == 0 {
        return Err(HandshakeError::NotProtocol41);
    }
    if payload.len() < R_HEADER_LEN {
        return Err(truncated(Packet::ClientResponse, "fixed-length header"));
    }
    Ok(capabilities)
}

/// The auth answer of a HandshakeResponse41: only the proxy's own login (the SQL admin port)
/// reads it, to check it against the account's hash; a session's is relayed, never read.
pub fn auth_answer(payload: &[u8]) -> Result<&[u8], HandshakeError> {
    let capabilities = client_capabilities(payload)?;
    let mut r = Reader::new(payload, Packet::ClientResponse);
    r.take(R_HEADER_LEN, "fixed-length header")?;
    r.nul_terminated("user name")?;
    skip_auth_data(&mut r, capabilities)
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
        ConnectAttributes::default()
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
pub(super) fn skip_auth_data<'a>(
    r: &mut Reader<'a>,
    capabilities: u32,
) -> Result<&'a [u8], HandshakeError> {
    if capabilities & caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
        r.lenenc_bytes("auth data")
    } else if capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
        let len = r.u8("auth data length")?;
        r.take(usize::from(len), "auth data")
    } else {
        r.nul_terminated("auth data")
    }
}

/// The connect-attributes block: name/value pairs of length-encoded strings, in the client's
/// order; checked whole here, read as strings only when asked.
fn read_attributes(block: &[u8]) -> Result<ConnectAttributes, HandshakeError> {
    let mut a = Reader::new(block, Packet::ClientResponse);
    while !a.is_empty() {
        a.lenenc_bytes("connect attribute name")?;
        a.lenenc_bytes("connect attribute value")?;
    }
    Ok(ConnectAttributes(block.to_vec()))
}
