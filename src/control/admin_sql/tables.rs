//! The tables of the SQL admin port: what an admin's `SELECT` reads, made from the proxy's
//! state as it is when the query arrives.
//!
//! Every admin query gets a fresh in-memory SQLite database that [`fill`] loads with a snapshot,
//! rather than a database kept up to date alongside the proxy: one query then sees one moment
//! across all its tables (a join of digests and backends adds up), no lock of the proxy is held
//! while the admin's SQL runs, and whatever that SQL writes lands in a copy thrown away after
//! it. Admin queries are rare and a fill costs milliseconds even with 10,000 digest rows (one
//! transaction, prepared inserts), so nothing is worth caching.
//!
//! Tables and columns take ProxySQL's admin names where the meaning matches
//! (`stats_mysql_query_digest`, `stats_mysql_connection_pool`, `mysql_servers`, ...), with
//! ProxySQL's units (microseconds, unix seconds), so the queries, dashboards and exporters
//! written for ProxySQL's admin on port 6032 work here too; mysql-lb's own columns come after
//! ProxySQL's. Two differences stay visible rather than faked: a `hostgroup` is the pool's name
//! (mysql-lb's pools are named, not numbered), and a digest is written as `GET /queries` writes
//! it (16 lowercase hex digits), so one can be looked up in the other.
//!
//! Figures come from the very sources of the HTTP admin: the digest rows from the digest table's
//! snapshot with `GET /queries`' conversions, the backend rows from `backends_json` (`GET
//! /backends`), so the two ports never disagree about the same moment. Sample texts are never
//! copied: they carry the literals clients sent.

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, Connection};
use serde_json::Value;

use crate::backends::kill;
use crate::control::admin::Recent;
use crate::proxy::state::ProxyState;

/// Every table this module creates: (name, one-line description), for `SHOW TABLES` and the manual.
pub const TABLES: &[(&str, &str)] = &[
    (
        "stats_mysql_query_digest",
        "The live digest table, as GET /queries (no sample texts).",
    ),
    (
        "stats_mysql_connection_pool",
        "Per backend: connections, commands, bytes, latency.",
    ),
    (
        "mysql_servers",
        "Per backend: pool, address, status, weight, role.",
    ),
    (
        "runtime_mysql_servers",
        "The rows of mysql_servers (there is no other runtime copy).",
    ),
    (
        "backends",
        "Every field of GET /backends, flattened: a row per backend.",
    ),
    (
        "stats_mysql_processlist",
        "Client sessions: proxy id, user, backend, server thread.",
    ),
    (
        "stats_mysql_global",
        "Every series of the proxy's metrics, and ProxySQL's totals.",
    ),
    ("stats_mysql_query_rules", "Hits of each query rule."),
    ("mysql_query_rules", "The query rules in effect."),
];

/// The query rules' tables, created empty: their rows come from the rules, which the caller owns.
pub const RULE_TABLES: &str = "
CREATE TABLE stats_mysql_query_rules (rule_id INTEGER, name TEXT, hits INTEGER, last_hit INTEGER);
CREATE TABLE mysql_query_rules (rule_id INTEGER, name TEXT, active INTEGER, username TEXT,
    schemaname TEXT, client_addr TEXT, digest TEXT, digest_text TEXT, match_pattern TEXT,
    commands TEXT, error_msg TEXT, destination TEXT, timeout INTEGER, max_concurrency INTEGER,
    log INTEGER, apply INTEGER);
";

/// The tables of fixed columns (`backends` is made from [`BACKEND_COLUMNS`]).
const SCHEMA: &str = "
CREATE TABLE stats_mysql_query_digest (hostgroup TEXT, schemaname TEXT, username TEXT,
    client_address TEXT, digest TEXT, digest_text TEXT, count_star INTEGER, first_seen INTEGER,
    last_seen INTEGER, sum_time INTEGER, min_time INTEGER, max_time INTEGER,
    sum_rows_affected INTEGER, sum_rows_sent INTEGER, backend TEXT, kind TEXT, errors INTEGER,
    p99_time INTEGER);
CREATE TABLE stats_mysql_connection_pool (hostgroup TEXT, srv_host TEXT, srv_port INTEGER,
    status TEXT, ConnUsed INTEGER, ConnFree INTEGER, ConnOK INTEGER, ConnERR INTEGER,
    MaxConnUsed INTEGER, Queries INTEGER, Queries_GTID_sync INTEGER, Bytes_data_sent INTEGER,
    Bytes_data_recv INTEGER, Latency_us INTEGER, backend TEXT, open INTEGER, idle INTEGER,
    waiting INTEGER, max_server_connections INTEGER, p50_us INTEGER, p99_us INTEGER);
CREATE TABLE mysql_servers (hostgroup_id TEXT, hostname TEXT, port INTEGER, status TEXT,
    weight INTEGER, max_replication_lag INTEGER, comment TEXT, name TEXT, role TEXT,
    read_only INTEGER, takes_writes INTEGER, gtid_applied TEXT, admin_state TEXT, state TEXT,
    type TEXT);
CREATE TABLE runtime_mysql_servers (hostgroup_id TEXT, hostname TEXT, port INTEGER, status TEXT,
    weight INTEGER, max_replication_lag INTEGER, comment TEXT, name TEXT, role TEXT,
    read_only INTEGER, takes_writes INTEGER, gtid_applied TEXT, admin_state TEXT, state TEXT,
    type TEXT);
CREATE TABLE stats_mysql_processlist (SessionID INTEGER, user TEXT, hostgroup TEXT, backend TEXT,
    ThreadID INTEGER);
CREATE TABLE stats_mysql_global (Variable_Name TEXT, Variable_Value TEXT);
";

/// The `backends` table: (column, JSON pointer into a `backends_json` entry, SQL type).
const BACKEND_COLUMNS: &[(&str, &str, &str)] = &[
    ("name", "/name", "TEXT"),
    ("pool", "/pool", "TEXT"),
    ("address", "/address", "TEXT"),
    ("state", "/state", "TEXT"),
    ("weight", "/weight", "INTEGER"),
    ("admin_state", "/admin_state", "TEXT"),
    ("type", "/type", "TEXT"),
    ("role", "/role", "TEXT"),
    ("read_only", "/read_only", "INTEGER"),
    ("takes_writes", "/takes_writes", "INTEGER"),
    ("gtid_applied", "/gtid_applied", "TEXT"),
    ("active_connections", "/active_connections", "INTEGER"),
    ("total_connections", "/total_connections", "INTEGER"),
    ("connect_errors", "/connect_errors", "INTEGER"),
    ("commands", "/commands", "INTEGER"),
    ("recent_commands", "/recent_commands", "INTEGER"),
    ("recent_p50_seconds", "/recent_p50_seconds", "REAL"),
    ("recent_p99_seconds", "/recent_p99_seconds", "REAL"),
    ("recent_latency_seconds", "/recent_latency_seconds", "REAL"),
    ("last_check_ok", "/last_check/ok", "INTEGER"),
    ("last_check_error", "/last_check/error", "TEXT"),
    ("last_check_at_unix_ms", "/last_check/at_unix_ms", "INTEGER"),
    ("ejection_standing", "/ejection/standing", "TEXT"),
    (
        "ejection_remaining_seconds",
        "/ejection/remaining_seconds",
        "REAL",
    ),
    ("ejections", "/ejection/ejections", "INTEGER"),
    ("server_pool_open", "/server_pool/open", "INTEGER"),
    ("server_pool_idle", "/server_pool/idle", "INTEGER"),
    ("server_pool_waiting", "/server_pool/waiting", "INTEGER"),
    ("server_pool_max", "/server_pool/max", "INTEGER"),
    ("server_pool_acquired", "/server_pool/acquired", "INTEGER"),
    (
        "server_pool_pinned_sessions",
        "/server_pool/pinned_sessions",
        "INTEGER",
    ),
    // The rest of the entry's scalars, after the columns named in the manual.
    ("ejection_in_a_row", "/ejection/in_a_row", "INTEGER"),
    (
        "server_pool_across_backends",
        "/server_pool/across_backends",
        "INTEGER",
    ),
    ("server_pool_moved_in", "/server_pool/moved_in", "INTEGER"),
    ("server_pool_retried", "/server_pool/retried", "INTEGER"),
    (
        "server_pool_keys_only_here",
        "/server_pool/keys_only_here",
        "INTEGER",
    ),
];

/// Creates every table of [`TABLES`] in `db` (an empty in-memory database) and fills it from
/// `state` at this moment. `rules` rows are filled by the caller later (see [`RULE_TABLES`]).
pub fn fill(db: &Connection, state: &ProxyState, recent: &Recent) -> rusqlite::Result<()> {
    db.execute_batch("BEGIN")?;
    match fill_all(db, state, recent) {
        Ok(()) => db.execute_batch("COMMIT"),
        Err(e) => {
            // The fill's error is the one to report; a failed rollback would add nothing to it.
            let _ = db.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

fn fill_all(db: &Connection, state: &ProxyState, recent: &Recent) -> rusqlite::Result<()> {
    db.execute_batch(SCHEMA)?;
    db.execute_batch(RULE_TABLES)?;
    // One read of the backends for every table, so they agree with each other.
    let json = crate::control::admin::backends_json(state, recent);
    let backends = json
        .get("backends")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    query_digest(db, state)?;
    connection_pool(db, state, backends)?;
    servers(db, state, backends)?;
    backends_table(db, backends)?;
    processlist(db, state)?;
    global(db, state, backends)
}

fn query_digest(db: &Connection, state: &ProxyState) -> rusqlite::Result<()> {
    let mut insert = db.prepare_cached(&insert_sql("stats_mysql_query_digest", 18))?;
    let snapshot = state.digests.snapshot();
    for r in &snapshot.rows {
        let s = &r.stats;
        // As `GET /queries`: an empty row's minimum is 0, not the u64::MAX it starts from.
        let min_ns = if s.count > 0 { s.min_ns } else { 0 };
        insert.execute(params![
            &*r.ident.pool,
            &*r.ident.schema,
            &*r.ident.user,
            "",
            r.digest.map(|d| d.to_string()),
            &*r.texts.text,
            saturate(s.count),
            unix_secs(r.first_seen),
            unix_secs(r.last_seen),
            saturate(s.sum_ns / 1000),
            saturate(min_ns / 1000),
            saturate(s.max_ns / 1000),
            saturate(s.rows_affected),
            saturate(s.rows_sent),
            &*r.ident.backend,
            r.kind.as_str(),
            saturate(s.errors),
            s.sketch.quantile(0.99).map(micros),
        ])?;
    }
    Ok(())
}

fn connection_pool(
    db: &Connection,
    state: &ProxyState,
    backends: &[Value],
) -> rusqlite::Result<()> {
    // Not in `backends_json`: read from the same backends, matched by name.
    let bytes: HashMap<String, [u64; 2]> = state
        .backends()
        .backends()
        .iter()
        .map(|b| (b.name.clone(), b.stats.bytes()))
        .collect();
    let mut insert = db.prepare_cached(&insert_sql("stats_mysql_connection_pool", 21))?;
    for b in backends {
        let (host, port) = host_port(text(b, "address"));
        let pool = &b["server_pool"];
        let (sent, received) = match bytes.get(text(b, "name")) {
            Some(&[to, from]) => (Some(saturate(to)), Some(saturate(from))),
            None => (None, None),
        };
        insert.execute(params![
            text(b, "pool"),
            host,
            i64::from(port),
            server_status(b),
            int(&b["active_connections"]),
            int(&pool["idle"]).unwrap_or(0),
            int(&b["total_connections"]),
            int(&b["connect_errors"]),
            None::<i64>,
            int(&b["commands"]),
            None::<i64>,
            sent,
            received,
            seconds_as_micros(&b["recent_latency_seconds"]),
            text(b, "name"),
            int(&pool["open"]),
            int(&pool["idle"]),
            int(&pool["waiting"]),
            int(&pool["max"]),
            seconds_as_micros(&b["recent_p50_seconds"]),
            seconds_as_micros(&b["recent_p99_seconds"]),
        ])?;
    }
    Ok(())
}

/// `mysql_servers`, and `runtime_mysql_servers` as its copy.
fn servers(db: &Connection, state: &ProxyState, backends: &[Value]) -> rusqlite::Result<()> {
    let lag = max_replication_lag(state);
    let mut insert = db.prepare_cached(&insert_sql("mysql_servers", 15))?;
    for b in backends {
        let (host, port) = host_port(text(b, "address"));
        insert.execute(params![
            text(b, "pool"),
            host,
            i64::from(port),
            server_status(b),
            int(&b["weight"]),
            lag,
            text(b, "name"),
            text(b, "name"),
            b["role"].as_str(),
            flag(&b["read_only"]),
            flag(&b["takes_writes"]).unwrap_or(0),
            b["gtid_applied"].as_str(),
            text(b, "admin_state"),
            text(b, "state"),
            text(b, "type"),
        ])?;
    }
    db.execute_batch("INSERT INTO runtime_mysql_servers SELECT * FROM mysql_servers")
}

/// `health_check.max_replication_lag` in whole seconds (rounded up, so a sub-second limit does
/// not read as ProxySQL's 0, "no limit"): it applies to every backend the checks read.
fn max_replication_lag(state: &ProxyState) -> Option<i64> {
    let applied = state.applied.lock().unwrap_or_else(PoisonError::into_inner);
    applied
        .health_check
        .max_replication_lag
        .map(|d| d.as_secs_f64().ceil() as i64)
}

fn backends_table(db: &Connection, backends: &[Value]) -> rusqlite::Result<()> {
    let columns: Vec<String> = BACKEND_COLUMNS
        .iter()
        .map(|(name, _, kind)| format!("{name} {kind}"))
        .collect();
    db.execute_batch(&format!("CREATE TABLE backends ({})", columns.join(", ")))?;
    let mut insert = db.prepare_cached(&insert_sql("backends", BACKEND_COLUMNS.len()))?;
    for b in backends {
        let row = BACKEND_COLUMNS
            .iter()
            .map(|(_, pointer, _)| b.pointer(pointer).map_or(SqlValue::Null, sql_value));
        insert.execute(rusqlite::params_from_iter(row))?;
    }
    Ok(())
}

fn processlist(db: &Connection, state: &ProxyState) -> rusqlite::Result<()> {
    let mut insert = db.prepare_cached(&insert_sql("stats_mysql_processlist", 5))?;
    for (id, t) in sessions(state) {
        let thread = match t.thread_id {
            kill::NO_THREAD => None,
            thread => Some(i64::from(thread)),
        };
        insert.execute(params![
            i64::from(id),
            t.user.as_deref(),
            &t.backend.pool,
            &t.backend.name,
            thread,
        ])?;
    }
    Ok(())
}

/// Every session of the KILL registry with its proxy id, the thread id read as
/// `Registry::lookup` reads it (a pooled session's connection of the moment).
fn sessions(state: &ProxyState) -> Vec<(u32, kill::Target)> {
    state.kills.list()
}

fn global(db: &Connection, state: &ProxyState, backends: &[Value]) -> rusqlite::Result<()> {
    let mut insert = db.prepare_cached(&insert_sql("stats_mysql_global", 2))?;
    let sum = |key: &str| -> i64 {
        backends
            .iter()
            .filter_map(|b| int(&b[key]))
            .fold(0, i64::saturating_add)
    };
    let proxysql = [
        (
            "Client_Connections_connected",
            state.metrics.client_connections.get(),
        ),
        ("Questions", sum("commands")),
        ("Server_Connections_connected", sum("active_connections")),
    ];
    for (name, value) in proxysql {
        insert.execute(params![name, value.to_string()])?;
    }
    let rendered = state.metrics.render();
    let exposition = String::from_utf8_lossy(&rendered);
    for (name, value) in metric_rows(&exposition) {
        insert.execute(params![name, value])?;
    }
    Ok(())
}

/// The series of a Prometheus text exposition as (name with its labels as written, value):
/// counters and gauges as they are, histograms and summaries by their `_count` and `_sum`
/// (their buckets and quantiles would be hundreds of rows of little use in SQL).
fn metric_rows(exposition: &str) -> Vec<(&str, &str)> {
    let (mut family, mut kind) = ("", "");
    let mut rows = Vec::new();
    for line in exposition.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut words = declared.split(' ');
            family = words.next().unwrap_or("");
            kind = words.next().unwrap_or("");
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, series, value)) = split_sample(line) else {
            continue;
        };
        let detail = match kind {
            "histogram" => name.strip_prefix(family) == Some("_bucket"),
            "summary" => name == family,
            _ => false,
        };
        if !detail {
            rows.push((series, value));
        }
    }
    rows
}

/// One sample line as (metric name, name with labels, value). Label values may hold spaces,
/// braces and escaped quotes, so the labels are scanned rather than split.
fn split_sample(line: &str) -> Option<(&str, &str, &str)> {
    let name_end = line.find(['{', ' '])?;
    let series_end = if line[name_end..].starts_with('{') {
        name_end + labels_len(&line[name_end..])?
    } else {
        name_end
    };
    let value = line[series_end..].split_whitespace().next()?;
    Some((&line[..name_end], &line[..series_end], value))
}

/// The length of the `{...}` that `s` starts with, quotes and escapes honoured.
fn labels_len(s: &str) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// A JSON scalar as SQLite stores it: booleans as 0/1, integers as INTEGER (clamped to i64),
/// other numbers as REAL; an array or object (none in the tables' sources) as its JSON text.
fn sql_value(v: &Value) -> SqlValue {
    match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => SqlValue::Integer(i),
            (None, Some(u)) => SqlValue::Integer(saturate(u)),
            _ => n.as_f64().map_or(SqlValue::Null, SqlValue::Real),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        other => SqlValue::Text(other.to_string()),
    }
}

/// ProxySQL's word for a backend's status: the operator's admin state first, then its health.
fn status_word(state: &str, admin_state: &str) -> &'static str {
    match (admin_state, state) {
        ("maintenance", _) => "OFFLINE_HARD",
        ("draining", _) => "OFFLINE_SOFT",
        (_, "up") => "ONLINE",
        _ => "SHUNNED",
    }
}

fn server_status(b: &Value) -> &'static str {
    status_word(text(b, "state"), text(b, "admin_state"))
}

/// An address as `backends_json` writes it, as host and port: `host:port`, `[v6]:port`, or a
/// unix socket's path with port 0 (so is anything else that is not `host:port`).
fn host_port(address: &str) -> (&str, u16) {
    if address.contains('/') {
        return (address, 0);
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return (address, 0);
    };
    let Ok(port) = port.parse::<u16>() else {
        return (address, 0);
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (host, port)
}

/// `INSERT INTO table VALUES (?, ...)` with `columns` parameters.
fn insert_sql(table: &str, columns: usize) -> String {
    format!(
        "INSERT INTO {table} VALUES ({})",
        vec!["?"; columns].join(", ")
    )
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_u64().map(saturate))
}

fn flag(v: &Value) -> Option<i64> {
    v.as_bool().map(i64::from)
}

fn seconds_as_micros(v: &Value) -> Option<i64> {
    v.as_f64().map(micros)
}

/// Seconds as whole microseconds (`as` saturates, and NaN becomes 0).
fn micros(seconds: f64) -> i64 {
    (seconds * 1e6).round() as i64
}

fn saturate(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// As `GET /queries`' unix milliseconds, in seconds.
fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| saturate(d.as_secs()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::config::{BackendAddr, BackendConfig, Config};
    use crate::telemetry::digest::{Ident, SessionDigests};
    use crate::telemetry::metrics::Metrics;
    use crate::wire::protocol::response::{cmd, Completed};

    #[test]
    fn json_values_map_to_sql_values() {
        assert_eq!(sql_value(&Value::Null), SqlValue::Null);
        assert_eq!(sql_value(&json!(true)), SqlValue::Integer(1));
        assert_eq!(sql_value(&json!(false)), SqlValue::Integer(0));
        assert_eq!(sql_value(&json!(-3)), SqlValue::Integer(-3));
        assert_eq!(sql_value(&json!(u64::MAX)), SqlValue::Integer(i64::MAX));
        assert_eq!(sql_value(&json!(0.25)), SqlValue::Real(0.25));
        assert_eq!(sql_value(&json!("up")), SqlValue::Text("up".into()));
        assert_eq!(sql_value(&json!([1])), SqlValue::Text("[1]".into()));
    }

    #[test]
    fn addresses_split_into_host_and_port() {
        assert_eq!(host_port("127.0.0.1:3306"), ("127.0.0.1", 3306));
        assert_eq!(host_port("[::1]:3307"), ("::1", 3307));
        assert_eq!(host_port("db.example:3308"), ("db.example", 3308));
        assert_eq!(host_port("/tmp/x.sock"), ("/tmp/x.sock", 0));
        assert_eq!(host_port("/tmp/a:b.sock"), ("/tmp/a:b.sock", 0));
        assert_eq!(host_port("odd"), ("odd", 0));
    }

    #[test]
    fn statuses_take_proxysql_words() {
        assert_eq!(status_word("up", "ready"), "ONLINE");
        assert_eq!(status_word("down", "ready"), "SHUNNED");
        assert_eq!(status_word("up", "draining"), "OFFLINE_SOFT");
        assert_eq!(status_word("down", "maintenance"), "OFFLINE_HARD");
    }

    #[test]
    fn metric_rows_keep_series_and_drop_buckets_and_quantiles() {
        let text = "# HELP a_total A.\n# TYPE a_total counter\n\
                    a_total{reason=\"x } \\\" y\"} 3\n\
                    # TYPE g gauge\ng 0.5\n\
                    # TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n\
                    h_sum 1.5\nh_count 2\n\
                    # TYPE s summary\ns{quantile=\"0.5\"} 1\n\
                    s_sum{k=\"v\"} 4\ns_count{k=\"v\"} 2\n";
        assert_eq!(
            metric_rows(text),
            vec![
                ("a_total{reason=\"x } \\\" y\"}", "3"),
                ("g", "0.5"),
                ("h_sum", "1.5"),
                ("h_count", "2"),
                ("s_sum{k=\"v\"}", "4"),
                ("s_count{k=\"v\"}", "2"),
            ]
        );
        assert_eq!(split_sample("broken{a=\"b\" 1"), None);
    }

    #[test]
    fn insert_statements_have_one_parameter_per_column() {
        assert_eq!(insert_sql("t", 3), "INSERT INTO t VALUES (?, ?, ?)");
    }

    #[test]
    fn fill_creates_every_table_from_a_state() {
        let mut config = Config {
            backends: vec![BackendConfig {
                name: "a".into(),
                address: BackendAddr::Tcp {
                    host: "127.0.0.1".into(),
                    port: 3306,
                },
                weight: 1,
                kind: Default::default(),
                tls: Default::default(),
                compression: false,
                proxy_protocol: None,
                pool: "default".into(),
                role: None,
            }],
            ..Config::default()
        };
        config.digests.enabled = true;
        let state = ProxyState::new(&config, Arc::new(Metrics::new()));
        let ident = Ident::new("a", "default", "app", "shop");
        let mut session = SessionDigests::start(&state.digests, 0, || ident).unwrap();
        let tag = session.statement(cmd::QUERY, b"\x03SELECT 1");
        session.completed(&Completed {
            command: cmd::QUERY,
            latency: Duration::from_micros(250),
            tag,
            rows: 1,
            ..Completed::default()
        });
        drop(session);

        let db = Connection::open_in_memory().unwrap();
        fill(&db, &state, &Recent::default()).unwrap();
        for (table, _) in TABLES {
            let sql = format!("SELECT count(*) FROM {table}");
            db.query_row(&sql, [], |r| r.get::<_, i64>(0)).unwrap();
        }
        let digest: (String, i64, i64) = db
            .query_row(
                "SELECT username, count_star, sum_time FROM stats_mysql_query_digest",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(digest, ("app".to_string(), 1, 250));
        let server: (String, i64, String) = db
            .query_row(
                "SELECT hostname, port, comment FROM runtime_mysql_servers",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(server, ("127.0.0.1".to_string(), 3306, "a".to_string()));
        let connected: String = db
            .query_row(
                "SELECT Variable_Value FROM stats_mysql_global \
                 WHERE Variable_Name = 'Client_Connections_connected'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(connected, "0");
    }
}
