//! The real `mysql-lb` binary as a child process, for tests that need signals, flags and logs.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_mysql-lb");

/// The daemon started with `args`; its stderr lines arrive on `lines`. Killed on drop.
pub struct Daemon {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Daemon {
    pub fn start(args: &[String], soft_nofile: Option<u64>) -> Self {
        let mut cmd = if let Some(soft) = soft_nofile {
            // Start under a low soft limit (hard left as is), as `ulimit -Sn` would.
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={soft}:")).arg(BIN);
            c
        } else {
            Command::new(BIN)
        };
        cmd.args(args);
        Self::spawn(&mut cmd)
    }

    fn spawn(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mysql-lb");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Runs `program` with `args` (a wrapper such as `prlimit` that execs the daemon).
    pub fn start_program(program: &str, args: &[String]) -> Self {
        Self::spawn(Command::new(program).args(args))
    }

    /// Waits for a log line containing `needle`; panics with everything seen so far otherwise.
    pub fn wait_for_line(&mut self, needle: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        self.wait_for_new(&format!("log line with {needle:?}"), |l| l.contains(needle))
    }

    /// Waits for a log line containing `needle` among those not seen yet: for a line a test
    /// expects again (each reload's), where [`Daemon::wait_for_line`] would find the old one.
    pub fn wait_for_new_line(&mut self, needle: &str) -> String {
        self.wait_for_new(&format!("new log line with {needle:?}"), |l| {
            l.contains(needle)
        })
    }

    /// Waits up to 30 s for a line not seen yet that `wanted` accepts. A daemon that exits
    /// first fails the test at once with its exit status and its whole log, not with whatever
    /// the test would have tried next (a port someone else may hold by then, a `/proc` read).
    fn wait_for_new(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if wanted(&line) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => self.fail_if_exited(what),
                // stderr closed: the daemon is gone or about to be.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = self.child.wait();
                    self.fail_if_exited(what);
                }
            }
        }
        panic!("no {what} within 30 s; got:\n{}", self.seen.join("\n"));
    }

    /// Panics with the exit status and the whole log when the daemon has exited.
    pub fn fail_if_exited(&mut self, waiting_for: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                self.seen.push(line);
            }
            panic!(
                "mysql-lb exited ({status}) while the test waited for {waiting_for}; its log:\n{}",
                self.seen.join("\n")
            );
        }
    }

    /// The first TCP address the proxy announced it listens on (its `listening address=…`
    /// line). Start the daemon on `127.0.0.1:0` and learn its port here: a port picked before
    /// the start can be taken meanwhile by any process's outgoing connection or another test's
    /// daemon, and the test would then talk to a stranger.
    pub fn proxy_addr(&mut self) -> SocketAddr {
        self.announced("client listener", |l| {
            l.contains("listening") && !l.contains("admin HTTP")
        })
    }

    /// The admin endpoint's bound address (its `admin HTTP listening address=…` line); start
    /// the daemon with `--admin-address=127.0.0.1:0` or `admin_address: 127.0.0.1:0`.
    pub fn admin_addr(&mut self) -> SocketAddr {
        self.announced("admin listener", |l| l.contains("admin HTTP listening"))
    }

    /// A `/proc/PID/status` figure of the daemon in KiB (`VmRSS:`, `VmHWM:` for the peak). A
    /// daemon that has exited fails the test with its own log, not with a missing `/proc` file.
    pub fn status_kib(&mut self, key: &str) -> u64 {
        self.fail_if_exited(key);
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| {
            self.fail_if_exited(key);
            panic!("/proc/{pid}/status: {e}")
        });
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} line in /proc/{pid}/status"))
    }

    /// The daemon's resident memory (`VmRSS`) in KiB.
    pub fn rss_kib(&mut self) -> u64 {
        self.status_kib("VmRSS:")
    }

    fn announced(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> SocketAddr {
        let tcp = |l: &str| wanted(l) && address_in(l).is_some();
        let line = match self.seen.iter().find(|l| tcp(l)) {
            Some(l) => l.clone(),
            None => self.wait_for_new(&format!("the {what}'s address"), tcp),
        };
        address_in(&line).unwrap_or_else(|| panic!("no address in {line:?}"))
    }

    /// Every stderr line, the ones not waited for included; once the daemon has exited (after
    /// [`Daemon::stop`]), so its stderr is closed and nothing more can come.
    pub fn whole_log(&mut self) -> Vec<String> {
        assert!(
            self.child.try_wait().ok().flatten().is_some(),
            "whole_log before the daemon exited"
        );
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    pub fn stop(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SIGTERM: the daemon drains and exits on its own.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "mysql-lb did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn mariadb_cli(port: u16, sql: &str) -> std::process::Output {
    Command::new("mariadb")
        .args([
            "--no-defaults",
            "--protocol=TCP",
            "-h127.0.0.1",
            &format!("-P{port}"),
            "-ubench",
            "-pbench",
            "-N",
            "-e",
            sql,
        ])
        .output()
        .expect("run the mariadb CLI (apt-get install mariadb-client)")
}

/// The TCP address in a log line's `address=…` field (text or JSON format); `None` for a unix
/// socket path.
pub fn address_in(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line
        .split_once("address=")
        .or_else(|| line.split_once("\"address\":\""))?;
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '"')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

pub fn wait_connectable(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "mysql-lb never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Daemon {
    /// Sends `signal` (e.g. `libc::SIGHUP`) to the daemon.
    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }
}
