//! `mysql-lb top` as an operator runs it: the built binary in a pseudo-terminal in front of a real
//! proxy and MariaDB, driven by keys (sort, filter, interval, quit) and by SIGTERM, with the
//! terminal's modes and screen restored either way; an unreachable endpoint shown and retried;
//! and once more without a terminal or with `--once` (one plain frame, for scripts).

mod common;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, MariaDb};
use common::proxy::TestProxy;

const BIN: &str = env!("CARGO_BIN_EXE_mysql-lb");
/// What `top` writes last: leave the alternate screen, show the cursor.
const RESTORED: &str = "\x1b[?1049l\x1b[?25h";

fn backends(pair: &[MariaDb; 2]) -> Vec<String> {
    pair.iter().map(MariaDb::tcp_addr).collect()
}

/// `top` running in a pseudo-terminal of `cols` x `rows`, everything it wrote kept.
struct InPty {
    child: Child,
    master: std::fs::File,
    /// The terminal side, kept open to read its modes after `top` exits.
    slave: OwnedFd,
    /// The terminal's local modes before `top` started.
    cooked: libc::tcflag_t,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl InPty {
    fn spawn(args: &[&str], cols: u16, rows: u16) -> Self {
        let (mut master, mut slave) = (-1, -1);
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty fills the two descriptors, which we then own.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &ws,
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let mut cmd = Command::new(BIN);
        cmd.arg("top")
            .args(args)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave.try_clone().unwrap()));
        // SAFETY: setsid and ioctl are async-signal-safe. The pty becomes the child's controlling
        // terminal, as a login shell's is.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
                Ok(())
            });
        }
        let cooked = local_modes(&slave);
        let child = cmd.spawn().expect("spawn mysql-lb top");
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Self {
            child,
            master,
            slave,
            cooked,
            screen,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until the output after byte `from` holds `needle`; where it ends.
    fn wait_for(&self, needle: &str, from: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|t| t.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the screen after byte {from}; the last of it:\n{:?}",
                last(text.get(from..).unwrap_or(""), 3000)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn press(&mut self, key: &[u8]) {
        self.master.write_all(key).unwrap();
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "top did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn local_modes(&self) -> libc::tcflag_t {
        local_modes(&self.slave)
    }

    /// Waits until everything written has been read, then asserts the last bytes restored
    /// the screen.
    fn assert_screen_restored(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.text().ends_with(RESTORED) {
            assert!(
                Instant::now() < deadline,
                "the output does not end by restoring the screen: {:?}",
                last(&self.text(), 200)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A terminal's local modes (ECHO, ICANON, ...).
fn local_modes(tty: &OwnedFd) -> libc::tcflag_t {
    // SAFETY: tcgetattr fills the termios we own.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::tcgetattr(tty.as_raw_fd(), &mut t) }, 0);
    t.c_lflag
}

/// The last `n` characters of `s`.
fn last(s: &str, n: usize) -> &str {
    let skip = s.chars().count().saturating_sub(n);
    s.char_indices().nth(skip).map_or("", |(i, _)| &s[i..])
}

impl Drop for InPty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const COOKED: libc::tcflag_t = libc::ECHO | libc::ICANON | libc::ISIG;

#[test]
fn in_a_terminal_it_shows_the_backends_sorts_on_s_and_quits_clean_on_q() {
    let pair = shared_pair();
    let names = backends(pair);
    let proxy = TestProxy::start_with(common::proxy::with_digests(&names));
    let admin = proxy.admin.expect("admin endpoint").to_string();
    let mut top = InPty::spawn(&["--admin", &admin, "--interval", "1s"], 160, 40);
    assert_eq!(top.cooked & COOKED, COOKED, "a fresh pty is cooked");

    let entered = top.wait_for("\x1b[?1049h", 0);
    let mut at = top.wait_for("sort: total", entered);
    for name in &names {
        top.wait_for(name, entered);
    }
    top.wait_for("backends 2/2 up", entered);
    assert_eq!(top.local_modes() & COOKED, 0, "raw while top runs");

    top.press(b"s");
    at = top.wait_for("sort: count", at);
    top.press(b"s");
    at = top.wait_for("sort: avg", at);
    // `b` filters on the first backend, `r` resets.
    top.press(b"b");
    at = top.wait_for(&format!("backend: {}", names[0]), at);
    top.press(b"r");
    at = top.wait_for("backend: all", at);
    top.press(b"+");
    top.wait_for("every 1s 500ms", at);

    top.press(b"q");
    assert!(top.wait_exit().success());
    top.assert_screen_restored();
    assert_eq!(
        top.local_modes() & COOKED,
        COOKED,
        "the terminal's modes are back"
    );
}

#[test]
fn sigterm_restores_the_terminal_too() {
    let pair = shared_pair();
    let proxy = TestProxy::start_with(common::proxy::with_digests(&backends(pair)));
    let admin = proxy.admin.expect("admin endpoint").to_string();
    let mut top = InPty::spawn(&["--admin", &admin], 100, 30);
    top.wait_for("backends 2/2 up", 0);
    unsafe { libc::kill(top.child.id() as i32, libc::SIGTERM) };
    assert!(top.wait_exit().success());
    top.assert_screen_restored();
    assert_eq!(top.local_modes() & COOKED, COOKED);
}

#[test]
fn an_unreachable_endpoint_is_shown_and_retried_not_a_crash() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let admin = addr.to_string();
    let mut top = InPty::spawn(&["--admin", &admin, "--interval", "500ms"], 120, 30);
    let first = top.wait_for(&format!("admin endpoint {admin} unreachable"), 0);
    top.wait_for("retrying every 500ms", 0);
    // Still alive and redrawing after another attempt.
    top.wait_for("unreachable", first);
    assert!(top.child.try_wait().unwrap().is_none());
    top.press(b"q");
    assert!(top.wait_exit().success());
    top.assert_screen_restored();

    // Without a terminal it says so and fails.
    let out = Command::new(BIN)
        .args(["top", "--admin", &admin, "--interval", "0s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&admin) && err.contains("mysql-lb top"),
        "{err}"
    );
}

#[test]
fn without_a_terminal_or_with_once_it_prints_one_plain_frame() {
    let pair = shared_pair();
    let names = backends(pair);
    let proxy = TestProxy::start_with(common::proxy::with_digests(&names));
    let admin = proxy.admin.expect("admin endpoint").to_string();
    let marked = common::daemon::mariadb_cli(proxy.addr.port(), "SELECT 42 AS top_marker");
    assert!(marked.status.success(), "{marked:?}");
    let digest_text = mysql_lb::wire::sql::normalize(b"SELECT 42 AS top_marker", 1024);

    // stdout a pipe: one frame, no escape sequences, sized by COLUMNS/LINES.
    let out = Command::new(BIN)
        .args([
            "top",
            "--admin",
            &admin,
            "--interval",
            "300ms",
            "--sort",
            "count",
        ])
        .env("COLUMNS", "132")
        .env("LINES", "30")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frame = String::from_utf8(out.stdout).unwrap();
    assert!(!frame.contains('\x1b'), "{frame:?}");
    assert!(frame.lines().count() <= 30 && frame.lines().all(|l| l.chars().count() <= 132));
    assert!(frame.contains("sort: count"), "{frame}");
    for name in &names {
        assert!(frame.contains(name.as_str()), "{frame}");
    }
    let row = frame
        .lines()
        .find(|l| l.ends_with(&format!("query   {digest_text}")))
        .unwrap_or_else(|| panic!("no {digest_text:?} row in\n{frame}"));
    assert!(
        row.trim_start().starts_with("0.0 ") && row.contains(" 1 "),
        "{row}"
    );
    // Two samples 300 ms apart: a rate, not a dash.
    assert!(!frame.lines().next().unwrap().contains(" - qps"), "{frame}");

    // --once in a terminal: one frame, no raw mode, no alternate screen.
    let mut top = InPty::spawn(&["--admin", &admin, "--once", "--interval", "0s"], 120, 30);
    assert!(top.wait_exit().success());
    let end = top.wait_for(&names[1], 0);
    let text = top.text();
    assert!(!text.contains("\x1b[?1049h"), "{text:?}");
    assert!(text[..end].contains(&names[0]));
}
