//! Where a pooled session's server connection goes when the session lets go of it: back to
//! the pool between transactions (cleared of what another session could read), or, at the
//! session's end, back to the pool, recycled, or closed. Apart from the serving loop in
//! `pooled.rs` because every way a session ends passes through here, and the choices (reset,
//! wipe, recycle, close) are what keeps one session's state from reaching the next.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{settle, Seat};
use crate::backends::kill;
use crate::backends::pooling::holding::Holding;
use crate::backends::pooling::{BackendPool, Held, Key, ServerConn};
use crate::proxy::relay::RelayEnd;
use crate::proxy::session::{Context, SessionEnd};
use crate::wire::protocol::response::Tracker;

impl<'r> Seat<'_, 'r> {
    /// Where the connection a session held at its end goes: back to the pool, reset first if the
    /// session left something on it; recycled if it was pinned and can be brought back to its
    /// key's login state; else closed. `end` says how the session ended.
    pub(super) async fn return_at_end(
        &mut self,
        ctx: &Context<'_>,
        end: &SessionEnd,
        tracker: &mut Tracker,
    ) {
        let Some(mut held) = self.conn.take() else {
            return;
        };
        let (pool, worker) = (&*self.pool, ctx.worker);
        let observer = &mut self.observer;
        let key = observer.key;
        held.state = observer.holding.state().clone();
        let end = match end {
            SessionEnd::Relay(end) => Some(end),
            SessionEnd::NoServerConnection => None,
        };
        // A client's trailing COM_QUIT is not forwarded (`Steering::keeps_backend`).
        let mut clean = matches!(
            end,
            Some(RelayEnd::ClientClosed { .. } | RelayEnd::Drained | RelayEnd::IdleTimeout)
        ) && tracker.idle();
        let gone = matches!(
            end,
            Some(RelayEnd::ClientClosed { .. } | RelayEnd::ClientIo(_))
        );
        if gone && !tracker.idle() {
            // The client left with a command unanswered: closing the connection could leave its
            // user's other sessions with none. Its answer is read to the end and thrown away.
            let within = pool.pooling().wait_timeout;
            clean = settle::settle(&mut held, tracker, ctx.stop, observer, within).await;
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
            && (!observer.holding.role_changed() || held.restore_role(self.deprecate_eof).await)
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

    /// Lets go of the session's connection between transactions: back to its pool at once when
    /// the session left nothing on it another could read (no await, as most transactions end);
    /// else handed back to the caller for [`wipe_and_return`](Self::wipe_and_return).
    pub(super) fn let_go(&mut self, worker: usize) -> Option<Held> {
        if let Some(live) = &self.live {
            live.store(kill::NO_THREAD, Ordering::Relaxed);
        }
        let mut held = self.conn.take()?;
        let holding = &self.observer.holding;
        if !Arc::ptr_eq(&held.state, holding.state()) {
            held.state = Arc::clone(holding.state());
        }
        if holding.leaves_traces() {
            return Some(held);
        }
        held.release(worker);
        None
    }

    /// Gives back a connection [`let_go`](Self::let_go) handed back: cleared of the session's
    /// traces first (closed if that fails).
    pub(super) async fn wipe_and_return(&mut self, mut held: Held, worker: usize) {
        let observer = &mut self.observer;
        let key = observer.key;
        if wipe(&self.pool, &mut held, key, &mut observer.holding, "traces").await {
            held.release(worker);
        } else {
            held.quit();
        }
    }

    /// In a pool across backends, a session whose backend left rotation (drained, maintenance,
    /// down, ejected) moves, once its connection is back, to a backend in rotation where its key
    /// has connections: the drain sees it leave as its transaction ends, not at its next one.
    pub(super) fn move_if_leaving(&mut self, ctx: &Context<'r>) {
        if let Some(pool) = self.across {
            let now = Instant::now();
            // The session's pool shares across backends (`self.across`): only its backend's
            // state is read, no lookup by name.
            if ctx.set.out_of_rotation(self.lease.backend(), now) {
                let key = self.observer.key;
                let mut order = Vec::new();
                ctx.set.transaction_order(now, pool, &mut order);
                let elsewhere = order
                    .into_iter()
                    .filter_map(|b| ctx.state.server_pools.get(&b.name))
                    .find(|p| p.has_connections(key));
                if let Some(next) = elsewhere {
                    self.moved_to(ctx, &next);
                }
            }
        }
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
