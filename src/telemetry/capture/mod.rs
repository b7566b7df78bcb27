//! Traffic capture: every command of the sessions that pass through, with its timing and a
//! summary of its response, written to compressed files a replay reads (`crate::tools::replay`).
//!
//! Sessions never wait on it. Each session's [`Recorder`](crate::proxy::session) notices a capture
//! starting or stopping by one relaxed atomic load per client read (the [`Capture::generation`]),
//! then encodes its records itself and hands them to a bounded queue with `try_send`: a full
//! queue drops the record and counts it (`mysql_lb_capture_dropped_total`). One writer thread
//! per capture compresses and writes them (see [`writer`]); the file format is in [`format`].
//!
//! What may carry a password is never queued ([`redact`]): a COM_CHANGE_USER loses its auth
//! data; a statement that [`redact::secret`] flags is written as its command byte and digest
//! only (flag [`format::REDACTED`]), and so are the executes and long data of a prepared
//! statement, unless this capture saw it prepared from a text that is no secret: a statement
//! prepared from a flagged text, or before the session's capture began (its text unknown), has
//! its parameters left out.

pub mod format;
pub mod redact;
mod writer;

use std::collections::{HashSet, VecDeque};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::wire::protocol::response::{cmd, Completed};
use format::{answered, Body, Command, Record, Response, SessionStart, DIGEST_LEN, MAX_PAYLOAD};

/// Records waiting for the writer, at most; past it records are dropped (and counted).
const QUEUE: usize = 65_536;
/// What the tracker must keep of a statement packet while a capture runs: a payload longer than
/// [`MAX_PAYLOAD`] is cut there and marked.
pub const KEEP: usize = MAX_PAYLOAD + 1;
/// Prepared statements a session's capture keeps the parameters of, at most (servers allow
/// 16,382 by default); past it an execute is written without them.
const PLAIN_IDS: usize = 16_384;
/// Files rotate at this size unless the request says otherwise.
const DEFAULT_ROTATE: u64 = 64 << 20;

/// Why a capture did not start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("a capture is already running (into {0})")]
    Running(String),
    #[error("the capture directory must be an absolute path")]
    Relative,
    #[error("{0} is a symbolic link")]
    Symlink(String),
    #[error("{0} exists and is not a directory")]
    NotADirectory(String),
    #[error("{0} is not owned by the user mysql-lb runs as")]
    NotOwned(String),
    #[error("{0} is not empty")]
    NotEmpty(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Which sessions a capture takes (all when every field is None).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub pool: Option<String>,
    pub backend: Option<String>,
    pub user: Option<String>,
}

impl Filter {
    fn takes(&self, who: &SessionProfile<'_>) -> bool {
        let ok = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        ok(&self.pool, who.pool) && ok(&self.backend, who.backend) && ok(&self.user, who.user)
    }
}

/// What `POST /capture/start` asks for.
#[derive(Debug, Clone)]
pub struct Request {
    pub dir: PathBuf,
    /// Stop on its own after this long.
    pub duration: Option<Duration>,
    /// Stop on its own once this many (compressed) bytes are written.
    pub max_bytes: Option<u64>,
    /// Start a new file past this size.
    pub rotate_bytes: Option<u64>,
    pub filter: Filter,
}

/// Who a session is, as its capture's start record says.
#[derive(Debug, Clone, Copy)]
pub struct SessionProfile<'a> {
    pub user: &'a str,
    pub schema: &'a str,
    pub pool: &'a str,
    pub backend: &'a str,
    pub client: &'a str,
    pub capabilities: u32,
    /// The character set (collation id) of the client's handshake response.
    pub charset: u8,
}

/// The proxy's capture switch: at most one capture at a time.
#[derive(Debug)]
pub struct Capture {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Bumped when a capture starts or stops: what sessions compare at each client read.
    generation: AtomicU64,
    current: Mutex<Option<Arc<Active>>>,
    /// The last capture that ran (for `GET /capture` after it stopped).
    last: Mutex<Option<Arc<Active>>>,
    dropped_total: prometheus::IntCounter,
}

/// One running (or finished) capture.
#[derive(Debug)]
pub struct Active {
    started: Instant,
    started_unix_us: u64,
    dir: PathBuf,
    request: Request,
    tx: SyncSender<Vec<u8>>,
    stop: AtomicBool,
    finished: AtomicBool,
    stop_reason: Mutex<Option<String>>,
    sessions: AtomicU64,
    commands: AtomicU64,
    /// Commands written without their text or parameters (see [`redact`]).
    redacted: AtomicU64,
    /// Record bytes queued (uncompressed).
    bytes: AtomicU64,
    dropped: AtomicU64,
    /// Bytes written to files (compressed), and how many files.
    written: AtomicU64,
    files: AtomicU64,
    dropped_total: prometheus::IntCounter,
}

impl Capture {
    /// `dropped_total` is `mysql_lb_capture_dropped_total`.
    pub fn new(dropped_total: prometheus::IntCounter) -> Self {
        Self {
            inner: Arc::new(Inner {
                generation: AtomicU64::new(0),
                current: Mutex::new(None),
                last: Mutex::new(None),
                dropped_total,
            }),
        }
    }

    /// Changes whenever a capture starts or stops (one relaxed load per client read).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Relaxed)
    }

    fn current(&self) -> Option<Arc<Active>> {
        self.inner.current.lock().ok().and_then(|c| c.clone())
    }

    /// Starts a capture into `request.dir`, which must not exist or be an empty directory this
    /// user owns.
    pub fn start(&self, request: Request) -> Result<serde_json::Value, CaptureError> {
        let mut current = match self.inner.current.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some(running) = current.as_ref() {
            return Err(CaptureError::Running(running.dir.display().to_string()));
        }
        prepare_dir(&request.dir)?;
        let (tx, rx) = sync_channel(QUEUE);
        let active = Arc::new(Active::new(request, tx, self.inner.dropped_total.clone()));
        let inner = Arc::clone(&self.inner);
        let writing = Arc::clone(&active);
        std::thread::Builder::new()
            .name("capture-writer".into())
            .spawn(move || {
                writer::run(&writing, rx);
                inner.finished(&writing);
            })
            .map_err(|source| CaptureError::Io {
                path: active.dir.display().to_string(),
                source,
            })?;
        *current = Some(Arc::clone(&active));
        self.inner.generation.fetch_add(1, Ordering::Relaxed);
        tracing::info!(dir = %active.dir.display(), "capture started");
        Ok(active.status())
    }

    /// Stops the running capture; waits (up to a few seconds) for its files to be closed.
    pub async fn stop(&self) -> Option<serde_json::Value> {
        let active = self.current()?;
        active.request_stop("stopped by request");
        self.inner.unset(&active);
        for _ in 0..100 {
            if active.finished.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(active.status())
    }

    /// The running capture's status, else the last one's, else None.
    pub fn status(&self) -> Option<serde_json::Value> {
        let last = || self.inner.last.lock().ok().and_then(|l| l.clone());
        self.current().or_else(last).map(|a| a.status())
    }

    /// A session's capture, if one runs and takes it: `before` says the session was open before
    /// the capture began; `in_flight` commands already sent are not its to answer.
    pub fn join(
        &self,
        who: &SessionProfile<'_>,
        before: bool,
        in_flight: usize,
    ) -> Option<SessionCapture> {
        let active = self.current()?;
        SessionCapture::start(active, who, before, in_flight)
    }

    /// After the generation changed: keeps `mine` if it is still the running capture's, else
    /// ends it and joins the running one (as a session open before it). True if it changed.
    pub fn refresh(
        &self,
        mine: &mut Option<SessionCapture>,
        who: &SessionProfile<'_>,
        in_flight: usize,
    ) -> bool {
        let current = self.current();
        if let (Some(c), Some(m)) = (&current, mine.as_ref()) {
            if Arc::ptr_eq(c, &m.active) {
                return false;
            }
        }
        let had = mine.take().is_some();
        *mine = current.and_then(|a| SessionCapture::start(a, who, true, in_flight));
        had || mine.is_some()
    }
}

impl Inner {
    fn unset(&self, active: &Arc<Active>) {
        if let Ok(mut current) = self.current.lock() {
            if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, active)) {
                *current = None;
                if let Ok(mut last) = self.last.lock() {
                    *last = Some(Arc::clone(active));
                }
                self.generation.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The writer is done (stopped, a limit reached, or a write failed).
    fn finished(&self, active: &Arc<Active>) {
        self.unset(active);
        active.finished.store(true, Ordering::Release);
        tracing::info!(dir = %active.dir.display(), reason = ?active.stop_reason.lock().ok().and_then(|r| r.clone()), "capture finished");
    }
}

impl Active {
    fn request_stop(&self, why: &str) {
        if !self.stop.swap(true, Ordering::AcqRel) {
            if let Ok(mut r) = self.stop_reason.lock() {
                r.get_or_insert_with(|| why.to_owned());
            }
        }
    }

    /// A capture starting now, its records going to `tx`.
    fn new(
        request: Request,
        tx: SyncSender<Vec<u8>>,
        dropped_total: prometheus::IntCounter,
    ) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Active {
            started: Instant::now(),
            started_unix_us: now.as_micros() as u64,
            dir: request.dir.clone(),
            request,
            tx,
            stop: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            stop_reason: Mutex::new(None),
            sessions: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            redacted: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            files: AtomicU64::new(0),
            dropped_total,
        }
    }

    fn elapsed_us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_micros() as u64
    }

    fn send(&self, record: &Record) {
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        let mut bytes = Vec::with_capacity(64 + record_len(record));
        record.encode(&mut bytes);
        self.send_bytes(bytes);
    }

    /// Queues an encoded record, or drops and counts it when the queue is full.
    fn send_bytes(&self, bytes: Vec<u8>) {
        let n = bytes.len() as u64;
        match self.tx.try_send(bytes) {
            Ok(()) => {
                self.bytes.fetch_add(n, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.dropped_total.inc();
            }
        }
    }

    pub fn status(&self) -> serde_json::Value {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let r = &self.request;
        json!({
            "dir": self.dir.display().to_string(),
            "running": !self.finished.load(Ordering::Acquire),
            "stop_reason": self.stop_reason.lock().ok().and_then(|r| r.clone()),
            "started_unix_us": self.started_unix_us,
            "elapsed_seconds": self.started.elapsed().as_secs_f64(),
            "sessions": n(&self.sessions),
            "commands": n(&self.commands),
            "redacted": n(&self.redacted),
            "bytes": n(&self.bytes),
            "bytes_written": n(&self.written),
            "files": n(&self.files),
            "dropped": n(&self.dropped),
            "duration_seconds": r.duration.map(|d| d.as_secs_f64()),
            "max_bytes": r.max_bytes,
            "filter": {
                "pool": r.filter.pool,
                "backend": r.filter.backend,
                "user": r.filter.user,
            },
        })
    }
}

fn record_len(r: &Record) -> usize {
    match &r.body {
        Body::Command(c) => c.payload.len(),
        _ => 64,
    }
}

/// Refuses a directory that exists and is not an empty one this user owns, or is a link.
fn prepare_dir(dir: &Path) -> Result<(), CaptureError> {
    let shown = || dir.display().to_string();
    let io = |source| CaptureError::Io {
        path: dir.display().to_string(),
        source,
    };
    if !dir.is_absolute() {
        return Err(CaptureError::Relative);
    }
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(io),
        Err(e) => Err(io(e)),
        Ok(m) if m.file_type().is_symlink() => Err(CaptureError::Symlink(shown())),
        Ok(m) if !m.is_dir() => Err(CaptureError::NotADirectory(shown())),
        // SAFETY: geteuid has no preconditions and cannot fail.
        Ok(m) if m.uid() != unsafe { libc::geteuid() } => Err(CaptureError::NotOwned(shown())),
        Ok(_) => match std::fs::read_dir(dir).map_err(io)?.next() {
            Some(_) => Err(CaptureError::NotEmpty(shown())),
            None => Ok(()),
        },
    }
}

/// One session's side of a capture: numbers its commands, pairs responses with them, and
/// hands records to the capture's queue.
#[derive(Debug)]
pub struct SessionCapture {
    active: Arc<Active>,
    id: u64,
    capabilities: u32,
    next_seq: u32,
    /// Captured commands awaiting their response, in order: (command byte, seq, and for a
    /// prepare whether its text is no secret).
    waiting: VecDeque<(u8, u32, bool)>,
    /// Ids of the statements this capture saw prepared from a text that is no secret: only
    /// their executes keep their parameters.
    plain_ids: HashSet<u32>,
    /// Whether the last prepare sent was of such a text (an execute of id 0xFFFFFFFF means it).
    last_prepare_plain: bool,
    /// Responses still due to commands sent before this session's capture began.
    skip: usize,
    /// A command whose server was lost before answering, about to be sent again to another
    /// (see [`lost_unanswered`](Self::lost_unanswered)).
    resend: Option<(u8, u32, bool)>,
}

impl SessionCapture {
    fn start(
        active: Arc<Active>,
        who: &SessionProfile<'_>,
        before: bool,
        in_flight: usize,
    ) -> Option<Self> {
        if active.stop.load(Ordering::Relaxed) || !active.request.filter.takes(who) {
            return None;
        }
        let id = active.sessions.fetch_add(1, Ordering::Relaxed) + 1;
        let start = SessionStart {
            flags: if before { format::STARTED_BEFORE } else { 0 },
            capabilities: who.capabilities,
            charset: who.charset,
            user: who.user.to_owned(),
            schema: who.schema.to_owned(),
            pool: who.pool.to_owned(),
            backend: who.backend.to_owned(),
            client: who.client.to_owned(),
        };
        active.send(&Record {
            session: id,
            t_us: active.elapsed_us(Instant::now()),
            body: Body::SessionStart(start),
        });
        Some(Self {
            active,
            id,
            capabilities: who.capabilities,
            next_seq: 0,
            waiting: VecDeque::new(),
            plain_ids: HashSet::new(),
            last_prepare_plain: false,
            skip: in_flight,
            resend: None,
        })
    }

    /// A command packet's payload (command byte first), as the client sent it.
    pub fn statement(&mut self, command: u8, payload: &[u8]) {
        if let Some(lost) = self.resend.take() {
            // The same bytes sent again: one command, answered under the record written.
            self.waiting.push_back(lost);
            return;
        }
        let now = Instant::now();
        let redacted;
        let mut plain_prepare = false;
        if matches!(command, cmd::RESET_CONNECTION | cmd::CHANGE_USER) {
            // The server forgets the session's statements (their ids may come back).
            self.plain_ids.clear();
            self.last_prepare_plain = false;
        }
        let (payload, flags) = if command == cmd::CHANGE_USER {
            redacted = redact::change_user(payload, self.capabilities);
            (&redacted[..], 0)
        } else if let Some(r) = self.secret(command, payload, &mut plain_prepare) {
            redacted = r;
            self.active.redacted.fetch_add(1, Ordering::Relaxed);
            (&redacted[..], format::REDACTED)
        } else if payload.len() > MAX_PAYLOAD {
            (&payload[..MAX_PAYLOAD], format::TRUNCATED)
        } else {
            (payload, 0)
        };
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        if answered(command) {
            self.waiting.push_back((command, seq, plain_prepare));
        }
        self.active.commands.fetch_add(1, Ordering::Relaxed);
        if self.active.stop.load(Ordering::Relaxed) {
            return;
        }
        // Encoded straight from the relay's buffer: one copy, into the queued record.
        let mut bytes = Vec::with_capacity(32 + payload.len());
        let t_us = self.active.elapsed_us(now);
        Record::encode_command(&mut bytes, self.id, t_us, (seq, flags, payload));
        self.active.send_bytes(bytes);
    }

    /// What to write instead of a command that may carry a password (see [`redact`]), if it
    /// is one; `plain_prepare` is set for a prepare whose text is no secret.
    fn secret(&mut self, command: u8, payload: &[u8], plain_prepare: &mut bool) -> Option<Vec<u8>> {
        let body = payload.get(1..).unwrap_or_default();
        match command {
            cmd::QUERY | cmd::STMT_PREPARE => {
                let secret = redact::secret(body);
                if command == cmd::STMT_PREPARE {
                    self.last_prepare_plain = !secret;
                    *plain_prepare = !secret;
                }
                secret.then(|| {
                    let mut out = vec![command];
                    out.extend_from_slice(
                        &crate::wire::sql::digest(body, DIGEST_LEN).0.to_le_bytes(),
                    );
                    out
                })
            }
            cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE | cmd::STMT_SEND_LONG_DATA => {
                let plain = match format::statement_id(payload) {
                    Some(u32::MAX) => self.last_prepare_plain,
                    Some(id) => self.plain_ids.contains(&id),
                    None => false,
                };
                (!plain).then(|| payload[..payload.len().min(5)].to_vec())
            }
            cmd::STMT_CLOSE => {
                if let Some(id) = format::statement_id(payload) {
                    self.plain_ids.remove(&id);
                }
                None
            }
            _ => None,
        }
    }

    /// The server gave statement `id` to a prepare (of a text that is no secret if `plain`).
    fn prepared(&mut self, id: u32, plain: bool) {
        if plain && self.plain_ids.len() < PLAIN_IDS {
            self.plain_ids.insert(id);
        } else {
            self.plain_ids.remove(&id);
        }
    }

    /// The session's last command lost its server before any byte of an answer, so it will
    /// never complete there (a pool across backends); `again`: the same bytes are sent next to
    /// another server, whose answer is this command's (its record, already written, stays the
    /// one record of it). Without this the responses that follow would pair with the commands
    /// before theirs.
    pub fn lost_unanswered(&mut self, again: bool) {
        if self.skip > 0 {
            // Sent before this capture began: unrecorded, and its copy is a new command.
            self.skip -= 1;
            return;
        }
        let lost = self.waiting.pop_back();
        if again {
            self.resend = lost;
        }
    }

    /// The session's next commands run on `backend` (a pool across backends moved it): one
    /// record saying so, so the capture says where each command ran.
    pub fn moved_to(&mut self, backend: &str) {
        self.active.send(&Record {
            session: self.id,
            t_us: self.active.elapsed_us(Instant::now()),
            body: Body::Moved {
                backend: backend.to_owned(),
            },
        });
    }

    /// A command's response ended.
    pub fn completed(&mut self, c: &Completed) {
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        let at = c.at.unwrap_or_else(Instant::now);
        let seq = match self.waiting.front() {
            Some(&(command, seq, plain)) if command == c.command => {
                self.waiting.pop_front();
                if let (cmd::STMT_PREPARE, Some(id)) = (command, c.prepared) {
                    self.prepared(id, plain);
                }
                seq
            }
            // A ping carries nothing: it is captured from its response alone, sent when its
            // latency says.
            _ if c.command == cmd::PING => {
                let seq = self.next_seq;
                self.next_seq = self.next_seq.wrapping_add(1);
                self.active.commands.fetch_add(1, Ordering::Relaxed);
                let sent = at.checked_sub(c.latency).unwrap_or(at);
                self.active.send(&Record {
                    session: self.id,
                    t_us: self.active.elapsed_us(sent),
                    body: Body::Command(Command {
                        seq,
                        flags: 0,
                        payload: vec![cmd::PING],
                    }),
                });
                seq
            }
            // A command the capture does not take (COM_STATISTICS, ...) has no entry.
            _ => return,
        };
        let command = c.command;
        self.active.send(&Record {
            session: self.id,
            t_us: self.active.elapsed_us(at),
            body: Body::Response(Response {
                seq,
                command,
                error: c.error,
                rows: c.rows,
                affected: c.affected,
                latency_us: c.latency.as_micros() as u64,
                prepared: c.prepared.unwrap_or(0),
                error_code: c.error_code,
            }),
        });
    }
}

impl Drop for SessionCapture {
    fn drop(&mut self) {
        self.active.send(&Record {
            session: self.id,
            t_us: self.active.elapsed_us(Instant::now()),
            body: Body::SessionEnd,
        });
    }
}

#[cfg(test)]
mod tests;
