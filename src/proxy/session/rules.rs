//! A session's side of the query rules (see `crate::backends::rules`): each statement the
//! tracker hands over whole is matched, and the first rule that matches decides what is sent.
//!
//! - `error:` a `SIGNAL` with the rule's message goes in the statement's place, so the client
//!   reads ERR 1148 where its answer would be and nothing of the statement reaches the server
//!   (the relay and tracker follow the signal as any answer; the way writes are refused on a
//!   replica).
//! - `timeout:` a `COM_QUERY` goes as `SET STATEMENT max_statement_time=… FOR …` on MariaDB
//!   (the server stops it and answers ERR 1969; in a multi-statement text, the first
//!   statement); elsewhere it goes unchanged, counted as `matched`.
//! - `max_concurrency:` the statement waits for one of the rule's turns (shared by every
//!   session), up to `max_concurrency_wait`, then goes; no turn in time and the client gets
//!   ERR 1040 in its place. Each statement the rules read takes a place in the session's queue
//!   when it is read, in order; a turn lands in its statement's place, and the completion of
//!   the session's oldest statement command gives its place back, and every place goes when
//!   the session ends (the queue drops with it). A statement longer than the tracker hands
//!   over whole is not read, and its completion gives back an earlier place: a turn can come
//!   back early, never late.
//! - `log:` one audit line (`query rule matched`) with the normalized statement, never its
//!   literals.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedSemaphorePermit;
use tracing::info;

use crate::backends::rules::{Command, Rule, RuleSet, Who};
use crate::config::RuleRoute;
use crate::proxy::relay::KillRewrite;
use crate::proxy::state::ProxyState;
use crate::wire::protocol::response::{cmd, Completed};
use crate::wire::sql::normalize;

/// ER_NOT_ALLOWED_COMMAND, SQLSTATE 42000: what ProxySQL's refusing rules answer.
pub(super) const REFUSED: u16 = crate::wire::protocol::errors::code::NOT_ALLOWED_COMMAND;
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
    /// One place per statement the rules looked at, in the order they are sent: the turn it
    /// holds, if any (filled when a waiting statement gets its turn).
    turns: Arc<Mutex<VecDeque<Slot>>>,
}

/// Where a statement's turn is kept until its completion.
type Slot = Arc<Mutex<Option<OwnedSemaphorePermit>>>;

/// What a hit's log line says.
struct Said<'a> {
    rule: &'a str,
    user: Option<&'a str>,
    /// The statement as the server would run it that matched, when one did.
    statement: Option<&'a str>,
    text: &'a [u8],
}

impl SessionRules {
    /// The rules for a session of `user` in `schema` from `client`; None when none may match
    /// it (it then never reads its statements for rules).
    pub(super) fn start(
        state: &Arc<ProxyState>,
        schema: &str,
        client: Option<IpAddr>,
        peer: &str,
        mariadb: bool,
    ) -> Option<SessionRules> {
        let set = state.rules.load_full();
        // The user (COM_CHANGE_USER) and the schema (`USE`) may change in the session, so only
        // the client's address may rule a session out for good.
        let anyone = Who {
            user: None,
            schema: None,
            client,
        };
        if !set.for_session(&anyone) {
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
        // `USE shop; DELETE …` in one packet: the schema is unknown for its statements too.
        self.note_schema(command, text);
        // Its place among the session's statements, taken now, in order: a turn it waits for
        // lands here, and this statement's completion gives it back.
        let slot = self.slot();
        let set = Arc::clone(&self.set);
        let (rule, statement) = set.check(&self.who(user), kind, text)?;
        let c = &rule.config;
        if c.route.is_some() && c.timeout.is_none() && rule.turns.is_none() {
            // Counted where the split read it (`route`); elsewhere a route does nothing.
            return None;
        }
        rule.hit();
        let said = Said {
            rule: &c.name,
            user,
            statement: statement.as_deref(),
            text,
        };
        if let Some(message) = &c.error {
            self.report(rule, &said, "error");
            return Some(KillRewrite::Now(signal_packet(REFUSED, "42000", message)));
        }
        let timed = match c.timeout {
            Some(limit) if kind == Command::Query && self.mariadb => {
                Some(with_statement_time(text, limit))
            }
            _ => None,
        };
        let Some(turns) = &rule.turns else {
            let action = if timed.is_some() {
                "timeout"
            } else {
                "matched"
            };
            self.report(rule, &said, action);
            return timed.map(KillRewrite::Now);
        };
        self.report(rule, &said, "queued");
        let packet = timed.unwrap_or_else(|| packet.to_vec());
        let (turns, wait) = (Arc::clone(turns), c.max_concurrency_wait);
        let (limited, over) = (
            self.counter(rule, "limited"),
            self.counter(rule, "over_limit"),
        );
        let (name, peer) = (c.name.clone(), self.peer.clone());
        Some(KillRewrite::Later(Box::pin(async move {
            match tokio::time::timeout(wait, turns.acquire_owned()).await {
                Ok(Ok(turn)) => {
                    limited.inc();
                    if let Ok(mut held) = slot.lock() {
                        *held = Some(turn);
                    }
                    packet
                }
                _ => {
                    over.inc();
                    info!(rule = %name, client = %peer, "query rule refused a statement: no turn within max_concurrency_wait");
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
        let Some((rule, statement)) = set.check(&self.who(user), Command::Prepare, text) else {
            // Prepared on the server, it completes as a statement command: one place.
            self.slot();
            return None;
        };
        let message = rule.config.error.clone();
        let action = if message.is_some() {
            "error"
        } else {
            "matched"
        };
        self.hit(rule, user, statement.as_deref(), text, action);
        if message.is_none() {
            self.slot();
        }
        // As long as the relayed refusal's, which SIGNAL cuts.
        message.map(|m| m.chars().take(118).collect())
    }

    /// Where a rule sends the transaction a COM_QUERY of `text` begins (a split pool's
    /// session asks before it takes a connection), if a rule with `route:` is the first match.
    pub(super) fn route(&mut self, user: Option<&str>, text: &[u8]) -> Option<RuleRoute> {
        let set = Arc::clone(&self.set);
        let (rule, statement) = set.check(&self.who(user), Command::Query, text)?;
        let route = rule.config.route?;
        self.hit(rule, user, statement.as_deref(), text, "route");
        Some(route)
    }

    /// A command completed: a statement command gives back the turn it held.
    pub(super) fn completed(&mut self, c: &Completed) {
        if matches!(c.command, cmd::INIT_DB | cmd::CHANGE_USER) {
            self.schema_changed = true;
        }
        if self.set.has_turns() && matches!(c.command, cmd::QUERY | cmd::STMT_PREPARE) {
            if let Ok(mut q) = self.turns.lock() {
                q.pop_front();
            }
        }
    }

    /// A new place at the back of the session's statements (kept only when some rule limits
    /// concurrency: otherwise no statement ever holds a turn).
    fn slot(&self) -> Slot {
        let slot = Slot::default();
        if self.set.has_turns() {
            if let Ok(mut q) = self.turns.lock() {
                q.push_back(Arc::clone(&slot));
            }
        }
        slot
    }

    /// `USE db` anywhere in a query (read loosely: a word `use` at all) makes the schema
    /// unknown from now on.
    fn note_schema(&mut self, command: u8, text: &[u8]) {
        if self.set.has_schemas()
            && command == cmd::QUERY
            && text.windows(3).any(|w| w.eq_ignore_ascii_case(b"use"))
        {
            self.schema_changed = true;
        }
    }

    fn counter(&self, rule: &Rule, action: &str) -> prometheus::IntCounter {
        self.state
            .metrics
            .query_rule_hits
            .with_label_values(&[rule.config.name.as_str(), action])
    }

    /// A hit of `rule` by `text` that did `action`: counted on the rule and reported.
    fn hit(
        &self,
        rule: &Rule,
        user: Option<&str>,
        statement: Option<&str>,
        text: &[u8],
        action: &str,
    ) {
        rule.hit();
        let said = Said {
            rule: &rule.config.name,
            user,
            statement,
            text,
        };
        self.report(rule, &said, action);
    }

    /// Counts the hit (`queued` is counted again as `limited` or `over_limit` once it has
    /// its answer, so it is not a series of its own) and logs it when the rule logs or refuses.
    fn report(&self, rule: &Rule, said: &Said<'_>, action: &str) {
        if action != "queued" {
            self.counter(rule, action).inc();
        }
        if rule.config.log || action == "error" {
            let statement = match said.statement {
                Some(s) => s.to_owned(),
                None => normalize(said.text, 1024),
            };
            info!(
                rule = %said.rule,
                action,
                user = said.user.unwrap_or("(changed)"),
                client = %self.peer,
                statement = %statement,
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
