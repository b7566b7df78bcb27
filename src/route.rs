//! Which pool a client goes to: the `routes:` list matched against who the client is.
//!
//! Sans-IO: a [`Routes`] is built once per configuration (a reload builds a new one) and asked
//! once per session, with what the session knows at that point ([`Who`]). Patterns are compiled
//! here, at build time, so a match allocates nothing. Globs are matched iteratively (`*` any run,
//! `?` one character, the rest literal): a route file is operator input, but the user and schema
//! come from the client, and a backtracking matcher would let a pattern like `a*a*a*b` and a long
//! user name cost exponential time.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use crate::config::RouteConfig;

/// What a session knows about its client when it routes. `user` and `schema` are None until the
/// HandshakeResponse is read (immediate connect), `schema` also when the client named no database;
/// `client` is None for unix-socket clients; `listener` is the `listen:` entry as displayed
/// (`127.0.0.1:3307`, `unix:/run/mysql-lb.sock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who<'a> {
    pub user: Option<&'a str>,
    pub schema: Option<&'a str>,
    pub client: Option<IpAddr>,
    pub listener: &'a str,
}

/// The `routes:` list, compiled, and the pool for clients no route matches.
#[derive(Debug, Clone)]
pub struct Routes {
    routes: Vec<Route>,
    default_pool: Option<String>,
}

#[derive(Debug, Clone)]
struct Route {
    user: Option<Glob>,
    schema: Option<Glob>,
    client: Option<Cidr>,
    listener: Option<String>,
    pool: String,
}

impl Route {
    fn matches(&self, who: &Who<'_>) -> bool {
        fn text(pattern: Option<&Glob>, value: Option<&str>) -> bool {
            match (pattern, value) {
                (None, _) => true,
                (Some(p), Some(v)) => p.matches(v),
                (Some(_), None) => false,
            }
        }
        text(self.user.as_ref(), who.user)
            && text(self.schema.as_ref(), who.schema)
            && match (self.client, who.client) {
                (None, _) => true,
                (Some(cidr), Some(ip)) => cidr.contains(ip),
                (Some(_), None) => false,
            }
            && self.listener.as_deref().is_none_or(|l| l == who.listener)
    }
}

impl Routes {
    pub fn new(routes: &[RouteConfig], default_pool: Option<&str>) -> Routes {
        Routes {
            routes: routes
                .iter()
                .map(|r| Route {
                    user: r.user.as_deref().map(Glob::new),
                    schema: r.schema.as_deref().map(Glob::new),
                    client: r.client,
                    listener: r.listener.clone(),
                    pool: r.pool.clone(),
                })
                .collect(),
            default_pool: default_pool.map(str::to_owned),
        }
    }

    /// The pool for `who`: the first matching route's, else the default pool; None = refuse.
    pub fn pool_for(&self, who: &Who<'_>) -> Option<&str> {
        self.routes
            .iter()
            .find(|r| r.matches(who))
            .map(|r| r.pool.as_str())
            .or(self.default_pool.as_deref())
    }

    /// Some route needs the user or schema (deferred connect).
    pub fn needs_identity(&self) -> bool {
        self.routes
            .iter()
            .any(|r| r.user.is_some() || r.schema.is_some())
    }
}

/// Parses a peer string as the server module formats it ("1.2.3.4:5", "[::1]:5", "unix:...") into
/// an IP; None for a unix-socket peer or anything else.
pub fn peer_ip(peer: &str) -> Option<IpAddr> {
    if peer.starts_with("unix:") {
        return None;
    }
    if let Ok(addr) = peer.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    peer.parse::<IpAddr>().ok()
}

/// A shell-style pattern: `*` any run (also empty), `?` exactly one character, the rest literal.
/// Case-sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Star,
    One,
    Literal(char),
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        let mut tokens = Vec::with_capacity(pattern.len());
        for c in pattern.chars() {
            let token = match c {
                '*' => Token::Star,
                '?' => Token::One,
                c => Token::Literal(c),
            };
            // `**` means what `*` means; one token keeps the matcher's work smaller.
            if !(token == Token::Star && tokens.last() == Some(&Token::Star)) {
                tokens.push(token);
            }
        }
        Glob { tokens }
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        self.run(text).0
    }

    /// The match and the number of steps it took. Greedy with one saved position (the last `*`):
    /// a mismatch only ever moves that `*`'s end one character on, so the steps are at most
    /// (pattern length + 1) × (text length + 1), whatever the pattern.
    fn run(&self, text: &str) -> (bool, usize) {
        let p = &self.tokens;
        let (mut pi, mut ti) = (0, 0);
        // After a `*`: the token following it, and where in `text` the `*`'s run ends now.
        let mut star: Option<(usize, usize)> = None;
        let mut steps = 0;
        loop {
            steps += 1;
            let here = text[ti..].chars().next();
            let step = match (p.get(pi), here) {
                (Some(Token::Star), _) => {
                    star = Some((pi + 1, ti));
                    pi += 1;
                    continue;
                }
                (Some(Token::One), Some(c)) => Some(c.len_utf8()),
                (Some(Token::Literal(l)), Some(c)) if *l == c => Some(c.len_utf8()),
                (None, None) => return (true, steps),
                _ => None,
            };
            if let Some(n) = step {
                pi += 1;
                ti += n;
                continue;
            }
            // Mismatch: let the last `*` take one more character, or fail.
            let Some((after_star, run_end)) = star else {
                return (false, steps);
            };
            let Some(c) = text[run_end..].chars().next() else {
                return (false, steps);
            };
            let run_end = run_end + c.len_utf8();
            star = Some((after_star, run_end));
            pi = after_star;
            ti = run_end;
        }
    }
}

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
