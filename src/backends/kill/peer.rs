//! Asking another instance where one of its sessions is, so a KILL of its id can be mapped here.
//!
//! Instances behind one address share nothing but their configuration: each has its own
//! registry. A KILL naming another instance's id (its instance bits say whose) is resolved by
//! that instance's admin endpoint, `GET /connections/{id}`, which answers with the backend,
//! thread id and user; the KILL is then mapped here as an own id would be: on the killing
//! session's backend it runs there with the client's own privileges, on another backend of
//! ours it runs over the `kill:` account for a killer of the same user (see `super::exec`).
//!
//! The requests go over the proxy's one HTTP/1.1 client (`crate::net::http_client`): one at a
//! time per TCP connection, kept alive and reused (a few idle ones per peer), a bounded response
//! under one deadline. Bounded like the KILLs elsewhere: one lookup in flight per session (the
//! caller's turn), at most [`MAX_LOOKUPS`] proxy-wide. What an answer means is [`answer`],
//! plain and unit-tested.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use tokio::sync::Semaphore;

use tracing::{info, warn};

use super::{Decision, KillRequest, RemoteAnswer, RemoteTarget};
use crate::backends::balancer::Backend;
use crate::backends::kill::peer_api::{ConnectionInfo, CONNECTIONS_PATH};
use crate::config::{AdminToken, Peer, PeerUrl};
use crate::net::http_client::{self, Connection, Request, Response};

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
    idle: Mutex<HashMap<String, Vec<(Connection, Instant)>>>,
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
        let path = format!("{CONNECTIONS_PATH}{id}");
        let token = self.token.as_ref().map(AdminToken::as_bytes);
        let request = Request::get(&path, MAX_RESPONSE).bearer(token);
        if let Some(mut connection) = self.take_idle(&key) {
            // A kept connection the peer closed fails at once: then a fresh one is made.
            match connection.send(&request).await {
                Ok(response) => {
                    self.put_idle(key, connection).await;
                    return answer(&response, id).map_err(|e| format!("{url}: {e}"));
                }
                Err(_) => connection.close().await,
            }
        }
        // A name is looked up at each connect (a pod behind a headless Service comes back on a
        // new IP); kept connections stay with the address they were made to until they fail.
        let mut connection = Connection::open(&key).await.map_err(|e| failure(url, e))?;
        let response = match connection.send(&request).await {
            Ok(response) => response,
            Err(e) => {
                connection.close().await;
                return Err(failure(url, e));
            }
        };
        self.put_idle(key, connection).await;
        answer(&response, id).map_err(|e| format!("{url}: {e}"))
    }

    fn take_idle(&self, key: &str) -> Option<Connection> {
        let mut idle = self.idle.lock().ok()?;
        let list = idle.get_mut(key)?;
        list.retain(|(connection, since)| since.elapsed() < MAX_IDLE && connection.is_open());
        list.pop().map(|(connection, _)| connection)
    }

    /// Keeps `connection` for the next lookup if it may carry one and there is room; else
    /// closes it before the caller's slot is given back (see [`MAX_LOOKUPS`]).
    async fn put_idle(&self, key: String, connection: Connection) {
        let unkept = if !connection.is_open() {
            Some(connection)
        } else {
            match self.idle.lock() {
                Ok(mut idle) => {
                    let list = idle.entry(key).or_default();
                    if list.len() < IDLE_PER_PEER {
                        list.push((connection, Instant::now()));
                        None
                    } else {
                        Some(connection)
                    }
                }
                Err(_) => Some(connection),
            }
        };
        if let Some(connection) = unkept {
            connection.close().await;
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

/// Why asking `url` failed, for the client's ERR.
fn failure(url: &PeerUrl, e: http_client::Error) -> String {
    match e {
        http_client::Error::Connect { source, .. } => format!("cannot connect to {url}: {source}"),
        http_client::Error::Closed(_) => format!("{url} closed the connection mid-answer"),
        http_client::Error::TooLarge { .. } => {
            format!("{url} answered more than {MAX_RESPONSE} bytes")
        }
        other => format!("{url}: {other}"),
    }
}

/// What a peer's answer says of the session `id`: 200 with [`ConnectionInfo`] for `id`, 404 for
/// no such session; anything else is an error.
pub fn answer(response: &Response, id: u32) -> Result<Option<RemoteTarget>, String> {
    match response.status {
        200 => {}
        404 => return Ok(None),
        401 => {
            return Err("its admin endpoint refused our token (401): check admin_token_file".into())
        }
        other => return Err(format!("HTTP {other}")),
    }
    let info: ConnectionInfo =
        serde_json::from_slice(&response.body).map_err(|e| format!("bad answer: {e}"))?;
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn ok(body: &str) -> Response {
        Response {
            status: 200,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn reads_where_the_session_is() {
        let body = r#"{"id":1612709889,"instance_id":1,"backend":"b1","address":"127.0.0.1:3306","thread_id":42}"#;
        let target = answer(&ok(body), 1612709889).unwrap();
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
        let target = answer(&ok(&with_user), 1612709889).unwrap();
        assert_eq!(target.and_then(|t| t.user).as_deref(), Some("app"));
        assert!(answer(&ok(body), 7).unwrap_err().contains("instead"));
    }

    #[test]
    fn no_session_is_none_and_everything_else_an_error() {
        let status = |status| Response {
            status,
            body: br#"{"error":"x"}"#.to_vec(),
        };
        assert_eq!(answer(&status(404), 1), Ok(None));
        let refused = answer(&status(401), 1).unwrap_err();
        assert!(refused.contains("token"), "{refused}");
        assert_eq!(answer(&status(500), 1).unwrap_err(), "HTTP 500");
        assert!(answer(&ok("{\"id\":1"), 1).is_err());
        assert!(answer(
            &ok(r#"{"id":1,"instance_id":300,"backend":"b","address":"a","thread_id":1}"#),
            1
        )
        .is_err());
    }

    /// A peer on a local port answering 404 to every request on kept-alive connections: the
    /// heads it read, and the connections it accepted.
    async fn stand_in() -> (Peer, Arc<Mutex<Vec<String>>>, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (seen, count) = (Arc::clone(&heads), Arc::clone(&accepted));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = buf.drain(..end + 4).collect();
                            seen.lock()
                                .unwrap()
                                .push(String::from_utf8_lossy(&head).into_owned());
                            let answer = b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        let peer = Peer {
            instance_id: 3,
            admin_url: PeerUrl::parse(&url).unwrap(),
        };
        (peer, heads, accepted)
    }

    #[tokio::test]
    async fn the_request_names_the_id_and_keeps_the_connection() {
        let (peer, heads, accepted) = stand_in().await;
        let plain = Peers::default();
        assert_eq!(plain.exchange(&peer, 5).await, Ok(None));
        assert_eq!(plain.exchange(&peer, 6).await, Ok(None));
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one kept-alive connection"
        );
        let with_token = Peers {
            token: Some(AdminToken::new("t0ken")),
            ..Peers::default()
        };
        assert_eq!(with_token.exchange(&peer, 7).await, Ok(None));
        let heads = heads.lock().unwrap().clone();
        let [first, second, third] = &heads[..] else {
            panic!("{heads:?}");
        };
        assert!(
            first.starts_with("GET /connections/5 HTTP/1.1\r\n"),
            "{first}"
        );
        assert!(
            second.starts_with("GET /connections/6 HTTP/1.1\r\n"),
            "{second}"
        );
        let host = format!("host: {}\r\n", peer.admin_url.authority());
        assert!(first.to_ascii_lowercase().contains(&host), "{first}");
        for head in [first, second] {
            let head = head.to_ascii_lowercase();
            assert!(!head.contains("connection: close"), "{head}");
            assert!(!head.contains("authorization"), "{head}");
        }
        assert!(
            third
                .to_ascii_lowercase()
                .contains("authorization: bearer t0ken\r\n"),
            "{third}"
        );
    }

    #[tokio::test]
    async fn a_peer_that_is_not_there_is_named() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", free.local_addr().unwrap());
        drop(free);
        let peer = Peer {
            instance_id: 3,
            admin_url: PeerUrl::parse(&url).unwrap(),
        };
        let why = Peers::default().exchange(&peer, 5).await.unwrap_err();
        assert!(
            why.starts_with(&format!("cannot connect to {url}: ")),
            "{why}"
        );
    }
}
