//! Session threads: one single-threaded runtime per worker, each session pinned to one of them.
//!
//! Why not tokio's work-stealing runtime: a relay does almost nothing per packet, so what it costs
//! is wake-ups. On the shared runtime a readiness event is often handled by another thread than
//! the one that polled it (a futex wake and a cross-CPU hop per event); measured on the load
//! benchmark that was ~10 % of the proxy's CPU per query. Here every worker thread owns its epoll
//! instance and runs only its own sessions, so a session's two sockets, its timers and its task
//! never leave that thread. Each worker accepts on every listener itself (see `server.rs`), so
//! a new connection is not handed between threads either; a session never migrates, which is
//! fine for a proxy whose sessions all cost about the same.

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The worker threads. Dropping it stops them (after their sessions have ended, see `lib.rs`).
#[derive(Debug)]
pub struct Workers {
    workers: Vec<Worker>,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
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
        Ok(Self { workers })
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Each worker's runtime, to spawn its accept loops on.
    pub fn handles(&self) -> impl Iterator<Item = &Handle> + Clone {
        self.workers.iter().map(|w| &w.handle)
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
    fn each_handle_runs_tasks_on_its_own_worker_thread() {
        let workers = Workers::start(Some(2)).unwrap();
        let names: Vec<String> = workers
            .handles()
            .map(|handle| {
                let (tx, rx) = std::sync::mpsc::channel();
                handle.spawn(async move {
                    let name = std::thread::current().name().map(str::to_owned);
                    let _ = tx.send(name.unwrap_or_default());
                });
                rx.recv_timeout(Duration::from_secs(5)).unwrap()
            })
            .collect();
        assert_eq!(names, vec!["mysql-lb-w0", "mysql-lb-w1"]);
    }

    #[test]
    fn default_is_one_worker_per_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Workers::start(None).unwrap().len(), cpus);
        assert_eq!(Workers::start(Some(0)).unwrap().len(), 1);
    }

    #[test]
    fn dropping_stops_and_joins_the_threads() {
        let workers = Workers::start(Some(2)).unwrap();
        let handle = workers.handles().next().unwrap().clone();
        drop(workers);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        drop(handle.spawn(async move {
            let _ = tx.send(());
        }));
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a stopped worker runs nothing"
        );
    }
}
