//! One session's side of the digest table: digests its statements as the relay sees them (tags
//! the tracker carries to the response's end), maps prepared-statement ids to their digests,
//! follows the schema (`USE`, COM_INIT_DB) and user (COM_CHANGE_USER) that key its rows.
//!
//! A session keeps no texts: only the digests it has handed to its shard (so it normalizes a
//! statement once) and the schema a `USE` of each selects. The shard keeps the texts, within
//! the table's text budget; when they are gone (folded, reset, never made for want of budget)
//! the statement counts in "(other)" once and the session hands it over again next time.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::Instant;

use tracing::info;

use super::shard::{Done, HashedMap, KeyHasher};
use super::{Digest, Digests, Ident, Kind};
use crate::telemetry::capture::redact;
use crate::wire::protocol::response::{cmd, Completed};
use crate::wire::sql;

/// Digests a session remembers handing over, at most (past it the cache starts over): at 9
/// bytes a slot, about 4.5 KiB a session at most.
const KNOWN: usize = 256;
/// The text a digest table row shows for a statement that may carry a password when its
/// normalized text kept a comment (whose literals the normalizer keeps).
const REDACTED_TEXT: &str = "(redacted)";
/// Identities on other backends a session keeps, at most (see `SessionDigests::moved_to`).
const ELSEWHERE: usize = 8;
/// Prepared statements a session maps, at most (servers allow 16,382 by default).
const PREPARED: usize = 16_384;

#[derive(Debug)]
pub struct SessionDigests {
    table: Arc<Digests>,
    worker: usize,
    ident: Arc<Ident>,
    /// Its identities on the other backends it ran on (a pool across backends).
    elsewhere: Vec<Arc<Ident>>,
    max_len: usize,
    /// Digests handed to the shard.
    known: HashSet<u64, BuildHasherDefault<KeyHasher>>,
    /// The shapes of statements sent lately, each with a digest in `known` (emptied whenever
    /// `known` loses one), so that a statement of one of them needs neither the worker's digest
    /// cache nor a look in `known`.
    recent: sql::RecentShapes,
    /// Of those, the `USE` statements, with the schema each selects.
    uses: HashedMap<u64, Arc<str>>,
    prepared: HashedMap<u32, u64>,
    /// The digest of the last COM_STMT_PREPARE sent (an execute of id 0xFFFFFFFF means it).
    last_prepared: u64,
    /// A schema change sent and not yet answered: (the statement's tag, 0 for COM_INIT_DB).
    schema_change: Option<(u64, Arc<str>)>,
    /// The user (and schema) a COM_CHANGE_USER sent and not yet answered asks for.
    user_change: Option<(Arc<str>, Arc<str>)>,
    /// The shard's `lost` count when last seen.
    lost: u64,
}

/// The tag of a digest (0 is "no digest" to the tracker).
fn tag_of(d: Digest) -> u64 {
    d.0.max(1)
}

fn lossy(bytes: &[u8]) -> Arc<str> {
    String::from_utf8_lossy(bytes).as_ref().into()
}

impl SessionDigests {
    /// A session's digests, when the table is on; `max_len` is what the tracker must keep of a
    /// statement packet (see `Tracker::report_statements`).
    pub fn start(
        table: &Arc<Digests>,
        worker: usize,
        ident: impl FnOnce() -> Arc<Ident>,
    ) -> Option<Self> {
        if !table.enabled() {
            return None;
        }
        Some(Self {
            table: Arc::clone(table),
            worker,
            ident: table.intern(ident()),
            elsewhere: Vec::new(),
            max_len: table.max_query_length() + 1,
            known: HashSet::default(),
            recent: sql::RecentShapes::default(),
            uses: HashedMap::default(),
            prepared: HashedMap::default(),
            last_prepared: 0,
            schema_change: None,
            user_change: None,
            lost: 0,
        })
    }

    /// The session's statements run on `backend` from now on (a pool across backends): its
    /// rows are that backend's.
    pub fn moved_to(&mut self, backend: &str) {
        let i = &self.ident;
        // A session of a pool across backends moves at most transactions: the identities it
        // had on each backend are kept (a few), not made anew.
        let known = self.elsewhere.iter().find(|o| {
            &*o.backend == backend && o.user == i.user && o.schema == i.schema && o.pool == i.pool
        });
        let next = match known {
            Some(o) => Arc::clone(o),
            None => self
                .table
                .intern(Ident::new(backend, &i.pool, &i.user, &i.schema)),
        };
        let previous = std::mem::replace(&mut self.ident, next);
        if !self.elsewhere.iter().any(|o| Arc::ptr_eq(o, &previous)) {
            if self.elsewhere.len() >= ELSEWHERE {
                self.elsewhere.remove(0);
            }
            self.elsewhere.push(previous);
        }
    }

    /// How many payload bytes of a statement packet to read (command byte included).
    pub fn read_limit(&self) -> usize {
        self.max_len
    }

    /// A statement packet's payload as the client sent it; returns the tag for its command.
    ///
    /// A COM_QUERY's path is kept apart from the other commands' (out of line): every
    /// statement runs it between two turns of the kernel's network code, which leave it cold in
    /// the CPU's caches, so the fewer cache lines its code spans the better.
    #[inline]
    pub fn statement(&mut self, command: u8, payload: &[u8]) -> u64 {
        let body = payload.get(1..).unwrap_or_default();
        if command != cmd::QUERY {
            return self.other_statement(command, body);
        }
        let tag = self.digest(body);
        if let Some(schema) = self.use_of(tag) {
            self.schema_change = Some((tag, schema));
        }
        tag
    }

    /// [`Self::statement`] of any other command than COM_QUERY.
    #[inline(never)]
    fn other_statement(&mut self, command: u8, body: &[u8]) -> u64 {
        match command {
            cmd::STMT_PREPARE => {
                let tag = self.digest(body);
                self.last_prepared = tag;
                tag
            }
            cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE => match statement_id(body) {
                Some(u32::MAX) => self.last_prepared,
                Some(id) => self.prepared.get(&id).copied().unwrap_or(0),
                None => 0,
            },
            cmd::STMT_CLOSE => {
                if let Some(id) = statement_id(body) {
                    self.prepared.remove(&id);
                }
                0
            }
            cmd::INIT_DB => {
                self.schema_change = Some((0, lossy(body)));
                0
            }
            cmd::CHANGE_USER => {
                self.user_change = change_user(body);
                0
            }
            _ => 0,
        }
    }

    /// The tag of a statement text: its digest, handed to the shard (its texts made there) the
    /// first time this session sees it.
    #[inline]
    fn digest(&mut self, text: &[u8]) -> u64 {
        match self.recent.get(text, self.max_len - 1) {
            Some(d) => tag_of(d),
            None => self.digest_unseen(text),
        }
    }

    /// [`Self::digest`] of a text no recent shape answers: out of line, so that the code a
    /// repeated statement runs stays on few cache lines.
    #[inline(never)]
    fn digest_unseen(&mut self, text: &[u8]) -> u64 {
        let limit = self.max_len - 1;
        let d = match self.table.cache(self.worker).lock() {
            Ok(mut cache) => sql::digest_remembered(&mut self.recent, &mut cache, text, limit),
            Err(_) => sql::digest(text, limit),
        };
        let tag = tag_of(d);
        if self.known.contains(&tag) {
            return tag;
        }
        if self.known.len() >= KNOWN {
            self.forget();
        }
        let sample_len = self
            .table
            .sample_length
            .load(std::sync::atomic::Ordering::Relaxed);
        match self.table.shard(self.worker).lock() {
            Ok(mut shard) => shard.texts(Digest(tag), || texts(text, limit, sample_len)),
            Err(_) => {
                self.recent.clear();
                return 0;
            }
        };
        if let sql::Statement::Use(name) = sql::classify(text) {
            self.uses.insert(tag, lossy(&name));
        }
        self.known.insert(tag);
        tag
    }

    /// Forgets every digest handed over: each is handed over again when next seen.
    #[cold]
    fn forget(&mut self) {
        self.known.clear();
        self.uses.clear();
        self.recent.clear();
    }

    /// The schema a `USE` statement of digest `tag` selects (most sessions send none).
    #[inline]
    fn use_of(&self, tag: u64) -> Option<Arc<str>> {
        if self.uses.is_empty() {
            return None;
        }
        self.uses.get(&tag).cloned()
    }

    /// A command answered in full. A COM_QUERY's path is kept apart, as in [`Self::statement`].
    #[inline]
    pub fn completed(&mut self, c: &Completed) {
        if c.command != cmd::QUERY {
            return self.other_completed(c);
        }
        self.record(c, Kind::Query);
        if c.tag != 0 && self.schema_change.is_some() {
            self.schema_changed(c.tag, c.error);
        }
    }

    /// [`Self::completed`] of any other command than COM_QUERY.
    #[inline(never)]
    fn other_completed(&mut self, c: &Completed) {
        match c.command {
            cmd::STMT_PREPARE => {
                self.record(c, Kind::Prepare);
                if let (Some(id), false) = (c.prepared, c.tag == 0) {
                    if self.prepared.len() < PREPARED {
                        self.prepared.insert(id, c.tag);
                    }
                }
            }
            cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE => self.record(c, Kind::Execute),
            cmd::INIT_DB => self.schema_changed(0, c.error),
            cmd::CHANGE_USER => {
                self.prepared.clear();
                if let (Some((user, schema)), false) = (self.user_change.take(), c.error) {
                    let i = &self.ident;
                    self.ident = self
                        .table
                        .intern(Ident::new(&i.backend, &i.pool, &user, &schema));
                }
            }
            cmd::RESET_CONNECTION => self.prepared.clear(),
            _ => {}
        }
    }

    #[inline]
    fn schema_changed(&mut self, tag: u64, error: bool) {
        if self.schema_change.as_ref().is_some_and(|(t, _)| *t == tag) {
            if let (Some((_, schema)), false) = (self.schema_change.take(), error) {
                self.ident = self.table.intern(self.ident.with_schema(&schema));
            }
        }
    }

    #[inline]
    fn record(&mut self, c: &Completed, kind: Kind) {
        if !self.table.enabled() {
            return;
        }
        let at = c.at.unwrap_or_else(Instant::now);
        let slow = self.table.slow(c.latency);
        let mut text = None;
        let lost = self.lost;
        if let Ok(mut shard) = self.table.shard(self.worker).lock() {
            self.lost = shard.lost();
            shard.push(Done::new(Digest(c.tag), kind, c, at), &self.ident);
            if slow.is_some() {
                text = shard.text_of(Digest(c.tag));
            }
        }
        if lost != self.lost {
            self.forget();
        }
        if let Some(suppressed) = slow {
            self.log_slow(c, kind, text.as_deref(), suppressed);
        }
    }

    #[cold]
    #[inline(never)]
    fn log_slow(&self, c: &Completed, kind: Kind, text: Option<&str>, suppressed: u64) {
        info!(
            digest = %Digest(c.tag),
            kind = kind.as_str(),
            statement = %truncate(text.unwrap_or("(other)"), 200),
            user = %self.ident.user,
            schema = %self.ident.schema,
            backend = %self.ident.backend,
            latency_ms = c.latency.as_secs_f64() * 1e3,
            rows_sent = c.rows,
            rows_affected = c.affected,
            error = c.error,
            suppressed,
            "slow query"
        );
    }
}

fn statement_id(body: &[u8]) -> Option<u32> {
    body.get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The user and schema a COM_CHANGE_USER asks for (payload after the command byte: user NUL,
/// auth response with a one-byte length, schema NUL, ...), if they can be read.
fn change_user(body: &[u8]) -> Option<(Arc<str>, Arc<str>)> {
    let nul = body.iter().position(|&b| b == 0)?;
    let user = &body[..nul];
    let rest = body.get(nul + 1..)?;
    let auth_len = usize::from(*rest.first()?);
    let rest = rest.get(1 + auth_len..).unwrap_or_default();
    let schema = rest.split(|&b| b == 0).next().unwrap_or_default();
    Some((lossy(user), lossy(schema)))
}

/// A statement's normalized text (its first `limit` bytes) and sample (the statement as sent,
/// cut to `sample_len` bytes). A statement that may carry a password ([`redact::secret`], read
/// over all of `text`) has no sample, and its normalized text is shown only if it kept no
/// comment, where the normalizer leaves literals as they are.
fn texts(text: &[u8], limit: usize, sample_len: usize) -> (String, &[u8]) {
    let normalized = sql::normalize(text, limit);
    if redact::secret(text) {
        let shown = if normalized.contains("/*") {
            REDACTED_TEXT.to_owned()
        } else {
            normalized
        };
        return (shown, &[]);
    }
    (normalized, &text[..text.len().min(sample_len)])
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use crate::config::DigestConfig;

    fn run(s: &mut SessionDigests, text: &str) -> u64 {
        let tag = s.statement(cmd::QUERY, format!("\x03{text}").as_bytes());
        s.completed(&Completed {
            command: cmd::QUERY,
            latency: Duration::from_micros(50),
            tag,
            ..Completed::default()
        });
        tag
    }

    /// Statements a session's recent shapes answer count in their row, and after a reset drops
    /// the texts the session hands them over again (its recent shapes forgotten with them):
    /// the first statement after the reset learns of it when answered, the next hands its
    /// texts over, and both count in their row (the first waited in the shard's batch).
    #[test]
    fn recent_shapes_count_in_their_row_and_survive_a_reset() {
        let on = DigestConfig {
            enabled: true,
            ..DigestConfig::default()
        };
        let table = Arc::new(Digests::new(&on));
        let mut s = SessionDigests::start(&table, 0, || Ident::new("b", "p", "u", "s")).unwrap();
        let first = run(&mut s, "SELECT c FROM t1 WHERE id=1");
        for id in 2..50 {
            assert_eq!(
                run(&mut s, &format!("SELECT c FROM t1 WHERE id={id}")),
                first
            );
        }
        let other = run(&mut s, "SELECT c FROM t2 WHERE id=1");
        assert_ne!(other, first);
        let counts = |table: &Digests| {
            let mut rows: Vec<_> = table
                .snapshot()
                .rows
                .iter()
                .map(|r| (r.digest.map(|d| d.0), r.stats.count))
                .collect();
            rows.sort();
            rows
        };
        let mut want = vec![(Some(first), 49), (Some(other), 1)];
        want.sort();
        assert_eq!(counts(&table), want);
        table.reset();
        run(&mut s, "SELECT c FROM t1 WHERE id=7");
        run(&mut s, "SELECT c FROM t1 WHERE id=8");
        assert_eq!(counts(&table), vec![(Some(first), 2)]);
        // Texts dropped behind the session's back: its statement counts in "(other)", which
        // tells the sessions, and the next but one hands them over again.
        if let Ok(mut shard) = table.shard(0).lock() {
            shard.clear_untold();
        }
        run(&mut s, "SELECT c FROM t1 WHERE id=9");
        assert_eq!(counts(&table), vec![(None, 1)]);
        run(&mut s, "SELECT c FROM t1 WHERE id=10");
        run(&mut s, "SELECT c FROM t1 WHERE id=11");
        assert_eq!(counts(&table), vec![(None, 1), (Some(first), 2)]);
    }

    #[test]
    fn change_user_names_user_and_schema() {
        let mut body = b"bob\0".to_vec();
        body.extend_from_slice(&[3, 1, 2, 3]);
        body.extend_from_slice(b"shop\0");
        let (u, s) = change_user(&body).unwrap();
        assert_eq!((&*u, &*s), ("bob", "shop"));
        assert!(change_user(b"no-nul").is_none());
        assert!(change_user(b"bob\0").is_none());
    }

    #[test]
    fn samples_and_texts_leave_passwords_out() {
        assert_eq!(
            texts(b"SELECT 1", 64, 256),
            ("SELECT ?".into(), &b"SELECT 1"[..])
        );
        assert_eq!(texts(b"SELECT 12345", 64, 8).1, b"SELECT 1");
        assert_eq!(texts(b"SELECT 'password'", 64, 256).1, b"SELECT 'password'");
        let none: &[u8] = &[];
        for (statement, text) in [
            (
                "create user x identified by 'pw'",
                "CREATE user x IDENTIFIED BY ?",
            ),
            ("SET PASSWORD = 'pw'", "SET PASSWORD = ?"),
            (
                "CREATE TABLE f (a INT) ENGINE=FEDERATED CONNECTION='mysql://u:pw@h/d/t'",
                "CREATE TABLE f(a INT) ENGINE = FEDERATED CONNECTION = ?",
            ),
            (
                "/*!40000 CREATE USER x IDENTIFIED BY 'pw' */",
                REDACTED_TEXT,
            ),
            ("SELECT 1; /*M!100100 SET PASSWORD = 'pw' */", REDACTED_TEXT),
        ] {
            let (t, sample) = texts(statement.as_bytes(), 1024, 256);
            assert_eq!((t.as_str(), sample), (text, none), "{statement}");
        }
    }
}
