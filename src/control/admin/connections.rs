//! `GET /connections/{id}`: where one of this instance's sessions is, for the other instances.
//!
//! Another instance that receives a KILL of one of our ids asks here (the request and its answer
//! are `crate::backends::kill::peer_api`) and maps the KILL itself. The answer names backends, thread ids and users, so with an admin
//! token or a `peer_token_file` configured it needs one of them (the peer token opens this
//! endpoint only, so instances need not hold each other's admin token).

use hyper::header::HeaderValue;
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::backends::kill::peer_api::{ConnectionInfo, CONNECTIONS_PATH};
use crate::proxy::state::ProxyState;

/// The answer to a request for `path`, or None when the path is not under `/connections/`.
pub(super) fn answer(
    state: &ProxyState,
    token: Option<&[u8]>,
    method: &Method,
    path: &str,
    authorization: Option<&HeaderValue>,
) -> Option<(StatusCode, serde_json::Value)> {
    let id = path.strip_prefix(CONNECTIONS_PATH)?;
    if method != Method::GET {
        let error = format!("{path} takes GET only");
        return Some((StatusCode::METHOD_NOT_ALLOWED, json!({ "error": error })));
    }
    let peer_token = state.peers.accepted.as_ref().map(|t| t.as_bytes());
    let given = authorization.map(HeaderValue::as_bytes);
    let tokens: Vec<&[u8]> = token.into_iter().chain(peer_token).collect();
    if !tokens.is_empty() && !tokens.iter().any(|t| super::ops::authorized(given, t)) {
        let error = "missing or wrong bearer token";
        return Some((StatusCode::UNAUTHORIZED, json!({ "error": error })));
    }
    let Ok(id) = id.parse::<u32>() else {
        let error = format!("{id:?} is not a connection id");
        return Some((StatusCode::BAD_REQUEST, json!({ "error": error })));
    };
    Some(match state.kills.lookup(id) {
        Some(target) => {
            let info = ConnectionInfo {
                id,
                instance_id: state.kills.instance(),
                backend: target.backend.name.clone(),
                address: target.backend.address.to_string(),
                thread_id: target.thread_id,
                user: target.user.as_deref().map(str::to_owned),
            };
            (StatusCode::OK, json!(info))
        }
        None => {
            let error = format!("no connection {id} on this instance");
            (StatusCode::NOT_FOUND, json!({ "error": error }))
        }
    })
}
