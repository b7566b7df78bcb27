//! TLS material from certificates made at test time, and in-memory handshakes between a client
//! leg acceptor and a backend leg connector for every mode.

use std::time::Duration;

use rustls::HandshakeKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::config::{BackendKind, BackendTls};

#[path = "../../../tests/common/certs.rs"]
pub(crate) mod certs;

use certs::{CertPair, Certs};

fn fixture() -> (tempfile::TempDir, Certs) {
    let dir = tempfile::tempdir().expect("temp dir");
    let certs = Certs::generate(dir.path());
    (dir, certs)
}

fn client_tls(pair: &CertPair) -> ClientTls {
    ClientTls {
        cert: pair.cert.clone(),
        key: pair.key.clone(),
        ca: None,
        verify_client: false,
        min_version: TlsVersion::V1_2,
        require: false,
        cipher_suites: crate::config::default_cipher_suites(),
    }
}

fn tcp(host: &str) -> BackendAddr {
    BackendAddr::Tcp {
        host: host.to_owned(),
        port: 3306,
    }
}

fn backend(name: &str, address: BackendAddr, tls: BackendTls) -> BackendConfig {
    BackendConfig {
        name: name.to_owned(),
        address,
        weight: 1,
        kind: BackendKind::Rw,
        tls,
        compression: false,
        proxy_protocol: None,
        pool: "default".into(),
        role: None,
    }
}

fn mode_tls(mode: BackendTlsMode, ca: Option<&Path>) -> BackendTls {
    BackendTls {
        mode,
        ca: ca.map(Path::to_owned),
        ..BackendTls::default()
    }
}

fn load(client: Option<ClientTls>, backends: Vec<BackendConfig>) -> Result<TlsMaterial, TlsError> {
    TlsMaterial::load(&Config {
        tls: client,
        backends,
        ..Config::default()
    })
}

fn load_err(client: Option<ClientTls>, backends: Vec<BackendConfig>) -> String {
    match load(client, backends) {
        Ok(m) => panic!("loaded {m:?}"),
        Err(e) => e.to_string(),
    }
}

/// The client leg serving `served`, and the leg of one backend at `address` in `tls` mode.
fn legs(
    served: &CertPair,
    address: BackendAddr,
    tls: BackendTls,
) -> (ClientTlsAcceptor, Arc<BackendTlsConnector>) {
    let material = load(Some(client_tls(served)), vec![backend("db", address, tls)])
        .unwrap_or_else(|e| panic!("load: {e}"));
    let leg = Arc::clone(material.backend("db").expect("the backend's leg"));
    (material.client.expect("a client leg"), leg)
}

/// How each side of one handshake ended: `describe()` and the handshake kind, or the error.
struct Outcome {
    server: Result<(String, Option<HandshakeKind>), String>,
    client: Result<(String, Option<HandshakeKind>), String>,
}

/// One connection over an in-memory pipe: the server writes a greeting once the handshake is
/// done and the client reads it, so a TLS 1.3 client certificate refused by the server (which
/// the client learns only after its own handshake finished) and the session tickets the server
/// sends both reach the client.
async fn handshake(acceptor: &tokio_rustls::TlsAcceptor, leg: &BackendTlsConnector) -> Outcome {
    let connector = leg.connector.clone().expect("a connector");
    handshake_with(acceptor, &connector, leg.server_name.clone()).await
}

async fn handshake_with(
    acceptor: &tokio_rustls::TlsAcceptor,
    connector: &tokio_rustls::TlsConnector,
    name: ServerName<'static>,
) -> Outcome {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = async {
        let mut tls = acceptor
            .accept(server_io)
            .await
            .map_err(|e| e.to_string())?;
        let (_, conn) = tls.get_ref();
        let seen = (describe(conn), conn.handshake_kind());
        tls.write_all(b"hello").await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())?;
        let mut rest = Vec::new();
        tls.read_to_end(&mut rest)
            .await
            .map_err(|e| e.to_string())?;
        Ok(seen)
    };
    let client = async {
        let mut tls = connector
            .connect(name, client_io)
            .await
            .map_err(|e| e.to_string())?;
        let mut hello = [0u8; 5];
        tls.read_exact(&mut hello)
            .await
            .map_err(|e| e.to_string())?;
        assert_eq!(&hello, b"hello");
        let (_, conn) = tls.get_ref();
        let seen = (describe(conn), conn.handshake_kind());
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(seen)
    };
    let both = async {
        let (server, client) = tokio::join!(server, client);
        Outcome { server, client }
    };
    tokio::time::timeout(Duration::from_secs(20), both)
        .await
        .expect("the handshake finished")
}

fn assert_refused(outcome: &Outcome, client_error: &str) {
    let client = outcome.client.as_ref().expect_err("the client refuses");
    assert!(client.contains(client_error), "client: {client}");
    assert!(outcome.server.is_err(), "server: {:?}", outcome.server);
}

fn assert_ok(outcome: &Outcome) {
    let client = outcome.client.as_ref().expect("the client finishes");
    let server = outcome.server.as_ref().expect("the server finishes");
    assert!(client.0.starts_with("TLSv1.3 TLS13_"), "{}", client.0);
    assert_eq!(client.0, server.0);
}

#[test]
fn good_material_loads_every_leg_with_ring_not_the_process_default() {
    let (_dir, c) = fixture();
    let mut tls = client_tls(&c.server);
    tls.ca = Some(c.ca.clone());
    tls.verify_client = true;
    tls.require = true;
    let with_cert = BackendTls {
        mode: BackendTlsMode::VerifyIdentity,
        ca: Some(c.ca.clone()),
        cert: Some(c.client.cert.clone()),
        key: Some(c.client.key.clone()),
        min_version: TlsVersion::V1_3,
        allow_cleartext_passwords: false,
    };
    let backends = vec![
        backend("off", tcp("db1"), mode_tls(BackendTlsMode::Disabled, None)),
        backend("pref", tcp("10.0.0.1"), BackendTls::default()),
        backend("v6", tcp("::1"), mode_tls(BackendTlsMode::Required, None)),
        backend(
            "ca",
            tcp("db.example"),
            mode_tls(BackendTlsMode::VerifyCa, Some(&c.ca)),
        ),
        backend(
            "id",
            BackendAddr::Unix("/run/mysqld.sock".into()),
            with_cert,
        ),
    ];
    let m = load(Some(tls), backends).unwrap_or_else(|e| panic!("{e}"));

    let client = m.client.as_ref().expect("client leg");
    assert!(client.require);
    assert_eq!(client.not_after, Some(c.server.not_after));
    let off = m.backend("off").unwrap();
    assert_eq!(off.mode, BackendTlsMode::Disabled);
    assert!(off.connector.is_none());
    let names = [
        ("pref", "10.0.0.1"),
        ("v6", "::1"),
        ("ca", "db.example"),
        ("id", "localhost"),
    ];
    for (name, server_name) in names {
        let leg = m.backend(name).unwrap();
        assert!(leg.connector.is_some(), "{name}");
        assert_eq!(leg.server_name.to_str(), server_name, "{name}");
    }
    assert_eq!(
        m.backend("id").unwrap().client_cert_not_after,
        Some(c.client.not_after)
    );
    assert_eq!(m.backend("ca").unwrap().client_cert_not_after, None);
    assert!(m.backend("nope").is_none());
    assert!(rustls::crypto::CryptoProvider::get_default().is_none());
}

#[test]
fn not_after_reads_the_expiry_of_a_certificate() {
    let (_dir, c) = fixture();
    let known = c.fresh_server_cert("known", (2031, 5, 17));
    assert_eq!(known.not_after, 1_936_742_400);
    let chain = pem::certificates("tls.cert", &known.cert).unwrap();
    assert_eq!(not_after(&chain[0]), Some(1_936_742_400));
    let m = load(Some(client_tls(&known)), vec![]).unwrap();
    assert_eq!(m.client.unwrap().not_after, Some(1_936_742_400));
    assert_eq!(
        not_after(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])),
        None
    );
}

#[test]
fn each_bad_file_names_the_key_and_the_file() {
    let (dir, c) = fixture();
    let missing = dir.path().join("missing.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let damaged = dir.path().join("damaged.pem");
    std::fs::write(
        &damaged,
        "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let with = |cert: &Path, key: &Path| ClientTls {
        cert: cert.to_owned(),
        key: key.to_owned(),
        ..client_tls(&c.server)
    };
    let d = |p: &Path| p.display().to_string();
    let cases = [
        (
            with(&missing, &c.server.key),
            format!("tls.cert {}: cannot read it: ", d(&missing)),
        ),
        (
            with(&garbage, &c.server.key),
            format!("tls.cert {}: not a PEM file", d(&garbage)),
        ),
        (
            with(&empty, &c.server.key),
            format!("tls.cert {}: no certificate in the file", d(&empty)),
        ),
        (
            with(&c.server.key, &c.server.key),
            format!(
                "tls.cert {}: no certificate in the file (it holds: PRIVATE KEY)",
                d(&c.server.key)
            ),
        ),
        (
            with(&damaged, &c.server.key),
            format!(
                "tls.cert {}: certificate 1 in the file does not parse",
                d(&damaged)
            ),
        ),
        (
            with(&c.server.cert, &c.server.cert),
            format!("tls.key {}: no private key in the file", d(&c.server.cert)),
        ),
        (
            with(&c.server.cert, &c.client.key),
            format!(
                "tls.key does not match tls.cert (key {}, certificate {})",
                d(&c.client.key),
                d(&c.server.cert)
            ),
        ),
        (
            ClientTls {
                ca: Some(c.server.key.clone()),
                ..client_tls(&c.server)
            },
            format!("tls.ca {}: no certificate in the file", d(&c.server.key)),
        ),
    ];
    for (tls, want) in cases {
        let got = load_err(Some(tls), vec![]);
        assert!(got.starts_with(&want), "got:  {got}\nwant: {want}");
    }
}

#[test]
fn a_bad_backend_file_names_that_backends_key() {
    let (dir, c) = fixture();
    let missing = dir.path().join("missing-ca.pem");
    let good = backend("a", tcp("db1"), BackendTls::default());
    let mismatched = BackendTls {
        cert: Some(c.client.cert.clone()),
        key: Some(c.server.key.clone()),
        ..BackendTls::default()
    };
    let got = load_err(
        None,
        vec![good.clone(), backend("b", tcp("db2"), mismatched)],
    );
    assert!(
        got.starts_with("backends[1].tls.key does not match backends[1].tls.cert"),
        "{got}"
    );
    let bad_ca = mode_tls(BackendTlsMode::VerifyCa, Some(&missing));
    let got = load_err(None, vec![good.clone(), backend("b", tcp("db2"), bad_ca)]);
    let want = format!("backends[1].tls.ca {}: cannot read it", missing.display());
    assert!(got.starts_with(&want), "{got}");
    let no_ca = mode_tls(BackendTlsMode::VerifyIdentity, None);
    let got = load_err(None, vec![backend("b", tcp("db2"), no_ca)]);
    assert!(
        got.starts_with("backends[0].tls.ca: mode verify_identity needs `ca`"),
        "{got}"
    );
    let bad_name = mode_tls(BackendTlsMode::VerifyIdentity, Some(&c.ca));
    let got = load_err(None, vec![backend("b", tcp("db_1!"), bad_name)]);
    assert!(
        got.starts_with("backends[0].address: `db_1!` is not a host name"),
        "{got}"
    );
    // The same address is fine where the name is only SNI.
    let sni_only = mode_tls(BackendTlsMode::VerifyCa, Some(&c.ca));
    let m = load(None, vec![backend("b", tcp("db_1!"), sni_only)]).unwrap();
    assert_eq!(m.backend("b").unwrap().server_name.to_str(), "localhost");
}

/// PKCS#8 (what rcgen writes) re-wrapped as the SEC1 `EC PRIVATE KEY` OpenSSL's tools write.
fn sec1_pem(pkcs8_pem: &Path) -> String {
    let PrivateKeyDer::Pkcs8(pkcs8) = pem::private_key("k", pkcs8_pem).unwrap() else {
        panic!("rcgen writes PKCS#8");
    };
    // PrivateKeyInfo ::= SEQUENCE { INTEGER, AlgorithmIdentifier, OCTET STRING { ECPrivateKey } }
    let (_, info, _) = der_tlv(pkcs8.secret_pkcs8_der());
    let (_, _, rest) = der_tlv(info);
    let (_, _, rest) = der_tlv(rest);
    let (tag, ec_private_key, _) = der_tlv(rest);
    assert_eq!(tag, 0x04);
    let b64 = base64(ec_private_key);
    format!("-----BEGIN EC PRIVATE KEY-----\n{b64}\n-----END EC PRIVATE KEY-----\n")
}

/// (tag, content, rest) of the DER element at the start of `der`.
fn der_tlv(der: &[u8]) -> (u8, &[u8], &[u8]) {
    let (len, header) = match der[1] {
        n if n < 0x80 => (n as usize, 2),
        0x81 => (der[2] as usize, 3),
        0x82 => (usize::from(der[2]) << 8 | usize::from(der[3]), 4),
        other => panic!("length form {other:#x}"),
    };
    (der[0], &der[header..header + len], &der[header + len..])
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            let c = if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize]
            } else {
                b'='
            };
            out.push(c as char);
        }
    }
    out
}

#[tokio::test]
async fn a_sec1_key_serves_like_its_pkcs8_form() {
    let (dir, c) = fixture();
    let sec1 = dir.path().join("server-sec1-key.pem");
    std::fs::write(&sec1, sec1_pem(&c.server.key)).unwrap();
    assert!(matches!(
        pem::private_key("k", &sec1).unwrap(),
        PrivateKeyDer::Sec1(_)
    ));
    let served = CertPair {
        key: sec1,
        ..c.server.clone()
    };
    let (client, leg) = legs(
        &served,
        tcp("localhost"),
        mode_tls(BackendTlsMode::VerifyIdentity, Some(&c.ca)),
    );
    assert_ok(&handshake(&client.acceptor, &leg).await);
}

#[tokio::test]
async fn required_and_preferred_accept_any_certificate() {
    let (_dir, c) = fixture();
    for mode in [BackendTlsMode::Required, BackendTlsMode::Preferred] {
        for served in [&c.self_signed, &c.expired, &c.wrong_host, &c.other_server] {
            let (client, leg) = legs(served, tcp("127.0.0.1"), mode_tls(mode, None));
            let outcome = handshake(&client.acceptor, &leg).await;
            assert_ok(&outcome);
        }
    }
}

#[tokio::test]
async fn verify_ca_accepts_a_wrong_name_and_verify_identity_refuses_it() {
    let (_dir, c) = fixture();
    let ca = mode_tls(BackendTlsMode::VerifyCa, Some(&c.ca));
    let (client, leg) = legs(&c.wrong_host, tcp("127.0.0.1"), ca);
    assert_ok(&handshake(&client.acceptor, &leg).await);

    let identity = mode_tls(BackendTlsMode::VerifyIdentity, Some(&c.ca));
    let (client, leg) = legs(&c.wrong_host, tcp("127.0.0.1"), identity);
    assert_refused(
        &handshake(&client.acceptor, &leg).await,
        "not valid for name",
    );
}

#[tokio::test]
async fn verify_identity_accepts_each_name_the_certificate_holds() {
    let (_dir, c) = fixture();
    let addresses = [
        tcp("localhost"),
        tcp("127.0.0.1"),
        tcp("::1"),
        BackendAddr::Unix("/tmp/mysqld.sock".into()),
    ];
    for address in addresses {
        let identity = mode_tls(BackendTlsMode::VerifyIdentity, Some(&c.ca));
        let (client, leg) = legs(&c.server, address, identity);
        assert_ok(&handshake(&client.acceptor, &leg).await);
    }
}

#[tokio::test]
async fn verify_modes_refuse_an_expired_certificate_and_another_cas() {
    let (_dir, c) = fixture();
    for mode in [BackendTlsMode::VerifyCa, BackendTlsMode::VerifyIdentity] {
        let (client, leg) = legs(&c.expired, tcp("localhost"), mode_tls(mode, Some(&c.ca)));
        assert_refused(&handshake(&client.acceptor, &leg).await, "expired");
        let (client, leg) = legs(
            &c.other_server,
            tcp("localhost"),
            mode_tls(mode, Some(&c.ca)),
        );
        assert_refused(&handshake(&client.acceptor, &leg).await, "UnknownIssuer");
        let (client, leg) = legs(
            &c.self_signed,
            tcp("localhost"),
            mode_tls(mode, Some(&c.ca)),
        );
        assert_refused(&handshake(&client.acceptor, &leg).await, "UnknownIssuer");
    }
}

/// verify_ca forgives only a name error; webpki must have checked the chain first.
#[tokio::test]
async fn verify_ca_refuses_another_cas_certificate_that_also_names_another_host() {
    let (_dir, c) = fixture();
    let ca = mode_tls(BackendTlsMode::VerifyCa, Some(&c.ca));
    let (client, leg) = legs(&c.other_server, tcp("db.example"), ca.clone());
    assert_refused(&handshake(&client.acceptor, &leg).await, "UnknownIssuer");
    let (client, leg) = legs(&c.expired, tcp("db.example"), ca);
    assert_refused(&handshake(&client.acceptor, &leg).await, "expired");
}

fn mutual(c: &Certs, verify_client: bool) -> ClientTlsAcceptor {
    let mut tls = client_tls(&c.server);
    tls.ca = Some(c.ca.clone());
    tls.verify_client = verify_client;
    load(Some(tls), vec![]).unwrap().client.unwrap()
}

fn presenting(c: &Certs, pair: Option<&CertPair>) -> Arc<BackendTlsConnector> {
    let tls = BackendTls {
        mode: BackendTlsMode::VerifyIdentity,
        ca: Some(c.ca.clone()),
        cert: pair.map(|p| p.cert.clone()),
        key: pair.map(|p| p.key.clone()),
        min_version: TlsVersion::V1_2,
        allow_cleartext_passwords: false,
    };
    let m = load(None, vec![backend("db", tcp("localhost"), tls)]).unwrap();
    Arc::clone(m.backend("db").unwrap())
}

#[tokio::test]
async fn mutual_tls_refuses_a_client_without_a_certificate_or_with_another_cas() {
    let (_dir, c) = fixture();
    let server = mutual(&c, true);
    let outcome = handshake(&server.acceptor, &presenting(&c, None)).await;
    let err = outcome.server.expect_err("the server refuses");
    assert!(
        err.contains("NoCertificatesPresented") || err.contains("no certificate"),
        "{err}"
    );
    assert!(outcome.client.is_err(), "{:?}", outcome.client);

    // A certificate of the other CA.
    let outcome = handshake(&server.acceptor, &presenting(&c, Some(&c.other_server))).await;
    assert!(outcome.server.is_err(), "{:?}", outcome.server);

    assert_ok(&handshake(&server.acceptor, &presenting(&c, Some(&c.client))).await);
}

#[tokio::test]
async fn ca_without_verify_client_makes_client_certificates_optional_but_checked() {
    let (_dir, c) = fixture();
    let server = mutual(&c, false);
    assert_ok(&handshake(&server.acceptor, &presenting(&c, None)).await);
    assert_ok(&handshake(&server.acceptor, &presenting(&c, Some(&c.client))).await);
    let outcome = handshake(&server.acceptor, &presenting(&c, Some(&c.other_server))).await;
    assert!(outcome.server.is_err(), "{:?}", outcome.server);
}

/// A rustls client with only the given protocol versions, trusting anything.
fn bare_connector(
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verify::AnyCertificate::new(&provider)))
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[tokio::test]
async fn min_version_1_3_refuses_a_tls_1_2_client() {
    let (_dir, c) = fixture();
    let name = ServerName::try_from("localhost").unwrap();
    let tls12 = bare_connector(&[&rustls::version::TLS12]);
    let served = load(Some(client_tls(&c.server)), vec![])
        .unwrap()
        .client
        .unwrap();
    let outcome = handshake_with(&served.acceptor, &tls12, name.clone()).await;
    assert!(
        outcome
            .client
            .as_ref()
            .unwrap()
            .0
            .starts_with("TLSv1.2 TLS_ECDHE_ECDSA_"),
        "{:?}",
        outcome.client
    );

    let tls = ClientTls {
        min_version: TlsVersion::V1_3,
        ..client_tls(&c.server)
    };
    let strict = load(Some(tls), vec![]).unwrap().client.unwrap();
    let outcome = handshake_with(&strict.acceptor, &tls12, name).await;
    assert_refused(&outcome, "ProtocolVersion");
}

#[tokio::test]
async fn sessions_resume_on_both_legs_with_tls_1_3_and_1_2() {
    let (_dir, c) = fixture();
    let (client, leg) = legs(
        &c.server,
        tcp("localhost"),
        mode_tls(BackendTlsMode::VerifyIdentity, Some(&c.ca)),
    );
    let kinds = |o: &Outcome| {
        let client = o
            .client
            .as_ref()
            .unwrap_or_else(|e| panic!("client: {e}"))
            .1;
        let server = o
            .server
            .as_ref()
            .unwrap_or_else(|e| panic!("server: {e}"))
            .1;
        (client, server)
    };
    let full = Some(HandshakeKind::Full);
    let resumed = Some(HandshakeKind::Resumed);
    assert_eq!(
        kinds(&handshake(&client.acceptor, &leg).await),
        (full, full)
    );
    for _ in 0..3 {
        assert_eq!(
            kinds(&handshake(&client.acceptor, &leg).await),
            (resumed, resumed)
        );
    }

    let tls12 = bare_connector(&[&rustls::version::TLS12]);
    let name = ServerName::try_from("localhost").unwrap();
    let first = handshake_with(&client.acceptor, &tls12, name.clone()).await;
    assert_eq!(kinds(&first), (full, full));
    let again = handshake_with(&client.acceptor, &tls12, name).await;
    assert_eq!(kinds(&again), (resumed, resumed));
    assert!(again.client.unwrap().0.starts_with("TLSv1.2 "));
}

#[test]
fn uses_tls_follows_the_mode_and_the_greeting() {
    use BackendTlsMode::*;
    let leg = |mode| BackendTlsConnector {
        mode,
        connector: None,
        server_name: ServerName::try_from("localhost").unwrap(),
        client_cert_not_after: None,
        allow_cleartext_passwords: false,
    };
    // (mode, offered, unix) -> decision
    let table = [
        (Disabled, true, false, Ok(false)),
        (Disabled, false, false, Ok(false)),
        (Preferred, true, false, Ok(true)),
        (Preferred, true, true, Ok(false)),
        (Preferred, false, false, Ok(false)),
        (Required, true, true, Ok(true)),
        (VerifyCa, true, false, Ok(true)),
        (VerifyIdentity, true, true, Ok(true)),
    ];
    for (mode, offered, unix, want) in table {
        assert_eq!(
            leg(mode).uses_tls(offered, unix),
            want,
            "{mode:?} {offered} {unix}"
        );
    }
    for mode in [Required, VerifyCa, VerifyIdentity] {
        for unix in [false, true] {
            let reason = leg(mode).uses_tls(false, unix).unwrap_err();
            assert!(
                reason.contains("does not offer TLS") && reason.contains(mode.as_str()),
                "{reason}"
            );
        }
    }
}

#[test]
fn export_expiry_sets_static_series_and_removes_what_the_previous_material_had() {
    let (_dir, c) = fixture();
    let metrics = Metrics::new();
    let presenting = BackendTls {
        cert: Some(c.client.cert.clone()),
        key: Some(c.client.key.clone()),
        ..BackendTls::default()
    };
    let old = load(
        Some(client_tls(&c.server)),
        vec![
            backend("db1", tcp("db1"), presenting.clone()),
            backend("db2", tcp("db2"), presenting),
        ],
    )
    .unwrap();
    old.export_expiry(&metrics, None);
    metrics.set_certificate_expiry("backend", "db2", 1);
    let family = "mysql_lb_tls_certificate_expiry_timestamp_seconds";
    let text = String::from_utf8(metrics.render()).unwrap();
    let series =
        |backend: &str, leg: &str| format!("{family}{{backend=\"{backend}\",leg=\"{leg}\"}}");
    assert!(
        text.contains(&format!("{} {}", series("", "client"), c.server.not_after)),
        "{text}"
    );
    assert!(text.contains(&format!(
        "{} {}",
        series("db1", "backend_client"),
        c.client.not_after
    )));
    assert!(text.contains(&series("db2", "backend")));

    let new = load(
        None,
        vec![backend("db1", tcp("db1"), BackendTls::default())],
    )
    .unwrap();
    new.export_expiry(&metrics, Some(&old));
    let text = String::from_utf8(metrics.render()).unwrap();
    assert!(!text.contains(family), "{text}");
}

/// A server sending a certificate whose key it does not hold (a copied certificate) fails the
/// handshake signature check, which `required` keeps although it trusts any certificate.
#[tokio::test]
async fn required_refuses_a_server_without_the_certificates_key() {
    let (_dir, c) = fixture();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = pem::certificates("c", &c.server.cert).unwrap();
    let other_key = pem::private_key("k", &c.client.key).unwrap();
    let signing = provider.key_provider.load_private_key(other_key).unwrap();
    let impostor = CertifiedKey::new(chain, signing);
    let config = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(impostor)));
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let leg = presenting_mode(BackendTlsMode::Required);
    assert_refused(&handshake(&acceptor, &leg).await, "BadSignature");
}

fn presenting_mode(mode: BackendTlsMode) -> Arc<BackendTlsConnector> {
    let m = load(
        None,
        vec![backend("db", tcp("localhost"), mode_tls(mode, None))],
    )
    .unwrap();
    Arc::clone(m.backend("db").unwrap())
}

#[test]
fn key_files_are_read_by_their_pem_label_and_an_unusable_key_is_named() {
    let (dir, c) = fixture();
    let pkcs1 = dir.path().join("rsa-key.pem");
    std::fs::write(
        &pkcs1,
        "-----BEGIN RSA PRIVATE KEY-----\nAAECAw==\n-----END RSA PRIVATE KEY-----\n",
    )
    .unwrap();
    assert!(matches!(
        pem::private_key("k", &pkcs1).unwrap(),
        PrivateKeyDer::Pkcs1(_)
    ));
    let tls = ClientTls {
        key: pkcs1.clone(),
        ..client_tls(&c.server)
    };
    let got = load_err(Some(tls), vec![]);
    let want = format!(
        "tls.key {}: the private key is not usable: ",
        pkcs1.display()
    );
    assert!(got.starts_with(&want), "{got}");

    let two = dir.path().join("two-keys.pem");
    let key = std::fs::read_to_string(&c.server.key).unwrap();
    std::fs::write(&two, format!("{key}{key}")).unwrap();
    let tls = ClientTls {
        key: two.clone(),
        ..client_tls(&c.server)
    };
    let got = load_err(Some(tls), vec![]);
    let want = format!(
        "tls.key {}: more than one private key in the file",
        two.display()
    );
    assert!(got.starts_with(&want), "{got}");

    // A certificate and its key in one file serve as both `cert` and `key`.
    let both = dir.path().join("both.pem");
    let cert = std::fs::read_to_string(&c.server.cert).unwrap();
    std::fs::write(&both, format!("{cert}{key}")).unwrap();
    let tls = ClientTls {
        cert: both.clone(),
        key: both,
        ..client_tls(&c.server)
    };
    assert!(load(Some(tls), vec![]).unwrap().client.is_some());
}

#[tokio::test]
async fn the_client_leg_picks_suites_in_its_own_order() {
    let (_dir, c) = fixture();
    let name = ServerName::try_from("localhost").unwrap();
    // rustls' own client lists AES-256-GCM first, as OpenSSL and GnuTLS do.
    let tls13 = bare_connector(&[&rustls::version::TLS13]);
    let served = |suites: &[&str]| {
        let tls = ClientTls {
            cipher_suites: suites.iter().map(|&s| s.to_owned()).collect(),
            ..client_tls(&c.server)
        };
        load(Some(tls), vec![]).unwrap().client.unwrap()
    };
    let cases = [
        (
            &crate::config::CIPHER_SUITES[..],
            "TLSv1.3 TLS13_AES_128_GCM_SHA256",
        ),
        (
            &["TLS13_CHACHA20_POLY1305_SHA256", "TLS13_AES_128_GCM_SHA256"][..],
            "TLSv1.3 TLS13_CHACHA20_POLY1305_SHA256",
        ),
    ];
    for (suites, want) in cases {
        let outcome = handshake_with(&served(suites).acceptor, &tls13, name.clone()).await;
        assert_eq!(outcome.server.unwrap().0, want);
    }
    let tls = ClientTls {
        cipher_suites: vec!["TLS13_AES_128_CCM_SHA256".to_owned()],
        ..client_tls(&c.server)
    };
    let got = load_err(Some(tls), vec![]);
    assert_eq!(
        got,
        "tls.cipher_suites: unknown cipher suite `TLS13_AES_128_CCM_SHA256`"
    );
}
