//! `accept_proxy_protocol`: the networks an L4 load balancer connects from, whose TCP
//! connections must start with a PROXY protocol header (v1 or v2) naming the real client.
//!
//! A list of networks rather than an on/off switch because the header is trusted blindly: it
//! decides the address that logs, routes and scripts see, so only the balancer's own addresses
//! may send it. Kept apart from the rest of the configuration so its parsing and validation read
//! in one place.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::{ConfigError, ListenAddr};
use crate::config::cidr::Cidr;

/// One network of the list, parsed inside `deserialize_str` so serde_yaml puts the key path
/// (`accept_proxy_protocol[1]`) and the line on the error.
pub(super) struct RawCidr(pub(super) Cidr);

impl<'de> Deserialize<'de> for RawCidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawCidr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a network such as 10.0.0.0/8 or \"fd00::/8\", or an IP address")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawCidr, E> {
                v.parse().map(RawCidr).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// The list given twice the same network is a mistake worth naming; a list with no TCP listener
/// to apply to would silently do nothing.
pub(super) fn validate(networks: &[Cidr], listen: &[ListenAddr]) -> Result<(), ConfigError> {
    for (i, net) in networks.iter().enumerate() {
        if networks[..i].contains(net) {
            return Err(ConfigError::invalid(
                format!("accept_proxy_protocol[{i}]"),
                format!("{net} is listed twice"),
            ));
        }
    }
    if !networks.is_empty() && !listen.iter().any(|l| matches!(l, ListenAddr::Tcp(_))) {
        return Err(ConfigError::invalid(
            "accept_proxy_protocol",
            "applies to TCP listeners only, and every `listen` address is a unix socket",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(extra: &str) -> Result<Config, String> {
        Config::from_yaml_str(&format!("backends: [\"127.0.0.1:3306\"]\n{extra}"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn networks_parse_and_default_to_none() {
        assert!(load("").unwrap().accept_proxy_protocol.is_empty());
        let c = load("accept_proxy_protocol: [10.0.0.0/8, \"fd00::/8\", 192.0.2.7]").unwrap();
        let shown: Vec<String> = c
            .accept_proxy_protocol
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(shown, ["10.0.0.0/8", "fd00::/8", "192.0.2.7/32"]);
    }

    #[test]
    fn a_bad_network_names_the_key_and_the_entry() {
        let e = load("accept_proxy_protocol: [10.0.0.0/8, 10.0.0.1/8]").unwrap_err();
        assert!(e.contains("accept_proxy_protocol[1]"), "{e}");
        assert!(e.contains("host bits"), "{e}");
        let e = load("accept_proxy_protocol: 10.0.0.0/8").unwrap_err();
        assert!(e.contains("accept_proxy_protocol"), "{e}");
    }

    #[test]
    fn duplicates_and_unix_only_listeners_are_refused_by_key() {
        let e = load("accept_proxy_protocol: [10.0.0.0/8, 10.0.0.0/8]").unwrap_err();
        assert!(
            e.contains("accept_proxy_protocol[1]") && e.contains("twice"),
            "{e}"
        );
        let e = load("listen: [/tmp/mysql-lb-test.sock]\naccept_proxy_protocol: [10.0.0.0/8]")
            .unwrap_err();
        assert!(
            e.contains("accept_proxy_protocol") && e.contains("unix"),
            "{e}"
        );
    }
}
