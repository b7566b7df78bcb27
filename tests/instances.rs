//! Several mysql-lb instances behind one address, on real MariaDB: two in-process instances share
//! one port with `reuse_port` and both serve; their connection ids carry their instance ids; a
//! KILL QUERY reaching one instance for a session of the other interrupts it through `peers:`,
//! and without a peer is refused naming the instance while the query runs on.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::mariadb::{named_port, new_temp_dir, shared_pair};
use common::proxy::{config, http_request, TestProxy};
use common::rawclient::RawClient;
use common::{running_on_shared_backends, start_sleeping};
use mysql_lb::backends::kill::{instance_of, is_proxy_id};
use mysql_lb::config::{Config, ListenAddr, Peer, PeerUrl};

const TOKEN: &str = "s3cret-instances";

/// Instance `id` in front of the first shared backend, on `port` (0: a fresh one) with
/// `reuse_port`, its admin on `admin`, the shared token, and `peers`.
fn instance(id: u8, port: u16, admin: SocketAddr, peers: &[(u8, SocketAddr)]) -> Config {
    let mut cfg = config(&[shared_pair()[0].tcp_addr()]);
    cfg.listen = vec![ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], port)))];
    cfg.admin_address = Some(admin);
    let dir = new_temp_dir("instances-token");
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    cfg.admin_token_file = Some(token);
    cfg.instances.reuse_port = true;
    cfg.instances.instance_id = id;
    cfg.instances.peers = peers
        .iter()
        .map(|&(instance_id, addr)| Peer {
            instance_id,
            admin_url: PeerUrl::from(addr),
        })
        .collect();
    cfg
}

/// An admin address a peer names before the instance starts (see [`named_port`]).
fn admin_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], named_port()))
}

/// Two instances (ids 1 and 2) sharing one port; with `peered` each lists the other.
fn two_instances(peered: bool) -> (TestProxy, TestProxy) {
    let (admin_a, admin_b) = (admin_addr(), admin_addr());
    let peers_of_a: &[(u8, SocketAddr)] = if peered { &[(2, admin_b)] } else { &[] };
    let peers_of_b: &[(u8, SocketAddr)] = if peered { &[(1, admin_a)] } else { &[] };
    let a = TestProxy::start_with(instance(1, 0, admin_a, peers_of_a));
    let b = TestProxy::start_with(instance(2, a.addr.port(), admin_b, peers_of_b));
    assert_eq!(a.addr, b.addr, "one address for both");
    (a, b)
}

async fn login(addr: &str) -> RawClient {
    RawClient::connect_tcp(addr, "bench", "bench", None, 0, 0)
        .await
        .expect("login through the shared port")
}

/// A session the kernel gave to instance `id` (connects until it does; bounded).
async fn session_on(addr: &str, id: u8) -> RawClient {
    for _ in 0..200 {
        let c = login(addr).await;
        if instance_of(c.connection_id) == id {
            return c;
        }
    }
    panic!("200 connections and none reached instance {id}");
}

fn connections_served(proxy: &TestProxy) -> u64 {
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| b["total_connections"].as_u64().unwrap_or(0))
        .sum()
}

fn instance_shown(proxy: &TestProxy) -> u64 {
    let (_, body) = proxy.admin_get("/backends");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["instance_id"].as_u64().expect("instance_id in /backends")
}

#[tokio::test]
async fn two_instances_share_one_port_and_both_serve_with_their_own_ids() {
    let (a, b) = two_instances(false);
    assert_eq!((instance_shown(&a), instance_shown(&b)), (1, 2));
    let addr = a.addr_string();
    let mut seen = BTreeSet::new();
    let mut tries = 0;
    while seen.len() < 2 {
        tries += 1;
        assert!(
            tries <= 200,
            "only instances {seen:?} served in 200 connects"
        );
        let mut c = login(&addr).await;
        let id = c.connection_id;
        assert!(is_proxy_id(id), "{id:#x}");
        seen.insert(instance_of(id));
        // The session works, and the server's own thread id is not a proxy id.
        let rows = c.query_text("SELECT CONNECTION_ID()").await.unwrap();
        let thread: u32 = rows[0][0].as_deref().unwrap().parse().unwrap();
        assert!(!is_proxy_id(thread), "{thread}");
    }
    assert_eq!(
        seen,
        BTreeSet::from([1, 2]),
        "ids carry the serving instance"
    );
    // Each instance's own admin endpoint counted its own share, and together all of them.
    let (served_a, served_b) = (connections_served(&a), connections_served(&b));
    assert!(served_a > 0 && served_b > 0, "{served_a} / {served_b}");
    assert_eq!(served_a + served_b, tries, "every connect served once");
}

#[tokio::test]
async fn kill_query_of_another_instances_session_is_resolved_through_its_peer() {
    let (a, b) = two_instances(true);
    let addr = a.addr_string();
    let mut victim = session_on(&addr, 2).await;
    let id = victim.connection_id;
    let marker = "instances-kill-peered";
    start_sleeping(&mut victim, marker).await;

    // The peer endpoint wants the token.
    let path = format!("/connections/{id}");
    let (status, body) = b.admin_get(&path);
    assert_eq!(status, 401, "{body}");
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let (status, body) = http_request(b.admin.unwrap(), "GET", &path, &[&bearer], b"").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"thread_id\""), "{body}");

    let mut killer = session_on(&addr, 1).await;
    let started = Instant::now();
    killer
        .query_results(&format!("KILL QUERY {id}"))
        .await
        .expect("KILL QUERY through the other instance succeeds");
    let err = victim
        .read_results()
        .await
        .expect_err("the victim's query was interrupted");
    assert!(err.starts_with("1317"), "interrupted by the KILL: {err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!running_on_shared_backends(marker));
    // Both sessions go on; an id the peer does not know is answered 1094 by its mapping.
    let rows = victim.query_text("SELECT 1").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("1"));
    let gone = id ^ 0x1000;
    assert_eq!(instance_of(gone), 2);
    // Pipelined behind it, a query waits for the peer's answer and is answered after it.
    let kill = format!("KILL QUERY {gone}");
    killer.send_command(0x03, kill.as_bytes()).await.unwrap();
    killer.send_command(0x03, b"SELECT 2").await.unwrap();
    let err = killer
        .read_results()
        .await
        .expect_err("unknown on the peer");
    assert!(
        err.starts_with("1094") && err.contains("Unknown thread id"),
        "{err}"
    );
    let rows = killer.read_results().await.expect("the pipelined query");
    assert_eq!(rows[0][0][0].as_deref(), Some("2"), "the killer is in sync");
}

#[tokio::test]
async fn without_peers_a_kill_of_another_instances_session_is_refused_naming_it() {
    let (_a, _b) = two_instances(false);
    let addr = _a.addr_string();
    let mut victim = session_on(&addr, 2).await;
    let id = victim.connection_id;
    let marker = "instances-kill-unpeered";
    start_sleeping(&mut victim, marker).await;

    let mut killer = session_on(&addr, 1).await;
    let err = killer
        .query_text(&format!("KILL QUERY {id}"))
        .await
        .expect_err("refused without a peer");
    assert!(err.starts_with("1094"), "{err}");
    assert!(
        err.contains("instance 2") && err.contains("peers:") && err.contains("nothing was killed"),
        "{err}"
    );
    assert!(running_on_shared_backends(marker), "the query runs on");
    let rows = killer.query_text("SELECT 3").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("3"), "the killer is in sync");

    // Its own instance still maps it.
    let mut own = session_on(&addr, 2).await;
    own.query_results(&format!("KILL QUERY {id}"))
        .await
        .expect("KILL QUERY on the victim's instance");
    let err = victim.read_results().await.expect_err("interrupted");
    assert!(err.starts_with("1317"), "{err}");
}

#[tokio::test]
async fn a_peer_that_cannot_be_asked_gets_the_client_an_err_and_kills_nothing() {
    // Instance 3's admin address has nobody listening. Nobody asks this instance, so its own
    // admin endpoint takes any free port (a port picked ahead could be taken by then).
    let own_admin = SocketAddr::from(([127, 0, 0, 1], 0));
    let cfg = instance(1, 0, own_admin, &[(3, admin_addr())]);
    let proxy = TestProxy::start_with(cfg);
    let mut killer = login(&proxy.addr_string()).await;
    let theirs = 0x6000_0000 | 3 << 21 | 5;
    let started = Instant::now();
    let err = killer
        .query_text(&format!("KILL QUERY {theirs}"))
        .await
        .expect_err("the peer is unreachable");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded wait");
    assert!(
        err.starts_with("1105") && err.contains("instance 3") && err.contains("could not be asked"),
        "{err}"
    );
    let rows = killer.query_text("SELECT 4").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("4"), "the session is in sync");
}

/// A config file for the daemon: instance `id` on `port`, reuse_port on, admin off.
fn daemon_config(dir: &std::path::Path, id: u8, port: u16) -> String {
    let path = dir.join(format!("instance-{id}.yaml"));
    let yaml = format!(
        "listen: ['127.0.0.1:{port}']\nbackends: [{{address: '{}'}}]\nadmin_address: off\n\
         reuse_port: true\ninstance_id: {id}\n",
        shared_pair()[0].tcp_addr()
    );
    std::fs::write(&path, yaml).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn two_daemon_processes_share_one_port_and_say_which_instance_they_are() {
    use common::daemon::{Daemon, BIN};
    let dir = new_temp_dir("instances-daemon");
    let port = named_port();
    let (one, two) = (daemon_config(&dir, 1, port), daemon_config(&dir, 2, port));
    let check = std::process::Command::new(BIN)
        .args(["--config", &two, "--check-config"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{stdout}");
    assert!(
        stdout.contains("instance_id 2, reuse_port on, peers: none"),
        "{stdout}"
    );
    let mut first = Daemon::start(&["--config".to_owned(), one.clone()], None);
    first.wait_for_line("listening");
    let mut second = Daemon::start(&["--config".to_owned(), two], None);
    let line = second.wait_for_line("instance_id 2");
    assert!(line.contains("reuse_port on"), "{line}");
    second.wait_for_line("listening");
    let addr = format!("127.0.0.1:{port}");
    let mut seen = BTreeSet::new();
    for _ in 0..200 {
        let mut c = login(&addr).await;
        let rows = c.query_text("SELECT 1").await.unwrap();
        assert_eq!(rows[0][0].as_deref(), Some("1"));
        seen.insert(instance_of(c.connection_id));
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen, BTreeSet::from([1, 2]), "both processes serve");
    // An instance that did not ask to share the port is refused it.
    let lone = dir.join("lone.yaml");
    let yaml = std::fs::read_to_string(&one).unwrap();
    std::fs::write(&lone, yaml.replace("reuse_port: true", "reuse_port: false")).unwrap();
    let refused = std::process::Command::new(BIN)
        .arg("--config")
        .arg(&lone)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(first.stop().success() && second.stop().success());
}

#[tokio::test]
async fn a_peer_named_by_a_host_name_is_resolved_when_asked() {
    // As a StatefulSet pod's peers are named through a headless Service: by DNS name.
    let (admin_a, admin_b) = (admin_addr(), admin_addr());
    let mut cfg_a = instance(1, 0, admin_a, &[]);
    cfg_a.instances.peers = vec![Peer {
        instance_id: 2,
        admin_url: PeerUrl::parse(&format!("http://localhost:{}", admin_b.port())).unwrap(),
    }];
    let a = TestProxy::start_with(cfg_a);
    let _b = TestProxy::start_with(instance(2, a.addr.port(), admin_b, &[]));
    let addr = a.addr_string();
    let mut victim = session_on(&addr, 2).await;
    let id = victim.connection_id;
    let marker = "instances-kill-named-peer";
    start_sleeping(&mut victim, marker).await;
    let mut killer = session_on(&addr, 1).await;
    killer
        .query_results(&format!("KILL QUERY {id}"))
        .await
        .expect("KILL QUERY through the peer named localhost");
    let err = victim.read_results().await.expect_err("interrupted");
    assert!(err.starts_with("1317"), "{err}");
    assert!(!running_on_shared_backends(marker));
}
