//! Which pool a client goes to: the `routes:` list matched against who the client is.
//!
//! Sans-IO: a [`Routes`] is built once per configuration (a reload builds a new one) and asked once
//! per session, with what the session knows at that point ([`ClientFacts`]). Patterns are compiled
//! here, at build time, so a match allocates nothing. Globs are matched iteratively (`*` any run,
//! `?` one character, the rest literal): a route file is operator input, but the user and schema
//! come from the client, and a backtracking matcher would let a pattern like `a*a*a*b` and a long
//! user name cost exponential time.

use std::net::{IpAddr, SocketAddr};

use crate::config::cidr::Cidr;
use crate::config::RouteConfig;

/// What a session knows about its client when it routes. `user` and `schema` are None until the
/// HandshakeResponse is read (immediate connect), `schema` also when the client named no database;
/// `client` is None for unix-socket clients; `listener` is the `listen:` entry as displayed
/// (`127.0.0.1:3307`, `unix:/run/mysql-lb.sock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFacts<'a> {
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
    read_only: bool,
}

impl Route {
    fn matches(&self, who: &ClientFacts<'_>) -> bool {
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
                    read_only: r.read_only,
                })
                .collect(),
            default_pool: default_pool.map(str::to_owned),
        }
    }

    /// The pool for `who`: the first matching route's, else the default pool; None = refuse.
    pub fn pool_for(&self, who: &ClientFacts<'_>) -> Option<&str> {
        self.routes
            .iter()
            .find(|r| r.matches(who))
            .map(|r| r.pool.as_str())
            .or(self.default_pool.as_deref())
    }

    /// Whether `who`'s route is read-only (`routes[].read_only`; the default pool's never is).
    pub fn read_only_for(&self, who: &ClientFacts<'_>) -> bool {
        self.routes
            .iter()
            .find(|r| r.matches(who))
            .is_some_and(|r| r.read_only)
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

#[cfg(test)]
mod tests;
