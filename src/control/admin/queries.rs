//! `GET /queries` (the digest table as JSON: sorted, filtered, cut to a limit), `POST
//! /queries/reset`, and the digest families of `/metrics` (a bounded top per backend).
//!
//! Sample texts carry the literals a client sent, so they are shown only to a caller the
//! operations would accept (the token, when one is configured); normalized texts have none.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::telemetry::digest::{RowView, Snapshot};

/// Rows returned when the request names no limit, and at most.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 10_000;
/// Characters of a digest's text in a Prometheus label.
const LABEL_TEXT: usize = 80;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Total,
    Count,
    Avg,
    P99,
    Errors,
    Rows,
}

impl SortKey {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "total" => Self::Total,
            "count" => Self::Count,
            "avg" => Self::Avg,
            "p99" => Self::P99,
            "errors" => Self::Errors,
            "rows" => Self::Rows,
            _ => return None,
        })
    }

    fn value(self, r: &RowView) -> f64 {
        let s = &r.stats;
        match self {
            Self::Total => s.sum_ns as f64,
            Self::Count => s.count as f64,
            Self::Avg => s.sum_ns as f64 / s.count.max(1) as f64,
            Self::P99 => s.sketch.quantile(0.99).unwrap_or(0.0),
            Self::Errors => s.errors as f64,
            Self::Rows => (s.rows_sent + s.rows_affected) as f64,
        }
    }
}

/// What `GET /queries` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    pub sort: SortKey,
    pub limit: usize,
    pub backend: Option<String>,
    pub pool: Option<String>,
    pub user: Option<String>,
    pub schema: Option<String>,
    pub kind: Option<String>,
}

/// Parses the query string; an unknown parameter or value is an error naming it.
pub fn parse_params(query: Option<&str>) -> Result<Params, String> {
    let mut p = Params {
        sort: SortKey::Total,
        limit: DEFAULT_LIMIT,
        backend: None,
        pool: None,
        user: None,
        schema: None,
        kind: None,
    };
    for pair in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = super::ops::percent_decode(&v.replace('+', " "))
            .ok_or_else(|| format!("{k}: not valid percent-encoded UTF-8"))?;
        match k {
            "sort" => {
                p.sort = SortKey::parse(&v).ok_or_else(|| {
                    format!("sort: {v:?} is not one of total, count, avg, p99, errors, rows")
                })?
            }
            "limit" => {
                p.limit = v
                    .parse::<usize>()
                    .map_err(|_| format!("limit: {v:?} is not a number"))?
                    .min(MAX_LIMIT)
            }
            "backend" => p.backend = Some(v),
            "pool" => p.pool = Some(v),
            "user" => p.user = Some(v),
            "schema" => p.schema = Some(v),
            "kind" => p.kind = Some(v),
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    Ok(p)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn row_json(r: &RowView, samples: bool) -> Value {
    let s = &r.stats;
    let secs = |ns: u64| ns as f64 / 1e9;
    json!({
        "digest": r.digest.map(|d| d.to_string()),
        "kind": r.kind.as_str(),
        "text": &*r.texts.text,
        "sample": if samples { Some(&*r.texts.sample) } else { None },
        "backend": &*r.ident.backend,
        "pool": &*r.ident.pool,
        "user": &*r.ident.user,
        "schema": &*r.ident.schema,
        "other": r.digest.is_none(),
        "count": s.count,
        "errors": s.errors,
        "sum_seconds": secs(s.sum_ns),
        "min_seconds": if s.count > 0 { secs(s.min_ns) } else { 0.0 },
        "max_seconds": secs(s.max_ns),
        "avg_seconds": secs(s.sum_ns) / s.count.max(1) as f64,
        "p50_seconds": s.sketch.quantile(0.50),
        "p95_seconds": s.sketch.quantile(0.95),
        "p99_seconds": s.sketch.quantile(0.99),
        "rows_sent": s.rows_sent,
        "rows_affected": s.rows_affected,
        "first_seen_unix_ms": unix_ms(r.first_seen),
        "last_seen_unix_ms": unix_ms(r.last_seen),
    })
}

/// The `GET /queries` answer: rows matching the filters, sorted (descending) and cut.
pub fn render(snapshot: &Snapshot, p: &Params, samples: bool) -> Value {
    let wanted = |field: &Option<String>, value: &str| field.as_deref().is_none_or(|f| f == value);
    let mut rows: Vec<&RowView> = snapshot
        .rows
        .iter()
        .filter(|r| {
            wanted(&p.backend, &r.ident.backend)
                && wanted(&p.pool, &r.ident.pool)
                && wanted(&p.user, &r.ident.user)
                && wanted(&p.schema, &r.ident.schema)
                && wanted(&p.kind, r.kind.as_str())
        })
        .collect();
    let matched = rows.len();
    rows.sort_by(|a, b| p.sort.value(b).total_cmp(&p.sort.value(a)));
    rows.truncate(p.limit);
    let statements: u64 = snapshot.rows.iter().map(|r| r.stats.count).sum();
    json!({
        "enabled": snapshot.enabled,
        "since_unix_ms": unix_ms(snapshot.since),
        "max_entries": snapshot.max_entries,
        "entries": snapshot.rows.len(),
        "folded": snapshot.folded,
        "text_bytes": snapshot.text_bytes,
        "max_text_bytes": snapshot.max_text_bytes,
        "statements": statements,
        "matched": matched,
        "queries": rows.iter().map(|r| row_json(r, samples)).collect::<Vec<_>>(),
    })
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The digest families of `/metrics`: per backend, the `top` digests by total time (summed over
/// users and schemas), labelled with the digest id and the start of its text. Nothing when
/// `top` is 0, so the series count is bounded by backends × `top` × 4.
pub fn prometheus(snapshot: &Snapshot, top: usize) -> String {
    if top == 0 {
        return String::new();
    }
    type Key<'a> = (&'a str, &'a str, String, &'a str);
    let mut by: HashMap<Key<'_>, [f64; 4]> = HashMap::new();
    for r in &snapshot.rows {
        let Some(d) = r.digest else { continue };
        let key = (
            &*r.ident.backend,
            r.kind.as_str(),
            d.to_string(),
            &*r.texts.text,
        );
        let v = by.entry(key).or_default();
        v[0] += r.stats.count as f64;
        v[1] += r.stats.sum_ns as f64 / 1e9;
        v[2] += r.stats.errors as f64;
        v[3] += r.stats.rows_sent as f64;
    }
    let mut per_backend: HashMap<&str, Vec<(Key<'_>, [f64; 4])>> = HashMap::new();
    for (k, v) in by {
        per_backend.entry(k.0).or_default().push((k, v));
    }
    let mut chosen = Vec::new();
    for (_, mut rows) in per_backend {
        rows.sort_by(|a, b| b.1[1].total_cmp(&a.1[1]));
        rows.truncate(top);
        chosen.extend(rows);
    }
    chosen.sort_by(|a, b| (a.0 .0, &a.0 .2).cmp(&(b.0 .0, &b.0 .2)));
    let families = [
        ("mysql_lb_digest_statements_total", "Statements of the digest (top digests per backend by total time; digests.prometheus_top)."),
        ("mysql_lb_digest_seconds_total", "Total time of the digest's statements, from the last byte sent to the end of the response."),
        ("mysql_lb_digest_errors_total", "Statements of the digest answered with an ERR packet."),
        ("mysql_lb_digest_rows_sent_total", "Result-set rows the digest's statements returned."),
    ];
    let mut out = String::new();
    for (i, (name, help)) in families.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for ((backend, kind, digest, text), v) in &chosen {
            let text: String = text.chars().take(LABEL_TEXT).collect();
            let _ = writeln!(
                out,
                "{name}{{backend=\"{}\",kind=\"{kind}\",digest=\"{digest}\",text=\"{}\"}} {}",
                label(backend),
                label(&text),
                v[i]
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_parse_and_refuse_unknowns() {
        let p = parse_params(Some("sort=p99&limit=5&backend=r%201&user=app")).unwrap();
        assert_eq!(p.sort, SortKey::P99);
        assert_eq!(p.limit, 5);
        assert_eq!(p.backend.as_deref(), Some("r 1"));
        assert_eq!(p.user.as_deref(), Some("app"));
        assert_eq!(parse_params(None).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(
            parse_params(Some("limit=999999999")).unwrap().limit,
            MAX_LIMIT
        );
        assert!(parse_params(Some("sort=bogus"))
            .unwrap_err()
            .contains("sort"));
        assert!(parse_params(Some("limit=-1"))
            .unwrap_err()
            .contains("limit"));
        assert!(parse_params(Some("drop=1")).unwrap_err().contains("drop"));
        assert!(parse_params(Some("user=%ff")).is_err());
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd\u{7}"), "a\\\"b\\\\c\\nd ");
    }
}
