//! The system variables the admin port answers: what connectors ask when they connect
//! (`SELECT @@version_comment`, Connector/J's `@@session.auto_increment_increment …`,
//! `SHOW VARIABLES`). Fixed values describing the admin port itself; an unknown name reads as
//! NULL rather than an error, so a connector asking for a server feature it can do without
//! still connects.

use crate::wire::protocol::serving::ResultSet;

/// Every variable, by name.
const VARIABLES: &[(&str, &str)] = &[
    ("auto_increment_increment", "1"),
    ("autocommit", "1"),
    ("character_set_client", "utf8mb4"),
    ("character_set_connection", "utf8mb4"),
    ("character_set_results", "utf8mb4"),
    ("character_set_server", "utf8mb4"),
    ("collation_connection", "utf8mb4_general_ci"),
    ("collation_server", "utf8mb4_general_ci"),
    ("init_connect", ""),
    ("interactive_timeout", "28800"),
    ("license", "MIT OR Apache-2.0"),
    ("lower_case_table_names", "0"),
    ("max_allowed_packet", "1048576"),
    ("net_buffer_length", "16384"),
    ("net_write_timeout", "60"),
    ("performance_schema", "0"),
    ("query_cache_size", "0"),
    ("query_cache_type", "OFF"),
    ("sql_mode", ""),
    ("system_time_zone", "UTC"),
    ("time_zone", "SYSTEM"),
    ("transaction_isolation", "REPEATABLE-READ"),
    ("tx_isolation", "REPEATABLE-READ"),
    ("version", super::VERSION),
    ("version_comment", "mysql-lb admin"),
    ("wait_timeout", "28800"),
];

fn value(name: &str) -> Option<&'static str> {
    VARIABLES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

/// One row: each `(name, label)` as a column named `label` holding the variable's value.
pub fn select(names: &[(String, String)]) -> ResultSet {
    let labels: Vec<&str> = names.iter().map(|(_, l)| l.as_str()).collect();
    let mut rs = ResultSet::text(&labels);
    rs.rows.push(
        names
            .iter()
            .map(|(n, _)| value(n).map(str::to_owned))
            .collect(),
    );
    rs
}

/// `SHOW VARIABLES [LIKE pattern]`: `Variable_name`, `Value`.
pub fn show(pattern: Option<&str>) -> ResultSet {
    let mut rs = ResultSet::text(&["Variable_name", "Value"]);
    for (name, v) in VARIABLES {
        if pattern.is_none_or(|p| like(p.as_bytes(), name.as_bytes())) {
            rs.rows
                .push(vec![Some((*name).to_owned()), Some((*v).to_owned())]);
        }
    }
    rs
}

/// SQL `LIKE`, case-blind: `%` any run, `_` one character, `\` escapes. Iterative, with one
/// backtrack point, so its steps are bounded by pattern × text.
fn like(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'%') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some(b'\\')
                if p + 1 < pattern.len() && pattern[p + 1].eq_ignore_ascii_case(&text[t]) =>
            {
                p += 2;
                t += 1;
                continue;
            }
            Some(b'_') => {
                p += 1;
                t += 1;
                continue;
            }
            Some(c) if *c != b'\\' && c.eq_ignore_ascii_case(&text[t]) => {
                p += 1;
                t += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_matches_as_sql_does() {
        assert!(like(b"max_allowed_packet", b"MAX_ALLOWED_PACKET"));
        assert!(like(b"character\\_set%", b"character_set_client"));
        assert!(!like(b"character\\_set%", b"characterXset_client"));
        assert!(like(b"%time%", b"wait_timeout"));
        assert!(like(b"v_rsion", b"version"));
        assert!(!like(b"version", b"version_comment"));
        assert!(like(b"%", b""));
    }

    #[test]
    fn a_connectors_question_is_answered_in_its_own_labels() {
        let rs = select(&[
            ("version_comment".into(), "@@version_comment".into()),
            ("socket".into(), "@@socket".into()),
        ]);
        assert_eq!(rs.columns[0].name, "@@version_comment");
        assert_eq!(rs.rows, vec![vec![Some("mysql-lb admin".into()), None]]);
        assert_eq!(show(Some("tx%")).rows.len(), 1);
    }
}
