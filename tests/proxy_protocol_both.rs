//! PROXY protocol on both legs, end to end on a real MariaDB started with
//! `--proxy-protocol-networks`: an L4 load balancer in front of mysql-lb sends a header naming
//! the client (10.9.8.7, or through a real HAProxy the client's own 127.0.0.3), mysql-lb
//! accepts it (`accept_proxy_protocol`) and sends that address on to the backend
//! (`proxy_protocol`), so the backend sees the first client, not the balancer nor mysql-lb, in
//! `USER()`, the processlist and its host grants. Every pairing of v1 and v2 on the two legs.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use common::mariadb::{named_port, MariaDb, BENCH_PASS, BENCH_USER};
use common::pp::{balancer, login_from, processlist_host, v1, v2, value, Haproxy};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use mysql_lb::config::ProxyProtocol;

/// Where the balancer stand-in connects to mysql-lb from: the only network mysql-lb takes
/// headers from.
const BALANCER_IP: &str = "127.0.0.2";
/// The client the stand-in's headers name.
const CLIENT: &str = "10.9.8.7";
/// A host-restricted account: only a client from CLIENT may log in as it.
const HOST_USER: &str = "pp_both";
const HOST_PASS: &str = "pp_both_pw";

/// The PROXY header version a hop carries (balancer to mysql-lb, mysql-lb to the backend).
#[derive(Clone, Copy, Debug)]
enum HeaderVersion {
    V1,
    V2,
}

const PAIRS: [(HeaderVersion, HeaderVersion); 4] = [
    (HeaderVersion::V1, HeaderVersion::V1),
    (HeaderVersion::V1, HeaderVersion::V2),
    (HeaderVersion::V2, HeaderVersion::V1),
    (HeaderVersion::V2, HeaderVersion::V2),
];

fn accepting() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| {
        let db = MariaDb::start_with_args("pp-both", &["--proxy-protocol-networks=127.0.0.0/8"]);
        db.root_exec(&format!(
            "CREATE USER '{HOST_USER}'@'{CLIENT}' IDENTIFIED VIA mysql_native_password \
             USING PASSWORD('{HOST_PASS}'); GRANT SELECT ON test.* TO '{HOST_USER}'@'{CLIENT}'"
        ));
        db
    })
}

/// mysql-lb taking headers from BALANCER_IP only and sending `outbound` to the backend.
fn proxy(outbound: HeaderVersion) -> TestProxy {
    let mut cfg = config(&[accepting().tcp_addr()]);
    cfg.accept_proxy_protocol = vec![BALANCER_IP.parse().unwrap()];
    cfg.proxy_protocol = match outbound {
        HeaderVersion::V1 => ProxyProtocol::V1,
        HeaderVersion::V2 => ProxyProtocol::V2,
    };
    TestProxy::start_with(cfg)
}

/// A balancer stand-in in front of `proxy` whose header (`inbound`) names `client`.
async fn balancer_for(proxy: &TestProxy, inbound: HeaderVersion, client: SocketAddr) -> SocketAddr {
    let port = proxy.addr.port();
    let header = match inbound {
        HeaderVersion::V1 => v1(client, port),
        HeaderVersion::V2 => v2(client, port),
    };
    balancer(BALANCER_IP, port, header).await
}

/// `USER()` and the processlist `HOST` (`ip:port`) the backend shows for this session.
async fn seen_by_backend(client: &mut RawClient) -> (String, String) {
    let user = value(client, "SELECT USER()").await;
    (user, processlist_host(client).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_sees_the_address_the_balancer_named_with_v1_and_v2_on_each_leg() {
    for (n, (inbound, outbound)) in PAIRS.into_iter().enumerate() {
        let proxy = proxy(outbound);
        let client: SocketAddr = format!("{CLIENT}:{}", 40000 + n).parse().unwrap();
        let via = balancer_for(&proxy, inbound, client).await;
        let (mut session, _) = login_from("127.0.0.1", via, BENCH_USER, BENCH_PASS)
            .await
            .unwrap_or_else(|e| panic!("{inbound:?} in, {outbound:?} out: login: {e}"));
        assert_eq!(
            seen_by_backend(&mut session).await,
            (format!("{BENCH_USER}@{CLIENT}"), client.to_string()),
            "{inbound:?} in, {outbound:?} out: the backend sees the carried address and port"
        );
        session.quit().await.expect("quit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_for_the_carried_host_works_end_to_end_and_refuses_another_host() {
    for (n, (inbound, outbound)) in PAIRS.into_iter().enumerate() {
        let proxy = proxy(outbound);
        let client: SocketAddr = format!("{CLIENT}:{}", 41000 + n).parse().unwrap();
        let via = balancer_for(&proxy, inbound, client).await;
        let (mut session, _) = login_from("127.0.0.1", via, HOST_USER, HOST_PASS)
            .await
            .unwrap_or_else(|e| panic!("{inbound:?}/{outbound:?}: {HOST_USER}@{CLIENT}: {e}"));
        assert_eq!(
            value(&mut session, "SELECT CURRENT_USER()").await,
            format!("{HOST_USER}@{CLIENT}")
        );
        session.quit().await.expect("quit");

        // The same balancer path naming a neighbour of CLIENT: the grant does not match.
        let other: SocketAddr = format!("10.9.8.8:{}", 41000 + n).parse().unwrap();
        let via = balancer_for(&proxy, inbound, other).await;
        let refused = login_from("127.0.0.1", via, HOST_USER, HOST_PASS).await;
        let Err(e) = refused else {
            panic!("{inbound:?}/{outbound:?}: {HOST_USER} from 10.9.8.8 was let in");
        };
        assert!(
            e.starts_with("1045") || e.starts_with("1130"),
            "{inbound:?}/{outbound:?}: refused as an unknown host/user, got {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_client_is_sent_on_as_itself_beside_the_balanced_ones() {
    // 127.0.0.1 is not in accept_proxy_protocol: no header expected from it, and the backend
    // sees it as it is, while a balanced session at the same time is seen as CLIENT.
    let proxy = proxy(HeaderVersion::V2);
    let client: SocketAddr = format!("{CLIENT}:42000").parse().unwrap();
    let via = balancer_for(&proxy, HeaderVersion::V2, client).await;
    let (mut balanced, _) = login_from("127.0.0.1", via, BENCH_USER, BENCH_PASS)
        .await
        .expect("balanced login");
    let (mut direct, local) = login_from("127.0.0.3", proxy.addr, BENCH_USER, BENCH_PASS)
        .await
        .expect("direct login");
    assert_eq!(
        seen_by_backend(&mut direct).await,
        (format!("{BENCH_USER}@127.0.0.3"), local.to_string())
    );
    assert_eq!(
        seen_by_backend(&mut balanced).await,
        (format!("{BENCH_USER}@{CLIENT}"), client.to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_haproxy_send_proxy_v2_and_v1_the_backend_sees_the_real_client() {
    // A real client on 127.0.0.3 → HAProxy (connecting from 127.0.0.2, with send-proxy-v2 on
    // one frontend and send-proxy on the other) → mysql-lb (v2, then v1, to the backend).
    for (outbound, send) in [
        (HeaderVersion::V2, "send-proxy-v2"),
        (HeaderVersion::V1, "send-proxy"),
    ] {
        let proxy = proxy(outbound);
        // HAProxy's config names its port before it starts.
        let port = named_port();
        let dir = tempfile::tempdir().unwrap();
        let _haproxy = Haproxy::start(
            dir.path(),
            &format!(
                "global\n    maxconn 64\ndefaults\n    mode tcp\n    timeout connect 5s\n    \
                 timeout client 60s\n    timeout server 60s\n\
                 listen mysql\n    bind 127.0.0.1:{port}\n    \
                 server lb 127.0.0.1:{p} {send} source {BALANCER_IP}\n",
                p = proxy.addr.port()
            ),
        );
        common::daemon::wait_connectable(port);
        let haproxy: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (mut session, local) = login_from("127.0.0.3", haproxy, BENCH_USER, BENCH_PASS)
            .await
            .unwrap_or_else(|e| panic!("{send}, {outbound:?} out: {e}"));
        assert_eq!(
            seen_by_backend(&mut session).await,
            (format!("{BENCH_USER}@127.0.0.3"), local.to_string()),
            "{send}, {outbound:?} out: the backend sees the client HAProxy served"
        );
        session.quit().await.expect("quit");
    }
}
