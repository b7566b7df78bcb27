//! Failures on either side of mysql-lb: backends that are down, die, or misbehave, and clients
//! that overstay, oversize or vanish. Each test checks what the affected client is told (code,
//! sequence id, SQLSTATE marker, `mysql-lb:` prefix), that it is not left hanging, and that
//! nobody else is disturbed.

mod common;
#[path = "common/fakebackend.rs"]
mod fakebackend;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::mariadb::{closed_port, shared_pair, start_dedicated, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::{read_raw_packet, RawClient};
use fakebackend::{Behaviour, FakeBackend};
use mysql_async::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a client may wait for the proxy's answer before we call it a hang.
const PROMPT: Duration = Duration::from_secs(10);

/// An ERR packet as it came off the wire.
#[derive(Debug)]
struct WireErr {
    seq: u8,
    code: u16,
    /// The 5 characters after a `#` marker, when there is one.
    sqlstate: Option<String>,
    message: String,
}

fn parse_wire_err(seq: u8, payload: &[u8]) -> WireErr {
    let [0xFF, lo, hi, rest @ ..] = payload else {
        panic!("expected an ERR packet, got {payload:02x?}");
    };
    let (sqlstate, msg) = match rest {
        [b'#', state @ ..] if state.len() >= 5 => (
            Some(String::from_utf8_lossy(&state[..5]).into_owned()),
            &state[5..],
        ),
        _ => (None, rest),
    };
    WireErr {
        seq,
        code: u16::from_le_bytes([*lo, *hi]),
        sqlstate,
        message: String::from_utf8_lossy(msg).into_owned(),
    }
}

async fn read_wire_err(stream: &mut TcpStream) -> WireErr {
    let (seq, payload) = read_raw_packet(stream).await;
    parse_wire_err(seq, &payload)
}

/// The proxy closed the connection: a read returns end-of-file promptly.
async fn expect_eof(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(PROMPT, stream.read(&mut buf)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => panic!("expected EOF, got {n} more bytes: {:02x?}", &buf[..n]),
        Ok(Err(e)) => panic!("expected a clean EOF, got {e}"),
        Err(_) => panic!("connection still open after {PROMPT:?}"),
    }
}

/// Connects and returns the greeting's payload (panics on an ERR instead).
async fn connect_greeted(addr: &str) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the proxy");
    let (seq, greeting) = read_raw_packet(&mut stream).await;
    assert_eq!(seq, 0);
    assert!(
        greeting.starts_with(&[10]),
        "not a greeting: {greeting:02x?}"
    );
    (stream, greeting)
}

fn server_error(e: &mysql_async::Error) -> Option<(u16, String)> {
    match e {
        mysql_async::Error::Server(s) => Some((s.code, s.message.clone())),
        _ => None,
    }
}

async fn port_via(proxy: &TestProxy) -> Result<u16, mysql_async::Error> {
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS)).await?;
    let port: Option<u16> = conn.query_first("SELECT @@port").await?;
    conn.disconnect().await?;
    Ok(port.expect("@@port has a value"))
}

fn active_sessions(proxy: &TestProxy) -> usize {
    proxy
        .state
        .backends()
        .backends()
        .iter()
        .map(|b| b.active())
        .sum()
}

/// Polls until no session holds a backend (every lease dropped), or panics.
async fn wait_no_active_sessions(proxy: &TestProxy) {
    let deadline = Instant::now() + PROMPT;
    while active_sessions(proxy) != 0 {
        assert!(
            Instant::now() < deadline,
            "{} sessions still active after {PROMPT:?}",
            active_sessions(proxy)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One of two dedicated backends is stopped: every new client goes to the live one; once the
/// stopped one is restarted, clients reach it again — brought back by the cool-off expiring
/// when health checks are off, by passing health checks when they run.
async fn stopped_backend_is_skipped_then_rejoins(health_checks: bool) {
    let tag = if health_checks { "hc" } else { "cool" };
    let names = [format!("down-{tag}-a"), format!("down-{tag}-b")];
    let mut dbs = tokio::task::block_in_place(|| start_dedicated(&[&names[0], &names[1]]));
    let mut cfg = config(&[dbs[0].tcp_addr(), dbs[1].tcp_addr()]);
    cfg.down_cooloff = Duration::from_secs(1);
    cfg.health_check.interval = if health_checks {
        Duration::from_millis(500)
    } else {
        Duration::ZERO
    };
    let proxy = TestProxy::start_with(cfg);
    let (live, stopped) = (dbs[0].port, dbs[1].port);

    tokio::task::block_in_place(|| dbs[1].stop());
    for i in 0..20 {
        let port = port_via(&proxy)
            .await
            .unwrap_or_else(|e| panic!("connect {i} with one backend down: {e}"));
        assert_eq!(
            port, live,
            "connect {i} reached the stopped backend's port?"
        );
    }

    tokio::task::block_in_place(|| dbs[1].restart());
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(20);
    let mut seen: HashMap<u16, usize> = HashMap::new();
    loop {
        let port = port_via(&proxy).await.expect("connect after the restart");
        *seen.entry(port).or_default() += 1;
        if port == stopped {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restarted backend not reached within 20 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "health checks {}: restarted backend back in rotation {:?} after its restart",
        if health_checks { "on" } else { "off" },
        restarted.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_backend_is_skipped_then_rejoins_after_cooloff() {
    stopped_backend_is_skipped_then_rejoins(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_backend_is_skipped_then_rejoins_after_health_checks() {
    stopped_backend_is_skipped_then_rejoins(true).await;
}

#[tokio::test]
async fn all_backends_down_gets_1105_naming_each_before_the_greeting() {
    // A stopped server's port refuses connections; so does a port nobody listens on.
    let dir = tempfile::tempdir().unwrap();
    let missing_socket = dir.path().join("gone.sock");
    let closed = closed_port();
    let tcp_backend = closed.address();
    let backends = [tcp_backend.clone(), missing_socket.display().to_string()];
    let proxy = TestProxy::start(&backends);

    for attempt in 0..2 {
        // The second attempt finds both cooling off: they must still be tried and named.
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        let err = read_wire_err(&mut stream).await;
        assert_eq!(err.seq, 0, "attempt {attempt}: {err:?}");
        assert_eq!(err.code, 1105, "attempt {attempt}: {err:?}");
        assert_eq!(
            err.sqlstate, None,
            "no '#' marker before the greeting: {err:?}"
        );
        assert!(
            err.message.starts_with("mysql-lb: all backends are down"),
            "{err:?}"
        );
        for b in &backends {
            assert!(err.message.contains(b.as_str()), "{b} not named: {err:?}");
        }
        expect_eof(&mut stream).await;
    }

    let e = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect_err("login must fail");
    let (code, message) = server_error(&e).unwrap_or_else(|| panic!("not a server error: {e}"));
    assert_eq!(code, 1105, "{message}");
    assert!(
        message.starts_with("mysql-lb: all backends are down"),
        "{message}"
    );
}

#[tokio::test]
async fn past_max_connections_gets_1040_and_held_sessions_keep_working() {
    let pair = shared_pair();
    let mut cfg = config(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    cfg.max_connections = 3;
    let proxy = TestProxy::start_with(cfg);

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
                .await
                .expect("within max_connections"),
        );
    }

    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let err = read_wire_err(&mut stream).await;
    assert_eq!(err.seq, 0, "{err:?}");
    assert_eq!(err.code, 1040, "{err:?}");
    assert_eq!(
        err.sqlstate, None,
        "no '#' marker before the greeting: {err:?}"
    );
    assert!(err.message.starts_with("mysql-lb: "), "{err:?}");
    assert!(err.message.contains("Too many connections"), "{err:?}");
    expect_eof(&mut stream).await;

    let e = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect_err("the 4th login must be refused");
    assert_eq!(server_error(&e).map(|(c, _)| c), Some(1040), "{e}");

    for conn in &mut held {
        let one: Option<u8> = conn.query_first("SELECT 1").await.expect("held session");
        assert_eq!(one, Some(1));
    }

    held.pop().unwrap().disconnect().await.unwrap();
    let deadline = Instant::now() + PROMPT;
    let mut conn = loop {
        match mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS)).await {
            Ok(c) => break c,
            Err(e) => {
                assert_eq!(server_error(&e).map(|(c, _)| c), Some(1040), "{e}");
                assert!(Instant::now() < deadline, "no slot freed within {PROMPT:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let one: Option<u8> = conn.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    conn.disconnect().await.unwrap();
    for conn in held {
        conn.disconnect().await.unwrap();
    }
}

#[tokio::test]
async fn handshake_packet_over_the_limit_gets_1043_and_close() {
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr()]);
    let (mut stream, _) = connect_greeted(&proxy.addr_string()).await;
    stream.write_all(&[0xFF, 0xFF, 0xFF, 0x01]).await.unwrap();
    let err = read_wire_err(&mut stream).await;
    assert_eq!(err.seq, 2, "{err:?}");
    assert_eq!(err.code, 1043, "{err:?}");
    assert!(err.message.starts_with("mysql-lb: "), "{err:?}");
    expect_eof(&mut stream).await;
    wait_no_active_sessions(&proxy).await;
    assert_eq!(port_via(&proxy).await.unwrap(), pair[0].port);
}

#[tokio::test]
async fn oversized_command_packet_gets_1153_and_only_that_session_closes() {
    let pair = shared_pair();
    let mut cfg = config(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    cfg.max_packet_size = 1 << 20;
    let proxy = TestProxy::start_with(cfg);
    let mut bystander = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();

    // Only the header and a little of the 2 MiB payload: nothing is left unread by the proxy.
    let mut raw = RawClient::connect_tcp(&proxy.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .unwrap();
    let len: u32 = 2 << 20;
    let mut bytes = len.to_le_bytes()[..3].to_vec();
    bytes.extend_from_slice(&[0, 0x03]);
    bytes.extend_from_slice(b"SELECT '");
    raw.send_raw(&bytes).await.unwrap();
    let (seq, payload) = raw.read_packet().await.expect("an ERR packet");
    let err = parse_wire_err(seq, &payload);
    assert_eq!(err.seq, 1, "{err:?}");
    assert_eq!(err.code, 1153, "{err:?}");
    assert_eq!(err.sqlstate.as_deref(), Some("08S01"), "{err:?}");
    assert!(err.message.starts_with("mysql-lb: "), "{err:?}");
    assert!(
        raw.read_packet().await.is_err(),
        "the session must be closed"
    );

    let one: Option<u8> = bystander.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1), "a session opened before is unaffected");
    bystander.disconnect().await.unwrap();
}

/// mysql_async writes a whole query before it reads, so with a 2 MiB query the proxy's 1153
/// races the client's write: the proxy closes with the rest of the packet unread, which resets
/// the connection, and a client still writing then sees a broken pipe instead of the ERR.
/// MariaDB behaves alike (it skips only about max_allowed_packet more bytes before closing, and
/// at twice the limit resets about half the time). Either way the query must fail promptly,
/// with the proxy's own 1153 when it gets through, the session must be gone and the others fine.
#[tokio::test]
async fn oversized_query_from_mysql_async_fails_promptly_and_alone() {
    const LIMIT: usize = 1 << 20;
    const ROUNDS: usize = 3;
    let sql = format!("SELECT LENGTH('{}')", "x".repeat(2 * LIMIT));
    let pair = shared_pair();
    let mut cfg = config(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    cfg.max_packet_size = LIMIT as u64;
    let proxy = TestProxy::start_with(cfg);
    let mut bystander = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..ROUNDS {
        let mut big = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
            .await
            .unwrap();
        let e = tokio::time::timeout(PROMPT, big.query_drop(sql.as_str()))
            .await
            .expect("an answer, not a hang")
            .expect_err("the oversized query must fail");
        match &e {
            mysql_async::Error::Server(s) => {
                assert_eq!(s.code, 1153, "{e}");
                assert!(s.message.starts_with("mysql-lb: "), "{e}");
            }
            mysql_async::Error::Io(_) => {}
            other => panic!("neither the proxy's 1153 nor a closed connection: {other}"),
        }
        outcomes.push(e.to_string());
        let again = tokio::time::timeout(PROMPT, big.query_drop("SELECT 1"))
            .await
            .expect("an answer, not a hang");
        assert!(again.is_err(), "the session must be closed after 1153");
    }
    println!("oversized query outcomes: {outcomes:#?}");
    let one: Option<u8> = bystander.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1), "a session opened before is unaffected");
    bystander.disconnect().await.unwrap();
}

#[tokio::test]
async fn handshake_timeout_closes_silent_and_leaving_clients() {
    let pair = shared_pair();
    let mut cfg = config(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    cfg.handshake_timeout = Duration::from_secs(1);
    let proxy = TestProxy::start_with(cfg);

    // Leaves right after the greeting.
    let (stream, _) = connect_greeted(&proxy.addr_string()).await;
    drop(stream);

    // Stays silent after the greeting.
    let (mut silent, _) = connect_greeted(&proxy.addr_string()).await;
    let started = Instant::now();
    expect_eof(&mut silent).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_secs(5),
        "closed after {waited:?}, expected about 1 s"
    );

    // Sends half a packet header and stops.
    let (mut half, _) = connect_greeted(&proxy.addr_string()).await;
    half.write_all(&[0x20, 0x00]).await.unwrap();
    expect_eof(&mut half).await;

    wait_no_active_sessions(&proxy).await;
    for _ in 0..2 {
        port_via(&proxy).await.expect("the proxy still serves");
    }
}

/// `n` clients in a row all land on `port`: the bad backend in front of it is skipped each time.
async fn all_land_on(proxy: &TestProxy, port: u16, n: usize) {
    for i in 0..n {
        let got = port_via(proxy)
            .await
            .unwrap_or_else(|e| panic!("connect {i}: {e}"));
        assert_eq!(got, port, "connect {i}");
    }
}

/// What a client of `proxy` gets before any greeting: one ERR with sequence id 0 and no SQLSTATE
/// marker, then EOF.
async fn error_before_greeting(proxy: &TestProxy) -> WireErr {
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let err = read_wire_err(&mut stream).await;
    assert_eq!((err.seq, err.sqlstate.as_deref()), (0, None), "{err:?}");
    assert!(err.message.starts_with("mysql-lb: "), "{err:?}");
    expect_eof(&mut stream).await;
    err
}

#[tokio::test]
async fn garbage_greeting_backend_is_skipped_or_reported() {
    let fake = FakeBackend::start(Behaviour::Garbage);
    let pair = shared_pair();
    let mut cfg = config(&[fake.addr_string(), pair[0].tcp_addr()]);
    // No cool-off: every connect tries the garbage backend again.
    cfg.down_cooloff = Duration::ZERO;
    let proxy = TestProxy::start_with(cfg);
    all_land_on(&proxy, pair[0].port, 4).await;
    assert!(fake.accepted() >= 1, "the garbage backend was never tried");

    let err = error_before_greeting(&TestProxy::start(&[fake.addr_string()])).await;
    assert_eq!(err.code, 1105, "{err:?}");
    assert!(
        err.message.starts_with("mysql-lb: all backends are down"),
        "{err:?}"
    );
    assert!(err.message.contains(&fake.addr_string()), "{err:?}");
}

#[tokio::test]
async fn hung_backend_is_skipped_after_the_connect_timeout() {
    let hung = FakeBackend::start(Behaviour::Silent);
    let pair = shared_pair();
    let mut cfg = config(&[hung.addr_string(), pair[0].tcp_addr()]);
    cfg.connect_timeout = Duration::from_millis(500);
    let proxy = TestProxy::start_with(cfg);
    let started = Instant::now();
    all_land_on(&proxy, pair[0].port, 2).await;
    assert!(hung.accepted() >= 1, "the hung backend was never tried");
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());

    let mut cfg = config(&[hung.addr_string()]);
    cfg.connect_timeout = Duration::from_millis(500);
    let err = error_before_greeting(&TestProxy::start_with(cfg)).await;
    assert_eq!(err.code, 1105, "{err:?}");
    assert!(err.message.contains(&hung.addr_string()), "{err:?}");
    assert!(err.message.contains("no greeting within 500ms"), "{err:?}");
}

#[tokio::test]
async fn backend_refusing_with_its_own_err_is_skipped_and_named() {
    let full = FakeBackend::start(Behaviour::TooManyConnections);
    let pair = shared_pair();
    let proxy = TestProxy::start(&[full.addr_string(), pair[0].tcp_addr()]);
    all_land_on(&proxy, pair[0].port, 4).await;
    assert!(full.accepted() >= 1, "the full backend was never tried");

    let alone = TestProxy::start(&[full.addr_string()]);
    let err = error_before_greeting(&alone).await;
    assert!(err.message.contains(&full.addr_string()), "{err:?}");
    assert!(
        err.message.contains("1040") && err.message.contains("Too many connections"),
        "the server's own reason is passed on: {err:?}"
    );
    // A full server is up: the client is not told that every backend is down, and the backend
    // stays in rotation.
    assert!(
        err.message
            .starts_with("mysql-lb: every backend refused the connection (none is down)"),
        "{err:?}"
    );
    let (status, body) = alone.admin_get("/backends");
    assert_eq!(status, 200);
    assert!(
        body.contains("\"state\":\"up\""),
        "still in rotation: {body}"
    );
}

/// Connects to `proxy` and sends a native-password handshake response for "anyone".
async fn send_login(proxy: &TestProxy) -> TcpStream {
    let (mut stream, greeting) = connect_greeted(&proxy.addr_string()).await;
    let greeting = common::rawclient::parse_greeting(&greeting).unwrap();
    assert_eq!(greeting.version, fakebackend::SERVER_VERSION);
    let caps = common::rawclient::CLIENT_PROTOCOL_41
        | common::rawclient::CLIENT_SECURE_CONNECTION
        | common::rawclient::CLIENT_PLUGIN_AUTH;
    let response = common::rawclient::handshake_response(
        caps,
        "anyone",
        &[0x11; 20],
        None,
        "mysql_native_password",
    );
    let mut bytes = u32::try_from(response.len()).unwrap().to_le_bytes()[..3].to_vec();
    bytes.push(1);
    bytes.extend_from_slice(&response);
    stream.write_all(&bytes).await.unwrap();
    stream
}

/// The ERR a client gets when its backend fails during authentication: 1105 in the backend's
/// turn (sequence 2), naming the backend, then EOF.
async fn backend_failure_during_auth(stream: &mut TcpStream, backend: &str) -> WireErr {
    let err = read_wire_err(stream).await;
    assert_eq!(err.seq, 2, "the ERR takes the backend's turn: {err:?}");
    assert_eq!(err.code, 1105, "{err:?}");
    assert_eq!(err.sqlstate.as_deref(), Some("HY000"), "{err:?}");
    assert!(err.message.starts_with("mysql-lb: "), "{err:?}");
    assert!(err.message.contains(backend), "{err:?}");
    expect_eof(stream).await;
    err
}

#[tokio::test]
async fn backend_closing_during_authentication_gets_1105_in_sequence() {
    let fake = FakeBackend::start(Behaviour::CloseDuringAuth);
    let proxy = TestProxy::start(&[fake.addr_string()]);
    let mut stream = send_login(&proxy).await;
    backend_failure_during_auth(&mut stream, &fake.addr_string()).await;
    wait_no_active_sessions(&proxy).await;
}

#[tokio::test]
async fn backend_silent_during_authentication_is_blamed_at_the_handshake_timeout() {
    let fake = FakeBackend::start(Behaviour::SilentDuringAuth);
    let mut cfg = config(&[fake.addr_string()]);
    cfg.handshake_timeout = Duration::from_secs(1);
    let proxy = TestProxy::start_with(cfg);
    let started = Instant::now();
    let mut stream = send_login(&proxy).await;
    let err = backend_failure_during_auth(&mut stream, &fake.addr_string()).await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < PROMPT,
        "answered after {waited:?}, expected about 1 s"
    );
    assert!(err.message.contains("no answer within 1s"), "{err:?}");
    wait_no_active_sessions(&proxy).await;
    let metrics = proxy.state.metrics.render();
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("mysql_lb_client_disconnections_total{reason=\"backend_network\"} 1"),
        "a stuck backend is the backend's failure, not the client's"
    );
}

/// A backend that closes mid-response is passed on as a close, as a lost server is seen directly
/// (drivers classify that as a lost connection; no ERR of ours could look the same to them).
#[tokio::test]
async fn backend_closing_mid_result_gives_the_rows_then_a_close() {
    let fake = FakeBackend::start(Behaviour::Serve);
    let proxy = TestProxy::start(&[fake.addr_string()]);
    let addr = proxy.addr_string();
    let login = || RawClient::connect_tcp(&addr, "anyone", "any", None, 0, 0);
    let mut bystander = login().await.expect("login to the fake");
    let rows = bystander.query_text("SELECT 1").await.unwrap();
    assert_eq!(rows, vec![vec![Some(fakebackend::ROW_VALUE.to_string())]]);

    let mut victim = login().await.expect("login to the fake");
    victim
        .send_command(
            common::rawclient::COM_QUERY,
            fakebackend::PARTIAL.as_bytes(),
        )
        .await
        .unwrap();
    let mut packets = Vec::new();
    let end = loop {
        match tokio::time::timeout(PROMPT, victim.read_packet()).await {
            Ok(Ok((_, payload))) => packets.push(payload),
            Ok(Err(e)) => break e,
            Err(_) => panic!("no close after {PROMPT:?}"),
        }
    };
    println!("after the relayed packets: {end}");
    assert_eq!(
        packets.len(),
        4,
        "count, column, EOF and the row are relayed, then the close (no ERR): {packets:02x?}"
    );

    let rows = bystander.query_text("SELECT 2").await.unwrap();
    assert_eq!(rows.len(), 1, "the other session is unaffected");
    login().await.expect("new sessions still work");
}

/// A server that says why before it closes (its own ERR, e.g. 1927 for KILL CONNECTION): that
/// ERR reaches the client unchanged, with nothing of ours after it.
#[tokio::test]
async fn backend_err_before_its_close_reaches_the_client_unchanged() {
    let fake = FakeBackend::start(Behaviour::Serve);
    let proxy = TestProxy::start(&[fake.addr_string()]);
    let mut victim = RawClient::connect_tcp(&proxy.addr_string(), "anyone", "any", None, 0, 0)
        .await
        .expect("login to the fake");
    victim
        .send_command(
            common::rawclient::COM_QUERY,
            fakebackend::ERR_THEN_CLOSE.as_bytes(),
        )
        .await
        .unwrap();
    let (seq, payload) = victim.read_packet().await.expect("the server's ERR");
    let err = parse_wire_err(seq, &payload);
    assert_eq!(
        (err.seq, err.code, err.sqlstate.as_deref()),
        (1, 1927, Some("70100")),
        "{err:?}"
    );
    assert_eq!(err.message, fakebackend::KILLED_MESSAGE);
    let next = tokio::time::timeout(PROMPT, victim.read_packet())
        .await
        .expect("a close, not a hang");
    assert!(next.is_err(), "nothing after the server's ERR: {next:?}");
}

#[tokio::test]
async fn backend_sequence_error_gets_err_and_close() {
    let fake = FakeBackend::start(Behaviour::Serve);
    let proxy = TestProxy::start(&[fake.addr_string()]);
    let addr = proxy.addr_string();
    let login = || RawClient::connect_tcp(&addr, "anyone", "any", None, 0, 0);
    let mut bystander = login().await.expect("login to the fake");

    let mut victim = login().await.expect("login to the fake");
    victim
        .send_command(
            common::rawclient::COM_QUERY,
            fakebackend::BAD_SEQUENCE.as_bytes(),
        )
        .await
        .unwrap();
    let (seq, payload) = victim.read_packet().await.expect("an ERR, not a hang");
    let err = parse_wire_err(seq, &payload);
    assert_eq!(err.seq, 1, "{err:?}");
    assert!(err.message.starts_with("mysql-lb: "), "{err:?}");
    assert!(err.message.contains("sequence"), "{err:?}");
    assert!(victim.read_packet().await.is_err(), "then the session ends");

    bystander
        .ping()
        .await
        .expect("the other session is unaffected");
    wait_until_sessions(&proxy, 1).await;
}

/// Polls until exactly `n` sessions hold a backend.
async fn wait_until_sessions(proxy: &TestProxy, n: usize) {
    let deadline = Instant::now() + PROMPT;
    while active_sessions(proxy) != n {
        assert!(
            Instant::now() < deadline,
            "{} sessions active, expected {n}",
            active_sessions(proxy)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `KILL` of an idle session on the server, which closes the backend connection (perhaps after an
/// unsolicited ERR 1927): the proxy ends the session and the client's next command fails
/// promptly, without a hang or a misread packet.
#[tokio::test]
async fn idle_session_killed_on_the_server_fails_its_next_command() {
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()]);
    for _ in 0..2 {
        let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
            .await
            .unwrap();
        let (port, id): (u16, u64) = conn
            .query_first("SELECT @@port, CONNECTION_ID()")
            .await
            .unwrap()
            .unwrap();
        let server = pair.iter().find(|db| db.port == port).expect("a pair port");
        let mut admin = mysql_async::Conn::new(server.opts(BENCH_USER, BENCH_PASS))
            .await
            .unwrap();
        admin
            .query_drop(format!("KILL CONNECTION {id}"))
            .await
            .unwrap();
        admin.disconnect().await.unwrap();
        wait_until_sessions(&proxy, 0).await;

        let result = tokio::time::timeout(PROMPT, conn.query_drop("SELECT 1"))
            .await
            .expect("an answer, not a hang");
        let e = result.expect_err("the session was killed");
        println!("after KILL: {e}");
        if let Some((code, message)) = server_error(&e) {
            assert!(
                code == 1927 || message.starts_with("mysql-lb: "),
                "{code}: {message}"
            );
        }
    }
    port_via(&proxy).await.expect("the proxy still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_killed_mid_query_errors_promptly() {
    let mut doomed = tokio::task::block_in_place(|| MariaDb::start("killed"));
    let survivor = &shared_pair()[0];
    let proxy = TestProxy::start(&[doomed.tcp_addr(), survivor.tcp_addr()]);

    // Round robin sends the first client to the first backend; keep trying until one lands there.
    let mut conn = None;
    for _ in 0..4 {
        let mut c = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
            .await
            .unwrap();
        let port: Option<u16> = c.query_first("SELECT @@port").await.unwrap();
        if port == Some(doomed.port) {
            conn = Some(c);
            break;
        }
        c.disconnect().await.unwrap();
    }
    let mut conn = conn.expect("a session on the doomed backend");
    let query = tokio::spawn(async move {
        let r = conn.query_drop("SELECT SLEEP(30)").await;
        (r, Instant::now())
    });

    let deadline = Instant::now() + PROMPT;
    loop {
        let running = tokio::task::block_in_place(|| {
            doomed.root_query(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(30)'",
            )
        });
        if running.trim() == "1" {
            break;
        }
        assert!(Instant::now() < deadline, "the query never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed_at = Instant::now();
    tokio::task::block_in_place(|| doomed.kill9());

    let (result, ended_at) = tokio::time::timeout(PROMPT, query)
        .await
        .expect("the client got an answer within 10 s")
        .unwrap();
    let waited = ended_at.duration_since(killed_at);
    let e = result.expect_err("the query cannot succeed");
    println!("client told after {waited:?}: {e:?}");
    // What mysql_async reports for a crashed server directly: the connection is gone.
    assert!(
        matches!(e, mysql_async::Error::Io(_)),
        "a lost connection, not a server error: {e:?}"
    );

    for i in 0..4 {
        let port = port_via(&proxy)
            .await
            .unwrap_or_else(|e| panic!("connect {i} after the kill: {e}"));
        assert_eq!(port, survivor.port);
    }
}
