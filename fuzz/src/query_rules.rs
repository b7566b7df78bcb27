//! Query rules on any statement text: [`RuleSet::check`] never panics; a refusing rule's
//! answer does not depend on what precedes the text as another statement (`SELECT 1; <text>`
//! is refused whenever `<text>` is, as the server would run both); and every statement
//! [`as_run`] lists is non-empty.

use mysql_lb::backends::rules::{Command, RuleSet, Who};
use mysql_lb::config::QueryRule;
use mysql_lb::wire::sql::{as_run, AsRun, Dialect};

/// Built once: compiling a pattern per input would be most of the work.
fn rules() -> &'static RuleSet {
    static RULES: std::sync::OnceLock<RuleSet> = std::sync::OnceLock::new();
    RULES.get_or_init(build)
}

fn build() -> RuleSet {
    let base = QueryRule {
        digest_text: Some("DELETE FROM t WHERE id = ?".into()),
        error: Some("no".into()),
        max_concurrency_wait: std::time::Duration::ZERO,
        ..QueryRule::named("refuse")
    };
    let pattern = QueryRule {
        name: "pattern".into(),
        digest_text: None,
        pattern: Some(r"(^|\W)secret(\W|$)".into()),
        ..base.clone()
    };
    RuleSet::new(&[base, pattern])
}

/// The whole input is a COM_QUERY's text.
pub fn query_rules(data: &[u8]) {
    let set = rules();
    let who = Who {
        user: Some("app"),
        schema: Some("shop"),
        client: None,
    };
    let alone = set
        .check(&who, Command::Query, data)
        .map(|(r, _)| r.config.name.clone());
    let again = set
        .check(&who, Command::Query, data)
        .map(|(r, _)| r.config.name.clone());
    assert_eq!(alone, again, "the same text, two answers");
    if alone.is_some() && data.len() < 60_000 {
        let mut prefixed = b"SELECT 1; ".to_vec();
        prefixed.extend_from_slice(data);
        assert!(
            set.check(&who, Command::Query, &prefixed).is_some(),
            "refused alone, let through after another statement"
        );
    }
    if let AsRun::Statements(all) = as_run(data, Dialect::default(), 4096) {
        assert!(all.iter().all(|s| !s.trim().is_empty()), "{all:?}");
    }
}
