//! Runtime operations on backends (drain, maintenance, ready, weight), parsed without sockets.
//!
//! Kept apart from the HTTP serving so the request grammar, the weight body and the token check
//! are unit-tested on plain values; the serving code only feeds them and applies the result.

use std::net::SocketAddr;

use serde_json::json;
use tracing::info;

use crate::backends::balancer::AdminState;
use crate::proxy::state::ProxyState;

/// The body a PUT may carry: more is refused with 413 before it is read whole.
pub const MAX_BODY: usize = 4096;

/// Weights an operator may set at runtime.
pub const WEIGHTS: std::ops::RangeInclusive<u32> = 1..=1_000_000;

/// What a request under `/backends/{name}/` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    SetState(AdminState),
    SetWeight,
}

/// A request that names an operation: its backend and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRequest {
    pub backend: String,
    pub op: Op,
}

/// Why an operation request is refused, each mapping to one status code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("{0}")]
    BadRequest(String),
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error("no backend named {0:?}")]
    UnknownBackend(String),
    #[error("{path} takes {allowed} only")]
    MethodNotAllowed { path: String, allowed: &'static str },
    #[error("request body over {MAX_BODY} bytes")]
    TooLarge,
    #[error(
        "cross-origin request refused: Origin {origin:?} is not this endpoint (Host {host:?})"
    )]
    CrossOrigin { origin: String, host: String },
    #[error("Host {0:?} is not an address of this machine: without admin_token only requests to 127.0.0.1, [::1] or localhost are served")]
    ForeignHost(String),
}

impl OpError {
    pub fn status(&self) -> u16 {
        match self {
            Self::BadRequest(_) => 400,
            Self::Unauthorized => 401,
            Self::UnknownBackend(_) => 404,
            Self::MethodNotAllowed { .. } => 405,
            Self::TooLarge => 413,
            Self::CrossOrigin { .. } | Self::ForeignHost(_) => 403,
        }
    }
}

/// What an operation changes on a backend, however it was asked for (HTTP or the SQL admin
/// port): both apply it here, with the same checks and the same log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    State(AdminState),
    /// A weight already checked to be in [`WEIGHTS`].
    Weight(u32),
}

/// Applies `change` to the backend named `backend`, asked by `caller`; the backend's new state
/// as JSON (the answer of both the HTTP endpoint and the SQL admin port).
pub fn apply(
    state: &ProxyState,
    caller: SocketAddr,
    backend: &str,
    change: Change,
) -> Result<serde_json::Value, OpError> {
    let set = state.backends();
    let backend = set
        .by_name(backend)
        .ok_or_else(|| OpError::UnknownBackend(backend.to_owned()))?;
    match change {
        Change::State(admin_state) => {
            let old = backend.set_admin_state(admin_state);
            info!(
                caller = %caller,
                backend = %backend.name,
                old = old.as_str(),
                new = admin_state.as_str(),
                active_connections = backend.active(),
                "admin state changed"
            );
        }
        Change::Weight(weight) => {
            if !WEIGHTS.contains(&weight) {
                return Err(OpError::BadRequest(format!(
                    "weight must be an integer from {} to {}, not {weight}",
                    WEIGHTS.start(),
                    WEIGHTS.end()
                )));
            }
            let old = backend.set_weight(weight);
            info!(
                caller = %caller,
                backend = %backend.name,
                old,
                new = weight,
                "weight changed (until a reload re-applies the file's)"
            );
        }
    }
    Ok(json!({
        "name": backend.name,
        "admin_state": backend.admin_state().as_str(),
        "weight": backend.weight(),
        "active_connections": backend.active(),
    }))
}

/// Parses `path` as `/backends/{name}/{drain|maintenance|ready|weight}` (the name
/// percent-decoded; it may itself hold `/`, as a unix socket address does). None when the path
/// is not an operation at all; an error when `method` is not the one it takes.
pub fn parse(method: &str, path: &str) -> Option<Result<OpRequest, OpError>> {
    let rest = path.strip_prefix("/backends/")?;
    let (name, action) = rest.rsplit_once('/')?;
    let (op, allowed) = match action {
        "drain" => (Op::SetState(AdminState::Draining), "POST"),
        "maintenance" => (Op::SetState(AdminState::Maintenance), "POST"),
        "ready" => (Op::SetState(AdminState::Ready), "POST"),
        "weight" => (Op::SetWeight, "PUT"),
        _ => return None,
    };
    if method != allowed {
        return Some(Err(OpError::MethodNotAllowed {
            path: path.to_owned(),
            allowed,
        }));
    }
    Some(match percent_decode(name) {
        Some(backend) if !backend.is_empty() => Ok(OpRequest { backend, op }),
        _ => Err(OpError::BadRequest(format!("bad backend name in {path:?}"))),
    })
}

/// `%XX` escapes to bytes; None for a malformed escape or a result that is not UTF-8.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The weight in a PUT body: a JSON number or `{"weight": N}`, N in [`WEIGHTS`].
pub fn parse_weight(body: &[u8]) -> Result<u32, OpError> {
    let bad = |m: String| OpError::BadRequest(m);
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        bad(format!(
            "the body is not JSON ({e}); send a number or {{\"weight\": N}}"
        ))
    })?;
    let n = match &value {
        serde_json::Value::Object(o) if o.len() == 1 => o.get("weight"),
        serde_json::Value::Number(_) => Some(&value),
        _ => None,
    }
    .ok_or_else(|| bad("send a number or {\"weight\": N}".to_owned()))?;
    n.as_u64()
        .and_then(|w| u32::try_from(w).ok())
        .filter(|w| WEIGHTS.contains(w))
        .ok_or_else(|| {
            bad(format!(
                "weight must be an integer from {} to {}, not {n}",
                WEIGHTS.start(),
                WEIGHTS.end()
            ))
        })
}

/// Refuses a request whose `Origin` header names another host or port than its `Host` header.
///
/// A page on any site can make the browser of an admin on loopback POST to this endpoint (a
/// plain form needs no CORS permission); the browser then sends that site's origin. Requests
/// without `Origin` (curl, scripts, old browsers' same-origin forms) pass: only what a browser
/// says came from elsewhere is refused. An opaque origin (`null`: sandboxed frames, redirects)
/// is refused too.
pub fn check_origin(origin: Option<&[u8]>, host: Option<&[u8]>) -> Result<(), OpError> {
    let Some(origin) = origin else { return Ok(()) };
    let same = std::str::from_utf8(origin).ok().and_then(|o| {
        let (scheme, authority) = o.trim().split_once("://")?;
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let (origin_host, origin_port) = host_and_port(authority)?;
        let (host, port) = host_and_port(std::str::from_utf8(host?).ok()?.trim())?;
        // A Host without a port is the origin scheme's default port (a TLS-terminating
        // reverse proxy in front of the endpoint forwards `Host: name`).
        Some(
            origin_host == host
                && origin_port.unwrap_or(default_port) == port.unwrap_or(default_port),
        )
    });
    if same == Some(true) {
        return Ok(());
    }
    Err(OpError::CrossOrigin {
        origin: String::from_utf8_lossy(origin).into_owned(),
        host: host.map_or_else(String::new, |h| String::from_utf8_lossy(h).into_owned()),
    })
}

/// Whether a request's `Host` names this machine by address (`127.0.0.1`, `[::1]`, any IP
/// literal) or as `localhost`. Without a token the endpoint listens on loopback only, and a
/// browser led there by a rebound DNS name sends that name: refusing it keeps other sites' pages
/// from reading `/queries` or running operations. A request without `Host` (HTTP/1.0 tools) is
/// served.
pub fn check_host(host: Option<&[u8]>) -> Result<(), OpError> {
    let Some(host) = host else { return Ok(()) };
    let text = std::str::from_utf8(host).unwrap_or("").trim();
    let ok = host_and_port(text).is_some_and(|(name, _)| {
        name == "localhost"
            || name.parse::<std::net::Ipv4Addr>().is_ok()
            || name
                .strip_prefix('[')
                .and_then(|n| n.strip_suffix(']'))
                .is_some_and(|n| n.parse::<std::net::Ipv6Addr>().is_ok())
    });
    if ok {
        Ok(())
    } else {
        Err(OpError::ForeignHost(
            String::from_utf8_lossy(host).into_owned(),
        ))
    }
}

/// `host[:port]` or `[v6][:port]` as (lower-cased host, port if given); None for anything else.
fn host_and_port(authority: &str) -> Option<(String, Option<u16>)> {
    if authority.contains(['/', '@', '?', '#']) || authority.is_empty() {
        return None;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (addr, rest) = v6.split_once(']')?;
        let port = match rest {
            "" => None,
            r => Some(r.strip_prefix(':')?),
        };
        (format!("[{addr}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// Whether an `Authorization` header value carries `token` as its bearer token. The token bytes
/// are compared in constant time, so timing tells nothing of how much of a guess was right.
pub fn authorized(header: Option<&[u8]>, token: &[u8]) -> bool {
    let Some(h) = header else { return false };
    let Some(given) = h.strip_prefix(b"Bearer ") else {
        return false;
    };
    constant_time_eq(given.trim_ascii(), token)
}

/// Equal lengths and bytes, in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_hosts_naming_this_machine_pass_without_a_token() {
        for ok in [
            &b"127.0.0.1:4041"[..],
            b"localhost:4041",
            b"[::1]:4041",
            b"10.0.0.7",
            b"LOCALHOST",
        ] {
            assert!(
                check_host(Some(ok)).is_ok(),
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        assert!(check_host(None).is_ok());
        for bad in [
            &b"evil.example:4041"[..],
            b"localhost.evil.example",
            b"",
            b"a@127.0.0.1",
        ] {
            let e = check_host(Some(bad)).unwrap_err();
            assert_eq!(e.status(), 403, "{}", String::from_utf8_lossy(bad));
        }
    }

    use super::*;

    #[test]
    fn parses_each_operation_with_its_method() {
        let drain = parse("POST", "/backends/a1/drain").unwrap().unwrap();
        assert_eq!(drain.backend, "a1");
        assert_eq!(drain.op, Op::SetState(AdminState::Draining));
        let m = parse("POST", "/backends/a1/maintenance").unwrap().unwrap();
        assert_eq!(m.op, Op::SetState(AdminState::Maintenance));
        let r = parse("POST", "/backends/a1/ready").unwrap().unwrap();
        assert_eq!(r.op, Op::SetState(AdminState::Ready));
        let w = parse("PUT", "/backends/127.0.0.1:3306/weight")
            .unwrap()
            .unwrap();
        assert_eq!(
            (w.backend.as_str(), w.op),
            ("127.0.0.1:3306", Op::SetWeight)
        );
        let u = parse("POST", "/backends/unix:%2Ftmp%2Fs.sock/drain")
            .unwrap()
            .unwrap();
        assert_eq!(u.backend, "unix:/tmp/s.sock");
        let slash = parse("POST", "/backends/unix:/tmp/s.sock/drain")
            .unwrap()
            .unwrap();
        assert_eq!(slash.backend, "unix:/tmp/s.sock");
    }

    #[test]
    fn wrong_method_bad_name_and_other_paths() {
        let e = parse("GET", "/backends/a1/drain").unwrap().unwrap_err();
        assert_eq!(e.status(), 405);
        assert_eq!(
            parse("POST", "/backends/a1/weight")
                .unwrap()
                .unwrap_err()
                .status(),
            405
        );
        assert_eq!(
            parse("POST", "/backends//drain")
                .unwrap()
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(
            parse("POST", "/backends/%zz/drain")
                .unwrap()
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(
            parse("POST", "/backends/%ff/drain")
                .unwrap()
                .unwrap_err()
                .status(),
            400
        );
        assert_eq!(parse("POST", "/backends/a1/%").map(|r| r.is_ok()), None);
        assert!(parse("POST", "/backends").is_none());
        assert!(parse("POST", "/backends/a1").is_none());
        assert!(parse("POST", "/backends/a1/reboot").is_none());
        assert!(parse("POST", "/metrics").is_none());
    }

    #[test]
    fn weight_bodies() {
        assert_eq!(parse_weight(b"5"), Ok(5));
        assert_eq!(parse_weight(b" {\"weight\": 1000000} "), Ok(1_000_000));
        assert_eq!(parse_weight(b"1"), Ok(1));
        for bad in [
            &b"0"[..],
            b"1000001",
            b"-3",
            b"2.5",
            b"\"7\"",
            b"{\"weight\": \"7\"}",
            b"{\"weight\": 3, \"x\": 1}",
            b"{}",
            b"[3]",
            b"",
            b"five",
            b"99999999999999999999999",
            b"\xff\xfe",
        ] {
            let e = parse_weight(bad).unwrap_err();
            assert_eq!(e.status(), 400, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn bearer_token_is_compared_whole() {
        let t = b"s3cret-token";
        assert!(authorized(Some(b"Bearer s3cret-token"), t));
        assert!(!authorized(None, t));
        assert!(!authorized(Some(b"Bearer s3cret-toke"), t));
        assert!(!authorized(Some(b"Bearer s3cret-tokem"), t));
        assert!(!authorized(Some(b"Bearer s3cret-token2"), t));
        assert!(!authorized(Some(b"Basic s3cret-token"), t));
        assert!(!authorized(Some(b"s3cret-token"), t));
        assert!(!authorized(Some(b"Bearer "), t));
    }

    #[test]
    fn origin_must_name_the_host_the_request_was_sent_to() {
        let ok = |o: Option<&str>, h: Option<&str>| {
            check_origin(o.map(str::as_bytes), h.map(str::as_bytes)).is_ok()
        };
        // No Origin: curl, scripts.
        assert!(ok(None, Some("127.0.0.1:4041")));
        assert!(ok(None, None));
        // The status page's own fetch().
        assert!(ok(Some("http://127.0.0.1:4041"), Some("127.0.0.1:4041")));
        assert!(ok(Some("http://LocalHost:4041"), Some("localhost:4041")));
        assert!(ok(Some("http://[::1]:4041"), Some("[::1]:4041")));
        assert!(ok(Some("http://admin.example"), Some("admin.example")));
        assert!(ok(Some("http://admin.example:80"), Some("admin.example")));
        // Behind a TLS-terminating reverse proxy that forwards `Host: name`.
        assert!(ok(Some("https://admin.example"), Some("admin.example")));
        assert!(ok(Some("https://admin.example"), Some("admin.example:443")));
        // Another site, port, scheme, or an opaque origin.
        let refused = check_origin(Some(b"https://evil.example"), Some(b"127.0.0.1:4041"));
        let e = refused.unwrap_err();
        assert_eq!(e.status(), 403);
        assert!(e.to_string().contains("evil.example"), "{e}");
        assert!(!ok(Some("http://127.0.0.1:8080"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("http://127.0.0.2:4041"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("http://admin.example:443"), Some("admin.example")));
        assert!(!ok(Some("https://admin.example"), Some("admin.example:80")));
        assert!(!ok(Some("ftp://127.0.0.1:4041"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("null"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("file://"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("http://127.0.0.1:4041"), None));
        assert!(!ok(Some("http://u@127.0.0.1:4041"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("http://127.0.0.1:4041/x"), Some("127.0.0.1:4041")));
        assert!(!ok(Some("http://[::1]x"), Some("[::1]")));
        assert!(!ok(Some("http://127.0.0.1:99999"), Some("127.0.0.1:99999")));
        assert!(!ok(Some("http://:4041"), Some(":4041")));
        assert!(check_origin(Some(b"\xff"), Some(b"x")).is_err());
    }

    #[test]
    fn constant_time_eq_matches_plain_equality() {
        let samples: [&[u8]; 6] = [b"", b"a", b"b", b"ab", b"abc", b"abd"];
        for a in samples {
            for b in samples {
                assert_eq!(constant_time_eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
