//! What a session holds of its pool, as values that give it back when dropped: a login's slot
//! ([`LoginPermit`]), the session's place among its key's sessions ([`Member`]) and the server
//! connection it holds ([`Held`]), plus a wait for one of them ([`Pending`]). A session can end
//! any way (an error, its task cancelled by the drain, a panic unwinding it) and the pool's
//! counts stay whole: whatever it held is counted back by `Drop`. The orderly paths (a
//! connection released or closed politely, a login turned into a session) consume the guard
//! instead, so nothing is counted twice.
//!
//! `Drop` cannot wait, and a closed connection keeps its slot until the server has let it go
//! (see `core`): a [`Held`] dropped without its orderly hand-back closes on a task of its own,
//! which counts it closed once done, or at once if that task never runs (no runtime, or one
//! shutting down).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::{BackendPool, Conn, Key, ServerConn};

/// A login's slot in a pool's count: given back (the login failed) when dropped, unless
/// [`logged_in`](Self::logged_in) turned it into a session holding its connection.
#[derive(Debug)]
pub struct LoginPermit {
    pool: Arc<BackendPool>,
    done: bool,
}

impl LoginPermit {
    pub(super) fn new(pool: Arc<BackendPool>) -> Self {
        LoginPermit { pool, done: false }
    }

    pub fn pool(&self) -> &Arc<BackendPool> {
        &self.pool
    }

    /// The login succeeded: `conn` joins the pool under `key`, held by its session. The
    /// session should use [`Member::key`] from here on: the pool's own copy of an equal key.
    pub fn logged_in(mut self, key: &Key, conn: ServerConn) -> (Member, Held) {
        self.done = true;
        let key = &self.pool.logged_in(key);
        let member = Member {
            pool: Arc::clone(&self.pool),
            key: key.clone(),
            pinned: false,
            ended: false,
        };
        let held = Held {
            conn: Some(Box::new(conn)),
            pool: Arc::clone(&self.pool),
            key: key.clone(),
        };
        (member, held)
    }
}

impl Drop for LoginPermit {
    fn drop(&mut self) {
        if !self.done {
            self.pool.login_failed();
        }
    }
}

/// A live session of a key: counted among its key's sessions (and among its pinned ones once
/// it pinned its connection) until [`end`](Self::end)ed or dropped. A pinned session's
/// connection is counted closed by its [`Held`], so ending the session only unpins it.
#[derive(Debug)]
pub struct Member {
    pool: Arc<BackendPool>,
    key: Key,
    pinned: bool,
    ended: bool,
}

impl Member {
    pub fn pool(&self) -> &Arc<BackendPool> {
        &self.pool
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The session pinned the connection it holds, for `reason` (once).
    pub fn pinned(&mut self, reason: super::Reason) {
        if !self.pinned {
            self.pinned = true;
            self.pool.pinned(&self.key, reason);
        }
    }

    /// The session's pinned connection was brought back to its key's login state: it counts
    /// as shared again.
    pub fn unpin(&mut self) {
        if std::mem::take(&mut self.pinned) {
            self.pool.unpinned(&self.key);
        }
    }

    /// The session moves to another backend's pool (a pool across backends), where its key has
    /// connections: it joins that pool's sessions of its key, then leaves this one's, so the
    /// counts that keep a key's last connection on each backend follow where it runs. Only
    /// unpinned (a pinned session never lets its connection go, so never takes another).
    pub fn move_to(&mut self, pool: &Arc<BackendPool>) {
        if self.pinned || self.ended || Arc::ptr_eq(&self.pool, pool) {
            return;
        }
        let key = pool.joined(&self.key);
        let old = std::mem::replace(&mut self.pool, Arc::clone(pool));
        let old_key = std::mem::replace(&mut self.key, key);
        old.session_ended(&old_key);
    }

    /// The session ended. Its connection, if it holds one, is given back or closed by its
    /// [`Held`], before or after.
    /// Once only: later calls, and the drop, do nothing more.
    pub fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.unpin();
        self.pool.session_ended(&self.key);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.end();
    }
}

/// A server connection checked out of its pool (derefs to it). Given back with
/// [`release`](Self::release), or closed with [`close`](Self::close) or [`quit`](Self::quit);
/// dropped otherwise, it is closed and counted closed (see the module's doc).
pub struct Held {
    conn: Option<Conn>,
    pool: Arc<BackendPool>,
    key: Key,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({:?})", self.conn)
    }
}

impl Held {
    /// The pool the connection is of (and goes back to).
    pub fn pool(&self) -> &Arc<BackendPool> {
        &self.pool
    }

    pub(super) fn new(conn: Conn, pool: Arc<BackendPool>, key: Key) -> Self {
        Held {
            conn: Some(conn),
            pool,
            key,
        }
    }

    /// The connection, out of the guard: its count is the caller's now.
    fn defuse(mut self) -> Option<Conn> {
        self.conn.take()
    }

    /// Back to the pool, unpinned and at a command boundary (see [`BackendPool::release`]).
    pub fn release(mut self, worker: usize) {
        // Taken out, the guard's drop has nothing left to close.
        if let Some(conn) = self.conn.take() {
            self.pool.release(&self.key, conn, worker);
        }
    }

    /// Closed politely; its slot is free once the server let go of it.
    pub async fn close(mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // Counted closed when this is dropped, done or cancelled.
        let mut closing = Closing {
            conn: Some(conn),
            pool: Arc::clone(&self.pool),
            key: self.key.clone(),
        };
        if let Some(conn) = closing.conn.take() {
            conn.close().await;
        }
    }

    /// Closed without waiting (COM_QUIT if the socket takes it now), counted closed at once.
    pub fn quit(self) {
        let pool = Arc::clone(&self.pool);
        let key = self.key.clone();
        if let Some(conn) = self.defuse() {
            pool.closed(&key);
            conn.quit();
        }
    }
}

impl std::ops::Deref for Held {
    type Target = ServerConn;
    fn deref(&self) -> &ServerConn {
        // Only `defuse`, which consumes the guard, empties it.
        self.conn
            .as_deref()
            .expect("a Held guard holds its connection")
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut ServerConn {
        self.conn
            .as_deref_mut()
            .expect("a Held guard holds its connection")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let closing = Closing {
            conn: Some(conn),
            pool: Arc::clone(&self.pool),
            key: self.key.clone(),
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(closing.run())),
            // Dropping it quits the connection and counts it closed.
            Err(_) => drop(closing),
        }
    }
}

/// A connection on its way out: counted closed when dropped, after its polite close ran or
/// without it.
struct Closing {
    conn: Option<Conn>,
    pool: Arc<BackendPool>,
    key: Key,
}

impl Closing {
    async fn run(mut self) {
        if let Some(conn) = self.conn.take() {
            conn.close().await;
        }
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.quit();
        }
        self.pool.closed(&self.key);
    }
}

/// A wait for something the pool hands over through a oneshot channel (a connection, a login
/// slot). Dropped while waiting, or after its timeout, it closes the channel and gives back
/// whatever was sent meanwhile with `reclaim`, so nothing handed to a waiter that left is lost.
pub(super) struct Pending<T, F: FnMut(T)> {
    rx: Option<oneshot::Receiver<T>>,
    reclaim: F,
}

impl<T, F: FnMut(T)> Pending<T, F> {
    pub(super) fn new(rx: oneshot::Receiver<T>, reclaim: F) -> Self {
        Pending {
            rx: Some(rx),
            reclaim,
        }
    }

    /// What is sent within `within`: None when the time ran out, Some(None) when the sender
    /// went away (nothing will be sent).
    pub(super) async fn recv(&mut self, within: Duration) -> Option<Option<T>> {
        let rx = self.rx.as_mut()?;
        let got = tokio::time::timeout(within, rx).await.ok()?;
        self.rx = None;
        Some(got.ok())
    }
}

impl<T, F: FnMut(T)> Drop for Pending<T, F> {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(value) = rx.try_recv() {
                (self.reclaim)(value);
            }
        }
    }
}

#[cfg(test)]
mod tests;
