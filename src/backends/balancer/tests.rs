use super::*;

fn set(n: u16) -> BackendSet {
    BackendSet::new(&configs(n), Duration::from_secs(5), false, &Metrics::new())
}

/// `n` plain TCP backends b0, b1, … in the default pool (also the fixture of `greeting`'s tests).
pub(super) fn configs(n: u16) -> Vec<BackendConfig> {
    (0..n)
        .map(|i| BackendConfig {
            name: format!("b{i}"),
            address: BackendAddr::Tcp {
                host: "127.0.0.1".into(),
                port: 3306 + i,
            },
            weight: 1,
            kind: BackendKind::Rw,
            tls: Default::default(),
            compression: false,
            proxy_protocol: None,
            pool: "default".into(),
            role: None,
        })
        .collect()
}

#[test]
fn checks_take_a_backend_down_after_fall_and_back_after_rise() {
    let s = set(2);
    let b = &s.backends()[0];
    let now = Instant::now();
    let fail = || Some("connection refused".to_owned());
    assert_eq!(s.record_check(b, fail(), 2, 3), None);
    assert!(s.is_up(b, now));
    assert_eq!(s.record_check(b, fail(), 2, 3), Some(Transition::WentDown));
    assert_eq!(s.record_check(b, fail(), 2, 3), None, "logged once");
    assert!(!s.is_up(b, now));
    assert_eq!(b.stats.up.get(), 0);
    assert_eq!(s.record_check(b, None, 2, 3), None);
    assert_eq!(
        s.record_check(b, fail(), 2, 3),
        None,
        "a failure resets the passes"
    );
    assert_eq!(s.record_check(b, None, 2, 3), None);
    assert_eq!(s.record_check(b, None, 2, 3), None);
    assert_eq!(s.record_check(b, None, 2, 3), Some(Transition::CameUp));
    assert!(s.is_up(b, now));
    assert_eq!(b.stats.up.get(), 1);
    assert_eq!(b.last_check().unwrap().error, None);
}

#[test]
fn with_checks_a_failed_connect_needs_passes_to_come_back() {
    let configs = [BackendConfig {
        name: "b".into(),
        address: BackendAddr::Unix("/nonexistent".into()),
        weight: 1,
        kind: BackendKind::Rw,
        tls: Default::default(),
        compression: false,
        proxy_protocol: None,
        pool: "default".into(),
        role: None,
    }];
    let s = BackendSet::new(&configs, Duration::from_secs(1), true, &Metrics::new());
    let b = &s.backends()[0];
    let now = Instant::now();
    s.mark_down(b, now);
    assert!(
        !s.is_up(b, now + Duration::from_secs(10)),
        "no cool-off expiry when checked"
    );
    s.record_check(b, None, 2, 2);
    assert_eq!(s.record_check(b, None, 2, 2), Some(Transition::CameUp));
    assert!(s.is_up(b, now));
}

#[test]
fn round_robin_spreads_evenly() {
    let s = set(3);
    let now = Instant::now();
    let mut counts = [0; 3];
    for _ in 0..30 {
        let first = &s.candidates(now)[0];
        counts[first.name[1..].parse::<usize>().unwrap()] += 1;
    }
    assert_eq!(counts, [10, 10, 10]);
}

#[test]
fn down_backend_is_skipped_then_tried_last_then_back() {
    let s = set(3);
    let now = Instant::now();
    assert!(s.mark_down(&s.backends()[1], now));
    assert!(
        !s.mark_down(&s.backends()[1], now),
        "already down: no second log"
    );
    let mut firsts = Vec::new();
    for _ in 0..10 {
        let c = s.candidates(now);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].name, "b1", "the down backend comes last");
        firsts.push(c[0].name.clone());
    }
    assert_eq!(firsts.iter().filter(|n| *n == "b0").count(), 5);
    assert_eq!(firsts.iter().filter(|n| *n == "b2").count(), 5);
    // After the cool-off it is up again.
    let later = now + Duration::from_secs(6);
    assert!(s.is_up(&s.backends()[1], later));
    assert!(s.mark_up(&s.backends()[1]));
}

fn weighted(weights: &[u32], policy: Policy) -> BackendSet {
    let configs: Vec<_> = weights
        .iter()
        .enumerate()
        .map(|(i, &weight)| BackendConfig {
            name: format!("b{i}"),
            address: BackendAddr::Tcp {
                host: "127.0.0.1".into(),
                port: 3306 + i as u16,
            },
            weight,
            kind: BackendKind::Rw,
            tls: Default::default(),
            compression: false,
            proxy_protocol: None,
            pool: "default".into(),
            role: None,
        })
        .collect();
    let config = BalancerConfig {
        policy,
        ..BalancerConfig::default()
    };
    BackendSet::new(&configs, Duration::from_secs(5), false, &Metrics::new()).with_balancer(&config)
}

fn first_counts(s: &BackendSet, rounds: usize, now: Instant) -> Vec<usize> {
    let mut counts = vec![0; s.backends().len()];
    for _ in 0..rounds {
        counts[s.candidates(now)[0].index()] += 1;
    }
    counts
}

#[test]
fn every_policy_honours_weights_and_skips_down_backends() {
    let now = Instant::now();
    let s = weighted(&[3, 1], Policy::RoundRobin);
    assert_eq!(first_counts(&s, 40, now), [30, 10]);
    let s = weighted(&[3, 1], Policy::Random);
    let counts = first_counts(&s, 4000, now);
    assert!((2700..=3300).contains(&counts[0]), "{counts:?}");
    for policy in [
        Policy::RoundRobin,
        Policy::Random,
        Policy::LeastConnections,
        Policy::LeastLatency,
    ] {
        let s = weighted(&[1, 5, 1], policy);
        s.mark_down(&s.backends()[1], now);
        let counts = first_counts(&s, 100, now);
        assert_eq!(counts[1], 0, "{policy:?}: {counts:?}");
        assert!(counts[0] > 25 && counts[2] > 25, "{policy:?}: {counts:?}");
    }
}

#[test]
fn least_latency_moves_new_sessions_off_a_slow_backend_and_back_once_it_recovers() {
    let s = weighted(&[1, 1, 1], Policy::LeastLatency);
    let now = Instant::now();
    let [fast_a, slow, fast_b] = [0, 1, 2].map(|i| &s.backends()[i].latency);
    fast_a.update(1000, 1.0); // 1 ms
    fast_b.update(1000, 1.0);
    slow.update(1000, 50.0); // 50 ms
    let mut counts = [0usize; 3];
    for _ in 0..300 {
        counts[s.candidates(now)[0].index()] += 1;
    }
    assert_eq!(
        counts[1], 0,
        "{counts:?}: the slow one loses every comparison"
    );
    assert!(
        counts[0] > 100 && counts[2] > 100,
        "{counts:?}: the fast ones share"
    );
    // It recovers (commands at 1 ms again) while the others turn slower (10 ms): a faster
    // interval lowers its average gradually, so it takes some ticks (`latency::DECAY`).
    for tick in 1..=30u64 {
        let n = 1000 + 1000 * tick;
        slow.update(n, 50.0 + tick as f64);
        fast_a.update(n, 1.0 + 10.0 * tick as f64);
        fast_b.update(n, 1.0 + 10.0 * tick as f64);
    }
    let mut counts = [0usize; 3];
    for _ in 0..300 {
        counts[s.candidates(now)[0].index()] += 1;
    }
    assert!(
        counts[1] > 150,
        "{counts:?}: the recovered one gets traffic back"
    );
}

#[test]
fn least_latency_counts_sessions_and_weights() {
    let s = weighted(&[1, 3], Policy::LeastLatency);
    let now = Instant::now();
    for b in s.backends() {
        b.latency.update(100, 0.1);
    }
    let mut leases = Vec::new();
    for _ in 0..8 {
        let first = s.candidates(now).remove(0);
        leases.push(s.lease(&first));
    }
    let active: Vec<_> = s.backends().iter().map(|b| b.active()).collect();
    assert_eq!(active, [2, 6], "equal latency: sessions split by weight");
}

#[test]
fn least_connections_fills_the_emptiest_by_weight() {
    let s = weighted(&[1, 2], Policy::LeastConnections);
    let now = Instant::now();
    let mut leases = Vec::new();
    for _ in 0..6 {
        let first = s.candidates(now).remove(0);
        leases.push(s.lease(&first));
    }
    let active: Vec<_> = s.backends().iter().map(|b| b.active()).collect();
    assert_eq!(active, [2, 4], "weight 2 holds twice as many");
    // Free two on b1: the next two go there.
    leases.retain(|l| l.backend().index() == 0);
    assert_eq!(s.backends()[1].active(), 0);
    for _ in 0..2 {
        assert_eq!(s.candidates(now)[0].index(), 1);
        leases.push(s.lease(&s.backends()[1]));
    }
}

#[test]
fn all_down_are_still_tried_soonest_back_first_by_every_policy() {
    for policy in [
        Policy::RoundRobin,
        Policy::Random,
        Policy::LeastConnections,
        Policy::LeastLatency,
    ] {
        let s = weighted(&[1, 1, 1], policy);
        let now = Instant::now();
        s.mark_down(&s.backends()[2], now);
        s.mark_down(&s.backends()[0], now + Duration::from_millis(1));
        s.mark_down(&s.backends()[1], now + Duration::from_millis(2));
        let order: Vec<_> = s.candidates(now).iter().map(|b| b.index()).collect();
        assert_eq!(order, [2, 0, 1], "{policy:?}");
    }
}

#[test]
fn admin_states_take_a_backend_out_whatever_the_checks_say() {
    let s = set(3);
    let now = Instant::now();
    let b1 = &s.backends()[1];
    assert_eq!(b1.set_admin_state(AdminState::Draining), AdminState::Ready);
    assert_eq!(b1.stats.admin_states[1].1.get(), 1);
    assert_eq!(b1.stats.admin_states[0].1.get(), 0);
    assert!(s.is_up(b1, now), "draining keeps its health state");
    for _ in 0..6 {
        let c = s.candidates(now);
        assert!(c.iter().all(|b| b.index() != 1), "not even as a fallback");
    }
    b1.set_admin_state(AdminState::Maintenance);
    for _ in 0..3 {
        s.record_check(b1, None, 2, 2);
    }
    assert!(!s.is_up(b1, now), "passing checks do not bring it back");
    assert_eq!(b1.stats.up.get(), 0);
    assert!(s.candidates(now).iter().all(|b| b.index() != 1));
    b1.set_admin_state(AdminState::Ready);
    assert!(s.is_up(b1, now));
    assert_eq!(b1.stats.up.get(), 1);
    assert_eq!(first_counts(&s, 30, now), [10, 10, 10]);
    // A failing check during maintenance still counts: ready then finds it down.
    b1.set_admin_state(AdminState::Maintenance);
    s.record_check(b1, Some("refused".into()), 1, 1);
    b1.set_admin_state(AdminState::Ready);
    assert!(!s.is_up(b1, now));
    assert_eq!(b1.set_weight(7), 1);
    assert_eq!(b1.weight(), 7);
}

#[test]
fn lease_counts_active_sessions() {
    let s = set(1);
    let b = Arc::clone(&s.backends()[0]);
    let l1 = s.lease(&b);
    let l2 = s.lease(&b);
    assert_eq!(b.active(), 2);
    drop(l1);
    assert_eq!(b.active(), 1);
    drop(l2);
    assert_eq!(b.active(), 0);
}

fn ejecting(s: BackendSet, failures: u32, max_share: f64) -> BackendSet {
    s.with_balancer(&BalancerConfig {
        ejection: EjectionConfig {
            failures,
            window: Duration::from_secs(10),
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
            max_share,
        },
        ..BalancerConfig::default()
    })
}

fn names(order: &[Arc<Backend>]) -> Vec<&str> {
    order.iter().map(|b| b.name.as_str()).collect()
}

#[test]
fn an_ejected_backend_is_a_last_resort_then_gets_one_trial() {
    let s = ejecting(set(3), 2, 0.5);
    let b1 = Arc::clone(&s.backends()[1]);
    let now = Instant::now();
    s.session_failed(&b1, ejection::Failure::MidCommand, "cut", now);
    assert!(s.is_up(&b1, now), "one failure is not enough");
    s.session_failed(&b1, ejection::Failure::Handshake, "cut", now);
    assert!(!s.is_up(&b1, now));
    assert_eq!(b1.stats.ejections.get(), 1);
    assert_eq!(b1.stats.ejected.get(), 1);
    assert_eq!(b1.stats.session_failures[1].get(), 1);
    for _ in 0..6 {
        let order = s.candidates(now);
        assert_eq!(order.len(), 3);
        assert_eq!(order[2].name, "b1", "ejected last: {:?}", names(&order));
    }
    let later = now + Duration::from_millis(250);
    let order = s.candidates(later);
    assert_eq!(names(&order)[0], "b1", "the trial goes first");
    let next = s.candidates(later);
    assert_eq!(names(&next)[2], "b1", "one trial at a time");
    s.session_succeeded(&b1, later);
    assert!(s.is_up(&b1, later));
    assert_eq!(b1.stats.ejected.get(), 0);
}

#[test]
fn a_failed_trial_doubles_the_backoff() {
    let s = ejecting(set(2), 1, 0.5);
    let b0 = Arc::clone(&s.backends()[0]);
    let now = Instant::now();
    s.session_failed(&b0, ejection::Failure::Connect, "refused", now);
    let (_, left) = s.ejection_of(&b0, now);
    assert_eq!(left, Some(Duration::from_millis(200)));
    let t = now + Duration::from_millis(200);
    assert_eq!(names(&s.candidates(t))[0], "b0");
    s.session_failed(&b0, ejection::Failure::Handshake, "no answer", t);
    let (standing, left) = s.ejection_of(&b0, t);
    assert_eq!(standing, ejection::Standing::Ejected);
    assert_eq!(left, Some(Duration::from_millis(400)));
    assert_eq!(b0.stats.ejections.get(), 2);
}

#[test]
fn never_more_than_max_share_of_a_pool_is_ejected() {
    let s = ejecting(set(3), 1, 0.5);
    let now = Instant::now();
    for b in s.backends() {
        s.session_failed(b, ejection::Failure::Connect, "refused", now);
    }
    let out = s.backends().iter().filter(|b| !s.is_up(b, now)).count();
    assert_eq!(out, 1, "0.5 of 3 is 1");
    let alone = ejecting(set(1), 1, 0.5);
    alone.session_failed(&alone.backends()[0], ejection::Failure::Connect, "x", now);
    assert!(
        alone.is_up(&alone.backends()[0], now),
        "a pool of one is never ejected"
    );
}

#[test]
fn turning_ejection_off_brings_ejected_backends_back() {
    let s = ejecting(set(2), 1, 0.5);
    let now = Instant::now();
    s.session_failed(&s.backends()[0], ejection::Failure::Connect, "x", now);
    assert!(!s.is_up(&s.backends()[0], now));
    let m = Metrics::new();
    let off = s.rebuild(
        &configs(2),
        Duration::from_secs(5),
        false,
        &m,
        &BalancerConfig {
            ejection: EjectionConfig::off(),
            ..BalancerConfig::default()
        },
    );
    assert!(off.is_up(&off.backends()[0], now));
    assert_eq!(off.backends()[0].stats.ejected.get(), 0);
}

#[test]
fn a_connect_in_progress_counts_for_the_next_choice_and_a_failed_one_gives_it_back() {
    let s = set(2).with_balancer(&BalancerConfig {
        policy: Policy::LeastConnections,
        ..BalancerConfig::default()
    });
    let now = Instant::now();
    let first = Arc::clone(&s.candidates(now)[0]);
    let attempt = s.attempt(&first);
    assert_eq!(first.active(), 1);
    assert_ne!(
        s.candidates(now)[0].name,
        first.name,
        "the next client goes to the other backend while the first connect runs"
    );
    drop(attempt);
    assert_eq!(first.active(), 0, "a failed connect gives the count back");
    let lease = s
        .attempt(&first)
        .into_lease(&s, &ClientInfo::at("127.0.0.1:1"));
    assert_eq!(first.active(), 1, "the session keeps the attempt's count");
    assert_eq!(first.stats.connections.get(), 1);
    drop(lease);
    assert_eq!(first.active(), 0);
}

#[test]
fn a_pool_has_one_primary_or_none_takes_writes() {
    use crate::backends::balancer::roles::Primary;
    use crate::config::Role;
    let mut configs = configs(3);
    configs[0].role = Some(Role::Auto);
    configs[1].role = Some(Role::Auto);
    configs[2].role = Some(Role::Replica);
    let s = BackendSet::new(&configs, Duration::from_secs(1), true, &Metrics::new());
    let pool = s.pool("default").unwrap();
    let [a, b, c] = [&s.backends()[0], &s.backends()[1], &s.backends()[2]];
    // Nothing checked yet: no primary, no writes anywhere.
    assert!(matches!(pool.primary(), Primary::None));
    assert!(!pool.takes_writes(a) && !pool.takes_writes(c));
    assert!(a.role.observe(false), "a change");
    assert!(!a.role.observe(false), "the same");
    b.role.observe(true);
    assert!(matches!(pool.primary(), Primary::One(p) if p.name == a.name));
    assert!(pool.takes_writes(a) && !pool.takes_writes(b) && !pool.takes_writes(c));
    assert!(pool.why_no_writes(c).contains(&a.name));
    // A switchover half done: both writable, neither takes writes, and both are named.
    b.role.observe(false);
    assert!(matches!(pool.primary(), Primary::Several(ref all) if all.len() == 2));
    assert!(!pool.takes_writes(a) && !pool.takes_writes(b));
    let why = pool.why_no_writes(a);
    assert!(why.contains(&a.name) && why.contains(&b.name), "{why}");
    // The old primary goes read-only: the new one takes writes.
    a.role.observe(true);
    assert!(pool.takes_writes(b) && !pool.takes_writes(a));
    // Lost: it says nothing any more.
    b.role.forget();
    assert!(matches!(pool.primary(), Primary::None));
    // A client's failed connect takes a backend down before its checks do (they then report no
    // change): its role goes with it, or a primary lost this way would claim writes beside the
    // replica promoted after it.
    b.role.observe(false);
    a.role.observe(false);
    assert!(matches!(pool.primary(), Primary::Several(_)));
    assert!(s.mark_down(b, std::time::Instant::now()));
    assert!(matches!(pool.primary(), Primary::One(p) if p.name == a.name));
}

#[test]
fn a_pool_without_roles_takes_writes_everywhere() {
    let s = BackendSet::new(&configs(2), Duration::from_secs(1), true, &Metrics::new());
    let pool = s.pool("default").unwrap();
    assert!(!pool.has_roles());
    assert!(s.backends().iter().all(|b| pool.takes_writes(b)));
}
