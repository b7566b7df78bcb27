//! Keeping a password that a client sends in clear off a plaintext backend leg that leaves the
//! host.
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

#[cfg(test)]
mod tests {
    //! Byte fixtures written from the protocol documentation. `caching_sha2_password` and
    //! `sha256_password` exist only in MySQL, and no MySQL 8 server can be installed here
    //! (Debian 12 ships MariaDB 10.11 only), so these cases are checked on bytes alone; the
    //! MariaDB cases (`dialog`, `mysql_clear_password`) also run end to end in
    //! tests/cleartext.rs.
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

    /// The relay itself, over in-memory legs with a MySQL 8 backend written from the protocol
    /// documentation (no MySQL 8 server can be installed here).
    mod relay {
        use std::time::Duration;

        use bytes::BytesMut;
        use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

        use crate::auth::{
            read_greeting, relay_connection_phase, AuthError, Exposure, HandshakeLimits, LegPlan,
        };
        use crate::leg::Leg;
        use crate::protocol::caps::*;
        use crate::protocol::handshake::Strip;

        const CAPS: u32 = CLIENT_LONG_PASSWORD
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_TRANSACTIONS
            | CLIENT_PLUGIN_AUTH;

        fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
            let mut p = (payload.len() as u32).to_le_bytes().to_vec();
            p[3] = seq;
            p.extend_from_slice(payload);
            p
        }

        /// HandshakeV10 from MySQL 8.0, default plugin caching_sha2_password.
        fn mysql8_greeting() -> Vec<u8> {
            let mut p = vec![10];
            p.extend_from_slice(b"8.0.36\0");
            p.extend_from_slice(&7u32.to_le_bytes());
            p.extend_from_slice(b"abcdefgh\0");
            p.extend_from_slice(&(CAPS as u16).to_le_bytes());
            p.push(0xFF);
            p.extend_from_slice(&2u16.to_le_bytes());
            p.extend_from_slice(&((CAPS >> 16) as u16).to_le_bytes());
            p.push(21);
            p.extend_from_slice(&[0; 10]);
            p.extend_from_slice(b"ijklmnopqrst\0caching_sha2_password\0");
            packet(0, &p)
        }

        /// HandshakeResponse41 for user `app` answering with `auth` for `plugin`.
        fn response(plugin: &str, auth: &[u8]) -> Vec<u8> {
            let mut p = CAPS.to_le_bytes().to_vec();
            p.extend_from_slice(&(1u32 << 24).to_le_bytes());
            p.push(45);
            p.extend_from_slice(&[0; 23]);
            p.extend_from_slice(b"app\0");
            p.push(auth.len() as u8);
            p.extend_from_slice(auth);
            p.extend_from_slice(plugin.as_bytes());
            p.push(0);
            packet(1, &p)
        }

        struct Run {
            result: Result<crate::auth::Authenticated, AuthError>,
            next_seq: u8,
            /// Everything the client received after the greeting.
            client_got: Vec<u8>,
            /// Everything the backend received after the client's response (or at all, when
            /// `response_reaches_backend` is false).
            backend_got: Vec<u8>,
        }

        /// A unix-socket client (`local`, secure) or a plaintext TCP one logs in; the backend
        /// answers its response with `reply` (seq 2), then both test ends read what is left.
        async fn run(local: bool, guard: bool, client_response: Vec<u8>, reply: &[u8]) -> Run {
            let (client_io, mut client) = tokio::io::duplex(4096);
            let (backend_io, mut backend) = tokio::io::duplex(4096);
            backend.write_all(&mysql8_greeting()).await.unwrap();
            let mut backend_io = Leg::Plain(backend_io);
            let greeting = read_greeting(&mut backend_io, 4096, Strip::UNSUPPORTED)
                .await
                .unwrap();
            let plan = LegPlan {
                client_tls: None,
                client_local: local,
                offer_compression: false,
                backend_tls: None,
                backend_compression: false,
                mariadb: false,
                guard_cleartext: guard,
            };
            let limits = HandshakeLimits {
                max_packet: 4096,
                timeout: Duration::from_secs(5),
                strip: Strip::UNSUPPORTED,
            };
            let relay = tokio::spawn(async move {
                let mut client_io: Leg<DuplexStream> = Leg::Plain(client_io);
                let mut next_seq = 0;
                let result = relay_connection_phase(
                    &mut client_io,
                    &mut backend_io,
                    greeting,
                    limits,
                    &plan,
                    &mut next_seq,
                )
                .await;
                (result, next_seq)
            });
            let mut greeting = vec![0; mysql8_greeting().len()];
            client.read_exact(&mut greeting).await.unwrap();
            client.write_all(&client_response).await.unwrap();
            let mut backend_got = BytesMut::new();
            let expected = client_response.len();
            let _ = tokio::time::timeout(Duration::from_millis(300), async {
                while backend_got.len() < expected {
                    if backend.read_buf(&mut backend_got).await.unwrap_or(0) == 0 {
                        break;
                    }
                }
            })
            .await;
            if backend_got.len() >= expected {
                backend.write_all(&packet(2, reply)).await.unwrap();
                backend_got.clear();
            }
            // A guarded relay ends and drops both legs (EOF here); one that forwarded waits for
            // the client's next packet, so the client end reads what came for a moment.
            let mut client_got = BytesMut::new();
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                while client.read_buf(&mut client_got).await.unwrap_or(0) > 0 {}
            })
            .await;
            drop(client);
            let mut rest = Vec::new();
            let _ =
                tokio::time::timeout(Duration::from_millis(500), backend.read_to_end(&mut rest))
                    .await;
            backend_got.extend_from_slice(&rest);
            drop(backend);
            let (result, next_seq) = tokio::time::timeout(Duration::from_secs(5), relay)
                .await
                .map_or((Err(AuthError::ClientTimeout("test".into())), 0), |r| {
                    r.unwrap()
                });
            Run {
                result,
                next_seq,
                client_got: client_got.to_vec(),
                backend_got: backend_got.to_vec(),
            }
        }

        fn scramble_answer() -> Vec<u8> {
            (0u8..32).collect()
        }

        #[tokio::test]
        async fn full_authentication_is_not_forwarded_to_a_secure_client() {
            let r = run(
                true,
                true,
                response("caching_sha2_password", &scramble_answer()),
                &[0x01, 0x04],
            )
            .await;
            assert!(
                matches!(
                    r.result,
                    Err(AuthError::CleartextPassword(Exposure::FullAuth))
                ),
                "{:?}",
                r.result.map(|_| ())
            );
            // The client never read "perform full authentication", so it sent no password;
            // our ERR takes that packet's place: sequence id 2.
            assert_eq!(r.client_got, b"");
            assert_eq!(r.next_seq, 2);
            assert_eq!(r.backend_got, b"");
        }

        #[tokio::test]
        async fn full_authentication_is_forwarded_when_not_guarded() {
            // A plaintext TCP client encrypts with the server's RSA key instead; an opted-in
            // backend gets the password as the client sends it.
            for (local, guard) in [(false, true), (true, false)] {
                let r = run(
                    local,
                    guard,
                    response("caching_sha2_password", &scramble_answer()),
                    &[0x01, 0x04],
                )
                .await;
                assert_eq!(
                    r.client_got,
                    packet(2, &[0x01, 0x04]),
                    "local {local} guard {guard}"
                );
            }
        }

        #[tokio::test]
        async fn a_sha256_password_response_never_reaches_the_backend() {
            // Over TLS or a unix socket, a client whose default plugin is sha256_password puts
            // its password, NUL-terminated, in its HandshakeResponse.
            let r = run(
                true,
                true,
                response("sha256_password", b"s3cret\0"),
                &[0x00, 0, 0, 2, 0, 0, 0],
            )
            .await;
            assert!(
                matches!(&r.result, Err(AuthError::CleartextPassword(Exposure::Response { plugin })) if plugin == "sha256_password"),
                "{:?}",
                r.result.map(|_| ())
            );
            assert_eq!(r.backend_got, b"", "the response must not be forwarded");
            // Our ERR answers the response: sequence id 2.
            assert_eq!(r.next_seq, 2);
        }

        #[tokio::test]
        async fn a_switch_to_sha256_password_is_not_forwarded() {
            let mut switch = b"\xFEsha256_password\0".to_vec();
            switch.extend_from_slice(b"abcdefghijklmnopqrst\0");
            let r = run(
                true,
                true,
                response("caching_sha2_password", &scramble_answer()),
                &switch,
            )
            .await;
            assert!(
                matches!(&r.result, Err(AuthError::CleartextPassword(Exposure::Switch { plugin })) if plugin == "sha256_password"),
                "{:?}",
                r.result.map(|_| ())
            );
            assert_eq!(r.client_got, b"");
        }
    }
}
