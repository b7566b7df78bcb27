//! The SQL admin port (`admin_sql:`): the proxy's stats as tables a DBA queries with the
//! `mariadb` CLI or any connector, PgBouncer's `SHOW` commands, and the HTTP endpoint's
//! operations as statements.
//!
//! It is ProxySQL's habit (`mysql -h127.0.0.1 -P6032 -uadmin`) and PgBouncer's (`SHOW POOLS`),
//! served beside the HTTP endpoint on the main thread's runtime, never on a session worker: an
//! admin's heavy query cannot slow a client's. One account, the proxy's own, checked against
//! the hash the configuration holds (see `crate::config::AdminSqlConfig`); TLS as on the client
//! leg. Each query gets a fresh snapshot ([`tables`]) run through SQLite ([`engine`]) on a
//! blocking thread; the statements that are commands ([`commands`]) apply the same operation,
//! with the same checks and log line, as their HTTP twins (`crate::control::admin::ops`).
//!
//! At most [`MAX_CONNECTIONS`] admin connections at once; more are refused with ERR 1040.

mod commands;
pub mod engine;
mod meta;
mod session;
mod statements;
pub mod tables;
mod variables;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use crate::control::admin::Recent;
use crate::proxy::state::ProxyState;

/// The version the admin port greets with: a MySQL 5.7 dialect (every connector's plainest
/// path), and a name that says what answers.
pub const VERSION: &str = "5.7.99-mysql-lb-admin";

/// Admin connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// Serves the admin port until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    recent: Arc<Recent>,
    shutdown: CancellationToken,
) {
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut next_id: u32 = 0;
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!("admin SQL accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        next_id = next_id.wrapping_add(1);
        let slot = Arc::clone(&slots).try_acquire_owned().ok();
        let conn = session::AdminSession {
            state: Arc::clone(&state),
            recent: Arc::clone(&recent),
            peer,
            id: next_id,
            loopback,
        };
        let stop = shutdown.clone();
        connections.spawn(async move {
            tokio::select! {
                _ = conn.run(stream, slot) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
    connections.close();
    connections.wait().await;
}
