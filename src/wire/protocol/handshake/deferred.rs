//! The two packets of a deferred connect that the proxy writes itself.
//!
//! In deferred mode the proxy greets the client before any backend is chosen, so the greeting is
//! a backend's greeting (learned earlier) carrying the proxy's own nonce. The client's answer to
//! that nonce is worthless to a backend, so the HandshakeResponse the backend gets carries no auth
//! data and names [`DEFERRED_PLUGIN`], a plugin no account uses: MySQL and MariaDB both answer
//! that with an AuthSwitchRequest for the account's real plugin and their own nonce, which the
//! proxy relays, and the client authenticates to the backend as it would directly. No password
//! passes through the proxy in a form it could use.

use super::bytes::{set_bits, Reader};
use super::client::{client_capabilities, skip_auth_data, R_CAPS, R_HEADER_LEN};
use super::greeting::{read_greeting, G_SCRAMBLE_1, G_SCRAMBLE_1_LEN};
use super::*;

/// The plugin the backend is told the client used. Any name no server implements does; this one
/// says who sent it when it shows up in a server's log.
pub const DEFERRED_PLUGIN: &str = "mysql_lb_deferred";

/// Overwrites a greeting's 20-byte scramble (auth-plugin-data parts 1 and 2) with `nonce`.
/// Errors, touching nothing, when the greeting has no 12-byte part 2 (a pre-4.1 server).
pub fn set_greeting_scramble(payload: &mut [u8], nonce: &[u8; 20]) -> Result<(), HandshakeError> {
    let (_, layout) = read_greeting(payload)?;
    let part1 = layout.fixed + G_SCRAMBLE_1;
    let part2 = layout.scramble_2.start;
    if layout.scramble_2.len() < 12 || payload.len() < part2 + 12 {
        return Err(truncated(Packet::Greeting, "auth-plugin-data part 2"));
    }
    payload[part1..part1 + G_SCRAMBLE_1_LEN].copy_from_slice(&nonce[..G_SCRAMBLE_1_LEN]);
    payload[part2..part2 + 12].copy_from_slice(&nonce[G_SCRAMBLE_1_LEN..]);
    Ok(())
}

/// A nonce as servers make them: 20 printable ASCII bytes (no NUL, which old clients would take
/// for the end of part 2), from `random` (at least 20 bytes of randomness).
pub fn nonce_from(random: &[u8]) -> [u8; 20] {
    let mut nonce = [0u8; 20];
    for (n, r) in nonce.iter_mut().zip(random) {
        // 94 printable characters from '!' to '~'.
        *n = b'!' + r % 94;
    }
    nonce
}

/// The HandshakeResponse41 the backend gets for a client's `payload`: every field as the client
/// sent it (capabilities, max packet size, character set, MariaDB's capabilities, user, database,
/// connect attributes and anything after them) but with empty auth data and [`DEFERRED_PLUGIN`]
/// as the plugin. The client must have set `CLIENT_PLUGIN_AUTH` (checked by the caller, who can
/// tell the client why).
pub fn response_for_backend(payload: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let capabilities = client_capabilities(payload)?;
    let mut r = Reader::new(payload, Packet::ClientResponse);
    r.take(R_HEADER_LEN, "fixed-length header")?;
    let user = r.nul_terminated("user name")?;
    skip_auth_data(&mut r, capabilities)?;
    let database = if capabilities & caps::CLIENT_CONNECT_WITH_DB != 0 {
        Some(r.nul_terminated("database name")?)
    } else {
        None
    };
    if capabilities & caps::CLIENT_PLUGIN_AUTH != 0 {
        r.nul_terminated_or_rest();
    }
    let rest = r.rest();
    let mut out = Vec::with_capacity(payload.len() + DEFERRED_PLUGIN.len());
    out.extend_from_slice(&payload[..R_HEADER_LEN]);
    out.extend_from_slice(user);
    out.push(0);
    // Empty auth data: a zero length in both length forms, a bare NUL in the oldest one.
    out.push(0);
    if let Some(db) = database {
        out.extend_from_slice(db);
        out.push(0);
    }
    out.extend_from_slice(DEFERRED_PLUGIN.as_bytes());
    out.push(0);
    out.extend_from_slice(rest);
    set_bits(
        &mut out,
        R_CAPS,
        4,
        caps::CLIENT_PLUGIN_AUTH,
        Packet::ClientResponse,
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::protocol::caps::*;

    fn response(caps: u32, user: &str, auth: &[u8], db: Option<&str>, plugin: &str) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&(16u32 << 20).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 19]);
        p.extend_from_slice(&0x1du32.to_le_bytes());
        p.extend_from_slice(user.as_bytes());
        p.push(0);
        p.push(auth.len() as u8);
        p.extend_from_slice(auth);
        if let Some(db) = db {
            p.extend_from_slice(db.as_bytes());
            p.push(0);
        }
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        if caps & CLIENT_CONNECT_ATTRS != 0 {
            let mut attrs = Vec::new();
            crate::wire::protocol::codec::put_lenenc_bytes(&mut attrs, b"_client_name");
            crate::wire::protocol::codec::put_lenenc_bytes(&mut attrs, b"test");
            crate::wire::protocol::codec::put_lenenc_bytes(&mut p, &attrs);
        }
        p
    }

    const BASE: u32 = CLIENT_PROTOCOL_41
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH
        | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;

    #[test]
    fn the_backend_gets_every_field_but_the_auth_data_and_the_plugin() {
        let caps = BASE | CLIENT_CONNECT_WITH_DB | CLIENT_CONNECT_ATTRS;
        let client = response(
            caps,
            "alice",
            &[7; 20],
            Some("reports"),
            "mysql_native_password",
        );
        let out = response_for_backend(&client).unwrap();
        let ClientFirst::Response(parsed) = parse_client_first(&out).unwrap() else {
            panic!("not a response");
        };
        let ClientFirst::Response(original) = parse_client_first(&client).unwrap() else {
            panic!("not a response");
        };
        assert_eq!(parsed.user, "alice");
        assert_eq!(parsed.database.as_deref(), Some("reports"));
        assert_eq!(parsed.auth_plugin.as_deref(), Some(DEFERRED_PLUGIN));
        assert_eq!(parsed.attributes, original.attributes);
        assert_eq!(parsed.capabilities, original.capabilities);
        assert_eq!(parsed.mariadb_capabilities, original.mariadb_capabilities);
        assert_eq!(out[..32], client[..32]);
        // The client's 20-byte answer is gone: the response shrank by it, less the longer name.
        let grown = DEFERRED_PLUGIN.len() as isize - "mysql_native_password".len() as isize;
        assert_eq!(out.len() as isize, client.len() as isize - 20 + grown);
        assert!(!out.windows(20).any(|w| w == [7; 20]));
    }

    #[test]
    fn without_a_database_or_attributes_the_layout_still_holds() {
        let client = response(BASE, "bob", &[1, 2, 3], None, "client_ed25519");
        let out = response_for_backend(&client).unwrap();
        let ClientFirst::Response(parsed) = parse_client_first(&out).unwrap() else {
            panic!("not a response");
        };
        assert_eq!(parsed.user, "bob");
        assert_eq!(parsed.database, None);
        assert_eq!(parsed.auth_plugin.as_deref(), Some(DEFERRED_PLUGIN));
        assert!(parsed.attributes.is_empty());
    }

    #[test]
    fn a_truncated_response_is_an_error_not_a_panic() {
        let client = response(
            BASE | CLIENT_CONNECT_WITH_DB,
            "alice",
            &[7; 20],
            Some("db"),
            "x",
        );
        for cut in 0..client.len() - 4 {
            let _ = response_for_backend(&client[..cut]);
        }
        assert!(response_for_backend(&client[..40]).is_err());
    }

    #[test]
    fn the_nonce_replaces_both_scramble_parts() {
        let mut greeting = crate::wire::protocol::handshake::tests::mariadb_greeting();
        let nonce = nonce_from(&[200; 20]);
        set_greeting_scramble(&mut greeting, &nonce).unwrap();
        assert_eq!(greeting_scramble(&greeting).unwrap(), nonce.to_vec());
        parse_greeting(&greeting).unwrap();
    }

    #[test]
    fn nonces_are_printable() {
        let random: Vec<u8> = (0..=255u8).cycle().take(20 * 13).collect();
        for chunk in random.chunks(20) {
            assert!(nonce_from(chunk).iter().all(|b| (b'!'..=b'~').contains(b)));
        }
    }
}
