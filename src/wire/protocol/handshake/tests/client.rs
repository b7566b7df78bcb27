//! The client's first packet: parsing, patching, the SSLRequest made from it, and what the two
//! ends negotiate.

use super::*;

#[test]
fn parses_real_mariadb_cli_response() {
    let r = response_of(&mariadb_cli_response());
    assert_eq!(r.capabilities, 0x00BF_A28C);
    assert_eq!(r.capabilities & CLIENT_MYSQL, 0);
    assert_eq!(r.mariadb_capabilities, 0x1D);
    assert_eq!(r.max_packet_size, 0x0010_0000);
    assert_eq!(r.charset, 0x21);
    assert_eq!(r.user, "bench");
    assert_eq!(r.database.as_deref(), Some("sbtest"));
    assert_eq!(r.auth_plugin.as_deref(), Some("mysql_native_password"));
    let pairs = r.attributes.pairs();
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "_os",
            "_client_name",
            "_pid",
            "_client_version",
            "_platform",
            "program_name",
            "_server_host"
        ]
    );
    assert_eq!(
        r.attributes.pairs()[1],
        ("_client_name".into(), "libmariadb".into())
    );
    assert_eq!(
        r.attributes.pairs()[6],
        ("_server_host".into(), "127.0.0.1".into())
    );
}

#[test]
fn parses_response_with_lenenc_auth_db_plugin_and_attrs() {
    let r = response_of(&full_response().build());
    assert_eq!(r.user, "app");
    assert_eq!(r.database.as_deref(), Some("shop"));
    assert_eq!(r.auth_plugin.as_deref(), Some("client_ed25519"));
    assert_eq!(r.charset, 45);
    assert_eq!(r.max_packet_size, 0x0100_0000);
    assert_eq!(
        r.mariadb_capabilities,
        MARIADB_CLIENT_PROGRESS | MARIADB_CLIENT_CACHE_METADATA
    );
    assert_eq!(
        r.attributes.pairs(),
        vec![
            ("_client_name".to_string(), "libmariadb".to_string()),
            ("_os".to_string(), "Linux".to_string()),
            ("a".to_string(), String::new()),
        ]
    );
}

#[test]
fn parses_response_with_long_lenenc_auth_data() {
    // Over 250 bytes: the length takes the 0xFC two-byte form.
    let auth = vec![0xAB; 300];
    let resp = Resp {
        auth: &auth,
        ..full_response()
    };
    let payload = resp.build();
    assert!(payload.windows(3).any(|w| w == [0xFC, 0x2C, 0x01]));
    let r = response_of(&payload);
    assert_eq!(r.database.as_deref(), Some("shop"));
    assert_eq!(r.attributes.pairs().len(), 3);
}

#[test]
fn parses_response_with_one_byte_auth_length_and_with_nul_terminated_auth() {
    let secure = Resp {
        caps: BASE_CLIENT | CLIENT_CONNECT_WITH_DB | CLIENT_PLUGIN_AUTH,
        attrs: &[],
        ..full_response()
    };
    let r = response_of(&secure.build());
    assert_eq!(
        (r.user.as_str(), r.database.as_deref()),
        ("app", Some("shop"))
    );
    assert!(r.attributes.is_empty());

    let legacy = Resp {
        caps: (BASE_CLIENT & !CLIENT_SECURE_CONNECTION) | CLIENT_CONNECT_WITH_DB,
        auth: b"12345678",
        ..full_response()
    };
    let r = response_of(&legacy.build());
    assert_eq!(r.database.as_deref(), Some("shop"));
    assert_eq!(r.auth_plugin, None);
}

#[test]
fn parses_response_with_zero_length_auth_data() {
    for extra in [CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA, 0] {
        let resp = Resp {
            caps: BASE_CLIENT
                | CLIENT_CONNECT_WITH_DB
                | CLIENT_PLUGIN_AUTH
                | CLIENT_CONNECT_ATTRS
                | extra,
            auth: b"",
            ..full_response()
        };
        let r = response_of(&resp.build());
        assert_eq!(r.user, "app");
        assert_eq!(r.database.as_deref(), Some("shop"));
        assert_eq!(r.auth_plugin.as_deref(), Some("client_ed25519"));
        assert_eq!(r.attributes.pairs().len(), 3);
    }
}

#[test]
fn parses_response_without_db_plugin_or_attrs() {
    let resp = Resp {
        caps: BASE_CLIENT | CLIENT_MYSQL,
        mariadb_caps: 0xFFFF_FFFF,
        ..full_response()
    };
    let r = response_of(&resp.build());
    assert_eq!(r.user, "app");
    assert_eq!(r.database, None);
    assert_eq!(r.auth_plugin, None);
    assert!(r.attributes.is_empty());
    assert_eq!(
        r.mariadb_capabilities, 0,
        "CLIENT_MYSQL set: bytes 28..32 are filler"
    );
}

#[test]
fn response_fields_agree_with_mysql_common() {
    let payload = mariadb_cli_response();
    let r = response_of(&payload);
    let mc = HandshakeResponse::deserialize((), &mut ParseBuf(&payload)).unwrap();
    let mut ours: Vec<_> = r.attributes.pairs();
    let mut theirs: Vec<_> = mc.connect_attributes().unwrap().into_iter().collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    assert_eq!(r.user.as_bytes(), mc.user());
}

#[test]
fn response_without_protocol_41_is_rejected() {
    let resp = Resp {
        caps: full_response().caps & !CLIENT_PROTOCOL_41,
        ..full_response()
    };
    let mut payload = resp.build();
    assert!(matches!(
        parse_client_first(&payload),
        Err(HandshakeError::NotProtocol41)
    ));
    let before = payload.clone();
    assert!(matches!(
        patch_client_first(&mut payload),
        Err(HandshakeError::NotProtocol41)
    ));
    assert_eq!(payload, before);
}

#[test]
fn detects_ssl_request() {
    let caps = BASE_CLIENT | CLIENT_SSL | CLIENT_PLUGIN_AUTH;
    let ssl_request = full_response().build()[..32].to_vec();
    let mut ssl_request = ssl_request;
    ssl_request[..4].copy_from_slice(&caps.to_le_bytes());
    assert_eq!(
        parse_client_first(&ssl_request).unwrap(),
        ClientFirst::SslRequest { capabilities: caps }
    );

    // Without CLIENT_SSL a 32-byte packet is a response that stops before the user name.
    ssl_request[..4].copy_from_slice(&(caps & !CLIENT_SSL).to_le_bytes());
    let err = parse_client_first(&ssl_request).unwrap_err();
    assert!(is_truncated(&err, Packet::ClientResponse), "{err}");

    // The full response after TLS keeps CLIENT_SSL set and is still a response.
    assert!(matches!(
        parse_client_first(&full_response().build()),
        Ok(ClientFirst::Response(_))
    ));
}

#[test]
fn patch_client_first_clears_unsupported_bits_in_response_and_ssl_request() {
    let original = full_response().build();
    let mut patched = original.clone();
    patch_client_first(&mut patched).unwrap();
    let r = response_of(&patched);
    assert_eq!(r.capabilities, full_response().caps & !UNSUPPORTED);
    assert_ne!(r.capabilities & CLIENT_DEPRECATE_EOF, 0);
    assert_eq!(r.mariadb_capabilities, MARIADB_CLIENT_PROGRESS);
    let changed = diff_positions(&original, &patched);
    assert!(
        changed.iter().all(|&i| i < 4 || (28..32).contains(&i)),
        "{changed:?}"
    );
    assert!(changed.contains(&28));

    let mut ssl = original[..32].to_vec();
    patch_client_first(&mut ssl).unwrap();
    assert_eq!(ssl, patched[..32]);
    ssl[..4].copy_from_slice(&(full_response().caps & !CLIENT_SSL).to_le_bytes());
    patch_client_first(&mut ssl).unwrap();
    assert_eq!(ssl, patched[..32]);
}

#[test]
fn patch_client_first_is_idempotent() {
    for original in [mariadb_cli_response(), full_response().build()] {
        let mut once = original.clone();
        patch_client_first(&mut once).unwrap();
        let mut twice = once.clone();
        patch_client_first(&mut twice).unwrap();
        assert_eq!(once, twice);
    }
}

#[test]
fn patch_client_first_leaves_mysql_clients_filler_alone() {
    let resp = Resp {
        caps: full_response().caps | CLIENT_MYSQL,
        mariadb_caps: 0xFFFF_FFFF,
        ..full_response()
    };
    let original = resp.build();
    let mut patched = original.clone();
    patch_client_first(&mut patched).unwrap();
    assert_eq!(patched[4..], original[4..]);
}

#[test]
fn patch_client_first_rejects_short_packets() {
    for len in 0..32 {
        let mut payload = full_response().build()[..len].to_vec();
        let before = payload.clone();
        assert!(patch_client_first(&mut payload).is_err(), "len {len}");
        assert_eq!(payload, before);
    }
}

#[test]
fn client_response_debug_has_no_auth_bytes() {
    let resp = full_response();
    let r = response_of(&resp.build());
    let debug = format!("{r:?} {:?}", ClientFirst::Response(r.clone()));
    assert!(!debug.contains("SECRETAUTH"), "{debug}");
    let as_numbers = format!("{:?}", &resp.auth[..4]);
    assert!(
        !debug.contains(&as_numbers[1..as_numbers.len() - 1]),
        "{debug}"
    );
}

// ---- negotiation ----

#[test]
fn negotiate_intersects_forwarded_flags() {
    let mut g = mariadb_greeting();
    let greeting = patch_greeting(&mut g).unwrap();
    let mut r = mariadb_cli_response();
    patch_client_first(&mut r).unwrap();
    let response = response_of(&r);
    let n = negotiate(&greeting, &response);
    assert_eq!(n.capabilities, 0x81FF_F7FE & 0x00BF_A28C);
    assert!(n.has(CLIENT_SESSION_TRACK));
    assert!(!n.has(CLIENT_DEPRECATE_EOF), "the CLI did not ask for it");
    assert_eq!(
        n.mariadb_capabilities,
        MARIADB_CLIENT_PROGRESS
            | MARIADB_CLIENT_STMT_BULK_OPERATIONS
            | MARIADB_CLIENT_EXTENDED_METADATA
    );
    assert!(!n.has_mariadb(MARIADB_CLIENT_CACHE_METADATA));
}

#[test]
fn negotiate_has_no_mariadb_caps_unless_both_sides_clear_client_mysql() {
    let greeting = parse_greeting(&mariadb_greeting()).unwrap();
    let mut response = response_of(&mariadb_cli_response());
    response.capabilities |= CLIENT_MYSQL;
    response.mariadb_capabilities = 0x1D;
    assert_eq!(negotiate(&greeting, &response).mariadb_capabilities, 0);

    let mysql = parse_greeting(&mysql8_greeting()).unwrap();
    let mut response = response_of(&mariadb_cli_response());
    response.capabilities &= !CLIENT_MYSQL;
    assert_eq!(negotiate(&mysql, &response).mariadb_capabilities, 0);
}

#[test]
fn the_ssl_request_is_the_responses_first_32_bytes_with_ssl_set() {
    let mut response = mariadb_cli_response();
    set_client_bits(&mut response, CLIENT_COMPRESS, CLIENT_LOCAL_FILES).unwrap();
    let request = ssl_request_for(&response).unwrap();
    let caps = u32::from_le_bytes(request[..4].try_into().unwrap());
    let response_caps = u32::from_le_bytes(response[..4].try_into().unwrap());
    assert_eq!(caps, response_caps | CLIENT_SSL);
    assert_ne!(response_caps & CLIENT_COMPRESS, 0);
    assert_eq!(response_caps & CLIENT_LOCAL_FILES, 0);
    assert_eq!(&request[4..], &response[4..32]);
    assert!(matches!(
        parse_client_first(&request),
        Ok(ClientFirst::SslRequest { .. })
    ));
}

#[test]
fn the_ssl_request_refuses_a_short_or_pre_41_response() {
    assert!(ssl_request_for(&mariadb_cli_response()[..20]).is_err());
    let mut old = mariadb_cli_response();
    old[1] &= !((CLIENT_PROTOCOL_41 >> 8) as u8);
    assert!(ssl_request_for(&old).is_err());
    assert!(set_client_bits(&mut old, CLIENT_SSL, 0).is_err());
}
