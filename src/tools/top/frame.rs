//! One screen of `mysql-lb top` as plain text: a pure function of two samples of the admin
//! endpoint's JSON, so it is tested without a terminal.
//!
//! Rates (queries per second per backend and per digest) are differences between the last two
//! samples over the time between them, as `top` computes CPU shares. Every text that came over
//! the wire (names, query texts) has its control characters escaped before it reaches the
//! screen: a query text is a client's choice, and an escape sequence in it must not drive the
//! operator's terminal.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::TopSort;

/// What one refresh read: `/backends`, and `/queries` (None when the endpoint has none).
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    pub backends: Value,
    pub queries: Option<Value>,
}

/// Everything a frame shows.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The admin endpoint watched, as given.
    pub admin: &'a str,
    pub now: Option<&'a Sample>,
    pub prev: Option<&'a Sample>,
    pub sort: TopSort,
    pub backend: Option<&'a str>,
    pub interval: Duration,
    /// Why the last refresh failed, if it did.
    pub error: Option<&'a str>,
}

/// The screen for `view`, at most `height` lines of at most `width` characters each.
pub fn render(width: usize, height: usize, view: &View<'_>) -> String {
    let mut lines = Vec::with_capacity(height);
    let backends = view
        .now
        .and_then(|s| s.backends["backends"].as_array())
        .map_or(&[][..], Vec::as_slice);
    let dt = match (view.now, view.prev) {
        (Some(n), Some(p)) => {
            Some(n.at.saturating_duration_since(p.at).as_secs_f64()).filter(|d| *d > 0.0)
        }
        _ => None,
    };
    let previous_commands: HashMap<&str, u64> = view
        .prev
        .and_then(|s| s.backends["backends"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|b| Some((b["name"].as_str()?, b["commands"].as_u64()?)))
        .collect();
    let backend_qps = |b: &Value| -> Option<f64> {
        let before = previous_commands.get(b["name"].as_str()?)?;
        let now = b["commands"].as_u64()?;
        Some(now.checked_sub(*before)? as f64 / dt?)
    };
    let up = backends.iter().filter(|b| b["state"] == "up").count();
    let total_qps: Option<f64> = if backends.is_empty() {
        None
    } else {
        backends.iter().map(backend_qps).sum()
    };
    let instance = view
        .now
        .map(|s| plain(&s.backends["instance_id"]))
        .unwrap_or_else(|| "?".to_owned());
    lines.push(format!(
        "mysql-lb top  {}  instance {instance}  backends {up}/{} up  {} qps  every {}",
        clean(view.admin),
        backends.len(),
        total_qps.map_or_else(|| "-".to_owned(), |q| format!("{q:.1}")),
        humantime::format_duration(view.interval),
    ));
    lines.push(format!(
        "sort: {}  backend: {}  keys: q quit  s sort  b backend  r reset  +/- interval",
        view.sort.as_str(),
        view.backend.map_or_else(|| "all".to_owned(), clean),
    ));
    if let Some(e) = view.error {
        lines.push(format!(
            "admin endpoint {} unreachable (retrying every {}):",
            clean(view.admin),
            humantime::format_duration(view.interval)
        ));
        lines.push(format!("  {}", clean(e)));
    }
    lines.push(String::new());

    let name_w = backends
        .iter()
        .map(|b| plain(&b["name"]).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(7, 24);
    lines.push(format!(
        "{}  {:<10} {:<30} {:>6} {:>9} {:>8} {:>8} {:>6}",
        fit("BACKEND", name_w),
        "POOL",
        "STATE",
        "SESS",
        "QPS",
        "P50ms",
        "P99ms",
        "EJECT"
    ));
    for b in backends {
        let mut state = plain(&b["state"]);
        if b["admin_state"].as_str().is_some_and(|a| a != "ready") {
            state = format!("{state}/{}", plain(&b["admin_state"]));
        }
        // In a pool with roles: primary, replica or unknown.
        if let Some(role) = b["role"].as_str() {
            state = format!("{state} {}", clean(role));
        }
        if let Some(s) = b["ejection"]["standing"].as_str().filter(|s| *s != "in") {
            state = format!("{state} {}", clean(s));
        }
        lines.push(format!(
            "{}  {} {} {:>6} {:>9} {:>8} {:>8} {:>6}",
            fit(&plain(&b["name"]), name_w),
            fit(&plain(&b["pool"]), 10),
            fit(&state, 30),
            plain(&b["active_connections"]),
            backend_qps(b).map_or_else(|| "-".to_owned(), |q| format!("{q:.1}")),
            ms(&b["recent_p50_seconds"]),
            ms(&b["recent_p99_seconds"]),
            plain(&b["ejection"]["ejections"]),
        ));
    }
    lines.push(String::new());
    queries_table(&mut lines, view, dt, name_w, height);

    let mut out = String::new();
    for line in lines.iter().take(height) {
        let _ = writeln!(out, "{}", cut(line, width));
    }
    out
}

fn queries_table(
    lines: &mut Vec<String>,
    view: &View<'_>,
    dt: Option<f64>,
    name_w: usize,
    height: usize,
) {
    let Some(queries) = view.now.and_then(|s| s.queries.as_ref()) else {
        if view.now.is_some() {
            lines.push("query digests are off (this mysql-lb has no /queries)".to_owned());
        }
        return;
    };
    if queries["enabled"] == false {
        lines.push("query digests are off (digests.enabled)".to_owned());
        return;
    }
    let previous: HashMap<Key<'_>, u64> = view
        .prev
        .and_then(|s| s.queries.as_ref())
        .and_then(|q| q["queries"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|q| Some((key(q), q["count"].as_u64()?)))
        .collect();
    let rate = |q: &Value| -> Option<f64> {
        let before = previous.get(&key(q))?;
        Some(q["count"].as_u64()?.checked_sub(*before)? as f64 / dt?)
    };
    let mut rows: Vec<&Value> = queries["queries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|q| view.backend.is_none_or(|b| q["backend"] == b))
        .collect();
    rows.sort_by(|a, b| {
        sort_value(b, view.sort)
            .total_cmp(&sort_value(a, view.sort))
            .then_with(|| sort_value(b, TopSort::Count).total_cmp(&sort_value(a, TopSort::Count)))
    });
    lines.push(format!(
        "{:>8} {:>9} {:>5} {:>8} {:>8} {:>9} {:>8}  {}  {:<10} {:<7} QUERY",
        "COUNT/s",
        "COUNT",
        "ERR",
        "AVGms",
        "P99ms",
        "TOTALs",
        "ROWS",
        fit("BACKEND", name_w),
        "USER",
        "KIND"
    ));
    if rows.is_empty() {
        lines.push("(no query seen yet)".to_owned());
    }
    let room = height.saturating_sub(lines.len());
    for q in rows.into_iter().take(room) {
        let rows_moved =
            q["rows_sent"].as_u64().unwrap_or(0) + q["rows_affected"].as_u64().unwrap_or(0);
        lines.push(format!(
            "{:>8} {:>9} {:>5} {:>8} {:>8} {:>9.2} {:>8}  {}  {} {} {}",
            rate(q).map_or_else(|| "-".to_owned(), |r| format!("{r:.1}")),
            plain(&q["count"]),
            plain(&q["errors"]),
            ms(&q["avg_seconds"]),
            ms(&q["p99_seconds"]),
            q["sum_seconds"].as_f64().unwrap_or(0.0),
            rows_moved,
            fit(&plain(&q["backend"]), name_w),
            fit(&plain(&q["user"]), 10),
            fit(&plain(&q["kind"]), 7),
            plain(&q["text"]),
        ));
    }
}

/// What identifies one row of `/queries` across samples.
type Key<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, bool);

fn key(q: &Value) -> Key<'_> {
    (
        q["digest"].as_str().unwrap_or(""),
        q["kind"].as_str().unwrap_or(""),
        q["backend"].as_str().unwrap_or(""),
        q["user"].as_str().unwrap_or(""),
        q["schema"].as_str().unwrap_or(""),
        q["other"] == true,
    )
}

/// The number a row is ordered by under `sort`.
fn sort_value(q: &Value, sort: TopSort) -> f64 {
    let f = |k: &str| q[k].as_f64().unwrap_or(0.0);
    match sort {
        TopSort::Total => f("sum_seconds"),
        TopSort::Count => f("count"),
        TopSort::Avg => f("avg_seconds"),
        TopSort::P99 => f("p99_seconds"),
        TopSort::Errors => f("errors"),
        TopSort::Rows => f("rows_sent") + f("rows_affected"),
    }
}

/// The backend filter after `current`, as the `b` key cycles: all, then each backend in turn.
pub fn next_backend(current: Option<&str>, sample: Option<&Sample>) -> Option<String> {
    let names: Vec<&str> = sample
        .and_then(|s| s.backends["backends"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|b| b["name"].as_str())
        .collect();
    match current {
        None => names.first().map(|n| (*n).to_owned()),
        Some(c) => {
            let at = names.iter().position(|n| *n == c)?;
            names.get(at + 1).map(|n| (*n).to_owned())
        }
    }
}

/// A JSON value as text for the screen: strings bare and escaped, null as a dash.
fn plain(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => clean(s),
        other => clean(&other.to_string()),
    }
}

/// Control and bidi characters escaped, as the text log writes them.
fn clean(s: &str) -> String {
    crate::telemetry::logging::escaped(s)
}

fn ms(v: &Value) -> String {
    v.as_f64()
        .filter(|s| s.is_finite())
        .map_or_else(|| "-".to_owned(), |s| format!("{:.2}", s * 1000.0))
}

/// `s` cut or padded to exactly `w` characters.
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        format!("{s}{}", " ".repeat(w - n))
    } else if w == 0 {
        String::new()
    } else {
        let mut out: String = s.chars().take(w - 1).collect();
        out.push('~');
        out
    }
}

/// The first `w` characters of `s`.
fn cut(s: &str, w: usize) -> &str {
    match s.char_indices().nth(w) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests;
