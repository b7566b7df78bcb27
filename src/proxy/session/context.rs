//! What every step of a session needs, in one place: the proxy's state, where the client came
//! from, the worker running it, when to stop, the backend set and transport settings it began
//! with, and the client leg's next sequence id. Steps take the context instead of threading each
//! of these by hand, and the sequence id moves in one place as the connection phase advances it.
//!
//! Everything but the sequence id is borrowed for the session's life (`'a`): what a step hands
//! back (a transport plan, a registered proxy id) may outlive the step's borrow of the
//! context, so later steps can still advance the sequence id.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Origin;
use crate::backends::balancer::BackendSet;
use crate::proxy::relay::Stop;
use crate::proxy::state::{ProxyState, TransportSettings};

/// One session's surroundings (see the module's docs).
pub(super) struct Context<'a> {
    pub(super) state: &'a Arc<ProxyState>,
    /// The backend set the session was routed and connected in: a reload meanwhile changes
    /// neither (later counts go to the set then current, `state.backends()`).
    pub(super) set: &'a BackendSet,
    pub(super) transport: &'a TransportSettings,
    pub(super) from: Origin<'a>,
    /// The worker thread running the session: its latency samples go to that worker's shard.
    pub(super) worker: usize,
    /// The drain and the idle timeout: when the relay ends on its own.
    pub(super) stop: Stop<'a>,
    /// The client-leg sequence id an ERR of the proxy's own takes next.
    pub(super) next_seq: u8,
    /// Its route is read-only (`routes[].read_only`): it never reaches the pool's primary.
    pub(super) read_only: bool,
}

impl<'a> Context<'a> {
    pub(super) fn new(
        state: &'a Arc<ProxyState>,
        set: &'a BackendSet,
        transport: &'a TransportSettings,
        from: Origin<'a>,
        worker: usize,
        drain: &'a CancellationToken,
    ) -> Self {
        Context {
            state,
            set,
            transport,
            from,
            worker,
            stop: Stop {
                drain,
                idle_timeout: state.session.idle_timeout,
            },
            // After the greeting (0) and the client's response (1).
            next_seq: 2,
            read_only: false,
        }
    }

    /// The client's name in logs.
    pub(super) fn peer(&self) -> &'a str {
        self.from.peer
    }
}
