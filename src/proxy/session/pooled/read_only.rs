//! A read-only route's session (`routes[].read_only`, with a split pool): every command runs
//! on a replica (the one it holds, else any, never the primary), and a statement that may write
//! in any reading is answered with ERR 1290 and never sent. Apart from `split.rs`, which asks
//! here first for such a session and nothing else.

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::info;

use super::client;
use super::prepared::Front;
use super::split::Before;
use super::Seat;
use crate::backends::balancer::Want;
use crate::net::leg::LegStream;
use crate::proxy::session::{Context, SessionEnd};
use crate::wire::protocol::cmd;
use crate::wire::protocol::errors::code;

impl<'r> Seat<'_, 'r> {
    /// A read-only route's session (`routes[].read_only`): every command runs on a replica
    /// (the one it holds, else any, never the primary), and a statement that may write in any
    /// reading (`route::replica_refuses`: a write, DDL, a procedure, a call the allow-list does
    /// not know, several statements), or one too long to read whole, is answered with ERR
    /// 1290 and never sent.
    pub(super) async fn read_only_command<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<Before, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let text = match front {
            Some(Front::Prepare { .. }) => true,
            // Only statements that may not write were prepared.
            Some(_) => false,
            None => self.up.get(4) == Some(&cmd::QUERY),
        };
        let writes = if text {
            let dialect = self.observer.holding.dialect();
            match self.front_text(ctx, client, front).await? {
                Some(text) => crate::wire::sql::route::replica_refuses(text, dialect),
                None => true,
            }
        } else {
            false
        };
        if writes {
            info!(
                client = ctx.peer(),
                "a statement that may write refused: the session's route is read-only"
            );
            let message = "this session's route is read-only: a statement that may write (or \
                           that cannot be read whole) is refused, nothing ran";
            client::answer(
                client,
                &mut self.up,
                code::OPTION_PREVENTS_STATEMENT,
                message,
            )
            .await?;
            return Ok(Before::Refused);
        }
        if let Some(s) = self.split.as_mut() {
            s.want = Want::ReplicaOnly;
            s.may_write = false;
        }
        // Its login went to the primary (the roles were not known yet): the connection goes
        // back at the first boundary, and the command begins on a replica.
        let on_primary = self.split.is_some_and(|s| !s.on_replica);
        if on_primary && self.conn.is_some() && self.observer.holding.releasable() {
            if let Some(held) = self.let_go(ctx.worker) {
                self.wipe_and_return(held, ctx.worker).await;
            }
        }
        Ok(Before::Run)
    }
}
