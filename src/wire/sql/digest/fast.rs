//! The digest's fast path: the common statement (ASCII words, numbers, strings, `?`, operators,
//! literal lists) printed in one tight pass, or [`Bail`] as soon as the text holds anything
//! else, and the general printer starts over.
//!
//! Why a second printer: the general one reads through the [`Tokens`](super::Tokens) iterator,
//! which serves every reading the server may take (executable comments by version, `sql_mode`
//! quoting, multibyte character sets) and so carries per-token state and checks the digest's
//! own reading never needs; and it hands every piece to the sink through UTF-8 checks. On
//! sysbench's 36-byte point select that came to ~3,300 instructions per digest, most of it per
//! token, not per byte. This path knows only the digest's reading; finds a word's end eight bytes
//! at a time and looks it up in the keyword index by two folded 8-byte words (`keywords.rs`);
//! spaces pieces by a table built at compile time from the general printer's rule; and hands the
//! hash each piece as one 64-bit word. Measured by `examples/digest_instructions.rs`: about half
//! the instructions of the general printer on sysbench's statements (see `digest.rs`).
//!
//! Why it cannot change a digest: it prints with the general printer's own spacing rules
//! ([`Piece`], [`space_between`]) and follows `print`'s look-aheads (literal lists, signs,
//! trailing semicolons) step by step, over a lexer that agrees with the general tokenizer on
//! every token it returns; whatever that lexer is not sure to read alike (comments, backticks,
//! variables, `.5`, `0x1F`, `1e5`, `X'..'`, introducers, words glued to a quote, non-ASCII in
//! a word, control bytes) bails, before anything is decided. The unit tests (`tests.rs`) compare
//! its output with the general printer's on the corpus and on random statements, and the
//! digests with those of the first implementation, kept there.

use super::super::keywords::{self, KEYWORDS};
use super::{space_between, Piece};

/// The text holds something only the general printer reads.
#[derive(Debug)]
pub(super) struct Bail;

/// Where the printed bytes go: the digest's hash, or (in tests) a buffer.
pub(super) trait Out {
    /// The first `n` bytes (1 to 8) of the little-endian `w`, whose other bytes are zero.
    fn word(&mut self, w: u64, n: usize);
    fn bytes(&mut self, bytes: &[u8]);
}

#[cfg(test)]
impl Out for Vec<u8> {
    fn word(&mut self, w: u64, n: usize) {
        assert!((1..=8).contains(&n) && (n == 8 || w >> (8 * n) == 0));
        self.extend_from_slice(w.to_le_bytes().get(..n).unwrap_or_default());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Byte classes. `WORD` and `DIGIT` continue a word; `HIGH` (>= 0x80) does too in the servers'
/// lexers but would need UTF-8 care when printed, so a word holding one bails.
const OTHER: u8 = 0;
const SPACE: u8 = 1;
const WORD: u8 = 2;
const DIGIT: u8 = 3;
const UNDERSCORE: u8 = 4;
const HIGH: u8 = 5;
const QUOTE: u8 = 6;
const PUNCT: u8 = 7;

static CLASS: [u8; 256] = {
    let mut class = [OTHER; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        class[b] = if matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
            SPACE
        } else if c.is_ascii_alphabetic() || c == b'$' {
            WORD
        } else if c.is_ascii_digit() {
            DIGIT
        } else if c == b'_' {
            UNDERSCORE
        } else if c >= 0x80 {
            HIGH
        } else if c == b'\'' || c == b'"' {
            QUOTE
        } else if c.is_ascii_punctuation() {
            PUNCT
        } else {
            OTHER
        };
        b += 1;
    }
    class
};

#[inline]
fn class(b: u8) -> u8 {
    CLASS[usize::from(b)]
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The bytes of `x` (each below 0x80) within `lo..=hi`, as their high bits: no addition carries
/// out of its byte, since each sum stays below 0x100.
#[inline(always)]
const fn in_range(x: u64, lo: u8, hi: u8) -> u64 {
    let at_least_lo = x + ONES * (0x80 - lo as u64);
    let above_hi = x + ONES * (0x7f - hi as u64);
    at_least_lo & !above_hi & HIGH_BITS
}

/// Of 8 bytes (little-endian `w`): those that continue an unquoted word (letters, digits, `_`,
/// `$`, and bytes >= 0x80, as the servers read them) and those >= 0x80, as their high bits. A
/// word is scanned eight bytes at a time: about 20 operations, where the table takes 5 a byte.
#[inline(always)]
const fn word_bytes(w: u64) -> (u64, u64) {
    let high = w & HIGH_BITS;
    let x = w & !HIGH_BITS;
    let ascii = in_range(x, b'0', b'9')
        | in_range(x | (ONES * 0x20), b'a', b'z')
        | in_range(x, b'_', b'_')
        | in_range(x, b'$', b'$');
    (ascii | high, high)
}

/// A byte that continues an unquoted word (`HIGH` included, as in the servers).
#[inline]
fn continues_word(c: u8) -> bool {
    matches!(class(c), WORD | DIGIT | UNDERSCORE | HIGH)
}

/// `null` as [`keywords::folded`] gives it.
const NULL_FOLDED: u64 = u64::from_le_bytes(*b"null\0\0\0\0");

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Its index in [`KEYWORDS`].
    Keyword(u16),
    Identifier,
    /// A string, number or `?`.
    Value,
    Null,
    /// A one-byte operator.
    Op(u8),
    /// `<=`, `->>`, ...
    LongOp,
}

#[derive(Clone, Copy)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
}

impl Tok {
    #[inline]
    fn op(&self) -> u8 {
        match self.kind {
            Kind::Op(b) => b,
            _ => 0,
        }
    }

    #[inline]
    fn is_literal(&self) -> bool {
        matches!(self.kind, Kind::Value | Kind::Null)
    }
}

/// The digest's reading of the text, token by token, as `Tokens` reads it where it does not
/// bail. Small and `Copy`: each look-ahead is a copy.
#[derive(Clone, Copy)]
struct Lexer<'a> {
    text: &'a [u8],
    pos: usize,
    /// The previous token is a `.` after a name: the next word is a name.
    after_qualifier: bool,
    /// The previous token is a keyword or a name.
    prev_name: bool,
    /// A name after a qualifier started with a digit (`t.5`): its digits are printed, which
    /// the digest cache must know (see `cache.rs`).
    digit_name: bool,
}

impl<'a> Lexer<'a> {
    #[inline]
    fn at(&self, i: usize) -> u8 {
        self.text.get(i).copied().unwrap_or(0)
    }

    /// The end of the run of word bytes from `i`; Bail on a byte >= 0x80. Eight bytes at a
    /// time where the text has them (see [`word_bytes`]), else a byte at a time.
    #[inline(always)]
    fn word_end(&self, mut i: usize) -> Result<usize, Bail> {
        while let Some(chunk) = self.text.get(i..i + 8).and_then(|t| t.first_chunk::<8>()) {
            let (continues, high) = word_bytes(u64::from_le_bytes(*chunk));
            let stop = !continues & HIGH_BITS;
            // The bits of the bytes before the first that ends the word (all when none does).
            let before = (stop & stop.wrapping_neg()).wrapping_sub(1);
            if high & before != 0 {
                return Err(Bail);
            }
            if stop != 0 {
                return Ok(i + (stop.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        while let Some(&c) = self.text.get(i) {
            match class(c) {
                WORD | DIGIT | UNDERSCORE => i += 1,
                HIGH => return Err(Bail),
                _ => break,
            }
        }
        Ok(i)
    }

    #[inline]
    fn digits_end(&self, mut i: usize) -> usize {
        while self.text.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    }

    /// A string opened at `start` by the digest's reading (backslash escapes, doubled quotes,
    /// single-byte): just past its closing quote, or the end of the text.
    #[inline]
    fn string_end(&self, start: usize) -> usize {
        let text = self.text;
        let quote = self.at(start);
        let mut i = start + 1;
        loop {
            let Some(rest) = text.get(i..) else {
                return text.len();
            };
            let Some(n) = rest.iter().position(|&c| c == quote || c == b'\\') else {
                return text.len();
            };
            let j = i + n;
            if text.get(j) == Some(&b'\\') || text.get(j + 1) == Some(&quote) {
                i = j + 2;
            } else {
                return j + 1;
            }
        }
    }

    /// A word not after a qualifier, from `start` (a letter or `$`). A word shorter than 8
    /// bytes with the text going on past it is found, folded for the keyword look-up and its
    /// next byte read from one load.
    #[inline(always)]
    fn word(&self, start: usize) -> Result<(Kind, usize), Bail> {
        let (end, next, short) = match self.short_word(start)? {
            Some((n, next, folded)) => (start + n, next, Some(folded)),
            None => {
                let end = self.word_end(start)?;
                (end, self.at(end), None)
            }
        };
        self.classify_word(start, end, next, short)
    }

    /// A word at `start` shorter than 8 bytes, from one load of the 8 bytes there: its length,
    /// the byte after it and its folded form. None if the load or the word is longer.
    #[inline(always)]
    fn short_word(&self, start: usize) -> Result<Option<(usize, u8, u64)>, Bail> {
        let Some(chunk) = self
            .text
            .get(start..start + 8)
            .and_then(|t| t.first_chunk::<8>())
        else {
            return Ok(None);
        };
        let w = u64::from_le_bytes(*chunk);
        let (continues, high) = word_bytes(w);
        let stop = !continues & HIGH_BITS;
        if stop == 0 {
            return Ok(None);
        }
        let before = (stop & stop.wrapping_neg()).wrapping_sub(1);
        if high & before != 0 {
            return Err(Bail);
        }
        let n = (stop.trailing_zeros() / 8) as usize;
        Ok(Some((
            n,
            (w >> (8 * n)) as u8,
            keywords::folded_short(w, n),
        )))
    }

    /// The word `start..end`, followed by the byte `next`, and its folded form if it is
    /// shorter than 8 bytes: a name, a keyword or `NULL`; Bail if it is glued to a quote.
    #[inline(always)]
    fn classify_word(
        &self,
        start: usize,
        end: usize,
        next: u8,
        short: Option<u64>,
    ) -> Result<(Kind, usize), Bail> {
        if next == b'\'' {
            // `X'1F'`, `N'x'` and the like.
            return Err(Bail);
        }
        let text = self.text;
        if next == b'.' && end + 1 < text.len() {
            let c = self.at(end + 1);
            if continues_word(c) || c == b'`' || c == b'*' {
                return Ok((Kind::Identifier, end));
            }
        }
        let (first, last) = match short {
            Some(w) => (w, w),
            None => keywords::folded(text.get(start..end).unwrap_or_default()),
        };
        let n = end - start;
        if n == 4 && first == NULL_FOLDED {
            return Ok((Kind::Null, end));
        }
        let index = keywords::index_folded(text.get(start..end).unwrap_or_default(), first, last);
        Ok(match index {
            Some(k) => (Kind::Keyword(k as u16), end),
            None => (Kind::Identifier, end),
        })
    }

    /// A number from `start` (a digit): digits, perhaps `.` and digits; anything that makes it
    /// a hex or bit literal, an exponent or a name (`0x1F`, `1e5`, `1st`) bails.
    #[inline]
    fn number(&self, start: usize) -> Result<usize, Bail> {
        let mut end = self.digits_end(start + 1);
        if self.at(end) == b'.' {
            end = self.digits_end(end + 1);
        }
        if continues_word(self.at(end)) {
            return Err(Bail);
        }
        Ok(end)
    }

    #[inline(always)]
    fn next(&mut self) -> Result<Option<Tok>, Bail> {
        let text = self.text;
        let mut start = self.pos;
        while text.get(start).is_some_and(|&c| class(c) == SPACE) {
            start += 1;
        }
        let Some(&b) = text.get(start) else {
            self.pos = start;
            return Ok(None);
        };
        let (kind, end) = match class(b) {
            WORD | DIGIT | UNDERSCORE if self.after_qualifier => {
                self.digit_name |= class(b) == DIGIT;
                (Kind::Identifier, self.word_end(start)?)
            }
            WORD => self.word(start)?,
            DIGIT => (Kind::Value, self.number(start)?),
            QUOTE => (Kind::Value, self.string_end(start)),
            PUNCT => {
                let next = self.at(start + 1);
                match b {
                    b'?' => (Kind::Value, start + 1),
                    // Comments, quoted names, variables, `.5`.
                    b'#' | b'`' | b'@' => return Err(Bail),
                    b'/' if next == b'*' => return Err(Bail),
                    b'-' if next == b'-' && self.at(start + 2) <= b' ' => return Err(Bail),
                    // `.5` is a number, but `t.5` a qualified name.
                    b'.' if next.is_ascii_digit() && !(self.prev_name && self.pos == start) => {
                        return Err(Bail)
                    }
                    _ => match operator_len(text, start) {
                        1 => (Kind::Op(b), start + 1),
                        n => (Kind::LongOp, start + n),
                    },
                }
            }
            // `_` (perhaps an introducer), bytes >= 0x80, control bytes.
            _ => return Err(Bail),
        };
        let end = end.min(text.len());
        let tok = Tok { kind, start, end };
        self.after_qualifier = kind == Kind::Op(b'.') && self.prev_name;
        self.prev_name = matches!(kind, Kind::Keyword(..) | Kind::Identifier);
        self.pos = end;
        Ok(Some(tok))
    }
}

/// Operators of more than one byte, as the tokenizer reads them (longest first).
fn operator_len(text: &[u8], start: usize) -> usize {
    let rest = text.get(start..).unwrap_or_default();
    match rest {
        [b'<', b'=', b'>', ..] | [b'-', b'>', b'>', ..] => 3,
        [b'<', b'=' | b'>' | b'<', ..]
        | [b'>', b'=' | b'>', ..]
        | [b'!' | b':', b'=', ..]
        | [b'|', b'|', ..]
        | [b'&', b'&', ..]
        | [b'-', b'>', ..] => 2,
        _ => 1,
    }
}

/// The printed pieces as small codes, so that the spacing rule is a table look-up: the
/// table is built at compile time from the general printer's own [`space_between`], so the two
/// cannot disagree. A keyword's code carries its flags and whether a `NULL` after it stays.
const START: u8 = 0;
const OPEN: u8 = 1;
const CLOSE: u8 = 2;
const LIST: u8 = 3;
const COMMA: u8 = 4;
const SEMICOLON: u8 = 5;
const DOT: u8 = 6;
const VALUE: u8 = 7;
const NULL_KEYWORD: u8 = 8;
const NAME: u8 = 9;
const OPERATOR: u8 = 10;
/// `KEYWORD + flags` (flags < 4), `+ 4` for `IS` and `NOT`.
const KEYWORD: u8 = 11;
const CODES: usize = 19;

const fn piece_of(code: u8) -> Option<Piece> {
    Some(match code {
        OPEN => Piece::Open,
        CLOSE => Piece::Close,
        LIST => Piece::List,
        COMMA => Piece::Comma,
        SEMICOLON => Piece::Semicolon,
        DOT => Piece::Dot,
        VALUE => Piece::Value,
        NULL_KEYWORD => Piece::NullKeyword,
        NAME => Piece::Name,
        OPERATOR => Piece::Operator,
        KEYWORD..=18 => Piece::Keyword {
            flags: (code - KEYWORD) & 3,
            keeps_null: code - KEYWORD >= 4,
        },
        _ => return None,
    })
}

/// For each previous piece, the pieces a space goes before (a bit per code).
static SPACED: [u32; CODES] = {
    let mut table = [0u32; CODES];
    let mut prev = 0;
    while prev < CODES {
        let mut next = 0;
        while next < CODES {
            if let (Some(p), Some(n)) = (piece_of(prev as u8), piece_of(next as u8)) {
                if space_between(p, n) {
                    table[prev] |= 1 << next;
                }
            }
            next += 1;
        }
        prev += 1;
    }
    table
};

/// The pieces after which a `+`/`-` is a sign (a bit per code), the start included.
const TAKES_SIGN: u32 = {
    let mut set = 1 << START;
    let mut code = 0;
    while code < CODES {
        if let Some(p) = piece_of(code as u8) {
            if p.takes_sign() {
                set |= 1 << code;
            }
        }
        code += 1;
    }
    set
};

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Each keyword's piece code, its name as a little-endian word when it has at most 8 bytes
/// (else 0), and its length.
static KEYWORD_PIECES: [(u8, u64, usize); KEYWORDS.len()] = {
    let mut out = [(0u8, 0u64, 0usize); KEYWORDS.len()];
    let mut k = 0;
    while k < KEYWORDS.len() {
        let (name, flags) = KEYWORDS[k];
        let name = name.as_bytes();
        assert!(flags < 4, "a keyword flag the piece codes have no room for");
        let keeps_null = same(name, b"IS") || same(name, b"NOT");
        let code = KEYWORD + flags + if keeps_null { 4 } else { 0 };
        let mut w = 0u64;
        if name.len() <= 8 {
            let mut i = 0;
            while i < name.len() {
                w |= (name[i] as u64) << (8 * i);
                i += 1;
            }
        }
        out[k] = (code, w, name.len());
        k += 1;
    }
    out
};

/// The `n` bytes of `text` at `start` as a little-endian word, if 8 can be loaded there.
#[inline]
fn load(text: &[u8], start: usize, n: usize) -> Option<u64> {
    let chunk = text.get(start..start + 8)?.first_chunk::<8>()?;
    (n <= 8).then(|| u64::from_le_bytes(*chunk) & (u64::MAX >> (64 - 8 * n.max(1))))
}

struct Printer<'o, O: Out> {
    out: &'o mut O,
    last: u8,
}

impl<O: Out> Printer<'_, O> {
    /// A piece of `n` bytes (1 to 8) in `w`, with the space before it if the rule wants one.
    #[inline(always)]
    fn word(&mut self, code: u8, w: u64, n: usize) {
        let space = SPACED[usize::from(self.last)] >> code & 1 != 0;
        self.last = code;
        if !space {
            self.out.word(w, n);
        } else if n < 8 {
            self.out.word(w << 8 | u64::from(b' '), n + 1);
        } else {
            self.out.word(u64::from(b' '), 1);
            self.out.word(w, n);
        }
    }

    /// A piece of any length.
    #[inline]
    fn bytes(&mut self, code: u8, bytes: &[u8]) {
        if SPACED[usize::from(self.last)] >> code & 1 != 0 {
            self.out.word(u64::from(b' '), 1);
        }
        self.last = code;
        self.out.bytes(bytes);
    }

    /// Raw bytes of the text as a piece.
    #[inline(always)]
    fn text(&mut self, code: u8, text: &[u8], start: usize, end: usize) {
        match load(text, start, end - start) {
            Some(w) => self.word(code, w, end - start),
            None => self.bytes(code, text.get(start..end).unwrap_or_default()),
        }
    }

    #[inline]
    fn token(&mut self, text: &[u8], tok: Tok, after_qualifier: bool) {
        match tok.kind {
            Kind::Keyword(k) => {
                let k = usize::from(k);
                let (code, w, n) = KEYWORD_PIECES.get(k).copied().unwrap_or((KEYWORD, 0, 0));
                if (1..=8).contains(&n) {
                    self.word(code, w, n);
                } else {
                    self.bytes(code, KEYWORDS.get(k).map_or("", |e| e.0).as_bytes());
                }
            }
            Kind::Identifier => {
                // A name starting with a digit after a `.` that qualifies nothing is kept
                // apart from it (as `Printer::start_name`).
                if self.last == DOT
                    && !after_qualifier
                    && text.get(tok.start).is_some_and(u8::is_ascii_digit)
                {
                    self.out.word(u64::from(b' '), 1);
                }
                self.text(NAME, text, tok.start, tok.end);
            }
            Kind::Null => {
                if self.last >= KEYWORD + 4 {
                    self.word(NULL_KEYWORD, u64::from_le_bytes(*b"NULL\0\0\0\0"), 4);
                } else {
                    self.word(VALUE, u64::from(b'?'), 1);
                }
            }
            Kind::Value => self.word(VALUE, u64::from(b'?'), 1),
            Kind::Op(b) => {
                let code = match b {
                    b'(' => OPEN,
                    b')' => CLOSE,
                    b',' => COMMA,
                    b';' => SEMICOLON,
                    b'.' => DOT,
                    _ => OPERATOR,
                };
                self.word(code, u64::from(b), 1);
            }
            Kind::LongOp => self.text(OPERATOR, text, tok.start, tok.end),
        }
    }
}

/// Prints the normalized form of `text` (already cut at `max_len`) into `out`, as the general
/// printer would; Bail (with `out` part-written) when the text needs the general printer.
/// True if a name in it starts with a digit (`t.5`), which the digest cache must know.
#[inline]
pub(super) fn print<O: Out>(text: &[u8], out: &mut O) -> Result<bool, Bail> {
    let mut p = Printer { out, last: START };
    let mut lx = Lexer {
        text,
        pos: 0,
        after_qualifier: false,
        prev_name: false,
        digit_name: false,
    };
    let mut signs_checked = false;
    let mut semicolons_checked = false;
    loop {
        let after_qualifier = lx.after_qualifier;
        let Some(tok) = lx.next()? else { break };
        let op = tok.op();
        let is_sign = op == b'-' || op == b'+';
        let is_semicolon = op == b';';
        signs_checked &= is_sign;
        semicolons_checked &= is_semicolon;
        if op == b'(' {
            if let Some(after) = literal_lists(lx)? {
                lx = after;
                p.bytes(LIST, b"(...)");
                continue;
            }
        } else if is_sign && !signs_checked && TAKES_SIGN >> p.last & 1 != 0 {
            if let Some(after) = signed_literal(lx)? {
                lx = after;
                p.word(VALUE, u64::from(b'?'), 1);
                continue;
            }
            signs_checked = true;
        } else if is_semicolon && !semicolons_checked {
            if trailing_semicolons(lx)? {
                break;
            }
            semicolons_checked = true;
        }
        p.token(text, tok, after_qualifier);
    }
    Ok(lx.digit_name)
}

/// After a `(`: the lexer past the last `)` if a run of comma-separated lists of only literals
/// starts here (`(1, 2), (3, 4)`).
#[inline(never)]
fn literal_lists(mut lx: Lexer<'_>) -> Result<Option<Lexer<'_>>, Bail> {
    if !literal_list(&mut lx)? {
        return Ok(None);
    }
    loop {
        let mut more = lx;
        let comma = more.next()?.is_some_and(|t| t.op() == b',');
        let open = comma && more.next()?.is_some_and(|t| t.op() == b'(');
        if !(open && literal_list(&mut more)?) {
            return Ok(Some(lx));
        }
        lx = more;
    }
}

/// After a sign: the lexer past the literal if more signs and then a literal follow.
#[inline(never)]
fn signed_literal(mut lx: Lexer<'_>) -> Result<Option<Lexer<'_>>, Bail> {
    loop {
        match lx.next()? {
            Some(t) if matches!(t.op(), b'-' | b'+') => continue,
            Some(t) if t.is_literal() => return Ok(Some(lx)),
            _ => return Ok(None),
        }
    }
}

/// After a `;`: true if only more `;` follow.
#[inline(never)]
fn trailing_semicolons(mut lx: Lexer<'_>) -> Result<bool, Bail> {
    loop {
        match lx.next()? {
            Some(t) if t.op() == b';' => continue,
            Some(_) => return Ok(false),
            None => return Ok(true),
        }
    }
}

/// After a `(`: true (and `lx` past the `)`) if the list holds only literals, each perhaps
/// signed, separated by commas.
fn literal_list(lx: &mut Lexer<'_>) -> Result<bool, Bail> {
    loop {
        let mut t = lx.next()?;
        while t.is_some_and(|t| matches!(t.op(), b'-' | b'+')) {
            t = lx.next()?;
        }
        if !t.is_some_and(|t| t.is_literal()) {
            return Ok(false);
        }
        match lx.next()? {
            Some(t) if t.op() == b')' => return Ok(true),
            Some(t) if t.op() == b',' => {}
            _ => return Ok(false),
        }
    }
}
