//! TLS on each leg of mysql-lb, against real MariaDB servers that speak TLS with throwaway
//! certificates (tests/common/tls_server.rs).
//!
//! The client leg is checked with clients that verify mysql-lb's certificate (the `mariadb` CLI,
//! mysql_async over rustls, a raw client over tokio-rustls) and with a `tls.require` that must
//! refuse plaintext as MariaDB's `require_secure_transport` does; the backend leg with the
//! accounts and settings that only a TLS leg satisfies (`REQUIRE SSL`, `REQUIRE X509`,
//! `require_secure_transport=ON`) and with certificates that must be refused (expired, another
//! host, an unknown CA, no TLS at all). Bulk transfers, KILL and the drain run inside TLS. Every
//! bad input ends one session with an ERR or a close, and another session keeps working.
//!
//! The `direct_*` tests check the same things straight against MariaDB: they are the reference
//! the proxy is held to, and they prove the helpers (certificates, raw TLS client) work.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::bulk::{blob_both_ways, load_data_local};
use common::mariadb::{
    tcp_opts, MariaDb, ServerTls, BENCH_PASS, BENCH_USER, SSL_PASS, SSL_USER, X509_PASS, X509_USER,
};
use common::proxy::{config, TestProxy};
use common::rawclient::{
    handshake_response, parse_greeting, read_packet_from, ssl_request, RawClient, CLIENT_SSL,
    COM_QUERY,
};
use common::tls_server::{certs, client_config, server_name, CertFiles};
use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, OptsBuilder, SslOpts};
use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use mysql_lb::config::{BackendTls, BackendTlsMode, ClientTls, ListenAddr, TlsVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every wait on a peer; generous for two shared cores.
const DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Servers and proxies

/// A MariaDB with TLS (the CA also checks client certificates) and the TLS-only accounts;
/// plaintext logins of ordinary accounts still work.
fn tls_db() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| start_tls_db("tls", &certs().server, false))
}

/// A MariaDB with `require_secure_transport=ON`.
fn secure_db() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| start_tls_db("secure", &certs().server, true))
}

fn start_tls_db(name: &str, files: &CertFiles, require_secure_transport: bool) -> MariaDb {
    let db = MariaDb::start_tls(
        name,
        &ServerTls {
            cert: &files.cert,
            key: &files.key,
            ca: Some(&certs().ca),
            require_secure_transport,
        },
    );
    db.create_tls_users();
    db
}

/// mysql-lb's side of the client leg: the server certificate, the CA for client certificates.
fn client_leg(require: bool, verify_client: bool) -> ClientTls {
    let c = certs();
    ClientTls {
        cert: c.server.cert.clone(),
        key: c.server.key.clone(),
        ca: Some(c.ca.clone()),
        verify_client,
        min_version: TlsVersion::V1_2,
        require,
        cipher_suites: mysql_lb::config::default_cipher_suites(),
    }
}

/// The backend leg in `mode`, trusting the test CA.
fn backend_leg(mode: BackendTlsMode) -> BackendTls {
    BackendTls {
        mode,
        ca: Some(certs().ca.clone()),
        cert: None,
        key: None,
        min_version: TlsVersion::V1_2,
        allow_cleartext_passwords: false,
    }
}

/// A proxy in front of `backends`, every backend with the leg `backend`.
fn proxy(backends: &[String], client: Option<ClientTls>, backend: BackendTls) -> TestProxy {
    let mut cfg = config(backends);
    cfg.tls = client;
    for b in &mut cfg.backends {
        b.tls = backend.clone();
    }
    TestProxy::start_with(cfg)
}

/// The usual case: TLS on both legs to [`tls_db`], the backend's certificate verified.
fn both_legs_proxy(require: bool) -> TestProxy {
    proxy(
        &[tls_db().tcp_addr()],
        Some(client_leg(require, false)),
        backend_leg(BackendTlsMode::VerifyIdentity),
    )
}

// ---------------------------------------------------------------------------------------------
// Clients

/// mysql_async options for `addr` over TLS, verifying the server against the test CA only.
fn tls_opts(addr: &str, user: &str, pass: &str, identity: Option<&CertFiles>) -> OptsBuilder {
    let mut ssl = SslOpts::default()
        .with_root_certs(vec![certs().ca.clone().into()])
        .with_disable_built_in_roots(true);
    if let Some(id) = identity {
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(
            id.cert.clone().into(),
            id.key.clone().into(),
        )));
    }
    OptsBuilder::from_opts(tcp_opts(addr, user, pass))
        .db_name(Some("test"))
        .ssl_opts(ssl)
}

fn plain_opts(addr: &str, user: &str, pass: &str) -> OptsBuilder {
    OptsBuilder::from_opts(tcp_opts(addr, user, pass)).db_name(Some("test"))
}

/// A raw client logged in over TLS to `addr`, verifying against the test CA.
async fn raw_tls(addr: &str, identity: Option<&CertFiles>) -> RawClient {
    RawClient::connect_tls(
        addr,
        client_config(&certs().ca, identity),
        "127.0.0.1",
        BENCH_USER,
        BENCH_PASS,
        Some("test"),
        0,
        0,
    )
    .await
    .unwrap_or_else(|e| panic!("raw TLS login to {addr}: {e}"))
}

/// `SHOW SESSION STATUS LIKE name` as the server sees this session.
async fn status(conn: &mut Conn, name: &str) -> String {
    let row: Option<(String, String)> = conn
        .query_first(format!("SHOW SESSION STATUS LIKE '{name}'"))
        .await
        .unwrap_or_else(|e| panic!("SHOW STATUS LIKE '{name}': {e}"));
    row.map(|(_, v)| v).unwrap_or_default()
}

/// The `mariadb` CLI with `args`, no defaults files read.
fn cli(args: &[String]) -> Output {
    Command::new("mariadb")
        .arg("--no-defaults")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the mariadb CLI (scripts/install-deps.sh installs it)")
}

/// CLI arguments for `host:port` with TLS verified against `ca`, running `sql`.
fn cli_tls_args(host: &str, port: u16, ca: &Path, sql: &str) -> Vec<String> {
    vec![
        format!("--host={host}"),
        format!("--port={port}"),
        "--protocol=tcp".into(),
        format!("--user={BENCH_USER}"),
        format!("--password={BENCH_PASS}"),
        "--ssl".into(),
        format!("--ssl-ca={}", ca.display()),
        "--ssl-verify-server-cert".into(),
        "--batch".into(),
        "-e".into(),
        sql.into(),
    ]
}

/// What the CLI's `status` says of its own connection's TLS (`Cipher in use is …` or
/// `Not in use`).
fn cli_ssl_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("SSL:"))
        .unwrap_or("no SSL: line")
        .to_string()
}

/// An ERR as sent: sequence id, code, SQLSTATE, message.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    seq: u8,
    code: u16,
    state: String,
    message: String,
}

/// Logs in as `user` in plaintext with mysql_native_password and returns the ERR it gets; the
/// connection must close after it. Panics on an OK.
async fn plaintext_refusal(addr: &str, user: &str, pass: &str) -> (u32, Refusal) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let (_, greeting) = read_packet_from(&mut s).await.expect("greeting");
    let g = parse_greeting(&greeting).expect("a greeting");
    let caps = 0x0000_0001 | 0x0000_0004 | 0x0000_0200 | 0x0000_2000 | 0x0000_8000 | 0x0008_0000;
    let auth = scramble_native(&g.nonce, pass.as_bytes()).expect("scramble");
    let body = handshake_response(caps, user, &auth, None, "mysql_native_password");
    let mut packet = u32::try_from(body.len()).unwrap().to_le_bytes();
    packet[3] = 1;
    s.write_all(&[&packet[..], &body].concat()).await.unwrap();
    let (seq, reply) = tokio::time::timeout(DEADLINE, read_packet_from(&mut s))
        .await
        .expect("a reply in time")
        .expect("a reply");
    assert_eq!(
        reply.first(),
        Some(&0xff),
        "expected an ERR, got {reply:02x?}"
    );
    let refusal = Refusal {
        seq,
        code: u16::from_le_bytes([reply[1], reply[2]]),
        state: if reply.get(3) == Some(&b'#') {
            String::from_utf8_lossy(&reply[4..9]).into_owned()
        } else {
            String::new()
        },
        message: String::from_utf8_lossy(&reply[if reply.get(3) == Some(&b'#') { 9 } else { 3 }..])
            .into_owned(),
    };
    assert_closed(&mut s, "after the refusal").await;
    (g.caps, refusal)
}

/// Reads until EOF; panics if the peer keeps the connection open past [`DEADLINE`]. Returns what
/// was read (an ERR or a TLS alert, say).
async fn assert_closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S, what: &str) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return seen,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => panic!("{what}: still open after {DEADLINE:?} (read {seen:02x?})"),
        }
    }
}

/// What a bad client may be sent before the close: nothing, a TLS alert record, or one ERR of
/// mysql-lb's own.
fn assert_err_or_nothing(bytes: &[u8], what: &str) {
    if bytes.is_empty() || bytes[0] == 0x15 {
        return;
    }
    assert!(
        bytes.len() > 7 && bytes[4] == 0xff,
        "{what}: neither a close nor an ERR: {bytes:02x?}"
    );
    let text = String::from_utf8_lossy(&bytes[7..]);
    assert!(
        text.contains("mysql-lb:"),
        "{what}: ERR not mysql-lb's: {text}"
    );
}

/// A TLS ClientHello as a client would send it for `host`.
fn client_hello(host: &str) -> Vec<u8> {
    let mut conn =
        rustls::ClientConnection::new(client_config(&certs().ca, None), server_name(host))
            .expect("client connection");
    let mut bytes = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut bytes).expect("ClientHello bytes");
    }
    bytes
}

/// Greeting read, SSLRequest sent: the stream is where a TLS handshake must start.
async fn after_ssl_request(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let (_, greeting) = read_packet_from(&mut s).await.expect("greeting");
    let caps = parse_greeting(&greeting).expect("a greeting").caps;
    assert_ne!(caps & CLIENT_SSL, 0, "the greeting must offer CLIENT_SSL");
    let body = ssl_request(0x0000_0200 | 0x0000_8000 | 0x0008_0000);
    let mut header = u32::try_from(body.len()).unwrap().to_le_bytes();
    header[3] = 1;
    s.write_all(&[&header[..], &body].concat()).await.unwrap();
    s
}

async fn assert_alive(client: &mut RawClient, what: &str) {
    let rows = client
        .query_text("SELECT 'still here'")
        .await
        .unwrap_or_else(|e| panic!("{what}: the other session broke: {e}"));
    assert_eq!(rows, vec![vec![Some("still here".to_string())]], "{what}");
}

/// `mysql_lb_client_disconnections_total{reason}` as /metrics shows it.
fn disconnections(proxy: &TestProxy, reason: &str) -> u64 {
    let text = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 exposition");
    let label = format!("reason=\"{reason}\"");
    text.lines()
        .filter(|l| l.starts_with("mysql_lb_client_disconnections_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

// ---------------------------------------------------------------------------------------------
// The reference: MariaDB itself

/// MariaDB 10.11 under `require_secure_transport=ON` lets a plaintext TCP client through the
/// greeting (which offers CLIENT_SSL) and answers its HandshakeResponse (sequence 1) with
/// `ERR 1045 (28000) Access denied for user '…'@'…' (using password: YES)` at sequence 2, then
/// closes — the same ERR as a wrong password, whatever the password; it has no error of its own
/// for it. A `REQUIRE SSL` account gets the same from a server without the setting.
#[tokio::test]
async fn direct_mariadb_refuses_plaintext_under_require_secure_transport() {
    let (caps, refusal) = plaintext_refusal(&secure_db().tcp_addr(), BENCH_USER, BENCH_PASS).await;
    assert_ne!(caps & CLIENT_SSL, 0, "the greeting offers CLIENT_SSL");
    assert_eq!(
        refusal,
        Refusal {
            seq: 2,
            code: 1045,
            state: "28000".into(),
            message: "Access denied for user 'bench'@'127.0.0.1' (using password: YES)".into(),
        }
    );
    let (_, ssl_user) = plaintext_refusal(&tls_db().tcp_addr(), SSL_USER, SSL_PASS).await;
    assert_eq!((ssl_user.seq, ssl_user.code), (2, 1045));
    // Over its unix socket the same server takes the plaintext login.
    let out = secure_db().root_query("SELECT 'socket ok'");
    assert_eq!(out.trim(), "socket ok");
}

/// The helpers against MariaDB directly: the raw TLS client, mysql_async over rustls with the
/// test CA, the TLS-only accounts and a client certificate.
#[tokio::test]
async fn direct_tls_clients_and_accounts_work_against_mariadb() {
    let db = secure_db();
    let mut raw = raw_tls(&db.tcp_addr(), None).await;
    let tls = raw.tls.clone().expect("TLS session info");
    assert!(tls.version.starts_with("TLSv1_"), "{tls:?}");
    let cipher = raw
        .query_text("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    assert_ne!(cipher[0][1].as_deref(), Some(""), "the server sees TLS");

    let mut conn = Conn::new(tls_opts(&db.tcp_addr(), SSL_USER, SSL_PASS, None))
        .await
        .expect("REQUIRE SSL account over TLS");
    assert!(!status(&mut conn, "Ssl_version").await.is_empty());
    let x509 = Conn::new(tls_opts(&db.tcp_addr(), X509_USER, X509_PASS, None)).await;
    assert!(x509.is_err(), "REQUIRE X509 without a client certificate");
    Conn::new(tls_opts(
        &db.tcp_addr(),
        X509_USER,
        X509_PASS,
        Some(&certs().client),
    ))
    .await
    .expect("REQUIRE X509 with the client certificate");
}

/// The bad certificates are bad the way the backend-leg tests need: a verifying client refuses
/// the expired one outright and the wrong-host one unless it skips the name check.
#[tokio::test]
async fn direct_bad_certificates_are_refused_by_a_verifying_client() {
    let expired = start_tls_db("expired-ref", &certs().expired, false);
    let err = Conn::new(tls_opts(&expired.tcp_addr(), BENCH_USER, BENCH_PASS, None))
        .await
        .expect_err("an expired certificate is refused");
    assert!(err.to_string().contains("certificate expired"), "{err}");
    let wrong = start_tls_db("wrong-ref", &certs().wrong_host, false);
    let opts = tls_opts(&wrong.tcp_addr(), BENCH_USER, BENCH_PASS, None);
    let err = Conn::new(opts.clone())
        .await
        .expect_err("wrong host refused");
    assert!(err.to_string().contains("not valid for name"), "{err}");
    // Verified for the name it does carry, it chains to the CA.
    RawClient::connect_tls(
        &wrong.tcp_addr(),
        client_config(&certs().ca, None),
        "wrong-host.invalid",
        BENCH_USER,
        BENCH_PASS,
        None,
        0,
        0,
    )
    .await
    .expect("the wrong-host certificate chains to the CA");
}

/// The CLI verifies MariaDB's certificate by the test CA for both names, and refuses it with
/// another CA (2026): the same checks the proxy's certificate must pass.
#[test]
fn direct_cli_verifies_the_server_certificate() {
    let db = tls_db();
    for host in ["127.0.0.1", "localhost"] {
        let out = cli(&cli_tls_args(host, db.port, &certs().ca, "status"));
        assert!(out.status.success(), "{host}: {out:?}");
        assert!(cli_ssl_line(&out).contains("Cipher in use"), "{out:?}");
    }
    let out = cli(&cli_tls_args(
        "127.0.0.1",
        db.port,
        &certs().other_ca,
        "SELECT 1",
    ));
    assert!(!out.status.success(), "an unknown CA must fail");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2026"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Client leg

#[test]
fn mariadb_cli_verifies_the_proxys_certificate() {
    let proxy = both_legs_proxy(false);
    for host in ["127.0.0.1", "localhost"] {
        let out = cli(&cli_tls_args(
            host,
            proxy.addr.port(),
            &certs().ca,
            "status",
        ));
        assert!(out.status.success(), "{host} through mysql-lb: {out:?}");
        let line = cli_ssl_line(&out);
        assert!(line.contains("Cipher in use"), "{host}: {line}");
    }
    let out = cli(&cli_tls_args(
        "127.0.0.1",
        proxy.addr.port(),
        &certs().other_ca,
        "SELECT 1",
    ));
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("2026"),
        "a client trusting another CA must refuse mysql-lb: {out:?}"
    );
}

#[tokio::test]
async fn mysql_async_over_tls_on_both_legs() {
    let proxy = both_legs_proxy(true);
    let addr = proxy.addr_string();
    let mut conn = Conn::new(tls_opts(&addr, BENCH_USER, BENCH_PASS, None))
        .await
        .expect("mysql_async over TLS through mysql-lb");
    let n: Option<i64> = conn.query_first("SELECT 40 + 2").await.unwrap();
    assert_eq!(n, Some(42));
    assert!(
        !status(&mut conn, "Ssl_cipher").await.is_empty(),
        "the backend leg is TLS too"
    );
    // Under tls.require the same client without TLS is refused, so the session above was TLS.
    assert!(Conn::new(plain_opts(&addr, BENCH_USER, BENCH_PASS))
        .await
        .is_err());
    let mut raw = raw_tls(&addr, None).await;
    assert!(raw
        .tls
        .as_ref()
        .is_some_and(|t| t.version.starts_with("TLSv1_")));
    assert_alive(&mut raw, "raw TLS client").await;
}

/// The legs are independent: TLS to the client over plaintext to the backend, and the reverse.
#[tokio::test]
async fn tls_client_over_plaintext_backend_and_plaintext_client_over_tls_backend() {
    let db = tls_db();
    let tls_to_plain = proxy(
        &[db.tcp_addr()],
        Some(client_leg(true, false)),
        backend_leg(BackendTlsMode::Disabled),
    );
    let mut conn = Conn::new(tls_opts(
        &tls_to_plain.addr_string(),
        BENCH_USER,
        BENCH_PASS,
        None,
    ))
    .await
    .expect("TLS client, plaintext backend");
    assert_eq!(
        status(&mut conn, "Ssl_cipher").await,
        "",
        "backend leg plaintext"
    );

    let plain_to_tls = proxy(
        &[db.tcp_addr()],
        None,
        backend_leg(BackendTlsMode::VerifyIdentity),
    );
    let mut raw = RawClient::connect_tcp(
        &plain_to_tls.addr_string(),
        BENCH_USER,
        BENCH_PASS,
        None,
        0,
        0,
    )
    .await
    .expect("plaintext client, TLS backend");
    assert_eq!(
        raw.server_caps & CLIENT_SSL,
        0,
        "without `tls` the proxy offers no CLIENT_SSL"
    );
    let rows = raw
        .query_text("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .await
        .unwrap();
    assert_ne!(rows[0][1].as_deref(), Some(""), "backend leg TLS");
}

/// `tls.require`: a plaintext TCP login gets MariaDB's own refusal (same sequence id, code and
/// SQLSTATE), its message marked as mysql-lb's; unix-socket clients count as secure.
#[tokio::test]
async fn plaintext_tcp_client_refused_under_tls_require_as_the_server_does() {
    let (_, want) = plaintext_refusal(&secure_db().tcp_addr(), BENCH_USER, BENCH_PASS).await;
    let dir = common::mariadb::scratch_dir("require");
    let mut cfg = config(&[tls_db().tcp_addr()]);
    cfg.tls = Some(client_leg(true, false));
    cfg.listen.push(ListenAddr::Unix(dir.join("proxy.sock")));
    let proxy = TestProxy::start_with(cfg);
    let mut other = raw_tls(&proxy.addr_string(), None).await;

    let (caps, got) = plaintext_refusal(&proxy.addr_string(), BENCH_USER, BENCH_PASS).await;
    assert_ne!(
        caps & CLIENT_SSL,
        0,
        "the proxy's greeting offers CLIENT_SSL"
    );
    assert_eq!(
        (got.seq, got.code, got.state.as_str()),
        (want.seq, want.code, want.state.as_str()),
        "{got:?}"
    );
    assert!(got.message.starts_with("mysql-lb:"), "{got:?}");

    let socket = proxy.unix.clone().expect("a unix listener");
    let mut local = RawClient::connect_unix(&socket, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .expect("a unix-socket client is secure enough");
    assert_alive(&mut local, "unix-socket client").await;
    assert_alive(&mut other, "TLS session beside the refusal").await;
}

#[tokio::test]
async fn mutual_tls_needs_a_client_certificate_signed_by_the_ca() {
    let proxy = proxy(
        &[tls_db().tcp_addr()],
        Some(client_leg(true, true)),
        backend_leg(BackendTlsMode::Disabled),
    );
    let addr = proxy.addr_string();
    let mut conn = Conn::new(tls_opts(
        &addr,
        BENCH_USER,
        BENCH_PASS,
        Some(&certs().client),
    ))
    .await
    .expect("mutual TLS with the client certificate");
    let n: Option<i64> = conn.query_first("SELECT 7").await.unwrap();
    assert_eq!(n, Some(7));
    assert!(
        Conn::new(tls_opts(&addr, BENCH_USER, BENCH_PASS, None))
            .await
            .is_err(),
        "no client certificate: refused"
    );
    // A certificate the CA did not sign for client use: the server's own certificate has no
    // clientAuth usage.
    assert!(
        Conn::new(tls_opts(
            &addr,
            BENCH_USER,
            BENCH_PASS,
            Some(&certs().server)
        ))
        .await
        .is_err(),
        "a certificate without clientAuth: refused"
    );
    let mut raw = raw_tls(&addr, Some(&certs().client)).await;
    assert_alive(&mut raw, "mutual TLS raw client").await;
}

// ---------------------------------------------------------------------------------------------
// Backend leg

#[tokio::test]
async fn require_ssl_account_reaches_the_backend_over_the_tls_leg() {
    let db = tls_db();
    let tls = proxy(
        &[db.tcp_addr()],
        None,
        backend_leg(BackendTlsMode::Required),
    );
    let mut conn = Conn::new(plain_opts(&tls.addr_string(), SSL_USER, SSL_PASS))
        .await
        .expect("REQUIRE SSL account through a TLS backend leg");
    assert!(!status(&mut conn, "Ssl_cipher").await.is_empty());

    let plain = proxy(
        &[db.tcp_addr()],
        None,
        backend_leg(BackendTlsMode::Disabled),
    );
    let err = RawClient::connect_tcp(&plain.addr_string(), SSL_USER, SSL_PASS, None, 0, 0)
        .await
        .err()
        .expect("a plaintext backend leg is refused by the server");
    assert!(
        err.starts_with("1045:"),
        "the server's own 1045 passes: {err}"
    );
}

#[tokio::test]
async fn x509_account_logs_in_with_the_proxys_client_certificate() {
    let db = tls_db();
    let mut leg = backend_leg(BackendTlsMode::VerifyIdentity);
    leg.cert = Some(certs().client.cert.clone());
    leg.key = Some(certs().client.key.clone());
    let with_cert = proxy(&[db.tcp_addr()], None, leg);
    let mut conn = Conn::new(plain_opts(&with_cert.addr_string(), X509_USER, X509_PASS))
        .await
        .expect("REQUIRE X509 account with the proxy's client certificate");
    let n: Option<i64> = conn.query_first("SELECT 509").await.unwrap();
    assert_eq!(n, Some(509));

    let without = proxy(
        &[db.tcp_addr()],
        None,
        backend_leg(BackendTlsMode::VerifyIdentity),
    );
    let err = RawClient::connect_tcp(&without.addr_string(), X509_USER, X509_PASS, None, 0, 0)
        .await
        .err()
        .expect("no client certificate on the backend leg");
    assert!(err.starts_with("1045:"), "{err}");
}

#[tokio::test]
async fn require_secure_transport_backend_is_reached_over_tls() {
    let db = secure_db();
    for mode in [
        BackendTlsMode::Preferred,
        BackendTlsMode::Required,
        BackendTlsMode::VerifyCa,
        BackendTlsMode::VerifyIdentity,
    ] {
        let p = proxy(&[db.tcp_addr()], None, backend_leg(mode));
        let mut conn = Conn::new(plain_opts(&p.addr_string(), BENCH_USER, BENCH_PASS))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", mode.as_str()));
        assert!(!status(&mut conn, "Ssl_cipher").await.is_empty());
    }
    let plain = proxy(
        &[db.tcp_addr()],
        None,
        backend_leg(BackendTlsMode::Disabled),
    );
    let err = RawClient::connect_tcp(&plain.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .err()
        .expect("disabled: the server refuses the plaintext leg");
    assert!(err.starts_with("1045:"), "{err}");
}

/// Starts a TLS MariaDB presenting `files` and returns the client's error through a proxy whose
/// only backend it is, in `mode` (None when the login worked).
async fn login_error_with_backend_cert(
    name: &str,
    files: &CertFiles,
    mode: BackendTlsMode,
) -> Option<String> {
    let db = start_tls_db(name, files, false);
    let p = proxy(&[db.tcp_addr()], None, backend_leg(mode));
    RawClient::connect_tcp(&p.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .err()
}

fn assert_certificate_refusal(err: Option<String>, what: &str) {
    let err = err.unwrap_or_else(|| panic!("{what}: the login went through"));
    assert!(err.contains("mysql-lb:"), "{what}: {err}");
    assert!(
        err.to_lowercase().contains("certificate"),
        "{what}: the ERR should say it is the backend's certificate: {err}"
    );
}

#[tokio::test]
async fn expired_backend_certificate_is_refused_when_verified() {
    let expired = &certs().expired;
    let err = login_error_with_backend_cert("expired", expired, BackendTlsMode::VerifyIdentity);
    assert_certificate_refusal(err.await, "expired, verify_identity");
    let err = login_error_with_backend_cert("expired2", expired, BackendTlsMode::VerifyCa);
    assert_certificate_refusal(err.await, "expired, verify_ca");
    // `required` checks nothing: the same server is usable.
    let err = login_error_with_backend_cert("expired3", expired, BackendTlsMode::Required).await;
    assert_eq!(err, None, "required does not verify");
}

#[tokio::test]
async fn wrong_host_backend_certificate_is_refused_under_verify_identity_only() {
    let wrong = &certs().wrong_host;
    let err = login_error_with_backend_cert("wronghost", wrong, BackendTlsMode::VerifyIdentity);
    assert_certificate_refusal(err.await, "wrong host, verify_identity");
    let err = login_error_with_backend_cert("wronghost2", wrong, BackendTlsMode::VerifyCa).await;
    assert_eq!(err, None, "verify_ca checks the chain, not the name");
}

#[tokio::test]
async fn backend_trusted_by_another_ca_is_refused() {
    let db = tls_db();
    let mut leg = backend_leg(BackendTlsMode::VerifyCa);
    leg.ca = Some(certs().other_ca.clone());
    let p = proxy(&[db.tcp_addr()], None, leg);
    let err = RawClient::connect_tcp(&p.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0).await;
    assert_certificate_refusal(err.err(), "unknown CA, verify_ca");
}

#[tokio::test]
async fn backend_without_tls_is_refused_under_required_and_used_under_preferred() {
    let plain = common::mariadb::shared_pair()[0].tcp_addr();
    let required = proxy(
        std::slice::from_ref(&plain),
        None,
        backend_leg(BackendTlsMode::Required),
    );
    let err = RawClient::connect_tcp(&required.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .err()
        .expect("required: a backend without TLS is refused");
    assert!(err.contains("mysql-lb:") && err.contains("TLS"), "{err}");

    let preferred = proxy(&[plain], None, backend_leg(BackendTlsMode::Preferred));
    let mut conn = Conn::new(plain_opts(&preferred.addr_string(), BENCH_USER, BENCH_PASS))
        .await
        .expect("preferred: plaintext when the backend offers no TLS");
    assert_eq!(status(&mut conn, "Ssl_cipher").await, "");
}

/// A backend whose certificate fails verification is taken out like one that refuses
/// connections: the client lands on the next backend, and sessions already open stay.
#[tokio::test]
async fn failed_backend_verification_fails_over_and_leaves_sessions_alone() {
    let bad = start_tls_db("expired-fo", &certs().expired, false);
    let good = tls_db();
    let mut cfg = config(&[good.tcp_addr(), bad.tcp_addr()]);
    for b in &mut cfg.backends {
        b.tls = backend_leg(BackendTlsMode::VerifyIdentity);
    }
    cfg.tls = Some(client_leg(false, false));
    let p = TestProxy::start_with(cfg);
    let mut first = raw_tls(&p.addr_string(), None).await;
    // The backend leg's TLS starts after the client answered that backend's greeting, so the
    // one session that meets the expired certificate cannot move elsewhere: it gets ERR 1105
    // naming the TLS failure, and the backend leaves rotation; every later session lands on
    // the verified backend.
    let mut refused = 0;
    for i in 0..6 {
        match mysql_async::Conn::new(p.opts(BENCH_USER, BENCH_PASS)).await {
            Err(mysql_async::Error::Server(e)) => {
                assert_eq!(e.code, 1105, "{e:?}");
                assert!(e.message.contains("certificate expired"), "{e:?}");
                refused += 1;
            }
            Err(e) => panic!("session {i}: {e}"),
            Ok(mut conn) => {
                let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
                assert_eq!(
                    port, good.port,
                    "session {i} must land on the verified backend"
                );
                conn.query_drop("DO 1").await.unwrap();
                let _ = conn.disconnect().await;
            }
        }
    }
    assert!(
        refused <= 1,
        "{refused} sessions met the expired certificate"
    );
    assert_alive(&mut first, "the session opened first").await;
    let text = String::from_utf8(p.state.metrics.render()).unwrap();
    let bad_name = format!("backend=\"{}\"", bad.tcp_addr());
    let errors: f64 = text
        .lines()
        .filter(|l| l.starts_with("mysql_lb_backend_connect_errors_total") && l.contains(&bad_name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        errors >= 1.0,
        "the failed verification counts as a connect error:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Bulk, KILL, drain

#[tokio::test]
async fn blob_both_ways_and_load_data_local_over_tls() {
    let proxy = both_legs_proxy(true);
    let addr = proxy.addr_string();
    let mut conn = Conn::new(tls_opts(&addr, BENCH_USER, BENCH_PASS, None))
        .await
        .unwrap();
    blob_both_ways(&mut conn, "TLS both legs").await;
    let dir = common::mariadb::scratch_dir("infile");
    load_data_local(
        tls_opts(&addr, BENCH_USER, BENCH_PASS, None),
        &dir,
        "TLS both legs",
    )
    .await;
    // The direct reference, same client, same server.
    let mut direct = Conn::new(tls_opts(&tls_db().tcp_addr(), BENCH_USER, BENCH_PASS, None))
        .await
        .unwrap();
    blob_both_ways(&mut direct, "direct TLS").await;
}

fn running_on_tls_db(marker: &str) -> bool {
    tls_db()
        .root_query("SELECT INFO FROM information_schema.PROCESSLIST")
        .contains(marker)
}

#[tokio::test]
async fn kill_query_of_a_tls_session_by_its_proxy_id() {
    let proxy = both_legs_proxy(true);
    let addr = proxy.addr_string();
    let mut victim = raw_tls(&addr, None).await;
    let mut killer = raw_tls(&addr, None).await;
    victim
        .send_command(COM_QUERY, b"SELECT SLEEP(30), 'tls-kill-marker'")
        .await
        .unwrap();
    common::wait_until("the TLS victim's query to run", || {
        running_on_tls_db("tls-kill-marker")
    });
    let started = Instant::now();
    killer
        .query_text(&format!("KILL QUERY {}", victim.connection_id))
        .await
        .expect("KILL QUERY of a proxy id");
    let outcome = victim.read_results().await;
    let interrupted = match &outcome {
        Err(e) => e.starts_with("1317:"),
        Ok(rows) => rows == &vec![vec![vec![Some("1".into()), Some("tls-kill-marker".into())]]],
    };
    assert!(interrupted, "victim: {outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_alive(&mut victim, "victim after KILL QUERY").await;
    assert_alive(&mut killer, "killer").await;
}

#[tokio::test]
async fn sigterm_drains_tls_sessions_at_a_command_boundary() {
    let proxy = both_legs_proxy(true);
    let addr = proxy.addr_string();
    let mut busy = raw_tls(&addr, None).await;
    let mut idle = raw_tls(&addr, None).await;
    busy.send_command(COM_QUERY, b"SELECT SLEEP(1), 'tls-drain-marker'")
        .await
        .unwrap();
    common::wait_until("the TLS drain query to run", || {
        running_on_tls_db("tls-drain-marker")
    });
    proxy.begin_shutdown();
    let rows = busy
        .read_results()
        .await
        .expect("the in-flight result, whole");
    assert_eq!(
        rows,
        vec![vec![vec![
            Some("0".into()),
            Some("tls-drain-marker".into())
        ]]]
    );
    assert!(
        busy.read_packet().await.is_err(),
        "closed after its command"
    );
    assert!(idle.read_packet().await.is_err(), "idle TLS session closed");
}

// ---------------------------------------------------------------------------------------------
// Bad input on the client leg

#[tokio::test]
async fn client_hello_instead_of_a_handshake_response_is_refused() {
    let proxy = both_legs_proxy(false);
    let addr = proxy.addr_string();
    let mut other = raw_tls(&addr, None).await;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let (_, greeting) = read_packet_from(&mut s).await.expect("greeting");
    assert_ne!(parse_greeting(&greeting).unwrap().caps & CLIENT_SSL, 0);
    s.write_all(&client_hello("127.0.0.1")).await.unwrap();
    let sent = assert_closed(&mut s, "a ClientHello without SSLRequest").await;
    assert_err_or_nothing(&sent, "ClientHello without SSLRequest");
    assert_alive(&mut other, "TLS session beside it").await;
    assert_alive(&mut raw_tls(&addr, None).await, "a new TLS session").await;
}

#[tokio::test]
async fn garbage_after_the_ssl_request_closes_only_that_session() {
    let proxy = both_legs_proxy(false);
    let addr = proxy.addr_string();
    let mut other = raw_tls(&addr, None).await;
    let before = disconnections(&proxy, "tls_handshake");
    let mut s = after_ssl_request(&addr).await;
    s.write_all(b"this is not a TLS record at all\r\n\r\n")
        .await
        .unwrap();
    let sent = assert_closed(&mut s, "garbage after the SSLRequest").await;
    assert!(
        sent.is_empty() || sent[0] == 0x15,
        "only a TLS alert may come back: {sent:02x?}"
    );
    common::wait_until("the tls_handshake disconnection to be counted", || {
        disconnections(&proxy, "tls_handshake") == before + 1
    });
    assert_alive(&mut other, "TLS session beside it").await;
}

#[tokio::test]
async fn client_stalling_in_the_tls_handshake_is_closed_by_the_handshake_timeout() {
    let mut cfg = config(&[tls_db().tcp_addr()]);
    cfg.tls = Some(client_leg(false, false));
    cfg.handshake_timeout = Duration::from_secs(2);
    let proxy = TestProxy::start_with(cfg);
    let addr = proxy.addr_string();
    let mut s = after_ssl_request(&addr).await;
    let hello = client_hello("127.0.0.1");
    s.write_all(&hello[..hello.len() / 2]).await.unwrap();
    // While it stalls, other sessions log in and work.
    let mut other = raw_tls(&addr, None).await;
    assert_alive(&mut other, "TLS session during the stall").await;
    let sent = assert_closed(&mut s, "half a ClientHello").await;
    assert!(sent.is_empty() || sent[0] == 0x15, "{sent:02x?}");
    assert_alive(&mut other, "TLS session after the stall").await;
}

#[tokio::test]
async fn client_that_closes_mid_handshake_disturbs_nobody() {
    let proxy = both_legs_proxy(false);
    let addr = proxy.addr_string();
    let mut other = raw_tls(&addr, None).await;
    for cut in [0, 5, 60] {
        let mut s = after_ssl_request(&addr).await;
        let hello = client_hello("127.0.0.1");
        s.write_all(&hello[..cut.min(hello.len())]).await.unwrap();
        drop(s);
    }
    common::wait_until("the abandoned sessions to end", || {
        proxy
            .admin_get("/metrics")
            .1
            .lines()
            .any(|l| l.starts_with("mysql_lb_client_connections ") && l.ends_with(" 1"))
    });
    assert_alive(&mut other, "TLS session beside the abandoned ones").await;
}
