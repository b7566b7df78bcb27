//! Fuzz targets' shared oracles for mysql-lb: see [`checks`]. The targets in `fuzz_targets/` are
//! one line each, so a crash reproduces the same way under `cargo fuzz run`, under
//! `tests/properties.rs` (which includes `checks.rs` too), and in a debugger.

use std::sync::OnceLock;

pub mod checks;

/// Known, reported bugs a long fuzz run may be told to step over (`FUZZ_TOLERATE=stale-start`,
/// comma-separated), so one unfixed bug does not end every run or drown new findings.
///
/// - `stale-start`: `Packet::start` of a packet whose header came in an earlier read is that
///   read's offset (codec.rs keeps `start` across `scan` calls) instead of `None`.
pub fn tolerate(bug: &str) -> bool {
    static TOLERATED: OnceLock<String> = OnceLock::new();
    TOLERATED
        .get_or_init(|| std::env::var("FUZZ_TOLERATE").unwrap_or_default())
        .split(',')
        .any(|b| b.trim() == bug)
}
