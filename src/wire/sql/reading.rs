//! How the server reads a text: which executable comments it runs, how its strings and quoted
//! names end. The lexer ([`super::tokens_as`]) follows one [`Reading`]; the questions whose wrong
//! answer leaks state or runs a write (pins, read-only, redaction) ask every reading the server
//! could take ([`readings`]) and take the worst answer.
//!
//! Why several readings and not one: the server's reading depends on things a proxy does not
//! always know for sure.
//!
//! - **Executable comments** `/*!NNNNN ... */` run on a server whose version is at least
//!   `NNNNN`; MariaDB runs `/*M!NNNNNN ... */` the same way and skips MySQL's `50700..=99999`
//!   (MySQL-5.7-only syntax); MySQL reads `/*M!` as a plain comment. A comment the server skips
//!   ends at its first `*/` (one nested plain comment allowed); one it runs is read as code to
//!   the `*/` its lexer reaches (so a quote or `#` inside it decides where it ends). Where the
//!   backend's flavour and version are not given ([`Dialect`]), every version on either side
//!   of each comment's is a reading.
//! - **`sql_mode`**: `NO_BACKSLASH_ESCAPES` makes `\` an ordinary byte in strings and
//!   `ANSI_QUOTES` makes `"` quote a name; a session or a server default may set either, so a
//!   text with a `\` or a `"` is read both ways.
//! - **Character set**: in gbk, big5, sjis and cp932 the second byte of a character may be
//!   `\` (0x5C) or `` ` `` (0x60); such a byte then neither escapes nor closes. A text where a
//!   byte >= 0x81 precedes one of those is read in each of these character sets too.
//!
//! The readings are the product of those choices, each taken only when the text holds what
//! makes it matter, so an ordinary statement has one. Past [`MAX_READINGS`] the caller does the
//! safe thing (pins, skips, redacts).

/// A backend's flavour and version, from its greeting (`10.11.6-MariaDB` is MariaDB 101106).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    pub mariadb: bool,
    /// `major * 10000 + minor * 100 + patch`, as executable comments write versions.
    pub version: u32,
}

impl Server {
    /// MariaDB 10.11, the server the tests run: for corpora that say what it runs.
    pub const MARIADB_10_11: Server = Server {
        mariadb: true,
        version: 101_100,
    };

    /// The flavour and version a greeting's server version string names (`5.5.5-10.11.6-MariaDB-1`
    /// is MariaDB 10.11.6, `8.0.36` MySQL 8.0.36); None if it names no version.
    pub fn from_greeting(version: &[u8]) -> Option<Server> {
        let text = std::str::from_utf8(version).ok()?;
        let mariadb = text.contains("MariaDB");
        // MariaDB behind the replication-compatible prefix `5.5.5-`.
        let text = match text.strip_prefix("5.5.5-") {
            Some(rest) if mariadb => rest,
            _ => text,
        };
        let mut parts = text
            .split(|c: char| !c.is_ascii_digit())
            .take(3)
            .map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        if minor > 99 || patch > 99 || major > 99 {
            return None;
        }
        Some(Server {
            mariadb,
            version: major * 10_000 + minor * 100 + patch,
        })
    }

    /// Whether this server runs an executable comment of `version` (None: `/*!` with no
    /// version), written `/*M!` (`maria`) or `/*!`.
    pub fn runs(&self, maria: bool, version: Option<u32>) -> bool {
        if maria && !self.mariadb {
            return false;
        }
        match version {
            None => true,
            Some(v) if self.mariadb => {
                v <= self.version && (maria || !(50_700..=99_999).contains(&v))
            }
            Some(v) => v <= self.version,
        }
    }
}

/// What is known of how the backend reads statements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dialect {
    /// From the backend's greeting; None: every server's reading counts.
    pub server: Option<Server>,
}

/// A character set in which a character's second byte may be `\` or `` ` ``.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Multibyte {
    /// No such character set (latin1, utf8mb4, binary, ...).
    #[default]
    None,
    Gbk,
    Big5,
    /// sjis and cp932.
    Sjis,
}

impl Multibyte {
    /// The length of the character at `text[i..]`: 2 for a lead byte followed by a second byte
    /// of this character set, else 1.
    #[inline]
    pub(crate) fn char_len(self, text: &[u8], i: usize) -> usize {
        let (Some(&a), Some(&b)) = (text.get(i), text.get(i + 1)) else {
            return 1;
        };
        let two = match self {
            Multibyte::None => false,
            Multibyte::Gbk => (0x81..=0xFE).contains(&a) && matches!(b, 0x40..=0x7E | 0x80..=0xFE),
            Multibyte::Big5 => (0xA1..=0xF9).contains(&a) && matches!(b, 0x40..=0x7E | 0xA1..=0xFE),
            Multibyte::Sjis => {
                matches!(a, 0x81..=0x9F | 0xE0..=0xFC) && matches!(b, 0x40..=0x7E | 0x80..=0xFC)
            }
        };
        if two {
            2
        } else {
            1
        }
    }
}

/// Which executable comments run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comments {
    /// Each is one token, its text unread: the digest's reading, which groups statements
    /// and does not decide what runs.
    Tokens,
    /// As this server runs them: a comment it runs is read as code, one it skips is a comment.
    Server(Server),
}

/// One way the server may read a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reading {
    pub comments: Comments,
    /// `\` escapes in strings (off under `NO_BACKSLASH_ESCAPES`).
    pub backslash_escapes: bool,
    /// `"` quotes a name (`ANSI_QUOTES`), not a string.
    pub ansi_quotes: bool,
    pub multibyte: Multibyte,
}

impl Reading {
    /// The digest's reading: default `sql_mode`, single-byte, executable comments as tokens.
    pub const DIGEST: Reading = Reading {
        comments: Comments::Tokens,
        backslash_escapes: true,
        ansi_quotes: false,
        multibyte: Multibyte::None,
    };
}

/// More readings than this and the text is not worth the work: the caller does the safe thing.
pub const MAX_READINGS: usize = 64;

/// Every reading of `text` the server could take given `dialect`, the most likely first (the
/// default `sql_mode`, single-byte); None when there are more than [`MAX_READINGS`].
pub fn readings(text: &[u8], dialect: Dialect) -> Option<Vec<Reading>> {
    let servers = servers(text, dialect)?;
    let escapes: &[bool] = if text.contains(&b'\\') {
        &[true, false]
    } else {
        &[true]
    };
    let ansi: &[bool] = if text.contains(&b'"') {
        &[false, true]
    } else {
        &[false]
    };
    let multibyte: &[Multibyte] = if text
        .windows(2)
        .any(|w| w[0] >= 0x81 && matches!(w[1], b'\\' | b'`'))
    {
        &[
            Multibyte::None,
            Multibyte::Gbk,
            Multibyte::Big5,
            Multibyte::Sjis,
        ]
    } else {
        &[Multibyte::None]
    };
    let count = servers.len() * escapes.len() * ansi.len() * multibyte.len();
    if count > MAX_READINGS {
        return None;
    }
    let mut all = Vec::with_capacity(count);
    for &server in &servers {
        for &mb in multibyte {
            for &e in escapes {
                for &a in ansi {
                    all.push(Reading {
                        comments: Comments::Server(server),
                        backslash_escapes: e,
                        ansi_quotes: a,
                        multibyte: mb,
                    });
                }
            }
        }
    }
    Some(all)
}

/// The servers whose readings of the executable comments in `text` differ: the given one, or
/// (unknown) for each flavour a version below every comment's, at each comment's, and above
/// all of them.
fn servers(text: &[u8], dialect: Dialect) -> Option<Vec<Server>> {
    if let Some(server) = dialect.server {
        return Some(vec![server]);
    }
    let top = Server {
        mariadb: true,
        version: u32::MAX,
    };
    // The newest server first: the likeliest reading, whose reason is the one reported.
    let mut versions = vec![u32::MAX, 0];
    let mut any = false;
    let mut i = 0;
    while let Some(n) = text
        .get(i..)
        .and_then(|t| t.windows(3).position(|w| w == b"/*!" || w == b"/*M"))
    {
        let at = i + n + 2;
        i = at;
        let at = if text.get(at) == Some(&b'M') {
            if text.get(at + 1) != Some(&b'!') {
                continue;
            }
            at + 2
        } else {
            at + 1
        };
        any = true;
        if let Some(v) = comment_version(text, at).0 {
            if !versions.contains(&v) {
                versions.push(v);
            }
        }
        if versions.len() > MAX_READINGS {
            return None;
        }
    }
    if !any {
        return Some(vec![top]);
    }
    let mut all = Vec::with_capacity(versions.len() * 2);
    for mariadb in [true, false] {
        for &version in &versions {
            all.push(Server { mariadb, version });
        }
    }
    Some(all)
}

/// The version after an executable comment's `!` at `at` (five digits, or six for MariaDB's
/// `100100`) and how many digits it takes; `(None, 0)` without five digits.
pub(crate) fn comment_version(text: &[u8], at: usize) -> (Option<u32>, usize) {
    let digits = text
        .get(at..)
        .unwrap_or_default()
        .iter()
        .take(6)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits < 5 {
        return (None, 0);
    }
    let v = text[at..at + digits]
        .iter()
        .fold(0u32, |v, &d| v * 10 + u32::from(d - b'0'));
    (Some(v), digits)
}

#[cfg(test)]
mod tests;
