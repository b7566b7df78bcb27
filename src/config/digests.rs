//! `digests:`: the live table of query digests (see `crate::telemetry::digest`): whether it is kept, how
//! large it may grow, how much of a statement is read, and what is exported or logged from it.
//! Everything here is reloadable.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestConfig {
    pub enabled: bool,
    /// Rows of the table (digest × backend × user × schema) at most; past it the least
    /// valuable rows fold into one "(other)" row per backend.
    pub max_entries: usize,
    /// Bytes of a statement's text read to normalize it (the rest is not looked at).
    pub max_query_length: usize,
    /// Bytes of one statement's text kept as the sample of its row (0: none).
    pub sample_length: usize,
    /// Bytes all kept texts (normalized statements and samples, over the table and every
    /// session) hold at most; past it new digests count in "(other)".
    pub max_text_bytes: usize,
    /// Rows per backend exported to Prometheus, by total time (0: none).
    pub prometheus_top: usize,
    /// Statements slower than this are logged, one line each.
    pub slow_query_threshold: Option<Duration>,
    /// At most this many slow-query lines per second (the rest are counted, not logged).
    pub slow_query_log_per_second: u32,
}

impl Default for DigestConfig {
    fn default() -> Self {
        Self {
            // On: the digest of a statement that repeats an earlier one but for its numbers is a
            // cache hit of a few hundred instructions (see docs/src/digests.md for what the
            // table costs per query).
            enabled: true,
            max_entries: 5000,
            max_query_length: 1024,
            sample_length: 256,
            max_text_bytes: 32 << 20,
            prometheus_top: 0,
            slow_query_threshold: None,
            slow_query_log_per_second: 10,
        }
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDigests {
    enabled: Option<bool>,
    max_entries: Option<usize>,
    max_query_length: Option<usize>,
    sample_length: Option<usize>,
    max_text_bytes: Option<usize>,
    prometheus_top: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    slow_query_threshold: Option<Duration>,
    slow_query_log_per_second: Option<u32>,
}

impl RawDigests {
    pub(super) fn into_config(self) -> Result<DigestConfig, ConfigError> {
        let d = DigestConfig::default();
        let c = DigestConfig {
            enabled: self.enabled.unwrap_or(d.enabled),
            max_entries: self.max_entries.unwrap_or(d.max_entries),
            max_query_length: self.max_query_length.unwrap_or(d.max_query_length),
            sample_length: self.sample_length.unwrap_or(d.sample_length),
            max_text_bytes: self.max_text_bytes.unwrap_or(d.max_text_bytes),
            prometheus_top: self.prometheus_top.unwrap_or(d.prometheus_top),
            slow_query_threshold: self.slow_query_threshold,
            slow_query_log_per_second: self
                .slow_query_log_per_second
                .unwrap_or(d.slow_query_log_per_second),
        };
        if !(16..=10_000_000).contains(&c.max_entries) {
            return Err(ConfigError::invalid(
                "digests.max_entries",
                "must be between 16 and 10000000",
            ));
        }
        if !(16..=1 << 20).contains(&c.max_query_length) {
            return Err(ConfigError::invalid(
                "digests.max_query_length",
                "must be between 16 and 1048576 bytes",
            ));
        }
        if c.sample_length > 65536 {
            return Err(ConfigError::invalid(
                "digests.sample_length",
                "must be at most 65536 bytes",
            ));
        }
        if !(1 << 20..=1 << 40).contains(&c.max_text_bytes) {
            return Err(ConfigError::invalid(
                "digests.max_text_bytes",
                "must be between 1048576 and 1099511627776 bytes",
            ));
        }
        if c.prometheus_top > 100 {
            return Err(ConfigError::invalid(
                "digests.prometheus_top",
                "must be at most 100 (each row is a series per backend)",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn max_text_bytes_is_read_and_names_itself_when_out_of_range() {
        let c =
            Config::from_yaml_str("backends: [h:1]\ndigests: {max_text_bytes: 67108864}").unwrap();
        assert_eq!(c.digests.max_text_bytes, 64 << 20);
        let d = Config::from_yaml_str("backends: [h:1]").unwrap();
        assert_eq!(d.digests.max_text_bytes, 32 << 20);
        let e = Config::from_yaml_str("backends: [h:1]\ndigests: {max_text_bytes: 1000}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("digests.max_text_bytes"), "{e}");
        let e = Config::from_yaml_str("backends: [h:1]\ndigests: {max_text_byte: 1}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_text_byte"), "unknown keys are errors: {e}");
    }
}
