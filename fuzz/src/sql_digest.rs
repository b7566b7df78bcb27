//! The SQL normalizer's properties, kept apart from `checks.rs` (the MySQL protocol's): on any
//! bytes, [`mysql_lb::sql::normalize`] and [`mysql_lb::sql::digest`] never panic, read only the
//! first `max_len` bytes, print a bounded text that normalizes to itself, and the digest is that
//! text's; the tokens cover the text in order without overlapping; `classify` never panics;
//! `pins` never panics and a comment appended to the text does not change its verdict.

use mysql_lb::sql::pins::pins;
use mysql_lb::sql::{classify, digest, normalize, tokens};

/// Byte 0 picks `max_len` (0 = the whole input, else a cut somewhere in it); the rest is the
/// statement text.
pub fn sql_digest(data: &[u8]) {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let max_len = if pick == 0 {
        usize::MAX
    } else {
        usize::from(pick) * text.len() / 255
    };
    let read = text.get(..max_len).unwrap_or(text);

    let normal = normalize(text, max_len);
    assert_eq!(
        normal,
        normalize(read, usize::MAX),
        "max_len {max_len} is not a prefix"
    );
    assert!(
        normal.len() <= 3 * read.len() + 8,
        "{} bytes printed from {}",
        normal.len(),
        read.len()
    );
    assert_eq!(
        normalize(normal.as_bytes(), usize::MAX),
        normal,
        "not idempotent"
    );
    assert_eq!(
        digest(text, max_len),
        digest(normal.as_bytes(), usize::MAX),
        "the digest is not the normal form's"
    );

    let base = read.as_ptr() as usize;
    let mut at = 0;
    let mut count = 0;
    for t in tokens(read) {
        let start = t.text.as_ptr() as usize - base;
        assert!(!t.text.is_empty(), "empty token at {start}");
        assert!(
            start >= at,
            "token at {start} overlaps the one ending at {at}"
        );
        at = start + t.text.len();
        assert!(at <= read.len(), "token past the end");
        count += 1;
    }
    assert!(count <= read.len());
    let _ = classify(read).is_write();

    let verdict = pins(read);
    let mut commented = read.to_vec();
    commented.extend_from_slice(b"\n/* @x; SET a = 1 */");
    assert_eq!(
        pins(&commented),
        verdict,
        "a trailing comment changes the pin"
    );
}
