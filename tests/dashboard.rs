//! The shipped Grafana dashboard (`config/grafana-dashboard.json`) checked against what the proxy
//! really exports.
//!
//! A panel whose query names a metric the proxy never exports stays empty without any error, and
//! that is found out during an incident. So every metric named in the dashboard's PromQL is looked
//! up in a live `/metrics` scrape of a proxy that has relayed, refused and ended sessions, and every
//! `mysql_lb_*` family the proxy exports must have a panel.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::mariadb::shared_pair;
use common::proxy::{config, TestProxy};
use mysql_async::prelude::*;
use mysql_lb::telemetry::metrics::{Metrics, Refusal};
use serde_json::Value;

const DASHBOARD: &str = include_str!("../config/grafana-dashboard.json");
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];
/// How long a scrape may lag behind what the client saw (a session's end is recorded by its task).
const SCRAPE_DEADLINE: Duration = Duration::from_secs(10);

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("config/grafana-dashboard.json is valid JSON")
}

/// Every panel, rows included, with the panels nested in collapsed rows.
fn all_panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for p in panels.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// Panels that draw something (rows only group them).
fn charts(dash: &Value) -> Vec<&Value> {
    all_panels(dash)
        .into_iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

fn variable<'a>(dash: &'a Value, name: &str) -> &'a Value {
    dash["templating"]["list"]
        .as_array()
        .and_then(|vars| vars.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no template variable {name:?}"))
}

/// The query text of a template variable: a plain string, or `{"query": ...}` in newer exports.
fn variable_query(var: &Value) -> &str {
    var["query"]
        .as_str()
        .or_else(|| var["query"]["query"].as_str())
        .unwrap_or_default()
}

/// Every PromQL text in the dashboard: panel targets and template variable queries.
fn expressions(dash: &Value) -> Vec<String> {
    let targets = all_panels(dash)
        .into_iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str());
    let variables = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .map(variable_query);
    targets.chain(variables).map(str::to_owned).collect()
}

/// The `mysql_lb_*` and `process_*` identifiers of a PromQL expression. Quoted label values are
/// skipped, so a matcher like `job="process_exporter"` is not mistaken for a metric; functions,
/// keywords and label names never carry those prefixes.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let mut escaped = false;
                for d in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == c {
                        break;
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let mut ident = String::from(c);
                while let Some(&d) = chars.peek() {
                    if !(d.is_ascii_alphanumeric() || d == '_' || d == ':') {
                        break;
                    }
                    ident.push(d);
                    chars.next();
                }
                if ident.starts_with("mysql_lb_") || ident.starts_with("process_") {
                    names.insert(ident);
                }
            }
            // A number such as 1e3 or a duration such as 5m must not start an identifier.
            c if c.is_ascii_digit() => {
                while chars
                    .peek()
                    .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '.' || *d == '_')
                {
                    chars.next();
                }
            }
            _ => {}
        }
    }
    names
}

/// What a Prometheus text exposition holds: the names of its samples and of its histogram families.
#[derive(Debug, Default)]
struct Exposition {
    samples: BTreeSet<String>,
    histograms: BTreeSet<String>,
    families: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut e = Self::default();
        for line in text.lines() {
            if let Some(ty) = line.strip_prefix("# TYPE ") {
                let mut parts = ty.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    e.families.insert(name.to_owned());
                    if kind == "histogram" {
                        e.histograms.insert(name.to_owned());
                    }
                }
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                e.samples.insert(line[..end].to_owned());
            }
        }
        e
    }

    /// A histogram series (`_bucket`, `_sum`, `_count`) of a family declared as a histogram, a
    /// histogram family by its base name (then its buckets and count exist), or a plain sample.
    fn exports(&self, name: &str) -> bool {
        let histogram_series = HISTOGRAM_SUFFIXES.iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|base| self.histograms.contains(base))
        });
        if histogram_series {
            return self.samples.contains(name);
        }
        if self.histograms.contains(name) {
            return self.samples.contains(&format!("{name}_bucket"))
                && self.samples.contains(&format!("{name}_count"));
        }
        self.samples.contains(name)
    }
}

/// The family a referenced name belongs to: its histogram suffix stripped.
fn family(name: &str) -> &str {
    HISTOGRAM_SUFFIXES
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

fn referenced_metrics(dash: &Value) -> BTreeSet<String> {
    expressions(dash)
        .iter()
        .flat_map(|e| metric_names(e))
        .collect()
}

#[test]
fn metric_names_are_the_prefixed_identifiers_of_an_expression() {
    let expr = r#"histogram_quantile(0.99, sum by (le, backend) (rate(mysql_lb_backend_query_duration_seconds_bucket{backend=~"$backend", job="process_x"}[$__rate_interval]))) / on (instance) process_open_fds > 1e3"#;
    let names: Vec<_> = metric_names(expr).into_iter().collect();
    assert_eq!(
        names,
        [
            "mysql_lb_backend_query_duration_seconds_bucket",
            "process_open_fds"
        ]
    );
    assert_eq!(
        family("mysql_lb_backend_query_duration_seconds_count"),
        "mysql_lb_backend_query_duration_seconds"
    );
    assert_eq!(
        family("mysql_lb_client_rejected_total"),
        "mysql_lb_client_rejected_total"
    );
}

#[test]
fn dashboard_is_importable_with_a_prometheus_datasource_input() {
    let dash = dashboard();
    let inputs = dash["__inputs"].as_array().expect("__inputs is a list");
    assert!(
        inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS"
            && i["type"] == "datasource"
            && i["pluginId"] == "prometheus"),
        "__inputs declares the DS_PROMETHEUS datasource: {inputs:?}"
    );
    assert!(dash["schemaVersion"].as_u64().unwrap_or(0) >= 36);
    assert!(
        dash["id"].is_null(),
        "an importable dashboard carries no id"
    );
    assert!(dash["title"].as_str().is_some_and(|t| !t.is_empty()));

    let charts = charts(&dash);
    assert!(
        charts.len() >= 10,
        "only {} panels draw something",
        charts.len()
    );
    let mut ids = BTreeSet::new();
    for panel in all_panels(&dash) {
        let id = panel["id"].as_u64().expect("every panel has a numeric id");
        assert!(ids.insert(id), "panel id {id} is used twice");
        let pos = &panel["gridPos"];
        let (x, w) = (pos["x"].as_u64(), pos["w"].as_u64());
        assert!(
            x.zip(w).is_some_and(|(x, w)| w > 0 && x + w <= 24),
            "panel {:?} fits the 24-column grid: {pos}",
            panel["title"]
        );
    }
    for panel in charts {
        let title = &panel["title"];
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        let targets = panel["targets"].as_array().expect("panel has targets");
        assert!(!targets.is_empty(), "{title} has no query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title} has an empty query"
            );
        }
    }
}

#[test]
fn dashboard_offers_a_multi_select_backend_variable_with_all() {
    let dash = dashboard();
    let backend = variable(&dash, "backend");
    assert_eq!(backend["type"], "query");
    assert_eq!(backend["datasource"]["uid"], "${DS_PROMETHEUS}");
    assert_eq!(backend["multi"], true);
    assert_eq!(backend["includeAll"], true);
    let query = variable_query(backend);
    assert!(
        query.starts_with("label_values(mysql_lb_backend_up") && query.ends_with(", backend)"),
        "backend values come from mysql_lb_backend_up: {query}"
    );
}

#[test]
fn per_backend_queries_follow_the_backend_variable_and_rates_the_scrape_interval() {
    let dash = dashboard();
    for panel in charts(&dash) {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default();
            let per_backend = metric_names(expr)
                .iter()
                .any(|m| m.starts_with("mysql_lb_backend_"));
            assert!(
                !per_backend || expr.contains(r#"backend=~"$backend""#),
                "{:?} ignores the backend variable: {expr}",
                panel["title"]
            );
            for range in expr.split('[').skip(1) {
                assert!(
                    range.starts_with("$__rate_interval]"),
                    "{:?} uses a fixed range instead of $__rate_interval: {expr}",
                    panel["title"]
                );
            }
        }
    }
}

#[test]
fn every_mysql_lb_metric_family_has_a_panel() {
    let metrics = Metrics::new();
    let _backend = metrics.backend("db");
    // Labelled counters only exist once used.
    metrics.rejected(Refusal::NoBackend);
    metrics.disconnected("client_quit");
    let exported = Exposition::parse(&String::from_utf8_lossy(&metrics.render()));
    let charted: BTreeSet<String> = referenced_metrics(&dashboard())
        .iter()
        .map(|m| family(m).to_owned())
        .collect();
    let missing: Vec<_> = exported
        .families
        .iter()
        .filter(|f| f.starts_with("mysql_lb_") && !charted.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "exported but not on the dashboard: {missing:?}"
    );
}

#[tokio::test]
async fn every_metric_the_dashboard_queries_is_exported_by_a_running_proxy() {
    let referenced = referenced_metrics(&dashboard());
    assert!(
        referenced.iter().any(|m| m.starts_with("process_")),
        "the dashboard charts the process too: {referenced:?}"
    );

    let pair = shared_pair();
    // A third backend nobody listens on: its failing replication checks give the lag series
    // (NaN, unknown); the two live primaries have none.
    let dead = common::mariadb::closed_port();
    let mut cfg = config(&[pair[0].tcp_addr(), pair[1].tcp_addr(), dead.address()]);
    cfg.health_check = mysql_lb::config::HealthCheckConfig {
        interval: Duration::from_millis(200),
        user: Some("bench".into()),
        password: Some(mysql_lb::config::Secret::new("bench")),
        max_replication_lag: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    // One admitted client, so a second one is refused and the refusal series exists.
    cfg.max_connections = 1;
    // The digest families (the "Top queries" table) exist once some rows are exported.
    cfg.digests.enabled = true;
    cfg.digests.prometheus_top = 5;
    let proxy = TestProxy::start_with(cfg);

    let mut conn = mysql_async::Conn::new(proxy.opts("bench", "bench"))
        .await
        .expect("first client is admitted");
    for _ in 0..3 {
        let one: Option<u8> = conn.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1));
    }
    let two: Option<u32> = conn.exec_first("SELECT ?", (2u32,)).await.unwrap();
    assert_eq!(two, Some(2));
    let refused = mysql_async::Conn::new(proxy.opts("bench", "bench")).await;
    assert!(
        refused.is_err(),
        "a second client is refused at max_connections = 1"
    );
    conn.disconnect().await.unwrap();

    // The session's end is recorded by its task, after the client already saw the close.
    let started = Instant::now();
    let (missing, body) = loop {
        let (status, body) = proxy.admin_get("/metrics");
        assert_eq!(status, 200, "{body}");
        let exposition = Exposition::parse(&body);
        let missing: Vec<_> = referenced
            .iter()
            .filter(|m| !exposition.exports(m))
            .cloned()
            .collect();
        if missing.is_empty() || started.elapsed() > SCRAPE_DEADLINE {
            break (missing, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not export: {missing:?}\n{body}"
    );
}
