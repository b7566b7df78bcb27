//! One backend entry as the file writes it (an address string, or a map), under the top-level
//! `backends:` and under each pool's, and the [`BackendConfig`] it becomes.
//!
//! Apart from `raw` (the whole file) and `pools` (the `pools:` map) because both read entries:
//! here, below both, neither depends on the other for them.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::address::IPV6_QUOTE_HINT;
use super::tls::RawBackendTls;
use super::{BackendAddr, BackendConfig, BackendKind, BackendTls, ProxyProtocol, Role};

/// The pool of the top-level `backends:` list and of backends given by flags.
pub const DEFAULT_POOL: &str = "default";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackendMap {
    address: BackendAddr,
    name: Option<String>,
    weight: Option<u32>,
    #[serde(rename = "type")]
    kind: Option<BackendKind>,
    role: Option<Role>,
    tls: Option<RawBackendTls>,
    compression: Option<bool>,
    proxy_protocol: Option<ProxyProtocol>,
}

/// A backend entry: a plain address string, or a map. Written by hand rather than `untagged` because
/// an untagged enum swallows the inner error ("did not match any variant") and loses the unknown key.
pub(super) enum RawBackend {
    Short(BackendAddr),
    Full(RawBackendMap),
}

impl<'de> Deserialize<'de> for RawBackend {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawBackend;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a backend address string or a map with `address`, `name`, `weight`, `type`, `role`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawBackend, E> {
                v.parse().map(RawBackend::Short).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawBackend, A::Error> {
                RawBackendMap::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawBackend::Full)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<RawBackend, A::Error> {
                Err(de::Error::custom(IPV6_QUOTE_HINT))
            }
        }
        d.deserialize_any(V)
    }
}

impl RawBackend {
    pub(super) fn into_backend(self, tls: &BackendTls, compression: bool) -> BackendConfig {
        let (address, name, weight, kind, role, own_tls, own_compression, proxy_protocol) =
            match self {
                RawBackend::Short(address) => (address, None, None, None, None, None, None, None),
                RawBackend::Full(m) => (
                    m.address,
                    m.name,
                    m.weight,
                    m.kind,
                    m.role,
                    m.tls,
                    m.compression,
                    m.proxy_protocol,
                ),
            };
        let mut b = BackendConfig::new(address, name, weight, kind.unwrap_or_default());
        b.role = super::roles::declared(role, kind);
        b.tls = own_tls.unwrap_or_default().over(tls);
        b.compression = own_compression.unwrap_or(compression);
        b.proxy_protocol = proxy_protocol;
        b
    }
}

impl BackendConfig {
    pub(super) fn new(
        address: BackendAddr,
        name: Option<String>,
        weight: Option<u32>,
        kind: BackendKind,
    ) -> Self {
        BackendConfig {
            name: name.unwrap_or_else(|| address.to_string()),
            address,
            weight: weight.unwrap_or(1),
            kind,
            tls: BackendTls::default(),
            compression: false,
            proxy_protocol: None,
            pool: DEFAULT_POOL.to_owned(),
            role: None,
        }
    }
}
