use serde_json::json;

use super::*;

fn backends(commands: [u64; 2]) -> Value {
    json!({"instance_id": 2, "backends": [
        {"name": "r1", "pool": "default", "state": "up", "admin_state": "ready",
         "active_connections": 4, "commands": commands[0], "recent_p50_seconds": 0.0005,
         "recent_p99_seconds": 0.004, "ejection": {"standing": "in", "ejections": 0}},
        {"name": "r2", "pool": "default", "state": "down", "admin_state": "draining",
         "active_connections": 0, "commands": commands[1], "recent_p50_seconds": null,
         "recent_p99_seconds": null, "ejection": {"standing": "ejected", "ejections": 3}}
    ]})
}

fn query(digest: &str, backend: &str, text: &str, count: u64, sum: f64, errors: u64) -> Value {
    json!({"digest": digest, "kind": "query", "text": text, "backend": backend, "user": "sbtest",
           "schema": "sbtest", "other": false, "count": count, "errors": errors,
           "sum_seconds": sum, "avg_seconds": sum / count as f64, "p99_seconds": 0.003,
           "rows_sent": count, "rows_affected": 0})
}

fn samples() -> (Sample, Sample) {
    let t0 = Instant::now();
    let prev = Sample {
        at: t0,
        backends: backends([1000, 500]),
        queries: Some(json!({"enabled": true, "queries": [
            query("a", "r1", "SELECT c FROM sbtest1 WHERE id = ?", 100, 1.0, 0),
            query("b", "r2", "UPDATE t SET x = ?", 10, 5.0, 0),
        ]})),
    };
    let now = Sample {
        at: t0 + Duration::from_secs(2),
        backends: backends([1400, 500]),
        queries: Some(json!({"enabled": true, "queries": [
            query("a", "r1", "SELECT c FROM sbtest1 WHERE id = ?", 300, 2.0, 0),
            query("b", "r2", "UPDATE t SET x = ?", 10, 5.0, 7),
            query("c", "r1", "DELETE FROM t WHERE id = ?", 1, 0.1, 0),
        ]})),
    };
    (prev, now)
}

fn view<'a>(now: &'a Sample, prev: Option<&'a Sample>, sort: TopSort) -> View<'a> {
    View {
        admin: "127.0.0.1:4041",
        now: Some(now),
        prev,
        sort,
        backend: None,
        interval: Duration::from_secs(2),
        error: None,
    }
}

/// The line holding `needle`.
fn line<'a>(frame: &'a str, needle: &str) -> &'a str {
    frame
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{frame}"))
}

#[test]
fn header_backends_and_rates() {
    let (prev, now) = samples();
    let frame = render(200, 50, &view(&now, Some(&prev), TopSort::Total));
    let header = line(&frame, "mysql-lb top");
    assert!(header.contains("instance 2"), "{header}");
    assert!(header.contains("backends 1/2 up"), "{header}");
    assert!(
        header.contains("200.0 qps"),
        "400 commands in 2 s: {header}"
    );
    assert!(line(&frame, "sort: total").contains("backend: all"));
    let r1 = line(&frame, "r1  ");
    assert!(
        r1.contains("200.0") && r1.contains("0.50") && r1.contains("4.00"),
        "{r1}"
    );
    let r2 = line(&frame, "down/draining");
    assert!(r2.contains("ejected") && r2.ends_with('3'), "{r2}");
    // 200 more executions in 2 s; a new digest has no rate yet.
    assert!(line(&frame, "SELECT c FROM")
        .trim_start()
        .starts_with("100.0 "));
    assert!(line(&frame, "DELETE FROM").trim_start().starts_with("- "));
    assert!(line(&frame, "SELECT c FROM").contains("sbtest     query   SELECT c"));
    // The same digest as a prepared statement's executions is another row, with its own rate.
    let mut executed = query("a", "r1", "SELECT c FROM sbtest1 WHERE id = ?", 250, 1.0, 0);
    executed["kind"] = json!("execute");
    let mut with_execute = now.clone();
    with_execute.queries.as_mut().unwrap()["queries"]
        .as_array_mut()
        .unwrap()
        .push(executed);
    let frame = render(200, 50, &view(&with_execute, Some(&prev), TopSort::Total));
    assert!(
        line(&frame, "execute").trim_start().starts_with("- "),
        "{frame}"
    );
}

#[test]
fn sort_keys_order_the_queries() {
    let (prev, now) = samples();
    let order = |sort| {
        let frame = render(200, 50, &view(&now, Some(&prev), sort));
        let pos = |t: &str| frame.find(t).unwrap();
        let mut texts = ["SELECT c", "UPDATE t", "DELETE FROM"];
        texts.sort_by_key(|t| pos(t));
        texts
    };
    assert_eq!(
        order(TopSort::Total),
        ["UPDATE t", "SELECT c", "DELETE FROM"]
    );
    assert_eq!(
        order(TopSort::Count),
        ["SELECT c", "UPDATE t", "DELETE FROM"]
    );
    assert_eq!(order(TopSort::Errors)[0], "UPDATE t");
    assert_eq!(order(TopSort::Avg)[0], "UPDATE t");
    let mut sort = TopSort::Total;
    for _ in 0..6 {
        sort = sort.next();
    }
    assert_eq!(sort, TopSort::Total, "s cycles through every key");
}

#[test]
fn backend_filter_and_its_cycle() {
    let (prev, now) = samples();
    let mut v = view(&now, Some(&prev), TopSort::Total);
    v.backend = Some("r2");
    let frame = render(200, 50, &v);
    assert!(frame.contains("backend: r2"));
    assert!(frame.contains("UPDATE t") && !frame.contains("SELECT c"));
    assert_eq!(next_backend(None, Some(&now)).as_deref(), Some("r1"));
    assert_eq!(next_backend(Some("r1"), Some(&now)).as_deref(), Some("r2"));
    assert_eq!(next_backend(Some("r2"), Some(&now)), None);
    assert_eq!(next_backend(Some("gone"), Some(&now)), None);
    assert_eq!(next_backend(None, None), None);
}

#[test]
fn fits_the_terminal() {
    let (prev, now) = samples();
    let frame = render(40, 9, &view(&now, Some(&prev), TopSort::Total));
    assert_eq!(frame.lines().count(), 9, "{frame}");
    assert!(frame.lines().all(|l| l.chars().count() <= 40), "{frame}");
    let tiny = render(0, 0, &view(&now, Some(&prev), TopSort::Total));
    assert!(tiny.is_empty());
}

#[test]
fn escape_sequences_from_clients_never_reach_the_terminal() {
    let (_, mut now) = samples();
    now.queries = Some(json!({"enabled": true, "queries": [
        query("e", "r1", "SELECT '\u{1b}]0;owned\u{7}\u{1b}[2J'\nDROP", 1, 1.0, 0),
    ]}));
    let frame = render(300, 50, &view(&now, None, TopSort::Total));
    assert!(
        !frame.contains('\u{1b}') && !frame.contains('\u{7}'),
        "{frame:?}"
    );
    assert!(frame.contains("\\u{1b}]0;owned"), "{frame}");
    assert_eq!(frame.lines().filter(|l| l.contains("DROP")).count(), 1);
}

#[test]
fn digests_off_missing_and_unreachable() {
    let (_, mut now) = samples();
    now.queries = Some(json!({"enabled": false, "queries": []}));
    let frame = render(120, 40, &view(&now, None, TopSort::Total));
    assert!(frame.contains("query digests are off"));
    now.queries = None;
    let frame = render(120, 40, &view(&now, None, TopSort::Total));
    assert!(frame.contains("query digests are off"));
    assert!(
        line(&frame, "mysql-lb top").contains("- qps"),
        "one sample, no rate"
    );
    let mut v = view(&now, None, TopSort::Total);
    v.now = None;
    v.error = Some("connect to 127.0.0.1:4041: Connection refused");
    let frame = render(120, 40, &v);
    assert!(
        line(&frame, "unreachable").contains("(retrying every 2s)"),
        "{frame}"
    );
    assert!(
        frame.contains("\n  connect to 127.0.0.1:4041: Connection refused\n"),
        "{frame}"
    );
}

#[test]
fn a_backend_of_a_pool_with_roles_shows_its_role() {
    let (prev, mut now) = samples();
    now.backends["backends"][0]["role"] = json!("primary");
    now.backends["backends"][1]["role"] = json!("replica");
    let frame = render(200, 50, &view(&now, Some(&prev), TopSort::Total));
    assert!(line(&frame, "r1  ").contains("up primary"), "{frame}");
    assert!(line(&frame, "down/draining").contains("replica"), "{frame}");
    // Without roles, nothing is added.
    let (prev, now) = samples();
    let frame = render(200, 50, &view(&now, Some(&prev), TopSort::Total));
    assert!(!frame.contains("primary") && !frame.contains("replica"));
}
