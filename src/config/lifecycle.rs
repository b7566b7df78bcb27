//! `shutdown_delay` and `watch_config`: how the proxy stops and reloads when something else
//! (a load balancer, Kubernetes) decides when it runs.
//!
//! A load balancer only stops sending new clients after its readiness probe has failed a few
//! times, so the drain waits `shutdown_delay` after the readiness flip (see `crate::proxy::lifecycle`).
//! The config-file watch is on by default because a mounted ConfigMap changes with no one there
//! to send SIGHUP; it only does anything when the configuration came from a file (`--config`).

use std::time::Duration;

use super::ConfigError;

/// Longer than any readiness probe period a load balancer would sensibly use: a larger value is
/// more likely a typo (`30m` for `30s`) than a wish.
const MAX_SHUTDOWN_DELAY: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// After the first SIGTERM/SIGINT, keep accepting and serving for this long (readiness
    /// already failing) before the drain begins. Zero: drain at once.
    pub shutdown_delay: Duration,
    /// Reload (as SIGHUP does) when the `--config` file changes.
    pub watch_config: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            shutdown_delay: Duration::ZERO,
            watch_config: true,
        }
    }
}

impl LifecycleConfig {
    /// The two keys as given in the file; a missing one takes its default.
    pub(super) fn from_raw(shutdown_delay: Option<Duration>, watch_config: Option<bool>) -> Self {
        let d = Self::default();
        Self {
            shutdown_delay: shutdown_delay.unwrap_or(d.shutdown_delay),
            watch_config: watch_config.unwrap_or(d.watch_config),
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.shutdown_delay > MAX_SHUTDOWN_DELAY {
            return Err(ConfigError::invalid(
                "shutdown_delay",
                format!(
                    "{} is longer than the maximum of {}",
                    humantime::format_duration(self.shutdown_delay),
                    humantime::format_duration(MAX_SHUTDOWN_DELAY)
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn defaults_are_no_delay_and_watching() {
        let c = Config::from_yaml_str("backends: [\"127.0.0.1:3306\"]\n").unwrap();
        assert_eq!(c.lifecycle.shutdown_delay, Duration::ZERO);
        assert!(c.lifecycle.watch_config);
    }

    #[test]
    fn both_keys_are_read() {
        let c = Config::from_yaml_str(
            "backends: [\"127.0.0.1:3306\"]\nshutdown_delay: 15s\nwatch_config: false\n",
        )
        .unwrap();
        assert_eq!(c.lifecycle.shutdown_delay, Duration::from_secs(15));
        assert!(!c.lifecycle.watch_config);
    }

    #[test]
    fn an_absurd_delay_is_refused_naming_the_key() {
        let e = Config::from_yaml_str("backends: [\"127.0.0.1:3306\"]\nshutdown_delay: 2h\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("shutdown_delay"), "{e}");
    }

    #[test]
    fn a_malformed_delay_is_refused_naming_the_key() {
        let e = Config::from_yaml_str("backends: [\"127.0.0.1:3306\"]\nshutdown_delay: soon\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("shutdown_delay"), "{e}");
    }
}
