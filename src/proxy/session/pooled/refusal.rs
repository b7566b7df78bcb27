//! A switchover under a split's writes: the old primary goes `read_only`, and until the next
//! health check says so the pool still sends it writes, which it refuses with ERR 1290. Such a
//! refusal of an autocommit write's first statement means nothing of it ran, so the client need
//! not see it: the relay withholds that ERR (`Steering::withhold`, asked once the statement is
//! answered and nothing of the answer was written), the proxy asks the server's own
//! `@@read_only` on that connection (the error alone could be the client's `SIGNAL`, or another
//! option's 1290), and when it is read-only the backend's role follows at once, the connection
//! goes back, and the statement runs again where the pool's next primary is (waiting for it up
//! to `wait_timeout`, as any write does during a switchover). Once per statement: a second
//! refusal reaches the client.
//!
//! A transaction left open on the old primary is left at the client's next `BEGIN`
//! ([`Seat::leave_a_demoted_primary`]): the proxy commits it there, as the server would, and
//! the new one begins on the new primary.
//!
//! Watched only for a transaction's first command when it is one whole COM_QUERY of at most
//! 64 KiB (the copy a pool across backends keeps for a retry) on a primary of `role: auto`,
//! whose role can change; the relay then stops after that command (`Tracker::pause_after_one`)
//! so that nothing the client pipelined behind it reaches the refusing server. A write inside
//! a `BEGIN` transaction, or a prepared statement's execute, still gets the server's error.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::info;

use super::prepared::Front;
use super::Seat;
use crate::backends::balancer::roles::Primary;
use crate::backends::balancer::{Backend, Want};
use crate::config::Role;
use crate::net::leg::LegStream;
use crate::proxy::relay::RelayEnd;
use crate::proxy::session::{Context, SessionEnd};
use crate::wire::protocol::errors::code;

/// Whether `response` is one whole ERR packet with code 1290 (and nothing else).
pub(super) fn read_only_refusal(response: &[u8]) -> bool {
    let Some(len) = crate::backends::pooling::command::payload_len(response) else {
        return false;
    };
    response.len() == 4 + len
        && response.get(4) == Some(&0xFF)
        && response.get(5..7) == Some(&code::OPTION_PREVENTS_STATEMENT.to_le_bytes()[..])
}

/// Whether a command's text may read what the statement before it left on its connection
/// (`LAST_INSERT_ID()`, `ROW_COUNT()`, `FOUND_ROWS()`, warnings, errors, `@@` variables):
/// such a command may not run again elsewhere. Any byte of those words, in any case, anywhere
/// (a string or a comment too) counts: a wrong yes only forgoes a replay.
pub(super) fn reads_traces(packet: &[u8]) -> bool {
    const WORDS: [&[u8]; 6] = [
        b"LAST_INSERT_ID",
        b"ROW_COUNT",
        b"FOUND_ROWS",
        b"WARNING",
        b"ERROR",
        b"@@",
    ];
    let text = packet.get(5..).unwrap_or_default();
    WORDS.iter().any(|w| {
        text.windows(w.len())
            .any(|window| window.eq_ignore_ascii_case(w))
    })
}

impl<'r> Seat<'_, 'r> {
    /// Whether the session holds its connection, between transactions, only for the command
    /// after a write (`Holding`'s one more command after changed rows, warnings or an insert
    /// id), in a split: that command, too, is the first of its own transaction.
    pub(super) fn kept_for_one_command(&self, fresh: bool) -> bool {
        let holding = &self.observer.holding;
        !fresh
            && self.split.is_some()
            && self.across.is_some()
            && !holding.in_transaction()
            && holding.pinned().is_none()
            && !holding.autocommit_off()
    }

    /// Whether the fresh transaction at hand has its first statement's refusal watched: a
    /// split's write on a backend whose role follows its server, not already run once more.
    pub(super) fn watches_refusal(&self, replaying: bool) -> bool {
        // Whatever the pool says of its primary now: another session's refusal may have just
        // made it none, after this one took its connection.
        !replaying
            && self.split.is_some()
            && self.want() == Want::Primary
            && self.lease.backend().role.configured() == Some(Role::Auto)
    }

    /// The relay withheld a 1290 answering `packet`, the transaction's first command: true when
    /// the server is read-only, and the statement is back at the front of the client's bytes,
    /// the connection given back (the session begins anew); false when the refusal was not for
    /// that and went to the client as the server sent it.
    pub(super) async fn replays_refused<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        packet: Option<BytesMut>,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let refusal = std::mem::take(&mut self.down);
        let read_only = match self.conn.as_mut() {
            Some(held) => held.read_only(self.deprecate_eof).await,
            None => None,
        };
        let series = self.across.map(|p| &p.split_metrics);
        let backend = std::sync::Arc::clone(self.lease.backend());
        if read_only == Some(true) {
            ctx.state.follow_role(&backend, true);
        }
        // Runs again only once another backend is the pool's one primary (a health check that
        // began before the server went read-only may still say it is writable).
        let next = match (read_only, self.across) {
            (Some(true), Some(pool)) => next_primary(pool, &backend).await,
            _ => false,
        };
        let Some(packet) = packet.filter(|_| next) else {
            if read_only.is_none() {
                self.drop_conn();
            }
            if let Some(series) = series {
                series.write_refusal_forwarded.inc();
            }
            let sent = async {
                client.write_all(&refusal).await?;
                client.flush().await
            };
            sent.await
                .map_err(|e| SessionEnd::from(RelayEnd::ClientIo(e)))?;
            return Ok(false);
        };
        if let Some(series) = series {
            series.write_replayed.inc();
        }
        info!(
            client = ctx.peer(),
            backend = %backend.name,
            "a write the primary refused as read-only runs again on the pool's next primary"
        );
        if let Some(held) = self.let_go(ctx.worker) {
            self.wipe_and_return(held, ctx.worker).await;
        }
        let mut up = packet;
        up.extend_from_slice(&self.up);
        self.up = up;
        self.replaying = true;
        Ok(true)
    }
}

impl<'r> Seat<'_, 'r> {
    /// A transaction open on a backend that takes no writes (a replica's read-only
    /// transaction, or a primary the cluster switched over under it), and the client begins
    /// another (sysbench does after an error it ignores): `BEGIN` would commit that transaction
    /// there first, then begin again on a server that refuses every write (or, on a replica,
    /// be refused), and the session would stay there. The proxy runs that `COMMIT` itself; when
    /// the server commits (the transaction wrote nothing a read-only server refused to commit),
    /// the connection goes back and the `BEGIN` begins anew where it may run. When it refuses,
    /// the `BEGIN` goes on as the session would have sent it.
    pub(super) async fn leave_a_demoted_primary<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<(), SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let holding = &self.observer.holding;
        let demoted = self
            .across
            .is_some_and(|pool| pool.has_roles() && !pool.takes_writes(self.lease.backend()));
        if !demoted || !holding.in_transaction() || holding.pinned().is_some() {
            return Ok(());
        }
        let begins = match self.front_text(ctx, client, front).await? {
            Some(text) => matches!(
                crate::wire::sql::classify(text),
                crate::wire::sql::Statement::Begin
            ),
            None => false,
        };
        if !begins {
            return Ok(());
        }
        let committed = match self.conn.as_mut() {
            Some(held) => held.commit().await,
            None => return Ok(()),
        };
        match committed {
            Some(true) => {
                info!(
                    client = ctx.peer(),
                    backend = %self.lease.backend().name,
                    "a BEGIN leaves a backend that takes no writes: its open transaction committed there, the new one begins where it may run"
                );
                if let Some(held) = self.let_go(ctx.worker) {
                    self.wipe_and_return(held, ctx.worker).await;
                }
                Ok(())
            }
            Some(false) => Ok(()),
            // Its server stopped answering: the transaction is lost, as with a lost server.
            None => {
                self.drop_conn();
                Err(crate::proxy::relay::RelayEnd::BackendClosed { pending: 1 }.into())
            }
        }
    }
}

/// Waits (up to the pool's `wait_timeout`) until `pool`'s one primary is another backend than
/// `refused`: true once it is.
async fn next_primary(pool: &crate::backends::balancer::Pool, refused: &Backend) -> bool {
    let started = std::time::Instant::now();
    loop {
        if let Primary::One(p) = pool.primary() {
            if !std::ptr::eq(&**p, refused) {
                return true;
            }
        }
        if started.elapsed() >= pool.pooling.wait_timeout {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::read_only_refusal;

    fn err(code: u16, message: &str) -> Vec<u8> {
        let mut payload = vec![0xFF];
        payload.extend_from_slice(&code.to_le_bytes());
        payload.extend_from_slice(b"#HY000");
        payload.extend_from_slice(message.as_bytes());
        let mut packet = vec![payload.len() as u8, 0, 0, 1];
        packet.extend_from_slice(&payload);
        packet
    }

    #[test]
    fn a_command_that_reads_the_last_statements_traces_is_not_run_again() {
        let packet = |text: &str| [&[0, 0, 0, 0, 3][..], text.as_bytes()].concat();
        for text in [
            "INSERT INTO t2 VALUES (LAST_INSERT_ID())",
            "select row_count()",
            "SELECT FOUND_ROWS()",
            "SHOW WARNINGS",
            "SHOW COUNT(*) ERRORS",
            "UPDATE t SET v = @@warning_count",
        ] {
            assert!(super::reads_traces(&packet(text)), "{text}");
        }
        for text in [
            "UPDATE sbtest1 SET k=k+1 WHERE id=5",
            "INSERT INTO t VALUES (1)",
        ] {
            assert!(!super::reads_traces(&packet(text)), "{text}");
        }
    }

    #[test]
    fn only_one_whole_err_1290_is_a_refusal() {
        let refused = err(
            1290,
            "The MariaDB server is running with the --read-only option",
        );
        assert!(read_only_refusal(&refused));
        assert!(!read_only_refusal(&err(1062, "Duplicate entry")));
        // Cut, or followed by anything: not an answer that is only the refusal.
        assert!(!read_only_refusal(&refused[..refused.len() - 1]));
        let mut more = refused.clone();
        more.extend_from_slice(&refused);
        assert!(!read_only_refusal(&more));
        // An OK (a first statement that ran), then anything.
        assert!(!read_only_refusal(&[7, 0, 0, 1, 0, 1, 0, 2, 0, 0, 0]));
        assert!(!read_only_refusal(&[]));
        assert!(!read_only_refusal(&[1, 0, 0, 1, 0xFF]));
    }
}
