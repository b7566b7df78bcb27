//! What a session does with its two legs around the connection phase: the plan of TLS and
//! compression for each, what is logged and counted once they are set up, compression switched
//! on after the OK, and a clean TLS close at the end.

use std::sync::Arc;

use bytes::BytesMut;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tracing::{debug, warn};

use super::Context;
use crate::backends::balancer::Backend;
use crate::net::leg::LegStream;
use crate::net::tls;
use crate::proxy::auth::{Authenticated, PatchedGreeting, TransportPlan};
use crate::proxy::state::{ProxyState, TransportSettings};
use crate::wire::protocol::caps::CLIENT_COMPRESS;
use crate::wire::protocol::compress::Role;

/// How long a close_notify may take to leave.
const CLOSE_NOTIFY_BUDGET: std::time::Duration = std::time::Duration::from_millis(200);

/// What each leg of this session does: the client leg as configured for every listener, the
/// backend leg as its mode and greeting decided (`backend_tls`). A password in clear is guarded
/// against when the backend leg stays plaintext on its way off this host, unless that backend
/// allows it (`allow_cleartext_passwords`).
pub(super) fn plan<'a>(
    ctx: &Context<'a>,
    backend_tls: &'a Option<(TlsConnector, ServerName<'static>)>,
    greeting: &PatchedGreeting,
    backend: &'a Backend,
) -> TransportPlan<'a> {
    let (state, transport): (&'a ProxyState, &'a TransportSettings) = (ctx.state, ctx.transport);
    let unix = matches!(backend.address, crate::config::BackendAddr::Unix(_));
    let allowed = transport
        .tls
        .backend(&backend.name)
        .is_some_and(|leg| leg.allow_cleartext_passwords);
    let guard_cleartext = backend_tls.is_none() && backend.address.leaves_host() && !allowed;
    TransportPlan {
        client_tls: transport.tls.client.as_ref(),
        client_local: ctx.from.local,
        offer_compression: state.session.offer_compression,
        backend_tls: backend_tls.as_ref().map(|(c, n)| (c, n.clone())),
        backend_compression: greeting.backend_capabilities & CLIENT_COMPRESS != 0
            && transport.compress_backend(&backend.name),
        mariadb: greeting.greeting.is_mariadb,
        socket_identity: unix.then_some(&*state.socket_identity),
        backend: &backend.name,
        guard_cleartext,
    }
}

/// The debug line of an established session, the once-per-backend clear-text warning, the
/// expiry of the certificate the backend presented, and the per-leg session counts.
pub(super) fn established<C, B>(
    ctx: &Context<'_>,
    backend: &Arc<Backend>,
    client: &LegStream<C>,
    backend_leg: &LegStream<B>,
    auth: &Authenticated,
) {
    let state = ctx.state;
    debug!(
        client = ctx.peer(),
        backend = %backend.name,
        pool = %backend.pool,
        user = %auth.user,
        client_tls = client.tls_description().as_deref().unwrap_or("off"),
        backend_tls = backend_leg.tls_description().as_deref().unwrap_or("off"),
        client_compression = auth.client_compressed,
        backend_compression = auth.backend_compressed,
        "session established"
    );
    if auth.cleartext_password
        && client.is_tls()
        && !backend_leg.is_tls()
        && backend.first_cleartext_warning()
    {
        warn!(
            backend = %backend.name,
            "a clear-text password (PAM dialog or mysql_clear_password) crossed the plaintext \
             backend leg of a TLS client session: set this backend's tls mode to required or \
             stricter (logged once per backend)"
        );
    }
    if let Some(not_after) = backend_leg
        .peer_certificate()
        .as_ref()
        .and_then(tls::not_after)
    {
        state
            .metrics
            .set_certificate_expiry("backend", &backend.name, not_after);
    }
    state.metrics.session_legs(
        [client.is_tls(), backend_leg.is_tls()],
        [auth.client_compressed, auth.backend_compressed],
    );
}

/// Compression starts after the OK, on each leg that negotiated it: what was read past the OK
/// is already compressed frames and goes to that leg's decoder. Returns the plain bytes the
/// relay starts with on each leg.
pub(super) fn start_compression<C, B>(
    client: &mut LegStream<C>,
    backend: &mut LegStream<B>,
    auth: &mut Authenticated,
) -> (BytesMut, BytesMut) {
    let mut client_pending = std::mem::take(&mut auth.client_pending);
    let mut backend_pending = std::mem::take(&mut auth.backend_pending);
    if auth.client_compressed {
        client.compress(Role::Server, std::mem::take(&mut client_pending));
    }
    if auth.backend_compressed {
        backend.compress(Role::Client, std::mem::take(&mut backend_pending));
    }
    (client_pending, backend_pending)
}

/// Ends a TLS leg with a close_notify, as a server or client library does, so the peer reads a
/// clean end rather than a truncation; bounded, since the peer may be gone.
pub(super) async fn close_tls<S: AsyncRead + AsyncWrite + Unpin>(leg: &mut LegStream<S>) {
    if leg.is_tls() {
        let _ = tokio::time::timeout(CLOSE_NOTIFY_BUDGET, leg.shutdown()).await;
    }
}
