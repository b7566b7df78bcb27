//! Query rules against a real MariaDB: a refusing rule is a firewall no reading of its
//! statement gets past (the server is the oracle: each variant is first run directly and must
//! insert its row, then through the proxy and must not), in session mode and in a
//! transaction-mode pool (whose prepares the proxy runs itself); a timeout stops a
//! `SLEEP(30)` at 1 s on its server; `max_concurrency` holds the rest back and refuses past
//! its wait; hits show in the metrics and in the SQL admin port's tables.

mod common;

use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;
use mysql_lb::config::{Config, PoolingMode, QueryRule};

fn rule(name: &str) -> QueryRule {
    QueryRule::named(name)
}

fn one_backend(db: &MariaDb, rules: Vec<QueryRule>, mode: PoolingMode) -> Config {
    let mut cfg = config(&[db.tcp_addr()]);
    cfg.query_rules = rules;
    cfg.pooling.mode = mode;
    cfg
}

fn code(e: &mysql_async::Error) -> u16 {
    match e {
        mysql_async::Error::Server(s) => s.code,
        other => panic!("expected a server error, got {other}"),
    }
}

async fn rows(conn: &mut mysql_async::Conn, table: &str) -> i64 {
    conn.query_first(format!("SELECT COUNT(*) FROM {table}"))
        .await
        .unwrap()
        .unwrap()
}

/// The variants: (session setup, the statement). Each inserts one row into `fw_t` on MariaDB.
fn variants() -> Vec<(&'static str, String)> {
    let ins = "INSERT INTO fw_t (x) VALUES";
    vec![
        ("", format!("{ins} (1)")),
        ("", "insert into fw_t(x) values(2)".into()),
        ("", "InSeRt   INTO\n\t`fw_t` (`x`) VALUES (3)".into()),
        ("", format!("/*!{ins} (4)*/")),
        ("", format!("/*!100000 {ins} (5)*/")),
        ("", format!("/*M!100000 {ins} (6)*/")),
        ("", "INSERT /* c */ INTO fw_t -- c\n (x) VALUES (7)".into()),
        (
            "",
            "INSERT /*+ NO_ICP(fw_t) */ INTO fw_t (x) VALUES (8)".into(),
        ),
        ("", format!("SELECT 1; {ins} (9)")),
        ("", format!("EXECUTE IMMEDIATE '{ins} (10)'")),
        ("", format!("PREPARE fw_s FROM '{ins} (11)'; EXECUTE fw_s")),
        (
            "SET SESSION sql_mode = 'ANSI_QUOTES'",
            "INSERT INTO \"fw_t\" (\"x\") VALUES (12)".into(),
        ),
        (
            "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'",
            format!("SELECT 'a\\'; {ins} (13); -- '"),
        ),
        (
            "",
            format!("/*!99999 UPDATE nothing */ SELECT 1; {ins} (14)"),
        ),
        ("", format!("{ins} (15) /* trailing */;")),
    ]
}

async fn run_variant(
    opts: mysql_async::Opts,
    setup: &str,
    sql: &str,
) -> Result<(), mysql_async::Error> {
    let mut conn = mysql_async::Conn::new(opts).await?;
    if !setup.is_empty() {
        conn.query_drop(setup).await?;
    }
    let result = conn.query_iter(sql).await;
    // Every result set read: an error in a later statement surfaces here.
    let outcome = match result {
        Ok(r) => r.drop_result().await,
        Err(e) => Err(e),
    };
    let _ = conn.disconnect().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reading_of_a_refused_statement_reaches_the_server() {
    let db = &shared_pair()[0];
    db.root_exec(
        "CREATE TABLE IF NOT EXISTS test.fw_t (x INT); GRANT ALL ON test.* TO 'bench'@'%'",
    );
    let mut direct = mysql_async::Conn::new(db.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    direct.query_drop("USE test").await.unwrap();
    let opts_direct =
        mysql_async::OptsBuilder::from_opts(db.opts(BENCH_USER, BENCH_PASS)).db_name(Some("test"));
    // The oracle: every variant inserts its row when the server runs it.
    for (setup, sql) in variants() {
        let before = rows(&mut direct, "fw_t").await;
        run_variant(opts_direct.clone().into(), setup, &sql)
            .await
            .unwrap_or_else(|e| panic!("directly: {sql}: {e}"));
        assert_eq!(
            rows(&mut direct, "fw_t").await,
            before + 1,
            "directly, {sql} inserts a row"
        );
    }
    let mut block = rule("no-fw-inserts");
    block.digest_text = Some("insert into fw_t (x) values (?)".into());
    block.error = Some("inserts into fw_t are closed".into());
    for mode in [PoolingMode::Session, PoolingMode::Transaction] {
        let proxy = TestProxy::start_with(one_backend(db, vec![block.clone()], mode));
        let opts = mysql_async::OptsBuilder::from_opts(proxy.opts(BENCH_USER, BENCH_PASS))
            .db_name(Some("test"));
        for (setup, sql) in variants() {
            let before = rows(&mut direct, "fw_t").await;
            let e = run_variant(opts.clone().into(), setup, &sql)
                .await
                .expect_err(&format!("{mode:?}: {sql} must be refused"));
            assert_eq!(code(&e), 1148, "{mode:?}: {sql}: {e}");
            assert!(
                e.to_string().contains("inserts into fw_t are closed"),
                "{e}"
            );
            assert_eq!(
                rows(&mut direct, "fw_t").await,
                before,
                "{mode:?}: {sql} reached the server"
            );
        }
        // A prepared statement of it is never prepared, so no execute of it runs.
        let mut conn = mysql_async::Conn::new(opts.clone()).await.unwrap();
        let before = rows(&mut direct, "fw_t").await;
        let e = conn
            .prep("INSERT INTO fw_t (x) VALUES (?)")
            .await
            .expect_err("COM_STMT_PREPARE refused");
        assert_eq!(code(&e), 1148, "{mode:?}: {e}");
        assert_eq!(rows(&mut direct, "fw_t").await, before);
        // Other statements run, on the same connection.
        let n: Option<i64> = conn.query_first("SELECT COUNT(*) FROM fw_t").await.unwrap();
        assert_eq!(n, Some(before));
        conn.query_drop("INSERT INTO fw_t (x, x) VALUES (1, 2)")
            .await
            .expect_err("the server's own error");
        conn.disconnect().await.unwrap();
        let refused = proxy
            .series("mysql_lb_query_rule_hits_total{action=\"error\",rule=\"no-fw-inserts\"}")
            .unwrap_or(0.0);
        assert!(
            refused >= variants().len() as f64 + 1.0,
            "{mode:?}: hits {refused}"
        );
    }
    direct.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_stops_a_sleep_on_its_server_at_its_limit() {
    let db = &shared_pair()[0];
    let mut slow = rule("sleep-limit");
    slow.pattern = Some(r"^select sleep\(".into());
    slow.timeout = Some(Duration::from_secs(1));
    slow.log = true;
    let proxy = TestProxy::start_with(one_backend(db, vec![slow], PoolingMode::Session));
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let started = Instant::now();
    let got: Result<Option<i64>, _> = conn.query_first("SELECT SLEEP(30)").await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "stopped at its limit, not after {took:?}"
    );
    assert!(
        took >= Duration::from_millis(900),
        "ran its second first: {took:?}"
    );
    match got {
        Err(e) => assert_eq!(code(&e), 1969, "max_statement_time exceeded: {e}"),
        Ok(v) => assert_eq!(v, Some(1), "SLEEP interrupted returns 1"),
    }
    // A statement no rule matches runs as long as it takes.
    let v: Option<f64> = conn.query_first("SELECT 0.5 + SLEEP(1.5)").await.unwrap();
    assert_eq!(v, Some(0.5));
    conn.disconnect().await.unwrap();
    assert_eq!(
        proxy.series("mysql_lb_query_rule_hits_total{action=\"timeout\",rule=\"sleep-limit\"}"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_holds_the_rest_back_and_refuses_past_its_wait() {
    let db = &shared_pair()[1];
    let mut limit = rule("two-at-once");
    // Rules read the normalized text, as /queries shows it: `SELECT SLEEP(...)`.
    limit.pattern = Some(r"^select sleep\(\.\.\.\)$".into());
    limit.max_concurrency = Some(2);
    limit.max_concurrency_wait = Duration::from_secs(20);
    let mut strict = rule("one-or-none");
    strict.pattern = Some(r"as strict$".into());
    strict.max_concurrency = Some(1);
    strict.max_concurrency_wait = Duration::ZERO;
    let proxy = TestProxy::start_with(one_backend(db, vec![limit, strict], PoolingMode::Session));

    // Six at once through a limit of two: three rounds of 0.6 s.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let opts = proxy.opts(BENCH_USER, BENCH_PASS);
        tasks.push(tokio::spawn(async move {
            let mut c = mysql_async::Conn::new(opts).await.unwrap();
            let v: Option<i64> = c.query_first("SELECT SLEEP(0.6)").await.unwrap();
            c.disconnect().await.unwrap();
            v
        }));
    }
    let mut peak = 0;
    while tasks.iter().any(|t| !t.is_finished()) {
        let running = db.root_query(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(0.6)'",
        );
        let running: usize = running.trim().parse().unwrap();
        assert!(running <= 2, "{running} ran at once through a limit of 2");
        peak = peak.max(running);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), Some(0));
    }
    assert_eq!(peak, 2, "the limit was used");
    assert!(
        started.elapsed() >= Duration::from_millis(1700),
        "{:?}",
        started.elapsed()
    );

    // With no wait, the second one at once is refused and the first runs.
    let mut a = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut b = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let first = tokio::spawn(async move {
        let v: Option<i64> = a.query_first("SELECT SLEEP(0.7) AS strict").await.unwrap();
        a.disconnect().await.unwrap();
        v
    });
    common::wait_until("the first holds its turn", || {
        db.root_query(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(0.7) AS%'",
        )
        .trim()
            == "1"
    });
    let e = b
        .query_drop("SELECT SLEEP(0.7) AS strict")
        .await
        .expect_err("no turn, no wait");
    assert_eq!(code(&e), 1040, "{e}");
    assert_eq!(first.await.unwrap(), Some(0));
    // Turns come back: it runs now.
    let v: Option<i64> = b.query_first("SELECT SLEEP(0.7) AS strict").await.unwrap();
    assert_eq!(v, Some(0));
    b.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_for_another_user_or_network_never_match() {
    let db = &shared_pair()[0];
    let mut only_other = rule("other-user");
    only_other.user = Some("nobody-here".into());
    only_other.error = Some("no".into());
    let mut other_net = rule("other-net");
    other_net.client = Some("10.0.0.0/8".parse().unwrap());
    other_net.error = Some("no".into());
    let proxy = TestProxy::start_with(one_backend(
        db,
        vec![only_other, other_net],
        PoolingMode::Session,
    ));
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let v: Option<i64> = conn.query_first("SELECT 41 + 1").await.unwrap();
    assert_eq!(v, Some(42));
    conn.disconnect().await.unwrap();
    for name in ["other-user", "other-net"] {
        assert_eq!(
            proxy.series(&format!(
                "mysql_lb_query_rule_hits_total{{action=\"error\",rule=\"{name}\"}}"
            )),
            None,
            "{name} never matched"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_rule_follows_use_and_a_text_copied_from_queries_matches() {
    let db = &shared_pair()[0];
    db.root_exec("CREATE TABLE IF NOT EXISTS test.`status` (x INT)");
    let mut in_test = rule("in-test");
    in_test.schema = Some("test".into());
    in_test.pattern = Some(r"^select \? from dual$".into());
    in_test.error = Some("not in test".into());
    let mut copied = rule("copied");
    copied.error = Some("copied from /queries".into());
    let proxy = TestProxy::start_with(one_backend(db, vec![in_test], PoolingMode::Session));
    // Logged in without a schema, then USE test, alone and in one packet with the statement.
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let v: Option<i64> = conn.query_first("SELECT 1 FROM dual").await.unwrap();
    assert_eq!(v, Some(1), "outside test the rule does not apply");
    // The whole packet is refused: the SIGNAL takes its place, USE included.
    let e = match conn.query_iter("USE test; SELECT 1 FROM dual").await {
        Ok(r) => r.drop_result().await.expect_err("refused in test"),
        Err(e) => e,
    };
    assert_eq!(code(&e), 1148, "{e}");
    // From then on the proxy cannot tell the schema: the rule on test applies.
    let e = conn
        .query_drop("SELECT 2 FROM dual")
        .await
        .expect_err("schema unknown");
    assert_eq!(code(&e), 1148, "{e}");
    conn.disconnect().await.unwrap();
    drop(proxy);

    // A digest text as /queries prints it (backticks kept on a keyword name) blocks it.
    let digests = TestProxy::start_with(one_backend(db, vec![], PoolingMode::Session));
    let mut c = mysql_async::Conn::new(digests.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let _: Vec<i64> = c
        .query("SELECT x FROM test.`status` WHERE x = 1")
        .await
        .unwrap();
    c.disconnect().await.unwrap();
    let (_, body) = digests.admin_get("/queries?limit=1000");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let text = json["queries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["text"].as_str())
        .find(|t| t.contains("status"))
        .expect("the digest's text")
        .to_owned();
    copied.digest_text = Some(text.clone());
    let proxy = TestProxy::start_with(one_backend(db, vec![copied], PoolingMode::Session));
    let mut c = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let e = c
        .query_drop("select x from test.status where x = 7")
        .await
        .expect_err(&format!("matched by {text}"));
    assert_eq!(code(&e), 1148, "{e}");
    c.disconnect().await.unwrap();
}

/// sysbench `oltp_point_select` (text protocol) through a proxy at `port`: its report.
fn sysbench(port: u16, action: &str) -> std::process::Output {
    std::process::Command::new(common::sysbench::binary())
        .arg("oltp_point_select")
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            &format!("--mysql-port={port}"),
            &format!("--mysql-user={BENCH_USER}"),
            &format!("--mysql-password={BENCH_PASS}"),
            "--mysql-db=sbtest_rules",
            "--tables=1",
            "--table-size=1000",
            "--threads=8",
            "--time=4",
            "--db-ps-mode=disable",
            "--mysql-ignore-errors=none",
            action,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sysbench")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_under_sysbench_runs_every_statement_and_gives_every_turn_back() {
    let db = &shared_pair()[1];
    db.root_exec(
        "CREATE DATABASE IF NOT EXISTS sbtest_rules; GRANT ALL ON sbtest_rules.* TO 'bench'@'%'",
    );
    let mut limit = rule("point-selects");
    limit.pattern = Some(r"^select c from sbtest1 where id".into());
    limit.max_concurrency = Some(2);
    limit.max_concurrency_wait = Duration::from_secs(5);
    let proxy = TestProxy::start_with(one_backend(db, vec![limit], PoolingMode::Session));
    let port = proxy.addr.port();
    let _ = sysbench(port, "cleanup");
    let prepared = sysbench(port, "prepare");
    assert!(
        prepared.status.success(),
        "{}",
        String::from_utf8_lossy(&prepared.stderr)
    );
    let run = sysbench(port, "run");
    let report = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "sysbench failed: {report}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let queries = common::sysbench::field(&report, "read:");
    let errors = common::sysbench::field(&report, "ignored errors:");
    assert_eq!(errors, 0.0, "{report}");
    assert!(queries >= 200.0, "{report}");
    let limited = proxy
        .series("mysql_lb_query_rule_hits_total{action=\"limited\",rule=\"point-selects\"}")
        .unwrap_or(0.0);
    let over = proxy
        .series("mysql_lb_query_rule_hits_total{action=\"over_limit\",rule=\"point-selects\"}")
        .unwrap_or(0.0);
    eprintln!(
        "sysbench: {queries} point selects, {limited} ran with a turn, {over} over the limit"
    );
    assert!(
        limited >= queries,
        "every point select ran with a turn: {limited} < {queries}"
    );
    assert_eq!(over, 0.0, "none waited past max_concurrency_wait");
    // Every turn came back: with the sessions gone, both are free.
    let turns = proxy.state.rules.load_full();
    let sem = turns.rules()[0].turns.as_ref().expect("turns");
    common::wait_until("both turns back", || sem.available_permits() == 2);
    let _ = sysbench(port, "cleanup");
}
