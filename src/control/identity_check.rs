//! At start and on every reload: does a unix-socket backend admit mysql-lb's own OS identity?
//!
//! Connecting as an identity with no database account (see [`crate::net::stream::identity`]) is what
//! keeps clients from being admitted by the socket's peer. But an account can exist under that
//! name (mysql-lb run as the `mysql` OS user, whose Debian account is `... OR unix_socket`, or a
//! `backend_socket_user` someone gave an account), and then a client's `COM_CHANGE_USER` to it
//! inside a session would be admitted with any password. So each unix-socket backend is asked
//! once per configuration: a login under the identity's name with a random password, which only
//! a socket-authenticated account passes. One that passes is a configuration error; one that
//! cannot be asked (down, another plugin) is logged, and the per-login guard still applies.

use std::sync::Arc;

use tracing::warn;

use crate::backends::client::{self, OwnConnectOptions};
use crate::backends::health::{check_backend_with, CheckError};
use crate::config::{BackendAddr, Config, HealthCheckConfig};
use crate::net::stream::identity::{IdentityError, SocketIdentity};
use crate::proxy::state::TransportSettings;

/// Refuses `config` if one of its unix-socket backends logs in `identity`'s name with no
/// password.
pub async fn verify(
    identity: &Arc<SocketIdentity>,
    config: &Config,
    transport: &TransportSettings,
) -> Result<(), IdentityError> {
    let Some(user) = identity.user() else {
        // A uid with no name on this host cannot be mapped to an account by a server here.
        return Ok(());
    };
    for backend in &config.backends {
        if !matches!(backend.address, BackendAddr::Unix(_)) {
            continue;
        }
        let probe = HealthCheckConfig {
            timeout: config.connect_timeout,
            user: Some(user.to_owned()),
            password: Some(crate::config::Secret::new(random_password())),
            ..HealthCheckConfig::default()
        };
        let leg = OwnConnectOptions {
            tls: None,
            proxy_protocol: transport.proxy_protocol(&backend.name),
            socket_identity: Arc::clone(identity),
        };
        match check_backend_with(&backend.address, leg, &probe).await {
            Ok(_) => {
                return Err(IdentityError::Admitted {
                    backend: backend.name.clone(),
                    identity: identity.describe(),
                    user: user.to_owned(),
                })
            }
            Err(CheckError::Client(client::Error::Denied { .. })) => {}
            Err(e) => warn!(
                backend = %backend.name,
                "cannot tell whether this unix-socket backend admits mysql-lb's OS user {} \
                 without a password ({e}); logins under that name are refused either way",
                identity.describe()
            ),
        }
    }
    Ok(())
}

/// A password no account has: the login passes only where the password is not checked.
fn random_password() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        // Any fixed value works as well for this purpose: nobody's password is this.
        return "mysql-lb identity probe: not a password".to_owned();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
