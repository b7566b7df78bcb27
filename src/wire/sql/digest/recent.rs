//! The digests of the shapes one owner (a session) digested lately: answered without the
//! worker's lock and without building the shape.
//!
//! Why, beside the worker's [`DigestCache`](super::DigestCache): that cache builds the text's
//! shape in a buffer, hashes it to a slot and compares it with the kept one, behind the worker's
//! mutex; and the session then looks the digest up in its set of digests handed over. A session
//! mostly repeats a handful of statements, so it keeps each one's text as sent (an exemplar)
//! with where its cut digit runs lie, and compares the next text with it piece by piece
//! ([`matches`]): the bytes between the runs eight at a time, each run any run of digits. Its
//! owner keeps only digests it handed over here, so a hit needs no other look-up.
//!
//! Which exemplar to compare with comes from a key every text of a shape shares ([`key`]): the
//! hash of the bytes before the first run the shape cuts (texts of a shape are byte for byte the
//! same there), of the first [`KEY_BYTES`] at most. A key is only a hint; the comparison
//! decides, so a text cannot borrow another shape's digest whatever it holds.
//!
//! Only texts the worker cache may keep by shape are remembered (see `cache.rs` for why every
//! text of such a shape has its digest), and a text longer than `max_len` never hits: it would
//! be digested cut. Measured with callgrind through the proxy (the relay's statement step, the
//! digest included, per statement): sysbench's point select ~664 -> ~508 instructions, its
//! read-only mix ~685 -> ~539; `digest_instructions digest_recent` on a hit: point select 389
//! with the harness, where the worker cache alone takes 482.

use std::fmt;

use super::Digest;

/// Exemplars longer than this are not kept (a session holds `SETS × WAYS` of them at most).
const MAX_EXEMPLAR: usize = 192;
/// Sets of [`WAYS`] exemplars each.
const SETS: usize = 16;
/// Exemplars a set holds: shapes whose texts agree up to their first cut run (sysbench's range
/// select with and without `ORDER BY`) share a key, so a set must hold several.
const WAYS: usize = 4;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// The digits of the little-endian `w`, as their bytes' high bits.
#[inline(always)]
fn digits(w: u64) -> u64 {
    let x = w & !HIGH_BITS;
    (x + ONES * (0x80 - 0x30)) & !(x + ONES * (0x7f - 0x39)) & !w & HIGH_BITS
}

/// True if a digit after `b` continues a word (the shape keeps it): as the shape's automaton
/// reads a byte, digits aside.
#[inline(always)]
fn continues_word(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b >= 0x80
}

/// The 8 bytes of `text` at `at`, if there are 8 there.
#[inline(always)]
fn load(text: &[u8], at: usize) -> Option<u64> {
    let c = text.get(at..)?.first_chunk::<8>()?;
    Some(u64::from_le_bytes(*c))
}

/// The `n` (1 to 7) bytes of `text` that end at `end`, as the low bytes of a word (the others
/// zero, and a zero is no digit).
#[inline(always)]
fn load_tail(text: &[u8], end: usize, n: usize) -> u64 {
    match end.checked_sub(8).and_then(|from| load(text, from)) {
        Some(w) => w >> (8 * (8 - n)),
        None => {
            let mut w = [0u8; 8];
            if let (Some(to), Some(from)) = (w.get_mut(..n), text.get(end - n..end)) {
                to.copy_from_slice(from);
            }
            u64::from_le_bytes(w)
        }
    }
}

/// How many bytes of the text the key reads at most.
const KEY_BYTES: usize = 32;

/// A key every text of a shape shares (see the module's doc): the hash of the bytes before the
/// first digit run the shape cuts, of the first [`KEY_BYTES`] at most.
#[inline]
fn key(text: &[u8]) -> u64 {
    let head = text.get(..KEY_BYTES).unwrap_or(text);
    let mut h = MUL;
    let mut words = head.chunks_exact(8);
    let mut at = 0;
    for c in &mut words {
        let w = c.first_chunk::<8>().map_or(0, |c| u64::from_le_bytes(*c));
        let d = digits(w);
        if d != 0 {
            if let Some(k) = first_cut(text, at, d) {
                return finish(h, w & ((1u64 << (8 * k)) - 1), k);
            }
        }
        h = (h ^ w).wrapping_mul(MUL).rotate_left(29);
        at += 8;
    }
    let rest = words.remainder();
    if rest.is_empty() {
        return finish(h, 0, 8);
    }
    let w = load_tail(text, text.len(), rest.len());
    let d = digits(w);
    let k = if d == 0 {
        rest.len()
    } else {
        first_cut(text, at, d).unwrap_or(rest.len())
    };
    finish(h, w & ((1u64 << (8 * k)) - 1), k)
}

/// The key from the hash of the words before the last, and the last's `k` bytes `w`.
#[inline(always)]
fn finish(h: u64, w: u64, k: usize) -> u64 {
    let h = (h ^ w ^ (k as u64) << 60).wrapping_mul(MUL);
    h ^ (h >> 31)
}

/// Of the digits `d` of the word at `at`, the first that starts a run the shape cuts (its
/// previous byte neither a digit nor a byte that continues a word).
fn first_cut(text: &[u8], at: usize, d: u64) -> Option<usize> {
    let mut rest = d;
    while rest != 0 {
        let k = (rest.trailing_zeros() / 8) as usize;
        let before = (at + k).checked_sub(1).and_then(|p| text.get(p));
        if !before.is_some_and(|&b| b.is_ascii_digit() || continues_word(b)) {
            return Some(k);
        }
        rest &= rest - 1;
    }
    None
}

/// Digits of `text` from `at`.
#[inline]
fn digits_from(text: &[u8], mut at: usize) -> usize {
    let from = at;
    while let Some(w) = load(text, at) {
        let not = !digits(w) & HIGH_BITS;
        if not != 0 {
            return at - from + (not.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at - from
        + text
            .get(at..)
            .map_or(0, |t| t.iter().take_while(|b| b.is_ascii_digit()).count())
}

/// True if the `n` bytes of `a` at `i` are those of `b` at `j`.
#[inline(always)]
fn same_bytes(a: &[u8], i: usize, b: &[u8], j: usize, n: usize) -> bool {
    match (a.get(i..i + n), b.get(j..j + n)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// The digit runs the shape cuts in `text`, as (start, length); None past [`MAX_RUNS`].
fn cut_runs(text: &[u8]) -> Option<Runs> {
    let mut runs = Runs::default();
    let mut i = 0;
    let mut after_word = false;
    while let Some(&b) = text.get(i) {
        if b.is_ascii_digit() && !after_word {
            let n = digits_from(text, i);
            let slot = runs.at.get_mut(runs.len)?;
            *slot = (u8::try_from(i).ok()?, u8::try_from(n).ok()?);
            runs.len += 1;
            i += n;
            continue;
        }
        after_word = continues_word(b) || (after_word && b.is_ascii_digit());
        i += 1;
    }
    Some(runs)
}

/// Cut digit runs an exemplar may hold.
const MAX_RUNS: usize = 12;

#[derive(Default, Clone, Copy)]
struct Runs {
    at: [(u8, u8); MAX_RUNS],
    len: usize,
}

/// True if `text` has the shape of `exemplar`, whose cut runs are `runs`: the same bytes
/// between them, and a run of digits (of any length) for each.
#[inline]
fn matches(exemplar: &[u8], runs: &Runs, text: &[u8]) -> bool {
    let (mut e, mut t) = (0, 0);
    for &(start, len) in runs.at.get(..runs.len).unwrap_or_default() {
        let start = usize::from(start);
        let Some(n) = start.checked_sub(e) else {
            return false;
        };
        if !same_bytes(exemplar, e, text, t, n) {
            return false;
        }
        t += n;
        let digits = digits_from(text, t);
        if digits == 0 {
            return false;
        }
        t += digits;
        e = start + usize::from(len);
    }
    let Some(n) = exemplar.len().checked_sub(e) else {
        return false;
    };
    text.len() == t + n && same_bytes(exemplar, e, text, t, n)
}

/// True if `a` and `b` have one shape (each digit run that does not continue a word cut to one
/// mark, as `cache.rs` builds it): the same bytes but inside those runs. None if `a` could not
/// be an exemplar (too many runs).
#[cfg(test)]
pub(super) fn same_shape(a: &[u8], b: &[u8]) -> Option<bool> {
    let runs = cut_runs(a)?;
    Some(matches(a, &runs, b))
}

struct Entry {
    key: u64,
    digest: Digest,
    runs: Runs,
    text: Vec<u8>,
}

/// The digests of shapes seen lately, by their exemplars: empty until its first use, then
/// `SETS × WAYS` exemplars of up to `MAX_EXEMPLAR` bytes at most (about 4.5 KiB and the
/// exemplars' bytes).
#[derive(Default)]
pub struct RecentShapes {
    sets: Option<Box<[[Entry; WAYS]; SETS]>>,
}

impl fmt::Debug for RecentShapes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = self.sets.as_ref().map_or(0, |s| {
            s.iter().flatten().filter(|e| !e.text.is_empty()).count()
        });
        f.debug_struct("RecentShapes").field("kept", &kept).finish()
    }
}

fn set_of(key: u64) -> usize {
    (key >> 40) as usize & (SETS - 1)
}

impl RecentShapes {
    /// The digest of `text` (its first `max_len` bytes) if a text of its shape was remembered.
    #[inline]
    pub fn get(&self, text: &[u8], max_len: usize) -> Option<Digest> {
        let sets = self.sets.as_ref()?;
        if text.len() > max_len || text.is_empty() {
            return None;
        }
        let key = key(text);
        let set = sets.get(set_of(key))?;
        set.iter()
            .find(|e| e.key == key && matches(&e.text, &e.runs, text))
            .map(|e| e.digest)
    }

    /// Remembers `digest` for the shape of `text`: the digest every text of its shape has (as
    /// `digest_shaped` tells).
    pub(super) fn remember(&mut self, text: &[u8], digest: Digest) {
        if text.is_empty() || text.len() > MAX_EXEMPLAR {
            return;
        }
        let Some(runs) = cut_runs(text) else {
            return;
        };
        let sets = self.sets.get_or_insert_with(|| {
            Box::new(std::array::from_fn(|_| {
                std::array::from_fn(|_| Entry {
                    key: 0,
                    digest: Digest(0),
                    runs: Runs::default(),
                    text: Vec::new(),
                })
            }))
        });
        let key = key(text);
        let Some(set) = sets.get_mut(set_of(key)) else {
            return;
        };
        // Newest first: the oldest goes.
        set.rotate_right(1);
        let first = &mut set[0];
        first.key = key;
        first.digest = digest;
        first.runs = runs;
        first.text.clear();
        first.text.extend_from_slice(text);
    }

    /// Forgets every shape.
    pub fn clear(&mut self) {
        if let Some(sets) = &mut self.sets {
            for e in sets.iter_mut().flatten() {
                e.text.clear();
                e.runs = Runs::default();
                e.key = 0;
            }
        }
    }
}

/// The key of `text`, for the tests.
#[cfg(test)]
pub(super) fn key_of(text: &[u8]) -> u64 {
    key(text)
}
