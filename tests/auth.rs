//! The connection phase through mysql-lb against real MariaDB: the server's own verdicts reach the
//! client unchanged, plugins the proxy knows nothing about (ed25519) and auth switches work because
//! the proxy only relays, unix sockets work on both legs, and a client that cannot speak the
//! handshake gets a clear ERR 1043 from the proxy.

mod common;
#[path = "common/fakebackend.rs"]
mod fakebackend;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::Duration;

use common::mariadb::{shared_pair, MariaDb, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::{
    handshake_response, parse_greeting, read_raw_packet, RawClient, CLIENT_COMPRESS,
    CLIENT_LONG_FLAG, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    CLIENT_TRANSACTIONS, COM_QUERY, COM_QUIT,
};
use mysql_async::prelude::*;
use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use mysql_lb::config::ListenAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROMPT: Duration = Duration::from_secs(10);

fn pair_proxy() -> TestProxy {
    let pair = shared_pair();
    TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()])
}

fn server_error(e: &mysql_async::Error) -> (u16, String, String) {
    match e {
        mysql_async::Error::Server(s) => (s.code, s.message.clone(), s.state.clone()),
        other => panic!("expected a server error, got {other}"),
    }
}

/// The `mariadb` command-line client, which has the client_ed25519 plugin mysql_async lacks here.
fn cli() -> Command {
    let found = ["/usr/bin/mariadb", "/usr/local/bin/mariadb"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join("mariadb"))
                .find(|p| p.is_file())
        })
        .expect("the mariadb CLI not found: run scripts/install-deps.sh");
    let mut cmd = Command::new(found);
    cmd.arg("--no-defaults")
        .args(["--batch", "--skip-column-names", "--connect-timeout=10"])
        .stdin(Stdio::null());
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.output().expect("run the mariadb CLI")
}

/// Runs the CLI over TCP to `addr` ("host:port") and returns (success, stdout, stderr).
fn cli_tcp(addr: &str, user: &str, pass: &str, extra: &[&str], sql: &str) -> Output {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let mut cmd = cli();
    cmd.args(["--protocol=tcp", "-h", host, "-P", port])
        .arg(format!("--user={user}"))
        .arg(format!("--password={pass}"))
        .args(extra)
        .args(["-e", sql]);
    run(cmd)
}

fn stdout_ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// ed25519 is a plugin, installed once per server of this test binary.
fn install_ed25519() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for db in shared_pair() {
            let installed = db.root_query(
                "SELECT COUNT(*) FROM information_schema.PLUGINS \
                 WHERE PLUGIN_NAME = 'ed25519' AND PLUGIN_STATUS = 'ACTIVE'",
            );
            if installed.trim() == "0" {
                db.root_exec("INSTALL SONAME 'auth_ed25519'");
            }
        }
    });
}

fn create_user_everywhere(name: &str, auth: &str) {
    install_ed25519();
    for db in shared_pair() {
        db.root_exec(&format!(
            "DROP USER IF EXISTS '{name}'@'%'; CREATE USER '{name}'@'%' {auth}"
        ));
    }
}

#[tokio::test]
async fn wrong_password_gets_the_servers_own_1045_unchanged() {
    let pair = shared_pair();
    let mut direct = Vec::new();
    for db in pair {
        let e = mysql_async::Conn::new(db.opts(BENCH_USER, "wrong"))
            .await
            .expect_err("wrong password, direct");
        direct.push(server_error(&e));
    }
    assert_eq!(direct[0], direct[1], "both servers word it alike");
    assert_eq!(direct[0].0, 1045);

    let proxy = pair_proxy();
    for _ in 0..2 {
        let e = mysql_async::Conn::new(proxy.opts(BENCH_USER, "wrong"))
            .await
            .expect_err("wrong password, through the proxy");
        assert_eq!(
            server_error(&e),
            direct[0],
            "the server's own ERR, unchanged"
        );
    }
    // A failed login leaves nothing behind: the right password works at once.
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    conn.ping().await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn ed25519_user_logs_in_through_the_proxy() {
    let user = "lb_ed25519";
    tokio::task::spawn_blocking(move || {
        create_user_everywhere(user, "IDENTIFIED VIA ed25519 USING PASSWORD('edpass')")
    })
    .await
    .unwrap();
    let proxy = pair_proxy();
    let addr = proxy.addr_string();
    let pair = shared_pair();
    let ports: Vec<u16> = tokio::task::spawn_blocking(move || {
        // Two logins: round robin sends one to each server.
        (0..2)
            .map(|_| {
                let out = cli_tcp(&addr, user, "edpass", &[], "SELECT CURRENT_USER(), @@port");
                let text = stdout_ok(&out, "ed25519 login through the proxy");
                let (who, port) = text.split_once('\t').expect("two columns");
                assert_eq!(who, format!("{user}@%"));
                port.parse().expect("a port")
            })
            .collect()
    })
    .await
    .unwrap();
    let mut expected: Vec<u16> = pair.iter().map(|db| db.port).collect();
    let mut got = ports.clone();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, expected, "one login on each backend");

    // The wrong password is refused with the server's own words.
    let (addr, direct_addr) = (proxy.addr_string(), pair[0].tcp_addr());
    let (via, direct) = tokio::task::spawn_blocking(move || {
        let direct = cli_tcp(&direct_addr, user, "nope", &[], "SELECT 1");
        let via = cli_tcp(&addr, user, "nope", &[], "SELECT 1");
        (via, direct)
    })
    .await
    .unwrap();
    assert!(!via.status.success() && !direct.status.success());
    let direct_err = String::from_utf8_lossy(&direct.stderr).into_owned();
    assert!(direct_err.contains("ERROR 1045 (28000)"), "{direct_err}");
    assert_eq!(String::from_utf8_lossy(&via.stderr), direct_err);
}

#[tokio::test]
async fn auth_switch_is_relayed_both_ways() {
    let native = "lb_switch_native";
    let ed = "lb_switch_ed";
    tokio::task::spawn_blocking(move || {
        create_user_everywhere(
            native,
            "IDENTIFIED VIA mysql_native_password USING PASSWORD('natpass')",
        );
        create_user_everywhere(ed, "IDENTIFIED VIA ed25519 USING PASSWORD('edpass')");
    })
    .await
    .unwrap();
    let proxy = pair_proxy();

    // A raw client opening with a plugin the account does not use: the server asks it to switch
    // to mysql_native_password with a fresh nonce, and the answer must reach the server.
    for _ in 0..2 {
        let stream = TcpStream::connect(proxy.addr).await.unwrap();
        let mut client = RawClient::greeted(Box::new(stream)).await.unwrap();
        let greeting = parse_greeting(&client.greeting_payload).unwrap();
        let caps = (CLIENT_LONG_FLAG
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH)
            & greeting.caps;
        client.caps = caps;
        let response = handshake_response(caps, native, &[0x55; 32], None, "client_ed25519");
        client.send_packet(1, &response).await.unwrap();
        let (seq, switch) = client.read_packet().await.unwrap();
        assert_eq!(seq, 2);
        assert!(
            switch.starts_with(&[0xFE]),
            "auth switch expected: {switch:02x?}"
        );
        let rest = &switch[1..];
        let nul = rest.iter().position(|&b| b == 0).expect("plugin name");
        assert_eq!(&rest[..nul], b"mysql_native_password");
        let nonce = rest[nul + 1..]
            .strip_suffix(&[0])
            .unwrap_or(&rest[nul + 1..]);
        let answer = scramble_native(nonce, b"natpass").expect("non-empty password");
        client.send_packet(3, &answer).await.unwrap();
        client.read_ok().await.expect("login after the switch");
        let rows = client.query_text("SELECT CURRENT_USER()").await.unwrap();
        assert_eq!(rows, vec![vec![Some(format!("{native}@%"))]]);
    }

    // The CLI the same way round (opening with ed25519 for a native account) and the other way
    // round (opening with the greeting's mysql_native_password for an ed25519 account).
    let addr = proxy.addr_string();
    tokio::task::spawn_blocking(move || {
        for _ in 0..2 {
            let out = cli_tcp(
                &addr,
                native,
                "natpass",
                &["--default-auth=client_ed25519"],
                "SELECT CURRENT_USER()",
            );
            assert_eq!(
                stdout_ok(&out, "native account, ed25519 first"),
                format!("{native}@%")
            );
            let out = cli_tcp(&addr, ed, "edpass", &[], "SELECT CURRENT_USER()");
            assert_eq!(
                stdout_ok(&out, "ed25519 account, native first"),
                format!("{ed}@%")
            );
        }
    })
    .await
    .unwrap();

    // mysql_async (mysql_native_password, no switch needed) as the control.
    let mut conn = mysql_async::Conn::new(proxy.opts(native, "natpass"))
        .await
        .unwrap();
    let who: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(who, Some(format!("{native}@%")));
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn unix_socket_client_to_unix_socket_backend() {
    let backend: &MariaDb = &shared_pair()[0];
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("x.sock");
    let mut cfg = config(&[backend.socket.display().to_string()]);
    cfg.listen = vec![
        ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
        ListenAddr::Unix(socket.clone()),
    ];
    let proxy = TestProxy::start_with(cfg);
    assert_eq!(proxy.unix.as_deref(), Some(socket.as_path()));

    // USER() shows the host the server saw: 'localhost' only over its unix socket.
    let expect = |port: u16, user: &str| {
        assert_eq!(port, backend.port, "the socket backend's server");
        assert_eq!(
            user,
            format!("{BENCH_USER}@localhost"),
            "backend leg is its unix socket"
        );
    };
    let opts = mysql_async::OptsBuilder::default()
        .socket(Some(socket.display().to_string()))
        .user(Some(BENCH_USER))
        .pass(Some(BENCH_PASS))
        .prefer_socket(false);
    for opts in [
        mysql_async::Opts::from(opts),
        proxy.opts(BENCH_USER, BENCH_PASS),
    ] {
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        let (port, user): (u16, String) = conn
            .query_first("SELECT @@port, USER()")
            .await
            .unwrap()
            .unwrap();
        expect(port, &user);
        conn.disconnect().await.unwrap();
    }

    let out = tokio::task::spawn_blocking(move || cli_socket(&socket, "SELECT @@port, USER()"))
        .await
        .unwrap();
    let text = stdout_ok(&out, "mariadb -S <proxy socket>");
    let (port, user) = text.split_once('\t').expect("two columns");
    expect(port.parse().unwrap(), user);
}

fn cli_socket(socket: &Path, sql: &str) -> Output {
    let mut cmd = cli();
    cmd.arg("--protocol=socket")
        .arg("-S")
        .arg(socket)
        .arg(format!("--user={BENCH_USER}"))
        .arg(format!("--password={BENCH_PASS}"))
        .args(["-e", sql]);
    run(cmd)
}

#[tokio::test]
async fn garbage_instead_of_a_handshake_response_gets_1043() {
    let proxy = pair_proxy();
    let mut framed_seq0 = vec![40, 0, 0, 0];
    framed_seq0.extend_from_slice(&[0x7F; 40]);
    let cases: [(&str, Vec<u8>); 3] = [
        // Well framed (sequence id 1) but far too short to be a HandshakeResponse41.
        (
            "framed junk",
            vec![5, 0, 0, 1, b'h', b'e', b'l', b'l', b'o'],
        ),
        // Not MySQL at all: the "length" is ASCII and beyond the handshake limit.
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("sequence id 0", framed_seq0),
    ];
    for (what, garbage) in cases {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        let (seq, greeting) = read_raw_packet(&mut stream).await;
        assert!(seq == 0 && greeting.starts_with(&[10]), "{what}: greeting");
        stream.write_all(&garbage).await.unwrap();
        let (seq, err) = read_raw_packet(&mut stream).await;
        assert_eq!(seq, 2, "{what}: ERR follows the client's packet 1");
        let [0xFF, lo, hi, b'#', rest @ ..] = err.as_slice() else {
            panic!("{what}: expected an ERR with SQLSTATE, got {err:02x?}");
        };
        assert_eq!(u16::from_le_bytes([*lo, *hi]), 1043, "{what}");
        let (state, message) = rest.split_at(5);
        assert_eq!(state, b"08S01", "{what}");
        let message = String::from_utf8_lossy(message);
        assert!(message.starts_with("mysql-lb: "), "{what}: {message}");
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(PROMPT, stream.read(&mut buf))
            .await
            .expect("closed promptly")
            .expect("a clean close");
        assert_eq!(n, 0, "{what}: EOF after the ERR");
    }
    // The proxy is unharmed.
    let mut conn = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    conn.ping().await.unwrap();
    conn.disconnect().await.unwrap();
}

/// One frame of the compressed protocol: (sequence id, payload inflated if it was compressed).
async fn read_compressed_frame(client: &mut RawClient) -> (u8, Vec<u8>) {
    let head = client.read_bytes(7).await.unwrap();
    let len = |b: &[u8]| usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16;
    let (compressed_len, seq, plain_len) = (len(&head[..3]), head[3], len(&head[4..]));
    let body = client.read_bytes(compressed_len).await.unwrap();
    if plain_len == 0 {
        return (seq, body);
    }
    let mut plain = Vec::with_capacity(plain_len);
    std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&body[..]), &mut plain)
        .expect("zlib payload");
    assert_eq!(
        plain.len(),
        plain_len,
        "uncompressed length in the frame header"
    );
    (seq, plain)
}

/// A frame with the payload sent uncompressed (allowed: uncompressed length 0).
fn compressed_frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = u32::try_from(payload.len()).unwrap().to_le_bytes()[..3].to_vec();
    frame.push(seq);
    frame.extend_from_slice(&[0, 0, 0]);
    frame.extend_from_slice(payload);
    frame
}

/// Logs in with CLIENT_COMPRESS through a proxy that offers compression or not, and runs three
/// queries in compressed frames. The backend leg stays plain (`backend_compression` is off): the
/// proxy itself speaks the compressed protocol on the client's leg.
async fn compressed_client_leg(offered: bool) {
    let pair = shared_pair();
    let mut cfg = config(&[pair[0].tcp_addr()]);
    cfg.compression = offered;
    let proxy = TestProxy::start_with(cfg);
    let mut client = RawClient::connect_tcp(
        &proxy.addr_string(),
        BENCH_USER,
        BENCH_PASS,
        None,
        CLIENT_COMPRESS,
        0,
    )
    .await
    .expect("login with CLIENT_COMPRESS set");
    assert_eq!(
        client.server_caps & CLIENT_COMPRESS != 0,
        offered,
        "offered"
    );
    for round in 0..3 {
        let sql = b"SELECT 42";
        let mut query = vec![sql.len() as u8 + 1, 0, 0, 0, COM_QUERY];
        query.extend_from_slice(sql);
        client.send_raw(&compressed_frame(0, &query)).await.unwrap();
        let (seq, plain) = read_compressed_frame(&mut client).await;
        assert_eq!(
            seq, 1,
            "round {round}: the answer continues the frame sequence"
        );
        // column count 1, a column definition, (EOF,) one row holding "42", EOF/OK.
        assert_eq!(&plain[..5], &[1, 0, 0, 1, 1], "round {round}: {plain:02x?}");
        assert!(
            plain.windows(3).any(|w| w == [2, b'4', b'2']),
            "round {round}: the row is in the answer: {plain:02x?}"
        );
    }
    let metrics = String::from_utf8(proxy.state.metrics.render()).unwrap();
    assert!(
        metrics.contains("mysql_lb_compressed_sessions_total{leg=\"client\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mysql_lb_compressed_sessions_total{leg=\"backend\"} 0"),
        "{metrics}"
    );
    client
        .send_raw(&compressed_frame(0, &[1, 0, 0, 0, COM_QUIT]))
        .await
        .unwrap();
    let after_quit = client.read_bytes(1).await;
    assert!(
        after_quit.as_ref().is_err_and(|e| e.contains("eof")),
        "the session closes after COM_QUIT: {after_quit:?}"
    );
}

#[tokio::test]
async fn a_client_compressing_its_leg_is_served_compressed_over_a_plain_backend_leg() {
    compressed_client_leg(true).await;
}

#[tokio::test]
async fn a_client_compressing_without_the_offer_is_served_compressed_too() {
    // mysqlnd and Connector/Python's pure mode set CLIENT_COMPRESS although the greeting does not
    // offer it, then switch to compressed frames after the OK whatever the server said.
    compressed_client_leg(false).await;
}
