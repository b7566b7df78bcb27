use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;

/// A sequence started with `delay` as the configuration's `shutdown_delay` at the first signal.
fn started(
    readiness: &Arc<Readiness>,
    delay: impl FnOnce() -> Duration + Send + 'static,
) -> (mpsc::Sender<()>, StopTokens, tokio::task::JoinHandle<()>) {
    let stop = StopTokens {
        drain: CancellationToken::new(),
        abort: CancellationToken::new(),
    };
    let (tx, rx) = mpsc::channel(4);
    let readiness = Arc::clone(readiness);
    let tokens = stop.clone();
    let task = tokio::spawn(async move { sequence(&readiness, delay, rx, tokens).await });
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
    let readiness = Arc::new(Readiness::default());
    let (tx, stop, _task) = started(&readiness, move || delay);
    settle().await;
    assert_eq!(readiness.not_ready(), None, "ready before any signal");
    let signalled = std::time::Instant::now();
    tx.send(()).await.unwrap();
    settle().await;
    assert_eq!(readiness.not_ready(), Some(STOPPING));
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
    let readiness = Arc::new(Readiness::default());
    let (tx, stop, task) = started(&readiness, || Duration::from_secs(600));
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
    let readiness = Arc::new(Readiness::default());
    let (tx, stop, _task) = started(&readiness, || Duration::ZERO);
    tx.send(()).await.unwrap();
    settle().await;
    assert!(stop.drain.is_cancelled());
    assert!(readiness.not_ready().is_some());
}

#[tokio::test]
async fn the_delay_is_the_one_in_force_at_the_first_signal() {
    let readiness = Arc::new(Readiness::default());
    let in_force = Arc::new(Mutex::new(Duration::ZERO));
    let read = Arc::clone(&in_force);
    let (tx, stop, _task) = started(&readiness, move || *read.lock().unwrap());
    *in_force.lock().unwrap() = Duration::from_secs(5);
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
