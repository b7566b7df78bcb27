//! `kill:`: the account mysql-lb logs in with to run a client's KILL on another backend, and
//! `peer_token_file`, the token instances ask each other about their sessions with.
//!
//! A KILL arriving on a connection balanced to another backend than its target's can only run
//! over a connection of the proxy's own to the target's backend (see `crate::kill::exec`). That
//! account kills other users' threads, so it needs `CONNECTION ADMIN` (or `SUPER`); it is kept
//! apart from `health_check.user`, which needs no privilege at all.

use serde::Deserialize;

use super::ConfigError;

/// The proxy's own account for KILLs across backends; without `user` they are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillConfig {
    /// Logs in with mysql_native_password, as the health checks do.
    pub user: Option<String>,
    pub password: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKill {
    user: Option<String>,
    password: Option<String>,
}

impl RawKill {
    pub(super) fn into_config(self) -> KillConfig {
        KillConfig {
            user: self.user,
            password: self.password,
        }
    }
}

impl KillConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.password.is_some() && self.user.is_none() {
            return Err(ConfigError::invalid("kill.password", "set kill.user too"));
        }
        if self.user.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::invalid("kill.user", "must not be empty"));
        }
        Ok(())
    }
}
