//! Listen and backend addresses: "ip:port", "[v6]:port", "host:port" or a unix socket path.

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::*;

/// Where the proxy accepts clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// Where a backend server listens. `host` is kept as written (a name is resolved at connect time) and
/// without brackets for IPv6.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BackendAddr {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl BackendAddr {
    /// Whether a connection to this address leaves the machine: TCP to anything but
    /// `localhost` or a loopback IP. Judged from the address as written, without resolving it,
    /// so another name that resolves to loopback counts as leaving (the safe side).
    pub fn leaves_host(&self) -> bool {
        match self {
            BackendAddr::Tcp { host, .. } => {
                !(host.eq_ignore_ascii_case("localhost")
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback()))
            }
            BackendAddr::Unix(_) => false,
        }
    }
}

/// An address that does not parse; the message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AddressError(String);

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl BackendAddr {
    /// Whether the server can block the proxy's address for it: TCP to anything but loopback
    /// (an address, or `localhost`). MariaDB and MySQL never count connect errors from loopback
    /// or a unix socket; a host name is taken for remote, whatever it resolves to.
    pub fn is_blockable(&self) -> bool {
        match self {
            BackendAddr::Tcp { host, .. } => {
                !(host.eq_ignore_ascii_case("localhost")
                    || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
            }
            BackendAddr::Unix(_) => false,
        }
    }
}

impl fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendAddr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            BackendAddr::Tcp { host, port } => write!(f, "{host}:{port}"),
            BackendAddr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// `Some(path)` when `s` names a unix socket: anything containing '/', with an optional `unix:` prefix.
pub(super) fn unix_path(s: &str) -> Result<Option<PathBuf>, AddressError> {
    let (explicit, path) = match s.strip_prefix("unix:") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if !explicit && !path.contains('/') {
        return Ok(None);
    }
    if path.is_empty() {
        return Err(AddressError(format!("`{s}`: empty unix socket path")));
    }
    if path.len() > MAX_UNIX_PATH_LEN {
        return Err(AddressError(format!(
            "`{s}`: unix socket path is {} bytes, the limit is {MAX_UNIX_PATH_LEN}",
            path.len()
        )));
    }
    Ok(Some(PathBuf::from(path)))
}

/// Splits "host:port" / "[v6]:port"; the host comes back without brackets.
pub(super) fn split_host_port<'a>(
    s: &'a str,
    example: &str,
) -> Result<(&'a str, &'a str), AddressError> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(AddressError(format!(
            "`{s}`: expected host:port (e.g. {example}) or a unix socket path"
        )));
    };
    if let Some(inner) = host.strip_prefix('[') {
        let Some(inner) = inner.strip_suffix(']') else {
            return Err(AddressError(format!("`{s}`: unbalanced '[' in host")));
        };
        if inner.parse::<Ipv6Addr>().is_err() {
            return Err(AddressError(format!(
                "`{s}`: `{inner}` is not an IPv6 address"
            )));
        }
        return Ok((inner, port));
    }
    if host.contains(':') {
        return Err(AddressError(format!(
            "`{s}`: IPv6 addresses must be in brackets, e.g. [::1]:3306"
        )));
    }
    if host.contains(|c: char| c.is_whitespace() || c == '[' || c == ']') {
        return Err(AddressError(format!("`{s}`: invalid host `{host}`")));
    }
    Ok((host, port))
}

pub(super) fn parse_port(s: &str, port: &str, allow_zero: bool) -> Result<u16, AddressError> {
    let range = if allow_zero { "0-65535" } else { "1-65535" };
    match port.parse::<u16>() {
        Ok(0) if !allow_zero => Err(AddressError(format!(
            "`{s}`: port 0 is not a valid backend port"
        ))),
        Ok(p) => Ok(p),
        Err(_) => Err(AddressError(format!(
            "`{s}`: invalid port `{port}` (expected {range})"
        ))),
    }
}

impl FromStr for ListenAddr {
    type Err = AddressError;

    /// `host:port` (port 0 picks a free port; an empty host means 0.0.0.0, as in MySQL Proxy), or a unix
    /// socket path. A host name is resolved now and the first address is used.
    fn from_str(s: &str) -> Result<Self, AddressError> {
        let s = s.trim();
        if let Some(path) = unix_path(s)? {
            return Ok(ListenAddr::Unix(path));
        }
        if let Ok(addr) = s.parse::<SocketAddr>() {
            return Ok(ListenAddr::Tcp(addr));
        }
        let (host, port) = split_host_port(s, "127.0.0.1:4040")?;
        let port = parse_port(s, port, true)?;
        if host.is_empty() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port,
            )));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(ip, port)));
        }
        match (host, port).to_socket_addrs() {
            Ok(mut addrs) => addrs.next().map(ListenAddr::Tcp).ok_or_else(|| {
                AddressError(format!("`{s}`: host `{host}` resolves to no address"))
            }),
            Err(e) => Err(AddressError(format!(
                "`{s}`: cannot resolve host `{host}`: {e}"
            ))),
        }
    }
}

impl FromStr for BackendAddr {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, AddressError> {
        let s = s.trim();
        if let Some(path) = unix_path(s)? {
            return Ok(BackendAddr::Unix(path));
        }
        let (host, port) = split_host_port(s, "127.0.0.1:3306")?;
        if host.is_empty() {
            return Err(AddressError(format!("`{s}`: empty host")));
        }
        let port = parse_port(s, port, false)?;
        Ok(BackendAddr::Tcp {
            host: host.to_owned(),
            port,
        })
    }
}

/// Parses a YAML string scalar with `FromStr`, so serde_yaml puts the key path and line on the error.
pub(super) struct ParseVisitor<T>(&'static str, PhantomData<T>);

pub(super) const IPV6_QUOTE_HINT: &str =
    "got a YAML sequence; quote bracketed IPv6 addresses, e.g. \"[::1]:3306\"";

impl<'de, T: FromStr<Err = AddressError>> Visitor<'de> for ParseVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<T, A::Error> {
        Err(de::Error::custom(IPV6_QUOTE_HINT))
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(ParseVisitor(
            "a listen address (host:port or unix socket path)",
            PhantomData,
        ))
    }
}

impl<'de> Deserialize<'de> for BackendAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(ParseVisitor(
            "a backend address (host:port or unix socket path)",
            PhantomData,
        ))
    }
}

/// The admin listener: an IP literal with a port, or "off"/"" to disable it.
pub(super) fn parse_admin_address(s: &str) -> Result<Option<SocketAddr>, String> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("`{s}`: expected ip:port (e.g. 127.0.0.1:4041) or \"off\""))
}
