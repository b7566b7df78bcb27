//! Session threads: one single-threaded runtime per worker, each session pinned to one of them.
//!
//! Why not tokio's work-stealing runtime: a relay does almost nothing per packet, so what it costs
//! is wake-ups. On the shared runtime a readiness event is often handled by another thread than
//! the one that polled it (a futex wake and a cross-CPU hop per event); measured on the load
//! benchmark that was ~10 % of the proxy's CPU per query. Here every worker thread owns its epoll
//! instance and runs only its own sessions, so a session's two sockets, its timers and its task
//! never leave that thread. Each worker accepts on its own socket of every TCP listener (see
//! `server.rs`), so a new connection is handed between threads only to even out the spread; a
//! session never migrates, which is fine for a proxy whose sessions all cost about the same.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::runtime::Handle;

use crate::telemetry::metrics::Metrics;
use tokio::sync::oneshot;

/// The worker threads. Dropping it stops them (after their sessions have ended, see `lib.rs`).
#[derive(Debug)]
pub struct Workers {
    workers: Vec<Worker>,
    placer: Arc<Placer>,
}

#[derive(Debug)]
struct Worker {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Workers {
    /// Starts `count` worker threads (at least one); `None` means one per available CPU. Their
    /// session counts are exported as `mysql_lb_worker_sessions{worker}`.
    pub fn start(count: Option<usize>, metrics: &Metrics) -> io::Result<Self> {
        let count = count
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        let mut workers = Vec::with_capacity(count);
        let mut handles = Vec::with_capacity(count);
        for index in 0..count {
            let (worker, handle) = Worker::start(index)?;
            workers.push(worker);
            handles.push(handle);
        }
        let sessions = (0..count).map(|i| metrics.worker_sessions(i)).collect();
        Ok(Self {
            workers,
            placer: Arc::new(Placer { handles, sessions }),
        })
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Where sessions go: shared with the accept loops.
    pub fn placer(&self) -> Arc<Placer> {
        Arc::clone(&self.placer)
    }
}

/// Each worker's runtime and session count: decides which worker runs a new session.
#[derive(Debug)]
pub struct Placer {
    handles: Vec<Handle>,
    sessions: Vec<IntGauge>,
}

/// A session's place on a worker: counts there until dropped.
#[derive(Debug)]
pub struct Placement {
    worker: usize,
    sessions: IntGauge,
}

impl Placement {
    pub fn worker(&self) -> usize {
        self.worker
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.sessions.dec();
    }
}

impl Placer {
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Worker `i`'s runtime.
    pub fn handle(&self, i: usize) -> &Handle {
        &self.handles[i % self.handles.len()]
    }

    /// Sessions on each worker, in worker order.
    pub fn loads(&self) -> Vec<i64> {
        self.sessions.iter().map(IntGauge::get).collect()
    }

    /// The worker for a session that worker `me` accepted: `me` unless it has more than
    /// `slack` sessions above the least loaded worker, then the least loaded. The kernel's
    /// choice of worker (a hash per connection for TCP, one worker for a unix socket) is not
    /// even on its own; a hand-off costs a wake-up of the other worker, so a little slack
    /// (1/8 of the sessions, none below 8) spares most of them while keeping the spread even.
    pub fn place(&self, me: usize) -> Placement {
        let me = me % self.sessions.len();
        // One read of each count (no list of them: this runs for every connection).
        let (mut least, mut min, mut mine, mut total) = (me, i64::MAX, 0, 0);
        for (i, load) in self.sessions.iter().map(IntGauge::get).enumerate() {
            if load < min {
                (least, min) = (i, load);
            }
            if i == me {
                mine = load;
            }
            total += load;
        }
        let slack = total / 8;
        let best = if mine > min.saturating_add(slack) {
            least
        } else {
            me
        };
        let sessions = self.sessions[best].clone();
        sessions.inc();
        Placement {
            worker: best,
            sessions,
        }
    }
}

impl Worker {
    fn start(index: usize) -> io::Result<(Self, Handle)> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("mysql-lb-w{index}"))
            .spawn(move || {
                // Either a stop message or the sender dropped ends the worker.
                let _ = runtime.block_on(stopped);
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok((
            Self {
                stop: Some(stop),
                thread: Some(thread),
            },
            handle,
        ))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("a worker thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(n: Option<usize>) -> Workers {
        Workers::start(n, &Metrics::new()).unwrap()
    }

    #[test]
    fn each_handle_runs_tasks_on_its_own_worker_thread() {
        let workers = start(Some(2));
        let placer = workers.placer();
        let names: Vec<String> = (0..placer.len())
            .map(|i| {
                let (tx, rx) = std::sync::mpsc::channel();
                placer.handle(i).spawn(async move {
                    let name = std::thread::current().name().map(str::to_owned);
                    let _ = tx.send(name.unwrap_or_default());
                });
                rx.recv_timeout(Duration::from_secs(5)).unwrap()
            })
            .collect();
        assert_eq!(names, vec!["mysql-lb-w0", "mysql-lb-w1"]);
    }

    #[test]
    fn the_accepting_worker_keeps_a_session_unless_another_has_fewer() {
        let workers = start(Some(3));
        let placer = workers.placer();
        // Worker 0 wins every accept of a burst: the sessions still spread.
        let burst: Vec<Placement> = (0..6).map(|_| placer.place(0)).collect();
        assert_eq!(
            burst.iter().map(Placement::worker).collect::<Vec<_>>(),
            vec![0, 1, 2, 0, 1, 2]
        );
        assert_eq!(placer.loads(), vec![2, 2, 2]);
        // Balanced: the acceptor keeps it (no hand-off).
        let kept = placer.place(1);
        assert_eq!(kept.worker(), 1);
        drop(burst);
        drop(kept);
        assert_eq!(placer.loads(), vec![0, 0, 0]);
    }

    #[test]
    fn a_worker_keeps_its_session_while_within_an_eighth_of_the_least_loaded() {
        let workers = start(Some(2));
        let placer = workers.placer();
        let mut held: Vec<Placement> = (0..16).map(|i| placer.place(i % 2)).collect();
        assert_eq!(placer.loads(), vec![8, 8]);
        // 16 to 18 sessions allow 2 of slack: worker 0 keeps three more, up to 11 against 8.
        held.extend((0..3).map(|_| placer.place(0)));
        assert_eq!(placer.loads(), vec![11, 8]);
        // Beyond the slack the session goes to the least loaded worker.
        held.push(placer.place(0));
        assert_eq!(placer.loads(), vec![11, 9]);
    }

    #[test]
    fn default_is_one_worker_per_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(start(None).len(), cpus);
        assert_eq!(start(Some(0)).len(), 1);
    }

    #[test]
    fn dropping_stops_and_joins_the_threads() {
        let workers = start(Some(2));
        let placer = workers.placer();
        drop(workers);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        drop(placer.handle(0).spawn(async move {
            let _ = tx.send(());
        }));
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a stopped worker runs nothing"
        );
    }
}
