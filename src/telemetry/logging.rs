//! How log lines are written: one event, one line, whatever a peer sent.
//!
//! Log fields and messages carry text from the network: user and schema names, auth plugin
//! names and connect attributes from a client's handshake, a server's error message (MariaDB's
//! 1045 repeats the user name), a PROXY protocol header, a peer instance's answer. In the text
//! format a newline in any of them would start a forged log line, and an ANSI escape would
//! restyle or rewrite the operator's terminal. Rather than trusting every call site to wrap
//! such values, the text format's field formatter escapes every field and message: control
//! characters (`\n`, `\r`, `\t`, `\u{1b}`, …) and the bidirectional-text controls that reorder
//! what a reader sees are written as escapes. Backslashes are left as they are: a name holding
//! the two characters `\n` reads the same as an escaped newline, but cannot break the line. The
//! JSON format needs none of this: its formatter escapes control characters in strings.

use std::fmt::{self, Write};

use tracing::field::Field;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

use crate::config::{Config, LogFormat};

/// Writes into the inner writer with control and bidi characters escaped.
pub struct Escaping<W>(pub W);

/// Explicit directional formatting characters (Unicode UAX #9): they reorder how the text
/// around them is displayed.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

impl<W: Write> Write for Escaping<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut plain = 0;
        for (i, c) in s.char_indices() {
            let escape = match c {
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                c if c.is_control() || is_bidi_control(c) => None,
                _ => continue,
            };
            self.0.write_str(&s[plain..i])?;
            match escape {
                Some(e) => self.0.write_str(e)?,
                None => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
            }
            plain = i + c.len_utf8();
        }
        self.0.write_str(&s[plain..])
    }
}

/// `s` with control and bidi characters escaped, as the text log writes it.
pub fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    // Writing into a String cannot fail.
    let _ = Escaping(&mut out).write_str(s);
    out
}

/// The text format's fields as the default formatter lays them out (the message bare, then
/// `name=value` separated by spaces), every value escaped.
pub fn text_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(
        |writer: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug| {
            let name = field.name();
            if name.starts_with("log.") {
                // tracing-log's metadata of events from the `log` crate, shown elsewhere.
                return Ok(());
            }
            let mut out = Escaping(writer);
            if name == "message" {
                write!(out, "{value:?}")
            } else {
                write!(out, "{}={value:?}", name.trim_start_matches("r#"))
            }
        },
    )
    .delimited(" ")
}

/// Installs the process's subscriber: `config`'s level filter, its format, on stderr.
pub fn init(config: &Config, ansi: bool) {
    // The level was validated with the config; fall back to "info" rather than logging nothing.
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match config.log_format {
        LogFormat::Text => builder.fmt_fields(text_fields()).init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests;
