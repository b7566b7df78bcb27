//! KILL through a balancer: proxy-unique connection ids, and KILLs mapped to the session meant.
//!
//! `KILL QUERY n` (the CLI's Ctrl-C, Connector/J's `Statement.cancel()` and query timeouts)
//! arrives on a *new* connection, which the balancer may send to another backend, where thread
//! `n` is a stranger. So each client is greeted with a proxy-unique id, mapped to (backend,
//! thread id, user); a KILL naming such an id is rewritten to the backend's thread id when the
//! killing session is on the same backend (the server then checks the client's own right).
//! On another backend it is run by the proxy over its own `kill:` account ([`exec`]) when the
//! killer's user name is the target's (the server's rule for a user without the kill
//! privilege), and refused with the server's own ERR 1095 otherwise; every refusal is a
//! `SIGNAL` the killer's backend answers in sequence. The parsing ([`parse`]) and the mapping
//! here are sans-IO; the session owns the registry.
//!
//! Id layout: `0b011` in the top bits, then 8 instance bits, then a 21-bit counter:
//! `0x6000_0000 | instance << 21 | counter`, so every id lies in [`ID_BASE`, 2^31). Below 2^31
//! because clients keep the id in a signed 32-bit int (Connector/J, and with it every JVM
//! client): an id past it comes back negative in their KILL (`KILL QUERY -1073741823`). Servers
//! count their thread ids up from 1 and do not get near 1.6 billion connections in practice, so
//! smaller ids are the servers' own (from SHOW PROCESSLIST or `CONNECTION_ID()`) and pass
//! unchanged. The instance bits (`instance_id`, 0 for a proxy on its own) keep proxies' ids
//! apart and say which instance to ask about an id that is not ours (see [`peer`]); the counter
//! wraps and skips ids still in use, which the 2 million ids of an instance leave plenty of
//! room for. A KILL that writes an id in its negative 32-bit form (as
//! a client that kept the greeting's 4 bytes in a signed int prints it) is read as that id; with
//! every proxy id below 2^31 none has such a form, so these reach the server unchanged.

pub mod exec;
mod parse;
pub mod peer;
pub mod peer_api;

pub use parse::{parse, KillRequest};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::backends::balancer::Backend;
use crate::wire::protocol::codec::header;
use crate::wire::protocol::response::cmd;

/// The lowest proxy id (instance 0, counter 0).
pub const ID_BASE: u32 = 0x6000_0000;
/// The bits that say "a proxy id": the top three, `0b011`.
const ID_PREFIX_MASK: u32 = 0xE000_0000;
const INSTANCE_SHIFT: u32 = 21;
const COUNTER_MASK: u32 = (1 << INSTANCE_SHIFT) - 1;

/// Whether `id` lies in the range mysql-lb hands out (any instance).
pub fn is_proxy_id(id: u32) -> bool {
    id & ID_PREFIX_MASK == ID_BASE
}

/// The session a proxy id stands for.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: Arc<Backend>,
    /// The server connection the session runs on; [`NO_THREAD`] while it holds none (a
    /// session of a transaction-mode pool between statements).
    pub thread_id: u32,
    /// The user name the session authenticated as, once it has (see [`Registration::set_user`]).
    pub user: Option<Arc<str>>,
    /// A pooled session's server connection of the moment (0 while it holds none), which
    /// [`Registry::lookup`] reads in place of `thread_id` (see [`Registration::follow`]).
    pub live: Option<Arc<AtomicU32>>,
    /// The session asked the server for its own id (`CONNECTION_ID()`, which pins it): a KILL
    /// naming that number most likely means it (see [`Registry::holding_thread`]).
    pub told: bool,
}

impl Target {
    /// The backend session that greeted with `greeting`.
    pub fn of(
        backend: &Arc<Backend>,
        greeting: &crate::wire::protocol::handshake::Greeting,
    ) -> Target {
        Target {
            backend: Arc::clone(backend),
            thread_id: greeting.connection_id,
            user: None,
            live: None,
            told: false,
        }
    }
}

/// The thread id of a session that holds no server connection now: servers number their
/// connections from 1, so no KILL of it can name a real one.
pub const NO_THREAD: u32 = 0;

/// Live sessions by proxy id.
#[derive(Debug, Default)]
pub struct Registry {
    instance: u8,
    ids: Mutex<Ids>,
}

#[derive(Debug, Default)]
struct Ids {
    /// The counter part of the next id to try.
    next: u32,
    /// None while a deferred connect has greeted its client but not yet chosen a backend.
    sessions: HashMap<u32, Option<Target>>,
}

impl Registry {
    /// A registry whose ids carry `instance` (0 for a proxy on its own).
    pub fn with_instance(instance: u8) -> Registry {
        Registry {
            instance,
            ids: Mutex::default(),
        }
    }

    /// Gives the session a fresh proxy id, findable until the returned guard is dropped. None
    /// only if every id of this instance is in use (the session then keeps its backend's id).
    #[must_use = "the session is unregistered when the guard drops"]
    pub fn register(&self, target: Target) -> Option<Registration<'_>> {
        self.insert(Some(target))
    }

    /// Gives a session its proxy id before its backend is known (a deferred connect greets the
    /// client first); a KILL naming it is answered as unknown until [`Registration::bind`].
    #[must_use = "the session is unregistered when the guard drops"]
    pub fn reserve(&self) -> Option<Registration<'_>> {
        self.insert(None)
    }

    fn insert(&self, target: Option<Target>) -> Option<Registration<'_>> {
        let mut ids = self.ids.lock().ok()?;
        let first = ids.next;
        loop {
            let counter = ids.next;
            ids.next = (counter + 1) & COUNTER_MASK;
            let id = ID_BASE | u32::from(self.instance) << INSTANCE_SHIFT | counter;
            if let std::collections::hash_map::Entry::Vacant(slot) = ids.sessions.entry(id) {
                slot.insert(target);
                return Some(Registration { registry: self, id });
            }
            if ids.next == first {
                return None;
            }
        }
    }

    fn unregister(&self, id: u32) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.sessions.remove(&id);
        }
    }

    /// The instance bits of this registry's ids.
    pub fn instance(&self) -> u8 {
        self.instance
    }

    pub fn lookup(&self, id: u32) -> Option<Target> {
        let ids = self.ids.lock().ok()?;
        let mut target = ids.sessions.get(&id).cloned().flatten()?;
        // Read under the lock, as `moved` changes the backend under it: the backend and the
        // thread id read belong together (see `Registration::moved`).
        if let Some(live) = &target.live {
            target.thread_id = live.load(Ordering::Acquire);
        }
        drop(ids);
        Some(target)
    }

    /// Every session with a backend (a deferred connect's reserved id is left out), its
    /// thread id read as [`lookup`](Self::lookup) reads it; one scan under the lock, for the
    /// SQL admin port's process list.
    pub fn list(&self) -> Vec<(u32, Target)> {
        let Ok(ids) = self.ids.lock() else {
            return Vec::new();
        };
        ids.sessions
            .iter()
            .filter_map(|(&id, t)| {
                let mut target = t.clone()?;
                if let Some(live) = &target.live {
                    target.thread_id = live.load(Ordering::Acquire);
                }
                Some((id, target))
            })
            .collect()
    }

    /// The session of pool `pool` whose server connection of the moment is thread `thread` (a
    /// pooled session, which follows its connection), for a KILL naming a server's own id in a
    /// pool across backends (see [`rewrite`]). Backends number their connections alike, so
    /// several may hold that number: then only `user`'s sessions count, and of those the ones
    /// that asked for their id (`told`). A scan of the registry under its lock: KILLs are rare.
    pub fn holding_thread(&self, thread: u32, pool: &str, user: Option<&str>) -> Holder {
        if thread == NO_THREAD {
            return Holder::None;
        }
        let Ok(ids) = self.ids.lock() else {
            return Holder::None;
        };
        let mut found: Vec<Target> = ids
            .sessions
            .values()
            .flatten()
            .filter(|t| {
                t.backend.pool == pool
                    && t.live
                        .as_ref()
                        .is_some_and(|live| live.load(Ordering::Acquire) == thread)
            })
            .cloned()
            .collect();
        drop(ids);
        if found.len() > 1
            && found
                .iter()
                .any(|t| user.is_some() && t.user.as_deref() == user)
        {
            found.retain(|t| t.user.as_deref() == user);
        }
        if found.len() > 1 && found.iter().any(|t| t.told) {
            found.retain(|t| t.told);
        }
        match found.len() {
            0 => Holder::None,
            1 => {
                let mut target = found.swap_remove(0);
                target.thread_id = thread;
                Holder::One(target)
            }
            _ => Holder::Several(found.into_iter().map(|t| t.backend).collect()),
        }
    }

    /// Session `id` asked the server for its own id (`SELECT CONNECTION_ID()`): a KILL naming
    /// that number, which several sessions' connections may share, means this one.
    pub fn told(&self, id: u32) {
        if let Ok(mut ids) = self.ids.lock() {
            if let Some(Some(target)) = ids.sessions.get_mut(&id) {
                target.told = true;
            }
        }
    }

    fn bind(&self, id: u32, target: Target) {
        if let Ok(mut ids) = self.ids.lock() {
            if let Some(slot) = ids.sessions.get_mut(&id) {
                *slot = Some(target);
            }
        }
    }

    /// The server connection session `id` runs on from now on, kept in an atomic the session
    /// updates (see [`Registration::follow`]).
    fn follow(&self, id: u32) -> Option<Arc<AtomicU32>> {
        let mut ids = self.ids.lock().ok()?;
        let target = ids.sessions.get_mut(&id)?.as_mut()?;
        let live = Arc::new(AtomicU32::new(target.thread_id));
        target.live = Some(Arc::clone(&live));
        Some(live)
    }

    /// Session `id` runs on `backend` from now on; see [`Registration::moved`].
    fn moved(&self, id: u32, backend: &Arc<Backend>) {
        if let Ok(mut ids) = self.ids.lock() {
            if let Some(Some(target)) = ids.sessions.get_mut(&id) {
                target.backend = Arc::clone(backend);
            }
        }
    }

    /// Records who session `id` is now; see [`Registration::set_user`].
    pub fn set_user(&self, id: u32, user: Option<&str>) {
        if let Ok(mut ids) = self.ids.lock() {
            if let Some(Some(target)) = ids.sessions.get_mut(&id) {
                target.user = user.map(Arc::from);
            }
        }
    }
}

/// Who holds a server thread id among a pool's pooled sessions ([`Registry::holding_thread`]).
#[derive(Debug)]
pub enum Holder {
    None,
    One(Target),
    /// More than one, on these backends, and nothing tells them apart.
    Several(Vec<Arc<Backend>>),
}

/// Keeps a session in the registry for as long as it lives.
#[derive(Debug)]
pub struct Registration<'a> {
    registry: &'a Registry,
    id: u32,
}

impl Registration<'_> {
    /// The proxy id the client is greeted with.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Names the backend session a reserved id stands for, from now on.
    pub fn bind(&self, target: Target) {
        self.registry.bind(self.id, target);
    }

    /// For a session whose statements run on one server connection after another of its
    /// backend (a transaction-mode pool's): the atomic it stores the connection of the moment
    /// in ([`NO_THREAD`] while it holds none: another session may run on that connection now,
    /// and the KILL is decided as `Mapping::NoConnection`), which a KILL naming the session
    /// reads. One lock now, none
    /// per move. None if the session is not bound to a backend session yet.
    pub fn follow(&self) -> Option<Arc<AtomicU32>> {
        self.registry.follow(self.id)
    }

    /// A pooled session that follows its connection ([`follow`](Self::follow)) now runs on
    /// `backend` (a pool across backends). Call it while the followed thread is
    /// [`NO_THREAD`], then store the new connection's: a KILL read meanwhile finds no
    /// connection, never one backend's thread id paired with another backend.
    pub fn moved(&self, backend: &Arc<Backend>) {
        self.registry.moved(self.id, backend);
    }

    /// The user name the session authenticated as (at the end of its connection phase), or None
    /// once it is unknown (after a COM_CHANGE_USER): a KILL across backends is executed by the
    /// proxy only for a killer of the same user name.
    pub fn set_user(&self, user: Option<&str>) {
        self.registry.set_user(self.id, user);
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.registry.unregister(self.id);
    }
}

/// What became of a KILL naming a proxy id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Rewritten to the target's thread id on this session's backend.
    Mapped,
    /// The target is on another backend, of the same user: the proxy runs the KILL there over
    /// its own `kill:` account (see [`exec`]); the killer's backend answers `DO 0`'s OK.
    Elsewhere,
    /// The target is on another backend, of the same user, but no `kill:` account is
    /// configured (or the backend is not one of this instance's): answered with ERR 1095
    /// saying so, nothing killed.
    OtherBackend,
    /// The target is on another backend and of another user (or its user is unknown): answered
    /// with the server's own ERR 1095, nothing killed.
    NotOwner,
    /// No such session (any more): answered with ERR 1094.
    Unknown,
    /// The id belongs to this other instance, which has no entry in `peers:`: answered with
    /// ERR 1094 naming it. With a peer the session asks it (see [`peer`]) and maps its answer
    /// with [`rewrite_remote`].
    OtherInstance(u8),
    /// The peer owning the id could not be asked: answered with ERR 1105, nothing killed.
    PeerFailed,
    /// The target holds no server connection now (a pooled session between statements): KILL
    /// QUERY of its own user's is an OK that kills nothing, anything else ERR 1095.
    NoConnection,
    /// A server's own thread id that connections on several backends of a pool across backends
    /// have, none of them the killer's: answered with ERR 1094 naming them, nothing killed.
    Ambiguous,
}

impl Mapping {
    /// For the log line each mapped KILL gets.
    pub fn describe(self) -> &'static str {
        match self {
            Mapping::Mapped => "KILL mapped to its session",
            Mapping::Elsewhere => "KILL run on its target's backend over the kill account",
            Mapping::OtherBackend => {
                "KILL refused: its target is on another backend and no kill account can reach it"
            }
            Mapping::NotOwner => "KILL refused: its target is another user's, on another backend",
            Mapping::Unknown => "KILL of an unknown proxy id answered 1094",
            Mapping::OtherInstance(_) => {
                "KILL refused: its id belongs to another instance, which has no entry in peers:"
            }
            Mapping::PeerFailed => "KILL refused: the instance owning its id could not be asked",
            Mapping::NoConnection => {
                "KILL of a pooled session between statements: nothing to reach on a server"
            }
            Mapping::Ambiguous => {
                "KILL refused: its thread id names connections on several backends"
            }
        }
    }
}

/// The instance whose ids include `id` (meaningful for a proxy id only).
pub fn instance_of(id: u32) -> u8 {
    ((id >> INSTANCE_SHIFT) & 0xFF) as u8
}

/// The session sending a KILL, as the mapping needs it.
#[derive(Debug, Clone, Copy)]
pub struct Killer<'a> {
    /// The backend its own connection is on.
    pub backend: &'a Arc<Backend>,
    /// The user name it authenticated as.
    pub user: Option<&'a str>,
    /// Whether a `kill:` account is configured to run KILLs on other backends.
    pub can_kill_elsewhere: bool,
    /// The killer's pool shares server connections across its backends: a server's own
    /// thread id there names whichever of the pool's pooled sessions holds that connection.
    pub across: bool,
}

/// What to do with a KILL naming a proxy id: send `packet` to the killer's backend instead, and
/// with `elsewhere`, first run that KILL on another backend (then `packet` is `DO 0`, whose OK
/// answers the client; the caller replaces it when the KILL there fails).
#[derive(Debug)]
pub struct Decision {
    pub mapping: Mapping,
    pub packet: Vec<u8>,
    pub elsewhere: Option<Elsewhere>,
}

/// A KILL the proxy runs itself, on the target's backend.
#[derive(Debug, Clone)]
pub struct Elsewhere {
    pub backend: Arc<Backend>,
    /// `KILL QUERY 42`, `KILL CONNECTION 42`, ...: the client's words with the backend's id.
    pub statement: String,
    pub proxy_id: u32,
}

/// The session an id stands for, wherever it was looked up.
struct Found<'a> {
    backend: &'a str,
    thread_id: u32,
    user: Option<&'a str>,
    /// Whether it is on the backend of the session that sent the KILL.
    same_backend: bool,
    /// This instance's backend the session is on (None: one this instance does not have).
    local: Option<Arc<Backend>>,
}

/// What to send the backend instead of the client's KILL packet, if anything changes, and why.
/// An id of another instance is refused here, naming the instance: the caller asks that
/// instance's peer instead, when it has one.
pub fn rewrite(
    request: &KillRequest,
    registry: &Registry,
    killer: &Killer<'_>,
) -> Option<Decision> {
    let Some(proxy_id) = u32::try_from(request.id).ok().filter(|id| is_proxy_id(*id)) else {
        return rewrite_thread(request, registry, killer);
    };
    let instance = instance_of(proxy_id);
    if instance != registry.instance {
        let sql = signal(
            1094,
            &format!(
                "Unknown thread id: {proxy_id} belongs to mysql-lb instance {instance}, which \
                 has no entry in peers:; nothing was killed"
            ),
        );
        return Some(Decision {
            mapping: Mapping::OtherInstance(instance),
            packet: query_packet(&sql),
            elsewhere: None,
        });
    }
    let target = registry.lookup(proxy_id);
    let found = target.as_ref().map(|t| Found {
        backend: &t.backend.name,
        thread_id: t.thread_id,
        user: t.user.as_deref(),
        same_backend: Arc::ptr_eq(&t.backend, killer.backend),
        local: Some(Arc::clone(&t.backend)),
    });
    Some(decide(request, proxy_id, found, killer))
}

/// A KILL naming a server's own thread id (one `SELECT CONNECTION_ID()` returned, which pins
/// a pooled session to its connection) from a session of a pool across backends: the killer's
/// statements run on any backend, so the number means the connection one of the pool's pooled
/// sessions holds now ([`Registry::holding_thread`]), wherever that is, and is mapped as its
/// proxy id would be. None (the KILL passes unchanged) outside such a pool, when no pooled
/// session holds such a thread (a connection the proxy does not hold: the killer's backend
/// decides, as before) or it is on the killer's own backend.
fn rewrite_thread(
    request: &KillRequest,
    registry: &Registry,
    killer: &Killer<'_>,
) -> Option<Decision> {
    if !killer.across {
        return None;
    }
    let thread = u32::try_from(request.id).ok()?;
    let target = match registry.holding_thread(thread, &killer.backend.pool, killer.user) {
        Holder::None => return None,
        Holder::One(target) => target,
        Holder::Several(backends) => {
            if backends.iter().any(|b| Arc::ptr_eq(b, killer.backend)) {
                return None;
            }
            let names: Vec<&str> = backends.iter().map(|b| b.name.as_str()).collect();
            let message = format!(
                "mysql-lb: thread id {thread} names server connections on backends {}; nothing \
                 was killed (KILL the id the session was greeted with, its proxy id)",
                names.join(", ")
            );
            return Some(Decision {
                mapping: Mapping::Ambiguous,
                packet: query_packet(&signal(1094, &message)),
                elsewhere: None,
            });
        }
    };
    if Arc::ptr_eq(&target.backend, killer.backend) {
        return None;
    }
    let found = Found {
        backend: &target.backend.name,
        thread_id: target.thread_id,
        user: target.user.as_deref(),
        same_backend: false,
        local: Some(Arc::clone(&target.backend)),
    };
    Some(decide(request, thread, Some(found), killer))
}

/// Where the session a KILL names runs now, when it holds a server connection there: the
/// backend a pooled killer of a pool across backends takes its own connection on, so that the
/// KILL runs on it as the killer (the server applying the killer's own privileges), with no
/// `kill:` account. None for a session holding no connection, another instance's id or an
/// unknown one: the KILL then goes wherever the killer's transaction lands and is mapped there
/// ([`rewrite`]).
pub fn target_backend(
    request: &KillRequest,
    registry: &Registry,
    pool: &str,
    user: Option<&str>,
) -> Option<Arc<Backend>> {
    let id = u32::try_from(request.id).ok()?;
    if !is_proxy_id(id) {
        return match registry.holding_thread(id, pool, user) {
            Holder::One(t) => Some(t.backend),
            Holder::None | Holder::Several(_) => None,
        };
    }
    if instance_of(id) != registry.instance {
        return None;
    }
    registry
        .lookup(id)
        .filter(|t| t.thread_id != NO_THREAD && t.backend.pool == pool)
        .map(|t| t.backend)
}

/// Another instance's answer for one of its ids: the backend (name and address, as its
/// `/backends` shows them), thread id and user, None when it has no such session, or why it
/// could not be asked.
pub type RemoteAnswer = Result<Option<RemoteTarget>, String>;

/// Where another instance's session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTarget {
    pub backend: String,
    pub address: String,
    pub thread_id: u32,
    /// None from an instance too old to say.
    pub user: Option<String>,
}

/// Maps a KILL of another instance's id from that instance's answer, exactly as [`rewrite`]
/// maps an own one. Its backend is one of `ours` when both name and address match (instances
/// may have been started with different files).
pub fn rewrite_remote(
    request: &KillRequest,
    answer: &RemoteAnswer,
    killer: &Killer<'_>,
    ours: &[Arc<Backend>],
) -> Decision {
    let proxy_id = u32::try_from(request.id).unwrap_or(0);
    match answer {
        Ok(target) => {
            let found = target.as_ref().map(|t| Found {
                backend: &t.backend,
                thread_id: t.thread_id,
                user: t.user.as_deref(),
                same_backend: t.backend == killer.backend.name
                    && t.address == killer.backend.address.to_string(),
                local: ours
                    .iter()
                    .find(|b| b.name == t.backend && b.address.to_string() == t.address)
                    .cloned(),
            });
            decide(request, proxy_id, found, killer)
        }
        Err(why) => {
            let message = format!(
                "mysql-lb: connection {proxy_id} belongs to mysql-lb instance {}, which could not \
                 be asked ({why}); nothing was killed",
                instance_of(proxy_id)
            );
            Decision {
                mapping: Mapping::PeerFailed,
                packet: query_packet(&signal(1105, &message)),
                elsewhere: None,
            }
        }
    }
}

/// The one mapping rule, for own and remote ids alike. On the killer's own backend the KILL
/// runs on the killer's connection, so the server applies the killer's privileges. Elsewhere
/// the proxy runs it only when the server's rule for a non-privileged user allows it: the same
/// user name (any host), as MariaDB's and MySQL's `user_matches`.
fn decide(
    request: &KillRequest,
    proxy_id: u32,
    found: Option<Found<'_>>,
    killer: &Killer<'_>,
) -> Decision {
    let statement = |thread_id: u32| format!("{}{thread_id}", kill_statement(&request.prefix));
    let answer = |mapping, sql: String| Decision {
        mapping,
        packet: query_packet(&sql),
        elsewhere: None,
    };
    let Some(t) = found else {
        return answer(
            Mapping::Unknown,
            signal(1094, &format!("Unknown thread id: {proxy_id}")),
        );
    };
    let same_user = matches!((killer.user, t.user), (Some(a), Some(b)) if a == b);
    if t.thread_id == NO_THREAD {
        return holding_nothing(request, proxy_id, same_user);
    }
    if t.same_backend {
        return answer(Mapping::Mapped, statement(t.thread_id));
    }
    if !same_user {
        let message = format!("mysql-lb: You are not owner of thread {proxy_id}");
        return answer(Mapping::NotOwner, signal(1095, &message));
    }
    match t.local {
        Some(backend) if killer.can_kill_elsewhere => Decision {
            mapping: Mapping::Elsewhere,
            packet: query_packet("DO 0"),
            elsewhere: Some(Elsewhere {
                backend,
                statement: statement(t.thread_id),
                proxy_id,
            }),
        },
        _ => answer(
            Mapping::OtherBackend,
            signal(
                1095,
                &format!(
                    "mysql-lb: connection {proxy_id} is on backend {} and this session on {}; \
                     KILL refused, nothing was killed (configure kill.user, an account with \
                     CONNECTION ADMIN on every backend, to let mysql-lb run it there)",
                    t.backend, killer.backend.name
                ),
            ),
        ),
    }
}

/// A KILL of a pooled session between statements, which holds no server connection. KILL
/// QUERY finds nothing running, as it would directly: an OK for its own user (the server's
/// owner rule by user name; an account with CONNECTION ADMIN killing another user's session is
/// refused here, though nothing would have been killed). KILL CONNECTION would have to end the
/// session from outside its task: refused, saying so.
fn holding_nothing(request: &KillRequest, proxy_id: u32, same_user: bool) -> Decision {
    let query = request.prefix.to_ascii_uppercase().contains("QUERY");
    let sql = if !same_user {
        signal(
            1095,
            &format!("mysql-lb: You are not owner of thread {proxy_id}"),
        )
    } else if query {
        "DO 0".to_owned()
    } else {
        signal(
            1095,
            &format!(
                "mysql-lb: connection {proxy_id} is between statements of a transaction-mode \
                 pool and holds no server connection; KILL CONNECTION of it is not supported, \
                 nothing was killed"
            ),
        )
    };
    Decision {
        mapping: Mapping::NoConnection,
        packet: query_packet(&sql),
        elsewhere: None,
    }
}

/// The packet answering a KILL that ran elsewhere and failed there: `code` and `message` as
/// the client should see them, in sequence on its own backend connection.
pub fn failed_elsewhere(code: u16, message: &str) -> Vec<u8> {
    query_packet(&signal(code, message))
}

/// A COM_QUERY packet carrying `sql`, sequence id 0.
fn query_packet(sql: &str) -> Vec<u8> {
    let mut payload = Vec::with_capacity(1 + sql.len());
    payload.push(cmd::QUERY);
    payload.extend_from_slice(sql.as_bytes());
    let mut packet = header(payload.len(), 0).to_vec();
    packet.extend_from_slice(&payload);
    packet
}

/// COM_PROCESS_KILL kills the connection, as `KILL` does.
fn kill_statement(prefix: &str) -> &str {
    if prefix.is_empty() {
        "KILL "
    } else {
        prefix
    }
}

/// A statement the backend answers with exactly this error, in sequence with everything else.
fn signal(code: u16, message: &str) -> String {
    let escaped = message.replace('\\', "\\\\").replace('\'', "''");
    format!("SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = {code}, MESSAGE_TEXT = '{escaped}'")
}

#[cfg(test)]
mod tests;
