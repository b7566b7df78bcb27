//! The greeting: parsing, patching, the connection id and the scramble.

use super::super::greeting::{
    read_greeting, G_CAPS_LOWER, G_CAPS_UPPER, G_FIXED_LEN, G_MARIADB_CAPS,
};
use super::*;

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
    let caps = CLIENT_MYSQL | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_TRANSACTIONS;
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
fn the_capabilities_alone_are_the_full_parses_and_fail_as_it_fails() {
    for payload in [
        mariadb_greeting(),
        mysql8_greeting(),
        greeting("8.0.0", 0x0000_A20F, 0, None),
    ] {
        let full = parse_greeting(&payload).unwrap();
        assert_eq!(greeting_capabilities(&payload).unwrap(), full.capabilities);
        for cut in 0..payload.len() {
            assert_eq!(
                greeting_capabilities(&payload[..cut]).map_err(|e| e.to_string()),
                parse_greeting(&payload[..cut])
                    .map(|g| g.capabilities)
                    .map_err(|e| e.to_string()),
                "cut at {cut}"
            );
        }
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
    assert_eq!(after.attributes.pairs().len(), 1);

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
