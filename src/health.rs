//! Placeholder while the health checker is written (helper); replaced by the real module.
use std::sync::Arc;
pub async fn run(
    _shared: Arc<crate::session::Shared>,
    _cfg: crate::config::HealthCheckConfig,
    _shutdown: tokio_util::sync::CancellationToken,
) {
}
