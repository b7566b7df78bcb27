use std::time::Duration;

use super::*;

fn shard(rows: usize) -> Shard {
    Shard::new(Arc::new(Budget::new(rows)), TextBudget::new(usize::MAX / 2))
}

fn done(us: u64) -> Completed {
    Completed {
        command: cmd::QUERY,
        latency: Duration::from_micros(us),
        rows: 1,
        ..Completed::default()
    }
}

/// Counts `c` at once (not batched), as a statement of `ident`, which takes the
/// allocation the row keeps when the two are equal.
fn record(
    s: &mut Shard,
    digest: Digest,
    kind: Kind,
    ident: &mut Arc<Ident>,
    c: &Completed,
    now: Instant,
) -> bool {
    s.record(&Done::new(digest, kind, c, now), ident)
}

fn totals(s: &Shard) -> (u64, u64, usize) {
    let (mut count, mut sum, mut rows) = (0, 0, 0);
    s.each(|_, _, _, _, st| {
        count += st.count;
        sum += st.sum_ns;
        rows += 1;
    });
    (count, sum, rows)
}

#[test]
fn rows_stay_bounded_and_totals_exact_when_folded() {
    let mut s = shard(64);
    let mut ident = Ident::new("b1", "p", "u", "s");
    let now = Instant::now();
    let mut want_sum = 0;
    for i in 0..10_000u64 {
        assert!(s.texts(Digest(i + 1), || ("q".into(), b"q")));
        let c = done(1 + i % 97);
        want_sum += c.latency.as_nanos() as u64;
        assert!(record(
            &mut s,
            Digest(i + 1),
            Kind::Query,
            &mut ident,
            &c,
            now
        ));
        assert!(s.rows.len() <= 64);
    }
    let (count, sum, rows) = totals(&s);
    assert_eq!(count, 10_000);
    assert_eq!(sum, want_sum);
    assert!(rows <= 65, "{rows} rows");
    assert!(s.folded > 9_000);
    assert!(s.texts.len() <= 2 * 64 + 1, "{} texts kept", s.texts.len());
}

#[test]
fn pushed_statements_count_once_flushed_and_a_reset_drops_them() {
    let mut s = shard(64);
    let ident = Ident::new("b1", "p", "u", "s");
    let now = Instant::now();
    assert!(s.texts(Digest(1), || ("q".into(), b"q")));
    let other = Ident::new("b1", "p", "u2", "s");
    for i in 0..3 * BATCH + 5 {
        s.push(Done::new(Digest(1), Kind::Query, &done(5), now), &ident);
        assert!(s.pending.len() <= BATCH);
        assert!(s.idents.len() <= 2, "one Arc per identity in a batch");
        if i % 7 == 0 {
            s.push(Done::new(Digest(1), Kind::Execute, &done(5), now), &other);
        }
    }
    s.flush();
    let mut by_user = Vec::new();
    s.each(|_, k, i, _, st| by_user.push((i.user.to_string(), k, st.count)));
    by_user.sort_by_key(|(u, _, _)| u.clone());
    let sevens = (3 * BATCH + 5).div_ceil(7) as u64;
    assert_eq!(
        by_user,
        vec![
            ("u".to_string(), Kind::Query, 3 * BATCH as u64 + 5),
            ("u2".to_string(), Kind::Execute, sevens)
        ]
    );
    s.clear();
    assert!(s.texts(Digest(1), || ("q".into(), b"q")));
    for _ in 0..3 * BATCH + 5 {
        s.push(Done::new(Digest(1), Kind::Query, &done(5), now), &ident);
    }
    assert_eq!(
        totals(&s).0,
        3 * BATCH as u64,
        "whole batches are in the rows"
    );
    s.flush();
    assert_eq!(
        totals(&s).0,
        3 * BATCH as u64 + 5,
        "and the rest once flushed"
    );
    let lost = s.lost();
    // A digest without texts goes to "(other)" and tells the sessions; digest 0 does not.
    s.push(Done::new(Digest(2), Kind::Query, &done(5), now), &ident);
    s.push(Done::new(Digest(0), Kind::Query, &done(5), now), &ident);
    s.flush();
    assert_eq!(s.lost(), lost + 1);
    let before = s.lost();
    s.push(Done::new(Digest(1), Kind::Query, &done(5), now), &ident);
    s.clear();
    s.flush();
    assert_eq!(
        totals(&s).0,
        0,
        "a statement waiting when reset is not counted"
    );
    assert_ne!(s.lost(), before, "a reset tells the sessions");
}

#[test]
fn the_same_digest_under_other_users_or_kinds_is_another_row() {
    let mut s = shard(64);
    let (mut a, mut b) = (
        Ident::new("b1", "p", "u1", "s"),
        Ident::new("b1", "p", "u2", "s"),
    );
    let now = Instant::now();
    assert!(s.texts(Digest(7), || ("q".into(), b"q")));
    record(&mut s, Digest(7), Kind::Query, &mut a, &done(5), now);
    record(&mut s, Digest(7), Kind::Query, &mut a, &done(5), now);
    record(&mut s, Digest(7), Kind::Query, &mut b, &done(5), now);
    record(&mut s, Digest(7), Kind::Execute, &mut a, &done(5), now);
    let mut counts = Vec::new();
    s.each(|_, k, i, _, st| counts.push((k, i.user.to_string(), st.count)));
    counts.sort_by_key(|(k, u, _)| (k.as_str(), u.clone()));
    assert_eq!(
        counts,
        vec![
            (Kind::Execute, "u1".to_string(), 1),
            (Kind::Query, "u1".to_string(), 2),
            (Kind::Query, "u2".to_string(), 1),
        ]
    );
}

#[test]
fn sessions_of_one_identity_come_to_share_one_ident() {
    let mut s = shard(64);
    let now = Instant::now();
    let mut sessions: Vec<Arc<Ident>> = (0..3).map(|_| Ident::new("b1", "p", "u", "s")).collect();
    let mut stranger = Ident::new("b1", "p", "u", "other");
    for d in 1..=3 {
        assert!(s.texts(Digest(d), || ("q".into(), b"q")));
    }
    // Each session makes one row with its own allocation, then all run every digest.
    for (d, ident) in (1..=3).zip(sessions.iter_mut()) {
        assert!(record(&mut s, Digest(d), Kind::Query, ident, &done(5), now));
    }
    for _ in 0..2 {
        for ident in sessions.iter_mut() {
            for d in 1..=3 {
                assert!(record(&mut s, Digest(d), Kind::Query, ident, &done(5), now));
            }
        }
    }
    assert!(record(
        &mut s,
        Digest(1),
        Kind::Query,
        &mut stranger,
        &done(5),
        now
    ));
    let lowest = sessions.iter().map(Arc::as_ptr).min().unwrap();
    assert!(sessions.iter().all(|i| Arc::as_ptr(i) == lowest));
    assert!(s
        .rows
        .values()
        .filter(|r| r.ident.schema.as_ref() == "s")
        .all(|r| Arc::as_ptr(&r.ident) == lowest));
    assert_eq!(
        stranger.schema.as_ref(),
        "other",
        "an unequal ident is never shared"
    );
    let mut counts = Vec::new();
    s.each(|d, _, i, _, st| counts.push((d.map(|d| d.0), i.schema.to_string(), st.count)));
    counts.sort();
    assert_eq!(
        counts,
        vec![
            (Some(1), "other".to_string(), 1),
            (Some(1), "s".to_string(), 7),
            (Some(2), "s".to_string(), 7),
            (Some(3), "s".to_string(), 7),
        ]
    );
}

#[test]
fn a_reset_forgets_rows_and_unused_texts() {
    let mut s = shard(64);
    let mut ident = Ident::new("b1", "p", "u", "s");
    assert!(s.texts(Digest(1), || ("q".into(), b"q")));
    record(
        &mut s,
        Digest(1),
        Kind::Query,
        &mut ident,
        &done(5),
        Instant::now(),
    );
    s.clear();
    assert_eq!(totals(&s).2, 0);
    assert!(s.texts.is_empty());
    assert_eq!(s.text_budget.used(), 0, "the reset refunded its texts");
    assert!(
        !record(
            &mut s,
            Digest(1),
            Kind::Query,
            &mut ident,
            &done(5),
            Instant::now()
        ),
        "no texts: counted in (other), to be made again"
    );
}

#[test]
fn a_spent_text_budget_folds_rows_for_new_texts_and_never_overspends() {
    let per = 1000 + 2 + super::super::texts::OVERHEAD;
    let text_budget = TextBudget::new(10 * per);
    let mut s = Shard::new(Arc::new(Budget::new(1000)), Arc::clone(&text_budget));
    let mut ident = Ident::new("b1", "p", "u", "s");
    let now = Instant::now();
    let mut count = 0;
    for i in 0..1000u64 {
        let text = format!("{i:01000}");
        let made = s.texts(Digest(i + 1), || (text, b"s1"));
        assert!(made, "rows fold to make room: {i}");
        assert!(record(
            &mut s,
            Digest(i + 1),
            Kind::Query,
            &mut ident,
            &done(5),
            now
        ));
        count += 1;
        assert!(text_budget.used() <= 10 * per, "{}", text_budget.used());
    }
    assert_eq!(totals(&s).0, count, "every statement counted");
    assert!(s.rows.len() <= 10, "{} rows", s.rows.len());
    // Another shard holding the budget: nothing to fold here, nothing made.
    let other = Shard::new(Arc::new(Budget::new(1000)), Arc::clone(&text_budget));
    let mut other = other;
    assert!(!other.texts(Digest(5000), || ("x".repeat(1000), b"s1")));
    drop(s);
    assert_eq!(text_budget.used(), 0, "every text refunded");
}
