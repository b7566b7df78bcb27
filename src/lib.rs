//! mysql-lb: a load-balancing MySQL/MariaDB wire-protocol proxy.
//!
//! [`Proxy::bind`] then [`Proxy::run`] is the whole daemon; `main.rs` only parses flags, sets up
//! logging and the descriptor limit, and the tests call the same two functions on `127.0.0.1:0`.

pub mod backends;
pub mod config;
pub mod control;
pub mod net;
pub mod proxy;
pub mod telemetry;
pub mod tools;
pub mod wire;

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use config::{Config, ListenAddr};
use proxy::server::{Listener, ServerError, Sessions};
use proxy::state::ProxyState;
use proxy::workers::Workers;
use telemetry::metrics::Metrics;

/// A proxy with its listeners bound, ready to run.
pub struct Proxy {
    listeners: Vec<Listener>,
    admin: Option<tokio::net::TcpListener>,
    admin_token: Option<config::AdminToken>,
    /// The SQL admin port (`admin_sql.address`), if enabled.
    admin_sql: Option<tokio::net::TcpListener>,
    state: Arc<ProxyState>,
    max_connections: usize,
    health: config::HealthCheckConfig,
    shutdown_timeout: std::time::Duration,
    loader: Option<control::reload::Loader>,
    /// The config file to watch (see `proxy::lifecycle::watch`).
    watch: Option<proxy::lifecycle::watch::ConfigWatch>,
    workers: Workers,
    /// The listening sockets each worker accepts on: (worker, socket).
    acceptors: Vec<(usize, proxy::server::StdAcceptor)>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("listeners", &self.listeners)
            .field("max_connections", &self.max_connections)
            .field("reloadable", &self.loader.is_some())
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Binds every listen address of `config` (port 0 picks a free port) and starts the
    /// session worker threads (`worker_threads`, default one per CPU).
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        // Certificates first: a bad file is reported before anything listens.
        let transport = proxy::state::TransportSettings::load(config)?;
        warn_plaintext_backend_legs(config);
        if let Some(warning) = config.connect_mode_warning() {
            tracing::warn!("{warning}");
        }
        let metrics = Arc::new(Metrics::new());
        // Started first: a TCP listener gets one socket per worker.
        let workers =
            Workers::start(config.worker_threads, &metrics).map_err(ServerError::Workers)?;
        let mut listeners = Vec::with_capacity(config.listen.len());
        let mut acceptors = Vec::new();
        for addr in &config.listen {
            let keepalive = config.tcp_keepalive.as_ref();
            let shared_port = config.instances.reuse_port;
            let mut listener = Listener::bind(addr, workers.len(), keepalive, shared_port).await?;
            acceptors.extend(listener.acceptors(workers.len()).map_err(|source| {
                ServerError::Bind {
                    addr: listener.local_addr(),
                    source,
                }
            })?);
            listeners.push(listener);
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
        let admin_sql =
            match &config.admin_sql {
                Some(a) => Some(tokio::net::TcpListener::bind(a.address).await.map_err(
                    |source| ServerError::Bind {
                        addr: ListenAddr::Tcp(a.address),
                        source,
                    },
                )?),
                None => None,
            };
        metrics.max_connections.set(config.max_connections as i64);
        if let Ok((soft, _)) = rlimit::Resource::NOFILE.get() {
            metrics
                .open_fds_limit
                .set(i64::try_from(soft).unwrap_or(i64::MAX));
        }
        let identity = Arc::new(crate::net::stream::identity::SocketIdentity::for_config(
            config,
        )?);
        control::identity_check::verify(&identity, config, &transport).await?;
        let state = Arc::new(
            ProxyState::new(config, Arc::clone(&metrics))
                .with_transport_settings(transport)
                .with_socket_identity(identity),
        );
        tracing::info!(
            instance_id = config.instances.instance_id,
            "{}",
            config.instances.summary()
        );
        state.export_certificate_expiry(None);
        if let Err(e) = metrics.register(state.backends().script_errors_collector()) {
            tracing::warn!("script error metric not registered: {e}");
        }
        Ok(Self {
            listeners,
            admin,
            admin_token: config.admin_token.clone(),
            admin_sql,
            state,
            max_connections: config.max_connections,
            health: config.health_check.clone(),
            shutdown_timeout: config.shutdown_timeout,
            loader: None,
            watch: None,
            workers,
            acceptors,
        })
    }

    /// Lets SIGHUP reload the whole configuration through `load` (main re-reads the file and
    /// flags); without it SIGHUP reloads only the Lua script.
    pub fn with_reload(mut self, load: control::reload::Loader) -> Self {
        self.loader = Some(load);
        self
    }

    /// Reloads (as SIGHUP does) whenever the watched file changes from the version `watch` took
    /// (take it before reading the configuration, so a change made during start-up is not
    /// mistaken for the version in force). Needs [`with_reload`](Self::with_reload) to reload
    /// more than the Lua script.
    pub fn with_config_watch(mut self, watch: proxy::lifecycle::watch::ConfigWatch) -> Self {
        self.watch = Some(watch);
        self
    }

    /// The admin HTTP address actually bound, if enabled.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The SQL admin port's address actually bound, if enabled.
    pub fn admin_sql_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin_sql.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The addresses actually bound, in configuration order.
    pub fn local_addrs(&self) -> Vec<ListenAddr> {
        self.listeners.iter().map(Listener::local_addr).collect()
    }

    /// Shared state (backends and their counters), for observers such as tests and metrics.
    pub fn state(&self) -> Arc<ProxyState> {
        Arc::clone(&self.state)
    }

    /// Serves clients until `shutdown` is cancelled, then drains: stops accepting, lets in-flight
    /// commands finish and closes each session at a command boundary, for at most
    /// `shutdown_timeout`.
    pub async fn run(self, shutdown: CancellationToken) {
        self.run_with_abort(shutdown, CancellationToken::new())
            .await
    }

    /// As [`run`](Self::run); cancelling `abort` during the drain closes every session at once
    /// (a second signal).
    pub async fn run_with_abort(self, shutdown: CancellationToken, abort: CancellationToken) {
        proxy::server::announce(&self.listeners);
        let sessions = TaskTracker::new();
        let handoff = Sessions {
            state: Arc::clone(&self.state),
            admission: Arc::new(Semaphore::new(self.max_connections)),
            max_connections: self.max_connections,
            tasks: sessions.clone(),
            drain: shutdown.clone(),
            abort: abort.clone(),
        };
        let accept_loops = TaskTracker::new();
        // The admin endpoint outlives the drain: `/healthz` answers until the process exits and
        // `/readyz` says why it fails.
        let admin_stop = CancellationToken::new();
        let recent = Arc::new(control::admin::Recent::default());
        let admin_task = start_admin(
            self.admin,
            Arc::clone(&self.state),
            self.admin_token.clone(),
            Arc::clone(&recent),
            admin_stop.clone(),
        );
        let admin_sql_task = self.admin_sql.map(|listener| {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(address = %addr, "admin SQL listening");
            }
            tokio::spawn(control::admin_sql::serve(
                listener,
                Arc::clone(&self.state),
                recent,
                admin_stop.clone(),
            ))
        });
        control::tasks::start(
            &accept_loops,
            &self.state,
            self.health.clone(),
            self.loader.clone(),
            self.watch.clone(),
            &shutdown,
        );
        let placer = self.workers.placer();
        for (worker, acceptor) in self.acceptors {
            let sessions = handoff.clone();
            let placer_for_loop = Arc::clone(&placer);
            let accept = async move {
                match acceptor.register() {
                    Ok(acceptor) => {
                        proxy::server::accept_loop(acceptor, sessions, worker, placer_for_loop)
                            .await
                    }
                    Err(e) => tracing::error!("a worker cannot accept on a listener: {e}"),
                }
            };
            accept_loops.spawn_on(accept, placer.handle(worker));
        }
        drop(handoff);
        accept_loops.close();
        accept_loops.wait().await;
        // Nobody accepts any more (each worker's TCP sockets closed with its accept loops): close
        // the unix listening sockets and remove their files now.
        drop(self.listeners);
        drain(&sessions, self.shutdown_timeout, &abort).await;
        // Transaction-mode pools: the connections sessions gave back close while the worker
        // runtimes their sockets belong to still run.
        self.state.server_pools.close_idle();
        // Every session has ended: the worker threads stop (and are joined) here.
        drop(self.workers);
        // A capture still running gets its last records written and its file closed.
        if self.state.capture.stop().await.is_some() {
            tracing::info!("capture stopped by the shutdown");
        }
        admin_stop.cancel();
        for task in admin_task.into_iter().chain(admin_sql_task) {
            if let Err(e) = task.await {
                tracing::warn!("an admin endpoint's task failed: {e}");
            }
        }
        tracing::info!("shut down");
    }
}

/// Lets the sessions reach a command boundary for up to `timeout` (or until `abort`), then
/// closes those still open; returns once every session has ended.
async fn drain(sessions: &TaskTracker, timeout: std::time::Duration, abort: &CancellationToken) {
    sessions.close();
    tracing::info!(
        sessions = sessions.len(),
        timeout = %humantime::format_duration(timeout),
        "stopped accepting; draining sessions"
    );
    let drained = tokio::select! {
        _ = sessions.wait() => true,
        _ = tokio::time::sleep(timeout) => false,
        _ = abort.cancelled() => false,
    };
    if !drained {
        tracing::warn!(
            sessions = sessions.len(),
            "closing the sessions still open (drain deadline or second signal)"
        );
        abort.cancel();
        sessions.wait().await;
    }
}

/// Serves the admin endpoint (if enabled) until `stop`.
fn start_admin(
    admin: Option<tokio::net::TcpListener>,
    state: Arc<ProxyState>,
    token: Option<config::AdminToken>,
    recent: Arc<control::admin::Recent>,
    stop: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let admin = admin?;
    if let Ok(addr) = admin.local_addr() {
        tracing::info!(address = %addr, "admin HTTP listening (/metrics, /healthz, /readyz, /backends)");
    }
    Some(tokio::spawn(control::admin::serve(
        admin, state, token, recent, stop,
    )))
}

/// With TLS on the client leg, a TCP backend whose leg is never encrypted would carry a
/// clear-text plugin's password (PAM's dialog, mysql_clear_password) unencrypted: said once per
/// backend at start, and refused nowhere (the plugins keep working).
fn warn_plaintext_backend_legs(config: &Config) {
    if config.tls.is_none() {
        return;
    }
    for b in &config.backends {
        if b.tls.mode == config::BackendTlsMode::Disabled
            && matches!(b.address, config::BackendAddr::Tcp { .. })
        {
            tracing::warn!(
                backend = %b.name,
                "clients connect with TLS but this backend's leg is plaintext (tls mode disabled): \
                 passwords of clear-text auth plugins (PAM dialog, mysql_clear_password) would \
                 cross it unencrypted"
            );
        }
    }
}
