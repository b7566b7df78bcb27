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
