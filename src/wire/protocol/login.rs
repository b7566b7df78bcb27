//! The client side of a mysql_native_password login, as the health monitor performs it.
//!
//! The relay never logs in itself (it forwards the client's own answers); only the health
//! monitor does, with an account of its own, so this is the one place the proxy builds a
//! HandshakeResponse41 rather than patching one. The other is a login built to be refused
//! ([`refused_login`]), which ends a handshake the proxy opened only to read a greeting. It asks for as little as possible: no
//! `CLIENT_DEPRECATE_EOF` (result sets then end with EOF packets, the simplest form to read), no
//! MariaDB extended capabilities, no connect attributes.

use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use thiserror::Error;

use super::caps;
use super::codec::{header, MAX_CHUNK};

pub const NATIVE_PLUGIN: &str = "mysql_native_password";
/// utf8mb4_general_ci: the monitor's replies are ASCII either way.
const CHARSET: u8 = 45;

/// Why no login packet could be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LoginError {
    /// The server's greeting lacks a capability the login needs (servers older than 4.1).
    #[error("server lacks {0}")]
    MissingCapability(&'static str),
    /// The user name does not fit in one packet.
    #[error("user name too long")]
    UserTooLong,
}

/// The whole HandshakeResponse41 packet (sequence id 1) answering `nonce` (the greeting's
/// scramble) with mysql_native_password, for a server offering `server_caps`.
pub fn native_login(
    server_caps: u32,
    nonce: &[u8],
    user: &str,
    password: &str,
) -> Result<Vec<u8>, LoginError> {
    for (bit, name) in [
        (caps::CLIENT_PROTOCOL_41, "CLIENT_PROTOCOL_41"),
        (caps::CLIENT_SECURE_CONNECTION, "CLIENT_SECURE_CONNECTION"),
    ] {
        if server_caps & bit == 0 {
            return Err(LoginError::MissingCapability(name));
        }
    }
    // CLIENT_MYSQL (= LONG_PASSWORD) set: no MariaDB extended capabilities follow.
    let caps = caps::CLIENT_MYSQL
        | caps::CLIENT_PROTOCOL_41
        | caps::CLIENT_SECURE_CONNECTION
        | caps::CLIENT_TRANSACTIONS
        | (server_caps & caps::CLIENT_PLUGIN_AUTH);
    let scramble = scramble_native(nonce, password.as_bytes());
    let scramble: &[u8] = scramble.as_ref().map_or(&[], |s| &s[..]);
    let mut payload = Vec::with_capacity(64 + user.len());
    payload.extend_from_slice(&caps.to_le_bytes());
    payload.extend_from_slice(&(1u32 << 24).to_le_bytes());
    payload.push(CHARSET);
    payload.extend_from_slice(&[0; 23]);
    payload.extend_from_slice(user.as_bytes());
    payload.push(0);
    // 20 bytes or none: fits the one-byte length of CLIENT_SECURE_CONNECTION.
    payload.push(scramble.len() as u8);
    payload.extend_from_slice(scramble);
    if caps & caps::CLIENT_PLUGIN_AUTH != 0 {
        payload.extend_from_slice(NATIVE_PLUGIN.as_bytes());
        payload.push(0);
    }
    if payload.len() >= MAX_CHUNK {
        return Err(LoginError::UserTooLong);
    }
    let mut packet = header(payload.len(), 1).to_vec();
    packet.extend_from_slice(&payload);
    Ok(packet)
}

/// The account of [`refused_login`]: no server has it unless someone made it on purpose.
pub const REFUSED_USER: &str = "mysql-lb-no-login";
/// Its password: any other does as well, as long as it is not empty (an empty answer would
/// pass for an account without a password).
pub const REFUSED_PASSWORD: &str = "mysql-lb: this login is meant to fail";

/// A HandshakeResponse41 (sequence id 1) that the server refuses with "Access denied".
///
/// A handshake the proxy ends right after the greeting (a health check without an account,
/// reading the greeting deferred connects greet clients with) would count on the server as a
/// connect error of the proxy's address, and `max_connect_errors` of them block it (error 1129).
/// A refused login is an authentication error instead, which servers do not count.
pub fn refused_login(server_caps: u32, nonce: &[u8]) -> Result<Vec<u8>, LoginError> {
    native_login(server_caps, nonce, REFUSED_USER, REFUSED_PASSWORD)
}

/// An AuthSwitchRequest payload: 0xFE, the plugin name and NUL, its data and usually a NUL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSwitch<'a> {
    pub plugin: &'a [u8],
    /// The new nonce, without the trailing NUL.
    pub data: &'a [u8],
}

impl<'a> AuthSwitch<'a> {
    /// Never fails: a payload cut short gives an empty name or data, which no plugin matches.
    pub fn parse(payload: &'a [u8]) -> Self {
        let body = payload.get(1..).unwrap_or_default();
        let (plugin, data) = match body.iter().position(|&b| b == 0) {
            Some(end) => (&body[..end], &body[end + 1..]),
            None => (body, &[][..]),
        };
        AuthSwitch {
            plugin,
            data: data.strip_suffix(&[0]).unwrap_or(data),
        }
    }
}

/// The packet answering an auth switch to mysql_native_password with `nonce`.
pub fn native_answer(nonce: &[u8], password: &str, seq: u8) -> Vec<u8> {
    let answer = scramble_native(nonce, password.as_bytes());
    let answer: &[u8] = answer.as_ref().map_or(&[], |a| &a[..]);
    let mut packet = header(answer.len(), seq).to_vec();
    packet.extend_from_slice(answer);
    packet
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL_CAPS: u32 =
        caps::CLIENT_PROTOCOL_41 | caps::CLIENT_SECURE_CONNECTION | caps::CLIENT_PLUGIN_AUTH;
    const NONCE: &[u8; 20] = b"abcdefghijklmnopqrst";

    #[test]
    fn login_carries_user_scramble_and_plugin() {
        let p = native_login(FULL_CAPS, NONCE, "mon", "secret").unwrap();
        assert_eq!(p[3], 1, "sequence id");
        assert_eq!(p.len() - 4, usize::from(p[0]));
        let payload = &p[4..];
        let caps = u32::from_le_bytes(payload[..4].try_into().unwrap());
        assert_eq!(caps & caps::CLIENT_DEPRECATE_EOF, 0);
        assert_ne!(caps & caps::CLIENT_PLUGIN_AUTH, 0);
        assert_ne!(
            caps & caps::CLIENT_MYSQL,
            0,
            "no MariaDB extended capabilities"
        );
        assert_eq!(&payload[32..36], b"mon\0");
        assert_eq!(payload[36], 20);
        let expected = scramble_native(NONCE, b"secret").unwrap();
        assert_eq!(&payload[37..57], &expected);
        assert_eq!(&payload[57..], b"mysql_native_password\0");
    }

    #[test]
    fn login_parses_back_as_the_proxy_reads_responses() {
        let p = native_login(FULL_CAPS, NONCE, "mon", "secret").unwrap();
        match crate::wire::protocol::handshake::parse_client_first(&p[4..]) {
            Ok(crate::wire::protocol::handshake::ClientFirst::Response(r)) => {
                assert_eq!(r.user, "mon");
                assert_eq!(r.auth_plugin.as_deref(), Some(NATIVE_PLUGIN));
                assert_eq!(r.charset, CHARSET);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_password_sends_no_scramble_and_old_servers_are_refused() {
        let secure = caps::CLIENT_PROTOCOL_41 | caps::CLIENT_SECURE_CONNECTION;
        let p = native_login(secure, NONCE, "mon", "").unwrap();
        assert_eq!(&p[4 + 32..], b"mon\0\0", "empty password, no plugin name");
        assert_eq!(
            native_login(caps::CLIENT_PROTOCOL_41, NONCE, "mon", ""),
            Err(LoginError::MissingCapability("CLIENT_SECURE_CONNECTION"))
        );
        assert_eq!(
            native_login(caps::CLIENT_SECURE_CONNECTION, NONCE, "mon", ""),
            Err(LoginError::MissingCapability("CLIENT_PROTOCOL_41"))
        );
        let huge = "u".repeat(MAX_CHUNK);
        assert_eq!(
            native_login(FULL_CAPS, NONCE, &huge, ""),
            Err(LoginError::UserTooLong)
        );
    }

    #[test]
    fn refused_login_names_its_account_and_answers_with_a_password() {
        let p = refused_login(FULL_CAPS, NONCE).unwrap();
        let payload = &p[4..];
        let user_end = 32 + REFUSED_USER.len();
        assert_eq!(&payload[32..user_end], REFUSED_USER.as_bytes());
        assert_eq!(payload[user_end + 1], 20, "a scramble, not an empty answer");
        let expected = scramble_native(NONCE, REFUSED_PASSWORD.as_bytes()).unwrap();
        assert_eq!(&payload[user_end + 2..user_end + 22], &expected);
    }

    #[test]
    fn auth_switch_splits_plugin_and_nonce() {
        let mut p = vec![0xFE];
        p.extend_from_slice(b"mysql_native_password\0abcdefghijklmnopqrst\0");
        let switch = AuthSwitch::parse(&p);
        assert_eq!(switch.plugin, b"mysql_native_password");
        assert_eq!(switch.data, NONCE);
        let empty = AuthSwitch::parse(&[0xFE]);
        assert_eq!((empty.plugin, empty.data), (&b""[..], &b""[..]));
        assert_eq!(AuthSwitch::parse(&[]).plugin, b"");
    }

    #[test]
    fn switch_answer_is_the_scramble_in_sequence() {
        let p = native_answer(NONCE, "secret", 3);
        assert_eq!(&p[..4], &[20, 0, 0, 3]);
        assert_eq!(&p[4..], &scramble_native(NONCE, b"secret").unwrap());
        assert_eq!(native_answer(NONCE, "", 3), vec![0, 0, 0, 3]);
    }
}
