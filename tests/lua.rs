//! The Lua connect hook against real MariaDB servers: the shipped example scripts route as they
//! say, a MySQL Proxy 0.8 style script runs unmodified, `disconnect_client()` is called, and every
//! kind of broken script leaves the choice to the built-in policy and is counted.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::mariadb::{closed_port, shared_pair, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use mysql_lb::backends::balancer::script::ErrorReason;
use mysql_lb::config::{BackendKind, Config};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/scripts")
        .join(name)
}

fn script_file(source: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
    std::fs::write(f.path(), source).unwrap();
    f
}

fn with_script(backends: &[String], script: &Path) -> Config {
    let mut c = config(backends);
    c.balancer.script = Some(script.to_owned());
    c
}

fn pair_addrs() -> Vec<String> {
    shared_pair().iter().map(|db| db.tcp_addr()).collect()
}

/// Logs in from `local_ip` (any 127.x.y.z works on Linux loopback) and returns the client's
/// address as the proxy sees it and the backend port.
async fn port_from(proxy: &TestProxy, local_ip: &str) -> (String, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(format!("{local_ip}:0").parse().unwrap())
        .expect("bind a loopback address");
    let stream = socket.connect(proxy.addr).await.expect("connect");
    let local = stream.local_addr().unwrap().to_string();
    let mut client = RawClient::login(Box::new(stream), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .expect("login through the proxy");
    let rows = client.query_text("SELECT @@port").await.expect("query");
    let port = rows[0][0]
        .as_deref()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    client.quit().await.expect("quit");
    (local, port)
}

fn assert_no_script_errors(proxy: &TestProxy) {
    for reason in ErrorReason::ALL {
        assert_eq!(
            proxy.state.backends().script_errors(reason),
            0,
            "{reason:?}"
        );
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn least_connected_example_puts_each_client_on_the_emptiest_backend() {
    let pair = shared_pair();
    let proxy = TestProxy::start_with(with_script(&pair_addrs(), &example("least-connected.lua")));
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(proxy.connect().await);
    }
    let on = |held: &[(mysql_async::Conn, u16)], port| held.iter().filter(|c| c.1 == port).count();
    assert_eq!((on(&held, pair[0].port), on(&held, pair[1].port)), (2, 2));
    // Free the second server: both next clients go there (round robin would alternate).
    let (freed, mut held): (Vec<_>, Vec<_>) = held.into_iter().partition(|c| c.1 == pair[1].port);
    for (conn, _) in freed {
        conn.disconnect().await.unwrap();
    }
    wait_until("the sessions end", || {
        proxy.state.backends().backends()[1].active() == 0
    })
    .await;
    for _ in 0..2 {
        let c = proxy.connect().await;
        assert_eq!(c.1, pair[1].port);
        held.push(c);
    }
    for (conn, _) in held {
        conn.disconnect().await.unwrap();
    }
    assert_no_script_errors(&proxy);
}

#[tokio::test]
async fn pin_subnet_example_pins_its_clients_and_leaves_the_rest_to_the_policy() {
    let pair = shared_pair();
    let shipped = std::fs::read_to_string(example("pin-subnet.lua")).unwrap();
    assert!(shipped.contains("\"10.20.0.0/16\"") && shipped.contains("\"10.0.0.9:3306\""));
    // Only the configuration lines change: clients from 127.0.0.2 go to the second server.
    let source = shipped
        .replace("\"10.20.0.0/16\"", "\"127.0.0.2/32\"")
        .replace("\"10.0.0.9:3306\"", &format!("\"{}\"", pair[1].tcp_addr()));
    let script = script_file(&source);
    let proxy = TestProxy::start_with(with_script(&pair_addrs(), script.path()));
    for _ in 0..6 {
        let (from, port) = port_from(&proxy, "127.0.0.2").await;
        assert!(from.starts_with("127.0.0.2:"), "{from}");
        assert_eq!(port, pair[1].port, "pinned client");
    }
    let mut others = HashMap::<u16, usize>::new();
    for _ in 0..6 {
        *others
            .entry(port_from(&proxy, "127.0.0.1").await.1)
            .or_default() += 1;
    }
    assert_eq!(others.get(&pair[0].port), Some(&3), "{others:?}");
    assert_eq!(others.get(&pair[1].port), Some(&3), "{others:?}");
    assert_no_script_errors(&proxy);
}

#[tokio::test]
async fn prefer_ro_example_uses_read_only_backends_and_falls_back_to_read_write() {
    let pair = shared_pair();
    let mut c = with_script(&pair_addrs(), &example("prefer-ro.lua"));
    c.backends[1].kind = BackendKind::Ro;
    let proxy = TestProxy::start_with(c);
    let mut held = Vec::new();
    for _ in 0..4 {
        let c = proxy.connect().await;
        assert_eq!(c.1, pair[1].port, "the read-only server, however busy");
        held.push(c);
    }
    for (conn, _) in held {
        conn.disconnect().await.unwrap();
    }
    assert_no_script_errors(&proxy);

    // The only read-only backend is down: clients go to the read-write one.
    let dead = closed_port();
    let mut c = with_script(
        &[pair[0].tcp_addr(), dead.address()],
        &example("prefer-ro.lua"),
    );
    c.backends[1].kind = BackendKind::Ro;
    let proxy = TestProxy::start_with(c);
    assert_eq!(proxy.spread(4).await.get(&pair[0].port), Some(&4));
    assert_no_script_errors(&proxy);
}

/// Written the way MySQL Proxy 0.8 scripts were (config table in proxy.global, debug prints,
/// state and type checks): fail over to the first backend that is not down, read-write first.
const MYSQL_PROXY_08_FAILOVER: &str = r#"
if not proxy.global.config.failover then
    proxy.global.config.failover = { is_debug = true }
end

local function is_debug()
    return proxy.global.config.failover.is_debug
end

function connect_server()
    if is_debug() then
        print("[connect_server] " .. proxy.connection.client.src.name)
    end
    for i = 1, #proxy.global.backends do
        local s = proxy.global.backends[i]
        if s.state ~= proxy.BACKEND_STATE_DOWN and s.type == proxy.BACKEND_TYPE_RW then
            if is_debug() then
                print(string.format("  [%d] %s:%d (%d clients)", i, s.dst.address, s.dst.port,
                    s.connected_clients))
            end
            proxy.connection.backend_ndx = i
            return
        end
    end
end

function disconnect_client()
    if is_debug() then
        print("[disconnect_client] " .. proxy.connection.client.src.name)
    end
end
"#;

#[tokio::test]
async fn a_mysql_proxy_08_style_script_runs_unmodified() {
    let pair = shared_pair();
    let script = script_file(MYSQL_PROXY_08_FAILOVER);
    let dead = closed_port();
    let proxy = TestProxy::start_with(with_script(
        &[dead.address(), pair[1].tcp_addr(), pair[0].tcp_addr()],
        script.path(),
    ));
    // The first backend is dead: the first client finds out, then everyone goes to the second.
    assert_eq!(proxy.spread(5).await.get(&pair[1].port), Some(&5));
    assert_no_script_errors(&proxy);
}

#[tokio::test]
async fn disconnect_client_hears_each_client_and_its_backend() {
    let pair = shared_pair();
    let log = tempfile::NamedTempFile::new().unwrap();
    let source = format!(
        r#"
        function disconnect_client()
            local f = assert(io.open({path:?}, "a"))
            f:write(proxy.connection.client.src.name, " ", proxy.connection.backend_ndx, "\n")
            f:close()
        end"#,
        path = log.path().display().to_string()
    );
    let script = script_file(&source);
    let mut c = with_script(&pair_addrs(), script.path());
    c.balancer.script_allow_unsafe = true;
    let proxy = TestProxy::start_with(c);
    let mut expected = Vec::new();
    for _ in 0..4 {
        let (from, port) = port_from(&proxy, "127.0.0.1").await;
        let ndx = if port == pair[0].port { 1 } else { 2 };
        expected.push(format!("{from} {ndx}"));
    }
    let read = || std::fs::read_to_string(log.path()).unwrap_or_default();
    wait_until("four disconnects are logged", || {
        read().lines().count() >= 4
    })
    .await;
    let mut seen: Vec<_> = read().lines().map(str::to_owned).collect();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected);
    assert_no_script_errors(&proxy);
}

/// Starts a proxy in front of the pair with `source`, serves four clients, and returns the
/// proxy and where the clients went. Every client must be served.
async fn four_clients_with(
    source: &str,
    tweak: impl FnOnce(&mut Config),
) -> (TestProxy, HashMap<u16, usize>) {
    let script = script_file(source);
    let mut c = with_script(&pair_addrs(), script.path());
    tweak(&mut c);
    let proxy = TestProxy::start_with(c);
    let per_port = proxy.spread(4).await;
    (proxy, per_port)
}

/// The built-in round robin served: the pair split evenly.
fn assert_round_robin(per_port: &HashMap<u16, usize>) {
    let pair = shared_pair();
    assert_eq!(per_port.get(&pair[0].port), Some(&2), "{per_port:?}");
    assert_eq!(per_port.get(&pair[1].port), Some(&2), "{per_port:?}");
}

#[tokio::test]
async fn a_syntax_error_leaves_the_policy_and_is_counted_once() {
    let (proxy, per_port) = four_clients_with("function connect_server( end", |_| {}).await;
    assert_round_robin(&per_port);
    assert_eq!(proxy.state.backends().script_errors(ErrorReason::Load), 1);
}

#[tokio::test]
async fn a_runtime_error_falls_back_and_is_counted() {
    let (proxy, per_port) = four_clients_with(
        "function connect_server() error('no backend for you') end",
        |_| {},
    )
    .await;
    assert_round_robin(&per_port);
    assert_eq!(
        proxy.state.backends().script_errors(ErrorReason::Runtime),
        4
    );
}

#[tokio::test]
async fn an_out_of_range_index_falls_back_and_is_counted() {
    let (proxy, per_port) = four_clients_with(
        "function connect_server() proxy.connection.backend_ndx = #proxy.global.backends + 1 end",
        |_| {},
    )
    .await;
    assert_round_robin(&per_port);
    assert_eq!(
        proxy
            .state
            .backends()
            .script_errors(ErrorReason::OutOfRange),
        4
    );
}

#[tokio::test]
async fn a_script_past_its_budget_falls_back_and_is_counted() {
    let started = Instant::now();
    let (proxy, per_port) =
        four_clients_with("function connect_server() while true do end end", |c| {
            c.balancer.script_budget = Duration::from_millis(20);
        })
        .await;
    assert_round_robin(&per_port);
    assert_eq!(proxy.state.backends().script_errors(ErrorReason::Budget), 4);
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_down_backend_chosen_falls_back_and_is_counted() {
    let pair = shared_pair();
    let script = script_file("function connect_server() proxy.connection.backend_ndx = 1 end");
    let mut c = with_script(&pair_addrs(), script.path());
    // No checks to bring it back, and a cool-off longer than the test.
    c.health_check.interval = Duration::ZERO;
    c.down_cooloff = Duration::from_secs(600);
    let proxy = TestProxy::start_with(c);
    assert_eq!(
        proxy.spread(2).await.get(&pair[0].port),
        Some(&2),
        "script obeyed"
    );
    let set = proxy.state.backends();
    let first = &set.backends()[0];
    proxy.state.backends().mark_down(first, Instant::now());
    assert_eq!(proxy.spread(4).await.get(&pair[1].port), Some(&4));
    assert_eq!(
        proxy
            .state
            .backends()
            .script_errors(ErrorReason::BackendDown),
        4
    );
}

#[tokio::test]
async fn reload_swaps_the_script_and_a_broken_one_keeps_the_old() {
    let pair = shared_pair();
    let pin =
        |n: usize| format!("function connect_server() proxy.connection.backend_ndx = {n} end");
    let script = script_file(&pin(1));
    let proxy = TestProxy::start_with(with_script(&pair_addrs(), script.path()));
    assert_eq!(proxy.spread(2).await.get(&pair[0].port), Some(&2));
    std::fs::write(script.path(), pin(2)).unwrap();
    proxy.state.backends().reload_script().unwrap();
    assert_eq!(proxy.spread(2).await.get(&pair[1].port), Some(&2));
    std::fs::write(script.path(), "function connect_server( oops").unwrap();
    assert!(proxy.state.backends().reload_script().is_err());
    assert_eq!(proxy.state.backends().script_errors(ErrorReason::Load), 1);
    assert_eq!(
        proxy.spread(2).await.get(&pair[1].port),
        Some(&2),
        "the previous script still routes"
    );
}
