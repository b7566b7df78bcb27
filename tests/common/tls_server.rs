//! Throwaway certificates for the TLS tests, made with rcgen when a test binary first needs them.
//!
//! One CA signs a server certificate for `localhost` and `127.0.0.1` (what MariaDB and mysql-lb
//! present), a client certificate (mutual TLS, `REQUIRE X509` accounts), an expired server
//! certificate and one for another host name (the bad-certificate cases). A second CA signs
//! nothing here: a client that trusts only it must refuse every server above. Keys are ECDSA
//! P-256 (ring cannot generate RSA), which OpenSSL, rustls, mysqlnd, Node and Python all accept.
//! Nothing is committed: the files live in a temp dir removed when the test process exits.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every certificate the TLS tests use; see the module docs for what each is for.
#[derive(Debug)]
pub struct TestCerts {
    pub dir: PathBuf,
    /// The CA that signed everything below.
    pub ca: PathBuf,
    /// A CA that signed none of them.
    pub other_ca: PathBuf,
    /// For `localhost` and `127.0.0.1`, valid from 2020 to 2100.
    pub server: CertFiles,
    /// Subject [`CLIENT_SUBJECT`], for mutual TLS and `REQUIRE X509` accounts.
    pub client: CertFiles,
    /// For `localhost` and `127.0.0.1`, expired in 2021.
    pub expired: CertFiles,
    /// Valid, but for `wrong-host.invalid` only.
    pub wrong_host: CertFiles,
}

/// The subject of [`TestCerts::client`], as MariaDB prints it (`REQUIRE SUBJECT` syntax).
pub const CLIENT_SUBJECT: &str = "/CN=client (mysql-lb test)";

/// The certificates, made once per test binary.
pub fn certs() -> &'static TestCerts {
    static CERTS: OnceLock<TestCerts> = OnceLock::new();
    CERTS.get_or_init(|| make_certs(&super::mariadb::scratch_dir("certs")))
}

fn make_certs(dir: &Path) -> TestCerts {
    let (ca_pem, ca) = make_ca("mysql-lb test CA");
    let (other_ca_pem, _) = make_ca("mysql-lb unrelated CA");
    let local = ["localhost", "127.0.0.1"];
    let valid = (2020, 2100);
    let write = |name: &str, pem: &str| {
        let path = dir.join(name);
        fs::write(&path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    };
    // The file is named after the CN's first word.
    let leaf = |cn: &str, sans: &[&str], dates, eku| {
        let (cert, key) = make_leaf(&ca, sans, cn, dates, eku);
        let file = cn.split(' ').next().unwrap_or(cn);
        CertFiles {
            cert: write(&format!("{file}.pem"), &cert),
            key: write(&format!("{file}-key.pem"), &key),
        }
    };
    TestCerts {
        dir: dir.to_path_buf(),
        ca: write("ca.pem", &ca_pem),
        other_ca: write("other-ca.pem", &other_ca_pem),
        server: leaf("server", &local, valid, ExtendedKeyUsagePurpose::ServerAuth),
        client: leaf(
            "client (mysql-lb test)",
            &[],
            valid,
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
        expired: leaf(
            "expired",
            &local,
            (2020, 2021),
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        wrong_host: leaf(
            "wrong-host",
            &["wrong-host.invalid"],
            valid,
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
    }
}

fn make_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2100, 1, 1);
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("self-signed CA");
    (cert.pem(), Issuer::new(params, key))
}

/// A leaf certificate signed by `ca`, valid from January 1st of the first year to that of the
/// second: (certificate PEM, key PEM). `name` is the subject CN.
fn make_leaf(
    ca: &Issuer<'static, KeyPair>,
    sans: &[&str],
    name: &str,
    (from, until): (i32, i32),
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).expect("subject alt names");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.not_before = date_time_ymd(from, 1, 1);
    params.not_after = date_time_ymd(until, 1, 1);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyAgreement,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, ca).expect("signed leaf");
    (cert.pem(), key.serialize_pem())
}

/// A rustls client configuration that trusts `ca` and presents `identity` when given. ring is
/// the provider, as in the proxy.
pub fn client_config(ca: &Path, identity: Option<&CertFiles>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca) {
        roots.add(cert).expect("CA certificate accepted");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder
            .with_client_auth_cert(read_certs(&id.cert), read_key(&id.key))
            .expect("client certificate accepted"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

pub fn server_name(host: &str) -> ServerName<'static> {
    ServerName::try_from(host.to_string()).expect("a valid server name")
}

pub fn read_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn read_key(path: &Path) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
