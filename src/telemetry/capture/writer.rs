//! The one thread that writes a capture: gathers queued records into blocks, compresses them and
//! appends them to files created mode 0600 with `O_EXCL` (never through an existing name or a
//! link), starting a new file past the rotation size. It stops on request, at the capture's
//! duration or size limit, or when a write fails, and writes what was queued before stopping.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use super::format::{encode_block, FileHeader};
use super::{Active, DEFAULT_ROTATE};

/// A block is written once it holds this much, or has waited this long.
const BLOCK: usize = 256 << 10;
const BLOCK_WAIT: Duration = Duration::from_secs(1);
/// How often the writer looks at the queue (and for a stop). It never waits in the queue
/// itself: a receiver parked there would make every session's send wake it (a futex call and a
/// context switch per record); polled, a send is a few atomic operations.
const TICK: Duration = Duration::from_millis(20);

/// The file being written and its size.
struct Output {
    file: Option<File>,
    size: u64,
    index: u32,
}

pub(super) fn run(active: &Active, rx: Receiver<Vec<u8>>) {
    let mut out = Output {
        file: None,
        size: 0,
        index: 0,
    };
    let mut block = Vec::with_capacity(BLOCK + 64 * 1024);
    let mut since = Instant::now();
    loop {
        if let Some(why) = limit_reached(active) {
            active.request_stop(why);
        }
        if active.stop.load(Ordering::Acquire) {
            // What the sessions queued before the stop still goes out.
            while let Ok(r) = rx.try_recv() {
                block.extend_from_slice(&r);
                if block.len() >= BLOCK {
                    flush(active, &mut out, &mut block);
                }
            }
            flush(active, &mut out, &mut block);
            break;
        }
        std::thread::sleep(TICK);
        loop {
            match rx.try_recv() {
                Ok(r) => {
                    block.extend_from_slice(&r);
                    if block.len() >= BLOCK {
                        flush(active, &mut out, &mut block);
                        since = Instant::now();
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    active.request_stop("queue closed");
                    break;
                }
            }
        }
        if block.len() >= BLOCK || (!block.is_empty() && since.elapsed() >= BLOCK_WAIT) {
            flush(active, &mut out, &mut block);
            since = Instant::now();
        }
    }
    if let Some(file) = out.file.take() {
        if let Err(e) = file.sync_all() {
            tracing::warn!(error = %e, "capture file not synced");
        }
    }
}

fn limit_reached(active: &Active) -> Option<&'static str> {
    let r = &active.request;
    if r.duration.is_some_and(|d| active.started.elapsed() >= d) {
        return Some("duration reached");
    }
    if r.max_bytes
        .is_some_and(|m| active.written.load(Ordering::Relaxed) >= m)
    {
        return Some("max_bytes reached");
    }
    None
}

/// Writes `block` (if anything is in it) to the current file, opening the next one first when
/// there is none or it is past the rotation size. A failed write stops the capture.
fn flush(active: &Active, out: &mut Output, block: &mut Vec<u8>) {
    if block.is_empty() {
        return;
    }
    let bytes = encode_block(block);
    block.clear();
    let rotate = active.request.rotate_bytes.unwrap_or(DEFAULT_ROTATE);
    if out.file.is_none() || out.size >= rotate {
        if let Err(e) = next_file(active, out) {
            tracing::warn!(error = %e, dir = %active.dir.display(), "capture stopped: cannot create its file");
            active.request_stop(&format!("cannot create a file: {e}"));
            return;
        }
    }
    let Some(file) = out.file.as_mut() else {
        return;
    };
    match file.write_all(&bytes) {
        Ok(()) => {
            out.size += bytes.len() as u64;
            active
                .written
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        Err(e) => {
            tracing::warn!(error = %e, dir = %active.dir.display(), "capture stopped: write failed");
            active.request_stop(&format!("write failed: {e}"));
        }
    }
}

fn next_file(active: &Active, out: &mut Output) -> std::io::Result<()> {
    if let Some(done) = out.file.take() {
        done.sync_all()?;
    }
    out.index += 1;
    let path = active.dir.join(file_name(out.index));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let header = FileHeader {
        started_unix_us: active.started_unix_us,
        index: out.index,
    };
    file.write_all(&header.encode())?;
    out.size = header.encode().len() as u64;
    active.files.fetch_add(1, Ordering::Relaxed);
    active.written.fetch_add(out.size, Ordering::Relaxed);
    out.file = Some(file);
    Ok(())
}

/// The `index`th file of a capture (from 1): names sort in the order they were written.
pub fn file_name(index: u32) -> String {
    format!("capture-{index:06}.mlbcap")
}
