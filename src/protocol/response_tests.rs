//! Byte-fixture tests for the response tracker: each builds the exact packets a server sends.

use super::*;
use crate::protocol::caps::{
    CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, MARIADB_CLIENT_PROGRESS,
};
use crate::protocol::codec::header;

const MORE: u16 = SERVER_MORE_RESULTS_EXISTS;
const AUTOCOMMIT: u16 = 0x0002;

fn caps(deprecate_eof: bool) -> Negotiated {
    Negotiated {
        capabilities: CLIENT_PROTOCOL_41
            | if deprecate_eof {
                CLIENT_DEPRECATE_EOF
            } else {
                0
            },
        mariadb_capabilities: MARIADB_CLIENT_PROGRESS,
    }
}

fn pkt(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = header(payload.len(), seq).to_vec();
    v.extend_from_slice(payload);
    v
}

fn ok(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0x00, 0x00, 0x00];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    pkt(seq, &p)
}

/// OK with large affected-rows / insert-id values so the status sits behind long lenencs.
fn ok_long(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0x00, 0xFE, 1, 2, 3, 4, 5, 6, 7, 8, 0xFD, 1, 2, 3];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    pkt(seq, &p)
}

fn eof(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    pkt(seq, &p)
}

/// The OK-with-0xFE that ends a result set under CLIENT_DEPRECATE_EOF.
fn eof_ok(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    pkt(seq, &p)
}

fn err(seq: u8, code: u16) -> Vec<u8> {
    let mut p = vec![0xFF];
    p.extend_from_slice(&code.to_le_bytes());
    p.extend_from_slice(b"#42000oops");
    pkt(seq, &p)
}

fn coldef(seq: u8) -> Vec<u8> {
    let mut p = vec![3];
    p.extend_from_slice(b"def");
    p.extend_from_slice(&[
        0, 0, 0, 1, b'a', 1, b'a', 0x0C, 0x3F, 0, 11, 0, 0, 0, 3, 0, 0, 0, 0, 0,
    ]);
    pkt(seq, &p)
}

fn row(seq: u8, text: &[u8]) -> Vec<u8> {
    let mut p = vec![text.len() as u8];
    p.extend_from_slice(text);
    pkt(seq, &p)
}

fn command(code: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![code];
    p.extend_from_slice(body);
    pkt(0, &p)
}

/// A result set of `cols` columns and `rows` rows starting at sequence id `seq`; returns the bytes
/// and the sequence id after it.
fn result_set(
    mut seq: u8,
    cols: u8,
    rows: usize,
    deprecate_eof: bool,
    status: u16,
) -> (Vec<u8>, u8) {
    let mut v = pkt(seq, &[cols]);
    seq += 1;
    for _ in 0..cols {
        v.extend(coldef(seq));
        seq += 1;
    }
    if !deprecate_eof {
        v.extend(eof(seq, AUTOCOMMIT));
        seq += 1;
    }
    for i in 0..rows {
        v.extend(row(seq, format!("{i}").as_bytes()));
        seq = seq.wrapping_add(1);
    }
    if deprecate_eof {
        v.extend(eof_ok(seq, status));
    } else {
        v.extend(eof(seq, status));
    }
    (v, seq.wrapping_add(1))
}

struct Run {
    t: Tracker,
    done: Vec<u8>,
}

impl Run {
    fn new(deprecate_eof: bool) -> Self {
        Self {
            t: Tracker::new(caps(deprecate_eof), 1 << 30),
            done: Vec::new(),
        }
    }

    fn client(&mut self, bytes: &[u8]) -> ClientScan {
        let s = self.t.on_client(bytes).expect("client bytes accepted");
        self.t.on_written(Instant::now());
        s
    }

    fn server(&mut self, bytes: &[u8]) {
        self.server_res(bytes).expect("server bytes accepted");
    }

    fn server_res(&mut self, bytes: &[u8]) -> Result<(), TrackError> {
        let done = &mut self.done;
        self.t
            .on_server(bytes, Instant::now(), |c| done.push(c.command))
    }

    /// Feeds server bytes one at a time, the worst split a socket can produce.
    fn server_bytewise(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.server(std::slice::from_ref(b));
        }
    }
}

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
    let len = crate::protocol::cleartext::MAX_CHANGE_USER_CHECKED + 1;
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

#[test]
fn backend_out_of_order_is_an_error_at_the_packet() {
    let mut r = Run::new(false);
    r.client(&command(cmd::QUERY, b"SELECT 1"));
    let mut s = pkt(1, &[1]);
    s.extend(coldef(5));
    let e = r.server_res(&s).unwrap_err();
    assert_eq!(
        e,
        TrackError::BackendOutOfOrder {
            expected: 2,
            got: 5,
            start: Some(5)
        }
    );
    assert!(!e.is_client());
}

#[test]
fn client_garbage_is_a_client_error() {
    let mut t = Tracker::new(caps(false), 1 << 20);
    let e = t.on_client(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(e.is_client(), "{e}");
}

#[test]
fn client_oversized_packet_is_a_client_error() {
    let mut t = Tracker::new(caps(false), 1024);
    let e = t.on_client(&header(2000, 0)).unwrap_err();
    assert!(matches!(
        e,
        TrackError::ClientFrame(FrameError::TooLarge { .. })
    ));
    assert!(e.is_client());
}

#[test]
fn malformed_column_count_is_a_backend_error() {
    let mut r = Run::new(false);
    r.client(&command(cmd::QUERY, b"SELECT 1"));
    let e = r.server_res(&pkt(1, &[0xFC, 1])).unwrap_err();
    assert!(matches!(e, TrackError::BackendMalformed { .. }));
}

#[test]
fn unsolicited_server_packet_is_counted_not_fatal() {
    let mut r = Run::new(false);
    r.server(&err(0, 1927));
    assert_eq!(r.t.unsolicited, 1);
}

#[test]
fn latency_is_measured_from_write_to_last_packet() {
    let mut t = Tracker::new(caps(false), 1 << 30);
    let t0 = Instant::now();
    t.on_client(&command(cmd::QUERY, b"SELECT 1")).unwrap();
    t.on_written(t0);
    let (rs, _) = result_set(1, 1, 1, false, 0);
    let mut got = Vec::new();
    let first_part = rs.len() - 9;
    t.on_server(&rs[..first_part], t0 + Duration::from_millis(3), |c| {
        got.push(c)
    })
    .unwrap();
    t.on_server(&rs[first_part..], t0 + Duration::from_millis(10), |c| {
        got.push(c)
    })
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].latency, Duration::from_millis(10));
    assert_eq!(got[0].first_byte, Duration::from_millis(3));
    assert_eq!(got[0].kind(), CommandKind::Query);
}

#[test]
fn pseudo_random_bytes_never_panic() {
    let mut x: u64 = 0x2545F4914F6CDD1D;
    for round in 0..2000 {
        let mut t = Tracker::new(caps(round % 2 == 0), 1 << 20);
        let mut buf = vec![0u8; (round % 97) + 1];
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        // Start with a valid command so server bytes get classified.
        let _ = t.on_client(&command(cmd::QUERY, b"x"));
        let _ = t.on_server(&buf, Instant::now(), |_| {});
        let _ = t.on_client(&buf);
    }
}

#[test]
fn every_kill_command_is_located_in_the_buffer() {
    let mut r = Run::new(false);
    let mut s = command(cmd::QUERY, b"SELECT 1");
    let first = s.len();
    s.extend(command(cmd::QUERY, b" kill query 3221225473"));
    let second = s.len();
    s.extend(command(cmd::QUERY, b"KILL QUERY 3221225474"));
    let scan = r.client(&s);
    assert_eq!(scan.commands, 3);
    assert_eq!(scan.held, 0);
    assert_eq!(r.t.kill_candidates(), &[(first, second), (second, s.len())]);
    r.client(&command(cmd::PROCESS_KILL, &[1, 0, 0, 0]));
    assert_eq!(r.t.kill_candidates(), &[(0, 9)]);
    r.client(&command(cmd::QUERY, b"SELECT 'kill'"));
    assert!(r.t.kill_candidates().is_empty());
}

#[test]
fn a_kill_cut_by_the_read_is_held_back_until_whole() {
    let mut t = Tracker::new(caps(false), 1 << 30);
    let ping = command(0x0E, b"");
    let kill = command(cmd::QUERY, b"KILL QUERY 3221225473");
    let stream = [ping.clone(), kill.clone()].concat();
    // Cut anywhere inside the KILL (header included): the ping goes, the KILL's bytes wait.
    for cut in ping.len() + 1..stream.len() {
        let mut t = Tracker::new(caps(false), 1 << 30);
        let scan = t.on_client(&stream[..cut]).unwrap();
        assert_eq!(
            (scan.commands, scan.held),
            (1, cut - ping.len()),
            "cut {cut}"
        );
        assert!(t.kill_candidates().is_empty());
        // The held bytes come again, first, with the rest.
        let scan = t.on_client(&stream[ping.len()..]).unwrap();
        assert_eq!((scan.commands, scan.held), (1, 0), "cut {cut}");
        assert_eq!(t.kill_candidates(), &[(0, kill.len())]);
        assert_eq!(t.pending(), 2);
    }
    // Commands that cannot be a KILL pass as they come.
    for other in [
        command(cmd::QUERY, b"SELECT 'KILL QUERY 1'"),
        command(cmd::QUERY, b"  kilt 5"),
        command(cmd::STMT_EXECUTE, &[1, 0, 0, 0, 0, 1, 0, 0, 0]),
        command(
            cmd::QUERY,
            format!("KILL {}", " ".repeat(MAX_KILL_PACKET)).as_bytes(),
        ),
    ] {
        let scan = t.on_client(&other[..other.len() - 1]).unwrap();
        assert_eq!(scan.held, 0, "{other:02x?}");
        t.on_client(&other[other.len() - 1..]).unwrap();
    }
    // A header cut short may still start a KILL.
    assert!(may_become_kill(&kill[..3]));
    assert!(!may_become_kill(&[5, 0, 0, 1, cmd::QUERY]), "not a command");
}

/// Fed the way the relay feeds it (held bytes first again), the tracker reports each KILL of a
/// stream exactly once, whole, wherever two cuts fall.
#[test]
fn every_kill_is_reported_once_whatever_the_cuts() {
    let kill_a = command(cmd::QUERY, b" KILL QUERY 3221225473");
    let kill_b = command(cmd::PROCESS_KILL, &[1, 0, 0, 0xC0]);
    let stream = [
        command(0x0E, b""),
        kill_a.clone(),
        command(cmd::QUERY, b"SELECT 1"),
        kill_b.clone(),
    ]
    .concat();
    for i in 0..=stream.len() {
        for j in i..=stream.len() {
            let mut t = Tracker::new(caps(false), 1 << 30);
            let mut held: Vec<u8> = Vec::new();
            let mut kills = Vec::new();
            for piece in [&stream[..i], &stream[i..j], &stream[j..]] {
                let buf = [held.as_slice(), piece].concat();
                let scan = t.on_client(&buf).unwrap();
                kills.extend(t.kill_candidates().iter().map(|&(s, e)| buf[s..e].to_vec()));
                held = buf[buf.len() - scan.held..].to_vec();
            }
            assert!(held.is_empty(), "cuts {i}, {j}");
            assert_eq!(kills, [kill_a.clone(), kill_b.clone()], "cuts {i}, {j}");
            assert_eq!(t.pending(), 4, "cuts {i}, {j}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Renumbering behind a compressed leg: inner sequence ids restart at every compressed flush.

/// One read of a renumbering script: who sent it, its bytes as sent, and as the plain protocol
/// numbers them.
struct Read {
    from_client: bool,
    sent: Vec<u8>,
    plain: Vec<u8>,
}

fn from_client(sent: Vec<u8>, plain: Vec<u8>) -> Read {
    Read {
        from_client: true,
        sent,
        plain,
    }
}

fn from_server(sent: Vec<u8>, plain: Vec<u8>) -> Read {
    Read {
        from_client: false,
        sent,
        plain,
    }
}

/// What a script produced: the bytes forwarded per read, the commands completed, what is left.
#[derive(Debug)]
struct Played {
    forwarded: Vec<Vec<u8>>,
    done: Vec<u8>,
    pending: usize,
    idle: bool,
}

/// Plays `script` through a tracker renumbering the given directions, as the relay feeds it (a
/// held KILL comes again, first), cutting read `cut.0` into two reads at offset `cut.1`.
fn play(
    script: &[Read],
    client: bool,
    server: bool,
    cut: Option<(usize, usize)>,
) -> Result<Played, TrackError> {
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.renumber(client, server);
    let mut played = Played {
        forwarded: Vec::new(),
        done: Vec::new(),
        pending: 0,
        idle: false,
    };
    let mut held = Vec::new();
    for (i, read) in script.iter().enumerate() {
        let at = cut.filter(|c| c.0 == i).map_or(read.sent.len(), |c| c.1);
        let mut out = Vec::new();
        for piece in [&read.sent[..at], &read.sent[at..]] {
            if read.from_client {
                let mut buf = [held.as_slice(), piece].concat();
                let scan = t.on_client_mut(&mut buf)?;
                t.on_written(Instant::now());
                let keep = buf.len() - scan.held;
                out.extend_from_slice(&buf[..keep]);
                held = buf[keep..].to_vec();
            } else {
                let mut buf = piece.to_vec();
                let done = &mut played.done;
                t.on_server_mut(&mut buf, Instant::now(), |c| {
                    assert!(c.first_byte <= c.latency, "{c:?}");
                    done.push(c.command);
                })?;
                out.extend_from_slice(&buf);
            }
        }
        played.forwarded.push(out);
    }
    assert!(held.is_empty(), "bytes still held at the end");
    played.pending = t.pending();
    played.idle = t.idle();
    Ok(played)
}

/// Every read comes out in the plain numbering, whichever read is cut wherever in `cuts(read)`,
/// and the commands complete exactly as `done` says.
fn renumbers_to_plain(
    script: &[Read],
    client: bool,
    server: bool,
    done: &[u8],
    cuts: impl Fn(&Read) -> Vec<usize>,
) {
    let plain: Vec<&[u8]> = script.iter().map(|r| r.plain.as_slice()).collect();
    for (i, read) in script.iter().enumerate() {
        for at in cuts(read) {
            let played = play(script, client, server, Some((i, at)))
                .unwrap_or_else(|e| panic!("read {i} cut at {at}: {e}"));
            assert!(
                played
                    .forwarded
                    .iter()
                    .map(Vec::as_slice)
                    .eq(plain.iter().copied()),
                "read {i} cut at {at}: not the plain numbering"
            );
            assert_eq!(played.done, done, "read {i} cut at {at}");
            assert_eq!(
                (played.pending, played.idle),
                (0, true),
                "read {i} cut at {at}"
            );
        }
    }
}

fn every_offset(read: &Read) -> Vec<usize> {
    (0..=read.sent.len()).collect()
}

/// `SELECT 1; SELECT 2; SET @a=1` over `mariadb --compress`: the server restarts the inner ids of
/// each result from its frame counter (1..5, then 2..6, then 3), then a pipelined ping.
fn multi_result_script() -> Vec<Read> {
    let query = command(cmd::QUERY, b"SELECT 1; SELECT 2; SET @a=1");
    let ping = command(0x0E, b"");
    let drifted = [
        result_set(1, 1, 1, false, AUTOCOMMIT | MORE).0,
        result_set(2, 1, 1, false, AUTOCOMMIT | MORE).0,
        ok(3, AUTOCOMMIT),
        ok(2, AUTOCOMMIT),
    ]
    .concat();
    let plain = [
        result_set(1, 1, 1, false, AUTOCOMMIT | MORE).0,
        result_set(6, 1, 1, false, AUTOCOMMIT | MORE).0,
        ok(11, AUTOCOMMIT),
        ok(1, AUTOCOMMIT),
    ]
    .concat();
    let client = [query, ping].concat();
    vec![
        from_client(client.clone(), client),
        from_server(drifted, plain),
    ]
}

#[test]
fn multi_result_ids_from_a_compressed_backend_are_renumbered_at_every_split() {
    let script = multi_result_script();
    // Without renumbering the drift is refused where the second result starts.
    let refused = play(&script, false, false, None).unwrap_err();
    assert!(
        matches!(
            refused,
            TrackError::BackendOutOfOrder {
                expected: 6,
                got: 2,
                ..
            }
        ),
        "{refused}"
    );
    renumbers_to_plain(&script, false, true, &[cmd::QUERY, 0x0E], every_offset);
}

/// LOAD DATA LOCAL INFILE with both legs compressed: the client's file packets and the server's
/// replies both carry ids restarted from their frame counters.
fn load_data_script() -> Vec<Read> {
    let query = command(cmd::QUERY, b"LOAD DATA LOCAL INFILE 'f' INTO TABLE t");
    let request = pkt(1, b"\xFBf");
    let (mut sent, mut plain) = (Vec::new(), Vec::new());
    for i in 0..10u8 {
        sent.extend(pkt(4 + i, b"1\n2\n"));
        plain.extend(pkt(2 + i, b"1\n2\n"));
    }
    sent.extend(pkt(15, b""));
    plain.extend(pkt(12, b""));
    let ping = command(0x0E, b"");
    vec![
        from_client(query.clone(), query),
        from_server(request.clone(), request),
        from_client(sent, plain),
        from_server(ok(5, AUTOCOMMIT), ok(13, AUTOCOMMIT)),
        from_client(ping.clone(), ping),
        from_server(ok(3, AUTOCOMMIT), ok(1, AUTOCOMMIT)),
    ]
}

#[test]
fn load_data_ids_off_in_both_directions_are_renumbered_at_every_split() {
    let script = load_data_script();
    let refused = play(&script, false, false, None).unwrap_err();
    assert!(
        matches!(
            refused,
            TrackError::ClientOutOfOrder {
                expected: 2,
                got: 4,
                ..
            }
        ),
        "{refused}"
    );
    // Renumbering only the client's direction is not enough: the server's OK is still refused.
    let refused = play(&script, true, false, None).unwrap_err();
    assert!(
        matches!(
            refused,
            TrackError::BackendOutOfOrder {
                expected: 13,
                got: 5,
                ..
            }
        ),
        "{refused}"
    );
    renumbers_to_plain(&script, true, true, &[cmd::QUERY, 0x0E], every_offset);
}

/// Connector/C writes every chunk of a command of 16 MiB or more with inner id 0.
fn big_command_script() -> Vec<Read> {
    let total = 17 << 20;
    let mut payload = vec![b' '; total];
    payload[0] = cmd::QUERY;
    payload[1..9].copy_from_slice(b"SELECT 1");
    let chunked = |second_seq: u8| {
        let mut v = header(MAX_CHUNK, 0).to_vec();
        v.extend_from_slice(&payload[..MAX_CHUNK]);
        v.extend(header(total - MAX_CHUNK, second_seq));
        v.extend_from_slice(&payload[MAX_CHUNK..]);
        v.extend(command(0x0E, b""));
        v
    };
    vec![
        from_client(chunked(0), chunked(1)),
        from_server(
            [ok(2, AUTOCOMMIT), ok(1, AUTOCOMMIT)].concat(),
            [ok(2, AUTOCOMMIT), ok(1, AUTOCOMMIT)].concat(),
        ),
    ]
}

/// Offsets around every header of a read (the first, the continuation's, the last packet's):
/// cutting a 17 MiB read at each of its offsets would take minutes for nothing more.
fn around_headers(read: &Read) -> Vec<usize> {
    let len = read.sent.len();
    let second = MAX_CHUNK + 4;
    (0..=12)
        .chain(second.saturating_sub(8)..(second + 12).min(len))
        .chain(len.saturating_sub(16)..=len)
        .filter(|&at| at <= len)
        .collect()
}

#[test]
fn a_big_command_with_every_chunk_at_id_0_is_renumbered() {
    let script = big_command_script();
    let refused = play(&script, false, false, None).unwrap_err();
    assert!(
        matches!(
            refused,
            TrackError::ClientFrame(FrameError::ChunkOutOfOrder {
                expected: 1,
                got: 0,
                ..
            })
        ),
        "{refused}"
    );
    renumbers_to_plain(&script, true, false, &[cmd::QUERY, 0x0E], around_headers);
}

#[test]
fn renumbering_rewrites_only_what_is_off_and_only_where_asked() {
    // Plain bytes pass through renumbering unchanged.
    let script = multi_result_script();
    let plain: Vec<Read> = script
        .iter()
        .map(|r| Read {
            from_client: r.from_client,
            sent: r.plain.clone(),
            plain: r.plain.clone(),
        })
        .collect();
    renumbers_to_plain(&plain, true, true, &[cmd::QUERY, 0x0E], |_| vec![0]);
    // A direction left alone is still checked: drift from the server with only the client's
    // direction renumbered is refused, and nothing of the refused read is rewritten.
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.renumber(true, false);
    let mut query = command(cmd::QUERY, b"SELECT 1");
    t.on_client_mut(&mut query).unwrap();
    let mut reply = ok(4, AUTOCOMMIT);
    let e = t
        .on_server_mut(&mut reply, Instant::now(), |_| {})
        .unwrap_err();
    assert!(
        matches!(e, TrackError::BackendOutOfOrder { got: 4, .. }),
        "{e}"
    );
    assert_eq!(reply, ok(4, AUTOCOMMIT));
    // The read-only entry points never rewrite, so they check even with renumbering on.
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.renumber(true, true);
    let e = t.on_client(&pkt(3, &[cmd::QUERY])).unwrap_err();
    assert!(
        matches!(e, TrackError::ClientOutOfOrder { got: 3, .. }),
        "{e}"
    );
}

#[test]
fn a_renumbered_kill_is_located_with_id_0_even_when_held_back() {
    let ping = pkt(5, &[0x0E]);
    let kill = pkt(7, b"\x03KILL QUERY 3221225473");
    let stream = [ping.clone(), kill.clone()].concat();
    for cut in 0..=stream.len() {
        let mut t = Tracker::new(caps(false), 1 << 30);
        t.renumber(true, false);
        let mut kills = Vec::new();
        let mut forwarded = Vec::new();
        let mut held = Vec::new();
        for piece in [&stream[..cut], &stream[cut..]] {
            let mut buf = [held.as_slice(), piece].concat();
            let scan = t.on_client_mut(&mut buf).unwrap();
            kills.extend(t.kill_candidates().iter().map(|&(s, e)| buf[s..e].to_vec()));
            let keep = buf.len() - scan.held;
            forwarded.extend_from_slice(&buf[..keep]);
            held = buf[keep..].to_vec();
        }
        assert!(held.is_empty(), "cut {cut}");
        let plain_kill = pkt(0, b"\x03KILL QUERY 3221225473");
        assert_eq!(kills, std::slice::from_ref(&plain_kill), "cut {cut}");
        assert_eq!(
            forwarded,
            [pkt(0, &[0x0E]), plain_kill].concat(),
            "cut {cut}"
        );
        assert_eq!(t.pending(), 2, "cut {cut}");
    }
}
