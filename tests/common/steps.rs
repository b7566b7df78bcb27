//! What the scripted-session tests share: a seeded generator, so a seed gives the same scripts
//! everywhere, and a connection that runs the steps it is told on its own task, so one session
//! can wait (for a pooled server connection) while the script goes on with the others.

use std::future::Future;
use std::pin::Pin;

use std::time::Duration;

use mysql_async::Conn;
use tokio::sync::mpsc;

/// SplitMix64: a seeded, reproducible stream (no dependency needed for this).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A step runner: one step on the connection, its outcome.
pub type Runner<S, O> = for<'c> fn(&'c mut Conn, S) -> Pin<Box<dyn Future<Output = O> + Send + 'c>>;

/// One session on its own task: it runs the steps it is told, in order, and reports each one's
/// outcome; a step may be left waiting (for a pooled server connection) while others go on.
pub struct Steps<S, O> {
    go: mpsc::UnboundedSender<Option<S>>,
    done: mpsc::UnboundedReceiver<O>,
    /// Every step's outcome so far, in order.
    pub outcomes: Vec<O>,
    told: usize,
}

impl<S: Send + 'static, O: Send + 'static> Steps<S, O> {
    /// Starts `conn` on its own task, each step run by `run`.
    pub fn start(mut conn: Conn, run: Runner<S, O>) -> Self {
        let (go, mut steps) = mpsc::unbounded_channel::<Option<S>>();
        let (report, done) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Some(step)) = steps.recv().await {
                let outcome = run(&mut conn, step).await;
                if report.send(outcome).is_err() {
                    return;
                }
            }
            // A broken connection has nothing to say goodbye to; its steps already showed it.
            if let Err(e) = conn.disconnect().await {
                eprintln!("a session's disconnect failed: {e}");
            }
        });
        Steps {
            go,
            done,
            outcomes: Vec::new(),
            told: 0,
        }
    }

    /// Tells the session its next step, or (None) to disconnect once the steps told are done.
    pub fn tell(&mut self, step: Option<S>) {
        if step.is_some() {
            self.told += 1;
        }
        assert!(self.go.send(step).is_ok(), "a session's task ended early");
    }

    /// Takes the outcomes reported so far, without waiting.
    pub fn collect(&mut self) {
        while let Ok(outcome) = self.done.try_recv() {
            self.outcomes.push(outcome);
        }
    }

    /// A step told has not reported yet.
    pub fn waiting(&self) -> bool {
        self.outcomes.len() < self.told
    }

    /// Waits up to `window` for every step told: true when they all ended.
    pub async fn settle(&mut self, window: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + window;
        while self.waiting() {
            match tokio::time::timeout_at(deadline, self.done.recv()).await {
                Ok(Some(outcome)) => self.outcomes.push(outcome),
                Ok(None) => panic!("a session's task ended early"),
                Err(_) => return false,
            }
        }
        true
    }
}
