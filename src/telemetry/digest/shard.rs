//! One worker's part of the digest table: rows keyed by a 64-bit mix of digest, command kind and
//! [`Ident`], bounded by folding the least valuable rows into one "(other)" row per backend; and
//! the texts of its digests, which rows share and the table's text budget bounds.
//!
//! Statements answered wait in a short batch and reach their rows [`BATCH`] at a time, or
//! whenever the table is read, reset or pruned ([`Shard::push`] says why): a read always sees
//! every statement answered before it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::sketch::Sketch;
use super::texts::TextBudget;
use super::{Digest, Ident, Texts};
use crate::wire::protocol::response::{cmd, Completed};

/// Which command a row counts: a statement run as text, prepared, or executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Query,
    Prepare,
    Execute,
}

impl Kind {
    pub fn of(command: u8) -> Option<Self> {
        match command {
            cmd::QUERY => Some(Self::Query),
            cmd::STMT_PREPARE => Some(Self::Prepare),
            cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE => Some(Self::Execute),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Prepare => "prepare",
            Self::Execute => "execute",
        }
    }
}

/// What a row has counted.
#[derive(Debug, Clone)]
pub struct Stats {
    pub count: u64,
    pub errors: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub first: Instant,
    pub last: Instant,
    pub sketch: Sketch,
}

impl Stats {
    fn new(now: Instant) -> Self {
        Self {
            count: 0,
            errors: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            rows_sent: 0,
            rows_affected: 0,
            first: now,
            last: now,
            sketch: Sketch::default(),
        }
    }

    #[inline]
    fn add(&mut self, d: &Done) {
        let ns = d.ns;
        self.count += 1;
        self.errors += u64::from(d.error);
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.rows_sent += d.rows;
        self.rows_affected += d.affected;
        self.last = d.at;
        self.sketch.record(ns);
    }

    pub fn merge(&mut self, o: &Stats) {
        self.count += o.count;
        self.errors += o.errors;
        self.sum_ns = self.sum_ns.saturating_add(o.sum_ns);
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.rows_sent += o.rows_sent;
        self.rows_affected += o.rows_affected;
        self.first = self.first.min(o.first);
        self.last = self.last.max(o.last);
        self.sketch.merge(&o.sketch);
    }
}

/// Statements a shard holds before adding them to their rows (see [`Shard::push`]): about
/// 2 KiB per worker.
const BATCH: usize = 32;

/// A statement answered, as its row counts it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Done {
    digest: Digest,
    kind: Kind,
    /// Its session's `Ident`, as an index into the shard's `idents` while it waits.
    ident: u32,
    ns: u64,
    rows: u64,
    affected: u64,
    error: bool,
    at: Instant,
}

impl Done {
    pub(super) fn new(digest: Digest, kind: Kind, c: &Completed, at: Instant) -> Self {
        Self {
            digest,
            kind,
            ident: 0,
            ns: c.latency.as_nanos() as u64,
            rows: c.rows,
            affected: c.affected,
            error: c.error,
            at,
        }
    }
}

#[derive(Debug)]
struct Row {
    digest: Digest,
    kind: Kind,
    ident: Arc<Ident>,
    texts: Texts,
    stats: Stats,
}

/// Keys are already mixed 64-bit hashes: used as they are.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    fn write_u32(&mut self, n: u32) {
        // Statement ids count up from 1: spread them over the high bits the map probes with.
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by a digest or a mixed key (already hashes).
pub(super) type HashedMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

fn key(digest: Digest, kind: Kind, ident: &Ident) -> u64 {
    (digest.0 ^ (kind as u64).wrapping_mul(0xA076_1D64_78BD_642F))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ident.hash
}

/// Whether two `Ident`s are equal; if so, both become the one at the lower address.
#[cold]
fn share_equal(a: &mut Arc<Ident>, b: &mut Arc<Ident>) -> bool {
    if **a != **b {
        return false;
    }
    if Arc::as_ptr(a) < Arc::as_ptr(b) {
        *b = Arc::clone(a);
    } else {
        *a = Arc::clone(b);
    }
    true
}

/// The table's row bound, shared by its shards: a worker that is busier than the others may hold
/// more of the rows, and the bound holds over all of them.
#[derive(Debug, Default)]
pub(super) struct Budget {
    used: AtomicUsize,
    max: AtomicUsize,
}

impl Budget {
    pub(super) fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max: AtomicUsize::new(max),
        }
    }

    pub(super) fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    pub(super) fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    fn full(&self) -> bool {
        self.used.load(Ordering::Relaxed) >= self.max()
    }

    fn add(&self, n: usize) {
        self.used.fetch_add(n, Ordering::Relaxed);
    }

    fn remove(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub(super) struct Shard {
    rows: HashMap<u64, Row, BuildHasherDefault<KeyHasher>>,
    /// The "(other)" row of each backend (by name and pool): rows folded, statements whose text
    /// was not seen whole, and the rare key collision.
    others: Vec<(Arc<Ident>, Stats)>,
    /// Texts by digest, shared by the digest's rows (sessions keep none), with the prune
    /// round they were made in.
    texts: HashMap<u64, (Texts, u32), BuildHasherDefault<KeyHasher>>,
    /// Counts prunes: a text made since the last one is not dropped for having no row yet (its
    /// statement is likely still running, its row made when it ends).
    round: u32,
    budget: Arc<Budget>,
    text_budget: Arc<TextBudget>,
    folded: u64,
    /// Statements answered and not yet in their rows (at most [`BATCH`]), and the `Ident`s
    /// they name (one each, not one per statement: sessions of one identity share one, whose
    /// count a clone per statement would move between the cores).
    pending: Vec<Done>,
    idents: Vec<Arc<Ident>>,
    /// Counts statements whose digest had no texts here when added (see [`Shard::lost`]).
    lost: u64,
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher")
    }
}

impl Shard {
    pub(super) fn new(budget: Arc<Budget>, text_budget: Arc<TextBudget>) -> Self {
        Self {
            rows: HashMap::default(),
            others: Vec::new(),
            texts: HashMap::default(),
            round: 0,
            budget,
            text_budget,
            folded: 0,
            pending: Vec::new(),
            idents: Vec::new(),
            lost: 0,
        }
    }

    pub(super) fn folded(&self) -> u64 {
        self.folded
    }

    pub(super) fn clear(&mut self) {
        // Statements answered before the reset are not counted after it; every session hands
        // its texts over again.
        self.pending.clear();
        self.idents.clear();
        self.lost = self.lost.wrapping_add(1);
        self.budget.remove(self.rows.len());
        self.rows.clear();
        self.others.clear();
        self.folded = 0;
        self.prune_texts(true);
    }

    /// Whether this shard has the texts of `digest`, or made them with `make` (the normalized
    /// statement and its sample) within the text budget. When the budget is spent, texts no
    /// row holds are dropped and, if that is not enough, the eighth of the rows with the least
    /// total time folded, as for the row bound; if other shards hold the bytes, nothing is made.
    pub(super) fn texts<'t>(
        &mut self,
        digest: Digest,
        make: impl FnOnce() -> (String, &'t [u8]),
    ) -> bool {
        if self.texts.contains_key(&digest.0) {
            return true;
        }
        if self.texts.len() > 2 * self.budget.max().max(8) {
            self.prune_texts(false);
        }
        if self.text_budget.spent() {
            self.prune_texts(true);
            if self.text_budget.spent() {
                self.evict();
            }
            if self.text_budget.spent() {
                return false;
            }
        }
        let (text, sample) = make();
        match self.text_budget.keep(text, sample) {
            Some(t) => {
                self.texts.insert(digest.0, (t, self.round));
                true
            }
            None => false,
        }
    }

    /// The normalized text of `digest`, if this shard keeps it.
    pub(super) fn text_of(&self, digest: Digest) -> Option<Arc<str>> {
        self.texts.get(&digest.0).map(|(t, _)| Arc::clone(&t.text))
    }

    /// Counts a statement answered. It waits with the worker's others and is added to its row
    /// [`BATCH`] at a time, or when the table is read ([`Shard::flush`]): a statement's own
    /// work is then a copy under the worker's lock, and the rows' code and memory (the map,
    /// the row, its sketch) are touched in bursts. Per statement, those would be cold every
    /// time: between two statements of a session the kernel's network work runs on the core,
    /// and the digest table's share of CPU per query measured several times its share of
    /// instructions.
    #[inline]
    pub(super) fn push(&mut self, mut d: Done, ident: &Arc<Ident>) {
        if self.pending.len() >= BATCH {
            self.flush();
        }
        let at = match self.idents.iter().rposition(|i| Arc::ptr_eq(i, ident)) {
            Some(at) => at,
            None => {
                self.idents.push(Arc::clone(ident));
                self.idents.len() - 1
            }
        };
        d.ident = at as u32;
        self.pending.push(d);
    }

    /// Adds every statement waiting to its row: before the rows are read, pruned or folded.
    #[inline(never)]
    pub(super) fn flush(&mut self) {
        // The statements stay in `pending` until all are counted, so that a prune on the way
        // (a new row can fold others, which prunes texts) keeps the texts they need.
        let mut idents = std::mem::take(&mut self.idents);
        for i in 0..self.pending.len() {
            let d = self.pending[i];
            let Some(ident) = idents.get_mut(d.ident as usize) else {
                continue;
            };
            // Digest 0 (not read whole, or prepared before digests were on) never has texts.
            if !self.record(&d, ident) && d.digest.0 != 0 {
                self.lost = self.lost.wrapping_add(1);
            }
        }
        self.pending.clear();
        idents.clear();
        self.idents = idents;
    }

    /// Changes whenever a statement went to "(other)" because this shard had no texts of its
    /// digest (dropped since its session handed them over, or a reset): sessions that see it
    /// change forget which digests they handed over, and hand them over again.
    pub(super) fn lost(&self) -> u64 {
        self.lost
    }

    /// Counts `d` in its row, a new row taking this shard's texts of its digest. False if there
    /// are none (never made, or dropped since): `d` is counted in "(other)".
    ///
    /// Equal `Ident`s are one allocation while any holds it (`Digests::intern`), so a row's
    /// check is a pointer compare; when a row and a statement still hold equal ones in two
    /// allocations, both keep the one at the lower address.
    #[inline]
    fn record(&mut self, d: &Done, ident: &mut Arc<Ident>) -> bool {
        let k = key(d.digest, d.kind, ident);
        if let Some(row) = self.rows.get_mut(&k) {
            let same = Arc::ptr_eq(&row.ident, ident) || share_equal(&mut row.ident, ident);
            if row.digest == d.digest && row.kind == d.kind && same {
                row.stats.add(d);
            } else {
                self.other(d, ident);
            }
            return true;
        }
        let Some(texts) = self.texts.get(&d.digest.0).map(|(t, _)| t.clone()) else {
            self.other(d, ident);
            return false;
        };
        if self.budget.full() {
            self.evict();
            if self.budget.full() {
                // Other workers hold the rows: this statement goes to "(other)".
                self.other(d, ident);
                return true;
            }
        }
        self.budget.add(1);
        let mut stats = Stats::new(d.at);
        stats.add(d);
        self.rows.insert(
            k,
            Row {
                digest: d.digest,
                kind: d.kind,
                ident: Arc::clone(ident),
                texts,
                stats,
            },
        );
        true
    }

    /// Counts `d` in the "(other)" row of `ident`'s backend.
    fn other(&mut self, d: &Done, ident: &Ident) {
        let stats = self.other_row(ident, d.at);
        stats.add(d);
    }

    fn other_row(&mut self, ident: &Ident, now: Instant) -> &mut Stats {
        let at = self
            .others
            .iter()
            .position(|(o, _)| o.backend == ident.backend && o.pool == ident.pool);
        let at = match at {
            Some(at) => at,
            None => {
                let who = Ident::new(&ident.backend, &ident.pool, "", "");
                self.others.push((who, Stats::new(now)));
                self.others.len() - 1
            }
        };
        &mut self.others[at].1
    }

    /// Folds the eighth of the rows with the least total time into their backends' "(other)".
    fn evict(&mut self) {
        let mut by_value: Vec<(u64, u64)> = self
            .rows
            .iter()
            .map(|(&k, r)| (r.stats.sum_ns, k))
            .collect();
        let n = (self.rows.len() / 8).max(1).min(by_value.len());
        if n == 0 {
            return;
        }
        by_value.select_nth_unstable(n - 1);
        for &(_, k) in &by_value[..n] {
            if let Some(row) = self.rows.remove(&k) {
                let now = row.stats.first;
                self.other_row(&row.ident, now).merge(&row.stats);
                self.folded += 1;
                self.budget.remove(1);
            }
        }
        self.prune_texts(false);
    }

    /// Drops texts nothing but this map holds: made before the last prune, or any (`all`: a
    /// reset, or a spent budget).
    fn prune_texts(&mut self, all: bool) {
        let round = self.round;
        // A statement waiting for its row (a batch) holds no texts yet: they stay for it.
        let waiting = &self.pending;
        self.texts.retain(|&digest, (t, made)| {
            Arc::strong_count(&t.text) > 1
                || (!all && *made == round)
                || waiting.iter().any(|d| d.digest.0 == digest)
        });
        self.round = round.wrapping_add(1);
    }

    /// [`Shard::clear`] without telling the sessions (as texts dropped behind their backs).
    #[cfg(test)]
    pub(super) fn clear_untold(&mut self) {
        self.clear();
        self.lost = self.lost.wrapping_sub(1);
    }

    /// Every row, "(other)" rows with no digest.
    pub(super) fn each(
        &self,
        mut f: impl FnMut(Option<Digest>, Kind, &Arc<Ident>, &Texts, &Stats),
    ) {
        for r in self.rows.values() {
            f(Some(r.digest), r.kind, &r.ident, &r.texts, &r.stats);
        }
        let other = Texts::fixed("(other)", "");
        for (ident, stats) in &self.others {
            f(None, Kind::Query, ident, &other, stats);
        }
    }
}

#[cfg(test)]
mod tests;
