//! mysql-lb: a load-balancing MySQL/MariaDB wire-protocol proxy.
//!
//! [`Proxy::bind`] then [`Proxy::run`] is the whole daemon; `main.rs` only parses flags, sets up
//! logging and the descriptor limit, and the tests call the same two functions on `127.0.0.1:0`.

pub mod admin;
pub mod auth;
pub mod balancer;
pub mod config;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod protocol;
pub mod relay;
pub mod server;
pub mod session;
pub mod stream;

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use config::{Config, ListenAddr};
use metrics::Metrics;
use server::{Listener, ServerError};
use session::Shared;

/// A proxy with its listeners bound, ready to run.
#[derive(Debug)]
pub struct Proxy {
    listeners: Vec<Listener>,
    admin: Option<tokio::net::TcpListener>,
    shared: Arc<Shared>,
    max_connections: usize,
    health: config::HealthCheckConfig,
}

impl Proxy {
    /// Binds every listen address of `config` (port 0 picks a free port).
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        let mut listeners = Vec::with_capacity(config.listen.len());
        for addr in &config.listen {
            listeners.push(Listener::bind(addr).await?);
        }
        let admin =
            match config.admin_address {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(
                    |source| ServerError::Bind {
                        addr: ListenAddr::Tcp(addr),
                        source,
                    },
                )?),
                None => None,
            };
        let metrics = Arc::new(Metrics::new());
        metrics.max_connections.set(config.max_connections as i64);
        if let Ok((soft, _)) = rlimit::Resource::NOFILE.get() {
            metrics
                .open_fds_limit
                .set(i64::try_from(soft).unwrap_or(i64::MAX));
        }
        Ok(Self {
            listeners,
            admin,
            shared: Arc::new(Shared::new(config, metrics)),
            max_connections: config.max_connections,
            health: config.health_check.clone(),
        })
    }

    /// The admin HTTP address actually bound, if enabled.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The addresses actually bound, in configuration order.
    pub fn local_addrs(&self) -> Vec<ListenAddr> {
        self.listeners.iter().map(Listener::local_addr).collect()
    }

    /// Shared state (backends and their counters), for observers such as tests and metrics.
    pub fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Serves clients until `shutdown` is cancelled, then stops accepting and ends the sessions.
    pub async fn run(self, shutdown: CancellationToken) {
        server::announce(&self.listeners);
        let admission = Arc::new(Semaphore::new(self.max_connections));
        let sessions = TaskTracker::new();
        let accept_loops = TaskTracker::new();
        if let Some(admin) = self.admin {
            if let Ok(addr) = admin.local_addr() {
                tracing::info!(address = %addr, "admin HTTP listening (/metrics, /healthz, /backends)");
            }
            accept_loops.spawn(admin::serve(
                admin,
                Arc::clone(&self.shared),
                shutdown.clone(),
            ));
        }
        accept_loops.spawn(health::run(
            Arc::clone(&self.shared),
            self.health.clone(),
            shutdown.clone(),
        ));
        for listener in self.listeners {
            accept_loops.spawn(server::accept_loop(
                listener,
                Arc::clone(&self.shared),
                Arc::clone(&admission),
                self.max_connections,
                shutdown.clone(),
                sessions.clone(),
            ));
        }
        accept_loops.close();
        accept_loops.wait().await;
        sessions.close();
        // Sessions end with their connections; a graceful drain is the reliability issue's job.
        tracing::info!(sessions = sessions.len(), "shutting down");
    }
}
