//! Which auth packets carry a password in clear, or make a client send one: what keeps such a
//! password off a plaintext backend leg that leaves the host.
//!
//! A client decides to send its password as it is from its own leg alone: over TLS or a unix
//! socket, `mysql_clear_password`, `dialog` (PAM), `sha256_password` and `caching_sha2_password`'s
//! full authentication all answer with the password itself. The proxy would pass that answer on
//! to a backend over plaintext TCP, where anyone on the path reads it. So when the session's
//! client leg is secure and its backend leg is plaintext TCP to a host other than this one, the
//! auth exchange is watched, and the packet that carries the password (the client's response) or
//! asks for it (the backend's) is never forwarded. Plain functions over payloads, so every case
//! is checked with byte fixtures.

use std::fmt;

use super::caps::{CLIENT_PLUGIN_AUTH, CLIENT_SECURE_CONNECTION};

/// The longest COM_CHANGE_USER a guarded session checks (held back until whole); a longer one is
/// refused unchecked. Real ones are a few hundred bytes (user, scramble, database, plugin,
/// connect attributes).
pub const MAX_CHANGE_USER_CHECKED: usize = 64 * 1024;

/// Plugins whose answer is the password itself (on a secure client leg for `sha256_password`,
/// which encrypts it with the server's RSA key otherwise).
pub(crate) fn sends_cleartext(plugin: &str) -> bool {
    matches!(
        plugin,
        "mysql_clear_password" | "dialog" | "sha256_password"
    )
}

/// A packet of the auth exchange that carries a password in clear, or asks the client for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// The client's HandshakeResponse already holds its password (it chose the plugin itself).
    Response { plugin: String },
    /// The backend switched the client to a plugin that answers with the password.
    Switch { plugin: String },
    /// `caching_sha2_password`'s "perform full authentication" (0x01 0x04).
    FullAuth,
    /// A `dialog` prompt (PAM asking a question: the answer goes back as typed).
    Prompt,
    /// A COM_CHANGE_USER longer than [`MAX_CHANGE_USER_CHECKED`], not read for a password.
    Unchecked { len: usize },
}

impl Exposure {
    /// Found in a packet of the client's (the rest are the backend's).
    pub fn from_client(&self) -> bool {
        matches!(self, Self::Response { .. } | Self::Unchecked { .. })
    }
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Response { plugin } => write!(f, "the client sent its password in clear ({plugin})"),
            Self::Switch { plugin } => write!(f, "the backend asked for the password in clear ({plugin})"),
            Self::FullAuth => {
                f.write_str("the backend asked for the password in clear (caching_sha2_password full authentication)")
            }
            Self::Prompt => f.write_str("the backend asked for the password in clear (dialog prompt)"),
            Self::Unchecked { len } => write!(
                f,
                "a COM_CHANGE_USER of {len} bytes is too long to check for a password in clear"
            ),
        }
    }
}

/// Whether the client's HandshakeResponse carries a password in clear: a cleartext plugin named
/// with a non-empty answer (`answered`: more than an empty password's lone NUL).
pub fn in_response(plugin: Option<&str>, answered: bool) -> Option<Exposure> {
    let plugin = plugin.filter(|p| sends_cleartext(p))?;
    answered.then(|| Exposure::Response {
        plugin: plugin.to_owned(),
    })
}

/// Whether a backend packet of the auth exchange (`payload`, header stripped) makes the client
/// answer with its password in clear, `plugin` being the plugin in use before it.
pub fn in_server_packet(plugin: Option<&str>, payload: &[u8]) -> Option<Exposure> {
    match payload {
        [0xFE, rest @ ..] => {
            let name = rest.split(|&b| b == 0).next().unwrap_or_default();
            let name = String::from_utf8_lossy(name);
            sends_cleartext(&name).then(|| Exposure::Switch {
                plugin: name.into_owned(),
            })
        }
        [0x00, ..] | [0xFF, ..] => None,
        [0x01, 0x04] if plugin == Some("caching_sha2_password") => Some(Exposure::FullAuth),
        // Any other packet under `dialog` is a question whose answer is typed text; with PAM
        // (the only server plugin that speaks dialog) that is the password.
        [_, ..] if plugin == Some("dialog") => Some(Exposure::Prompt),
        _ => None,
    }
}

/// Whether the client's COM_CHANGE_USER (`payload`, command byte first) carries its password in
/// clear, read with the session's `capabilities`: user, auth answer, database, character set,
/// then the plugin. A packet that does not parse carries nothing this can tell (the server
/// parses it the same way and refuses it).
pub fn in_change_user(payload: &[u8], capabilities: u32) -> Option<Exposure> {
    fn nul_terminated(b: &[u8]) -> Option<(&[u8], &[u8])> {
        let n = b.iter().position(|&c| c == 0)?;
        Some((&b[..n], &b[n + 1..]))
    }
    let (_user, rest) = nul_terminated(payload.get(1..)?)?;
    let (auth, rest) = if capabilities & CLIENT_SECURE_CONNECTION != 0 {
        let (&len, rest) = rest.split_first()?;
        let len = usize::from(len);
        (rest.get(..len)?, rest.get(len..)?)
    } else {
        nul_terminated(rest)?
    };
    let (_database, rest) = nul_terminated(rest)?;
    if capabilities & CLIENT_PLUGIN_AUTH == 0 {
        return None;
    }
    let plugin = rest.get(2..)?.split(|&b| b == 0).next()?;
    in_response(
        Some(&String::from_utf8_lossy(plugin)),
        !matches!(auth, [] | [0]),
    )
}

/// As [`in_server_packet`] for the auth exchange of `COM_CHANGE_USER`, where the plugin the
/// client's command named is not followed: a switch to a cleartext plugin, or `0x01 0x04` alone
/// (a two-byte AuthMoreData only caching_sha2_password sends). `prefix`: the packet's first
/// payload bytes (enough for a plugin name); `len`: its whole length.
pub fn in_change_user_reply(prefix: &[u8], len: u64) -> Option<Exposure> {
    match prefix {
        [0xFE, ..] => in_server_packet(None, prefix),
        [0x01, 0x04] if len == 2 => Some(Exposure::FullAuth),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    //! Byte fixtures written from the protocol documentation. `caching_sha2_password` and
    //! `sha256_password` exist only in MySQL, and no MySQL 8 server can be installed here
    //! (Debian 12 ships MariaDB 10.11 only), so these cases are checked on bytes alone; the
    //! MariaDB cases (`dialog`, `mysql_clear_password`) also run end to end in
    //! tests/cleartext.rs, and the relay's handling in `auth/cleartext_tests.rs`.
    use super::*;

    #[test]
    fn caching_sha2_full_authentication_asks_for_the_password_in_clear() {
        // AuthMoreData 0x01 with 0x04 ("perform full authentication"): the client answers with
        // its password and a NUL when its own leg is secure.
        assert_eq!(
            in_server_packet(Some("caching_sha2_password"), &[0x01, 0x04]),
            Some(Exposure::FullAuth)
        );
    }

    #[test]
    fn caching_sha2_fast_path_and_public_key_do_not() {
        // 0x01 0x03: fast authentication succeeded, an OK follows.
        assert_eq!(
            in_server_packet(Some("caching_sha2_password"), &[0x01, 0x03]),
            None
        );
        // 0x01 + a PEM public key (answer to a client's 0x02 request): the client encrypts.
        let key = b"\x01-----BEGIN PUBLIC KEY-----\n";
        assert_eq!(in_server_packet(Some("caching_sha2_password"), key), None);
        // The same 0x01 0x04 bytes under another plugin mean nothing of the kind.
        assert_eq!(
            in_server_packet(Some("mysql_native_password"), &[0x01, 0x04]),
            None
        );
    }

    #[test]
    fn a_switch_to_a_cleartext_plugin_asks_for_the_password() {
        for plugin in ["mysql_clear_password", "dialog", "sha256_password"] {
            // AuthSwitchRequest: 0xFE, plugin name, NUL, plugin data (a nonce or a prompt).
            let mut switch = vec![0xFE];
            switch.extend_from_slice(plugin.as_bytes());
            switch.extend_from_slice(b"\0\x04Password: ");
            assert_eq!(
                in_server_packet(Some("mysql_native_password"), &switch),
                Some(Exposure::Switch {
                    plugin: plugin.to_owned()
                }),
                "{plugin}"
            );
        }
    }

    #[test]
    fn a_switch_to_a_hashing_plugin_does_not() {
        for plugin in [
            "mysql_native_password",
            "client_ed25519",
            "caching_sha2_password",
        ] {
            let mut switch = vec![0xFE];
            switch.extend_from_slice(plugin.as_bytes());
            switch.extend_from_slice(b"\x00abcdefghij0123456789\x00");
            assert_eq!(in_server_packet(None, &switch), None, "{plugin}");
        }
    }

    #[test]
    fn a_dialog_prompt_asks_for_the_answer_in_clear() {
        // PAM's second question after the switch: 0x02 (echo on) or 0x04 (echo off) + text.
        assert_eq!(
            in_server_packet(Some("dialog"), b"\x04Password: "),
            Some(Exposure::Prompt)
        );
        assert_eq!(
            in_server_packet(Some("dialog"), b"\x02Token: "),
            Some(Exposure::Prompt)
        );
        assert_eq!(in_server_packet(Some("dialog"), &[0x00, 0, 0, 2, 0]), None);
        assert_eq!(in_server_packet(Some("dialog"), &[0xFF, 0x15, 0x04]), None);
    }

    /// COM_CHANGE_USER as the protocol documentation lays it out (secure connection, plugin auth).
    fn change_user(auth: &[u8], plugin: &str) -> Vec<u8> {
        let mut p = b"\x11pam_user\0".to_vec();
        p.push(auth.len() as u8);
        p.extend_from_slice(auth);
        p.extend_from_slice(b"test\0");
        p.extend_from_slice(&45u16.to_le_bytes());
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        p.extend_from_slice(b"\x00"); // an empty connect-attributes block
        p
    }

    const CAPS: u32 = CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;

    #[test]
    fn a_change_user_naming_a_cleartext_plugin_with_a_password_carries_it() {
        assert_eq!(
            in_change_user(&change_user(b"pam-secret\0", "mysql_clear_password"), CAPS),
            Some(Exposure::Response {
                plugin: "mysql_clear_password".to_owned()
            })
        );
        assert_eq!(
            in_change_user(&change_user(b"pam-secret\0", "dialog"), CAPS),
            Some(Exposure::Response {
                plugin: "dialog".to_owned()
            })
        );
        // A scramble for a hashing plugin, an empty password, no plugin auth, a torn packet.
        let native = change_user(&[7; 20], "mysql_native_password");
        assert_eq!(in_change_user(&native, CAPS), None);
        let empty = change_user(b"\0", "mysql_clear_password");
        assert_eq!(in_change_user(&empty, CAPS), None);
        let clear = change_user(b"pam-secret\0", "mysql_clear_password");
        assert_eq!(in_change_user(&clear, CLIENT_SECURE_CONNECTION), None);
        assert_eq!(in_change_user(&clear[..12], CAPS), None);
    }

    #[test]
    fn a_change_user_reply_is_judged_without_the_plugin() {
        let switch = b"\xFEdialog\0\x04Password: ";
        assert_eq!(
            in_change_user_reply(switch, switch.len() as u64),
            Some(Exposure::Switch {
                plugin: "dialog".to_owned()
            })
        );
        assert_eq!(
            in_change_user_reply(&[0x01, 0x04], 2),
            Some(Exposure::FullAuth)
        );
        assert_eq!(
            in_change_user_reply(&[0x01, 0x04], 40),
            None,
            "a longer AuthMoreData"
        );
        assert_eq!(in_change_user_reply(&[0x01, 0x03], 2), None);
        assert_eq!(in_change_user_reply(&[0x00, 0, 0, 2, 0], 7), None);
        let native = b"\xFEmysql_native_password\0abcdefgh";
        assert_eq!(in_change_user_reply(native, 45), None);
    }

    #[test]
    fn a_response_naming_a_cleartext_plugin_with_an_answer_carries_the_password() {
        // sha256_password over TLS or a unix socket answers the greeting with the password.
        for plugin in ["mysql_clear_password", "dialog", "sha256_password"] {
            assert_eq!(
                in_response(Some(plugin), true),
                Some(Exposure::Response {
                    plugin: plugin.to_owned()
                })
            );
            assert_eq!(in_response(Some(plugin), false), None, "empty password");
        }
        assert_eq!(in_response(Some("caching_sha2_password"), true), None);
        assert_eq!(in_response(Some("mysql_native_password"), true), None);
        assert_eq!(in_response(None, true), None);
    }
}
