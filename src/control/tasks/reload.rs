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
    let mut asked = state.reload_requests.take();
    loop {
        let mut reply = None;
        let trigger = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = file_changed.notified() => "config file changed",
            Some(tell) = async {
                match asked.as_mut() {
                    Some(a) => a.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                reply = Some(tell);
                "RELOAD on the SQL admin port"
            }
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
        let outcome = done.unwrap_or_else(|e| {
            error!("reload task failed: {e}");
            Err(format!("the reload failed: {e}"))
        });
        if let Some(tell) = reply {
            // The asker may have gone; the log says what happened either way.
            let _ = tell.send(outcome);
        }
    }
}
