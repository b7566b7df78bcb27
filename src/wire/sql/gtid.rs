//! GTID positions, MariaDB's and MySQL's, for read-your-writes through a read/write split.
//!
//! A session that wrote on the primary remembers the position its last write reached (the
//! primary's `@@last_gtid` or `@@gtid_current_pos` after the commit); a replica reports the
//! position it has applied (`@@gtid_slave_pos`, `@@gtid_current_pos`). [`GtidPos::covers`]
//! decides whether that replica may answer the session's next read without waiting: when it does
//! not, the read waits (`MASTER_GTID_WAIT('<position>', timeout)`, which takes what
//! [`GtidPos`]'s `Display` prints) or goes to the primary.
//!
//! MariaDB prints a position as comma-separated `domain-server-sequence` triples (`u32-u32-u64`),
//! at most one per replication domain: `0-1-42,1-2-7`; the empty string is the empty position.
//! Some outputs put a newline after each comma (`0-1-42,\n1-2-7`), so ASCII whitespace around
//! each item is accepted, none inside one. A trailing or doubled comma is an error.
//!
//! # Why one sequence number per domain decides
//!
//! Within a replication domain, MariaDB's GTIDs are applied in one order, and with
//! `gtid_strict_mode` (which a cluster that splits reads from writes should run) the sequence
//! number only ever grows along that order: a server that has applied `0-1-42` has applied every
//! GTID of domain 0 up to 42, whichever server id wrote them (a switchover changes the server id,
//! not the order). So a position covers another when, for every domain the other names, it has
//! that domain at an equal or higher sequence number; the server id is carried (it is part of
//! what `MASTER_GTID_WAIT` takes) but never compared. Domains are independent streams: being
//! ahead in one says nothing of another, and a domain the replica has never seen is not covered.
//!
//! # MySQL's GTID sets
//!
//! MySQL's GTIDs are another thing: a set of `source_uuid:interval[:interval...]` items (one
//! per source server, its transactions' numbers as ranges, gaps allowed), compared by set
//! inclusion (`@@gtid_executed`, `WAIT_FOR_EXECUTED_GTID_SET`): the text
//! `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7` says transactions 1 to 5 and 7 of that source.
//! A position holds such items beside MariaDB's (a server prints one kind only); an item is
//! MySQL's when a `:` follows a canonical 36-character UUID. Its intervals are kept sorted and
//! coalesced (`1-5:6-9` is `1-9`), so a position has one form and prints it back; covering is
//! inclusion of every interval, merging is union. Tagged GTIDs (MySQL 8.3's `uuid:tag:1-5`)
//! are an error: such a position is not learned, and a read then goes where it would without
//! one.
//!
//! Sans-IO over bytes that need not be UTF-8; linear in the text's length; imports nothing of
//! the crate.

use std::fmt;

/// The most domains a position may name. MariaDB has no such limit, but a cluster uses a few
/// (one per independent write stream): more than this is not a position worth keeping per
/// session.
pub const MAX_DOMAINS: usize = 1024;

/// One GTID: `domain-server-seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gtid {
    domain: u32,
    server: u32,
    seq: u64,
}

impl Gtid {
    /// Which of two GTIDs of one domain a position keeps: the higher sequence number; on equal
    /// ones (which `gtid_strict_mode` rules out) the higher server id, so that keeping is
    /// independent of the order GTIDs arrive in.
    fn newer(self, other: Gtid) -> Gtid {
        if (other.seq, other.server) > (self.seq, self.server) {
            other
        } else {
            self
        }
    }
}

/// One GTID per replication domain, kept sorted by domain (few domains: a small Vec); and
/// MySQL's per-source sets (see the module's docs), sorted by UUID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPos {
    /// Sorted by `domain`, one per domain.
    gtids: Vec<Gtid>,
    /// Sorted by `uuid`, one per source.
    sets: Vec<SourceSet>,
}

/// The most intervals one MySQL source's set may name in a text.
pub const MAX_INTERVALS: usize = 1024;

/// A MySQL source's transactions: its server UUID, and the numbers executed as inclusive
/// intervals, sorted, disjoint and not adjacent (`1-5:7-9`, never `1-5:6-9`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SourceSet {
    uuid: [u8; 16],
    intervals: Vec<(u64, u64)>,
}

impl SourceSet {
    /// Sorts and coalesces the intervals.
    fn normalize(&mut self) {
        self.intervals.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.intervals.len());
        for &(start, end) in &self.intervals {
            match out.last_mut() {
                Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
                _ => out.push((start, end)),
            }
        }
        self.intervals = out;
    }

    /// Whether every number of `want` is in self (both normalized: each of want's intervals
    /// lies within one of self's).
    fn covers(&self, want: &SourceSet) -> bool {
        want.intervals.iter().all(|&(start, end)| {
            let i = self.intervals.partition_point(|&(_, e)| e < start);
            self.intervals
                .get(i)
                .is_some_and(|&(s, e)| s <= start && end <= e)
        })
    }
}

/// Why a text is not a GTID position, and at which byte offset of the text. At most one byte of
/// the text is echoed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GtidError {
    /// Byte `found` at `at` where `expected` had to be.
    #[error("GTID position: expected {expected} at byte {at}, found '{}'", .found.escape_ascii())]
    Unexpected {
        at: usize,
        expected: &'static str,
        found: u8,
    },
    /// The text ends at `at` inside a GTID.
    #[error("GTID position: the text ends at byte {at}, where {expected} was expected")]
    Ended { at: usize, expected: &'static str },
    /// The number starting at `at` does not fit its field (`u32` for a domain or server id,
    /// `u64` for a sequence number).
    #[error("GTID position: {what} at byte {at} is out of range")]
    Overflow { at: usize, what: &'static str },
    /// No GTID between two commas, after a trailing comma, or before a leading one.
    #[error("GTID position: no GTID at byte {at} (a stray ',')")]
    Empty { at: usize },
    /// The GTID at `at` names one domain more than [`MAX_DOMAINS`] (or, in a MySQL set, one
    /// source more, or one interval more than [`MAX_INTERVALS`] for its source).
    #[error("GTID position: more than {MAX_DOMAINS} domains or sources, or {MAX_INTERVALS} intervals of one source (at byte {at})")]
    TooManyDomains { at: usize },
    /// A MySQL interval at `at` starts at 0 or ends before it starts.
    #[error("GTID set: the interval at byte {at} is empty or starts at 0")]
    Interval { at: usize },
}

impl GtidError {
    /// The byte offset in the parsed text the error is about (at most the text's length).
    pub fn offset(&self) -> usize {
        match *self {
            GtidError::Unexpected { at, .. }
            | GtidError::Ended { at, .. }
            | GtidError::Overflow { at, .. }
            | GtidError::Empty { at }
            | GtidError::TooManyDomains { at }
            | GtidError::Interval { at } => at,
        }
    }
}

const DOMAIN: &str = "a domain id";
const SERVER: &str = "a server id";
const SEQ: &str = "a sequence number";
const DASH: &str = "'-'";
const COMMA: &str = "',' or the end";
const HEX: &str = "a hex digit of a UUID";
const COLON: &str = "':' and an interval";

/// Reads the text byte by byte, skipping whitespace only where asked.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    /// The error for whatever stands at the cursor where `expected` had to be.
    fn wrong(&self, expected: &'static str) -> GtidError {
        match self.peek() {
            Some(found) => GtidError::Unexpected {
                at: self.at,
                expected,
                found,
            },
            None => GtidError::Ended {
                at: self.at,
                expected,
            },
        }
    }

    /// Decimal digits (at least one, leading zeros allowed) that fit in `max`.
    fn number(&mut self, max: u64, what: &'static str) -> Result<u64, GtidError> {
        let start = self.at;
        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return Err(self.wrong(what));
        }
        let mut value: u64 = 0;
        while let Some(b) = self.peek().filter(u8::is_ascii_digit) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b - b'0')))
                .filter(|&v| v <= max)
                .ok_or(GtidError::Overflow { at: start, what })?;
            self.at += 1;
        }
        Ok(value)
    }

    fn dash(&mut self) -> Result<(), GtidError> {
        if self.peek() == Some(b'-') {
            self.at += 1;
            Ok(())
        } else {
            Err(self.wrong(DASH))
        }
    }

    /// Whether a MySQL item starts here: a canonical UUID (dashes at 8, 13, 18, 23) then `:`.
    fn at_source_set(&self) -> bool {
        let rest = &self.text[self.at.min(self.text.len())..];
        rest.len() > 36 && rest[36] == b':' && [8, 13, 18, 23].iter().all(|&i| rest[i] == b'-')
    }

    /// One MySQL `uuid:interval[:interval...]`, no whitespace inside; an interval is `n` or
    /// `n-m` with 1 <= n <= m. Normalized.
    fn source_set(&mut self) -> Result<SourceSet, GtidError> {
        let mut uuid = [0u8; 16];
        let mut nibbles = 0;
        for i in 0..36 {
            if [8, 13, 18, 23].contains(&i) {
                self.dash()?;
                continue;
            }
            let digit = match self.peek() {
                Some(b) if b.is_ascii_hexdigit() => (b as char).to_digit(16).unwrap_or(0) as u8,
                _ => return Err(self.wrong(HEX)),
            };
            uuid[nibbles / 2] |= digit << if nibbles % 2 == 0 { 4 } else { 0 };
            nibbles += 1;
            self.at += 1;
        }
        let mut set = SourceSet {
            uuid,
            intervals: Vec::new(),
        };
        while self.peek() == Some(b':') {
            self.at += 1;
            let at = self.at;
            let start = self.number(u64::MAX, SEQ)?;
            let end = if self.peek() == Some(b'-') {
                self.at += 1;
                self.number(u64::MAX, SEQ)?
            } else {
                start
            };
            if start == 0 || end < start {
                return Err(GtidError::Interval { at });
            }
            if set.intervals.len() >= MAX_INTERVALS {
                return Err(GtidError::TooManyDomains { at });
            }
            set.intervals.push((start, end));
        }
        if set.intervals.is_empty() {
            return Err(self.wrong(COLON));
        }
        set.normalize();
        Ok(set)
    }

    /// One `domain-server-seq`, no whitespace inside.
    fn gtid(&mut self) -> Result<Gtid, GtidError> {
        let domain = self.number(u32::MAX.into(), DOMAIN)?;
        self.dash()?;
        let server = self.number(u32::MAX.into(), SERVER)?;
        self.dash()?;
        let seq = self.number(u64::MAX, SEQ)?;
        Ok(Gtid {
            // Both fit: `number` checked them against u32::MAX.
            domain: u32::try_from(domain).unwrap_or(u32::MAX),
            server: u32::try_from(server).unwrap_or(u32::MAX),
            seq,
        })
    }
}

impl GtidPos {
    /// Parses a position as MariaDB prints it: `domain-server-seq` triples separated by commas,
    /// ASCII whitespace allowed around each; the empty (or all-whitespace) text is the empty
    /// position. A domain named twice (MariaDB never prints that) keeps the higher sequence
    /// number. More than [`MAX_DOMAINS`] domains, a trailing comma, or anything else is an
    /// error that says where.
    pub fn parse(text: &[u8]) -> Result<GtidPos, GtidError> {
        let mut pos = GtidPos::default();
        let mut cursor = Cursor { text, at: 0 };
        cursor.skip_whitespace();
        if cursor.peek().is_none() {
            return Ok(pos);
        }
        loop {
            cursor.skip_whitespace();
            let start = cursor.at;
            if matches!(cursor.peek(), None | Some(b',')) {
                return Err(GtidError::Empty { at: start });
            }
            let added = if cursor.at_source_set() {
                let set = cursor.source_set()?;
                pos.insert_set(set)
            } else {
                let gtid = cursor.gtid()?;
                pos.insert(gtid)
            };
            if !added {
                return Err(GtidError::TooManyDomains { at: start });
            }
            cursor.skip_whitespace();
            match cursor.peek() {
                None => return Ok(pos),
                Some(b',') => cursor.at += 1,
                Some(_) => return Err(cursor.wrong(COMMA)),
            }
        }
    }

    /// Adds `gtid`, keeping the newer of two in one domain; false (and nothing added) when it
    /// would be the domain past [`MAX_DOMAINS`].
    fn insert(&mut self, gtid: Gtid) -> bool {
        match self.gtids.binary_search_by_key(&gtid.domain, |g| g.domain) {
            Ok(i) => {
                self.gtids[i] = self.gtids[i].newer(gtid);
                true
            }
            Err(_) if self.gtids.len() >= MAX_DOMAINS => false,
            Err(i) => {
                self.gtids.insert(i, gtid);
                true
            }
        }
    }

    /// Adds a MySQL source's set, uniting it with what the position has of that source; false
    /// (and nothing added) when it would be the source past [`MAX_DOMAINS`].
    fn insert_set(&mut self, set: SourceSet) -> bool {
        match self.sets.binary_search_by_key(&set.uuid, |s| s.uuid) {
            Ok(i) => {
                let have = &mut self.sets[i];
                have.intervals.extend_from_slice(&set.intervals);
                have.normalize();
                true
            }
            Err(_) if self.sets.len() >= MAX_DOMAINS => false,
            Err(i) => {
                self.sets.insert(i, set);
                true
            }
        }
    }

    /// Whether the position names no GTID.
    pub fn is_empty(&self) -> bool {
        self.gtids.is_empty() && self.sets.is_empty()
    }

    /// Whether it holds MySQL sets (what `WAIT_FOR_EXECUTED_GTID_SET` takes) rather than
    /// MariaDB's domains (`MASTER_GTID_WAIT`'s).
    pub fn is_mysql(&self) -> bool {
        !self.sets.is_empty()
    }

    /// Whether a server at `self` has applied everything `want` names: for every domain of
    /// `want`, self has that domain with seq >= want's (server id ignored: with
    /// `gtid_strict_mode` the sequence orders a domain). The empty position is covered by
    /// every position, and the empty position covers only itself.
    pub fn covers(&self, want: &GtidPos) -> bool {
        let mut have = self.gtids.iter().peekable();
        let domains = want.gtids.iter().all(|w| {
            while have.next_if(|h| h.domain < w.domain).is_some() {}
            have.peek()
                .is_some_and(|h| h.domain == w.domain && h.seq >= w.seq)
        });
        // A MySQL source's set: every number want names of that source, by inclusion.
        domains
            && want.sets.iter().all(|w| {
                self.sets
                    .binary_search_by_key(&w.uuid, |s| s.uuid)
                    .is_ok_and(|i| self.sets[i].covers(w))
            })
    }

    /// Per domain, the higher sequence number (keeps that GTID's server id; on equal sequence
    /// numbers, which `gtid_strict_mode` rules out, the higher server id, so that merging is
    /// commutative). Every domain of either side is kept, even past [`MAX_DOMAINS`] (which
    /// bounds only what one text may name): dropping one would let a position cover less than
    /// it should.
    pub fn merge(&mut self, other: &GtidPos) {
        for set in &other.sets {
            // Past MAX_DOMAINS too, as for domains below.
            match self.sets.binary_search_by_key(&set.uuid, |s| s.uuid) {
                Ok(i) => {
                    let have = &mut self.sets[i];
                    have.intervals.extend_from_slice(&set.intervals);
                    have.normalize();
                }
                Err(i) => self.sets.insert(i, set.clone()),
            }
        }
        if other.gtids.is_empty() {
            return;
        }
        let mut merged = Vec::with_capacity(self.gtids.len().max(other.gtids.len()));
        let (mut a, mut b) = (self.gtids.iter().peekable(), other.gtids.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(&&x), None) => {
                    a.next();
                    x
                }
                (None, Some(&&y)) => {
                    b.next();
                    y
                }
                (Some(&&x), Some(&&y)) => match x.domain.cmp(&y.domain) {
                    std::cmp::Ordering::Less => {
                        a.next();
                        x
                    }
                    std::cmp::Ordering::Greater => {
                        b.next();
                        y
                    }
                    std::cmp::Ordering::Equal => {
                        a.next();
                        b.next();
                        x.newer(y)
                    }
                },
            };
            merged.push(next);
        }
        self.gtids = merged;
    }

    /// How many domains (and MySQL sources) the position names.
    pub fn domains(&self) -> usize {
        self.gtids.len() + self.sets.len()
    }
}

/// `0-1-42,1-2-7`: domains in order, no spaces; what `MASTER_GTID_WAIT` takes, and what
/// [`GtidPos::parse`] reads back to the same position.
impl fmt::Display for GtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut comma = |f: &mut fmt::Formatter<'_>| {
            let sep = if first { "" } else { "," };
            first = false;
            f.write_str(sep)
        };
        for g in &self.gtids {
            comma(f)?;
            write!(f, "{}-{}-{}", g.domain, g.server, g.seq)?;
        }
        // MySQL's form: `uuid:1-5:7`, the UUID in lower case, as `@@gtid_executed` prints it.
        for set in &self.sets {
            comma(f)?;
            for (i, b) in set.uuid.iter().enumerate() {
                if [4, 6, 8, 10].contains(&i) {
                    f.write_str("-")?;
                }
                write!(f, "{b:02x}")?;
            }
            for &(start, end) in &set.intervals {
                if start == end {
                    write!(f, ":{start}")?;
                } else {
                    write!(f, ":{start}-{end}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pos(text: &str) -> GtidPos {
        GtidPos::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn err(text: &str) -> GtidError {
        match GtidPos::parse(text.as_bytes()) {
            Ok(p) => panic!("{text:?} parsed as {p:?}"),
            Err(e) => e,
        }
    }

    fn gtid(domain: u32, server: u32, seq: u64) -> Gtid {
        Gtid {
            domain,
            server,
            seq,
        }
    }

    #[test]
    fn parses_what_mariadb_prints() {
        assert_eq!(
            pos("0-1-42,1-2-7").gtids,
            vec![gtid(0, 1, 42), gtid(1, 2, 7)]
        );
        assert_eq!(pos("0-1-42").gtids, vec![gtid(0, 1, 42)]);
        assert_eq!(
            pos("4294967295-4294967295-18446744073709551615").gtids,
            vec![gtid(u32::MAX, u32::MAX, u64::MAX)]
        );
        // Sorted by domain whatever the text's order.
        assert_eq!(
            pos("5-1-1,0-1-9,2-3-4").gtids,
            vec![gtid(0, 1, 9), gtid(2, 3, 4), gtid(5, 1, 1)]
        );
        // Leading zeros are digits like any other.
        assert_eq!(pos("00-01-007").gtids, vec![gtid(0, 1, 7)]);
    }

    #[test]
    fn empty_text_is_the_empty_position() {
        for text in ["", " ", "\n", " \t\r\n "] {
            let p = pos(text);
            assert!(p.is_empty(), "{text:?}");
            assert_eq!(p.domains(), 0);
            assert_eq!(p.to_string(), "");
            assert_eq!(p, GtidPos::default());
        }
    }

    #[test]
    fn whitespace_around_items() {
        let want = pos("0-1-42,1-2-7");
        for text in [
            "0-1-42,\n1-2-7",
            "0-1-42, 1-2-7",
            "0-1-42 ,1-2-7",
            " 0-1-42,1-2-7\n",
            "\t0-1-42 \r\n,\n 1-2-7 ",
        ] {
            assert_eq!(pos(text), want, "{text:?}");
        }
    }

    #[test]
    fn a_domain_named_twice_keeps_the_higher_sequence_number() {
        assert_eq!(pos("0-1-5,0-2-9,0-3-7").gtids, vec![gtid(0, 2, 9)]);
        assert_eq!(pos("0-2-9,0-1-5").gtids, vec![gtid(0, 2, 9)]);
        // `@@gtid_binlog_state` names every server id of a domain, and reads as
        // `@@gtid_binlog_pos` (both captured from MariaDB 10.11).
        assert_eq!(
            pos("0-7-3,0-9-4,1-9-1,1-7-2,3-7-1"),
            pos("0-9-4,1-7-2,3-7-1")
        );
        // Equal sequence numbers: the higher server id, in either order.
        assert_eq!(pos("0-1-5,0-2-5").gtids, vec![gtid(0, 2, 5)]);
        assert_eq!(pos("0-2-5,0-1-5").gtids, vec![gtid(0, 2, 5)]);
    }

    #[test]
    fn prints_what_master_gtid_wait_takes() {
        for (text, printed) in [
            ("0-1-42,1-2-7", "0-1-42,1-2-7"),
            ("1-2-7 ,\n 0-1-42", "0-1-42,1-2-7"),
            ("007-0-0", "7-0-0"),
            ("", ""),
            (
                "4294967295-4294967295-18446744073709551615",
                "4294967295-4294967295-18446744073709551615",
            ),
        ] {
            let p = pos(text);
            assert_eq!(p.to_string(), printed, "{text:?}");
            assert_eq!(pos(printed), p, "{printed:?}");
        }
    }

    #[test]
    fn garbage_is_an_error_that_says_where() {
        use GtidError::{Empty, Interval};
        let overflow = |at, what| GtidError::Overflow { at, what };
        let ended = |at, expected| GtidError::Ended { at, expected };
        let found = |at, expected, found| GtidError::Unexpected {
            at,
            expected,
            found,
        };
        for (text, want) in [
            ("0-1", ended(3, DASH)),
            ("0-1-", ended(4, SEQ)),
            ("0-", ended(2, SERVER)),
            ("0", ended(1, DASH)),
            ("a-b-c", found(0, DOMAIN, b'a')),
            ("0-b-c", found(2, SERVER, b'b')),
            ("0-1-c", found(4, SEQ, b'c')),
            ("0-1-2x", found(5, COMMA, b'x')),
            ("0-1-2 3-4-5", found(6, COMMA, b'3')),
            ("0-1-2;", found(5, COMMA, b';')),
            ("0 -1-2", found(1, DASH, b' ')),
            ("0- 1-2", found(2, SERVER, b' ')),
            ("-0-1-2", found(0, DOMAIN, b'-')),
            ("+0-1-2", found(0, DOMAIN, b'+')),
            ("0-1--2", found(4, SEQ, b'-')),
            ("0-1-2-3", found(5, COMMA, b'-')),
            ("0-1-99999999999999999999999", overflow(4, SEQ)),
            ("0-1-18446744073709551616", overflow(4, SEQ)),
            ("4294967296-1-2", overflow(0, DOMAIN)),
            ("0-4294967296-2", overflow(2, SERVER)),
            ("0-1-2,", Empty { at: 6 }),
            ("0-1-2, \n", Empty { at: 8 }),
            (",0-1-2", Empty { at: 0 }),
            ("0-1-2,,1-2-3", Empty { at: 6 }),
            ("0-1-2, ,1-2-3", Empty { at: 7 }),
            (",", Empty { at: 0 }),
            // MySQL sets gone wrong: an empty or reversed interval, a tag, no interval.
            (
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:0-5",
                Interval { at: 37 },
            ),
            (
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:5-4",
                Interval { at: 37 },
            ),
            (
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:tag:1-5",
                found(37, SEQ, b't'),
            ),
            (
                "3e11fa47-71ca-11e1-9e33-c80aa942956g:1-5",
                found(35, HEX, b'g'),
            ),
            (
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5 :7",
                found(41, COMMA, b':'),
            ),
        ] {
            assert_eq!(err(text), want, "{text:?}");
            assert!(err(text).offset() <= text.len(), "{text:?}");
        }
    }

    /// MySQL 8's `@@gtid_executed` as its manual prints it (no MySQL server runs here: these
    /// are fixtures written from that documentation), a newline after each comma.
    #[test]
    fn mysql_gtid_sets_parse_cover_merge_and_print_as_gtid_executed_does() {
        let a = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let b = "8a94f357-aab4-11df-86ab-c80aa9429562";
        let executed = pos(&format!("{a}:1-77,\n{b}:1-5:11-18"));
        assert!(executed.is_mysql() && !executed.is_empty());
        assert_eq!(executed.domains(), 2);
        assert_eq!(executed.to_string(), format!("{a}:1-77,{b}:1-5:11-18"));
        // Upper case and unordered, adjacent and overlapping intervals: one form.
        let messy = pos(&format!(
            "{b}:11-12:13-18:1-5:3,{}:5-77:1-4",
            a.to_uppercase()
        ));
        assert_eq!(messy, executed);
        // Inclusion, interval by interval.
        for (want, covered) in [
            (format!("{a}:77"), true),
            (format!("{a}:1-77"), true),
            (format!("{a}:78"), false),
            (format!("{b}:5"), true),
            (format!("{b}:6"), false),
            (format!("{b}:4-11"), false),
            (format!("{b}:12-18,{a}:3"), true),
            ("f00dcafe-0000-0000-0000-000000000000:1".to_owned(), false),
            (String::new(), true),
        ] {
            assert_eq!(executed.covers(&pos(&want)), covered, "{want}");
        }
        // Merging is union: a session's write (`b:19`) and then more.
        let mut written = pos(&format!("{b}:19"));
        written.merge(&pos(&format!("{b}:20-21,{a}:78")));
        assert_eq!(written.to_string(), format!("{a}:78,{b}:19-21"));
        let mut all = executed.clone();
        all.merge(&written);
        assert_eq!(all.to_string(), format!("{a}:1-78,{b}:1-5:11-21"));
        assert!(all.covers(&executed) && all.covers(&written));
        assert!(!executed.covers(&written));
    }

    #[test]
    fn errors_echo_at_most_a_byte() {
        let long = format!("0-1-{}", "9".repeat(10_000));
        let message = err(&long).to_string();
        assert_eq!(
            message,
            "GTID position: a sequence number at byte 4 is out of range"
        );
        assert_eq!(
            err("0-1-2\u{7f}garbage garbage").to_string(),
            "GTID position: expected ',' or the end at byte 5, found '\\x7f'"
        );
        assert_eq!(
            err("0-1").to_string(),
            "GTID position: the text ends at byte 3, where '-' was expected"
        );
        assert_eq!(
            err("0-1-2,").to_string(),
            "GTID position: no GTID at byte 6 (a stray ',')"
        );
    }

    #[test]
    fn at_most_max_domains() {
        let text = |n: u32| {
            (0..n)
                .map(|d| format!("{d}-1-{d}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let full = pos(&text(1024));
        assert_eq!(full.domains(), MAX_DOMAINS);
        assert_eq!(pos(&full.to_string()), full);
        let over = text(1025);
        let at = over.rfind(',').expect("a comma") + 1;
        assert_eq!(err(&over), GtidError::TooManyDomains { at });
        // A domain named again is not one more.
        assert_eq!(pos(&format!("{},0-2-5000", text(1024))).domains(), 1024);
    }

    #[test]
    fn covers_truth_table() {
        let empty = GtidPos::default();
        let p = pos("0-1-10,1-1-5");
        for (have, want, covered) in [
            (&empty, &empty, true),
            (&p, &empty, true),
            (&empty, &p, false),
            (&empty, &pos("0-1-0"), false),
            (&p, &p, true),
            // lower, equal, higher sequence numbers
            (&p, &pos("0-1-9"), true),
            (&p, &pos("0-1-10"), true),
            (&p, &pos("0-1-11"), false),
            (&p, &pos("0-1-9,1-1-5"), true),
            (&p, &pos("0-1-9,1-1-6"), false),
            // the server id is not compared
            (&p, &pos("0-7-10"), true),
            (&p, &pos("0-7-11"), false),
            (&pos("0-9-10"), &pos("0-1-10"), true),
            // a domain missing on either side
            (&p, &pos("2-1-1"), false),
            (&p, &pos("2-1-0"), false),
            (&p, &pos("0-1-1,2-1-1"), false),
            (&pos("0-1-10"), &p, false),
            (&pos("1-1-5"), &p, false),
            (&pos("0-1-10,1-1-5,2-1-1"), &p, true),
            // ahead in one domain says nothing of another
            (&pos("0-1-1000,1-1-4"), &p, false),
        ] {
            assert_eq!(have.covers(want), covered, "{have} covers {want}");
        }
    }

    #[test]
    fn merge_keeps_the_higher_sequence_number_per_domain() {
        let mut p = pos("0-1-10,2-1-3");
        p.merge(&pos("0-2-12,1-1-1,2-5-1"));
        assert_eq!(p.to_string(), "0-2-12,1-1-1,2-1-3");
        p.merge(&GtidPos::default());
        assert_eq!(p.to_string(), "0-2-12,1-1-1,2-1-3");
        let mut e = GtidPos::default();
        e.merge(&p);
        assert_eq!(e, p);
    }

    #[test]
    fn merge_is_commutative_associative_and_idempotent_on_fixtures() {
        let all = [
            "",
            "0-1-1",
            "0-2-1",
            "0-1-5,1-1-1",
            "1-3-9,4-1-1",
            "0-9-3,1-1-1,4-1-2",
        ]
        .map(pos);
        for a in &all {
            assert_eq!(&merged(a, a), a);
            for b in &all {
                assert_eq!(merged(a, b), merged(b, a), "{a} {b}");
                for c in &all {
                    assert_eq!(merged(&merged(a, b), c), merged(a, &merged(b, c)));
                }
            }
        }
    }

    fn merged(a: &GtidPos, b: &GtidPos) -> GtidPos {
        let mut m = a.clone();
        m.merge(b);
        m
    }

    /// Positions over few domains and few sequence numbers (so domains and sequence numbers
    /// meet), sometimes anywhere in range.
    fn position() -> impl Strategy<Value = GtidPos> {
        let domain = prop_oneof![4 => 0u32..6, 1 => any::<u32>()];
        let server = prop_oneof![4 => 0u32..4, 1 => any::<u32>()];
        let seq = prop_oneof![4 => 0u64..6, 1 => any::<u64>()];
        // MySQL sources: three UUIDs, intervals of small and any numbers.
        let start = prop_oneof![4 => 1u64..20, 1 => 1u64..u64::MAX];
        let interval = (start, 0u64..6).prop_map(|(s, len)| (s, s.saturating_add(len)));
        let set = (0u8..3, prop::collection::vec(interval, 1..5));
        (
            prop::collection::vec((domain, server, seq), 0..8),
            prop::collection::vec(set, 0..3),
        )
            .prop_map(|(gtids, sets)| {
                let mut p = GtidPos::default();
                for (domain, server, seq) in gtids {
                    assert!(p.insert(gtid(domain, server, seq)));
                }
                for (source, intervals) in sets {
                    let mut set = SourceSet {
                        uuid: [source; 16],
                        intervals,
                    };
                    set.normalize();
                    assert!(p.insert_set(set));
                }
                p
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn parse_never_panics(text in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Err(e) = GtidPos::parse(&text) {
                prop_assert!(e.offset() <= text.len());
                prop_assert!(e.to_string().len() < 100, "{e}");
            }
        }

        #[test]
        fn parse_never_panics_on_gtid_bytes(
            text in prop::collection::vec(prop::sample::select(b"0129-, \n\tx".to_vec()), 0..40),
        ) {
            match GtidPos::parse(&text) {
                Ok(p) => prop_assert_eq!(GtidPos::parse(p.to_string().as_bytes()), Ok(p)),
                Err(e) => prop_assert!(e.offset() <= text.len()),
            }
        }

        #[test]
        fn display_round_trips(p in position()) {
            let printed = p.to_string();
            prop_assert_eq!(GtidPos::parse(printed.as_bytes()), Ok(p.clone()));
            // Spaced out as some outputs print it, and in reverse order.
            let spaced = printed.replace(',', " ,\n ");
            prop_assert_eq!(GtidPos::parse(format!(" {spaced}\n").as_bytes()), Ok(p.clone()));
            let reversed: Vec<&str> = printed.split(',').rev().collect();
            prop_assert_eq!(GtidPos::parse(reversed.join(",").as_bytes()), Ok(p));
        }

        #[test]
        fn merge_covers_both(a in position(), b in position()) {
            let m = merged(&a, &b);
            prop_assert!(m.covers(&a));
            prop_assert!(m.covers(&b));
            prop_assert_eq!(m.domains(), merged(&b, &a).domains());
            // a covers b exactly when merging b in changes no sequence number of a.
            prop_assert_eq!(a.covers(&b), a.covers(&m));
        }

        #[test]
        fn merge_is_commutative_associative_and_idempotent(
            a in position(),
            b in position(),
            c in position(),
        ) {
            prop_assert_eq!(merged(&a, &a), a.clone());
            prop_assert_eq!(merged(&a, &b), merged(&b, &a));
            prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
        }

        #[test]
        fn covers_is_reflexive_and_transitive(a in position(), b in position(), c in position()) {
            prop_assert!(a.covers(&a));
            prop_assert!(a.covers(&GtidPos::default()));
            prop_assert_eq!(GtidPos::default().covers(&a), a.is_empty());
            if a.covers(&b) && b.covers(&c) {
                prop_assert!(a.covers(&c));
            }
            // A chain that always holds: c, c merged with b, and that merged with a.
            let bc = merged(&b, &c);
            let abc = merged(&a, &bc);
            prop_assert!(abc.covers(&bc) && bc.covers(&c) && abc.covers(&c));
        }
    }
}
