//! Stopping behind a load balancer: readiness, `shutdown_delay`, and the config-file watch.
//!
//! A load balancer (a Kubernetes Service among them) stops sending new clients only after its
//! readiness probe has failed, which takes a probe period or more. Draining at once on SIGTERM
//! would refuse the clients it still sends meanwhile. So the first signal only makes
//! `/readyz` fail and the proxy serves on for `shutdown_delay`; then the usual drain begins
//! (stop accepting, sessions end at their next command boundary, up to `shutdown_timeout`). A
//! second signal during the delay starts the drain at once; one more closes every session.
//! Liveness (`/healthz`) is left alone: a probe that failed during the drain would have the
//! process killed before its sessions finish.
//!
//! Plain logic over a [`Readiness`] and channels, with no reference to the proxy's state: the
//! tasks that run it for a proxy (and read its configuration) are `crate::control::tasks`.

pub mod watch;

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Whether the proxy still wants new clients; once it stops wanting them it never does again.
#[derive(Debug, Default)]
pub struct Readiness {
    stopping: OnceLock<&'static str>,
}

impl Readiness {
    /// Not ready from now on, for `why` (kept: the first reason wins).
    pub fn stop(&self, why: &'static str) {
        let _ = self.stopping.set(why);
    }

    /// None while ready; else why not.
    pub fn not_ready(&self) -> Option<&'static str> {
        self.stopping.get().copied()
    }
}

/// What the stop sequence does to the proxy: cancel `drain` to start the drain, `abort` to
/// close every session.
#[derive(Debug, Clone)]
pub struct StopTokens {
    pub drain: CancellationToken,
    pub abort: CancellationToken,
}

/// The reason `/readyz` gives once a stop signal arrived.
pub const STOPPING: &str = "shutting down: stop signal received";

/// Turns stop requests (one `()` per SIGTERM/SIGINT) into the steps above, failing `readiness`
/// at the first. `shutdown_delay` is asked when the first request arrives (the task passes the
/// configuration in force then, so a reload changes it). Returns once the proxy has been told to
/// close every session, or when `requests` closes.
pub async fn sequence(
    readiness: &Readiness,
    shutdown_delay: impl FnOnce() -> Duration,
    mut requests: mpsc::Receiver<()>,
    stop: StopTokens,
) {
    if requests.recv().await.is_none() {
        return;
    }
    readiness.stop(STOPPING);
    let delay = shutdown_delay();
    if delay.is_zero() {
        info!("signal received: not ready (/readyz 503); draining (a second signal closes every session)");
    } else {
        info!(
            shutdown_delay = %humantime::format_duration(delay),
            "signal received: not ready (/readyz 503); still serving new clients for shutdown_delay, \
             then draining (a second signal drains now)"
        );
        let cut_short = tokio::select! {
            _ = tokio::time::sleep(delay) => false,
            got = requests.recv() => got.is_some(),
        };
        if cut_short {
            info!("second signal: rest of shutdown_delay skipped; draining (one more closes every session)");
        } else {
            info!("shutdown_delay over: draining (a second signal closes every session)");
        }
    }
    stop.drain.cancel();
    if requests.recv().await.is_some() {
        warn!("another signal: closing every session now");
        stop.abort.cancel();
    }
}

/// Fails `readiness` when the drain begins, however it was started (a signal, or a test or an
/// embedding program cancelling `drain` itself).
pub async fn not_ready_once(readiness: &Readiness, drain: CancellationToken) {
    drain.cancelled().await;
    readiness.stop(DRAINING);
}

/// The reason `/readyz` gives when the drain began without a stop signal.
pub const DRAINING: &str = "shutting down: draining sessions";

/// Sends one request on `to` per SIGTERM or SIGINT, until `to` closes.
pub async fn forward_signals(to: mpsc::Sender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!("cannot listen for SIGTERM ({e}); only Ctrl-C stops the proxy");
            None
        }
    };
    loop {
        let got = match term.as_mut() {
            Some(term) => tokio::select! {
                got = term.recv() => got.is_some(),
                got = tokio::signal::ctrl_c() => got.is_ok(),
            },
            None => tokio::signal::ctrl_c().await.is_ok(),
        };
        if !got || to.send(()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
