//! Where sysbench is: the tests that drive it fail with how to install it when it is missing.

use std::path::PathBuf;

/// The `sysbench` binary on PATH (or in /usr/bin, /usr/local/bin).
pub fn binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join("sysbench"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("sysbench not found: run scripts/install-deps.sh"))
}

/// The first number after `label` on the line of sysbench's report that starts with it (after
/// indentation).
pub fn number_after(report: &str, label: &str) -> Option<f64> {
    report.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(label)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// [`number_after`], which must be there.
pub fn field(report: &str, label: &str) -> f64 {
    number_after(report, label)
        .unwrap_or_else(|| panic!("no {label:?} in sysbench's report:\n{report}"))
}
