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
use crate::config::{CausalReads, ReadsWithoutReplica, RuleRoute};
use crate::net::leg::LegStream;
use crate::proxy::session::{Context, SessionEnd};
use crate::wire::protocol::cmd;
use crate::wire::protocol::errors::code;
use crate::wire::sql::gtid::GtidPos;
use crate::wire::sql::retryable_read;
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
    /// The transaction on the primary may write: its position is learned when it ends (not
    /// for one read in autocommit that the primary had to take: `FOR UPDATE`, `@@x`, `SHOW`).
    pub(super) may_write: bool,
    /// The session's route is read-only: every command runs on a replica, and one that may
    /// write is refused ([`Seat::read_only_command`]).
    pub(super) read_only: bool,
}

/// What the split reads of a statement's text (`wire::sql::route`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    target: Target,
    /// Not one read a retry could run again: its transaction's position is learned.
    may_write: bool,
    /// It may run inside a transaction on a replica (read only for a session in one).
    may_continue: bool,
}

impl Reading {
    fn of(text: &[u8], dialect: crate::wire::sql::Dialect, in_transaction: bool) -> Self {
        let target = target(text, dialect);
        Reading {
            target,
            may_write: target == Target::Primary && !retryable_read(text, dialect),
            may_continue: target == Target::Replica
                || in_transaction && replica_may_continue(text, dialect),
        }
    }

    /// What a prepared statement keeps of it.
    fn cached(self) -> (Target, bool) {
        (self.target, self.may_write)
    }
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

    /// Whether the relay stops before each command after the first, for the session to ask
    /// where it may run (`Tracker::pause_after_one`): on a replica, for a read-only route, and
    /// on a primary that went read-only under the session (only a backend whose role follows
    /// its server can: checked first, as the pool's election walks its backends).
    pub(super) fn asks_each_command(&self) -> bool {
        let Some(split) = self.split else {
            return false;
        };
        if split.on_replica || split.read_only {
            return true;
        }
        let backend = self.lease.backend();
        backend.role.configured() == Some(crate::config::Role::Auto)
            && self.across.is_some_and(|p| !p.takes_writes(backend))
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
        if split.read_only {
            return self.read_only_command(ctx, client, front).await;
        }
        // COM_QUIT ends the session where it is; COM_PING is answered by any server.
        let anywhere = front.is_none() && matches!(self.up.get(4), Some(&(cmd::QUIT | cmd::PING)));
        if self.conn.is_some() {
            self.leave_a_demoted_primary(ctx, client, front).await?;
        }
        if self.conn.is_some() && split.on_replica && !anywhere {
            let read = self.read_front(ctx, client, front).await?;
            // A rule's `route: replica` keeps the command here (one read-only statement).
            let routed_here = self
                .rule_route(front, (Want::Primary, false))
                .is_some_and(|(want, _)| want == Want::Replica);
            let holding = &self.observer.holding;
            let stays = match read {
                Some(read) if holding.in_transaction() => read.may_continue,
                Some(read) => read.target == Target::Replica,
                None => false,
            } || self.reads_diagnostics_here(front)
                || routed_here;
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
            let (want, may_write) = self.route(ctx, client, front).await?;
            if let Some(s) = self.split.as_mut() {
                s.want = want;
                s.may_write = may_write;
            }
            if want == Want::Replica && !anywhere && self.refuses_reads(ctx) {
                let why = self.across.and_then(|pool| replicas_out(ctx, pool));
                let message = format!(
                    "no replica of pool {} may take reads now ({}), and \
                     pooling.reads_without_replica is error",
                    self.across.map_or("", |p| p.name.as_str()),
                    why.map_or_else(String::new, |(_, why)| why)
                );
                if let Some(pool) = self.across {
                    pool.split_metrics.read_refused.inc();
                }
                client::answer(client, &mut self.up, code::UNKNOWN_ERROR, &message).await?;
                return Ok(Before::Refused);
            }
        }
        Ok(Before::Run)
    }

    /// Whether the text at the front only reads the diagnostics area the replica's last
    /// answer left (`SHOW WARNINGS`, `SELECT @@warning_count`, ...: `sql::reads_diagnostics`)
    /// and writes nothing in any reading: it runs there, where that area is, not on the
    /// primary, where it is empty. Its text was read whole by `read_front` already.
    fn reads_diagnostics_here(&self, front: Option<&Front>) -> bool {
        let text = match front {
            Some(Front::Prepare { end }) => self.up.get(5..*end),
            Some(_) => None,
            None => crate::backends::pooling::command::payload_len(&self.up)
                .filter(|_| self.up.get(4) == Some(&cmd::QUERY))
                .and_then(|len| self.up.get(5..4 + len)),
        };
        let dialect = self.observer.holding.dialect();
        text.is_some_and(|text| {
            crate::wire::sql::reads_diagnostics(text)
                && !crate::wire::sql::route::replica_refuses(text, dialect)
        })
    }

    /// Whether a read must be refused: no replica is in rotation and the pool says reads do
    /// not go to the primary then.
    fn refuses_reads(&self, ctx: &Context<'r>) -> bool {
        self.across.is_some_and(|pool| {
            pool.pooling.reads_without_replica == ReadsWithoutReplica::Error
                && replicas_out(ctx, pool).is_some()
        })
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

    /// Where a transaction that begins with the command at the front may run, and whether it
    /// may write.
    async fn route<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<(Want, bool), SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let holding = &self.observer.holding;
        // A pinned session's state is on the primary's connection; without autocommit every
        // statement opens a transaction that may write.
        if holding.pinned().is_some() || holding.autocommit_off() || holding.in_transaction() {
            return Ok((Want::Primary, true));
        }
        if front.is_none() && self.up.get(4) == Some(&cmd::PING) {
            return Ok((Want::Replica, false));
        }
        let read = match self.read_front(ctx, client, front).await? {
            Some(read) => match read.target {
                Target::Replica | Target::ReadOnlyTransaction => (Want::Replica, false),
                Target::Primary => (Want::Primary, read.may_write),
            },
            None => (Want::Primary, true),
        };
        Ok(self.rule_route(front, read).unwrap_or(read))
    }

    /// A query rule's `route:` for the COM_QUERY at the front (read whole by `read_front`,
    /// which made `read` of it): the primary for anything (a read sent there still writes
    /// nothing the session must wait for); a replica only for a text that writes in no reading.
    fn rule_route(&mut self, front: Option<&Front>, read: (Want, bool)) -> Option<(Want, bool)> {
        if front.is_some() || self.up.get(4) != Some(&cmd::QUERY) {
            return None;
        }
        let len = crate::backends::pooling::command::payload_len(&self.up)?;
        let text = self.up.get(5..4 + len)?;
        match self.observer.inner.rule_route(text)? {
            RuleRoute::Primary => Some((Want::Primary, read.1)),
            // One statement read-only in every reading (a SELECT, whatever functions it calls):
            // the operator vouches for the functions, the text for the rest.
            RuleRoute::Replica => {
                crate::wire::sql::read_only(text).then_some((Want::Replica, false))
            }
        }
    }

    /// What the split reads of the statement at the front (see [`front_text`]): read once per
    /// prepared statement, kept with it.
    async fn read_front<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<Option<Reading>, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let dialect = self.observer.holding.dialect();
        let in_transaction = self.observer.holding.in_transaction();
        if let Some(Front::Statement {
            command: cmd::STMT_EXECUTE,
            id,
            ..
        }) = front
        {
            let Some(prepared) = self.observer.statements.get_mut(*id) else {
                return Ok(None);
            };
            let (target, may_write) = *prepared
                .route
                .get_or_insert_with(|| Reading::of(&prepared.text, dialect, false).cached());
            // Inside a transaction the text is read again (rare: a read-only one on a replica).
            let may_continue = target == Target::Replica
                || in_transaction && replica_may_continue(&prepared.text, dialect);
            return Ok(Some(Reading {
                target,
                may_write,
                may_continue,
            }));
        }
        let Some(text) = self.front_text(ctx, client, front).await? else {
            return Ok(None);
        };
        Ok(Some(Reading::of(text, dialect, in_transaction)))
    }

    /// The statement text of the command at the front: a COM_QUERY's (read whole first, up
    /// to [`ROUTE_MAX`]) or a prepare's; None for anything else.
    pub(super) async fn front_text<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<Option<&[u8]>, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        match front {
            Some(Front::Prepare { end }) => return Ok(self.up.get(5..*end)),
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
        Ok(self.up.get(5..4 + len))
    }

    /// Whether the connection just taken is one a write may not reach; counted by role, and a
    /// read that a replica could have taken but the primary runs counted as such.
    pub(super) fn note_where(&mut self, ctx: &Context<'r>, pool: &Pool) {
        if self.conn.is_none() {
            return;
        }
        let on_replica = !pool.takes_writes(self.lease.backend());
        let series = &pool.split_metrics;
        if on_replica {
            series.on_replica.inc();
        } else {
            series.on_primary.inc();
            if self.want() == Want::Replica {
                match replicas_out(ctx, pool) {
                    Some((true, _)) => series.read_lag.inc(),
                    _ => series.read_no_replica.inc(),
                }
            }
        }
        if let Some(s) = self.split.as_mut() {
            s.on_replica = on_replica;
        }
    }

    /// What a read on a replica must see now (`pooling.causal_reads`): the session's own
    /// writes, or every write through the pool; None when nothing.
    fn must_see(&self, pool: &Pool) -> Option<GtidPos> {
        let position = match pool.pooling.causal_reads {
            CausalReads::None => return None,
            CausalReads::Session => self.written.clone(),
            CausalReads::Global => pool.written(),
        };
        (!position.is_empty()).then_some(position)
    }

    /// A transaction on a replica begins: when the replica is not known to have applied what
    /// the read must see, the proxy waits there first (`MASTER_GTID_WAIT`, its own command on
    /// the connection, bounded by `pooling.causal_timeout`); past the bound the connection goes
    /// back and the transaction takes the primary's. Nothing reaches the client meanwhile.
    /// False when the command was answered with an ERR (no connection came).
    pub(super) async fn see_own_writes<C>(
        &mut self,
        ctx: &Context<'r>,
        client: &mut LegStream<C>,
        front: Option<&Front>,
    ) -> Result<bool, SessionEnd>
    where
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let (Some(pool), Some(split)) = (self.across, self.split) else {
            return Ok(true);
        };
        if !split.on_replica || self.conn.is_none() {
            return Ok(true);
        }
        let Some(want) = self.must_see(pool) else {
            return Ok(true);
        };
        let series = &pool.split_metrics;
        let role = &self.lease.backend().role;
        if role.applied_covers(&want) {
            series.causal_covered.inc();
            return Ok(true);
        }
        let started = Instant::now();
        let within = pool.pooling.causal_timeout;
        let position = want.to_string();
        let waited = match self.conn.as_mut() {
            Some(held) => held.gtid_wait(&position, within, self.deprecate_eof).await,
            None => None,
        };
        series.causal_wait.observe(started.elapsed().as_secs_f64());
        match waited {
            Some(true) => {
                series.causal_waited.inc();
                self.lease.backend().role.learn_applied(&want);
                return Ok(true);
            }
            Some(false) => {
                series.causal_timed_out.inc();
                if let Some(held) = self.let_go(ctx.worker) {
                    self.wipe_and_return(held, ctx.worker).await;
                }
            }
            None => {
                series.causal_timed_out.inc();
                self.drop_conn();
            }
        }
        info!(
            client = ctx.peer(),
            backend = %self.lease.backend().name,
            position = %position,
            "a read goes to the primary: no replica applied the session's writes in time"
        );
        series.read_causal_timeout.inc();
        if let Some(s) = self.split.as_mut() {
            s.want = Want::Primary;
        }
        self.begin(ctx, client, front).await
    }

    /// A transaction on the primary ended: under `pooling.causal_reads`, the position of what
    /// it wrote (`@@last_gtid`, the proxy's own query on the connection) is what the session's
    /// later reads must see, and with `global` every session's. True when it asked (it
    /// awaited the server).
    pub(super) async fn learn_write(&mut self) -> bool {
        let (Some(pool), Some(split)) = (self.across, self.split) else {
            return false;
        };
        if split.on_replica || !split.may_write || pool.pooling.causal_reads == CausalReads::None {
            return false;
        }
        // MariaDB's `@@last_gtid` is this connection's last write; MySQL has no such
        // variable, and its `@@gtid_executed`, everything the server executed, covers the
        // write too (from 5.7.5, which has `WAIT_FOR_EXECUTED_GTID_SET` for the reads' waits).
        let server = self.observer.holding.dialect().server;
        let mariadb = server.is_some_and(|s| s.mariadb);
        let mysql = server.is_some_and(|s| !s.mariadb && s.version >= 50_705);
        if !mariadb && !mysql {
            return false;
        }
        let Some(held) = self.conn.as_mut() else {
            return false;
        };
        let asked = if mariadb {
            held.last_gtid(self.deprecate_eof).await
        } else {
            held.gtid_executed(self.deprecate_eof).await
        };
        match asked {
            Some(text) => {
                if let Ok(position) = GtidPos::parse(&text) {
                    if !position.is_empty() {
                        self.written.merge(&position);
                        pool.learn_written(&position);
                    }
                }
            }
            None => self.drop_conn(),
        }
        true
    }

    /// Closes the connection the session holds (the proxy's own query on it failed).
    pub(super) fn drop_conn(&mut self) {
        if let Some(live) = &self.live {
            live.store(
                crate::backends::kill::NO_THREAD,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        if let Some(held) = self.conn.take() {
            held.quit();
        }
    }
}

/// When no replica of `pool` may take a read now (none is a replica in rotation): whether one
/// is out for its replication lag, and what each backend but the primary is, for an ERR.
fn replicas_out(ctx: &Context<'_>, pool: &Pool) -> Option<(bool, String)> {
    let now = Instant::now();
    let members = pool.members();
    if members
        .iter()
        .any(|b| b.role.serves_reads() && !ctx.set.out_of_rotation(b, now))
    {
        return None;
    }
    let mut lag = false;
    let mut each = Vec::new();
    for b in members.iter().filter(|b| !pool.takes_writes(b)) {
        lag |= b.role.lagging();
        let what = if b.role.lagging() {
            "past max_replication_lag"
        } else if ctx.set.out_of_rotation(b, now) {
            "out of rotation"
        } else {
            "not a replica now"
        };
        each.push(format!("{}: {what}", b.name));
    }
    Some((lag, each.join(", ")))
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
