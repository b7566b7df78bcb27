//! Session threads: one single-threaded runtime per worker, each session pinned to one of them.
//!
//! Why not tokio's work-stealing runtime: a relay does almost nothing per packet, so what it costs
//! is wake-ups. On the shared runtime a readiness event is often handled by another thread than
//! the one that polled it (a futex wake and a cross-CPU hop per event); measured on the load
//! benchmark that was ~10 % of the proxy's CPU per query. Here every worker thread owns its epoll
//! instance and runs only its own sessions, so a session's two sockets, its timers and its task
//! never leave that thread. The accept loops hand each admitted connection to the worker with the
//! fewest sessions; a session never migrates, which is fine for a proxy whose sessions all cost
//! about the same.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The worker threads. Dropping it stops them (after their sessions have ended, see `lib.rs`).
#[derive(Debug)]
pub struct Workers {
    workers: Vec<Worker>,
    next: AtomicUsize,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    sessions: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// One admitted connection's place on a worker: counts as a session there until dropped.
#[derive(Debug)]
pub struct Placement {
    handle: Handle,
    sessions: Arc<AtomicUsize>,
}

impl Placement {
    /// The runtime the session must be spawned on.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Starts `count` worker threads (at least one); `None` means one per available CPU.
    pub fn start(count: Option<usize>) -> io::Result<Self> {
        let count = count
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        let mut workers = Vec::with_capacity(count);
        for index in 0..count {
            workers.push(Worker::start(index)?);
        }
        Ok(Self {
            workers,
            next: AtomicUsize::new(0),
        })
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Sessions running on each worker, in worker order.
    pub fn loads(&self) -> Vec<usize> {
        self.workers
            .iter()
            .map(|w| w.sessions.load(Ordering::Relaxed))
            .collect()
    }

    /// The worker for a new session: the one with the fewest sessions, ties taken in turn so that
    /// short connections (connect, one query, quit) still spread over every worker.
    pub fn place(&self) -> Placement {
        let n = self.workers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let mut best = &self.workers[start];
        let mut best_load = best.sessions.load(Ordering::Relaxed);
        for offset in 1..n {
            let w = &self.workers[(start + offset) % n];
            let load = w.sessions.load(Ordering::Relaxed);
            if load < best_load {
                best = w;
                best_load = load;
            }
        }
        best.sessions.fetch_add(1, Ordering::Relaxed);
        Placement {
            handle: best.handle.clone(),
            sessions: Arc::clone(&best.sessions),
        }
    }
}

impl Worker {
    fn start(index: usize) -> io::Result<Self> {
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
        Ok(Self {
            handle,
            sessions: Arc::new(AtomicUsize::new(0)),
            stop: Some(stop),
            thread: Some(thread),
        })
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

    #[test]
    fn sessions_go_to_the_least_loaded_worker_and_ties_rotate() {
        let workers = Workers::start(Some(3)).unwrap();
        let a = workers.place();
        let b = workers.place();
        let c = workers.place();
        assert_eq!(workers.loads(), vec![1, 1, 1]);
        drop(b);
        assert_eq!(workers.loads(), vec![1, 0, 1]);
        let d = workers.place();
        assert_eq!(
            workers.loads(),
            vec![1, 1, 1],
            "the emptied worker is refilled first"
        );
        drop((a, c, d));
        assert_eq!(workers.loads(), vec![0, 0, 0]);
    }

    #[test]
    fn a_placed_task_runs_on_its_worker_thread() {
        let workers = Workers::start(Some(2)).unwrap();
        let names: Vec<String> = (0..2)
            .map(|_| {
                let placement = workers.place();
                let (tx, rx) = std::sync::mpsc::channel();
                placement.handle().spawn(async move {
                    let name = std::thread::current().name().map(str::to_owned);
                    let _ = tx.send(name.unwrap_or_default());
                });
                rx.recv_timeout(Duration::from_secs(5)).unwrap()
            })
            .collect();
        assert!(
            names.iter().all(|n| n.starts_with("mysql-lb-w")),
            "{names:?}"
        );
        assert_ne!(names[0], names[1], "two sessions, two workers");
    }

    #[test]
    fn default_is_one_worker_per_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Workers::start(None).unwrap().len(), cpus);
        assert_eq!(Workers::start(Some(0)).unwrap().len(), 1);
    }
}
