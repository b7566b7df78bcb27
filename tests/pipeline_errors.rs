//! A protocol error in the middle of a pipelined read: the commands before the bad packet ran,
//! so each gets its own answer; the proxy's ERR comes in the bad packet's place, then the close
//! (real MariaDB behind the proxy, raw client).

mod common;

use common::mariadb::shared_pair;
use common::proxy::{config, TestProxy};
use common::rawclient::{parse_err, RawClient};

fn query_packet(sql: &str) -> Vec<u8> {
    let mut p = vec![(sql.len() + 1) as u8, 0, 0, 0, 0x03];
    p.extend_from_slice(sql.as_bytes());
    p
}

async fn pipeline_then(bad: &[u8], expected_code: &str) {
    let mut cfg = config(&[shared_pair()[0].tcp_addr()]);
    cfg.max_packet_size = 1024;
    let proxy = TestProxy::start_with(cfg);
    let mut c = RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0)
        .await
        .expect("login");
    let batch = [
        query_packet("SELECT 1"),
        query_packet("SELECT 2"),
        bad.to_vec(),
    ]
    .concat();
    c.send_raw(&batch).await.unwrap();
    for n in ["1", "2"] {
        let rows = c
            .read_results()
            .await
            .unwrap_or_else(|e| panic!("SELECT {n} ran, so it gets its own result: {e}"));
        assert_eq!(rows[0][0][0].as_deref(), Some(n));
    }
    let (seq, err) = c.read_packet().await.expect("the proxy's ERR");
    assert_eq!(err.first(), Some(&0xFF), "an ERR: {err:02x?}");
    let message = parse_err(&err);
    assert!(message.starts_with(expected_code), "{message}");
    assert!(message.contains("mysql-lb"), "{message}");
    assert_eq!(seq, 1, "sequenced as the answer to the bad packet");
    assert!(c.read_packet().await.is_err(), "then the close");
}

#[tokio::test]
async fn an_oversized_packet_after_pipelined_queries_is_answered_after_their_results() {
    // Header of a 2000-byte command (over max_packet_size) and the start of its payload.
    let mut bad = vec![0xD0, 0x07, 0, 0, 0x03];
    bad.extend_from_slice(&[b'x'; 100]);
    pipeline_then(&bad, "1153").await;
}

#[tokio::test]
async fn an_out_of_order_packet_after_pipelined_queries_is_answered_after_their_results() {
    let mut bad = query_packet("SELECT 3");
    bad[3] = 5;
    pipeline_then(&bad, "1156").await;
}
