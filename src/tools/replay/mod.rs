//! `mysql-lb replay`: runs a capture (`crate::telemetry::capture`) against a target server, each captured
//! session on its own connection, its commands in order at their captured times scaled by the
//! speed (or back to back), then reports captured against replayed per digest.
//!
//! A session waits for each response before its next command, as its client did (a pipelining
//! client's commands go one at a time). The first connection the target refuses, or that fails
//! mid-replay, ends the whole replay: a half-replayed workload says little, so the report covers
//! what ran and says why it ended.

pub mod cli;
mod conn;
mod html;
pub mod load;
pub mod plan;
pub mod report;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::config::BackendAddr;
use crate::wire::protocol::response::cmd;
use conn::Conn;
use load::CapturedSession;
use plan::{Plan, Planner};
use report::{Replayed, Report, Sample};

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Captured time divided by this (0.1 to 100).
    Times(f64),
    /// Each session's commands back to back, all sessions at once.
    AsFastAsPossible,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub dir: PathBuf,
    pub target: BackendAddr,
    /// The account for sessions whose captured user `accounts` does not name: (user, password).
    pub account: Option<(String, String)>,
    /// Captured user → (user, password).
    pub accounts: HashMap<String, (String, String)>,
    pub speed: Speed,
    pub read_only: bool,
    /// Replay only the first this many captured sessions.
    pub sessions: Option<usize>,
    /// Print a progress line on stderr every second.
    pub progress: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Load(#[from] load::LoadError),
}

/// Shared by the session tasks.
struct Ctx {
    opts: Options,
    start: Instant,
    /// Captured time of the first session: it is replayed at `start`.
    t0: u64,
    abort: CancellationToken,
    ended_early: Mutex<Option<String>>,
    done: AtomicU64,
    new_errors: AtomicU64,
    open: AtomicU64,
}

impl Ctx {
    fn due(&self, t_us: u64) -> Option<Instant> {
        match self.opts.speed {
            Speed::AsFastAsPossible => None,
            Speed::Times(x) => {
                let offset = Duration::from_micros(t_us.saturating_sub(self.t0)).div_f64(x);
                Some(self.start + offset)
            }
        }
    }

    /// Waits until captured time `t_us`; false if the replay was aborted meanwhile.
    async fn wait(&self, t_us: u64) -> bool {
        let Some(due) = self.due(t_us) else {
            return !self.abort.is_cancelled();
        };
        tokio::select! {
            () = tokio::time::sleep_until(due.into()) => !self.abort.is_cancelled(),
            () = self.abort.cancelled() => false,
        }
    }

    fn fail(&self, why: String) {
        if let Ok(mut e) = self.ended_early.lock() {
            e.get_or_insert(why);
        }
        self.abort.cancel();
    }
}

/// Replays the capture in `opts.dir`; the report covers what ran even when the target refused
/// or failed part way.
pub async fn run(opts: Options) -> Result<Report, ReplayError> {
    let loaded = load::load(&opts.dir)?;
    let mut sessions = loaded.sessions;
    if let Some(n) = opts.sessions {
        sessions.truncate(n);
    }
    let t0 = sessions.iter().map(|s| s.t_us).min().unwrap_or(0);
    let total: u64 = sessions.iter().map(|s| s.steps.len() as u64).sum();
    let moved = sessions.iter().filter(|s| !s.moves.is_empty()).count() as u64;
    let moves: u64 = sessions.iter().map(|s| s.moves.len() as u64).sum();
    let ctx = Arc::new(Ctx {
        opts,
        start: Instant::now(),
        t0,
        abort: CancellationToken::new(),
        ended_early: Mutex::new(None),
        done: AtomicU64::new(0),
        new_errors: AtomicU64::new(0),
        open: AtomicU64::new(0),
    });
    let count = sessions.len();
    let mut tasks = tokio::task::JoinSet::new();
    for s in sessions {
        tasks.spawn(replay_session(Arc::clone(&ctx), s));
    }
    let progress = ctx.opts.progress.then(|| {
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                eprint!(
                    "\rreplay: {}/{total} commands, {} sessions open, {} new errors, {:.0} s   ",
                    ctx.done.load(Ordering::Relaxed),
                    ctx.open.load(Ordering::Relaxed),
                    ctx.new_errors.load(Ordering::Relaxed),
                    ctx.start.elapsed().as_secs_f64()
                );
            }
        })
    });
    let mut samples = Vec::with_capacity(total as usize);
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(mut s) => samples.append(&mut s),
            Err(e) => ctx.fail(format!("a session task failed: {e}")),
        }
    }
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    let ended_early = ctx.ended_early.lock().ok().and_then(|e| e.clone());
    Ok(report::build(
        &samples,
        report::Context {
            speed: match ctx.opts.speed {
                Speed::Times(x) => Some(x),
                Speed::AsFastAsPossible => None,
            },
            sessions: count,
            moved: (moved, moves),
            replay_wall: ctx.start.elapsed(),
            damage: loaded.damage,
            ended_early,
        },
    ))
}

/// One captured session on its own connection; returns a sample per captured command (those
/// not reached have no replayed part).
async fn replay_session(ctx: Arc<Ctx>, session: CapturedSession) -> Vec<Sample> {
    let mut planner = Planner::new(ctx.opts.read_only);
    let mut samples = Vec::with_capacity(session.steps.len());
    let mut conn = None;
    let account = ctx
        .opts
        .accounts
        .get(&session.start.user)
        .or(ctx.opts.account.as_ref());
    let no_account = account.is_none();
    if let (Some((user, password)), true) = (account, ctx.wait(session.t_us).await) {
        match Conn::open(&ctx.opts.target, (user, password)).await {
            Ok(c) => conn = Some(c),
            Err(e) => ctx.fail(format!("session {} as {user}: {e}", session.id)),
        }
    }
    if let Some(c) = conn.as_mut() {
        ctx.open.fetch_add(1, Ordering::Relaxed);
        let schema = &session.start.schema;
        if !schema.is_empty() {
            let mut init = vec![cmd::INIT_DB];
            init.extend_from_slice(schema.as_bytes());
            match c.command(&init, true).await {
                Ok(o) if o.error.is_some() => {
                    let (code, m) = o.error.unwrap_or_default();
                    ctx.fail(format!("session {}: USE {schema}: {code}: {m}", session.id));
                }
                Ok(_) => {}
                Err(e) => ctx.fail(format!("session {}: {e}", session.id)),
            }
        }
    }
    let mut reached = true;
    for step in session.steps {
        let key = planner.key(&step.payload, step.flags);
        let mut sample = Sample {
            key,
            captured: step.response,
            captured_t_us: step.t_us,
            replayed: None,
            skipped: None,
        };
        let captured_id = step.response.map(|r| r.prepared).filter(|&id| id != 0);
        if no_account {
            sample.skipped = Some("no account for its captured user");
        }
        reached = reached && conn.is_some() && ctx.wait(step.t_us).await;
        if let (true, Some(c)) = (reached, conn.as_mut()) {
            match planner.plan(&step.payload, step.flags, captured_id) {
                Plan::Skip(why) => sample.skipped = Some(why),
                Plan::Send(packets) => {
                    let at = ctx.start.elapsed();
                    let mut last = None;
                    for (payload, answered) in packets {
                        match c.command(&payload, answered).await {
                            Ok(o) => last = Some(o),
                            Err(e) => {
                                ctx.fail(format!("session {}: {e}", session.id));
                                last = None;
                                reached = false;
                                break;
                            }
                        }
                    }
                    if let Some(o) = last {
                        if let (Some(captured), Some(replayed)) = (captured_id, o.prepared) {
                            planner.prepared(captured, replayed);
                        }
                        let captured_error = step.response.is_some_and(|r| r.error);
                        if o.error.is_some() && !captured_error {
                            ctx.new_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        sample.replayed = Some(Replayed {
                            latency: o.latency,
                            rows: o.rows,
                            error: o.error,
                            at,
                        });
                    }
                }
            }
            ctx.done.fetch_add(1, Ordering::Relaxed);
        }
        samples.push(sample);
    }
    if let Some(c) = conn {
        c.quit().await;
        ctx.open.fetch_sub(1, Ordering::Relaxed);
    }
    samples
}
