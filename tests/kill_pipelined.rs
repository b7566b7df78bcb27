//! KILL mapping wherever the client's writes cut it: several KILLs in one read are each mapped,
//! and a KILL split across reads is held back until whole, then mapped (real MariaDB, one
//! backend so every session shares it).

mod common;

use std::time::{Duration, Instant};

use common::mariadb::shared_pair;
use common::proxy::TestProxy;
use common::rawclient::RawClient;
use common::{running_on_shared_backends, start_sleeping};

const COM_QUERY: u8 = 0x03;

async fn login(proxy: &TestProxy) -> RawClient {
    RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0)
        .await
        .expect("login through the proxy")
}

/// The victim's query ends with ER_QUERY_INTERRUPTED, well before its 30 s.
async fn assert_interrupted(victim: &mut RawClient, started: Instant) {
    let err = victim
        .read_results()
        .await
        .expect_err("the victim's query was interrupted");
    assert!(err.starts_with("1317"), "interrupted by the KILL: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the sleep was cut short"
    );
}

fn kill_packet(id: u32) -> Vec<u8> {
    query_packet(&format!("KILL QUERY {id}"))
}

#[tokio::test]
async fn two_kills_pipelined_in_one_write_are_each_mapped() {
    let proxy = TestProxy::start(&[shared_pair()[0].tcp_addr()]);
    let mut a = login(&proxy).await;
    let mut b = login(&proxy).await;
    let mut killer = login(&proxy).await;
    start_sleeping(&mut a, "pipelined-kill-a").await;
    start_sleeping(&mut b, "pipelined-kill-b").await;
    let started = Instant::now();
    let both = [kill_packet(a.connection_id), kill_packet(b.connection_id)].concat();
    killer.send_raw(&both).await.unwrap();
    killer.read_ok().await.expect("the first KILL was mapped");
    killer
        .read_ok()
        .await
        .expect("the second KILL was mapped too");
    assert_interrupted(&mut a, started).await;
    assert_interrupted(&mut b, started).await;
    killer.ping().await.expect("the killer is still in sync");
}

#[tokio::test]
async fn a_kill_split_across_writes_is_mapped() {
    let proxy = TestProxy::start(&[shared_pair()[0].tcp_addr()]);
    let mut victim = login(&proxy).await;
    let mut killer = login(&proxy).await;
    let packet = kill_packet(victim.connection_id);
    // Inside the header, inside the keyword, inside the id.
    for cut in [2, 8, packet.len() - 2] {
        let marker = format!("split-kill-{cut}");
        start_sleeping(&mut victim, &marker).await;
        let started = Instant::now();
        killer.send_raw(&packet[..cut]).await.unwrap();
        // A pause the proxy reads the first part in (the raw client sets TCP_NODELAY).
        tokio::time::sleep(Duration::from_millis(150)).await;
        killer.send_raw(&packet[cut..]).await.unwrap();
        killer
            .read_ok()
            .await
            .unwrap_or_else(|e| panic!("the KILL cut at {cut} was mapped: {e}"));
        assert_interrupted(&mut victim, started).await;
    }
    killer.ping().await.expect("the killer is still in sync");
    victim
        .ping()
        .await
        .expect("KILL QUERY leaves the victim usable");
}

fn query_packet(sql: &str) -> Vec<u8> {
    let mut p = vec![(sql.len() + 1) as u8, 0, 0, 0, COM_QUERY];
    p.extend_from_slice(sql.as_bytes());
    p
}

/// The forms drivers and ORMs send: a leading or trailing comment (sqlcommenter), an id bound as a quoted
/// string (PDO and mysql2 with a placeholder), an id in parentheses; each mapped, also when the
/// comment is cut across writes.
#[tokio::test]
async fn kills_after_comments_and_with_quoted_ids_are_mapped() {
    let proxy = TestProxy::start(&[shared_pair()[0].tcp_addr()]);
    let mut victim = login(&proxy).await;
    let mut killer = login(&proxy).await;
    let id = victim.connection_id;
    let forms = [
        format!("/* app=checkout,route=/pay */ KILL QUERY {id}"),
        format!("-- cancel\nKILL QUERY '{id}'"),
        format!("# cancel\n KILL QUERY ({id});"),
        format!("KILL QUERY {id} /*traceparent='00-4bf92f3577b34da6-00f067aa0ba902b7-01'*/"),
    ];
    for (i, sql) in forms.iter().enumerate() {
        let marker = format!("comment-kill-{i}");
        start_sleeping(&mut victim, &marker).await;
        let started = Instant::now();
        let packet = query_packet(sql);
        // Cut inside the comment: the proxy must hold it until the statement shows.
        killer.send_raw(&packet[..8]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        killer.send_raw(&packet[8..]).await.unwrap();
        killer
            .read_ok()
            .await
            .unwrap_or_else(|e| panic!("{sql:?} was mapped: {e}"));
        assert_interrupted(&mut victim, started).await;
    }
    victim.ping().await.expect("the victim is usable");
}

/// `KILL QUERY ID n` names a query id: passed to the server as written, never read as a
/// connection (the proxy id of a live session must not be turned into its thread id).
#[tokio::test]
async fn kill_query_id_names_a_query_and_is_not_mapped() {
    let proxy = TestProxy::start(&[shared_pair()[0].tcp_addr()]);
    let mut victim = login(&proxy).await;
    let mut killer = login(&proxy).await;
    start_sleeping(&mut victim, "kill-query-id").await;
    killer
        .send_raw(&query_packet(&format!(
            "KILL QUERY ID {}",
            victim.connection_id
        )))
        .await
        .unwrap();
    let err = killer
        .read_ok()
        .await
        .expect_err("no query has that id on the server");
    assert!(
        err.starts_with("1957"),
        "the server's unknown query id: {err}"
    );
    killer.ping().await.expect("the killer is still in sync");
    assert!(
        running_on_shared_backends("kill-query-id"),
        "the victim's query still runs"
    );
}
