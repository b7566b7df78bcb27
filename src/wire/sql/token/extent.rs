//! Where a token's bytes end, as the servers' lexers find it: the byte classes, comments,
//! quoted texts (escapes and multibyte characters as the reading says), numbers and operators.
//! Plain functions over the text and a start offset, for the tokenizer in `token.rs`.

use super::super::reading::Multibyte;
use super::TokenKind;

const SPACE: u8 = 1;
const IDENT: u8 = 2;

/// Each byte's class, one table look-up per byte on the hot path; a `static`, since a `const`
/// table is copied onto the stack where its indexing is not folded away (256 bytes per token).
static CLASS: [u8; 256] = {
    let mut class = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
            class[b] = SPACE;
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            class[b] = IDENT;
        }
        b += 1;
    }
    class
};

/// The servers' whitespace: space, tab, newline, vertical tab, form feed, carriage return.
pub(crate) fn is_space(b: u8) -> bool {
    CLASS[usize::from(b)] == SPACE
}

/// A byte that may appear in an unquoted identifier (letters, digits, `_`, `$`, bytes >= 0x80).
pub(crate) fn is_ident(b: u8) -> bool {
    CLASS[usize::from(b)] == IDENT
}

pub(super) fn ident_end(text: &[u8], start: usize) -> usize {
    start
        + text
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&c| is_ident(c))
            .count()
}

pub(super) fn digits_end(text: &[u8], start: usize) -> usize {
    start
        + text
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
}

/// After a comment's `/*` at `start`: just past the first `*/` (comments do not nest), or the
/// end of the text.
pub(super) fn comment_end(text: &[u8], start: usize) -> usize {
    let body = text.get(start + 2..).unwrap_or_default();
    match body.windows(2).position(|w| w == b"*/") {
        Some(n) => start + 2 + n + 2,
        None => text.len(),
    }
}

/// A plain comment's end as the server finds it: just past the first `*/`; None when it is not
/// closed (the server refuses the text).
pub(super) fn plain_comment_end(text: &[u8], start: usize) -> Option<usize> {
    let body = text.get(start + 2..)?;
    body.windows(2)
        .position(|w| w == b"*/")
        .map(|n| start + 2 + n + 2)
}

/// The end of an executable comment the server skips: it may hold one plain comment, whose
/// `*/` does not end it. None when it is not closed.
pub(super) fn nested_comment_end(text: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 2;
    while let Some(&c) = text.get(i) {
        if c == b'/' && text.get(i + 1) == Some(&b'*') {
            // The inner one ends at its first `*/`; not closed, it runs to the end.
            i = plain_comment_end(text, i).unwrap_or(text.len());
        } else if c == b'*' && text.get(i + 1) == Some(&b'/') {
            return Some(i + 2);
        } else {
            i += 1;
        }
    }
    None
}

/// A string or quoted name opened at `start`: a doubled quote is one quote, `\` escapes when
/// `escapes`, and a character of `mb` is never split (its second byte neither escapes nor
/// closes).
#[inline]
pub(super) fn quoted_end(text: &[u8], start: usize, escapes: bool, mb: Multibyte) -> usize {
    let Some(&quote) = text.get(start) else {
        return text.len();
    };
    let mut i = start + 1;
    while let Some(&c) = text.get(i) {
        let len = mb.char_len(text, i);
        if len > 1 {
            i += len;
        } else if escapes && c == b'\\' {
            i += 2;
        } else if c == quote {
            if text.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    text.len()
}

/// The `'...'` of `X'1F'` / `B'01'` opened at `start`: no escapes.
pub(super) fn plain_quote_end(text: &[u8], start: usize) -> usize {
    match text
        .get(start + 1..)
        .and_then(|t| t.iter().position(|&c| c == b'\''))
    {
        Some(n) => start + 1 + n + 1,
        None => text.len(),
    }
}

/// A word starting with a digit: a number (`12`, `1.5`, `1e10`, `2.5e-3`), `0x1F` / `0b01`, or
/// an identifier such as `1st` (MySQL allows names that start with digits).
pub(super) fn scan_digits(text: &[u8], start: usize) -> (TokenKind, usize) {
    let word_end = ident_end(text, start);
    let word = text.get(start..word_end).unwrap_or_default();
    let digits = digits_end(text, start);
    if let Some(rest) = word.strip_prefix(b"0x") {
        if !rest.is_empty() && rest.iter().all(u8::is_ascii_hexdigit) {
            return (TokenKind::HexOrBitLiteral, word_end);
        }
    }
    if let Some(rest) = word.strip_prefix(b"0b") {
        if !rest.is_empty() && rest.iter().all(|&c| c == b'0' || c == b'1') {
            return (TokenKind::HexOrBitLiteral, word_end);
        }
    }
    if digits == word_end {
        return (TokenKind::Number, number_tail(text, digits));
    }
    // `1e10` / `1e` `-5`: digits, an exponent and nothing else in the word.
    if matches!(text.get(digits), Some(b'e' | b'E')) {
        if let Some(end) = exponent_end(text, digits) {
            if end >= word_end {
                return (TokenKind::Number, end);
            }
        }
    }
    (TokenKind::Identifier, word_end)
}

/// The rest of a number after its integer digits, at `at`: an optional `.digits` and an
/// optional exponent.
pub(super) fn number_tail(text: &[u8], at: usize) -> usize {
    let mut end = at;
    if text.get(end) == Some(&b'.') {
        end = digits_end(text, end + 1);
    }
    if matches!(text.get(end), Some(b'e' | b'E')) {
        if let Some(e) = exponent_end(text, end) {
            end = e;
        }
    }
    end
}

/// `e10`, `E-3`, `e+5` at `at`: its end, if digits follow.
pub(super) fn exponent_end(text: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    if matches!(text.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let end = digits_end(text, i);
    (end > i).then_some(end)
}

/// Operators of more than one byte, longest first.
const LONG_OPERATORS: [&[u8]; 12] = [
    b"<=>", b"->>", b"<=", b">=", b"<>", b"!=", b":=", b"||", b"&&", b"<<", b">>", b"->",
];

pub(super) fn operator_len(text: &[u8], start: usize) -> usize {
    let rest = text.get(start..).unwrap_or_default();
    LONG_OPERATORS
        .iter()
        .find(|op| rest.starts_with(op))
        .map_or(1, |op| op.len())
}
