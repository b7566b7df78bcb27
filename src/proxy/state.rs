//! The proxy-wide state: what sessions, health checks, the admin endpoint and reload share.
//!
//! It lives apart from the session module so that health, admin and reload depend on the state
//! they read, not on the code that runs a client connection. What changes at runtime (the backend
//! set, swapped whole by a reload; the KILL registry) is behind its own synchronisation; what is
//! fixed at start ([`SessionSettings`]) is plain data.

use crate::net::stream::identity::{IdentityError, SocketIdentity};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::backends::balancer::roles::Primary;
use crate::backends::balancer::{Backend, BackendSet};
use crate::backends::client::OwnConnectOptions;
use crate::backends::kill;
use crate::config::Config;
use crate::net::tls::{TlsError, TlsMaterial};
use crate::telemetry::metrics::Metrics;
use crate::wire::protocol::caps::CLIENT_LOCAL_FILES;
use crate::wire::protocol::handshake::Strip;
use crate::wire::protocol::proxy_out::Version as ProxyVersion;

/// Proxy-wide state, one per running proxy, passed by `Arc`.
#[derive(Debug)]
pub struct ProxyState {
    /// Swapped whole by a reload; sessions keep the `Arc<Backend>` they leased.
    set: RwLock<Arc<BackendSet>>,
    /// Bumped after each reload, so the health checker follows the new set.
    reloads: watch::Sender<u64>,
    /// The configuration last applied, to tell what a reload changed.
    pub(crate) applied: Mutex<Config>,
    /// Live sessions by the proxy-unique id their client was greeted with.
    pub kills: kill::Registry,
    /// The other instances, asked about KILLs of their ids.
    pub peers: kill::peer::Peers,
    /// The `kill:` account, running KILLs on other backends than the killer's.
    pub killer: kill::exec::Executor,
    pub metrics: Arc<Metrics>,
    /// The live query digest table (see `crate::telemetry::digest`); its settings follow reloads.
    pub digests: Arc<crate::telemetry::digest::Digests>,
    /// The traffic capture switch (see `crate::telemetry::capture`).
    pub capture: crate::telemetry::capture::Capture,
    /// Transaction-mode pools' shared server connections, per backend (see `crate::backends::pooling`).
    pub server_pools: crate::backends::pooling::ServerPools,
    /// Read by every session, fixed at start (a reload reports changes as needing a restart).
    pub session: SessionSettings,
    /// `accept_proxy_protocol`, fixed at start like `session`.
    pub accept_proxy_protocol: Vec<crate::config::cidr::Cidr>,
    /// TLS material and compression per leg; a reload swaps it whole (new sessions use the new
    /// one, running sessions keep what they negotiated).
    transport_settings: ArcSwap<TransportSettings>,
    /// Fails from the first stop signal on (`/readyz`; see `crate::proxy::lifecycle`).
    pub readiness: crate::proxy::lifecycle::Readiness,
    /// Who unix-socket backends see as their peer, and how to connect as it (fixed at start).
    pub socket_identity: Arc<SocketIdentity>,
    /// Reloads asked for by the SQL admin port's `RELOAD`, run by the reload task (the one
    /// SIGHUP runs) so two reloads never overlap; each gets the outcome back.
    pub reload_requests: ReloadRequests,
    /// `query_rules:` compiled (see `crate::backends::rules`); a reload swaps it whole, and a
    /// session keeps the set it started with.
    pub rules: ArcSwap<crate::backends::rules::RuleSet>,
    /// Pools paused by the admin port's `PAUSE` (see `crate::proxy::pauses`).
    pub pauses: crate::proxy::pauses::Pauses,
}

/// The outcome of one reload: what the log line says, Ok when it was applied.
pub type ReloadOutcome = Result<String, String>;

/// A queue of reloads asked for from outside a signal (see [`ProxyState::reload_requests`]).
#[derive(Debug)]
pub struct ReloadRequests {
    send: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<ReloadOutcome>>,
    receive:
        Mutex<Option<tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<ReloadOutcome>>>>,
}

impl Default for ReloadRequests {
    fn default() -> Self {
        // A few at once: more would only queue behind the reload running.
        let (send, receive) = tokio::sync::mpsc::channel(4);
        ReloadRequests {
            send,
            receive: Mutex::new(Some(receive)),
        }
    }
}

impl ReloadRequests {
    /// Asks for a reload and waits for its outcome; an error when no reload task runs or
    /// too many wait already.
    pub async fn ask(&self) -> ReloadOutcome {
        let (tell, told) = tokio::sync::oneshot::channel();
        self.send
            .try_send(tell)
            .map_err(|_| "a reload is already queued; try again".to_owned())?;
        told.await
            .map_err(|_| "the reload task is not running".to_owned())?
    }

    /// The requests, for the one task that runs reloads (None after the first call).
    pub fn take(
        &self,
    ) -> Option<tokio::sync::mpsc::Receiver<tokio::sync::oneshot::Sender<ReloadOutcome>>> {
        match self.receive.lock() {
            Ok(mut r) => r.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        }
    }
}

/// What each leg of a new session may encrypt or compress, from the configuration.
#[derive(Default)]
pub struct TransportSettings {
    pub tls: TlsMaterial,
    /// Backends (by name) whose leg is compressed when they offer it.
    compressed_backends: HashSet<String>,
    /// Backends (by name) whose connections start with a PROXY protocol header, and which.
    proxy_protocol: HashMap<String, ProxyVersion>,
}

impl std::fmt::Debug for TransportSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportSettings")
            .field("client_tls", &self.tls.client.is_some())
            .field("compressed_backends", &self.compressed_backends)
            .field("proxy_protocol", &self.proxy_protocol)
            .finish()
    }
}

impl TransportSettings {
    /// Reads every certificate and key file the configuration names.
    pub fn load(config: &Config) -> Result<TransportSettings, TlsError> {
        Ok(TransportSettings {
            tls: TlsMaterial::load(config)?,
            compressed_backends: config
                .backends
                .iter()
                .filter(|b| b.compression)
                .map(|b| b.name.clone())
                .collect(),
            proxy_protocol: config.proxy_protocol_backends(),
        })
    }

    /// The PROXY protocol header version backend `name` is sent, if any.
    pub fn proxy_protocol(&self, name: &str) -> Option<ProxyVersion> {
        self.proxy_protocol.get(name).copied()
    }

    pub fn compress_backend(&self, name: &str) -> bool {
        self.compressed_backends.contains(name)
    }
}

/// Per-session limits and timeouts, from the configuration at start.
#[derive(Debug, Clone, Copy)]
pub struct SessionSettings {
    pub connect_timeout: Duration,
    pub handshake_timeout: Duration,
    pub max_packet_size: u64,
    pub max_handshake_packet_size: usize,
    pub idle_timeout: Option<Duration>,
    /// Keepalive timers for client and backend TCP connections (None: off).
    pub tcp_keepalive: Option<crate::config::TcpKeepalive>,
    /// Capability bits cleared in both directions.
    pub strip: Strip,
    /// CLIENT_COMPRESS offered to clients.
    pub offer_compression: bool,
}

impl SessionSettings {
    /// What the connection phase may take, in packet size and time.
    pub fn handshake_limits(&self) -> crate::proxy::auth::HandshakeLimits {
        crate::proxy::auth::HandshakeLimits {
            max_packet: self.max_handshake_packet_size,
            timeout: self.handshake_timeout,
            strip: self.strip,
        }
    }

    pub fn from_config(config: &Config) -> Self {
        Self {
            connect_timeout: config.connect_timeout,
            handshake_timeout: config.handshake_timeout,
            max_packet_size: config.max_packet_size,
            max_handshake_packet_size: config.max_handshake_packet_size,
            idle_timeout: config.idle_timeout,
            tcp_keepalive: config.tcp_keepalive,
            strip: if config.allow_local_infile {
                Strip::UNSUPPORTED
            } else {
                Strip::UNSUPPORTED.and(CLIENT_LOCAL_FILES)
            },
            offer_compression: config.compression,
        }
    }
}

impl ProxyState {
    /// A server said whether it is read-only (a passed health check read `@@read_only`, or a
    /// split's write was refused for it): the backend's role follows (`role: auto`), and a
    /// change is logged and counted, with the pool's primary as it now stands.
    pub fn follow_role(&self, backend: &Arc<Backend>, read_only: bool) {
        if !backend.role.observe(read_only) || backend.role.configured().is_none() {
            return;
        }
        self.metrics.role_changed(&backend.name);
        let set = self.backends();
        let Some(pool) = set.pool(&backend.pool) else {
            return;
        };
        let role = backend.role.describe().unwrap_or("none");
        match pool.primary() {
            Primary::Several(all) => {
                let names: Vec<&str> = all.iter().map(|b| b.name.as_str()).collect();
                error!(
                    backend = %backend.name,
                    read_only,
                    pool = %pool.name,
                    writable = %names.join(", "),
                    "more than one backend of the pool is writable: none takes writes until one is read-only"
                );
            }
            Primary::One(p) => info!(
                backend = %backend.name, read_only, role, pool = %pool.name, primary = %p.name,
                "backend role changed"
            ),
            Primary::None | Primary::Any => warn!(
                backend = %backend.name, read_only, role, pool = %pool.name,
                "backend role changed: the pool has no writable primary now"
            ),
        }
    }

    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Self {
        let set = BackendSet::new(
            &config.backends,
            config.down_cooloff,
            !config.health_check.interval.is_zero(),
            &metrics,
        )
        .with_balancer(&config.balancer)
        .with_routing_of(config);
        let capture = crate::telemetry::capture::Capture::new(metrics.capture_dropped.clone());
        Self {
            set: RwLock::new(Arc::new(set)),
            reloads: watch::channel(0).0,
            applied: Mutex::new(config.clone()),
            kills: kill::Registry::with_instance(config.instances.instance_id),
            peers: kill::peer::Peers::new(
                config.instances.peers.clone(),
                config
                    .peer_token
                    .clone()
                    .or_else(|| config.admin_token.clone()),
                config.peer_token.clone(),
                metrics.peer_requests(),
            ),
            killer: kill::exec::Executor::new(&config.kill),
            server_pools: crate::backends::pooling::ServerPools::new(&metrics),
            metrics,
            digests: Arc::new(crate::telemetry::digest::Digests::new(&config.digests)),
            capture,
            session: SessionSettings::from_config(config),
            accept_proxy_protocol: config.accept_proxy_protocol.clone(),
            transport_settings: ArcSwap::from_pointee(TransportSettings::default()),
            readiness: crate::proxy::lifecycle::Readiness::default(),
            socket_identity: Arc::new(SocketIdentity::unavailable(&IdentityError::NotSetUp)),
            reload_requests: ReloadRequests::default(),
            rules: ArcSwap::from_pointee(crate::backends::rules::RuleSet::new(&config.query_rules)),
            pauses: crate::proxy::pauses::Pauses::default(),
        }
    }

    /// With `identity` for unix-socket backends (built by [`SocketIdentity::for_config`]).
    pub fn with_socket_identity(mut self, identity: Arc<SocketIdentity>) -> Self {
        self.socket_identity = identity;
        self
    }

    /// With the TLS material and compression settings `legs` (built by [`TransportSettings::load`]).
    pub fn with_transport_settings(self, transport: TransportSettings) -> Self {
        self.transport_settings.store(Arc::new(transport));
        self
    }

    /// What new sessions' legs may use now.
    pub fn transport_settings(&self) -> Arc<TransportSettings> {
        self.transport_settings.load_full()
    }

    /// Publishes the expiry of the certificates the configuration names (the ones backends
    /// present are published as each handshake sees them).
    pub fn export_certificate_expiry(&self, previous: Option<&TransportSettings>) {
        self.transport_settings()
            .tls
            .export_expiry(&self.metrics, previous.map(|p| &p.tls));
    }

    /// Puts `legs` in force for new sessions (see `crate::control::reload`).
    pub(crate) fn replace_transport_settings(&self, transport: TransportSettings) {
        let previous = self.transport_settings.swap(Arc::new(transport));
        self.export_certificate_expiry(Some(&previous));
    }

    /// The backends in force now.
    pub fn backends(&self) -> Arc<BackendSet> {
        match self.set.read() {
            Ok(set) => Arc::clone(&set),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Puts `set` in force (see `crate::control::reload`).
    pub(crate) fn replace_backends(&self, set: BackendSet) {
        let set = Arc::new(set);
        match self.set.write() {
            Ok(mut current) => *current = set,
            Err(poisoned) => *poisoned.into_inner() = set,
        }
        self.reloads.send_modify(|generation| *generation += 1);
    }

    /// How a connection of the proxy's own to `backend` starts (TLS, a PROXY protocol header),
    /// as a session's would: health checks and KILLs run on another backend use it.
    pub(crate) fn own_connect_options(&self, backend: &Backend) -> OwnConnectOptions {
        let transport = self.transport_settings();
        OwnConnectOptions {
            tls: transport.tls.backend(&backend.name).cloned(),
            proxy_protocol: transport.proxy_protocol(&backend.name),
            socket_identity: Arc::clone(&self.socket_identity),
        }
    }

    /// Changes whenever the backend set is replaced.
    pub fn reloads(&self) -> watch::Receiver<u64> {
        self.reloads.subscribe()
    }
}
