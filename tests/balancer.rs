//! Built-in balancing policies against real MariaDB servers: weights, least connections, random,
//! down backends skipped; and the SIGHUP wiring of the script reload (here, not in tests/lua.rs,
//! because a SIGHUP reaches every proxy of the test process and would disturb the script tests).

mod common;

use std::time::{Duration, Instant};

use common::mariadb::{closed_port, shared_pair};
use common::proxy::{config, TestProxy};
use mysql_lb::config::{Config, Policy};

fn pair_config(policy: Policy) -> Config {
    let pair = shared_pair();
    let mut c = config(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    c.balancer.policy = policy;
    c
}

#[tokio::test]
async fn weights_three_to_one_split_forty_connections() {
    let pair = shared_pair();
    let mut c = pair_config(Policy::RoundRobin);
    c.backends[0].weight = 3;
    let proxy = TestProxy::start_with(c);
    let per_port = proxy.spread(40).await;
    let heavy = per_port.get(&pair[0].port).copied().unwrap_or(0);
    let light = per_port.get(&pair[1].port).copied().unwrap_or(0);
    assert!((28..=32).contains(&heavy), "{per_port:?}");
    assert!((8..=12).contains(&light), "{per_port:?}");
}

#[tokio::test]
async fn random_policy_spreads_by_weight() {
    let pair = shared_pair();
    let mut c = pair_config(Policy::Random);
    c.backends[0].weight = 3;
    let proxy = TestProxy::start_with(c);
    let per_port = proxy.spread(40).await;
    let heavy = per_port.get(&pair[0].port).copied().unwrap_or(0);
    // Binomial(40, 3/4): mean 30, sd 2.7; these bounds fail about once in a million runs.
    assert!((18..=39).contains(&heavy), "{per_port:?}");
}

#[tokio::test]
async fn least_connections_balances_long_held_connections() {
    let pair = shared_pair();
    let proxy = TestProxy::start_with(pair_config(Policy::LeastConnections));
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(proxy.connect().await);
    }
    let on = |held: &Vec<(mysql_async::Conn, u16)>, port| {
        held.iter().filter(|(_, p)| *p == port).count()
    };
    assert_eq!(on(&held, pair[0].port), 2);
    assert_eq!(on(&held, pair[1].port), 2);
    // Two sessions on the first server end: it is now the least loaded, twice over. (Round
    // robin would alternate.)
    let (first, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|(_, p)| *p == pair[0].port);
    for (conn, _) in first {
        conn.disconnect().await.unwrap();
    }
    let mut held = rest;
    wait_until("the proxy sees the sessions end", || {
        proxy.state.backends().backends()[0].active() == 0
    })
    .await;
    for _ in 0..2 {
        let (conn, port) = proxy.connect().await;
        assert_eq!(port, pair[0].port, "least loaded server");
        held.push((conn, port));
    }
    assert_eq!(on(&held, pair[0].port), 2);
    assert_eq!(on(&held, pair[1].port), 2);
    for (conn, _) in held {
        conn.disconnect().await.unwrap();
    }
}

#[tokio::test]
async fn every_policy_skips_a_down_backend() {
    let pair = shared_pair();
    for policy in [Policy::RoundRobin, Policy::LeastConnections, Policy::Random] {
        let dead = closed_port();
        let mut c = config(&[pair[0].tcp_addr(), dead.address(), pair[1].tcp_addr()]);
        c.balancer.policy = policy;
        let proxy = TestProxy::start_with(c);
        // Enough clients that Random leaving a live backend out is out of the question
        // (2 × 2^-24), not a 1-in-128 flake as with 8.
        let per_port = proxy.spread(24).await;
        let served: usize = per_port.values().sum();
        assert_eq!(served, 24, "{policy:?}: every client served: {per_port:?}");
        assert_eq!(per_port.len(), 2, "{policy:?}: {per_port:?}");
        let set = proxy.state.backends();
        let dead = &set.backends()[1];
        assert!(
            dead.stats.connect_errors.get() <= 1,
            "{policy:?}: tried once, then skipped"
        );
    }
}

#[tokio::test]
async fn sighup_reloads_the_lua_script() {
    use tokio::signal::unix::{signal, SignalKind};
    // Registering here too means a SIGHUP can never take the test process down, even when sent
    // before the proxy's own listener is installed.
    let _hangup = signal(SignalKind::hangup()).expect("SIGHUP listener");
    let pair = shared_pair();
    let script = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
    let pin =
        |n: usize| format!("function connect_server() proxy.connection.backend_ndx = {n} end");
    std::fs::write(script.path(), pin(1)).unwrap();
    let mut c = pair_config(Policy::RoundRobin);
    c.balancer.script = Some(script.path().to_owned());
    let proxy = TestProxy::start_with(c);
    assert_eq!(proxy.spread(2).await.get(&pair[0].port), Some(&2));

    std::fs::write(script.path(), pin(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Resent until seen: the proxy's listener may not be installed yet.
        // SAFETY: kill(2) on our own pid with a signal this process handles.
        assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGHUP) }, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (conn, port) = proxy.connect().await;
        conn.disconnect().await.unwrap();
        if port == pair[1].port {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the script"
        );
    }
    assert_eq!(proxy.spread(3).await.get(&pair[1].port), Some(&3));
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `least_latency` against two real servers: sessions whose commands on one backend take 40 ms
/// (`SELECT SLEEP(0.04)`) make it lose every comparison once the next tick has folded them in,
/// while the other answers `SELECT 1` at once; held sessions on the fast one do not tip it back.
#[tokio::test]
async fn least_latency_sends_new_sessions_away_from_a_slow_backend() {
    use mysql_async::prelude::*;
    let pair = shared_pair();
    let proxy = TestProxy::start_with(pair_config(Policy::LeastLatency));
    // One session on each backend (retry until both are held). The connects themselves may
    // leave one backend looking faster on a loaded machine (one slow command sets its average,
    // which then decays over seconds); the extra sessions stay open meanwhile, so its growing
    // session count sends a later connect to the other one (the score is the average times
    // the sessions plus one: a backend 100 times slower is tried by the 100th), and are closed
    // before the measured part.
    let mut by_port = std::collections::HashMap::new();
    let mut extra = Vec::new();
    for _ in 0..150 {
        let (conn, port) = proxy.connect().await;
        match by_port.entry(port) {
            std::collections::hash_map::Entry::Occupied(_) => extra.push(conn),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(conn);
            }
        }
        if by_port.len() == 2 {
            break;
        }
    }
    assert_eq!(by_port.len(), 2, "both backends reached");
    for conn in extra {
        conn.disconnect().await.expect("disconnect");
    }
    let (slow_port, fast_port) = (pair[0].port, pair[1].port);
    for _ in 0..5 {
        let slow = by_port.get_mut(&slow_port).expect("slow session");
        let _: Vec<i64> = slow.query("SELECT SLEEP(0.04)").await.expect("sleep");
        let fast = by_port.get_mut(&fast_port).expect("fast session");
        let _: Vec<i64> = fast.query("SELECT 1").await.expect("select 1");
    }
    // The averages are folded in once a second.
    tokio::time::sleep(mysql_lb::backends::balancer::latency::TICK * 2).await;
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(proxy.connect().await);
    }
    let on_fast = held.iter().filter(|(_, p)| *p == fast_port).count();
    assert_eq!(on_fast, 10, "every new session went to the fast backend");
    let json = proxy.admin_get("/backends").1;
    assert!(json.contains("recent_latency_seconds"), "{json}");
}
