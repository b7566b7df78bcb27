//! TLS material: the configuration's certificate files turned into rustls configurations.
//!
//! [`TlsMaterial::load`] is the only place that reads certificate and key files. Start-up and
//! every reload go through it, so a bad file gets the same error in both (naming the config key
//! and the file), and a reload that fails can keep the material it had.
//!
//! The configurations are built once per load and shared by every session: the client leg's
//! `ServerConfig` keeps a session cache and issues TLS 1.3 tickets, and each backend gets one
//! `ClientConfig` whose session cache lets later sessions to that backend resume, so repeated
//! connects skip the full handshake on both legs. The crypto provider is ring, passed
//! explicitly, never the process-wide default another crate may have installed.

mod pem;
mod verify;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ClientConfig, CommonState, InconsistentKeys, RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::config::{BackendAddr, BackendConfig, BackendTlsMode, ClientTls, Config, TlsVersion};
use crate::telemetry::metrics::Metrics;

/// TLS sessions the client leg remembers for TLS 1.2 session-id resumption (TLS 1.3 uses
/// stateless tickets).
const SERVER_SESSION_CACHE: usize = 4096;

/// Everything TLS for one configuration: the client leg, and one leg per backend. The default
/// has neither (before the configuration is loaded).
#[derive(Default)]
pub struct TlsMaterial {
    /// None when `tls` is not configured: CLIENT_SSL is not offered to clients.
    pub client: Option<ClientTlsAcceptor>,
    backends: HashMap<String, Arc<BackendTlsConnector>>,
}

/// What mysql-lb presents to clients that send an SSLRequest.
pub struct ClientTlsAcceptor {
    /// For [`TlsSocket::accept`](crate::net::leg::TlsSocket::accept), which drives the
    /// handshake and then seals records itself (`enable_secret_extraction` is on).
    pub config: Arc<ServerConfig>,
    /// The same configuration for tokio-rustls (tests).
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// `tls.require`: a TCP client that does not switch to TLS is refused.
    pub require: bool,
    /// Expiry of the certificate served (its leaf), unix seconds.
    pub not_after: Option<i64>,
}

/// How mysql-lb talks TLS to one backend.
pub struct BackendTlsConnector {
    pub mode: BackendTlsMode,
    /// None when the mode is `disabled`.
    pub connector: Option<tokio_rustls::TlsConnector>,
    /// The name the backend's certificate is checked against (`verify_identity`) and sent as
    /// SNI: its host, or `localhost` for a unix socket.
    pub server_name: ServerName<'static>,
    /// Expiry of the client certificate presented to the backend, unix seconds.
    pub client_cert_not_after: Option<i64>,
    /// `allow_cleartext_passwords`: a password in clear may cross this leg when it is
    /// plaintext TCP to another host.
    pub allow_cleartext_passwords: bool,
}

/// A TLS setting that cannot be used; the message names the config key and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key} {}: {problem}", path.display())]
    File {
        key: String,
        path: PathBuf,
        problem: FileProblem,
    },
    #[error(
        "{prefix}.key does not match {prefix}.cert (key {}, certificate {}): the private key \
         is not the one of the first certificate in the chain",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        prefix: String,
        cert: PathBuf,
        key: PathBuf,
    },
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

/// What is wrong with one file.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("cannot read it: {0}")]
    Io(std::io::Error),
    #[error("not a PEM file: {0}")]
    NotPem(String),
    #[error("no certificate in the file{found}")]
    NoCertificate { found: String },
    #[error("no private key in the file (PKCS#8, PKCS#1 or SEC1 PEM expected){found}")]
    NoKey { found: String },
    #[error("more than one private key in the file")]
    SeveralKeys,
    #[error("certificate {index} in the file does not parse: {reason}")]
    BadCertificate { index: usize, reason: String },
    #[error("{what}: {source}")]
    Rejected {
        what: &'static str,
        source: Box<rustls::Error>,
    },
}

impl TlsError {
    fn file(key: &str, path: &Path, problem: FileProblem) -> Self {
        Self::File {
            key: key.to_owned(),
            path: path.to_owned(),
            problem,
        }
    }

    fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

impl TlsMaterial {
    /// Reads every certificate, key and CA file the configuration names and builds the legs.
    pub fn load(config: &Config) -> Result<TlsMaterial, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = config
            .tls
            .as_ref()
            .map(|tls| ClientTlsAcceptor::load(tls, &provider))
            .transpose()?;
        let mut backends = HashMap::with_capacity(config.backends.len());
        for (i, backend) in config.backends.iter().enumerate() {
            let leg = BackendTlsConnector::load(&format!("backends[{i}]"), backend, &provider)?;
            backends.insert(backend.name.clone(), Arc::new(leg));
        }
        Ok(TlsMaterial { client, backends })
    }

    /// The leg of the backend named `name` (`BackendConfig.name`).
    pub fn backend(&self, name: &str) -> Option<&Arc<BackendTlsConnector>> {
        self.backends.get(name)
    }

    /// Sets the expiry gauges of the certificates mysql-lb presents (leg `client` and
    /// `backend_client`), and removes the series `previous` (the material this one replaces)
    /// had and this one has not, including leg `backend` for backends no longer configured.
    pub fn export_expiry(&self, metrics: &Metrics, previous: Option<&TlsMaterial>) {
        let client = self.client.as_ref().and_then(|c| c.not_after);
        match client {
            Some(t) => metrics.set_certificate_expiry("client", "", t),
            None => metrics.remove_certificate_expiry("client", ""),
        }
        for (name, leg) in &self.backends {
            match leg.client_cert_not_after {
                Some(t) => metrics.set_certificate_expiry("backend_client", name, t),
                None => metrics.remove_certificate_expiry("backend_client", name),
            }
        }
        let Some(previous) = previous else { return };
        for name in previous.backends.keys() {
            if !self.backends.contains_key(name) {
                metrics.remove_certificate_expiry("backend_client", name);
                metrics.remove_certificate_expiry("backend", name);
            }
        }
    }
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let modes: HashMap<&str, &str> = self
            .backends
            .iter()
            .map(|(name, leg)| (name.as_str(), leg.mode.as_str()))
            .collect();
        f.debug_struct("TlsMaterial")
            .field("client", &self.client.is_some())
            .field("backends", &modes)
            .finish()
    }
}

impl ClientTlsAcceptor {
    fn load(tls: &ClientTls, provider: &Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let certified = certified_key("tls", &tls.cert, &tls.key, provider)?;
        let not_after = certified.end_entity_cert().ok().and_then(not_after);
        let ordered = Arc::new(in_order(provider, &tls.cipher_suites)?);
        let mut config = ServerConfig::builder_with_provider(ordered)
            .with_protocol_versions(versions(tls.min_version))
            .map_err(|e| TlsError::invalid("tls.min_version", e.to_string()))?
            .with_client_cert_verifier(client_verifier(tls, provider)?)
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
        // `tls.cipher_suites` is in mysql-lb's order of preference, which picks.
        config.ignore_client_order = true;
        config.session_storage = ServerSessionMemoryCache::new(SERVER_SESSION_CACHE);
        // Stateless tickets: TLS 1.3 resumption without a server-side cache. The keys are
        // random per load, so tickets from before a reload fall back to a full handshake.
        config.ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| TlsError::invalid("tls", format!("session tickets: {e}")))?;
        // The handshake hands its traffic secrets to the client leg's own record layer
        // (src/net/leg/tls/records.rs).
        config.enable_secret_extraction = true;
        let config = Arc::new(config);
        Ok(ClientTlsAcceptor {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::clone(&config)),
            config,
            require: tls.require,
            not_after,
        })
    }
}

/// `provider` offering the suites named by `tls.cipher_suites`, in that order (the names were
/// checked with the configuration; one unknown here is still an error naming the key).
fn in_order(provider: &CryptoProvider, names: &[String]) -> Result<CryptoProvider, TlsError> {
    let mut suites = Vec::with_capacity(names.len());
    for name in names {
        let suite = provider
            .cipher_suites
            .iter()
            .find(|s| s.suite().as_str() == Some(name.as_str()))
            .ok_or_else(|| {
                TlsError::invalid(
                    "tls.cipher_suites",
                    format!("unknown cipher suite `{name}`"),
                )
            })?;
        suites.push(*suite);
    }
    Ok(CryptoProvider {
        cipher_suites: suites,
        ..provider.clone()
    })
}

/// Mandatory client certificates with `verify_client`; optional ones (verified when presented)
/// with only `ca`; none asked for otherwise.
fn client_verifier(
    tls: &ClientTls,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let Some(ca) = &tls.ca else {
        if tls.verify_client {
            return Err(TlsError::invalid(
                "tls.verify_client",
                "needs `tls.ca`: the CA certificates client certificates must chain to",
            ));
        }
        return Ok(WebPkiClientVerifier::no_client_auth());
    };
    let roots = root_store("tls.ca", ca)?;
    let builder = WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(provider));
    let builder = if tls.verify_client {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder
        .build()
        .map_err(|e| TlsError::invalid("tls.ca", format!("{}: {e}", ca.display())))
}

impl BackendTlsConnector {
    /// `prefix` is where the backend was written (`backends[2]`), for error messages.
    fn load(
        prefix: &str,
        backend: &BackendConfig,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let tls = &backend.tls;
        let server_name = server_name(prefix, &backend.address, tls.mode)?;
        let mut leg = BackendTlsConnector {
            mode: tls.mode,
            connector: None,
            server_name,
            client_cert_not_after: None,
            allow_cleartext_passwords: tls.allow_cleartext_passwords,
        };
        if tls.mode == BackendTlsMode::Disabled {
            return Ok(leg);
        }
        let key = format!("{prefix}.tls");
        let builder = ClientConfig::builder_with_provider(Arc::clone(provider))
            .with_protocol_versions(versions(tls.min_version))
            .map_err(|e| TlsError::invalid(format!("{key}.min_version"), e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(server_verifier(&key, tls, provider)?);
        // The default resumption (an in-memory cache, TLS 1.3 tickets and TLS 1.2 session ids)
        // is kept: this config is shared by every session to the backend, so they resume.
        let config = match (&tls.cert, &tls.key) {
            (Some(cert), Some(key_path)) => {
                let certified = certified_key(&key, cert, key_path, provider)?;
                leg.client_cert_not_after = certified.end_entity_cert().ok().and_then(not_after);
                builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(certified)))
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(TlsError::invalid(
                    format!("{key}.cert"),
                    "a client certificate needs both `cert` and `key`",
                ))
            }
        };
        leg.connector = Some(tokio_rustls::TlsConnector::from(Arc::new(config)));
        Ok(leg)
    }

    /// Whether this session's backend leg switches to TLS, given whether the backend's greeting
    /// offered CLIENT_SSL and whether it is a unix socket; `Err` when the mode demands TLS the
    /// backend does not offer (the reason, for the client's ERR and the log).
    pub fn uses_tls(&self, offered: bool, unix: bool) -> Result<bool, &'static str> {
        match self.mode {
            BackendTlsMode::Disabled => Ok(false),
            BackendTlsMode::Preferred => Ok(offered && !unix),
            _ if offered => Ok(true),
            BackendTlsMode::Required => {
                Err("the backend does not offer TLS and its tls.mode is required")
            }
            BackendTlsMode::VerifyCa => {
                Err("the backend does not offer TLS and its tls.mode is verify_ca")
            }
            BackendTlsMode::VerifyIdentity => {
                Err("the backend does not offer TLS and its tls.mode is verify_identity")
            }
        }
    }
}

impl std::fmt::Debug for BackendTlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendTlsConnector")
            .field("mode", &self.mode)
            .field("server_name", &self.server_name)
            .field("client_cert_not_after", &self.client_cert_not_after)
            .finish_non_exhaustive()
    }
}

/// The host a TCP backend was given by (a DNS name or an IP address), `localhost` for a unix
/// socket. Only `verify_identity` needs it to be a valid name; the other modes fall back to
/// `localhost` (it is then only the SNI sent).
fn server_name(
    prefix: &str,
    address: &BackendAddr,
    mode: BackendTlsMode,
) -> Result<ServerName<'static>, TlsError> {
    let localhost = || ServerName::try_from("localhost").expect("a valid DNS name");
    let BackendAddr::Tcp { host, .. } = address else {
        return Ok(localhost());
    };
    match ServerName::try_from(host.clone()) {
        Ok(name) => Ok(name),
        Err(_) if mode != BackendTlsMode::VerifyIdentity => Ok(localhost()),
        Err(e) => Err(TlsError::invalid(
            format!("{prefix}.address"),
            format!("`{host}` is not a host name or IP address a certificate can name ({e}), as tls.mode verify_identity needs"),
        )),
    }
}

fn server_verifier(
    key: &str,
    tls: &crate::config::BackendTls,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, TlsError> {
    if !tls.mode.verifies() {
        return Ok(Arc::new(verify::AnyCertificate::new(provider)));
    }
    let Some(ca) = &tls.ca else {
        return Err(TlsError::invalid(
            format!("{key}.ca"),
            format!(
                "mode {} needs `ca`: the CA certificates the backend's certificate must chain to",
                tls.mode.as_str()
            ),
        ));
    };
    let ca_key = format!("{key}.ca");
    let webpki =
        WebPkiServerVerifier::builder_with_provider(root_store(&ca_key, ca)?, Arc::clone(provider))
            .build()
            .map_err(|e| TlsError::invalid(ca_key, format!("{}: {e}", ca.display())))?;
    Ok(match tls.mode {
        BackendTlsMode::VerifyCa => Arc::new(verify::AnyName(webpki)),
        _ => webpki,
    })
}

/// A certificate chain and its private key, checked to belong together. `prefix` is the config
/// key the `cert` and `key` entries sit under (`tls`, `backends[0].tls`).
fn certified_key(
    prefix: &str,
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let cert_key = format!("{prefix}.cert");
    let key_key = format!("{prefix}.key");
    let chain = pem::certificates(&cert_key, cert)?;
    let private: PrivateKeyDer<'static> = pem::private_key(&key_key, key)?;
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|e| {
            let what = "the private key is not usable";
            TlsError::file(
                &key_key,
                key,
                FileProblem::Rejected {
                    what,
                    source: Box::new(e),
                },
            )
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key type whose public half ring cannot derive: nothing to compare, the handshake
        // will tell.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {
            Ok(Arc::new(certified))
        }
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                prefix: prefix.to_owned(),
                cert: cert.to_owned(),
                key: key.to_owned(),
            })
        }
        Err(e) => {
            let what = "the certificate's public key is not usable";
            Err(TlsError::file(
                &cert_key,
                cert,
                FileProblem::Rejected {
                    what,
                    source: Box::new(e),
                },
            ))
        }
    }
}

fn root_store(key: &str, path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in pem::certificates(key, path)? {
        roots.add(cert).map_err(|e| {
            let what = "a certificate is not usable as a CA";
            TlsError::file(
                key,
                path,
                FileProblem::Rejected {
                    what,
                    source: Box::new(e),
                },
            )
        })?;
    }
    Ok(Arc::new(roots))
}

fn versions(min: TlsVersion) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min {
        TlsVersion::V1_2 => rustls::ALL_VERSIONS,
        TlsVersion::V1_3 => &TLS13_ONLY,
    }
}

/// A certificate's `notAfter`, unix seconds; None when it does not parse.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// The expiry of the certificate the peer presented at this connection's handshake.
pub fn peer_not_after(common: &CommonState) -> Option<i64> {
    not_after(common.peer_certificates()?.first()?)
}

/// Protocol version and cipher suite of an established connection, for logs:
/// `TLSv1.3 TLS13_AES_256_GCM_SHA384`.
pub fn describe(common: &CommonState) -> String {
    let version = match common.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".to_owned(),
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".to_owned(),
        Some(other) => format!("{other:?}"),
        None => "TLS (handshake not finished)".to_owned(),
    };
    match common.negotiated_cipher_suite() {
        Some(suite) => {
            let suite = suite.suite();
            match suite.as_str() {
                Some(name) => format!("{version} {name}"),
                None => format!("{version} {suite:?}"),
            }
        }
        None => version,
    }
}

#[cfg(test)]
pub(crate) mod tests;
