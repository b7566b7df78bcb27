//! What each admin statement does once the connection is logged in: the commands of
//! [`super::commands`] applied (the HTTP endpoint's operations, `RELOAD`, `KILL`, `PAUSE`), the
//! connectors' questions answered, and any other SQL run over a fresh snapshot
//! ([`super::engine`]) off the runtime's thread.

use std::sync::Arc;

use tracing::info;

use super::commands::{self, BackendOp, Show, Statement};
use super::engine::{self, QueryError};
use super::session::AdminSession;
use crate::control::admin::ops;
use crate::wire::protocol::errors::code;
use crate::wire::protocol::serving::ResultSet;

/// ER_PARSE_ERROR: a command with the wrong arguments, SQL the engine refuses.
const PARSE_ERROR: u16 = 1064;

/// What a statement is answered with.
pub(super) enum Reply {
    Ok,
    Rows(ResultSet),
    Err(u16, String),
}

impl AdminSession {
    /// Answers one COM_QUERY.
    pub(super) async fn query(&self, text: &str) -> Reply {
        match commands::parse(text) {
            Statement::Empty | Statement::Ignored => Reply::Ok,
            Statement::Variables(names) => Reply::Rows(super::variables::select(&names)),
            Statement::ShowVariables(pattern) => {
                Reply::Rows(super::variables::show(pattern.as_deref()))
            }
            Statement::ShowStatus(pattern) => self.sql(status_sql(pattern.as_deref())).await,
            Statement::Show(what) => self.sql(show_sql(what).to_owned()).await,
            Statement::Backend { name, op } => {
                let change = match op {
                    BackendOp::SetState(s) => ops::Change::State(s),
                    BackendOp::Weight(w) => ops::Change::Weight(w),
                };
                match ops::apply(&self.state, self.peer, &name, change) {
                    Ok(json) => Reply::Rows(backend_row(&json)),
                    Err(e) => Reply::Err(code::UNKNOWN_ERROR, e.to_string()),
                }
            }
            Statement::Reload => {
                info!(caller = %self.peer, "RELOAD asked on the admin SQL port");
                match self.state.reload_requests.ask().await {
                    Ok(said) => {
                        let mut rs = ResultSet::text(&["reload"]);
                        rs.rows.push(vec![Some(said)]);
                        Reply::Rows(rs)
                    }
                    Err(e) => Reply::Err(code::UNKNOWN_ERROR, e),
                }
            }
            Statement::Kill { id, query } => self.kill(id, query).await,
            Statement::Pause(pool) => self.pause(pool.as_deref(), true),
            Statement::Resume(pool) => self.pause(pool.as_deref(), false),
            Statement::ProxySqlConfig => Reply::Err(
                code::UNKNOWN_ERROR,
                "mysql-lb reads its configuration from its YAML file: edit the file, then RELOAD"
                    .into(),
            ),
            Statement::Malformed(m) => Reply::Err(PARSE_ERROR, m),
            Statement::Sql(sql) => self.sql(sql.to_owned()).await,
        }
    }

    /// `KILL [QUERY|CONNECTION] id`: the session greeted with `id` has its statement (or its
    /// server connection, which ends the session) killed on its server, over the `kill:`
    /// account, as a client's KILL is run on another backend. The operator's own act: the
    /// account is the proxy's, and the admin port is no client's.
    async fn kill(&self, id: u32, query: bool) -> Reply {
        let Some(target) = self.state.kills.lookup(id) else {
            return Reply::Err(
                code::UNKNOWN_ERROR,
                format!("no session with id {id} (SHOW CLIENTS lists them)"),
            );
        };
        if target.thread_id == crate::backends::kill::NO_THREAD {
            return Reply::Err(
                code::UNKNOWN_ERROR,
                format!(
                    "session {id} holds no server connection now (a pooled session between \
                     transactions): nothing of it runs to stop"
                ),
            );
        }
        if !self.state.killer.configured() {
            return Reply::Err(
                code::UNKNOWN_ERROR,
                "KILL on the admin port runs on the session's server over the kill: account; \
                 configure kill.user"
                    .into(),
            );
        }
        let what = if query { "QUERY" } else { "CONNECTION" };
        let elsewhere = crate::backends::kill::Elsewhere {
            backend: std::sync::Arc::clone(&target.backend),
            statement: format!("KILL {what} {}", target.thread_id),
            proxy_id: id,
        };
        info!(caller = %self.peer, target = id, backend = %target.backend.name, thread = target.thread_id, "KILL {what} asked on the admin SQL port");
        let leg = self.state.own_connect_options(&target.backend);
        let turn = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        let answer = self.state.killer.run(&elsewhere, leg, turn).await;
        if let Some(e) = answer
            .get(4..)
            .and_then(crate::wire::protocol::errors::ServerErr::parse)
        {
            return Reply::Err(e.code, e.message);
        }
        let mut rs = ResultSet::text(&["id", "backend", "thread_id", "killed"]);
        rs.rows.push(vec![
            Some(id.to_string()),
            Some(target.backend.name.clone()),
            Some(target.thread_id.to_string()),
            Some(what.to_lowercase()),
        ]);
        Reply::Rows(rs)
    }

    /// `PAUSE` (`hold`) or `RESUME` `pool` (None: every pool): the pools named and the server
    /// connections they have in use now (a paused pool's reach 0 as their transactions end).
    fn pause(&self, pool: Option<&str>, hold: bool) -> Reply {
        let set = self.state.backends();
        if let Some(p) = pool {
            if set.pool(p).is_none() {
                return Reply::Err(code::UNKNOWN_ERROR, format!("no pool named {p:?}"));
            }
        }
        let pauses = &self.state.pauses;
        let changed = if hold {
            pauses.pause(pool)
        } else {
            pauses.resume(pool)
        };
        let what = if hold { "paused" } else { "resumed" };
        info!(caller = %self.peer, pool = pool.unwrap_or("*"), changed, "pool {what} on the admin SQL port");
        let mut rs = ResultSet::text(&["pool", "paused", "server_connections_in_use"]);
        for p in set.pools() {
            if pool.is_some_and(|name| name != p.name) {
                continue;
            }
            let in_use: usize = p
                .members()
                .iter()
                .filter_map(|b| self.state.server_pools.get(&b.name))
                .map(|sp| {
                    let c = sp.counts();
                    c.open.saturating_sub(c.idle)
                })
                .sum();
            rs.rows.push(vec![
                Some(p.name.clone()),
                Some(u8::from(pauses.holds(&p.name)).to_string()),
                Some(in_use.to_string()),
            ]);
        }
        Reply::Rows(rs)
    }

    /// Runs `sql` over a fresh snapshot, off the runtime's thread.
    async fn sql(&self, sql: String) -> Reply {
        let state = Arc::clone(&self.state);
        let recent = Arc::clone(&self.recent);
        let ran = tokio::task::spawn_blocking(move || {
            let db = engine::open()?;
            super::tables::fill(&db, &state, &recent)
                .map_err(|e| QueryError::Sql(format!("the snapshot failed: {e}")))?;
            super::meta::fill(&db, &state)
                .map_err(|e| QueryError::Sql(format!("the snapshot failed: {e}")))?;
            engine::query(&db, &sql)
        })
        .await;
        match ran {
            Ok(Ok(rows)) => Reply::Rows(rows),
            Ok(Err(e)) => Reply::Err(
                match e {
                    QueryError::Sql(_) | QueryError::NotAllowed(_) => PARSE_ERROR,
                    QueryError::TooLarge | QueryError::TooSlow => code::UNKNOWN_ERROR,
                },
                e.to_string(),
            ),
            Err(e) => Reply::Err(code::UNKNOWN_ERROR, format!("the query failed: {e}")),
        }
    }
}

/// The SQL each `SHOW` runs over the snapshot.
fn show_sql(what: Show) -> &'static str {
    match what {
        Show::Pools => {
            "SELECT hostgroup AS pool, backend, ConnUsed AS cl_active, waiting AS cl_waiting, \
             open - idle AS sv_active, idle AS sv_idle, open AS sv_open, \
             max_server_connections AS sv_max, status, \
             (SELECT count(*) > 0 FROM paused_pools WHERE pool IN (hostgroup, '*')) AS paused \
             FROM stats_mysql_connection_pool ORDER BY hostgroup, backend"
        }
        Show::Servers => {
            "SELECT name, pool, address, state, admin_state, role, weight, \
             active_connections, commands, recent_p50_seconds, recent_p99_seconds \
             FROM backends ORDER BY pool, name"
        }
        Show::Clients | Show::Processlist => {
            "SELECT * FROM stats_mysql_processlist ORDER BY SessionID"
        }
        Show::Stats => {
            "SELECT hostgroup AS pool, backend, Queries AS total_query_count, \
             Bytes_data_sent AS total_sent, Bytes_data_recv AS total_received, \
             ConnOK AS total_connections, ConnERR AS connect_errors, \
             Latency_us AS avg_latency_us, p99_us FROM stats_mysql_connection_pool \
             ORDER BY hostgroup, backend"
        }
        Show::Config => "SELECT * FROM config ORDER BY key",
        Show::Rules => "SELECT * FROM mysql_query_rules ORDER BY rule_id",
        Show::Tables => "SELECT name AS Tables_in_main FROM tables ORDER BY name",
        Show::Databases => "SELECT 'main' AS `Database`",
        Show::Warnings => "SELECT '' AS Level, 0 AS Code, '' AS Message WHERE 0",
        Show::Help => "SELECT command, what FROM help ORDER BY rowid",
    }
}

/// `SHOW STATUS [LIKE pattern]` over `stats_mysql_global`, with a server's column names (the
/// pattern as SQL's `LIKE` reads it: `%`, `_`, `\\` escaping).
fn status_sql(pattern: Option<&str>) -> String {
    let columns = "SELECT Variable_Name AS Variable_name, Variable_Value AS Value \
                   FROM stats_mysql_global";
    match pattern {
        None => columns.to_owned(),
        Some(p) => format!(
            "{columns} WHERE Variable_Name LIKE '{}' ESCAPE '\\'",
            p.replace('\'', "''")
        ),
    }
}

/// The answer of an operation: the backend's new state, as the HTTP endpoint returns it.
fn backend_row(json: &serde_json::Value) -> ResultSet {
    let mut rs = ResultSet::text(&["name", "admin_state", "weight", "active_connections"]);
    let field = |k: &str| match &json[k] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    };
    rs.rows.push(vec![
        field("name"),
        field("admin_state"),
        field("weight"),
        field("active_connections"),
    ]);
    rs
}
