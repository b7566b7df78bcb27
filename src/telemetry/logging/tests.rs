use std::io;
use std::sync::{Arc, Mutex};

use super::*;

#[test]
fn escapes_control_and_bidi_characters_only() {
    assert_eq!(escaped("app_user"), "app_user");
    assert_eq!(escaped("a\nb\r\tc"), "a\\nb\\r\\tc");
    assert_eq!(escaped("\u{1b}[31mred"), "\\u{1b}[31mred");
    assert_eq!(escaped("x\0y\u{7f}\u{85}"), "x\\u{0}y\\u{7f}\\u{85}");
    assert_eq!(escaped("ab\u{202e}cd"), "ab\\u{202e}cd");
    // Not control characters: kept as they are, the replacement character of a lossy
    // conversion from bytes that were not UTF-8 included.
    assert_eq!(escaped("Zoë \\n 名前 \u{fffd}"), "Zoë \\n 名前 \u{fffd}");
}

/// A `MakeWriter` collecting everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

const EVIL: &str = "evil\n2026-12-02T00:00:00Z  INFO forged line\u{1b}[31m";

/// What one event with [`EVIL`] in a Display field, a Debug-less span field and the message
/// looks like in the given format.
fn log_once(json: bool) -> String {
    let out = Captured::default();
    let builder = tracing_subscriber::fmt()
        .with_writer(out.clone())
        .with_ansi(false);
    let log = || {
        let span = tracing::info_span!("session", client = %EVIL);
        let _in = span.enter();
        tracing::info!(user = %EVIL, schema = EVIL, "authentication failed: {EVIL}");
    };
    if json {
        tracing::subscriber::with_default(builder.json().finish(), log);
    } else {
        tracing::subscriber::with_default(builder.fmt_fields(text_fields()).finish(), log);
    }
    let bytes = out.0.lock().unwrap().clone();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_text_event_stays_one_line_whatever_its_fields_hold() {
    let line = log_once(false);
    assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    assert!(line.ends_with('\n'), "{line:?}");
    assert!(!line.contains('\u{1b}'), "{line:?}");
    let shown = escaped(EVIL);
    for part in [
        format!("session{{client={shown}}}"),
        format!("authentication failed: {shown}"),
        format!("user={shown}"),
        format!("schema=\"{}\"", escaped(&EVIL.escape_debug().to_string())),
    ] {
        assert!(line.contains(&part), "{part:?} not in {line:?}");
    }
}

#[test]
fn json_events_are_escaped_by_the_json_formatter() {
    let line = log_once(true);
    assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    assert!(!line.contains('\u{1b}'), "{line:?}");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["fields"]["user"], EVIL);
    assert_eq!(
        v["fields"]["message"],
        format!("authentication failed: {EVIL}")
    );
}
