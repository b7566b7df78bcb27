//! Judging a replica from its `SHOW REPLICA STATUS` (or `SHOW SLAVE STATUS`) result: both
//! threads running and the lag known and within the limit. Plain functions over a result set
//! already read, unit-tested with hand-made ones.

use std::time::Duration;

use super::error::CheckError;
use crate::backends::client::ResultSet;

/// Column names in MariaDB and MySQL < 8.0.22, then MySQL's newer ones.
const IO_RUNNING: [&str; 2] = ["Slave_IO_Running", "Replica_IO_Running"];
const SQL_RUNNING: [&str; 2] = ["Slave_SQL_Running", "Replica_SQL_Running"];
const SECONDS_BEHIND: [&str; 2] = ["Seconds_Behind_Master", "Seconds_Behind_Source"];

/// Passes a server that is not a replica (no row); fails a replica whose IO or SQL thread is not
/// running, whose lag is unknown (NULL) or above `limit`. Returns the largest lag seen.
pub(super) fn evaluate_replication(
    status: &ResultSet,
    limit: Duration,
) -> Result<Option<Duration>, CheckError> {
    if status.rows.is_empty() {
        return Ok(None);
    }
    let find = |names: &[&str]| {
        status.column(names).ok_or_else(|| CheckError::BadStatus {
            detail: format!("no column {}", names[0]),
        })
    };
    let io = find(&IO_RUNNING)?;
    let sql = find(&SQL_RUNNING)?;
    let behind = find(&SECONDS_BEHIND)?;
    let mut worst = Duration::ZERO;
    for row in &status.rows {
        for &i in &[io, sql] {
            let value = row.get(i).cloned().flatten();
            if value.as_deref() != Some("Yes") {
                return Err(CheckError::ReplicationStopped {
                    column: status.columns[i].clone(),
                    value: value.unwrap_or_else(|| "NULL".to_owned()),
                });
            }
        }
        let lag = match row.get(behind).cloned().flatten() {
            None => {
                return Err(CheckError::LagUnknown {
                    column: status.columns[behind].clone(),
                })
            }
            Some(text) => match text.trim().parse::<u64>() {
                Ok(secs) => Duration::from_secs(secs),
                Err(_) => {
                    return Err(CheckError::BadStatus {
                        detail: format!("{} is {text:?}", status.columns[behind]),
                    })
                }
            },
        };
        if lag > limit {
            return Err(CheckError::LagTooHigh { lag, limit });
        }
        worst = worst.max(lag);
    }
    Ok(Some(worst))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(io: &str, sql: &str, behind: Option<&str>) -> ResultSet {
        ResultSet {
            columns: [
                "Slave_IO_State",
                "Slave_IO_Running",
                "Slave_SQL_Running",
                "Seconds_Behind_Master",
            ]
            .map(String::from)
            .to_vec(),
            rows: vec![vec![
                Some("Waiting for master to send event".into()),
                Some(io.into()),
                Some(sql.into()),
                behind.map(String::from),
            ]],
        }
    }

    const LIMIT: Duration = Duration::from_secs(10);

    #[test]
    fn running_replica_within_limit_passes_with_its_lag() {
        let r = evaluate_replication(&status("Yes", "Yes", Some("3")), LIMIT).unwrap();
        assert_eq!(r, Some(Duration::from_secs(3)));
        let r = evaluate_replication(&status("Yes", "Yes", Some("10")), LIMIT).unwrap();
        assert_eq!(r, Some(LIMIT), "at the limit is still fine");
    }

    #[test]
    fn not_a_replica_passes() {
        let empty = ResultSet {
            rows: Vec::new(),
            ..status("Yes", "Yes", Some("0"))
        };
        assert_eq!(evaluate_replication(&empty, LIMIT).unwrap(), None);
        assert_eq!(
            evaluate_replication(&ResultSet::default(), LIMIT).unwrap(),
            None,
            "an OK instead of a result set"
        );
    }

    #[test]
    fn stopped_threads_fail_naming_the_thread() {
        let e = evaluate_replication(&status("Yes", "No", Some("0")), LIMIT).unwrap_err();
        assert_eq!(e.to_string(), "replication stopped (Slave_SQL_Running=No)");
        let e = evaluate_replication(&status("Connecting", "Yes", None), LIMIT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replication stopped (Slave_IO_Running=Connecting)"
        );
    }

    #[test]
    fn unknown_or_excessive_lag_fails() {
        let e = evaluate_replication(&status("Yes", "Yes", None), LIMIT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replication lag unknown (Seconds_Behind_Master is NULL)"
        );
        let e = evaluate_replication(&status("Yes", "Yes", Some("30")), LIMIT).unwrap_err();
        assert_eq!(e.to_string(), "replication lag 30s exceeds 10s");
        let e = evaluate_replication(&status("Yes", "Yes", Some("soon")), LIMIT).unwrap_err();
        assert!(matches!(e, CheckError::BadStatus { .. }), "{e}");
    }

    #[test]
    fn mysql_8_column_names_are_understood() {
        let mut s = status("Yes", "No", Some("0"));
        s.columns = [
            "Replica_IO_State",
            "Replica_IO_Running",
            "Replica_SQL_Running",
            "Seconds_Behind_Source",
        ]
        .map(String::from)
        .to_vec();
        let e = evaluate_replication(&s, LIMIT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "replication stopped (Replica_SQL_Running=No)"
        );
        s.columns.pop();
        assert!(matches!(
            evaluate_replication(&s, LIMIT),
            Err(CheckError::BadStatus { .. })
        ));
    }
}
