//! KILL through the balancer: it reaches the session the client meant or is refused with a clear
//! ERR, never a stranger (real MariaDB backends, two of them, round robin).

mod common;

use std::time::{Duration, Instant};

use common::mariadb::shared_pair;
use common::proxy::TestProxy;
use common::rawclient::RawClient;
use common::{running_on_shared_backends, start_sleeping};
use mysql_lb::backends::kill::is_proxy_id;

const COM_PROCESS_KILL: u8 = 0x0C;

async fn login(proxy: &TestProxy) -> RawClient {
    RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0)
        .await
        .expect("login through the proxy")
}

async fn port_of(c: &mut RawClient) -> String {
    let rows = c.query_text("SELECT @@port").await.unwrap();
    rows[0][0].clone().unwrap()
}

/// A session on the backend listening on `port` (or, with `same = false`, on another one).
async fn session_where(proxy: &TestProxy, port: &str, same: bool) -> RawClient {
    for _ in 0..20 {
        let mut c = login(proxy).await;
        if (port_of(&mut c).await == port) == same {
            return c;
        }
    }
    panic!("round robin never gave the wanted backend");
}

#[tokio::test]
async fn kill_query_reaches_the_meant_session_or_is_refused_across_backends() {
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    let mut victim = login(&proxy).await;
    let id = victim.connection_id;
    assert!(is_proxy_id(id), "clients are greeted with a proxy id: {id}");
    let port = port_of(&mut victim).await;
    let marker = "kill-marker-1";
    start_sleeping(&mut victim, marker).await;

    // From another backend: refused, and nothing is killed there or here.
    let mut other = session_where(&proxy, &port, false).await;
    let err = other
        .query_text(&format!("KILL QUERY {id}"))
        .await
        .expect_err("a KILL across backends is refused");
    assert!(err.starts_with("1095"), "{err}");
    assert!(
        err.contains("mysql-lb") && err.contains("nothing was killed"),
        "{err}"
    );
    assert!(
        running_on_shared_backends(marker),
        "the victim's query still runs"
    );
    // The refusing session is still in sync.
    assert!(!port_of(&mut other).await.is_empty());

    // From the same backend: the KILL is mapped to the victim's thread.
    let mut same = session_where(&proxy, &port, true).await;
    let started = Instant::now();
    same.query_results(&format!("KILL QUERY {id}"))
        .await
        .expect("KILL QUERY on the same backend succeeds");
    let rows = victim.read_results().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the sleep was interrupted"
    );
    let err = rows.expect_err("the victim's query was interrupted");
    assert!(err.starts_with("1317"), "interrupted by the KILL: {err}");
    // KILL QUERY leaves the connection usable.
    assert_eq!(port_of(&mut victim).await, port);
}

#[tokio::test]
async fn com_process_kill_of_a_proxy_id_closes_that_session_only() {
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    let mut victim = login(&proxy).await;
    let port = port_of(&mut victim).await;
    let mut killer = session_where(&proxy, &port, true).await;
    let mut bystander = session_where(&proxy, &port, true).await;
    killer
        .send_command(COM_PROCESS_KILL, &victim.connection_id.to_le_bytes())
        .await
        .unwrap();
    killer
        .read_ok()
        .await
        .expect("COM_PROCESS_KILL answered with OK");
    assert!(
        victim.query_text("SELECT 1").await.is_err(),
        "the victim's connection was killed"
    );
    assert_eq!(port_of(&mut bystander).await, port, "bystander untouched");
    assert_eq!(port_of(&mut killer).await, port, "killer untouched");
}

#[tokio::test]
async fn kill_of_an_unknown_proxy_id_hits_nobody() {
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    let mut a = login(&proxy).await;
    let mut b = login(&proxy).await;
    let unknown = 0x7FFF_FFF0;
    assert!(is_proxy_id(unknown));
    let err = a
        .query_text(&format!("KILL {unknown}"))
        .await
        .expect_err("unknown id");
    assert!(err.starts_with("1094"), "{err}");
    assert!(!port_of(&mut a).await.is_empty());
    assert!(!port_of(&mut b).await.is_empty());
}
