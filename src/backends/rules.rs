//! Query rules (`query_rules:`): which rule a statement matches, its hits, and the turns of a
//! rule with `max_concurrency`.
//!
//! A rule is a firewall when it refuses (`error:`), so it matches what the server would run,
//! not what the client wrote: every statement of every reading of the text
//! ([`crate::wire::sql::as_run`]: executable comments run or skipped by version, `sql_mode`
//! quoting, multibyte character sets, each statement of a multi-statement, the string of a
//! `PREPARE … FROM '…'`), normalized as the digest normalizes, compared case-blind. When the
//! text cannot be followed (a comment the lexer cannot see through, dynamic SQL from a
//! variable) a refusing rule whose other conditions match refuses it: when unsure, block.
//!
//! The rules are read in file order and the first that matches decides. A session asks only
//! the rules its user and client address may match ([`RuleSet::for_session`]); a session no
//! rule can match never reads its statements for rules, so rules cost nothing there, and no
//! rules at all cost nothing anywhere.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Semaphore;

use crate::config::{compile_rule_pattern, QueryRule};
use crate::wire::sql::{as_run, digest, digest_folded, normalize, AsRun, Dialect};

/// Bytes of a statement's text the rules read (a longer one is refused where a rule refuses:
/// the tracker hands statements over whole up to this).
pub const MAX_RULE_TEXT: usize = 64 * 1024;

/// The rules in force, compiled.
#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// Rules whose one text condition is `digest_text`, by its case-blind digest
    /// (`digest_folded`): a statement finds its candidates with one hash look-up.
    by_text: HashMap<u64, Vec<usize>>,
    /// Rules whose one text condition is `digest`, by that digest.
    by_digest: HashMap<u64, Vec<usize>>,
    /// Every other rule (a pattern, several text conditions, none), in file order.
    scanned: Vec<usize>,
    /// Some rule has `max_concurrency` (sessions keep turns only then).
    turns: bool,
    /// Some rule has `schema:` (sessions follow their schema only then).
    schemas: bool,
    /// Some rule reads the statement's text.
    texts: bool,
}

/// One compiled rule and its hits.
#[derive(Debug)]
pub struct Rule {
    pub config: QueryRule,
    /// `digest_text`, printed as statements are, and its case-blind digest.
    text: Option<(String, u64)>,
    pattern: Option<regex::Regex>,
    hits: AtomicU64,
    /// Unix seconds of the last hit (0: never).
    last_hit: AtomicU64,
    /// `max_concurrency` turns, over every session.
    pub turns: Option<Arc<Semaphore>>,
}

/// Who sent a statement, as far as the session knows.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    /// None once unknown (after COM_CHANGE_USER): a rule on a user then matches.
    pub user: Option<&'a str>,
    /// None once unknown (after `USE` or COM_INIT_DB): a rule on a schema then matches.
    pub schema: Option<&'a str>,
    /// None for a unix-socket client: a rule on a network never matches it.
    pub client: Option<IpAddr>,
}

/// The statement command a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Query,
    Prepare,
}

impl RuleSet {
    /// Compiles `rules` (checked when the configuration was read: a pattern that no longer
    /// compiles is left without one, which only a changed regex crate could cause).
    pub fn new(rules: &[QueryRule]) -> RuleSet {
        let rules: Vec<Rule> = rules
            .iter()
            .map(|r| Rule {
                text: r.digest_text.as_deref().map(|t| {
                    let printed = as_run_text(t);
                    let folded = digest_folded(printed.as_bytes(), MAX_RULE_TEXT);
                    (printed, folded)
                }),
                pattern: r
                    .pattern
                    .as_deref()
                    .and_then(|p| compile_rule_pattern(p).ok()),
                hits: AtomicU64::new(0),
                last_hit: AtomicU64::new(0),
                turns: r
                    .max_concurrency
                    .map(|n| Arc::new(Semaphore::new(n as usize))),
                config: r.clone(),
            })
            .collect();
        let mut set = RuleSet {
            turns: rules.iter().any(|r| r.turns.is_some()),
            schemas: rules.iter().any(|r| r.config.schema.is_some()),
            texts: rules.iter().any(Rule::has_text_condition),
            ..RuleSet::default()
        };
        for (i, r) in rules.iter().enumerate() {
            match (&r.text, r.config.digest, &r.pattern) {
                (Some((_, folded)), None, None) => set.by_text.entry(*folded).or_default().push(i),
                (None, Some(d), None) => set.by_digest.entry(d).or_default().push(i),
                _ => set.scanned.push(i),
            }
        }
        set.rules = rules;
        set
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether some rule limits concurrency.
    pub fn has_turns(&self) -> bool {
        self.turns
    }

    /// Whether some rule names a schema.
    pub fn has_schemas(&self) -> bool {
        self.schemas
    }

    /// Whether any rule may match a session of `who` (its schema not yet known to change).
    pub fn for_session(&self, who: &Who<'_>) -> bool {
        self.rules.iter().any(|r| r.may_match(who))
    }

    /// Whether a rule that refuses may match a session of `who`: its statements too long to
    /// read whole are then refused.
    pub fn refuses_for(&self, who: &Who<'_>) -> bool {
        self.rules
            .iter()
            .any(|r| r.config.error.is_some() && r.may_match(who))
    }

    /// The first rule (in file order) `text` (the payload of a `command`) matches, with the
    /// statement that matched it as the server would run it, normalized (None: matched as
    /// unsure, without a text condition, or on a text read as it is).
    pub fn check(
        &self,
        who: &Who<'_>,
        command: Command,
        text: &[u8],
    ) -> Option<(&Rule, Option<String>)> {
        let applies = |i: &usize| {
            let r = &self.rules[*i];
            r.reads(command) && r.may_match(who)
        };
        // A rule without a text condition matches whatever the text: the first such is the
        // latest a match may be.
        let mut earliest = Earliest(
            self.scanned
                .iter()
                .find(|i| applies(i) && !self.rules[**i].has_text_condition())
                .map(|&i| (i, None)),
        );
        if self.texts {
            match self.statements(text) {
                Statements::Unsure => {
                    // When unsure, the first refusing rule that could match refuses.
                    let refusing = (0..self.rules.len()).find(|i| {
                        let r = &self.rules[*i];
                        applies(i) && r.config.error.is_some() && r.has_text_condition()
                    });
                    if let Some(i) = refusing {
                        earliest.offer(i, None);
                    }
                }
                Statements::AsWritten => self.match_statement(text, None, &applies, &mut earliest),
                Statements::Run(all) => {
                    for s in &all {
                        self.match_statement(s.as_bytes(), Some(s), &applies, &mut earliest);
                    }
                }
            }
        }
        earliest.0.map(|(i, s)| (&self.rules[i], s))
    }

    /// The earliest rule with a text condition that `statement` (one statement, as written,
    /// or `normalized`) matches, offered to `earliest`.
    fn match_statement(
        &self,
        statement: &[u8],
        normalized: Option<&String>,
        applies: &dyn Fn(&usize) -> bool,
        earliest: &mut Earliest,
    ) {
        if !self.by_text.is_empty() {
            let folded = digest_folded(statement, MAX_RULE_TEXT);
            let found = self.by_text.get(&folded);
            if let Some(i) = found.and_then(|is| is.iter().copied().find(applies)) {
                earliest.offer(i, normalized.cloned());
            }
        }
        if !self.by_digest.is_empty() {
            let d = digest(statement, MAX_RULE_TEXT).0;
            let found = self.by_digest.get(&d);
            if let Some(i) = found.and_then(|is| is.iter().copied().find(applies)) {
                earliest.offer(i, normalized.cloned());
            }
        }
        let mut printed: Option<String> = normalized.cloned();
        for &i in &self.scanned {
            if !earliest.before(i) {
                break;
            }
            let rule = &self.rules[i];
            if !rule.has_text_condition() || !applies(&i) {
                continue;
            }
            let text = printed.get_or_insert_with(|| normalize(statement, MAX_RULE_TEXT));
            if rule.matches_text(text) {
                earliest.offer(i, Some(text.clone()));
                break;
            }
        }
    }

    /// What `text` may run, read no further than the rules need: a text whose every reading
    /// is the same single statement as written (ASCII, no comment, quote of a name, escape,
    /// `;`, variable or dynamic SQL) is matched as it is, without being printed again.
    fn statements(&self, text: &[u8]) -> Statements {
        if text.len() > MAX_RULE_TEXT {
            return Statements::Unsure;
        }
        if as_written(text) {
            return Statements::AsWritten;
        }
        match as_run(text, Dialect::default(), MAX_RULE_TEXT) {
            AsRun::Statements(all) => Statements::Run(all),
            AsRun::Unsure => Statements::Unsure,
        }
    }
}

/// The earliest rule found so far, by its place in the file, and the statement it matched.
struct Earliest(Option<(usize, Option<String>)>);

impl Earliest {
    /// Whether rule `i` would come before the one held.
    fn before(&self, i: usize) -> bool {
        self.0.as_ref().is_none_or(|(held, _)| i < *held)
    }

    fn offer(&mut self, i: usize, statement: Option<String>) {
        if self.before(i) {
            self.0 = Some((i, statement));
        }
    }
}

enum Statements {
    Unsure,
    AsWritten,
    Run(Vec<String>),
}

/// Whether every reading of `text` is the one statement it reads as written: no byte that
/// makes readings differ (executable comments, `\`, `"`, multibyte characters), nothing that
/// splits or nests statements (`;`, `PREPARE`, `EXECUTE`), no comment, quoted name or
/// variable that the printing for rules changes.
fn as_written(text: &[u8]) -> bool {
    let plain = text.iter().all(|&b| {
        b.is_ascii()
            && !matches!(b, b'\\' | b'"' | b'`' | b';' | b'#' | b'@' | b'/' | b'-')
            && b != 0
    });
    if !plain {
        return false;
    }
    let first = text
        .split(|b| b.is_ascii_whitespace() || *b == b'(')
        .find(|w| !w.is_empty())
        .unwrap_or_default();
    !(first.eq_ignore_ascii_case(b"PREPARE") || first.eq_ignore_ascii_case(b"EXECUTE"))
}

/// A rule's `digest_text` printed as the statements it is compared with are (names
/// unquoted, hints dropped): a text copied from `/queries` matches what it names. A text that
/// is not one statement is kept as `normalize` prints it.
fn as_run_text(text: &str) -> String {
    match as_run(text.as_bytes(), Dialect::default(), MAX_RULE_TEXT) {
        AsRun::Statements(mut one) if one.len() == 1 => one.remove(0),
        _ => normalize(text.as_bytes(), MAX_RULE_TEXT),
    }
}

impl Rule {
    fn reads(&self, command: Command) -> bool {
        match command {
            Command::Query => self.config.query,
            Command::Prepare => self.config.prepare,
        }
    }

    fn may_match(&self, who: &Who<'_>) -> bool {
        let c = &self.config;
        let user = match (&c.user, who.user) {
            (Some(want), Some(user)) => want == user,
            _ => true,
        };
        let schema = match (&c.schema, who.schema) {
            (Some(want), Some(schema)) => want == schema,
            _ => true,
        };
        let client = match (&c.client, who.client) {
            (Some(net), Some(ip)) => net.contains(ip),
            (Some(_), None) => false,
            (None, _) => true,
        };
        user && schema && client
    }

    /// Whether the rule reads the statement's text at all.
    pub fn has_text_condition(&self) -> bool {
        self.config.digest.is_some() || self.text.is_some() || self.pattern.is_some()
    }

    /// Every text condition the rule gives holds for `statement` (normalized).
    fn matches_text(&self, statement: &str) -> bool {
        self.text
            .as_ref()
            .is_none_or(|(t, _)| t.eq_ignore_ascii_case(statement))
            && self.pattern.as_ref().is_none_or(|p| p.is_match(statement))
            && self
                .config
                .digest
                .is_none_or(|d| digest(statement.as_bytes(), MAX_RULE_TEXT).0 == d)
    }

    /// Counts a hit now.
    pub fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_hit.store(now, Ordering::Relaxed);
    }

    /// Hits so far, and the unix second of the last one (0: never).
    pub fn hits(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.last_hit.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str) -> QueryRule {
        QueryRule {
            error: Some("no".into()),
            ..QueryRule::named(name)
        }
    }

    const ANYONE: Who<'static> = Who {
        user: Some("app"),
        schema: Some("shop"),
        client: None,
    };

    #[test]
    fn the_first_rule_that_matches_any_reading_decides() {
        let mut block = rule("block");
        block.digest_text = Some("delete from orders where id = ?".into());
        let mut log = rule("log");
        log.error = None;
        log.log = true;
        log.pattern = Some("^select".into());
        let set = RuleSet::new(&[block, log]);
        let hit = |t: &str| {
            set.check(&ANYONE, Command::Query, t.as_bytes())
                .map(|(r, _)| r.config.name.clone())
        };
        assert_eq!(
            hit("DELETE FROM `orders` WHERE id = 9").as_deref(),
            Some("block")
        );
        assert_eq!(
            hit("/*!DELETE*/ FROM orders WHERE id = 9").as_deref(),
            Some("block")
        );
        assert_eq!(
            hit("select 1; DELETE FROM orders WHERE id=1").as_deref(),
            Some("block")
        );
        assert_eq!(hit("SELECT * FROM orders").as_deref(), Some("log"));
        assert_eq!(hit("UPDATE orders SET x = 1"), None);
        // Unsure: the refusing rule refuses; the logging one cannot tell.
        assert_eq!(hit("UPDATE orders /* open").as_deref(), Some("block"));
    }

    #[test]
    fn user_schema_client_and_command_narrow_a_rule() {
        let mut r = rule("r");
        r.digest_text = Some("SELECT ?".into());
        r.user = Some("app".into());
        r.client = Some("10.0.0.0/8".parse().unwrap());
        r.prepare = false;
        let set = RuleSet::new(&[r]);
        let from = |ip: &str| Who {
            client: Some(ip.parse().unwrap()),
            ..ANYONE
        };
        assert!(set
            .check(&from("10.1.2.3"), Command::Query, b"SELECT 1")
            .is_some());
        assert!(set
            .check(&from("10.1.2.3"), Command::Prepare, b"SELECT 1")
            .is_none());
        assert!(set
            .check(&from("192.168.1.1"), Command::Query, b"SELECT 1")
            .is_none());
        assert!(
            set.check(&ANYONE, Command::Query, b"SELECT 1").is_none(),
            "a unix client"
        );
        let other = Who {
            user: Some("reporting"),
            ..from("10.1.2.3")
        };
        assert!(set.check(&other, Command::Query, b"SELECT 1").is_none());
        let unknown = Who {
            user: None,
            ..from("10.1.2.3")
        };
        assert!(
            set.check(&unknown, Command::Query, b"SELECT 1").is_some(),
            "after COM_CHANGE_USER"
        );
        assert!(set.for_session(&from("10.9.9.9")));
        assert!(!set.for_session(&from("11.0.0.1")));
    }

    #[test]
    fn a_text_read_as_written_matches_as_its_printed_readings_do() {
        let mut by_text = rule("by-text");
        by_text.digest_text = Some("SELECT c FROM sbtest1 WHERE id = ?".into());
        let mut pattern = rule("pattern");
        pattern.pattern = Some("^update sbtest".into());
        let set = RuleSet::new(&[by_text, pattern]);
        let hit = |t: &str| {
            set.check(&ANYONE, Command::Query, t.as_bytes())
                .map(|(r, _)| r.config.name.clone())
        };
        for (written, printed_again) in [
            (
                "SELECT c FROM sbtest1 WHERE id = 5",
                "SELECT c FROM sbtest1 WHERE id = 5 /* x */",
            ),
            (
                "select C from SBTEST1 where ID=77",
                "select C from `SBTEST1` where ID=77",
            ),
            (
                "UPDATE sbtest1 SET k = k + 1",
                "UPDATE sbtest1 SET k = k + 1; SELECT 1",
            ),
            (
                "SELECT c FROM sbtest2 WHERE id = 5",
                "SELECT c FROM `sbtest2` WHERE id = 5",
            ),
        ] {
            assert!(as_written(written.as_bytes()), "{written}");
            assert!(!as_written(printed_again.as_bytes()), "{printed_again}");
            assert_eq!(
                hit(written),
                hit(printed_again),
                "{written} / {printed_again}"
            );
        }
        assert_eq!(
            hit("SELECT c FROM sbtest1 WHERE id = 5").as_deref(),
            Some("by-text")
        );
        assert_eq!(hit("SELECT c FROM sbtest2 WHERE id = 5"), None);
        assert!(!as_written(b"PREPARE s FROM 'x'") && !as_written(b"execute immediate 'x'"));
    }

    #[test]
    fn a_digest_rule_matches_the_digest_query_rules_print() {
        let text = b"SELECT c FROM sbtest1 WHERE id = 5";
        let mut r = rule("d");
        r.digest = Some(digest(text, 1024).0);
        let set = RuleSet::new(&[r]);
        assert!(set
            .check(
                &ANYONE,
                Command::Query,
                b"select c from sbtest1 where id=77"
            )
            .is_some());
        assert!(set
            .check(
                &ANYONE,
                Command::Query,
                b"select c from sbtest2 where id=77"
            )
            .is_none());
    }
}
