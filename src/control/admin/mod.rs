//! The admin HTTP endpoint: `/` (the status page of [`page`]), `/metrics` (Prometheus text),
//! `/healthz`, `/readyz`, `/backends`, `/queries` and `/history` (JSON), and the runtime operations of
//! [`ops`] (drain, maintenance, ready, weight; refused when a browser says they came from
//! another origin).
//!
//! Served by hyper on its own listener (loopback by default), apart from the MySQL listeners, so
//! scraping never competes with client accepts and needs no credentials on a private address.
//! Off loopback the operations need a bearer token (config validation insists on one).

mod capture;
mod connections;
pub mod history;
pub mod ops;
pub mod page;
pub mod queries;
mod recent;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};

use crate::config::AdminToken;
use crate::proxy::state::ProxyState;
use crate::telemetry::metrics::{quantile, LATENCY_BUCKETS};
pub use recent::Recent;

/// Serves admin requests until `shutdown`; with `token`, operations need it as bearer token.
/// `recent` is the last minute's window it keeps (the SQL admin port reads the same one).
pub async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    token: Option<AdminToken>,
    recent: Arc<Recent>,
    shutdown: CancellationToken,
) {
    let token = token.map(Arc::new);
    let connections = TaskTracker::new();
    let mut tick = tokio::time::interval(recent::SNAPSHOT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sample = tokio::time::interval(history::EVERY);
    sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {
                recent.snapshot(&state);
                continue;
            }
            _ = sample.tick() => {
                recent.history.sample(&state);
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!("admin accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let state = Arc::clone(&state);
        let recent = Arc::clone(&recent);
        let token = token.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let state = Arc::clone(&state);
                let recent = Arc::clone(&recent);
                let token = token.clone();
                async move {
                    let caller = Caller {
                        peer,
                        token: token.as_deref(),
                    };
                    Ok::<_, Infallible>(route(&state, &recent, caller, req).await)
                }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    debug!(client = %peer, "admin connection: {e}");
                },
                _ = shutdown.cancelled() => conn.as_mut().graceful_shutdown(),
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// Who sent a request, and the token operations need (if one is configured).
#[derive(Clone, Copy)]
struct Caller<'a> {
    peer: SocketAddr,
    token: Option<&'a AdminToken>,
}

async fn route(
    state: &ProxyState,
    recent: &Recent,
    caller: Caller<'_>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    if caller.token.is_none() {
        if let Err(e) = ops::check_host(req.headers().get(HOST).map(HeaderValue::as_bytes)) {
            info!(caller = %caller.peer, %path, "admin request refused: {e}");
            return error_response(&e);
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let header = |name| req.headers().get(name).map(HeaderValue::as_bytes);
        if let Err(e) = ops::check_origin(header(ORIGIN), header(HOST)) {
            info!(caller = %caller.peer, %path, "admin request refused: {e}");
            return error_response(&e);
        }
    }
    if let Some(parsed) = ops::parse(req.method().as_str(), &path) {
        return match operate(state, caller, parsed, req).await {
            Ok(body) => json_response(StatusCode::OK, &body),
            Err(e) => error_response(&e),
        };
    }
    let token = caller.token.map(AdminToken::as_bytes);
    let authorization = req.headers().get(AUTHORIZATION);
    if let Some((status, body)) =
        connections::answer(state, token, req.method(), &path, authorization)
    {
        return json_response(status, &body);
    }
    if path == "/queries" || path == "/queries/reset" {
        return digests(state, caller, &req);
    }
    if path == "/capture" || path.starts_with("/capture/") {
        return capture_route(state, caller, req).await;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match req.uri().path() {
        "/" => page::response(state, recent, caller.token.is_some()),
        "/metrics" => {
            let mut body = state.metrics.render();
            let top = state.digests.prometheus_top();
            if top > 0 {
                body.extend_from_slice(
                    queries::prometheus(&state.digests.snapshot(), top).as_bytes(),
                );
            }
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" => {
            let now = Instant::now();
            let up = state
                .backends()
                .backends()
                .iter()
                .filter(|b| state.backends().is_up(b, now))
                .count();
            if up > 0 {
                text(StatusCode::OK, &format!("ok: {up} backend(s) up\n"))
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "no backend is up\n")
            }
        }
        // Readiness only: whether this instance wants new clients (see `crate::proxy::lifecycle`).
        "/readyz" => match state.readiness.not_ready() {
            None => text(StatusCode::OK, "ready\n"),
            Some(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("not ready: {why}\n"),
            ),
        },
        "/backends" => {
            let mut r = Response::new(Full::new(Bytes::from(
                backends_json(state, recent).to_string(),
            )));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        "/history" => json_response(StatusCode::OK, &history::json(&recent.history.series())),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /, /metrics, /healthz, /readyz, /backends, /queries or /history\n",
        ),
    }
}

/// `GET /queries` and `POST /queries/reset` (see [`queries`]).
fn digests(
    state: &ProxyState,
    caller: Caller<'_>,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let authorized = caller.token.is_none_or(|token| {
        let header = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
        ops::authorized(header, token.as_bytes())
    });
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/queries/reset") => {
            if !authorized {
                info!(caller = %caller.peer, "query digest reset refused: no valid token");
                return error_response(&ops::OpError::Unauthorized);
            }
            state.digests.reset();
            info!(caller = %caller.peer, "query digests reset");
            json_response(StatusCode::OK, &json!({ "reset": true }))
        }
        (&Method::GET | &Method::HEAD, "/queries") => {
            match queries::parse_params(req.uri().query()) {
                Ok(params) => {
                    let body = queries::render(&state.digests.snapshot(), &params, authorized);
                    json_response(StatusCode::OK, &body)
                }
                Err(e) => json_response(StatusCode::BAD_REQUEST, &json!({ "error": e })),
            }
        }
        (_, "/queries/reset") => text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n"),
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n"),
    }
}

/// The capture endpoints: every one needs the token when one is configured.
async fn capture_route(
    state: &ProxyState,
    caller: Caller<'_>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if let Some(token) = caller.token {
        let header = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if !ops::authorized(header, token.as_bytes()) {
            info!(caller = %caller.peer, "capture request refused: no valid token");
            return error_response(&ops::OpError::Unauthorized);
        }
    }
    let method = req.method().clone();
    match (method, req.uri().path()) {
        (Method::GET | Method::HEAD, "/capture") => {
            let status = state.capture.status();
            json_response(StatusCode::OK, &json!({ "capture": status }))
        }
        (Method::POST, "/capture/start") => {
            let body = match read_body(req).await {
                Ok(b) => b,
                Err(e) => return error_response(&e),
            };
            let request = match capture::parse_start(&body) {
                Ok(r) => r,
                Err(e) => return error_response(&ops::OpError::BadRequest(e)),
            };
            match state.capture.start(request) {
                Ok(status) => {
                    info!(caller = %caller.peer, "capture started");
                    json_response(StatusCode::OK, &json!({ "capture": status }))
                }
                Err(e @ crate::telemetry::capture::CaptureError::Running(_)) => {
                    json_response(StatusCode::CONFLICT, &json!({ "error": e.to_string() }))
                }
                Err(e) => error_response(&ops::OpError::BadRequest(e.to_string())),
            }
        }
        (Method::POST, "/capture/stop") => match state.capture.stop().await {
            Some(status) => {
                info!(caller = %caller.peer, "capture stopped");
                json_response(StatusCode::OK, &json!({ "capture": status }))
            }
            None => json_response(
                StatusCode::CONFLICT,
                &json!({ "error": "no capture is running" }),
            ),
        },
        (_, "/capture") => text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n"),
        (_, "/capture/start" | "/capture/stop") => {
            text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n")
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Checks the token, reads the body (PUT) and applies one operation; the new state as JSON.
async fn operate(
    state: &ProxyState,
    caller: Caller<'_>,
    parsed: Result<ops::OpRequest, ops::OpError>,
    req: Request<Incoming>,
) -> Result<serde_json::Value, ops::OpError> {
    let request = parsed?;
    if let Some(token) = caller.token {
        let header = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if !ops::authorized(header, token.as_bytes()) {
            info!(caller = %caller.peer, backend = %request.backend, "admin operation refused: no valid token");
            return Err(ops::OpError::Unauthorized);
        }
    }
    let body = read_body(req).await?;
    let change = match request.op {
        ops::Op::SetState(admin_state) => ops::Change::State(admin_state),
        ops::Op::SetWeight => ops::Change::Weight(ops::parse_weight(&body)?),
    };
    ops::apply(state, caller.peer, &request.backend, change)
}

/// The request body, refused with 413 past [`ops::MAX_BODY`] (by its Content-Length, or while
/// reading one sent without).
async fn read_body(req: Request<Incoming>) -> Result<Bytes, ops::OpError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > ops::MAX_BODY as u64) {
        return Err(ops::OpError::TooLarge);
    }
    match Limited::new(req.into_body(), ops::MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ops::OpError::TooLarge)
        }
        Err(e) => Err(ops::OpError::BadRequest(format!(
            "cannot read the body: {e}"
        ))),
    }
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(e: &ops::OpError) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut r = json_response(status, &json!({ "error": e.to_string() }));
    if matches!(e, ops::OpError::Unauthorized) {
        r.headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
    }
    r
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Each backend's state, connections, last check and latency quantiles over roughly the last
/// minute (estimated from the histogram buckets, as Prometheus' `histogram_quantile` does).
pub fn backends_json(state: &ProxyState, recent: &Recent) -> serde_json::Value {
    let now = Instant::now();
    let list: Vec<_> = state
        .backends()
        .backends()
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let buckets = recent.window(i, &b.stats.latency_buckets());
            let check = b.last_check().map(|c| {
                json!({
                    "ok": c.error.is_none(),
                    "error": c.error,
                    "at_unix_ms": c.at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
                })
            });
            let (standing, remaining) = state.backends().ejection_of(b, now);
            let ejection = json!({
                "standing": standing.as_str(),
                "remaining_seconds": remaining.map(|d| d.as_secs_f64()),
                "ejections": b.stats.ejections.get(),
                "in_a_row": b.ejection.streak(),
            });
            json!({
                "name": b.name,
                "pool": b.pool,
                "address": b.address.to_string(),
                "state": if state.backends().is_up(b, now) { "up" } else { "down" },
                "weight": b.weight(),
                "admin_state": b.admin_state().as_str(),
                "type": match b.kind { crate::config::BackendKind::Rw => "rw", crate::config::BackendKind::Ro => "ro" },
                "role": b.role.describe(),
                "read_only": match b.role.seen() {
                    crate::backends::balancer::roles::Seen::Unknown => None,
                    seen => Some(seen == crate::backends::balancer::roles::Seen::ReadOnly),
                },
                "takes_writes": state.backends().pool(&b.pool).is_some_and(|p| p.takes_writes(b)),
                "gtid_applied": b.role.configured().map(|_| b.role.applied().to_string()),
                "active_connections": b.active(),
                "total_connections": b.stats.connections_total.get(),
                "connect_errors": b.stats.connect_errors.get(),
                "commands": b.stats.total_commands(),
                "recent_commands": buckets[LATENCY_BUCKETS.len()],
                "recent_p50_seconds": quantile(&buckets, 0.50),
                "recent_p99_seconds": quantile(&buckets, 0.99),
                "recent_latency_seconds": b.latency.average().as_secs_f64(),
                "last_check": check,
                "ejection": ejection,
                "server_pool": state.server_pools.get(&b.name).map(|p| {
                    let c = p.counts();
                    let (pinned, moved_in, retried) = p.sessions_counts();
                    let pooling = p.pooling();
                    json!({
                        "across_backends": pooling.across_backends,
                        "open": c.open,
                        "idle": c.idle,
                        "waiting": c.waiting,
                        "max": pooling.max_server_connections,
                        "acquired": p.acquired(),
                        "pinned_sessions": pinned,
                        "moved_in": moved_in,
                        "retried": retried,
                        "keys_only_here": p.keys_only_here(),
                    })
                }),
            })
        })
        .collect();
    json!({ "instance_id": state.kills.instance(), "backends": list })
}
