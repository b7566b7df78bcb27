//! Session timeouts against real MariaDB: idle sessions are closed, busy ones never are.

mod common;

use std::time::{Duration, Instant};

use common::mariadb::shared_pair;
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;

fn proxy_with_idle_timeout(timeout: Duration) -> TestProxy {
    let mut cfg = config(&[shared_pair()[0].tcp_addr()]);
    cfg.idle_timeout = Some(timeout);
    TestProxy::start_with(cfg)
}

async fn login(proxy: &TestProxy) -> RawClient {
    RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0)
        .await
        .expect("login")
}

/// Waits for the proxy to close `c` and returns when that was seen.
async fn closed_at(c: &mut RawClient) -> Instant {
    let closed = c.read_packet().await;
    let at = Instant::now();
    assert!(closed.is_err(), "the proxy closed the idle session");
    at
}

#[tokio::test]
async fn an_idle_session_is_closed_idle_timeout_after_its_last_response() {
    let timeout = Duration::from_millis(800);
    let proxy = proxy_with_idle_timeout(timeout);
    let mut c = login(&proxy).await;
    c.ping().await.unwrap();
    let answered = Instant::now();
    let waited = closed_at(&mut c).await - answered;
    // The proxy's clock starts a little before the client sees the answer; a timer re-armed
    // a whole period late would close after 1.6 s.
    assert!(
        waited >= timeout - Duration::from_millis(50) && waited < timeout * 3 / 2,
        "closed idle_timeout after the last response: {waited:?}"
    );
}

#[tokio::test]
async fn activity_part_way_through_the_period_moves_the_deadline_to_that_activity() {
    let timeout = Duration::from_millis(800);
    let proxy = proxy_with_idle_timeout(timeout);
    let mut c = login(&proxy).await;
    // A command 200 ms into the first period: the session is due 800 ms after it, not after
    // the period that saw it (1.6 s from login, 1.4 s after the command).
    let login_done = Instant::now();
    tokio::time::sleep_until((login_done + Duration::from_millis(200)).into()).await;
    c.ping().await.unwrap();
    let answered = Instant::now();
    let waited = closed_at(&mut c).await - answered;
    assert!(
        waited >= timeout - Duration::from_millis(50) && waited < timeout * 3 / 2,
        "closed idle_timeout after the command, not a period late: {waited:?}"
    );
}

#[tokio::test]
async fn a_long_query_is_not_an_idle_session() {
    let proxy = proxy_with_idle_timeout(Duration::from_millis(500));
    let mut c = login(&proxy).await;
    let rows = c.query_text("SELECT SLEEP(2), 'still here'").await.unwrap();
    assert_eq!(rows[0][1].as_deref(), Some("still here"));
    c.ping().await.expect("the session survived its long query");
}

#[tokio::test]
async fn a_session_that_keeps_talking_stays_open() {
    let proxy = proxy_with_idle_timeout(Duration::from_millis(700));
    let mut c = login(&proxy).await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        c.ping().await.expect("pings keep the session alive");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
