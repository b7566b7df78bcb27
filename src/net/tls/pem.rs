//! Reading PEM files for the TLS material, with errors that name the config key and the file.
//!
//! Each file is read once and every PEM section looked at, so the error can tell a file that is
//! not PEM at all from one that holds the wrong kind of section (a key where a certificate was
//! expected), which is the usual mistake.

use std::path::Path;

use rustls_pki_types::pem::{PemObject, SectionKind};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{FileProblem, TlsError};

/// Every certificate in the file, in file order (leaf first for a chain), each checked to parse
/// as X.509 so a damaged one is reported here rather than as a handshake failure.
pub(super) fn certificates(
    key: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let sections = sections(key, path)?;
    let mut certs = Vec::new();
    for (kind, der) in &sections {
        if *kind != SectionKind::Certificate {
            continue;
        }
        if let Err(e) = x509_parser::parse_x509_certificate(der) {
            let problem = FileProblem::BadCertificate {
                index: certs.len() + 1,
                reason: e.to_string(),
            };
            return Err(TlsError::file(key, path, problem));
        }
        certs.push(CertificateDer::from(der.clone()));
    }
    if certs.is_empty() {
        let found = kinds(&sections);
        return Err(TlsError::file(
            key,
            path,
            FileProblem::NoCertificate { found },
        ));
    }
    Ok(certs)
}

/// The one private key in the file: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
pub(super) fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let sections = sections(key, path)?;
    let mut keys = sections
        .iter()
        .filter_map(|(kind, der)| PrivateKeyDer::from_pem(*kind, der.clone()));
    match (keys.next(), keys.next()) {
        (Some(k), None) => Ok(k),
        (Some(_), Some(_)) => Err(TlsError::file(key, path, FileProblem::SeveralKeys)),
        (None, _) => {
            let found = kinds(&sections);
            Err(TlsError::file(key, path, FileProblem::NoKey { found }))
        }
    }
}

fn sections(key: &str, path: &Path) -> Result<Vec<(SectionKind, Vec<u8>)>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| TlsError::file(key, path, FileProblem::Io(e)))?;
    let sections = <(SectionKind, Vec<u8>)>::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(key, path, FileProblem::NotPem(e.to_string())))?;
    let blank = bytes.iter().all(u8::is_ascii_whitespace);
    if sections.is_empty() && !blank && !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let problem = FileProblem::NotPem("no -----BEGIN line".to_owned());
        return Err(TlsError::file(key, path, problem));
    }
    Ok(sections)
}

/// What the file holds instead, for the error message ("" when nothing).
fn kinds(sections: &[(SectionKind, Vec<u8>)]) -> String {
    let names: Vec<&str> = sections.iter().map(|(k, _)| kind_name(*k)).collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" (it holds: {})", names.join(", "))
    }
}

fn kind_name(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Certificate => "CERTIFICATE",
        SectionKind::PublicKey => "PUBLIC KEY",
        SectionKind::RsaPrivateKey => "RSA PRIVATE KEY",
        SectionKind::PrivateKey => "PRIVATE KEY",
        SectionKind::EcPrivateKey => "EC PRIVATE KEY",
        SectionKind::Crl => "X509 CRL",
        SectionKind::Csr => "CERTIFICATE REQUEST",
        SectionKind::EchConfigList => "ECHCONFIG",
        _ => "another PEM section",
    }
}
