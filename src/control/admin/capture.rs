//! `POST /capture/start`, `GET /capture`, `POST /capture/stop`: the traffic capture's switch on
//! the admin endpoint (see `crate::telemetry::capture`), under the same token rules as the operations.
//!
//! The start body is parsed here, without sockets, so its grammar is unit-tested.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::telemetry::capture::{Filter, Request};

/// `POST /capture/start`'s JSON body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    dir: PathBuf,
    /// A humantime duration ("20s", "5m").
    #[serde(default, with = "humantime_serde")]
    duration: Option<Duration>,
    max_bytes: Option<u64>,
    rotate_bytes: Option<u64>,
    pool: Option<String>,
    backend: Option<String>,
    user: Option<String>,
}

/// Parses a start body into a capture request.
pub fn parse_start(body: &[u8]) -> Result<Request, String> {
    let b: StartBody = serde_json::from_slice(body).map_err(|e| format!("bad body: {e}"))?;
    if b.rotate_bytes.is_some_and(|r| r < 4096) {
        return Err("rotate_bytes must be at least 4096".into());
    }
    if b.duration.is_some_and(|d| d.is_zero()) {
        return Err("duration must be above zero".into());
    }
    Ok(Request {
        dir: b.dir,
        duration: b.duration,
        max_bytes: b.max_bytes,
        rotate_bytes: b.rotate_bytes,
        filter: Filter {
            pool: b.pool,
            backend: b.backend,
            user: b.user,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_body_names_a_directory_and_optional_limits_and_filter() {
        let r =
            parse_start(br#"{"dir":"/var/cap","duration":"20s","max_bytes":1000000,"user":"app"}"#)
                .unwrap();
        assert_eq!(r.dir, PathBuf::from("/var/cap"));
        assert_eq!(r.duration, Some(Duration::from_secs(20)));
        assert_eq!(r.max_bytes, Some(1_000_000));
        assert_eq!(r.filter.user.as_deref(), Some("app"));
        assert!(r.filter.pool.is_none());
    }

    #[test]
    fn bad_start_bodies_are_refused() {
        assert!(parse_start(b"{}").is_err());
        assert!(parse_start(br#"{"dir":"/x","speed":3}"#).is_err());
        assert!(parse_start(br#"{"dir":"/x","duration":"0s"}"#).is_err());
        assert!(parse_start(br#"{"dir":"/x","rotate_bytes":10}"#).is_err());
        assert!(parse_start(b"not json").is_err());
    }
}
