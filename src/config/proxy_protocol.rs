//! `proxy_protocol`: whether backend connections start with a PROXY protocol header carrying the
//! client's address (see `crate::wire::protocol::proxy_out`).
//!
//! A global key sets it for every backend, and a backend's own `proxy_protocol:` overrides it,
//! since only servers configured with `proxy_protocol_networks` accept the header (one without
//! it refuses the connection). Kept apart so the choice and how a backend resolves it read in
//! one place.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;

use super::{BackendConfig, Config};
use crate::wire::protocol::proxy_out::Version;

/// What a backend connection starts with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    /// Nothing: the backend sees the proxy's address.
    #[default]
    Off,
    /// The text header.
    V1,
    /// The binary header.
    V2,
}

impl ProxyProtocol {
    pub fn version(self) -> Option<Version> {
        match self {
            Self::Off => None,
            Self::V1 => Some(Version::V1),
            Self::V2 => Some(Version::V2),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::V1 => "v1",
            Self::V2 => "v2",
        }
    }
}

impl fmt::Display for ProxyProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Config {
    /// The header `backend` is sent: its own `proxy_protocol:`, else the global one.
    pub fn proxy_protocol_of(&self, backend: &BackendConfig) -> ProxyProtocol {
        backend.proxy_protocol.unwrap_or(self.proxy_protocol)
    }

    /// Backends (by name) sent a header, and which.
    pub fn proxy_protocol_backends(&self) -> HashMap<String, Version> {
        self.backends
            .iter()
            .filter_map(|b| Some((b.name.clone(), self.proxy_protocol_of(b).version()?)))
            .collect()
    }

    /// One line for `--check-config`: the global setting and the backends that differ from it.
    pub fn proxy_protocol_summary(&self) -> String {
        let own: Vec<String> = self
            .backends
            .iter()
            .filter(|b| self.proxy_protocol_of(b) != self.proxy_protocol)
            .map(|b| format!("{} {}", b.name, self.proxy_protocol_of(b)))
            .collect();
        if own.is_empty() {
            format!("proxy_protocol to backends: {}", self.proxy_protocol)
        } else {
            format!(
                "proxy_protocol to backends: {} (except {})",
                self.proxy_protocol,
                own.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::from_yaml_str(yaml).unwrap()
    }

    #[test]
    fn off_by_default() {
        let c = config("backends: [\"127.0.0.1:3306\"]\n");
        assert_eq!(c.proxy_protocol, ProxyProtocol::Off);
        assert!(c.proxy_protocol_backends().is_empty());
        assert_eq!(
            c.proxy_protocol_summary(),
            "proxy_protocol to backends: off"
        );
    }

    #[test]
    fn a_backend_key_overrides_the_global_one() {
        let c = config(
            "proxy_protocol: v2\n\
             backends:\n\
             - 127.0.0.1:3306\n\
             - {address: \"127.0.0.1:3307\", proxy_protocol: v1}\n\
             - {address: \"127.0.0.1:3308\", proxy_protocol: off}\n\
             pools:\n  other:\n    backends: [\"127.0.0.1:3309\"]\n",
        );
        let sent = c.proxy_protocol_backends();
        assert_eq!(sent.get("127.0.0.1:3306"), Some(&Version::V2));
        assert_eq!(sent.get("127.0.0.1:3307"), Some(&Version::V1));
        assert_eq!(sent.get("127.0.0.1:3308"), None);
        assert_eq!(sent.get("127.0.0.1:3309"), Some(&Version::V2));
        assert_eq!(
            c.proxy_protocol_summary(),
            "proxy_protocol to backends: v2 (except 127.0.0.1:3307 v1, 127.0.0.1:3308 off)"
        );
    }

    #[test]
    fn an_unknown_version_is_an_error_naming_the_key() {
        let e = Config::from_yaml_str("proxy_protocol: v3\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("proxy_protocol"), "{msg}");
        assert!(msg.contains("v3"), "{msg}");
        let e =
            Config::from_yaml_str("backends:\n- {address: \"127.0.0.1:1\", proxy_protocol: 2}\n")
                .unwrap_err();
        assert!(e.to_string().contains("proxy_protocol"), "{e}");
    }
}
