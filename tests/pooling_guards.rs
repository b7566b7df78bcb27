//! A transaction-mode pool stays whole whatever a logged-in client sends between transactions,
//! against real MariaDB: an empty packet (a command with no command byte) is answered as the
//! server answers it directly, never read as the command byte of the packet after it, and the
//! session lives on; the pool's counts come back to all-idle and new logins are served. (Before,
//! `00 00 00 00` then a packet whose length byte is 0x16 made the session read a prepare of
//! nothing and panic, and each panicking session took its connection's slot with it: three
//! such clients emptied a pool of three for everyone.)

mod common;

use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, tcp_opts, BENCH_PASS, BENCH_USER};
use common::pooling::{counts, pooled};
use common::proxy::TestProxy;
use common::rawclient::{parse_err, RawClient};
use mysql_async::prelude::Queryable;

/// An empty packet, then a COM_QUERY of 22 bytes (0x16, COM_STMT_PREPARE's number): the bytes
/// of issue 30's reproducer.
fn reproducer() -> Vec<u8> {
    let query = b"SELECT 'sixteen' AS x";
    let mut bytes = vec![0, 0, 0, 0];
    bytes.extend_from_slice(&[1 + query.len() as u8, 0, 0, 0, 0x03]);
    bytes.extend_from_slice(query);
    assert_eq!(bytes[4], 0x16);
    bytes
}

async fn raw(addr: &str) -> RawClient {
    RawClient::connect_tcp(addr, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .expect("a raw login")
}

/// What a client reads after sending `bytes` (an empty packet, then one more command): the
/// empty packet's answer as "code: message" or "ok", then the next command's rows.
async fn answers(client: &mut RawClient, bytes: &[u8]) -> Result<(String, String), String> {
    client.send_raw(bytes).await?;
    let (seq, first) = client.read_packet().await?;
    let first = match first.first() {
        Some(0xFF) => format!("{seq}/{}", parse_err(&first)),
        _ => format!("{seq}/{first:02x?}"),
    };
    let rows = client.read_results().await?;
    Ok((first, format!("{rows:?}")))
}

/// Waits (5 s at most) until every connection the pool has open is idle and nothing waits.
async fn all_idle(proxy: &TestProxy, backend: &str, max: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = counts(proxy, backend);
        if c.open == c.idle && c.waiting == 0 && c.open <= max {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not come back to all-idle: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_packet_then_a_length_byte_of_0x16_is_answered_as_directly_and_leaves_the_pool_whole(
) {
    const MAX: usize = 3;
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let mut direct = raw(&backend).await;
    let want = answers(&mut direct, &reproducer()).await.expect("direct");
    assert!(
        want.0.starts_with("1/1047"),
        "MariaDB answers an empty packet with ERR 1047: {want:?}"
    );
    assert!(want.1.contains("sixteen"), "{want:?}");

    let proxy = pooled(
        std::slice::from_ref(&backend),
        MAX,
        Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let addr = proxy.addr_string();
    // More clients than the pool has connections, each between transactions (its login's
    // connection given back after a COM_PING) when it sends the bytes.
    let mut got = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..MAX + 2 {
        let mut client = raw(&addr).await;
        client.ping().await.expect("ping");
        got.push(answers(&mut client, &reproducer()).await);
        clients.push(client);
    }
    for client in clients {
        let _ = client.quit().await;
    }
    all_idle(&proxy, &backend, MAX).await;
    // New logins are served at once (a pool whose slots leaked answers 1040 after 2 s).
    for _ in 0..MAX + 1 {
        let started = Instant::now();
        let mut conn = mysql_async::Conn::new(tcp_opts(&addr, BENCH_USER, BENCH_PASS))
            .await
            .expect("a login after the empty packets");
        let one: Option<u32> = conn.query_first("SELECT 1").await.expect("SELECT 1");
        assert_eq!(one, Some(1));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "the login waited {:?}",
            started.elapsed()
        );
        conn.disconnect().await.expect("disconnect");
    }
    all_idle(&proxy, &backend, MAX).await;
    for (i, got) in got.iter().enumerate() {
        assert_eq!(got.as_ref(), Ok(&want), "client {i} through the pool");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_packet_is_answered_as_directly_in_a_transaction_and_before_a_prepare() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(
        std::slice::from_ref(&backend),
        2,
        Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let addr = proxy.addr_string();
    let mut prepare = vec![0, 0, 0, 0];
    // No parameters, no columns: its answer is the STMT_PREPARE_OK alone.
    let text = b"DO 1";
    prepare.extend_from_slice(&[1 + text.len() as u8, 0, 0, 0, 0x16]);
    prepare.extend_from_slice(text);
    let mut seen = Vec::new();
    for at in [&backend, &addr] {
        let mut client = raw(at).await;
        // Holding a connection: inside a transaction.
        client.query_text("BEGIN").await.expect("BEGIN");
        let held = answers(&mut client, &reproducer())
            .await
            .expect("in a transaction");
        client.query_text("COMMIT").await.expect("COMMIT");
        // Between transactions, then a prepare: an ERR, then the prepare's STMT_PREPARE_OK.
        client.send_raw(&prepare).await.expect("send");
        let (seq, err) = client
            .read_packet()
            .await
            .expect("the empty packet's answer");
        let (_, ok) = client.read_packet().await.expect("the prepare's answer");
        let prepared = (
            seq,
            parse_err(&err),
            ok.first().copied(),
            ok.get(5..9).map(<[u8]>::to_vec),
        );
        // The session goes on.
        let after = client.query_text("SELECT 2").await.expect("SELECT 2");
        seen.push((held, prepared, after));
    }
    assert_eq!(seen[0], seen[1], "directly, then through the pool");
    assert!(seen[0].1 .1.starts_with("1047"), "{:?}", seen[0]);
    all_idle(&proxy, &backend, 2).await;
}
