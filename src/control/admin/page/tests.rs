use serde_json::json;

use super::*;

fn backends() -> Value {
    json!({"instance_id": 3, "backends": [
        {"name": "r1", "pool": "default", "address": "127.0.0.1:3307", "state": "up",
         "admin_state": "ready", "weight": 2, "active_connections": 5,
         "recent_p50_seconds": 0.0004, "recent_p99_seconds": 0.0123,
         "ejection": {"standing": "in", "ejections": 1}},
        {"name": "r2", "pool": "default", "address": "127.0.0.1:3308", "state": "down",
         "admin_state": "draining", "weight": 1, "active_connections": 0,
         "recent_p50_seconds": null, "recent_p99_seconds": null,
         "ejection": {"standing": "ejected", "ejections": 4}}
    ]})
}

fn query(text: &str, user: &str, sum: f64) -> Value {
    json!({"digest": "8f3a0c1d2e4b5a69", "text": text, "sample": text, "backend": "r1",
           "pool": "default", "user": user, "schema": "sbtest", "other": false,
           "count": 10, "errors": 0, "sum_seconds": sum, "avg_seconds": sum / 10.0,
           "p95_seconds": 0.001, "p99_seconds": 0.002, "rows_sent": 7, "rows_affected": 1})
}

#[test]
fn backends_table_has_every_backend_and_its_buttons() {
    let page = render(
        &backends(),
        &json!({"enabled": false, "queries": []}),
        &[],
        false,
        "n0",
    );
    for name in ["r1", "r2"] {
        assert!(page.contains(&format!("<tr data-backend=\"{name}\"><td>{name}</td>")));
        for op in ["drain", "maintenance", "ready"] {
            let button = format!("data-op=\"{op}\" data-backend=\"{name}\">{op}</button>");
            assert!(page.contains(&button), "{button}");
        }
    }
    assert!(page.contains("instance 3 · 1 of 2 backend(s) up"));
    assert!(page.contains("<td class=\"n\">0.40</td><td class=\"n\">12.30</td>"));
    assert!(page.contains("<td class=\"down\">down</td><td class=\"draining\">draining</td>"));
    assert!(page.contains("4 (ejected)"));
    assert!(page.contains("query digests are off"));
    assert!(
        !page.contains("id=\"token\""),
        "no token field without a token"
    );
}

#[test]
fn client_chosen_text_is_escaped_everywhere() {
    let evil = "<script>alert(1)</script>";
    let mut b = backends();
    b["backends"][0]["name"] = json!("\"><script>alert(2)</script>");
    let queries = json!({"enabled": true, "queries": [
        query(&format!("SELECT '{evil}' FROM t"), evil, 1.0),
    ]});
    let page = render(&b, &queries, &[], true, "n0");
    // The page's own one script, and no other.
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(page.contains("SELECT &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39; FROM t"));
    assert!(page.contains("<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>"));
    assert!(page.contains("data-backend=\"&quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;\""));
    assert!(page.contains("id=\"token\""));
}

#[test]
fn nonce_is_on_the_script_and_style_only_and_in_the_policy() {
    let page = render(&backends(), &json!({}), &[], false, "abc123");
    assert_eq!(page.matches("nonce=\"abc123\"").count(), 2);
    let csp = content_security_policy("abc123");
    assert!(csp.contains("script-src 'nonce-abc123'"));
    assert!(csp.contains("style-src 'nonce-abc123'"));
    assert!(!csp.contains("unsafe"));
    assert!(csp.contains("default-src 'none'"));
    // No inline style attribute or handler would pass that policy.
    assert!(!page.contains(" style=\"") && !page.contains(" onclick="));
}

#[test]
fn top_queries_are_the_twenty_by_total_time() {
    let list: Vec<Value> = (0..30)
        .map(|i| query(&format!("SELECT {i}"), "u", f64::from(i)))
        .collect();
    let page = render(
        &backends(),
        &json!({"enabled": true, "queries": list}),
        &[],
        false,
        "n",
    );
    let order: Vec<usize> = (0..30)
        .filter_map(|i| page.find(&format!(">SELECT {i}<")))
        .collect();
    assert_eq!(order.len(), QUERY_ROWS);
    // Found in ascending SELECT number, shown in descending total time.
    assert!(order.windows(2).all(|w| w[0] > w[1]), "{order:?}");
    assert!(page.find(">SELECT 29<") < page.find(">SELECT 10<"));
    assert!(!page.contains(">SELECT 9<"));
    assert!(
        page.contains("<td class=\"n\">8</td><td class=\"n first\">"),
        "rows sent + affected"
    );
}

#[test]
fn no_queries_yet_and_the_other_row() {
    let page = render(
        &backends(),
        &json!({"enabled": true, "queries": []}),
        &[],
        false,
        "n",
    );
    assert!(page.contains("no query seen yet"));
    let mut other = query("(other)", "u", 1.0);
    other["other"] = json!(true);
    let page = render(
        &backends(),
        &json!({"enabled": true, "queries": [other]}),
        &[],
        false,
        "n",
    );
    assert!(page.contains("<tr class=\"other-row\">"));
}

#[test]
fn escaping_and_truncation() {
    assert_eq!(esc("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
    assert_eq!(truncated("héllo", 2), "hé…");
    assert_eq!(truncated("hé", 2), "hé");
    assert_eq!(ms(&json!(0.0015)), "1.50");
    assert_eq!(ms(&Value::Null), "–");
    assert_eq!(state_class(&json!("\" onmouseover=x")), "other");
    assert_eq!(new_nonce().len(), 32);
    assert_ne!(new_nonce(), new_nonce());
}

fn on(backend: &str, user: &str, count: u64, p99: f64) -> Value {
    let mut q = query("SELECT c FROM t WHERE id = ?", user, count as f64 * p99);
    q["backend"] = json!(backend);
    q["count"] = json!(count);
    q["p95_seconds"] = json!(p99 / 2.0);
    q["p99_seconds"] = json!(p99);
    q
}

#[test]
fn a_digest_is_one_row_with_its_backends_side_by_side() {
    let rows = vec![
        on("r1", "app", 10, 0.002),
        on("r2", "app", 30, 0.009),
        on("r1", "batch", 5, 0.001),
        on("r3", "app", 1, 0.004),
    ];
    let order = vec!["r1".to_owned(), "r2".to_owned(), "idle".to_owned()];
    let g = queries::group(&rows, &order);
    // Columns: the set's order, then a backend only the rows name; none nothing served.
    assert_eq!(g.backends, ["r1", "r2", "r3"]);
    assert_eq!(g.groups.len(), 2, "app and batch are two rows");
    let app = &g.groups[0];
    assert_eq!(app.row["user"], "app");
    assert_eq!(app.count, 41);
    let counts: Vec<Option<u64>> = app
        .shares
        .iter()
        .map(|s| s.as_ref().map(|s| s.count))
        .collect();
    assert_eq!(counts, [Some(10), Some(30), Some(1)]);
    assert_eq!(app.slowest(), Some(1), "r2 has the highest p99");
    let batch = &g.groups[1];
    assert_eq!(batch.slowest(), None, "one backend: nothing to compare");
    assert!(batch.shares[1].is_none() && batch.shares[2].is_none());

    let page = render(
        &backends(),
        &json!({"enabled": true, "queries": rows}),
        &[],
        false,
        "n",
    );
    assert_eq!(page.matches("<td class=\"sql\"").count(), 2);
    assert_eq!(page.matches("class=\"n slowest\"").count(), 1);
    assert!(page.contains("<td class=\"n slowest\">9.00 <span class=\"marker\""));
    assert!(page.contains("data-backend=\"r3\">r3</th>"));
    assert!(!page.contains(">idle</th>"));
}

#[test]
fn the_chart_is_on_the_page_or_says_there_is_no_data_yet() {
    use super::super::history::{Point, Series};
    let page = render(&backends(), &json!({}), &[], false, "n");
    assert!(page.contains("id=\"chart-none\""));
    let history = [Series {
        backend: "r1".to_owned(),
        points: vec![Point {
            at_unix_ms: 1,
            qps: 3.0,
            p99_seconds: Some(0.001),
        }],
    }];
    let page = render(&backends(), &json!({}), &history, false, "n");
    assert!(page.contains("<figure id=\"chart\">") && !page.contains("chart-none"));
    assert!(page.find("id=\"backends\"") < page.find("id=\"chart\""));
}

fn server_pool(across: bool, open: u64, idle: u64, counts: [u64; 5]) -> Value {
    let [acquired, moved_in, retried, pinned, only_here] = counts;
    json!({"across_backends": across, "open": open, "idle": idle, "waiting": 0, "max": 50,
           "acquired": acquired, "moved_in": moved_in, "retried": retried,
           "pinned_sessions": pinned, "keys_only_here": only_here})
}

#[test]
fn a_pool_across_backends_shows_moves_what_cannot_move_and_the_drain_left() {
    let mut b = backends();
    b["backends"][0]["server_pool"] = server_pool(true, 9, 4, [120, 17, 2, 1, 3]);
    b["backends"][1]["server_pool"] = server_pool(true, 3, 2, [40, 5, 0, 1, 0]);
    b["backends"][1]["active_connections"] = json!(2);
    let page = render(&b, &json!({}), &[], false, "n");
    assert!(page.contains("<table id=\"across\">"), "{page}");
    assert!(page.find("id=\"backends\"") < page.find("id=\"across\""));
    assert!(
        page.contains(
            "<tr data-backend=\"r1\"><td>r1</td><td>default</td><td class=\"n\">5</td>\
             <td class=\"n\">120</td><td class=\"n\">17</td><td class=\"n\">2</td>\
             <td class=\"n\">1</td><td class=\"n\">3</td><td>–</td></tr>"
        ),
        "r1 in rotation: {page}"
    );
    assert!(
        page.contains(
            "<td class=\"n\">40</td><td class=\"n\">5</td><td class=\"n\">0</td>\
             <td class=\"n\">1</td><td class=\"n\">0</td><td class=\"draining\">draining: \
             2 session(s) left (1 pinned: they stay until they end), 1 connection(s) in use, \
             2 idle connection(s) left</td>"
        ),
        "r2 draining: {page}"
    );

    b["backends"][1]["active_connections"] = json!(0);
    b["backends"][1]["server_pool"] = server_pool(true, 0, 0, [40, 5, 0, 0, 0]);
    let page = render(&b, &json!({}), &[], false, "n");
    assert!(page.contains("draining: empty, no session or connection left"));
}

#[test]
fn plain_pools_have_no_across_table() {
    let page = render(&backends(), &json!({}), &[], false, "n");
    assert!(!page.contains("id=\"across\"") && !page.contains("moved in"));
    let mut b = backends();
    for i in 0..2 {
        b["backends"][i]["server_pool"] = server_pool(false, 3, 1, [9, 0, 0, 0, 0]);
    }
    let page = render(&b, &json!({}), &[], false, "n");
    assert!(!page.contains("id=\"across\"") && !page.contains("moved in"));
    // Only the across pool's backend gets a row.
    b["backends"][1]["server_pool"]["across_backends"] = json!(true);
    let page = render(&b, &json!({}), &[], false, "n");
    assert!(page.contains("<table id=\"across\">"));
    assert_eq!(page.matches("<tr data-backend=\"r2\">").count(), 2);
    assert_eq!(page.matches("<tr data-backend=\"r1\">").count(), 1);
}

#[test]
fn the_across_table_escapes_its_values() {
    let mut b = backends();
    b["backends"][0]["server_pool"] = server_pool(true, 1, 1, [0; 5]);
    b["backends"][0]["pool"] = json!("<b>p</b>");
    b["backends"][0]["server_pool"]["moved_in"] = json!("<i>");
    let page = render(&b, &json!({}), &[], false, "n");
    assert!(page.contains("<td>&lt;b&gt;p&lt;/b&gt;</td><td class=\"n\">5</td>"));
    assert!(page.contains("<td class=\"n\">&lt;i&gt;</td>"));
    assert!(!page.contains("<i>") && !page.contains("<b>p"));
}

#[test]
fn a_pool_with_roles_shows_each_backends_role_and_position() {
    let mut b = backends();
    b["backends"][0]["role"] = json!("primary");
    b["backends"][0]["takes_writes"] = json!(true);
    b["backends"][0]["gtid_applied"] = json!("0-1-42");
    b["backends"][1]["role"] = json!("replica");
    b["backends"][1]["takes_writes"] = json!(false);
    b["backends"][1]["gtid_applied"] = json!("0-1-40");
    let queries = json!({"enabled": false, "queries": []});
    let page = render(&b, &queries, &[], false, "n0");
    assert!(
        page.contains("<th>role</th><th>GTID applied</th>"),
        "{page}"
    );
    assert!(
        page.contains("<td>primary (takes writes)</td><td>0-1-42</td>"),
        "{page}"
    );
    assert!(page.contains("<td>replica</td><td>0-1-40</td>"), "{page}");
    let plain = render(&backends(), &queries, &[], false, "n0");
    assert!(!plain.contains("<th>role</th>"), "no roles, no column");
}
