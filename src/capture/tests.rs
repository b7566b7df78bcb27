use std::time::Duration;

use super::format::{decode_file, Body, Record, STARTED_BEFORE};
use super::*;

fn who() -> Who<'static> {
    Who {
        user: "app",
        schema: "shop",
        pool: "rw",
        backend: "db1",
        client: "127.0.0.1:5000",
        capabilities: crate::protocol::caps::CLIENT_SECURE_CONNECTION,
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
    let commands: Vec<&format::Command> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Command(c) => Some(c),
            _ => None,
        })
        .collect();
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
