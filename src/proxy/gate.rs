//! Polling a future only when it woke the task: an atomic load per poll instead of its own work.
//!
//! A session's task is polled for every packet that comes or goes, and each poll used to poll,
//! besides the two sockets, futures that almost never fire: the drain and abort tokens (each poll
//! of `cancelled()` takes the token's mutex and its waiter list's mutex, four lock round trips
//! per wake-up for an event that happens once in the proxy's life) and the relay's timers (each
//! poll of a `Sleep` re-registers the waker). [`Gated`] polls its future only when that future
//! itself woke the task: it hands the future a waker of its own that raises a flag before waking
//! the task, and a poll that finds the flag down returns `Pending` at once. The registration made
//! by the last real poll stays in place (the future keeps the waker it was given), so nothing is
//! missed; a poll from another task, or [`Gated::poll_now`] after the future was changed (a timer
//! reset), polls it for real.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// A future polled only when it woke the task (see the module docs).
pub struct Gated<F> {
    inner: Pin<Box<F>>,
    /// The waker the inner future holds; `None` until the first poll.
    flag: Option<(Arc<Flag>, Waker)>,
}

/// Resolves once the token is cancelled, like [`CancellationToken::cancelled`].
pub type Cancelled<'a> = Gated<WaitForCancellationFuture<'a>>;

/// The token's cancellation, gated.
pub fn cancelled(token: &CancellationToken) -> Cancelled<'_> {
    Gated::new(token.cancelled())
}

/// Wakes the task that registered it, and remembers that it did.
struct Flag {
    raised: AtomicBool,
    task: Waker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.raised.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

impl<F: Future> Gated<F> {
    pub fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            flag: None,
        }
    }

    /// The future itself, e.g. to reset a timer; follow a change with [`poll_now`](Self::poll_now).
    pub fn get_mut(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }

    pub fn get_ref(&self) -> &F {
        &self.inner
    }

    /// Polls the future whether or not it woke the task (its registration is renewed).
    #[inline(never)]
    pub fn poll_now(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        let waker = match &self.flag {
            Some((flag, waker)) if flag.task.will_wake(cx.waker()) => {
                flag.raised.store(false, Ordering::Relaxed);
                waker.clone()
            }
            _ => {
                let flag = Arc::new(Flag {
                    raised: AtomicBool::new(false),
                    task: cx.waker().clone(),
                });
                let waker = Waker::from(Arc::clone(&flag));
                self.flag = Some((flag, waker.clone()));
                waker
            }
        };
        self.inner.as_mut().poll(&mut Context::from_waker(&waker))
    }

    /// Polls the future if it woke the task since its last poll, or if `cx` is another task's.
    #[inline]
    pub fn poll_gated(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        if let Some((flag, _)) = &self.flag {
            if flag.task.will_wake(cx.waker()) && !flag.raised.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        self.poll_now(cx)
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.get_mut().poll_gated(cx)
    }
}

// `inner` is boxed: moving a `Gated` never moves its future.
impl<F> Unpin for Gated<F> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    #[test]
    fn pending_until_cancelled_then_ready_and_the_task_is_woken() {
        let token = CancellationToken::new();
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut fut = Box::pin(cancelled(&token));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        // Polls that the token did not cause stay pending without touching the token.
        for _ in 0..3 {
            assert!(fut.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        token.cancel();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task is woken");
        assert!(fut.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_token_cancelled_before_the_first_poll_is_ready_at_once() {
        let token = CancellationToken::new();
        token.cancel();
        let (_, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Box::pin(cancelled(&token))
            .as_mut()
            .poll(&mut cx)
            .is_ready());
    }

    #[test]
    fn a_parent_token_cancelled_reaches_a_child_waiter() {
        let parent = CancellationToken::new();
        let child = parent.child_token();
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut fut = Box::pin(cancelled(&child));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        parent.cancel();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(fut.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn polled_by_another_task_it_registers_that_task() {
        let token = CancellationToken::new();
        let (first, waker1) = counting();
        let (second, waker2) = counting();
        let mut fut = Box::pin(cancelled(&token));
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker1))
            .is_pending());
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker2))
            .is_pending());
        token.cancel();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(&waker2))
            .is_ready());
    }

    #[tokio::test]
    async fn a_timer_reset_after_a_poll_fires_at_its_new_deadline() {
        use std::time::Duration;
        let start = tokio::time::Instant::now();
        let mut sleep = Gated::new(tokio::time::sleep(Duration::from_secs(30)));
        std::future::poll_fn(|cx| {
            assert!(sleep.poll_gated(cx).is_pending());
            sleep.get_mut().reset(start + Duration::from_millis(50));
            assert!(sleep.poll_now(cx).is_pending());
            Poll::Ready(())
        })
        .await;
        tokio::time::timeout(Duration::from_secs(10), sleep)
            .await
            .expect("fired at the new deadline, not the old one");
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn wakes_a_real_task_across_threads() {
        let token = CancellationToken::new();
        let waiter = {
            let token = token.clone();
            tokio::spawn(async move { cancelled(&token).await })
        };
        tokio::task::yield_now().await;
        std::thread::spawn(move || token.cancel());
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
    }
}
