//! Smoke load: sysbench `oltp_read_only` through mysql-lb against the shared pair, once with
//! prepared statements (sysbench's default) and once with text queries only. Zero errors are
//! allowed, and round robin must give each backend a fair share of the commands.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Instant;

use common::mariadb::{shared_pair, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::TestProxy;
use common::sysbench::number_after;

const THREADS: u32 = 8;
const TABLES: u32 = 4;
const TABLE_SIZE: u32 = 10_000;

/// Runs `sysbench oltp_read_only <extra...> <action>` against 127.0.0.1:`port`.
fn sysbench(port: u16, extra: &[String], action: &str) -> Output {
    let mut cmd = Command::new(common::sysbench::binary());
    cmd.arg("oltp_read_only")
        .args([
            "--db-driver=mysql".to_string(),
            "--mysql-host=127.0.0.1".to_string(),
            format!("--mysql-port={port}"),
            format!("--mysql-user={BENCH_USER}"),
            format!("--mysql-password={BENCH_PASS}"),
            "--mysql-db=sbtest".to_string(),
            format!("--tables={TABLES}"),
            format!("--table-size={TABLE_SIZE}"),
        ])
        .args(extra)
        .arg(action)
        .stdin(Stdio::null());
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run sysbench: {e}"))
}

fn checked(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// "(1234.56 per sec.)" on the line that starts with `label`.
fn rate_after(report: &str, label: &str) -> Option<f64> {
    report.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(label)?;
        let open = rest.find('(')?;
        rest[open + 1..].split_whitespace().next()?.parse().ok()
    })
}

struct RunStats {
    queries: f64,
    qps: f64,
    transactions: f64,
    errors: f64,
}

fn parse_report(report: &str) -> RunStats {
    let field = |label: &str| {
        number_after(report, label)
            .unwrap_or_else(|| panic!("no {label:?} in sysbench's report:\n{report}"))
    };
    RunStats {
        queries: field("total:"),
        qps: rate_after(report, "queries:")
            .unwrap_or_else(|| panic!("no query rate in sysbench's report:\n{report}")),
        transactions: field("transactions:"),
        // sysbench 1.0 says "ignored errors:"; newer ones also print "errors:".
        errors: number_after(report, "ignored errors:")
            .or_else(|| number_after(report, "errors:"))
            .unwrap_or_else(|| panic!("no error count in sysbench's report:\n{report}")),
    }
}

fn per_backend_commands(proxy: &TestProxy) -> Vec<u64> {
    proxy
        .state
        .backends()
        .backends()
        .iter()
        .map(|b| b.stats.total_commands())
        .collect()
}

/// Sum over backends of the `_count` of the query histogram for one command kind, read from the
/// real `/metrics` exposition (what Prometheus would scrape).
fn scraped_count(proxy: &TestProxy, kind: &str) -> u64 {
    let (status, body) = proxy.admin_get("/metrics");
    assert_eq!(status, 200);
    let mut seen = 0;
    let mut sum = 0.0;
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("mysql_lb_backend_query_duration_seconds_count{") else {
            continue;
        };
        if rest.contains(&format!("command=\"{kind}\"")) {
            seen += 1;
            sum += rest
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    assert_eq!(seen, 2, "every backend has its {kind} series:\n{body}");
    sum as u64
}

/// Statements each sysbench oltp_read_only connection prepares when it starts (ps mode): the five
/// read statements per table plus BEGIN and COMMIT.
const PREPARED_PER_THREAD: u64 = 5 * TABLES as u64 + 2;

/// The digest table of a run agrees with sysbench: per kind (query, prepare, execute) the same
/// totals as the histograms, and the point selects of all tables (10 per transaction) exactly.
fn check_digests(
    proxy: &TestProxy,
    name: &str,
    expected: &[u64; 4],
    transactions: u64,
    text: bool,
) {
    let (status, body) = proxy.admin_get("/queries?limit=10000");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let rows = v["queries"].as_array().expect("rows");
    assert_eq!(v["folded"], 0, "{name}: nothing folded");
    let per_kind: Vec<u64> = ["query", "prepare", "execute"]
        .iter()
        .map(|k| {
            rows.iter()
                .filter(|r| r["kind"] == *k)
                .map(|r| r["count"].as_u64().unwrap())
                .sum()
        })
        .collect();
    println!("{name}: digest counts (query, prepare, execute) = {per_kind:?}");
    assert_eq!(per_kind, expected[..3], "{name}: digest counts per kind");
    let (kind, id) = if text {
        ("query", "1")
    } else {
        ("execute", "?")
    };
    let point_selects: u64 = (1..=TABLES)
        .map(|t| {
            let text = format!("SELECT c FROM sbtest{t} WHERE id={id}");
            let digest = mysql_lb::wire::sql::digest(text.as_bytes(), 1024).to_string();
            rows.iter()
                .filter(|r| r["kind"] == kind && r["digest"] == digest.as_str())
                .map(|r| r["count"].as_u64().unwrap())
                .sum::<u64>()
        })
        .sum();
    assert_eq!(
        point_selects,
        10 * transactions,
        "{name}: point selects counted under their digests"
    );
}

fn on_each_backend(pair: &[MariaDb; 2], action: &str) {
    std::thread::scope(|s| {
        let handles: Vec<_> = pair
            .iter()
            .map(|db| {
                s.spawn(move || {
                    checked(
                        sysbench(db.port, &[format!("--threads={TABLES}")], action),
                        &format!("sysbench {action} on {}", db.tcp_addr()),
                    )
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        }
    });
}

#[test]
fn sysbench_oltp_read_only_through_the_proxy() {
    let started = Instant::now();
    let pair = shared_pair();
    // Each backend gets its own copy of the tables, loaded directly.
    on_each_backend(pair, "cleanup");
    on_each_backend(pair, "prepare");
    println!(
        "prepared {TABLES} x {TABLE_SIZE} rows on each backend in {:?}",
        started.elapsed()
    );

    let proxy = TestProxy::start_with(common::proxy::with_digests(&[
        pair[0].tcp_addr(),
        pair[1].tcp_addr(),
    ]));
    let runs: [(&str, u32, Option<&str>); 2] = [
        ("prepared statements", 10, None),
        ("text queries", 5, Some("--db-ps-mode=disable")),
    ];
    for (name, seconds, mode) in runs {
        let (s, body) = proxy.admin_post("/queries/reset", &[]);
        assert_eq!(s, 200, "{body}");
        let before = per_backend_commands(&proxy);
        let kinds = ["query", "prepare", "execute", "other"];
        let scraped_before: Vec<u64> = kinds.iter().map(|k| scraped_count(&proxy, k)).collect();
        let mut extra = vec![
            format!("--threads={THREADS}"),
            format!("--time={seconds}"),
            "--mysql-ignore-errors=none".to_string(),
            "--report-interval=0".to_string(),
        ];
        extra.extend(mode.map(str::to_string));
        let report = checked(
            sysbench(proxy.addr.port(), &extra, "run"),
            &format!("sysbench run ({name})"),
        );
        let stats = parse_report(&report);
        let after = per_backend_commands(&proxy);
        let split: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let total: u64 = split.iter().sum();
        println!(
            "sysbench oltp_read_only, {name}, {THREADS} threads, {seconds} s: {:.0} qps, \
             {:.0} queries, {:.0} transactions, {:.0} errors; commands per backend {split:?} \
             ({total} in all)",
            stats.qps, stats.queries, stats.transactions, stats.errors
        );
        assert_eq!(stats.errors, 0.0, "{name}: errors reported:\n{report}");
        // Exactness: the histograms count what sysbench ran, plus exactly what its connections
        // issued at connect (prepared statements in ps mode; nothing in text mode).
        let delta: Vec<u64> = kinds
            .iter()
            .zip(&scraped_before)
            .map(|(k, b)| scraped_count(&proxy, k) - b)
            .collect();
        let queries = stats.queries as u64;
        let expected = if mode.is_some() {
            [queries, 0, 0, 0]
        } else {
            [0, PREPARED_PER_THREAD * u64::from(THREADS), queries, 0]
        };
        println!("{name}: histogram counts (query, prepare, execute, other) = {delta:?}, expected {expected:?}");
        assert_eq!(delta, expected, "{name}: histogram _count per kind");
        check_digests(
            &proxy,
            name,
            &expected,
            stats.transactions as u64,
            mode.is_some(),
        );
        assert!(stats.queries > 0.0, "{name}: no queries:\n{report}");
        assert!(total > 0, "{name}: the proxy recorded no commands");
        for (i, n) in split.iter().enumerate() {
            assert!(
                *n * 5 > total,
                "{name}: backend {} got {n} of {total} commands (≤ 20%)",
                pair[i].tcp_addr()
            );
        }
    }
    drop(proxy);
    on_each_backend(pair, "cleanup");
    println!("sysbench test took {:?}", started.elapsed());
}
