//! The byte-level tools both handshake packets are read and patched with: a bounds-checked
//! cursor whose every read names what was missing, and the capability-bit patcher.

use super::{truncated, HandshakeError, Packet};
use crate::wire::protocol::codec::{lenenc_bytes, LenencError};

/// Clears `mask`'s bits in the `width`-byte little-endian field at `at`.
pub(super) fn clear_bits(
    payload: &mut [u8],
    at: usize,
    width: usize,
    mask: u32,
    packet: Packet,
) -> Result<(), HandshakeError> {
    patch_bits(payload, at, width, packet, |byte, m| byte & !m, mask)
}

pub(super) fn set_bits(
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
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pub(super) pos: usize,
    packet: Packet,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8], packet: Packet) -> Self {
        Self {
            buf,
            pos: 0,
            packet,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(super) fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        rest
    }

    pub(super) fn take(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<&'a [u8], HandshakeError> {
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

    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, HandshakeError> {
        self.array::<1>(what).map(|[b]| b)
    }

    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, HandshakeError> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A NUL-terminated string (NUL consumed, not returned); the NUL is required.
    pub(super) fn nul_terminated(
        &mut self,
        what: &'static str,
    ) -> Result<&'a [u8], HandshakeError> {
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
    pub(super) fn nul_terminated_or_rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match rest.iter().position(|&b| b == 0) {
            Some(len) => {
                self.pos += len + 1;
                rest.get(..len).unwrap_or_default()
            }
            None => self.rest(),
        }
    }

    pub(super) fn lenenc_bytes(&mut self, what: &'static str) -> Result<&'a [u8], HandshakeError> {
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
