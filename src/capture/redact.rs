//! COM_CHANGE_USER without its auth data: the one captured command that carries a credential.
//!
//! The payload is rebuilt with an empty auth response; everything else (user, schema, character
//! set, plugin name, attributes) is kept so a replay knows who the session became. A payload
//! that does not parse keeps only its command byte: nothing after the user name is trusted.

use crate::protocol::caps::CLIENT_SECURE_CONNECTION;

/// `payload` (command byte first) with its auth response emptied.
pub fn change_user(payload: &[u8], capabilities: u32) -> Vec<u8> {
    redacted(payload, capabilities).unwrap_or_else(|| payload.get(..1).unwrap_or_default().to_vec())
}

fn redacted(payload: &[u8], capabilities: u32) -> Option<Vec<u8>> {
    let (&command, rest) = payload.split_first()?;
    let user_end = rest.iter().position(|&b| b == 0)?;
    let after_user = &rest[user_end + 1..];
    let after_auth = if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let (&len, auth) = after_user.split_first()?;
        auth.get(len as usize..)?
    } else {
        let end = after_user.iter().position(|&b| b == 0)?;
        &after_user[end + 1..]
    };
    let mut out = Vec::with_capacity(payload.len());
    out.push(command);
    out.extend_from_slice(&rest[..=user_end]);
    // An empty auth response in either encoding: a zero length, or an empty NUL-ended string.
    out.push(0);
    out.extend_from_slice(after_auth);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_auth_response_is_removed_and_the_rest_kept() {
        let mut p = vec![0x11];
        p.extend_from_slice(b"bob\0");
        p.push(20);
        p.extend_from_slice(&[0xAB; 20]);
        p.extend_from_slice(b"shop\0");
        p.extend_from_slice(&[45, 0]);
        p.extend_from_slice(b"mysql_native_password\0");
        let r = change_user(&p, CLIENT_SECURE_CONNECTION);
        let mut want = vec![0x11];
        want.extend_from_slice(b"bob\0\0shop\0");
        want.extend_from_slice(&[45, 0]);
        want.extend_from_slice(b"mysql_native_password\0");
        assert_eq!(r, want);
        assert!(!r.windows(2).any(|w| w == [0xAB, 0xAB]));
    }

    #[test]
    fn without_secure_connection_the_auth_is_a_nul_ended_string() {
        let r = change_user(b"\x11bob\0secret\0shop\0", 0);
        assert_eq!(r, b"\x11bob\0\0shop\0");
    }

    #[test]
    fn a_payload_that_does_not_parse_keeps_only_the_command_byte() {
        assert_eq!(change_user(b"\x11bob", CLIENT_SECURE_CONNECTION), b"\x11");
        assert_eq!(
            change_user(b"\x11bob\0\x30secret", CLIENT_SECURE_CONNECTION),
            b"\x11"
        );
        assert_eq!(change_user(b"", 0), b"");
    }
}
