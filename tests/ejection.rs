//! Outlier ejection against real MariaDB backends, one of them behind a fault gate: logins that
//! are never answered and sessions cut mid-command eject it, new clients go to the other one
//! meanwhile, a trial after the backoff brings it back (or, failing, ejects it for twice as
//! long), an idle session closed by the backend counts for nothing, and never more than
//! `max_share` of the pool is ejected.

mod common;

use std::time::Duration;

use common::faultgate::FaultGate;
use common::mariadb::{shared_pair, tcp_opts, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;
use mysql_lb::config::{Config, EjectionConfig};

/// A proxy over `backends` that ejects after `failures` failed sessions, for 1 s at first.
fn ejecting(backends: &[String], failures: u32) -> Config {
    let mut cfg = config(backends);
    cfg.handshake_timeout = Duration::from_millis(300);
    cfg.balancer.ejection = EjectionConfig {
        failures,
        window: Duration::from_secs(60),
        backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(4),
        max_share: 0.5,
    };
    cfg
}

/// The `ejection` object of backend `name` in `/backends`.
fn ejection(proxy: &TestProxy, name: &str) -> serde_json::Value {
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["backends"]
        .as_array()
        .and_then(|l| l.iter().find(|b| b["name"] == name))
        .map(|b| b["ejection"].clone())
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

fn metric(proxy: &TestProxy, line_start: &str) -> f64 {
    let (_, text) = proxy.admin_get("/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in /metrics"))
}

/// Tries one login through the proxy: the backend port it landed on, or the error.
async fn try_login(proxy: &TestProxy) -> Result<u16, String> {
    let opts = tcp_opts(&proxy.addr_string(), BENCH_USER, BENCH_PASS);
    let attempt = async {
        let mut conn = mysql_async::Conn::new(opts)
            .await
            .map_err(|e| e.to_string())?;
        let port: u16 = conn
            .query_first("SELECT @@port")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no row")?;
        conn.disconnect().await.map_err(|e| e.to_string())?;
        Ok(port)
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .unwrap_or_else(|_| Err("login timed out".into()))
}

fn names(a: &MariaDb, gate: &FaultGate) -> Vec<String> {
    vec![a.tcp_addr(), gate.addr_string()]
}

/// Polls `/backends` (bounded) until `name`'s ejection standing is `want`.
fn wait_for_standing(proxy: &TestProxy, name: &str, want: &str) {
    common::wait_until(&format!("{name} to be {want}"), || {
        ejection(proxy, name)["standing"] == want
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_logins_eject_a_backend_and_a_trial_brings_it_back() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let gate = FaultGate::start(&b.tcp_addr());
    gate.mute();
    let proxy = TestProxy::start_with(ejecting(&names(a, &gate), 3));
    let gated = gate.addr_string();

    let mut failed = 0;
    let mut on_a = 0;
    for _ in 0..12 {
        match try_login(&proxy).await {
            Ok(port) => {
                assert_eq!(port, a.port, "only A can serve");
                on_a += 1;
            }
            Err(_) => failed += 1,
        }
    }
    assert_eq!(
        failed, 3,
        "exactly `failures` clients fail before the ejection"
    );
    assert_eq!(on_a, 9);
    let e = ejection(&proxy, &gated);
    assert_eq!(e["standing"], "ejected", "{e}");
    assert_eq!(e["ejections"], 1, "{e}");
    assert_eq!(
        metric(
            &proxy,
            &format!("mysql_lb_backend_ejections_total{{backend=\"{gated}\"}}")
        ),
        1.0
    );
    assert_eq!(
        metric(
            &proxy,
            &format!(
                "mysql_lb_backend_session_failures_total{{backend=\"{gated}\",kind=\"handshake\"}}"
            )
        ),
        3.0
    );

    // The backend recovers; after the backoff the next client is its trial and succeeds.
    gate.pass();
    wait_for_standing(&proxy, &gated, "trial_due");
    assert_eq!(try_login(&proxy).await, Ok(b.port), "the trial goes to B");
    let e = ejection(&proxy, &gated);
    assert_eq!(e["standing"], "in", "{e}");
    assert_eq!(
        metric(
            &proxy,
            &format!("mysql_lb_backend_ejected{{backend=\"{gated}\"}}")
        ),
        0.0
    );
    let mut on_b = 0;
    for _ in 0..6 {
        if try_login(&proxy).await == Ok(b.port) {
            on_b += 1;
        }
    }
    assert_eq!(on_b, 3, "round robin again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_trial_ejects_again_for_twice_as_long() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let gate = FaultGate::start(&b.tcp_addr());
    gate.mute();
    let proxy = TestProxy::start_with(ejecting(&names(a, &gate), 2));
    let gated = gate.addr_string();
    for _ in 0..4 {
        let _ = try_login(&proxy).await;
    }
    assert_eq!(ejection(&proxy, &gated)["ejections"], 1);

    wait_for_standing(&proxy, &gated, "trial_due");
    // The trial still meets a mute backend: that client fails, and the backend is out again.
    assert!(try_login(&proxy).await.is_err(), "the trial fails");
    let e = ejection(&proxy, &gated);
    assert_eq!(e["standing"], "ejected", "{e}");
    assert_eq!(e["ejections"], 2, "{e}");
    assert_eq!(e["in_a_row"], 2, "{e}");
    let left = e["remaining_seconds"].as_f64().expect("remaining");
    assert!(left > 1.0 && left <= 2.0, "the second backoff is 2 s: {e}");
    // Meanwhile every client is served by A.
    for _ in 0..4 {
        assert_eq!(try_login(&proxy).await, Ok(a.port));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_cut_mid_command_eject_but_idle_ones_do_not_count() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let gate = FaultGate::start(&b.tcp_addr());
    let proxy = TestProxy::start_with(ejecting(&names(a, &gate), 3));
    let gated = gate.addr_string();

    // Three idle sessions on B closed under them: nothing was in flight, nothing counts.
    let idle = sessions_on(&proxy, b.port, 3).await;
    gate.sever();
    drop(idle);
    let failures = format!(
        "mysql_lb_backend_session_failures_total{{backend=\"{gated}\",kind=\"mid_command\"}}"
    );
    assert_eq!(metric(&proxy, &failures), 0.0);

    // Three sessions on B each in a long query when the connection is cut.
    let busy = sessions_on(&proxy, b.port, 3).await;
    let queries: Vec<_> = busy
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                c.query_drop("SELECT SLEEP(20), 'ejection-cut'")
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    common::wait_until("three sleeps on B", || {
        b.root_query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(20), %ejection-cut%'")
            .trim()
            == "3"
    });
    gate.sever();
    for q in queries {
        let r = q.await.expect("query task");
        assert!(r.is_err(), "a cut query fails");
    }
    common::wait_until("three mid-command failures", || {
        metric(&proxy, &failures) == 3.0
    });
    assert_eq!(ejection(&proxy, &gated)["standing"], "ejected");
    for _ in 0..4 {
        assert_eq!(try_login(&proxy).await, Ok(a.port), "B is out");
    }
}

/// Opens `n` sessions through the proxy that landed on backend port `port` (others are closed).
async fn sessions_on(proxy: &TestProxy, port: u16, n: usize) -> Vec<mysql_async::Conn> {
    let mut held = Vec::new();
    for _ in 0..4 * n {
        let (conn, p) = proxy.connect().await;
        if p == port {
            held.push(conn);
            if held.len() == n {
                return held;
            }
        } else {
            conn.disconnect().await.expect("disconnect");
        }
    }
    panic!("round robin did not give {n} sessions on port {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_max_share_of_a_pool_is_ejected() {
    let pair = shared_pair();
    let gates = [
        FaultGate::start(&pair[0].tcp_addr()),
        FaultGate::start(&pair[1].tcp_addr()),
    ];
    for g in &gates {
        g.mute();
    }
    let names: Vec<String> = gates.iter().map(FaultGate::addr_string).collect();
    let proxy = TestProxy::start_with(ejecting(&names, 2));
    for _ in 0..10 {
        assert!(try_login(&proxy).await.is_err(), "both backends are mute");
    }
    let standings: Vec<String> = names
        .iter()
        .map(|n| {
            ejection(&proxy, n)["standing"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    let out = standings.iter().filter(|s| *s != "in").count();
    assert_eq!(out, 1, "0.5 of a pool of 2 is one backend: {standings:?}");
}
