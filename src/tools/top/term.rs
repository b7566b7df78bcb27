//! The terminal under `top`: raw mode and the alternate screen while it runs, restored however
//! it ends, and one wait for a key, a signal or the next refresh.
//!
//! Raw escapes and termios through `libc` rather than a terminal crate: `top` needs a handful
//! of sequences and one wait. Signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH) are blocked
//! and read from a signalfd beside stdin, so ending on a signal runs the same `Drop` that
//! restores the terminal as `q` does, with no handler and no process-wide flag.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

const STDIN: i32 = libc::STDIN_FILENO;
const STDOUT: i32 = libc::STDOUT_FILENO;

/// Enters the alternate screen and hides the cursor.
pub const ENTER: &str = "\x1b[?1049h\x1b[?25l";
/// Leaves the alternate screen and shows the cursor: the last bytes `top` writes.
pub const LEAVE: &str = "\x1b[?1049l\x1b[?25h";

/// The terminal's size (columns, rows); 80x24 when it cannot be asked.
pub fn size() -> (usize, usize) {
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(STDOUT, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 && ws.ws_row > 0 {
        (usize::from(ws.ws_col), usize::from(ws.ws_row))
    } else {
        (80, 24)
    }
}

/// The terminal in raw mode on the alternate screen; dropping it (or a panic) restores both.
pub struct Terminal {
    saved: libc::termios,
    out: std::io::Stdout,
}

impl Terminal {
    pub fn enter() -> std::io::Result<Self> {
        // SAFETY: tcgetattr fills the termios we own; tcsetattr reads it.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(STDIN, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        // No echo, no line editing, keys as bytes (Ctrl-C too: it quits as `q` does).
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        raw.c_iflag &= !(libc::IXON | libc::ICRNL);
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        if unsafe { libc::tcsetattr(STDIN, libc::TCSAFLUSH, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // A panic's message would be printed on the alternate screen and vanish with it:
        // restore first, then let the usual hook print it.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore(&saved);
            previous(info);
        }));
        let mut t = Self {
            saved,
            out: std::io::stdout(),
        };
        t.out.write_all(ENTER.as_bytes())?;
        t.out.flush()?;
        Ok(t)
    }

    /// Draws `frame` (lines ending in `\n`) from the top left, clearing what it does not cover.
    pub fn draw(&mut self, frame: &str) -> std::io::Result<()> {
        let mut buf = String::with_capacity(frame.len() + 256);
        buf.push_str("\x1b[H");
        for (i, line) in frame.lines().enumerate() {
            if i > 0 {
                buf.push_str("\r\n");
            }
            // The first line in reverse video, as top's summary.
            if i == 0 {
                buf.push_str("\x1b[7m");
                buf.push_str(line);
                buf.push_str("\x1b[0m");
            } else {
                buf.push_str(line);
            }
            buf.push_str("\x1b[K");
        }
        buf.push_str("\x1b[J");
        self.out.write_all(buf.as_bytes())?;
        self.out.flush()
    }
}

/// Leaves the alternate screen and puts back the terminal modes `saved`.
fn restore(saved: &libc::termios) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(LEAVE.as_bytes());
    let _ = out.flush();
    // SAFETY: sets the attributes read in `Terminal::enter`.
    unsafe { libc::tcsetattr(STDIN, libc::TCSAFLUSH, saved) };
}

impl Drop for Terminal {
    fn drop(&mut self) {
        restore(&self.saved);
        // The usual hook again (a panic has already restored; this is the way out otherwise).
        if !std::thread::panicking() {
            let _ = std::panic::take_hook();
        }
    }
}

/// What ended a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Keys(Vec<u8>),
    /// The terminal was resized.
    Resized,
    /// A signal asked to stop, or stdin ended.
    Stop,
    Timeout,
}

/// The stop and resize signals, blocked and readable from a descriptor.
pub struct Signals {
    fd: OwnedFd,
    old_mask: libc::sigset_t,
}

impl Signals {
    pub fn block() -> std::io::Result<Self> {
        // SAFETY: the sets are ours; pthread_sigmask and signalfd only read them (and fill
        // `old_mask`); signalfd returns a new descriptor we own or -1.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGWINCH,
            ] {
                libc::sigaddset(&mut set, s);
            }
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
            if r != 0 {
                return Err(std::io::Error::from_raw_os_error(r));
            }
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
                return Err(e);
            }
            Ok(Self {
                fd: OwnedFd::from_raw_fd(fd),
                old_mask,
            })
        }
    }

    /// Waits up to `timeout` for keys on stdin or a signal.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<Event> {
        let mut fds = [
            libc::pollfd {
                fd: STDIN,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: poll reads and writes the two pollfds we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(Event::Timeout)
            } else {
                Err(e)
            };
        }
        if fds[1].revents & libc::POLLIN != 0 {
            // SAFETY: reads whole signalfd_siginfo records into a buffer we own.
            let mut info: [libc::signalfd_siginfo; 4] = unsafe { std::mem::zeroed() };
            let got = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    info.as_mut_ptr().cast(),
                    std::mem::size_of_val(&info),
                )
            };
            let records =
                usize::try_from(got).unwrap_or(0) / std::mem::size_of::<libc::signalfd_siginfo>();
            let stop = info
                .iter()
                .take(records)
                .any(|i| i.ssi_signo != libc::SIGWINCH as u32);
            return Ok(if stop { Event::Stop } else { Event::Resized });
        }
        if fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            let mut keys = [0u8; 64];
            // SAFETY: reads into the buffer we own.
            let got = unsafe { libc::read(STDIN, keys.as_mut_ptr().cast(), keys.len()) };
            return Ok(match usize::try_from(got) {
                Ok(0) => Event::Stop,
                Ok(n) => Event::Keys(keys[..n.min(keys.len())].to_vec()),
                Err(_) => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        Event::Timeout
                    } else {
                        Event::Stop
                    }
                }
            });
        }
        Ok(Event::Timeout)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        // SAFETY: puts back the mask saved in `block`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}
