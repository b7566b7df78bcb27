//! The proxy's background tasks: every long-running loop that reads the proxy-wide state.
//!
//! The rooms these loops drive hold plain data and logic and do not know [`ProxyState`]:
//! `balancer::latency` folds histogram totals into scores, `health` runs one check,
//! `lifecycle` turns stop requests into readiness and drain steps and watches the config file,
//! `reload` applies a configuration. `state` holds what they own (the backend set, the
//! readiness, the applied configuration) and depends on them, never the reverse; each task
//! here is the thin loop that joins one of them to the state. [`start`] starts the ones that
//! live until the drain, [`on_signals`] the stop sequence (it outlives the drain: a signal
//! during it closes every session).

mod health;
mod reload;
mod stop;

use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backends::balancer::latency;
use crate::config::HealthCheckConfig;
use crate::control::reload::Loader;
use crate::proxy::lifecycle::{self, watch};
use crate::proxy::state::ProxyState;

pub use stop::on_signals;

/// Starts, on `tasks`, what runs until `drain`: health checks, the `least_latency` scores,
/// reloads (on SIGHUP, and on `watch`'s file changing when there is one: `reload` says how),
/// and the readiness flip at the drain's start.
pub fn start(
    tasks: &TaskTracker,
    state: &Arc<ProxyState>,
    checks: HealthCheckConfig,
    reload: Option<Loader>,
    watch: Option<watch::ConfigWatch>,
    drain: &CancellationToken,
) {
    let file_changed = Arc::new(Notify::new());
    tasks.spawn(not_ready_once(Arc::clone(state), drain.clone()));
    if let Some(w) = watch {
        tasks.spawn(watch::run(
            w,
            watch::POLL_EVERY,
            watch::QUIET,
            Arc::clone(&file_changed),
            drain.clone(),
        ));
    }
    tasks.spawn(health::run(Arc::clone(state), checks, drain.clone()));
    tasks.spawn(latency_scores(Arc::clone(state), drain.clone()));
    tasks.spawn(reload::on_hangup(
        Arc::clone(state),
        reload,
        file_changed,
        drain.clone(),
    ));
}

/// Fails readiness when the drain begins, however it was started (see
/// [`lifecycle::not_ready_once`]).
pub async fn not_ready_once(state: Arc<ProxyState>, drain: CancellationToken) {
    lifecycle::not_ready_once(&state.readiness, drain).await;
}

/// Updates every backend's latency average once per [`latency::TICK`] until `shutdown`, over
/// the backend set in force at each tick.
pub async fn latency_scores(state: Arc<ProxyState>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(latency::TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let set = state.backends();
        latency::tick(set.backends());
        // Transaction-mode pools close their connections idle past `pooling.idle_timeout`; in a
        // pool across backends, a backend out of rotation closes every one its keys can spare
        // (its sessions take other backends' connections).
        let now = std::time::Instant::now();
        let across = |name: &str| {
            let backend = set.by_name(name)?;
            set.pool(&backend.pool)
                .filter(|p| p.pooling.across_backends)
                .map(|p| p.name.clone())
        };
        state
            .server_pools
            .expire(now, |name| set.leaving_across(name, now), across);
        for pool in set.pools().iter().filter(|p| p.pooling.across_backends) {
            let names = pool.members().iter().map(|b| b.name.as_str());
            state.server_pools.count_spread(names);
        }
    }
}
