//! The command-phase relay: both directions of one session in one future.
//!
//! Each direction reads into its own reusable buffer, lets the [`Tracker`] scan the new bytes in
//! place, and writes exactly what it read before reading again: two reads and two writes per round
//! trip, no copy, no allocation per packet. Both directions are polled from one future (not two
//! tasks) so the tracker needs no lock, and neither direction ever waits on the other, so a client
//! that pipelines a large batch while the server streams a large result cannot deadlock the pair.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::io::poll_read_buf;
use tokio_util::sync::CancellationToken;

use crate::protocol::response::{Completed, TrackError, Tracker};

/// Buffers start small (most sessions idle most of the time) and grow for bulk transfers.
const INITIAL_BUF: usize = 8 * 1024;
const MAX_BUF: usize = 256 * 1024;

/// How the relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// The client closed its side; `quit` says whether it sent COM_QUIT first.
    ClientClosed {
        quit: bool,
    },
    /// The backend closed its side. `at_boundary` says whether the client stream sits between
    /// packets (so an ERR can still be injected), `pending` how many commands were unanswered.
    BackendClosed {
        at_boundary: bool,
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
}

struct Direction {
    buf: BytesMut,
    written: usize,
    eof: bool,
    /// Set when the buffer was cut at a bad packet: once the good part is written, stop.
    failed: Option<TrackError>,
    /// Reads so far: the idle timer compares it instead of resetting a deadline on every read.
    reads: u64,
}

impl Direction {
    fn new(initial: BytesMut) -> Self {
        let mut buf = initial;
        if buf.capacity() < INITIAL_BUF {
            buf.reserve(INITIAL_BUF - buf.len());
        }
        Self {
            buf,
            written: 0,
            eof: false,
            failed: None,
            reads: 0,
        }
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
    /// Sees each read's bytes before they are forwarded (and may rewrite a command in them).
    fn scan(&mut self, buf: &mut BytesMut) -> Result<(), TrackError>;
    /// Runs once everything read so far has been written.
    fn written(&mut self) {}
}

/// Sees what a session relays: completed commands and bytes moved, as they happen.
pub trait Observer {
    fn completed(&mut self, c: &Completed);
    /// `n` bytes read from the client (`to_backend`) or from the backend, about to be forwarded.
    fn relayed(&mut self, to_backend: bool, n: usize);
    /// Given a command packet that may be a KILL (header included), returns the packet to send the
    /// backend instead, if any.
    fn rewrite_kill(&mut self, _packet: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

struct Upstream<'a, O> {
    tracker: &'a mut Tracker,
    observer: &'a mut O,
    quit: bool,
}

impl<O: Observer> Hooks for Upstream<'_, O> {
    fn scan(&mut self, buf: &mut BytesMut) -> Result<(), TrackError> {
        self.observer.relayed(true, buf.len());
        let scan = self.tracker.on_client(buf)?;
        self.quit |= scan.quit;
        if let Some((start, end)) = scan.kill {
            if let Some(packet) = self.observer.rewrite_kill(&buf[start..end]) {
                // Rare (a KILL): rebuilding the buffer is fine here.
                let tail = buf.split_off(end);
                buf.truncate(start);
                buf.extend_from_slice(&packet);
                buf.extend_from_slice(&tail);
            }
        }
        Ok(())
    }

    fn written(&mut self) {
        // The write of a command's last byte starts its latency clock.
        if self.tracker.pending() > 0 {
            self.tracker.on_written(Instant::now());
        }
    }
}

struct Downstream<'a, O> {
    tracker: &'a mut Tracker,
    observer: &'a mut O,
}

impl<O: Observer> Hooks for Downstream<'_, O> {
    fn scan(&mut self, buf: &mut BytesMut) -> Result<(), TrackError> {
        let observer = &mut *self.observer;
        observer.relayed(false, buf.len());
        self.tracker
            .on_server(buf, Instant::now(), |c| observer.completed(&c))
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
    W: AsyncWrite + Unpin,
{
    loop {
        while dir.written < dir.buf.len() {
            match Pin::new(&mut *dst).poll_write(cx, &dir.buf[dir.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Step::Io(io::ErrorKind::WriteZero.into(), Side::Write))
                }
                Poll::Ready(Ok(n)) => dir.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Step::Io(e, Side::Write)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if !dir.buf.is_empty() {
            hooks.written();
            // A read that filled the buffer suggests a bulk transfer: give the next one more room.
            let full = dir.buf.len() == dir.buf.capacity();
            dir.buf.clear();
            dir.written = 0;
            if full && dir.buf.capacity() < MAX_BUF {
                dir.buf.reserve(dir.buf.capacity() * 2);
            }
        }
        if let Some(e) = dir.failed.take() {
            return Poll::Ready(Step::Failed(e));
        }
        if dir.eof {
            return Poll::Ready(Step::Eof);
        }
        match poll_read_buf(Pin::new(&mut *src), cx, &mut dir.buf) {
            Poll::Ready(Ok(0)) => dir.eof = true,
            Poll::Ready(Ok(_)) => {
                dir.reads += 1;
                if let Err(e) = hooks.scan(&mut dir.buf) {
                    dir.buf.truncate(e.start().unwrap_or(0));
                    dir.failed = Some(e);
                }
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Step::Io(e, Side::Read)),
            Poll::Pending => return Poll::Pending,
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
/// command and every read.
pub async fn relay<C, B>(
    client: &mut C,
    backend: &mut B,
    tracker: &mut Tracker,
    initial_client: BytesMut,
    initial_backend: BytesMut,
    stop: Stop<'_>,
    observer: &mut impl Observer,
) -> RelayEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let draining = stop.drain.cancelled();
    tokio::pin!(draining);
    let mut drain_now = false;
    let mut idle_timer = stop.idle_timeout.map(|t| Box::pin(tokio::time::sleep(t)));
    let mut reads_at_arm = 0u64;
    let mut up = Direction::new(initial_client);
    let mut down = Direction::new(initial_backend);
    let mut quit = false;
    {
        let mut hooks = Upstream {
            tracker: &mut *tracker,
            observer: &mut *observer,
            quit: false,
        };
        prescan(&mut up, &mut hooks);
        quit |= hooks.quit;
        prescan(
            &mut down,
            &mut Downstream {
                tracker: &mut *tracker,
                observer: &mut *observer,
            },
        );
    }
    poll_fn(|cx| {
        // On shutdown, end at the first command boundary — checked before reading the client, so
        // a command that arrives after the last response is never half served.
        if !drain_now && draining.as_mut().poll(cx).is_ready() {
            drain_now = true;
        }
        let boundary = |t: &Tracker, up: &Direction, down: &Direction| {
            t.idle() && up.buf.is_empty() && down.buf.is_empty()
        };
        if drain_now && boundary(tracker, &up, &down) {
            return Poll::Ready(RelayEnd::Drained);
        }
        if let (Some(timer), Some(timeout)) = (idle_timer.as_mut(), stop.idle_timeout) {
            if timer.as_mut().poll(cx).is_ready() {
                if up.reads == reads_at_arm && boundary(tracker, &up, &down) {
                    return Poll::Ready(RelayEnd::IdleTimeout);
                }
                // Activity since the timer was armed, or a command in flight: wait again.
                reads_at_arm = up.reads;
                timer.as_mut().reset(tokio::time::Instant::now() + timeout);
                let _ = timer.as_mut().poll(cx);
            }
        }
        let mut hooks = Upstream {
            tracker: &mut *tracker,
            observer: &mut *observer,
            quit: false,
        };
        let step = poll_direction(cx, &mut up, client, backend, &mut hooks);
        quit |= hooks.quit;
        if let Poll::Ready(step) = step {
            return Poll::Ready(upstream_end(step, quit));
        }
        let mut hooks = Downstream {
            tracker: &mut *tracker,
            observer: &mut *observer,
        };
        match poll_direction(cx, &mut down, backend, client, &mut hooks) {
            Poll::Ready(step) => Poll::Ready(downstream_end(
                step,
                tracker.server_at_boundary(),
                tracker.pending(),
            )),
            Poll::Pending if drain_now && boundary(tracker, &up, &down) => {
                Poll::Ready(RelayEnd::Drained)
            }
            Poll::Pending => Poll::Pending,
        }
    })
    .await
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

/// How the session ends when the backend-to-client direction stops.
fn downstream_end(step: Step, at_boundary: bool, pending: usize) -> RelayEnd {
    match step {
        Step::Eof => RelayEnd::BackendClosed {
            at_boundary,
            pending,
        },
        Step::Failed(e) => RelayEnd::Protocol(e),
        Step::Io(e, Side::Read) => RelayEnd::BackendIo(e),
        Step::Io(e, Side::Write) => RelayEnd::ClientIo(e),
    }
}

/// Scans bytes that were read before the relay started (during the handshake).
fn prescan(dir: &mut Direction, hooks: &mut impl Hooks) {
    if !dir.buf.is_empty() {
        if let Err(e) = hooks.scan(&mut dir.buf) {
            dir.buf.truncate(e.start().unwrap_or(0));
            dir.failed = Some(e);
        }
    }
}

/// Counts bytes for the observer and looks at nothing else.
struct Opaque<'a, O> {
    observer: &'a mut O,
    to_backend: bool,
}

impl<O: Observer> Hooks for Opaque<'_, O> {
    fn scan(&mut self, buf: &mut BytesMut) -> Result<(), TrackError> {
        self.observer.relayed(self.to_backend, buf.len());
        Ok(())
    }
}

/// Relays bytes both ways without reading them, for a session whose framing the tracker cannot
/// follow (the compressed protocol): no command boundaries, so no drain at one and no idle
/// timeout; it ends when either side does (or when the session is dropped).
pub async fn relay_opaque<C, B>(
    client: &mut C,
    backend: &mut B,
    initial_client: BytesMut,
    initial_backend: BytesMut,
    observer: &mut impl Observer,
) -> RelayEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut up = Direction::new(initial_client);
    let mut down = Direction::new(initial_backend);
    poll_fn(|cx| {
        let mut hooks = Opaque {
            observer: &mut *observer,
            to_backend: true,
        };
        // Unread bytes: a clean close counts as a quit, and nothing is known to be pending.
        if let Poll::Ready(step) = poll_direction(cx, &mut up, client, backend, &mut hooks) {
            return Poll::Ready(upstream_end(step, true));
        }
        let mut hooks = Opaque {
            observer: &mut *observer,
            to_backend: false,
        };
        poll_direction(cx, &mut down, backend, client, &mut hooks)
            .map(|step| downstream_end(step, false, 0))
    })
    .await
}
