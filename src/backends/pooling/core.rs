//! The bookkeeping of one backend's shared server connections, without I/O or locks: which are
//! idle under which key, how many are open, who waits for what. `BackendPool` holds it behind a
//! mutex and does the waiting; everything here is a plain state change, unit-tested alone.
//!
//! The rules that keep sessions from starving when no password is kept:
//! - a connection exists only because some client logged in on it, so a key (a user and the
//!   session state it logged in with) whose sessions are alive keeps at least one connection
//!   that no session has pinned: an idle one is closed (for a login of another key, or at its
//!   idle timeout) only when its key keeps another, or has no unpinned session left;
//! - every login takes a slot: `open` counts connections and logins in flight, never above the
//!   limit; a login finds a free slot, or closes a closable idle connection and takes its slot,
//!   or waits in line;
//! - a connection the proxy closes keeps its slot until the server has let it go
//!   ([`close_done`](Core::close_done)): the server frees its own count of a connection a
//!   moment after the close, and a login let in before then would take the server past the
//!   limit (under churn, past its `max_connections`).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A connection parked in the pool.
#[derive(Debug)]
pub struct Idle<T> {
    pub conn: T,
    pub since: Instant,
    /// The worker thread whose runtime the connection's socket is registered with.
    pub worker: usize,
}

/// One key's share of the pool.
#[derive(Debug)]
struct KeyState<T, W> {
    idle: Vec<Idle<T>>,
    /// Connections of this key open, idle or in use (pinned ones included).
    conns: usize,
    /// Live sessions of this key.
    sessions: usize,
    /// Sessions holding their connection for good (each holds one of `conns`).
    pinned: usize,
    waiters: VecDeque<W>,
}

impl<T, W> Default for KeyState<T, W> {
    fn default() -> Self {
        KeyState {
            idle: Vec::new(),
            conns: 0,
            sessions: 0,
            pinned: 0,
            waiters: VecDeque::new(),
        }
    }
}

impl<T, W> KeyState<T, W> {
    /// Whether one idle connection of this key may close: another unpinned connection stays, or
    /// no unpinned session is left to need one.
    fn can_spare(&self) -> bool {
        self.conns.saturating_sub(self.pinned) > 1 || self.sessions <= self.pinned
    }
}

/// Something waiting that may have given up (its timeout passed): handing it a value gives the
/// value back when nobody takes it.
pub trait Waiter<T> {
    fn offer(self, value: T) -> Result<(), T>;

    /// True once nobody waits here any more (it stays queued until a handover skips it).
    fn left(&self) -> bool {
        false
    }
}

/// What a login gets.
#[derive(Debug)]
pub enum Slot<T> {
    /// A free slot.
    Free,
    /// The slot of an idle connection closed for it: close this one.
    Freed(T),
    /// None now: wait in line (the login's waiter was queued).
    Wait,
}

/// What a session asking for a connection gets.
#[derive(Debug)]
pub enum Acquired<T> {
    Got(T),
    /// Queued: a connection of its key will be handed over, or the waiter dropped.
    Wait,
    /// No connection of its key is left (the server closed them): nothing to wait for, since
    /// only a login makes one. (While sessions hold them pinned, their ends bring them back.)
    Starved,
}

/// The hasher of the pool's map: keys arrive hashed ([`super::Key`] writes one `u64`, taken as
/// it is); anything else (tests' keys) is folded in with FNV-1a.
#[derive(Default)]
pub struct PreHashed(u64);

impl std::hash::Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

type Map<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<PreHashed>>;

/// One backend's pool state. `T` is a server connection, `K` the key sessions share
/// connections under, `W` a session waiting for a connection of its key, `L` a login waiting
/// for a slot.
#[derive(Debug)]
pub struct Core<K, T, W, L> {
    limit: usize,
    /// Connections open plus logins in flight, connections being closed included.
    open: usize,
    /// Connections being closed (their slots are not free yet).
    closing: usize,
    keys: Map<K, KeyState<T, W>>,
    logins: VecDeque<L>,
    /// Idle connections over every key, and waiters queued over every key and the logins'
    /// line (those that left included): the gauges read them twice per transaction, so they
    /// are kept as the lists change rather than counted over the keys each time.
    idle_total: usize,
    queued: usize,
}

/// Connections to close now (outside the lock), from an operation that let some go.
pub type Closed<T> = Vec<T>;

impl<K, T, W, L> Core<K, T, W, L>
where
    K: Hash + Eq + Clone,
    W: Waiter<T>,
    L: Waiter<()>,
{
    pub fn new(limit: usize) -> Self {
        Core {
            limit,
            open: 0,
            closing: 0,
            keys: Map::default(),
            logins: VecDeque::new(),
            idle_total: 0,
            queued: 0,
        }
    }

    /// A reload may change the limit. A raised one hands its new slots to logins waiting now;
    /// above a lowered one, idle connections their keys can spare close now (returned) and
    /// the rest as they come back.
    pub fn set_limit(&mut self, limit: usize) -> Closed<T> {
        self.limit = limit;
        let mut closed = Vec::new();
        while self.open > self.limit {
            let Some(conn) = self.take_spare_idle() else {
                break;
            };
            self.open = self.open.saturating_sub(1);
            closed.push(conn);
        }
        while self.open < self.limit && self.give_slot() {
            self.open += 1;
        }
        closed
    }

    pub fn open(&self) -> usize {
        self.open
    }

    pub fn idle(&self) -> usize {
        self.idle_total
    }

    /// Connections open (idle or in use) of the keys `which` accepts.
    pub fn connections_of(&self, which: impl Fn(&K) -> bool) -> usize {
        self.keys
            .iter()
            .filter(|(k, _)| which(k))
            .map(|(_, s)| s.conns)
            .sum()
    }

    /// Sessions holding their connection for good (pinned), over every key.
    pub fn pinned_sessions(&self) -> usize {
        self.keys.values().map(|s| s.pinned).sum()
    }

    /// The keys with a connection open here.
    pub fn keys_with_connections(&self) -> impl Iterator<Item = &K> {
        self.keys
            .iter()
            .filter(|(_, s)| s.conns > 0)
            .map(|(k, _)| k)
    }

    /// A key's connections, sessions and pinned sessions (zeros once it is forgotten).
    pub fn key_counts(&self, key: &K) -> (usize, usize, usize) {
        self.keys
            .get(key)
            .map_or((0, 0, 0), |s| (s.conns, s.sessions, s.pinned))
    }

    /// [`idle`](Self::idle) and [`waiting`](Self::waiting): the gauges are set from them twice
    /// per transaction, so both come from counts kept as the lists change, and the waiters
    /// are walked only when some are queued.
    pub fn idle_and_waiting(&self) -> (usize, usize) {
        #[cfg(debug_assertions)]
        self.check_counts();
        let waiting = if self.queued == 0 { 0 } else { self.waiting() };
        (self.idle_total, waiting)
    }

    /// The kept counts agree with the lists (debug builds: every test that moves the gauges).
    #[cfg(debug_assertions)]
    fn check_counts(&self) {
        let idle: usize = self.keys.values().map(|k| k.idle.len()).sum();
        let queued: usize = self.keys.values().map(|k| k.waiters.len()).sum();
        debug_assert_eq!(idle, self.idle_total, "idle connections counted");
        debug_assert_eq!(queued + self.logins.len(), self.queued, "waiters counted");
    }

    pub fn waiting(&self) -> usize {
        // Those that gave up (timed out, or their session ended) stay queued until a handover
        // skips them; they wait for nothing.
        let logins = self.logins.iter().filter(|l| !l.left()).count();
        let sessions = self.keys.values().flat_map(|k| &k.waiters);
        logins + sessions.filter(|w| !w.left()).count()
    }

    /// A login asks for a slot; `waiter` is queued when there is none.
    pub fn login(&mut self, waiter: impl FnOnce() -> L) -> Slot<T> {
        if self.open < self.limit {
            self.open += 1;
            return Slot::Free;
        }
        if let Some(conn) = self.take_spare_idle() {
            // The closed connection's slot goes to the login: `open` stays.
            return Slot::Freed(conn);
        }
        self.logins.push_back(waiter());
        self.queued += 1;
        Slot::Wait
    }

    /// The oldest idle connection whose key can spare it, taken out (its key's count too).
    fn take_spare_idle(&mut self) -> Option<T> {
        let mut oldest: Option<(&K, usize, Instant)> = None;
        for (key, state) in &self.keys {
            if !state.can_spare() {
                continue;
            }
            if let Some((i, idle)) = state.idle.iter().enumerate().min_by_key(|(_, i)| i.since) {
                if oldest.is_none_or(|(_, _, since)| idle.since < since) {
                    oldest = Some((key, i, idle.since));
                }
            }
        }
        let (key, i, _) = oldest?;
        let key = key.clone();
        let state = self.keys.get_mut(&key)?;
        let conn = state.idle.remove(i).conn;
        self.idle_total -= 1;
        state.conns = state.conns.saturating_sub(1);
        self.forget_if_empty(&key);
        Some(conn)
    }

    /// A login that got a slot failed (refused, backend gone): the slot is free again.
    pub fn login_failed(&mut self) {
        self.open = self.open.saturating_sub(1);
        self.slot_freed();
    }

    /// A login succeeded: its session holds the new connection. Returns the key as the pool
    /// holds it (the first session's of an equal key), for the session to use from now on.
    pub fn logged_in(&mut self, key: &K) -> K {
        let (held, state) = match self.keys.entry(key.clone()) {
            Entry::Occupied(o) => {
                let held = o.key().clone();
                (held, o.into_mut())
            }
            Entry::Vacant(v) => (key.clone(), v.insert(KeyState::default())),
        };
        state.conns += 1;
        state.sessions += 1;
        held
    }

    /// A session of `key` wants a connection: an idle one (of `worker`'s if there is one, else
    /// the most recently parked), or a place in line, or nothing to wait for.
    #[cfg(test)]
    pub fn acquire(&mut self, key: &K, worker: usize, waiter: impl FnOnce() -> W) -> Acquired<T> {
        self.acquire_like(key, worker, |_| true, waiter)
    }

    /// [`acquire`](Self::acquire), preferring (most recently parked first) a connection `like`
    /// accepts, on `worker`'s thread, then one `like` accepts, then one of `worker`'s.
    pub fn acquire_like(
        &mut self,
        key: &K,
        worker: usize,
        like: impl Fn(&T) -> bool,
        waiter: impl FnOnce() -> W,
    ) -> Acquired<T> {
        let got = self.take_idle(key, worker, like);
        if let (Acquired::Wait, Some(state)) = (&got, self.keys.get_mut(key)) {
            state.waiters.push_back(waiter());
            self.queued += 1;
        }
        got
    }

    /// [`acquire_like`](Self::acquire_like) without a place in line: `Wait` says one is
    /// needed, and nothing was queued.
    pub fn take_idle(&mut self, key: &K, worker: usize, like: impl Fn(&T) -> bool) -> Acquired<T> {
        let Some(state) = self.keys.get_mut(key) else {
            return Acquired::Starved;
        };
        let idle = &state.idle;
        let at = idle
            .iter()
            .rposition(|i| i.worker == worker && like(&i.conn))
            .or_else(|| idle.iter().rposition(|i| like(&i.conn)))
            .or_else(|| idle.iter().rposition(|i| i.worker == worker))
            .or_else(|| idle.len().checked_sub(1));
        match at {
            Some(i) => {
                self.idle_total -= 1;
                Acquired::Got(state.idle.remove(i).conn)
            }
            None if state.conns == 0 => Acquired::Starved,
            None => Acquired::Wait,
        }
    }

    /// [`take_idle`](Self::take_idle) among the connections of `worker`'s thread only (a
    /// session of a pool across backends first looks for one it can use without waking
    /// another thread); None when there is none, nothing queued.
    pub fn take_idle_local(
        &mut self,
        key: &K,
        worker: usize,
        like: impl Fn(&T) -> bool,
    ) -> Option<T> {
        let state = self.keys.get_mut(key)?;
        let idle = &state.idle;
        let at = idle
            .iter()
            .rposition(|i| i.worker == worker && like(&i.conn))
            .or_else(|| idle.iter().rposition(|i| i.worker == worker))?;
        self.idle_total -= 1;
        Some(state.idle.remove(at).conn)
    }

    /// A session of `key` that logged in on another backend of the pool moved here (it took
    /// a connection of this pool, so the key is known): counted among the key's sessions, as a
    /// login would be, without a connection of its own. Returns the pool's copy of the key.
    /// (It left its previous pool with [`session_ended`](Self::session_ended).)
    pub fn joined(&mut self, key: &K) -> K {
        let (held, state) = match self.keys.entry(key.clone()) {
            Entry::Occupied(o) => {
                let held = o.key().clone();
                (held, o.into_mut())
            }
            Entry::Vacant(v) => (key.clone(), v.insert(KeyState::default())),
        };
        state.sessions += 1;
        held
    }

    /// A session gives its connection back: to the first session of its key still waiting,
    /// else closed for a waiting login when its key can spare it, else parked. A limit lowered
    /// by a reload closes it instead of parking it. What is returned is to be closed, then
    /// reported with [`close_done`](Self::close_done).
    pub fn release(&mut self, key: &K, conn: T, worker: usize, now: Instant) -> Closed<T> {
        let Some(state) = self.keys.get_mut(key) else {
            return vec![conn];
        };
        let mut conn = conn;
        while let Some(w) = state.waiters.pop_front() {
            self.queued -= 1;
            match w.offer(conn) {
                Ok(()) => return Vec::new(),
                Err(back) => conn = back,
            }
        }
        let over = self.open > self.limit + self.closing;
        if state.can_spare() && (over || self.logins.len() > self.closing) {
            // Closed: for a lowered limit, or so that its slot goes to a waiting login once the
            // server has let it go (`close_done`).
            state.conns = state.conns.saturating_sub(1);
            self.closing += 1;
            return vec![conn];
        }
        state.idle.push(Idle {
            conn,
            since: now,
            worker,
        });
        self.idle_total += 1;
        Vec::new()
    }

    /// Hands a slot to the first login still waiting; false if none took it.
    fn give_slot(&mut self) -> bool {
        while let Some(l) = self.logins.pop_front() {
            self.queued -= 1;
            if l.offer(()).is_ok() {
                return true;
            }
        }
        false
    }

    /// The server let go of a connection [`release`](Self::release) or
    /// [`expire`](Self::expire) gave to close: its slot is free.
    pub fn close_done(&mut self) {
        self.closing = self.closing.saturating_sub(1);
        self.open = self.open.saturating_sub(1);
        self.slot_freed();
    }

    /// A slot came free (a connection closed, a login failed): to a waiting login, or kept free.
    fn slot_freed(&mut self) {
        if self.open < self.limit && self.give_slot() {
            self.open += 1;
        }
    }

    /// A session's connection was closed or lost (the server went away, or it was pinned and
    /// its session ended).
    pub fn closed(&mut self, key: &K) {
        if let Some(state) = self.keys.get_mut(key) {
            state.conns = state.conns.saturating_sub(1);
        }
        self.open = self.open.saturating_sub(1);
        self.slot_freed();
        self.starving(key);
        self.forget_if_empty(key);
    }

    /// The session pinned the connection it holds.
    pub fn pinned(&mut self, key: &K) {
        if let Some(state) = self.keys.get_mut(key) {
            state.pinned += 1;
        }
    }

    /// A pinned session's connection was brought back to its key's login state (its session
    /// ends): it counts as shared again, to be [`release`](Self::release)d.
    pub fn unpinned(&mut self, key: &K) {
        if let Some(state) = self.keys.get_mut(key) {
            state.pinned = state.pinned.saturating_sub(1);
        }
    }

    /// A session ended; `pinned` says whether it had pinned its connection, which closes
    /// with it (its state is the session's). A connection it held unpinned was released or
    /// reported [`closed`](Self::closed) before.
    pub fn session_ended(&mut self, key: &K, pinned: bool) {
        if let Some(state) = self.keys.get_mut(key) {
            state.sessions = state.sessions.saturating_sub(1);
            if pinned {
                state.pinned = state.pinned.saturating_sub(1);
                state.conns = state.conns.saturating_sub(1);
                self.open = self.open.saturating_sub(1);
            }
        }
        if pinned {
            self.slot_freed();
            self.starving(key);
        }
        self.forget_if_empty(key);
    }

    /// Waiters of a key left with no connection at all are told at once rather than at their
    /// timeout: dropping them wakes them with nothing.
    fn starving(&mut self, key: &K) {
        if let Some(state) = self.keys.get_mut(key) {
            if state.conns == 0 {
                self.queued -= state.waiters.len();
                state.waiters.clear();
            }
        }
    }

    /// Keys with sessions here.
    pub fn keys_with_sessions(&self) -> impl Iterator<Item = &K> {
        self.keys
            .iter()
            .filter(|(_, s)| s.sessions > 0)
            .map(|(k, _)| k)
    }

    /// Idle connections past `timeout` that their keys can spare, taken out to close (each
    /// then reported with [`close_done`](Self::close_done)); a key `keep` names keeps its last
    /// unpinned connection even with no session here (its sessions are elsewhere).
    pub fn expire(
        &mut self,
        now: Instant,
        timeout: Duration,
        keep: impl Fn(&K) -> bool,
    ) -> Closed<T> {
        let mut closed = Vec::new();
        let keys: Vec<K> = self.keys.keys().cloned().collect();
        for key in keys {
            let Some(state) = self.keys.get_mut(&key) else {
                continue;
            };
            // Oldest first, each only while the key can still spare one.
            state.idle.sort_by_key(|i| std::cmp::Reverse(i.since));
            let kept = keep(&key);
            while let Some(last) = state.idle.last() {
                let last_one = state.conns.saturating_sub(state.pinned) <= 1;
                if now.saturating_duration_since(last.since) < timeout
                    || !state.can_spare()
                    || kept && last_one
                {
                    break;
                }
                if let Some(idle) = state.idle.pop() {
                    self.idle_total -= 1;
                    state.conns = state.conns.saturating_sub(1);
                    self.closing += 1;
                    closed.push(idle.conn);
                }
            }
            self.forget_if_empty(&key);
        }
        while self.open < self.limit && self.give_slot() {
            self.open += 1;
        }
        closed
    }

    /// Every idle connection taken out to close (the drain is over: no session will ask
    /// again).
    pub fn close_idle(&mut self) -> Closed<T> {
        let mut closed = Vec::new();
        let keys: Vec<K> = self.keys.keys().cloned().collect();
        for key in keys {
            let Some(state) = self.keys.get_mut(&key) else {
                continue;
            };
            self.idle_total -= state.idle.len();
            for idle in state.idle.drain(..) {
                state.conns = state.conns.saturating_sub(1);
                self.open = self.open.saturating_sub(1);
                closed.push(idle.conn);
            }
            self.forget_if_empty(&key);
        }
        closed
    }

    fn forget_if_empty(&mut self, key: &K) {
        if self
            .keys
            .get(key)
            .is_some_and(|s| s.conns == 0 && s.sessions == 0 && s.waiters.is_empty())
        {
            self.keys.remove(key);
        }
    }
}

#[cfg(test)]
mod tests;
