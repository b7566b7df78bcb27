use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::Config;
use crate::metrics::Metrics;

fn state(delay: Duration) -> Arc<ProxyState> {
    let mut config = Config::default();
    config.lifecycle.shutdown_delay = delay;
    Arc::new(ProxyState::new(&config, Arc::new(Metrics::new())))
}

fn started(
    shared: &Arc<ProxyState>,
) -> (mpsc::Sender<()>, StopTokens, tokio::task::JoinHandle<()>) {
    let stop = StopTokens {
        drain: CancellationToken::new(),
        abort: CancellationToken::new(),
    };
    let (tx, rx) = mpsc::channel(4);
    let task = tokio::spawn(sequence(Arc::clone(shared), rx, stop.clone()));
    (tx, stop, task)
}

/// Lets the sequence task run until it waits again.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn readiness_fails_at_once_and_the_drain_waits_for_the_delay() {
    let delay = Duration::from_millis(400);
    let shared = state(delay);
    let (tx, stop, _task) = started(&shared);
    settle().await;
    assert_eq!(
        shared.readiness.not_ready(),
        None,
        "ready before any signal"
    );
    let signalled = std::time::Instant::now();
    tx.send(()).await.unwrap();
    settle().await;
    assert_eq!(shared.readiness.not_ready(), Some(STOPPING));
    tokio::time::timeout(Duration::from_secs(20), stop.drain.cancelled())
        .await
        .expect("the drain begins after the delay");
    assert!(
        signalled.elapsed() >= delay,
        "the drain waited for shutdown_delay: {:?}",
        signalled.elapsed()
    );
    assert!(!stop.abort.is_cancelled());
    tx.send(()).await.unwrap();
    settle().await;
    assert!(
        stop.abort.is_cancelled(),
        "a signal during the drain closes everything"
    );
}

#[tokio::test]
async fn a_second_signal_cuts_the_delay_short_and_a_third_aborts() {
    let shared = state(Duration::from_secs(600));
    let (tx, stop, task) = started(&shared);
    tx.send(()).await.unwrap();
    settle().await;
    assert!(!stop.drain.is_cancelled());
    tx.send(()).await.unwrap();
    settle().await;
    assert!(stop.drain.is_cancelled(), "second signal: drain now");
    assert!(
        !stop.abort.is_cancelled(),
        "but sessions still get their boundary"
    );
    tx.send(()).await.unwrap();
    settle().await;
    assert!(stop.abort.is_cancelled());
    task.await.unwrap();
}

#[tokio::test]
async fn without_a_delay_the_first_signal_drains() {
    let shared = state(Duration::ZERO);
    let (tx, stop, _task) = started(&shared);
    tx.send(()).await.unwrap();
    settle().await;
    assert!(stop.drain.is_cancelled());
    assert!(shared.readiness.not_ready().is_some());
}

#[tokio::test]
async fn a_reloaded_delay_is_the_one_used() {
    let shared = state(Duration::ZERO);
    shared.applied.lock().unwrap().lifecycle.shutdown_delay = Duration::from_secs(5);
    let (tx, stop, _task) = started(&shared);
    tx.send(()).await.unwrap();
    settle().await;
    assert!(!stop.drain.is_cancelled(), "the delay now in force: 5 s");
}

#[test]
fn the_first_reason_is_kept() {
    let r = Readiness::default();
    r.stop("a");
    r.stop("b");
    assert_eq!(r.not_ready(), Some("a"));
}
