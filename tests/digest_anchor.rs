//! The digest table against its anchor, the servers' own Performance Schema: a workload of text
//! statements run through mysql-lb onto two MariaDB servers started with
//! `performance_schema=ON` gives, digest group by digest group, the same counts as their
//! `events_statements_summary_by_digest` added up over both servers.
//!
//! Each family of statements (the same statement with other literals, other spacing, case or
//! comments) runs a different number of times, so the multiset of counts per group tells whether
//! two families were grouped together, or one family split, on either side.

mod common;

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{with_digests, TestProxy};
use mysql_async::prelude::*;

const SCHEMA: &str = "digest_ps";

/// The i-th statement of a family.
type Family = Box<dyn Fn(usize) -> String>;

/// Statement families: each closure gives the i-th variant of one digest group, with the number
/// of times it runs. Families that must share a group with another say so by construction (the
/// same statement in other case, spacing, quoting or comments): their counts add up on both
/// sides. No column is named `id`: MariaDB's digest keeps a bare `id` as a keyword token (`ID`)
/// but a backticked one as a name, so the two group apart there and together here (a documented
/// difference, see docs/src/digest-normalization.md).
fn workload() -> Vec<(usize, Family)> {
    vec![
        (7, Box::new(|i| format!("SELECT v FROM t WHERE pk = {i}"))),
        // The same group as the first: keywords in lower case, other spacing, a comment.
        (
            2,
            Box::new(|i| format!("select v   from t where pk={i} -- note {i}")),
        ),
        (
            3,
            Box::new(|i| format!("SELECT v FROM t WHERE pk = {i} /* from app {i} */")),
        ),
        (
            5,
            Box::new(|i| format!("UPDATE t SET n = n + {i} WHERE pk = {}", i % 3 + 1)),
        ),
        (
            11,
            Box::new(|i| format!("INSERT INTO t2 (a, b) VALUES ({i}, 'x{i}')")),
        ),
        (
            13,
            Box::new(|i| format!("SELECT COUNT(*) FROM t WHERE v = 'v{i}' AND n > {i}")),
        ),
        (
            17,
            Box::new(|i| {
                format!(
                    "SELECT a, b FROM t2 WHERE a BETWEEN {i} AND {} ORDER BY a",
                    i + 5
                )
            }),
        ),
        (
            19,
            Box::new(|i| format!("SELECT v FROM t WHERE n = -{i}.5e3 OR v = 0x{i:x} OR v = NULL")),
        ),
        (
            23,
            Box::new(|i| format!("DELETE FROM t2 WHERE a = {}", 100_000 + i)),
        ),
        // Backticks are not part of a name: the first group again.
        (
            29,
            Box::new(|i| format!("SELECT `v` FROM `t` WHERE `pk` = {i}")),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_counts_match_performance_schema_group_by_group() {
    let servers = std::thread::scope(|s| {
        let start = |name: &'static str| {
            s.spawn(move || MariaDb::start_with_args(name, &["--performance-schema=ON"]))
        };
        let (a, b) = (start("ps-a"), start("ps-b"));
        [a.join().unwrap(), b.join().unwrap()]
    });
    for db in &servers {
        db.root_exec(&format!(
            "CREATE DATABASE {SCHEMA}; \
             CREATE TABLE {SCHEMA}.t (pk INT PRIMARY KEY, v VARCHAR(10), n INT); \
             INSERT INTO {SCHEMA}.t VALUES (1, 'a', 0), (2, 'b', 0), (3, 'c', 0); \
             CREATE TABLE {SCHEMA}.t2 (a INT, b VARCHAR(20)); \
             TRUNCATE performance_schema.events_statements_summary_by_digest"
        ));
    }
    let proxy = TestProxy::start_with(with_digests(&[
        servers[0].tcp_addr(),
        servers[1].tcp_addr(),
    ]));
    // Several sessions, so both servers serve each family.
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut c = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
            .await
            .unwrap();
        c.query_drop(format!("USE {SCHEMA}")).await.unwrap();
        conns.push(c);
    }
    let mut n = 0;
    for (times, make) in workload() {
        for i in 0..times {
            let k = n % conns.len();
            conns[k].query_drop(make(i)).await.unwrap();
            n += 1;
        }
    }
    for c in conns {
        c.disconnect().await.unwrap();
    }

    let (status, body) =
        proxy.admin_get(&format!("/queries?schema={SCHEMA}&kind=query&limit=1000"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    // Our groups, over both backends.
    let mut ours = std::collections::BTreeMap::<String, (u64, String)>::new();
    for r in v["queries"].as_array().unwrap() {
        let e = ours
            .entry(r["digest"].as_str().unwrap().to_string())
            .or_insert((0, r["text"].as_str().unwrap().to_string()));
        e.0 += r["count"].as_u64().unwrap();
    }
    // The servers' groups, added up over both.
    let mut theirs = std::collections::BTreeMap::<String, (u64, String)>::new();
    for db in &servers {
        let out = db.root_query(&format!(
            "SELECT DIGEST, COUNT_STAR, DIGEST_TEXT FROM performance_schema.events_statements_summary_by_digest \
             WHERE SCHEMA_NAME = '{SCHEMA}'"
        ));
        for line in out.lines().filter(|l| !l.is_empty()) {
            let mut f = line.splitn(3, '\t');
            let (d, c, t) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap_or(""));
            let e = theirs.entry(d.to_string()).or_insert((0, t.to_string()));
            e.0 += c.parse::<u64>().unwrap();
        }
    }
    let counts = |m: &std::collections::BTreeMap<String, (u64, String)>| {
        let mut c: Vec<u64> = m.values().map(|v| v.0).collect();
        c.sort_unstable();
        c
    };
    let show = |m: &std::collections::BTreeMap<String, (u64, String)>| {
        m.values()
            .map(|(c, t)| format!("{c:>4}  {t}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        counts(&ours),
        counts(&theirs),
        "digest groups differ\nmysql-lb:\n{}\nperformance_schema:\n{}",
        show(&ours),
        show(&theirs)
    );
    // The families that share a group did share it: 7 + 2 + 3 + 29.
    assert!(counts(&ours).contains(&41), "{}", show(&ours));
}
