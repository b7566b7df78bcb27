//! `kill:`: the account mysql-lb logs in with to run a client's KILL on another backend, and
//! `peer_token_file`, the token instances ask each other about their sessions with.
//!
//! A KILL arriving on a connection balanced to another backend than its target's can only run
//! over a connection of the proxy's own to the target's backend (see `crate::backends::kill::exec`). That
//! account kills other users' threads, so it needs `CONNECTION ADMIN` (or `SUPER`); it is kept
//! apart from `health_check.user`, which needs no privilege at all.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Secret};

/// The proxy's own account for KILLs across backends; without `user` they are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillConfig {
    /// Logs in with mysql_native_password, as the health checks do.
    pub user: Option<String>,
    /// `password`, or the content of `password_file` once validated. Debug shows `<redacted>`.
    pub password: Option<Secret>,
    /// `password_file`: read at start (less one trailing newline), as health_check's.
    pub password_file: Option<PathBuf>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKill {
    user: Option<String>,
    password: Option<String>,
    password_file: Option<PathBuf>,
}

impl RawKill {
    pub(super) fn into_config(self) -> KillConfig {
        KillConfig {
            user: self.user,
            password: self.password.map(Secret::new),
            password_file: self.password_file,
        }
    }
}

impl KillConfig {
    /// Also reads `password_file` into `password`.
    pub(super) fn validate(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.password_file {
            if self.password.is_some() {
                return Err(ConfigError::invalid(
                    "kill.password_file",
                    "set either kill.password or kill.password_file, not both",
                ));
            }
            let password = super::secret::read_file(path, "password")
                .map_err(|m| ConfigError::invalid("kill.password_file", m))?;
            self.password = Some(password);
        }
        if self.password.is_some() && self.user.is_none() {
            let key = match self.password_file {
                Some(_) => "kill.password_file",
                None => "kill.password",
            };
            return Err(ConfigError::invalid(key, "set kill.user too"));
        }
        if self.user.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::invalid("kill.user", "must not be empty"));
        }
        Ok(())
    }
}
