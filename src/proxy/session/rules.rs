//! A session's side of the query rules (see `crate::backends::rules`): each statement the
//! tracker hands over whole is matched, and the first rule that matches decides what is sent.
//!
//! - `error:` a `SIGNAL` with the rule's message goes in the statement's place, so the client
//!   reads ERR 1148 where its answer would be and nothing of the statement reaches the server
//!   (the relay and tracker follow the signal as any answer; the way writes are refused on a
//!   replica).
//! - `timeout:` the statement goes as `SET STATEMENT max_statement_time=… FOR …` on MariaDB
//!   (one `COM_QUERY` statement; the server stops it and answers ERR 1969); elsewhere it goes
//!   unchanged, counted and logged.
//! - `max_concurrency:` the statement waits for one of the rule's turns (shared by every
//!   session), up to `max_concurrency_wait`, then goes; no turn in time and the client gets
//!   ERR 1040 in its place. A turn is given back when a statement command completes, and every
//!   turn the session holds when it ends (the queue drops with it).
//! - `log:` one audit line (`query rule matched`) with the normalized statement, never its
//!   literals.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedSemaphorePermit;
use tracing::info;

use crate::backends::rules::{Command, Rule, RuleSet, Who};
use crate::proxy::relay::KillRewrite;
use crate::proxy::state::ProxyState;
use crate::wire::protocol::response::{cmd, Completed};

/// ER_NOT_ALLOWED_COMMAND, SQLSTATE 42000: what ProxySQL's refusing rules answer.
pub(super) const REFUSED: u16 = 1148;
/// ER_CON_COUNT_ERROR: a statement with no turn of its rule in time.
const OVER_LIMIT: u16 = 1040;

/// The rules one session asks, and the turns it holds.
pub(super) struct SessionRules {
    set: Arc<RuleSet>,
    state: Arc<ProxyState>,
    schema: String,
    /// The session changed its schema (`USE`, COM_INIT_DB): a rule on a schema matches.
    schema_changed: bool,
    client: Option<IpAddr>,
    peer: String,
    /// The backend's server is MariaDB: `timeout:` is `SET STATEMENT max_statement_time`.
    mariadb: bool,
    /// One entry per statement the rules looked at, in order: the turn it holds, if any.
    turns: Arc<Mutex<VecDeque<Option<OwnedSemaphorePermit>>>>,
}

impl SessionRules {
    /// The rules for a session of `user` in `schema` from `client`; None when none may match
    /// it (it then never reads its statements for rules).
    pub(super) fn start(
        state: &Arc<ProxyState>,
        user: &str,
        schema: &str,
        client: Option<IpAddr>,
        peer: &str,
        mariadb: bool,
    ) -> Option<SessionRules> {
        let set = state.rules.load_full();
        let who = Who {
            user: Some(user),
            schema: Some(schema),
            client,
        };
        if !set.for_session(&who) {
            return None;
        }
        Some(SessionRules {
            set,
            state: Arc::clone(state),
            schema: schema.to_owned(),
            schema_changed: false,
            client,
            peer: peer.to_owned(),
            mariadb,
            turns: Arc::default(),
        })
    }

    fn who<'s>(&'s self, user: Option<&'s str>) -> Who<'s> {
        Who {
            user,
            schema: (!self.schema_changed).then_some(self.schema.as_str()),
            client: self.client,
        }
    }

    /// Whether a statement too long to read whole must be refused: a refusing rule may match.
    pub(super) fn refuses_long(&self, user: Option<&str>) -> bool {
        self.set.refuses_for(&self.who(user))
    }

    /// What goes instead of statement `packet` (header first), if anything.
    pub(super) fn apply(&mut self, user: Option<&str>, packet: &[u8]) -> Option<KillRewrite> {
        let (&command, text) = packet.get(4..)?.split_first()?;
        let kind = match command {
            cmd::QUERY => Command::Query,
            cmd::STMT_PREPARE => Command::Prepare,
            _ => return None,
        };
        let set = Arc::clone(&self.set);
        let verdict = set.check(&self.who(user), kind, text);
        self.note_schema(command, text);
        let Some((rule, statement)) = verdict else {
            self.push(None);
            return None;
        };
        rule.hit();
        let c = &rule.config;
        if let Some(message) = &c.error {
            self.report(rule, user, statement.as_deref(), "error");
            // Never sent: no answer of the server's stands for it, so it takes no turn.
            self.push(None);
            return Some(KillRewrite::Now(signal_packet(REFUSED, "42000", message)));
        }
        let mut sent = None;
        let mut action = "log";
        if let Some(limit) = c.timeout.filter(|_| kind == Command::Query) {
            action = "timeout";
            if self.mariadb {
                sent = Some(with_statement_time(text, limit));
            }
        }
        let Some(turns) = &rule.turns else {
            self.report(rule, user, statement.as_deref(), action);
            self.push(None);
            return sent.map(KillRewrite::Now);
        };
        self.report(rule, user, statement.as_deref(), "limited");
        let packet = sent.unwrap_or_else(|| packet.to_vec());
        let (turns, wait, queue) = (
            Arc::clone(turns),
            c.max_concurrency_wait,
            Arc::clone(&self.turns),
        );
        let over = self.counter(rule, "over_limit");
        let name = c.name.clone();
        Some(KillRewrite::Later(Box::pin(async move {
            match tokio::time::timeout(wait, turns.acquire_owned()).await {
                Ok(Ok(turn)) => {
                    if let Ok(mut q) = queue.lock() {
                        q.push_back(Some(turn));
                    }
                    packet
                }
                _ => {
                    over.inc();
                    if let Ok(mut q) = queue.lock() {
                        q.push_back(None);
                    }
                    let why = format!("query rule {name}: no turn within max_concurrency");
                    signal_packet(OVER_LIMIT, "08004", &why)
                }
            }
        })))
    }

    /// A COM_STMT_PREPARE a pooled session prepares itself: the message of the rule that
    /// refuses it, if one does (the other actions do not apply to a prepare run there).
    pub(super) fn refuses_prepare(&mut self, user: Option<&str>, text: &[u8]) -> Option<String> {
        let set = Arc::clone(&self.set);
        let (rule, statement) = set.check(&self.who(user), Command::Prepare, text)?;
        rule.hit();
        let message = rule.config.error.clone();
        let action = if message.is_some() { "error" } else { "log" };
        self.report(rule, user, statement.as_deref(), action);
        message.map(|m| format!("query rule {}: {m}", rule.config.name))
    }

    /// A command completed: a statement command gives back the turn it held.
    pub(super) fn completed(&mut self, c: &Completed) {
        if c.command == cmd::INIT_DB {
            self.schema_changed = true;
        }
        if matches!(c.command, cmd::QUERY | cmd::STMT_PREPARE) {
            if let Ok(mut q) = self.turns.lock() {
                q.pop_front();
            }
        }
    }

    fn push(&self, turn: Option<OwnedSemaphorePermit>) {
        if let Ok(mut q) = self.turns.lock() {
            q.push_back(turn);
        }
    }

    /// `USE db` anywhere in a query (read loosely: a word `use` at all) makes the schema
    /// unknown from now on.
    fn note_schema(&mut self, command: u8, text: &[u8]) {
        if command == cmd::QUERY && text.windows(3).any(|w| w.eq_ignore_ascii_case(b"use")) {
            self.schema_changed = true;
        }
    }

    fn counter(&self, rule: &Rule, action: &str) -> prometheus::IntCounter {
        self.state
            .metrics
            .query_rule_hits
            .with_label_values(&[rule.config.name.as_str(), action])
    }

    fn report(&self, rule: &Rule, user: Option<&str>, statement: Option<&str>, action: &str) {
        self.counter(rule, action).inc();
        if rule.config.log || action == "error" {
            info!(
                rule = %rule.config.name,
                action,
                user = user.unwrap_or("(changed)"),
                client = %self.peer,
                statement = statement.unwrap_or("(not followed: refused when unsure)"),
                "query rule matched"
            );
        }
    }
}

/// `SET STATEMENT max_statement_time=<seconds> FOR <text>` as a COM_QUERY packet.
fn with_statement_time(text: &[u8], limit: std::time::Duration) -> Vec<u8> {
    let prefix = format!(
        "SET STATEMENT max_statement_time={:.3} FOR ",
        limit.as_secs_f64()
    );
    query_packet(&[prefix.as_bytes(), text].concat())
}

/// A COM_QUERY (sequence id 0) the server answers with ERR `code` and `why` (cut to the 128
/// characters `SIGNAL` takes, quotes doubled).
pub(super) fn signal_packet(code: u16, sqlstate: &str, why: &str) -> Vec<u8> {
    let mut message: String = format!("mysql-lb: {why}").chars().take(128).collect();
    message = message.replace('\\', "\\\\").replace('\'', "''");
    let text = format!(
        "SIGNAL SQLSTATE '{sqlstate}' SET MYSQL_ERRNO = {code}, MESSAGE_TEXT = '{message}'"
    );
    query_packet(text.as_bytes())
}

fn query_packet(text: &[u8]) -> Vec<u8> {
    let len = 1 + text.len();
    let mut packet = Vec::with_capacity(4 + len);
    packet.extend_from_slice(&[
        len as u8,
        (len >> 8) as u8,
        (len >> 16) as u8,
        0,
        cmd::QUERY,
    ]);
    packet.extend_from_slice(text);
    packet
}
