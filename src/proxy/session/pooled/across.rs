//! A pooled session of a pool that shares connections across its backends
//! (`pooling.across_backends`): where its next transaction's connection comes from (the first
//! idle one of its key over the backends in rotation, in the policy's order), what follows the
//! session when that is another backend (its place among the key's sessions, its lease, its
//! metrics and digests, the KILL target), and the one case a statement is sent twice: a lone
//! read in autocommit whose server was lost before any byte of its answer was read.
//!
//! Apart from `pooled.rs` because a pool per backend never comes here: its sessions take the
//! short way (`BackendPool::try_acquire` on their own backend).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{debug, info};

use super::{bring_to, take, Seat};
use crate::backends::balancer::{Backend, Pool, Want};
use crate::backends::kill;
use crate::backends::pooling::{BackendPool, Held, Key, PoolError};
use crate::net::leg::LegStream;
use crate::proxy::gate::Cancelled;
use crate::proxy::relay::RelayEnd;
use crate::proxy::session::{Context, SessionEnd};
use crate::wire::protocol::cmd;
use crate::wire::protocol::response::Tracker;
use crate::wire::protocol::statement::may_be_kill;

/// The largest statement a pool across backends keeps a copy of, to send again if its server
/// is lost before answering: the copy is made for every transaction's first statement, and a
/// bulk load's megabytes are no read to retry.
const RETRY_MAX: usize = 64 * 1024;

/// The longest command read for a KILL that could move its transaction ([`Seat::aim_kill`]).
const KILL_MAX: usize = 1024;

impl<'r> Seat<'_, 'r> {
    /// The session moves to `pool`, another backend's where its key has connections (it took
    /// one, or its own backend left rotation): it counts there from now on (the pool's sessions
    /// of its key, the backend's active sessions), and its metrics, digests and KILLs follow.
    /// Called while a KILL naming it finds no connection.
    pub(super) fn moved_to(&mut self, ctx: &Context<'r>, pool: &Arc<BackendPool>) {
        let Some(backend) = ctx.set.by_name(pool.backend()) else {
            return;
        };
        debug!(
            client = ctx.peer(),
            from = %self.lease.backend().name,
            to = %backend.name,
            "pooled session moved to another backend"
        );
        self.observer.member.move_to(pool);
        self.pool = Arc::clone(pool);
        self.lease.move_to(backend);
        self.observer.inner.moved_to(backend);
        if let Some(registration) = self.registration {
            registration.moved(backend);
        }
    }

    /// The first idle connection of its key over `pool`'s backends in rotation (see
    /// [`idle_across`]).
    pub(super) fn idle_across(&mut self, ctx: &Context<'r>, pool: &'r Pool) -> Option<Held> {
        let want = self.want();
        let mut places = Places {
            home: &self.pool,
            avoid: self.avoid.as_ref(),
            known: &mut self.pools,
            order: &mut self.order,
        };
        let (key, state) = (self.observer.key, self.observer.holding.state());
        idle_across(ctx, pool, &mut places, key, state, want)
    }

    /// A KILL at the front of a fresh transaction, naming a session that holds a connection on
    /// a backend of the pool now (by its proxy id, or by the server's own id that `SELECT
    /// CONNECTION_ID()` gave it): the transaction takes an idle connection of the killer's own
    /// key there, so the KILL runs as the killer (the server deciding with the killer's
    /// privileges) and needs no `kill:` account. Only an idle one, in the session's settings:
    /// a KILL never waits behind the query it is meant to stop. Else, and always for a
    /// read-only route's session (which never reaches the primary), the KILL goes where the
    /// pool's order puts it and is mapped there (the recorder's `rewrite_kill`). True when the
    /// session holds that connection now.
    pub(super) fn aim_kill(&mut self, ctx: &Context<'r>) -> bool {
        let Some(pool) = self.across else {
            return false;
        };
        if self.split.is_some_and(|s| s.read_only) {
            return false;
        }
        let up = &self.up;
        let command = up.get(4).copied();
        if up.get(3) != Some(&0) || !matches!(command, Some(cmd::QUERY | cmd::PROCESS_KILL)) {
            return false;
        }
        let Some(len) = crate::backends::pooling::command::payload_len(up) else {
            return false;
        };
        let Some(payload) = up.get(4..4 + len).filter(|_| len <= KILL_MAX) else {
            return false;
        };
        // The common case costs a look at the statement's first word.
        if !may_be_kill(payload) {
            return false;
        }
        let Some(request) = kill::parse(payload) else {
            return false;
        };
        let own_id = u32::try_from(request.id).is_ok_and(kill::is_proxy_id);
        if !own_id && !self.observer.inner.may_look_up_thread() {
            return false;
        }
        let user = self.observer.inner.user();
        let Some(backend) = kill::target_backend(&request, &ctx.state.kills, &pool.name, user)
        else {
            return false;
        };
        let Some(there) = ctx.state.server_pools.get(&backend.name) else {
            return false;
        };
        let (key, state) = (self.observer.key, self.observer.holding.state());
        let Some(held) = there.try_idle(key, ctx.worker, state, false) else {
            return false;
        };
        debug!(
            client = ctx.peer(),
            backend = %backend.name,
            target = request.id,
            "a KILL takes the killer's own connection on its target's backend"
        );
        self.hold_moved(ctx, held);
        if let Some(split) = self.split.as_mut() {
            split.on_replica = !pool.takes_writes(&backend);
            split.may_write = !split.on_replica;
        }
        true
    }

    /// A copy of the command at the front of the client's buffer when it is one whole COM_QUERY
    /// alone, of at most [`RETRY_MAX`] bytes: it may run again on another server if its own is
    /// lost before answering and it is a read ([`Seat::rereadable`]). Whether it is one is asked
    /// only then: a lost server is rare, and reading the text as the server does costs more
    /// than this copy.
    pub(super) fn retry_candidate(&self) -> Option<BytesMut> {
        let up = &self.up;
        let len = usize::from(*up.first()?)
            | usize::from(*up.get(1)?) << 8
            | usize::from(*up.get(2)?) << 16;
        let whole = up.len() == 4 + len && len <= RETRY_MAX && up.get(3) == Some(&0);
        let query = up.get(4) == Some(&crate::wire::protocol::cmd::QUERY);
        (whole && query).then(|| up.clone())
    }

    /// Whether `packet` (a [`Seat::retry_candidate`]) is a read that may run again on another
    /// server ([`crate::wire::sql::retryable_read`], as the backend reads statements).
    pub(super) fn rereadable(&self, packet: &[u8]) -> bool {
        let dialect = self.observer.holding.dialect();
        packet
            .get(5..)
            .is_some_and(|text| crate::wire::sql::retryable_read(text, dialect))
    }

    /// Whether the relay that ended with `end` lost its server with the one command it sent
    /// (`len` bytes, nothing more read from the client) unanswered: nothing of an answer was
    /// read, so nothing reached the client. The tracker and the pool's reading then forget it.
    pub(super) fn lost_unanswered(
        &mut self,
        end: &SessionEnd,
        len: usize,
        tracker: &mut Tracker,
    ) -> bool {
        let lost = matches!(
            end,
            SessionEnd::Relay(RelayEnd::BackendIo(_) | RelayEnd::BackendClosed { .. })
        );
        let unanswered = lost && self.observer.read == (len, 0) && tracker.forget_unanswered();
        if unanswered {
            self.observer.holding.forget_unanswered();
        }
        unanswered
    }

    /// Sends `packet`, whose server was lost before it answered (`end`), once more on a
    /// connection of another backend; the lost connection is closed. An ERR answers it when
    /// no connection comes (as for any command), and the relay's end is the session's if the
    /// second server fails too.
    pub(super) async fn retry<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        tracker: &mut Tracker,
        draining: &mut Cancelled<'_>,
        packet: BytesMut,
        end: &SessionEnd,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        if let Some(live) = &self.live {
            live.store(kill::NO_THREAD, Ordering::Relaxed);
        }
        let lost = self.lease.backend().name.clone();
        if let Some(held) = self.conn.take() {
            held.quit();
        }
        let cause = match end {
            SessionEnd::Relay(RelayEnd::BackendIo(e)) => e.to_string(),
            _ => "closed the connection with a read unanswered".to_owned(),
        };
        ctx.state.backends().session_failed(
            self.lease.backend(),
            crate::backends::balancer::ejection::Failure::MidCommand,
            &cause,
            Instant::now(),
        );
        self.up = packet;
        // Not where it was lost, even while that backend still counts as up.
        self.avoid = Some(Arc::clone(&self.pool));
        let took = self.take_conn(ctx, client, None, None).await;
        self.avoid = None;
        let took = took?;
        // A capture keeps the one record of the command, answered by the second server.
        self.observer.inner.lost_unanswered(took);
        if !took {
            return Ok(false);
        }
        self.pool.count_retry();
        info!(
            client = ctx.peer(),
            lost = %lost,
            to = %self.lease.backend().name,
            "a read lost with its server before it was answered runs once more on another backend"
        );
        self.relay(client, tracker, draining).await
    }
}

/// A connection of `key` from any backend of `pool` in rotation, for a session whose pool
/// shares connections across its backends: the first idle one in the policy's order (see
/// [`idle_across`]), else a wait on the session's own backend (`home`) while it is in
/// rotation and its key has connections there, else on the first backend where its key has
/// connections. Never from `avoid`.
/// Brought to the session's `state` as [`take`] does.
pub(super) async fn take_across<'r>(
    ctx: &Context<'_>,
    pool: &'r Pool,
    places: Places<'_, 'r>,
    key: &Key,
    state: &crate::backends::pooling::State,
    want: Want,
) -> Result<Held, PoolError> {
    let mut places = places;
    if want == Want::Primary {
        // A switchover or a promotion under way: the transaction waits for the new primary.
        super::split::wait_for_primary(pool, pool.pooling.wait_timeout).await?;
    }
    if let Some(got) = idle_across(ctx, pool, &mut places, key, state, want) {
        return bring_to(got, key, state).await;
    }
    // None idle: where to wait, among the pools of the order `idle_across` wrote.
    let Places {
        home,
        avoid,
        known,
        order,
    } = places;
    let pools: Vec<&Arc<BackendPool>> = order
        .iter()
        .filter_map(|b| known.get(b.index())?.as_ref())
        .filter(|p| avoid.is_none_or(|a| !Arc::ptr_eq(a, p)))
        .collect();
    // Home only while its key has connections there: a wait where it has none ends at once
    // with none left for the user (ERR 1040), as when its server was just killed and is still
    // in rotation, while another backend's connections of the key would come free.
    let wait_on = pools
        .iter()
        .find(|p| Arc::ptr_eq(p, home) && p.has_connections(key))
        .or_else(|| pools.iter().find(|p| p.has_connections(key)))
        .copied();
    // A split's transaction waits only where it may run.
    let home_fits = want == Want::Any || pools.iter().any(|p| Arc::ptr_eq(p, home));
    match (wait_on, avoid) {
        (Some(p), _) => take(p, key, ctx.worker, state, None).await,
        (None, None) if home_fits => take(home, key, ctx.worker, state, None).await,
        (None, None) => Err(PoolError::NoPrimary {
            why: format!(
                "user '{}' has no server connection on {} of pool {}: only a login makes one; \
                 reconnect",
                key.user,
                if want == Want::ReplicaOnly {
                    "a replica"
                } else {
                    "the primary"
                },
                pool.name
            ),
            waited: std::time::Duration::ZERO,
        }),
        // Nowhere else to wait: the pool says so as it does when a key's connections are gone.
        (None, Some(lost)) => Err(PoolError::Starved {
            user: key.user.clone(),
            backend: lost.backend().to_owned(),
        }),
    }
}

/// The first idle connection of `key` over the backends of `pool` in rotation, in the policy's
/// order, never from `places.avoid`: one of this worker thread's first (no other thread woken
/// for its I/O), then any; for a split's read ([`Want::Replica`]) the replicas' first, on any
/// worker thread, then the primary's (a read takes an idle primary connection rather than wait
/// for a busy replica one). No await, no allocation once the session's `places` are filled: most
/// transactions start here.
pub(super) fn idle_across<'r>(
    ctx: &Context<'_>,
    pool: &'r Pool,
    places: &mut Places<'_, 'r>,
    key: &Key,
    state: &crate::backends::pooling::State,
    want: Want,
) -> Option<Held> {
    let Places {
        avoid,
        known,
        order,
        ..
    } = places;
    let avoid = *avoid;
    ctx.set
        .transaction_order_for(Instant::now(), pool, order, want);
    let order: &[&Arc<Backend>] = order;
    for b in order {
        let i = b.index();
        if known.len() <= i {
            known.resize(i + 1, None);
        }
        if known[i].is_none() {
            known[i] = ctx.state.server_pools.get(&b.name);
        }
    }
    let known: &[Option<Arc<BackendPool>>] = known;
    // A split's read takes the primary only when no replica has an idle connection of its
    // key, on any worker thread.
    let pools = |fallback: bool| {
        order
            .iter()
            .filter(move |b| (want == Want::Replica && !b.role.serves_reads()) == fallback)
            .filter_map(|b| known.get(b.index())?.as_ref())
            .filter(|p| avoid.is_none_or(|a| !Arc::ptr_eq(a, p)))
    };
    let idle = |fallback: bool| {
        [true, false].into_iter().find_map(|local| {
            pools(fallback).find_map(|p| p.try_idle(key, ctx.worker, state, local))
        })
    };
    idle(false).or_else(|| idle(true))
}

/// Where [`take_across`] looks: the session's own backend's pool, one to avoid, the pools it
/// looked up before, and room for the policy's order of the pool's backends (kept by the
/// session: no allocation per transaction).
pub(super) struct Places<'s, 'r> {
    pub(super) home: &'s Arc<BackendPool>,
    pub(super) avoid: Option<&'s Arc<BackendPool>>,
    pub(super) known: &'s mut Vec<Option<Arc<BackendPool>>>,
    pub(super) order: &'s mut Vec<&'r Arc<Backend>>,
}
