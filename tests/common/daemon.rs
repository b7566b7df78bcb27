//! The real `mysql-lb` binary as a child process, for tests that need signals, flags and logs.

use std::io::{BufRead, BufReader};
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
        let deadline = Instant::now() + Duration::from_secs(30);
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
        }
        panic!(
            "no log line with {needle:?}; got:\n{}",
            self.seen.join("\n")
        );
    }

    /// Waits for a log line containing `needle` among those not seen yet: for a line a test
    /// expects again (each reload's), where [`Daemon::wait_for_line`] would find the old one.
    pub fn wait_for_new_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
        }
        panic!(
            "no new log line with {needle:?}; got:\n{}",
            self.seen.join("\n")
        );
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
