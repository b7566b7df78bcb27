//! Running a client's KILL on another backend, over a connection of the proxy's own.
//!
//! A cancel (`KILL QUERY n` on a new connection) lands on whatever backend the balancer chose,
//! often not its target's. Only a connection to the target's backend can kill there, and the
//! client's own credentials are not the proxy's to replay, so the proxy logs in with its `kill:`
//! account (which needs `CONNECTION ADMIN`: it is another user than the target) and runs the
//! KILL, but only where the server's own rule would have let the client do it (the same user
//! name, checked by the caller in `decide`). The connection is opened per KILL (KILLs are rare)
//! and closed after, over the proxy's own client (`crate::backends::client`, as health checks:
//! same PROXY protocol header, same TLS).
//! Bounded twice: one KILL in flight per session (the session's own slot) and [`MAX_IN_FLIGHT`]
//! for the whole proxy, so no client can make the proxy open connections without limit.

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::Semaphore;

use super::{failed_elsewhere, query_packet, Elsewhere};
use crate::backends::client::{self, OwnConnectOptions, Stage};
use crate::config::KillConfig;

/// KILLs on other backends in flight at once, proxy-wide.
pub const MAX_IN_FLIGHT: usize = 16;
/// One KILL elsewhere, waiting for a slot to the server's answer: the killing client waits.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// ER_NO_SUCH_THREAD: the target's thread ended meanwhile.
const NO_SUCH_THREAD: u16 = 1094;

/// Why a KILL elsewhere did not run.
#[derive(Debug, Error)]
pub enum ExecError {
    #[error("{MAX_IN_FLIGHT} KILLs on other backends are in flight already")]
    Busy,
    #[error("no kill account is configured")]
    NoAccount,
    #[error("no answer within {}", humantime::format_duration(TIMEOUT))]
    TimedOut,
    #[error("login as the kill account: {code} {message}")]
    Denied { code: u16, message: String },
    /// Connecting, or the KILL itself, failed on the target's backend.
    #[error("{0}")]
    Backend(client::Error),
}

/// The `kill:` account and the proxy-wide bound on its connections.
#[derive(Debug)]
pub struct Executor {
    account: Option<(String, String)>,
    slots: Semaphore,
}

impl From<client::Error> for ExecError {
    fn from(e: client::Error) -> Self {
        match e {
            client::Error::Denied { code, message } => ExecError::Denied { code, message },
            other => ExecError::Backend(other),
        }
    }
}

impl Executor {
    pub fn new(config: &KillConfig) -> Executor {
        Executor {
            account: config.user.clone().map(|user| {
                let password = config.password.as_ref().map(|p| p.expose().to_owned());
                let password = password.unwrap_or_default();
                (user, password)
            }),
            slots: Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    /// Whether KILLs can run on other backends at all.
    pub fn configured(&self) -> bool {
        self.account.is_some()
    }

    /// Runs `kill` on its backend over `leg`; the packet to send the killer's own backend
    /// instead of its KILL: `DO 0` (its OK answers the client) or the error it should see.
    /// `turn` is the killing session's own slot: its KILLs elsewhere run one at a time.
    pub async fn run(
        &self,
        kill: &Elsewhere,
        leg: OwnConnectOptions,
        turn: Arc<Semaphore>,
    ) -> Vec<u8> {
        let outcome = tokio::time::timeout(TIMEOUT, async {
            let _turn = turn.acquire_owned().await.map_err(|_| ExecError::Busy)?;
            let _slot = self.slots.acquire().await.map_err(|_| ExecError::Busy)?;
            self.kill_there(kill, &leg).await
        })
        .await
        .unwrap_or(Err(ExecError::TimedOut));
        let backend = &kill.backend.name;
        match outcome {
            Ok(()) => {
                tracing::info!(%backend, target = kill.proxy_id, statement = %kill.statement, "KILL run on its target's backend over the kill account");
                query_packet("DO 0")
            }
            Err(ExecError::Backend(client::Error::QueryFailed {
                code: NO_SUCH_THREAD,
                ..
            })) => failed_elsewhere(
                NO_SUCH_THREAD,
                &format!("Unknown thread id: {}", kill.proxy_id),
            ),
            Err(e) => {
                tracing::warn!(%backend, target = kill.proxy_id, "KILL over the kill account failed: {e}");
                failed_elsewhere(
                    1105,
                    &format!(
                        "mysql-lb: KILL of connection {} on backend {backend} over the kill \
                         account failed ({e}); nothing was killed",
                        kill.proxy_id
                    ),
                )
            }
        }
    }

    async fn kill_there(&self, kill: &Elsewhere, leg: &OwnConnectOptions) -> Result<(), ExecError> {
        let Some((user, password)) = &self.account else {
            return Err(ExecError::NoAccount);
        };
        let mut stage = Stage::Connect;
        let account = (user.as_str(), password.as_str());
        let address = &kill.backend.address;
        let (mut conn, _) = client::open(address, leg, account, TIMEOUT, &mut stage).await?;
        conn.execute("KILL", &kill.statement).await?;
        conn.quit().await;
        Ok(())
    }
}
