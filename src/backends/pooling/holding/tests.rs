use super::*;
use crate::wire::protocol::response::EndStatus;

fn done(command: u8, status: u16) -> Completed {
    Completed {
        command,
        end: Some(EndStatus {
            status,
            ..EndStatus::default()
        }),
        ..Completed::default()
    }
}

fn query(h: &mut Holding, text: &str) -> Option<Reason> {
    let mut payload = vec![cmd::QUERY];
    payload.extend_from_slice(text.as_bytes());
    h.statement(cmd::QUERY, &payload)
}

#[test]
fn a_transaction_holds_the_connection_until_the_server_says_it_ended() {
    let mut h = Holding::default();
    assert!(h.releasable());
    assert_eq!(query(&mut h, "BEGIN"), None);
    h.completed(&done(cmd::QUERY, SERVER_STATUS_IN_TRANS));
    assert!(!h.releasable());
    assert_eq!(query(&mut h, "SELECT 1"), None);
    h.completed(&done(cmd::QUERY, SERVER_STATUS_IN_TRANS));
    assert!(!h.releasable());
    // An ERR inside leaves the transaction open.
    h.completed(&Completed {
        command: cmd::QUERY,
        error: true,
        ..Completed::default()
    });
    assert!(!h.releasable());
    h.completed(&done(cmd::QUERY, 0));
    assert!(h.releasable());
    assert_eq!(h.pinned(), None);
}

#[test]
fn warnings_errors_and_changed_rows_keep_it_for_one_more_command() {
    let mut h = Holding::default();
    h.completed(&Completed {
        command: cmd::QUERY,
        end: Some(EndStatus {
            warnings: 1,
            ..EndStatus::default()
        }),
        ..Completed::default()
    });
    assert!(!h.releasable(), "SHOW WARNINGS must see them");
    h.completed(&done(cmd::QUERY, 0));
    assert!(h.releasable());
    h.completed(&Completed {
        command: cmd::QUERY,
        affected: 3,
        end: Some(EndStatus::default()),
        ..Completed::default()
    });
    assert!(!h.releasable(), "ROW_COUNT() must see them");
    h.completed(&Completed {
        command: cmd::QUERY,
        error: true,
        ..Completed::default()
    });
    assert!(!h.releasable(), "GET DIAGNOSTICS must see it");
}

#[test]
fn state_pins_for_good_and_says_why_once() {
    let mut h = Holding::default();
    assert_eq!(
        query(&mut h, "SET @x = 1"),
        Some(Reason::Statement(Pin::UserVariable))
    );
    assert!(h.pinned().is_some());
    assert_eq!(query(&mut h, "SET @y = 2"), None, "reported once");
    h.completed(&done(cmd::QUERY, 0));
    assert!(!h.releasable());

    for (command, reason) in [
        (cmd::STMT_PREPARE, Reason::PreparedStatement),
        (cmd::CHANGE_USER, Reason::ChangeUser),
        (cmd::INIT_DB, Reason::InitDb),
        (cmd::SET_OPTION, Reason::SetOption),
        (cmd::RESET_CONNECTION, Reason::ResetConnection),
        (0x12, Reason::Command),
    ] {
        let mut h = Holding::default();
        assert_eq!(h.completed(&done(command, 0)), Some(reason));
        assert!(!h.releasable());
    }
    let mut h = Holding::default();
    assert_eq!(
        h.completed(&done(cmd::QUERY, SERVER_SESSION_STATE_CHANGED)),
        Some(Reason::StateChanged)
    );
    let mut h = Holding::default();
    assert_eq!(
        h.completed(&done(cmd::STMT_EXECUTE, SERVER_STATUS_CURSOR_EXISTS)),
        Some(Reason::Cursor)
    );
    // A failed prepare leaves nothing behind.
    let mut h = Holding::default();
    let failed = Completed {
        command: cmd::STMT_PREPARE,
        error: true,
        ..Completed::default()
    };
    assert_eq!(h.completed(&failed), None);
}

#[test]
fn a_statement_too_long_to_read_whole_pins() {
    let mut h = Holding::default();
    let long = format!("SELECT '{}'", "x".repeat(TEXT_LIMIT));
    assert_eq!(query(&mut h, &long), Some(Reason::LongStatement));
    let mut h = Holding::default();
    assert_eq!(query(&mut h, "SELECT 1"), None);
    assert_eq!(query(&mut h, "  select * from t where id = 1"), None);
}

#[test]
fn a_statement_cut_to_the_text_limit_pins_whatever_its_start_says() {
    // What the tracker keeps of a longer packet: the command byte and TEXT_LIMIT - 1 bytes.
    let mut h = Holding::default();
    let mut cut = vec![cmd::QUERY];
    cut.extend_from_slice(b"SELECT '");
    cut.resize(TEXT_LIMIT, b'x');
    assert_eq!(h.statement(cmd::QUERY, &cut), Some(Reason::LongStatement));
    let mut h = Holding::default();
    cut[0] = cmd::STMT_PREPARE;
    assert_eq!(
        h.statement(cmd::STMT_PREPARE, &cut),
        Some(Reason::LongStatement)
    );
}

#[test]
fn a_prepared_text_pins_as_the_same_text_would_as_a_query() {
    let prepare = |h: &mut Holding, text: &str| {
        let mut payload = vec![cmd::STMT_PREPARE];
        payload.extend_from_slice(text.as_bytes());
        h.statement(cmd::STMT_PREPARE, &payload)
    };
    let mut h = Holding::default();
    h.share_statements();
    assert_eq!(prepare(&mut h, "SELECT c FROM t WHERE id = ?"), None);
    assert!(h.pinned().is_none());
    assert_eq!(
        prepare(&mut h, "SET @v = ?"),
        Some(Reason::Statement(Pin::UserVariable))
    );
    let mut h = Holding::new(true);
    h.share_statements();
    // A setting that would be replayed as a query pins as a prepared statement.
    assert_eq!(
        prepare(&mut h, "SET autocommit = ?"),
        Some(Reason::Statement(Pin::SessionVariable))
    );
    let mut h = Holding::default();
    h.share_statements();
    assert_eq!(
        prepare(&mut h, "/*!99999 SELECT */ SELECT GET_LOCK(?, 0)"),
        Some(Reason::Statement(Pin::UserLock))
    );
}

#[test]
fn a_comment_the_server_skips_does_not_hide_a_setting() {
    let mut h = Holding::new(true);
    assert_eq!(
        query(&mut h, "/*!99999 SELECT */ SET autocommit = 0"),
        Some(Reason::Statement(Pin::SessionVariable))
    );
    let mut h = Holding::new(true);
    assert_eq!(
        query(&mut h, "/*!99999 SELECT */ USE other"),
        Some(Reason::Statement(Pin::Schema))
    );
    // `USE` with a second statement is not a setting to replay: it pins.
    let mut h = Holding::new(true);
    assert_eq!(
        query(&mut h, "USE db; INSERT INTO t VALUES (1)"),
        Some(Reason::Statement(Pin::Schema))
    );
    // A plain `USE` is replayed instead.
    let mut h = Holding::new(true);
    assert_eq!(query(&mut h, "USE db"), None);
}

#[test]
fn warnings_errors_and_insert_ids_stay_until_a_reset_row_counts_until_the_next_statement() {
    let with = |warnings: u16, insert_id: u64, affected: u64| Completed {
        command: cmd::QUERY,
        affected,
        end: Some(EndStatus {
            warnings,
            insert_id,
            ..EndStatus::default()
        }),
        ..Completed::default()
    };
    let mut h = Holding::default();
    assert!(!h.leaves_traces());
    for left in [
        with(1, 0, 0),
        with(0, 7, 1),
        Completed {
            command: cmd::QUERY,
            error: true,
            ..Completed::default()
        },
    ] {
        h.completed(&left);
        // SHOW WARNINGS, SELECT 1 and COM_PING keep them on the server.
        h.completed(&done(cmd::QUERY, 0));
        h.completed(&done(cmd::PING, 0));
        assert!(h.releasable());
        assert!(h.leaves_traces(), "{left:?}");
        h.reset_done();
        assert!(!h.leaves_traces());
    }
    h.completed(&with(0, 0, 3));
    h.completed(&done(cmd::PING, 0));
    assert!(
        h.leaves_traces(),
        "ROW_COUNT() is the UPDATE's until a statement"
    );
    h.completed(&done(cmd::QUERY, 0));
    assert!(!h.leaves_traces());
    assert_eq!(h.pinned(), None);
}

#[test]
fn replayable_settings_become_the_session_state_instead_of_pinning() {
    let mut h = Holding::new(true);
    assert_eq!(query(&mut h, "SET NAMES utf8mb4"), None);
    assert!(h.state().is_empty(), "not before the server took it");
    assert_eq!(h.completed(&done(cmd::QUERY, 0)), None);
    assert_eq!(
        *h.state().as_ref(),
        vec![Step::Query((*b"SET NAMES utf8mb4").into())]
    );
    assert!(h.releasable());
    // The state-changed flag a setting raises (session tracking) is that setting's own.
    assert_eq!(query(&mut h, "USE test"), None);
    assert_eq!(
        h.completed(&done(cmd::QUERY, SERVER_SESSION_STATE_CHANGED)),
        None
    );
    assert_eq!(h.state().len(), 2);
    // A refused setting changed nothing.
    assert_eq!(query(&mut h, "SET time_zone = 'nowhere'"), None);
    let refused = Completed {
        command: cmd::QUERY,
        error: true,
        ..Completed::default()
    };
    assert_eq!(h.completed(&refused), None);
    assert_eq!(h.state().len(), 2);
    assert_eq!(h.pinned(), None);

    // Without a login schema, USE cannot be undone by a reset: it pins.
    let mut h = Holding::new(false);
    assert_eq!(
        query(&mut h, "USE test"),
        Some(Reason::Statement(Pin::Schema))
    );
    // A setting pipelined behind another statement pins (its answer is not the next one).
    let mut h = Holding::new(true);
    assert_eq!(query(&mut h, "SELECT 1"), None);
    assert_eq!(
        query(&mut h, "SET NAMES latin1"),
        Some(Reason::Statement(Pin::SessionVariable))
    );
    // A setting that is not replayable pins as before.
    let mut h = Holding::new(true);
    assert_eq!(
        query(&mut h, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        Some(Reason::Statement(Pin::SessionVariable))
    );
}

#[test]
fn an_empty_packet_the_server_refused_does_not_pin() {
    let mut h = Holding::default();
    let refused = Completed {
        command: cmd::SLEEP,
        error: true,
        ..Completed::default()
    };
    assert_eq!(h.completed(&refused), None);
    assert!(h.pinned().is_none());
    // Its ERR is the next command's to read: kept once, reset before sharing.
    assert!(!h.releasable());
    assert!(h.leaves_traces());
}

#[test]
fn reads_of_the_diagnostics_area_keep_it_while_they_come() {
    let mut h = Holding::default();
    assert_eq!(query(&mut h, "SELECT * FROM missing"), None);
    h.completed(&Completed {
        command: cmd::QUERY,
        error: true,
        ..Completed::default()
    });
    for read in [
        "SHOW COUNT(*) ERRORS",
        "SHOW ERRORS",
        "show warnings limit 5",
        "SELECT @@error_count, @@session.warning_count",
    ] {
        assert!(!h.releasable(), "{read} must still see the error");
        assert_eq!(query(&mut h, read), None);
        h.completed(&done(cmd::QUERY, 0));
    }
    assert!(!h.releasable(), "the area is still the error's");
    assert!(h.leaves_traces());
    // Any other statement is the last to see it.
    assert_eq!(query(&mut h, "SELECT 1"), None);
    h.completed(&done(cmd::QUERY, 0));
    assert!(h.releasable());
    assert!(h.leaves_traces(), "reset before another session reads it");
}

#[test]
fn a_read_of_the_area_with_nothing_in_it_keeps_nothing() {
    let mut h = Holding::default();
    assert_eq!(query(&mut h, "SHOW WARNINGS"), None);
    h.completed(&done(cmd::QUERY, 0));
    assert!(h.releasable());
    assert!(!h.leaves_traces());
}

#[test]
fn what_may_change_the_role_is_remembered_for_the_reset_at_the_end() {
    for (text, changes) in [
        ("SET ROLE r1", true),
        ("set role none", true),
        ("SELECT f()", true),
        ("CALL p()", true),
        ("EXECUTE IMMEDIATE 'SET ROLE r1'", true),
        ("SELECT 1; SELECT 2", true),
        ("SET NAMES latin1", false),
        ("SET @x = 1", false),
        ("SELECT GET_LOCK('a', 1)", false),
        ("CREATE TEMPORARY TABLE t (a INT)", false),
    ] {
        let mut h = Holding::new(true);
        query(&mut h, text);
        h.completed(&done(cmd::QUERY, 0));
        assert_eq!(h.role_changed(), changes, "{text}");
        assert!(h.recyclable("db"), "{text}: recycled, the role set again");
    }
}
