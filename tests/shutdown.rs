//! Graceful shutdown against real MariaDB: in-flight commands finish, sessions close only between
//! commands, no new clients are taken.

mod common;

use std::time::{Duration, Instant};

use common::mariadb::shared_pair;
use common::proxy::TestProxy;
use common::rawclient::RawClient;

const COM_QUERY: u8 = 0x03;

fn proxy() -> TestProxy {
    let pair = shared_pair();
    TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()])
}

async fn login(proxy: &TestProxy) -> RawClient {
    RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", Some("test"), 0, 0)
        .await
        .expect("login through the proxy")
}

/// Waits until some backend is executing `needle` (seen in its process list).
fn wait_until_running(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let running = shared_pair().iter().any(|db| {
            db.root_query("SELECT INFO FROM information_schema.PROCESSLIST")
                .contains(needle)
        });
        if running {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{needle} never started on a backend"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Outcome of one query while the proxy shuts down.
enum Outcome {
    Rows(usize),
    /// The connection closed before any byte of the response: between commands.
    ClosedBefore,
}

/// Reads one text result set. A close after part of the response is a truncated result: panic.
async fn read_result(c: &mut RawClient) -> Outcome {
    let Ok((_, first)) = c.read_packet().await else {
        return Outcome::ClosedBefore;
    };
    assert_ne!(first.first(), Some(&0xFF), "query failed: {first:02x?}");
    let columns = usize::from(first[0]);
    let mut rows = 0;
    let mut eofs = 0;
    loop {
        let (_, p) = c
            .read_packet()
            .await
            .unwrap_or_else(|e| panic!("truncated result after {rows} rows: {e}"));
        if p.first() == Some(&0xFE) && p.len() < 9 {
            eofs += 1;
            if eofs == 2 {
                return Outcome::Rows(rows);
            }
        } else if eofs == 1 {
            rows += 1;
        } else {
            assert!(columns > 0);
        }
    }
}

#[tokio::test]
async fn in_flight_query_finishes_then_sessions_close_and_no_new_client_is_taken() {
    let proxy = proxy();
    let mut busy = login(&proxy).await;
    let mut idle = login(&proxy).await;
    let sql = "SELECT SLEEP(1), 'drain-marker-1'";
    busy.send_command(COM_QUERY, sql.as_bytes()).await.unwrap();
    wait_until_running("drain-marker-1");
    let started = Instant::now();
    proxy.begin_shutdown();

    match read_result(&mut busy).await {
        Outcome::Rows(n) => assert_eq!(n, 1, "the in-flight query's whole result"),
        Outcome::ClosedBefore => panic!("an in-flight query was cut off by the shutdown"),
    }
    assert!(
        busy.read_packet().await.is_err(),
        "after its last command the session is closed"
    );
    assert!(idle.read_packet().await.is_err(), "idle session closed");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "idle sessions close promptly, not at the deadline: {:?}",
        started.elapsed()
    );
    let new_client =
        RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0).await;
    assert!(new_client.is_err(), "no new client after shutdown began");
}

#[tokio::test]
async fn busy_clients_see_whole_results_or_a_close_between_commands() {
    let proxy = proxy();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut c = login(&proxy).await;
        tasks.push(tokio::spawn(async move {
            let mut whole = 0u32;
            for _ in 0..100_000 {
                if c.send_command(COM_QUERY, b"SELECT seq FROM seq_1_to_300")
                    .await
                    .is_err()
                {
                    break;
                }
                match read_result(&mut c).await {
                    Outcome::Rows(n) => {
                        assert_eq!(n, 300, "every result is whole");
                        whole += 1;
                    }
                    Outcome::ClosedBefore => break,
                }
            }
            whole
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.begin_shutdown();
    let deadline = Duration::from_secs(10);
    for t in tasks {
        let whole = tokio::time::timeout(deadline, t)
            .await
            .expect("every session ends soon after shutdown")
            .expect("no truncated result");
        assert!(whole > 0, "the load ran before the shutdown");
    }
}
