use super::*;

fn exec(id: u32) -> Vec<u8> {
    let mut p = vec![cmd::STMT_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&[0, 1, 0, 0, 0]);
    p
}

#[test]
fn executes_are_sent_with_the_id_the_target_gave_their_prepare() {
    let mut p = Planner::default();
    let prepare = b"\x16SELECT c FROM t WHERE id=?".to_vec();
    assert_eq!(
        p.plan(&prepare, 0, Some(7)),
        Plan::Send(vec![(prepare.clone(), true)])
    );
    assert_eq!(
        p.plan(&exec(7), 0, None),
        Plan::Skip("its prepare was skipped or failed")
    );
    p.prepared(7, 1);
    assert_eq!(p.plan(&exec(7), 0, None), Plan::Send(vec![(exec(1), true)]));
    assert_eq!(p.key(&exec(7), 0).kind, "execute");
    assert_eq!(p.key(&exec(7), 0).digest, p.key(&prepare, 0).digest);
    assert_eq!(
        p.plan(&exec(8), 0, None),
        Plan::Skip("prepared before the capture")
    );
}

#[test]
fn cursor_fetches_and_bulk_executes_name_the_id_the_target_gave() {
    let mut p = Planner::default();
    let prepare = b"\x16SELECT c FROM t WHERE id>?".to_vec();
    p.plan(&prepare, 0, Some(9));
    p.prepared(9, 2);
    // COM_STMT_FETCH: id, then the number of rows wanted.
    let fetch = |id: u32| {
        let mut f = vec![cmd::STMT_FETCH];
        f.extend_from_slice(&id.to_le_bytes());
        f.extend_from_slice(&100u32.to_le_bytes());
        f
    };
    assert_eq!(
        p.plan(&fetch(9), 0, None),
        Plan::Send(vec![(fetch(2), true)])
    );
    assert_eq!(p.key(&fetch(9), 0).kind, "fetch");
    assert_eq!(p.key(&fetch(9), 0).digest, p.key(&prepare, 0).digest);
    let mut bulk = vec![cmd::STMT_BULK_EXECUTE];
    bulk.extend_from_slice(&9u32.to_le_bytes());
    bulk.extend_from_slice(&[0x80, 0]);
    let mut mapped = bulk.clone();
    mapped[1..5].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(p.plan(&bulk, 0, None), Plan::Send(vec![(mapped, true)]));
    assert_eq!(p.key(&bulk, 0).kind, "bulk_execute");
    assert_eq!(
        p.plan(&fetch(4), 0, None),
        Plan::Skip("prepared before the capture")
    );
}

#[test]
fn read_only_skips_writes_and_the_executes_of_their_prepares() {
    let mut p = Planner::new(true);
    assert!(matches!(p.plan(b"\x03SELECT 1", 0, None), Plan::Send(_)));
    assert!(matches!(
        p.plan(b"\x03 /* x */ UPDATE t SET a=1", 0, None),
        Plan::Skip(_)
    ));
    assert!(matches!(
        p.plan(b"\x16DELETE FROM t WHERE id=?", 0, Some(3)),
        Plan::Skip(_)
    ));
    assert!(matches!(p.plan(&exec(3), 0, None), Plan::Skip(_)));
    assert!(matches!(p.plan(b"\x03BEGIN", 0, None), Plan::Send(_)));
}

#[test]
fn read_only_runs_nothing_a_reading_of_the_server_could_take_as_a_write() {
    let mut p = Planner::new(true);
    for text in [
        // MariaDB skips MySQL 5.7+ comments, so the DELETE is what runs.
        &b"\x03/*!99999 SELECT 1 */ DELETE FROM t WHERE v = 1"[..],
        b"\x03/*M!999999 SELECT */ UPDATE t SET a = 1",
        b"\x03SELECT 1; DELETE FROM t",
        b"\x03/*!40000 SELECT 1; */ DELETE FROM t",
        // Not closed: the server refuses it, but nothing tells what was meant.
        b"\x03SELECT 1 /* x",
    ] {
        assert!(
            matches!(p.plan(text, 0, None), Plan::Skip(_)),
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }
    assert!(matches!(
        p.plan(b"\x03/*!40000 SELECT */ 1", 0, None),
        Plan::Skip(_)
    ));
    assert!(matches!(
        p.plan(b"\x03SELECT /*!40000 SQL_NO_CACHE */ 1", 0, None),
        Plan::Send(_)
    ));
    assert!(matches!(p.plan(b"\x03SELECT 1;", 0, None), Plan::Send(_)));
    // COM_SET_OPTION: multi-statements on is skipped, off is sent.
    assert_eq!(
        p.plan(b"\x1b\x00\x00", 0, None),
        Plan::Skip("multi-statements on (--read-only)")
    );
    assert!(matches!(p.plan(b"\x1b\x01\x00", 0, None), Plan::Send(_)));
    // COM_REFRESH and COM_SHUTDOWN change the server.
    assert!(matches!(p.plan(b"\x07\x01", 0, None), Plan::Skip(_)));
    assert!(matches!(p.plan(b"\x08", 0, None), Plan::Skip(_)));
    assert!(matches!(p.plan(b"\x0e", 0, None), Plan::Send(_)));
}

#[test]
fn a_change_user_becomes_a_reset_and_its_schema() {
    let mut p = Planner::default();
    let plan = p.plan(b"\x11bob\0\0shop\0\x21\0", 0, None);
    assert_eq!(
        plan,
        Plan::Send(vec![
            (vec![cmd::RESET_CONNECTION], true),
            (b"\x02shop".to_vec(), true)
        ])
    );
}

#[test]
fn cut_payloads_are_not_replayed() {
    let mut p = Planner::default();
    assert!(matches!(
        p.plan(b"\x03SELECT", TRUNCATED, None),
        Plan::Skip(_)
    ));
}

#[test]
fn redacted_statements_and_their_executes_are_skipped_under_their_digest() {
    let mut p = Planner::default();
    let digest = sql::digest(b"CREATE USER u IDENTIFIED BY ?", DIGEST_LEN);
    let mut prepare = vec![cmd::STMT_PREPARE];
    prepare.extend_from_slice(&digest.0.to_le_bytes());
    assert_eq!(
        p.plan(&prepare, REDACTED, Some(3)),
        Plan::Skip(SKIP_REDACTED)
    );
    let key = p.key(&prepare, REDACTED);
    assert_eq!((key.kind, &*key.text), ("prepare", REDACTED_TEXT));
    assert_eq!(key.digest, digest.to_string());
    // An execute written without its parameters: its statement id only.
    let execute = exec(3)[..5].to_vec();
    assert_eq!(p.plan(&execute, REDACTED, None), Plan::Skip(SKIP_REDACTED));
    assert_eq!(p.key(&execute, REDACTED).digest, key.digest);
    assert_eq!(p.key(&execute, REDACTED).kind, "execute");
    let mut query = vec![cmd::QUERY];
    query.extend_from_slice(&digest.0.to_le_bytes());
    assert_eq!(p.plan(&query, REDACTED, None), Plan::Skip(SKIP_REDACTED));
    assert_eq!(p.key(&query, REDACTED).text, REDACTED_TEXT);
}
