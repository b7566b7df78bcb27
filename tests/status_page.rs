//! The status page (`GET /` on the admin endpoint) in a real browser, Debian's headless
//! chromium driven over the DevTools protocol: after a short sysbench run it loads with no
//! console error (a CSP violation would be one), shows the backends and the run's top queries,
//! and its drain button drains a backend through the operation endpoint. A form on another
//! origin cannot do the same (the Origin check). With traffic through both backends, each digest
//! is one row with both backends side by side, and the chart's series are drawn (checked in the
//! screenshot's pixels). With a pool across backends the page shows each backend's moves, the
//! sessions that cannot move, and a drain's progress, with the numbers `/backends` has.
//!
//! With `MYSQL_LB_DOCS_CAPTURE=DIR` the first test also writes what the manual shows
//! (docs/src/admin.md): `DIR/status-page.png` and `DIR/top.txt` (`mysql-lb top --once` after the
//! same run).

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cdp::Browser;
use common::mariadb::{shared_pair, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{http_request, TestProxy};
use serde_json::{json, Value};

/// Held by a test that prepares and cleans up the sbtest tables of the shared pair, so two such
/// tests do not run at once.
fn sbtest_tables() -> std::sync::MutexGuard<'static, ()> {
    static TABLES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TABLES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// sysbench's tables dropped and made again on both backends: each test's digests start from
/// the same rows.
fn fresh_sbtest(pair: &[MariaDb; 2]) {
    for db in pair {
        sysbench(db.port, &[], "cleanup");
        sysbench(db.port, &[], "prepare");
    }
}

fn backends(pair: &[MariaDb; 2]) -> Vec<String> {
    pair.iter().map(MariaDb::tcp_addr).collect()
}

/// `sysbench oltp_read_only ... <action>` on one small table at 127.0.0.1:`port`; its report.
fn sysbench(port: u16, extra: &[&str], action: &str) -> String {
    let out = Command::new(common::sysbench::binary())
        .arg("oltp_read_only")
        .args([
            "--db-driver=mysql".to_owned(),
            "--mysql-host=127.0.0.1".to_owned(),
            format!("--mysql-port={port}"),
            format!("--mysql-user={BENCH_USER}"),
            format!("--mysql-password={BENCH_PASS}"),
            "--mysql-db=sbtest".to_owned(),
            "--tables=1".to_owned(),
            "--table-size=1000".to_owned(),
        ])
        .args(extra)
        .arg(action)
        .stdin(Stdio::null())
        .output()
        .expect("run sysbench");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sysbench {action} failed:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

/// The raw response head of `GET path` (status line and headers, lower-cased names).
fn head(addr: SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let head = response.split("\r\n\r\n").next().unwrap_or("");
    head.to_ascii_lowercase()
}

/// A headless chromium with the status page at `admin` open in a 1280×900 window (the size the
/// screenshots in the manual are taken at).
fn open_at_1280x900(admin: SocketAddr) -> (Browser, String) {
    let mut browser = Browser::launch();
    let page = browser.new_page();
    browser.call(
        Some(&page),
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
    );
    browser.navigate(&page, &format!("http://{admin}/"));
    (browser, page)
}

/// The page's own center of the `op` button of backend `name`, scrolled into view.
fn button_center(browser: &mut Browser, page: &str, op: &str, name: &str) -> (f64, f64) {
    let at = browser.eval(
        page,
        &format!(
            "(() => {{ const b = document.querySelector('button[data-op=\"{op}\"][data-backend=\"{name}\"]');
               b.scrollIntoView(); const r = b.getBoundingClientRect();
               return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ),
    );
    (at[0].as_f64().unwrap(), at[1].as_f64().unwrap())
}

#[test]
fn after_a_sysbench_run_the_page_loads_clean_shows_backends_and_top_queries_and_drains() {
    let _tables = sbtest_tables();
    let pair = shared_pair();
    let names = backends(pair);
    fresh_sbtest(pair);
    let proxy = TestProxy::start_with(common::proxy::with_digests(&names));
    let admin = proxy.admin.expect("admin endpoint");
    // Text protocol, so the point select is a `query` row with its literal in the sample.
    sysbench(
        proxy.addr.port(),
        &[
            "--threads=2",
            "--time=3",
            "--db-ps-mode=disable",
            "--report-interval=0",
        ],
        "run",
    );
    let point_select = mysql_lb::wire::sql::normalize(b"SELECT c FROM sbtest1 WHERE id=5012", 1024);

    let head = head(admin, "/");
    assert!(head.starts_with("http/1.0 200"), "{head}");
    assert!(
        head.contains("content-type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert!(head.contains("cache-control: no-store"), "{head}");
    let csp = head
        .lines()
        .find_map(|l| l.strip_prefix("content-security-policy: "))
        .unwrap_or_else(|| panic!("no CSP in {head}"));
    assert!(
        csp.contains("script-src 'nonce-") && !csp.contains("unsafe-inline"),
        "{csp}"
    );

    let (mut browser, page) = open_at_1280x900(admin);
    let shown = browser.eval(
        &page,
        "Array.from(document.querySelectorAll('#backends tbody tr')).map(r => r.cells[0].textContent)",
    );
    assert_eq!(shown, json!(names), "the backends table");
    let states = browser.eval(
        &page,
        "Array.from(document.querySelectorAll('#backends tbody tr')).map(r => r.cells[4].textContent)",
    );
    assert_eq!(states, json!(["ready", "ready"]));
    assert_eq!(
        browser.eval(&page, "document.getElementById('across') === null"),
        json!(true),
        "no table of pools across backends without one"
    );
    let queries = browser.eval(
        &page,
        "Array.from(document.querySelectorAll('#queries tbody tr')).map(r => r.cells[0].textContent)",
    );
    let queries: Vec<&str> = queries
        .as_array()
        .expect("a top-queries table")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        (5..=20).contains(&queries.len()) && queries.contains(&point_select.as_str()),
        "{point_select:?} among the top queries: {queries:?}"
    );
    browser.drain_events(Duration::from_millis(500));
    assert_eq!(
        browser.errors(),
        Vec::<String>::new(),
        "console errors on load"
    );

    // The capture is live: an error the page logs is seen.
    browser.eval(&page, "console.error('probe from the test'); 1");
    browser.drain_events(Duration::from_millis(300));
    let probe = browser.errors();
    assert!(
        probe.len() == 1 && probe[0].contains("probe from the test"),
        "{probe:?}"
    );

    // A real click on r1's drain button: the page POSTs, then reloads showing the new state.
    let name = &names[0];
    let (x, y) = button_center(&mut browser, &page, "drain", name);
    let before = browser.events.len();
    browser.click(&page, x, y);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.backend_entry(name)["admin_state"] != "draining" {
        assert!(Instant::now() < deadline, "the button never drained {name}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(proxy.backend_entry(&names[1])["admin_state"], "ready");
    browser.wait_event(
        &page,
        "Page.loadEventFired",
        before,
        Duration::from_secs(10),
    );
    let row = browser.eval(
        &page,
        &format!(
            "document.querySelector('#backends tr[data-backend=\"{name}\"]').cells[4].textContent"
        ),
    );
    assert_eq!(row, "draining", "the reloaded page shows the drain");
    let note = browser.eval(&page, "document.getElementById('result').textContent");
    assert_eq!(note, json!(format!("drain {name}: now draining")));
    browser.drain_events(Duration::from_millis(300));
    assert_eq!(
        browser.errors().len(),
        1,
        "only the probe: {:?}",
        browser.errors()
    );

    let png = browser.screenshot(&page);
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "a PNG"
    );
    if let Some(dir) = std::env::var_os("MYSQL_LB_DOCS_CAPTURE") {
        let dir = PathBuf::from(dir);
        std::fs::write(dir.join("status-page.png"), &png).expect("write the screenshot");
        // During a second run, so the rates have something to show.
        let port = proxy.addr.port();
        let load = std::thread::spawn(move || {
            sysbench(
                port,
                &["--threads=2", "--time=4", "--report-interval=0"],
                "run",
            )
        });
        std::thread::sleep(Duration::from_secs(1));
        let top = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
            .args(["top", "--admin", &admin.to_string(), "--interval", "2s"])
            .env("COLUMNS", "150")
            .env("LINES", "30")
            .output()
            .expect("run mysql-lb top");
        assert!(top.status.success());
        std::fs::write(dir.join("top.txt"), &top.stdout).expect("write the top capture");
        load.join().expect("the second run");
    }
    drop(browser);
    drop(proxy);
    for db in pair {
        sysbench(db.port, &[], "cleanup");
    }
}

/// Waits until the page's `#result` line contains `needle`; its text.
fn wait_result(browser: &mut Browser, page: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = browser.eval(page, "document.getElementById('result').textContent");
        let text = text.as_str().unwrap_or("").to_owned();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the result line: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn with_a_token_configured_the_buttons_need_it_typed_into_the_page() {
    const TOKEN: &str = "tok-page-7f3a";
    let pair = shared_pair();
    let names = backends(pair);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut cfg = common::proxy::with_digests(&names);
    cfg.admin_token_file = Some(token_file);
    let proxy = TestProxy::start_with(cfg);
    let admin = proxy.admin.expect("admin endpoint");
    let name = &names[1];

    let mut browser = Browser::launch();
    let page = browser.new_page();
    browser.navigate(&page, &format!("http://{admin}/"));
    let state = browser.eval(&page, "document.getElementById('token-state').textContent");
    assert_eq!(state, "no token set");

    // Without the token: refused, and the page says so.
    let (x, y) = button_center(&mut browser, &page, "maintenance", name);
    browser.click(&page, x, y);
    let refused = wait_result(&mut browser, &page, "refused");
    assert!(
        refused.contains("(401)") && refused.contains("bearer token"),
        "{refused}"
    );
    assert_eq!(proxy.backend_entry(name)["admin_state"], "ready");

    // Typed into the field (focus, keystrokes, leave the field): kept for the tab, not shown.
    browser.eval(&page, "document.getElementById('token').focus(); 1");
    browser.call(Some(&page), "Input.insertText", json!({ "text": TOKEN }));
    browser.eval(&page, "document.getElementById('token').blur(); 1");
    let state = browser.eval(&page, "document.getElementById('token-state').textContent");
    assert_eq!(state, "token set for this tab");
    assert_eq!(
        browser.eval(&page, "document.getElementById('token').value"),
        ""
    );

    let (x, y) = button_center(&mut browser, &page, "maintenance", name);
    let before = browser.events.len();
    browser.click(&page, x, y);
    browser.wait_event(
        &page,
        "Page.loadEventFired",
        before,
        Duration::from_secs(10),
    );
    assert_eq!(proxy.backend_entry(name)["admin_state"], "maintenance");
    wait_result(
        &mut browser,
        &page,
        &format!("maintenance {name}: now maintenance"),
    );
    // The token is in neither the reloaded page nor its address.
    let html = browser.eval(&page, "document.documentElement.outerHTML + location.href");
    assert!(!html.as_str().unwrap_or("").contains(TOKEN), "{html}");
    assert_eq!(
        browser.eval(&page, "document.getElementById('token-state').textContent"),
        "token set for this tab"
    );
    // The one error logged is the refused request's 401.
    browser.drain_events(Duration::from_millis(300));
    let errors = browser.errors();
    assert!(errors.iter().all(|e| e.contains("401")), "{errors:?}");
}

/// Serves `html` to every request on a free port of its own (another origin than the admin
/// endpoint), until the test ends.
fn serve_page(html: String) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                html.len()
            );
        }
    });
    addr
}

#[test]
fn a_form_on_another_origin_cannot_drain_a_backend() {
    let pair = shared_pair();
    let names = backends(pair);
    let proxy = TestProxy::start_with(common::proxy::with_digests(&names));
    let admin = proxy.admin.expect("admin endpoint");
    let name = &names[0];
    let evil = serve_page(format!(
        "<!DOCTYPE html><html><body><form method=\"post\" \
         action=\"http://{admin}/backends/{name}/drain\"><button>win</button></form></body></html>"
    ));

    let mut browser = Browser::launch();
    let page = browser.new_page();
    browser.navigate(&page, &format!("http://{evil}/"));
    let before = browser.events.len();
    browser.eval(&page, "document.forms[0].submit(); 1");
    browser.wait_event(
        &page,
        "Page.loadEventFired",
        before,
        Duration::from_secs(10),
    );
    let answer = browser.eval(&page, "document.body.textContent");
    let answer = answer.as_str().unwrap_or("");
    assert!(
        answer.contains("cross-origin request refused") && answer.contains(&evil.to_string()),
        "{answer}"
    );
    assert_eq!(proxy.backend_entry(name)["admin_state"], "ready");

    // Without an Origin (curl, scripts) or with the endpoint's own, operations still work.
    let (status, body) = proxy.admin_post(&format!("/backends/{name}/drain"), &[]);
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_request(
        admin,
        "POST",
        &format!("/backends/{name}/ready"),
        &["Origin: http://localhost"],
        b"",
    )
    .unwrap();
    assert_eq!(
        status, 200,
        "Host: localhost, Origin http://localhost: {body}"
    );
    let (status, body) = http_request(
        admin,
        "PUT",
        &format!("/backends/{name}/weight"),
        &["Origin: http://localhost:1"],
        b"3",
    )
    .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"error\""), "{body}");
    assert_eq!(proxy.backend_entry(name)["weight"], 1);
    let (status, body) = http_request(
        admin,
        "POST",
        "/queries/reset",
        &["Origin: https://evil.example"],
        b"",
    )
    .unwrap();
    assert_eq!(status, 403, "the digest reset too: {body}");
}

/// Pixels of `image` inside the page box `[x, y, width, height]` within 40 (summed over the
/// channels) of the colour `hex` ("#rrggbb").
fn pixels_of(image: &common::png::Image, bounds: &Value, hex: &str) -> usize {
    let channel = |i: usize| u8::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).expect("hex");
    let want = [channel(0), channel(1), channel(2)];
    let at = |i: usize| bounds[i].as_f64().expect("a bound") as usize;
    let (x0, y0) = (at(0), at(1));
    let (x1, y1) = (
        (x0 + at(2)).min(image.width),
        (y0 + at(3)).min(image.height),
    );
    (y0..y1)
        .flat_map(|y| (x0..x1).map(move |x| (x, y)))
        .filter(|&(x, y)| {
            let got = image.rgb(x, y);
            got.iter()
                .zip(want)
                .map(|(g, w)| u32::from(g.abs_diff(w)))
                .sum::<u32>()
                <= 40
        })
        .count()
}

/// `/history`'s series with at least `n` samples with traffic each, one per backend.
fn history_has(proxy: &TestProxy, names: &[String], n: usize) -> bool {
    let (_, body) = proxy.admin_get("/history");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    let series = v["series"].as_array().cloned().unwrap_or_default();
    series.len() == names.len()
        && series.iter().all(|s| {
            let points = s["points"].as_array().cloned().unwrap_or_default();
            let busy = points.iter().filter(|p| p[1].as_f64() > Some(0.0)).count();
            // Traffic, then a quiet sample after it: the run has ended in the chart.
            busy >= n && points.last().is_some_and(|p| p[1].as_f64() == Some(0.0))
        })
}

/// Traffic through both backends (weights 3:1, so their lines part): the page's top-queries
/// table has the point select once with both backends' columns and one slowest marker, the
/// chart has one series per backend in each panel with points, and the screenshot shows the
/// series' colours inside the chart's panels.
#[test]
fn the_page_shows_each_digest_once_over_both_backends_and_charts_them() {
    let _tables = sbtest_tables();
    let pair = shared_pair();
    let names = backends(pair);
    fresh_sbtest(pair);
    let mut config = common::proxy::with_digests(&names);
    config.backends[0].weight = 3;
    let proxy = TestProxy::start_with(config);
    let admin = proxy.admin.expect("admin endpoint");
    sysbench(
        proxy.addr.port(),
        &[
            "--threads=4",
            "--time=4",
            "--db-ps-mode=disable",
            "--report-interval=0",
        ],
        "run",
    );
    let point_select = mysql_lb::wire::sql::normalize(b"SELECT c FROM sbtest1 WHERE id=5012", 1024);
    common::wait_until("three busy samples and a quiet one per backend", || {
        history_has(&proxy, &names, 3)
    });

    let (mut browser, page) = open_at_1280x900(admin);
    let columns = browser.eval(
        &page,
        "Array.from(document.querySelectorAll('#queries th.backend')).map(h => h.textContent)",
    );
    assert_eq!(columns, json!(names), "one column group per backend");
    let row = browser.eval(
        &page,
        &format!(
            "(() => {{ const rows = Array.from(document.querySelectorAll('#queries tbody tr'))
                 .filter(r => r.cells[0].textContent === {});
               return rows.map(r => ({{
                 cells: Array.from(r.cells).slice(8).map(c => c.textContent),
                 slowest: Array.from(r.querySelectorAll('td.slowest')).map(c => c.textContent) }})); }})()",
            json!(point_select)
        ),
    );
    let rows = row.as_array().expect("rows");
    assert_eq!(rows.len(), 1, "the point select once: {row}");
    let cells = rows[0]["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 6, "count, p95, p99 for each backend: {row}");
    for c in cells {
        let text = c.as_str().unwrap_or("");
        let number = text.trim_end_matches(" ▲");
        assert!(number.parse::<f64>().is_ok(), "{text:?} in {row}");
    }
    let slowest = rows[0]["slowest"].as_array().expect("slowest");
    assert!(
        slowest.len() == 1 && slowest[0].as_str().is_some_and(|s| s.ends_with('▲')),
        "one p99 marked slowest, with its text marker: {row}"
    );

    for panel in ["chart-qps", "chart-p99"] {
        let series = browser.eval(
            &page,
            &format!(
                "Array.from(document.querySelectorAll('#{panel} polyline'))
                   .map(p => [p.getAttribute('data-backend'), p.points.numberOfItems])"
            ),
        );
        let series = series.as_array().expect("series");
        let shown: Vec<&Value> = series.iter().map(|s| &s[0]).collect();
        assert_eq!(
            shown,
            names.iter().collect::<Vec<_>>(),
            "{panel}: {series:?}"
        );
        assert!(
            series.iter().all(|s| s[1].as_u64() >= Some(3)),
            "{panel}: points in every series: {series:?}"
        );
    }
    browser.drain_events(Duration::from_millis(500));
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");

    let bounds = |browser: &mut Browser, id: &str| {
        browser.eval(
            &page,
            &format!(
                "(() => {{ const r = document.getElementById('{id}').getBoundingClientRect();
                   return [r.left + scrollX, r.top + scrollY, r.width, r.height]; }})()"
            ),
        )
    };
    browser.eval(&page, "scrollTo(0, 0); 1");
    let panels = [
        bounds(&mut browser, "chart-qps"),
        bounds(&mut browser, "chart-p99"),
    ];
    let png = browser.screenshot(&page);
    let image = common::png::decode(&png).expect("the screenshot decodes");
    assert_eq!(image.width, 1280);
    for (i, colour) in ["#1f6feb", "#d1242f"].into_iter().enumerate() {
        let seen: usize = panels.iter().map(|b| pixels_of(&image, b, colour)).sum();
        assert!(
            seen >= 20,
            "series {i} ({colour}) drawn in the chart: {seen} pixels in {panels:?}"
        );
    }
    let blank: usize = panels.iter().map(|b| pixels_of(&image, b, "#000000")).sum();
    assert!(blank < 2000, "the chart is not a black box: {blank}");
    drop(browser);
    drop(proxy);
    for db in pair {
        sysbench(db.port, &[], "cleanup");
    }
}

/// The cells of the page's table of pools across backends, row by row.
fn across_rows(browser: &mut Browser, page: &str) -> Value {
    browser.eval(
        page,
        "Array.from(document.querySelectorAll('#across tbody tr'))\
           .map(r => Array.from(r.cells).map(c => c.textContent))",
    )
}

/// What the row of backend `name` must show, from its `/backends` entry.
fn across_row_of(proxy: &TestProxy, name: &str, progress: &str) -> Value {
    let b = proxy.backend_entry(name);
    let p = &b["server_pool"];
    let n = |v: &Value| v.as_u64().expect("a count").to_string();
    json!([
        name,
        "default",
        n(&b["active_connections"]),
        n(&p["acquired"]),
        n(&p["moved_in"]),
        n(&p["retried"]),
        n(&p["pinned_sessions"]),
        n(&p["keys_only_here"]),
        progress
    ])
}

#[test]
fn with_a_pool_across_backends_the_page_shows_moves_and_the_drain_left() {
    let pair = shared_pair();
    let names = backends(pair);
    let mut cfg = common::proxy::config(&names);
    common::pooling::transaction_mode(
        &mut cfg,
        20,
        Duration::from_secs(60),
        Duration::from_secs(5),
    );
    cfg.pools[0].pooling.across_backends = true;
    let proxy = TestProxy::start_with(cfg);
    let admin = proxy.admin.expect("admin endpoint");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Four sessions, logged in over both backends, twenty autocommit reads each.
    let (mut conns, pinned_port) = rt.block_on(async {
        use mysql_async::prelude::*;
        let mut conns = Vec::new();
        for _ in 0..4 {
            conns.push(
                mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
                    .await
                    .expect("login through the proxy"),
            );
        }
        for _ in 0..20 {
            for c in &mut conns {
                c.query_drop("SELECT @@port").await.unwrap();
            }
        }
        // One session pins its connection (a user variable): it stays where that ran.
        conns[0].query_drop("SET @pinned = 1").await.unwrap();
        let port: u16 = conns[0]
            .query_first("SELECT @@port")
            .await
            .unwrap()
            .unwrap();
        (conns, port)
    });
    let pinned_on = format!("127.0.0.1:{pinned_port}");

    // The backend the pinned session is on drains: it stays, the others there move.
    let (status, body) = proxy.admin_post(&format!("/backends/{pinned_on}/drain"), &[]);
    assert_eq!(status, 200, "{body}");
    rt.block_on(async {
        use mysql_async::prelude::*;
        for c in &mut conns[1..] {
            c.query_drop("SELECT 1").await.unwrap();
        }
    });
    let moved_in: u64 = names
        .iter()
        .map(|n| {
            proxy.backend_entry(n)["server_pool"]["moved_in"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(moved_in > 0, "sessions moved");
    let left = proxy.backend_entry(&pinned_on);
    assert_eq!(
        left["active_connections"], 1,
        "only the pinned session: {left}"
    );
    assert_eq!(left["server_pool"]["pinned_sessions"], 1, "{left}");

    // The drained backend's idle connections close and the keys are recounted meanwhile: the
    // page is read again until it and the /backends read after it agree.
    let (mut browser, page) = open_at_1280x900(admin);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = across_rows(&mut browser, &page);
        let p = &proxy.backend_entry(&pinned_on)["server_pool"];
        let (open, idle) = (p["open"].as_u64().unwrap(), p["idle"].as_u64().unwrap());
        let progress = format!(
            "draining: 1 session(s) left (1 pinned: they stay until they end), {} \
             connection(s) in use, {idle} idle connection(s) left",
            open - idle
        );
        let want: Vec<Value> = names
            .iter()
            .map(|n| across_row_of(&proxy, n, if *n == pinned_on { &progress } else { "–" }))
            .collect();
        if rows == json!(want) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page shows {rows}, /backends says {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
        browser.navigate(&page, &format!("http://{admin}/"));
    }

    // The pinned session ends: the drained backend empties, and the page says so.
    let first = conns.remove(0);
    rt.block_on(first.disconnect()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = proxy.backend_entry(&pinned_on);
        if e["active_connections"] == 0 && e["server_pool"]["open"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the drained backend never emptied: {e}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    browser.navigate(&page, &format!("http://{admin}/"));
    let rows = across_rows(&mut browser, &page);
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == json!(pinned_on))
        .cloned();
    assert_eq!(
        row.map(|r| r[8].clone()),
        Some(json!("draining: empty, no session or connection left"))
    );
    browser.drain_events(Duration::from_millis(300));
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");
    rt.block_on(async {
        for c in conns {
            c.disconnect().await.unwrap();
        }
    });
}
