//! IP networks (`10.0.0.0/8`, `fd00::/8`, a bare address) as the configuration names them.
//!
//! A room of its own because both the configuration (which parses and validates them:
//! `routes[].client`, `accept_proxy_protocol`) and the code that matches clients against them
//! (`crate::backends::route`, the PROXY protocol check in `crate::proxy::session`) use them, and neither should
//! depend on the other for it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 network: "10.0.0.0/8", "fd00::/8", or a bare address (/32, /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// A CIDR that does not parse; the message says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CidrError(String);

impl Cidr {
    /// Whether `ip` is in the network. An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, as a
    /// dual-stack listener reports IPv4 clients) is matched as the IPv4 address, and an IPv4
    /// address against an IPv6 network as its mapped form.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => same_prefix_v4(net, ip, self.prefix),
            (IpAddr::V4(net), IpAddr::V6(ip)) => ip
                .to_ipv4_mapped()
                .is_some_and(|ip| same_prefix_v4(net, ip, self.prefix)),
            (IpAddr::V6(net), IpAddr::V6(ip)) => same_prefix_v6(net, ip, self.prefix),
            (IpAddr::V6(net), IpAddr::V4(ip)) => {
                same_prefix_v6(net, ip.to_ipv6_mapped(), self.prefix)
            }
        }
    }
}

fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

fn same_prefix_v4(net: Ipv4Addr, ip: Ipv4Addr, prefix: u8) -> bool {
    u32::from(ip) & mask_v4(prefix) == u32::from(net)
}

fn same_prefix_v6(net: Ipv6Addr, ip: Ipv6Addr, prefix: u8) -> bool {
    u128::from(ip) & mask_v6(prefix) == u128::from(net)
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr.parse().map_err(|_| {
            CidrError(format!(
                "`{s}`: `{addr}` is not an IP address (expected e.g. 10.0.0.0/8, fd00::/8 or 192.0.2.7)"
            ))
        })?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && !p.starts_with('+') => n,
                _ => {
                    return Err(CidrError(format!(
                        "`{s}`: prefix length `{p}` is not 0..={max}"
                    )))
                }
            },
        };
        let masked = match network {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask_v4(prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask_v6(prefix))),
        };
        if masked != network {
            return Err(CidrError(format!(
                "`{s}`: host bits are set past the /{prefix}; did you mean {masked}/{prefix}?"
            )));
        }
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests;
