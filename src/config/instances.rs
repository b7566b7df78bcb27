//! `reuse_port`, `instance_id`, `peers` and `peers_from`: several mysql-lb processes behind one
//! address.
//!
//! Several instances share a listening port on one host (`reuse_port`) and hand out connection ids
//! that differ in their instance bits (`instance_id`), so a KILL naming another instance's id is
//! recognised as such. `peers` says where the other instances' admin endpoints are, so such a
//! KILL can be resolved there instead of being refused. Where every instance reads one file (a
//! Kubernetes ConfigMap), the per-instance part comes from outside it: `--instance-id` (a number
//! or a StatefulSet pod name, whose ordinal is the id) and `peers_from`, one URL template
//! expanded into every other instance's `peers` entry. Kept apart from the rest of the
//! configuration so these keys parse and validate in one place.

use std::collections::HashSet;
use std::fmt;
use std::net::{Ipv6Addr, SocketAddr};

use serde::Deserialize;

use super::ConfigError;

/// What `peers_from.admin_url` must contain, replaced by each instance's id.
pub const ID_PLACEHOLDER: &str = "{instance_id}";

/// How this instance stands among others sharing its address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceConfig {
    /// TCP listeners set SO_REUSEPORT without first checking that nobody listens on the port, so
    /// several processes (of the same user) share it and the kernel spreads connects among them.
    pub reuse_port: bool,
    /// Goes into every connection id this instance hands out (see `crate::backends::kill`).
    pub instance_id: u8,
    /// The other instances' admin endpoints, by their instance id.
    pub peers: Vec<Peer>,
    /// `peers_from` as written. [`crate::config::Config::validate`] expands it into `peers` once
    /// the instance id is final (flags applied) and clears it.
    pub peers_from: Option<PeerTemplate>,
}

/// `peers_from`: instances `0..instances` whose admin endpoints differ only by their id in the
/// URL (a StatefulSet's pods behind a headless Service).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTemplate {
    /// An `http://HOST:port` URL with [`ID_PLACEHOLDER`] in it.
    pub admin_url: String,
    /// How many instances there are (ids 0 to instances − 1); 1 to 256.
    pub instances: u16,
}

/// Another instance, reachable on its admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub instance_id: u8,
    pub admin_url: PeerUrl,
}

/// `http://HOST:port` (a path of `/` at most): the peer's admin listener. HOST is an IP address
/// or a DNS name, resolved at each ask (a pod behind a headless Service comes back on a new IP).
/// No TLS: the admin listener is meant to sit on a private network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUrl {
    /// Without brackets for IPv6.
    host: String,
    port: u16,
}

impl From<SocketAddr> for PeerUrl {
    fn from(addr: SocketAddr) -> PeerUrl {
        PeerUrl {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl fmt::Display for PeerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority())
    }
}

impl PeerUrl {
    pub fn parse(s: &str) -> Result<PeerUrl, String> {
        let expected = || {
            format!(
                "{s:?}: expected http://HOST:port with an IP address or DNS name and a port, e.g. \
                 http://10.0.0.2:4041 (the peer's admin_address; https is not supported)"
            )
        };
        let rest = s.strip_prefix("http://").ok_or_else(expected)?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = authority.rsplit_once(':').ok_or_else(expected)?;
        let port = port.parse::<u16>().ok().filter(|&p| p != 0);
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => v6.parse::<Ipv6Addr>().ok().map(|_| v6),
            None => is_host_name(host).then_some(host),
        };
        match (host, port) {
            (Some(host), Some(port)) => Ok(PeerUrl {
                host: host.to_owned(),
                port,
            }),
            _ => Err(expected()),
        }
    }

    /// The host (no brackets) and port, as a connect wants them; a name is resolved then.
    pub fn host_port(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    /// `host:port` (`[v6]:port`), as the Host header wants it.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// An IPv4 address or a DNS name: letters, digits, `-`, `_` and dots, at most 253 bytes. Nothing
/// else may reach the Host header of the request sent there.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `--instance-id`: a number, or a StatefulSet pod name (`mysql-lb-2`) whose ordinal, after the
/// last `-`, is the id.
pub fn parse_instance_id(s: &str) -> Result<u8, String> {
    let digits = match s.rsplit_once('-') {
        Some(("", _)) => "",
        Some((_, ordinal)) => ordinal,
        None => s,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{s:?}: expected an instance id (0 to 255) or a StatefulSet pod name ending in its \
             ordinal, e.g. mysql-lb-2"
        ));
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| format!("{s:?}: {digits} is out of range: an instance id is 0 to 255"))
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

impl PeerTemplate {
    /// The admin URL of instance `id`.
    fn url_of(&self, id: u8) -> Result<PeerUrl, String> {
        PeerUrl::parse(&self.admin_url.replace(ID_PLACEHOLDER, &id.to_string()))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPeer {
    instance_id: i64,
    admin_url: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPeersFrom {
    admin_url: String,
    instances: i64,
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

/// `peers_from` as read, checked on its own: the placeholder is there, the URL it makes parses,
/// the count fits the id range.
fn template(raw: RawPeersFrom) -> Result<PeerTemplate, ConfigError> {
    let instances = u16::try_from(raw.instances)
        .ok()
        .filter(|n| (1..=256).contains(n))
        .ok_or_else(|| {
            ConfigError::invalid(
                "peers_from.instances",
                format!("{} is out of range: 1 to 256 instances", raw.instances),
            )
        })?;
    if !raw.admin_url.contains(ID_PLACEHOLDER) {
        return Err(ConfigError::invalid(
            "peers_from.admin_url",
            format!(
                "{:?} has no {ID_PLACEHOLDER}: every instance would have one address",
                raw.admin_url
            ),
        ));
    }
    let t = PeerTemplate {
        admin_url: raw.admin_url,
        instances,
    };
    t.url_of(0)
        .map_err(|m| ConfigError::invalid("peers_from.admin_url", m))?;
    Ok(t)
}

/// The top-level keys, as read, to their typed form.
pub(super) fn build(
    reuse_port: Option<bool>,
    id: Option<i64>,
    peers: Option<Vec<RawPeer>>,
    peers_from: Option<RawPeersFrom>,
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
        peers_from: peers_from.map(template).transpose()?,
    })
}

/// Expands `peers_from` into `peers` for this instance's id: every id of the template but its
/// own. An id outside the template is refused rather than left out of everyone else's peers.
fn expand(c: &mut InstanceConfig) -> Result<(), ConfigError> {
    let Some(t) = c.peers_from.take() else {
        return Ok(());
    };
    if !c.peers.is_empty() {
        return Err(ConfigError::invalid(
            "peers_from",
            "set either peers or peers_from, not both",
        ));
    }
    if u16::from(c.instance_id) >= t.instances {
        return Err(ConfigError::invalid(
            "instance_id",
            format!(
                "{} is not one of the {} instances of peers_from (ids 0 to {}): raise \
                 peers_from.instances with the number of instances",
                c.instance_id,
                t.instances,
                t.instances - 1
            ),
        ));
    }
    c.peers = (0..t.instances)
        .filter_map(|id| u8::try_from(id).ok())
        .filter(|&id| id != c.instance_id)
        .map(|id| {
            t.url_of(id)
                .map(|admin_url| Peer {
                    instance_id: id,
                    admin_url,
                })
                .map_err(|m| ConfigError::invalid("peers_from.admin_url", m))
        })
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// Expands `peers_from`, then refuses a peer naming this very instance, or two peers with one
/// id: ids of one instance would be resolved at two places, or KILLs would loop back here.
pub(super) fn validate(c: &mut InstanceConfig) -> Result<(), ConfigError> {
    expand(c)?;
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
mod tests;
