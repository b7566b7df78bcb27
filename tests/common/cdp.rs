//! Debian's chromium, headless, driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: JSON messages ended by a NUL byte, read by chromium on fd 3 and
//! written on fd 4), so no websocket client, driver binary or crate is needed.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long one DevTools command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The chromium binary, or a failure naming the install script.
pub fn chromium_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin"].map(PathBuf::from))
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|n| dir.join(n)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium not found: run scripts/install-deps.sh (it installs Debian's chromium)"
            )
        })
}

/// A pipe's two ends, both close-on-exec and numbered above the descriptors the child is
/// given (3 and 4), so placing one there never lands on another.
fn high_pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the array; F_DUPFD_CLOEXEC returns new descriptors we own.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0, "pipe2");
        let high = |fd: i32| {
            let h = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
            assert!(h >= 10, "F_DUPFD_CLOEXEC");
            libc::close(fd);
            OwnedFd::from_raw_fd(h)
        };
        (high(fds[0]), high(fds[1]))
    }
}

pub struct Browser {
    child: Child,
    to_browser: std::fs::File,
    from_browser: mpsc::Receiver<Value>,
    next_id: u64,
    /// Every event received so far, in order.
    pub events: Vec<Value>,
    /// Chromium's own log (stderr), for failure messages.
    pub log: PathBuf,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts a headless chromium with a fresh profile; loopback pages only.
    pub fn launch() -> Self {
        let binary = chromium_binary();
        let profile = tempfile::tempdir().expect("profile dir");
        let log = profile.path().join("chromium.log");
        let (to_child_read, to_child_write) = high_pipe();
        let (from_child_read, from_child_write) = high_pipe();
        let (r, w) = (to_child_read.as_raw_fd(), from_child_write.as_raw_fd());
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--remote-debugging-pipe",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("chromium log file"));
        // SAFETY: only dup2 (async-signal-safe) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        drop((to_child_read, from_child_write));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(std::fs::File::from(from_child_read));
            let mut message = Vec::new();
            loop {
                message.clear();
                match reader.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if message.last() == Some(&0) {
                            message.pop();
                        }
                        let Ok(v) = serde_json::from_slice(&message) else {
                            return;
                        };
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Self {
            child,
            to_browser: std::fs::File::from(to_child_write),
            from_browser: rx,
            next_id: 1,
            events: Vec::new(),
            log,
            _profile: profile,
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Sends `method` (to a page when `session` is given) and returns its result; panics with
    /// the protocol's error.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("send {method}: {e}\n{}", self.log_tail()));
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self
                .from_browser
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer to {method}: {e}\n{}", self.log_tail()));
            if m["id"] == id {
                if let Some(e) = m.get("error") {
                    panic!("{method} failed: {e}");
                }
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    /// Waits for an event named `method` from `session` received after `from` events had been
    /// kept; returns its params.
    pub fn wait_event(
        &mut self,
        session: &str,
        method: &str,
        from: usize,
        timeout: Duration,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events[from.min(self.events.len())..]
                .iter()
                .find(|e| e["method"] == method && e["sessionId"] == session)
            {
                return e["params"].clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from_browser.recv_timeout(left) {
                Ok(m) => self.events.push(m),
                Err(e) => panic!("no {method} event: {e}\n{}", self.log_tail()),
            }
        }
    }

    /// Takes in whatever arrived meanwhile (events the page sent on its own).
    pub fn drain_events(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while let Ok(m) = self
            .from_browser
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.events.push(m);
        }
    }

    /// A new page with the runtime, log and page domains on: its session id.
    pub fn new_page(&mut self) -> String {
        let target = self.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        let session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            self.call(Some(&session), domain, json!({}));
        }
        session
    }

    /// Loads `url` in the page and waits for its load event.
    pub fn navigate(&mut self, session: &str, url: &str) {
        let from = self.events.len();
        let r = self.call(Some(session), "Page.navigate", json!({"url": url}));
        assert!(r.get("errorText").is_none(), "navigate to {url}: {r}");
        self.wait_event(
            session,
            "Page.loadEventFired",
            from,
            Duration::from_secs(30),
        );
    }

    /// The value of a JavaScript expression evaluated in the page.
    pub fn eval(&mut self, session: &str, expression: &str) -> Value {
        let r = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expression} threw: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// A real mouse click (press and release) at page coordinates.
    pub fn click(&mut self, session: &str, x: f64, y: f64) {
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Every console error, uncaught exception and error-level log entry (CSP violations,
    /// failed loads) seen so far, as text.
    pub fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => {
                        Some(format!("uncaught: {}", p["exceptionDetails"]))
                    }
                    "Runtime.consoleAPICalled"
                        if matches!(p["type"].as_str(), Some("error" | "assert")) =>
                    {
                        Some(format!("console.{}: {}", p["type"], p["args"]))
                    }
                    "Log.entryAdded" if p["entry"]["level"] == "error" => {
                        Some(format!("log: {}", p["entry"]))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// A PNG of the whole page.
    pub fn screenshot(&mut self, session: &str) -> Vec<u8> {
        let r = self.call(
            Some(session),
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        base64_decode(r["data"].as_str().expect("screenshot data"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let close = json!({"id": 0, "method": "Browser.close"}).to_string();
        let _ = self.to_browser.write_all(format!("{close}\0").as_bytes());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (with padding) to bytes.
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for quad in clean.chunks(4) {
        let data: Vec<u8> = quad.iter().copied().filter(|c| *c != b'=').collect();
        let n = data
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | value(*c) << (18 - 6 * i));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..data.len().max(1)]);
    }
    out
}
