//! `query_rules:`: what a statement that matches a rule gets (see `crate::backends::rules`).
//!
//! Each rule names what it matches (a digest, a normalized text, a regular expression over the
//! normalized text, a user, a schema, a client network, the command) and what it does (refuse
//! with an error, a timeout, a concurrency limit, an audit log line). Rules are read in file
//! order and the first that matches a statement decides for it. Reloadable: sessions that
//! start after a reload take the new rules.

use std::time::Duration;

use serde::Deserialize;

use super::cidr::Cidr;
use super::ConfigError;

/// Longest `pattern` accepted (its compiled size is bounded too).
const MAX_PATTERN: usize = 4096;

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRule {
    pub name: String,
    /// The digest as `/queries` prints it (16 hex digits).
    pub digest: Option<u64>,
    /// The normalized text as `/queries` prints it, compared case-blind.
    pub digest_text: Option<String>,
    /// A regular expression over the normalized text, case-blind.
    pub pattern: Option<String>,
    pub user: Option<String>,
    pub schema: Option<String>,
    pub client: Option<Cidr>,
    /// Which commands the rule reads: `COM_QUERY` texts, `COM_STMT_PREPARE` texts.
    pub query: bool,
    pub prepare: bool,
    /// Refused with this message; never sent.
    pub error: Option<String>,
    /// Stopped on its server after this long (MariaDB's `max_statement_time`).
    pub timeout: Option<Duration>,
    /// At most this many in flight at once over the whole proxy.
    pub max_concurrency: Option<u32>,
    /// How long a statement waits for its turn before it is refused (0: refused at once).
    pub max_concurrency_wait: Duration,
    /// An audit line per match.
    pub log: bool,
    /// Where the transaction it begins runs, in a pool with `read_write_split`.
    pub route: Option<RuleRoute>,
}

impl QueryRule {
    /// A rule named `name` that matches nothing and does nothing yet: both commands read,
    /// the default wait for a turn. Callers set what it matches and does (tests, benchmarks).
    pub fn named(name: &str) -> QueryRule {
        QueryRule {
            name: name.to_owned(),
            digest: None,
            digest_text: None,
            pattern: None,
            user: None,
            schema: None,
            client: None,
            query: true,
            prepare: true,
            error: None,
            timeout: None,
            max_concurrency: None,
            max_concurrency_wait: Duration::from_secs(5),
            log: false,
            route: None,
        }
    }
}

/// `route:` of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleRoute {
    /// On the primary, though a replica could take it (a read that must see the latest).
    Primary,
    /// On a replica, though the split cannot prove it a pure read (a stored function the
    /// operator knows writes nothing); never a statement that writes in any reading.
    Replica,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    name: String,
    digest: Option<String>,
    digest_text: Option<String>,
    pattern: Option<String>,
    user: Option<String>,
    schema: Option<String>,
    client: Option<String>,
    commands: Option<Vec<String>>,
    error: Option<String>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
    max_concurrency: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    max_concurrency_wait: Option<Duration>,
    #[serde(default)]
    log: bool,
    route: Option<String>,
}

/// Reads and checks every rule; errors name `query_rules[i].key`.
pub(super) fn into_config(raw: Vec<RawRule>) -> Result<Vec<QueryRule>, ConfigError> {
    let mut rules: Vec<QueryRule> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("query_rules[{i}].{k}");
        let rule = r.into_rule(&key)?;
        if rules.iter().any(|other| other.name == rule.name) {
            return Err(ConfigError::invalid(
                key("name"),
                format!("`{}` names two rules", rule.name),
            ));
        }
        rules.push(rule);
    }
    Ok(rules)
}

impl RawRule {
    fn into_rule(self, key: &dyn Fn(&str) -> String) -> Result<QueryRule, ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::invalid(key("name"), "must not be empty"));
        }
        let digest = self
            .digest
            .map(|d| {
                let hex = d.trim().trim_start_matches("0x");
                if hex.len() != 16 {
                    return Err(ConfigError::invalid(
                        key("digest"),
                        format!("`{d}`: 16 hex digits, as /queries prints a digest"),
                    ));
                }
                u64::from_str_radix(hex, 16)
                    .map_err(|_| ConfigError::invalid(key("digest"), format!("`{d}` is not hex")))
            })
            .transpose()?;
        if let Some(p) = &self.pattern {
            if p.len() > MAX_PATTERN {
                return Err(ConfigError::invalid(
                    key("pattern"),
                    format!("longer than {MAX_PATTERN} bytes"),
                ));
            }
            compile(p).map_err(|e| ConfigError::invalid(key("pattern"), e))?;
        }
        let client = self
            .client
            .map(|c| {
                c.parse::<Cidr>()
                    .map_err(|e| ConfigError::invalid(key("client"), e.to_string()))
            })
            .transpose()?;
        let (mut query, mut prepare) = (true, true);
        if let Some(commands) = &self.commands {
            query = false;
            prepare = false;
            for c in commands {
                match c.to_ascii_lowercase().as_str() {
                    "query" => query = true,
                    "prepare" => prepare = true,
                    other => {
                        return Err(ConfigError::invalid(
                            key("commands"),
                            format!("`{other}`: the commands are query and prepare"),
                        ))
                    }
                }
            }
            if !query && !prepare {
                return Err(ConfigError::invalid(key("commands"), "names no command"));
            }
        }
        let matches_something = digest.is_some()
            || self.digest_text.is_some()
            || self.pattern.is_some()
            || self.user.is_some()
            || self.schema.is_some()
            || client.is_some();
        if !matches_something {
            return Err(ConfigError::invalid(
                key("name"),
                "the rule matches nothing: give digest, digest_text, pattern, user, schema or \
                 client",
            ));
        }
        let route = match self
            .route
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None => None,
            Some("primary") => Some(RuleRoute::Primary),
            Some("replica") | Some("replicas") => Some(RuleRoute::Replica),
            Some(other) => {
                return Err(ConfigError::invalid(
                    key("route"),
                    format!(
                        "`{other}`: route takes primary or replica (a named pool is not built)"
                    ),
                ))
            }
        };
        if route.is_some() && self.error.is_some() {
            return Err(ConfigError::invalid(
                key("route"),
                "a refused statement runs nowhere: route goes without error",
            ));
        }
        let acts = self.error.is_some()
            || self.timeout.is_some()
            || self.max_concurrency.is_some()
            || self.log
            || route.is_some();
        if !acts {
            return Err(ConfigError::invalid(
                key("name"),
                "the rule does nothing: give error, route, timeout, max_concurrency or log",
            ));
        }
        if self.error.is_some() && (self.timeout.is_some() || self.max_concurrency.is_some()) {
            return Err(ConfigError::invalid(
                key("error"),
                "a refused statement never runs: error goes without timeout and max_concurrency",
            ));
        }
        if self.timeout.is_some_and(|t| t < Duration::from_millis(1)) {
            return Err(ConfigError::invalid(key("timeout"), "at least 1ms"));
        }
        if self.max_concurrency == Some(0) {
            return Err(ConfigError::invalid(
                key("max_concurrency"),
                "at least 1 (use error to refuse every one)",
            ));
        }
        Ok(QueryRule {
            name: self.name,
            digest,
            digest_text: self.digest_text,
            pattern: self.pattern,
            user: self.user,
            schema: self.schema,
            client,
            query,
            prepare,
            error: self.error,
            timeout: self.timeout,
            max_concurrency: self.max_concurrency,
            max_concurrency_wait: self.max_concurrency_wait.unwrap_or(Duration::from_secs(5)),
            log: self.log,
            route,
        })
    }
}

/// A rule's `pattern`, case-blind, bounded in compiled size (matching is linear in the text).
pub fn compile(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| e.to_string())
}
