//! Transaction-mode pools for tests: a configuration whose default pool shares server
//! connections, and a wait on a pool's counts.

use std::time::{Duration, Instant};

use mysql_lb::backends::pooling::PoolCounts;
use mysql_lb::config::{Config, Policy, PoolConfig, Pooling, PoolingMode};

use super::proxy::TestProxy;

/// Transaction pooling for the default pool of `config`: `max` server connections per backend,
/// idle ones closed after `idle`, a statement or login waiting at most `wait`.
pub fn transaction_mode(config: &mut Config, max: usize, idle: Duration, wait: Duration) {
    config.pools = vec![PoolConfig {
        name: "default".into(),
        policy: Policy::RoundRobin,
        pooling: Pooling {
            mode: PoolingMode::Transaction,
            max_server_connections: max,
            idle_timeout: idle,
            wait_timeout: wait,
            across_backends: false,
            ..Pooling::default()
        },
    }];
}

/// A proxy in transaction mode on `backends` (see [`transaction_mode`]).
pub fn pooled(backends: &[String], max: usize, idle: Duration, wait: Duration) -> TestProxy {
    let mut config = super::proxy::config(backends);
    transaction_mode(&mut config, max, idle, wait);
    TestProxy::start_with(config)
}

/// The pool counts of `backend` (all zero before its first pooled login).
pub fn counts(proxy: &TestProxy, backend: &str) -> PoolCounts {
    proxy
        .state
        .server_pools
        .get(backend)
        .map(|p| p.counts())
        .unwrap_or(PoolCounts {
            open: 0,
            idle: 0,
            waiting: 0,
        })
}

/// Waits until the pool of `backend` has `want` connections open (idle ones past the idle
/// timeout close down to one per user with live sessions).
pub async fn open_connections(proxy: &TestProxy, backend: &str, want: usize) {
    pool_reaches(proxy, backend, &format!("{want} open"), |c| c.open == want).await;
}

/// Waits up to 10 s until the counts of `backend`'s pool satisfy `wanted` (`what` says what in
/// the failure). A statement's connection goes back to idle once its response has been
/// relayed: the client may have read the response by then, so a test that looks at the pool
/// right after a statement waits here rather than reading once.
pub async fn pool_reaches(
    proxy: &TestProxy,
    backend: &str,
    what: &str,
    wanted: impl Fn(&PoolCounts) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !wanted(&counts(proxy, backend)) {
        assert!(
            Instant::now() < deadline,
            "the pool has {:?}, want {what}",
            counts(proxy, backend)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SELECT @@pseudo_thread_id`: the server connection a pooled session's statement runs on (its
/// thread id, as `CONNECTION_ID()` gives it, which would pin the session).
pub async fn server_id(conn: &mut mysql_async::Conn) -> u64 {
    use mysql_async::prelude::Queryable;
    conn.query_first("SELECT @@pseudo_thread_id")
        .await
        .expect("@@pseudo_thread_id")
        .expect("a row")
}
