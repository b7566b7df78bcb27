//! What an admin statement asks for, read without sockets: the PgBouncer-style commands
//! (`SHOW POOLS`, `DRAIN db2`, `RELOAD`, …), the statements every connector sends when it
//! connects (`SET`, `USE`, `SELECT @@version_comment`, `SHOW VARIABLES`), and anything else,
//! which goes to the SQL engine as it is.
//!
//! Words are matched case-blind after leading comments and before one trailing `;`; a backend
//! name may be quoted with backticks, single or double quotes. Only the exact shapes below are
//! commands: a statement that merely starts like one (`SHOW POOLS x`) is an error that says what
//! the command takes, never a guess.

use crate::backends::balancer::AdminState;

/// One admin statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement<'a> {
    /// Nothing but comments and whitespace.
    Empty,
    /// `SET …` and `USE …`: a connector's session settings, accepted and ignored (the admin port
    /// has one fixed character set and no schema).
    Ignored,
    /// `SHOW <what>`.
    Show(Show),
    /// `SELECT @@x [AS a], @@y …` (the connectors' opening question), names as written.
    Variables(Vec<(String, String)>),
    /// `SHOW VARIABLES [LIKE 'pattern']`.
    ShowVariables(Option<String>),
    /// `SHOW [GLOBAL|SESSION] STATUS [LIKE 'pattern']`: the counters of `stats_mysql_global`.
    ShowStatus(Option<String>),
    /// An operation on a backend: drain, maintenance, ready, weight.
    Backend {
        name: String,
        op: BackendOp,
    },
    Reload,
    /// `KILL [QUERY|CONNECTION] id`: a client session by the id it was greeted with.
    Kill {
        id: u32,
        query: bool,
    },
    /// `PAUSE [pool]` / `RESUME [pool]` (no pool: every pool).
    Pause(Option<String>),
    Resume(Option<String>),
    /// ProxySQL's `LOAD … TO RUNTIME` / `SAVE … TO DISK`: the configuration is a file here.
    ProxySqlConfig,
    /// A statement for the SQL engine.
    Sql(&'a str),
    /// A command word with the wrong arguments: the message says what it takes.
    Malformed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendOp {
    SetState(AdminState),
    Weight(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Pools,
    Servers,
    Clients,
    Stats,
    Config,
    Rules,
    Tables,
    Databases,
    Warnings,
    Processlist,
    Help,
}

/// Reads one statement.
pub fn parse(text: &str) -> Statement<'_> {
    let text = strip_comments(text).trim();
    let text = text.strip_suffix(';').unwrap_or(text).trim_end();
    if text.is_empty() {
        return Statement::Empty;
    }
    let words: Vec<&str> = text.split_ascii_whitespace().collect();
    let first = words[0].to_ascii_uppercase();
    match first.as_str() {
        "SET" | "USE" => Statement::Ignored,
        "SHOW" => show(&words[1..]),
        "SELECT" => variables(text).map_or(Statement::Sql(text), Statement::Variables),
        "DRAIN" => backend_state(&first, after(text), AdminState::Draining),
        "READY" => backend_state(&first, after(text), AdminState::Ready),
        "MAINTENANCE" => backend_state(&first, after(text), AdminState::Maintenance),
        "WEIGHT" => weight(after(text)),
        "RELOAD" if words.len() == 1 => Statement::Reload,
        "RELOAD" => Statement::Malformed("RELOAD takes no arguments".into()),
        "LOAD" | "SAVE" => Statement::ProxySqlConfig,
        "PAUSE" | "RESUME" => match take_name(after(text)) {
            None if words.len() == 1 => pause_or_resume(&first, None),
            Some((pool, "")) if !pool.is_empty() => pause_or_resume(&first, Some(pool)),
            _ => Statement::Malformed(format!(
                "{first} takes one pool name, or none for every pool"
            )),
        },
        "KILL" => kill(&words[1..]),
        "SHUTDOWN" | "SUSPEND" => Statement::Malformed(format!(
            "{first} is not built on the admin port yet; see SHOW HELP"
        )),
        _ => Statement::Sql(text),
    }
}

fn show(rest: &[&str]) -> Statement<'static> {
    let upper: Vec<String> = rest.iter().map(|w| w.to_ascii_uppercase()).collect();
    let words: Vec<&str> = upper.iter().map(String::as_str).collect();
    let what = match words.as_slice() {
        ["POOLS"] => Show::Pools,
        ["SERVERS"] => Show::Servers,
        ["CLIENTS"] => Show::Clients,
        ["STATS"] => Show::Stats,
        ["CONFIG"] => Show::Config,
        ["RULES"] => Show::Rules,
        ["TABLES"] | ["FULL", "TABLES"] => Show::Tables,
        ["DATABASES"] | ["SCHEMAS"] => Show::Databases,
        ["WARNINGS"] | ["ERRORS"] => Show::Warnings,
        ["PROCESSLIST"] | ["FULL", "PROCESSLIST"] => Show::Processlist,
        ["HELP"] | [] => Show::Help,
        ["VARIABLES" | "STATUS" | "GLOBAL" | "SESSION", ..] => return show_like(rest),
        _ => {
            return Statement::Malformed(format!("unknown SHOW {}: try SHOW HELP", rest.join(" ")))
        }
    };
    Statement::Show(what)
}

/// `SHOW [GLOBAL|SESSION] VARIABLES|STATUS [LIKE 'p']`.
fn show_like(rest: &[&str]) -> Statement<'static> {
    let mut words = rest;
    if matches!(
        words.first().map(|w| w.to_ascii_uppercase()).as_deref(),
        Some("GLOBAL" | "SESSION")
    ) {
        words = &words[1..];
    }
    let Some((what, tail)) = words.split_first() else {
        return Statement::Malformed("SHOW GLOBAL takes VARIABLES or STATUS".into());
    };
    let status = what.eq_ignore_ascii_case("STATUS");
    if !status && !what.eq_ignore_ascii_case("VARIABLES") {
        return Statement::Malformed(format!("unknown SHOW {}: try SHOW HELP", rest.join(" ")));
    }
    let pattern = match tail {
        [] => None,
        [like, pattern @ ..] if like.eq_ignore_ascii_case("LIKE") && !pattern.is_empty() => {
            match unquote(&pattern.join(" ")) {
                Some(p) => Some(p),
                None => return Statement::Malformed("LIKE takes a quoted pattern".into()),
            }
        }
        _ => {
            return Statement::Malformed(format!(
                "SHOW {} takes LIKE 'pattern' or nothing",
                what.to_ascii_uppercase()
            ))
        }
    };
    if status {
        Statement::ShowStatus(pattern)
    } else {
        Statement::ShowVariables(pattern)
    }
}

/// `KILL [QUERY|CONNECTION] id`.
fn kill(rest: &[&str]) -> Statement<'static> {
    let (query, id) = match rest {
        [id] => (false, id),
        [what, id] if what.eq_ignore_ascii_case("QUERY") => (true, id),
        [what, id] if what.eq_ignore_ascii_case("CONNECTION") => (false, id),
        _ => return Statement::Malformed("KILL takes [QUERY|CONNECTION] and a session id".into()),
    };
    match id.parse::<u32>() {
        Ok(id) => Statement::Kill { id, query },
        Err(_) => Statement::Malformed(format!(
            "KILL takes a session id (SHOW CLIENTS lists them), not {id}"
        )),
    }
}

fn pause_or_resume(command: &str, pool: Option<String>) -> Statement<'static> {
    if command == "PAUSE" {
        Statement::Pause(pool)
    } else {
        Statement::Resume(pool)
    }
}

/// The text after the first word.
fn after(text: &str) -> &str {
    text.split_once(|c: char| c.is_ascii_whitespace())
        .map_or("", |(_, rest)| rest.trim())
}

fn backend_state(command: &str, rest: &str, state: AdminState) -> Statement<'static> {
    match take_name(rest) {
        Some((name, "")) if !name.is_empty() => Statement::Backend {
            name,
            op: BackendOp::SetState(state),
        },
        Some((_, "")) | None => malformed_name(command),
        Some(_) => Statement::Malformed(format!("{command} takes one backend name")),
    }
}

fn weight(rest: &str) -> Statement<'static> {
    let range = crate::control::admin::ops::WEIGHTS;
    let Some((name, n)) = take_name(rest).filter(|(n, _)| !n.is_empty()) else {
        return malformed_name("WEIGHT");
    };
    if n.is_empty() || n.contains(char::is_whitespace) {
        return Statement::Malformed("WEIGHT takes a backend name and a weight".into());
    }
    match n.parse::<u32>().ok().filter(|w| range.contains(w)) {
        Some(w) => Statement::Backend {
            name,
            op: BackendOp::Weight(w),
        },
        None => Statement::Malformed(format!(
            "WEIGHT takes an integer from {} to {}, not {n}",
            range.start(),
            range.end()
        )),
    }
}

fn malformed_name(command: &str) -> Statement<'static> {
    Statement::Malformed(format!(
        "{command} takes one backend name (quote it with backticks or quotes)"
    ))
}

/// The name at the front of `text` (bare up to whitespace, or quoted) and what follows it,
/// trimmed. None for an unbalanced quote.
fn take_name(text: &str) -> Option<(String, &str)> {
    let first = text.chars().next()?;
    if !matches!(first, '`' | '\'' | '"') {
        let (name, rest) = text
            .split_once(|c: char| c.is_ascii_whitespace())
            .unwrap_or((text, ""));
        return Some((name.to_owned(), rest.trim()));
    }
    let mut name = String::new();
    let mut chars = text[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        if c == first {
            if text[1 + i + 1..].starts_with(first) {
                name.push(first);
                chars.next();
                continue;
            }
            return Some((name, text[1 + i + 1..].trim()));
        }
        name.push(c);
    }
    None
}

/// A name as written: bare, or in backticks, single or double quotes (the quote doubled
/// inside). None for an unbalanced quote.
fn unquote(word: &str) -> Option<String> {
    let first = word.chars().next()?;
    if !matches!(first, '`' | '\'' | '"') {
        return Some(word.to_owned());
    }
    let inner = word.strip_prefix(first)?.strip_suffix(first)?;
    let doubled: String = [first, first].iter().collect();
    let single = first.to_string();
    // A lone quote inside is not a doubled one.
    let without_pairs = inner.replace(&doubled, "");
    if without_pairs.contains(first) {
        return None;
    }
    Some(inner.replace(&doubled, &single))
}

/// Leading `/* … */` and `-- …` / `# …` comments removed (Connector/J prefixes its opening
/// query with one).
fn strip_comments(mut text: &str) -> &str {
    loop {
        let t = text.trim_start();
        if let Some(rest) = t.strip_prefix("/*") {
            match rest.find("*/") {
                Some(end) => text = &rest[end + 2..],
                None => return "",
            }
        } else if t.starts_with("-- ") || t.starts_with('#') {
            match t.find('\n') {
                Some(end) => text = &t[end + 1..],
                None => return "",
            }
        } else {
            return t;
        }
    }
}

/// `SELECT @@a [AS x], @@session.b …[ LIMIT n]`: each variable's name (without its scope) and
/// its column's label (the alias, else what was written). None when anything else is selected.
fn variables(text: &str) -> Option<Vec<(String, String)>> {
    let body = text.get(6..)?.trim();
    // `LIMIT 1` (the mysql CLI's) changes nothing of a one-row answer.
    let body = match body.to_ascii_uppercase().rfind(" LIMIT ") {
        Some(at) if body[at + 7..].trim().chars().all(|c| c.is_ascii_digit()) => &body[..at],
        _ => body,
    };
    let mut out = Vec::new();
    for item in body.split(',') {
        let words: Vec<&str> = item.split_ascii_whitespace().collect();
        let (written, label) = match words.as_slice() {
            [v] => (*v, *v),
            [v, a, alias] if a.eq_ignore_ascii_case("AS") => (*v, *alias),
            [v, alias] => (*v, *alias),
            _ => return None,
        };
        let name = written.strip_prefix("@@")?;
        let lower = name.to_ascii_lowercase();
        let name = lower
            .strip_prefix("session.")
            .or_else(|| {
                lower
                    .strip_prefix("global.")
                    .or_else(|| lower.strip_prefix("local."))
            })
            .unwrap_or(&lower);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        out.push((name.to_owned(), unquote(label)?));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbouncer_commands_are_read_case_blind_with_quoted_names() {
        assert_eq!(parse("show pools;"), Statement::Show(Show::Pools));
        assert_eq!(parse("  SHOW   SERVERS "), Statement::Show(Show::Servers));
        assert_eq!(
            parse("drain `db 2`"),
            Statement::Backend {
                name: "db 2".into(),
                op: BackendOp::SetState(AdminState::Draining)
            }
        );
        assert_eq!(
            parse("READY 'db''2'"),
            Statement::Backend {
                name: "db'2".into(),
                op: BackendOp::SetState(AdminState::Ready)
            }
        );
        assert_eq!(
            parse("weight db1 5"),
            Statement::Backend {
                name: "db1".into(),
                op: BackendOp::Weight(5)
            }
        );
        assert_eq!(parse("RELOAD"), Statement::Reload);
        assert_eq!(parse("pause"), Statement::Pause(None));
        assert_eq!(
            parse("PAUSE `main pool`"),
            Statement::Pause(Some("main pool".into()))
        );
        assert_eq!(
            parse("resume default"),
            Statement::Resume(Some("default".into()))
        );
        assert!(matches!(parse("PAUSE a b"), Statement::Malformed(_)));
        assert_eq!(
            parse("kill 1610612737"),
            Statement::Kill {
                id: 1610612737,
                query: false
            }
        );
        assert_eq!(
            parse("KILL QUERY 7;"),
            Statement::Kill { id: 7, query: true }
        );
        assert_eq!(
            parse("KILL connection 7"),
            Statement::Kill {
                id: 7,
                query: false
            }
        );
        assert!(matches!(parse("KILL x"), Statement::Malformed(_)));
        assert!(matches!(parse("KILL USER bob"), Statement::Malformed(_)));
        assert_eq!(parse("/* c */ ; "), Statement::Empty);
    }

    #[test]
    fn a_command_with_wrong_arguments_says_what_it_takes() {
        for bad in [
            "DRAIN",
            "DRAIN a b",
            "WEIGHT db1 0",
            "WEIGHT db1 x",
            "WEIGHT db1",
            "RELOAD now",
            "SHOW POOLS x",
            "DRAIN 'a",
            "READY 'a'b'",
        ] {
            assert!(
                matches!(parse(bad), Statement::Malformed(_)),
                "{bad}: {:?}",
                parse(bad)
            );
        }
    }

    #[test]
    fn connectors_opening_questions_are_variables() {
        assert_eq!(
            parse("select @@version_comment limit 1"),
            Statement::Variables(vec![("version_comment".into(), "@@version_comment".into())])
        );
        assert_eq!(
            parse("/* mysql-connector-j-8.4.0 */SELECT  @@session.auto_increment_increment AS auto_increment_increment, @@character_set_client AS character_set_client"),
            Statement::Variables(vec![
                ("auto_increment_increment".into(), "auto_increment_increment".into()),
                ("character_set_client".into(), "character_set_client".into()),
            ])
        );
        assert_eq!(
            parse("SELECT * FROM stats_mysql_query_digest LIMIT 1"),
            Statement::Sql("SELECT * FROM stats_mysql_query_digest LIMIT 1")
        );
        assert_eq!(
            parse("SHOW VARIABLES LIKE 'max_allowed_packet'"),
            Statement::ShowVariables(Some("max_allowed_packet".into()))
        );
        assert_eq!(parse("SET NAMES utf8mb4"), Statement::Ignored);
        assert_eq!(parse("SHOW GLOBAL STATUS"), Statement::ShowStatus(None));
        assert_eq!(
            parse("show status like 'Client%'"),
            Statement::ShowStatus(Some("Client%".into()))
        );
        assert!(matches!(
            parse("SHOW STATUS WHERE 1"),
            Statement::Malformed(_)
        ));
    }
}
