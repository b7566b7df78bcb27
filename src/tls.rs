//! PLACEHOLDER until the tls branch lands (replaced wholesale at merge).
use std::sync::Arc;

use crate::config::{BackendTlsMode, Config};

#[derive(Default)]
pub struct TlsMaterial {
    pub client: Option<ClientLeg>,
    backends: std::collections::HashMap<String, Arc<BackendLeg>>,
}
pub struct ClientLeg {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub require: bool,
    pub not_after: Option<i64>,
}
pub struct BackendLeg {
    pub mode: BackendTlsMode,
    pub connector: Option<tokio_rustls::TlsConnector>,
    pub server_name: rustls_pki_types::ServerName<'static>,
    pub client_cert_not_after: Option<i64>,
}
#[derive(Debug, thiserror::Error)]
#[error("tls")]
pub struct TlsError;
impl TlsMaterial {
    pub fn load(_config: &Config) -> Result<TlsMaterial, TlsError> {
        Ok(TlsMaterial {
            client: None,
            backends: Default::default(),
        })
    }
    pub fn backend(&self, name: &str) -> Option<&Arc<BackendLeg>> {
        self.backends.get(name)
    }
}
impl BackendLeg {
    pub fn uses_tls(&self, offered: bool, unix: bool) -> Result<bool, &'static str> {
        let _ = (offered, unix);
        Ok(false)
    }
}
pub fn not_after(_cert: &rustls_pki_types::CertificateDer<'_>) -> Option<i64> {
    None
}
pub fn describe(_common: &rustls::CommonState) -> String {
    String::new()
}
impl TlsMaterial {
    pub fn export_expiry(&self, _m: &crate::metrics::Metrics) {}
}
