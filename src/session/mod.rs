//! One client connection from accept to close: choose and connect a backend, relay the connection
//! phase, relay the command phase, and say in one log line why it ended.
//!
//! Every failure the client can still be told about gets a MySQL ERR packet (before the greeting:
//! sequence id 0 and no SQLSTATE marker) whose message starts `mysql-lb:`; the rest are closed with
//! a logged reason. Nothing here can disturb another session.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace, warn};

use crate::auth::{read_greeting, relay_connection_phase, AuthError, PatchedGreeting};
use crate::balancer::{Backend, BackendSet, ClientInfo, Lease};
use crate::config::Config;
use crate::kill;
use crate::metrics::{BackendStats, Metrics, Refusal};
use crate::protocol::caps::CLIENT_LOCAL_FILES;
use crate::protocol::errors::{code, pre_greeting_err};
use crate::protocol::handshake::{set_greeting_connection_id, Strip};
use crate::protocol::response::{Completed, Tracker};
use crate::relay::{relay, relay_opaque, Observer, Stop};
use crate::stream::BackendStream;

mod ending;

pub use ending::refuse;
use ending::{handshake_failed, relay_ended, send};

/// What every session needs, shared by all of them.
#[derive(Debug)]
pub struct Shared {
    /// Swapped whole by a reload; sessions keep the `Arc<Backend>` they leased.
    set: RwLock<Arc<BackendSet>>,
    /// Bumped after each reload, so the health checker follows the new set.
    reloads: watch::Sender<u64>,
    /// The configuration last applied, to tell what a reload changed.
    pub(crate) applied: Mutex<Config>,
    /// Live sessions by the proxy-unique id their client was greeted with.
    pub kills: kill::Registry,
    pub metrics: Arc<Metrics>,
    pub connect_timeout: Duration,
    pub handshake_timeout: Duration,
    pub max_packet_size: u64,
    pub max_handshake_packet_size: usize,
    pub record_latency: bool,
    pub idle_timeout: Option<Duration>,
    /// Keepalive timers for client and backend TCP connections (None: off).
    pub tcp_keepalive: Option<crate::config::TcpKeepalive>,
    /// Capability bits cleared in both directions.
    pub strip: Strip,
}

impl Shared {
    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Self {
        let set = BackendSet::new(
            &config.backends,
            config.down_cooloff,
            !config.health_check.interval.is_zero(),
            &metrics,
        )
        .with_balancer(&config.balancer);
        Self {
            set: RwLock::new(Arc::new(set)),
            reloads: watch::channel(0).0,
            applied: Mutex::new(config.clone()),
            kills: kill::Registry::default(),
            metrics,
            connect_timeout: config.connect_timeout,
            handshake_timeout: config.handshake_timeout,
            max_packet_size: config.max_packet_size,
            max_handshake_packet_size: config.max_handshake_packet_size,
            record_latency: config.record_latency,
            idle_timeout: config.idle_timeout,
            tcp_keepalive: config.tcp_keepalive,
            strip: if config.allow_local_infile {
                Strip::UNSUPPORTED
            } else {
                Strip::UNSUPPORTED.and(CLIENT_LOCAL_FILES)
            },
        }
    }

    /// The backends in force now.
    pub fn backends(&self) -> Arc<BackendSet> {
        match self.set.read() {
            Ok(set) => Arc::clone(&set),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Puts `set` in force (see `crate::reload`).
    pub(crate) fn replace_backends(&self, set: BackendSet) {
        let set = Arc::new(set);
        match self.set.write() {
            Ok(mut current) => *current = set,
            Err(poisoned) => *poisoned.into_inner() = set,
        }
        self.reloads.send_modify(|generation| *generation += 1);
    }

    /// Changes whenever the backend set is replaced.
    pub fn reloads(&self) -> watch::Receiver<u64> {
        self.reloads.subscribe()
    }
}

/// Why a session ended; the label set for disconnect metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    ClientQuit,
    ClientNetwork,
    AuthFailed,
    BackendNetwork,
    Malformed,
    NoBackend,
    Shutdown,
    IdleTimeout,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientQuit => "client_quit",
            Self::ClientNetwork => "client_network",
            Self::AuthFailed => "auth_failed",
            Self::BackendNetwork => "backend_network",
            Self::Malformed => "malformed_packet",
            Self::NoBackend => "no_backend",
            Self::Shutdown => "shutdown",
            Self::IdleTimeout => "idle_timeout",
        }
    }
}

/// Runs one client session to its end. `peer` names the client in logs. Once `drain` is
/// cancelled the session ends at its next command boundary.
pub async fn run<C>(
    shared: Arc<Shared>,
    mut client: C,
    peer: &str,
    drain: &CancellationToken,
) -> EndReason
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (lease, mut backend, greeting) =
        match connect_backend(&shared, &ClientInfo { addr: peer }).await {
            Ok(found) => found,
            Err(tried) => {
                let message = format!("all backends are down; tried {}", tried.join("; "));
                warn!(client = peer, "refused: {message}");
                shared.metrics.rejected(Refusal::NoBackend);
                send(
                    &mut client,
                    &pre_greeting_err(code::UNKNOWN_ERROR, &message),
                )
                .await;
                return EndReason::NoBackend;
            }
        };
    let backend_name = lease.backend().name.clone();
    let mut greeting = greeting;
    // Clients see a proxy-unique id, so a KILL naming it can be mapped (see `kill`).
    let proxy_id = shared.kills.allocate();
    let thread_id = set_greeting_connection_id(&mut greeting.packet[4..], proxy_id)
        .unwrap_or(greeting.greeting.connection_id);
    let _registered = shared.kills.register(
        proxy_id,
        kill::Target {
            backend: Arc::clone(lease.backend()),
            thread_id,
        },
    );
    let mut next_seq = 2;
    let auth = relay_connection_phase(
        &mut client,
        &mut backend,
        greeting,
        shared.max_handshake_packet_size,
        shared.handshake_timeout,
        shared.strip,
        &mut next_seq,
    )
    .await;
    let auth = match auth {
        Ok(auth) => auth,
        Err(e) => return handshake_failed(&mut client, e, next_seq, peer, &backend_name).await,
    };
    debug!(client = peer, backend = %backend_name, user = %auth.user, "session established");
    let mut tracker = Tracker::new(auth.negotiated, shared.max_packet_size);
    let mut observer = Recorder {
        stats: &lease.backend().stats,
        backend: lease.backend(),
        kills: &shared.kills,
        record_latency: shared.record_latency,
    };
    if auth.compressed {
        info!(
            client = peer,
            backend = %backend_name,
            "client uses protocol compression it was not offered: relaying its bytes unread \
             (no per-command metrics, KILL mapping or drain at a command boundary for this session)"
        );
        let end = relay_opaque(
            &mut client,
            &mut backend,
            auth.client_pending,
            auth.backend_pending,
            &mut observer,
        )
        .await;
        return relay_ended(&mut client, end, &tracker, peer, &backend_name).await;
    }
    let end = relay(
        &mut client,
        &mut backend,
        &mut tracker,
        auth.client_pending,
        auth.backend_pending,
        Stop {
            drain,
            idle_timeout: shared.idle_timeout,
        },
        &mut observer,
    )
    .await;
    relay_ended(&mut client, end, &tracker, peer, &backend_name).await
}

/// Feeds a session's commands and bytes into its backend's metrics, and maps KILLs.
struct Recorder<'a> {
    stats: &'a BackendStats,
    backend: &'a Arc<Backend>,
    kills: &'a kill::Registry,
    record_latency: bool,
}

impl Observer for Recorder<'_> {
    fn completed(&mut self, c: &Completed) {
        if self.record_latency {
            self.stats.record(c);
        }
        trace!(
            backend = %self.backend.name,
            command = c.command,
            kind = c.kind().as_str(),
            latency_us = c.latency.as_micros() as u64,
            first_byte_us = c.first_byte.as_micros() as u64,
            "command completed"
        );
    }

    fn relayed(&mut self, to_backend: bool, n: usize) {
        let counter = if to_backend {
            &self.stats.bytes_to_backend
        } else {
            &self.stats.bytes_from_backend
        };
        counter.inc_by(n as u64);
    }

    fn rewrite_kill(&mut self, packet: &[u8]) -> Option<Vec<u8>> {
        let request = kill::parse(packet.get(4..)?)?;
        let rewritten = kill::rewrite(&request, self.kills, self.backend);
        if rewritten.is_some() {
            info!(backend = %self.backend.name, target = request.id, "KILL mapped to its session");
        }
        rewritten
    }
}

/// Tries backends in the balancer's order (a script may choose the first for this client) until
/// one greets; returns what each failed one said.
async fn connect_backend(
    shared: &Shared,
    client: &ClientInfo<'_>,
) -> Result<(Lease, BackendStream, PatchedGreeting), Vec<String>> {
    let mut tried = Vec::new();
    for backend in shared.backends().candidates_for(Instant::now(), client) {
        let started = Instant::now();
        // Err carries the reason and whether the backend itself is unreachable or broken (taken out
        // of rotation) rather than alive and refusing, e.g. its own "Too many connections".
        // One deadline for connect and greeting (one timer per connect); whether the connect
        // had completed says which of the two the backend missed.
        let connected = std::sync::atomic::AtomicBool::new(false);
        let attempt = async {
            let mut stream = BackendStream::open(&backend.address, shared.tcp_keepalive.as_ref())
                .await
                .map_err(|e| (e.to_string(), true))?;
            connected.store(true, std::sync::atomic::Ordering::Relaxed);
            let greeting =
                read_greeting(&mut stream, shared.max_handshake_packet_size, shared.strip)
                    .await
                    .map_err(|e| {
                        let broken = !matches!(e, AuthError::BackendRefused { .. });
                        (e.to_string(), broken)
                    })?;
            Ok((stream, greeting))
        };
        let result = match tokio::time::timeout(shared.connect_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err((
                format!(
                    "{} within {}",
                    if connected.load(std::sync::atomic::Ordering::Relaxed) {
                        "no greeting"
                    } else {
                        "connect timed out"
                    },
                    humantime::format_duration(shared.connect_timeout)
                ),
                true,
            )),
        };
        match result {
            Ok((stream, greeting)) => {
                backend
                    .stats
                    .connect
                    .observe(started.elapsed().as_secs_f64());
                if shared.backends().mark_up(&backend) {
                    info!(backend = %backend.name, "backend back in rotation: connect succeeded");
                }
                return Ok((
                    shared.backends().lease_for(&backend, client),
                    stream,
                    greeting,
                ));
            }
            Err((reason, broken)) => {
                if broken && shared.backends().mark_down(&backend, Instant::now()) {
                    warn!(backend = %backend.name, address = %backend.address, "backend marked down: {reason}");
                } else if !broken {
                    info!(backend = %backend.name, "backend refused a connection: {reason}");
                }
                tried.push(format!("{}: {reason}", backend.label()));
            }
        }
    }
    shared.backends().client_refused(client);
    if tried.is_empty() {
        tried.push("no backend configured".to_owned());
    }
    Err(tried)
}
