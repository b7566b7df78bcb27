//! KILLs replaced in the client-to-backend buffer, at once or once their rewrite is known (another
//! instance is being asked where its session is, or the proxy runs the KILL on another backend).
//!
//! For the latter the direction writes everything before the first such KILL, then waits for its
//! answer before writing anything after it, so pipelined commands keep their order and the
//! response the client reads for the KILL is the one its mapping produced. Reading the client
//! stops meanwhile (nothing is read before everything read is written), which bounds the wait's
//! memory to what one read brought. Rare, so splicing by copying the buffer's tail is fine.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;

use super::Steering;

/// The packet to send instead of a KILL, once known.
pub type Answer = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// What a session's [`Steering`] makes of a KILL.
pub enum KillRewrite {
    /// This packet goes instead, at once.
    Now(Vec<u8>),
    /// This future's packet goes instead; nothing after the KILL is written before it resolves.
    Later(Answer),
}

impl std::fmt::Debug for KillRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Now(p) => f.debug_tuple("Now").field(&p.len()).finish(),
            Self::Later(_) => f.write_str("Later"),
        }
    }
}

/// Replaces each KILL the session's steering maps; rare, so rebuilding the buffer once is fine. A KILL
/// whose rewrite comes later stays as it is, in `pending`, until then.
pub(super) fn rewrite_kills(
    buf: &mut BytesMut,
    kills: &[(usize, usize)],
    steering: &mut impl Steering,
    pending: &mut WaitingKills,
) {
    let mut out: Option<BytesMut> = None;
    let mut copied = 0;
    for &(start, end) in kills {
        let Some(candidate) = buf.get(start..end) else {
            continue;
        };
        match steering.rewrite_kill(candidate) {
            Some(KillRewrite::Now(packet)) => {
                let out = out.get_or_insert_with(|| BytesMut::with_capacity(buf.capacity()));
                out.extend_from_slice(&buf[copied..start]);
                out.extend_from_slice(&packet);
                copied = end;
            }
            Some(KillRewrite::Later(answer)) => {
                // Where the packet will sit in the rebuilt buffer (all before it is copied as is).
                let at = out.as_ref().map_or(start, |o| o.len() + start - copied);
                pending.push(at..at + (end - start), answer);
            }
            None => {}
        }
    }
    if let Some(mut out) = out {
        out.extend_from_slice(&buf[copied..]);
        *buf = out;
    }
}

/// KILL packets in one direction's buffer waiting for their rewrite, in buffer order.
#[derive(Default)]
pub(super) struct WaitingKills {
    waiting: Vec<(Range<usize>, Answer)>,
}

impl WaitingKills {
    /// Forgets every KILL still waiting (its relay ended).
    #[inline]
    pub(super) fn clear(&mut self) {
        self.waiting.clear();
    }

    /// The KILL at `at` in the buffer is replaced by `answer`'s packet once it resolves.
    pub(super) fn push(&mut self, at: Range<usize>, answer: Answer) {
        self.waiting.push((at, answer));
    }

    /// Splices every answer that is ready into `buf`; returns where the first KILL still
    /// waiting starts (nothing from there on may be written yet), None when none waits.
    #[inline]
    pub(super) fn poll(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Option<usize> {
        // Checked on every pass of the relay: almost always nothing waits.
        if self.waiting.is_empty() {
            return None;
        }
        self.poll_waiting(cx, buf)
    }

    fn poll_waiting(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Option<usize> {
        let mut i = 0;
        while i < self.waiting.len() {
            let Poll::Ready(packet) = self.waiting[i].1.as_mut().poll(cx) else {
                i += 1;
                continue;
            };
            let (range, _) = self.waiting.remove(i);
            let grown = packet.len() as isize - range.len() as isize;
            splice(buf, range, &packet);
            for (later, _) in &mut self.waiting[i..] {
                *later = later.start.saturating_add_signed(grown)
                    ..later.end.saturating_add_signed(grown);
            }
        }
        self.waiting.first().map(|(range, _)| range.start)
    }
}

/// Replaces `buf[range]` with `packet`.
fn splice(buf: &mut BytesMut, range: Range<usize>, packet: &[u8]) {
    let tail = buf.split_off(range.end.min(buf.len()));
    buf.truncate(range.start);
    buf.extend_from_slice(packet);
    buf.extend_from_slice(&tail);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waker_cx<T>(f: impl FnOnce(&mut Context<'_>) -> T) -> T {
        let waker = std::task::Waker::noop();
        f(&mut Context::from_waker(waker))
    }

    #[test]
    fn holds_from_the_first_unanswered_kill_and_splices_answers_in_order() {
        let mut buf = BytesMut::from(&b"aaKILL1bbKILL2cc"[..]);
        let (tx, rx) = tokio::sync::oneshot::channel::<Vec<u8>>();
        let mut pending = WaitingKills::default();
        pending.push(2..7, Box::pin(async move { rx.await.unwrap_or_default() }));
        pending.push(9..14, Box::pin(async { b"X".to_vec() }));
        // The second is ready but the first is not: everything from the first is held.
        let first = waker_cx(|cx| pending.poll(cx, &mut buf));
        assert_eq!(first, Some(2));
        assert_eq!(&buf[..], b"aaKILL1bbXcc");
        tx.send(b"LONGER-ONE".to_vec()).unwrap();
        assert_eq!(waker_cx(|cx| pending.poll(cx, &mut buf)), None);
        assert_eq!(&buf[..], b"aaLONGER-ONEbbXcc");
    }

    #[test]
    fn a_later_kill_moves_with_an_earlier_answer() {
        let mut buf = BytesMut::from(&b"K1..K2.."[..]);
        let (tx, rx) = tokio::sync::oneshot::channel::<Vec<u8>>();
        let mut pending = WaitingKills::default();
        pending.push(0..2, Box::pin(async { b"Z".to_vec() }));
        pending.push(4..6, Box::pin(async move { rx.await.unwrap_or_default() }));
        assert_eq!(waker_cx(|cx| pending.poll(cx, &mut buf)), Some(3));
        assert_eq!(&buf[3..5], b"K2");
        tx.send(b"yy".to_vec()).unwrap();
        assert_eq!(waker_cx(|cx| pending.poll(cx, &mut buf)), None);
        assert_eq!(&buf[..], b"Z..yy..");
    }
}
