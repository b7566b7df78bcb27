//! The admin port's tables about itself: `tables` (what can be queried), `help` (the
//! commands), and `config` (the settings in force, as `SHOW CONFIG` lists them).
//!
//! `config` lists settings, never secrets: the admin token, passwords and the admin account's
//! hash are not in it.

use rusqlite::{params, Connection};

use crate::proxy::state::ProxyState;

/// The commands `SHOW HELP` lists.
const HELP: &[(&str, &str)] = &[
    (
        "SHOW POOLS",
        "per backend: client and server connections of its pool",
    ),
    (
        "SHOW SERVERS",
        "the backends: state, role, weight, connections, latency",
    ),
    ("SHOW CLIENTS", "client sessions (also SHOW PROCESSLIST)"),
    (
        "SHOW STATS",
        "per backend: queries, bytes, connections, latency",
    ),
    ("SHOW CONFIG", "the settings in force"),
    ("SHOW RULES", "the query rules (mysql_query_rules)"),
    ("SHOW TABLES", "the tables SELECT can read"),
    ("SHOW STATUS", "every counter (stats_mysql_global)"),
    (
        "DRAIN name",
        "no new sessions or transactions on backend `name`",
    ),
    ("READY name", "back in rotation"),
    (
        "MAINTENANCE name",
        "out of rotation whatever the health checks say",
    ),
    (
        "WEIGHT name n",
        "set a backend's weight until the next reload",
    ),
    ("RELOAD", "re-read the configuration file, as SIGHUP does"),
    (
        "PAUSE [pool]",
        "hold new transactions of a transaction-mode pool (all: no name) at their start",
    ),
    ("RESUME [pool]", "let held transactions go"),
    ("SELECT …", "any read-only SQL over the tables (SQLite)"),
];

/// Creates and fills `tables`, `help` and `config`.
pub fn fill(db: &Connection, state: &ProxyState) -> rusqlite::Result<()> {
    db.execute_batch(
        "BEGIN;
         CREATE TABLE tables (name TEXT, description TEXT);
         CREATE TABLE help (command TEXT, what TEXT);
         CREATE TABLE config (key TEXT, value TEXT);
         CREATE TABLE paused_pools (pool TEXT);",
    )?;
    {
        let mut t = db.prepare("INSERT INTO tables VALUES (?1, ?2)")?;
        for (name, what) in super::tables::TABLES.iter().chain(OWN_TABLES) {
            t.execute(params![name, what])?;
        }
        let mut h = db.prepare("INSERT INTO help VALUES (?1, ?2)")?;
        for (command, what) in HELP {
            h.execute(params![command, what])?;
        }
        let mut c = db.prepare("INSERT INTO config VALUES (?1, ?2)")?;
        for (key, value) in settings(state) {
            c.execute(params![key, value])?;
        }
        rules(db, state)?;
        let mut p = db.prepare("INSERT INTO paused_pools VALUES (?1)")?;
        for pool in state.pauses.list() {
            p.execute(params![pool])?;
        }
    }
    db.execute_batch("COMMIT")
}

/// `mysql_query_rules` (the rules in force, ProxySQL's columns) and `stats_mysql_query_rules`
/// (their hits), created empty by `tables`.
fn rules(db: &Connection, state: &ProxyState) -> rusqlite::Result<()> {
    let set = state.rules.load_full();
    let mut rule = db.prepare(
        "INSERT INTO mysql_query_rules VALUES \
         (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?14, ?11, ?12, ?13, 1)",
    )?;
    let mut stats = db.prepare("INSERT INTO stats_mysql_query_rules VALUES (?1, ?2, ?3, ?4)")?;
    for (i, r) in set.rules().iter().enumerate() {
        let c = &r.config;
        let commands = match (c.query, c.prepare) {
            (true, true) => "query,prepare",
            (true, false) => "query",
            _ => "prepare",
        };
        let id = i as i64 + 1;
        rule.execute(params![
            id,
            c.name,
            c.user,
            c.schema,
            c.client.as_ref().map(ToString::to_string),
            c.digest.map(|d| format!("{d:016x}")),
            c.digest_text,
            c.pattern,
            commands,
            c.error,
            c.timeout.map(|t| t.as_millis() as i64),
            c.max_concurrency,
            c.log,
            c.route.map(|r| match r {
                crate::config::RuleRoute::Primary => "primary",
                crate::config::RuleRoute::Replica => "replica",
            }),
        ])?;
        let (hits, last) = r.hits();
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        stats.execute(params![
            id,
            c.name,
            clamp(hits),
            (last > 0).then(|| clamp(last))
        ])?;
    }
    Ok(())
}

const OWN_TABLES: &[(&str, &str)] = &[
    ("tables", "the tables the admin port answers from"),
    ("help", "the admin port's commands"),
    ("config", "the settings in force (no secrets)"),
    ("paused_pools", "the pools PAUSE holds (`*`: every pool)"),
];

/// `RoundRobin` as the file spells it: `round_robin`.
fn snake(debug: &str) -> String {
    let mut out = String::with_capacity(debug.len() + 4);
    for (i, c) in debug.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The settings in force, by the configuration's key names.
fn settings(state: &ProxyState) -> Vec<(String, String)> {
    let c = match state.applied.lock() {
        Ok(c) => c.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let duration = |d: std::time::Duration| humantime::format_duration(d).to_string();
    let listen: Vec<String> = c.listen.iter().map(ToString::to_string).collect();
    let mut out = vec![
        ("listen".to_owned(), listen.join(", ")),
        ("max_connections".into(), c.max_connections.to_string()),
        (
            "connect_mode".into(),
            format!("{:?}", c.connect_mode).to_lowercase(),
        ),
        ("connect_timeout".into(), duration(c.connect_timeout)),
        ("handshake_timeout".into(), duration(c.handshake_timeout)),
        (
            "idle_timeout".into(),
            c.idle_timeout.map_or_else(|| "none".into(), duration),
        ),
        ("shutdown_timeout".into(), duration(c.shutdown_timeout)),
        ("max_packet_size".into(), c.max_packet_size.to_string()),
        (
            "balancer.policy".into(),
            snake(&format!("{:?}", c.balancer.policy)),
        ),
        (
            "pooling.mode".into(),
            format!("{:?}", c.pooling.mode).to_lowercase(),
        ),
        (
            "health_check.interval".into(),
            duration(c.health_check.interval),
        ),
        ("digests.enabled".into(), c.digests.enabled.to_string()),
        (
            "digests.max_entries".into(),
            c.digests.max_entries.to_string(),
        ),
        ("tls".into(), c.tls.is_some().to_string()),
        ("compression".into(), c.compression.to_string()),
        (
            "admin_address".into(),
            c.admin_address
                .map_or_else(|| "off".into(), |a| a.to_string()),
        ),
        (
            "admin_sql.address".into(),
            c.admin_sql
                .as_ref()
                .map_or_else(|| "off".into(), |a| a.address.to_string()),
        ),
    ];
    for b in &c.backends {
        out.push((
            format!("backends.{}.address", b.name),
            b.address.to_string(),
        ));
        out.push((format!("backends.{}.weight", b.name), b.weight.to_string()));
    }
    out
}
