//! The compression layer in the client role against a real MariaDB server: the server checks
//! every compressed frame's sequence id and drops the connection on a wrong one ("packets out of
//! order"), so these tests prove the numbering rules where a fake backend could only echo them.
//! A raw client logs in with CLIENT_COMPRESS over plain TCP, then talks through
//! `Compressed<_>` (Role::Client) as mysql-lb will on a compressed backend leg.

mod common;

use bytes::BytesMut;

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::rawclient::{RawClient, Rows, CLIENT_COMPRESS, COM_PING, COM_QUERY};
use mysql_lb::net::stream::compressed::Compressed;
use mysql_lb::wire::protocol::compress::Role;

async fn compressed_client() -> RawClient {
    let client = RawClient::connect_tcp(
        &shared_pair()[0].tcp_addr(),
        BENCH_USER,
        BENCH_PASS,
        Some("test"),
        CLIENT_COMPRESS,
        0,
    )
    .await
    .expect("log in asking for compression");
    assert_ne!(client.server_caps & CLIENT_COMPRESS, 0, "MariaDB offers it");
    assert_ne!(client.caps & CLIENT_COMPRESS, 0);
    client.rewrap(|stream, buffered| {
        Box::new(Compressed::new(
            stream,
            Role::Client,
            BytesMut::from(&buffered[..]),
        ))
    })
}

fn one(rows: &Rows) -> &str {
    rows[0][0].as_deref().expect("a value")
}

#[tokio::test]
async fn queries_and_large_results_go_through_compressed_frames() {
    let mut c = compressed_client().await;
    assert_eq!(one(&c.query_text("SELECT 1").await.unwrap()), "1");
    let rows = c
        .query_text("SELECT seq, REPEAT('row', 20) FROM seq_1_to_20000")
        .await
        .unwrap();
    assert_eq!(rows.len(), 20_000);
    assert_eq!(rows[19_999][0].as_deref(), Some("20000"));
    let big = c.query_text("SELECT REPEAT('x', 3000000)").await.unwrap();
    assert_eq!(one(&big).len(), 3_000_000);
    // A second round: numbering restarted at 0 for each command, or the server would have
    // dropped the connection.
    assert_eq!(one(&c.query_text("SELECT 2").await.unwrap()), "2");
    c.quit().await.unwrap();
}

#[tokio::test]
async fn pipelined_commands_each_start_at_frame_zero() {
    let mut c = compressed_client().await;
    let mut both = Vec::new();
    for payload in [&[COM_PING][..], b"\x03SELECT 7"] {
        both.extend_from_slice(&(payload.len() as u32).to_le_bytes()[..3]);
        both.push(0);
        both.extend_from_slice(payload);
    }
    c.send_raw(&both).await.unwrap();
    c.read_ok().await.expect("the ping's OK");
    let results = c.read_results().await.expect("the query's rows");
    assert_eq!(one(&results[0]), "7");
    c.ping().await.unwrap();
}

#[tokio::test]
async fn multi_statement_results_arrive_whole() {
    let mut c = compressed_client().await;
    let results = c
        .query_results("SELECT 1; SELECT REPEAT('y', 100000); SELECT 3")
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(one(&results[1]).len(), 100_000);
    assert_eq!(one(&results[2]), "3");
}

#[tokio::test]
async fn load_data_local_past_256_packets_and_frames_continues_the_numbering() {
    let mut c = compressed_client().await;
    let table = format!("compress_load_{}", std::process::id());
    c.query_text(&format!(
        "CREATE OR REPLACE TABLE test.{table} (a INT, b VARCHAR(40))"
    ))
    .await
    .unwrap();
    c.send_command(
        COM_QUERY,
        format!(
            "LOAD DATA LOCAL INFILE 'rows.csv' INTO TABLE test.{table} FIELDS TERMINATED BY ','"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (seq, request) = c.read_packet().await.unwrap();
    assert_eq!(request.first(), Some(&0xfb), "{request:02x?}");
    // 600 packets, one write (and so one frame) each but the first two, which share one: inner
    // and frame ids both wrap, one apart, so restarting the frame ids where the inner ids wrap
    // would be caught by the server.
    let packet = |seq: u8, i: u32| {
        let row = format!("{i},row number {i}\n");
        let mut p = (row.len() as u32).to_le_bytes()[..3].to_vec();
        p.push(seq);
        p.extend_from_slice(row.as_bytes());
        p
    };
    let mut first_two = packet(seq.wrapping_add(1), 0);
    first_two.extend(packet(seq.wrapping_add(2), 1));
    c.send_raw(&first_two).await.unwrap();
    let mut seq = seq.wrapping_add(2);
    for i in 2..600u32 {
        seq = seq.wrapping_add(1);
        c.send_raw(&packet(seq, i)).await.unwrap();
    }
    c.send_packet(seq.wrapping_add(1), b"").await.unwrap();
    loop {
        // MariaDB may send progress reports before the OK.
        let (_, reply) = c.read_packet().await.unwrap();
        match reply.first() {
            Some(0x00) => break,
            Some(0xff) if reply.get(1..3) == Some(&[0xff, 0xff][..]) => continue,
            _ => panic!("LOAD DATA failed: {}", common::rawclient::parse_err(&reply)),
        }
    }
    let count = c
        .query_text(&format!("SELECT COUNT(*), SUM(a) FROM test.{table}"))
        .await
        .unwrap();
    assert_eq!(count[0][0].as_deref(), Some("600"));
    assert_eq!(count[0][1].as_deref(), Some("179700"));
    c.query_text(&format!("DROP TABLE test.{table}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_command_of_more_than_16_mib_spans_frames_and_chunks() {
    let mut c = compressed_client().await;
    let literal = "z".repeat(17 << 20);
    let sql = format!("SELECT LENGTH('{literal}')");
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(sql.as_bytes());
    // Every chunk with inner id 0, as Connector/C writes them when compressing: the second
    // chunk is still the same command and must not restart the frame ids.
    let mut bytes = Vec::new();
    for chunk in payload.chunks(0xff_ffff) {
        bytes.extend_from_slice(&(chunk.len() as u32).to_le_bytes()[..3]);
        bytes.push(0);
        bytes.extend_from_slice(chunk);
    }
    c.send_raw(&bytes).await.unwrap();
    let results = c
        .read_results()
        .await
        .expect("an answer, not a dropped connection");
    assert_eq!(one(&results[0]), (17 << 20).to_string());
    assert_eq!(one(&c.query_text("SELECT 5").await.unwrap()), "5");
}
