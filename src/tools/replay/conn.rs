//! The replay's client side of one target connection: logs in the way the proxy's own
//! connections do (`crate::backends::client`), then sends captured command payloads one at a time and
//! reads each response to its end with the relay's [`Tracker`], which already knows where every
//! kind of response ends (result sets, binary rows, prepare replies, multiple results).

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backends::client::{self, OwnConnectOptions, Stage};
use crate::config::BackendAddr;
use crate::net::leg::LegStream;
use crate::net::stream::BackendStream;
use crate::wire::protocol::caps::{
    Negotiated, CLIENT_MYSQL, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION,
    CLIENT_TRANSACTIONS,
};
use crate::wire::protocol::codec::header;
use crate::wire::protocol::errors::ServerErr;
use crate::wire::protocol::handshake::parse_greeting;
use crate::wire::protocol::response::Tracker;

/// A response slower than this ends the replay of its session (the target is gone or stuck).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest packet sent in one piece (a payload at the protocol's 16 MiB would need splitting;
/// captured payloads stop at 1 MiB).
const MAX_ONE_PACKET: usize = (1 << 24) - 1;

#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("cannot log in to the target: {0}")]
    Login(client::Error),
    #[error("the target connection failed: {0}")]
    Io(std::io::Error),
    #[error("the target closed the connection")]
    Closed,
    #[error("no response from the target in {0:?}")]
    Timeout(Duration),
    #[error("the target's response did not parse: {0}")]
    Protocol(String),
    #[error("payload over 16 MiB")]
    TooLarge,
}

/// How one command went.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub latency: Duration,
    pub rows: u64,
    /// The server's error code and message, if it answered with ERR.
    pub error: Option<(u16, String)>,
    pub prepared: Option<u32>,
}

pub struct Conn {
    stream: LegStream<BackendStream>,
    buf: BytesMut,
    tracker: Tracker,
}

impl Conn {
    /// Connects `target` and logs in as `account` (user, password).
    pub async fn open(target: &BackendAddr, account: (&str, &str)) -> Result<Self, ConnError> {
        let mut stage = Stage::Connect;
        let leg = OwnConnectOptions::default();
        let (conn, greeting) = client::open(target, &leg, account, CONNECT_TIMEOUT, &mut stage)
            .await
            .map_err(ConnError::Login)?;
        let server = greeting
            .get(4..)
            .and_then(|g| parse_greeting(g).ok())
            .map_or(0, |g| g.capabilities);
        // What the login (`crate::wire::protocol::login::native_login`) asked for, as the server agreed.
        let asked = CLIENT_MYSQL
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_TRANSACTIONS
            | CLIENT_PLUGIN_AUTH;
        let negotiated = Negotiated {
            capabilities: asked & server,
            mariadb_capabilities: 0,
        };
        let (stream, buf) = conn.into_parts();
        Ok(Self {
            stream,
            buf,
            tracker: Tracker::new(negotiated, u64::MAX),
        })
    }

    /// Sends one command (`payload`, command byte first) and reads its response, if it has one.
    pub async fn command(&mut self, payload: &[u8], answered: bool) -> Result<Outcome, ConnError> {
        if payload.len() > MAX_ONE_PACKET {
            return Err(ConnError::TooLarge);
        }
        let mut packet = Vec::with_capacity(4 + payload.len());
        packet.extend_from_slice(&header(payload.len(), 0));
        packet.extend_from_slice(payload);
        self.tracker
            .on_client_mut(&mut packet)
            .map_err(|e| ConnError::Protocol(e.to_string()))?;
        self.stream
            .write_all(&packet)
            .await
            .map_err(ConnError::Io)?;
        let sent = Instant::now();
        self.tracker.on_written(sent);
        if !answered {
            return Ok(Outcome::default());
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, self.response(sent)).await {
            Ok(r) => r,
            Err(_) => Err(ConnError::Timeout(RESPONSE_TIMEOUT)),
        }
    }

    async fn response(&mut self, sent: Instant) -> Result<Outcome, ConnError> {
        let mut watch = ErrWatch::default();
        loop {
            if !self.buf.is_empty() {
                let mut done = None;
                watch.feed(&self.buf);
                self.tracker
                    .on_server_mut(&mut self.buf, Instant::now(), |c| done = Some(c))
                    .map_err(|e| ConnError::Protocol(e.to_string()))?;
                self.buf.clear();
                if let Some(c) = done {
                    return Ok(Outcome {
                        latency: c
                            .at
                            .map_or(c.latency, |at| at.saturating_duration_since(sent)),
                        rows: c.rows,
                        error: c.error.then(|| watch.last_error()),
                        prepared: c.prepared,
                    });
                }
            }
            self.buf.reserve(16 * 1024);
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(ConnError::Io)?;
            if n == 0 {
                return Err(ConnError::Closed);
            }
        }
    }

    /// COM_QUIT, so the target does not log an aborted connection.
    pub async fn quit(mut self) {
        let _ = self.stream.write_all(&[1, 0, 0, 0, 1]).await;
        let _ = self.stream.shutdown().await;
    }
}

/// Follows packet boundaries in a response's bytes and keeps the last ERR packet's payload.
#[derive(Debug, Default)]
struct ErrWatch {
    head: Vec<u8>,
    /// Payload bytes of the current packet still to come.
    remaining: usize,
    /// The current packet's payload began with 0xFF: kept here.
    err: Option<Vec<u8>>,
    at_payload_start: bool,
    last: Option<Vec<u8>>,
}

impl ErrWatch {
    fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.remaining == 0 {
                let need = 4 - self.head.len();
                let take = need.min(b.len());
                self.head.extend_from_slice(&b[..take]);
                b = &b[take..];
                if self.head.len() == 4 {
                    self.remaining = usize::from(self.head[0])
                        | usize::from(self.head[1]) << 8
                        | usize::from(self.head[2]) << 16;
                    self.head.clear();
                    self.at_payload_start = true;
                }
                continue;
            }
            let take = self.remaining.min(b.len());
            if self.at_payload_start {
                self.at_payload_start = false;
                self.err = (b[0] == 0xFF).then(Vec::new);
            }
            if let Some(err) = self.err.as_mut() {
                let room = 1024usize.saturating_sub(err.len());
                err.extend_from_slice(&b[..take.min(room)]);
            }
            self.remaining -= take;
            b = &b[take..];
            if self.remaining == 0 {
                if let Some(err) = self.err.take() {
                    self.last = Some(err);
                }
            }
        }
    }

    fn last_error(&self) -> (u16, String) {
        match &self.last {
            Some(p) => {
                let ServerErr { code, message } = ServerErr::parse_lenient(p);
                (code, message)
            }
            None => (0, String::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_err_packet_is_found_across_reads() {
        let mut bytes = vec![1, 0, 0, 1, 1];
        let err = b"\xff\x7a\x04#42S02Table 't' doesn't exist";
        bytes.extend_from_slice(&header(err.len(), 2));
        bytes.extend_from_slice(err);
        for split in 0..bytes.len() {
            let mut w = ErrWatch::default();
            w.feed(&bytes[..split]);
            w.feed(&bytes[split..]);
            assert_eq!(
                w.last_error(),
                (1146, "Table 't' doesn't exist".to_owned()),
                "split {split}"
            );
        }
    }
}
