//! Unit tests of route matching, globs and peer parsing.

use proptest::prelude::*;

use super::*;

fn glob(p: &str, t: &str) -> bool {
    Glob::new(p).matches(t)
}

fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn route(pool: &str) -> RouteConfig {
    RouteConfig {
        user: None,
        schema: None,
        client: None,
        listener: None,
        pool: pool.to_owned(),
        read_only: false,
    }
}

fn who<'a>(
    user: Option<&'a str>,
    schema: Option<&'a str>,
    client: Option<&str>,
) -> ClientFacts<'a> {
    ClientFacts {
        user,
        schema,
        client: client.map(ip),
        listener: "127.0.0.1:4040",
    }
}

#[test]
fn glob_literals_stars_and_question_marks() {
    assert!(glob("reporting", "reporting"));
    assert!(!glob("reporting", "Reporting"), "case-sensitive");
    assert!(!glob("reporting", "reporting2"));
    assert!(!glob("reporting", "reportin"));
    assert!(glob("etl_*", "etl_"));
    assert!(glob("etl_*", "etl_nightly"));
    assert!(!glob("etl_*", "xetl_nightly"));
    assert!(glob("*_ro", "app_ro"));
    assert!(!glob("*_ro", "app_rw"));
    assert!(glob("a*b*c", "aXXbYYc"));
    assert!(glob("a*b*c", "abc"));
    assert!(!glob("a*b*c", "acb"));
    assert!(glob("a?c", "abc"));
    assert!(!glob("a?c", "ac"));
    assert!(!glob("a?c", "abbc"));
    assert!(glob("?", "é"), "? is one character, not one byte");
    assert!(!glob("??", "é"));
    assert!(glob("caf?", "café"));
    assert!(glob("*", ""));
    assert!(glob("**", "x"));
    assert!(!glob("?*", ""));
    assert!(glob("", ""));
    assert!(!glob("", "a"));
    assert!(
        glob("a.b[c]", "a.b[c]"),
        "regex and class syntax is literal"
    );
    assert!(!glob("a.b", "axb"));
}

#[test]
fn glob_backtracks_past_a_false_start() {
    // The first `*` must give back characters it took greedily.
    assert!(glob("*ab", "aab"));
    assert!(glob("*aab", "aaab"));
    assert!(glob("a*ba*c", "abxbaac"));
    assert!(!glob("a*ba*c", "abxbaa"));
}

#[test]
fn pathological_glob_takes_steps_bounded_by_pattern_times_text() {
    let text = "a".repeat(20_000);
    for (pattern, expected) in [("a*a*a*a*a*a*a*b", false), ("a*a*a*a*a*a*a*a", true)] {
        let g = Glob::new(pattern);
        let (matched, steps) = g.run(&text);
        assert_eq!(matched, expected, "{pattern}");
        // A backtracking matcher needs on the order of 20000^6 steps for the first.
        let bound = (pattern.len() + 1) * (text.len() + 1);
        assert!(steps <= bound, "{pattern}: {steps} steps > {bound}");
    }
    // The bound is what a mismatch at the end really costs: not a vacuous one.
    let (_, steps) = Glob::new("*b").run(&text);
    assert!(steps > text.len(), "{steps}");
}

#[test]
fn peer_ip_reads_the_formats_the_server_logs() {
    assert_eq!(peer_ip("10.1.2.3:50000"), Some(ip("10.1.2.3")));
    assert_eq!(peer_ip("[::1]:50000"), Some(ip("::1")));
    assert_eq!(peer_ip("[::ffff:10.1.2.3]:5"), Some(ip("::ffff:10.1.2.3")));
    assert_eq!(peer_ip("10.1.2.3"), Some(ip("10.1.2.3")));
    assert_eq!(peer_ip("unix:/run/mysql-lb.sock"), None);
    assert_eq!(peer_ip("unix:"), None);
    assert_eq!(peer_ip("garbage"), None);
    assert_eq!(peer_ip(""), None);
}

#[test]
fn first_matching_route_wins_and_every_condition_must_match() {
    let routes = Routes::new(
        &[
            RouteConfig {
                user: Some("etl_*".into()),
                schema: Some("staging".into()),
                ..route("etl")
            },
            RouteConfig {
                user: Some("reporting".into()),
                ..route("reporting")
            },
            RouteConfig {
                schema: Some("analytics*".into()),
                ..route("reporting")
            },
            RouteConfig {
                client: Some(cidr("10.1.0.0/16")),
                ..route("office")
            },
        ],
        Some("default"),
    );
    let pool = |w: ClientFacts<'_>| routes.pool_for(&w).map(str::to_owned);
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(pool(who(Some("etl_a"), Some("staging"), None)), some("etl"));
    // etl_ user elsewhere: the first route's schema does not match, nothing else does.
    assert_eq!(
        pool(who(Some("etl_a"), Some("prod"), None)),
        some("default")
    );
    assert_eq!(pool(who(Some("reporting"), None, None)), some("reporting"));
    assert_eq!(
        pool(who(Some("bob"), Some("analytics_eu"), Some("10.1.0.9"))),
        some("reporting"),
        "the schema route comes before the client route"
    );
    assert_eq!(
        pool(who(Some("bob"), None, Some("10.1.0.9"))),
        some("office")
    );
    assert_eq!(
        pool(who(Some("bob"), None, Some("::ffff:10.1.0.9"))),
        some("office")
    );
    assert_eq!(
        pool(who(Some("bob"), None, Some("10.2.0.9"))),
        some("default")
    );
    assert!(routes.needs_identity());
}

#[test]
fn unknown_identity_and_unix_clients_do_not_match_conditions_on_them() {
    let routes = Routes::new(
        &[
            RouteConfig {
                user: Some("*".into()),
                ..route("by_user")
            },
            RouteConfig {
                schema: Some("*".into()),
                ..route("by_schema")
            },
            RouteConfig {
                client: Some(cidr("0.0.0.0/0")),
                ..route("by_client")
            },
        ],
        None,
    );
    // Immediate connect: user and schema unknown; unix client: no address. Refused.
    assert_eq!(routes.pool_for(&who(None, None, None)), None);
    assert_eq!(
        routes.pool_for(&who(None, None, Some("10.0.0.1"))),
        Some("by_client")
    );
    // A client naming no database does not match `schema: "*"`.
    assert_eq!(routes.pool_for(&who(Some(""), None, None)), Some("by_user"));
}

#[test]
fn listener_routes_compare_the_displayed_listen_entry() {
    let routes = Routes::new(
        &[RouteConfig {
            listener: Some("unix:/run/mysql-lb.sock".into()),
            ..route("local")
        }],
        Some("default"),
    );
    let on = |listener| ClientFacts {
        user: None,
        schema: None,
        client: None,
        listener,
    };
    assert_eq!(
        routes.pool_for(&on("unix:/run/mysql-lb.sock")),
        Some("local")
    );
    assert_eq!(routes.pool_for(&on("127.0.0.1:4040")), Some("default"));
    assert!(!routes.needs_identity());
}

#[test]
fn no_routes_send_everyone_to_the_default_pool_or_refuse() {
    let w = who(Some("u"), Some("db"), Some("127.0.0.1"));
    assert_eq!(
        Routes::new(&[], Some("default")).pool_for(&w),
        Some("default")
    );
    assert_eq!(Routes::new(&[], None).pool_for(&w), None);
    assert!(!Routes::new(&[], None).needs_identity());
}

/// Text without the glob's special characters.
fn literal() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[^*?]{0,40}").expect("valid regex")
}

proptest! {
    #[test]
    fn a_literal_pattern_matches_exactly_itself(p in literal(), t in ".{0,40}") {
        prop_assert!(glob(&p, &p));
        prop_assert_eq!(glob(&p, &t), p == t);
    }

    #[test]
    fn a_star_matches_everything(t in ".{0,60}") {
        prop_assert!(glob("*", &t));
        prop_assert!(glob("**", &t));
    }

    #[test]
    fn a_literal_prefix_star_is_starts_with(p in literal(), t in ".{0,40}") {
        prop_assert_eq!(glob(&format!("{p}*"), &t), t.starts_with(&p));
        prop_assert_eq!(glob(&format!("*{p}"), &t), t.ends_with(&p));
        prop_assert_eq!(glob(&format!("*{p}*"), &t), t.contains(&p));
    }

    #[test]
    fn question_marks_match_any_text_of_that_many_characters(t in ".{0,20}", n in 0usize..20) {
        prop_assert_eq!(glob(&"?".repeat(n), &t), t.chars().count() == n);
    }
}
