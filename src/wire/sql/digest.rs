//! Statement normalization and its 64-bit digest (the rules are in the parent module's doc).
//!
//! One printer produces the normalized text piece by piece and hands each piece to a sink:
//! [`normalize`] appends the pieces to a `String`, [`digest`] feeds them to a streaming hash.
//! The digest is therefore the hash of exactly the bytes `normalize` returns, computed without
//! allocating, and `digest(normalize(x)) == digest(x)` follows from the printer being idempotent.
//! Work is linear in `max_len`: list and sign look-aheads stop at the first token that does not
//! fit, and the printer never revisits a token it has passed.
//!
//! # Three ways to the same digest
//!
//! The digest runs on every `COM_QUERY` and `COM_STMT_PREPARE` text, so what it costs is paid
//! per statement. [`digest`] takes, in order:
//!
//! 0. (for a caller that keeps one, as a session does) the shapes it sent lately
//!    (`recent.rs`): the text compared with an earlier one of its shape directly, without a lock;
//! 1. the per-thread cache by shape (`cache.rs`): a text that repeats an earlier one but for its
//!    numbers (`id=5032`) gets that one's digest, for one table look-up a byte;
//! 2. the fast path (`fast.rs`): the common statement read and printed in one tight pass;
//! 3. the general printer below, where the fast path bails (comments, backticks, variables,
//!    non-ASCII words, hex and bit literals, ...), and always for [`normalize`].
//!
//! All three give the same bytes to the same hash; `tests.rs` holds them to the first
//! implementation. Instructions per call, counted by callgrind on sysbench's statements with a
//! new number each call (`benches/digest_instructions.sh`, release build):
//!
//! | statement | before | cache hit | a new shape |
//! |---|---:|---:|---:|
//! | `SELECT c FROM sbtest1 WHERE id=#` | 3,386 | 478 | 2,515 |
//! | `SELECT c FROM sbtest1 WHERE id BETWEEN # AND #` | 4,333 | 659 | 3,236 |
//! | `SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN # AND # ORDER BY c` | 6,095 | 770 | 4,484 |
//! | `BEGIN` | 588 | 252 | 252 |
//! | a Hibernate `select user0_.id as id1_0_, ...` (160 bytes) | 13,009 | 1,899 | 8,985 |
//!
//! ("a new shape": the table name numbered at every call, so the cache misses every time and
//! the fast path digests; the shape and the look-up cost a few hundred more than the fast path
//! alone. "before": the general printer alone, commit c9c3396.)

use std::fmt;

use super::keywords::{CALL_PAREN, OPERAND};
use super::token::{is_ident, is_space, tokens, Token, TokenKind, Tokens};

mod cache;
pub use cache::DigestCache;
mod fast;
mod recent;
pub use recent::RecentShapes;
#[cfg(test)]
mod tests;

/// A statement's digest: the hash of its normalized text. Displayed as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Digest(pub u64);

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The digest of the normalized form of the first `max_len` bytes of `text`, without allocating.
pub fn digest(text: &[u8], max_len: usize) -> Digest {
    compute(text.get(..max_len).unwrap_or(text)).0
}

/// [`digest`], answered from `cache` when a text of the same shape was digested there before
/// (see `cache.rs`); the same digest either way.
pub fn digest_cached(cache: &mut DigestCache, text: &[u8], max_len: usize) -> Digest {
    digest_shaped(cache, text, max_len).0
}

/// [`digest_cached`], the shape of `text` remembered in `recent` when every text of it has this
/// digest (ask [`RecentShapes::get`] first: it needs no cache).
pub fn digest_remembered(
    recent: &mut RecentShapes,
    cache: &mut DigestCache,
    text: &[u8],
    max_len: usize,
) -> Digest {
    let (d, shaped) = digest_shaped(cache, text, max_len);
    if shaped {
        recent.remember(text, d);
    }
    d
}

/// [`digest_cached`], and true if every text of the shape of `text` has this digest.
fn digest_shaped(cache: &mut DigestCache, text: &[u8], max_len: usize) -> (Digest, bool) {
    if text.len() <= max_len {
        return cache.digest(text, compute);
    }
    (digest(text, max_len), false)
}

/// The digest of `text` (already cut at `max_len`): by the fast path, or by the general printer
/// where it bails. True if the digest cache may keep it by the text's shape (see `cache.rs`).
fn compute(text: &[u8]) -> (Digest, bool) {
    let mut hasher = Hasher::new();
    if let Ok(digit_names) = fast::print(text, &mut hasher) {
        return (Digest(hasher.finish()), !digit_names);
    }
    let mut hasher = Hasher::new();
    print(text, text.len(), &mut hasher);
    (Digest(hasher.finish()), false)
}

/// The normalized form of the first `max_len` bytes of `text` (bytes that are not UTF-8 become
/// U+FFFD).
pub fn normalize(text: &[u8], max_len: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_len) + 16);
    print(text, max_len, &mut out);
    out
}

/// The digest of the normalized form of `text` with its ASCII letters lower-cased: equal for
/// two texts that normalize alike but for the case of their letters (query rules compare
/// statements case-blind), without allocating.
pub fn digest_folded(text: &[u8], max_len: usize) -> u64 {
    let text = text.get(..max_len).unwrap_or(text);
    let mut fast_sink = Folded(Hasher::new());
    if fast::print(text, &mut fast_sink).is_ok() {
        return fast_sink.0.finish();
    }
    folded_by_printer(text)
}

/// [`digest_folded`] by the general printer alone (the fast path prints the same bytes).
fn folded_by_printer(text: &[u8]) -> u64 {
    let mut sink = Folded(Hasher::new());
    print(text, text.len(), &mut sink);
    sink.0.finish()
}

/// `w` with every ASCII capital among its bytes lower-cased, all eight at once: a byte from
/// `A` to `Z` has 0x20 set, every other byte is left as it is.
#[inline]
fn lower_word(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let seven = w & LOW7;
    // Per byte, no carry out of it (at most 0x7f + 0x3f): the high bit says `>= 'A'`, and
    // `> 'Z'` on the second line.
    let from_a = seven + 0x3f3f_3f3f_3f3f_3f3f;
    let past_z = seven + 0x2525_2525_2525_2525;
    let capitals = from_a & !past_z & !w & HIGH;
    w | (capitals >> 2)
}

impl fast::Out for Folded {
    #[inline]
    fn word(&mut self, w: u64, n: usize) {
        Hasher::word(&mut self.0, lower_word(w), n);
    }

    #[inline]
    fn bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0.byte(b.to_ascii_lowercase());
        }
    }
}

/// A hashing sink that lower-cases every piece.
struct Folded(Hasher);

impl Sink for Folded {
    fn put(&mut self, s: &str) {
        self.0.put_lower(s);
    }

    fn put_lower(&mut self, s: &str) {
        self.0.put_lower(s);
    }

    fn put_ascii(&mut self, bytes: &[u8], _lower: bool) -> bool {
        self.0.put_ascii(bytes, true)
    }
}

/// Where the printed pieces go.
trait Sink {
    fn put(&mut self, s: &str);
    /// `s` with ASCII letters lower-cased.
    fn put_lower(&mut self, s: &str);
    /// Takes `bytes` (lower-cased with `lower`) as they are if this sink can without checking
    /// them for UTF-8 (ASCII prints the same either way); false: pass them as text.
    fn put_ascii(&mut self, _bytes: &[u8], _lower: bool) -> bool {
        false
    }
}

impl Sink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }

    fn put_lower(&mut self, s: &str) {
        let start = self.len();
        self.push_str(s);
        if let Some(added) = self.get_mut(start..) {
            added.make_ascii_lowercase();
        }
    }
}

/// A streaming 64-bit hash: the bytes, zero-padded to a multiple of 8, are read as
/// little-endian 64-bit words, each folded into the state with a 64×64→128-bit multiply; the
/// length and a final mix end it. Only the byte sequence matters, not how it was split into
/// pieces (the printer hands over many short ones).
///
/// The bytes not folded yet wait in one register-sized word: a piece of up to 8 bytes (`?`, a
/// space and a keyword, most names) is one shift and or, and a fold when the word fills, with
/// no buffer to fill and clear. (The first version gathered 32-byte blocks a byte at a time;
/// `reference::Hasher` in the tests keeps it, and the digests are the same.)
struct Hasher {
    state: u64,
    /// The bytes not folded yet, the first in the lowest byte.
    pending: u64,
    /// How many bytes `pending` holds (0 to 7).
    held: usize,
    len: u64,
}

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
const SEED: u64 = 0x2d35_8dcc_aa6c_78a5;

fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline]
fn mix(state: u64, w: u64) -> u64 {
    fold_mul(state ^ w, MUL) ^ state.rotate_left(23)
}

impl Hasher {
    fn new() -> Self {
        Hasher {
            state: SEED,
            pending: 0,
            held: 0,
            len: 0,
        }
    }

    /// The first `n` bytes (1 to 8) of the little-endian `w`, whose other bytes are zero.
    #[inline]
    fn word(&mut self, w: u64, n: usize) {
        self.len += n as u64;
        let held = self.held;
        self.pending |= w << (8 * held);
        let total = held + n;
        if total >= 8 {
            self.state = mix(self.state, self.pending);
            // What did not fit; nothing when `pending` was empty.
            self.pending = w.checked_shr(64 - 8 * held as u32).unwrap_or(0);
            self.held = total - 8;
        } else {
            self.held = total;
        }
    }

    #[inline]
    fn byte(&mut self, b: u8) {
        self.word(u64::from(b), 1);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            if let Some(c) = chunk.first_chunk::<8>() {
                self.word(u64::from_le_bytes(*c), 8);
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = 0u64;
            for (i, &b) in rest.iter().enumerate() {
                w |= u64::from(b) << (8 * i);
            }
            self.word(w, rest.len());
        }
    }

    fn finish(self) -> u64 {
        let mut state = self.state;
        if self.held > 0 {
            state = mix(state, self.pending);
        }
        let mut h = mix(state, self.len.rotate_left(32) ^ 0x5bd1_e995);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

impl fast::Out for Hasher {
    #[inline]
    fn word(&mut self, w: u64, n: usize) {
        Hasher::word(self, w, n);
    }

    #[inline]
    fn bytes(&mut self, bytes: &[u8]) {
        Hasher::bytes(self, bytes);
    }
}

impl Sink for Hasher {
    fn put(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn put_lower(&mut self, s: &str) {
        for b in s.bytes() {
            self.byte(b.to_ascii_lowercase());
        }
    }

    fn put_ascii(&mut self, bytes: &[u8], lower: bool) -> bool {
        if !bytes.is_ascii() {
            return false;
        }
        if lower {
            for &b in bytes {
                self.byte(b.to_ascii_lowercase());
            }
        } else {
            self.bytes(bytes);
        }
        true
    }
}

/// How a printed piece spaces itself from its neighbours, and what it means for the next
/// token's reading.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Piece {
    /// `(`.
    Open,
    /// `)`, and `(...)` (a collapsed literal list) on its right side.
    Close,
    /// `(...)`.
    List,
    Comma,
    Semicolon,
    Dot,
    /// The `@` of `'user'@'host'`: no space on either side.
    At,
    /// `?`: any literal.
    Value,
    /// `NULL` kept as a keyword (after `IS`, `NOT`).
    NullKeyword,
    /// A name: identifier or quoted identifier (a `(` right after it is a call).
    Name,
    /// A keyword with its flags, and whether it is `IS` / `NOT` (a `NULL` after them stays).
    Keyword {
        flags: u8,
        keeps_null: bool,
    },
    /// Any other operator.
    Operator,
    /// A variable.
    Variable,
    /// Hints, executable comments, other bytes.
    Opaque,
}

impl Piece {
    /// A `+`/`-` after this piece is a sign (unary), not a subtraction.
    const fn takes_sign(self) -> bool {
        match self {
            Piece::Open
            | Piece::Comma
            | Piece::Semicolon
            | Piece::Dot
            | Piece::At
            | Piece::Operator
            | Piece::Opaque => true,
            Piece::Keyword { flags, .. } => flags & OPERAND == 0,
            Piece::Close
            | Piece::List
            | Piece::Value
            | Piece::NullKeyword
            | Piece::Name
            | Piece::Variable => false,
        }
    }

    /// An `@` right after this piece is the `@` of `user@host`.
    fn glues_at(self) -> bool {
        matches!(self, Piece::Value | Piece::NullKeyword | Piece::Name)
    }
}

/// The spacing rule: one space between pieces, none after `(`, `.` and a user@host `@`, none
/// before `)`, `,`, `;`, `.` (except after a variable) and that `@`, and none between a name or a function/type keyword
/// and the `(` (or `(...)`) right after it.
const fn space_between(prev: Piece, next: Piece) -> bool {
    if matches!(prev, Piece::Open | Piece::Dot | Piece::At) {
        return false;
    }
    if matches!(prev, Piece::Variable) && matches!(next, Piece::Dot) {
        // `@x.` would read back as the variable `x.`.
        return true;
    }
    match next {
        Piece::Close | Piece::Comma | Piece::Semicolon | Piece::Dot | Piece::At => false,
        Piece::Open | Piece::List => {
            !matches!(prev, Piece::Name)
                && !matches!(prev, Piece::Keyword { flags, .. } if flags & CALL_PAREN != 0)
        }
        _ => true,
    }
}

struct Printer<'s, S: Sink> {
    sink: &'s mut S,
    last: Option<Piece>,
}

impl<S: Sink> Printer<'_, S> {
    fn start(&mut self, piece: Piece) {
        if let Some(prev) = self.last {
            if space_between(prev, piece) {
                self.sink.put(" ");
            }
        }
        self.last = Some(piece);
    }

    /// A bare name. One starting with a digit after a `.` that qualifies nothing (`x. 1a`) is
    /// kept apart from it: `.1a` would read back as the number `.1` and the name `a`.
    fn start_name(&mut self, name: &[u8], after_qualifier: bool) {
        if self.last == Some(Piece::Dot)
            && !after_qualifier
            && name.first().is_some_and(u8::is_ascii_digit)
        {
            self.sink.put(" ");
        }
        self.start(Piece::Name);
    }

    fn piece(&mut self, piece: Piece, s: &str) {
        self.start(piece);
        self.sink.put(s);
    }

    fn takes_sign(&self) -> bool {
        self.last.is_none_or(Piece::takes_sign)
    }

    /// Raw bytes, invalid UTF-8 replaced by U+FFFD.
    fn lossy(&mut self, bytes: &[u8], lower: bool) {
        if self.sink.put_ascii(bytes, lower) {
            return;
        }
        if let Ok(s) = std::str::from_utf8(bytes) {
            if lower {
                self.sink.put_lower(s);
            } else {
                self.sink.put(s);
            }
            return;
        }
        for chunk in bytes.utf8_chunks() {
            if lower {
                self.sink.put_lower(chunk.valid());
            } else {
                self.sink.put(chunk.valid());
            }
            if !chunk.invalid().is_empty() {
                self.sink.put("\u{fffd}");
            }
        }
    }

    /// `bytes` with each whitespace run as one space and none at either end.
    fn collapsed(&mut self, bytes: &[u8]) {
        let mut first = true;
        for run in bytes.split(|&b| is_space(b)).filter(|r| !r.is_empty()) {
            if !first {
                self.sink.put(" ");
            }
            first = false;
            self.lossy(run, false);
        }
    }

    fn token(
        &mut self,
        tok: Token<'_>,
        keyword: Option<(&'static str, u8)>,
        after_qualifier: bool,
        before_qualifier: bool,
    ) {
        match tok.kind {
            TokenKind::Keyword => {
                let (name, flags) = keyword.unwrap_or(("", 0));
                let keeps_null = name == "IS" || name == "NOT";
                self.piece(Piece::Keyword { flags, keeps_null }, name);
            }
            TokenKind::Identifier => {
                self.start_name(tok.text, after_qualifier);
                self.lossy(tok.text, false);
            }
            TokenKind::QuotedIdentifier => {
                let inner = unquote(tok.text);
                if bare_ok(inner, after_qualifier, before_qualifier) {
                    self.start_name(inner, after_qualifier);
                    self.lossy(inner, false);
                } else {
                    self.start(Piece::Name);
                    self.sink.put("`");
                    self.lossy(inner, false);
                    self.sink.put("`");
                }
            }
            TokenKind::Null => {
                if matches!(
                    self.last,
                    Some(Piece::Keyword {
                        keeps_null: true,
                        ..
                    })
                ) {
                    self.piece(Piece::NullKeyword, "NULL");
                } else {
                    self.piece(Piece::Value, "?");
                }
            }
            TokenKind::String
            | TokenKind::Number
            | TokenKind::HexOrBitLiteral
            | TokenKind::Placeholder => self.piece(Piece::Value, "?"),
            TokenKind::Operator => {
                let piece = match tok.op() {
                    b'(' => Piece::Open,
                    b')' => Piece::Close,
                    b',' => Piece::Comma,
                    b';' => Piece::Semicolon,
                    b'.' => Piece::Dot,
                    b'@' if self.last.is_some_and(Piece::glues_at) => Piece::At,
                    _ => Piece::Operator,
                };
                self.start(piece);
                self.lossy(tok.text, false);
            }
            TokenKind::Variable => {
                self.start(Piece::Variable);
                self.variable(tok.text);
            }
            TokenKind::Hint | TokenKind::ExecutableComment => {
                self.start(Piece::Opaque);
                self.special_comment(tok.text);
            }
            TokenKind::Other | TokenKind::Unsure => {
                self.start(Piece::Opaque);
                self.lossy(tok.text, false);
            }
        }
    }

    /// `@name` / `@@scope.name` lower-cased (both are case-insensitive); a quoted user variable
    /// name is printed bare when it can be.
    fn variable(&mut self, text: &[u8]) {
        let inner = match text {
            [b'@', q @ (b'\'' | b'"' | b'`'), rest @ ..] => {
                let body = rest.strip_suffix(&[*q]).unwrap_or(rest);
                Some(body).filter(|b| {
                    b.first().is_some_and(|&c| is_ident(c))
                        && b.iter().all(|&c| is_ident(c) || c == b'.')
                })
            }
            _ => None,
        };
        match inner {
            Some(name) => {
                self.sink.put("@");
                self.lossy(name, true);
            }
            None => self.lossy(text, true),
        }
    }

    /// `/*+ hint */`, `/*!50100 text */`, `/*M!100100 text */`: the opener (with its version
    /// digits), the text whitespace-collapsed, ` */`.
    fn special_comment(&mut self, text: &[u8]) {
        let opener = if text.starts_with(b"/*M!") {
            4
        } else {
            3.min(text.len())
        };
        let (head, rest) = text.split_at(opener);
        let digits = if head.ends_with(b"!") {
            rest.iter().take_while(|b| b.is_ascii_digit()).count()
        } else {
            0
        };
        let (version, body) = rest.split_at(digits);
        let body = body.strip_suffix(b"*/").unwrap_or(body);
        self.lossy(head, false);
        self.lossy(version, false);
        if body.iter().any(|&b| !is_space(b)) {
            self.sink.put(" ");
            self.collapsed(body);
        }
        self.sink.put(" */");
    }
}

/// The inside of a `` `quoted` `` name (doubled backticks stay doubled).
fn unquote(text: &[u8]) -> &[u8] {
    let inner = text.strip_prefix(b"`").unwrap_or(text);
    // An unterminated name has no closing backtick; a terminated one ends in an odd run of them.
    let run = inner.iter().rev().take_while(|&&b| b == b'`').count();
    if run % 2 == 1 {
        inner.get(..inner.len() - 1).unwrap_or_default()
    } else {
        inner
    }
}

/// True if a quoted name reads back as the same name without its backticks: identifier bytes
/// only, and (unless a qualifier's `.` makes it a name anyway) one identifier token, not a
/// number or a keyword.
fn bare_ok(name: &[u8], after_qualifier: bool, before_qualifier: bool) -> bool {
    if name.is_empty() || !name.iter().all(|&b| is_ident(b)) {
        return false;
    }
    if after_qualifier || (before_qualifier && !name[0].is_ascii_digit()) {
        return true;
    }
    matches!(tokens(name).next(),
        Some(t) if t.kind == TokenKind::Identifier && t.text.len() == name.len())
}

/// Prints the normalized form of `text[..max_len]` into `sink`.
fn print<S: Sink>(text: &[u8], max_len: usize, sink: &mut S) {
    let text = text.get(..max_len).unwrap_or(text);
    let mut p = Printer { sink, last: None };
    let mut toks = tokens(text);
    // Set while the run of signs (or semicolons) being printed is known not to fold (not to be
    // trailing), so a long run is looked through once, not once per sign.
    let mut signs_checked = false;
    let mut semicolons_checked = false;
    loop {
        let after_qualifier = toks.after_qualifier();
        let Some(tok) = toks.next() else { break };
        let op = tok.op();
        let is_sign = op == b'-' || op == b'+';
        let is_semicolon = op == b';';
        signs_checked &= is_sign;
        semicolons_checked &= is_semicolon;
        if op == b'(' {
            let mut look = toks.clone();
            if literal_list(&mut look) {
                toks = look;
                // A run of such lists (`VALUES (1, 2), (3, 4)`) is one.
                loop {
                    let mut more = toks.clone();
                    let comma = more.next().is_some_and(|t| t.op() == b',');
                    let open = comma && more.next().is_some_and(|t| t.op() == b'(');
                    if !(open && literal_list(&mut more)) {
                        break;
                    }
                    toks = more;
                }
                p.piece(Piece::List, "(...)");
                continue;
            }
        } else if is_sign && !signs_checked && p.takes_sign() {
            let mut look = toks.clone();
            let signed_literal = loop {
                match look.next() {
                    Some(t) if matches!(t.op(), b'-' | b'+') => continue,
                    Some(t) => break t.is_literal(),
                    None => break false,
                }
            };
            if signed_literal {
                toks = look;
                p.piece(Piece::Value, "?");
                continue;
            }
            signs_checked = true;
        } else if is_semicolon && !semicolons_checked {
            // Trailing semicolons (and comments after them) are not printed.
            if toks.clone().all(|t| t.op() == b';') {
                break;
            }
            semicolons_checked = true;
        }
        // A quoted name qualifying the next one is printed glued to its `.`, where the
        // tokenizer reads any word as a name: `` `status`.x `` is `status.x`.
        let before_qualifier = tok.kind == TokenKind::QuotedIdentifier && {
            let mut look = toks.clone();
            look.next().is_some_and(|t| t.op() == b'.')
                && look.next().is_some_and(|t| {
                    matches!(t.kind, TokenKind::Identifier | TokenKind::QuotedIdentifier)
                        || t.op() == b'*'
                })
        };
        p.token(tok, toks.keyword(), after_qualifier, before_qualifier);
    }
}

/// After a `(`: true (and `toks` past the `)`) if the list holds only literals, each perhaps
/// signed, separated by commas.
fn literal_list(toks: &mut Tokens<'_>) -> bool {
    loop {
        let mut t = toks.next();
        while t.is_some_and(|t| matches!(t.op(), b'-' | b'+')) {
            t = toks.next();
        }
        if !t.is_some_and(|t| t.is_literal()) {
            return false;
        }
        match toks.next() {
            Some(t) if t.op() == b')' => return true,
            Some(t) if t.op() == b',' => {}
            _ => return false,
        }
    }
}
