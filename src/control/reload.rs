//! Live reload on SIGHUP: backends, weights, the balancer policy and its Lua script change without
//! dropping a session.
//!
//! The new configuration is read and validated first (the script too); anything invalid is logged
//! and the running configuration stays. A valid one becomes a new backend set, swapped in whole:
//! backends kept by name, address and type keep their sessions, counts, health and metrics;
//! removed ones keep their sessions until they end but get no new clients. TLS certificates and
//! keys are read again every time (new sessions use them; running ones keep their TLS state).
//! Settings that only take effect at start (listeners, limits, timeouts, health checks) are
//! reported as needing a restart. The task that waits for SIGHUP and for the config-file watch
//! is `crate::control::tasks`.

use std::sync::Arc;

use thiserror::Error;
use tracing::{error, info, warn};

use crate::backends::balancer::script::ScriptError;
use crate::config::{Config, ConfigError};
use crate::net::stream::identity::IdentityError;
use crate::proxy::state::ProxyState;

/// Produces the configuration to reload (main re-reads the file and flags).
pub type Loader = Arc<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

#[derive(Debug, Error)]
pub enum ReloadError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Script(#[from] ScriptError),
    #[error("{0}")]
    Tls(#[from] crate::net::tls::TlsError),
    #[error("{0}")]
    SocketIdentity(#[from] crate::net::stream::identity::IdentityError),
}

/// What a reload changed, for the log and for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Keys that changed but only take effect at the next start.
    pub needs_restart: Vec<&'static str>,
}

/// Puts `new`'s backends and balancer in force.
pub fn apply(state: &ProxyState, new: &Config) -> Result<Summary, ReloadError> {
    crate::backends::balancer::script::check(new)?;
    // Certificates and keys are read again at every reload, changed configuration or not: a
    // renewed certificate under the same path is the usual case.
    let transport = crate::proxy::state::TransportSettings::load(new)?;
    let current = state.backends();
    let next = current
        .rebuild(
            &new.backends,
            new.down_cooloff,
            !new.health_check.interval.is_zero(),
            &state.metrics,
            &new.balancer,
        )
        .with_routing_of(new);
    let names = |set: &crate::backends::balancer::BackendSet| -> Vec<String> {
        set.backends().iter().map(|b| b.name.clone()).collect()
    };
    let (before, after) = (names(&current), names(&next));
    let summary = Summary {
        added: after
            .iter()
            .filter(|n| !before.contains(n))
            .cloned()
            .collect(),
        removed: before
            .iter()
            .filter(|n| !after.contains(n))
            .cloned()
            .collect(),
        needs_restart: match state.applied.lock() {
            Ok(mut applied) => {
                let keys = restart_keys(&applied, new);
                applied.backends = new.backends.clone();
                applied.balancer = new.balancer.clone();
                applied.pools = new.pools.clone();
                applied.routes = new.routes.clone();
                applied.default_pool = new.default_pool.clone();
                applied.connect_mode = new.connect_mode;
                applied.down_cooloff = new.down_cooloff;
                // The admin port listens where it started; its account follows the file (gone
                // from the file: every login there is refused until a restart closes it).
                applied.admin_sql = match (applied.admin_sql.take(), &new.admin_sql) {
                    (Some(mut running), Some(next)) => {
                        running.account = next.account.clone();
                        Some(running)
                    }
                    _ => None,
                };
                // Read at the first stop signal: in force from now on.
                applied.lifecycle.shutdown_delay = new.lifecycle.shutdown_delay;
                keys
            }
            Err(_) => Vec::new(),
        },
    };
    let pooling_of = |backend: &str| {
        let pools = next.pools().iter();
        let mut with = pools.filter(|p| p.members().iter().any(|b| b.name == backend));
        with.next().map(|p| p.pooling)
    };
    state.server_pools.reconfigure(pooling_of);
    state.replace_backends(next);
    state.replace_transport_settings(transport);
    state.digests.apply(&new.digests);
    if let Ok(mut applied) = state.applied.lock() {
        if applied.query_rules != new.query_rules {
            applied.query_rules = new.query_rules.clone();
            state
                .rules
                .store(Arc::new(crate::backends::rules::RuleSet::new(
                    &new.query_rules,
                )));
        }
    }
    Ok(summary)
}

/// Start-time settings that differ between the running configuration and `new`.
fn restart_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut check = |changed: bool, key: &'static str| {
        if changed {
            keys.push(key);
        }
    };
    check(old.listen != new.listen, "listen");
    check(old.admin_address != new.admin_address, "admin_address");
    check(
        old.admin_sql.as_ref().map(|a| a.address) != new.admin_sql.as_ref().map(|a| a.address),
        "admin_sql.address",
    );
    check(
        old.admin_token_file != new.admin_token_file || old.admin_token != new.admin_token,
        "admin_token_file",
    );
    check(
        old.peer_token_file != new.peer_token_file || old.peer_token != new.peer_token,
        "peer_token_file",
    );
    check(old.kill != new.kill, "kill");
    // A default max_connections is fitted to the descriptor limit at start: only a chosen value
    // that differs is a change.
    check(
        (old.max_connections_chosen || new.max_connections_chosen)
            && old.max_connections != new.max_connections,
        "max_connections",
    );
    check(old.max_open_files != new.max_open_files, "max_open_files");
    // The open-files limit was sized at start for what a client costs then (one descriptor
    // when every pool shares server connections): a pool back in session mode, or more shared
    // connections, may need more than it has until a restart.
    let (ob, nb) = (old.descriptor_budget(), new.descriptor_budget());
    check(
        nb.per_connection > ob.per_connection || nb.shared > ob.shared,
        "pooling (open-files limit)",
    );
    check(
        old.connect_timeout != new.connect_timeout,
        "connect_timeout",
    );
    check(
        old.handshake_timeout != new.handshake_timeout,
        "handshake_timeout",
    );
    check(
        old.shutdown_timeout != new.shutdown_timeout,
        "shutdown_timeout",
    );
    check(old.idle_timeout != new.idle_timeout, "idle_timeout");
    check(
        old.lifecycle.watch_config != new.lifecycle.watch_config,
        "watch_config",
    );
    check(old.tcp_keepalive != new.tcp_keepalive, "tcp_keepalive");
    let (oi, ni) = (&old.instances, &new.instances);
    check(oi.reuse_port != ni.reuse_port, "reuse_port");
    check(oi.instance_id != ni.instance_id, "instance_id");
    check(oi.peers != ni.peers, "peers");
    check(
        old.max_packet_size != new.max_packet_size,
        "max_packet_size",
    );
    check(
        old.max_handshake_packet_size != new.max_handshake_packet_size,
        "max_handshake_packet_size",
    );
    check(old.health_check != new.health_check, "health_check");
    check(
        old.allow_local_infile != new.allow_local_infile,
        "allow_local_infile",
    );
    check(old.worker_threads != new.worker_threads, "worker_threads");
    check(
        old.backend_socket_user != new.backend_socket_user,
        "backend_socket_user",
    );
    check(old.compression != new.compression, "compression");
    check(
        old.accept_proxy_protocol != new.accept_proxy_protocol,
        "accept_proxy_protocol",
    );
    check(old.log_level != new.log_level, "log.level");
    check(old.log_format != new.log_format, "log.format");
    keys
}

/// Refuses a configuration whose unix-socket backends would admit mysql-lb's own OS identity, or
/// that adds one when no safe identity could be set up at start (see `crate::control::identity_check`).
/// Runs on a blocking thread of the runtime, as the rest of a reload does.
fn verify_socket_identity(state: &ProxyState, new: &Config) -> Result<(), ReloadError> {
    let identity = &state.socket_identity;
    if let Some(reason) = identity.refused() {
        if crate::net::stream::identity::has_unix_backend(new) {
            return Err(IdentityError::Unavailable(reason.to_owned()).into());
        }
        return Ok(());
    }
    let transport = crate::proxy::state::TransportSettings::load(new)?;
    tokio::runtime::Handle::current().block_on(crate::control::identity_check::verify(
        identity, new, &transport,
    ))?;
    Ok(())
}

/// One reload, started by `trigger` (named in the log): the whole configuration through `load`
/// when there is one, else the Lua script; failures are logged and change nothing.
pub(crate) fn reload_once(
    state: &ProxyState,
    load: Option<&Loader>,
    trigger: &str,
) -> crate::proxy::state::ReloadOutcome {
    let Some(load) = load else {
        info!("{trigger}: reloading the Lua script");
        // Logs and counts its own failures.
        return match state.backends().reload_script() {
            Ok(_) => Ok("the Lua script reloaded (no configuration file to read)".to_owned()),
            Err(e) => Err(format!("the Lua script was not reloaded: {e}")),
        };
    };
    info!("{trigger}: reloading the configuration");
    match load()
        .map_err(ReloadError::from)
        .and_then(|c| verify_socket_identity(state, &c).map(|()| c))
        .and_then(|c| apply(state, &c))
    {
        Ok(summary) => {
            info!(
                backends = state.backends().backends().len(),
                added = ?summary.added,
                removed = ?summary.removed,
                "configuration reloaded; sessions on removed backends run on"
            );
            for key in &summary.needs_restart {
                warn!("`{key}` changed: it takes effect at the next restart");
            }
            let mut said = format!(
                "configuration reloaded: {} backend(s), added {:?}, removed {:?}",
                state.backends().backends().len(),
                summary.added,
                summary.removed
            );
            if !summary.needs_restart.is_empty() {
                said.push_str(&format!(
                    "; takes effect at the next restart: {}",
                    summary.needs_restart.join(", ")
                ));
            }
            Ok(said)
        }
        Err(e) => {
            error!("reload refused, the running configuration stays: {e}");
            Err(format!(
                "reload refused, the running configuration stays: {e}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendAddr, BackendConfig};
    use crate::telemetry::metrics::Metrics;

    fn backend(name: &str, port: u16, weight: u32) -> BackendConfig {
        BackendConfig {
            name: name.into(),
            address: BackendAddr::Tcp {
                host: "127.0.0.1".into(),
                port,
            },
            weight,
            kind: Default::default(),
            tls: Default::default(),
            compression: false,
            proxy_protocol: None,
            pool: "default".into(),
            role: None,
        }
    }

    fn config(backends: Vec<BackendConfig>) -> Config {
        Config {
            backends,
            ..Config::default()
        }
    }

    #[test]
    fn kept_backends_are_the_same_objects_and_removed_ones_drop_out() {
        let old = config(vec![backend("a", 1, 1), backend("b", 2, 1)]);
        let state = ProxyState::new(&old, Arc::new(Metrics::new()));
        let a_before = Arc::clone(&state.backends().backends()[0]);
        let lease = state.backends().lease(&a_before);
        let mut new = config(vec![backend("c", 3, 1), backend("a", 1, 5)]);
        new.listen = vec!["127.0.0.1:5000".parse().unwrap()];
        let summary = apply(&state, &new).unwrap();
        assert_eq!(summary.added, vec!["c".to_string()]);
        assert_eq!(summary.removed, vec!["b".to_string()]);
        assert_eq!(summary.needs_restart, vec!["listen"]);
        let set = state.backends();
        let a_after = &set.backends()[1];
        assert!(Arc::ptr_eq(&a_before, a_after), "a kept its identity");
        assert_eq!(a_after.active(), 1, "and its sessions");
        assert_eq!(a_after.weight(), 5);
        assert_eq!(a_after.index(), 1);
        drop(lease);
        assert_eq!(a_after.active(), 0);
    }

    #[test]
    fn a_changed_address_is_a_new_backend() {
        let state = ProxyState::new(&config(vec![backend("a", 1, 1)]), Arc::new(Metrics::new()));
        let before = Arc::clone(&state.backends().backends()[0]);
        apply(&state, &config(vec![backend("a", 9, 1)])).unwrap();
        assert!(!Arc::ptr_eq(&before, &state.backends().backends()[0]));
    }

    #[test]
    fn a_script_that_fails_to_load_keeps_the_running_set() {
        let state = ProxyState::new(&config(vec![backend("a", 1, 1)]), Arc::new(Metrics::new()));
        let reloads = state.reloads();
        let dir = std::env::temp_dir().join(format!("mysql-lb-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("broken.lua");
        std::fs::write(&script, "function connect_server( oops").unwrap();
        let mut new = config(vec![backend("z", 7, 1)]);
        new.balancer.script = Some(script);
        assert!(apply(&state, &new).is_err());
        assert_eq!(state.backends().backends()[0].name, "a");
        assert!(!reloads.has_changed().unwrap(), "no new set announced");
        std::fs::remove_dir_all(dir).ok();
    }
}
