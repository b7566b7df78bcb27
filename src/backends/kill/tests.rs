//! Unit tests of KILL parsing, the id layout and the mapping.

use super::*;
use crate::backends::balancer::BackendSet;
use crate::config::{BackendAddr, BackendConfig};
use crate::telemetry::metrics::Metrics;
use crate::wire::protocol::response::may_be_kill;
use std::time::Duration;

fn query(sql: &str) -> Vec<u8> {
    let mut p = vec![cmd::QUERY];
    p.extend_from_slice(sql.as_bytes());
    p
}

#[test]
fn recognises_kill_statements() {
    assert!(may_be_kill(&query("  kill query 5")));
    assert!(may_be_kill(&[cmd::PROCESS_KILL, 1, 0, 0, 0]));
    assert!(!may_be_kill(&query("SELECT 1")));
    assert!(!may_be_kill(&query("kil")));
    let k = parse(&query("KILL QUERY 3221225473;")).unwrap();
    assert_eq!(k.id, 3221225473);
    assert_eq!(k.prefix, "KILL QUERY ");
    assert_eq!(parse(&query("kill hard connection 7")).unwrap().id, 7);
    // A query id, not a connection: never mapped.
    assert_eq!(parse(&query("KILL QUERY ID 9")), None);
    assert_eq!(parse(&[cmd::PROCESS_KILL, 2, 0, 0, 0]).unwrap().id, 2);
    assert_eq!(parse(&query("KILL USER bob")), None);
    assert_eq!(parse(&query("KILL QUERY 1+1")), None);
    assert_eq!(parse(&query("KILLALL 5")), None);
    assert_eq!(parse(&[cmd::PROCESS_KILL, 2]), None);
}

#[test]
fn reads_ids_after_comments_and_in_quotes_or_parentheses() {
    for sql in [
        "/* app:checkout */ KILL QUERY 1610612737",
        "# note\nKILL QUERY 1610612737",
        "-- note\n  KILL QUERY 1610612737 ;",
        "KILL QUERY '1610612737'",
        "KILL QUERY \"1610612737\"",
        "KILL QUERY (1610612737)",
        "KILL QUERY 1610612737 /* traceparent='00-4bf9' */",
        "KILL QUERY 1610612737 -- cancel",
        "KILL/**/QUERY/**/1610612737",
        "KILL QUERY  ( 1610612737 )",
        "KILL QUERY 1610612737 ;",
        "KILL QUERY +1610612737",
    ] {
        let k = parse(&query(sql)).unwrap_or_else(|| panic!("not parsed: {sql:?}"));
        assert_eq!(
            (k.id, k.prefix.as_str()),
            (1610612737, "KILL QUERY "),
            "{sql:?}"
        );
    }
    for sql in [
        "/*!KILL QUERY 1610612737 */",
        "/*M!100000 KILL QUERY 1610612737 */",
        "KILL QUERY 1610612737 /* unterminated",
        "/* unterminated KILL QUERY 1610612737",
        "--KILL QUERY 1610612737",
        "KILL QUERY '1610612737",
        "SELECT 1; KILL QUERY 1610612737",
    ] {
        assert_eq!(parse(&query(sql)), None, "{sql:?}");
    }
}

#[test]
fn a_kill_after_comments_is_offered_for_mapping_and_held_while_cut() {
    use crate::wire::protocol::response::may_become_kill;
    assert!(may_be_kill(&query("/* a */ -- b\n kill 5")));
    assert!(!may_be_kill(&query("/* kill 5 */ SELECT 1")));
    assert!(!may_be_kill(&query("/*!kill 5 */")));
    let whole = [&[9, 0, 0, 0][..], &query("/* x */ k")].concat();
    for cut in 4..whole.len() {
        assert!(may_become_kill(&whole[..cut]), "cut at {cut}");
    }
    let select = [&[12, 0, 0, 0][..], &query("/* x */ SELE")].concat();
    assert!(!may_become_kill(&select));
}

#[test]
fn reads_a_negative_id_as_its_32_bit_twos_complement() {
    // Connector/J 2.7 keeps the greeting's id in an int: 0xC000_0001 came back as this.
    let k = parse(&query("KILL QUERY -1073741823")).unwrap();
    assert_eq!(k.id, 0xC000_0001);
    assert_eq!(k.prefix, "KILL QUERY ");
    assert_eq!(parse(&query("KILL -1")).unwrap().id, 0xFFFF_FFFF);
    assert_eq!(parse(&query("KILL -2147483648")).unwrap().id, 0x8000_0000);
    assert_eq!(parse(&query("KILL -2147483649")), None, "not a 32-bit id");
    assert_eq!(parse(&query("KILL --5")), None);
    // Unary minus with a space is the same expression.
    assert_eq!(parse(&query("KILL - 5")).unwrap().id, 0xFFFF_FFFB);
}

fn target(backend: &Arc<Backend>, thread_id: u32) -> Target {
    Target {
        backend: Arc::clone(backend),
        thread_id,
        user: Some("app".into()),
        live: None,
        told: false,
    }
}

/// A killer on `backend`, logged in as `user`, with or without a kill account.
fn by<'a>(backend: &'a Arc<Backend>, user: &'a str, account: bool) -> Killer<'a> {
    Killer {
        backend,
        user: Some(user),
        can_kill_elsewhere: account,
        across: false,
    }
}

/// `rewrite` by user `app` without a kill account (today's mapping), as (mapping, packet).
fn rw(req: &KillRequest, reg: &Registry, backend: &Arc<Backend>) -> Option<(Mapping, Vec<u8>)> {
    rewrite(req, reg, &by(backend, "app", false)).map(|d| (d.mapping, d.packet))
}

fn rw_remote(
    req: &KillRequest,
    answer: &RemoteAnswer,
    killer: &Killer<'_>,
    ours: &[Arc<Backend>],
) -> (Mapping, Vec<u8>) {
    let d = rewrite_remote(req, answer, killer, ours);
    (d.mapping, d.packet)
}

#[test]
fn ids_fit_a_signed_int_and_carry_the_instance() {
    let set = two_backends();
    let a = &set.backends()[0];
    let first = Registry::default();
    let r = first.register(target(a, 1)).unwrap();
    assert_eq!(r.id(), 0x6000_0000);
    assert_eq!(first.register(target(a, 2)).unwrap().id(), 0x6000_0001);
    let last = Registry::with_instance(255);
    let id = last.register(target(a, 3)).unwrap().id();
    assert_eq!(id, 0x6000_0000 | 255 << 21);
    last.ids.lock().unwrap().next = COUNTER_MASK;
    let top = last.register(target(a, 4)).unwrap().id();
    assert_eq!(top, 0x7FFF_FFFF, "the highest id of the highest instance");
    for id in [r.id(), top] {
        assert!(
            i32::try_from(id).is_ok(),
            "{id:#x} reads as negative in an int"
        );
        assert!(is_proxy_id(id), "{id:#x}");
    }
    // A server's own thread ids stay below the range.
    assert!(!is_proxy_id(ID_BASE - 1));
    assert!(!is_proxy_id(0x8000_0000) && !is_proxy_id(0xC000_0001));
}

#[test]
fn counter_wraps_and_skips_ids_still_in_use() {
    let set = two_backends();
    let a = &set.backends()[0];
    let reg = Registry::default();
    let zero = reg.register(target(a, 10)).unwrap();
    let one = reg.register(target(a, 11)).unwrap();
    let ended = reg.register(target(a, 12)).unwrap();
    assert_eq!(ended.id(), ID_BASE + 2);
    drop(ended);
    reg.ids.lock().unwrap().next = COUNTER_MASK;
    assert_eq!(
        reg.register(target(a, 13)).unwrap().id(),
        ID_BASE | COUNTER_MASK
    );
    let reused = reg.register(target(a, 14)).unwrap();
    assert_eq!(
        reused.id(),
        ID_BASE + 2,
        "0 and 1 are live, 2 is free again"
    );
    assert_eq!(reg.lookup(zero.id()).unwrap().thread_id, 10);
    assert_eq!(reg.lookup(one.id()).unwrap().thread_id, 11);
    assert_eq!(reg.lookup(reused.id()).unwrap().thread_id, 14);
}

fn two_backends() -> BackendSet {
    backends(&["a", "b"])
}

fn backends(names: &[&str]) -> BackendSet {
    let configs: Vec<_> = names
        .iter()
        .map(|n| BackendConfig {
            name: (*n).into(),
            address: BackendAddr::Unix(format!("/tmp/{n}").into()),
            weight: 1,
            kind: Default::default(),
            tls: Default::default(),
            compression: false,
            proxy_protocol: None,
            pool: "default".into(),
            role: None,
        })
        .collect();
    BackendSet::new(&configs, Duration::from_secs(1), false, &Metrics::new())
}

fn sql_of(packet: &[u8]) -> String {
    String::from_utf8(packet[5..].to_vec()).unwrap()
}

#[test]
fn a_reserved_id_is_unknown_until_bound_and_free_once_dropped() {
    let set = two_backends();
    let a = &set.backends()[0];
    let reg = Registry::default();
    let reserved = reg.reserve().unwrap();
    let id = reserved.id();
    assert!(is_proxy_id(id));
    assert!(reg.lookup(id).is_none());
    let req = parse(&query(&format!("KILL {id}"))).unwrap();
    assert_eq!(rw(&req, &reg, a).unwrap().0, Mapping::Unknown);
    // Another session never gets the reserved id.
    assert_ne!(reg.register(target(a, 1)).unwrap().id(), id);
    reserved.bind(target(a, 77));
    assert_eq!(reg.lookup(id).map(|t| t.thread_id), Some(77));
    let (mapping, packet) = rw(&req, &reg, a).unwrap();
    assert_eq!(mapping, Mapping::Mapped);
    assert_eq!(sql_of(&packet), "KILL 77");
    drop(reserved);
    assert!(reg.lookup(id).is_none());
}

#[test]
fn maps_to_the_thread_on_the_same_backend_and_refuses_across() {
    let set = two_backends();
    let (a, b) = (&set.backends()[0], &set.backends()[1]);
    let reg = Registry::default();
    let registration = reg.register(target(a, 42)).unwrap();
    let id = registration.id();
    let req = parse(&query(&format!("KILL QUERY {id}"))).unwrap();
    let (mapping, same) = rw(&req, &reg, a).unwrap();
    assert_eq!(mapping, Mapping::Mapped);
    assert_eq!(sql_of(&same), "KILL QUERY 42");
    assert_eq!(same[3], 0, "a command packet");
    let (mapping, across) = rw(&req, &reg, b).unwrap();
    assert_eq!(mapping, Mapping::OtherBackend);
    let across = sql_of(&across);
    assert!(across.starts_with("SIGNAL SQLSTATE"), "{across}");
    assert!(across.contains("1095") && across.contains("nothing was killed"));
    let binary = parse(&[cmd::PROCESS_KILL, 0, 0, 0, 0])
        .map(|mut r| {
            r.id = u64::from(id);
            r
        })
        .unwrap();
    assert_eq!(sql_of(&rw(&binary, &reg, a).unwrap().1), "KILL 42");
    drop(registration);
    let (mapping, gone) = rw(&req, &reg, a).unwrap();
    assert_eq!(mapping, Mapping::Unknown);
    let gone = sql_of(&gone);
    assert!(
        gone.contains("1094") && gone.contains("Unknown thread id"),
        "{gone}"
    );
    // Real thread ids (below the range) pass untouched, and so does a negative form, which
    // names no proxy id: the server answers it as it would directly.
    assert_eq!(rw(&parse(&query("KILL 17")).unwrap(), &reg, a), None);
    let below = format!("KILL QUERY {}", ID_BASE - 1);
    assert_eq!(rw(&parse(&query(&below)).unwrap(), &reg, a), None);
    let negative = parse(&query("KILL QUERY -1073741823")).unwrap();
    assert_eq!(rw(&negative, &reg, a), None);
}

#[test]
fn an_id_of_another_instance_is_refused_naming_it_never_passed_on() {
    let set = two_backends();
    let a = &set.backends()[0];
    let here = Registry::with_instance(1);
    let _own = here.register(target(a, 42)).unwrap();
    let there = Registry::with_instance(3);
    let theirs = there.register(target(a, 42)).unwrap().id();
    assert_eq!(instance_of(theirs), 3);
    let req = parse(&query(&format!("KILL QUERY {theirs}"))).unwrap();
    let (mapping, packet) = rw(&req, &here, a).unwrap();
    assert_eq!(mapping, Mapping::OtherInstance(3));
    let sql = sql_of(&packet);
    assert!(sql.starts_with("SIGNAL SQLSTATE"), "{sql}");
    assert!(
        sql.contains("1094") && sql.contains("instance 3") && sql.contains("peers:"),
        "{sql}"
    );
    assert!(!sql.contains("KILL QUERY 42"), "{sql}");
}

#[test]
fn a_remote_answer_is_mapped_as_an_own_id_would_be() {
    let set = two_backends();
    let (a, b) = (&set.backends()[0], &set.backends()[1]);
    let id = ID_BASE | 3 << INSTANCE_SHIFT | 9;
    let req = parse(&query(&format!("KILL QUERY {id}"))).unwrap();
    let on = |backend: &Arc<Backend>| -> RemoteAnswer {
        Ok(Some(RemoteTarget {
            backend: backend.name.clone(),
            address: backend.address.to_string(),
            thread_id: 42,
            user: Some("app".into()),
        }))
    };
    let ours = set.backends().to_vec();
    let app = by(a, "app", false);
    let (mapping, same) = rw_remote(&req, &on(a), &app, &ours);
    assert_eq!(
        (mapping, sql_of(&same).as_str()),
        (Mapping::Mapped, "KILL QUERY 42")
    );
    let (mapping, across) = rw_remote(&req, &on(b), &app, &ours);
    assert_eq!(mapping, Mapping::OtherBackend);
    assert!(sql_of(&across).contains("1095"));
    // Same name, other address: not the same server.
    let renamed = Ok(Some(RemoteTarget {
        backend: a.name.clone(),
        address: "127.0.0.9:1".into(),
        thread_id: 42,
        user: Some("app".into()),
    }));
    let with_account = by(b, "app", true);
    let renamed = rewrite_remote(&req, &renamed, &with_account, &ours);
    assert_eq!(renamed.mapping, Mapping::OtherBackend);
    assert!(renamed.elsewhere.is_none(), "not a backend of ours");
    let elsewhere = rewrite_remote(&req, &on(a), &with_account, &ours);
    assert_eq!(elsewhere.mapping, Mapping::Elsewhere);
    let run = elsewhere.elsewhere.unwrap();
    assert!(Arc::ptr_eq(&run.backend, a));
    assert_eq!(run.statement, "KILL QUERY 42");
    let other_user = rewrite_remote(&req, &on(a), &by(b, "eve", true), &ours);
    assert_eq!(other_user.mapping, Mapping::NotOwner);
    let (mapping, gone) = rw_remote(&req, &Ok(None), &app, &ours);
    assert_eq!(mapping, Mapping::Unknown);
    assert!(sql_of(&gone).contains("Unknown thread id"));
    let (mapping, failed) = rw_remote(&req, &Err("timed out".into()), &app, &ours);
    assert_eq!(mapping, Mapping::PeerFailed);
    let failed = sql_of(&failed);
    assert!(
        failed.contains("1105") && failed.contains("instance 3") && failed.contains("timed out"),
        "{failed}"
    );
}

#[test]
fn across_backends_only_the_same_user_has_the_kill_run_there() {
    let set = two_backends();
    let (a, b) = (&set.backends()[0], &set.backends()[1]);
    let reg = Registry::default();
    let registration = reg.register(target(a, 42)).unwrap();
    let id = registration.id();
    let req = parse(&query(&format!("KILL QUERY {id}"))).unwrap();
    let same_user = rewrite(&req, &reg, &by(b, "app", true)).unwrap();
    assert_eq!(same_user.mapping, Mapping::Elsewhere);
    assert_eq!(
        sql_of(&same_user.packet),
        "DO 0",
        "the killer's backend answers OK"
    );
    let run = same_user.elsewhere.unwrap();
    assert!(Arc::ptr_eq(&run.backend, a), "run on the target's backend");
    assert_eq!(
        (run.statement.as_str(), run.proxy_id),
        ("KILL QUERY 42", id)
    );
    // Another user: the server's own refusal, naming nothing but the id.
    for killer in [by(b, "eve", true), by(b, "App", true), by(b, "eve", false)] {
        let d = rewrite(&req, &reg, &killer).unwrap();
        assert_eq!(d.mapping, Mapping::NotOwner, "{killer:?}");
        assert!(d.elsewhere.is_none());
        let sql = sql_of(&d.packet);
        assert!(sql.contains("1095") && sql.contains(&format!("You are not owner of thread {id}")));
        assert!(!sql.contains("backend") && !sql.contains(" 42"), "{sql}");
    }
    // The same user without a kill account: refused, saying how to enable it.
    let d = rewrite(&req, &reg, &by(b, "app", false)).unwrap();
    assert_eq!(d.mapping, Mapping::OtherBackend);
    assert!(sql_of(&d.packet).contains("kill.user"));
    // On the killer's own backend the server decides, whoever asks.
    let d = rewrite(&req, &reg, &by(a, "eve", true)).unwrap();
    assert_eq!(
        (d.mapping, sql_of(&d.packet).as_str()),
        (Mapping::Mapped, "KILL QUERY 42")
    );
    // KILL CONNECTION and COM_PROCESS_KILL end the connection there.
    let conn = parse(&query(&format!("KILL CONNECTION {id}"))).unwrap();
    let run = rewrite(&conn, &reg, &by(b, "app", true))
        .unwrap()
        .elsewhere
        .unwrap();
    assert_eq!(run.statement, "KILL CONNECTION 42");
    let mut binary = parse(&[cmd::PROCESS_KILL, 0, 0, 0, 0]).unwrap();
    binary.id = u64::from(id);
    let run = rewrite(&binary, &reg, &by(b, "app", true))
        .unwrap()
        .elsewhere
        .unwrap();
    assert_eq!(run.statement, "KILL 42");
    // Once the session's user is unknown (a COM_CHANGE_USER), nobody's KILL runs elsewhere.
    registration.set_user(None);
    let d = rewrite(&req, &reg, &by(b, "app", true)).unwrap();
    assert_eq!(d.mapping, Mapping::NotOwner);
}

#[test]
fn a_followed_session_is_found_on_its_connection_of_the_moment() {
    let set = two_backends();
    let a = &set.backends()[0];
    let reg = Registry::default();
    let r = reg.register(target(a, 10)).unwrap();
    let live = r.follow().expect("bound to a backend session");
    assert_eq!(
        reg.lookup(r.id()).unwrap().thread_id,
        10,
        "starts where it logged in"
    );
    live.store(42, Ordering::Relaxed);
    assert_eq!(reg.lookup(r.id()).unwrap().thread_id, 42);
    live.store(0, Ordering::Relaxed);
    assert_eq!(
        reg.lookup(r.id()).unwrap().thread_id,
        0,
        "between transactions: no one"
    );
    // A reserved id not bound yet has nothing to follow.
    assert!(reg.reserve().unwrap().follow().is_none());
}

#[test]
fn a_session_holding_no_server_connection_is_reached_by_no_kill() {
    let set = two_backends();
    let a = &set.backends()[0];
    let reg = Registry::default();
    let registration = reg.register(target(a, 42)).unwrap();
    let id = registration.id();
    let live = registration.follow().unwrap();
    live.store(NO_THREAD, Ordering::Relaxed);
    let query_kill = parse(&query(&format!("KILL QUERY {id}"))).unwrap();
    let (mapping, packet) = rw(&query_kill, &reg, a).unwrap();
    assert_eq!(mapping, Mapping::NoConnection);
    assert_eq!(sql_of(&packet), "DO 0", "nothing runs: an OK, as directly");
    let connection_kill = parse(&query(&format!("KILL {id}"))).unwrap();
    let refused = sql_of(&rw(&connection_kill, &reg, a).unwrap().1);
    assert!(
        refused.contains("1095") && refused.contains("nothing was killed"),
        "{refused}"
    );
    let other = rewrite(&query_kill, &reg, &by(a, "eve", false)).unwrap();
    assert!(sql_of(&other.packet).contains("not owner"));
    // Once it runs a statement again, on another connection, the KILL goes there.
    live.store(43, Ordering::Relaxed);
    assert_eq!(
        sql_of(&rw(&query_kill, &reg, a).unwrap().1),
        "KILL QUERY 43"
    );
}

/// A pooled session holding server thread `thread` on `backend` now, as `user`.
fn holding(backend: &Arc<Backend>, thread: u32, user: &str, told: bool) -> Target {
    Target {
        backend: Arc::clone(backend),
        thread_id: thread,
        user: Some(user.into()),
        live: Some(Arc::new(AtomicU32::new(thread))),
        told,
    }
}

fn across_by<'a>(backend: &'a Arc<Backend>, user: &'a str) -> Killer<'a> {
    Killer {
        across: true,
        ..by(backend, user, true)
    }
}

#[test]
fn a_servers_own_thread_id_in_a_pool_across_backends_names_the_pooled_session_holding_it() {
    let set = two_backends();
    let (a, b) = (&set.backends()[0], &set.backends()[1]);
    let reg = Registry::default();
    let _victim = reg.register(holding(a, 42, "app", true)).unwrap();
    let req = parse(&query("KILL QUERY 42")).unwrap();
    // From the other backend: run there over the kill account, as for its proxy id.
    let d = rewrite(&req, &reg, &across_by(b, "app")).unwrap();
    assert_eq!(d.mapping, Mapping::Elsewhere);
    let run = d.elsewhere.unwrap();
    assert!(Arc::ptr_eq(&run.backend, a));
    assert_eq!(run.statement, "KILL QUERY 42");
    // Another user's: the server's rule, refused.
    let d = rewrite(&req, &reg, &across_by(b, "eve")).unwrap();
    assert_eq!(d.mapping, Mapping::NotOwner);
    // On its own backend, or outside a pool across backends, it passes as the client sent it.
    assert!(rewrite(&req, &reg, &across_by(a, "app")).is_none());
    assert!(rewrite(&req, &reg, &by(b, "app", true)).is_none());
    // A number no pooled session holds is the killer's backend's to answer.
    let other = parse(&query("KILL QUERY 43")).unwrap();
    assert!(rewrite(&other, &reg, &across_by(b, "app")).is_none());
    // Where a pooled killer takes its own connection for it.
    let to = target_backend(&req, &reg, "default", Some("app")).unwrap();
    assert!(Arc::ptr_eq(&to, a));
    assert!(target_backend(&req, &reg, "other-pool", Some("app")).is_none());
}

#[test]
fn a_thread_id_several_backends_share_is_told_apart_by_user_then_by_who_asked_for_it() {
    let set = two_backends();
    let (a, b) = (&set.backends()[0], &set.backends()[1]);
    let req = parse(&query("KILL QUERY 7")).unwrap();
    // Another user's connection with the same number does not count against the killer's own.
    let reg = Registry::default();
    let _mine = reg.register(holding(a, 7, "app", false)).unwrap();
    let _theirs = reg.register(holding(b, 7, "eve", false)).unwrap();
    let to = target_backend(&req, &reg, "default", Some("app")).unwrap();
    assert!(Arc::ptr_eq(&to, a));
    // Of one user's, the session that read CONNECTION_ID() is meant.
    let reg = Registry::default();
    let _busy = reg.register(holding(a, 7, "app", false)).unwrap();
    let _asked = reg.register(holding(b, 7, "app", true)).unwrap();
    let to = target_backend(&req, &reg, "default", Some("app")).unwrap();
    assert!(Arc::ptr_eq(&to, b));
    // Nothing tells them apart: no backend is chosen, and from a third place the KILL is
    // refused naming both; on one of them the server there decides.
    let reg = Registry::default();
    let _one = reg.register(holding(a, 7, "app", true)).unwrap();
    let _two = reg.register(holding(b, 7, "app", true)).unwrap();
    assert!(target_backend(&req, &reg, "default", Some("app")).is_none());
    assert!(rewrite(&req, &reg, &across_by(a, "app")).is_none());
    let set3 = backends(&["a", "b", "c"]);
    let c = &set3.backends()[2];
    let d = rewrite(&req, &reg, &across_by(c, "app")).unwrap();
    assert_eq!(d.mapping, Mapping::Ambiguous);
    let sql = sql_of(&d.packet);
    assert!(
        sql.contains("1094") && (sql.contains("a, b") || sql.contains("b, a")),
        "{sql}"
    );
    // A session between transactions holds thread 0, which no KILL names.
    let zero = parse(&query("KILL QUERY 0")).unwrap();
    let reg = Registry::default();
    let _idle = reg.register(holding(a, NO_THREAD, "app", true)).unwrap();
    assert!(target_backend(&zero, &reg, "default", Some("app")).is_none());
}
