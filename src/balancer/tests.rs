use super::*;

fn set(n: u16) -> BackendSet {
    let configs: Vec<_> = (0..n)
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
            pool: "default".into(),
        })
        .collect();
    BackendSet::new(&configs, Duration::from_secs(5), false, &Metrics::new())
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
        pool: "default".into(),
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
            pool: "default".into(),
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
