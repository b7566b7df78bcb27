//! Asking another instance where one of its sessions is, so a KILL of its id can be mapped here.
//!
//! Instances behind one address share nothing but their configuration: each has its own
//! registry. A KILL naming another instance's id (its instance bits say whose) is resolved by
//! that instance's admin endpoint, `GET /connections/{id}`, which answers with the backend,
//! thread id and user; the KILL is then mapped here as an own id would be: on the killing
//! session's backend it runs there with the client's own privileges, on another backend of
//! ours it runs over the `kill:` account for a killer of the same user (see `super::exec`).
//!
//! The client is a minimal HTTP/1.1 exchange: one request at a time per TCP connection, kept
//! alive and reused (a few idle ones per peer), a bounded response under one deadline. Bounded
//! like the KILLs elsewhere: one lookup in flight per session (the caller's turn), at most
//! [`MAX_LOOKUPS`] proxy-wide. Parsing is sans-IO ([`parse_response`], [`response_len`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use tracing::{info, warn};

use super::{Decision, KillRequest, RemoteAnswer, RemoteTarget};
use crate::backends::balancer::Backend;
use crate::backends::kill::peer_api::{ConnectionInfo, CONNECTIONS_PATH};
use crate::config::{AdminToken, Peer};

/// One ask, from getting a slot to the last byte: the killing client waits for it, its own
/// backend connection idle meanwhile.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// A kept-alive connection idle longer is not reused (its peer may have gone without a word).
const MAX_IDLE: Duration = Duration::from_secs(10);
/// Lookups in flight at once, proxy-wide.
pub const MAX_LOOKUPS: usize = 64;
/// Idle keep-alive connections kept per peer.
const IDLE_PER_PEER: usize = 4;
/// An answer is a line of JSON; anything longer is not one.
const MAX_RESPONSE: usize = 16 * 1024;

/// The other instances, the token sent to them, and what asking them shares.
#[derive(Debug, Default)]
pub struct Peers {
    pub peers: Vec<Peer>,
    /// Sent to peers: `peer_token_file`'s token, else the admin token.
    pub token: Option<AdminToken>,
    /// `peer_token_file`'s token, which this instance's `GET /connections/{id}` accepts too.
    pub accepted: Option<AdminToken>,
    /// Kept-alive connections by peer `host:port`.
    idle: Mutex<HashMap<String, Vec<(TcpStream, Instant)>>>,
    slots: Option<Semaphore>,
    /// `mysql_lb_peer_requests_total{peer,outcome}`.
    requests: Option<IntCounterVec>,
}

impl Peers {
    pub fn new(
        peers: Vec<Peer>,
        token: Option<AdminToken>,
        accepted: Option<AdminToken>,
        requests: IntCounterVec,
    ) -> Peers {
        Peers {
            peers,
            token,
            accepted,
            idle: Mutex::default(),
            slots: Some(Semaphore::new(MAX_LOOKUPS)),
            requests: Some(requests),
        }
    }

    /// The peer owning ids of `instance`.
    pub fn of(&self, instance: u8) -> Option<&Peer> {
        self.peers.iter().find(|p| p.instance_id == instance)
    }

    /// Asks `peer` where its session `request` names is; every failure is the reason, for the
    /// client's ERR. `turn` is the asking session's slot (one lookup of its at a time).
    pub async fn ask(
        &self,
        peer: &Peer,
        request: &KillRequest,
        turn: Arc<Semaphore>,
    ) -> RemoteAnswer {
        let id = u32::try_from(request.id).unwrap_or(0);
        let Ok(_turn) = turn.acquire_owned().await else {
            return Err("the session is ending".into());
        };
        let url = &peer.admin_url;
        let asked = tokio::time::timeout(TIMEOUT, async {
            let _slot = match &self.slots {
                Some(slots) => Some(slots.acquire().await.map_err(|_| Outcome::Busy)?),
                None => None,
            };
            self.exchange(peer, id).await.map_err(Outcome::Failed)
        })
        .await
        .unwrap_or(Err(Outcome::TimedOut));
        let (outcome, answer) = match asked {
            Ok(Some(t)) => ("found", Ok(Some(t))),
            Ok(None) => ("not_found", Ok(None)),
            Err(Outcome::Failed(why)) => ("error", Err(why)),
            Err(Outcome::Busy) => ("error", Err("the proxy is shutting down".into())),
            Err(Outcome::TimedOut) => (
                "timeout",
                Err(format!(
                    "{url} did not answer within {} (or {MAX_LOOKUPS} lookups were in flight)",
                    humantime::format_duration(TIMEOUT)
                )),
            ),
        };
        if let Some(requests) = &self.requests {
            requests
                .with_label_values(&[&url.to_string(), outcome])
                .inc();
        }
        answer
    }

    /// One request on a reused connection (retried once on a fresh one if the reused one turns
    /// out closed) or a fresh one.
    async fn exchange(&self, peer: &Peer, id: u32) -> Result<Option<RemoteTarget>, String> {
        let url = &peer.admin_url;
        let key = url.authority();
        let packet = request(peer, self.token.as_ref(), id);
        if let Some(mut stream) = self.take_idle(&key) {
            // A kept connection the peer closed fails at once: then a fresh one is made.
            if let Ok((response, reusable)) = send_and_read(&mut stream, &packet, url).await {
                self.put_idle(key, stream, reusable);
                return parse_response(&response, id).map_err(|e| format!("{url}: {e}"));
            }
        }
        // A name is looked up at each connect (a pod behind a headless Service comes back on a
        // new IP); kept connections stay with the address they were made to until they fail.
        let mut stream = TcpStream::connect(url.host_port())
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        let (response, reusable) = send_and_read(&mut stream, &packet, url).await?;
        self.put_idle(key, stream, reusable);
        parse_response(&response, id).map_err(|e| format!("{url}: {e}"))
    }

    fn take_idle(&self, key: &str) -> Option<TcpStream> {
        let mut idle = self.idle.lock().ok()?;
        let list = idle.get_mut(key)?;
        list.retain(|(_, since)| since.elapsed() < MAX_IDLE);
        list.pop().map(|(stream, _)| stream)
    }

    fn put_idle(&self, key: String, stream: TcpStream, reusable: bool) {
        if !reusable {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            let list = idle.entry(key).or_default();
            if list.len() < IDLE_PER_PEER {
                list.push((stream, Instant::now()));
            }
        }
    }
}

enum Outcome {
    Failed(String),
    Busy,
    TimedOut,
}

/// Logs how a peer's answer was mapped.
pub fn log_answer(
    decision: &Decision,
    answer: &RemoteAnswer,
    own_backend: &Backend,
    peer: &Peer,
    request: &KillRequest,
) {
    let (backend, url, target) = (&own_backend.name, &peer.admin_url, request.id);
    let mapping = decision.mapping.describe();
    match answer {
        Err(why) => warn!(%backend, target, peer = %url, "{mapping}: {why}"),
        Ok(_) => info!(%backend, target, peer = %url, "{mapping} (asked its instance)"),
    }
}

/// Writes `packet` and reads one whole response (head and `Content-Length` body); also whether
/// the connection may carry another request.
async fn send_and_read(
    stream: &mut TcpStream,
    packet: &[u8],
    url: &crate::config::PeerUrl,
) -> Result<(Vec<u8>, bool), String> {
    stream
        .write_all(packet)
        .await
        .map_err(|e| format!("cannot send to {url}: {e}"))?;
    let mut response = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((len, reusable)) = response_len(&response)? {
            if response.len() >= len {
                // Bytes past the answer were never asked for: do not reuse that connection.
                let clean = response.len() == len;
                response.truncate(len);
                return Ok((response, reusable && clean));
            }
        }
        if response.len() > MAX_RESPONSE {
            return Err(format!("{url} answered more than {MAX_RESPONSE} bytes"));
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("cannot read from {url}: {e}"))?;
        if n == 0 {
            return Err(format!("{url} closed the connection mid-answer"));
        }
        response.extend_from_slice(&chunk[..n]);
    }
}

/// Once the head is whole: the whole response's length (head and `Content-Length` body), and
/// whether the server keeps the connection open after it. None while the head is incomplete.
pub fn response_len(response: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(head_end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&response[..head_end]).map_err(|_| "HTTP head not UTF-8")?;
    let mut length = None;
    let mut reusable = true;
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            length = Some(value.parse::<usize>().map_err(|_| "bad Content-Length")?);
        } else if name == "connection" && value.eq_ignore_ascii_case("close") {
            reusable = false;
        } else if name == "transfer-encoding" {
            return Err("chunked answer not expected".into());
        }
    }
    let length = length.ok_or("answer without Content-Length")?;
    if length > MAX_RESPONSE {
        return Err(format!("answer of {length} bytes"));
    }
    Ok(Some((head_end + 4 + length, reusable)))
}

fn request(peer: &Peer, token: Option<&AdminToken>, id: u32) -> Vec<u8> {
    let mut r = format!(
        "GET {CONNECTIONS_PATH}{id} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n",
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

/// A whole HTTP/1.1 response to the session it names: 200 with
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
        user: info.user,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_ends_after_its_content_length() {
        let whole = http("200 OK", "{}");
        assert_eq!(response_len(&whole[..10]), Ok(None), "head incomplete");
        assert_eq!(response_len(&whole), Ok(Some((whole.len(), true))));
        let closing = b"HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(response_len(closing), Ok(Some((closing.len(), false))));
        assert!(
            response_len(b"HTTP/1.1 200 OK\r\n\r\n").is_err(),
            "no length"
        );
        assert!(response_len(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").is_err());
        assert!(response_len(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999\r\n\r\n").is_err());
    }
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
                thread_id: 42,
                user: None,
            }),
            "an older instance does not say the user"
        );
        let with_user = body.replace("}", r#","user":"app"}"#);
        let target = parse_response(&http("200 OK", &with_user), 1612709889).unwrap();
        assert_eq!(target.and_then(|t| t.user).as_deref(), Some("app"));
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
    fn the_request_names_the_id_and_keeps_the_connection() {
        let peer = Peer {
            instance_id: 3,
            admin_url: PeerUrl::parse("http://127.0.0.1:4041").unwrap(),
        };
        let plain = String::from_utf8(request(&peer, None, 5)).unwrap();
        assert!(
            plain.starts_with("GET /connections/5 HTTP/1.1\r\n"),
            "{plain}"
        );
        assert!(!plain.contains("Connection: close"), "{plain}");
        assert!(!plain.contains("Authorization"));
    }
}
