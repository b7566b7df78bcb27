//! The SQL normalizer's properties, kept apart from `checks.rs` (the MySQL protocol's): on any
//! bytes, [`mysql_lb::wire::sql::normalize`] and [`mysql_lb::wire::sql::digest`] never panic,
//! read only the first `max_len` bytes, print a bounded text that normalizes to itself, and the
//! digest is that text's, from a digest cache and a session's recent shapes too, for the text
//! and others of its shape; the tokens cover the text in order without overlapping; `classify`
//! never panics;
//! `pins` never panics and a comment appended to the text does not change its verdict (unless
//! the text leaves a comment open, which the appended one may close); in every reading the
//! server could take the tokens are in order within the text; and `pins` (every reading) pins
//! whatever a known server's reading pins, as `read_only` holds only what every one holds;
//! `retryable_read` (what a pool across backends may send twice) holds only for a read-only
//! text that pins nothing; and what the read/write split sends to a replica (`route::target`)
//! is such a read, which the write guard (`route::replica_refuses`) lets through, in every
//! dialect.

use mysql_lb::wire::sql::pins::{pins, pins_for, Pin};
use mysql_lb::wire::sql::{
    classify, classify_as, digest, digest_cached, digest_remembered, normalize, read_only,
    readings, retryable_read, tokens, tokens_as, Dialect, DigestCache, Reading, RecentShapes,
    Server, TokenKind,
};

/// The tokens of `read` in `reading` are non-empty, in order, within the text, at most one per
/// byte.
fn covers(read: &[u8], reading: Reading) {
    let base = read.as_ptr() as usize;
    let mut at = 0;
    let mut count = 0;
    for t in tokens_as(read, reading) {
        let start = t.text.as_ptr() as usize - base;
        // An executable comment left running is an empty `Unsure` at the end.
        let at_end = t.kind == TokenKind::Unsure && start == read.len();
        assert!(!t.text.is_empty() || at_end, "empty token at {start}");
        assert!(
            start >= at,
            "token at {start} overlaps the one ending at {at}"
        );
        at = start + t.text.len();
        assert!(at <= read.len(), "token past the end");
        count += 1;
    }
    assert!(count <= read.len());
}

/// A [`DigestCache`] and [`RecentShapes`] answer what [`digest`] does: for the text on a miss
/// and on a hit, and for texts of the same shape (each digit changed, each digit doubled), which
/// a hit on the text's shape would answer if they kept it.
fn same_digest_from_a_cache(text: &[u8], max_len: usize) {
    let mut cache = DigestCache::default();
    let mut recent = RecentShapes::default();
    let plain = digest(text, max_len);
    assert_eq!(digest_cached(&mut cache, text, max_len), plain, "a miss");
    assert_eq!(digest_cached(&mut cache, text, max_len), plain, "a hit");
    assert_eq!(
        digest_remembered(&mut recent, &mut cache, text, max_len),
        plain,
        "remembered"
    );
    if let Some(d) = recent.get(text, max_len) {
        assert_eq!(d, plain, "a recent shape's hit");
    }
    let changed: Vec<u8> = text
        .iter()
        .map(|&b| {
            if b.is_ascii_digit() {
                b'0' + (b - b'0' + 7) % 10
            } else {
                b
            }
        })
        .collect();
    let doubled: Vec<u8> = text
        .iter()
        .flat_map(|&b| {
            if b.is_ascii_digit() {
                vec![b, b]
            } else {
                vec![b]
            }
        })
        .collect();
    for other in [changed, doubled] {
        let want = digest(&other, max_len);
        assert_eq!(
            digest_cached(&mut cache, &other, max_len),
            want,
            "a text of the same shape: {:?}",
            String::from_utf8_lossy(&other)
        );
        if let Some(d) = recent.get(&other, max_len) {
            assert_eq!(
                d,
                want,
                "a recent shape's hit: {:?}",
                String::from_utf8_lossy(&other)
            );
        }
    }
}

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

    same_digest_from_a_cache(text, max_len);

    assert!(tokens(read).count() <= read.len());
    covers(read, Reading::DIGEST);
    let _ = classify(read).is_write();

    let verdict = pins(read);
    let mut commented = read.to_vec();
    commented.extend_from_slice(b"\n/* @x; SET a = 1 */");
    if verdict != Some(Pin::Unknown) {
        assert_eq!(
            pins(&commented),
            verdict,
            "a trailing comment changes the pin"
        );
    }

    let all_read_only = read_only(read);
    // What a pool across backends may send twice is a read in every reading, and stays one
    // with a comment after it.
    if retryable_read(read, Dialect::default()) {
        assert!(all_read_only, "retryable but not read-only");
        assert!(pins(read).is_none(), "retryable but pins: {:?}", pins(read));
    }
    for reading in readings(read, Dialect::default()).unwrap_or_default() {
        covers(read, reading);
        if all_read_only {
            assert!(classify_as(read, reading).is_read_only(), "{reading:?}");
        }
    }
    for server in [
        Server::MARIADB_10_11,
        Server {
            mariadb: false,
            version: 80_036,
        },
    ] {
        let known = pins_for(
            read,
            Dialect {
                server: Some(server),
            },
        );
        if known.is_some() {
            assert!(
                verdict.is_some(),
                "{server:?} pins ({known:?}), every reading does not"
            );
        }
        route_holds(
            read,
            Dialect {
                server: Some(server),
            },
        );
    }
    route_holds(read, Dialect::default());
}

/// What the read/write split sends to a replica is a read a retry could send twice, which the
/// write guard would let through, may continue a transaction there, and keeps its verdict with
/// a comment after it; what reads the diagnostics area never panics.
fn route_holds(read: &[u8], dialect: Dialect) {
    use mysql_lb::wire::sql::reads_diagnostics;
    use mysql_lb::wire::sql::route::{replica_may_continue, replica_refuses, target, Target};
    let _ = reads_diagnostics(read);
    let refused = replica_refuses(read, dialect);
    match target(read, dialect) {
        Target::Replica => {
            assert!(retryable_read(read, dialect), "to a replica, not retryable");
            assert!(
                !refused,
                "to a replica, and the write guard refuses it there"
            );
            assert!(
                replica_may_continue(read, dialect),
                "to a replica, may not continue"
            );
            let mut commented = read.to_vec();
            commented.extend_from_slice(b"\n/* ; DELETE FROM t */");
            if !read.contains(&b'#') && !read.windows(2).any(|w| w == b"--" || w == b"/*") {
                assert_eq!(
                    target(&commented, dialect),
                    Target::Replica,
                    "a trailing comment changes the route"
                );
            }
        }
        Target::ReadOnlyTransaction => {
            assert!(
                !refused,
                "a read-only transaction's start refused on a replica"
            );
        }
        Target::Primary => {}
    }
}
