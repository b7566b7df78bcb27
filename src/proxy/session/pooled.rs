//! The command phase of a session in a transaction-mode pool: the relay runs on a server
//! connection while the session holds one, and ends at a command boundary once the session may
//! give it back (`pooling::Holding`); the connection goes back to the pool, and the session waits
//! for its client's next command without one, then takes whichever idle connection of its key
//! the pool hands it (`pooling`). Everything else (the tracker, metrics, digests, capture, KILL
//! mapping) is the one relay and observer every session uses.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tracing::{debug, info, warn};

use super::connect::LoginSlot;
use super::recorder::Recorder;
use crate::backends::kill;
use crate::backends::pooling::command::{self, Command};
use crate::backends::pooling::statements::{ConnStatements, SessionStatements};
use crate::backends::pooling::ServerConn;
use crate::backends::pooling::{
    holding::TEXT_LIMIT, BackendPool, Held, Holding, Key, Member, PoolError,
};
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;
use crate::proxy::relay::{relay, KillRewrite, Observer, RelayEnd, Stop};
use crate::wire::protocol::caps::CLIENT_DEPRECATE_EOF;
use crate::wire::protocol::errors::code;
use crate::wire::protocol::response::{Completed, Tracker};
use prepared::{Front, Ran};

mod client;
mod prepared;
mod settle;

/// How a session joins its backend's pool once logged in.
pub(super) struct Joined<'r> {
    pub(super) slot: LoginSlot,
    /// The server's id of the login connection.
    pub(super) thread_id: u32,
    /// The backend's flavour and version, from its greeting: which executable comments it runs.
    pub(super) server: Option<crate::wire::sql::Server>,
    /// The client's address, when the backend is told it in a PROXY header.
    pub(super) origin: Option<IpAddr>,
    pub(super) registration: Option<&'r kill::Registration<'r>>,
}

impl Joined<'_> {
    pub(super) fn origin(&self) -> Option<IpAddr> {
        self.origin
    }
}

/// The session's relays, one per server connection it holds in turn, to the session's end.
#[allow(clippy::too_many_arguments)]
pub(super) async fn relay_pooled<C>(
    client: &mut LegStream<C>,
    backend: LegStream<BackendStream>,
    tracker: &mut Tracker,
    (mut up, mut down): (BytesMut, BytesMut),
    stop: Stop<'_>,
    recorder: &mut Recorder<'_>,
    (joined, key): (Joined<'_>, Key),
    (worker, peer): (usize, &str),
) -> RelayEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let login = ServerConn {
        leg: backend,
        thread_id: joined.thread_id,
        state: Default::default(),
        statements: Default::default(),
    };
    // From here the session's share of the pool is held by guards: however the session ends
    // (an error, its task cancelled, a panic), dropping them gives it back.
    let (member, login) = joined.slot.logged_in(&key, login);
    let pool = Arc::clone(member.pool());
    let mut holding = Holding::new(!key.schema.is_empty());
    holding.share_statements();
    holding.read_as(crate::wire::sql::Dialect {
        server: joined.server,
    });
    let mut observer = Pooled {
        inner: recorder,
        holding,
        member,
        key: &key,
        statements: SessionStatements::default(),
        conn_statements: Default::default(),
        front: None,
        scratch: Vec::new(),
        conn_reset: false,
    };
    let mut conn = Some(login);
    let deprecate_eof = tracker.caps().has(CLIENT_DEPRECATE_EOF);
    // Where a KILL naming the session goes: the connection it holds, or nowhere (0) between
    // transactions, never the connection's next holder.
    let live = joined.registration.and_then(kill::Registration::follow);
    // Polled only when the drain wakes it (see `gate`): one atomic load per wait, not a lock.
    let mut draining = crate::proxy::gate::cancelled(stop.drain);
    let end = loop {
        if conn.is_none() {
            if let Some(end) = next_command(client, &mut up, stop, &mut draining).await {
                break end;
            }
        } else if stop.drain.is_cancelled() && tracker.idle() && !up.is_empty() {
            // A statement command read before the drain and not begun: the session ends here.
            break RelayEnd::Drained;
        }
        // An empty packet is a command with no command byte: relayed like any other (the
        // server answers it with an ERR); the byte after its header is the next packet's.
        let mut statement = matches!(command::command(&up), Command::Statement(_));
        let front = if statement {
            match prepared::front(client, &mut up, &mut observer).await {
                Ok(Front::Done) => continue,
                Ok(Front::Relay) => {
                    statement = false;
                    None
                }
                Ok(front) => Some(front),
                Err(end) => break end,
            }
        } else {
            None
        };
        if conn.is_none() {
            match take(&pool, &key, worker, observer.holding.state()).await {
                Ok(got) => {
                    if let Some(live) = &live {
                        live.store(got.thread_id, Ordering::Relaxed);
                    }
                    conn = Some(got);
                }
                Err(e) => {
                    let refused = match front {
                        // Long data has no answer to put an ERR in: it is dropped, and its
                        // execute meets the same wait.
                        Some(Front::Statement {
                            command: crate::wire::protocol::cmd::STMT_SEND_LONG_DATA,
                            ..
                        }) => client::drop_front(client, &mut up).await,
                        _ => refuse_command(client, &mut up, &e, peer).await,
                    };
                    match refused {
                        Ok(()) if matches!(e, PoolError::Timeout { .. }) => continue,
                        Ok(()) => break RelayEnd::NoServerConnection,
                        Err(end) => break end,
                    }
                }
            }
        }
        let Some(held) = conn.as_mut() else {
            continue;
        };
        let answered = match front {
            Some(front) => {
                let ran = prepared::run(front, client, held, &mut up, &mut observer, deprecate_eof);
                match ran.await {
                    Ok(ran) => matches!(ran, Ran::Done),
                    Err(end) => break end,
                }
            }
            None => false,
        };
        if !answered {
            tracker.pause_statements(statement);
            let pending = (std::mem::take(&mut up), std::mem::take(&mut down));
            observer.conn_statements = std::mem::take(&mut held.statements);
            let end = relay(
                client,
                &mut held.leg,
                tracker,
                pending.0,
                pending.1,
                stop,
                &mut observer,
            )
            .await;
            held.statements = std::mem::take(&mut observer.conn_statements);
            if std::mem::take(&mut observer.conn_reset) {
                // COM_RESET_CONNECTION or COM_CHANGE_USER dropped its prepared statements.
                held.statements.clear();
            }
            match end {
                RelayEnd::Released(u, d) => (up, down) = (u, d),
                end => break end,
            }
        }
        if observer.holding.releasable() {
            let live = live.as_deref();
            give_back(&pool, &key, worker, &mut conn, &mut observer, live).await;
        }
    };
    // The session's end is counted when `observer` (its `Member`) drops, after its connection
    // went back or closed.
    let Some(held) = conn.take() else {
        return end;
    };
    let ended = (&end, &mut *tracker, stop);
    hand_back(held, ended, (&pool, &key, worker), &mut observer).await;
    end
}

/// Where the connection a session held at its end goes: back to the pool, reset first if the
/// session left something on it; recycled if it was pinned and can be brought back to its
/// key's login state; else closed. `end` says how the session ended.
async fn hand_back(
    mut held: Held,
    (end, tracker, stop): (&RelayEnd, &mut Tracker, Stop<'_>),
    (pool, key, worker): (&BackendPool, &Key, usize),
    observer: &mut Pooled<'_, '_>,
) {
    held.state = observer.holding.state().clone();
    // A client's trailing COM_QUIT is not forwarded (`Observer::keeps_backend`).
    let mut clean = matches!(
        end,
        RelayEnd::ClientClosed { .. } | RelayEnd::Drained | RelayEnd::IdleTimeout
    ) && tracker.idle();
    let gone = matches!(end, RelayEnd::ClientClosed { .. } | RelayEnd::ClientIo(_));
    if gone && !tracker.idle() {
        // The client left with a command unanswered: closing the connection could leave its
        // user's other sessions with none. Its answer is read to the end and thrown away.
        let within = pool.pooling().wait_timeout;
        clean = settle::settle(&mut held, tracker, stop, observer, within).await;
    }
    let pinned = observer.holding.pinned().is_some();
    if !pinned {
        // A session that ends in a transaction, or with its warnings or row count on the
        // connection, leaves it reset; with only its insert id, that is cleared.
        let tidy = clean
            && if observer.holding.releasable() {
                wipe(pool, &mut held, key, &mut observer.holding, "session_end").await
            } else {
                reset(pool, &mut held, key, "session_end").await
            };
        if tidy {
            held.release(worker);
        } else if clean && gone && held.reset(&key.schema).await {
            // Left in a transaction, or with warnings or a changed row count the next command
            // could have read: reset, it holds its key's login state again.
            held.release(worker);
        } else {
            // Its slot is free once the server let go of it.
            held.close().await;
        }
    } else if clean
        && observer.holding.recyclable(&key.schema)
        && reset(pool, &mut held, key, "pinned").await
    {
        // Its state was the session's alone; reset, it serves the key again (as shared: the
        // session is counted ended before it goes back).
        observer.member.end();
        held.release(worker);
    } else {
        // Its state was the session's alone: closed with it, its slot free once the server
        // let go of it.
        held.close().await;
    }
}

/// A connection of `key` from the pool, brought to the session's `state`.
async fn take(
    pool: &Arc<BackendPool>,
    key: &Key,
    worker: usize,
    state: &crate::backends::pooling::State,
) -> Result<Held, PoolError> {
    let mut got = pool.acquire(key, worker, state).await?;
    if got.carries(state) {
        return Ok(got);
    }
    // Another session's settings on it: reset, then this one's run again.
    let adopted = got.adopt(state, &key.schema).await;
    pool.count_reset("state", adopted);
    if adopted {
        Ok(got)
    } else {
        got.quit();
        Err(PoolError::Replay)
    }
}

/// Gives the session's connection back to its pool between transactions (reset first when
/// the session left traces on it).
async fn give_back(
    pool: &BackendPool,
    key: &Key,
    worker: usize,
    conn: &mut Option<Held>,
    observer: &mut Pooled<'_, '_>,
    live: Option<&std::sync::atomic::AtomicU32>,
) {
    if let Some(live) = live {
        live.store(kill::NO_THREAD, Ordering::Relaxed);
    }
    let Some(mut held) = conn.take() else {
        return;
    };
    held.state = observer.holding.state().clone();
    if wipe(pool, &mut held, key, &mut observer.holding, "traces").await {
        held.release(worker);
    } else {
        held.quit();
    }
}

/// Clears what a session left on `held` that another could read: nothing to do, its insert id
/// alone (`DO LAST_INSERT_ID(0)`, counted as reason `insert_id`; the connection keeps its
/// prepared statements), or a reset counted under `reason`. False when it must close.
async fn wipe(
    pool: &BackendPool,
    held: &mut ServerConn,
    key: &Key,
    holding: &mut Holding,
    reason: &'static str,
) -> bool {
    let ok = if !holding.leaves_traces() {
        return true;
    } else if holding.only_insert_id() {
        let ok = held.forget_insert_id().await;
        pool.count_reset("insert_id", ok);
        ok
    } else {
        reset(pool, held, key, reason).await
    };
    if ok {
        holding.reset_done();
    }
    ok
}

/// Brings `held` back to `key`'s login state, counted under `reason`; false when it must close.
async fn reset(pool: &BackendPool, held: &mut ServerConn, key: &Key, reason: &'static str) -> bool {
    let ok = held.reset(&key.schema).await;
    pool.count_reset(reason, ok);
    ok
}

/// Waits, holding no server connection, until the client's next command begins (its first five
/// bytes are read: None), or the session ends: the client closed or quit (its COM_QUIT is not
/// forwarded: no connection is held), the idle timeout, or the drain.
async fn next_command<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
    stop: Stop<'_>,
    draining: &mut crate::proxy::gate::Cancelled<'_>,
) -> Option<RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let idle = async {
        match stop.idle_timeout {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(idle);
    // A command's header and command byte (none in an empty packet): enough to tell a
    // statement command (see `prepared`).
    while let Command::NeedMore(_) = command::command(up) {
        if up.capacity() < 1024 {
            up.reserve(8 * 1024);
        }
        tokio::select! {
            biased;
            () = &mut *draining => return Some(RelayEnd::Drained),
            () = &mut idle => return Some(RelayEnd::IdleTimeout),
            read = client.read_buf(up) => match read {
                Ok(0) => return Some(RelayEnd::ClientClosed { quit: false }),
                Ok(_) => {}
                Err(e) => return Some(RelayEnd::ClientIo(e)),
            },
        }
    }
    matches!(command::command(up), Command::Quit).then_some(RelayEnd::ClientClosed { quit: true })
}

/// Answers the client's next command with an ERR in its response's place, without running it
/// (no server connection came free), and drops the command's bytes (read to their end, however
/// long). Err when the client failed.
async fn refuse_command<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
    e: &PoolError,
    peer: &str,
) -> Result<(), RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    warn!(client = peer, "statement refused: {e}");
    client::answer(client, up, code::TOO_MANY_CONNECTIONS, &e.to_string()).await
}

/// The session's observer with the pool's view added: what pins the session, and whether it
/// may let its connection go.
struct Pooled<'a, 'r> {
    inner: &'a mut Recorder<'r>,
    holding: Holding,
    /// The session's place in its pool; dropped with the observer, it counts the session ended.
    member: Member,
    key: &'a Key,
    /// The session's prepared statements, by the ids the proxy gave them.
    statements: SessionStatements,
    /// Those of the server connection the session holds, while a relay runs on it (they are
    /// the connection's again after).
    conn_statements: ConnStatements,
    /// The client's id of the statement command the relay sends next, which carries its server
    /// connection's id (see [`prepared::as_client_sent`]).
    front: Option<u32>,
    scratch: Vec<u8>,
    /// A COM_RESET_CONNECTION or COM_CHANGE_USER completed: the server connection's prepared
    /// statements are gone.
    conn_reset: bool,
}

impl Pooled<'_, '_> {
    fn pinned(&mut self, reason: Option<crate::backends::pooling::Reason>) {
        if let Some(reason) = reason {
            debug!(user = %self.key.user, reason = reason.as_str(), "session pinned its server connection");
            self.member.pinned(reason);
        }
    }
}

impl Observer for Pooled<'_, '_> {
    fn completed(&mut self, c: &Completed) {
        self.inner.completed(c);
        let reason = self.holding.completed(c);
        self.pinned(reason);
        if matches!(
            c.command,
            crate::wire::protocol::cmd::RESET_CONNECTION | crate::wire::protocol::cmd::CHANGE_USER
        ) {
            self.conn_reset = true;
            if !c.error {
                // As directly: the session's statements are gone.
                self.statements.clear();
            }
        }
    }

    fn relayed(&mut self, to_backend: bool, n: usize) {
        self.inner.relayed(to_backend, n);
    }

    fn statement(&mut self, command: u8, payload: &[u8]) -> u64 {
        let mut scratch = std::mem::take(&mut self.scratch);
        let seen = prepared::as_client_sent(command, payload, &mut self.front, &mut scratch);
        let reason = self.holding.statement(command, seen);
        self.pinned(reason);
        let tag = self.inner.statement(command, seen);
        self.scratch = scratch;
        tag
    }

    fn client_scan(&mut self, in_flight: usize) -> Option<usize> {
        self.inner
            .client_scan(in_flight)
            .map(|limit| limit.max(TEXT_LIMIT))
    }

    fn rewrite_kill(&mut self, packet: &[u8]) -> Option<KillRewrite> {
        self.inner.rewrite_kill(packet)
    }

    fn releasable(&self) -> bool {
        self.holding.releasable()
    }

    fn keeps_backend(&self) -> bool {
        true
    }

    fn resume_statement(&mut self, packet: &mut [u8]) -> bool {
        let (session, conn) = (&mut self.statements, &mut self.conn_statements);
        prepared::resume(packet, session, conn, &mut self.front)
    }
}

/// Says so in the log when a pool could not serve a session at all.
pub(super) fn log_no_connection(peer: &str, backend: &str) {
    info!(
        client = peer,
        backend, "closing: no server connection of the session's user is left in the pool"
    );
}
