//! Test certificates, made with rcgen when a test runs (no key is ever committed).
//!
//! One CA signs a server certificate for `localhost`, `127.0.0.1` and `::1` and a client
//! certificate (CN `x509user`, for `REQUIRE X509` / `REQUIRE SUBJECT` accounts); the other files
//! are the ways a certificate should be refused: another CA, expired, the wrong host name,
//! self-signed. Keys are ECDSA P-256 in PKCS#8 PEM, which rustls, OpenSSL (MariaDB, PHP,
//! Python, Node) and Java all read. Self-contained (rcgen only) so the library's unit tests
//! include this file too.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};

/// A certificate (PEM, leaf only) and its private key (PKCS#8 PEM).
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificate's notAfter, unix seconds.
    pub not_after: i64,
}

/// Validity of the certificates meant to be good: well past any test run, before 2050 so
/// every client's date handling (UTCTime) stays on the common path.
const GOOD_FROM: (i32, u8, u8) = (2020, 1, 1);
const GOOD_UNTIL: (i32, u8, u8) = (2049, 12, 31);

/// The certificate files in one directory.
pub struct Certs {
    pub dir: PathBuf,
    /// The CA certificate (PEM) that signed `server`, `client`, `wrong_host` and `expired`.
    pub ca: PathBuf,
    /// For `localhost`, `127.0.0.1` and `::1`.
    pub server: CertPair,
    /// CN `x509user`, for client authentication.
    pub client: CertPair,
    /// A second CA, unrelated to `ca`, and a server certificate it signed (`localhost` etc.).
    pub other_ca: PathBuf,
    pub other_server: CertPair,
    /// Signed by `ca` for `localhost` etc., expired since 2001.
    pub expired: CertPair,
    /// Signed by `ca`, for `wrong.example` only.
    pub wrong_host: CertPair,
    /// Self-signed, for `localhost` etc.
    pub self_signed: CertPair,
    issuer: CertifiedIssuer<'static, KeyPair>,
    serial: AtomicU64,
}

impl Certs {
    /// Writes every file into `dir` (which must exist).
    pub fn generate(dir: &Path) -> Certs {
        let issuer = ca("mysql-lb test CA");
        let ca_path = write(dir, "ca.pem", &issuer.pem());
        let other_issuer = ca("mysql-lb other test CA");
        let other_ca = write(dir, "other-ca.pem", &other_issuer.pem());
        let local = local_names();
        let server = leaf(dir, "server", &local, Leaf::server(100), &issuer);
        let client = leaf(dir, "client", &[], Leaf::client(101), &issuer);
        let other_server = leaf(
            dir,
            "other-server",
            &local,
            Leaf::server(102),
            &other_issuer,
        );
        let mut expired = Leaf::server(103);
        expired.validity = ((2000, 1, 1), (2001, 1, 1));
        let expired = leaf(dir, "expired", &local, expired, &issuer);
        let wrong = ["wrong.example".to_owned()];
        let wrong_host = leaf(dir, "wrong-host", &wrong, Leaf::server(104), &issuer);
        let self_signed = self_signed(dir, "self-signed", &local);
        Certs {
            dir: dir.to_owned(),
            ca: ca_path,
            server,
            client,
            other_ca,
            other_server,
            expired,
            wrong_host,
            self_signed,
            issuer,
            serial: AtomicU64::new(1000),
        }
    }

    /// A new server certificate from `ca` for `localhost` etc. with its own serial number and
    /// the given expiry date, written as `NAME.pem` / `NAME-key.pem` (for reload tests: a
    /// reloaded certificate is told from the old one by serial and expiry).
    pub fn fresh_server_cert(&self, name: &str, not_after: (i32, u8, u8)) -> CertPair {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
        let mut params = Leaf::server(serial);
        params.validity.1 = not_after;
        leaf(&self.dir, name, &local_names(), params, &self.issuer)
    }
}

fn local_names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = date_time_ymd(GOOD_FROM.0, GOOD_FROM.1, GOOD_FROM.2);
    params.not_after = date_time_ymd(GOOD_UNTIL.0, GOOD_UNTIL.1, GOOD_UNTIL.2);
    let key = KeyPair::generate().expect("generate a CA key");
    CertifiedIssuer::self_signed(params, key).expect("self-sign the CA")
}

/// What distinguishes one leaf certificate from another.
struct Leaf {
    serial: u64,
    usage: ExtendedKeyUsagePurpose,
    common_name: &'static str,
    validity: ((i32, u8, u8), (i32, u8, u8)),
}

impl Leaf {
    fn server(serial: u64) -> Self {
        Leaf {
            serial,
            usage: ExtendedKeyUsagePurpose::ServerAuth,
            common_name: "localhost",
            validity: (GOOD_FROM, GOOD_UNTIL),
        }
    }

    fn client(serial: u64) -> Self {
        Leaf {
            serial,
            usage: ExtendedKeyUsagePurpose::ClientAuth,
            common_name: "x509user",
            validity: (GOOD_FROM, GOOD_UNTIL),
        }
    }

    fn params(&self, names: &[String]) -> CertificateParams {
        let mut params = CertificateParams::new(names.to_vec()).expect("valid names");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, self.common_name);
        params.serial_number = Some(SerialNumber::from(self.serial));
        params.extended_key_usages = vec![self.usage.clone()];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let ((y0, m0, d0), (y1, m1, d1)) = self.validity;
        params.not_before = date_time_ymd(y0, m0, d0);
        params.not_after = date_time_ymd(y1, m1, d1);
        params
    }
}

fn leaf(
    dir: &Path,
    name: &str,
    names: &[String],
    leaf: Leaf,
    issuer: &CertifiedIssuer<'static, KeyPair>,
) -> CertPair {
    let params = leaf.params(names);
    let key = KeyPair::generate().expect("generate a key");
    let cert = params.signed_by(&key, issuer).expect("sign a certificate");
    pair(dir, name, &cert.pem(), &key, &params)
}

fn self_signed(dir: &Path, name: &str, names: &[String]) -> CertPair {
    let params = Leaf::server(1).params(names);
    let key = KeyPair::generate().expect("generate a key");
    let cert = params.self_signed(&key).expect("self-sign a certificate");
    pair(dir, name, &cert.pem(), &key, &params)
}

fn pair(
    dir: &Path,
    name: &str,
    cert_pem: &str,
    key: &KeyPair,
    params: &CertificateParams,
) -> CertPair {
    CertPair {
        cert: write(dir, &format!("{name}.pem"), cert_pem),
        key: write(dir, &format!("{name}-key.pem"), &key.serialize_pem()),
        not_after: params.not_after.unix_timestamp(),
    }
}

fn write(dir: &Path, file: &str, contents: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
