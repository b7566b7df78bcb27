//! The health-check task: a round of per-backend check loops over the backend set in force,
//! started again after each reload; each result goes to the backend's rise/fall counters.
//!
//! One check (connect, greeting, login, queries) is `crate::backends::health`; this is only its schedule
//! and what is done with the results.

use std::sync::Arc;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::backends::balancer::{Backend, Transition};
use crate::backends::health::{check_backend_with, CheckError};
use crate::config::HealthCheckConfig;
use crate::proxy::state::ProxyState;
use crate::wire::protocol::login::REFUSED_USER;
use crate::wire::sql::gtid::GtidPos;

/// Checks every backend every `cfg.interval` until `shutdown`; returns at once if interval is zero.
///
/// One task per backend so a hung server delays only its own checks; start times are spread over
/// one interval so a large set does not open all its connections in the same instant.
pub async fn run(state: Arc<ProxyState>, cfg: HealthCheckConfig, shutdown: CancellationToken) {
    if cfg.interval.is_zero() {
        return;
    }
    if cfg.user.is_none() {
        // Said because server logs show it, as "Access denied for user 'mysql-lb-no-login'".
        info!(
            "health checks without health_check.user read the greeting, then end with a login \
             as '{REFUSED_USER}' that the server refuses (an authentication error, which does \
             not count toward max_connect_errors, unlike closing after the greeting)"
        );
    }
    let cfg = Arc::new(cfg);
    let mut reloads = state.reloads();
    loop {
        // One round per backend set: a reload ends the round and the next checks the new set
        // (kept backends keep their counts, so no check history is lost).
        let round = shutdown.child_token();
        let tasks = TaskTracker::new();
        let set = state.backends();
        let count = u32::try_from(set.backends().len())
            .unwrap_or(u32::MAX)
            .max(1);
        let start = Instant::now();
        for (i, backend) in (0u32..).zip(set.backends()) {
            let first = start + cfg.interval * i / count;
            tasks.spawn(check_loop(
                Arc::clone(&state),
                Arc::clone(backend),
                Arc::clone(&cfg),
                first,
                round.clone(),
            ));
        }
        tasks.close();
        let reloaded = tokio::select! {
            _ = shutdown.cancelled() => false,
            changed = reloads.changed() => changed.is_ok(),
        };
        round.cancel();
        tasks.wait().await;
        if !reloaded {
            return;
        }
    }
}

async fn check_loop(
    state: Arc<ProxyState>,
    backend: Arc<Backend>,
    cfg: Arc<HealthCheckConfig>,
    first: Instant,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval_at(first, cfg.interval);
    // A slow check pushes the next one back rather than firing a burst to catch up.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let started = std::time::Instant::now();
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = check_backend_with(&backend.address, state.own_connect_options(&backend), &cfg) => r,
        };
        if cfg.max_replication_lag.is_some() {
            let lag = match &result {
                Ok(ok) => ok.replication_lag.map(|d| d.as_secs_f64()),
                Err(CheckError::LagTooHigh { lag, .. }) => Some(lag.as_secs_f64()),
                Err(_) => Some(f64::NAN),
            };
            state.metrics.replication_lag(&backend.name, lag);
        }
        match &result {
            Ok(_) => backend.role.set_lagging(false),
            Err(CheckError::LagTooHigh { .. }) => backend.role.set_lagging(true),
            Err(_) => {}
        }
        let error = match result {
            Ok(ok) => {
                debug!(backend = %backend.name, lag = ?ok.replication_lag, "health check passed");
                backend.learn_raw_greeting(&ok.greeting, state.session.strip);
                backend.latency.check_round_trip(started.elapsed());
                if let Some(read_only) = ok.read_only {
                    state.follow_role(&backend, read_only);
                }
                let applied = ok.gtid_position.as_deref().map(str::as_bytes);
                if let Some(Ok(position)) = applied.map(GtidPos::parse) {
                    backend.role.learn_applied(&position);
                }
                None
            }
            Err(e) => {
                debug!(backend = %backend.name, error = %e, "health check failed");
                Some(e.to_string())
            }
        };
        let reason = error.clone();
        match state
            .backends()
            .record_check(&backend, error, cfg.fall, cfg.rise)
        {
            Some(Transition::WentDown) => {
                warn!(
                    backend = %backend.name,
                    reason = reason.as_deref().unwrap_or(""),
                    "backend down: {} failed health checks in a row", cfg.fall
                );
                // A lost server says nothing of its role: an `auto` primary that went down
                // takes no writes, and a replica promoted meanwhile is the one primary.
                backend.role.forget();
            }
            Some(Transition::CameUp) => info!(
                backend = %backend.name,
                "backend up: {} passed health checks in a row", cfg.rise
            ),
            None => {}
        }
    }
}
