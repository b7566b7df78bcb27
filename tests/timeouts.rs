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

#[tokio::test]
async fn an_idle_session_is_closed_after_idle_timeout() {
    let proxy = proxy_with_idle_timeout(Duration::from_millis(800));
    let mut c = login(&proxy).await;
    c.ping().await.unwrap();
    let started = Instant::now();
    let closed = c.read_packet().await;
    assert!(closed.is_err(), "the proxy closed the idle session");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(5),
        "closed after about the idle timeout: {waited:?}"
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
