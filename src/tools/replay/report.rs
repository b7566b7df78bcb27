//! The replay's report: per digest, captured against replayed (count, errors new in the replay
//! with the first one's text, latency quantiles and their ratio, row counts that differ), and
//! commands per second over time for both. Printed as a table and written as JSON (and HTML,
//! see [`super::html`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::load::Damage;
use super::plan::{Key, SKIP_REDACTED};
use crate::telemetry::capture::format::Response;

/// One captured command and what became of it.
#[derive(Debug, Clone)]
pub struct Sample {
    pub key: Key,
    pub captured: Option<Response>,
    /// µs since the capture's first session, as captured.
    pub captured_t_us: u64,
    pub replayed: Option<Replayed>,
    pub skipped: Option<&'static str>,
}

#[derive(Debug, Clone)]
pub struct Replayed {
    pub latency: Duration,
    pub rows: u64,
    pub error: Option<(u16, String)>,
    /// When it was sent, since the replay started.
    pub at: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct DigestRow {
    pub kind: &'static str,
    pub digest: String,
    pub text: String,
    pub captured: u64,
    pub replayed: u64,
    pub skipped: u64,
    pub captured_errors: u64,
    pub replayed_errors: u64,
    /// Replayed with an error where the capture had none.
    pub new_errors: u64,
    pub first_new_error: Option<String>,
    /// Latency quantiles in microseconds: [p50, p95, p99].
    pub captured_us: [u64; 3],
    pub replayed_us: [u64; 3],
    /// replayed p50 / captured p50 (None without both).
    pub ratio_p50: Option<f64>,
    pub ratio_p95: Option<f64>,
    /// Commands whose row count differs from the captured one.
    pub rows_differ: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DamageRow {
    pub file: String,
    pub offset: usize,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub speed: Option<f64>,
    pub sessions: usize,
    pub captured_commands: u64,
    pub replayed_commands: u64,
    pub skipped_commands: u64,
    /// Of the skipped, those the capture wrote without their text or values (they may carry a
    /// password).
    pub redacted_commands: u64,
    pub new_errors: u64,
    /// Captured sessions of a pool across backends that moved to another backend, and their
    /// moves (the replay runs each session on its one connection to the target).
    pub moved_sessions: u64,
    pub moves: u64,
    /// How long the captured traffic took, and the replay.
    pub captured_seconds: f64,
    pub replay_seconds: f64,
    /// Commands per second, second by second.
    pub captured_per_second: Vec<u64>,
    pub replayed_per_second: Vec<u64>,
    pub digests: Vec<DigestRow>,
    pub damaged_files: Vec<DamageRow>,
    /// Why the replay ended before replaying everything (the target refused or went away).
    pub ended_early: Option<String>,
}

fn quantiles(mut v: Vec<u64>) -> [u64; 3] {
    if v.is_empty() {
        return [0; 3];
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    [at(0.5), at(0.95), at(0.99)]
}

fn ratio(replayed: u64, captured: u64, have_both: bool) -> Option<f64> {
    (have_both && captured > 0).then(|| replayed as f64 / captured as f64)
}

fn per_second(times: impl Iterator<Item = Duration>) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for t in times {
        let s = t.as_secs() as usize;
        if s >= out.len() {
            out.resize(s + 1, 0);
        }
        out[s] += 1;
    }
    out
}

/// What the report needs besides the samples.
pub struct Context {
    pub speed: Option<f64>,
    pub sessions: usize,
    /// Sessions that moved between backends while captured, and their moves.
    pub moved: (u64, u64),
    pub replay_wall: Duration,
    pub damage: Vec<Damage>,
    pub ended_early: Option<String>,
}

pub fn build(samples: &[Sample], ctx: Context) -> Report {
    let mut groups: BTreeMap<&Key, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        groups.entry(&s.key).or_default().push(s);
    }
    let mut digests: Vec<DigestRow> = groups
        .into_iter()
        .map(|(key, group)| digest_row(key, &group))
        .collect();
    digests.sort_by(|a, b| b.captured.cmp(&a.captured).then(a.text.cmp(&b.text)));
    let first = samples.iter().map(|s| s.captured_t_us).min().unwrap_or(0);
    let last = samples.iter().map(|s| s.captured_t_us).max().unwrap_or(0);
    Report {
        speed: ctx.speed,
        sessions: ctx.sessions,
        captured_commands: samples.len() as u64,
        replayed_commands: digests.iter().map(|d| d.replayed).sum(),
        skipped_commands: digests.iter().map(|d| d.skipped).sum(),
        redacted_commands: samples
            .iter()
            .filter(|s| s.skipped == Some(SKIP_REDACTED))
            .count() as u64,
        new_errors: digests.iter().map(|d| d.new_errors).sum(),
        moved_sessions: ctx.moved.0,
        moves: ctx.moved.1,
        captured_seconds: Duration::from_micros(last - first).as_secs_f64(),
        replay_seconds: ctx.replay_wall.as_secs_f64(),
        captured_per_second: per_second(
            samples
                .iter()
                .map(|s| Duration::from_micros(s.captured_t_us - first)),
        ),
        replayed_per_second: per_second(
            samples.iter().filter_map(|s| Some(s.replayed.as_ref()?.at)),
        ),
        digests,
        damaged_files: ctx
            .damage
            .into_iter()
            .map(|d| DamageRow {
                file: d.file.display().to_string(),
                offset: d.offset,
                error: d.error,
            })
            .collect(),
        ended_early: ctx.ended_early,
    }
}

fn digest_row(key: &Key, group: &[&Sample]) -> DigestRow {
    let mut row = DigestRow {
        kind: key.kind,
        digest: key.digest.clone(),
        text: key.text.clone(),
        captured: group.len() as u64,
        replayed: 0,
        skipped: 0,
        captured_errors: 0,
        replayed_errors: 0,
        new_errors: 0,
        first_new_error: None,
        captured_us: [0; 3],
        replayed_us: [0; 3],
        ratio_p50: None,
        ratio_p95: None,
        rows_differ: 0,
    };
    let mut cap_lat = Vec::new();
    let mut rep_lat = Vec::new();
    for s in group {
        let cap_error = s.captured.is_some_and(|c| c.error);
        row.captured_errors += u64::from(cap_error);
        if let Some(c) = &s.captured {
            cap_lat.push(c.latency_us);
        }
        if s.skipped.is_some() {
            row.skipped += 1;
        }
        let Some(r) = &s.replayed else { continue };
        row.replayed += 1;
        rep_lat.push(r.latency.as_micros() as u64);
        if let Some((code, message)) = &r.error {
            row.replayed_errors += 1;
            if !cap_error {
                row.new_errors += 1;
                row.first_new_error
                    .get_or_insert_with(|| format!("{code}: {message}"));
            }
        }
        if s.captured.is_some_and(|c| c.rows != r.rows) {
            row.rows_differ += 1;
        }
    }
    let both = !cap_lat.is_empty() && !rep_lat.is_empty();
    row.captured_us = quantiles(cap_lat);
    row.replayed_us = quantiles(rep_lat);
    row.ratio_p50 = ratio(row.replayed_us[0], row.captured_us[0], both);
    row.ratio_p95 = ratio(row.replayed_us[1], row.captured_us[1], both);
    row
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// The report as a text table (the top `limit` digests by captured count).
pub fn table(r: &Report, limit: usize) -> String {
    let mut out = String::new();
    let speed = r
        .speed
        .map_or("as fast as possible".to_owned(), |s| format!("{s}x"));
    let _ = writeln!(
        out,
        "replayed {} of {} commands ({} skipped, {} of them redacted) from {} sessions at {speed}: {:.1} s captured, {:.1} s replayed, {} new errors",
        r.replayed_commands, r.captured_commands, r.skipped_commands, r.redacted_commands, r.sessions,
        r.captured_seconds, r.replay_seconds, r.new_errors
    );
    if r.moves > 0 {
        let _ = writeln!(
            out,
            "captured across backends: {} sessions moved {} times (replayed each on its one connection)",
            r.moved_sessions, r.moves
        );
    }
    for d in &r.damaged_files {
        let _ = writeln!(
            out,
            "damaged: {} stopped at offset {}: {}",
            d.file, d.offset, d.error
        );
    }
    if let Some(why) = &r.ended_early {
        let _ = writeln!(out, "ended early: {why}");
    }
    let _ = writeln!(
        out,
        "{:<9} {:>8} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}  statement",
        "kind",
        "captured",
        "replayed",
        "new err",
        "cap p50",
        "rep p50",
        "cap p95",
        "rep p95",
        "ratio",
        "rows≠"
    );
    for d in r.digests.iter().take(limit) {
        let mut text: String = d.text.chars().take(60).collect();
        if let Some(e) = &d.first_new_error {
            text += &format!("  [first new error: {e}]");
        }
        let _ = writeln!(
            out,
            "{:<9} {:>8} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}  {}",
            d.kind,
            d.captured,
            d.replayed,
            d.new_errors,
            ms(d.captured_us[0]),
            ms(d.replayed_us[0]),
            ms(d.captured_us[1]),
            ms(d.replayed_us[1]),
            d.ratio_p50.map_or("-".to_owned(), |r| format!("{r:.2}")),
            d.rows_differ,
            text
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        assert_eq!(quantiles((1..=100).collect()), [50, 95, 99]);
        assert_eq!(quantiles(vec![7]), [7, 7, 7]);
        assert_eq!(quantiles(vec![]), [0, 0, 0]);
    }

    #[test]
    fn new_errors_and_differing_rows_are_counted_per_digest() {
        let key = Key {
            kind: "query",
            digest: "d".into(),
            text: "SELECT ?".into(),
        };
        let captured = Response {
            rows: 1,
            latency_us: 100,
            ..Response::default()
        };
        let sample = |error: Option<(u16, String)>, rows| Sample {
            key: key.clone(),
            captured: Some(captured),
            captured_t_us: 0,
            replayed: Some(Replayed {
                latency: Duration::from_micros(200),
                rows,
                error,
                at: Duration::ZERO,
            }),
            skipped: None,
        };
        let samples = vec![
            sample(None, 1),
            sample(Some((1146, "no table".into())), 0),
            sample(None, 2),
        ];
        let r = build(
            &samples,
            Context {
                speed: Some(1.0),
                sessions: 1,
                moved: (1, 2),
                replay_wall: Duration::from_secs(1),
                damage: vec![],
                ended_early: None,
            },
        );
        let d = &r.digests[0];
        assert_eq!(
            (d.captured, d.replayed, d.new_errors, d.rows_differ),
            (3, 3, 1, 2)
        );
        assert_eq!(d.first_new_error.as_deref(), Some("1146: no table"));
        assert_eq!(d.ratio_p50, Some(2.0));
        assert!(table(&r, 10).contains("first new error: 1146: no table"));
        assert!(table(&r, 10).contains("1 sessions moved 2 times"));
        assert!(super::super::html::render(&r).contains("1 sessions moved 2 times"));
    }
}
