use std::cell::RefCell;
use std::rc::Rc;

use super::*;

/// A waiter that takes what it is offered, or refuses it once it "timed out".
#[derive(Clone, Default)]
struct Box<T>(Rc<RefCell<(bool, Option<T>)>>);

impl<T> Box<T> {
    fn gone(&self) {
        self.0.borrow_mut().0 = true;
    }
    fn got(&self) -> Option<T> {
        self.0.borrow_mut().1.take()
    }
}

impl<T> Waiter<T> for Box<T> {
    fn offer(self, value: T) -> Result<(), T> {
        let mut inner = self.0.borrow_mut();
        if inner.0 {
            return Err(value);
        }
        inner.1 = Some(value);
        Ok(())
    }
}

type Pool = Core<&'static str, u32, Box<u32>, Box<()>>;

fn now() -> Instant {
    Instant::now()
}

/// A session of `key` logs in on connection `conn`, which it then holds.
fn log_in(pool: &mut Pool, key: &'static str) {
    assert!(matches!(pool.login(Box::default), Slot::Free));
    pool.logged_in(&key);
}

#[test]
fn logins_take_free_slots_then_the_oldest_spare_idle_connection_then_wait() {
    let mut pool = Pool::new(3);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    log_in(&mut pool, "b");
    assert_eq!(pool.open(), 3);
    // "a" has two sessions and two connections: parked, one of them can go.
    assert!(pool.release(&"a", 1, 0, t).is_empty());
    assert!(pool
        .release(&"a", 2, 0, t + Duration::from_secs(1))
        .is_empty());
    // "b"'s only connection, parked, cannot: its session needs it.
    assert!(pool.release(&"b", 3, 0, t).is_empty());
    match pool.login(Box::default) {
        Slot::Freed(conn) => assert_eq!(conn, 1, "the oldest idle of a key that can spare it"),
        other => panic!("{other:?}"),
    }
    assert_eq!(pool.open(), 3);
    pool.logged_in(&"c");
    // Now "a" keeps one connection for its two sessions, "b" one: nothing to spare.
    let waiter = Box::default();
    let queued = waiter.clone();
    assert!(matches!(pool.login(move || queued), Slot::Wait));
    assert_eq!(pool.waiting(), 1);
    assert_eq!(pool.idle_and_waiting(), (pool.idle(), 1));
    // A session of "c" ends holding a pinned connection: its slot goes to the login.
    pool.pinned(&"c");
    pool.session_ended(&"c", true);
    assert_eq!(waiter.got(), Some(()));
    assert_eq!(pool.open(), 3);
}

#[test]
fn the_last_connection_of_a_key_with_live_sessions_is_never_expired() {
    let mut pool = Pool::new(4);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    pool.release(&"a", 1, 0, t);
    pool.release(&"a", 2, 0, t);
    let closed = pool.expire(
        t + Duration::from_secs(120),
        Duration::from_secs(60),
        |_| false,
    );
    assert_eq!(
        closed.len(),
        1,
        "one of the two goes, one stays for the sessions"
    );
    assert_eq!(pool.idle(), 1);
    assert_eq!(pool.idle_and_waiting(), (1, 0));
    // Its slot stays taken until the server has let it go.
    assert_eq!(pool.open(), 2);
    pool.close_done();
    assert_eq!(pool.open(), 1);
    // Both sessions end: the last one may go too.
    pool.session_ended(&"a", false);
    pool.session_ended(&"a", false);
    let closed = pool.expire(
        t + Duration::from_secs(120),
        Duration::from_secs(60),
        |_| false,
    );
    assert_eq!(closed.len(), 1);
    pool.close_done();
    assert_eq!((pool.open(), pool.idle()), (0, 0));
}

#[test]
fn a_connection_closed_for_a_waiting_login_frees_its_slot_only_once_closed() {
    let mut pool = Pool::new(2);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    let waiter = Box::default();
    let w = waiter.clone();
    assert!(matches!(pool.login(move || w), Slot::Wait));
    // A second login in line does not make a second connection close for the first one.
    let second = Box::default();
    let w2 = second.clone();
    assert!(matches!(pool.login(move || w2), Slot::Wait));
    assert_eq!(pool.release(&"a", 1, 0, t), vec![1]);
    assert_eq!(
        waiter.got(),
        None,
        "the server still counts the closing one"
    );
    assert_eq!(pool.open(), 2);
    // "a" keeps its last connection for its sessions.
    assert!(pool.release(&"a", 2, 0, t).is_empty());
    pool.close_done();
    assert_eq!(waiter.got(), Some(()));
    assert_eq!(second.got(), None);
    assert_eq!(pool.open(), 2);
}

#[test]
fn a_released_connection_goes_to_the_first_waiter_still_waiting() {
    let mut pool = Pool::new(4);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    let (first, second) = (Box::default(), Box::default());
    let (f, s) = (first.clone(), second.clone());
    assert!(matches!(pool.acquire(&"a", 0, move || f), Acquired::Wait));
    assert!(matches!(pool.acquire(&"a", 0, move || s), Acquired::Wait));
    first.gone();
    assert!(pool.release(&"a", 7, 1, t).is_empty());
    assert_eq!(
        second.got(),
        Some(7),
        "the first gave up: the second gets it"
    );
    assert_eq!(pool.idle(), 0);
    // With nobody waiting it is parked, and a worker's own connection is preferred.
    pool.release(&"a", 8, 1, t);
    pool.release(&"a", 9, 0, t);
    match pool.acquire(&"a", 1, Box::default) {
        Acquired::Got(conn) => assert_eq!(conn, 8),
        other => panic!("{other:?}"),
    }
}

#[test]
fn waiters_wait_for_pinned_connections_and_are_let_go_when_none_is_left() {
    let mut pool = Pool::new(4);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    // One connection was closed (the server went away): two sessions, one connection.
    pool.closed(&"a");
    pool.pinned(&"a");
    let waiter = Box::default();
    let w = waiter.clone();
    assert!(matches!(pool.acquire(&"a", 0, move || w), Acquired::Wait));
    // The pinned session ends with its connection brought back: the waiter gets it.
    pool.unpinned(&"a");
    pool.session_ended(&"a", false);
    assert!(pool.release(&"a", 5, 0, t).is_empty());
    assert_eq!(waiter.got(), Some(5));
    // The server closes it: nothing is left to wait for.
    let late = Box::default();
    let l = late.clone();
    assert!(matches!(pool.acquire(&"a", 0, move || l), Acquired::Wait));
    pool.closed(&"a");
    assert_eq!(pool.waiting(), 0, "let go");
    assert!(matches!(
        pool.acquire(&"a", 0, Box::default),
        Acquired::Starved
    ));
    assert!(matches!(
        pool.acquire(&"unknown", 0, Box::default),
        Acquired::Starved
    ));
}

#[test]
fn a_lowered_limit_closes_connections_as_they_come_back() {
    let mut pool = Pool::new(3);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    pool.set_limit(2);
    assert_eq!(pool.release(&"a", 1, 0, t), vec![1]);
    pool.close_done();
    assert_eq!(pool.open(), 2);
    assert!(pool.release(&"a", 2, 0, t).is_empty());
    assert_eq!(pool.open(), 2);
}

#[test]
fn a_failed_login_frees_its_slot_for_the_next_in_line() {
    let mut pool = Pool::new(1);
    assert!(matches!(pool.login(Box::default), Slot::Free));
    let waiter = Box::default();
    let w = waiter.clone();
    assert!(matches!(pool.login(move || w), Slot::Wait));
    pool.login_failed();
    assert_eq!(waiter.got(), Some(()));
    assert_eq!(pool.open(), 1);
}

#[test]
fn the_end_of_the_drain_closes_every_idle_connection_and_frees_its_slot() {
    let mut pool = Pool::new(3);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "b");
    log_in(&mut pool, "b");
    assert!(pool.release(&"a", 1, 0, t).is_empty());
    assert!(pool.release(&"b", 2, 0, t).is_empty());
    pool.session_ended(&"a", false);
    // The third connection is still in use: it stays.
    let mut closed = pool.close_idle();
    closed.sort();
    assert_eq!(closed, vec![1, 2]);
    assert_eq!((pool.open(), pool.idle()), (1, 0));
}

#[test]
fn a_changed_limit_wakes_waiting_logins_or_closes_spare_idle_connections_now() {
    let mut pool = Pool::new(2);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    let waiting = Box::default();
    assert!(matches!(pool.login(|| waiting.clone()), Slot::Wait));
    assert!(pool.set_limit(3).is_empty());
    assert_eq!(
        waiting.got(),
        Some(()),
        "the new slot went to the waiting login"
    );
    pool.logged_in(&"a");
    assert_eq!(pool.open(), 3);
    assert!(pool.release(&"a", 1, 0, t).is_empty());
    assert!(pool.release(&"a", 2, 0, t).is_empty());
    // Lowered to 1: the idle ones go at once (the one in use serves the key's sessions).
    assert_eq!(pool.set_limit(1).len(), 2);
    assert_eq!((pool.open(), pool.idle()), (1, 0));
}

#[test]
fn taking_an_idle_connection_without_a_wait_queues_nobody() {
    let mut pool = Pool::new(2);
    let t = now();
    log_in(&mut pool, "a");
    log_in(&mut pool, "a");
    // Both of "a"'s connections are held: nothing idle, and asking without a wait leaves the
    // line empty, the gauges as they were.
    assert!(matches!(pool.take_idle(&"a", 0, |_| true), Acquired::Wait));
    assert_eq!(pool.idle_and_waiting(), (0, 0));
    assert!(pool.release(&"a", 1, 0, t).is_empty());
    assert_eq!(pool.idle_and_waiting(), (1, 0));
    assert!(matches!(
        pool.take_idle(&"a", 0, |_| true),
        Acquired::Got(1)
    ));
    assert_eq!(pool.idle_and_waiting(), (0, 0));
    // A key nobody logged in with has nothing to wait for.
    assert!(matches!(
        pool.take_idle(&"b", 0, |_| true),
        Acquired::Starved
    ));
    // The waiting way queues, and the count of those waiting follows.
    let waiter = Box::default();
    let queued = waiter.clone();
    assert!(matches!(pool.acquire(&"a", 0, || queued), Acquired::Wait));
    assert_eq!(pool.idle_and_waiting(), (0, 1));
    assert!(pool.release(&"a", 1, 0, t).is_empty());
    assert_eq!(waiter.got(), Some(1), "handed to the waiter, not parked");
    assert_eq!(pool.idle_and_waiting(), (0, 0));
}

#[test]
fn a_session_moving_between_backends_is_counted_where_it_runs_and_take_idle_never_queues() {
    // Two backends' pools; a session of "a" logged in on the first, another on the second.
    let (mut home, mut other) = (Pool::new(4), Pool::new(4));
    let t = now();
    log_in(&mut home, "a");
    log_in(&mut other, "a");
    assert!(home.release(&"a", 1, 0, t).is_empty());
    assert!(other.release(&"a", 2, 0, t).is_empty());
    // Nothing idle of "b", nothing of "a" left once taken, and nobody queued; the local
    // look finds only the worker's own.
    assert_eq!(other.take_idle_local(&"a", 1, |_| true), None);
    assert!(matches!(
        other.take_idle(&"b", 0, |_| true),
        Acquired::Starved
    ));
    assert_eq!(other.take_idle_local(&"a", 0, |_| true), Some(2));
    assert!(matches!(other.take_idle(&"a", 0, |_| true), Acquired::Wait));
    assert_eq!(other.waiting(), 0, "take_idle queues no waiter");
    // The first session moves to `other` (joined there, ended at home).
    other.joined(&"a");
    home.session_ended(&"a", false);
    assert_eq!(other.key_counts(&"a"), (1, 2, 0));
    assert_eq!(home.key_counts(&"a"), (1, 0, 0));
    // At home its key has no session left, but has sessions elsewhere in a pool across
    // backends: its last connection here stays (its writes may need this backend).
    assert!(home
        .expire(t + Duration::from_secs(1), Duration::ZERO, |k| *k == "a")
        .is_empty());
    // Otherwise the idle connection there may go at once.
    let closed = home.expire(t + Duration::from_secs(1), Duration::ZERO, |_| false);
    assert_eq!(closed, vec![1]);
    home.close_done();
    assert_eq!(home.open(), 0);
    assert_eq!(home.key_counts(&"a"), (0, 0, 0), "the key is forgotten");
    // On `other` the last connection of a key with live sessions stays.
    assert!(other.release(&"a", 2, 0, t).is_empty());
    assert!(other
        .expire(t + Duration::from_secs(1), Duration::ZERO, |_| false)
        .is_empty());
    other.session_ended(&"a", false);
    other.session_ended(&"a", false);
    assert_eq!(
        other.expire(t + Duration::from_secs(1), Duration::ZERO, |_| false),
        vec![2]
    );
}
