//! Where each kind of command's response ends, packet by packet.

use super::*;

#[test]
fn ok_and_err_end_simple_commands() {
    let mut r = Run::new(false);
    r.client(&command(cmd::QUERY, b"SET @a=1"));
    r.server(&ok(1, AUTOCOMMIT));
    r.client(&command(0x0E, b""));
    r.server(&ok(1, AUTOCOMMIT));
    r.client(&command(cmd::INIT_DB, b"nope"));
    r.server(&err(1, 1049));
    assert_eq!(r.done, vec![cmd::QUERY, 0x0E, cmd::INIT_DB]);
    assert!(r.t.idle());
}

#[test]
fn result_set_ends_at_eof_without_deprecate_eof() {
    let mut r = Run::new(false);
    r.client(&command(cmd::QUERY, b"SELECT a, b FROM t"));
    let (rs, _) = result_set(1, 2, 3, false, AUTOCOMMIT);
    r.server(&rs[..rs.len() - 1]);
    assert!(r.done.is_empty(), "not done before the last byte");
    r.server(&rs[rs.len() - 1..]);
    assert_eq!(r.done, vec![cmd::QUERY]);
}

#[test]
fn result_set_ends_at_ok_with_deprecate_eof() {
    let mut r = Run::new(true);
    r.client(&command(cmd::QUERY, b"SELECT a FROM t"));
    let (rs, _) = result_set(1, 1, 300, true, AUTOCOMMIT);
    r.server_bytewise(&rs);
    assert_eq!(r.done, vec![cmd::QUERY]);
    assert!(r.t.idle());
}

#[test]
fn rows_starting_with_fe_or_fb_or_00_are_rows() {
    let mut r = Run::new(false);
    r.client(&command(cmd::QUERY, b"SELECT x"));
    let mut s = pkt(1, &[1]);
    s.extend(coldef(2));
    s.extend(eof(3, 0));
    s.extend(pkt(4, &[0xFB])); // NULL column
    s.extend(pkt(5, &[0x00])); // empty string
                               // A 0xFE-headed row is ≥ 9 bytes (8-byte length follows).
    let mut big = vec![0xFE, 10, 0, 0, 0, 0, 0, 0, 0];
    big.extend_from_slice(b"0123456789");
    s.extend(pkt(6, &big));
    r.server(&s);
    assert!(r.done.is_empty());
    r.server(&eof(7, 0));
    assert_eq!(r.done, vec![cmd::QUERY]);
}

#[test]
fn multi_statements_continue_while_more_results_exists() {
    let mut r = Run::new(false);
    r.client(&command(
        cmd::QUERY,
        b"UPDATE t SET a=1; SELECT 1; SELECT 2",
    ));
    let mut s = ok_long(1, MORE);
    let (rs1, seq) = result_set(2, 1, 1, false, MORE);
    s.extend(rs1);
    let (rs2, _) = result_set(seq, 1, 1, false, AUTOCOMMIT);
    s.extend(rs2);
    r.server(&s[..s.len() - 3]);
    assert!(r.done.is_empty());
    r.server(&s[s.len() - 3..]);
    assert_eq!(r.done, vec![cmd::QUERY]);
}

#[test]
fn call_ends_with_final_ok_after_result_sets() {
    for deprecate_eof in [false, true] {
        let mut r = Run::new(deprecate_eof);
        r.client(&command(cmd::QUERY, b"CALL p()"));
        let (mut s, seq) = result_set(1, 1, 2, deprecate_eof, MORE);
        let (rs2, seq) = result_set(seq, 2, 1, deprecate_eof, MORE);
        s.extend(rs2);
        r.server(&s);
        assert!(r.done.is_empty(), "deprecate_eof={deprecate_eof}");
        r.server(&ok(seq, AUTOCOMMIT));
        assert_eq!(r.done, vec![cmd::QUERY]);
    }
}

#[test]
fn error_mid_rows_ends_response() {
    let mut r = Run::new(true);
    r.client(&command(cmd::QUERY, b"SELECT slow()"));
    let mut s = pkt(1, &[1]);
    s.extend(coldef(2));
    s.extend(row(3, b"1"));
    s.extend(err(4, 1317));
    r.server(&s);
    assert_eq!(r.done, vec![cmd::QUERY]);
}

#[test]
fn prepare_counts_params_and_columns() {
    for deprecate_eof in [false, true] {
        let mut r = Run::new(deprecate_eof);
        r.client(&command(cmd::STMT_PREPARE, b"SELECT ?, ?, a FROM t"));
        // STMT_OK: status, stmt id, columns=1, params=2, filler, warnings
        let mut s = pkt(1, &[0, 1, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0]);
        let mut seq = 2;
        for _ in 0..2 {
            s.extend(coldef(seq));
            seq += 1;
        }
        if !deprecate_eof {
            s.extend(eof(seq, 0));
            seq += 1;
        }
        s.extend(coldef(seq));
        seq += 1;
        r.server(&s);
        if deprecate_eof {
            assert_eq!(r.done, vec![cmd::STMT_PREPARE]);
        } else {
            assert!(r.done.is_empty());
            r.server(&eof(seq, 0));
            assert_eq!(r.done, vec![cmd::STMT_PREPARE]);
        }
        assert!(r.t.idle());
    }
}

#[test]
fn prepare_without_params_or_columns_is_one_packet() {
    let mut r = Run::new(false);
    r.client(&command(cmd::STMT_PREPARE, b"DO 1"));
    r.server(&pkt(1, &[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(r.done, vec![cmd::STMT_PREPARE]);
}

#[test]
fn prepare_error() {
    let mut r = Run::new(false);
    r.client(&command(cmd::STMT_PREPARE, b"SELEC"));
    r.server(&err(1, 1064));
    assert_eq!(r.done, vec![cmd::STMT_PREPARE]);
}

#[test]
fn cursor_execute_ends_after_column_eof_then_fetch_returns_rows() {
    let mut r = Run::new(false);
    r.client(&command(cmd::STMT_EXECUTE, &[1, 0, 0, 0, 1, 1, 0, 0, 0]));
    let mut s = pkt(1, &[1]);
    s.extend(coldef(2));
    s.extend(eof(3, AUTOCOMMIT | SERVER_STATUS_CURSOR_EXISTS));
    r.server(&s);
    assert_eq!(r.done, vec![cmd::STMT_EXECUTE]);
    r.client(&command(cmd::STMT_FETCH, &[1, 0, 0, 0, 10, 0, 0, 0]));
    let mut s = pkt(1, &[0, 0, 1]);
    s.extend(pkt(2, &[0, 0, 2]));
    s.extend(eof(3, SERVER_STATUS_CURSOR_EXISTS | 0x0080));
    r.server(&s);
    assert_eq!(r.done, vec![cmd::STMT_EXECUTE, cmd::STMT_FETCH]);
}

#[test]
fn cursor_execute_with_deprecate_eof_ends_at_cursor_ok() {
    let mut r = Run::new(true);
    r.client(&command(cmd::STMT_EXECUTE, &[1, 0, 0, 0, 1, 1, 0, 0, 0]));
    let mut s = pkt(1, &[1]);
    s.extend(coldef(2));
    s.extend(eof_ok(3, AUTOCOMMIT | SERVER_STATUS_CURSOR_EXISTS));
    r.server(&s);
    assert_eq!(r.done, vec![cmd::STMT_EXECUTE]);
}

#[test]
fn statistics_is_one_text_packet() {
    let mut r = Run::new(false);
    r.client(&command(cmd::STATISTICS, b""));
    // Its first byte is text ('U'), not a column count.
    r.server(&pkt(1, b"Uptime: 10  Threads: 1  Questions: 4"));
    assert_eq!(r.done, vec![cmd::STATISTICS]);
}

#[test]
fn field_list_is_defs_then_eof() {
    let mut r = Run::new(false);
    r.client(&command(cmd::FIELD_LIST, b"t\0"));
    let mut s = coldef(1);
    s.extend(coldef(2));
    r.server(&s);
    assert!(r.done.is_empty());
    r.server(&eof(3, 0));
    assert_eq!(r.done, vec![cmd::FIELD_LIST]);
}

#[test]
fn local_infile_exchange() {
    let mut r = Run::new(false);
    r.client(&command(
        cmd::QUERY,
        b"LOAD DATA LOCAL INFILE 'f' INTO TABLE t",
    ));
    let mut req = vec![0xFB];
    req.extend_from_slice(b"f");
    r.server(&pkt(1, &req));
    assert!(r.done.is_empty());
    // The file streams with continuing sequence ids — past 255 they wrap, and seq 0 is data here.
    let mut data = Vec::new();
    let mut seq = 2u8;
    for _ in 0..300 {
        data.extend(pkt(seq, b"1\n2\n"));
        seq = seq.wrapping_add(1);
    }
    data.extend(pkt(seq, b""));
    let scan = r.client(&data);
    assert_eq!(scan.commands, 0);
    r.server(&ok(seq.wrapping_add(1), AUTOCOMMIT));
    assert_eq!(r.done, vec![cmd::QUERY]);
    r.client(&command(0x0E, b""));
    r.server(&ok(1, AUTOCOMMIT));
    assert_eq!(r.done, vec![cmd::QUERY, 0x0E]);
}

#[test]
fn commands_without_response_are_not_queued() {
    let mut r = Run::new(false);
    let mut s = command(cmd::STMT_CLOSE, &[1, 0, 0, 0]);
    s.extend(command(cmd::STMT_SEND_LONG_DATA, &[1, 0, 0, 0, 0, 0, b'x']));
    s.extend(command(0x0E, b""));
    let scan = r.client(&s);
    assert_eq!(scan.commands, 1);
    r.server(&ok(1, 0));
    assert_eq!(r.done, vec![0x0E]);
    let scan = r.client(&command(cmd::QUIT, b""));
    assert!(scan.quit);
    assert!(r.t.idle());
}

#[test]
fn pipelined_commands_are_answered_in_order() {
    let mut r = Run::new(true);
    // PREPARE then EXECUTE with statement id 0xFFFFFFFF, sent together (MariaDB Connector/C).
    let mut s = command(cmd::STMT_PREPARE, b"SELECT 1");
    s.extend(command(
        cmd::STMT_EXECUTE,
        &[0xFF, 0xFF, 0xFF, 0xFF, 0, 1, 0, 0, 0],
    ));
    s.extend(command(cmd::STMT_CLOSE, &[0xFF, 0xFF, 0xFF, 0xFF]));
    s.extend(command(0x0E, b""));
    assert_eq!(r.client(&s).commands, 3);
    let mut resp = pkt(1, &[0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    resp.extend(coldef(2));
    let (rs, _) = result_set(1, 1, 1, true, AUTOCOMMIT);
    resp.extend(rs);
    resp.extend(ok(1, AUTOCOMMIT));
    r.server_bytewise(&resp);
    assert_eq!(r.done, vec![cmd::STMT_PREPARE, cmd::STMT_EXECUTE, 0x0E]);
}

#[test]
fn change_user_runs_an_auth_exchange() {
    let mut r = Run::new(false);
    r.client(&command(
        cmd::CHANGE_USER,
        b"bench\0\x14xxxxxxxxxxxxxxxxxxxx\0",
    ));
    let mut switch = vec![0xFE];
    switch.extend_from_slice(b"mysql_native_password\0abcdefghijklmnopqrst\0");
    r.server(&pkt(1, &switch));
    // The client's answer continues the sequence and is not a command.
    let scan = r.client(&pkt(2, &[7u8; 20]));
    assert_eq!(scan.commands, 0);
    r.server(&pkt(3, &[0x01, 0x03]));
    assert!(r.done.is_empty());
    r.server(&ok(4, AUTOCOMMIT));
    assert_eq!(r.done, vec![cmd::CHANGE_USER]);
}

#[test]
fn a_guarded_change_user_stops_at_a_switch_to_a_cleartext_plugin() {
    // MariaDB's auth_pam answers COM_CHANGE_USER for a PAM account with a switch to `dialog`.
    let mut switch = vec![0xFE];
    switch.extend_from_slice(b"dialog\0\x04Password: ");
    for guarded in [false, true] {
        let mut r = Run::new(false);
        if guarded {
            r.t.guard_cleartext();
        }
        r.client(&command(
            cmd::CHANGE_USER,
            b"pam_user\0\x14xxxxxxxxxxxxxxxxxxxx\0",
        ));
        let result = r.server_res(&pkt(1, &switch));
        if guarded {
            assert_eq!(
                result,
                Err(TrackError::CleartextPassword {
                    exposure: Exposure::Switch {
                        plugin: "dialog".to_owned()
                    },
                    start: Some(0),
                })
            );
            // An ERR in its place takes its sequence id.
            assert_eq!(r.t.next_server_seq(), 1);
        } else {
            assert_eq!(result, Ok(()));
        }
    }
}

/// COM_CHANGE_USER to `pam_user` answering with `auth` for `plugin` (secure connection and plugin
/// auth in the negotiated capabilities).
fn change_user_with(auth: &[u8], plugin: &str) -> Vec<u8> {
    let mut body = b"pam_user\0".to_vec();
    body.push(auth.len() as u8);
    body.extend_from_slice(auth);
    body.extend_from_slice(b"\0");
    body.extend_from_slice(&45u16.to_le_bytes());
    body.extend_from_slice(plugin.as_bytes());
    body.push(0);
    command(cmd::CHANGE_USER, &body)
}

fn guarded_with_plugin_auth() -> Run {
    let mut r = Run::new(false);
    r.t.caps.capabilities |= CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    r.t.guard_cleartext();
    r
}

#[test]
fn a_guarded_change_user_carrying_a_password_in_clear_is_not_taken() {
    let packet = change_user_with(b"pam-secret\0", "mysql_clear_password");
    let expected = Err(TrackError::CleartextPassword {
        exposure: Exposure::Response {
            plugin: "mysql_clear_password".to_owned(),
        },
        start: Some(0),
    });
    let mut r = guarded_with_plugin_auth();
    assert_eq!(r.t.on_client(&packet), expected);
    // Cut anywhere, the first part is held back until the packet is whole, then refused.
    for cut in [2, 4, 5, 12, packet.len() - 1] {
        let mut r = guarded_with_plugin_auth();
        let first = r.t.on_client(&packet[..cut]).expect("a part");
        assert_eq!(first.held, cut, "cut at {cut}");
        assert_eq!(r.t.on_client(&packet), expected, "cut at {cut}");
    }
    // Unguarded, or a hashing plugin: an ordinary command.
    let mut r = Run::new(false);
    r.t.caps.capabilities |= CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
    assert_eq!(r.client(&packet).commands, 1);
    let mut r = guarded_with_plugin_auth();
    let native = change_user_with(&[7; 20], "mysql_native_password");
    assert_eq!(r.client(&native).commands, 1);
}

#[test]
fn a_guarded_change_user_too_long_to_check_is_refused_unread() {
    let mut r = guarded_with_plugin_auth();
    let len = crate::wire::protocol::cleartext::MAX_CHANGE_USER_CHECKED + 1;
    let mut partial = header(len, 0).to_vec();
    partial.push(cmd::CHANGE_USER);
    assert_eq!(
        r.t.on_client(&partial),
        Err(TrackError::CleartextPassword {
            exposure: Exposure::Unchecked { len },
            start: Some(0),
        })
    );
}

#[test]
fn a_guarded_change_user_stops_at_caching_sha2_full_authentication() {
    // MySQL 8 only (no MySQL 8 server here): byte fixture from the protocol documentation. The
    // client's COM_CHANGE_USER answers the session's nonce with caching_sha2's scramble; the
    // server asks for full authentication.
    let mut r = Run::new(false);
    r.t.guard_cleartext();
    r.client(&command(
        cmd::CHANGE_USER,
        b"app\0\x20xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\0",
    ));
    // A fast-auth success goes through; the next exchange's full authentication does not.
    r.server(&pkt(1, &[0x01, 0x03]));
    r.server(&ok(2, AUTOCOMMIT));
    r.client(&command(
        cmd::CHANGE_USER,
        b"app\0\x20yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\0",
    ));
    assert!(matches!(
        r.server_res(&pkt(1, &[0x01, 0x04])),
        Err(TrackError::CleartextPassword {
            exposure: Exposure::FullAuth,
            start: Some(0)
        })
    ));
    assert_eq!(r.done, vec![cmd::CHANGE_USER]);
}

#[test]
fn mariadb_progress_packets_do_not_end_a_query() {
    let mut r = Run::new(false);
    r.client(&command(cmd::QUERY, b"ALTER TABLE t ADD c INT"));
    let progress = pkt(1, &[0xFF, 0xFF, 0xFF, 1, 1, 2, 0x10, 0, 0, 0, 0]);
    r.server(&progress);
    r.server(&progress[..0]);
    assert!(r.done.is_empty());
    let mut p2 = progress.clone();
    p2[3] = 2;
    r.server(&p2);
    r.server(&ok(3, AUTOCOMMIT));
    assert_eq!(r.done, vec![cmd::QUERY]);
}

#[test]
fn progress_code_is_an_error_without_the_capability() {
    let mut t = Tracker::new(Negotiated::default(), 1 << 30);
    t.on_client(&command(cmd::QUERY, b"x")).unwrap();
    let mut n = 0;
    t.on_server(&pkt(1, &[0xFF, 0xFF, 0xFF, 1]), Instant::now(), |_| n += 1)
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn binlog_stream_ends_at_eof_and_gives_no_sample() {
    let mut r = Run::new(false);
    r.client(&command(cmd::BINLOG_DUMP, &[4, 0, 0, 0, 0, 0, 2, 0, 0, 0]));
    let mut s = Vec::new();
    for i in 0..300u32 {
        s.extend(pkt((i + 1) as u8, &[0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]));
    }
    r.server(&s);
    // A semi-sync acknowledgement flows upstream mid-stream with its own sequence id.
    assert_eq!(r.client(&pkt(0, &[0xEF, 1, 2, 3])).commands, 0);
    r.server(&eof(((300 + 1) % 256) as u8, 0));
    assert!(r.done.is_empty());
    assert!(r.t.idle());
    r.client(&command(0x0E, b""));
    r.server(&ok(1, 0));
    assert_eq!(r.done, vec![0x0E]);
}

#[test]
fn large_row_over_16mib_is_classified_once() {
    let mut r = Run::new(true);
    r.client(&command(cmd::QUERY, b"SELECT big"));
    let mut s = pkt(1, &[1]);
    s.extend(coldef(2));
    // A row of exactly 0xFFFFFF + 10 bytes: first chunk starts with 0xFE (8-byte length).
    let mut chunk = vec![0xFE];
    chunk.extend_from_slice(&((MAX_CHUNK + 1) as u64).to_le_bytes());
    chunk.resize(MAX_CHUNK, b'x');
    s.extend(header(MAX_CHUNK, 3));
    s.extend(chunk);
    s.extend(pkt(4, &[b'y'; 10]));
    r.server(&s);
    assert!(
        r.done.is_empty(),
        "a 0xFE-headed 16 MiB row is not a terminator"
    );
    r.server(&eof_ok(5, 0));
    assert_eq!(r.done, vec![cmd::QUERY]);
}

#[test]
fn big_query_from_client_spanning_chunks() {
    let mut r = Run::new(false);
    let mut s = header(MAX_CHUNK, 0).to_vec();
    s.push(cmd::QUERY);
    s.resize(4 + MAX_CHUNK, b' ');
    s.extend(pkt(1, b"")); // exact multiple: an empty chunk ends it
    assert_eq!(r.client(&s).commands, 1);
    r.server(&ok(2, 0));
    assert_eq!(r.done, vec![cmd::QUERY]);
}
