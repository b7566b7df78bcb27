//! What relaying costs in memory: buffers grow for a bulk transfer and give the memory back once
//! the session goes quiet; a client that stops reading holds the proxy's memory bounded; a client
//! that pipelines megabytes without reading is still answered. The proxy runs as its own process
//! (so the test's memory does not count) in front of real MariaDB.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::mariadb::{scratch_dir, shared_pair, tcp_opts, MariaDb};
use common::mariadb::{BENCH_PASS, BENCH_USER};
use common::proxy::TestProxy;
use common::rawclient::RawClient;
use mysql_async::prelude::Queryable;
use mysql_async::{Compression, Conn, OptsBuilder};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

const COM_QUERY: u8 = 0x03;

fn proxy_in_front_of(backend: &str) -> (Daemon, u16) {
    proxy_with(backend, &[])
}

fn proxy_with(backend: &str, extra: &[String]) -> (Daemon, u16) {
    let mut args = vec![
        "--proxy-address=127.0.0.1:0".to_owned(),
        format!("--proxy-backend-addresses={backend}"),
        "--admin-address=off".to_owned(),
        // Warnings only, but for the listener announcement that says which port it bound.
        "--log-level=warn,mysql_lb::proxy::server=info".to_owned(),
    ];
    args.extend_from_slice(extra);
    let mut daemon = Daemon::start(&args, None);
    let port = daemon.proxy_addr().port();
    (daemon, port)
}

async fn login(port: u16) -> RawClient {
    RawClient::connect_tcp(&format!("127.0.0.1:{port}"), "bench", "bench", None, 0, 0)
        .await
        .expect("login through the proxy")
}

/// Runs `sql` and reads its one result set, dropping the rows; returns the payload bytes read.
async fn query_discarding(c: &mut RawClient, sql: &str) -> usize {
    c.send_command(COM_QUERY, sql.as_bytes()).await.unwrap();
    let mut bytes = 0;
    // Column count and definitions up to their EOF, then rows up to theirs (no DEPRECATE_EOF).
    for _ in 0..2 {
        for (_, p) in c.read_until_eof_or_err().await.expect("a result set") {
            assert_ne!(p.first(), Some(&0xFF), "an error: {p:02x?}");
            bytes += p.len();
        }
    }
    bytes
}

/// Samples the daemon's RSS every 100 ms until it has not changed for `steady` (at most 30 s);
/// returns it.
fn wait_until_steady(daemon: &mut Daemon, steady: Duration) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = daemon.rss_kib();
    let mut since = Instant::now();
    while since.elapsed() < steady && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let rss = daemon.rss_kib();
        if rss != last {
            (last, since) = (rss, Instant::now());
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_moved_large_results_give_their_buffers_back_once_idle() {
    const SESSIONS: usize = 1000;
    const PARALLEL: usize = 8;
    // Each session moves a 20 MiB result (packets of 16 MiB and more), which grows both its
    // buffers to the maximum; about 45 s on the 2-core test VM when it is otherwise idle.
    const RESULT: usize = 20 << 20;
    let db = MariaDb::start_with_args("relay-memory", &["--max-connections=1200"]);
    let (mut daemon, port) = proxy_in_front_of(&db.tcp_addr());
    // One session first, so what every process sets up once (thread arenas, lazy statics) is in
    // the baseline.
    let mut warm = login(port).await;
    query_discarding(&mut warm, "SELECT 1").await;
    warm.quit().await.unwrap();
    let before = daemon.rss_kib();

    let mut sessions = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        sessions.push(login(port).await);
    }
    let idle = daemon.rss_kib();
    let started = Instant::now();
    let mut running = JoinSet::new();
    let mut done = Vec::with_capacity(SESSIONS);
    for mut c in sessions {
        if running.len() == PARALLEL {
            done.push(running.join_next().await.unwrap().unwrap());
        }
        running.spawn(async move {
            let n = query_discarding(&mut c, &format!("SELECT REPEAT('x', {RESULT})")).await;
            assert!(n > RESULT, "the whole result came: {n} bytes");
            c
        });
    }
    while let Some(c) = running.join_next().await {
        done.push(c.unwrap());
    }
    let moved = started.elapsed();
    let after_results = daemon.rss_kib();
    let bound = before + (SESSIONS as u64) * 32;
    // Buffers go back after a second without reads: wait for the RSS to stop falling.
    let settled = wait_until_steady(&mut daemon, Duration::from_secs(2));
    let per_session = |rss: u64| rss.saturating_sub(before) as f64 / SESSIONS as f64;
    eprintln!(
        "proxy RSS: before {before} KiB; {SESSIONS} idle sessions {idle} KiB ({:.1} KiB each); \
         right after the results ({moved:?}) {after_results} KiB ({:.1} KiB each); \
         once quiet {settled} KiB ({:.1} KiB each)",
        per_session(idle),
        per_session(after_results),
        per_session(settled),
    );
    assert!(
        settled <= bound,
        "idle sessions came back to within 32 KiB each of the RSS before they connected: \
         {settled} KiB > {bound} KiB"
    );
    // Still usable.
    for c in done.iter_mut().take(10) {
        c.ping().await.unwrap();
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_holds_the_proxy_memory_bounded() {
    let (mut daemon, port) = proxy_in_front_of(&shared_pair()[0].tcp_addr());
    let mut c = login(port).await;
    query_discarding(&mut c, "SELECT 1").await;
    let before = daemon.rss_kib();
    // 200 rows of 1 MiB: 200 MiB, far more than any buffer between the server and the client.
    c.send_command(
        COM_QUERY,
        b"SELECT REPEAT('x', 1048576) FROM test.seq_1_to_200",
    )
    .await
    .unwrap();
    let (_, count) = c.read_packet().await.expect("the column count");
    assert_eq!(count, [1], "one column");
    // The client reads no more: once every buffer on the way is full, the proxy's RSS stops
    // changing; it must not have grown with the result.
    let stalled = wait_until_steady(&mut daemon, Duration::from_secs(1));
    eprintln!("proxy RSS: before {before} KiB, stalled reader {stalled} KiB");
    assert!(
        stalled < before + 8 * 1024,
        "a stalled reader grew the proxy by {} KiB",
        stalled.saturating_sub(before)
    );
    // Resumed, the client gets the whole result and the session goes on.
    let mut rows = 0;
    let mut packets = c.read_until_eof_or_err().await.unwrap(); // definitions, EOF
    assert_ne!(packets.pop().unwrap().1.first(), Some(&0xFF));
    for (_, p) in c.read_until_eof_or_err().await.unwrap() {
        assert_ne!(p.first(), Some(&0xFF), "an error: {p:02x?}");
        rows += usize::from(p.len() > 1 << 20);
    }
    assert_eq!(rows, 200, "every row arrived");
    c.ping().await.expect("the session goes on");
}

#[tokio::test]
async fn a_client_pipelining_megabytes_without_reading_is_answered_in_full() {
    const QUERIES: usize = 2000;
    let proxy = TestProxy::start(&[shared_pair()[0].tcp_addr()]);
    let mut c = RawClient::connect_tcp(&proxy.addr_string(), "bench", "bench", None, 0, 0)
        .await
        .expect("login");
    // 2000 commands of 2 KiB (4 MiB) whose answers are small OKs, written before any is read.
    let sql = format!("DO 1 /* {} */", "p".repeat(2040));
    let mut batch = Vec::with_capacity(QUERIES * (sql.len() + 5));
    for _ in 0..QUERIES {
        batch.extend_from_slice(&((sql.len() + 1) as u32).to_le_bytes()[..3]);
        batch.push(0);
        batch.push(COM_QUERY);
        batch.extend_from_slice(sql.as_bytes());
    }
    tokio::time::timeout(Duration::from_secs(60), c.send_raw(&batch))
        .await
        .expect("the proxy took the whole batch while nobody read the answers")
        .unwrap();
    for i in 0..QUERIES {
        c.read_ok()
            .await
            .unwrap_or_else(|e| panic!("answer {i} of {QUERIES}: {e}"));
    }
    c.ping().await.expect("in sync after the batch");
}

/// A compressed client leg (and, with `backend_compression`, a compressed backend leg too)
/// reading 16 MiB values: what the proxy's peak RSS grows by, in KiB per session in flight.
/// `sessions` sessions are open, `IN_FLIGHT` of them reading at any moment (more would only
/// measure MariaDB, which holds each value twice while it sends it, and the client, which holds
/// it once).
async fn peak_per_compressed_session_reading_16_mib(
    backend_compression: bool,
    sessions: usize,
) -> u64 {
    const IN_FLIGHT: usize = 40;
    const VALUE: usize = 16 << 20;
    let db = &shared_pair()[0];
    let mut extra = Vec::new();
    if backend_compression {
        let path = scratch_dir("compress-memory").join("backend-compression.yaml");
        std::fs::write(&path, "backend_compression: true\n").unwrap();
        extra.push(format!("--config={}", path.display()));
    }
    let (mut daemon, port) = proxy_with(&db.tcp_addr(), &extra);
    let opts = OptsBuilder::from_opts(tcp_opts(
        &format!("127.0.0.1:{port}"),
        BENCH_USER,
        BENCH_PASS,
    ))
    .compression(Compression::default())
    .max_allowed_packet(Some(64 << 20));
    let expected = Arc::new(vec![b'x'; VALUE]);
    let read_value = |mut c: Conn, expected: Arc<Vec<u8>>| async move {
        let sql = format!("SELECT REPEAT('x', {VALUE})");
        let v: Vec<u8> = c.query_first(sql).await.unwrap().expect("a row");
        assert!(v == *expected, "the value came intact ({} bytes)", v.len());
        let backend: Option<(String, String)> = c
            .query_first("SHOW SESSION STATUS LIKE 'Compression'")
            .await
            .unwrap();
        c.disconnect().await.unwrap();
        backend.map(|r| r.1)
    };
    // One value first, so what the process sets up once (allocator arenas, the first zlib
    // states) is in the baseline.
    let warm = read_value(Conn::new(opts.clone()).await.unwrap(), expected.clone()).await;
    let want = if backend_compression { "ON" } else { "OFF" };
    assert_eq!(warm.as_deref(), Some(want), "the backend leg's compression");
    let mut open = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        open.push(Conn::new(opts.clone()).await.unwrap());
    }
    let opened = daemon.rss_kib();
    let started = Instant::now();
    let turns = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut running = JoinSet::new();
    for c in open {
        let turns = turns.clone();
        let expected = expected.clone();
        running.spawn(async move {
            let _turn = turns.acquire().await.unwrap();
            read_value(c, expected).await
        });
    }
    while let Some(r) = running.join_next().await {
        assert_eq!(r.unwrap().as_deref(), Some(want));
    }
    let peak = daemon.status_kib("VmHWM:");
    let per_session = peak.saturating_sub(opened) / IN_FLIGHT as u64;
    eprintln!(
        "backend_compression={backend_compression}: {sessions} sessions read {} MiB each in \
         {:?}; proxy RSS with them open {opened} KiB, peak {peak} KiB: {per_session} KiB per \
         session in flight",
        VALUE >> 20,
        started.elapsed()
    );
    per_session
}

/// What one session in flight may add to the proxy's peak RSS while it moves a 16 MiB value
/// through a compressed client leg: what a plain session's relay buffers grow to (measured
/// ~260 KiB) plus a deflate state (261 KiB) and the frame being made; measured 850-890 KiB
/// with 200 sessions (a whole packet held, as before, was ~30 MiB).
const COMPRESSED_SESSION_KIB: u64 = 1024;
/// The same with the backend leg compressed too, over 100 sessions; measured ~490 KiB.
const BOTH_LEGS_SESSION_KIB: u64 = 768;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_client_legs_reading_16_mib_values_hold_bounded_memory() {
    let per_session = peak_per_compressed_session_reading_16_mib(false, 200).await;
    assert!(
        per_session <= COMPRESSED_SESSION_KIB,
        "a compressed client leg reading a 16 MiB value grew the proxy by {per_session} KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_legs_on_both_sides_reading_16_mib_values_hold_bounded_memory() {
    // Fewer sessions: MariaDB compresses every value too, which costs most of the run time.
    let per_session = peak_per_compressed_session_reading_16_mib(true, 100).await;
    assert!(
        per_session <= BOTH_LEGS_SESSION_KIB,
        "compressed legs reading a 16 MiB value grew the proxy by {per_session} KiB"
    );
}
