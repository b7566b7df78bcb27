//! New connections per second through mysql-lb with and without the Lua connect hook.
//!
//! 64 client tasks each loop connect → login → COM_QUIT against one proxy in front of two real
//! MariaDB servers, for a few seconds per round; rounds alternate between a proxy with no script
//! (built-in round robin) and one running `config/scripts/least-connected.lua` (MySQL Proxy's
//! default algorithm), so drift on a shared machine hits both alike. The issue asks the hook to
//! keep at least 80 % of the no-hook rate. A second table gives the hook's own cost per call
//! (`candidates_for` with the script against the policy alone), on one thread and on several.
//!
//! `cargo bench --bench connect_hook` measures; under `cargo test` (no `--bench` argument) it
//! runs one short round of each as a smoke test.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use mysql_lb::backends::balancer::{BackendSet, ClientInfo};
use mysql_lb::config::{BalancerConfig, Config};
use mysql_lb::telemetry::metrics::Metrics;

const CLIENTS: usize = 64;

struct Plan {
    rounds: usize,
    round: Duration,
    clients: usize,
    calls: u32,
}

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    let plan = if measuring {
        Plan {
            rounds: 5,
            round: Duration::from_secs(4),
            clients: CLIENTS,
            calls: 200_000,
        }
    } else {
        Plan {
            rounds: 1,
            round: Duration::from_millis(300),
            clients: 8,
            calls: 1_000,
        }
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/scripts/least-connected.lua");
    let pair = shared_pair();
    let addrs: Vec<String> = pair.iter().map(|db| db.tcp_addr()).collect();
    let plain = TestProxy::start_with(config(&addrs));
    let mut hooked_config = config(&addrs);
    hooked_config.balancer.script = Some(script.clone());
    let hooked = TestProxy::start_with(hooked_config);

    // The clients get their own runtime and threads, apart from the proxies'.
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    clients.block_on(async {
        // Warm-up: server thread caches, the proxies' first connects.
        storm(&plain, plan.clients, plan.round / 2).await;
        storm(&hooked, plan.clients, plan.round / 2).await;
    });
    println!(
        "connect_hook: {} concurrent clients, connect + login + COM_QUIT through mysql-lb \
         (2 MariaDB backends, {} s rounds, alternating)",
        plan.clients,
        plan.round.as_secs_f64()
    );
    println!(
        "{:>6} {:>18} {:>24} {:>7}",
        "round", "no hook conn/s", "least-connected.lua conn/s", "ratio"
    );
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for round in 1..=plan.rounds {
        let a = clients.block_on(storm(&plain, plan.clients, plan.round));
        let b = clients.block_on(storm(&hooked, plan.clients, plan.round));
        println!("{round:>6} {a:>18.0} {b:>26.0} {:>7.3}", b / a);
        without.push(a);
        with.push(b);
    }
    let (a, b) = (median(&mut without), median(&mut with));
    println!("{:>6} {a:>18.0} {b:>26.0} {:>7.3}", "median", b / a);
    assert!(
        hooked.state.backends().script().is_some(),
        "the hooked proxy has its script"
    );
    let errors: u64 = mysql_lb::backends::balancer::script::ErrorReason::ALL
        .iter()
        .map(|&r| hooked.state.backends().script_errors(r))
        .sum();
    assert_eq!(errors, 0, "the script ran without failures");
    drop((plain, hooked));

    per_call_cost(&addrs, &script, plan.calls);
}

/// Connects per second over `duration` with `clients` tasks looping connect/login/quit.
async fn storm(proxy: &TestProxy, clients: usize, duration: Duration) -> f64 {
    let addr = proxy.addr_string();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (addr, done, stop) = (addr.clone(), Arc::clone(&done), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Relaxed) {
                    let client = RawClient::connect_tcp(&addr, BENCH_USER, BENCH_PASS, None, 0, 0)
                        .await
                        .unwrap_or_else(|e| panic!("connect through the proxy: {e}"));
                    client.quit().await.expect("COM_QUIT");
                    done.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Relaxed);
    let counted = done.load(Relaxed);
    let elapsed = started.elapsed();
    for t in tasks {
        t.await.expect("client task");
    }
    counted as f64 / elapsed.as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The balancer call alone: nanoseconds per `candidates_for` on 1 and on N threads at once
/// (wall time per call on each thread).
fn per_call_cost(addrs: &[String], script: &Path, calls: u32) {
    let configs = config(addrs).backends;
    let metrics = Metrics::new();
    let plain = BackendSet::new(&configs, Duration::from_secs(5), false, &metrics);
    let hooked = BackendSet::new(&configs, Duration::from_secs(5), false, &Metrics::new())
        .with_balancer(&BalancerConfig {
            script: Some(script.to_owned()),
            ..Config::default().balancer
        });
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!("\nper call (ns), {calls} calls per thread:");
    println!(
        "{:>8} {:>22} {:>30}",
        "threads", "policy alone", "with least-connected.lua"
    );
    for n in [1, threads] {
        let a = ns_per_call(&plain, n, calls);
        let b = ns_per_call(&hooked, n, calls);
        println!("{n:>8} {a:>22.0} {b:>30.0}");
    }
}

/// The fastest of five batches: on a shared machine, preemption only ever adds time.
fn ns_per_call(set: &BackendSet, threads: usize, calls: u32) -> f64 {
    (0..5)
        .map(|_| batch_ns_per_call(set, threads, calls / 5))
        .fold(f64::INFINITY, f64::min)
}

fn batch_ns_per_call(set: &BackendSet, threads: usize, calls: u32) -> f64 {
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let addr = format!("10.0.0.{t}:40000");
                let client = ClientInfo::at(&addr);
                for _ in 0..calls {
                    let order = set.candidates_for(Instant::now(), &client, None);
                    std::hint::black_box(order);
                }
            });
        }
    });
    started.elapsed().as_nanos() as f64 / f64::from(calls.max(1))
}
