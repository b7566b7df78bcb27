//! Running the client-library check scripts of tests/clients/: where scripts/install-deps.sh
//! put the libraries (a venv and an npm prefix under `.test-clients/`), a deadline per run, and
//! a failure that shows the script's own output.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Generous for a loaded 2-core machine; each script takes a few seconds.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

pub fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Runs with a deadline; panics with the script's output unless it exited 0.
pub fn run_check(what: &str, mut cmd: Command) {
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    loop {
        match child.try_wait().expect("wait for the client script") {
            Some(_) => break,
            None if start.elapsed() > SCRIPT_TIMEOUT => {
                let _ = child.kill();
                break;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let out = child.wait_with_output().expect("client script output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}, after {:.1?}):\n{text}",
        out.status,
        start.elapsed()
    );
    eprintln!("{what} ({:.1?}):\n{text}", start.elapsed());
}

/// `program args…` if it runs and exits 0, else None.
pub fn probe(program: &str, args: &[&str]) -> Option<Output> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
}

pub fn require(program: &str, args: &[&str], install: &str) -> Output {
    probe(program, args).unwrap_or_else(|| {
        panic!(
            "`{program} {}` failed: install it with `{install}` (or run scripts/install-deps.sh)",
            args.join(" ")
        )
    })
}

/// Where scripts/install-deps.sh puts the Python venv and the npm prefix.
pub fn clients_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".test-clients")
}

/// The venv's interpreter.
pub fn python() -> String {
    clients_root()
        .join("venv/bin/python3")
        .to_string_lossy()
        .into_owned()
}

pub fn python_with(module: &str) {
    require(
        &python(),
        &["-c", &format!("import {module}")],
        "scripts/install-deps.sh",
    );
}

/// LD_LIBRARY_PATH under which mysql-connector-python's C extension loads; fails the test when
/// it does not.
pub fn connector_cext_ld_path() -> String {
    python_with("mysql.connector");
    // The wheel's C extension wants OpenSSL 3.2 (Debian 12 has 3.0); it ships its own copy in
    // mysql/vendor, which the loader finds through LD_LIBRARY_PATH.
    let vendor = require(
        &python(),
        &[
            "-c",
            "import os, mysql; print(os.path.join(os.path.dirname(mysql.__file__), 'vendor'))",
        ],
        "scripts/install-deps.sh",
    );
    let vendor = String::from_utf8_lossy(&vendor.stdout).trim().to_string();
    let ld_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{vendor}:{old}"),
        _ => vendor,
    };
    let mut check = Command::new(python());
    check
        .env("LD_LIBRARY_PATH", &ld_path)
        .args([
            "-c",
            "import mysql.connector, sys; sys.exit(0 if mysql.connector.HAVE_CEXT else 1)",
        ])
        .stdin(Stdio::null());
    assert!(
        check.status().map(|s| s.success()).unwrap_or(false),
        "mysql-connector-python's C extension does not load (LD_LIBRARY_PATH={ld_path}): \
         remove .test-clients/venv and run scripts/install-deps.sh"
    );
    ld_path
}

/// NODE_PATH under which `require('mysql2/promise')` works; fails the test when it does not.
pub fn node_path() -> PathBuf {
    require("node", &["--version"], "apt-get install -y nodejs");
    let root = clients_root().join("node/node_modules");
    let mut probe_mysql2 = Command::new("node");
    probe_mysql2
        .env("NODE_PATH", &root)
        .args(["-e", "require('mysql2/promise')"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    assert!(
        probe_mysql2.status().map(|s| s.success()).unwrap_or(false),
        "node cannot load mysql2 from {}: run scripts/install-deps.sh",
        root.display()
    );
    root
}

/// PHP with mysqli and PDO_mysql; fails the test when either is missing.
pub fn require_php_mysql() {
    let install = "apt-get install -y php-cli php-mysql";
    require("php", &["-r", "exit(0);"], install);
    require(
        "php",
        &[
            "-r",
            "exit(extension_loaded('mysqli') && extension_loaded('pdo_mysql') ? 0 : 1);",
        ],
        install,
    );
}
