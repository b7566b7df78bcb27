//! The stop sequence's task: the process's SIGTERM and SIGINT fed to `lifecycle::sequence`, with
//! the readiness and the `shutdown_delay` of the proxy's state.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::proxy::lifecycle::{self, StopTokens};
use crate::proxy::state::ProxyState;

/// Starts the stop sequence on this runtime, fed by the process's SIGTERM and SIGINT.
pub fn on_signals(state: Arc<ProxyState>) -> StopTokens {
    let stop = StopTokens {
        drain: CancellationToken::new(),
        abort: CancellationToken::new(),
    };
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(lifecycle::forward_signals(tx));
    tokio::spawn(sequence(state, rx, stop.clone()));
    stop
}

/// [`lifecycle::sequence`] for `shared`: its readiness, and the `shutdown_delay` of the
/// configuration in force at the first request (a reload changes it).
pub async fn sequence(state: Arc<ProxyState>, requests: mpsc::Receiver<()>, stop: StopTokens) {
    let delay = || shutdown_delay(&state);
    lifecycle::sequence(&state.readiness, delay, requests, stop).await;
}

fn shutdown_delay(state: &ProxyState) -> Duration {
    match state.applied.lock() {
        Ok(c) => c.lifecycle.shutdown_delay,
        Err(poisoned) => poisoned.into_inner().lifecycle.shutdown_delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::telemetry::metrics::Metrics;

    #[tokio::test]
    async fn a_reloaded_delay_is_the_one_used() {
        let state = Arc::new(ProxyState::new(
            &Config::default(),
            Arc::new(Metrics::new()),
        ));
        state.applied.lock().unwrap().lifecycle.shutdown_delay = Duration::from_secs(5);
        let stop = StopTokens {
            drain: CancellationToken::new(),
            abort: CancellationToken::new(),
        };
        let (tx, rx) = mpsc::channel(4);
        let _task = tokio::spawn(sequence(Arc::clone(&state), rx, stop.clone()));
        tx.send(()).await.unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(state.readiness.not_ready(), Some(lifecycle::STOPPING));
        assert!(!stop.drain.is_cancelled(), "the delay now in force: 5 s");
    }
}
