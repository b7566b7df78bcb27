//! The reload task: SIGHUP and the config-file watch's notices, one reload at a time.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::control::reload::{reload_once, Loader};
use crate::proxy::state::ProxyState;

/// Reloads on every SIGHUP, and each time `file_changed` is notified (the config-file watch),
/// until `shutdown`: the whole configuration through `load` when the proxy has one, else just
/// the Lua script. One task for both, so two reloads never run at once.
pub async fn on_hangup(
    state: Arc<ProxyState>,
    load: Option<Loader>,
    file_changed: Arc<tokio::sync::Notify>,
    shutdown: CancellationToken,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!("cannot listen for SIGHUP ({e}); reload on SIGHUP is off");
            None
        }
    };
    loop {
        let trigger = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = file_changed.notified() => "config file changed",
            got = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => match got {
                Some(()) => "SIGHUP received",
                None => return,
            },
        };
        let state = Arc::clone(&state);
        let load = load.clone();
        // Reading files and compiling Lua: off the async workers.
        let done =
            tokio::task::spawn_blocking(move || reload_once(&state, load.as_ref(), trigger)).await;
        if let Err(e) = done {
            error!("reload task failed: {e}");
        }
    }
}
