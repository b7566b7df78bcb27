//! The page's top-queries table: each digest once, its backends side by side.
//!
//! `/queries` has one row per digest, command kind and (backend, pool, user, schema), so a
//! statement served by three replicas is three rows apart in a sort by total time. Here they
//! are one row with a column group per backend (count, p95, p99) and the slowest backend's p99
//! marked, so "slow on which replica" is one glance. [`group`] is the pure grouping; the HTML
//! escapes every value and takes its classes from a fixed set.

use std::fmt::Write;

use serde_json::Value;

use super::{cell, esc, ms, truncated, QUERY_ROWS, TEXT_CHARS};

/// One backend's share of a grouped row.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub count: u64,
    pub p95_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
}

/// One digest (with its kind, pool, user and schema) over every backend that served it.
#[derive(Debug, Clone, PartialEq)]
pub struct Group<'a> {
    pub row: &'a Value,
    pub count: u64,
    pub errors: u64,
    pub sum_seconds: f64,
    pub rows_moved: u64,
    /// Per column of [`Grouped::backends`]; `None` where that backend served none.
    pub shares: Vec<Option<Share>>,
}

impl Group<'_> {
    /// The column of the slowest backend's p99, when at least two backends have one.
    pub fn slowest(&self) -> Option<usize> {
        let p99s: Vec<(usize, f64)> = self
            .shares
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.as_ref()?.p99_seconds?)))
            .collect();
        if p99s.len() < 2 {
            return None;
        }
        p99s.into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
    }
}

/// The grouped table: its backend columns and its rows, by total time, at most [`QUERY_ROWS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Grouped<'a> {
    pub backends: Vec<String>,
    pub groups: Vec<Group<'a>>,
}

/// What makes two `/queries` rows one group: everything but the backend.
fn key(q: &Value) -> [String; 6] {
    let s = |f: &str| q[f].as_str().unwrap_or("").to_owned();
    let digest = if q["other"] == true {
        "(other)".to_owned()
    } else {
        s("digest")
    };
    [
        digest,
        s("kind"),
        s("pool"),
        s("user"),
        s("schema"),
        s("text"),
    ]
}

/// Groups `rows` (as `/queries` returns them) by digest, kind, pool, user and schema, with one
/// column per backend: those of `order` first (the set's order), then any other a row names.
pub fn group<'a>(rows: &'a [Value], order: &[String]) -> Grouped<'a> {
    let mut backends: Vec<String> = order.to_vec();
    let mut keys: Vec<[String; 6]> = Vec::new();
    let mut groups: Vec<Group<'a>> = Vec::new();
    for q in rows {
        let backend = q["backend"].as_str().unwrap_or("");
        let column = backends
            .iter()
            .position(|b| b == backend)
            .unwrap_or_else(|| {
                backends.push(backend.to_owned());
                backends.len() - 1
            });
        let k = key(q);
        let at = keys.iter().position(|x| *x == k).unwrap_or_else(|| {
            keys.push(k);
            groups.push(Group {
                row: q,
                count: 0,
                errors: 0,
                sum_seconds: 0.0,
                rows_moved: 0,
                shares: Vec::new(),
            });
            groups.len() - 1
        });
        let g = &mut groups[at];
        let count = q["count"].as_u64().unwrap_or(0);
        g.count += count;
        g.errors += q["errors"].as_u64().unwrap_or(0);
        g.sum_seconds += q["sum_seconds"].as_f64().unwrap_or(0.0);
        g.rows_moved +=
            q["rows_sent"].as_u64().unwrap_or(0) + q["rows_affected"].as_u64().unwrap_or(0);
        if g.shares.len() <= column {
            g.shares.resize(column + 1, None);
        }
        g.shares[column] = Some(Share {
            count,
            p95_seconds: q["p95_seconds"].as_f64(),
            p99_seconds: q["p99_seconds"].as_f64(),
        });
    }
    for g in &mut groups {
        g.shares.resize(backends.len(), None);
    }
    groups.sort_by(|a, b| b.sum_seconds.total_cmp(&a.sum_seconds));
    groups.truncate(QUERY_ROWS);
    // Only the columns some shown row uses.
    let used: Vec<bool> = (0..backends.len())
        .map(|i| groups.iter().any(|g| g.shares[i].is_some()))
        .collect();
    keep(&mut backends, &used);
    for g in &mut groups {
        keep(&mut g.shares, &used);
    }
    Grouped { backends, groups }
}

/// Keeps the items of `v` whose place in `used` is true.
fn keep<T>(v: &mut Vec<T>, used: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        used.get(i - 1).copied().unwrap_or(false)
    });
}

/// The section: a heading, then the table (or why there is none).
pub fn section(p: &mut String, queries: &Value, order: &[String]) {
    let _ = writeln!(
        p,
        "<h2>Top queries <small>by total time, top {QUERY_ROWS}, each backend side by side</small></h2>"
    );
    if queries["enabled"] == false {
        p.push_str(
            "<p class=\"off\" id=\"queries-off\">query digests are off (<code>digests.enabled</code>)</p>\n",
        );
        return;
    }
    let rows = queries["queries"].as_array().map_or(&[][..], Vec::as_slice);
    let grouped = group(rows, order);
    if grouped.groups.is_empty() {
        p.push_str("<p class=\"off\" id=\"queries-none\">no query seen yet</p>\n");
        return;
    }
    p.push_str(
        "<p class=\"note\">▲ marks the backend with the highest p99 for that query.</p>\n\
         <table id=\"queries\"><thead><tr><th rowspan=\"2\">query</th><th rowspan=\"2\">kind</th>\
         <th rowspan=\"2\">user</th><th rowspan=\"2\">schema</th><th rowspan=\"2\">count</th>\
         <th rowspan=\"2\">errors</th><th rowspan=\"2\">total s</th><th rowspan=\"2\">rows</th>",
    );
    for b in &grouped.backends {
        let name = esc(b);
        let _ = write!(
            p,
            "<th colspan=\"3\" class=\"backend\" data-backend=\"{name}\">{name}</th>"
        );
    }
    p.push_str("</tr>\n<tr>");
    for _ in &grouped.backends {
        p.push_str("<th class=\"first\">count</th><th>p95 ms</th><th>p99 ms</th>");
    }
    p.push_str("</tr></thead><tbody>\n");
    for g in &grouped.groups {
        row(p, g);
    }
    p.push_str("</tbody></table>\n");
}

/// One grouped row.
fn row(p: &mut String, g: &Group<'_>) {
    let q = g.row;
    let text = q["text"].as_str().unwrap_or("");
    let title = match q["sample"].as_str() {
        Some(sample) if !sample.is_empty() => {
            format!(" title=\"{}\"", esc(&truncated(sample, TEXT_CHARS)))
        }
        _ => String::new(),
    };
    let class = if q["other"] == true {
        " class=\"other-row\""
    } else {
        ""
    };
    let _ = write!(
        p,
        "<tr{class}><td class=\"sql\"{title}>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td>\
         <td class=\"n\">{}</td>",
        esc(&truncated(text, TEXT_CHARS)),
        cell(&q["kind"]),
        cell(&q["user"]),
        cell(&q["schema"]),
        g.count,
        g.errors,
        g.sum_seconds,
        g.rows_moved,
    );
    let slowest = g.slowest();
    for (i, share) in g.shares.iter().enumerate() {
        let Some(s) = share else {
            p.push_str("<td class=\"n first\">–</td><td class=\"n\">–</td><td class=\"n\">–</td>");
            continue;
        };
        let (p99_class, marker) = if slowest == Some(i) {
            (
                "n slowest",
                " <span class=\"marker\" title=\"slowest backend for this query\">▲</span>",
            )
        } else {
            ("n", "")
        };
        let seconds = |v: Option<f64>| ms(&v.map_or(Value::Null, Value::from));
        let _ = write!(
            p,
            "<td class=\"n first\">{}</td><td class=\"n\">{}</td>\
             <td class=\"{p99_class}\">{}{marker}</td>",
            s.count,
            seconds(s.p95_seconds),
            seconds(s.p99_seconds),
        );
    }
    p.push_str("</tr>\n");
}
