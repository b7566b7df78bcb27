//! The command-phase relay: both directions of one session in one future.
//!
//! What a session does besides forwarding comes in two traits: an [`Observer`] sees what passes
//! (metrics, digests, capture), [`Steering`] decides what the relay sends and when it ends (KILLs
//! mapped, a pooled session's statements and its connection let go). Both are generic
//! parameters, so the per-packet path calls them directly, with no dynamic dispatch.
//!
//! Each direction reads into its own reusable buffer, lets the [`Tracker`] scan the new bytes in
//! place, and writes exactly what it read before reading again: two reads and two writes per round
//! trip, no copy, no allocation per packet. The write hands over the buffer itself
//! ([`WriteFrom`]): bytes written are never read again, so a TLS client leg seals a response
//! where it lies rather than copying it into a record buffer of its own. Both directions are
//! polled from one future (not two tasks) so the tracker needs no lock, and neither direction
//! ever waits on the other, so a client that pipelines a large batch while the server streams a
//! large result cannot deadlock the pair.
//! Buffers are small for the many quiet sessions, large only while a direction moves bulk data,
//! and small again once it has been quiet for a second (see [`Shrinker`]).

use std::borrow::BorrowMut;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::AsyncRead;
use tokio_util::io::poll_read_buf;
use tokio_util::sync::CancellationToken;

use crate::net::leg::{ReleaseMemory, WriteFrom};
use crate::wire::protocol::response::{Completed, TrackError, Tracker};

mod kill_rewrite;
mod timers;
use kill_rewrite::{rewrite_kills, WaitingKills};
pub use kill_rewrite::{Answer, KillRewrite};
use timers::{IdleTimer, Shrinker};

/// Buffers start small (most sessions idle most of the time) and grow for bulk transfers.
const INITIAL_BUF: usize = 8 * 1024;
const MAX_BUF: usize = 256 * 1024;
/// A grown buffer goes back to `INITIAL_BUF` once its direction has read nothing for this long,
/// so a session that once moved a large result does not keep the memory for life, and one that
/// keeps moving them does not reallocate on every round trip.
const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// A whole COM_QUIT packet.
const COM_QUIT: [u8; 5] = [1, 0, 0, 0, 0x01];

/// How the relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// The client closed its side; `quit` says whether it sent COM_QUIT first.
    ClientClosed {
        quit: bool,
    },
    /// The backend closed its side; `pending` says how many commands were unanswered.
    BackendClosed {
        pending: usize,
    },
    ClientIo(io::Error),
    BackendIo(io::Error),
    /// Shutting down, and the session reached a command boundary: nothing in flight.
    Drained,
    /// No command from the client for the idle timeout, and nothing in flight.
    IdleTimeout,
    /// A protocol violation; everything before the offending packet was forwarded.
    Protocol(TrackError),
    /// The session let the backend go (see [`Steering::releasable`]) at a command boundary:
    /// nothing in flight, nothing read and unsent; or the client scan stopped before a
    /// prepared-statement command (see `Tracker::pause_statements`), whose bytes are then at the
    /// front of the client's buffer. Carries the two buffers (client's, backend's) for the next
    /// relay to reuse, and whether the relay's last look at the client was a read that would
    /// have blocked: the task is then registered to be woken by the client's next bytes (the
    /// `AsyncRead` contract), and a caller that waits for them with no await in between need
    /// not ask again before it first sleeps.
    Released(BytesMut, BytesMut, bool),
}

struct Direction {
    buf: BytesMut,
    written: usize,
    /// Trailing bytes of `buf` held back for the next read (a command that may be a KILL, not
    /// whole yet): never written before the scan that sees them whole.
    held: usize,
    eof: bool,
    /// Set when the buffer was cut at a bad packet: once the good part is written, stop.
    failed: Option<TrackError>,
    /// Reads so far: the shrink timer compares them instead of resetting a deadline on every read.
    reads: u64,
    /// The last poll of this direction ended on a read of its source that would have blocked.
    parked: bool,
}

impl Direction {
    /// A direction with no buffer yet: [`restart`](Self::restart) gives it one.
    fn empty() -> Self {
        Self {
            buf: BytesMut::new(),
            written: 0,
            held: 0,
            eof: false,
            failed: None,
            reads: 0,
            parked: false,
        }
    }

    /// A new relay's direction on `initial` (bytes already read); the read count goes on, so
    /// the shrink timer still tells a quiet direction.
    #[inline]
    fn restart(&mut self, initial: BytesMut) {
        let mut buf = initial;
        if buf.capacity() < INITIAL_BUF {
            buf.reserve(INITIAL_BUF - buf.len());
        }
        self.buf = buf;
        self.written = 0;
        self.held = 0;
        self.eof = false;
        self.failed = None;
        self.parked = false;
    }

    /// Gives a grown buffer's memory back if nothing is in it but held bytes; true if it did.
    fn shrink(&mut self) -> bool {
        if self.buf.capacity() <= INITIAL_BUF || self.buf.len() > self.held {
            return false;
        }
        let mut small = BytesMut::with_capacity(INITIAL_BUF.max(self.held));
        small.extend_from_slice(&self.buf);
        self.buf = small;
        true
    }

    fn grown(&self) -> bool {
        self.buf.capacity() > INITIAL_BUF
    }
}

enum Step {
    /// The source ended and everything read from it was written.
    Eof,
    Failed(TrackError),
    Io(io::Error, Side),
}

#[derive(Clone, Copy)]
enum Side {
    Read,
    Write,
}

/// What a direction does with its bytes besides forwarding them.
trait Hooks {
    /// Sees each read's bytes before they are forwarded (and may rewrite a command in them);
    /// `fresh` of them are new, the rest were held back last time. Returns how many bytes at the
    /// end to hold back for the next read. On an error `buf` is left holding only what precedes
    /// the offending packet (see [`keep_good_part`]).
    fn scan(&mut self, buf: &mut BytesMut, fresh: usize) -> Result<usize, TrackError>;
    /// Runs once everything read so far (but held bytes) has been written.
    fn written(&mut self) {}
    /// Where the first byte that may not be written yet is (a KILL waiting for its rewrite).
    fn writable(&mut self, _cx: &mut Context<'_>, _buf: &mut BytesMut) -> Option<usize> {
        None
    }
    /// True when the source must not be read for now (the relay is about to end).
    fn paused(&self) -> bool {
        false
    }
}

/// Sees what a session relays: completed commands, bytes moved and statements sent, as they
/// happen. An observer only watches: whatever it does, the relay forwards the same bytes and ends
/// the same way (what may change that is [`Steering`]'s). A statement's tag is the observer's own
/// (its digest's), handed back to it in the command's [`Completed`].
pub trait Observer {
    fn completed(&mut self, c: &Completed);
    /// `n` bytes read from the client (`to_backend`) or from the backend, about to be forwarded.
    fn relayed(&mut self, to_backend: bool, n: usize);
    /// A statement packet's payload (command byte first; at least the first bytes the tracker
    /// was asked to keep), as the client sent it; returns the tag its [`Completed`] carries.
    fn statement(&mut self, _command: u8, _payload: &[u8]) -> u64 {
        0
    }
}

/// Steers a session's relay: what the tracker keeps of statements, what goes to the backend in
/// a command's place (a KILL mapped, a prepared statement's id), and when the relay lets the
/// backend go or keeps it. `rewrite_kill` is here, not with [`Observer`]: it changes the bytes the
/// backend is sent and may hold back everything after the KILL. The defaults are a session that
/// owns its backend connection and sends what its client sends.
pub trait Steering {
    /// Called before each client scan with the commands in flight; returns a new statement
    /// limit for the tracker (see `Tracker::set_statement_limit`) when it should change.
    fn client_scan(&mut self, _in_flight: usize) -> Option<usize> {
        None
    }
    /// Given a command packet that may be a KILL (header included), returns the packet to send the
    /// backend instead, if any, or a future of it.
    /// Whether a statement too long to be handed over whole (see
    /// `Tracker::guard_statements`) must end the session rather than be forwarded: its backend
    /// takes no writes now. Asked before each client scan of a guarded session.
    fn refuses_long_statements(&self) -> bool {
        false
    }

    fn rewrite_kill(&mut self, _packet: &[u8]) -> Option<KillRewrite> {
        None
    }
    /// The client scan stopped before a prepared-statement command (see
    /// `Tracker::pause_statements`; `packet` is it, header first, and what follows, or the part
    /// read so far): true when it was rewritten in place for the backend, so it goes on.
    fn resume_statement(&mut self, _packet: &mut [u8]) -> bool {
        false
    }
    /// Whether the session may give its backend connection back at the next command boundary
    /// (a transaction-mode pool between transactions); the relay then ends with
    /// [`RelayEnd::Released`]. Sessions that own their connection never do.
    fn releasable(&self) -> bool {
        false
    }
    /// Whether the backend connection outlives the session (a pool's): a client's COM_QUIT at
    /// the end of a read is then not forwarded, so the server does not close it.
    fn keeps_backend(&self) -> bool {
        false
    }
    /// Asked once nothing is in flight, with the backend's bytes not written yet (`response`,
    /// header first): true to withhold them from the client. The relay then reads neither side
    /// again and ends with [`RelayEnd::Released`], the bytes in its backend buffer. A split's
    /// write refused by a primary that just went read-only (ERR 1290) is withheld this way, to
    /// run again on the new primary (see `proxy::session::pooled::refusal`).
    fn withhold(&mut self, _response: &[u8]) -> bool {
        false
    }
    /// Whether the relay withheld a response ([`withhold`](Self::withhold)) and must end.
    fn withholding(&self) -> bool {
        false
    }
    /// Asked before each client scan: true to stop before every command not scanned yet from
    /// now on (`Tracker::pause_before_next`), so that the session looks at each before it is
    /// sent; a split session on a primary that went read-only under its transaction.
    fn pauses_now(&self) -> bool {
        false
    }
}

struct Upstream<'a, O> {
    tracker: &'a mut Tracker,
    observer: &'a mut O,
    quit: bool,
    /// When the client last sent bytes, read or written (for the idle timeout).
    active: &'a mut Option<Instant>,
    pending: &'a mut WaitingKills,
}

impl<O: Observer + Steering> Hooks for Upstream<'_, O> {
    fn scan(&mut self, buf: &mut BytesMut, fresh: usize) -> Result<usize, TrackError> {
        self.observer.relayed(true, fresh);
        if let Some(limit) = self.observer.client_scan(self.tracker.pending()) {
            self.tracker.set_statement_limit(limit);
        }
        if self.tracker.guards_statements() {
            let refuse = self.observer.refuses_long_statements();
            self.tracker.refuse_long_statements(refuse);
        }
        if !self.tracker.pauses_every_command() && self.observer.pauses_now() {
            self.tracker.pause_before_next();
        }
        let mut held = self.scan_from(buf, 0)?;
        // Stopped before a prepared-statement command the observer can rewrite in place: it
        // goes on, and so does the scan, from there.
        while self.tracker.paused() && !self.tracker.pauses_every_command() {
            let start = buf.len() - held;
            if !self.observer.resume_statement(&mut buf[start..]) {
                break;
            }
            self.tracker.pause_statements(true);
            held = self.scan_from(buf, start)?;
        }
        Ok(held)
    }

    fn written(&mut self) {
        // The write of a command's last byte starts its latency clock.
        let now = Instant::now();
        if self.tracker.pending() > 0 {
            self.tracker.on_written(now);
        }
        *self.active = Some(now);
    }

    fn writable(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Option<usize> {
        self.pending.poll(cx, buf)
    }

    /// A transaction-mode pool's session stopped before a prepared-statement command (see
    /// `Tracker::pause_statements`): the relay ends once what precedes it is answered.
    fn paused(&self) -> bool {
        self.tracker.paused()
    }
}

impl<O: Observer + Steering> Upstream<'_, O> {
    /// Scans `buf[from..]` (bytes before `from` were scanned already); returns how many bytes
    /// at the end to hold back.
    fn scan_from(&mut self, buf: &mut BytesMut, from: usize) -> Result<usize, TrackError> {
        let scan = self.tracker.on_client_mut(&mut buf[from..]);
        if !self.tracker.statements().is_empty() {
            // Before a KILL is rewritten: the offsets are this buffer's.
            tag_statements(self.tracker, &buf[from..], &mut *self.observer);
        }
        if let Err(e) = &scan {
            buf.truncate(from + e.start().unwrap_or(0));
        }
        // KILLs before a bad packet are still forwarded, so they are mapped too.
        if !self.tracker.kill_candidates().is_empty() {
            let kills = self.tracker.kill_candidates();
            if from == 0 {
                rewrite_kills(buf, kills, &mut *self.observer, self.pending);
            } else {
                let kills: Vec<_> = kills.iter().map(|&(a, b)| (a + from, b + from)).collect();
                rewrite_kills(buf, &kills, &mut *self.observer, self.pending);
            }
        }
        let scan = scan?;
        self.quit |= scan.quit;
        if scan.quit && self.observer.keeps_backend() && buf.ends_with(&COM_QUIT) {
            buf.truncate(buf.len() - COM_QUIT.len());
        }
        if scan.held > 0 {
            // Held bytes are not written yet (the write stamps the rest); a client trickling a
            // command into them is not idle.
            *self.active = Some(Instant::now());
        }
        Ok(scan.held)
    }
}

/// Hands each statement packet of the last client scan to the observer; tags its command.
#[inline(never)]
fn tag_statements(tracker: &mut Tracker, buf: &[u8], observer: &mut impl Observer) {
    for i in 0..tracker.statements().len() {
        let s = tracker.statements()[i];
        let tag = observer.statement(s.command, tracker.statement_payload(&s, buf));
        if let (Some(index), true) = (s.index, tag != 0) {
            tracker.tag(index, tag);
        }
    }
}

struct Downstream<'a, O> {
    tracker: &'a mut Tracker,
    observer: &'a mut O,
    /// When the backend last sent something: the end of the last response, once idle.
    active: &'a mut Option<Instant>,
}

impl<O: Observer + Steering> Hooks for Downstream<'_, O> {
    fn scan(&mut self, buf: &mut BytesMut, fresh: usize) -> Result<usize, TrackError> {
        let observer = &mut *self.observer;
        observer.relayed(false, fresh);
        let now = Instant::now();
        *self.active = Some(now);
        let scan = self
            .tracker
            .on_server_mut(buf, now, |c| observer.completed(&c));
        if let Err(e) = &scan {
            keep_good_part(buf, e);
        }
        scan?;
        // Everything answered, nothing of it written yet: the session may keep it back.
        if self.tracker.idle() && fresh == buf.len() && observer.withhold(buf) {
            return Ok(buf.len());
        }
        Ok(0)
    }

    fn paused(&self) -> bool {
        self.observer.withholding()
    }
}

/// Moves bytes one way until the source would block or ends.
fn poll_direction<R, W>(
    cx: &mut Context<'_>,
    dir: &mut Direction,
    src: &mut R,
    dst: &mut W,
    hooks: &mut impl Hooks,
) -> Poll<Step>
where
    R: AsyncRead + Unpin,
    W: WriteFrom,
{
    dir.parked = false;
    loop {
        let waiting = hooks.writable(cx, &mut dir.buf);
        let ready = dir.buf.len() - dir.held;
        let limit = waiting.map_or(ready, |at| at.min(ready));
        while dir.written < limit {
            // The written bytes are not read again: a TLS leg may seal them in place.
            match dst.poll_write_from(cx, &mut dir.buf, dir.written..limit) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Step::Io(io::ErrorKind::WriteZero.into(), Side::Write))
                }
                Poll::Ready(Ok(n)) => dir.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Step::Io(e, Side::Write)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if limit < ready {
            // What precedes the KILL goes on its way; its answer's waker brings the relay back.
            if let Poll::Ready(Err(e)) = Pin::new(&mut *dst).poll_flush(cx) {
                return Poll::Ready(Step::Io(e, Side::Write));
            }
            return Poll::Pending;
        }
        if ready > 0 {
            // A TLS or compressing leg may hold written bytes back until flushed (a plain socket
            // flushes as a no-op): nothing is read again until they are on their way.
            match Pin::new(&mut *dst).poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Step::Io(e, Side::Write)),
                Poll::Pending => return Poll::Pending,
            }
            hooks.written();
            // A read that filled the buffer suggests a bulk transfer: give the next one all the
            // room at once (one large allocation, which the allocator maps apart from its heap and
            // unmaps when freed, rather than a ladder of sizes that would fragment the heap).
            let full = dir.buf.len() == dir.buf.capacity();
            if dir.held > 0 {
                dir.buf.copy_within(ready.., 0);
            }
            dir.buf.truncate(dir.held);
            dir.written = 0;
            if full && dir.buf.capacity() < MAX_BUF {
                dir.buf.reserve(MAX_BUF - dir.buf.len());
            }
        }
        if let Some(e) = dir.failed.take() {
            return Poll::Ready(Step::Failed(e));
        }
        if dir.eof {
            return Poll::Ready(Step::Eof);
        }
        if hooks.paused() {
            return Poll::Pending;
        }
        match poll_read_buf(Pin::new(&mut *src), cx, &mut dir.buf) {
            Poll::Ready(Ok(0)) => dir.eof = true,
            Poll::Ready(Ok(n)) => {
                dir.reads += 1;
                scan_into(dir, n, hooks);
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Step::Io(e, Side::Read)),
            Poll::Pending => {
                dir.parked = true;
                return Poll::Pending;
            }
        }
    }
}

/// When a relay should stop on its own.
#[derive(Debug, Clone, Copy)]
pub struct Stop<'a> {
    /// Once cancelled, the relay ends at the next command boundary.
    pub drain: &'a CancellationToken,
    /// End a session whose client sent nothing for this long while nothing was in flight.
    pub idle_timeout: Option<std::time::Duration>,
}

/// Relays the command phase until either side ends or misbehaves. `initial_client` and
/// `initial_backend` are bytes already read during the handshake; `observer` sees every completed
/// command and every read, and steers the relay ([`Steering`]).
pub async fn relay<C, B>(
    client: &mut C,
    backend: &mut B,
    tracker: &mut Tracker,
    initial_client: BytesMut,
    initial_backend: BytesMut,
    stop: Stop<'_>,
    observer: &mut (impl Observer + Steering),
) -> RelayEnd
where
    C: AsyncRead + WriteFrom + ReleaseMemory,
    B: AsyncRead + WriteFrom + ReleaseMemory,
{
    let watch = Watch {
        draining: &mut crate::proxy::gate::cancelled(stop.drain),
        idle_timeout: stop.idle_timeout,
    };
    relay_gated(
        client,
        backend,
        tracker,
        initial_client,
        initial_backend,
        watch,
        observer,
    )
    .await
}

/// What a relay watches besides its legs: the drain, through a gate its caller keeps, and the
/// idle timeout. A pooled session runs one relay per transaction; a gate made per relay
/// registered with the drain token and unregistered again each time (two allocations and four
/// lock round trips per transaction), where the session's own gate stays registered between
/// its relays.
pub struct Watch<'s, 'a> {
    /// Gated `stop.drain` (see [`crate::proxy::gate`]).
    pub draining: &'s mut crate::proxy::gate::Cancelled<'a>,
    pub idle_timeout: Option<std::time::Duration>,
}

/// [`relay`] with the drain's gate the caller keeps (see [`Watch`]).
pub async fn relay_gated<C, B>(
    client: &mut C,
    backend: &mut B,
    tracker: &mut Tracker,
    initial_client: BytesMut,
    initial_backend: BytesMut,
    watch: Watch<'_, '_>,
    observer: &mut (impl Observer + Steering),
) -> RelayEnd
where
    C: AsyncRead + WriteFrom + ReleaseMemory,
    B: AsyncRead + WriteFrom + ReleaseMemory,
{
    // The state is the future's own here (one relay for the session): reached without the
    // indirection a borrowed one costs at every poll.
    let mut session = RelayState {
        relay: Relay::new(watch.idle_timeout),
        legs: Legs {
            client,
            backend,
            tracker,
            observer,
        },
    };
    session.relay.restart(initial_client, initial_backend);
    session.prescan();
    let (draining, mut drain_now) = (watch.draining, false);
    poll_fn(|cx| session.poll(cx, draining, &mut drain_now)).await
}

/// What one relay runs between: the two legs, the session's tracker, and its observer.
pub struct Legs<'a, C, B, O> {
    pub client: &'a mut C,
    pub backend: &'a mut B,
    pub tracker: &'a mut Tracker,
    pub observer: &'a mut O,
}

/// A relay's own state, kept by a session that runs one relay after another (a pooled session,
/// one per transaction): each [`run`](Self::run) starts where a new relay would (its buffers
/// are the caller's), but the state is built and placed once per session, not once per
/// transaction; and the future of a run holds only references, so awaiting it moves a few
/// words, not the whole state.
pub struct Relay {
    up: Direction,
    down: Direction,
    quit: bool,
    /// When the client's bytes last reached the backend, and when the backend last sent
    /// something (the end of the last response, once idle): the idle timeout counts from these.
    client_active: Option<Instant>,
    backend_active: Option<Instant>,
    /// A client protocol error waiting for the commands before it to be answered.
    client_failed: Option<TrackError>,
    /// KILLs read from the client waiting for their rewrite.
    pending: WaitingKills,
    idle: Option<IdleTimer>,
    /// Kept across runs: a buffer grown in one transaction is given back once the session was
    /// quiet for [`QUIET`], whichever run that falls in.
    shrink: Shrinker,
}

impl Relay {
    /// A relay that ends a session idle for `idle_timeout` (None: never).
    pub fn new(idle_timeout: Option<std::time::Duration>) -> Self {
        Relay {
            up: Direction::empty(),
            down: Direction::empty(),
            quit: false,
            client_active: None,
            backend_active: None,
            client_failed: None,
            pending: WaitingKills::default(),
            idle: idle_timeout.map(IdleTimer::new),
            shrink: Shrinker::default(),
        }
    }

    /// Back to a new relay's start, on `up` and `down` (bytes already read from the client
    /// and the backend): what the last run left (its buffers, an error, KILLs waiting) goes.
    /// Inlined with both directions' restarts: run once per transaction.
    #[inline]
    fn restart(&mut self, up: BytesMut, down: BytesMut) {
        self.up.restart(up);
        self.down.restart(down);
        self.quit = false;
        self.client_active = None;
        self.backend_active = None;
        self.client_failed = None;
        self.pending.clear();
        if let Some(idle) = self.idle.as_mut() {
            idle.restart();
        }
    }

    /// Relays the command phase on `legs` until either side ends or misbehaves, or the
    /// observer lets the backend go ([`RelayEnd::Released`]); `up` and `down` are bytes already
    /// read from the client and the backend, `draining` the caller's gate on the drain (see
    /// [`Watch`]).
    pub async fn run<C, B, O>(
        &mut self,
        legs: Legs<'_, C, B, O>,
        up: BytesMut,
        down: BytesMut,
        draining: &mut crate::proxy::gate::Cancelled<'_>,
    ) -> RelayEnd
    where
        C: AsyncRead + WriteFrom + ReleaseMemory,
        B: AsyncRead + WriteFrom + ReleaseMemory,
        O: Observer + Steering,
    {
        self.restart(up, down);
        let mut drain_now = false;
        let mut session = RelayState { relay: self, legs };
        session.prescan();
        poll_fn(|cx| session.poll(cx, draining, &mut drain_now)).await
    }
}

/// One session's relay while it runs: its state (`R`: a [`Relay`], owned or borrowed), and
/// what it runs between.
struct RelayState<'a, R, C, B, O> {
    relay: R,
    legs: Legs<'a, C, B, O>,
}

impl<R, C, B, O> RelayState<'_, R, C, B, O>
where
    R: BorrowMut<Relay>,
    C: AsyncRead + WriteFrom + ReleaseMemory,
    B: AsyncRead + WriteFrom + ReleaseMemory,
    O: Observer + Steering,
{
    /// One poll of the relay: both directions, the drain and the timers.
    #[inline]
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        draining: &mut crate::proxy::gate::Cancelled<'_>,
        drain_now: &mut bool,
    ) -> Poll<RelayEnd> {
        // On shutdown, end at the first command boundary — checked before reading the client, so
        // a command that arrives after the last response is never half served.
        if !*drain_now && draining.poll_gated(cx).is_ready() {
            *drain_now = true;
        }
        if *drain_now && self.boundary() {
            return Poll::Ready(RelayEnd::Drained);
        }
        let r = self.relay.borrow_mut();
        if let Some(idle) = r.idle.as_mut() {
            let last = r.client_active.max(r.backend_active);
            let quiet = quiet(self.legs.tracker, &r.up, &r.down);
            if idle.expired(cx, last, quiet) {
                return Poll::Ready(RelayEnd::IdleTimeout);
            }
        }
        if r.shrink.poll(cx, &mut r.up, &mut r.down) {
            self.legs.client.release_memory();
            self.legs.backend.release_memory();
        }
        if let Poll::Ready(end) = self.poll_upstream(cx) {
            return Poll::Ready(end);
        }
        let step = self.poll_downstream(cx);
        let legs_hold = self.legs.client.holds_memory() || self.legs.backend.holds_memory();
        let r = self.relay.borrow_mut();
        r.shrink.arm_if_grown(cx, &r.up, &r.down, legs_hold);
        match step {
            Poll::Ready(end) => Poll::Ready(end),
            Poll::Pending => self.at_rest(*drain_now).map_or(Poll::Pending, Poll::Ready),
        }
    }
}

impl<R, C, B, O> RelayState<'_, R, C, B, O>
where
    R: BorrowMut<Relay>,
    C: AsyncRead + WriteFrom,
    B: AsyncRead + WriteFrom,
    O: Observer + Steering,
{
    fn prescan(&mut self) {
        let r = self.relay.borrow_mut();
        let mut hooks = Upstream {
            tracker: &mut *self.legs.tracker,
            observer: &mut *self.legs.observer,
            quit: false,
            active: &mut r.client_active,
            pending: &mut r.pending,
        };
        prescan(&mut r.up, &mut hooks);
        r.quit |= hooks.quit;
        let mut hooks = Downstream {
            tracker: &mut *self.legs.tracker,
            observer: &mut *self.legs.observer,
            active: &mut r.backend_active,
        };
        prescan(&mut r.down, &mut hooks);
    }

    /// Nothing in flight and nothing half read: a safe point to close the session.
    #[inline]
    fn boundary(&self) -> bool {
        let r = self.relay.borrow();
        self.legs.tracker.idle() && r.up.buf.is_empty() && r.down.buf.is_empty()
    }

    /// How the relay ends now that neither direction can move, if it does: the drain reached a
    /// boundary, a COM_QUIT was kept from the backend, or the session lets its backend go.
    #[inline]
    fn at_rest(&mut self, drain_now: bool) -> Option<RelayEnd> {
        if self.legs.observer.withholding() {
            let r = self.relay.borrow_mut();
            let up = std::mem::take(&mut r.up.buf);
            let down = std::mem::take(&mut r.down.buf);
            return Some(RelayEnd::Released(up, down, false));
        }
        if drain_now && self.boundary() {
            return Some(RelayEnd::Drained);
        }
        // A COM_QUIT not forwarded: nobody closes the client's side but the proxy, and
        // clients (Node mysql2) wait for that close.
        if self.relay.borrow().quit && self.legs.observer.keeps_backend() && self.boundary() {
            return Some(RelayEnd::ClientClosed { quit: true });
        }
        // Stopped before a prepared-statement command, everything before it answered: the
        // pool's session handles it (its bytes stay at the front of the client's buffer).
        let released =
            self.paused_at_boundary() || self.legs.observer.releasable() && self.boundary();
        released.then(|| {
            let r = self.relay.borrow_mut();
            let up = std::mem::take(&mut r.up.buf);
            let down = std::mem::take(&mut r.down.buf);
            RelayEnd::Released(up, down, r.up.parked)
        })
    }

    /// Stopped before a prepared-statement command with nothing before it in flight.
    fn paused_at_boundary(&self) -> bool {
        let (tracker, r) = (&*self.legs.tracker, self.relay.borrow());
        tracker.paused() && tracker.idle() && r.up.buf.len() == r.up.held && r.down.buf.is_empty()
    }

    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let r = self.relay.borrow_mut();
        r.up.parked = false;
        if r.client_failed.is_some() {
            return Poll::Pending;
        }
        let legs = &mut self.legs;
        let mut hooks = Upstream {
            tracker: &mut *legs.tracker,
            observer: &mut *legs.observer,
            quit: false,
            active: &mut r.client_active,
            pending: &mut r.pending,
        };
        let step = poll_direction(cx, &mut r.up, legs.client, legs.backend, &mut hooks);
        r.quit |= hooks.quit;
        match step {
            // The commands before the bad packet were sent: their answers go first.
            Poll::Ready(Step::Failed(e)) if e.is_client() => {
                r.client_failed = Some(e);
                Poll::Pending
            }
            Poll::Ready(step) => Poll::Ready(upstream_end(step, r.quit)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_downstream(&mut self, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let r = self.relay.borrow_mut();
        let legs = &mut self.legs;
        let mut hooks = Downstream {
            tracker: &mut *legs.tracker,
            observer: &mut *legs.observer,
            active: &mut r.backend_active,
        };
        match poll_direction(cx, &mut r.down, legs.backend, legs.client, &mut hooks) {
            Poll::Ready(step) => Poll::Ready(downstream_end(step, r.quit, legs.tracker.pending())),
            Poll::Pending => match r.client_failed.take() {
                Some(e) if answered(legs.tracker, &r.down) => Poll::Ready(RelayEnd::Protocol(e)),
                failed => {
                    r.client_failed = failed;
                    Poll::Pending
                }
            },
        }
    }
}

/// No command waiting for its answer, nothing read waiting to be written (but held bytes) and
/// nothing half relayed to the client: the idle timeout may close the session. Unlike
/// [`RelayState::boundary`], a command packet the client has only begun does not count (a
/// server's wait_timeout covers the first packet too), or one stalled byte of a header would
/// keep a session for ever. The drain keeps `boundary`: it is bounded by `shutdown_timeout`,
/// and a client part way through a large command is then served, not cut.
fn quiet(tracker: &Tracker, up: &Direction, down: &Direction) -> bool {
    tracker.pending() == 0
        && tracker.server_at_boundary()
        && up.buf.len() == up.held
        && down.buf.is_empty()
}

/// True once every command the backend can answer now has been answered and relayed: the place
/// for an ERR of the proxy's own.
fn answered(tracker: &Tracker, down: &Direction) -> bool {
    (tracker.pending() == 0 || tracker.open_ended())
        && tracker.server_at_boundary()
        && down.buf.is_empty()
}

/// How the session ends when the client-to-backend direction stops.
fn upstream_end(step: Step, quit: bool) -> RelayEnd {
    match step {
        Step::Eof => RelayEnd::ClientClosed { quit },
        Step::Failed(e) => RelayEnd::Protocol(e),
        Step::Io(e, Side::Read) => RelayEnd::ClientIo(e),
        Step::Io(e, Side::Write) => RelayEnd::BackendIo(e),
    }
}

/// How the session ends when the backend-to-client direction stops. After the client's COM_QUIT
/// the backend closing (often before the client does) is the client's quit, not a backend failure.
fn downstream_end(step: Step, quit: bool, pending: usize) -> RelayEnd {
    match step {
        Step::Eof | Step::Io(_, Side::Read) if quit => RelayEnd::ClientClosed { quit: true },
        Step::Eof => RelayEnd::BackendClosed { pending },
        Step::Failed(e) => RelayEnd::Protocol(e),
        Step::Io(e, Side::Read) => RelayEnd::BackendIo(e),
        Step::Io(e, Side::Write) => RelayEnd::ClientIo(e),
    }
}

/// Lets the hooks see the buffer after `fresh` new bytes came; on an error keeps only what
/// precedes the offending packet.
fn scan_into(dir: &mut Direction, fresh: usize, hooks: &mut impl Hooks) {
    match hooks.scan(&mut dir.buf, fresh) {
        Ok(held) => dir.held = held,
        Err(e) => {
            dir.held = 0;
            dir.failed = Some(e);
        }
    }
}

/// Cuts `buf` at the packet an error names: what precedes it is still forwarded.
fn keep_good_part(buf: &mut BytesMut, e: &TrackError) {
    buf.truncate(e.start().unwrap_or(0));
}

/// Scans bytes that were read before the relay started (during the handshake).
fn prescan(dir: &mut Direction, hooks: &mut impl Hooks) {
    if !dir.buf.is_empty() {
        let fresh = dir.buf.len();
        scan_into(dir, fresh, hooks);
    }
}
