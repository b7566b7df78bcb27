//! The command phase of a session in a transaction-mode pool: the relay runs on a server
//! connection while the session holds one, and ends at a command boundary once the session may
//! give it back (`pooling::Holding`); the connection goes back to the pool, and the session waits
//! for its client's next command without one, then takes whichever idle connection of its key
//! the pool hands it (`pooling`). Everything else (the tracker, metrics, digests, capture, KILL
//! mapping) is the one relay and recorder every session uses.
//!
//! The session's state across its relays lives in one place ([`Seat`]): the pool's view of it
//! and its prepared statements (`Pooled`), the connection it holds, and the client's bytes not
//! yet relayed. A server connection's own prepared statements stay on it (`ServerConn`); a relay
//! on it borrows them to rewrite the statement commands it can send on at once (`OnConn`).
//!
//! Every transaction passes here twice (take, give back), so the common case takes no detour:
//! an idle connection in the session's settings is taken without a wait, a clock read or a
//! future of the pool's (`BackendPool::try_acquire`), one the session left nothing on goes back
//! without an await (`let_go`), the relays share the session's drain gate, and the wait for
//! the next command does not read the client again when the relay's last read of it would have
//! blocked with nothing awaited since (the task is registered for its bytes already). Whatever
//! else (a wait, an adopt, a wipe, a prepared statement) goes the long way.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::Poll;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{debug, info, warn};

use super::connect::LoginSlot;
use super::recorder::Recorder;
use super::{Context, SessionEnd};
use crate::backends::balancer::{Lease, Pool};
use crate::backends::kill;
use crate::backends::pooling::command::{self, Command};
use crate::backends::pooling::statements::{ConnStatements, SessionStatements};
use crate::backends::pooling::{
    holding::TEXT_LIMIT, BackendPool, Held, Holding, Key, Member, PoolError,
};
use crate::backends::pooling::{Reason, ServerConn};
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;
use crate::proxy::gate::Cancelled;
use crate::proxy::relay::{KillRewrite, Legs, Observer, Relay, RelayEnd, Steering, Stop};
use crate::wire::protocol::caps::CLIENT_DEPRECATE_EOF;
use crate::wire::protocol::errors::code;
use crate::wire::protocol::response::{Completed, Tracker};
use across::{take_across, Places};
use prepared::{Front, Ran};
use split::{Before, Split};

mod across;
mod client;
mod prepared;
mod read_only;
mod refusal;
mod returning;
mod settle;
mod split;

/// How a session joins its backend's pool once logged in.
pub(super) struct Joined<'r> {
    pub(super) slot: LoginSlot,
    /// The server's id of the login connection.
    pub(super) thread_id: u32,
    /// The backend's flavour and version, from its greeting: which executable comments it runs.
    pub(super) server: Option<crate::wire::sql::Server>,
    /// What the session's server connections are shared under.
    pub(super) key: Key,
    pub(super) registration: Option<&'r kill::Registration<'r>>,
}

/// Where a pooled session's relays start: its login connection, and the bytes each leg read
/// past the login's OK (the client's, the backend's).
pub(super) struct Start {
    pub(super) backend: LegStream<BackendStream>,
    pub(super) up: BytesMut,
    pub(super) down: BytesMut,
}

/// The session's relays, one per server connection it holds in turn, to the session's end.
pub(super) async fn relay_pooled<'r, C>(
    ctx: &Context<'r>,
    client: &mut LegStream<C>,
    tracker: &mut Tracker,
    recorder: &mut Recorder<'r>,
    start: Start,
    joined: Joined<'r>,
    lease: &mut Lease,
) -> SessionEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let login = ServerConn {
        leg: start.backend,
        thread_id: joined.thread_id,
        state: Default::default(),
        statements: Default::default(),
    };
    // From here the session's share of the pool is held by guards: however the session ends
    // (an error, its task cancelled, a panic), dropping them gives it back.
    let (member, login) = joined.slot.logged_in(&joined.key, login);
    // The pool's copy of the key: its lookups at each transaction compare a pointer.
    let key = member.key().clone();
    let across = ctx
        .set
        .pool(&lease.backend().pool)
        .filter(|p| p.pooling.across_backends);
    let split = across
        .filter(|p| p.pooling.read_write_split)
        .map(|p| Split {
            want: crate::backends::balancer::Want::Primary,
            on_replica: !p.takes_writes(lease.backend()),
            may_write: !ctx.read_only,
            read_only: ctx.read_only,
        });
    let mut seat = Seat {
        across,
        split,
        written: Default::default(),
        lease,
        registration: joined.registration,
        avoid: None,
        replaying: false,
        pools: Vec::new(),
        order: Vec::new(),
        // Where a KILL naming the session goes: the connection it holds, or nowhere (0)
        // between transactions, never the connection's next holder.
        live: joined.registration.and_then(kill::Registration::follow),
        conn: Some(login),
        pool: Arc::clone(member.pool()),
        observer: Pooled::new(recorder, member, &key, joined.server),
        up: start.up,
        down: start.down,
        deprecate_eof: tracker.caps().has(CLIENT_DEPRECATE_EOF),
        client_waits: false,
        relaying: Relay::new(ctx.stop.idle_timeout),
    };
    let end = seat.serve(ctx, client, tracker).await;
    // The session's end is counted when `seat.observer` (its `Member`) drops, after its
    // connection went back or closed.
    seat.return_at_end(ctx, &end, tracker).await;
    end
}

/// A pooled session's own state across its relays: the pool's view of it, the server connection
/// it holds, if any, and what its client sent that no relay has taken yet.
/// Fields drop in order: a connection still held (its task cancelled) closes before the
/// session's `Member` counts it ended.
struct Seat<'a, 'r> {
    /// The server thread a KILL naming the session reaches (see `kill::Registration::follow`).
    live: Option<Arc<AtomicU32>>,
    /// The session's pool, when it shares connections across its backends: each transaction
    /// may run on another backend (see `across`).
    across: Option<&'r Pool>,
    /// Where its transactions run when the pool splits reads from writes (see `split`).
    split: Option<Split>,
    /// What the session wrote on the primary, as far as learned: what its reads on a replica
    /// must see (`pooling.causal_reads: session`).
    written: crate::wire::sql::gtid::GtidPos,
    /// The session's count in its backend's active sessions: it follows the session's moves.
    lease: &'a mut Lease,
    registration: Option<&'r kill::Registration<'r>>,
    /// A backend's pool the next connection must not come from (its server was just lost).
    avoid: Option<Arc<BackendPool>>,
    /// The command at the front is a write a primary refused as read-only, put back to run on
    /// the next one (see `refusal`): not watched again.
    replaying: bool,
    /// The pools of the backends it took connections from, by the backend's index in the set
    /// (looked up once, not at every transaction).
    pools: Vec<Option<Arc<BackendPool>>>,
    /// Room for the policy's order of the pool's backends at each transaction (see `across`).
    order: Vec<&'r Arc<crate::backends::balancer::Backend>>,
    conn: Option<Held>,
    observer: Pooled<'a, 'r>,
    pool: Arc<BackendPool>,
    /// The client's bytes read and not yet relayed, and the backend's (the relay's buffers,
    /// kept between relays).
    up: BytesMut,
    down: BytesMut,
    /// As the session negotiated: how a prepare's answer ends.
    deprecate_eof: bool,
    /// The last relay ended on a read of the client that would have blocked, and nothing was
    /// awaited since: the task is registered for the client's next bytes already (see
    /// `RelayEnd::Released`), so the wait for them starts without a read.
    client_waits: bool,
    /// The relays' own state, one for all of them (see [`Relay`]): built once per session,
    /// not once per transaction.
    relaying: Relay,
}

impl<'r> Seat<'_, 'r> {
    /// Serves the client's commands, on whichever server connection the pool hands the session
    /// for each, until the session ends.
    async fn serve<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        tracker: &mut Tracker,
    ) -> SessionEnd
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let stop = ctx.stop;
        // Polled only when the drain wakes it (see `gate`): one atomic load per wait, not a lock.
        let mut draining = crate::proxy::gate::cancelled(stop.drain);
        loop {
            // What the command at the front is, when the wait for it already read that.
            let mut front = None;
            if self.conn.is_none() {
                let waits = std::mem::take(&mut self.client_waits);
                let next = next_command(client, &mut self.up, stop, &mut draining, waits);
                match next.await {
                    Ok(command) => front = Some(command),
                    Err(end) => return end.into(),
                }
            } else if stop.drain.is_cancelled() && tracker.idle() && !self.up.is_empty() {
                // A statement command read before the drain and not begun: the session ends here.
                return RelayEnd::Drained.into();
            }
            if let Err(end) = self
                .command(ctx, client, tracker, &mut draining, front)
                .await
            {
                return end;
            }
        }
    }

    /// The command at the front of the client's buffer (`front`: as [`command::command`] read
    /// it, if it was): answered here, or relayed with the commands after it until the session
    /// may give its connection back (then it does).
    async fn command<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        tracker: &mut Tracker,
        draining: &mut Cancelled<'_>,
        front: Option<Command>,
    ) -> Result<(), SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        if self.split.is_some() {
            self.read_head(ctx, client).await?;
        }
        // An empty packet is a command with no command byte: relayed like any other (the
        // server answers it with an ERR); the byte after its header is the next packet's.
        let front = front.unwrap_or_else(|| command::command(&self.up));
        let mut statement = matches!(front, Command::Statement(_));
        let front = if statement {
            match prepared::front(client, &mut self.up, &mut self.observer).await? {
                Front::Done => return Ok(()),
                Front::Relay => {
                    statement = false;
                    None
                }
                front => Some(front),
            }
        } else {
            None
        };
        if self.split.is_some() {
            if let Before::Refused = self.before_command(ctx, client, front.as_ref()).await? {
                return Ok(());
            }
        }
        // A transaction begins here: the session takes a connection for this command.
        let fresh = self.conn.is_none();
        let replaying = fresh && std::mem::take(&mut self.replaying);
        // A KILL may take the killer's own idle connection on its target's backend.
        let aimed = fresh && self.across.is_some() && self.aim_kill(ctx);
        if fresh && !aimed && !self.begin(ctx, client, front.as_ref()).await? {
            return Ok(());
        }
        if fresh
            && !aimed
            && self.split.is_some()
            && !self.see_own_writes(ctx, client, front.as_ref()).await?
        {
            return Ok(());
        }
        let Some(held) = self.conn.as_mut() else {
            return Ok(());
        };
        let answered = match front {
            Some(front) => {
                let (up, observer) = (&mut self.up, &mut self.observer);
                let ran = prepared::run(front, client, held, up, observer, self.deprecate_eof);
                matches!(ran.await?, Ran::Done)
            }
            None => false,
        };
        let mut client_waits = false;
        if !answered {
            // Sent once more elsewhere if its server is lost before answering (see `retry`).
            let mut again = match (fresh, self.across) {
                (true, Some(_)) => self.retry_candidate(),
                _ => None,
            };
            // A write's refusal by a primary gone read-only is kept from the client (`refusal`):
            // the first command of a transaction, or the one after a write that the session
            // kept its connection for (when it reads nothing that write left there).
            let kept_for_one = self.kept_for_one_command(fresh);
            if kept_for_one {
                again = self.retry_candidate().filter(|p| !refusal::reads_traces(p));
            }
            let watch = again.is_some() && self.watches_refusal(replaying);
            if watch || self.asks_each_command() {
                // Each command on a replica is asked where it may run (see `split`).
                tracker.pause_after_one();
            } else {
                tracker.pause_statements(statement);
            }
            self.observer.watch_refusal = watch;
            self.observer.read = (0, 0);
            let relayed = self.relay(client, tracker, draining).await;
            self.observer.watch_refusal = false;
            let withheld = std::mem::take(&mut self.observer.withheld);
            if relayed.is_ok() && withheld {
                let replayed = self.replays_refused(ctx, client, again.take()).await?;
                self.client_waits = false;
                if replayed {
                    return Ok(());
                }
            }
            client_waits = match relayed {
                Ok(waits) => waits,
                Err(end) => match again.filter(|_| !kept_for_one) {
                    Some(packet)
                        if self.rereadable(&packet)
                            && self.lost_unanswered(&end, packet.len(), tracker) =>
                    {
                        let retried = self.retry(ctx, client, tracker, draining, packet, &end);
                        retried.await?
                    }
                    _ => return Err(end),
                },
            };
        }
        if self.observer.holding.releasable() {
            if self.split.is_some() && self.learn_write().await {
                // The client may have woken the task while the proxy's query ran, to no reader.
                client_waits = false;
            }
            if let Some(held) = self.let_go(ctx.worker) {
                self.wipe_and_return(held, ctx.worker).await;
                // The client may have woken the task meanwhile, to no reader.
                client_waits = false;
            }
            self.move_if_leaving(ctx);
        }
        self.client_waits = client_waits;
        Ok(())
    }

    /// A transaction begins: the session takes a connection for the command at the front
    /// (`front`, when it is a prepared-statement command). True once it holds one; false when
    /// the command was answered with an ERR, or dropped (see [`take_conn`](Self::take_conn)).
    async fn begin<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        if ctx.state.pauses.holds(self.observer.inner.pool())
            && !self.until_resumed(ctx, client).await?
        {
            return Ok(false);
        }
        if let Some(pool) = self.across {
            // As below, across the pool's backends: an idle connection in the session's
            // settings is taken without an await.
            let took = match self.idle_across(ctx, pool) {
                Some(got) if got.carries(self.observer.holding.state()) => {
                    self.hold_moved(ctx, got);
                    Ok(true)
                }
                got => self.take_conn(ctx, client, front, got.map(Ok)).await,
            };
            if self.split.is_some() {
                self.note_where(ctx, pool);
            }
            return took;
        }
        // Most transactions find an idle connection in the session's settings: taken without a
        // wait, a clock read or a future of the pool's.
        let state = self.observer.holding.state();
        match self.pool.try_acquire(self.observer.key, ctx.worker, state) {
            Some(Ok(got)) if got.carries(state) => {
                self.hold(got);
                Ok(true)
            }
            tried => self.take_conn(ctx, client, front, tried).await,
        }
    }

    /// The session's pool is paused (`PAUSE` on the admin port): the transaction waits at its
    /// start, holding no connection, until a `RESUME` (true) or `wait_timeout` (false: the
    /// client got an ERR in its command's place).
    async fn until_resumed<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let wait = self.pool.pooling().wait_timeout;
        let pool = self.observer.inner.pool().to_owned();
        if tokio::time::timeout(wait, ctx.state.pauses.until_resumed(&pool))
            .await
            .is_ok()
        {
            return Ok(true);
        }
        let message = format!(
            "pool {pool} is paused (PAUSE on the admin port) and was not resumed within \
             pooling.wait_timeout ({})",
            humantime::format_duration(wait)
        );
        client::answer(client, &mut self.up, code::UNKNOWN_ERROR, &message).await?;
        Ok(false)
    }

    /// Holds `got` for the session's next commands; a KILL naming the session reaches it.
    fn hold(&mut self, got: Held) {
        if let Some(live) = &self.live {
            live.store(got.thread_id, Ordering::Relaxed);
        }
        self.conn = Some(got);
    }

    /// Holds `got`, taken from any backend's pool of a pool across backends: the session moves
    /// there first when that is another backend's.
    fn hold_moved(&mut self, ctx: &Context<'r>, got: Held) {
        if !Arc::ptr_eq(got.pool(), &self.pool) {
            self.moved_to(ctx, got.pool());
        }
        self.hold(got);
    }

    /// Takes a server connection from the pool for the command at the front (`front`, when it
    /// is a prepared-statement command), the long way: `tried` is what
    /// [`BackendPool::try_acquire`] gave (None: a wait). True once the session holds one; false
    /// when the command was answered with an ERR, or dropped, and the session waits for the
    /// next.
    async fn take_conn<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
        tried: Option<Result<Held, PoolError>>,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let key = self.observer.key;
        let state = self.observer.holding.state();
        let want = self.want();
        let got = match (self.across, tried) {
            // An idle one `idle_across` found, to be brought to the session's settings.
            (Some(_), Some(Ok(got))) => bring_to(got, key, state).await,
            (Some(pool), _) => {
                let places = Places {
                    home: &self.pool,
                    avoid: self.avoid.as_ref(),
                    known: &mut self.pools,
                    order: &mut self.order,
                };
                take_across(ctx, pool, places, key, state, want).await
            }
            (None, tried) => take(&self.pool, key, ctx.worker, state, tried).await,
        };
        let e = match got {
            Ok(got) => {
                self.hold_moved(ctx, got);
                return Ok(true);
            }
            Err(e) => e,
        };
        let up = &mut self.up;
        match front {
            // Long data has no answer to put an ERR in: it is dropped, and its execute meets
            // the same wait.
            Some(Front::Statement {
                command: crate::wire::protocol::cmd::STMT_SEND_LONG_DATA,
                ..
            }) => client::drop_front(client, up).await?,
            _ => refuse_command(client, up, &e, ctx.peer()).await?,
        }
        match e {
            // No primary for this transaction (a switchover in progress): the session goes on.
            PoolError::Timeout { .. } | PoolError::NoPrimary { .. } => Ok(false),
            _ => Err(SessionEnd::NoServerConnection),
        }
    }

    /// Relays on the connection the session holds until the relay lets it go (Ok) or ends.
    /// `draining` is the session's gate on the drain, kept across its relays. Ok(true) when the
    /// relay's last look at the client was a read that would have blocked (see
    /// `RelayEnd::Released`).
    async fn relay<C>(
        &mut self,
        client: &mut LegStream<C>,
        tracker: &mut Tracker,
        draining: &mut Cancelled<'_>,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(held) = self.conn.as_mut() else {
            return Ok(false);
        };
        let held: &mut ServerConn = held;
        let (up, down) = (std::mem::take(&mut self.up), std::mem::take(&mut self.down));
        // A split session on a primary that follows its server: asked about each command once
        // that server went read-only under it (see `split::leave_a_demoted_primary`).
        let backend = self.lease.backend();
        let demotion = match (self.across, self.split) {
            (Some(pool), Some(s))
                if !s.on_replica
                    && backend.role.configured() == Some(crate::config::Role::Auto) =>
            {
                Some((pool, &**backend))
            }
            _ => None,
        };
        let mut on = OnConn {
            session: &mut self.observer,
            statements: &mut held.statements,
            reset: false,
            demotion,
        };
        let legs = Legs {
            client,
            backend: &mut held.leg,
            tracker,
            observer: &mut on,
        };
        let end = self.relaying.run(legs, up, down, draining).await;
        if on.reset {
            // COM_RESET_CONNECTION or COM_CHANGE_USER dropped its prepared statements.
            held.statements.clear();
        }
        match end {
            RelayEnd::Released(up, down, client_waits) => {
                (self.up, self.down) = (up, down);
                Ok(client_waits)
            }
            end => Err(end.into()),
        }
    }
}

/// A connection of `key` from the pool, brought to the session's `state`: the one `tried`
/// gave, else one waited for.
pub(super) async fn take(
    pool: &Arc<BackendPool>,
    key: &Key,
    worker: usize,
    state: &crate::backends::pooling::State,
    tried: Option<Result<Held, PoolError>>,
) -> Result<Held, PoolError> {
    let got = match tried {
        Some(tried) => tried?,
        None => pool.acquire(key, worker, state).await?,
    };
    bring_to(got, key, state).await
}

/// `got` with the session's `state`: as it is when it carries it, else reset and the session's
/// settings run again on it.
pub(super) async fn bring_to(
    mut got: Held,
    key: &Key,
    state: &crate::backends::pooling::State,
) -> Result<Held, PoolError> {
    let pool = Arc::clone(got.pool());
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

/// Waits, holding no server connection, until the client's next command begins (its first five
/// bytes are read: Ok, with what it is), or the session ends: the client closed or quit (its COM_QUIT is not
/// forwarded: no connection is held), the idle timeout, or the drain. `registered`: the task is
/// registered for the client's next bytes already (the relay's last read of it would have
/// blocked, and nothing was awaited since), so the first poll does not read it again: the
/// client's bytes wake the task, and every later poll reads.
async fn next_command<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
    stop: Stop<'_>,
    draining: &mut Cancelled<'_>,
    mut registered: bool,
) -> Result<Command, RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let idle = stop.idle_timeout.map(tokio::time::sleep);
    tokio::pin!(idle);
    // One hand-written poll in the order a biased select would take (drain, idle timeout,
    // client): this runs at every transaction.
    std::future::poll_fn(|cx| loop {
        // A command's header and command byte (none in an empty packet): enough to tell a
        // statement command (see `prepared`).
        match command::command(up) {
            Command::NeedMore(_) => {}
            Command::Quit => return Poll::Ready(Err(RelayEnd::ClientClosed { quit: true })),
            command => return Poll::Ready(Ok(command)),
        }
        if draining.poll_gated(cx).is_ready() {
            return Poll::Ready(Err(RelayEnd::Drained));
        }
        if let Some(idle) = idle.as_mut().as_pin_mut() {
            if idle.poll(cx).is_ready() {
                return Poll::Ready(Err(RelayEnd::IdleTimeout));
            }
        }
        if std::mem::take(&mut registered) {
            return Poll::Pending;
        }
        if up.capacity() < 1024 {
            up.reserve(8 * 1024);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut *client), cx, &mut *up) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(RelayEnd::ClientClosed { quit: false })),
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(RelayEnd::ClientIo(e))),
        }
    })
    .await
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
    let code = match e {
        // What a read-only server answers a write.
        PoolError::NoPrimary { .. } => code::OPTION_PREVENTS_STATEMENT,
        _ => code::TOO_MANY_CONNECTIONS,
    };
    client::answer(client, up, code, &e.to_string()).await
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
    /// Bytes the relay running now read from the client and from the server.
    read: (usize, usize),
    /// The client's id of the statement command the relay sends next, which carries its server
    /// connection's id (see [`prepared::as_client_sent`]).
    front: Option<u32>,
    scratch: Vec<u8>,
    /// The relay running now may withhold its first command's answer when it is a read-only
    /// refusal (see `refusal`), and did.
    watch_refusal: bool,
    withheld: bool,
}

impl<'a, 'r> Pooled<'a, 'r> {
    /// `server`: the backend's flavour and version, as its greeting said.
    fn new(
        inner: &'a mut Recorder<'r>,
        member: Member,
        key: &'a Key,
        server: Option<crate::wire::sql::Server>,
    ) -> Self {
        let mut holding = Holding::new(!key.schema.is_empty());
        holding.share_statements();
        holding.read_as(crate::wire::sql::Dialect { server });
        Pooled {
            inner,
            holding,
            member,
            key,
            statements: SessionStatements::default(),
            read: (0, 0),
            front: None,
            scratch: Vec::new(),
            watch_refusal: false,
            withheld: false,
        }
    }

    fn pinned(&mut self, reason: Option<Reason>) {
        if let Some(reason) = reason {
            debug!(user = %self.key.user, reason = reason.as_str(), "session pinned its server connection");
            self.member.pinned(reason);
            if reason == Reason::Statement(crate::wire::sql::pins::Pin::ConnectionId) {
                // A KILL naming the number the server gave is then most likely meant for it.
                self.inner.told_thread();
            }
        }
    }
}

impl Observer for Pooled<'_, '_> {
    fn completed(&mut self, c: &Completed) {
        self.inner.completed(c);
        let reason = self.holding.completed(c);
        self.pinned(reason);
        if resets(c) && !c.error {
            // As directly: the session's statements are gone.
            self.statements.clear();
        }
    }

    fn relayed(&mut self, to_backend: bool, n: usize) {
        self.inner.relayed(to_backend, n);
        if to_backend {
            self.read.0 += n;
        } else {
            self.read.1 += n;
        }
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
}

/// A COM_RESET_CONNECTION or COM_CHANGE_USER: the server connection's prepared statements go
/// with it (and, when it succeeded, the session's).
fn resets(c: &Completed) -> bool {
    matches!(
        c.command,
        crate::wire::protocol::cmd::RESET_CONNECTION | crate::wire::protocol::cmd::CHANGE_USER
    )
}

/// A pooled session while a relay runs on the server connection it holds: its observer, and
/// the statements prepared on that connection, which its statement commands are rewritten for
/// ([`prepared::resume`]). They stay the connection's; a reset of it clears them once the relay
/// has ended.
struct OnConn<'s, 'a, 'r> {
    session: &'s mut Pooled<'a, 'r>,
    statements: &'s mut ConnStatements,
    /// A COM_RESET_CONNECTION or COM_CHANGE_USER completed: the connection's prepared
    /// statements are gone.
    reset: bool,
    /// The pool and backend of a split session on a primary of `role: auto`, which may go
    /// read-only under its transaction ([`Steering::pauses_now`]).
    demotion: Option<(
        &'s crate::backends::balancer::Pool,
        &'s crate::backends::balancer::Backend,
    )>,
}

impl Observer for OnConn<'_, '_, '_> {
    fn completed(&mut self, c: &Completed) {
        self.session.completed(c);
        self.reset |= resets(c);
    }

    fn relayed(&mut self, to_backend: bool, n: usize) {
        self.session.relayed(to_backend, n);
    }

    fn statement(&mut self, command: u8, payload: &[u8]) -> u64 {
        self.session.statement(command, payload)
    }
}

impl Steering for OnConn<'_, '_, '_> {
    fn client_scan(&mut self, in_flight: usize) -> Option<usize> {
        self.session
            .inner
            .client_scan(in_flight)
            .map(|limit| limit.max(TEXT_LIMIT))
    }

    fn rewrite_kill(&mut self, packet: &[u8]) -> Option<KillRewrite> {
        self.session.inner.rewrite_kill(packet)
    }

    fn refuses_long_statements(&self) -> bool {
        self.session.inner.refuses_long_statements()
    }

    fn releasable(&self) -> bool {
        self.session.holding.releasable()
    }

    fn keeps_backend(&self) -> bool {
        true
    }

    fn withhold(&mut self, response: &[u8]) -> bool {
        let session = &mut *self.session;
        if !std::mem::take(&mut session.watch_refusal) {
            return false;
        }
        // Nothing read of the answer before it (a multi-statement's first results): the
        // refusal is the whole answer, so nothing of the command ran.
        session.withheld = session.read.1 == response.len() && refusal::read_only_refusal(response);
        session.withheld
    }

    fn withholding(&self) -> bool {
        self.session.withheld
    }

    fn pauses_now(&self) -> bool {
        self.demotion
            .is_some_and(|(pool, backend)| !pool.takes_writes(backend))
    }

    fn resume_statement(&mut self, packet: &mut [u8]) -> bool {
        let session = &mut *self.session;
        prepared::resume(
            packet,
            &mut session.statements,
            self.statements,
            &mut session.front,
        )
    }
}

/// Says so in the log when a pool could not serve a session at all.
pub(super) fn log_no_connection(peer: &str, backend: &str) {
    info!(
        client = peer,
        backend, "closing: no server connection of the session's user is left in the pool"
    );
}
