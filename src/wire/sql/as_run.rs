//! The statements a server could run for a text, each printed the way the digest prints it:
//! what query rules match, so that no way of writing a statement slips past a rule written for
//! its normalized text.
//!
//! For every reading the server could take of the text ([`readings`]): its tokens as that
//! server reads them (an executable comment it runs is code, one it skips is a comment), split
//! at each `;`, re-printed with names unquoted (backticks, or `"` under `ANSI_QUOTES`), literals
//! as neutral ones (so a string the reading ends elsewhere cannot swallow what follows once
//! re-read), hints and comments dropped, then normalized as the digest normalizes. A `PREPARE …
//! FROM '…'` or `EXECUTE IMMEDIATE '…'` also yields the statements of its string. Where the
//! server's reading cannot be followed (a comment the lexer cannot see through, more readings
//! than [`MAX_READINGS`], dynamic SQL from anything but a literal, nesting past
//! [`MAX_DEPTH`]) the answer is [`AsRun::Unsure`], and a rule that blocks must block it.

use super::digest::normalize;
use super::reading::{readings, Dialect, Reading, MAX_READINGS};
use super::token::{tokens_as, TokenKind};

/// Dynamic SQL inside dynamic SQL is followed this deep.
pub const MAX_DEPTH: usize = 4;

/// What a text may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsRun {
    /// Every statement of every reading, normalized; duplicates removed.
    Statements(Vec<String>),
    /// Not every reading could be followed.
    Unsure,
}

/// The statements `text` may run on a server of `dialect`, each normalized to at most
/// `max_len` bytes.
pub fn as_run(text: &[u8], dialect: Dialect, max_len: usize) -> AsRun {
    let mut out = Vec::new();
    match collect(text, dialect, max_len, 0, &mut out) {
        Some(()) => {
            out.sort_unstable();
            out.dedup();
            AsRun::Statements(out)
        }
        None => AsRun::Unsure,
    }
}

fn collect(
    text: &[u8],
    dialect: Dialect,
    max_len: usize,
    depth: usize,
    out: &mut Vec<String>,
) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    let all = readings(text, dialect)?;
    debug_assert!(all.len() <= MAX_READINGS);
    for reading in all {
        for statement in statements(text, reading)? {
            if let Some(inner) = &statement.dynamic {
                collect(inner, dialect, max_len, depth + 1, out)?;
            }
            if !statement.printed.iter().all(u8::is_ascii_whitespace) {
                out.push(normalize(&statement.printed, max_len));
            }
        }
    }
    Some(())
}

/// One statement of one reading: its re-printed text, and the text of its dynamic SQL.
struct Printed {
    printed: Vec<u8>,
    dynamic: Option<Vec<u8>>,
}

/// The statements of `text` in `reading`; None where the reading cannot be followed.
fn statements(text: &[u8], reading: Reading) -> Option<Vec<Printed>> {
    let mut all = Vec::new();
    let mut printed = Vec::new();
    // The kinds and texts of the statement's first tokens, to see `PREPARE s FROM '…'` and
    // `EXECUTE IMMEDIATE '…'`.
    let mut head: Vec<(TokenKind, Vec<u8>)> = Vec::new();
    let mut count = 0usize;
    let mut finish =
        |printed: &mut Vec<u8>, head: &mut Vec<(TokenKind, Vec<u8>)>, count: &mut usize| {
            let dynamic = dynamic_sql(head, *count, reading);
            head.clear();
            *count = 0;
            match dynamic {
                Dynamic::None => {}
                Dynamic::Literal(inner) => {
                    all.push(Printed {
                        printed: std::mem::take(printed),
                        dynamic: Some(inner),
                    });
                    return Some(());
                }
                Dynamic::Unknown => return None,
            }
            all.push(Printed {
                printed: std::mem::take(printed),
                dynamic: None,
            });
            Some(())
        };
    for token in tokens_as(text, reading) {
        match token.kind {
            TokenKind::Unsure => return None,
            TokenKind::Hint | TokenKind::ExecutableComment => continue,
            TokenKind::Operator if token.text == b";" => {
                finish(&mut printed, &mut head, &mut count)?;
                continue;
            }
            _ => {}
        }
        count += 1;
        if head.len() < 5 {
            head.push((token.kind, token.text.to_vec()));
        }
        if !printed.is_empty() {
            printed.push(b' ');
        }
        match token.kind {
            TokenKind::QuotedIdentifier => print_name(&mut printed, token.text),
            TokenKind::String => printed.extend_from_slice(b"'s'"),
            TokenKind::HexOrBitLiteral => printed.extend_from_slice(b"0x0"),
            TokenKind::Variable if token.text.iter().any(|c| matches!(c, b'\'' | b'"' | b'`')) => {
                printed.extend_from_slice(b"@v")
            }
            _ => printed.extend_from_slice(token.text),
        }
    }
    finish(&mut printed, &mut head, &mut count)?;
    Some(all)
}

enum Dynamic {
    None,
    Literal(Vec<u8>),
    Unknown,
}

/// `PREPARE name FROM <source>` or `EXECUTE IMMEDIATE <source> [USING …]` (`count` tokens in
/// all): the literal source's text, or Unknown for any other source (a variable, an
/// expression).
fn dynamic_sql(head: &[(TokenKind, Vec<u8>)], count: usize, reading: Reading) -> Dynamic {
    let word = |i: usize, w: &str| {
        head.get(i).is_some_and(|(k, t)| {
            matches!(k, TokenKind::Keyword | TokenKind::Identifier)
                && t.eq_ignore_ascii_case(w.as_bytes())
        })
    };
    let (source, using) = if word(0, "PREPARE") && word(2, "FROM") {
        (3, false)
    } else if word(0, "EXECUTE") && word(1, "IMMEDIATE") {
        (2, word(3, "USING"))
    } else {
        return Dynamic::None;
    };
    let whole = count == source + 1 || using;
    match head.get(source) {
        Some((TokenKind::String, text)) if whole => Dynamic::Literal(unquote(text, reading)),
        // `"…"` under ANSI_QUOTES is a name, which the server refuses as a source.
        Some((TokenKind::QuotedIdentifier, _)) if whole => Dynamic::None,
        _ => Dynamic::Unknown,
    }
}

/// A string literal's content: after any introducer, between its quotes, doubled quotes and
/// (in readings with them) backslash escapes undone.
fn unquote(text: &[u8], reading: Reading) -> Vec<u8> {
    let Some(open) = text.iter().position(|c| matches!(c, b'\'' | b'"')) else {
        return Vec::new();
    };
    let quote = text[open];
    let body = &text[open + 1..];
    let body = body.strip_suffix(&[quote]).unwrap_or(body);
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c == quote && body.get(i + 1) == Some(&quote) {
            out.push(quote);
            i += 2;
        } else if c == b'\\' && reading.backslash_escapes && i + 1 < body.len() {
            out.push(match body[i + 1] {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                b'0' => 0,
                b'Z' => 0x1A,
                b'b' => 0x08,
                other => other,
            });
            i += 2;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// A quoted name printed bare when it is a plain word, else in backticks (doubled inside).
fn print_name(out: &mut Vec<u8>, text: &[u8]) {
    let quote = text.first().copied().unwrap_or(b'`');
    let inner = &text[1.min(text.len())..];
    let inner = inner.strip_suffix(&[quote]).unwrap_or(inner);
    let mut name = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        name.push(inner[i]);
        i += if inner[i] == quote && inner.get(i + 1) == Some(&quote) {
            2
        } else {
            1
        };
    }
    let plain = !name.is_empty()
        && !name[0].is_ascii_digit()
        && name
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$'));
    if plain {
        out.extend_from_slice(&name);
    } else {
        out.push(b'`');
        for &c in &name {
            if c == b'`' {
                out.push(b'`');
            }
            out.push(c);
        }
        out.push(b'`');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> Vec<String> {
        match as_run(text.as_bytes(), Dialect::default(), 4096) {
            AsRun::Statements(s) => s,
            AsRun::Unsure => vec!["<unsure>".into()],
        }
    }

    fn plain(text: &str) -> String {
        normalize(text.as_bytes(), 4096)
    }

    #[test]
    fn ways_of_writing_one_statement_run_as_its_normalized_text() {
        let want = plain("DELETE FROM orders WHERE id = 5");
        for variant in [
            "delete from orders where id=7",
            "DELETE   FROM\n`orders` WHERE id = 1",
            "/*!DELETE FROM orders*/ WHERE id = 2",
            "/*M!100000 DELETE */ FROM orders WHERE id = 3",
            "DELETE /* hi */ FROM orders -- x\n WHERE id = 4",
            "DELETE /*+ NO_ICP(orders) */ FROM orders WHERE id = 4",
        ] {
            let got = run(variant);
            assert!(
                got.iter().any(|s| s.eq_ignore_ascii_case(&want)),
                "{variant}: {got:?} vs {want}"
            );
        }
    }

    #[test]
    fn each_statement_of_a_multi_statement_and_dynamic_sql_count() {
        let want = plain("DELETE FROM orders WHERE id = 5");
        for variant in [
            "SELECT 1; DELETE FROM orders WHERE id = 5",
            "PREPARE s FROM 'DELETE FROM orders WHERE id = 5'",
            "EXECUTE IMMEDIATE 'DELETE FROM orders WHERE id = ''5'''",
            "PREPARE s FROM \"DELETE FROM `orders` WHERE id = 5\"",
        ] {
            let got = run(variant);
            assert!(
                got.iter().any(|s| s.eq_ignore_ascii_case(&want)),
                "{variant}: {got:?}"
            );
        }
        let with_using = run("EXECUTE IMMEDIATE 'DELETE FROM orders WHERE id = ?' USING 5");
        assert!(
            with_using.iter().any(|s| s.eq_ignore_ascii_case(&want)),
            "{with_using:?}"
        );
        assert_eq!(run("PREPARE s FROM @sql"), vec!["<unsure>"]);
        assert_eq!(
            run("EXECUTE IMMEDIATE CONCAT('DEL', 'ETE')"),
            vec!["<unsure>"]
        );
    }

    #[test]
    fn a_string_another_reading_ends_elsewhere_cannot_hide_a_statement() {
        // Under NO_BACKSLASH_ESCAPES the string is `'\'`, and a DELETE follows it.
        let got = run("SELECT '\\'; DELETE FROM orders WHERE id = 5; -- '");
        let want = plain("DELETE FROM orders WHERE id = 5");
        assert!(got.iter().any(|s| s.eq_ignore_ascii_case(&want)), "{got:?}");
        // Under ANSI_QUOTES a double-quoted word is a name.
        let got = run("DELETE FROM \"orders\" WHERE id = 5");
        assert!(got.iter().any(|s| s.eq_ignore_ascii_case(&want)), "{got:?}");
    }

    #[test]
    fn a_comment_the_lexer_cannot_follow_is_unsure() {
        assert_eq!(run("DELETE FROM orders /* not closed"), vec!["<unsure>"]);
    }
}
