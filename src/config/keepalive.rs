//! `tcp_keepalive`: TCP keepalive on both legs of every session.
//!
//! A peer that vanishes without a FIN or RST (a powered-off client, a NAT or firewall that forgot
//! the flow) otherwise holds its session, its `max_connections` slot and two descriptors until the
//! other side happens to write. The kernel's keepalive probes find such a peer after
//! `idle + interval × count` of silence; the read in the relay then fails and the session ends as
//! any network error does. Kept apart from the rest of the configuration so its parsing and
//! validation read in one place.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::ConfigError;

/// Linux caps TCP_KEEPIDLE and TCP_KEEPINTVL at 32767 s and TCP_KEEPCNT at 127.
const MAX_KEEPALIVE_SECS: u64 = 32_767;
const MAX_KEEPALIVE_COUNT: u32 = 127;

/// Keepalive probing of an idle TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpKeepalive {
    /// Silence before the first probe (TCP_KEEPIDLE).
    pub idle: Duration,
    /// Between unanswered probes (TCP_KEEPINTVL).
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped (TCP_KEEPCNT).
    pub count: u32,
}

impl Default for TcpKeepalive {
    /// A vanished peer is dropped after about 90 s of silence.
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(60),
            interval: Duration::from_secs(10),
            count: 3,
        }
    }
}

impl TcpKeepalive {
    /// How long a silent peer keeps its connection: the first probe's wait and every retry.
    pub fn limit(&self) -> Duration {
        self.idle + self.interval * self.count
    }

    /// Turns keepalive on for `socket` with these timers, and bounds unacknowledged data by the
    /// same total (TCP_USER_TIMEOUT): keepalive probes are only sent on an idle connection, so a
    /// peer that vanished before acknowledging the last response would otherwise be retried for
    /// the kernel's ~15 minutes of retransmissions. A live peer that only reads slowly still
    /// acknowledges the kernel's window probes and is not affected.
    pub fn apply(&self, socket: socket2::SockRef<'_>) -> std::io::Result<()> {
        let params = socket2::TcpKeepalive::new()
            .with_time(self.idle)
            .with_interval(self.interval)
            .with_retries(self.count);
        socket.set_tcp_keepalive(&params)?;
        socket.set_tcp_user_timeout(Some(self.limit()))
    }
}

/// The key as written: `off` (or `false`), `on` (or `true`) for the defaults, or a map of
/// `idle`, `interval`, `count` where a missing entry takes its default.
pub(super) struct RawKeepalive(pub(super) Option<TcpKeepalive>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeepaliveMap {
    #[serde(default, with = "humantime_serde")]
    idle: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    interval: Option<Duration>,
    count: Option<u32>,
}

impl<'de> Deserialize<'de> for RawKeepalive {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawKeepalive;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`off`, `on`, or a map with `idle`, `interval`, `count`")
            }
            fn visit_bool<E: de::Error>(self, on: bool) -> Result<RawKeepalive, E> {
                Ok(RawKeepalive(on.then(TcpKeepalive::default)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawKeepalive, E> {
                match v {
                    "off" => Ok(RawKeepalive(None)),
                    "on" => Ok(RawKeepalive(Some(TcpKeepalive::default()))),
                    other => Err(E::custom(format!(
                        "`{other}`: expected `off`, `on`, or a map with `idle`, `interval`, `count`"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawKeepalive, A::Error> {
                let m = RawKeepaliveMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let d = TcpKeepalive::default();
                Ok(RawKeepalive(Some(TcpKeepalive {
                    idle: m.idle.unwrap_or(d.idle),
                    interval: m.interval.unwrap_or(d.interval),
                    count: m.count.unwrap_or(d.count),
                })))
            }
        }
        d.deserialize_any(V)
    }
}

/// The kernel counts these timers in whole seconds: anything else would be silently rounded.
pub(super) fn validate(keepalive: Option<&TcpKeepalive>) -> Result<(), ConfigError> {
    let Some(k) = keepalive else {
        return Ok(());
    };
    for (key, value) in [
        ("tcp_keepalive.idle", k.idle),
        ("tcp_keepalive.interval", k.interval),
    ] {
        if value.subsec_nanos() != 0 || !(1..=MAX_KEEPALIVE_SECS).contains(&value.as_secs()) {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "{} must be whole seconds from 1s to {MAX_KEEPALIVE_SECS}s",
                    humantime::format_duration(value)
                ),
            ));
        }
    }
    if !(1..=MAX_KEEPALIVE_COUNT).contains(&k.count) {
        return Err(ConfigError::invalid(
            "tcp_keepalive.count",
            format!("{} is out of range 1..={MAX_KEEPALIVE_COUNT}", k.count),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn parse(yaml: &str) -> Result<Option<TcpKeepalive>, String> {
        Config::from_yaml_str(&format!("backends: [\"h:1\"]\n{yaml}"))
            .map(|c| c.tcp_keepalive)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn on_by_default_with_about_ninety_seconds_to_find_a_dead_peer() {
        assert_eq!(parse(""), Ok(Some(TcpKeepalive::default())));
        let d = TcpKeepalive::default();
        assert_eq!(
            (d.idle, d.interval, d.count),
            (Duration::from_secs(60), Duration::from_secs(10), 3)
        );
    }

    #[test]
    fn off_on_and_partial_maps() {
        assert_eq!(parse("tcp_keepalive: off"), Ok(None));
        assert_eq!(parse("tcp_keepalive: false"), Ok(None));
        assert_eq!(
            parse("tcp_keepalive: on"),
            Ok(Some(TcpKeepalive::default()))
        );
        assert_eq!(
            parse("tcp_keepalive: {idle: 1s, count: 2}"),
            Ok(Some(TcpKeepalive {
                idle: Duration::from_secs(1),
                interval: Duration::from_secs(10),
                count: 2,
            }))
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = parse("tcp_keepalive: {idle: 500ms}").unwrap_err();
        assert!(
            e.contains("tcp_keepalive.idle") && e.contains("whole seconds"),
            "{e}"
        );
        let e = parse("tcp_keepalive: {interval: 0s}").unwrap_err();
        assert!(e.contains("tcp_keepalive.interval"), "{e}");
        let e = parse("tcp_keepalive: {count: 0}").unwrap_err();
        assert!(e.contains("tcp_keepalive.count"), "{e}");
        let e = parse("tcp_keepalive: {idle: 40000s}").unwrap_err();
        assert!(e.contains("32767s"), "{e}");
        let e = parse("tcp_keepalive: {idel: 5s}").unwrap_err();
        assert!(e.contains("idel"), "{e}");
        let e = parse("tcp_keepalive: sometimes").unwrap_err();
        assert!(e.contains("`sometimes`"), "{e}");
    }
}
