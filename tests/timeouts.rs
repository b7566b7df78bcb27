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

/// Waits (at most `limit`) for the proxy to close `c`; `None` if it is still open then.
async fn closed_within(c: &mut RawClient, limit: Duration) -> Option<Instant> {
    let read = tokio::time::timeout(limit, c.read_packet()).await.ok()?;
    assert!(read.is_err(), "nothing but a close was due: {read:?}");
    Some(Instant::now())
}

#[tokio::test]
async fn a_client_stalled_part_way_through_a_command_packet_is_idle() {
    let timeout = Duration::from_millis(700);
    let proxy = proxy_with_idle_timeout(timeout);
    // Held back as a possible KILL, held inside a comment, forwarded to the backend, and a
    // header cut short: the server's own wait_timeout closes each of these.
    let stalls: [&[u8]; 4] = [
        b"\x0c\0\0\0\x03KIL",
        b"\x40\0\0\0\x03/* sqlcommenter",
        b"\x40\0\0\0\x03SELECT 1",
        b"\x0c\0",
    ];
    for stall in stalls {
        let mut c = login(&proxy).await;
        c.ping().await.unwrap();
        c.send_raw(stall).await.unwrap();
        let sent = Instant::now();
        let closed = closed_within(&mut c, timeout * 4).await;
        let waited = closed.map(|at| at - sent);
        assert!(
            waited.is_some_and(|w| w >= timeout - Duration::from_millis(50) && w < timeout * 3 / 2),
            "{stall:?}: closed idle_timeout after the stalled bytes, not kept open: {waited:?}"
        );
    }
}

#[tokio::test]
async fn a_short_command_trickled_byte_by_byte_is_not_idle() {
    let timeout = Duration::from_millis(500);
    let proxy = proxy_with_idle_timeout(timeout);
    let mut c = login(&proxy).await;
    // Held back whole until its last byte (it may be a KILL), which comes after 3 x the timeout.
    let mut payload = b"\x03/* c */ KILL QUERY 123456".to_vec();
    payload.resize(200, b' ');
    let mut packet = vec![200, 0, 0, 0];
    packet.extend_from_slice(&payload);
    for byte in packet.chunks(1) {
        c.send_raw(byte)
            .await
            .expect("the session stays open while bytes come");
        // Pacing the client, not waiting on the proxy.
        tokio::time::sleep(Duration::from_millis(8)).await;
    }
    let (_, answer) = c
        .read_packet()
        .await
        .expect("the trickled KILL is answered");
    assert_eq!(
        answer[0], 0xFF,
        "the server's ERR for an unknown thread: {answer:?}"
    );
    assert!(
        String::from_utf8_lossy(&answer).contains("123456"),
        "the KILL reached the server whole: {answer:?}"
    );
}

#[tokio::test]
async fn an_idle_pooled_session_is_closed_idle_timeout_after_its_last_response() {
    // Between transactions a pooled session waits for its client without a server connection
    // (and, right after a relay, without reading the client first): the same deadline holds.
    let timeout = Duration::from_millis(800);
    let mut cfg = config(&[shared_pair()[0].tcp_addr()]);
    common::pooling::transaction_mode(&mut cfg, 4, Duration::from_secs(60), Duration::from_secs(2));
    cfg.idle_timeout = Some(timeout);
    let proxy = TestProxy::start_with(cfg);
    let mut c = login(&proxy).await;
    c.ping().await.unwrap();
    c.ping().await.unwrap();
    let answered = Instant::now();
    let waited = closed_at(&mut c).await - answered;
    assert!(
        waited >= timeout - Duration::from_millis(50) && waited < timeout * 3 / 2,
        "closed idle_timeout after the last response: {waited:?}"
    );
}
