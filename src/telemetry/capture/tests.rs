use std::time::Duration;

use super::format::{decode_file, Body, Record, STARTED_BEFORE};
use super::*;

/// The command records among `records`, in order.
fn commands_of(records: &[format::Record]) -> Vec<&format::Command> {
    records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Command(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn who() -> SessionProfile<'static> {
    SessionProfile {
        user: "app",
        schema: "shop",
        pool: "rw",
        backend: "db1",
        client: "127.0.0.1:5000",
        capabilities: crate::wire::protocol::caps::CLIENT_SECURE_CONNECTION,
        charset: 45,
    }
}

fn completed(command: u8, rows: u64, prepared: Option<u32>) -> Completed {
    Completed {
        command,
        latency: Duration::from_micros(250),
        first_byte: Duration::from_micros(100),
        rows,
        affected: 0,
        error: false,
        error_code: 0,
        prepared,
        at: Some(Instant::now()),
        tag: 0,
        end: None,
    }
}

fn capture_into(dir: &Path, filter: Filter) -> Capture {
    let c = Capture::new(prometheus::IntCounter::new("dropped", "dropped").unwrap());
    c.start(Request {
        dir: dir.to_path_buf(),
        duration: None,
        max_bytes: None,
        rotate_bytes: None,
        filter,
    })
    .unwrap();
    c
}

fn stop_and_read(c: &Capture, dir: &Path) -> Vec<Record> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(c.stop()).unwrap();
    assert_eq!(status["running"], false, "{status}");
    let mut records = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        let d = decode_file(&std::fs::read(f).unwrap()).unwrap();
        assert!(d.stopped.is_none());
        records.extend(d.records);
    }
    records
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mlb-cap-unit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn responses_pair_with_their_commands_and_in_flight_ones_are_skipped() {
    let dir = temp("pair");
    let c = capture_into(&dir, Filter::default());
    let generation = c.generation();
    let mut s = None;
    // Joined mid-session with one command of its own still in flight.
    assert!(c.refresh(&mut s, &who(), 1));
    let s_ref = s.as_mut().unwrap();
    s_ref.statement(cmd::QUERY, b"\x03SELECT 2");
    s_ref.completed(&completed(cmd::QUERY, 9, None)); // the one before the capture
    s_ref.completed(&completed(cmd::STATISTICS, 0, None)); // not captured
    s_ref.completed(&completed(cmd::PING, 0, None)); // a ping: its command from its response
    s_ref.completed(&completed(cmd::QUERY, 1, None));
    s_ref.statement(cmd::STMT_PREPARE, b"\x16SELECT ?");
    s_ref.completed(&completed(cmd::STMT_PREPARE, 0, Some(7)));
    s_ref.statement(cmd::STMT_CLOSE, b"\x19\x07\0\0\0");
    assert!(!c.refresh(&mut s, &who(), 0), "same capture: kept");
    drop(s);
    assert_eq!(c.generation(), generation);
    let records = stop_and_read(&c, &dir);
    let bodies: Vec<&Body> = records.iter().map(|r| &r.body).collect();
    let Body::SessionStart(start) = bodies[0] else {
        panic!("{bodies:?}")
    };
    assert_eq!(start.flags, STARTED_BEFORE);
    assert_eq!(
        (start.user.as_str(), start.backend.as_str()),
        ("app", "db1")
    );
    let commands: Vec<(u32, Vec<u8>)> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Command(c) => Some((c.seq, c.payload.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        commands,
        vec![
            (0, b"\x03SELECT 2".to_vec()),
            (1, vec![cmd::PING]),
            (2, b"\x16SELECT ?".to_vec()),
            (3, b"\x19\x07\0\0\0".to_vec()),
        ]
    );
    let responses: Vec<(u32, u8, u64, u32)> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Response(x) => Some((x.seq, x.command, x.rows, x.prepared)),
            _ => None,
        })
        .collect();
    assert_eq!(
        responses,
        vec![
            (1, cmd::PING, 0, 0),
            (0, cmd::QUERY, 1, 0),
            (2, cmd::STMT_PREPARE, 0, 7)
        ]
    );
    assert!(matches!(records.last().unwrap().body, Body::SessionEnd));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_filter_takes_only_matching_sessions_and_a_stop_ends_joining() {
    let dir = temp("filter");
    let c = capture_into(
        &dir,
        Filter {
            user: Some("other".into()),
            ..Filter::default()
        },
    );
    assert!(c.join(&who(), false, 0).is_none());
    let records = stop_and_read(&c, &dir);
    assert!(records.is_empty());
    assert!(
        c.join(&who(), false, 0).is_none(),
        "nothing to join once stopped"
    );
    let mut s = None;
    assert!(!c.refresh(&mut s, &who(), 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn change_user_is_written_without_its_auth_data_and_long_payloads_are_cut() {
    let dir = temp("redact");
    let c = capture_into(&dir, Filter::default());
    let mut s = c.join(&who(), false, 0).unwrap();
    let mut change = b"\x11bob\0".to_vec();
    change.push(20);
    change.extend_from_slice(&[0xA5; 20]);
    change.extend_from_slice(b"shop\0");
    s.statement(cmd::CHANGE_USER, &change);
    let mut long = vec![cmd::QUERY];
    long.resize(MAX_PAYLOAD + 10, b'x');
    s.statement(cmd::QUERY, &long);
    drop(s);
    let records = stop_and_read(&c, &dir);
    let commands = commands_of(&records);
    assert_eq!(commands[0].payload, b"\x11bob\0\0shop\0");
    assert_eq!(commands[1].payload.len(), MAX_PAYLOAD);
    assert_eq!(commands[1].flags, format::TRUNCATED);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_drops_records_and_counts_them_instead_of_waiting() {
    let counter = prometheus::IntCounter::new("dropped", "dropped").unwrap();
    let (tx, _rx) = sync_channel(1);
    let request = Request {
        dir: PathBuf::from("/nowhere"),
        duration: None,
        max_bytes: None,
        rotate_bytes: None,
        filter: Filter::default(),
    };
    let active = Arc::new(Active::new(request, tx, counter.clone()));
    // The start record fills the queue; nobody drains it.
    let mut s = SessionCapture::start(Arc::clone(&active), &who(), false, 0).unwrap();
    let started = Instant::now();
    for _ in 0..100 {
        s.statement(cmd::QUERY, b"\x03SELECT 1");
    }
    assert!(started.elapsed() < Duration::from_secs(1), "never waits");
    assert_eq!(active.dropped.load(Ordering::Relaxed), 100);
    assert_eq!(counter.get(), 100);
    assert_eq!(active.status()["dropped"], 100);
    assert_eq!(active.status()["commands"], 100);
}

#[test]
fn password_statements_and_their_executes_keep_only_digest_and_id() {
    let dir = temp("secret");
    let c = capture_into(&dir, Filter::default());
    let mut s = c.join(&who(), false, 0).unwrap();
    let exec = |id: u32, param: &[u8]| {
        let mut p = vec![cmd::STMT_EXECUTE];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 1, 0xFE, 0]);
        p.push(param.len() as u8);
        p.extend_from_slice(param);
        p
    };
    let create = b"\x03CREATE USER u IDENTIFIED BY 'pw-in-query'";
    s.statement(cmd::QUERY, create);
    s.completed(&completed(cmd::QUERY, 0, None));
    s.statement(cmd::STMT_PREPARE, b"\x16ALTER USER u IDENTIFIED BY ?");
    s.completed(&completed(cmd::STMT_PREPARE, 0, Some(1)));
    s.statement(cmd::STMT_EXECUTE, &exec(1, b"pw-in-execute"));
    s.completed(&completed(cmd::STMT_EXECUTE, 0, None));
    s.statement(cmd::STMT_EXECUTE, &exec(u32::MAX, b"pw-in-last"));
    s.completed(&completed(cmd::STMT_EXECUTE, 0, None));
    let mut long_data = vec![cmd::STMT_SEND_LONG_DATA];
    long_data.extend_from_slice(&1u32.to_le_bytes());
    long_data.extend_from_slice(b"\0\0pw-in-long-data");
    s.statement(cmd::STMT_SEND_LONG_DATA, &long_data);
    // A plain statement keeps its parameters; one this capture did not see prepared does not.
    s.statement(cmd::STMT_PREPARE, b"\x16SELECT ?");
    s.completed(&completed(cmd::STMT_PREPARE, 0, Some(2)));
    s.statement(cmd::STMT_EXECUTE, &exec(2, b"kept"));
    s.completed(&completed(cmd::STMT_EXECUTE, 0, None));
    s.statement(cmd::STMT_EXECUTE, &exec(9, b"pw-unknown-statement"));
    s.completed(&completed(cmd::STMT_EXECUTE, 0, None));
    // A reset forgets the statements: id 2 may name another one now.
    s.statement(cmd::RESET_CONNECTION, &[cmd::RESET_CONNECTION]);
    s.completed(&completed(cmd::RESET_CONNECTION, 0, None));
    s.statement(cmd::STMT_EXECUTE, &exec(2, b"pw-after-reset"));
    s.completed(&completed(cmd::STMT_EXECUTE, 0, None));
    // So does a COM_CHANGE_USER.
    s.statement(cmd::STMT_PREPARE, b"\x16SELECT ?");
    s.completed(&completed(cmd::STMT_PREPARE, 0, Some(3)));
    s.statement(cmd::STMT_EXECUTE, &exec(3, b"kept too"));
    s.completed(&completed(cmd::STMT_EXECUTE, 0, None));
    s.statement(cmd::CHANGE_USER, b"\x11bob\0\0shop\0");
    s.statement(cmd::STMT_EXECUTE, &exec(3, b"pw-after-change-user"));
    drop(s);
    assert_eq!(c.status().unwrap()["redacted"], 8);
    let records = stop_and_read(&c, &dir);
    let commands = commands_of(&records);
    let digest = |text: &[u8]| {
        crate::wire::sql::digest(text, format::DIGEST_LEN)
            .0
            .to_le_bytes()
    };
    let mut want_query = vec![cmd::QUERY];
    want_query.extend_from_slice(&digest(&create[1..]));
    let mut want_prepare = vec![cmd::STMT_PREPARE];
    want_prepare.extend_from_slice(&digest(b"ALTER USER u IDENTIFIED BY ?"));
    let flagged: Vec<(u8, Vec<u8>)> = commands
        .iter()
        .map(|c| (c.flags, c.payload.clone()))
        .collect();
    let r = format::REDACTED;
    assert_eq!(
        flagged,
        vec![
            (r, want_query),
            (r, want_prepare),
            (r, exec(1, b"")[..5].to_vec()),
            (r, exec(u32::MAX, b"")[..5].to_vec()),
            (r, long_data[..5].to_vec()),
            (0, b"\x16SELECT ?".to_vec()),
            (0, exec(2, b"kept")),
            (r, exec(9, b"")[..5].to_vec()),
            (0, vec![cmd::RESET_CONNECTION]),
            (r, exec(2, b"")[..5].to_vec()),
            (0, b"\x16SELECT ?".to_vec()),
            (0, exec(3, b"kept too")),
            (0, b"\x11bob\0\0shop\0".to_vec()),
            (r, exec(3, b"")[..5].to_vec()),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The records as short words, in order.
fn shown(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| match &r.body {
            Body::SessionStart(s) => format!("start {}", s.backend),
            Body::Command(c) => format!("command {}", c.seq),
            Body::Response(r) => format!("response {}", r.seq),
            Body::Moved { backend } => format!("moved {backend}"),
            Body::SessionEnd => "end".to_owned(),
        })
        .collect()
}

#[test]
fn a_read_sent_again_after_its_server_was_lost_is_one_command_answered_once() {
    let dir = temp("resent");
    let c = capture_into(&dir, Filter::default());
    let mut s = c.join(&who(), false, 0).unwrap();
    s.statement(cmd::QUERY, b"\x03SELECT 1");
    s.lost_unanswered(true);
    s.moved_to("db2");
    s.statement(cmd::QUERY, b"\x03SELECT 1");
    s.completed(&completed(cmd::QUERY, 1, None));
    // Its server lost and no other to send it to: never answered.
    s.statement(cmd::QUERY, b"\x03SELECT 2");
    s.lost_unanswered(false);
    s.statement(cmd::QUERY, b"\x03SELECT 3");
    s.completed(&completed(cmd::QUERY, 1, None));
    drop(s);
    let records = stop_and_read(&c, &dir);
    assert_eq!(
        shown(&records),
        [
            "start db1",
            "command 0",
            "moved db2",
            "response 0",
            "command 1",
            "command 2",
            "response 2",
            "end"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_lost_command_sent_before_the_capture_began_is_not_waited_for() {
    let dir = temp("resent-before");
    let c = capture_into(&dir, Filter::default());
    let mut s = c.join(&who(), true, 1).unwrap();
    s.lost_unanswered(true);
    // The copy sent again is the capture's first sight of it.
    s.statement(cmd::QUERY, b"\x03SELECT 1");
    s.completed(&completed(cmd::QUERY, 1, None));
    drop(s);
    let records = stop_and_read(&c, &dir);
    assert_eq!(
        shown(&records),
        ["start db1", "command 0", "response 0", "end"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_move_is_written_between_the_commands_of_two_backends() {
    let dir = temp("moved");
    let c = capture_into(&dir, Filter::default());
    let mut s = c.join(&who(), false, 0).unwrap();
    s.statement(cmd::QUERY, b"\x03SELECT 1");
    s.completed(&completed(cmd::QUERY, 1, None));
    s.moved_to("db2");
    s.statement(cmd::QUERY, b"\x03SELECT 2");
    s.completed(&completed(cmd::QUERY, 1, None));
    drop(s);
    let records = stop_and_read(&c, &dir);
    assert_eq!(
        shown(&records),
        [
            "start db1",
            "command 0",
            "response 0",
            "moved db2",
            "command 1",
            "response 1",
            "end"
        ]
    );
    assert!(records.windows(2).all(|w| w[0].t_us <= w[1].t_us));
    let _ = std::fs::remove_dir_all(&dir);
}
