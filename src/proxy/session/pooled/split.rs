//! A pooled session of a pool that splits reads from writes (`pooling.read_write_split`): each
//! transaction runs where its first statement may run (`wire::sql::route`), a pure read in
//! autocommit on a replica (the primary when no replica has a connection for it), everything
//! else on the pool's one primary. A session holding a replica's connection is asked again
//! before each command (the relay on a replica stops before every command after the first,
//! `Tracker::pause_after_one`): a command the replica may not take makes the session give the
//! connection back and begin again on the primary, or, inside a transaction it cannot leave,
//! answers it with an ERR; no write reaches a replica.
//!
//! Apart from `pooled.rs` because a pool that does not split never comes here beyond one
//! `Option` test per transaction.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::info;

use super::prepared::Front;
use super::{client, Seat};
use crate::backends::balancer::roles::Primary;
use crate::backends::balancer::{Pool, Want};
use crate::backends::pooling::PoolError;
use crate::net::leg::LegStream;
use crate::proxy::session::{Context, SessionEnd};
use crate::wire::protocol::cmd;
use crate::wire::protocol::errors::code;
use crate::wire::sql::route::{replica_may_continue, target, Target};

/// The longest COM_QUERY read whole to decide where it runs; a longer one runs on the primary.
const ROUTE_MAX: usize = 64 * 1024;

/// A split session's side: where its transaction runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Split {
    /// Where the transaction at hand may run.
    pub(super) want: Want,
    /// The connection the session holds is one a write may not reach (a replica's, or a
    /// backend's that is not the pool's one primary now).
    pub(super) on_replica: bool,
}

/// What [`Seat::before_command`] made of the command at the front.
pub(super) enum Before {
    /// It runs on the connection the session holds (or on the one it begins with).
    Run,
    /// It was answered with an ERR: nothing to relay.
    Refused,
}

impl<'r> Seat<'_, 'r> {
    /// Where the transaction at hand may run (the pool's own order when it does not split).
    pub(super) fn want(&self) -> Want {
        self.split.map_or(Want::Any, |s| s.want)
    }

    /// Before the command at the front of the client's buffer, in a split pool: a session on a
    /// replica keeps its connection for a command the replica may take, gives it back for one
    /// it may not (the command then begins a transaction anew), and is answered with an ERR
    /// when it cannot give it back (a transaction open there, or a pin). A session without a
    /// connection learns where its next transaction may run.
    pub(super) async fn before_command<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<Before, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(split) = self.split else {
            return Ok(Before::Run);
        };
        // COM_QUIT ends the session where it is; COM_PING is answered by any server.
        let anywhere = front.is_none() && matches!(self.up.get(4), Some(&(cmd::QUIT | cmd::PING)));
        if self.conn.is_some() && split.on_replica && !anywhere {
            let text = self.front_text(ctx, client, front).await?;
            let dialect = self.observer.holding.dialect();
            let holding = &self.observer.holding;
            let stays = match &text {
                Some(t) if holding.in_transaction() => replica_may_continue(t, dialect),
                Some(t) => target(t, dialect) == Target::Replica,
                None => false,
            };
            if stays {
                return Ok(Before::Run);
            }
            if holding.in_transaction() || holding.pinned().is_some() {
                let backend = self.lease.backend().name.clone();
                let message = format!(
                    "backend {backend} is a replica and this session's {} is on it: \
                     only reads and the transaction's end may run there",
                    if holding.in_transaction() {
                        "transaction"
                    } else {
                        "connection"
                    }
                );
                info!(client = ctx.peer(), backend = %backend, "command refused on a replica");
                client::answer(client, &mut self.up, code::READ_ONLY_TRANSACTION, &message).await?;
                return Ok(Before::Refused);
            }
            // Between statements: the connection goes back, the command begins anew.
            if let Some(held) = self.let_go(ctx.worker) {
                self.wipe_and_return(held, ctx.worker).await;
            }
        }
        if self.conn.is_none() {
            let want = self.route(ctx, client, front).await?;
            if let Some(s) = self.split.as_mut() {
                s.want = want;
            }
        }
        Ok(Before::Run)
    }

    /// Reads the head of the client's next command while the session holds a replica's
    /// connection with nothing relayed (a command was just refused): where it may run is asked
    /// before it is relayed. Bounded by the idle timeout.
    pub(super) async fn read_head<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
    ) -> Result<(), SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let on_replica = self.split.is_some_and(|s| s.on_replica);
        if !on_replica || self.conn.is_none() || self.up.len() >= 5 {
            return Ok(());
        }
        let within = ctx.stop.idle_timeout.unwrap_or(Duration::from_secs(3600));
        match tokio::time::timeout(within, client::fill(client, &mut self.up, 5)).await {
            Ok(read) => Ok(read?),
            Err(_) => Err(crate::proxy::relay::RelayEnd::IdleTimeout.into()),
        }
    }

    /// Where a transaction that begins with the command at the front may run.
    async fn route<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<Want, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let holding = &self.observer.holding;
        // A pinned session's state is on the primary's connection; without autocommit every
        // statement opens a transaction that may write.
        if holding.pinned().is_some() || holding.autocommit_off() || holding.in_transaction() {
            return Ok(Want::Primary);
        }
        if front.is_none() && self.up.get(4) == Some(&cmd::PING) {
            return Ok(Want::Replica);
        }
        let dialect = holding.dialect();
        Ok(match self.front_text(ctx, client, front).await? {
            Some(text) => match target(&text, dialect) {
                Target::Replica | Target::ReadOnlyTransaction => Want::Replica,
                Target::Primary => Want::Primary,
            },
            None => Want::Primary,
        })
    }

    /// The statement text of the command at the front: a COM_QUERY's (read whole first, up
    /// to [`ROUTE_MAX`]), a prepare's, or an execute's statement; None for anything else.
    async fn front_text<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<Option<Vec<u8>>, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        match front {
            Some(Front::Prepare { end }) => return Ok(self.up.get(5..*end).map(<[u8]>::to_vec)),
            Some(Front::Statement {
                command: cmd::STMT_EXECUTE,
                id,
                ..
            }) => {
                let prepared = self.observer.statements.get(*id);
                return Ok(prepared.map(|p| p.text.to_vec()));
            }
            Some(_) => return Ok(None),
            None => {}
        }
        let Some(len) = crate::backends::pooling::command::payload_len(&self.up) else {
            return Ok(None);
        };
        if self.up.get(4) != Some(&cmd::QUERY) || self.up.get(3) != Some(&0) || len > ROUTE_MAX {
            return Ok(None);
        }
        if self.up.len() < 4 + len {
            let within = ctx.stop.idle_timeout.unwrap_or(Duration::from_secs(60));
            let read = client::fill(client, &mut self.up, 4 + len);
            match tokio::time::timeout(within, read).await {
                Ok(read) => read?,
                Err(_) => return Err(crate::proxy::relay::RelayEnd::IdleTimeout.into()),
            }
        }
        Ok(self.up.get(5..4 + len).map(<[u8]>::to_vec))
    }

    /// Whether the connection just taken is one a write may not reach.
    pub(super) fn note_where(&mut self, pool: &Pool) {
        let on_replica = !pool.takes_writes(self.lease.backend());
        if let Some(s) = self.split.as_mut() {
            s.on_replica = on_replica;
        }
    }
}

/// Waits (up to `within`) until `pool` has one primary: a switchover in progress, or a
/// promotion after a lost primary. The error says why none took the transaction.
pub(super) async fn wait_for_primary(pool: &Pool, within: Duration) -> Result<(), PoolError> {
    let started = Instant::now();
    loop {
        if matches!(pool.primary(), Primary::One(_)) {
            return Ok(());
        }
        if started.elapsed() >= within {
            let why = match pool.primary() {
                Primary::Several(all) => {
                    let names: Vec<&str> = all.iter().map(|b| b.name.as_str()).collect();
                    format!(
                        "pool {} has more than one writable backend ({}): no write runs \
                         until one is read-only",
                        pool.name,
                        names.join(", ")
                    )
                }
                _ => format!("pool {} has no writable primary", pool.name),
            };
            return Err(PoolError::NoPrimary {
                why,
                waited: started.elapsed(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
