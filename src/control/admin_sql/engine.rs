//! Runs one admin query over a snapshot of the proxy: a fresh in-memory SQLite database filled
//! by [`super::tables`], then the admin's statement, read-only, bounded in time and in size.
//!
//! SQLite rather than a parser of our own: `WHERE`, `GROUP BY`, joins and window functions work
//! as an admin expects, the same way ProxySQL's admin (also SQLite) answers them. A snapshot
//! per query rather than a kept database: nothing goes stale, nothing is shared between admin
//! connections, and filling a few thousand rows costs milliseconds on the admin's own thread.
//!
//! The engine runs with the proxy's OS identity, so the statement may only read: an authorizer
//! allows `SELECT`, reading columns, functions and recursive CTEs, and refuses everything else
//! (`ATTACH` a file, `VACUUM INTO` a file, `PRAGMA`, any write); no extension can be loaded
//! (rusqlite leaves `load_extension` off), and `SQLITE_LIMIT_ATTACHED` is 0 besides.

use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::Value;
use rusqlite::Connection;

use crate::wire::protocol::serving::{Column, ColumnType, ResultSet};

/// A query runs at most this long (its snapshot's filling aside).
pub const TIME_LIMIT: Duration = Duration::from_secs(5);
/// Rows an answer holds at most.
pub const MAX_ROWS: usize = 100_000;
/// Bytes of values an answer holds at most.
pub const MAX_BYTES: usize = 64 << 20;

/// Why a query gave no answer: the message goes to the admin as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Sql(String),
    #[error("the admin port only reads: {0} is not allowed")]
    NotAllowed(String),
    #[error("the answer is over {MAX_ROWS} rows or {MAX_BYTES} bytes: add a LIMIT or a WHERE")]
    TooLarge,
    #[error("the query ran over {}s and was stopped", TIME_LIMIT.as_secs())]
    TooSlow,
}

/// Opens an empty database with the engine's limits and the MySQL functions connectors call.
pub fn open() -> Result<Connection, QueryError> {
    let db = Connection::open_in_memory().map_err(sql_error)?;
    db.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)
        .map_err(sql_error)?;
    db.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, 1 << 20)
        .map_err(sql_error)?;
    db.set_limit(Limit::SQLITE_LIMIT_LENGTH, 16 << 20)
        .map_err(sql_error)?;
    functions(&db).map_err(sql_error)?;
    Ok(db)
}

/// `VERSION()`, `DATABASE()`, `USER()`, `UNIX_TIMESTAMP()`, `NOW()`: what connectors and
/// dashboards (Grafana's macros) call around their queries.
fn functions(db: &Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    db.create_scalar_function("version", 0, pure, |_| Ok(super::VERSION.to_owned()))?;
    db.create_scalar_function("database", 0, pure, |_| Ok("main".to_owned()))?;
    db.create_scalar_function("schema", 0, pure, |_| Ok("main".to_owned()))?;
    // The CLI's `status` asks for USER(): the admin port's one account, by what it is.
    for name in ["user", "current_user", "session_user", "system_user"] {
        db.create_scalar_function(name, 0, pure, |_| Ok("admin@mysql-lb".to_owned()))?;
    }
    let volatile = FunctionFlags::SQLITE_UTF8;
    db.create_scalar_function("unix_timestamp", 0, volatile, |_| {
        Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64))
    })?;
    db.create_scalar_function("now", 0, volatile, |_| {
        // `2026-12-07 21:50:00`, UTC, as MySQL's NOW() prints it.
        let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        Ok(stamp.replace('T', " ").trim_end_matches('Z').to_owned())
    })?;
    Ok(())
}

/// Runs `sql` (one statement) on `db`, filled, and reads the whole answer.
pub fn query(db: &Connection, sql: &str) -> Result<ResultSet, QueryError> {
    let refused = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let seen = std::sync::Arc::clone(&refused);
    db.authorizer(Some(move |ctx: AuthContext<'_>| allow(ctx, &seen)));
    let started = Instant::now();
    db.progress_handler(10_000, Some(move || started.elapsed() > TIME_LIMIT));
    let answer = read_all(db, sql);
    db.progress_handler(0, None::<fn() -> bool>);
    db.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
    match answer {
        Err(QueryError::Sql(m)) => {
            let what = refused.lock().ok().and_then(|mut r| r.take());
            Err(match what {
                Some(what) => QueryError::NotAllowed(what),
                None if m.contains("interrupted") => QueryError::TooSlow,
                None => QueryError::Sql(m),
            })
        }
        other => other,
    }
}

/// The authorizer: reading only.
fn allow(ctx: AuthContext<'_>, refused: &std::sync::Mutex<Option<String>>) -> Authorization {
    match ctx.action {
        AuthAction::Select
        | AuthAction::Read { .. }
        | AuthAction::Function { .. }
        | AuthAction::Recursive => Authorization::Allow,
        other => {
            if let Ok(mut r) = refused.lock() {
                *r = Some(describe(&other));
            }
            Authorization::Deny
        }
    }
}

fn describe(action: &AuthAction<'_>) -> String {
    let debug = format!("{action:?}");
    let word = debug
        .split([' ', '{', '('])
        .next()
        .unwrap_or("this statement");
    word.to_owned()
}

fn read_all(db: &Connection, sql: &str) -> Result<ResultSet, QueryError> {
    let mut stmt = db.prepare(sql).map_err(sql_error)?;
    if !stmt.readonly() {
        return Err(QueryError::NotAllowed("a statement that writes".into()));
    }
    let names: Vec<String> = stmt
        .column_names()
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    let declared: Vec<Option<String>> = stmt
        .columns()
        .iter()
        .map(|c| c.decl_type().map(str::to_owned))
        .collect();
    let width = names.len();
    let mut rows = stmt.query([]).map_err(sql_error)?;
    let mut values: Vec<Vec<Value>> = Vec::new();
    let mut bytes = 0usize;
    while let Some(row) = rows.next().map_err(sql_error)? {
        let mut out = Vec::with_capacity(width);
        for i in 0..width {
            let v: Value = row.get(i).map_err(sql_error)?;
            bytes += match &v {
                Value::Text(t) => t.len(),
                Value::Blob(b) => b.len(),
                _ => 8,
            };
            out.push(v);
        }
        values.push(out);
        if values.len() > MAX_ROWS || bytes > MAX_BYTES {
            return Err(QueryError::TooLarge);
        }
    }
    let columns = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| Column {
            kind: kind_of(values.iter().map(|r| &r[i]), declared[i].as_deref()),
            name,
        })
        .collect();
    let rows = values
        .into_iter()
        .map(|r| r.into_iter().map(text_of).collect())
        .collect();
    Ok(ResultSet { columns, rows })
}

/// A column's type from its values (SQLite's are per value): integers only, numbers, or text;
/// without a value, from the table's declaration.
fn kind_of<'v>(values: impl Iterator<Item = &'v Value>, declared: Option<&str>) -> ColumnType {
    let mut kind = None;
    for v in values {
        let this = match v {
            Value::Null => continue,
            Value::Integer(_) => ColumnType::Integer,
            Value::Real(_) => ColumnType::Double,
            Value::Text(_) | Value::Blob(_) => return ColumnType::Text,
        };
        kind = Some(match (kind, this) {
            (Some(ColumnType::Double), _) | (_, ColumnType::Double) => ColumnType::Double,
            _ => ColumnType::Integer,
        });
    }
    kind.unwrap_or(match declared.map(str::to_ascii_uppercase).as_deref() {
        Some("INTEGER") => ColumnType::Integer,
        Some("REAL") => ColumnType::Double,
        _ => ColumnType::Text,
    })
}

fn text_of(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
        Value::Text(t) => Some(t),
        Value::Blob(b) => Some(String::from_utf8_lossy(&b).into_owned()),
    }
}

fn sql_error(e: rusqlite::Error) -> QueryError {
    QueryError::Sql(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled() -> Connection {
        let db = open().unwrap();
        db.execute_batch(
            "CREATE TABLE t (name TEXT, n INTEGER, r REAL);
             INSERT INTO t VALUES ('a', 1, 0.5), ('b', 2, NULL), ('a', 3, 1.5);",
        )
        .unwrap();
        db
    }

    #[test]
    fn reads_with_real_sql_and_types_its_columns() {
        let db = filled();
        let rs = query(
            &db,
            "SELECT name, sum(n) AS total, max(r) AS top FROM t GROUP BY name ORDER BY total DESC",
        )
        .unwrap();
        let names: Vec<_> = rs.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["name", "total", "top"]);
        assert_eq!(rs.columns[1].kind, ColumnType::Integer);
        assert_eq!(rs.columns[2].kind, ColumnType::Double);
        assert_eq!(
            rs.rows,
            vec![
                vec![Some("a".into()), Some("4".into()), Some("1.5".into())],
                vec![Some("b".into()), Some("2".into()), None],
            ]
        );
    }

    #[test]
    fn nothing_but_reading_is_allowed() {
        let db = filled();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.db");
        for sql in [
            format!("ATTACH DATABASE '{}' AS x", file.display()),
            format!("VACUUM INTO '{}'", file.display()),
            "INSERT INTO t VALUES ('c', 4, 0)".to_owned(),
            "DELETE FROM t".to_owned(),
            "CREATE TABLE u (a)".to_owned(),
            "DROP TABLE t".to_owned(),
            "PRAGMA writable_schema = 1".to_owned(),
            "SELECT load_extension('/tmp/x.so')".to_owned(),
            "SELECT 1; DELETE FROM t".to_owned(),
        ] {
            let e = query(&db, &sql).unwrap_err();
            assert!(
                matches!(e, QueryError::NotAllowed(_) | QueryError::Sql(_)),
                "{sql}: {e:?}"
            );
        }
        assert!(!file.exists(), "no file may be written");
        let left = query(&db, "SELECT count(*) FROM t").unwrap();
        assert_eq!(left.rows[0][0].as_deref(), Some("3"));
    }

    #[test]
    fn a_runaway_query_is_stopped_and_a_huge_answer_refused() {
        let db = filled();
        let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) \
                    SELECT count(*) FROM c";
        assert_eq!(query(&db, slow).unwrap_err(), QueryError::TooSlow);
        let many = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) \
                    SELECT x FROM c";
        assert_eq!(query(&db, many).unwrap_err(), QueryError::TooLarge);
    }

    #[test]
    fn connectors_functions_answer() {
        let db = filled();
        let rs = query(&db, "SELECT version(), database(), unix_timestamp() > 0").unwrap();
        assert_eq!(rs.rows[0][0].as_deref(), Some(super::super::VERSION));
        assert_eq!(rs.rows[0][2].as_deref(), Some("1"));
    }
}
