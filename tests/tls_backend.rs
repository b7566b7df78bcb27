//! The TLS material against a real MariaDB: the test certificates (tests/common/certs.rs) load
//! in MariaDB's OpenSSL as a server certificate and as an X.509 account's client certificate,
//! and each backend mode's connector handshakes with it, or refuses it, as the mode says.
//!
//! The session does not use TLS yet here: each test speaks the connection phase by hand
//! (greeting, SSLRequest, TLS, login) so only the material is under test.

mod common;

use std::sync::{Arc, OnceLock};

use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use mysql_lb::config::{
    BackendAddr, BackendConfig, BackendKind, BackendTls, BackendTlsMode, Config,
};
use mysql_lb::net::tls::{describe, BackendTlsConnector, TlsMaterial};
use rustls::HandshakeKind;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use common::certs::Certs;
use common::mariadb::{new_temp_dir, MariaDb};
use common::rawclient::{
    self, parse_err, parse_greeting, read_raw_packet, CLIENT_LONG_PASSWORD, CLIENT_PLUGIN_AUTH,
    CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, CLIENT_SSL, CLIENT_TRANSACTIONS,
};

struct Fixture {
    db: MariaDb,
    certs: Certs,
}

/// One MariaDB for the whole binary, serving `certs.server` with `certs.ca` for client
/// certificates, and an account that must present the client certificate.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let certs = Certs::generate(&new_temp_dir("tls-certs"));
        let args = [
            format!("--ssl-ca={}", certs.ca.display()),
            format!("--ssl-cert={}", certs.server.cert.display()),
            format!("--ssl-key={}", certs.server.key.display()),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let db = MariaDb::start_with_args("tls", &args);
        db.root_exec(
            "CREATE USER x509user@'%' IDENTIFIED BY 'x509' \
             REQUIRE SUBJECT '/CN=x509user' AND ISSUER '/CN=mysql-lb test CA'",
        );
        Fixture { db, certs }
    })
}

fn leg(tls: BackendTls, host: &str) -> Arc<BackendTlsConnector> {
    let fx = fixture();
    let backend = BackendConfig {
        name: "db".to_owned(),
        address: BackendAddr::Tcp {
            host: host.to_owned(),
            port: fx.db.port,
        },
        weight: 1,
        kind: BackendKind::Rw,
        tls,
        compression: false,
        proxy_protocol: None,
        pool: "default".into(),
        role: None,
    };
    let config = Config {
        backends: vec![backend],
        ..Config::default()
    };
    let material = TlsMaterial::load(&config).unwrap_or_else(|e| panic!("{e}"));
    Arc::clone(material.backend("db").expect("the backend's leg"))
}

fn mode(mode: BackendTlsMode, ca: Option<&std::path::Path>) -> BackendTls {
    BackendTls {
        mode,
        ca: ca.map(|p| p.to_owned()),
        ..BackendTls::default()
    }
}

/// What one connection saw.
#[derive(Debug)]
struct Login {
    /// `describe()` of the TLS connection.
    tls: String,
    kind: Option<HandshakeKind>,
    /// The server's own `Ssl_version` status for the session, or its ERR.
    outcome: Result<String, String>,
}

async fn write_packet<S: AsyncWrite + Unpin>(s: &mut S, seq: u8, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap().to_le_bytes();
    let mut packet = vec![len[0], len[1], len[2], seq];
    packet.extend_from_slice(payload);
    s.write_all(&packet).await.expect("write a packet");
}

/// Greeting, SSLRequest, the leg's TLS handshake, then a native-password login and a query of
/// the session's `Ssl_version`. `Err` when the TLS handshake fails.
async fn login(leg: &BackendTlsConnector, user: &str, pass: &str) -> Result<Login, String> {
    let fx = fixture();
    let mut tcp = rawclient::connect_raw(&fx.db.tcp_addr()).await;
    let (_, payload) = read_raw_packet(&mut tcp).await;
    let greeting = parse_greeting(&payload)?;
    let offered = greeting.caps & CLIENT_SSL != 0;
    assert!(
        leg.uses_tls(offered, false)?,
        "MariaDB offers TLS: {offered}"
    );
    let caps = (CLIENT_LONG_PASSWORD
        | CLIENT_PROTOCOL_41
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH)
        & greeting.caps
        | CLIENT_SSL;
    let response = rawclient::handshake_response(
        caps,
        user,
        &scramble(&greeting.nonce, pass),
        None,
        "mysql_native_password",
    );
    write_packet(&mut tcp, 1, &response[..32]).await;
    let connector = leg.connector.as_ref().expect("a connector");
    let mut tls = connector
        .connect(leg.server_name.clone(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, conn) = tls.get_ref();
    let (described, kind) = (describe(conn), conn.handshake_kind());
    write_packet(&mut tls, 2, &response).await;
    let outcome = match read_raw_packet(&mut tls).await.1 {
        reply if reply.first() == Some(&0x00) => Ok(ssl_version(&mut tls).await),
        reply => Err(parse_err(&reply)),
    };
    Ok(Login {
        tls: described,
        kind,
        outcome,
    })
}

fn scramble(nonce: &[u8], pass: &str) -> Vec<u8> {
    scramble_native(nonce, pass.as_bytes()).map_or_else(Vec::new, |s| s.to_vec())
}

/// The one value of `SELECT VARIABLE_VALUE ... 'Ssl_version'`, read from the raw result set:
/// the row packet is a single length-encoded string.
async fn ssl_version<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> String {
    let query = b"\x03SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS \
                  WHERE VARIABLE_NAME = 'Ssl_version'";
    write_packet(s, 0, query).await;
    let mut packets = Vec::new();
    loop {
        let (_, p) = read_raw_packet(s).await;
        let end = p.first() == Some(&0xfe) && p.len() < 9 && packets.len() > 2;
        packets.push(p);
        if end || packets.last().unwrap().first() == Some(&0xff) {
            break;
        }
    }
    // column count, column definition, EOF, row, EOF
    let row = &packets[3];
    String::from_utf8_lossy(&row[1..1 + usize::from(row[0])]).into_owned()
}

#[tokio::test]
async fn every_mode_but_disabled_logs_in_to_mariadb_over_tls_with_the_test_certificates() {
    let fx = fixture();
    let ca = Some(fx.certs.ca.as_path());
    let cases = [
        (mode(BackendTlsMode::Preferred, None), "127.0.0.1"),
        (mode(BackendTlsMode::Required, None), "127.0.0.1"),
        (mode(BackendTlsMode::VerifyCa, ca), "127.0.0.1"),
        (mode(BackendTlsMode::VerifyIdentity, ca), "127.0.0.1"),
        (mode(BackendTlsMode::VerifyIdentity, ca), "localhost"),
    ];
    for (tls, host) in cases {
        let what = format!("{} via {host}", tls.mode.as_str());
        let login = login(&leg(tls, host), "bench", "bench")
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(login.tls.starts_with("TLSv1.3 TLS13_"), "{what}: {login:?}");
        assert_eq!(login.outcome, Ok("TLSv1.3".to_owned()), "{what}");
    }
}

#[tokio::test]
async fn verify_modes_refuse_mariadb_when_its_certificate_is_not_from_the_ca() {
    let fx = fixture();
    for m in [BackendTlsMode::VerifyCa, BackendTlsMode::VerifyIdentity] {
        let leg = leg(mode(m, Some(&fx.certs.other_ca)), "127.0.0.1");
        let err = login(&leg, "bench", "bench").await.expect_err("refused");
        assert!(err.contains("UnknownIssuer"), "{}: {err}", m.as_str());
    }
}

#[tokio::test]
async fn an_x509_account_logs_in_with_the_client_certificate_and_not_without() {
    let fx = fixture();
    let with_cert = BackendTls {
        cert: Some(fx.certs.client.cert.clone()),
        key: Some(fx.certs.client.key.clone()),
        ..mode(BackendTlsMode::VerifyIdentity, Some(&fx.certs.ca))
    };
    let login_with = login(&leg(with_cert, "127.0.0.1"), "x509user", "x509")
        .await
        .unwrap();
    assert_eq!(login_with.outcome, Ok("TLSv1.3".to_owned()));
    let without = mode(BackendTlsMode::VerifyIdentity, Some(&fx.certs.ca));
    let login_without = login(&leg(without, "127.0.0.1"), "x509user", "x509")
        .await
        .unwrap();
    let err = login_without.outcome.expect_err("refused");
    assert!(err.starts_with("1045"), "{err}");
}

#[tokio::test]
async fn sessions_to_mariadb_through_one_leg_resume() {
    let fx = fixture();
    let leg = leg(
        mode(BackendTlsMode::VerifyIdentity, Some(&fx.certs.ca)),
        "127.0.0.1",
    );
    let mut kinds = Vec::new();
    for _ in 0..3 {
        let login = login(&leg, "bench", "bench").await.unwrap();
        assert!(login.outcome.is_ok(), "{login:?}");
        kinds.push(login.kind);
    }
    assert_eq!(kinds[0], Some(HandshakeKind::Full));
    assert_eq!(&kinds[1..], [Some(HandshakeKind::Resumed); 2]);
}
