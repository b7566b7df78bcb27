//! Statement reporting and what a [`Completed`] counts: the digest table's view of a session.

use super::*;

/// Completed commands of `run`'s server bytes, whole.
fn server_done(t: &mut Tracker, bytes: &[u8]) -> Vec<Completed> {
    let mut done = Vec::new();
    t.on_server(bytes, Instant::now(), |c| done.push(c))
        .expect("server bytes accepted");
    done
}

#[test]
fn statements_are_reported_and_their_tags_come_back_with_counts() {
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.report_statements(64);
    let mut bytes = command(cmd::QUERY, b"SELECT a FROM t");
    bytes.extend(command(cmd::PING, b""));
    bytes.extend(command(cmd::QUERY, b"UPDATE t SET a = 1"));
    bytes.extend(command(cmd::STMT_PREPARE, b"SELECT ?"));
    bytes.extend(command(cmd::STMT_CLOSE, &[9, 0, 0, 0]));
    bytes.extend(command(cmd::QUERY, b"bad"));
    t.on_client(&bytes).unwrap();
    let found: Vec<(u8, Option<usize>)> = t
        .statements()
        .iter()
        .map(|s| (s.command, s.index))
        .collect();
    assert_eq!(
        found,
        vec![
            (cmd::QUERY, Some(0)),
            (cmd::QUERY, Some(2)),
            (cmd::STMT_PREPARE, Some(3)),
            (cmd::STMT_CLOSE, None),
            (cmd::QUERY, Some(4)),
        ]
    );
    let s0 = t.statements()[0];
    assert_eq!(t.statement_payload(&s0, &bytes), b"\x03SELECT a FROM t");
    for (i, tag) in [(0, 10), (2, 12), (3, 13), (4, 14)] {
        t.tag(i, tag);
    }
    t.on_written(Instant::now());
    let (rs, _) = result_set(1, 1, 3, false, AUTOCOMMIT);
    let mut reply = rs;
    reply.extend(ok(1, AUTOCOMMIT));
    // OK with 5 affected rows.
    reply.extend(pkt(1, &[0x00, 5, 0, 2, 0, 0, 0]));
    // STMT_OK: id 7, 0 columns, 0 params.
    reply.extend(pkt(1, &[0x00, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    reply.extend(err(1, 1064));
    let done = server_done(&mut t, &reply);
    let seen: Vec<_> = done
        .iter()
        .map(|c| (c.command, c.tag, c.rows, c.affected, c.error, c.prepared))
        .collect();
    assert_eq!(
        seen,
        vec![
            (cmd::QUERY, 10, 3, 0, false, None),
            (cmd::PING, 0, 0, 0, false, None),
            (cmd::QUERY, 12, 0, 5, false, None),
            (cmd::STMT_PREPARE, 13, 0, 0, false, Some(7)),
            (cmd::QUERY, 14, 0, 0, true, None),
        ]
    );
    assert_eq!(done[4].error_code, 1064, "the ERR's code");
    assert_eq!(done[0].error_code, 0);
}

#[test]
fn rows_are_counted_over_every_result_and_with_deprecate_eof() {
    for deprecate_eof in [false, true] {
        let mut t = Tracker::new(caps(deprecate_eof), 1 << 30);
        t.on_client(&command(cmd::QUERY, b"CALL p()")).unwrap();
        t.on_written(Instant::now());
        let (mut reply, seq) = result_set(1, 2, 4, deprecate_eof, AUTOCOMMIT | MORE);
        let (second, seq) = result_set(seq, 1, 2, deprecate_eof, AUTOCOMMIT | MORE);
        reply.extend(second);
        reply.extend(pkt(seq, &[0x00, 1, 0, 2, 0, 0, 0]));
        // Byte by byte: the counts must not depend on how reads split the response.
        let mut done = Vec::new();
        for b in &reply {
            done.extend(server_done(&mut t, std::slice::from_ref(b)));
        }
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].rows, done[0].affected), (6, 1), "{deprecate_eof}");
    }
}

#[test]
fn a_statement_spanning_reads_is_reported_with_its_first_bytes() {
    let text = vec![b'x'; 300];
    let packet = command(cmd::QUERY, &text);
    for split in [1, 3, 4, 5, 40, 200, packet.len() - 1] {
        let mut t = Tracker::new(caps(false), 1 << 30);
        t.report_statements(100);
        let mut first = command(cmd::PING, b"");
        first.extend_from_slice(&packet[..split]);
        let rest = &packet[split..];
        let (a, b) = rest.split_at(rest.len() / 2);
        // Three reads, so a middle one continues the packet; held bytes go again, first, as
        // the relay passes them.
        let mut held: Vec<u8> = Vec::new();
        let mut reported = Vec::new();
        for part in [&first[..], a, b] {
            let mut buf = std::mem::take(&mut held);
            buf.extend_from_slice(part);
            let scan = t.on_client(&buf).unwrap();
            for s in t.statements().to_vec() {
                reported.push(t.statement_payload(&s, &buf).to_vec());
            }
            held = buf[buf.len() - scan.held..].to_vec();
        }
        assert_eq!(reported.len(), 1, "split {split}");
        let payload = &reported[0];
        assert!(
            payload.len() >= 100,
            "split {split}: {} bytes",
            payload.len()
        );
        assert_eq!(&payload[..], &packet[4..4 + payload.len()], "split {split}");
    }
}

#[test]
fn nothing_is_reported_unless_asked() {
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.on_client(&command(cmd::QUERY, b"SELECT 1")).unwrap();
    assert!(t.statements().is_empty());
}

#[test]
fn a_statement_spanning_reads_is_reported_whole_up_to_the_limit() {
    let text: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let packet = command(cmd::QUERY, &text);
    for limit in [100, 5000] {
        for reads in [2, 3, 7] {
            let mut t = Tracker::new(caps(false), 1 << 30);
            t.report_statements(limit);
            let mut reported = Vec::new();
            for part in packet.chunks(packet.len().div_ceil(reads)) {
                t.on_client(part).unwrap();
                for s in t.statements().to_vec() {
                    reported.push(t.statement_payload(&s, part).to_vec());
                }
            }
            assert_eq!(reported.len(), 1);
            let want = &packet[4..packet.len().min(4 + limit)];
            assert_eq!(&reported[0][..], want, "limit {limit}, {reads} reads");
        }
    }
}

#[test]
fn a_paused_scan_stops_before_a_statement_command_and_lets_the_handled_one_through() {
    let mut t = Tracker::new(caps(true), 1 << 30);
    let mut bytes = command(cmd::QUERY, b"SELECT 1");
    let at = bytes.len();
    bytes.extend(command(cmd::STMT_EXECUTE, &[1, 0, 0, 0, 0, 1, 0, 0, 0]));
    bytes.extend(command(cmd::QUERY, b"SELECT 2"));
    t.pause_statements(false);
    let scan = t.on_client(&bytes).unwrap();
    // The query before it is counted; the execute and all after it are held, not counted.
    assert!(t.paused());
    assert_eq!((scan.commands, scan.held), (1, bytes.len() - at));
    assert_eq!(t.pending(), 1);

    // Handled by the pool, the execute goes through once; a second statement command stops.
    let mut t = Tracker::new(caps(true), 1 << 30);
    let mut rest = bytes[at..].to_vec();
    let second = rest.len();
    rest.extend(command(cmd::STMT_CLOSE, &[1, 0, 0, 0]));
    t.pause_statements(true);
    let scan = t.on_client(&rest).unwrap();
    assert!(t.paused());
    assert_eq!((scan.commands, scan.held), (2, rest.len() - second));
}

#[test]
fn a_paused_scan_holds_a_command_cut_before_its_command_byte_or_a_statement_command_cut_short() {
    let mut t = Tracker::new(caps(true), 1 << 30);
    t.pause_statements(false);
    let execute = command(cmd::STMT_EXECUTE, &[1, 0, 0, 0, 0, 1, 0, 0, 0]);
    let query = command(cmd::QUERY, b"SELECT 1");
    for cut in 1..5 {
        let scan = t.on_client(&query[..cut]).unwrap();
        assert_eq!(scan.held, cut, "a command's first {cut} bytes");
        assert!(!t.paused());
    }
    // A query cut after its command byte goes on (it is no statement command).
    let scan = t.on_client(&query[..6]).unwrap();
    assert_eq!((scan.held, t.paused()), (0, false));
    t.on_client(&query[6..]).unwrap();
    assert_eq!(t.pending(), 1);
    // An execute cut short is held whole from its header, and pauses.
    let scan = t.on_client(&execute[..7]).unwrap();
    assert_eq!((scan.held, t.paused()), (7, true));
    // The one let through may arrive in parts.
    t.pause_statements(true);
    assert_eq!(t.on_client(&execute[..7]).unwrap().held, 0);
    assert_eq!(t.on_client(&execute[7..]).unwrap().commands, 1);
    assert!(!t.paused());
    assert_eq!(t.pending(), 2);
}

#[test]
fn without_pausing_statement_commands_are_never_held() {
    let mut t = Tracker::new(caps(true), 1 << 30);
    let execute = command(cmd::STMT_EXECUTE, &[1, 0, 0, 0, 0, 1, 0, 0, 0]);
    let scan = t.on_client(&execute[..7]).unwrap();
    assert_eq!((scan.held, t.paused()), (0, false));
}
