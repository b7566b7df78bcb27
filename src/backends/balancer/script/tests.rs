use super::*;
use crate::backends::balancer::BackendSet;
use crate::config::{BackendAddr, BackendConfig, BackendKind};
use crate::telemetry::metrics::Metrics;
use mlua::Table;
use std::io::Write;

fn backends(kinds: &[BackendKind]) -> Vec<BackendConfig> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| BackendConfig {
            name: format!("b{}", i + 1),
            address: BackendAddr::Tcp {
                host: "127.0.0.1".into(),
                port: 3306 + i as u16,
            },
            weight: 1,
            kind,
            tls: Default::default(),
            compression: false,
            proxy_protocol: None,
            pool: "default".into(),
            role: None,
        })
        .collect()
}

fn script(source: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
    f.write_all(source.as_bytes()).unwrap();
    f
}

fn set_with(
    source: &str,
    kinds: &[BackendKind],
    unsafe_libs: bool,
) -> (BackendSet, tempfile::NamedTempFile) {
    let f = script(source);
    let config = BalancerConfig {
        script: Some(f.path().to_owned()),
        script_budget: Duration::from_millis(10),
        script_allow_unsafe: unsafe_libs,
        ..BalancerConfig::default()
    };
    let set = BackendSet::new(
        &backends(kinds),
        Duration::from_secs(5),
        false,
        &Metrics::new(),
    )
    .with_balancer(&config);
    (set, f)
}

fn set(source: &str) -> (BackendSet, tempfile::NamedTempFile) {
    set_with(
        source,
        &[BackendKind::Rw, BackendKind::Rw, BackendKind::Ro],
        false,
    )
}

fn choose(set: &BackendSet, client: &str) -> Option<usize> {
    set.script()
        .unwrap()
        .choose(&ClientInfo::at(client), Instant::now())
}

#[test]
fn connect_server_sees_the_backends_and_the_client() {
    let (s, _f) = set(r#"
        function connect_server()
            local b = proxy.global.backends
            assert(#b == 3)
            assert(b[1].dst.name == "127.0.0.1:3306" and b[1].dst.address == "127.0.0.1")
            assert(b[2].dst.port == 3307 and b[2].name == "b2" and b[2].weight == 1)
            assert(b[1].type == proxy.BACKEND_TYPE_RW and b[3].type == proxy.BACKEND_TYPE_RO)
            assert(b[1].state == proxy.BACKEND_STATE_UNKNOWN)
            assert(b[1].connected_clients == 0)
            local src = proxy.connection.client.src
            assert(src.name == "10.1.2.3:5000" and src.address == "10.1.2.3" and src.port == 5000)
            assert(proxy.connection.backend_ndx == 0)
            proxy.connection.backend_ndx = 2
        end"#);
    assert_eq!(choose(&s, "10.1.2.3:5000"), Some(1));
    for r in ErrorReason::ALL {
        assert_eq!(s.script_errors(r), 0, "{r:?}");
    }
}

/// A deferred-mode client: logs in as `user`, names `db`, routed to `pool`.
fn known<'a>(user: &'a str, db: Option<&'a str>, pool: &'a str) -> ClientInfo<'a> {
    ClientInfo {
        addr: "10.9.8.7:4000",
        user: Some(user),
        default_db: db,
        pool: Some(pool),
    }
}

fn choose_for(set: &BackendSet, client: &ClientInfo<'_>) -> Option<usize> {
    set.script().unwrap().choose(client, Instant::now())
}

fn no_script_errors(set: &BackendSet) {
    for r in ErrorReason::ALL {
        assert_eq!(set.script_errors(r), 0, "{r:?}");
    }
}

#[test]
fn connect_server_chooses_by_username_default_db_and_pool() {
    let (s, _f) = set(r#"
        function connect_server()
            local c = proxy.connection.client
            if c.username == "reporting" and c.default_db == "analytics"
               and proxy.connection.pool == "reports" then
                proxy.connection.backend_ndx = 3
            elseif c.username == "etl" and c.default_db == nil then
                proxy.connection.backend_ndx = 2
            elseif proxy.connection.pool == "default" then
                proxy.connection.backend_ndx = 1
            end
        end"#);
    let reporting = known("reporting", Some("analytics"), "reports");
    assert_eq!(choose_for(&s, &reporting), Some(2));
    assert_eq!(choose_for(&s, &known("etl", None, "reports")), Some(1));
    // "" is no database: nil, like a client that named none.
    assert_eq!(choose_for(&s, &known("etl", Some(""), "reports")), Some(1));
    assert_eq!(choose_for(&s, &known("etl", Some("x"), "default")), Some(0));
    assert_eq!(choose_for(&s, &known("other", Some("x"), "reports")), None);
    // Names are passed as they are, not as globs or lowercased.
    let cased = known("Reporting", Some("analytics"), "reports");
    assert_eq!(choose_for(&s, &cased), None);
    no_script_errors(&s);
}

#[test]
fn many_distinct_users_each_arrive_as_themselves() {
    let (s, _f) = set(r#"
        function connect_server()
            local c = proxy.connection
            local n = tonumber(c.client.username:match("^user(%d+)$"))
            if c.client.default_db == "db" .. n and c.pool == "pool" .. n % 2 then
                proxy.connection.backend_ndx = n % 3 + 1
            end
        end"#);
    for round in 0..2 {
        for n in 0..50 {
            let (user, db, pool) = (
                format!("user{n}"),
                format!("db{n}"),
                format!("pool{}", n % 2),
            );
            let client = known(&user, Some(&db), &pool);
            assert_eq!(
                choose_for(&s, &client),
                Some(n % 3),
                "{user}, round {round}"
            );
        }
    }
    no_script_errors(&s);
}

/// Chooses 1 when username, default_db and pool are all nil, else 2.
const ALL_NIL: &str = r#"
    local function unknown()
        local c = proxy.connection
        return c.client.username == nil and c.client.default_db == nil and c.pool == nil
    end
    function connect_server()
        proxy.connection.backend_ndx = unknown() and 1 or 2
    end"#;

#[test]
fn immediate_mode_gives_nil_username_default_db_and_pool() {
    let (s, _f) = set(ALL_NIL);
    assert_eq!(choose(&s, "10.1.2.3:5000"), Some(0));
    assert_eq!(choose(&s, "unix:/run/lb.sock"), Some(0));
    assert_eq!(
        choose_for(&s, &known("u", None, "p")),
        Some(1),
        "the probe can fail"
    );
    no_script_errors(&s);
}

#[test]
fn a_previous_clients_identity_never_leaks_into_the_next_call() {
    let (s, _f) = set(r#"
        calls = 0
        function connect_server()
            calls = calls + 1
            local c = proxy.connection
            local unknown = c.client.username == nil and c.client.default_db == nil
                and c.pool == nil
            c.backend_ndx = unknown and 1 or 2
            if c.client.src.name == nil then c.backend_ndx = 3 end
            -- Replacement tables holding this client's values must not come back.
            c.client = { username = c.client.username, default_db = "kept", src = {} }
            proxy.connection = { client = c.client, pool = c.pool or "kept" }
        end"#);
    for _ in 0..3 {
        assert_eq!(choose_for(&s, &known("alice", Some("shop"), "p")), Some(1));
        assert_eq!(choose(&s, "1.1.1.1:1"), Some(0), "alice's identity leaked");
    }
    // One state (this thread's home slot) saw all six calls, so the leak was possible.
    let host = s.script().unwrap();
    let calls: Vec<i64> = host
        .slots
        .iter()
        .map(|slot| {
            let guard = slot.lock().unwrap();
            guard.as_ref().unwrap().lua.globals().get("calls").unwrap()
        })
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(calls, [6]);
    no_script_errors(&s);
}

#[test]
fn non_string_values_assigned_to_the_identity_fields_harm_nothing() {
    let (s, _f) = set(r#"
        local n = 0
        function connect_server()
            n = n + 1
            local c = proxy.connection
            if c.client.username ~= "bob" or c.client.default_db ~= "db" or c.pool ~= "p" then
                return
            end
            if n == 1 then
                c.client.username, c.client.default_db = 42, { "table" }
                c.pool = function() end
            elseif n == 2 then
                c.client.username, c.client.default_db, c.pool = true, 1.5, coroutine.create(print)
            elseif n == 3 then
                c.client = 7
            end
            proxy.connection.backend_ndx = 2
        end
        function disconnect_client()
            proxy.connection.client.username = {}
            proxy.connection.pool = 0
        end"#);
    let bob = known("bob", Some("db"), "p");
    for _ in 0..4 {
        assert_eq!(choose_for(&s, &bob), Some(1));
        s.script()
            .unwrap()
            .disconnect_client(&bob, Some(1), Instant::now());
    }
    no_script_errors(&s);
}

#[test]
fn disconnect_client_sees_the_identity_it_is_given() {
    let (s, _f) = set(r#"
        seen = {}
        function disconnect_client()
            local c = proxy.connection
            seen[#seen + 1] = table.concat({
                tostring(c.client.username), tostring(c.client.default_db), tostring(c.pool),
                c.backend_ndx }, "/")
        end"#);
    let host = s.script().unwrap();
    let now = Instant::now();
    host.disconnect_client(&known("carol", Some("crm"), "sales"), Some(2), now);
    host.disconnect_client(&known("dave", None, "default"), None, now);
    host.disconnect("1.1.1.1:1", Some(0), now);
    let seen: Vec<String> = host
        .slots
        .iter()
        .flat_map(|slot| {
            let guard = slot.lock().unwrap();
            let t: Table = guard.as_ref().unwrap().lua.globals().get("seen").unwrap();
            t.sequence_values::<String>()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        seen,
        ["carol/crm/sales/3", "dave/nil/default/0", "nil/nil/nil/1"]
    );
    no_script_errors(&s);
}

#[test]
fn connect_server_sees_the_deferred_login_and_nil_before_it() {
    let (s, _f) = set(r#"
        function connect_server()
            local c = proxy.connection
            if c.client.username == nil then
                assert(c.client.default_db == nil and c.pool == nil)
                return
            end
            assert(c.client.username == "carol" and c.client.default_db == "sales")
            assert(c.pool == "reporting")
            c.backend_ndx = 3
        end"#);
    let deferred = ClientInfo {
        addr: "10.1.2.3:5000",
        user: Some("carol"),
        default_db: Some("sales"),
        pool: Some("reporting"),
    };
    let script = s.script().unwrap();
    assert_eq!(script.choose(&deferred, Instant::now()), Some(2));
    // The next call's values replace the last one's: an immediate client sees nil.
    assert_eq!(choose(&s, "10.1.2.3:5001"), None);
    for r in ErrorReason::ALL {
        assert_eq!(s.script_errors(r), 0, "{r:?}");
    }
}

#[test]
fn state_and_connected_clients_follow_the_set() {
    let (s, _f) = set(r#"
        function connect_server()
            local b = proxy.global.backends
            if b[1].state == proxy.BACKEND_STATE_UP and b[2].state == proxy.BACKEND_STATE_DOWN
               and b[1].connected_clients == 1 then
                proxy.connection.backend_ndx = 1
            end
        end"#);
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    let b = s.backends();
    s.mark_up(&b[0]);
    s.mark_down(&b[1], Instant::now());
    let _lease = s.lease(&b[0]);
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(0));
}

#[test]
fn returning_nothing_or_zero_leaves_it_to_the_policy() {
    let (s, _f) = set("function connect_server() return end");
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 0 end");
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    let (s, _f) = set("x = 1 -- no connect_server at all");
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    assert_eq!(s.script_errors(ErrorReason::Load), 0);
}

#[test]
fn float_indexes_that_are_integers_are_accepted() {
    let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 6 / 2 end");
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(2));
}

#[test]
fn bad_choices_fall_back_and_are_counted_by_reason() {
    let cases = [
        (
            "function connect_server() error('boom') end",
            ErrorReason::Runtime,
        ),
        (
            "function connect_server() local t = nil; return t.x end",
            ErrorReason::Runtime,
        ),
        (
            "function connect_server() proxy.connection.backend_ndx = 4 end",
            ErrorReason::OutOfRange,
        ),
        (
            "function connect_server() proxy.connection.backend_ndx = -1 end",
            ErrorReason::OutOfRange,
        ),
        (
            "function connect_server() proxy.connection.backend_ndx = 1.5 end",
            ErrorReason::OutOfRange,
        ),
        (
            "function connect_server() proxy.connection.backend_ndx = 'two' end",
            ErrorReason::OutOfRange,
        ),
        (
            "function connect_server() while true do end end",
            ErrorReason::Budget,
        ),
        (
            "function connect_server() return proxy.PROXY_SEND_RESULT end",
            ErrorReason::Unsupported,
        ),
        (
            "function connect_server() coroutine.yield() end",
            ErrorReason::Runtime,
        ),
    ];
    for (source, reason) in cases {
        let (s, _f) = set(source);
        assert_eq!(choose(&s, "1.1.1.1:1"), None, "{source}");
        assert_eq!(s.script_errors(reason), 1, "{source}");
        // The state stays usable after the failure.
        assert_eq!(choose(&s, "1.1.1.1:1"), None, "{source}");
        assert_eq!(s.script_errors(reason), 2, "{source}");
    }
}

#[test]
fn a_down_backend_chosen_falls_back_and_is_counted() {
    let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 1 end");
    s.mark_down(&s.backends()[0], Instant::now());
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    assert_eq!(s.script_errors(ErrorReason::BackendDown), 1);
}

/// The script runs past its budget: the choice falls back at once and counts as a budget error.
fn budget_stops(script: &str) {
    let (s, _f) = set(script);
    let started = Instant::now();
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(s.script_errors(ErrorReason::Budget), 1);
}

#[test]
fn the_budget_cannot_be_caught_with_pcall() {
    budget_stops(
        r#"
        function connect_server()
            while true do pcall(function() while true do end end) end
        end"#,
    );
}

#[test]
fn the_budget_holds_inside_callbacks_that_cannot_yield() {
    budget_stops(
        r#"
        function connect_server()
            table.sort({3, 2, 1}, function(a, b) while true do end end)
        end"#,
    );
}

#[test]
fn pcall_inside_a_callback_cannot_swallow_the_budget() {
    budget_stops(
        r#"
        function connect_server()
            table.sort({3, 2, 1}, function(a, b)
                while true do pcall(function() while true do end end) end
            end)
        end"#,
    );
}

#[test]
fn pcall_and_xpcall_still_catch_ordinary_errors() {
    let (s, _f) = set(r#"
        function connect_server()
            local ok, e = pcall(error, "x", 0)
            local ok2, e2 = xpcall(function() error("y", 0) end, function(m) return m .. "!" end)
            if not ok and e == "x" and not ok2 and e2 == "y!" and pcall(math.max, 1) then
                proxy.connection.backend_ndx = 2
            end
        end"#);
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(1));
}

#[test]
fn a_script_that_fails_to_load_leaves_the_policy_and_is_counted() {
    for source in [
        "function connect_server( end",
        "error('top-level failure')",
        "while true do end",
    ] {
        let (s, _f) = set(source);
        assert_eq!(s.script_errors(ErrorReason::Load), 1, "{source}");
        assert_eq!(choose(&s, "1.1.1.1:1"), None);
        let c = s.candidates_for(Instant::now(), &ClientInfo::at("1.1.1.1:1"), None);
        assert_eq!(c.len(), 3);
    }
}

#[test]
fn reload_swaps_the_script_and_a_broken_one_keeps_the_old() {
    let (s, f) = set("function connect_server() proxy.connection.backend_ndx = 1 end");
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(0));
    std::fs::write(
        f.path(),
        "function connect_server() proxy.connection.backend_ndx = 3 end",
    )
    .unwrap();
    s.reload_script().unwrap();
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(2));
    std::fs::write(f.path(), "function connect_server( syntax error").unwrap();
    let e = s.reload_script().unwrap_err().to_string();
    assert!(e.contains(&f.path().display().to_string()), "{e}");
    assert_eq!(s.script_errors(ErrorReason::Load), 1);
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(2), "old script still runs");
}

#[test]
fn the_script_choice_goes_first_and_the_policy_order_follows() {
    let (s, _f) = set("function connect_server() proxy.connection.backend_ndx = 3 end");
    let client = ClientInfo::at("1.1.1.1:1");
    for _ in 0..4 {
        let order: Vec<_> = s
            .candidates_for(Instant::now(), &client, None)
            .iter()
            .map(|b| b.index())
            .collect();
        assert_eq!(order.len(), 3);
        assert_eq!(order[0], 2, "{order:?}");
        let mut rest = order[1..].to_vec();
        rest.sort_unstable();
        assert_eq!(rest, [0, 1], "the fallbacks: {order:?}");
    }
}

#[test]
fn check_reports_what_would_fail_to_load() {
    let mut config = crate::config::Config {
        backends: backends(&[BackendKind::Rw]),
        ..crate::config::Config::default()
    };
    check(&config).unwrap();
    let good = script("function connect_server() end");
    config.balancer.script = Some(good.path().to_owned());
    check(&config).unwrap();
    let bad = script("function connect_server( end");
    config.balancer.script = Some(bad.path().to_owned());
    let e = check(&config).unwrap_err().to_string();
    assert!(
        e.contains(&bad.path().display().to_string()) && e.contains("syntax error"),
        "{e}"
    );
    config.balancer.script = Some("/nonexistent/x.lua".into());
    assert!(check(&config)
        .unwrap_err()
        .to_string()
        .contains("cannot read"));
}

#[test]
fn unsafe_libraries_are_absent_unless_allowed() {
    let probe = r#"
        function connect_server()
            if os == nil and io == nil and load == nil and loadfile == nil and dofile == nil
               and require == nil and debug == nil then
                proxy.connection.backend_ndx = 1
            else
                proxy.connection.backend_ndx = 2
            end
        end"#;
    let kinds = [BackendKind::Rw, BackendKind::Rw];
    let (s, _f) = set_with(probe, &kinds, false);
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(0));
    let (s, _f) = set_with(probe, &kinds, true);
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(1));
    let (s, _f) = set_with(
        "function connect_server() proxy.connection.backend_ndx = os.time() > 0 and 2 or 1 end",
        &kinds,
        true,
    );
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(1));
}

#[test]
fn memory_is_capped() {
    let (s, _f) = set("function connect_server() local s = string.rep('x', 1 << 30) end");
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    assert_eq!(s.script_errors(ErrorReason::Runtime), 1);
}

#[test]
fn disconnect_client_hears_the_backend_and_the_client() {
    let (s, _f) = set(r#"
        seen = {}
        function connect_server() proxy.connection.backend_ndx = 2 end
        function disconnect_client()
            seen[#seen + 1] = proxy.connection.client.src.name .. "@" .. proxy.connection.backend_ndx
        end"#);
    let host = s.script().unwrap();
    assert!(host.wants_disconnect());
    let client = ClientInfo::at("[::1]:7000");
    let first = s.candidates_for(Instant::now(), &client, None).remove(0);
    assert_eq!(first.name, "b2");
    drop(s.lease_for(&first, &client));
    s.client_refused(&ClientInfo::at("unix:/tmp/x.sock"));
    // Every state saw its share; gather from all of them.
    let mut seen = Vec::new();
    for slot in host.slots.iter() {
        let guard = slot.lock().unwrap();
        let t: Table = guard.as_ref().unwrap().lua.globals().get("seen").unwrap();
        seen.extend(t.sequence_values::<String>().map(Result::unwrap));
    }
    seen.sort();
    assert_eq!(seen, ["[::1]:7000@2", "unix:/tmp/x.sock@0"]);
}

#[test]
fn proxy_global_persists_between_calls_of_a_state() {
    let (s, _f) = set(r#"
        function connect_server()
            proxy.global.n = (proxy.global.n or 0) + 1
            if proxy.global.n >= 2 then proxy.connection.backend_ndx = 3 end
        end"#);
    let host = s.script().unwrap();
    // Same thread, same home slot.
    assert_eq!(choose(&s, "1.1.1.1:1"), None);
    assert_eq!(choose(&s, "1.1.1.1:1"), Some(2));
    assert!(host.states() >= 1);
}

#[test]
fn warnings_are_rate_limited_per_reason() {
    let l = WarnLimiter::new();
    assert_eq!(l.allow(ErrorReason::Runtime), Some(0));
    assert_eq!(l.allow(ErrorReason::Runtime), None);
    assert_eq!(l.allow(ErrorReason::Runtime), None);
    assert_eq!(
        l.allow(ErrorReason::Budget),
        Some(0),
        "reasons are separate"
    );
    l.last[ErrorReason::Runtime as usize].store(1, Relaxed);
    let l = WarnLimiter {
        epoch: l.epoch - WARN_INTERVAL,
        ..l
    };
    assert_eq!(
        l.allow(ErrorReason::Runtime),
        Some(2),
        "says how many were skipped"
    );
}

#[test]
fn metric_has_one_series_per_reason() {
    let e = ScriptErrors::new();
    e.record(ErrorReason::Budget, Path::new("x.lua"), "slow");
    let families = e.collector().collect();
    assert_eq!(families[0].name(), "mysql_lb_script_errors_total");
    assert_eq!(families[0].get_metric().len(), ErrorReason::ALL.len());
    assert_eq!(e.get(ErrorReason::Budget), 1);
}
