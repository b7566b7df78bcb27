//! A cache of digests by the statement's shape: its text with each run of digits
//! that does not continue a word (`id=5032`, not `sbtest1`) cut to one 0 byte.
//!
//! Why: most statements an application sends repeat but for their numbers (sysbench's point
//! select with a new `id` each time, an ORM that inlines its values; and, byte for byte, its
//! prepared statements and `BEGIN`/`COMMIT`). The shape is one pass over the bytes, a table
//! look-up each, where the fast path spends several times that per byte on tokens, keywords and
//! spacing: a hit costs a fraction of a digest (see `digest.rs` for the numbers).
//!
//! Why a hit gives the digest the text would get:
//!
//! - The key is the shape itself, compared byte for byte: no hash stands in for it, so no text
//!   (untrusted, as statements are) can collide with another and borrow its digest.
//! - A shape is stored only from a text the fast path took whole (not cut at `max_len`) in which
//!   every digit run cut sits inside a value, a number or a string: the fast path bails on every
//!   other place a digit can follow a byte that is not a word byte (`.5`, `1e5`, `0x1F`, `1st`,
//!   comments, backticks, variables) but for a name after a qualifier (`t.5`), which it reports.
//!   Another text of the same shape differs from it only inside those runs; the fast path asks
//!   of a digit only that it is one (never its value, nor a run's length), so it reads that text
//!   into the same tokens, the values among them printed `?`, and prints the same bytes.
//! - A text with a 0 byte (the cut mark) or longer than [`MAX_TEXT`] is not cached.
//!
//! The unit tests check the second point against the general printer: texts of one shape with
//! other digits get the same digest, and the cache answers as the digest computed afresh.
//!
//! The cache is direct-mapped, [`SLOTS`] shapes (a worker thread serves many sessions, which
//! mostly send the same few shapes, so the telemetry keeps one [`DigestCache`] per worker); a
//! shape evicts the one in its slot. It is a value its owner passes in, not hidden state: the
//! wire stays plain functions over bytes, and [`super::digest`] without a cache is what it
//! always was.

use std::fmt;

use super::Digest;

/// Texts longer than this are not cached: the shape is built in a fixed buffer.
pub(super) const MAX_TEXT: usize = 512;

/// Shapes a cache keeps.
const SLOTS: usize = 256;

/// The shape is read by a small automaton, one table look-up a byte: its state is whether the
/// previous byte continues a word (then a digit does too), is inside a run of digits being cut,
/// is anything else, or whether a 0 byte (the cut mark) was seen, which ends caching. An entry
/// holds the next state, whether the byte is written (a run's digits after its first are not)
/// and whether it is written as 0 (a run's first digit).
const AFTER_OTHER: u8 = 0;
const AFTER_WORD: u8 = 1;
const IN_RUN: u8 = 2;
const SAW_ZERO: u8 = 3;
const WRITE: u8 = 4;
const AS_ZERO: u8 = 8;

/// The automaton's table, indexed by `byte << 2 | state`.
static STEP: [u8; 1024] = {
    let mut table = [0u8; 1024];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let word = c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80;
        let mut state = 0;
        while state < 4 {
            table[b << 2 | state] = if state == SAW_ZERO as usize || c == 0 {
                SAW_ZERO
            } else if c.is_ascii_digit() {
                match state as u8 {
                    AFTER_WORD => AFTER_WORD | WRITE,
                    IN_RUN => IN_RUN,
                    _ => IN_RUN | WRITE | AS_ZERO,
                }
            } else if word {
                AFTER_WORD | WRITE
            } else {
                AFTER_OTHER | WRITE
            };
            state += 1;
        }
        b += 1;
    }
    table
};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Of 8 bytes (little-endian `w`): the digits and (at least the first of) the 0 bytes, as
/// their high bits.
#[inline]
fn marks(w: u64) -> (u64, u64) {
    let x = w & !HIGH_BITS;
    // Each byte's high bit: its low 7 bits are at least `0` and not above `9` (each sum stays
    // within its byte), and it is below 0x80.
    let digits = (x + ONES * (0x80 - 0x30)) & !(x + ONES * (0x7f - 0x39)) & !w & HIGH_BITS;
    let zeros = w.wrapping_sub(ONES) & !w & HIGH_BITS;
    (digits, zeros)
}

/// True if `b` continues a word and is not a digit.
#[inline]
fn word_byte(b: u8) -> bool {
    STEP[usize::from(b) << 2] & 3 == AFTER_WORD
}

/// The shape of `text` into `out`: its length, or None for a text with a 0 byte or longer than
/// `out`. Eight bytes at a time: those before the first digit are copied with one store, the
/// run of digits there is cut (or copied, after a word byte), and the next eight are read from
/// after it; the last few bytes go through the automaton.
fn shape(text: &[u8], out: &mut [u8; MAX_TEXT]) -> Option<usize> {
    if text.len() > MAX_TEXT {
        return None;
    }
    let mut n = 0;
    let mut i = 0;
    while let Some(bytes) = text.get(i..).and_then(|t| t.first_chunk::<8>()) {
        let (digits, zeros) = marks(u64::from_le_bytes(*bytes));
        if zeros != 0 {
            return None;
        }
        // `n` is at most `i`, and `i + 8` within the text: the 8 fit. Bytes stored past the
        // first digit are overwritten by what comes next.
        out.get_mut(n..n + 8)?.copy_from_slice(bytes);
        if digits == 0 {
            n += 8;
            i += 8;
            continue;
        }
        let k = (digits.trailing_zeros() / 8) as usize;
        n += k;
        i += k;
        // A run starts at `i` (the byte before it, if any, is no digit: runs are read whole).
        let run = text.get(i..)?;
        let len = run.iter().take_while(|b| b.is_ascii_digit()).count();
        if i > 0 && text.get(i - 1).is_some_and(|&b| word_byte(b)) {
            out.get_mut(n..n + len)?.copy_from_slice(run.get(..len)?);
            n += len;
        } else {
            *out.get_mut(n)? = 0;
            n += 1;
        }
        i += len;
    }
    // The last bytes: a run was read whole, so the automaton starts after a word or not.
    let mut state = match i.checked_sub(1).and_then(|j| text.get(j)) {
        Some(&b) if word_byte(b) || b.is_ascii_digit() => AFTER_WORD,
        _ => AFTER_OTHER,
    };
    for &b in text.get(i..)? {
        (n, state) = step(out, n, state, b);
    }
    (state != SAW_ZERO).then_some(n)
}

/// The shape as the automaton alone reads it, a byte at a time: what the tests hold [`shape`]
/// to.
#[cfg(test)]
fn shape_bytewise(text: &[u8], out: &mut [u8; MAX_TEXT]) -> Option<usize> {
    if text.len() > MAX_TEXT {
        return None;
    }
    let (mut n, mut state) = (0, AFTER_OTHER);
    for &b in text {
        (n, state) = step(out, n, state, b);
    }
    (state != SAW_ZERO).then_some(n)
}

/// One byte through the automaton.
#[inline(always)]
fn step(out: &mut [u8; MAX_TEXT], n: usize, state: u8, b: u8) -> (usize, u8) {
    let step = STEP[usize::from(b) << 2 | usize::from(state)];
    // `n` counts written bytes, at most one a byte of the text: always below MAX_TEXT here.
    out[n & (MAX_TEXT - 1)] = if step & AS_ZERO != 0 { 0 } else { b };
    (n + usize::from(step >> 2 & 1), step & 3)
}

/// The slot of a shape.
fn slot_of(shape: &[u8]) -> usize {
    let mut h = shape.len() as u64;
    let mut chunks = shape.chunks_exact(8);
    for chunk in &mut chunks {
        if let Some(c) = chunk.first_chunk::<8>() {
            h = (h ^ u64::from_le_bytes(*c)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h ^= h >> 32;
    (h as usize) & (SLOTS - 1)
}

struct Cache {
    shapes: Vec<Vec<u8>>,
    digests: Vec<Digest>,
    scratch: [u8; MAX_TEXT],
}

/// Digests by shape (see the module's docs); empty until its first use, then about
/// [`SLOTS`] × (a shape + 8 bytes) and [`MAX_TEXT`] bytes of scratch.
#[derive(Default)]
pub struct DigestCache {
    inner: Option<Box<Cache>>,
    /// Answers from the cache, for the tests to see that they ran.
    #[cfg(test)]
    pub(super) hits: usize,
}

impl fmt::Debug for DigestCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = self
            .inner
            .as_ref()
            .map_or(0, |c| c.shapes.iter().filter(|s| !s.is_empty()).count());
        f.debug_struct("DigestCache").field("kept", &kept).finish()
    }
}

impl DigestCache {
    /// The digest of the whole `text` (not cut at `max_len`): from the cache when a text of its
    /// shape was digested before, else `compute`d (the digest, and whether the cache may keep
    /// it) and kept. True if every text of its shape has this digest (the cache kept it).
    pub(super) fn digest(
        &mut self,
        text: &[u8],
        compute: impl FnOnce(&[u8]) -> (Digest, bool),
    ) -> (Digest, bool) {
        let cache = self.inner.get_or_insert_with(|| {
            Box::new(Cache {
                shapes: vec![Vec::new(); SLOTS],
                digests: vec![Digest(0); SLOTS],
                scratch: [0; MAX_TEXT],
            })
        });
        let Some(len) = shape(text, &mut cache.scratch) else {
            return (compute(text).0, false);
        };
        let Some(key) = cache.scratch.get(..len) else {
            return (compute(text).0, false);
        };
        let slot = slot_of(key);
        if let (Some(kept), Some(&digest)) = (cache.shapes.get(slot), cache.digests.get(slot)) {
            if !kept.is_empty() && kept.as_slice() == key {
                #[cfg(test)]
                {
                    self.hits += 1;
                }
                return (digest, true);
            }
        }
        let (digest, keep) = compute(text);
        if keep {
            // `compute` does not touch the cache: the shape is still in the scratch buffer.
            if let (Some(kept), Some(d), Some(key)) = (
                cache.shapes.get_mut(slot),
                cache.digests.get_mut(slot),
                cache.scratch.get(..len),
            ) {
                kept.clear();
                kept.extend_from_slice(key);
                *d = digest;
            }
        }
        (digest, keep)
    }
}

/// The shape of `text`, for the tests; checked against the automaton alone.
#[cfg(test)]
pub(super) fn shape_of(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = [0u8; MAX_TEXT];
    let mut bytewise = [0u8; MAX_TEXT];
    let n = shape(text, &mut out);
    let m = shape_bytewise(text, &mut bytewise);
    assert_eq!(n, m, "{:?}", String::from_utf8_lossy(text));
    let shape = out.get(..n?).map(<[u8]>::to_vec);
    assert_eq!(shape.as_deref(), bytewise.get(..n?));
    shape
}
