//! The in-process sink for per-backend command latency.
//!
//! Each backend owns its counters, resolved once when the backend is created, so recording a
//! command is a few relaxed atomic adds with no lock and no label lookup on the hot path. The
//! Prometheus exporter reads these; tests read them directly.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::protocol::response::{CommandKind, Completed};

/// Counters for one backend.
#[derive(Debug, Default)]
pub struct BackendStats {
    commands: [AtomicU64; 4],
    latency_nanos: [AtomicU64; 4],
    first_byte_nanos: [AtomicU64; 4],
    pub bytes_to_backend: AtomicU64,
    pub bytes_from_backend: AtomicU64,
    pub connect_errors: AtomicU64,
    pub connections_total: AtomicU64,
}

fn index(kind: CommandKind) -> usize {
    match kind {
        CommandKind::Query => 0,
        CommandKind::Prepare => 1,
        CommandKind::Execute => 2,
        CommandKind::Other => 3,
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl BackendStats {
    pub fn record(&self, c: &Completed) {
        let i = index(c.kind());
        self.commands[i].fetch_add(1, Relaxed);
        self.latency_nanos[i].fetch_add(nanos(c.latency), Relaxed);
        self.first_byte_nanos[i].fetch_add(nanos(c.first_byte), Relaxed);
    }

    /// Completed commands of one kind.
    pub fn commands(&self, kind: CommandKind) -> u64 {
        self.commands[index(kind)].load(Relaxed)
    }

    /// Sum of the latencies of one kind.
    pub fn latency_sum(&self, kind: CommandKind) -> Duration {
        Duration::from_nanos(self.latency_nanos[index(kind)].load(Relaxed))
    }

    /// Completed commands of every kind.
    pub fn total_commands(&self) -> u64 {
        CommandKind::ALL.iter().map(|k| self.commands(*k)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_by_kind() {
        let s = BackendStats::default();
        s.record(&Completed {
            command: 0x03,
            latency: Duration::from_micros(300),
            first_byte: Duration::from_micros(100),
        });
        s.record(&Completed {
            command: 0x0E,
            latency: Duration::from_micros(50),
            first_byte: Duration::from_micros(50),
        });
        assert_eq!(s.commands(CommandKind::Query), 1);
        assert_eq!(s.commands(CommandKind::Other), 1);
        assert_eq!(s.total_commands(), 2);
        assert_eq!(
            s.latency_sum(CommandKind::Query),
            Duration::from_micros(300)
        );
    }
}
