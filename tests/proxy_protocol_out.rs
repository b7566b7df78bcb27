//! The PROXY protocol header to backends, against a real MariaDB started with
//! `--proxy-protocol-networks`: the server sees the client's own address (a second loopback
//! address, 127.0.0.2) in `USER()` and the processlist, over TCP and over its unix socket, with
//! v1 and v2; a grant restricted to that host works through mysql-lb and refuses the same user
//! from another address; a unix-socket client is sent as the proxy's own connection; health
//! checks keep such a backend up, and a header really is sent (a server without the option
//! refuses it); a deferred connect and a reload that turns it on send it too, and so does the
//! connection a deferred connect opens only to learn a greeting (to a hop that requires the
//! header: a second mysql-lb with `accept_proxy_protocol`); without `proxy_protocol` the server
//! sees the proxy's address; `--check-config` shows the setting.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::pp::{login_from, processlist_host, value};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use mysql_lb::backends::client::OwnConnectOptions;
use mysql_lb::backends::health::check_backend_with;
use mysql_lb::config::{
    BackendAddr, Config, ConnectMode, HealthCheckConfig, ListenAddr, ProxyProtocol,
};
use mysql_lb::wire::protocol::proxy_out::Version;
use tokio::net::UnixStream;

/// A host-restricted account: only a client from CLIENT_IP may log in as it.
const HOST_USER: &str = "pp_host";
const HOST_PASS: &str = "pp_pw";
const CLIENT_IP: &str = "127.0.0.2";

/// The server every test here shares: it accepts headers from loopback and its unix socket.
fn accepting() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| {
        let db = MariaDb::start_with_args(
            "pp-out",
            &["--proxy-protocol-networks=127.0.0.0/8,::1/128,localhost"],
        );
        db.root_exec(&format!(
            "CREATE USER '{HOST_USER}'@'{CLIENT_IP}' IDENTIFIED VIA mysql_native_password \
             USING PASSWORD('{HOST_PASS}'); GRANT SELECT ON test.* TO '{HOST_USER}'@'{CLIENT_IP}'"
        ));
        db
    })
}

/// A server without `proxy_protocol_networks`, which refuses any header.
fn refusing() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| MariaDb::start("pp-out-plain"))
}

fn proxy_to(backend: String, version: ProxyProtocol) -> TestProxy {
    let mut cfg = config(&[backend]);
    cfg.proxy_protocol = version;
    TestProxy::start_with(cfg)
}

async fn sees_the_client_address(version: ProxyProtocol, backend: String) {
    let proxy = proxy_to(backend, version);
    let (mut client, local) = login_from(CLIENT_IP, proxy.addr, BENCH_USER, BENCH_PASS)
        .await
        .expect("login through the proxy");
    assert_eq!(
        value(&mut client, "SELECT USER()").await,
        format!("{BENCH_USER}@{CLIENT_IP}")
    );
    assert_eq!(
        processlist_host(&mut client).await,
        local.to_string(),
        "the processlist shows the client's address and port"
    );
    client.quit().await.expect("quit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_backend_sees_the_client_address_in_user_and_processlist() {
    sees_the_client_address(ProxyProtocol::V2, accepting().tcp_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_backend_sees_the_client_address_in_user_and_processlist() {
    sees_the_client_address(ProxyProtocol::V1, accepting().tcp_addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_backend_sees_the_client_address_with_v2_and_v1() {
    let socket = accepting().socket.display().to_string();
    sees_the_client_address(ProxyProtocol::V2, socket.clone()).await;
    sees_the_client_address(ProxyProtocol::V1, socket).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restricted_grant_admits_its_host_through_the_proxy_and_refuses_others() {
    for version in [ProxyProtocol::V2, ProxyProtocol::V1] {
        let proxy = proxy_to(accepting().tcp_addr(), version);
        let (mut client, _) = login_from(CLIENT_IP, proxy.addr, HOST_USER, HOST_PASS)
            .await
            .unwrap_or_else(|e| panic!("{version}: {HOST_USER}@{CLIENT_IP} logs in: {e}"));
        assert_eq!(
            value(&mut client, "SELECT CURRENT_USER()").await,
            format!("{HOST_USER}@{CLIENT_IP}")
        );
        client.quit().await.expect("quit");

        let refused = login_from("127.0.0.1", proxy.addr, HOST_USER, HOST_PASS).await;
        let Err(e) = refused else {
            panic!("{version}: {HOST_USER} from 127.0.0.1 was let in");
        };
        assert!(
            e.starts_with("1045") || e.starts_with("1130"),
            "{version}: refused as an unknown host/user, got {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_proxy_protocol_the_backend_sees_the_proxy_address() {
    let proxy = proxy_to(accepting().tcp_addr(), ProxyProtocol::Off);
    let (mut client, local) = login_from(CLIENT_IP, proxy.addr, BENCH_USER, BENCH_PASS)
        .await
        .expect("login through the proxy");
    assert_eq!(
        value(&mut client, "SELECT USER()").await,
        format!("{BENCH_USER}@127.0.0.1")
    );
    let host = processlist_host(&mut client).await;
    assert!(host.starts_with("127.0.0.1:"), "{host}");
    assert_ne!(host, local.to_string());
    let refused = login_from(CLIENT_IP, proxy.addr, HOST_USER, HOST_PASS).await;
    assert!(refused.is_err(), "the host grant cannot match the proxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_client_is_sent_as_the_proxys_own_connection() {
    for version in [ProxyProtocol::V2, ProxyProtocol::V1] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.sock");
        let mut cfg = config(&[accepting().tcp_addr()]);
        cfg.listen = vec![
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenAddr::Unix(path.clone()),
        ];
        cfg.proxy_protocol = version;
        let _proxy = TestProxy::start_with(cfg);
        let stream = UnixStream::connect(&path).await.expect("connect");
        let mut client = RawClient::login(Box::new(stream), BENCH_USER, BENCH_PASS, None, 0, 0)
            .await
            .unwrap_or_else(|e| panic!("{version}: login over the unix listener: {e}"));
        // LOCAL / UNKNOWN: the server uses the connection's own address, the proxy's.
        assert_eq!(
            value(&mut client, "SELECT USER()").await,
            format!("{BENCH_USER}@127.0.0.1"),
            "{version}"
        );
        client.quit().await.expect("quit");
    }
}

/// A proxy whose checks log in every 100 ms and take a backend down at the first failure.
fn checked(backend: String, version: ProxyProtocol) -> Config {
    let mut cfg = config(&[backend]);
    cfg.proxy_protocol = version;
    cfg.health_check = HealthCheckConfig {
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(1),
        fall: 1,
        rise: 1,
        user: Some(BENCH_USER.to_owned()),
        password: Some(mysql_lb::config::Secret::new(BENCH_PASS)),
        password_file: None,
        max_replication_lag: None,
    };
    cfg
}

/// Waits for `min_checks` passed checks in a row on the proxy's only backend, none failed.
async fn passes_checks(proxy: &TestProxy, min_checks: usize) {
    let backend = std::sync::Arc::clone(&proxy.state.backends().backends()[0]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut passed = 0;
    let mut last = None;
    while passed < min_checks {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{passed} checks passed; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(check) = backend.last_check() else {
            continue;
        };
        if Some(check.at) != last {
            assert!(check.error.is_none(), "a check failed: {check:?}");
            passed += 1;
            last = Some(check.at);
        }
    }
    assert_eq!(backend.stats.up.get(), 1, "the backend stays up");
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200);
    assert!(body.contains("\"state\":\"up\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_with_a_header_keep_the_backend_up_over_tcp_and_unix() {
    for backend in [
        accepting().tcp_addr(),
        accepting().socket.display().to_string(),
    ] {
        for version in [ProxyProtocol::V2, ProxyProtocol::V1] {
            let proxy = TestProxy::start_with(checked(backend.clone(), version));
            passes_checks(&proxy, 3).await;
            let (mut client, _) = login_from(CLIENT_IP, proxy.addr, BENCH_USER, BENCH_PASS)
                .await
                .unwrap_or_else(|e| panic!("{backend} {version}: {e}"));
            assert_eq!(
                value(&mut client, "SELECT USER()").await,
                format!("{BENCH_USER}@{CLIENT_IP}")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_really_sends_the_header_a_server_without_the_option_refuses() {
    let cfg = checked(refusing().tcp_addr(), ProxyProtocol::Off).health_check;
    let leg = |v| OwnConnectOptions {
        proxy_protocol: v,
        ..OwnConnectOptions::default()
    };
    let plain: BackendAddr = refusing().tcp_addr().parse().unwrap();
    check_backend_with(&plain, leg(None), &cfg)
        .await
        .expect("no header: the plain server passes");
    for version in [Version::V2, Version::V1] {
        let e = check_backend_with(&plain, leg(Some(version)), &cfg)
            .await
            .expect_err("a header to a server that does not accept one");
        assert!(e.to_string().contains("login"), "{version:?}: {e}");
        let ok: BackendAddr = accepting().tcp_addr().parse().unwrap();
        check_backend_with(&ok, leg(Some(version)), &cfg)
            .await
            .unwrap_or_else(|e| panic!("{version:?}: accepted by the other server: {e}"));
    }
}

#[test]
fn check_config_shows_the_setting_and_the_backends_that_differ() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pp.yaml");
    std::fs::write(
        &path,
        "proxy_protocol: v2\nbackends:\n  - 127.0.0.1:3306\n  \
         - {name: plain, address: \"127.0.0.1:3307\", proxy_protocol: off}\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::daemon::BIN)
        .args(["--config", path.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("proxy_protocol to backends: v2 (except plain off)"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_connect_sends_the_client_address_too() {
    let mut cfg = config(&[accepting().tcp_addr()]);
    cfg.connect_mode = ConnectMode::Deferred;
    cfg.proxy_protocol = ProxyProtocol::V2;
    let proxy = TestProxy::start_with(cfg);
    let (mut client, local) = login_from(CLIENT_IP, proxy.addr, HOST_USER, HOST_PASS)
        .await
        .expect("the host-restricted user logs in through a deferred connect");
    assert_eq!(
        value(&mut client, "SELECT USER()").await,
        format!("{HOST_USER}@{CLIENT_IP}")
    );
    assert_eq!(processlist_host(&mut client).await, local.to_string());
}

/// The first deferred client of a proxy that knows no greeting yet (no health checks) makes the
/// proxy connect a backend just to read one. Behind a hop that greets only a connection that
/// starts with a header (a second mysql-lb taking headers from the proxy's address, as an L4
/// balancer with `accept-proxy` would), that connection must send it too, or no greeting ever
/// comes and every client is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_connects_greeting_only_connection_sends_the_header() {
    let mut hop = config(&[refusing().tcp_addr()]);
    hop.accept_proxy_protocol = vec!["127.0.0.1".parse().unwrap()];
    let hop = TestProxy::start_with(hop);
    let mut cfg = config(&[hop.addr.to_string()]);
    cfg.connect_mode = ConnectMode::Deferred;
    cfg.proxy_protocol = ProxyProtocol::V2;
    cfg.health_check.interval = Duration::ZERO;
    let proxy = TestProxy::start_with(cfg);
    assert!(
        proxy.state.backends().greeting_template().is_none(),
        "no greeting is known before the first client"
    );
    let mut client = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect("the first deferred client logs in through the hop");
    let one: Option<u32> = mysql_async::prelude::Queryable::query_first(&mut client, "SELECT 1")
        .await
        .expect("SELECT 1");
    assert_eq!(one, Some(1));
    assert!(
        proxy.state.backends().greeting_template().is_some(),
        "the greeting read through the hop is kept"
    );
    client.disconnect().await.expect("quit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turns_the_header_on_for_new_connections() {
    let cfg = config(&[accepting().tcp_addr()]);
    let proxy = TestProxy::start_with(cfg.clone());
    let (mut before, _) = login_from(CLIENT_IP, proxy.addr, BENCH_USER, BENCH_PASS)
        .await
        .expect("login");
    assert_eq!(
        value(&mut before, "SELECT USER()").await,
        format!("{BENCH_USER}@127.0.0.1")
    );
    let mut on = cfg;
    on.proxy_protocol = ProxyProtocol::V2;
    mysql_lb::control::reload::apply(&proxy.state, &on.validate().unwrap()).expect("reload");
    let (mut after, _) = login_from(CLIENT_IP, proxy.addr, BENCH_USER, BENCH_PASS)
        .await
        .expect("login");
    assert_eq!(
        value(&mut after, "SELECT USER()").await,
        format!("{BENCH_USER}@{CLIENT_IP}")
    );
    assert_eq!(
        value(&mut before, "SELECT USER()").await,
        format!("{BENCH_USER}@127.0.0.1"),
        "a running session keeps its connection"
    );
}
