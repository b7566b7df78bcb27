//! The tokenizer: MySQL/MariaDB statement text (any bytes, not necessarily UTF-8) as a stream of
//! tokens, skipping whitespace and plain comments.
//!
//! It follows the servers' lexers where a token's extent depends on them (comments, quoting,
//! escapes, number forms, `word.word`), and never fails: an unterminated string, quoted
//! identifier or comment runs to the end of the text, a byte it has no rule for is a one-byte
//! [`TokenKind::Other`]. Every token is at least one byte (but an [`TokenKind::Unsure`] at the
//! end), so a text of n bytes gives at most n tokens. The digest, the statement classifier,
//! session-state tracking and replay's read-only mode all read this one stream, so they never
//! disagree on where a string or comment ends; the [`Reading`] they ask for says how the server
//! would read the text (see `reading.rs`).

use super::keywords;
use super::reading::{comment_version, Comments, Multibyte, Reading, Server};
use extent::{
    comment_end, ident_end, nested_comment_end, number_tail, operator_len, plain_comment_end,
    plain_quote_end, quoted_end, scan_digits,
};
pub(crate) use extent::{is_ident, is_space};

mod extent;

/// What a token is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum TokenKind {
    /// A word in the keyword list (any case), not directly next to a `.` of a qualified name.
    Keyword,
    /// A bare word: a name, a function not in the keyword list, or anything after a
    /// qualifier's `.` (`t.select` is a column).
    Identifier,
    /// `` `name` `` (doubled backticks inside; unterminated runs to the end).
    QuotedIdentifier,
    /// `'..'` or `".."` (backslash escapes and doubled quotes), `N'..'`, and a character set
    /// introducer with its literal (`_utf8mb4'x'`, `_latin1 "x"`).
    String,
    /// `12`, `1.5`, `.5`, `1e10`, `2.5e-3`; the sign of `-1` is a separate operator token.
    Number,
    /// `0x1F`, `X'1F'`, `x'1f'`, `0b01`, `b'01'`, `B'01'` (and `_binary 0x41`).
    HexOrBitLiteral,
    /// `NULL` (any case).
    Null,
    /// `?`: a prepared statement's parameter.
    Placeholder,
    /// Punctuation and operators: `(`, `)`, `,`, `;`, `.`, `=`, `<=>`, `->>`, `@` of
    /// `'user'@'host'`, ...
    Operator,
    /// An optimizer hint comment `/*+ ... */`.
    Hint,
    /// An executable comment `/*! ... */`, `/*!50100 ... */` or MariaDB's `/*M!100100 ... */`.
    ExecutableComment,
    /// `@name`, `@'name'`, `` @`name` ``, `@@name`, `@@session.name`.
    Variable,
    /// A control byte outside any other token.
    Other,
    /// Where the server's reading cannot be followed (only in a server's [`Reading`]): a
    /// comment not closed, an executable comment inside one the server runs. It covers the
    /// rest of the text (empty at its end, for an executable comment the server runs that is
    /// not closed); whoever decides on it does the safe thing.
    Unsure,
}

/// One token: its kind and its raw bytes in the text.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Token<'a> {
    pub kind: TokenKind,
    pub text: &'a [u8],
}

impl Token<'_> {
    /// True for a keyword spelled `upper` (give it in upper case), written in any case.
    pub fn is_keyword(&self, upper: &str) -> bool {
        self.kind == TokenKind::Keyword && self.text.eq_ignore_ascii_case(upper.as_bytes())
    }

    /// True for the operator or punctuation `op`.
    pub fn is_operator(&self, op: &str) -> bool {
        self.kind == TokenKind::Operator
            && match (self.text, op.as_bytes()) {
                ([a], [b]) => a == b,
                (text, op) => text == op,
            }
    }

    /// The byte of a one-byte operator (`(`, `,`, `-`, ...), else 0: one comparison per
    /// operator on the digest's path instead of a slice comparison.
    pub(crate) fn op(&self) -> u8 {
        match (self.kind, self.text) {
            (TokenKind::Operator, &[b]) => b,
            _ => 0,
        }
    }

    /// True for a keyword or a bare identifier spelled `upper` in any case: for words a
    /// statement may use that are not in the keyword list (`DEALLOCATE` is, `GET_LOCK` is not).
    pub fn is_word(&self, upper: &str) -> bool {
        matches!(self.kind, TokenKind::Keyword | TokenKind::Identifier)
            && self.text.eq_ignore_ascii_case(upper.as_bytes())
    }

    /// A value written in the statement: string, number, hex/bit literal, NULL or `?`.
    pub fn is_literal(&self) -> bool {
        matches!(
            self.kind,
            TokenKind::String
                | TokenKind::Number
                | TokenKind::HexOrBitLiteral
                | TokenKind::Null
                | TokenKind::Placeholder
        )
    }

    /// A name-like token: keyword, identifier or quoted identifier.
    pub fn is_name(&self) -> bool {
        matches!(
            self.kind,
            TokenKind::Keyword | TokenKind::Identifier | TokenKind::QuotedIdentifier
        )
    }
}

/// The tokens of a text, in order (see [`tokens`]).
#[derive(Clone, Debug)]
pub struct Tokens<'a> {
    text: &'a [u8],
    pos: usize,
    /// The previous token's kind and where it ended (for rules that look one token back).
    prev: Option<(TokenKind, usize)>,
    /// The keyword the last token is, with its flags (saves the printer a second lookup).
    keyword: Option<(&'static str, u8)>,
    mode: Mode,
}

/// The reading and the lexer's one-bit states in 8 bytes: the digest clones a `Tokens` for each
/// look-ahead, and one larger than 72 bytes is copied by a call to `memcpy` (measured: 20 % more
/// instructions per digest of a point select).
#[derive(Clone, Copy, Debug)]
struct Mode {
    /// The server's version, when `bits` has [`SERVER`].
    version: u32,
    bits: u8,
    multibyte: Multibyte,
    /// The previous token is a `.` right after a name: the next word is a name too.
    after_qualifier: bool,
    /// Inside an executable comment the server runs: its `*/` is skipped.
    in_executable: bool,
}

const SERVER: u8 = 1;
const MARIADB: u8 = 2;
const ESCAPES: u8 = 4;
const ANSI_QUOTES: u8 = 8;

impl Mode {
    fn new(r: Reading) -> Mode {
        let (mut bits, version) = match r.comments {
            Comments::Tokens => (0, 0),
            Comments::Server(s) => (SERVER | if s.mariadb { MARIADB } else { 0 }, s.version),
        };
        if r.backslash_escapes {
            bits |= ESCAPES;
        }
        if r.ansi_quotes {
            bits |= ANSI_QUOTES;
        }
        Mode {
            version,
            bits,
            multibyte: r.multibyte,
            after_qualifier: false,
            in_executable: false,
        }
    }

    #[inline]
    fn comments(&self) -> Comments {
        if self.bits & SERVER == 0 {
            Comments::Tokens
        } else {
            Comments::Server(Server {
                mariadb: self.bits & MARIADB != 0,
                version: self.version,
            })
        }
    }

    #[inline]
    fn escapes(&self) -> bool {
        self.bits & ESCAPES != 0
    }

    #[inline]
    fn ansi_quotes(&self) -> bool {
        self.bits & ANSI_QUOTES != 0
    }
}

/// Iterates over the tokens of `text` as the digest reads it ([`Reading::DIGEST`]: executable
/// comments as single tokens).
pub fn tokens(text: &[u8]) -> Tokens<'_> {
    tokens_as(text, Reading::DIGEST)
}

/// Iterates over the tokens of `text` as `reading` says the server reads it.
pub fn tokens_as(text: &[u8], reading: Reading) -> Tokens<'_> {
    Tokens {
        text,
        pos: 0,
        prev: None,
        keyword: None,
        mode: Mode::new(reading),
    }
}

impl<'a> Tokens<'a> {
    /// Where the next token (or the whitespace before it) starts.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// True if the next word is read as a name whatever it spells, because the previous token
    /// is the `.` of a qualified name (`t.select`, `t.5`).
    pub fn after_qualifier(&self) -> bool {
        self.mode.after_qualifier
    }

    /// The canonical spelling and flags of the last token, if it was a keyword.
    pub(crate) fn keyword(&self) -> Option<(&'static str, u8)> {
        self.keyword
    }

    /// The text not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.text.get(self.pos..).unwrap_or_default()
    }

    fn rest_from(&self, i: usize) -> &'a [u8] {
        self.text.get(i..).unwrap_or_default()
    }

    fn at(&self, i: usize) -> u8 {
        self.text.get(i).copied().unwrap_or(0)
    }

    fn has(&self, i: usize) -> bool {
        i < self.text.len()
    }

    /// Skips whitespace and plain comments (and, in a server's reading, executable comments it
    /// skips, and the markers of those it runs); false at the end of the text.
    fn skip_blank(&mut self) -> bool {
        loop {
            let Some(&b) = self.text.get(self.pos) else {
                return false;
            };
            let next = self.at(self.pos + 1);
            if is_space(b) {
                self.pos += 1;
            } else if b == b'#'
                || (b == b'-'
                    && next == b'-'
                    && (!self.has(self.pos + 2) || self.at(self.pos + 2) <= b' '))
            {
                self.pos = match self.rest().iter().position(|&c| c == b'\n') {
                    Some(n) => self.pos + n + 1,
                    None => self.text.len(),
                };
            } else if self.mode.in_executable && b == b'*' && next == b'/' {
                self.mode.in_executable = false;
                self.pos += 2;
            } else if b == b'/' && next == b'*' {
                let third = self.at(self.pos + 2);
                let executable = third == b'!' || (third == b'M' && self.at(self.pos + 3) == b'!');
                match self.mode.comments() {
                    Comments::Tokens if executable || third == b'+' => return true,
                    Comments::Server(_) if third == b'+' => return true,
                    Comments::Server(server) if executable => {
                        if self.mode.in_executable {
                            // The server reads a second marker inside a running comment as
                            // another; its `*/` then ends both, and the first one's is an
                            // operator: not worth following.
                            return true;
                        }
                        let maria = third == b'M';
                        let at = self.pos + if maria { 4 } else { 3 };
                        let (version, digits) = comment_version(self.text, at);
                        if server.runs(maria, version) {
                            // MySQL reads five digits; MariaDB five or six.
                            let digits = if server.mariadb {
                                digits
                            } else {
                                digits.min(5)
                            };
                            self.mode.in_executable = true;
                            self.pos = at + digits;
                        } else {
                            match nested_comment_end(self.text, self.pos) {
                                Some(end) => self.pos = end,
                                None => return true,
                            }
                        }
                    }
                    Comments::Server(_) => match plain_comment_end(self.text, self.pos) {
                        Some(end) => self.pos = end,
                        None => return true,
                    },
                    Comments::Tokens => self.pos = comment_end(self.text, self.pos),
                }
            } else {
                return true;
            }
        }
    }

    /// In a server's reading, [`skip_blank`](Self::skip_blank) stopped at a comment it cannot
    /// follow (not closed, or an executable one inside a running one).
    fn unsure_here(&self) -> bool {
        self.mode.bits & SERVER != 0
            && self.at(self.pos) == b'/'
            && self.at(self.pos + 1) == b'*'
            && self.at(self.pos + 2) != b'+'
    }

    /// A `'` or `"` string opened at `start`, by this reading's escapes and character set.
    fn string_end(&self, start: usize) -> usize {
        quoted_end(self.text, start, self.mode.escapes(), self.mode.multibyte)
    }

    /// A quoted name opened at `start` (`` ` ``, or `"` under `ANSI_QUOTES`): no escapes.
    fn quoted_end(&self, start: usize) -> usize {
        quoted_end(self.text, start, false, self.mode.multibyte)
    }

    /// The end of an unquoted word from `start`, by this reading's character set.
    fn ident_end(&self, start: usize) -> usize {
        let mb = self.mode.multibyte;
        if mb == Multibyte::None {
            return ident_end(self.text, start);
        }
        let mut end = start;
        while let Some(&c) = self.text.get(end) {
            if !is_ident(c) {
                break;
            }
            end += mb.char_len(self.text, end);
        }
        end.min(self.text.len())
    }

    /// The token starting at `self.pos` (not blank): its kind, end, and keyword entry.
    fn scan_token(&self) -> (TokenKind, usize, Option<(&'static str, u8)>) {
        let b = self.at(self.pos);
        // A word; one starting with a digit only after a qualifier (else it may be a number).
        if is_ident(b) && (self.mode.after_qualifier || !b.is_ascii_digit()) {
            return self.scan_word();
        }
        let (kind, end) = self.scan_other();
        (kind, end, None)
    }

    /// A token that is not a word.
    fn scan_other(&self) -> (TokenKind, usize) {
        let text = self.text;
        let start = self.pos;
        let b = self.at(start);
        let next = self.at(start + 1);
        match b {
            b'"' if self.mode.ansi_quotes() => {
                (TokenKind::QuotedIdentifier, self.quoted_end(start))
            }
            b'\'' | b'"' => (TokenKind::String, self.string_end(start)),
            b'`' => (TokenKind::QuotedIdentifier, self.quoted_end(start)),
            b'?' => (TokenKind::Placeholder, start + 1),
            b'@' => self.scan_at(),
            b'/' if next == b'*' => match self.mode.comments() {
                Comments::Tokens if self.at(start + 2) == b'+' => {
                    (TokenKind::Hint, comment_end(text, start))
                }
                Comments::Tokens => (TokenKind::ExecutableComment, comment_end(text, start)),
                // A hint the server reads as a comment (MariaDB) or as hints (MySQL, which
                // reads quotes inside them): one with a quote in it is not followed.
                Comments::Server(_) => match plain_comment_end(text, start) {
                    Some(end)
                        if !text[start..end]
                            .iter()
                            .any(|c| matches!(c, b'\'' | b'"' | b'`')) =>
                    {
                        (TokenKind::Hint, end)
                    }
                    _ => (TokenKind::Unsure, text.len()),
                },
            },
            b'.' if next.is_ascii_digit() && !self.glued_to_name(start) => {
                (TokenKind::Number, number_tail(text, start))
            }
            b'0'..=b'9' => scan_digits(text, start),
            b if b.is_ascii_punctuation() => {
                (TokenKind::Operator, start + operator_len(text, start))
            }
            _ => (TokenKind::Other, start + 1),
        }
    }

    /// True if the previous token is a name ending exactly at `at` (so `t.5` is a qualified
    /// name, not `t` and `.5`).
    fn glued_to_name(&self, at: usize) -> bool {
        matches!(self.prev, Some((k, end)) if end == at && is_name_kind(k))
    }

    /// `@`: a variable, or the `@` of `'user'@'host'` when glued to the value before it.
    fn scan_at(&self) -> (TokenKind, usize) {
        let start = self.pos;
        let glued = matches!(self.prev, Some((k, end)) if end == start && matches!(k,
            TokenKind::String | TokenKind::QuotedIdentifier | TokenKind::Identifier
            | TokenKind::Placeholder | TokenKind::Number | TokenKind::HexOrBitLiteral
            | TokenKind::Null));
        if glued {
            return (TokenKind::Operator, start + 1);
        }
        let name_at = if self.at(start + 1) == b'@' {
            start + 2
        } else {
            start + 1
        };
        let c = self.at(name_at);
        if name_at == start + 1 && c == b'\'' {
            (TokenKind::Variable, self.string_end(name_at))
        } else if name_at == start + 1 && c == b'"' {
            let end = if self.mode.ansi_quotes() {
                self.quoted_end(name_at)
            } else {
                self.string_end(name_at)
            };
            (TokenKind::Variable, end)
        } else if name_at == start + 1 && c == b'`' {
            (TokenKind::Variable, self.quoted_end(name_at))
        } else if self.has(name_at) && is_ident(c) {
            let mut end = name_at;
            while let Some(&c) = self.text.get(end) {
                if !(is_ident(c) || c == b'.') {
                    break;
                }
                end += self.mode.multibyte.char_len(self.text, end);
            }
            (TokenKind::Variable, end.min(self.text.len()))
        } else {
            (TokenKind::Operator, start + 1)
        }
    }

    /// A word starting with a letter, `_`, `$` or a byte >= 0x80 (or any word after a
    /// qualifier's `.`).
    fn scan_word(&self) -> (TokenKind, usize, Option<(&'static str, u8)>) {
        let text = self.text;
        let start = self.pos;
        let end = self.ident_end(start);
        let word = text.get(start..end).unwrap_or_default();
        if self.mode.after_qualifier {
            return (TokenKind::Identifier, end, None);
        }
        if self.at(end) == b'\'' {
            match word {
                [b'x' | b'X' | b'b' | b'B'] => {
                    return (TokenKind::HexOrBitLiteral, plain_quote_end(text, end), None);
                }
                [b'n' | b'N'] => return (TokenKind::String, self.string_end(end), None),
                _ => {}
            }
        }
        if word.first() == Some(&b'_') && keywords::is_introducer(word) {
            let lit = end
                + self
                    .rest_from(end)
                    .iter()
                    .take_while(|&&c| is_space(c))
                    .count();
            match (self.at(lit), self.at(lit + 1)) {
                (b'"', _) if self.mode.ansi_quotes() => {}
                (b'\'' | b'"', _) => return (TokenKind::String, self.string_end(lit), None),
                (b'x' | b'X' | b'b' | b'B', b'\'') => {
                    return (
                        TokenKind::HexOrBitLiteral,
                        plain_quote_end(text, lit + 1),
                        None,
                    );
                }
                (b'0', _) => {
                    if let (TokenKind::HexOrBitLiteral, e) = scan_digits(text, lit) {
                        return (TokenKind::HexOrBitLiteral, e, None);
                    }
                }
                _ => {}
            }
        }
        // A word glued to a following `.name` qualifies it: a name, never a keyword (as in the
        // servers' lexers: `user.id`, `status.*`).
        if self.at(end) == b'.' && {
            let c = self.at(end + 1);
            self.has(end + 1) && (is_ident(c) || c == b'`' || c == b'*')
        } {
            return (TokenKind::Identifier, end, None);
        }
        if word.eq_ignore_ascii_case(b"NULL") {
            return (TokenKind::Null, end, None);
        }
        match keywords::lookup(word) {
            Some(entry) => (TokenKind::Keyword, end, Some(entry)),
            None => (TokenKind::Identifier, end, None),
        }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        if !self.skip_blank() {
            if self.mode.in_executable {
                // A running executable comment not closed: the server refuses the text.
                // Its marker took at least three bytes no token covers: an empty token at the
                // end keeps the count of tokens within the text's length.
                self.mode.in_executable = false;
                self.pos = self.text.len();
                return Some(Token {
                    kind: TokenKind::Unsure,
                    text: self.text.get(self.text.len()..).unwrap_or_default(),
                });
            }
            return None;
        }
        let start = self.pos;
        let (kind, end, keyword) = if self.unsure_here() {
            (TokenKind::Unsure, self.text.len(), None)
        } else {
            self.scan_token()
        };
        // Every token is at least one byte and ends within the text.
        let end = end.clamp(start + 1, self.text.len());
        let text = self.text.get(start..end)?;
        self.keyword = keyword;
        self.mode.after_qualifier = text == b"."
            && kind == TokenKind::Operator
            && matches!(self.prev, Some((k, _)) if is_name_kind(k));
        self.prev = Some((kind, end));
        self.pos = end;
        Some(Token { kind, text })
    }
}

fn is_name_kind(k: TokenKind) -> bool {
    matches!(
        k,
        TokenKind::Keyword | TokenKind::Identifier | TokenKind::QuotedIdentifier
    )
}
