//! A session killed at each point where it holds a share of its pool (a login's slot, a wait
//! for one, a connection, a pinned connection, a polite close under way, a connection handed
//! to it as it left) leaves the pool's counts as they were. Each case runs the session as a
//! task and ends it by abort or panic; the server is a loopback socket that says nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::backends::pooling::{BackendPool, Key, KeyData, Reason, ServerConn, ServerPools, State};
use crate::config::{Pooling, PoolingMode};
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;
use crate::telemetry::metrics::Metrics;

struct Fixture {
    pool: Arc<BackendPool>,
    key: Key,
    server: SocketAddr,
    _pools: ServerPools,
}

/// A pool of `limit` connections, and a server that closes a connection when it reads its
/// COM_QUIT (`closes`), or never (a polite close then waits its full second).
async fn fixture(limit: usize, closes: bool) -> Fixture {
    let metrics = Metrics::new();
    let pools = ServerPools::new(&metrics);
    let pooling = Pooling {
        mode: PoolingMode::Transaction,
        max_server_connections: limit,
        idle_timeout: Duration::from_secs(60),
        wait_timeout: Duration::from_secs(5),
        across_backends: false,
        ..Pooling::default()
    };
    let pool = pools.of("default", "b1", pooling);
    let key = pools.key(KeyData {
        user: "app".into(),
        schema: String::new(),
        charset: 45,
        capabilities: (0, 0),
        tls: false,
        compressed: false,
        origin: None,
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                loop {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) if closes && buf[..n].ends_with(&[1, 0, 0, 0, 1]) => return,
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    Fixture {
        pool,
        key,
        server,
        _pools: pools,
    }
}

impl Fixture {
    async fn conn(&self) -> ServerConn {
        let tcp = TcpStream::connect(self.server).await.expect("connect");
        ServerConn {
            leg: LegStream::Plain(BackendStream::Tcp(tcp)),
            thread_id: 1,
            state: State::default(),
            statements: Default::default(),
        }
    }

    /// (open, idle, waiting) and the key's (connections, sessions, pinned).
    fn counts(&self) -> ((usize, usize, usize), (usize, usize, usize)) {
        let guard = self.pool.lock();
        let core = &guard.0;
        (
            (core.open(), core.idle(), core.waiting()),
            core.key_counts(&self.key),
        )
    }

    /// Waits (3 s at most) until the counts are `want`.
    async fn settles(&self, want: ((usize, usize, usize), (usize, usize, usize)), case: &str) {
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.counts() != want {
            assert!(
                Instant::now() < deadline,
                "{case}: counts {:?}, want {want:?}",
                self.counts()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `n` are waiting.
    async fn waiting(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.counts().0 .2 != n {
            assert!(Instant::now() < deadline, "{:?}", self.counts());
            tokio::task::yield_now().await;
        }
    }
}

const EMPTY: ((usize, usize, usize), (usize, usize, usize)) = ((0, 0, 0), (0, 0, 0));

async fn killed(task: JoinHandle<()>) {
    task.abort();
    let ended = task.await;
    assert!(ended.is_err_and(|e| e.is_cancelled() || e.is_panic()));
}

#[tokio::test]
async fn a_login_killed_while_it_holds_its_slot_gives_the_slot_back() {
    let f = fixture(1, true).await;
    let pool = Arc::clone(&f.pool);
    let login = tokio::spawn(async move {
        let _permit = pool.login_slot().await;
        std::future::pending::<()>().await;
    });
    f.settles(((1, 0, 0), (0, 0, 0)), "login holding its slot")
        .await;
    killed(login).await;
    f.settles(EMPTY, "login killed").await;
}

#[tokio::test]
async fn a_login_killed_as_a_slot_is_handed_to_it_gives_the_slot_back() {
    let f = fixture(1, true).await;
    let first = f.pool.login_slot().await.expect("a free slot");
    let pool = Arc::clone(&f.pool);
    let second = tokio::spawn(async move {
        let _permit = pool.login_slot().await;
        std::future::pending::<()>().await;
    });
    f.waiting(1).await;
    // The first login fails: its slot is sent to the second, which is killed before it reads it.
    drop(first);
    assert_eq!(
        f.counts(),
        ((1, 0, 0), (0, 0, 0)),
        "the slot went to the waiter"
    );
    killed(second).await;
    f.settles(EMPTY, "login killed with a slot in its channel")
        .await;
}

#[tokio::test]
async fn a_login_killed_while_an_idle_connection_closes_for_it_gives_the_slot_back() {
    let f = fixture(1, false).await;
    let permit = f.pool.login_slot().await.expect("a free slot");
    let (mut member, held) = permit.logged_in(&f.key, f.conn().await);
    held.release(0);
    member.end();
    assert_eq!(f.counts(), ((1, 1, 0), (1, 0, 0)));
    // The idle connection (its key can spare it) closes for the next login; the server takes
    // its time to let go, and the login is killed meanwhile.
    let pool = Arc::clone(&f.pool);
    let login = tokio::spawn(async move {
        let _permit = pool.login_slot().await;
        std::future::pending::<()>().await;
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(f.counts(), ((1, 0, 0), (0, 0, 0)));
    killed(login).await;
    f.settles(EMPTY, "login killed during the close").await;
}

#[tokio::test]
async fn a_session_killed_while_it_waits_or_as_a_connection_is_handed_to_it_loses_nothing() {
    let f = fixture(1, true).await;
    let permit = f.pool.login_slot().await.expect("a free slot");
    let (member, held) = permit.logged_in(&f.key, f.conn().await);
    let waiter = |f: &Fixture| {
        let (pool, key) = (Arc::clone(&f.pool), f.key.clone());
        tokio::spawn(async move {
            let _held = pool.acquire(&key, 0, &State::default()).await;
            std::future::pending::<()>().await;
        })
    };
    // Killed while it waits.
    let second = waiter(&f);
    f.waiting(1).await;
    killed(second).await;
    assert_eq!(f.counts(), ((1, 0, 0), (1, 1, 0)));
    // Killed after the connection was sent to it and before it read it: back in the pool.
    let third = waiter(&f);
    f.waiting(1).await;
    held.release(0);
    killed(third).await;
    f.settles(((1, 1, 0), (1, 1, 0)), "handed over, then killed")
        .await;
    // And it serves the next one.
    let again = f.pool.acquire(&f.key, 0, &State::default()).await;
    assert!(again.is_ok(), "the connection handed back is usable");
    drop(again);
    drop(member);
    f.settles(EMPTY, "all ended").await;
}

#[tokio::test]
async fn a_session_killed_or_panicking_while_it_holds_a_connection_leaves_the_pool_whole() {
    for (case, pinned, panics) in [
        ("held, aborted", false, false),
        ("held, panicked", false, true),
        ("pinned, aborted", true, false),
        ("pinned, panicked", true, true),
    ] {
        let f = fixture(2, true).await;
        let permit = f.pool.login_slot().await.expect("a free slot");
        let (mut member, held) = permit.logged_in(&f.key, f.conn().await);
        if pinned {
            member.pinned(Reason::InitDb);
        }
        assert_eq!(
            f.counts(),
            ((1, 0, 0), (1, 1, usize::from(pinned))),
            "{case}"
        );
        let session = tokio::spawn(async move {
            let _guards = (member, held);
            if panics {
                panic!("a session's bug");
            }
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        killed(session).await;
        f.settles(EMPTY, case).await;
    }
}

#[tokio::test]
async fn a_session_killed_during_a_polite_close_counts_it_closed_once() {
    let f = fixture(1, false).await;
    let permit = f.pool.login_slot().await.expect("a free slot");
    let (member, held) = permit.logged_in(&f.key, f.conn().await);
    let session = tokio::spawn(async move {
        let _member = member;
        held.close().await;
        std::future::pending::<()>().await;
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        f.counts(),
        ((1, 0, 0), (1, 1, 0)),
        "the server has not let go"
    );
    killed(session).await;
    f.settles(EMPTY, "killed during the close").await;
    // Nothing counted twice: one more login takes the one slot.
    let next = f.pool.login_slot().await;
    assert!(next.is_ok());
    assert_eq!(f.counts(), ((1, 0, 0), (0, 0, 0)));
}

#[tokio::test]
async fn orderly_ends_count_as_before() {
    let f = fixture(2, true).await;
    // Released: idle, its key kept.
    let permit = f.pool.login_slot().await.expect("a free slot");
    let (mut member, held) = permit.logged_in(&f.key, f.conn().await);
    held.release(0);
    member.end();
    drop(member);
    assert_eq!(f.counts(), ((1, 1, 0), (1, 0, 0)));
    // Pinned and closed with its session: its slot free once the server let go.
    let permit = f.pool.login_slot().await.expect("a free slot");
    let (mut member, held) = permit.logged_in(&f.key, f.conn().await);
    member.pinned(Reason::InitDb);
    member.pinned(Reason::LongData);
    assert_eq!(f.counts(), ((2, 1, 0), (2, 1, 1)), "pinned once");
    held.close().await;
    drop(member);
    assert_eq!(f.counts(), ((1, 1, 0), (1, 0, 0)));
    // Pinned, recycled: shared again.
    let permit = f.pool.login_slot().await.expect("a free slot");
    let (mut member, held) = permit.logged_in(&f.key, f.conn().await);
    member.pinned(Reason::InitDb);
    member.end();
    held.release(0);
    drop(member);
    assert_eq!(f.counts(), ((2, 2, 0), (2, 0, 0)));
    // Quit: counted closed at once.
    let held = f.pool.acquire(&f.key, 0, &State::default()).await;
    held.expect("an idle connection").quit();
    assert_eq!(f.counts(), ((1, 1, 0), (1, 0, 0)));
}

/// Equal keys share their data (a pool across backends compares them by pointer in every
/// backend's pool); a key no session or pool holds any more leaves the table as it grows.
#[test]
fn equal_keys_share_their_data_and_dead_ones_are_swept() {
    let metrics = Metrics::new();
    let pools = ServerPools::new(&metrics);
    let data = |user: &str| KeyData {
        user: user.into(),
        schema: "db".into(),
        charset: 45,
        capabilities: (0, 0),
        tls: false,
        compressed: false,
        origin: None,
    };
    let a = pools.key(data("app"));
    let b = pools.key(data("app"));
    let other = pools.key(data("other"));
    assert!(a.shares_data(&b), "equal keys must share one copy");
    assert!(!a.shares_data(&other));
    assert_eq!(a, b);
    assert_ne!(a, other);
    // Thousands of short-lived users: the table keeps the live ones only.
    for i in 0..5000 {
        drop(pools.key(data(&format!("u{i}"))));
    }
    assert!(pools.interned_len() < 300, "{}", pools.interned_len());
    let c = pools.key(data("app"));
    assert!(a.shares_data(&c), "a live key survives the sweeps");
}
