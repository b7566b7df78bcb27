//! `balancer.ejection`: outlier ejection of backends whose sessions keep failing.
//!
//! Health checks see a backend from one probe every few seconds; sessions see it from every
//! client. A backend that passes its checks while clients' connects time out, their logins go
//! unanswered or their queries are cut off mid-command is taken out for a while on that evidence
//! (see `balancer::ejection`). Kept apart so the section's defaults and checks read in one place.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::ConfigError;

/// When and for how long a failing backend leaves rotation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EjectionConfig {
    /// Session failures within `window` that eject a backend; 0 turns ejection off.
    pub failures: u32,
    pub window: Duration,
    /// The first ejection's length; each further one in a row doubles it.
    pub backoff: Duration,
    /// The longest an ejection lasts; also how long a backend must stay in after a successful
    /// trial before the doubling starts over.
    pub max_backoff: Duration,
    /// The largest share of a pool's backends ejected at once (rounded down: 0.5 of a pool of 3
    /// is 1; a pool of one backend is never ejected).
    pub max_share: f64,
}

// `max_share` is validated to lie in [0, 1] (never NaN), so equality is total.
impl Eq for EjectionConfig {}

impl Default for EjectionConfig {
    fn default() -> Self {
        Self {
            failures: 5,
            window: Duration::from_secs(10),
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(300),
            max_share: 0.5,
        }
    }
}

impl EjectionConfig {
    /// Off: failures are still counted in metrics, nobody is ejected.
    pub fn off() -> Self {
        Self {
            failures: 0,
            ..Self::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.failures > 0
    }

    /// How many of `members` backends may be ejected at the same time.
    pub fn allowed(&self, members: usize) -> usize {
        // max_share is validated to [0, 1]: the product fits and rounds down.
        (self.max_share * members as f64).floor() as usize
    }

    /// The length of the `streak`-th ejection in a row (1 for the first).
    pub fn backoff_for(&self, streak: u32) -> Duration {
        let doublings = streak.saturating_sub(1).min(32);
        self.backoff
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max_backoff)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        let positive = [
            ("balancer.ejection.window", self.window),
            ("balancer.ejection.backoff", self.backoff),
            ("balancer.ejection.max_backoff", self.max_backoff),
        ];
        for (key, value) in positive {
            if value.is_zero() {
                return Err(ConfigError::invalid(key, "must be > 0"));
            }
        }
        if self.max_backoff < self.backoff {
            return Err(ConfigError::invalid(
                "balancer.ejection.max_backoff",
                format!(
                    "must be at least backoff ({})",
                    humantime::format_duration(self.backoff)
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.max_share) {
            return Err(ConfigError::invalid(
                "balancer.ejection.max_share",
                format!("must be between 0 and 1, not {}", self.max_share),
            ));
        }
        Ok(())
    }
}

/// The section as written: `off` (or `false`), `on` (or `true`) for the defaults, or a map where
/// a missing entry takes its default.
#[derive(Debug)]
pub(super) struct RawEjection(EjectionConfig);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEjectionMap {
    failures: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    window: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    max_backoff: Option<Duration>,
    max_share: Option<f64>,
}

const EXPECTING: &str =
    "`off`, `on`, or a map with `failures`, `window`, `backoff`, `max_backoff`, `max_share`";

impl<'de> Deserialize<'de> for RawEjection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEjection;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTING)
            }
            fn visit_bool<E: de::Error>(self, on: bool) -> Result<RawEjection, E> {
                Ok(RawEjection(if on {
                    EjectionConfig::default()
                } else {
                    EjectionConfig::off()
                }))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawEjection, E> {
                match v {
                    "off" => self.visit_bool(false),
                    "on" => self.visit_bool(true),
                    other => Err(E::custom(format!("`{other}`: expected {EXPECTING}"))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawEjection, A::Error> {
                let m = RawEjectionMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let d = EjectionConfig::default();
                Ok(RawEjection(EjectionConfig {
                    failures: m.failures.unwrap_or(d.failures),
                    window: m.window.unwrap_or(d.window),
                    backoff: m.backoff.unwrap_or(d.backoff),
                    max_backoff: m.max_backoff.unwrap_or(d.max_backoff),
                    max_share: m.max_share.unwrap_or(d.max_share),
                }))
            }
        }
        d.deserialize_any(V)
    }
}

impl RawEjection {
    pub(super) fn into_config(raw: Option<Self>) -> EjectionConfig {
        raw.map_or_else(EjectionConfig::default, |r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let c = EjectionConfig {
            backoff: Duration::from_secs(10),
            max_backoff: Duration::from_secs(60),
            ..EjectionConfig::default()
        };
        let secs: Vec<u64> = (1..=6).map(|s| c.backoff_for(s).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 60, 60, 60]);
        assert_eq!(c.backoff_for(u32::MAX).as_secs(), 60);
        assert_eq!(c.backoff_for(0).as_secs(), 10);
    }

    #[test]
    fn share_rounds_down() {
        let c = EjectionConfig::default();
        assert_eq!(
            [1, 2, 3, 4, 5].map(|n| c.allowed(n)),
            [0, 1, 1, 2, 2],
            "max_share 0.5"
        );
        let all = EjectionConfig {
            max_share: 1.0,
            ..c
        };
        assert_eq!(all.allowed(3), 3);
    }
}
