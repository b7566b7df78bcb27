//! `mysql-lb top`: a live terminal view of a running mysql-lb, read from its admin endpoint
//! (`/backends` and `/queries`), in the spirit of `top` and innotop.
//!
//! It is a client of the admin endpoint like any script, so it watches a proxy on another host
//! as well as the local one, and the proxy needs nothing for it. The parts: [`frame`] (one
//! screen as text, pure), [`term`] (raw mode, alternate screen, keys and signals); this file is
//! the loop joining them and the GETs, over the proxy's one HTTP client
//! (`crate::net::http_client`). Without a terminal (or with `--once`) it prints
//! one frame and exits, for scripts.

pub mod frame;
pub mod term;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::{TopArgs, TopSort};
use crate::net::http_client::{self, Request, Response};
use frame::{Sample, View};

/// How long one GET may take before the refresh counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The most a response may hold (a `/queries` answer at its default bound is well under this).
const MAX_RESPONSE: usize = 16 * 1024 * 1024;
/// Query rows asked for: more than any screen shows, so a client-side filter still fills it.
const QUERY_LIMIT: usize = 200;
/// What `+` and `-` move the interval by, and its bounds.
const INTERVAL_STEP: Duration = Duration::from_millis(500);
const INTERVAL_MIN: Duration = Duration::from_millis(500);
const INTERVAL_MAX: Duration = Duration::from_secs(60);

/// Why `top` stopped short.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error("cannot read the token file {path}: {source}")]
    TokenFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("admin endpoint {admin}: {error}")]
    Unreachable { admin: String, error: String },
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    #[error("cannot start the HTTP client: {0}")]
    Runtime(std::io::Error),
}

/// Runs `top` as `args` say, until `q` or a signal (or after one frame without a terminal).
pub fn run(args: &TopArgs) -> Result<(), TopError> {
    let token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|source| TopError::TokenFile {
                    path: path.clone(),
                    source,
                })?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    // Built before the terminal's signals are blocked and starting no thread: the one its
    // name look-ups start later inherits the blocked signals (see `term::Signals`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(TopError::Runtime)?;
    let source = Source {
        admin: &args.admin,
        token: token.as_deref(),
        runtime,
    };
    let interactive =
        !args.once && std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if interactive {
        interactive_loop(&source, args)
    } else {
        once(&source, args)
    }
}

/// Where samples come from: the admin endpoint, asked on a runtime of `top`'s own (the rest of
/// `top` is a plain loop, so each GET runs to its end before the loop goes on).
struct Source<'a> {
    admin: &'a str,
    token: Option<&'a str>,
    runtime: tokio::runtime::Runtime,
}

impl Source<'_> {
    /// GETs `path`, on a connection of its own, within [`REQUEST_TIMEOUT`]: (status, body).
    fn get(&self, path: &str) -> Result<(u16, Vec<u8>), String> {
        let request = Request::get(path, MAX_RESPONSE).bearer(self.token.map(str::as_bytes));
        let fetched = http_client::fetch(self.admin, &request, REQUEST_TIMEOUT);
        match self.runtime.block_on(fetched) {
            Ok(Response { status, body }) => Ok((status, body)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn sample(&self, sort: TopSort, backend: Option<&str>) -> Result<Sample, String> {
        let (status, body) = self.get("/backends")?;
        if status != 200 {
            return Err(format!("/backends answered {status}"));
        }
        let backends: Value =
            serde_json::from_slice(&body).map_err(|e| format!("/backends is not JSON: {e}"))?;
        let mut path = format!("/queries?sort={}&limit={QUERY_LIMIT}", sort.as_str());
        if let Some(b) = backend {
            path.push_str("&backend=");
            path.push_str(&percent_encode(b));
        }
        let (status, body) = self.get(&path)?;
        let queries = match status {
            200 => Some(
                serde_json::from_slice(&body).map_err(|e| format!("/queries is not JSON: {e}"))?,
            ),
            // An instance without query digests at all.
            404 => None,
            s => return Err(format!("/queries answered {s}")),
        };
        Ok(Sample {
            at: Instant::now(),
            backends,
            queries,
        })
    }
}

/// One frame to stdout: two samples an interval apart (rates need both), sized to the
/// terminal, or to `COLUMNS`/`LINES`, or 80x24.
fn once(source: &Source<'_>, args: &TopArgs) -> Result<(), TopError> {
    let unreachable = |error| TopError::Unreachable {
        admin: args.admin.clone(),
        error,
    };
    let backend = args.backend.as_deref();
    let interval: Duration = args.interval.into();
    let first = source.sample(args.sort, backend).map_err(unreachable)?;
    let (prev, now) = if interval.is_zero() {
        (None, first)
    } else {
        std::thread::sleep(interval);
        let second = source.sample(args.sort, backend).map_err(unreachable)?;
        (Some(first), second)
    };
    let (width, height) = if std::io::stdout().is_terminal() {
        term::size()
    } else {
        let env = |k: &str, d| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(d)
        };
        (env("COLUMNS", 80), env("LINES", 24))
    };
    let view = View {
        admin: &args.admin,
        now: Some(&now),
        prev: prev.as_ref(),
        sort: args.sort,
        backend,
        interval,
        error: None,
    };
    print!("{}", frame::render(width, height, &view));
    Ok(())
}

fn interactive_loop(source: &Source<'_>, args: &TopArgs) -> Result<(), TopError> {
    // Declared before the terminal so the terminal is restored before signals are unblocked.
    let signals = term::Signals::block()?;
    let mut terminal = term::Terminal::enter()?;
    let mut sort = args.sort;
    let mut backend = args.backend.clone();
    let mut interval: Duration = args.interval.into();
    interval = interval.clamp(INTERVAL_MIN, INTERVAL_MAX);
    let mut now: Option<Sample> = None;
    let mut prev: Option<Sample> = None;
    let mut error: Option<String> = None;
    let mut next_refresh = Instant::now();
    loop {
        if Instant::now() >= next_refresh {
            match source.sample(sort, backend.as_deref()) {
                Ok(s) => {
                    prev = now.replace(s);
                    error = None;
                }
                Err(e) => error = Some(e),
            }
            next_refresh = Instant::now() + interval;
        }
        let (width, height) = term::size();
        let view = View {
            admin: &args.admin,
            now: now.as_ref(),
            prev: prev.as_ref(),
            sort,
            backend: backend.as_deref(),
            interval,
            error: error.as_deref(),
        };
        terminal.draw(&frame::render(width, height, &view))?;
        let wait = next_refresh.saturating_duration_since(Instant::now());
        match signals.wait(wait)? {
            term::Event::Stop => break,
            term::Event::Resized | term::Event::Timeout => {}
            term::Event::Keys(keys) => {
                let mut quit = false;
                for k in keys {
                    match k {
                        b'q' | b'Q' | 0x03 | 0x04 => quit = true,
                        b's' => sort = sort.next(),
                        b'b' => backend = frame::next_backend(backend.as_deref(), now.as_ref()),
                        b'r' => backend = None,
                        b'+' => interval = (interval + INTERVAL_STEP).min(INTERVAL_MAX),
                        b'-' => interval = interval.saturating_sub(INTERVAL_STEP).max(INTERVAL_MIN),
                        _ => {}
                    }
                }
                if quit {
                    break;
                }
            }
        }
    }
    drop(terminal);
    drop(signals);
    Ok(())
}

/// `s` with everything but unreserved URL characters percent-encoded.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn percent_encoding_keeps_unreserved_only() {
        assert_eq!(super::percent_encode("127.0.0.1:3306"), "127.0.0.1%3A3306");
        assert_eq!(super::percent_encode("unix:/a b&c"), "unix%3A%2Fa%20b%26c");
        assert_eq!(super::percent_encode("é"), "%C3%A9");
    }
}
