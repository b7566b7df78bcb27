//! The live query digest table: which statements run, how often, how slowly, on which backend.
//!
//! Every COM_QUERY and COM_STMT_PREPARE text is normalized by [`crate::wire::sql`] (literals to `?`,
//! comments dropped, ...) and hashed into a [`Digest`]; each COM_STMT_EXECUTE counts under its
//! statement's digest. A row is kept per (digest, command kind, backend, user, schema) with its
//! count, errors, latency (sum, min, max and a bounded [`sketch`] for quantiles), rows sent and
//! affected, first and last seen, and one sample text.
//!
//! Cost and bounds, since this runs for every statement:
//! - each worker thread writes its own shard (a mutex nobody else takes but a reader of the
//!   table), merged on read, as the latency histograms are;
//! - a session hashes the normalized statement without allocating; the normalized text is built
//!   only when a shard sees a digest for the first time;
//! - the table holds at most `digests.max_entries` rows over all shards (a busy worker may hold
//!   most of them): when it is full, the shard that needs a row folds the eighth of its rows
//!   with the least total time into one "(other)" row per backend, so every count and sum over
//!   the table stays exact;
//! - the texts (normalized statement and sample) are made once per digest by a shard and shared
//!   by its rows; sessions keep only the digests they handed over, never texts, and every text
//!   kept draws on one byte budget, `digests.max_text_bytes` ([`texts`]), so many sessions of
//!   distinct statements cannot hold more than it.

mod session;
mod shard;
pub mod sketch;
mod texts;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use session::SessionDigests;
use shard::{Budget, Shard};
pub use shard::{Kind, Stats};
use texts::TextBudget;
pub use texts::Texts;

use crate::config::DigestConfig;
pub use crate::wire::sql::Digest;
use crate::wire::sql::DigestCache;

/// Who ran a statement where: the part of a row's key a session holds for its whole life (or
/// until `USE` or COM_CHANGE_USER changes it).
#[derive(Debug)]
pub struct Ident {
    pub backend: Arc<str>,
    pub pool: Arc<str>,
    pub user: Arc<str>,
    pub schema: Arc<str>,
    hash: u64,
}

impl PartialEq for Ident {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.backend == other.backend
            && self.pool == other.pool
            && self.user == other.user
            && self.schema == other.schema
    }
}

impl Ident {
    pub fn new(backend: &str, pool: &str, user: &str, schema: &str) -> Arc<Self> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (backend, pool, user, schema).hash(&mut h);
        Arc::new(Self {
            backend: backend.into(),
            pool: pool.into(),
            user: user.into(),
            schema: schema.into(),
            hash: h.finish(),
        })
    }

    fn with_schema(&self, schema: &str) -> Arc<Self> {
        Self::new(&self.backend, &self.pool, &self.user, schema)
    }
}

/// The table, in [`crate::proxy::state::ProxyState`].
#[derive(Debug)]
pub struct Digests {
    enabled: AtomicBool,
    max_query_length: AtomicUsize,
    sample_length: AtomicUsize,
    prometheus_top: AtomicUsize,
    /// Nanoseconds; 0: no slow-query log.
    slow_threshold: AtomicU64,
    slow_per_second: AtomicU32,
    slow: SlowLog,
    shards: Box<[OwnLines<Mutex<Shard>>]>,
    /// One digest cache per shard, used by the sessions of the worker(s) of that shard only (an
    /// uncontended lock): texts that repeat but for their numbers are digested once per worker
    /// (see `crate::wire::sql::DigestCache`).
    caches: Box<[OwnLines<Mutex<DigestCache>>]>,
    budget: Arc<Budget>,
    text_budget: Arc<TextBudget>,
    /// When the table was started or last reset.
    since: Mutex<SystemTime>,
    idents: Mutex<Idents>,
}

/// Every `Ident` a session holds, by hash, so that sessions of one identity share one
/// allocation and a row tells its statements by a pointer compare (see [`Digests::intern`]).
#[derive(Debug, Default)]
struct Idents {
    live: HashMap<u64, Weak<Ident>>,
    /// `live`'s size past which entries no one holds are dropped.
    sweep_at: usize,
}

/// One worker's part of the table on cache lines of its own: each statement locks its worker's
/// shard, and two workers' locks on one line would make it bounce between their cores (128
/// bytes, as the adjacent-line prefetcher moves lines in pairs).
#[derive(Debug, Default)]
#[repr(align(128))]
struct OwnLines<T>(T);

/// Rate limit of the slow-query log: lines in the current second, and lines not written.
#[derive(Debug, Default)]
struct SlowLog {
    second: AtomicU64,
    logged: AtomicU32,
    suppressed: AtomicU64,
}

/// One row of the merged table, as the admin endpoint reads it.
#[derive(Debug, Clone)]
pub struct RowView {
    /// None for a backend's "(other)" row.
    pub digest: Option<Digest>,
    pub kind: Kind,
    pub ident: Arc<Ident>,
    pub texts: Texts,
    pub stats: Stats,
    pub first_seen: SystemTime,
    pub last_seen: SystemTime,
}

/// A merged read of the table.
#[derive(Debug)]
pub struct Snapshot {
    pub rows: Vec<RowView>,
    /// Rows folded into "(other)" since the last reset.
    pub folded: u64,
    pub since: SystemTime,
    pub max_entries: usize,
    pub enabled: bool,
    /// Bytes the kept texts hold (their own and [`texts::OVERHEAD`] each), against their bound.
    pub text_bytes: usize,
    pub max_text_bytes: usize,
}

impl Digests {
    pub fn new(config: &DigestConfig) -> Self {
        let shards = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 64);
        let budget = Arc::new(Budget::new(config.max_entries));
        let text_budget = TextBudget::new(config.max_text_bytes);
        let table = Self {
            enabled: AtomicBool::new(false),
            max_query_length: AtomicUsize::new(0),
            sample_length: AtomicUsize::new(0),
            prometheus_top: AtomicUsize::new(0),
            slow_threshold: AtomicU64::new(0),
            slow_per_second: AtomicU32::new(0),
            slow: SlowLog::default(),
            shards: (0..shards)
                .map(|_| {
                    OwnLines(Mutex::new(Shard::new(
                        Arc::clone(&budget),
                        Arc::clone(&text_budget),
                    )))
                })
                .collect(),
            caches: (0..shards).map(|_| OwnLines::default()).collect(),
            budget,
            text_budget,
            since: Mutex::new(SystemTime::now()),
            idents: Mutex::default(),
        };
        table.apply(config);
        table
    }

    /// Applies a (re)loaded configuration; rows already kept stay (a smaller bound applies as
    /// new rows arrive).
    pub fn apply(&self, config: &DigestConfig) {
        self.enabled.store(config.enabled, Ordering::Relaxed);
        self.max_query_length
            .store(config.max_query_length, Ordering::Relaxed);
        self.sample_length
            .store(config.sample_length, Ordering::Relaxed);
        self.prometheus_top
            .store(config.prometheus_top, Ordering::Relaxed);
        let slow = config
            .slow_query_threshold
            .map_or(0, |d| (d.as_nanos() as u64).max(1));
        self.slow_threshold.store(slow, Ordering::Relaxed);
        self.slow_per_second
            .store(config.slow_query_log_per_second, Ordering::Relaxed);
        self.budget.set_max(config.max_entries);
        self.text_budget.set_max(config.max_text_bytes);
    }

    /// Bytes the kept texts hold now (see [`texts`]).
    pub fn text_bytes(&self) -> usize {
        self.text_budget.used()
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn max_query_length(&self) -> usize {
        self.max_query_length.load(Ordering::Relaxed)
    }

    pub fn prometheus_top(&self) -> usize {
        self.prometheus_top.load(Ordering::Relaxed)
    }

    /// A worker's shard: its own when there are as many as workers (no division per statement).
    #[inline]
    fn shard(&self, worker: usize) -> &Mutex<Shard> {
        match self.shards.get(worker) {
            Some(shard) => &shard.0,
            None => &self.shards[worker % self.shards.len()].0,
        }
    }

    fn cache(&self, worker: usize) -> &Mutex<DigestCache> {
        &self.caches[worker % self.caches.len()].0
    }

    /// The allocation of `made`'s identity that sessions and rows already hold, if any; else
    /// `made`, which the next session of that identity gets. A session interns its identity
    /// when it starts and when it changes (`USE`, COM_CHANGE_USER, another backend).
    pub fn intern(&self, made: Arc<Ident>) -> Arc<Ident> {
        let Ok(mut idents) = self.idents.lock() else {
            return made;
        };
        if let Some(known) = idents.live.get(&made.hash).and_then(Weak::upgrade) {
            // Another identity of the same hash keeps its place: the rows then compare.
            return if *known == *made { known } else { made };
        }
        if idents.live.len() >= idents.sweep_at {
            idents.live.retain(|_, w| w.strong_count() > 0);
            idents.sweep_at = (2 * idents.live.len()).max(64);
        }
        idents.live.insert(made.hash, Arc::downgrade(&made));
        made
    }

    /// Forgets every row (the counts restart from zero).
    pub fn reset(&self) {
        for shard in self.shards.iter() {
            if let Ok(mut s) = shard.0.lock() {
                s.clear();
            }
        }
        if let Ok(mut since) = self.since.lock() {
            *since = SystemTime::now();
        }
    }

    /// Every row, merged over the shards.
    pub fn snapshot(&self) -> Snapshot {
        let (now_i, now_s) = (Instant::now(), SystemTime::now());
        let wall = |at: Instant| now_s - now_i.saturating_duration_since(at);
        let mut merged: HashMap<(Option<Digest>, Kind, Arc<Ident>), usize> = HashMap::new();
        let mut rows: Vec<RowView> = Vec::new();
        let mut folded = 0;
        for shard in self.shards.iter() {
            let Ok(mut s) = shard.0.lock() else { continue };
            s.flush();
            folded += s.folded();
            s.each(|digest, kind, ident, texts, stats| {
                let key = (digest, kind, Arc::clone(ident));
                match merged.get(&key) {
                    Some(&i) => {
                        let r = &mut rows[i];
                        r.stats.merge(stats);
                        r.first_seen = wall(r.stats.first);
                        r.last_seen = wall(r.stats.last);
                    }
                    None => {
                        merged.insert(key, rows.len());
                        rows.push(RowView {
                            digest,
                            kind,
                            ident: Arc::clone(ident),
                            texts: texts.clone(),
                            stats: stats.clone(),
                            first_seen: wall(stats.first),
                            last_seen: wall(stats.last),
                        });
                    }
                }
            });
        }
        Snapshot {
            rows,
            folded,
            since: self.since.lock().map_or(UNIX_EPOCH, |s| *s),
            max_entries: self.budget.max(),
            enabled: self.enabled(),
            text_bytes: self.text_budget.used(),
            max_text_bytes: self.text_budget.max(),
        }
    }

    /// Whether a statement that took `latency` is logged: over the threshold, and under the
    /// rate limit of this second (the lines over it are counted and reported with the next).
    fn slow(&self, latency: Duration) -> Option<u64> {
        let threshold = self.slow_threshold.load(Ordering::Relaxed);
        if threshold == 0 || (latency.as_nanos() as u64) < threshold {
            return None;
        }
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let log = &self.slow;
        if log.second.swap(second, Ordering::Relaxed) != second {
            log.logged.store(0, Ordering::Relaxed);
        }
        if log.logged.fetch_add(1, Ordering::Relaxed)
            >= self.slow_per_second.load(Ordering::Relaxed)
        {
            log.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(log.suppressed.swap(0, Ordering::Relaxed))
    }
}

impl Hash for Ident {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
    }
}

impl Eq for Ident {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::protocol::response::{cmd, Completed};

    fn config() -> DigestConfig {
        DigestConfig {
            slow_query_threshold: Some(Duration::from_millis(10)),
            slow_query_log_per_second: 3,
            ..DigestConfig::default()
        }
    }

    #[test]
    fn slow_lines_are_rate_limited_and_the_rest_counted() {
        let table = Digests::new(&config());
        assert_eq!(
            table.slow(Duration::from_millis(9)),
            None,
            "under the threshold"
        );
        let logged: Vec<_> = (0..10)
            .map(|_| table.slow(Duration::from_millis(20)))
            .collect();
        // Within one second (a boundary in between only lets more through): at most 3 + 3.
        let n = logged.iter().filter(|l| l.is_some()).count();
        assert!((3..=6).contains(&n), "{logged:?}");
        table.apply(&DigestConfig::default());
        assert_eq!(
            table.slow(Duration::from_secs(5)),
            None,
            "no threshold, no log"
        );
    }

    #[test]
    fn equal_identities_are_interned_while_held() {
        let table = Digests::new(&config());
        let a = table.intern(Ident::new("b", "p", "u", "s"));
        let b = table.intern(Ident::new("b", "p", "u", "s"));
        assert!(Arc::ptr_eq(&a, &b));
        let other = table.intern(Ident::new("b", "p", "u", "t"));
        assert!(!Arc::ptr_eq(&a, &other));
        drop((a, b, other));
        // Identities no one holds are swept: the map stays near the live ones.
        let kept: Vec<_> = (0..1000)
            .map(|i| table.intern(Ident::new("b", "p", &format!("u{i}"), "s")))
            .filter(|i| i.user.ends_with('0'))
            .collect();
        let live = table.idents.lock().map_or(usize::MAX, |i| i.live.len());
        assert!(
            live < 300,
            "{live} entries for {} live identities",
            kept.len()
        );
        let again = table.intern(Ident::new("b", "p", "u10", "s"));
        assert!(kept.iter().any(|k| Arc::ptr_eq(k, &again)));
    }

    #[test]
    fn shards_merge_into_one_row_per_key() {
        let on = DigestConfig {
            enabled: true,
            ..DigestConfig::default()
        };
        let table = Arc::new(Digests::new(&on));
        let off = DigestConfig {
            enabled: false,
            ..DigestConfig::default()
        };
        assert!(
            SessionDigests::start(&Digests::new(&off).into(), 0, || {
                Ident::new("b", "p", "u", "s")
            })
            .is_none(),
            "off: no session"
        );
        let ident = Ident::new("b", "p", "u", "s");
        for worker in 0..4 {
            let mut s = SessionDigests::start(&table, worker, || Arc::clone(&ident)).unwrap();
            let tag = s.statement(cmd::QUERY, b"\x03SELECT 1");
            s.completed(&Completed {
                command: cmd::QUERY,
                latency: Duration::from_micros(100 * (worker as u64 + 1)),
                tag,
                rows: 1,
                ..Completed::default()
            });
        }
        let snap = table.snapshot();
        assert_eq!(snap.rows.len(), 1, "{:?}", snap.rows);
        let s = &snap.rows[0].stats;
        assert_eq!((s.count, s.rows_sent), (4, 4));
        assert_eq!((s.min_ns, s.max_ns), (100_000, 400_000));
        table.reset();
        assert!(table.snapshot().rows.is_empty());
    }

    /// Thousands of sessions, all open at once, each running distinct long statements: every
    /// text any of them made stays within the one budget, and every statement is counted.
    #[test]
    fn many_sessions_of_distinct_long_statements_stay_within_the_text_budget() {
        let max = 2 << 20;
        let on = DigestConfig {
            enabled: true,
            max_text_bytes: max,
            ..DigestConfig::default()
        };
        let table = Arc::new(Digests::new(&on));
        let ident = Ident::new("b", "p", "u", "s");
        let mut sessions = Vec::new();
        let mut statements = 0;
        for i in 0..3000 {
            let mut s = SessionDigests::start(&table, i % 4, || Arc::clone(&ident)).unwrap();
            for j in 0..20 {
                // 600 bytes, its own digest (a distinct column name), most of it kept.
                let text = format!("\x03SELECT c{i}_{j}, '{}' FROM t", "x".repeat(570));
                let tag = s.statement(cmd::QUERY, text.as_bytes());
                s.completed(&Completed {
                    command: cmd::QUERY,
                    latency: Duration::from_micros(100),
                    tag,
                    ..Completed::default()
                });
                statements += 1;
                assert!(table.text_bytes() <= max, "{} of {max}", table.text_bytes());
            }
            sessions.push(s);
        }
        let snap = table.snapshot();
        assert!(snap.text_bytes <= max && snap.max_text_bytes == max);
        // 60,000 texts of ~700 bytes each would be 40 MiB: the budget held them to 2 MiB.
        assert!(
            snap.text_bytes > max / 2,
            "the budget is used: {}",
            snap.text_bytes
        );
        let counted: u64 = snap.rows.iter().map(|r| r.stats.count).sum();
        assert_eq!(
            counted, statements,
            "every statement counted, some in (other)"
        );
        assert!(snap.rows.iter().any(|r| r.digest.is_some()));
        drop(sessions);
        table.reset();
        assert!(
            table.text_bytes() > 0,
            "the snapshot still holds its rows' texts"
        );
        drop(snap);
        table.reset();
        assert_eq!(table.text_bytes(), 0, "a reset refunds every text");
    }
}
