//! `tls`, `backend_tls`, per-backend `tls`, and the compression switches: what each leg of a
//! session may encrypt or compress.
//!
//! The two legs are independent: the client leg is configured once for every listener (`tls`),
//! the backend leg per backend with a global default (`backend_tls`, whose keys a backend's own
//! `tls:` map overrides one by one). Only paths are checked here (present, readable); the files
//! are parsed into certificates when the TLS material is built (`crate::net::tls`), at start and at
//! every reload, so a bad file is reported the same way in both cases.

use std::path::PathBuf;

use serde::Deserialize;

use super::{check_readable_file, ConfigError};

/// The client leg: what mysql-lb presents to clients that ask for TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates that client certificates must chain to (with `verify_client`).
    pub ca: Option<PathBuf>,
    /// Mutual TLS: a TLS client must present a certificate that chains to `ca`.
    pub verify_client: bool,
    pub min_version: TlsVersion,
    /// A TCP client that does not switch to TLS is refused (unix-socket clients count as secure).
    pub require: bool,
    /// The cipher suites offered, most preferred first; mysql-lb's order picks, not the
    /// client's (see [`CIPHER_SUITES`]).
    pub cipher_suites: Vec<String>,
}

/// Every cipher suite the client leg can offer (rustls' with the ring provider), in the default
/// order of preference: AES-128-GCM first, as Go, BoringSSL and Mozilla's intermediate profile
/// order them. Clients (OpenSSL, GnuTLS) list AES-256-GCM first and rustls would follow them;
/// AES-128 is a secure choice too and, with AES-NI, encrypts with 10 rounds instead of 14, which
/// is fewer instructions per relayed byte. ChaCha20-Poly1305 (fast without AES-NI) comes after.
pub const CIPHER_SUITES: [&str; 9] = [
    "TLS13_AES_128_GCM_SHA256",
    "TLS13_AES_256_GCM_SHA384",
    "TLS13_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// The oldest TLS version accepted on a leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum TlsVersion {
    #[default]
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

/// The backend leg's TLS, named as MySQL's `--ssl-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendTlsMode {
    /// Never TLS.
    Disabled,
    /// TLS over TCP when the backend offers it, unverified; plaintext otherwise. A unix socket
    /// stays plaintext (it never leaves the machine).
    #[default]
    Preferred,
    /// TLS or refuse the session; the certificate is not verified.
    Required,
    /// TLS, and the backend's certificate must chain to `ca` (any host name).
    VerifyCa,
    /// As `verify_ca`, and the certificate must name the backend's host.
    VerifyIdentity,
}

impl BackendTlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Preferred => "preferred",
            Self::Required => "required",
            Self::VerifyCa => "verify_ca",
            Self::VerifyIdentity => "verify_identity",
        }
    }

    /// Whether the backend's certificate is checked against `ca`.
    pub fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyIdentity)
    }

    /// Whether a backend that offers no TLS is refused.
    pub fn requires(self) -> bool {
        !matches!(self, Self::Disabled | Self::Preferred)
    }
}

/// One backend's leg, after a backend's own keys were laid over `backend_tls`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackendTls {
    pub mode: BackendTlsMode,
    /// PEM CA certificates the backend's certificate must chain to (`verify_ca`,
    /// `verify_identity`).
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM chain) and key presented to the backend, for X.509 accounts.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub min_version: TlsVersion,
    /// A password a client sends in clear over TLS or a unix socket (PAM's dialog,
    /// mysql_clear_password, sha256_password, caching_sha2_password's full authentication) may
    /// cross this backend's leg when it is plaintext TCP to another host. Off: such a login is
    /// refused before the password is forwarded.
    pub allow_cleartext_passwords: bool,
}

/// [`CIPHER_SUITES`] as `tls.cipher_suites` holds them: the default.
pub fn default_cipher_suites() -> Vec<String> {
    CIPHER_SUITES.iter().map(|&s| s.to_owned()).collect()
}

/// `tls:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientTls {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
    verify_client: Option<bool>,
    min_version: Option<TlsVersion>,
    require: Option<bool>,
    cipher_suites: Option<Vec<String>>,
}

impl RawClientTls {
    pub(super) fn into_tls(self) -> ClientTls {
        ClientTls {
            cert: self.cert,
            key: self.key,
            ca: self.ca,
            verify_client: self.verify_client.unwrap_or(false),
            min_version: self.min_version.unwrap_or_default(),
            require: self.require.unwrap_or(false),
            cipher_suites: self.cipher_suites.unwrap_or_else(default_cipher_suites),
        }
    }
}

/// `backend_tls:` or a backend's `tls:` as written; a missing key inherits.
#[derive(Default, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackendTls {
    mode: Option<BackendTlsMode>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    min_version: Option<TlsVersion>,
    allow_cleartext_passwords: Option<bool>,
}

impl RawBackendTls {
    /// This backend's keys over the defaults.
    pub(super) fn over(self, defaults: &BackendTls) -> BackendTls {
        BackendTls {
            mode: self.mode.unwrap_or(defaults.mode),
            ca: self.ca.or_else(|| defaults.ca.clone()),
            cert: self.cert.or_else(|| defaults.cert.clone()),
            key: self.key.or_else(|| defaults.key.clone()),
            min_version: self.min_version.unwrap_or(defaults.min_version),
            allow_cleartext_passwords: self
                .allow_cleartext_passwords
                .unwrap_or(defaults.allow_cleartext_passwords),
        }
    }
}

pub(super) fn validate_client(tls: Option<&ClientTls>) -> Result<(), ConfigError> {
    let Some(tls) = tls else { return Ok(()) };
    readable("tls.cert", &tls.cert)?;
    readable("tls.key", &tls.key)?;
    if let Some(ca) = &tls.ca {
        readable("tls.ca", ca)?;
    }
    if tls.verify_client && tls.ca.is_none() {
        return Err(ConfigError::invalid(
            "tls.verify_client",
            "needs `tls.ca`: the CA certificates client certificates must chain to",
        ));
    }
    validate_cipher_suites(&tls.cipher_suites, tls.min_version)
}

/// `tls.cipher_suites`: known names, each once, and a suite for every version accepted.
fn validate_cipher_suites(suites: &[String], min: TlsVersion) -> Result<(), ConfigError> {
    const KEY: &str = "tls.cipher_suites";
    for (i, name) in suites.iter().enumerate() {
        if !CIPHER_SUITES.contains(&name.as_str()) {
            let known = CIPHER_SUITES.join(", ");
            return Err(ConfigError::invalid(
                KEY,
                format!("unknown cipher suite `{name}` (known: {known})"),
            ));
        }
        if suites[..i].contains(name) {
            return Err(ConfigError::invalid(
                KEY,
                format!("`{name}` is listed twice"),
            ));
        }
    }
    if !suites.iter().any(|s| s.starts_with("TLS13_")) {
        return Err(ConfigError::invalid(
            KEY,
            "no TLS 1.3 suite (TLS13_...) listed: a TLS 1.3 client could not connect",
        ));
    }
    let tls12 = suites.iter().any(|s| s.starts_with("TLS_"));
    if min == TlsVersion::V1_2 && !tls12 {
        return Err(ConfigError::invalid(
            KEY,
            "no TLS 1.2 suite (TLS_ECDHE_...) listed while tls.min_version is \"1.2\": list \
             one, or set min_version \"1.3\"",
        ));
    }
    Ok(())
}

/// `key` is where the backend's settings were written (`backends[2].tls`).
pub(super) fn validate_backend(key: &str, tls: &BackendTls) -> Result<(), ConfigError> {
    for (name, path) in [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)] {
        if let Some(path) = path {
            readable(&format!("{key}.{name}"), path)?;
        }
    }
    if tls.mode.verifies() && tls.ca.is_none() {
        return Err(ConfigError::invalid(
            format!("{key}.ca"),
            format!(
                "mode {} needs `ca`: the CA certificates the backend's certificate must chain to",
                tls.mode.as_str()
            ),
        ));
    }
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(ConfigError::invalid(
            format!("{key}.cert"),
            "a client certificate needs both `cert` and `key`",
        ));
    }
    Ok(())
}

fn readable(key: &str, path: &std::path::Path) -> Result<(), ConfigError> {
    check_readable_file(path).map_err(|m| ConfigError::invalid(key, m))
}
