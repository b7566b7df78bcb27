//! Hostile input: every truncation, garbage, random and mutated bytes never panic.

use super::super::client::R_HEADER_LEN;
use super::*;

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
            if len == 32 && matches!(parse_client_first(cut), Ok(ClientFirst::SslRequest { .. })) {
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
