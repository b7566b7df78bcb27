//! `reuse_port`, `instance_id` and `peers`: several mysql-lb processes behind one address.
//!
//! Several instances share a listening port on one host (`reuse_port`) and hand out connection ids
//! that differ in their instance bits (`instance_id`), so a KILL naming another instance's id is
//! recognised as such. `peers` says where the other instances' admin endpoints are, so such a
//! KILL can be resolved there instead of being refused. Kept apart from the rest of the
//! configuration so these keys parse and validate in one place.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;

use serde::Deserialize;

use super::ConfigError;

/// How this instance stands among others sharing its address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceConfig {
    /// TCP listeners set SO_REUSEPORT without first checking that nobody listens on the port, so
    /// several processes (of the same user) share it and the kernel spreads connects among them.
    pub reuse_port: bool,
    /// Goes into every connection id this instance hands out (see `crate::kill`).
    pub instance_id: u8,
    /// The other instances' admin endpoints, by their instance id.
    pub peers: Vec<Peer>,
}

/// Another instance, reachable on its admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub instance_id: u8,
    pub admin_url: PeerUrl,
}

/// `http://IP:port` (a path of `/` at most): the peer's admin listener. No TLS and no names to
/// resolve: the admin listener is meant to sit on a private address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerUrl(pub SocketAddr);

impl fmt::Display for PeerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.0)
    }
}

impl PeerUrl {
    pub fn parse(s: &str) -> Result<PeerUrl, String> {
        let rest = s.strip_prefix("http://").ok_or_else(|| {
            format!(
                "{s:?}: expected http://IP:port (the peer's admin_address; https is not supported)"
            )
        })?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        authority.parse().map(PeerUrl).map_err(|_| {
            format!("{s:?}: expected http://IP:port with an IP address and a port, e.g. http://10.0.0.2:4041")
        })
    }
}

impl InstanceConfig {
    /// One line for `--check-config` and the start-up log.
    pub fn summary(&self) -> String {
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|p| format!("{} at {}", p.instance_id, p.admin_url))
            .collect();
        format!(
            "instance_id {}, reuse_port {}, peers: {}",
            self.instance_id,
            if self.reuse_port { "on" } else { "off" },
            if peers.is_empty() {
                "none".to_owned()
            } else {
                peers.join(", ")
            }
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPeer {
    instance_id: i64,
    admin_url: String,
}

/// An instance id as written: any integer, checked to be 0..=255 so the error names the key.
fn instance_id(key: &str, n: i64) -> Result<u8, ConfigError> {
    u8::try_from(n).map_err(|_| {
        ConfigError::invalid(
            key,
            format!("{n} is out of range: an instance id is 0 to 255"),
        )
    })
}

/// The three top-level keys, as read, to their typed form.
pub(super) fn build(
    reuse_port: Option<bool>,
    id: Option<i64>,
    peers: Option<Vec<RawPeer>>,
) -> Result<InstanceConfig, ConfigError> {
    let peers = peers
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            Ok(Peer {
                instance_id: instance_id(&format!("peers[{i}].instance_id"), p.instance_id)?,
                admin_url: PeerUrl::parse(&p.admin_url)
                    .map_err(|m| ConfigError::invalid(format!("peers[{i}].admin_url"), m))?,
            })
        })
        .collect::<Result<_, ConfigError>>()?;
    Ok(InstanceConfig {
        reuse_port: reuse_port.unwrap_or(false),
        instance_id: id.map_or(Ok(0), |n| instance_id("instance_id", n))?,
        peers,
    })
}

/// A peer naming this very instance, or two peers with one id, are mistakes worth refusing:
/// ids of one instance would be resolved at two places, or KILLs would loop back here.
pub(super) fn validate(c: &InstanceConfig) -> Result<(), ConfigError> {
    let mut seen = HashSet::new();
    for (i, p) in c.peers.iter().enumerate() {
        let key = format!("peers[{i}].instance_id");
        if p.instance_id == c.instance_id {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "{} is this instance's own instance_id: list the other instances only",
                    p.instance_id
                ),
            ));
        }
        if !seen.insert(p.instance_id) {
            return Err(ConfigError::invalid(
                key,
                format!("instance {} is listed twice", p.instance_id),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn invalid(yaml: &str) -> (String, String) {
        match Config::from_yaml_str(yaml) {
            Err(ConfigError::Invalid { key, message, .. }) => (key, message),
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    const BACKEND: &str = "backends: [{address: '127.0.0.1:3306'}]\n";

    #[test]
    fn defaults_to_a_lone_instance() {
        let c = Config::from_yaml_str(BACKEND).unwrap();
        assert!(!c.instances.reuse_port);
        assert_eq!(c.instances.instance_id, 0);
        assert!(c.instances.peers.is_empty());
    }

    #[test]
    fn reads_reuse_port_instance_id_and_peers() {
        let c = Config::from_yaml_str(&format!(
            "{BACKEND}reuse_port: true\ninstance_id: 255\npeers:\n  - {{instance_id: 0, admin_url: 'http://127.0.0.1:4041/'}}\n  - {{instance_id: 7, admin_url: 'http://[::1]:5041'}}\n"
        ))
        .unwrap();
        assert!(c.instances.reuse_port);
        assert_eq!(c.instances.instance_id, 255);
        assert_eq!(c.instances.peers.len(), 2);
        let peers: Vec<(u8, String)> = c
            .instances
            .peers
            .iter()
            .map(|p| (p.instance_id, p.admin_url.to_string()))
            .collect();
        assert_eq!(
            peers,
            [
                (0, "http://127.0.0.1:4041".into()),
                (7, "http://[::1]:5041".into())
            ]
        );
        assert_eq!(
            c.instances.summary(),
            "instance_id 255, reuse_port on, peers: 0 at http://127.0.0.1:4041, 7 at http://[::1]:5041"
        );
    }

    #[test]
    fn refuses_ids_out_of_range_naming_the_key() {
        let (key, message) = invalid(&format!("{BACKEND}instance_id: 256\n"));
        assert_eq!(key, "instance_id");
        assert!(message.contains("0 to 255"), "{message}");
        let (key, _) = invalid(&format!("{BACKEND}instance_id: -1\n"));
        assert_eq!(key, "instance_id");
        let (key, _) = invalid(&format!(
            "{BACKEND}peers: [{{instance_id: 300, admin_url: 'http://127.0.0.1:1'}}]\n"
        ));
        assert_eq!(key, "peers[0].instance_id");
    }

    #[test]
    fn refuses_bad_urls_self_and_duplicate_peers() {
        for url in [
            "https://127.0.0.1:4041",
            "127.0.0.1:4041",
            "http://localhost:4041",
            "http://127.0.0.1",
            "http://127.0.0.1:4041/kill",
        ] {
            let (key, message) = invalid(&format!(
                "{BACKEND}peers: [{{instance_id: 1, admin_url: '{url}'}}]\n"
            ));
            assert_eq!(key, "peers[0].admin_url", "{url}");
            assert!(message.contains("http://IP:port"), "{message}");
        }
        let (key, message) = invalid(&format!(
            "{BACKEND}instance_id: 2\npeers: [{{instance_id: 2, admin_url: 'http://127.0.0.1:1'}}]\n"
        ));
        assert_eq!(key, "peers[0].instance_id");
        assert!(message.contains("own instance_id"), "{message}");
        let (key, message) = invalid(&format!(
            "{BACKEND}peers:\n  - {{instance_id: 1, admin_url: 'http://127.0.0.1:1'}}\n  - {{instance_id: 1, admin_url: 'http://127.0.0.1:2'}}\n"
        ));
        assert_eq!(key, "peers[1].instance_id");
        assert!(message.contains("twice"), "{message}");
        let err = Config::from_yaml_str(&format!(
            "{BACKEND}peers: [{{instance_id: 1, admin_url: 'http://127.0.0.1:1', token: x}}]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `token`"), "{err}");
    }
}
