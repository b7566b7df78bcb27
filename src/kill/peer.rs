//! Asking another instance where one of its sessions is, so a KILL of its id can be mapped here.
//!
//! Instances behind one address share nothing but their configuration: each has its own
//! registry. A KILL naming another instance's id (its instance bits say whose) is resolved by
//! that instance's admin endpoint, `GET /connections/{id}`, which answers with the backend and
//! thread id; the KILL is then mapped here as an own id would be, and runs on the killing
//! session's backend connection with the client's own privileges. Executing it over there
//! instead would need credentials the proxy does not have (it never learns passwords) or would
//! let any client kill anyone's query.
//!
//! The client is a minimal HTTP/1.1 exchange over a TCP stream: one request, `Connection:
//! close`, a bounded response under one deadline. Parsing is sans-IO ([`parse_response`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tracing::{info, warn};

use super::{rewrite_remote, KillRequest, RemoteAnswer, RemoteTarget};
use crate::balancer::Backend;
use crate::config::{AdminToken, Peer};

/// One ask, connect to last byte: the killing client waits for it, its own backend connection
/// idle meanwhile.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// An answer is a line of JSON; anything longer is not one.
const MAX_RESPONSE: usize = 16 * 1024;

/// The other instances and the token their admin endpoints want.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    pub peers: Vec<Peer>,
    pub token: Option<AdminToken>,
}

impl Peers {
    /// The peer owning ids of `instance`.
    pub fn of(&self, instance: u8) -> Option<&Peer> {
        self.peers.iter().find(|p| p.instance_id == instance)
    }
}

/// The body of `GET /connections/{id}`, both ways.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConnectionInfo {
    pub id: u32,
    pub instance_id: u8,
    pub backend: String,
    pub address: String,
    pub thread_id: u32,
}

/// Asks `peer` about the id `request` names and maps its answer as an own id would be (see
/// [`rewrite_remote`]): the packet to send this session's backend instead of the KILL.
pub async fn resolve(
    request: KillRequest,
    peer: Peer,
    token: Option<AdminToken>,
    own_backend: Arc<Backend>,
) -> Vec<u8> {
    let id = u32::try_from(request.id).unwrap_or(0);
    let answer = ask(&peer, token.as_ref(), id).await;
    let (mapping, packet) = rewrite_remote(&request, &answer, &own_backend);
    let (backend, url) = (&own_backend.name, &peer.admin_url);
    match &answer {
        Err(why) => warn!(%backend, target = id, peer = %url, "{}: {why}", mapping.describe()),
        Ok(_) => {
            info!(%backend, target = id, peer = %url, "{} (asked its instance)", mapping.describe())
        }
    }
    packet
}

/// Asks `peer` where its session `id` is; every failure is the reason, for the client's ERR.
pub async fn ask(peer: &Peer, token: Option<&AdminToken>, id: u32) -> RemoteAnswer {
    let exchange = async {
        let mut stream = TcpStream::connect(peer.admin_url.host_port())
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", peer.admin_url))?;
        stream
            .write_all(&request(peer, token, id))
            .await
            .map_err(|e| format!("cannot send to {}: {e}", peer.admin_url))?;
        let mut response = Vec::with_capacity(1024);
        let mut limited = (&mut stream).take(MAX_RESPONSE as u64 + 1);
        limited
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("cannot read from {}: {e}", peer.admin_url))?;
        if response.len() > MAX_RESPONSE {
            return Err(format!(
                "{} answered more than {MAX_RESPONSE} bytes",
                peer.admin_url
            ));
        }
        parse_response(&response, id).map_err(|e| format!("{}: {e}", peer.admin_url))
    };
    match tokio::time::timeout(TIMEOUT, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "{} did not answer within {}",
            peer.admin_url,
            humantime::format_duration(TIMEOUT)
        )),
    }
}

fn request(peer: &Peer, token: Option<&AdminToken>, id: u32) -> Vec<u8> {
    let mut r = format!(
        "GET /connections/{id} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n",
        peer.admin_url.authority()
    )
    .into_bytes();
    if let Some(token) = token {
        r.extend_from_slice(b"Authorization: Bearer ");
        r.extend_from_slice(token.as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(b"\r\n");
    r
}

/// A whole HTTP/1.1 response (the connection closed after it) to the session it names: 200 with
/// [`ConnectionInfo`] for `id`, 404 for no such session; anything else is an error.
pub fn parse_response(response: &[u8], id: u32) -> Result<Option<RemoteTarget>, String> {
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("truncated HTTP response")?;
    let head = std::str::from_utf8(&response[..head_end]).map_err(|_| "HTTP head not UTF-8")?;
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP response: {status_line:?}"))?;
    let body = &response[head_end + 4..];
    match status {
        200 => {}
        404 => return Ok(None),
        401 => {
            return Err("its admin endpoint refused our token (401): check admin_token_file".into())
        }
        other => return Err(format!("HTTP {other}")),
    }
    if head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:"))
    {
        return Err("chunked answer not expected".into());
    }
    let info: ConnectionInfo =
        serde_json::from_slice(body).map_err(|e| format!("bad answer: {e}"))?;
    if info.id != id {
        return Err(format!("answered for connection {} instead", info.id));
    }
    Ok(Some(RemoteTarget {
        backend: info.backend,
        address: info.address,
        thread_id: info.thread_id,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PeerUrl;

    fn http(status: &str, body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[test]
    fn reads_where_the_session_is() {
        let body = r#"{"id":1612709889,"instance_id":1,"backend":"b1","address":"127.0.0.1:3306","thread_id":42}"#;
        let target = parse_response(&http("200 OK", body), 1612709889).unwrap();
        assert_eq!(
            target,
            Some(RemoteTarget {
                backend: "b1".into(),
                address: "127.0.0.1:3306".into(),
                thread_id: 42
            })
        );
        assert!(parse_response(&http("200 OK", body), 7)
            .unwrap_err()
            .contains("instead"));
    }

    #[test]
    fn no_session_is_none_and_everything_else_an_error() {
        assert_eq!(
            parse_response(&http("404 Not Found", r#"{"error":"x"}"#), 1),
            Ok(None)
        );
        let refused = parse_response(&http("401 Unauthorized", "{}"), 1).unwrap_err();
        assert!(refused.contains("token"), "{refused}");
        assert_eq!(
            parse_response(&http("500 Oops", ""), 1).unwrap_err(),
            "HTTP 500"
        );
        for bad in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n"[..],
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
        ] {
            assert!(parse_response(bad, 1).is_err(), "{bad:?}");
        }
        assert!(parse_response(&http("200 OK", "{\"id\":1"), 1).is_err());
        assert!(parse_response(
            &http(
                "200 OK",
                r#"{"id":1,"instance_id":300,"backend":"b","address":"a","thread_id":1}"#
            ),
            1
        )
        .is_err());
    }

    #[test]
    fn the_request_names_the_id_and_asks_to_close() {
        let peer = Peer {
            instance_id: 3,
            admin_url: PeerUrl::parse("http://127.0.0.1:4041").unwrap(),
        };
        let plain = String::from_utf8(request(&peer, None, 5)).unwrap();
        assert!(
            plain.starts_with("GET /connections/5 HTTP/1.1\r\n"),
            "{plain}"
        );
        assert!(plain.ends_with("Connection: close\r\n\r\n"), "{plain}");
        assert!(!plain.contains("Authorization"));
    }
}
