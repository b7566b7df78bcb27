//! The fast path and the buffered hash against what they replace: the general printer and the
//! first hash (32-byte blocks filled a byte at a time), kept here as the reference. A digest
//! must never change: stored digests, dashboards and anchors name statements by it.

use proptest::prelude::*;

use super::*;

/// The first version of [`Hasher`], byte for byte.
mod reference {
    use super::{fold_mul, Sink, MUL, SEED};

    const BLOCK: usize = 32;

    pub(super) struct Hasher {
        state: u64,
        block: [u8; BLOCK],
        filled: usize,
        len: u64,
    }

    impl Hasher {
        pub(super) fn new() -> Self {
            Hasher {
                state: SEED,
                block: [0; BLOCK],
                filled: 0,
                len: 0,
            }
        }

        fn mix(&mut self, w: u64) {
            self.state = fold_mul(self.state ^ w, MUL) ^ self.state.rotate_left(23);
        }

        fn mix_block(&mut self, words: usize) {
            let block = self.block;
            for chunk in block.chunks_exact(8).take(words) {
                let mut w = [0u8; 8];
                w.copy_from_slice(chunk);
                self.mix(u64::from_le_bytes(w));
            }
        }

        pub(super) fn byte(&mut self, b: u8) {
            self.len += 1;
            if let Some(slot) = self.block.get_mut(self.filled) {
                *slot = b;
            }
            self.filled += 1;
            if self.filled == BLOCK {
                self.mix_block(BLOCK / 8);
                self.filled = 0;
            }
        }

        pub(super) fn finish(mut self) -> u64 {
            if let Some(tail) = self.block.get_mut(self.filled..) {
                tail.fill(0);
            }
            self.mix_block(self.filled.div_ceil(8));
            self.mix(self.len.rotate_left(32) ^ 0x5bd1_e995);
            let mut h = self.state;
            h ^= h >> 33;
            h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
            h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
            h ^ (h >> 33)
        }
    }

    impl Sink for Hasher {
        fn put(&mut self, s: &str) {
            for b in s.bytes() {
                self.byte(b);
            }
        }

        fn put_lower(&mut self, s: &str) {
            for b in s.bytes() {
                self.byte(b.to_ascii_lowercase());
            }
        }
    }
}

/// The digest as it was computed before the fast path: the general printer into the first hash.
fn reference_digest(text: &[u8], max_len: usize) -> Digest {
    let mut hasher = reference::Hasher::new();
    print(text, max_len, &mut hasher);
    Digest(hasher.finish())
}

/// Checks `text` both ways: the fast path, where it does not bail, prints what the general
/// printer prints, and the digest is the reference's. True if the fast path took it.
fn check(text: &[u8], max_len: usize) -> bool {
    let cut = text.get(..max_len).unwrap_or(text);
    let mut fast_out = Vec::new();
    let took = fast::print(cut, &mut fast_out).is_ok();
    if took {
        assert_eq!(
            String::from_utf8_lossy(&fast_out),
            normalize(text, max_len),
            "fast path on {:?}",
            String::from_utf8_lossy(text)
        );
    }
    assert_eq!(
        digest(text, max_len),
        reference_digest(text, max_len),
        "digest of {:?}",
        String::from_utf8_lossy(text)
    );
    took
}

/// Statements the fast path must take (sysbench's, ORMs'), and some it must leave.
const TAKEN: &[&str] = &[
    "SELECT c FROM sbtest1 WHERE id=50321",
    "SELECT c FROM sbtest1 WHERE id BETWEEN 50321 AND 50420",
    "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 50321 AND 50420",
    "SELECT c FROM sbtest1 WHERE id BETWEEN 50321 AND 50420 ORDER BY c",
    "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 50321 AND 50420 ORDER BY c",
    "BEGIN",
    "COMMIT",
    "begin;",
    "UPDATE sbtest1 SET k=k+1 WHERE id=5",
    "UPDATE sbtest1 SET c='83868641912-28773972837' WHERE id=5",
    "DELETE FROM sbtest1 WHERE id=5",
    "INSERT INTO sbtest1 (id, k, c, pad) VALUES (5, 4993, '8-1-2', '3-4'), (6, -1, 'x', \"y\")",
    "select user0_.id as id1_0_, user0_.email as email2_0_ from app_user user0_ where user0_.id=? and user0_.deleted=0",
    "SELECT * FROM t WHERE a IN (1, 2, 3) AND b = -1 AND c <=> NULL AND d IS NOT NULL",
    "SELECT a-1, a - -1, -a, 1+-2, a*-1, 1.5, 2., t.select, t.5",
    "SELECT 1; SELECT 2;;",
    "SELECT COUNT(*), x.y.z, f(1), CAST(a AS CHAR(10)) FROM t LIMIT 10, 20",
];

const LEFT: &[&str] = &[
    "SELECT 1 -- comment",
    "SELECT /* c */ 1",
    "SELECT `t`.a",
    "SELECT @x",
    "SELECT .5",
    "SELECT 0x1F",
    "SELECT 1e5",
    "SELECT X'1F'",
    "SELECT _utf8mb4'x'",
    "SELECT é",
    "SELECT 1 # comment",
    "SELECT /*+ BKA(t) */ 1",
];

#[test]
fn fast_path_takes_common_statements_and_prints_as_the_general_printer() {
    for q in TAKEN {
        assert!(check(q.as_bytes(), 4096), "fast path left {q:?}");
    }
    for q in LEFT {
        assert!(!check(q.as_bytes(), 4096), "fast path took {q:?}");
    }
}

#[test]
fn corpus_digests_are_unchanged() {
    for (q, normal) in super::super::tests::CORPUS {
        check(q.as_bytes(), 4096);
        check(normal.as_bytes(), 4096);
        for cut in 0..q.len() {
            check(q.as_bytes(), cut);
        }
    }
}

#[test]
fn streaming_hash_is_the_reference_hash() {
    let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 3) as u8).collect();
    for len in 0..bytes.len() {
        let data = &bytes[..len];
        let mut old = reference::Hasher::new();
        for &b in data {
            old.byte(b);
        }
        // Pieces of varying sizes, as the printers hand them over: words of 1 to 8 bytes and
        // longer runs.
        let mut new = Hasher::new();
        let mut rest = data;
        let mut size = 1;
        while !rest.is_empty() {
            let (piece, tail) = rest.split_at(size.min(rest.len()));
            if piece.len() <= 8 && size % 2 == 1 {
                let mut w = 0u64;
                for (i, &b) in piece.iter().enumerate() {
                    w |= u64::from(b) << (8 * i);
                }
                new.word(w, piece.len());
            } else {
                new.bytes(piece);
            }
            rest = tail;
            size = size % 19 + 1;
        }
        assert_eq!(old.finish(), new.finish(), "length {len}");
    }
}

/// Pieces of statements the fast path reads.
const READ: &[&str] = &[
    "SELECT",
    "select",
    "FROM",
    "WHERE",
    "IS",
    "NOT",
    "NULL",
    "null",
    "IN",
    "VALUES",
    "AND",
    "COUNT",
    "CHAR",
    "TRUE",
    "END",
    "CURRENT_TIMESTAMP",
    "t",
    "a",
    "b1",
    "$x",
    "user0_",
    "id",
    "sbtest1",
    "averyveryverylongname",
    "1",
    "42",
    "1.5",
    "2.",
    "'s'",
    "'it''s'",
    "'a\\'b'",
    "\"q\"",
    "?",
    "(",
    ")",
    ",",
    ";",
    ".",
    "*",
    "=",
    "-",
    "+",
    "<=>",
    "->>",
    "<=",
    "!=",
    "||",
    "/",
    "%",
    "!",
    " ",
    "  ",
    "\n",
    "\t",
];

/// A seeded xorshift generator: the random tests' statements are the same on every run.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// Random statements of the pieces the fast path reads (a fixed seed): it must take most of
/// them, and print each as the general printer does.
#[test]
fn fast_path_takes_and_agrees_on_random_statements() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
    let mut taken = 0;
    let rounds = 20_000;
    for _ in 0..rounds {
        let pieces = next() % 24;
        let mut text = Vec::new();
        for _ in 0..pieces {
            let piece = READ[(next() % READ.len() as u64) as usize];
            text.extend_from_slice(piece.as_bytes());
            if next() % 3 == 0 {
                text.push(b' ');
            }
        }
        if check(&text, 4096) {
            taken += 1;
        }
        check(&text, (next() % 64) as usize);
    }
    assert!(taken > rounds / 2, "the fast path took {taken} of {rounds}");
}

/// Statements made of the pieces the fast path reads, and a few it bails on.
fn statement() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        "SELECT", "select", "FROM", "WHERE", "IS", "NOT", "NULL", "null", "IN", "VALUES", "AND",
        "COUNT", "CHAR", "TRUE", "END", "t", "a", "b1", "$x", "user0_", "id", "1", "42", "1.5",
        "2.", "'s'", "'it''s'", "'a\\'b'", "\"q\"", "'", "?", "(", ")", ",", ";", ".", "*", "=",
        "-", "+", "--", "<=>", "->>", "<=", "!=", "||", "/", "%", "!", " ", "  ", "\n", "\t",
        "x'1F'", "0x1F", "1e5", ".5", "`q`", "@v", "#c\n", "-- c\n", "/* c */", "_utf8'x'", "é",
        "\u{1}",
    ]);
    prop::collection::vec(piece, 0..24).prop_map(|ps| {
        let mut out = Vec::new();
        for p in ps {
            out.extend_from_slice(p.as_bytes());
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn fast_path_agrees_on_statements(text in statement(), cut in 0usize..200) {
        check(&text, 4096);
        check(&text, cut);
    }

    #[test]
    fn fast_path_agrees_on_bytes(text in prop::collection::vec(any::<u8>(), 0..64)) {
        check(&text, 4096);
    }

    #[test]
    fn the_shape_is_the_automatons(
        text in prop::collection::vec(
            prop::sample::select(b"0123456789ab_$ .'=\x00\xc3".to_vec()), 0..80),
    ) {
        // shape_of compares the two.
        cache::shape_of(&text);
    }

    #[test]
    fn fast_path_agrees_on_ascii(text in prop::collection::vec(0x20u8..0x7f, 0..64)) {
        check(&text, 4096);
    }
}

#[test]
fn a_shape_cuts_digit_runs_that_do_not_continue_a_word() {
    let shape = |t: &str| cache::shape_of(t.as_bytes());
    assert_eq!(
        shape("SELECT c FROM sbtest1 WHERE id=5032").as_deref(),
        Some(&b"SELECT c FROM sbtest1 WHERE id=\0"[..])
    );
    assert_eq!(
        shape("x 12.50 a1 1e5 t.5 '7 8' $9").as_deref(),
        Some(&b"x \0.\0 a1 \0e5 t.\0 '\0 \0' $9"[..])
    );
    assert_eq!(shape("SELECT '\0'"), None);
    assert_eq!(shape(&"x".repeat(cache::MAX_TEXT + 1)), None);
    assert!(shape(&"x".repeat(cache::MAX_TEXT)).is_some());
}

/// Pieces with digits in every place the shape cuts them, and some where it must not.
const DIGITS: &[&str] = &[
    "1",
    "42",
    "007",
    "1.5",
    "12.",
    "t.5",
    "t . 5",
    "1e5",
    "1E-3",
    "a1",
    "sbtest1",
    "0x1F",
    "0b1",
    "'1 2'",
    "\"3\"",
    "`c1`",
    "`1`",
    "@v1",
    "@1",
    "@@x1",
    "/*!50100 x */",
    "/*!5 1 */",
    "/*+ M(1) */",
    "/* 1 */",
    "-- 1\n",
    "# 1\n",
    "x'12'",
    "b'1'",
    "N'1'",
    "_utf8'1'",
    "_binary 1",
    "1abc",
    ".5",
    "$1",
    "é1",
    "-1",
    "+2",
    "(1, 2)",
    "IN (3)",
    "?",
];

/// `text` with each digit run the shape cuts replaced by other digits.
fn other_digits(text: &[u8], next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut in_word = false;
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        if b.is_ascii_digit() && !in_word {
            while text.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            for _ in 0..=next() % 5 {
                out.push(b'0' + (next() % 10) as u8);
            }
            continue;
        }
        in_word = b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
        out.push(b);
        i += 1;
    }
    out
}

/// What makes a hit safe: a text the fast path lets the cache keep has the digest of every text
/// of its shape (by the general printer and the first hash).
#[test]
fn texts_of_a_kept_shape_share_its_digest() {
    let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
    let (mut kept, mut left) = (0, 0);
    for _ in 0..20_000 {
        let text = random_text(&mut next, 16, false);
        let (digest, keep) = compute(&text);
        assert_eq!(digest, reference_digest(&text, text.len()));
        if !keep {
            left += 1;
            continue;
        }
        kept += 1;
        for _ in 0..3 {
            let other = other_digits(&text, &mut next);
            assert_eq!(cache::shape_of(&other), cache::shape_of(&text));
            assert_eq!(
                reference_digest(&other, other.len()),
                digest,
                "{:?} and {:?}",
                String::from_utf8_lossy(&text),
                String::from_utf8_lossy(&other)
            );
        }
    }
    assert!(kept > 2_000 && left > 2_000, "kept {kept}, left {left}");
}

/// Fewer than `pieces` pieces of [`DIGITS`] and [`READ`], each followed by a space (`spaced`),
/// else by one two times in three.
fn random_text(next: &mut impl FnMut() -> u64, pieces: u64, spaced: bool) -> Vec<u8> {
    let mut text = Vec::new();
    for _ in 0..next() % pieces {
        let piece = if next() % 2 == 0 {
            DIGITS[(next() % DIGITS.len() as u64) as usize]
        } else {
            READ[(next() % READ.len() as u64) as usize]
        };
        text.extend_from_slice(piece.as_bytes());
        if spaced || next() % 3 != 0 {
            text.push(b' ');
        }
    }
    text
}

/// The cache answers what the digest computed afresh would, through hits, misses, evictions and
/// texts cut at `max_len`.
#[test]
fn the_cache_answers_as_a_fresh_digest() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
    let mut cache = DigestCache::default();
    let mut texts: Vec<Vec<u8>> = Vec::new();
    for i in 0..2_000u64 {
        let text = if i % 3 == 0 && !texts.is_empty() {
            let earlier = &texts[(next() % texts.len() as u64) as usize];
            other_digits(earlier, &mut next)
        } else {
            random_text(&mut next, 12, true)
        };
        for max_len in [4096, text.len(), text.len().saturating_sub(3)] {
            assert_eq!(
                digest_cached(&mut cache, &text, max_len),
                reference_digest(&text, max_len),
                "{:?} cut at {max_len}",
                String::from_utf8_lossy(&text)
            );
        }
        texts.push(text);
    }
    assert!(
        cache.hits > 200,
        "only {} answers came from the cache",
        cache.hits
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// The comparison without a shape is equality of shapes, and the key is the same for texts
    /// of one shape.
    #[test]
    fn recent_shapes_compare_as_the_shapes(
        a in prop::collection::vec(
            prop::sample::select(b"0123456789ab_$ .'=\xc3".to_vec()), 0..40),
        b in prop::collection::vec(
            prop::sample::select(b"0123456789ab_$ .'=\xc3".to_vec()), 0..40),
    ) {
        for (x, y) in [(&a, &b), (&b, &a), (&a, &a), (&b, &b)] {
            let same = cache::shape_of(x) == cache::shape_of(y);
            if let Some(answer) = recent::same_shape(x, y) {
                prop_assert_eq!(answer, same);
            }
            if same {
                prop_assert_eq!(recent::key_of(x), recent::key_of(y));
            }
        }
    }
}

/// Texts that differ only inside the digit runs the shape cuts: one shape, one key; and a
/// digit run the shape keeps (`sbtest1`) or a different byte elsewhere makes another shape.
#[test]
fn recent_shapes_match_texts_that_differ_in_cut_digits() {
    let mut next = xorshift(0x1234_5678_9abc_def1u64);
    for _ in 0..5_000 {
        let text = random_text(&mut next, 16, false);
        let other = other_digits(&text, &mut next);
        assert!(
            recent::same_shape(&text, &other) != Some(false),
            "{:?} and {:?}",
            String::from_utf8_lossy(&text),
            String::from_utf8_lossy(&other)
        );
        assert_eq!(recent::key_of(&text), recent::key_of(&other));
    }
    let same = |a: &str, b: &str| recent::same_shape(a.as_bytes(), b.as_bytes()).unwrap();
    assert!(same(
        "SELECT c FROM sbtest1 WHERE id=5032",
        "SELECT c FROM sbtest1 WHERE id=7"
    ));
    assert!(!same(
        "SELECT c FROM sbtest1 WHERE id=5032",
        "SELECT c FROM sbtest2 WHERE id=5032"
    ));
    assert!(!same("SELECT 1", "SELECT 1 "));
    assert!(!same("SELECT 1", "SELECT x"));
    assert!(same("1 AND 22", "333 AND 4"));
    assert!(!same("x12", "x3"));
}

/// A session's recent shapes answer what the digest computed afresh would, through hits,
/// misses, replaced exemplars and texts cut at `max_len`.
#[test]
fn recent_shapes_answer_as_a_fresh_digest() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
    let mut cache = DigestCache::default();
    let mut recent = RecentShapes::default();
    let mut texts: Vec<Vec<u8>> = Vec::new();
    let mut hits = 0;
    for i in 0..4_000u64 {
        let text = if i % 2 == 0 && !texts.is_empty() {
            let earlier = &texts[(next() % texts.len().min(40) as u64) as usize];
            other_digits(earlier, &mut next)
        } else {
            random_text(&mut next, 12, true)
        };
        for max_len in [4096, text.len(), text.len().saturating_sub(3)] {
            let want = reference_digest(&text, max_len);
            match recent.get(&text, max_len) {
                Some(d) => {
                    hits += 1;
                    assert_eq!(d, want, "{:?}", String::from_utf8_lossy(&text));
                }
                None => assert_eq!(
                    digest_remembered(&mut recent, &mut cache, &text, max_len),
                    want,
                    "{:?} cut at {max_len}",
                    String::from_utf8_lossy(&text)
                ),
            }
        }
        texts.push(text);
    }
    assert!(
        hits > 500,
        "only {hits} answers came from the recent shapes"
    );
    recent.clear();
    assert!(texts.iter().all(|t| recent.get(t, 4096).is_none()));
}

#[test]
fn recent_shapes_hit_on_sysbench() {
    let mut cache = DigestCache::default();
    let mut recent = RecentShapes::default();
    for t in ["BEGIN", "SELECT c FROM sbtest1 WHERE id=5032"] {
        let d = digest_remembered(&mut recent, &mut cache, t.as_bytes(), 1024);
        assert_eq!(recent.get(t.as_bytes(), 1024), Some(d), "{t}");
    }
    assert!(recent
        .get(b"SELECT c FROM sbtest1 WHERE id=17", 1024)
        .is_some());
}

#[test]
fn the_folded_digest_is_case_blind_and_the_same_by_either_printer() {
    for (a, b) in [
        (
            "SELECT c FROM sbtest1 WHERE id=5",
            "select C from SBTEST1 where ID = 77",
        ),
        (
            "UPDATE t SET Zed = 'X' WHERE id IN (1,2,3)",
            "update T set zED = 'y' where ID in (4, 5)",
        ),
        (
            "select `Weird Name` from t /* c */",
            "SELECT `weird name` FROM T",
        ),
    ] {
        assert_eq!(
            digest_folded(a.as_bytes(), 1024),
            digest_folded(b.as_bytes(), 1024),
            "{a} / {b}"
        );
        assert_eq!(
            digest_folded(a.as_bytes(), 1024),
            super::folded_by_printer(a.as_bytes()),
            "{a}"
        );
        assert_eq!(
            digest_folded(a.as_bytes(), 1024),
            digest_folded(normalize(a.as_bytes(), 1024).as_bytes(), 1024),
            "{a}: the folded digest of its normalized text"
        );
    }
    assert_ne!(
        digest_folded(b"SELECT c FROM sbtest1", 1024),
        digest_folded(b"SELECT c FROM sbtest2", 1024)
    );
    for w in [0u64, u64::MAX, 0x4142_5A5B_6061_7A40, 0xC1DA_4140_5A00_7F80] {
        let mut want = w.to_le_bytes();
        want.iter_mut().for_each(|b| *b = b.to_ascii_lowercase());
        assert_eq!(super::lower_word(w), u64::from_le_bytes(want), "{w:#x}");
    }
}
