//! What a session's relay reports besides bytes: completed commands into its backend's
//! metrics, digests and capture ([`Observer`]); and how it steers the relay ([`Steering`]): KILLs
//! mapped (see `crate::backends::kill`), run elsewhere or resolved by a peer, and statements
//! kept for a capture that began mid-session.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tracing::{info, trace};

use super::Context;
use crate::backends::balancer::Backend;
use crate::backends::kill::{self, Decision, KillRequest, Mapping};
use crate::proxy::auth::Authenticated;
use crate::proxy::relay::{KillRewrite, Observer, Steering};
use crate::proxy::state::ProxyState;
use crate::telemetry::capture;
use crate::telemetry::digest;
use crate::telemetry::metrics::BackendStats;
use crate::wire::protocol::response::{cmd, Completed};

/// Feeds a session's commands and bytes into its backend's metrics, and maps KILLs.
pub(super) struct Recorder<'a> {
    stats: &'a BackendStats,
    worker: usize,
    backend: &'a Arc<Backend>,
    state: &'a Arc<ProxyState>,
    /// Who the client authenticated as: a KILL runs elsewhere only for a target of this user.
    /// None once it sent a COM_CHANGE_USER (who it is then is not read from the exchange).
    user: Option<&'a str>,
    /// The session's own proxy id (its recorded user is cleared on COM_CHANGE_USER).
    proxy_id: Option<u32>,
    /// One KILL needing a peer or another backend in flight per session.
    turn: Arc<Semaphore>,
    /// Its statements' digests, when the table is on.
    digests: Option<digest::SessionDigests>,
    /// Its capture, while one runs that takes it; `capture_seen` is the capture generation it
    /// last looked at, `who` what its start record says.
    capture: Option<capture::SessionCapture>,
    capture_seen: u64,
    who: capture::SessionProfile<'a>,
    /// The session's pool has roles: a statement that may write is refused while its backend
    /// takes no writes (see [`Recorder::refuse_write`]).
    guard_writes: bool,
    /// The query rules it asks (see [`super::rules`]); None when no rule may match it.
    rules: Option<super::rules::SessionRules>,
    /// When this second of lookups began, and how many it made (see
    /// [`may_look_up_thread`](Recorder::may_look_up_thread)).
    thread_lookups: (Option<std::time::Instant>, u32),
}

/// How many KILLs naming a server's own thread id a session may have looked up among the
/// pool's sessions per second (each a scan of the KILL registry under its lock): a client
/// pipelining KILLs cannot hold that lock, which every session's start and end takes, for
/// long. Past it, a KILL passes to the backend unchanged, as outside a pool across backends.
const THREAD_LOOKUPS_PER_SECOND: u32 = 64;

impl<'a> Recorder<'a> {
    /// The recorder of a session logged in to `backend` as `auth` says, greeted with `proxy_id`.
    pub(super) fn new(
        ctx: &Context<'a>,
        backend: &'a Arc<Backend>,
        auth: &'a Authenticated,
        proxy_id: Option<u32>,
    ) -> Self {
        let (state, worker) = (ctx.state, ctx.worker);
        let ident = || digest::Ident::new(&backend.name, &backend.pool, &auth.user, &auth.schema);
        let digests = digest::SessionDigests::start(&state.digests, worker, ident);
        let who = capture::SessionProfile {
            user: &auth.user,
            schema: &auth.schema,
            pool: &backend.pool,
            backend: &backend.name,
            client: ctx.peer(),
            capabilities: auth.negotiated.capabilities,
            charset: auth.charset,
        };
        let capture_seen = state.capture.generation();
        let capture = state.capture.join(&who, false, 0);
        Recorder {
            digests,
            capture,
            capture_seen,
            who,
            stats: &backend.stats,
            worker,
            backend,
            state,
            user: Some(&auth.user),
            proxy_id,
            turn: Arc::new(Semaphore::new(1)),
            guard_writes: false,
            rules: None,
            thread_lookups: (None, 0),
        }
    }

    /// From now on every statement is matched against `rules` (the tracker hands every
    /// statement over whole, `Tracker::guard_statements`).
    pub(super) fn follow_rules(&mut self, rules: super::rules::SessionRules) {
        self.rules = Some(rules);
    }

    /// The message of the query rule that refuses a COM_STMT_PREPARE of `text` the session
    /// prepares itself (a pooled session), if one does.
    pub(super) fn rule_refuses_prepare(&mut self, text: &[u8]) -> Option<String> {
        let user = self.user;
        self.rules.as_mut()?.refuses_prepare(user, text)
    }

    /// From now on a statement that may write is refused while the session's backend takes
    /// no writes (its pool has roles; the tracker hands every statement over whole,
    /// `Tracker::guard_statements`).
    pub(super) fn guard_writes(&mut self) {
        self.guard_writes = true;
    }

    /// Whether the session's backend takes writes now (its pool's one primary).
    fn takes_writes(&self) -> bool {
        let set = self.state.backends();
        set.pool(&self.backend.pool)
            .is_none_or(|pool| pool.takes_writes(self.backend))
    }

    /// The packet that goes instead of statement `packet` (header first) when the session's
    /// backend takes no writes now and the statement may write (`route::replica_refuses`): a
    /// `SIGNAL` the backend answers with ERR 1290 naming it, so the client reads the refusal
    /// in its answer's place and the tracker follows it as any answer. Nothing of the
    /// statement reaches the server.
    fn refuse_write(&self, packet: &[u8]) -> Option<Vec<u8>> {
        let (&command, text) = packet.get(4..)?.split_first()?;
        if command != cmd::QUERY && command != cmd::STMT_PREPARE {
            return None;
        }
        if self.takes_writes() {
            return None;
        }
        let set = self.state.backends();
        let pool = set.pool(&self.backend.pool)?;
        let dialect = crate::wire::sql::Dialect::default();
        if !crate::wire::sql::route::replica_refuses(text, dialect) {
            return None;
        }
        let why = pool.why_no_writes(self.backend);
        info!(backend = %self.backend.name, "statement refused: {why}");
        Some(super::rules::signal_packet(
            crate::wire::protocol::errors::code::OPTION_PREVENTS_STATEMENT,
            "HY000",
            &why,
        ))
    }

    /// The session's statements run on `backend` from now on (a pool across backends moved
    /// it): its metrics, digests and a KILL it sends follow, and a capture that takes it writes
    /// a move record. A capture starting later names this backend in its start record; one
    /// that runs keeps the session whatever its filter's backend (it chose by the start).
    pub(super) fn moved_to(&mut self, backend: &'a Arc<Backend>) {
        if Arc::ptr_eq(self.backend, backend) {
            return;
        }
        self.backend = backend;
        self.stats = &backend.stats;
        self.who.backend = &backend.name;
        if let Some(d) = &mut self.digests {
            d.moved_to(&backend.name);
        }
        if let Some(cap) = &mut self.capture {
            cap.moved_to(&backend.name);
        }
    }

    /// The session's last command lost its server before any answer; `again`: it is sent once
    /// more, next, on the connection the session holds now (see
    /// [`capture::SessionCapture::lost_unanswered`]).
    pub(super) fn lost_unanswered(&mut self, again: bool) {
        if let Some(cap) = &mut self.capture {
            cap.lost_unanswered(again);
        }
    }

    /// The session asked the server for its own id (see `kill::Registry::told`).
    pub(super) fn told_thread(&self) {
        if let Some(id) = self.proxy_id {
            self.state.kills.told(id);
        }
    }

    /// Where a query rule sends the transaction COM_QUERY `text` begins, if one does.
    pub(super) fn rule_route(&mut self, text: &[u8]) -> Option<crate::config::RuleRoute> {
        let user = self.user;
        self.rules.as_mut()?.route(user, text)
    }

    /// The pool of the session's backend.
    pub(super) fn pool(&self) -> &str {
        &self.backend.pool
    }

    /// Who the client authenticated as (None after a COM_CHANGE_USER).
    pub(super) fn user(&self) -> Option<&str> {
        self.user
    }

    /// Whether the session may look a server thread id up among the pool's sessions now
    /// (at most [`THREAD_LOOKUPS_PER_SECOND`]); counts the lookup.
    pub(super) fn may_look_up_thread(&mut self) -> bool {
        let now = std::time::Instant::now();
        let (since, count) = &mut self.thread_lookups;
        if since.is_none_or(|at| now.duration_since(at) >= std::time::Duration::from_secs(1)) {
            *since = Some(now);
            *count = 0;
        }
        if *count >= THREAD_LOOKUPS_PER_SECOND {
            return false;
        }
        *count += 1;
        true
    }

    /// The killer a KILL is mapped for; `across`: a server thread id may be looked up among
    /// the pool's sessions.
    fn killer(&self, across: bool) -> kill::Killer<'_> {
        kill::Killer {
            backend: self.backend,
            user: self.user,
            can_kill_elsewhere: self.state.killer.configured(),
            across,
        }
    }

    /// Whether the session's pool shares server connections across its backends (read per
    /// KILL, which is rare).
    fn across(&self) -> bool {
        let set = self.state.backends();
        set.pool(&self.backend.pool)
            .is_some_and(|p| p.pooling.across_backends)
    }

    /// What the tracker must keep of statement packets now (0: none).
    pub(super) fn statement_limit(&self) -> usize {
        match (&self.capture, &self.digests) {
            (Some(_), _) => capture::KEEP,
            (None, Some(d)) => d.read_limit(),
            (None, None) => 0,
        }
    }

    /// A KILL of another instance's id: asks that instance, then maps its answer here.
    fn ask_peer(&self, request: KillRequest, peer: crate::config::Peer) -> KillRewrite {
        let state = Arc::clone(self.state);
        let backend = Arc::clone(self.backend);
        let user = self.user.map(str::to_owned);
        let turn = Arc::clone(&self.turn);
        let across = self.across();
        KillRewrite::Later(Box::pin(async move {
            let answer = state.peers.ask(&peer, &request, Arc::clone(&turn)).await;
            let killer = kill::Killer {
                backend: &backend,
                user: user.as_deref(),
                can_kill_elsewhere: state.killer.configured(),
                across,
            };
            let ours = state.backends().backends().to_vec();
            let decision = kill::rewrite_remote(&request, &answer, &killer, &ours);
            kill::peer::log_answer(&decision, &answer, &backend, &peer, &request);
            run_decision(state, decision, turn).await
        }))
    }
}

/// The packet replacing a KILL: its own, or after running it on another backend.
async fn run_decision(state: Arc<ProxyState>, decision: Decision, turn: Arc<Semaphore>) -> Vec<u8> {
    match decision.elsewhere {
        Some(elsewhere) => {
            let leg = state.own_connect_options(&elsewhere.backend);
            state.killer.run(&elsewhere, leg, turn).await
        }
        None => decision.packet,
    }
}

impl Observer for Recorder<'_> {
    fn completed(&mut self, c: &Completed) {
        self.stats.record(self.worker, c);
        if let Some(d) = &mut self.digests {
            d.completed(c);
        }
        if let Some(cap) = &mut self.capture {
            cap.completed(c);
        }
        if let Some(rules) = &mut self.rules {
            rules.completed(c);
        }
        if c.command == cmd::CHANGE_USER {
            // Who the session is now is not read from the exchange: from here on a KILL from
            // another backend is refused as another user's, and so are its own KILLs there.
            self.user = None;
            if let Some(id) = self.proxy_id {
                self.state.kills.set_user(id, None);
            }
        }
        trace!(
            backend = %self.backend.name,
            command = c.command,
            kind = c.kind().as_str(),
            latency_us = c.latency.as_micros() as u64,
            first_byte_us = c.first_byte.as_micros() as u64,
            "command completed"
        );
    }

    fn relayed(&mut self, to_backend: bool, n: usize) {
        self.stats.relayed(self.worker, to_backend, n);
    }

    fn statement(&mut self, command: u8, payload: &[u8]) -> u64 {
        if let Some(cap) = &mut self.capture {
            cap.statement(command, payload);
        }
        match &mut self.digests {
            Some(d) => d.statement(command, payload),
            None => 0,
        }
    }
}

impl Steering for Recorder<'_> {
    #[inline]
    fn client_scan(&mut self, in_flight: usize) -> Option<usize> {
        let generation = self.state.capture.generation();
        if generation == self.capture_seen {
            return None;
        }
        self.capture_seen = generation;
        self.state
            .capture
            .refresh(&mut self.capture, &self.who, in_flight)
            .then(|| self.statement_limit())
    }

    fn refuses_long_statements(&self) -> bool {
        (self.guard_writes && !self.takes_writes())
            || self
                .rules
                .as_ref()
                .is_some_and(|r| r.refuses_long(self.user))
    }

    fn rewrite_kill(&mut self, packet: &[u8]) -> Option<KillRewrite> {
        if let Some(rules) = &mut self.rules {
            if let Some(instead) = rules.apply(self.user, packet) {
                return Some(instead);
            }
        }
        if self.guard_writes {
            if let Some(refusal) = self.refuse_write(packet) {
                return Some(KillRewrite::Now(refusal));
            }
        }
        let request = kill::parse(packet.get(4..)?)?;
        let own_id = u32::try_from(request.id).is_ok_and(kill::is_proxy_id);
        let across = self.across() && (own_id || self.may_look_up_thread());
        let decision = kill::rewrite(&request, &self.state.kills, &self.killer(across))?;
        if let Mapping::OtherInstance(instance) = decision.mapping {
            if let Some(peer) = self.state.peers.of(instance) {
                return Some(self.ask_peer(request, peer.clone()));
            }
        }
        info!(backend = %self.backend.name, target = request.id, "{}", decision.mapping.describe());
        if decision.elsewhere.is_none() {
            return Some(KillRewrite::Now(decision.packet));
        }
        let run = run_decision(Arc::clone(self.state), decision, Arc::clone(&self.turn));
        Some(KillRewrite::Later(Box::pin(run)))
    }
}
