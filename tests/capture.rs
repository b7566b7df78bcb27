//! Traffic capture and replay against real MariaDB: 20 s of sysbench oltp_read_write (prepared
//! statements) captured through mysql-lb over three backends and replayed at 1× and 4× onto a
//! server restored to the data it started from; a session open before the capture; no password in the files; damaged
//! files; a target that refuses the replay's account; the capture directory rules.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::mariadb::{scratch_dir, shared_pair, tcp_opts, MariaDb};
use common::proxy::{http_request, TestProxy};
use mysql_async::prelude::*;
use mysql_lb::telemetry::capture::format::{self, Body, Record};
use serde_json::Value;

const USER: &str = "capapp";
/// Distinctive, so finding it in a file cannot be a coincidence.
const PASSWORD: &str = "Zq9-cap-Secret-71f3";
const TABLE_SIZE: u32 = 10_000;
/// The sysbench run captured in the sysbench test (issue 21 asks for 20 s).
const CAPTURE_SECONDS: u32 = 20;

fn sysbench(port: u16, extra: &[&str], action: &str) -> Output {
    let out = Command::new(common::sysbench::binary())
        .arg("oltp_read_write")
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            &format!("--mysql-port={port}"),
            &format!("--mysql-user={USER}"),
            &format!("--mysql-password={PASSWORD}"),
            "--mysql-db=sbtest",
            "--tables=1",
            &format!("--table-size={TABLE_SIZE}"),
            // The same data on every server prepared.
            "--rand-seed=1",
        ])
        .args(extra)
        .arg(action)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run sysbench: {e}"));
    assert!(
        out.status.success(),
        "sysbench {action} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn create_account(db: &MariaDb) {
    for host in ["%", "localhost"] {
        db.root_exec(&format!(
            "CREATE USER IF NOT EXISTS '{USER}'@'{host}' IDENTIFIED BY '{PASSWORD}'; \
             GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'{host}'"
        ));
    }
}

/// Drops and prepares sbtest1 again: the data every run starts from.
fn restore(db: &MariaDb) {
    db.root_exec("DROP TABLE IF EXISTS sbtest.sbtest1");
    sysbench(db.port, &[], "prepare");
}

fn capture_start(proxy: &TestProxy, body: &str) -> (u16, Value) {
    let (status, text) = http_request(
        proxy.admin.expect("admin endpoint"),
        "POST",
        "/capture/start",
        &["Content-Type: application/json"],
        body.as_bytes(),
    )
    .expect("admin response");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn capture_stop(proxy: &TestProxy) -> Value {
    let (status, text) = proxy.admin_post("/capture/stop", &[]);
    assert_eq!(status, 200, "stop: {text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["capture"]["running"], false, "stopped and closed: {v}");
    v["capture"].clone()
}

fn password_file(dir: &Path) -> PathBuf {
    let p = dir.join("password");
    std::fs::write(&p, format!("{PASSWORD}\n")).unwrap();
    p
}

/// Runs `mysql-lb replay`; its exit status, stdout, and the JSON report.
fn replay(dir: &Path, target: &str, password: &Path, extra: &[&str]) -> (bool, String, Value) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = dir.with_extension(format!("report-{run}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
        .arg("replay")
        .arg(dir)
        .args(["--target", target, "--user", USER, "--password-file"])
        .arg(password)
        .arg("--json")
        .arg(&json)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("mysql-lb replay runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report = std::fs::read(&json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (out.status.success(), stdout, report)
}

fn records(dir: &Path) -> Vec<Record> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let d = format::decode_file(&std::fs::read(f).unwrap()).unwrap();
            assert!(d.stopped.is_none(), "{}: {:?}", f.display(), d.stopped);
            d.records
        })
        .collect()
}

/// Neither the raw files nor any decoded record holds the password, and every COM_CHANGE_USER
/// was written with an empty auth response.
fn assert_no_secret(dir: &Path) {
    for f in std::fs::read_dir(dir).unwrap() {
        let path = f.unwrap().path();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{} mode", path.display());
        let raw = std::fs::read(&path).unwrap();
        assert!(
            !contains(&raw, PASSWORD.as_bytes()),
            "password in {}",
            path.display()
        );
    }
    for r in records(dir) {
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        assert!(!contains(&bytes, PASSWORD.as_bytes()), "password in {r:?}");
        if let Body::Command(c) = &r.body {
            if c.command() == 0x11 {
                let user_end = c.payload.iter().position(|&b| b == 0).unwrap();
                assert_eq!(c.payload[user_end + 1], 0, "change user auth kept: {c:?}");
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn digest_rows(report: &Value) -> &Vec<Value> {
    report["digests"].as_array().expect("digests in the report")
}

/// A replay 4× faster interleaves the sessions' transactions otherwise than captured, so InnoDB
/// may pick a deadlock victim where the capture had none (1213), and the victim's rolled-back
/// DELETE then makes its session's INSERT of that row a duplicate (1062). That is the server's
/// answer to a new interleaving, not a replay fault: allowed only as that pair, only after a
/// deadlock, and rarely (at most 1 in 500 commands). Any other new error still fails.
fn only_deadlock_fallout(report: &Value) {
    let new_errors = report["new_errors"].as_u64().expect("new_errors");
    if new_errors == 0 {
        return;
    }
    let firsts: Vec<&str> = digest_rows(report)
        .iter()
        .filter(|d| d["new_errors"].as_u64().unwrap_or(0) > 0)
        .map(|d| d["first_new_error"].as_str().unwrap_or(""))
        .collect();
    assert!(
        firsts.iter().any(|e| e.starts_with("1213:")),
        "new errors without a deadlock: {report}"
    );
    assert!(
        firsts
            .iter()
            .all(|e| e.starts_with("1213:") || e.starts_with("1062:")),
        "a new error other than a deadlock and its duplicate key: {report}"
    );
    let commands = report["replayed_commands"]
        .as_u64()
        .expect("replayed_commands");
    assert!(new_errors * 500 <= commands, "too many deadlocks: {report}");
}

#[test]
fn sysbench_read_write_captured_replays_with_every_digest_count_at_1x_and_4x() {
    let started = Instant::now();
    // Three backends behind the proxy, each starting from the same data; the replay goes to a
    // fourth restored to it.
    let mut dbs: Vec<MariaDb> = std::thread::scope(|s| {
        let starting: Vec<_> = ["cap-a", "cap-b", "cap-c", "cap-target"]
            .into_iter()
            .map(|name| {
                s.spawn(move || {
                    let db = MariaDb::start(name);
                    create_account(&db);
                    restore(&db);
                    db
                })
            })
            .collect();
        starting.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let target = dbs.pop().unwrap();
    let sources: Vec<String> = dbs.iter().map(MariaDb::tcp_addr).collect();
    let proxy = TestProxy::start(&sources);
    let dir = scratch_dir("capture-sb").join("cap");
    let (status, started_capture) = capture_start(
        &proxy,
        &format!(r#"{{"dir":"{}","duration":"60s"}}"#, dir.display()),
    );
    assert_eq!(status, 200, "{started_capture}");
    let run = sysbench(
        proxy.addr.port(),
        &[
            "--threads=3",
            &format!("--time={}", CAPTURE_SECONDS),
            // Well below what this (shared, loaded) machine serves, so a 4x replay of a debug
            // build is not capped by the machine.
            "--rate=20",
            "--mysql-ignore-errors=none",
            "--report-interval=0",
        ],
        "run",
    );
    let capture = capture_stop(&proxy);
    println!("capture: {capture}");
    assert_eq!(capture["dropped"], 0);
    assert_eq!(capture["sessions"], 3, "one per sysbench thread");
    let mut backends: Vec<String> = records(&dir)
        .into_iter()
        .filter_map(|r| match r.body {
            Body::SessionStart(s) => Some(s.backend),
            _ => None,
        })
        .collect();
    backends.sort();
    let mut want = sources.clone();
    want.sort();
    assert_eq!(
        backends, want,
        "one session on each backend, named in its start record"
    );
    let report = String::from_utf8_lossy(&run.stdout);
    let transactions: u64 = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("transactions:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("sysbench transactions");
    assert!(
        transactions > 5 * u64::from(CAPTURE_SECONDS),
        "a real workload: {transactions} transactions"
    );
    assert_no_secret(&dir);

    let password = password_file(dir.parent().unwrap());
    let (ok, _, one) = replay(&dir, &target.tcp_addr(), &password, &["--speed", "1"]);
    assert!(ok, "1x replay ran to the end: {one}");
    restore(&target);
    let (ok, _, four) = replay(&dir, &target.tcp_addr(), &password, &["--speed", "4"]);
    assert!(ok, "4x replay ran to the end: {four}");
    assert_eq!(one["new_errors"], 0, "{one}");
    only_deadlock_fallout(&four);
    for report in [&one, &four] {
        assert_eq!(report["skipped_commands"], 0, "{report}");
        assert!(report["damaged_files"].as_array().unwrap().is_empty());
        for d in digest_rows(report) {
            assert_eq!(d["replayed"], d["captured"], "digest {d}");
        }
    }
    // Each oltp_read_write transaction runs 10 point selects, as captured and as replayed.
    let point_select =
        mysql_lb::wire::sql::digest(b"SELECT c FROM sbtest1 WHERE id=?", 1024).to_string();
    let point_selects: u64 = digest_rows(&one)
        .iter()
        .filter(|d| d["kind"] == "execute" && d["digest"] == point_select.as_str())
        .map(|d| d["replayed"].as_u64().unwrap())
        .sum();
    assert!(
        point_selects >= 10 * transactions,
        "{point_selects} point selects for {transactions} transactions"
    );
    let captured = one["captured_seconds"].as_f64().unwrap();
    let at_1x = one["replay_seconds"].as_f64().unwrap();
    let at_4x = four["replay_seconds"].as_f64().unwrap();
    println!("captured {captured:.2} s, replayed at 1x in {at_1x:.2} s, at 4x in {at_4x:.2} s");
    assert!(
        (at_1x - captured).abs() < 0.15 * captured + 0.3,
        "1x replay takes the captured time"
    );
    // A quarter is 0.25. The bounds sit between what 8x (0.125) and 2x (0.5) would give, so a
    // speed off by a factor of two either way fails; the room above 0.25 is for a shared 2-core
    // machine where the 4x replay's statements can fall behind their schedule.
    let ratio = at_4x / at_1x;
    assert!(
        (0.15..=0.45).contains(&ratio),
        "4x takes about a quarter of 1x: {ratio:.2} ({at_4x:.2} s vs {at_1x:.2} s)"
    );

    // Read-only, two of the three sessions, back to back: the writes and the executes of their
    // prepared statements are skipped, every read replays.
    let (ok, _, ro) = replay(
        &dir,
        &target.tcp_addr(),
        &password,
        &["--as-fast-as-possible", "--read-only", "--sessions", "2"],
    );
    assert!(ok, "{ro}");
    assert_eq!(ro["sessions"], 2);
    assert_eq!(ro["new_errors"], 0, "{ro}");
    let mut skipped_writes = 0;
    for d in digest_rows(&ro) {
        let text = d["text"].as_str().unwrap();
        let writes = ["INSERT", "UPDATE", "DELETE"]
            .iter()
            .any(|w| text.starts_with(w));
        if writes && d["kind"] == "execute" {
            assert_eq!(d["replayed"], 0, "{d}");
            assert_eq!(d["skipped"], d["captured"], "{d}");
            skipped_writes += d["skipped"].as_u64().unwrap();
        } else if text.starts_with("SELECT") {
            assert_eq!(d["replayed"], d["captured"], "{d}");
        }
    }
    assert!(skipped_writes > 0, "{ro}");
    println!("capture test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_open_before_the_capture_is_captured_from_its_next_command_and_marked() {
    let pair = shared_pair();
    create_account(&pair[0]);
    let proxy = TestProxy::start(&[pair[0].tcp_addr()]);
    let addr = proxy.addr.to_string();
    let mut early = mysql_async::Conn::new(tcp_opts(&addr, USER, PASSWORD))
        .await
        .unwrap();
    early
        .query_drop("SELECT 'before the capture'")
        .await
        .unwrap();
    let dir = scratch_dir("capture-before").join("cap");
    let (status, body) = capture_start(&proxy, &format!(r#"{{"dir":"{}"}}"#, dir.display()));
    assert_eq!(status, 200, "{body}");
    early
        .query_drop("SELECT 'during the capture'")
        .await
        .unwrap();
    let mut late = mysql_async::Conn::new(tcp_opts(&addr, USER, PASSWORD))
        .await
        .unwrap();
    late.query_drop("SELECT 'new session'").await.unwrap();
    late.ping().await.unwrap();
    // COM_CHANGE_USER carries auth data: it must be written without it.
    late.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some(USER.into()))
            .with_pass(Some(PASSWORD.into()))
            .with_db_name(Some("sbtest".into())),
    )
    .await
    .unwrap();
    late.query_drop("SELECT 'after change user'").await.unwrap();
    drop(late);
    let capture = capture_stop(&proxy);
    assert_eq!(capture["sessions"], 2, "{capture}");
    let records = records(&dir);
    let starts: Vec<(u64, u8)> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::SessionStart(s) => Some((r.session, s.flags)),
            _ => None,
        })
        .collect();
    let texts = |session| -> Vec<Vec<u8>> {
        records
            .iter()
            .filter(|r| r.session == session)
            .filter_map(|r| match &r.body {
                Body::Command(c) => Some(c.payload.clone()),
                _ => None,
            })
            .collect()
    };
    let (before, _) = starts
        .iter()
        .find(|(_, f)| f & format::STARTED_BEFORE != 0)
        .expect("a session marked as open before the capture");
    assert_eq!(
        texts(*before),
        vec![b"\x03SELECT 'during the capture'".to_vec()]
    );
    let (new, _) = starts
        .iter()
        .find(|(_, f)| f & format::STARTED_BEFORE == 0)
        .expect("a session started during the capture");
    let commands: Vec<u8> = texts(*new).iter().map(|p| p[0]).collect();
    assert!(commands.contains(&0x0E), "ping captured: {commands:?}");
    assert!(
        commands.contains(&0x11),
        "change user captured: {commands:?}"
    );
    let responses = records
        .iter()
        .filter(|r| r.session == *new && matches!(r.body, Body::Response(_)))
        .count();
    assert!(responses >= 4, "responses paired: {responses}");
    assert_no_secret(&dir);
    early.disconnect().await.unwrap();
}

/// A file of `blocks` blocks, each one session's `SELECT n` commands.
fn synthetic_capture(dir: &Path, blocks: u64) -> Vec<usize> {
    synthetic_capture_with(dir, blocks, 5, 10)
}

/// A file of `blocks` blocks, each one session's `commands` commands `SELECT n`, `gap_us` apart.
fn synthetic_capture_with(dir: &Path, blocks: u64, commands: u32, gap_us: u64) -> Vec<usize> {
    std::fs::create_dir_all(dir).unwrap();
    let mut bytes = format::FileHeader {
        started_unix_us: 0,
        index: 1,
    }
    .encode()
    .to_vec();
    let mut ends = Vec::new();
    for b in 0..blocks {
        let mut raw = Vec::new();
        let session = b + 1;
        Record {
            session,
            t_us: b * 1000,
            body: Body::SessionStart(format::SessionStart {
                user: "legacy".into(),
                schema: "test".into(),
                ..Default::default()
            }),
        }
        .encode(&mut raw);
        for i in 0..commands {
            Record {
                session,
                t_us: b * 1000 + u64::from(i) * gap_us,
                body: Body::Command(format::Command {
                    seq: i,
                    flags: 0,
                    payload: format!("\x03SELECT {i}").into_bytes(),
                }),
            }
            .encode(&mut raw);
        }
        bytes.extend_from_slice(&format::encode_block(&raw));
        ends.push(bytes.len());
    }
    std::fs::write(dir.join("capture-000001.mlbcap"), &bytes).unwrap();
    ends
}

#[test]
fn a_truncated_or_corrupt_file_replays_what_is_valid_and_names_the_offset() {
    let pair = shared_pair();
    create_account(&pair[0]);
    let base = scratch_dir("capture-damaged");
    let password = password_file(&base);
    for (name, damage) in [("truncated", 0u8), ("corrupt", 1)] {
        let dir = base.join(name);
        let ends = synthetic_capture(&dir, 2);
        let file = dir.join("capture-000001.mlbcap");
        let mut bytes = std::fs::read(&file).unwrap();
        if damage == 0 {
            bytes.truncate(ends[1] - 3);
        } else {
            bytes[ends[1] - 2] ^= 0xFF;
        }
        std::fs::write(&file, &bytes).unwrap();
        let (ok, stdout, report) = replay(
            &dir,
            &pair[0].tcp_addr(),
            &password,
            &["--as-fast-as-possible"],
        );
        assert!(ok, "{name}: the valid part replays");
        assert_eq!(report["replayed_commands"], 5, "{name}: {report}");
        assert_eq!(report["new_errors"], 0);
        let damaged = &report["damaged_files"][0];
        assert_eq!(damaged["offset"], ends[0], "{name}: {report}");
        assert!(
            stdout.contains(&format!("stopped at offset {}", ends[0])),
            "{name}: {stdout}"
        );
    }
}

#[test]
fn a_target_that_refuses_the_account_ends_with_a_clear_message_and_a_partial_report() {
    let pair = shared_pair();
    let base = scratch_dir("capture-refused");
    let dir = base.join("cap");
    synthetic_capture(&dir, 1);
    let wrong = base.join("wrong");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
        .arg("replay")
        .arg(&dir)
        .args([
            "--target",
            &pair[0].tcp_addr(),
            "--user",
            USER,
            "--password-file",
        ])
        .arg(&wrong)
        .args(["--as-fast-as-possible"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("ended early"), "{stdout}");
    assert!(stdout.contains("Access denied"), "{stdout}");
    assert!(stdout.contains("replayed 0 of 5 commands"), "{stdout}");
}

#[test]
fn capture_start_refuses_unsafe_directories_a_second_capture_and_missing_tokens() {
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr()]);
    let base = scratch_dir("capture-dirs");
    let full = base.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "x").unwrap();
    let link = base.join("link");
    std::os::unix::fs::symlink(base.join("elsewhere"), &link).unwrap();
    for (dir, why) in [
        (full.display().to_string(), "not empty"),
        (link.display().to_string(), "symbolic link"),
        ("relative/dir".to_owned(), "absolute"),
    ] {
        let (status, body) = capture_start(&proxy, &format!(r#"{{"dir":"{dir}"}}"#));
        assert_eq!(status, 400, "{dir}: {body}");
        assert!(body["error"].as_str().unwrap().contains(why), "{body}");
    }
    assert!(
        !base.join("elsewhere").exists(),
        "nothing created through the link"
    );
    let ok = base.join("ok");
    let (status, _) = capture_start(&proxy, &format!(r#"{{"dir":"{}"}}"#, ok.display()));
    assert_eq!(status, 200);
    let mode = std::fs::metadata(&ok).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let (status, _) = capture_start(
        &proxy,
        &format!(r#"{{"dir":"{}"}}"#, base.join("two").display()),
    );
    assert_eq!(status, 409, "one capture at a time");
    let (status, body) = proxy.admin_get("/capture");
    assert_eq!(status, 200);
    assert!(body.contains("\"running\":true"), "{body}");
    capture_stop(&proxy);

    let mut config = common::proxy::config(&[pair[0].tcp_addr()]);
    let token_file = base.join("token");
    std::fs::write(&token_file, "tok-123\n").unwrap();
    config.admin_token_file = Some(token_file);
    let guarded = TestProxy::start_with(config);
    let body = format!(r#"{{"dir":"{}"}}"#, base.join("guarded").display());
    let (status, _) = capture_start(&guarded, &body);
    assert_eq!(status, 401, "no token");
    let (status, _) = guarded.admin_get("/capture");
    assert_eq!(status, 401);
    let (status, text) = http_request(
        guarded.admin.unwrap(),
        "POST",
        "/capture/start",
        &["Authorization: Bearer tok-123"],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(status, 200, "{text}");
    capture_stop_with_token(&guarded);
}

fn capture_stop_with_token(proxy: &TestProxy) {
    let (status, text) = proxy.admin_post("/capture/stop", &["Authorization: Bearer tok-123"]);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn the_html_report_opens_in_a_real_browser_with_its_charts_and_no_error() {
    let pair = shared_pair();
    create_account(&pair[0]);
    let base = scratch_dir("capture-html");
    let password = password_file(&base);
    let dir = base.join("cap");
    synthetic_capture(&dir, 3);
    let html = base.join("report.html");
    let html_arg = html.display().to_string();
    let (ok, _, report) = replay(
        &dir,
        &pair[0].tcp_addr(),
        &password,
        &["--speed", "10", "--html", &html_arg],
    );
    assert!(ok, "{report}");
    let mode = std::fs::metadata(&html).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut browser = common::cdp::Browser::launch();
    let page = browser.new_page();
    browser.navigate(&page, &format!("file://{}", html.display()));
    let summary = browser.eval(&page, "document.getElementById('summary').textContent");
    assert!(
        summary
            .as_str()
            .unwrap()
            .starts_with("15 of 15 commands replayed"),
        "{summary}"
    );
    let lines = browser.eval(
        &page,
        "Array.from(document.querySelectorAll('#throughput polyline.series')).map(p => [p.dataset.series, p.points.numberOfItems])",
    );
    let lines = lines.as_array().expect("throughput lines");
    assert_eq!(lines.len(), 2, "captured and replayed: {lines:?}");
    for l in lines {
        assert!(l[1].as_u64().unwrap() >= 1, "a line with points: {l}");
    }
    let bars = browser.eval(
        &page,
        "Array.from(document.querySelectorAll('#latency rect.bar')).filter(r => r.getBBox().width > 0).length",
    );
    assert_eq!(
        bars, 4,
        "p50 and p95, captured and replayed, of the one digest"
    );
    let rows = browser.eval(&page, "document.querySelectorAll('#digests tr').length");
    assert_eq!(rows, 2, "a header and the digest");
    let external = browser.eval(
        &page,
        "document.querySelectorAll('script, link, img, iframe, object').length",
    );
    assert_eq!(external, 0, "self-contained");
    browser.drain_events(Duration::from_millis(300));
    assert_eq!(browser.errors(), Vec::<String>::new());
}

/// Commands of a TLS session and a compressed one are captured as their clients sent them
/// (after TLS and inflation): a 200 KB statement whole, prepared statements with their
/// parameters; and both replay with no new error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_compressed_sessions_are_captured_as_sent() {
    use common::tls_server::certs;
    use mysql_lb::config::{ClientTls, TlsVersion};
    let pair = shared_pair();
    for db in pair {
        create_account(db);
    }
    let c = certs();
    let mut cfg = common::proxy::config(&[pair[0].tcp_addr()]);
    cfg.compression = true;
    cfg.tls = Some(ClientTls {
        cert: c.server.cert.clone(),
        key: c.server.key.clone(),
        ca: None,
        verify_client: false,
        min_version: TlsVersion::V1_2,
        require: false,
        cipher_suites: mysql_lb::config::default_cipher_suites(),
    });
    let proxy = TestProxy::start_with(cfg);
    let base = scratch_dir("capture-legs");
    let dir = base.join("cap");
    let (status, body) = capture_start(&proxy, &format!(r#"{{"dir":"{}"}}"#, dir.display()));
    assert_eq!(status, 200, "{body}");
    let addr = proxy.addr.to_string();
    let plain =
        mysql_async::OptsBuilder::from_opts(tcp_opts(&addr, USER, PASSWORD)).db_name(Some("test"));
    let ssl = mysql_async::SslOpts::default()
        .with_root_certs(vec![c.ca.clone().into()])
        .with_disable_built_in_roots(true);
    let big = "x".repeat(200_000);
    let big_query = format!("SELECT LENGTH('{big}') AS n");
    for (leg, opts) in [
        ("tls", plain.clone().ssl_opts(ssl)),
        (
            "compressed",
            plain.clone().compression(mysql_async::Compression::fast()),
        ),
    ] {
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        let n: Option<u64> = conn.query_first(&big_query).await.unwrap();
        assert_eq!(n, Some(200_000), "{leg}");
        let stmt = conn.prep("SELECT ? + 1").await.unwrap();
        let two: Option<i64> = conn.exec_first(&stmt, (41,)).await.unwrap();
        assert_eq!(two, Some(42), "{leg}");
        conn.close(stmt).await.unwrap();
        conn.disconnect().await.unwrap();
    }
    capture_stop(&proxy);
    let records = records(&dir);
    let payloads: Vec<&Vec<u8>> = records
        .iter()
        .filter_map(|r| match &r.body {
            Body::Command(c) => Some(&c.payload),
            _ => None,
        })
        .collect();
    let mut want_big = vec![0x03];
    want_big.extend_from_slice(big_query.as_bytes());
    assert_eq!(
        payloads.iter().filter(|p| ***p == want_big).count(),
        2,
        "the 200 KB statement whole, once per leg"
    );
    let executes: Vec<&&Vec<u8>> = payloads.iter().filter(|p| p[0] == 0x17).collect();
    assert_eq!(executes.len(), 2);
    for e in executes {
        assert!(contains(e, &41i64.to_le_bytes()), "the parameter: {e:?}");
    }
    let password = password_file(&base);
    let (ok, _, report) = replay(
        &dir,
        &pair[1].tcp_addr(),
        &password,
        &["--as-fast-as-possible"],
    );
    assert!(ok, "{report}");
    assert_eq!(report["new_errors"], 0, "{report}");
    assert_eq!(report["skipped_commands"], 0, "{report}");
    for d in digest_rows(&report) {
        assert_eq!(d["replayed"], d["captured"], "{d}");
        assert_eq!(d["rows_differ"], 0, "{d}");
    }
}

/// A server-side cursor (COM_STMT_EXECUTE with CURSOR_TYPE_READ_ONLY, then COM_STMT_FETCH a few
/// rows at a time) is captured fetch by fetch, and each fetch replays on the cursor of the
/// statement prepared again on the target, with the same rows. No client library here opens
/// cursors (MariaDB Connector/J and mysql_async do not), so the raw client does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_fetches_are_captured_and_replayed_on_the_prepared_again_statement() {
    use common::rawclient::RawClient;
    let pair = shared_pair();
    for db in pair {
        create_account(db);
    }
    let proxy = TestProxy::start(&[pair[0].tcp_addr()]);
    let base = scratch_dir("capture-cursor");
    let dir = base.join("cap");
    let (status, body) = capture_start(&proxy, &format!(r#"{{"dir":"{}"}}"#, dir.display()));
    assert_eq!(status, 200, "{body}");
    let addr = proxy.addr.to_string();
    let mut c = RawClient::connect_tcp(&addr, USER, PASSWORD, Some("test"), 0, 0)
        .await
        .unwrap();
    for sql in [
        "DROP TABLE IF EXISTS cursor_t",
        "CREATE TABLE cursor_t (id INT PRIMARY KEY)",
        "INSERT INTO cursor_t VALUES (1), (2), (3), (4), (5)",
    ] {
        c.query_results(sql).await.unwrap();
    }
    c.send_command(0x16, b"SELECT id FROM cursor_t ORDER BY id")
        .await
        .unwrap();
    let (_, ok) = c.read_packet().await.unwrap();
    assert_eq!(ok[..].first(), Some(&0), "prepare OK: {ok:02x?}");
    let id: [u8; 4] = ok[1..5].try_into().unwrap();
    c.read_until_eof_or_err().await.unwrap(); // the column definition and its EOF
                                              // Statement id, CURSOR_TYPE_READ_ONLY, iteration count 1; no parameters.
    let mut execute = id.to_vec();
    execute.push(1);
    execute.extend_from_slice(&1u32.to_le_bytes());
    c.send_command(0x17, &execute).await.unwrap();
    let opened = c.read_until_eof_or_err().await.unwrap();
    let status = opened.last().map(|(_, p)| u16::from_le_bytes([p[3], p[4]]));
    assert_eq!(status.map(|s| s & 0x40), Some(0x40), "a cursor is open");
    let mut fetched = Vec::new();
    for _ in 0..3 {
        let mut fetch = id.to_vec();
        fetch.extend_from_slice(&2u32.to_le_bytes());
        c.send_command(0x1C, &fetch).await.unwrap();
        let packets = c.read_until_eof_or_err().await.unwrap();
        fetched.push(packets.len() - 1);
    }
    assert_eq!(fetched, vec![2, 2, 1], "rows per fetch of 2");
    c.send_command(0x19, &id).await.unwrap(); // COM_STMT_CLOSE, no answer
    c.ping().await.unwrap();
    c.quit().await.unwrap();
    capture_stop(&proxy);

    let fetches: Vec<(u64, u32)> = records(&dir)
        .into_iter()
        .filter_map(|r| match r.body {
            Body::Response(resp) if resp.command == 0x1C => Some((resp.rows, resp.seq)),
            _ => None,
        })
        .collect();
    assert_eq!(
        fetches.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![2, 2, 1],
        "each fetch and its rows captured: {fetches:?}"
    );
    let password = password_file(&base);
    let (ok, _, report) = replay(
        &dir,
        &pair[1].tcp_addr(),
        &password,
        &["--as-fast-as-possible"],
    );
    assert!(ok, "{report}");
    assert_eq!(report["new_errors"], 0, "{report}");
    assert_eq!(report["skipped_commands"], 0, "{report}");
    let fetch = digest_rows(&report)
        .iter()
        .find(|d| d["kind"] == "fetch")
        .unwrap_or_else(|| panic!("a fetch row: {report}"));
    assert_eq!(fetch["captured"], 3, "{fetch}");
    assert_eq!(fetch["replayed"], 3, "{fetch}");
    assert_eq!(fetch["rows_differ"], 0, "{fetch}");
    assert!(
        fetch["text"]
            .as_str()
            .unwrap()
            .starts_with("SELECT id FROM cursor_t"),
        "counted under its statement: {fetch}"
    );
}

#[test]
fn a_target_that_goes_away_mid_replay_ends_it_with_a_clear_message_and_a_partial_report() {
    let mut db = MariaDb::start("cap-vanishing");
    create_account(&db);
    let base = scratch_dir("capture-vanish");
    let password = password_file(&base);
    let dir = base.join("cap");
    // 20 commands 100 ms apart: two seconds at 1x.
    synthetic_capture_with(&dir, 1, 20, 100_000);
    let json = base.join("report.json");
    let child = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
        .arg("replay")
        .arg(&dir)
        .args([
            "--target",
            &db.tcp_addr(),
            "--user",
            USER,
            "--password-file",
        ])
        .arg(&password)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    db.kill9();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("ended early: session 1: the target"),
        "{stdout}"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let replayed = report["replayed_commands"].as_u64().unwrap();
    assert!(
        (3..=10).contains(&replayed),
        "the part before it went away: {replayed}"
    );
    assert_eq!(report["captured_commands"], 20);
}

#[test]
fn an_account_map_logs_captured_users_in_as_other_accounts() {
    let pair = shared_pair();
    create_account(&pair[0]);
    let base = scratch_dir("capture-map");
    let dir = base.join("cap");
    synthetic_capture(&dir, 2);
    let map = base.join("accounts");
    std::fs::write(
        &map,
        format!("# captured user, account, password\nlegacy {USER} {PASSWORD}\n"),
    )
    .unwrap();
    let json = base.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
        .arg("replay")
        .arg(&dir)
        .args([
            "--target",
            &pair[0].tcp_addr(),
            "--as-fast-as-possible",
            "--account-map",
        ])
        .arg(&map)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["replayed_commands"], 10, "{report}");
    // Without a mapping for `legacy` and without --user, its sessions are skipped.
    std::fs::write(&map, format!("someone {USER} {PASSWORD}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mysql-lb"))
        .arg("replay")
        .arg(&dir)
        .args([
            "--target",
            &pair[0].tcp_addr(),
            "--as-fast-as-possible",
            "--account-map",
        ])
        .arg(&map)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("replayed 0 of 10 commands (10 skipped, 0 of them redacted)"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_a_running_capture_with_its_last_records_written() {
    let pair = shared_pair();
    create_account(&pair[0]);
    let proxy = TestProxy::start(&[pair[0].tcp_addr()]);
    let dir = scratch_dir("capture-shutdown").join("cap");
    let (status, body) = capture_start(&proxy, &format!(r#"{{"dir":"{}"}}"#, dir.display()));
    assert_eq!(status, 200, "{body}");
    let mut conn = mysql_async::Conn::new(tcp_opts(&proxy.addr.to_string(), USER, PASSWORD))
        .await
        .unwrap();
    conn.query_drop("SELECT 'last words'").await.unwrap();
    conn.disconnect().await.unwrap();
    tokio::task::spawn_blocking(move || drop(proxy))
        .await
        .unwrap();
    let records = records(&dir);
    assert!(
        records.iter().any(|r| matches!(&r.body,
            Body::Command(c) if c.payload == b"\x03SELECT 'last words'")),
        "the last statement was written before the proxy exited"
    );
    assert!(matches!(records.last().unwrap().body, Body::SessionEnd));
}

/// The password-family statements MariaDB 10.11 runs, each with its own password (in the order
/// sent; the others are in the unit tests of `capture::redact`).
const SECRET_STATEMENTS: &[(&str, &str)] = &[
    ("CREATE USER 'capsec1'@'%' IDENTIFIED BY '{}'", "Kq1-sec-create"),
    ("ALTER USER 'capsec1'@'%' IDENTIFIED BY '{}'", "Kq2-sec-alter"),
    ("SET PASSWORD FOR 'capsec1'@'%' = PASSWORD('{}')", "Kq3-sec-setpw"),
    ("GRANT SELECT ON *.* TO 'capsec1'@'%' IDENTIFIED BY '{}'", "Kq4-sec-grant"),
    (
        "CREATE USER 'capsec2'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{}')",
        "Kq5-sec-via",
    ),
    (
        "CHANGE MASTER 'capsec' TO MASTER_HOST='127.0.0.1', MASTER_PORT=1, MASTER_USER='r', MASTER_PASSWORD='{}'",
        "Kq6-sec-master",
    ),
    (
        "CREATE TABLE test.capsec_f (a INT) CONNECTION='mysql://u:{}@127.0.0.1:1/db/t'",
        "Kq7-sec-connection",
    ),
    (
        "CREATE SERVER capsec_s FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1', USER 'u', PASSWORD '{}')",
        "Kq8-sec-server",
    ),
    ("/*!40000 ALTER USER 'capsec1'@'%' IDENTIFIED BY '{}' */", "Kq9-sec-executable"),
    (
        "alter /* why */ USER 'capsec1'@'%' /*!100000 identified */ by '{}'",
        "Kq10-sec-comments",
    ),
    (
        "PREPARE capsec_p FROM 'ALTER USER ''capsec1''@''%'' IDENTIFIED BY ''{}'''",
        "Kq11-sec-prepare-from",
    ),
];
/// Sent as COM_STMT_PREPARE and COM_STMT_EXECUTE: the password only in the execute.
const SECRET_PARAMETER: &str = "Kq12-sec-parameter";
/// Sent as a COM_STMT_PREPARE of its full text.
const SECRET_PREPARED: &str = "Kq13-sec-prepared-text";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_statements_are_captured_and_digested_without_their_passwords() {
    let pair = shared_pair();
    for db in pair {
        create_account(db);
        db.root_exec(&format!(
            "GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION"
        ));
    }
    let proxy = TestProxy::start_with(common::proxy::with_digests(&[pair[0].tcp_addr()]));
    let base = scratch_dir("capture-secrets");
    let dir = base.join("cap");
    let (status, body) = capture_start(&proxy, &format!(r#"{{"dir":"{}"}}"#, dir.display()));
    assert_eq!(status, 200, "{body}");
    let addr = proxy.addr.to_string();
    let mut conn = mysql_async::Conn::new(tcp_opts(&addr, USER, PASSWORD))
        .await
        .unwrap();
    let cleanup = [
        "DROP USER IF EXISTS 'capsec1'@'%', 'capsec2'@'%'",
        "DROP TABLE IF EXISTS test.capsec_f",
        "DROP SERVER IF EXISTS capsec_s",
    ];
    for sql in cleanup {
        conn.query_drop(sql).await.unwrap();
    }
    let mut passwords = vec![SECRET_PARAMETER, SECRET_PREPARED];
    for (template, password) in SECRET_STATEMENTS {
        let sql = template.replace("{}", password);
        conn.query_drop(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        passwords.push(password);
    }
    conn.query_drop("EXECUTE capsec_p").await.unwrap();
    conn.query_drop("DEALLOCATE PREPARE capsec_p")
        .await
        .unwrap();
    let hashed: Vec<String> = conn
        .exec("SELECT PASSWORD(?)", (SECRET_PARAMETER,))
        .await
        .unwrap();
    assert_eq!(hashed.len(), 1);
    conn.exec_drop(
        format!("ALTER USER 'capsec1'@'%' IDENTIFIED BY '{SECRET_PREPARED}'"),
        (),
    )
    .await
    .unwrap();
    // A near miss keeps its text.
    let word: Vec<String> = conn.query("SELECT 'password'").await.unwrap();
    assert_eq!(word, ["password"]);
    conn.query_drop("RESET SLAVE 'capsec' ALL").await.unwrap();
    for sql in cleanup {
        conn.query_drop(sql).await.unwrap();
    }
    conn.disconnect().await.unwrap();
    let capture = capture_stop(&proxy);

    // Nowhere in the files, raw or decoded.
    for f in std::fs::read_dir(&dir).unwrap() {
        let raw = std::fs::read(f.unwrap().path()).unwrap();
        for p in &passwords {
            assert!(!contains(&raw, p.as_bytes()), "{p} in a capture file");
        }
    }
    let records = records(&dir);
    let mut redacted = 0;
    let mut texts = Vec::new();
    for r in &records {
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        for p in &passwords {
            assert!(!contains(&bytes, p.as_bytes()), "{p} in {r:?}");
        }
        if let Body::Command(c) = &r.body {
            if c.flags & format::REDACTED != 0 {
                redacted += 1;
            } else {
                texts.push(String::from_utf8_lossy(&c.payload).into_owned());
            }
        }
    }
    // Each statement of the list, and the prepares and executes of both prepared statements.
    let want = SECRET_STATEMENTS.len() as u64 + 4;
    assert_eq!(redacted, want, "redacted commands; kept: {texts:#?}");
    assert_eq!(capture["redacted"], want, "{capture}");
    assert!(
        texts.iter().any(|t| t.ends_with("SELECT 'password'")),
        "a near miss keeps its text: {texts:#?}"
    );
    // Nor in the digest table's texts and samples, the status page or the metrics.
    let (status, queries) = proxy.admin_get("/queries?limit=10000");
    assert_eq!(status, 200, "{queries}");
    let rows: Value = serde_json::from_str(&queries).unwrap();
    assert!(
        rows["queries"].as_array().unwrap().len() >= SECRET_STATEMENTS.len(),
        "{rows}"
    );
    assert!(
        queries.contains("SELECT 'password'"),
        "a near miss keeps its sample"
    );
    let (_, page) = proxy.admin_get("/");
    let (_, metrics) = proxy.admin_get("/metrics");
    for p in &passwords {
        for (what, text) in [
            ("/queries", &queries),
            ("the status page", &page),
            ("/metrics", &metrics),
        ] {
            assert!(!text.contains(p), "{p} in {what}");
        }
    }

    // The replay skips them and says so.
    let password = password_file(&base);
    let (_, out, report) = replay(
        &dir,
        &pair[1].tcp_addr(),
        &password,
        &["--as-fast-as-possible"],
    );
    assert_eq!(report["redacted_commands"], want, "{report}");
    assert!(
        report["skipped_commands"].as_u64().unwrap() >= want,
        "{report}"
    );
    assert!(out.contains(&format!("{want} of them redacted")), "{out}");
    let redacted_rows: u64 = digest_rows(&report)
        .iter()
        .filter(|d| d["text"] == "(redacted)")
        .map(|d| d["skipped"].as_u64().unwrap())
        .sum();
    assert_eq!(redacted_rows, want, "{report}");
    let text = report.to_string();
    for p in &passwords {
        assert!(!text.contains(p), "{p} in the replay's report");
    }
}
