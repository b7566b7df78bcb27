//! The tracker itself: errors and who is blamed, latency, KILL candidates held until whole,
//! renumbering behind a compressed leg.

use super::*;

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

#[test]
fn only_one_command_with_nothing_answered_is_forgotten() {
    let t0 = Instant::now();
    // Sent, nothing read back: forgotten, and the same command is tracked afresh.
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.on_client(&command(cmd::QUERY, b"SELECT 1")).unwrap();
    assert!(t.forget_unanswered());
    assert!(t.idle());
    t.on_client(&command(cmd::QUERY, b"SELECT 1")).unwrap();
    let (rs, _) = result_set(1, 1, 1, false, 0);
    let mut got = Vec::new();
    t.on_server(&rs, t0, |c| got.push(c)).unwrap();
    assert_eq!(got.len(), 1);
    assert!(t.idle());
    // Part of its answer read: kept.
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.on_client(&command(cmd::QUERY, b"SELECT 1")).unwrap();
    t.on_server(&rs[..rs.len() - 9], t0, |_| {}).unwrap();
    assert!(!t.forget_unanswered());
    assert_eq!(t.pending(), 1);
    // Only the first packet's bytes of an answer: kept (not at a boundary).
    let mut t = Tracker::new(caps(false), 1 << 30);
    t.on_client(&command(cmd::QUERY, b"SELECT 1")).unwrap();
    t.on_server(&rs[..2], t0, |_| {}).unwrap();
    assert!(!t.forget_unanswered());
    // Two commands outstanding: kept.
    let mut t = Tracker::new(caps(false), 1 << 30);
    let mut two = command(cmd::QUERY, b"SELECT 1");
    two.extend(command(cmd::QUERY, b"SELECT 2"));
    t.on_client(&two).unwrap();
    assert!(!t.forget_unanswered());
    assert_eq!(t.pending(), 2);
    // A command cut short: kept.
    let mut t = Tracker::new(caps(false), 1 << 30);
    let one = command(cmd::QUERY, b"SELECT 1");
    t.on_client(&one[..6]).unwrap();
    assert!(!t.forget_unanswered());
}
