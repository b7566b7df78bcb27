//! The one HTTP/1.1 client in mysql-lb: the few requests it makes to an admin endpoint, its own
//! or another instance's.
//!
//! Two callers ask: a KILL of another instance's id asks that instance where its session is
//! (`crate::backends::kill::peer`, connections kept alive and reused), and `mysql-lb top` reads
//! `/backends` and `/queries` (`crate::tools::top`, one request per connection). Both are small
//! JSON exchanges with a program that may be gone, hung, or something else than configured, so
//! every answer is bounded in size and every failure is an [`Error`] that says which side and
//! which step, never a panic. hyper, which already serves the admin endpoint, reads the
//! responses (Content-Length, chunked and close-delimited bodies, keep-alive), so no HTTP parser
//! is written here; this module adds the bounds: a body larger than the caller allows is refused
//! as it arrives (a length the server announces sizes no buffer), and [`fetch`] puts one deadline
//! on a whole exchange. A [`Connection`] has no deadline of its own: its caller's covers more
//! than the request (the KILL lookups wait for a slot under theirs).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST};
use hyper::Method;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Why a request got no usable answer. [`Error::Request`] is this side's (the request could not
/// be written); every other variant is the server's, or the network's on the way to it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is not valid HTTP (a token or path with bytes a header or URI cannot carry).
    #[error("the request cannot be sent: {0}")]
    Request(#[source] hyper::http::Error),
    /// The TCP connect to `addr` (or looking its name up) failed.
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    /// What the server sent is not an HTTP/1 response.
    #[error("malformed response: {0}")]
    Malformed(#[source] hyper::Error),
    /// The connection ended before the whole response had arrived.
    #[error("the connection closed before the whole response: {0}")]
    Closed(#[source] hyper::Error),
    /// Writing the request or reading the response failed otherwise (a reset, say).
    #[error("{0}")]
    Io(#[source] hyper::Error),
    /// The body is (or says it is) larger than the caller allows.
    #[error("response over {limit} bytes")]
    TooLarge { limit: usize },
    /// The whole exchange did not finish within [`fetch`]'s deadline.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

impl Error {
    /// Sorts hyper's error by what went wrong on the server's side.
    fn of(e: hyper::Error) -> Error {
        if e.is_parse() || e.is_parse_status() {
            Error::Malformed(e)
        } else if e.is_incomplete_message() || e.is_closed() || e.is_canceled() || ended_early(&e) {
            Error::Closed(e)
        } else {
            Error::Io(e)
        }
    }
}

/// Whether a body ended before its length: hyper says so with an I/O error of its own.
fn ended_early(e: &hyper::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|cause| cause.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
}

/// One request: its method, path (with the query), bearer token, body, and the largest body its
/// answer may have. Every request says `Accept: application/json`: the endpoints asked answer
/// JSON.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    method: Method,
    path: &'a str,
    bearer: Option<&'a [u8]>,
    /// The body's content type and bytes (a POST's).
    body: Option<(&'a str, Bytes)>,
    max_body: usize,
}

impl<'a> Request<'a> {
    /// A GET of `path` whose answer's body is at most `max_body` bytes.
    pub fn get(path: &'a str, max_body: usize) -> Request<'a> {
        Request {
            method: Method::GET,
            path,
            bearer: None,
            body: None,
            max_body,
        }
    }

    /// A POST of `body` (of `content_type`) to `path` whose answer's body is at most `max_body`
    /// bytes.
    pub fn post(
        path: &'a str,
        content_type: &'a str,
        body: impl Into<Bytes>,
        max_body: usize,
    ) -> Request<'a> {
        Request {
            method: Method::POST,
            body: Some((content_type, body.into())),
            ..Request::get(path, max_body)
        }
    }

    /// Sends `token`, if any, as `Authorization: Bearer <token>`.
    pub fn bearer(self, token: Option<&'a [u8]>) -> Request<'a> {
        Request {
            bearer: token,
            ..self
        }
    }

    /// The request as hyper sends it, to `host`; `close` asks the server to close after it.
    fn build(&self, host: &HeaderValue, close: bool) -> Result<hyper::Request<Full<Bytes>>, Error> {
        let mut request = hyper::Request::builder()
            .method(self.method.clone())
            .uri(self.path)
            .header(HOST, host)
            .header(ACCEPT, "application/json");
        if close {
            request = request.header(CONNECTION, "close");
        }
        if let Some(token) = self.bearer {
            let mut value = b"Bearer ".to_vec();
            value.extend_from_slice(token);
            let mut value = HeaderValue::from_bytes(&value)
                .map_err(|e| Error::Request(hyper::http::Error::from(e)))?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        let body = match &self.body {
            Some((content_type, bytes)) => {
                request = request.header(CONTENT_TYPE, *content_type);
                Full::new(bytes.clone())
            }
            None => Full::default(),
        };
        request.body(body).map_err(Error::Request)
    }
}

/// An answer: the status code and the whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// One HTTP/1.1 connection to `host:port`, one request at a time. hyper's side of it runs on a
/// task of its own, which closes the socket once this is dropped; [`Connection::close`] waits
/// for that.
#[derive(Debug)]
pub struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    host: HeaderValue,
    driver: JoinHandle<()>,
}

impl Connection {
    /// Connects `authority` (`host:port`, `[v6]:port`; a name is looked up now), which is also
    /// the `Host` of its requests.
    pub async fn open(authority: &str) -> Result<Connection, Error> {
        let host = HeaderValue::from_str(authority)
            .map_err(|e| Error::Request(hyper::http::Error::from(e)))?;
        let stream = TcpStream::connect(authority)
            .await
            .map_err(|source| Error::Connect {
                addr: authority.to_owned(),
                source,
            })?;
        // Requests are one small write each: no reason to wait for more.
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(Error::of)?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP client connection ended");
            }
        });
        Ok(Connection {
            sender,
            host,
            driver,
        })
    }

    /// Sends `request` and reads its whole answer, the body bounded as the request says.
    pub async fn send(&mut self, request: &Request<'_>) -> Result<Response, Error> {
        self.exchange(request, false).await
    }

    /// Whether another request may go on this connection: the server neither closed it nor said
    /// it would (hyper closes after a `Connection: close` answer).
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    /// Closes the connection and returns once its socket is closed, so that a caller allowed a
    /// bounded number of connections, which opens the next one at once, never holds both.
    pub async fn close(self) {
        drop(self.sender);
        if let Err(e) = self.driver.await {
            tracing::debug!(error = %e, "HTTP client connection task");
        }
    }

    async fn exchange(&mut self, request: &Request<'_>, close: bool) -> Result<Response, Error> {
        let built = request.build(&self.host, close)?;
        self.sender.ready().await.map_err(Error::of)?;
        let response = self.sender.send_request(built).await.map_err(Error::of)?;
        let status = response.status().as_u16();
        let body = read_body(response.into_body(), request.max_body).await?;
        Ok(Response { status, body })
    }
}

/// `request` on a connection of its own to `authority` (closed after it), all of it, from the
/// connect to the body's last byte, within `timeout`.
pub async fn fetch(
    authority: &str,
    request: &Request<'_>,
    timeout: Duration,
) -> Result<Response, Error> {
    let exchange = async {
        let mut connection = Connection::open(authority).await?;
        let response = connection.exchange(request, true).await;
        connection.close().await;
        response
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(Error::TimedOut(timeout)))
}

/// The body's bytes, refused once they pass `limit`. A Content-Length over it is refused before
/// anything is read; the buffer grows only with bytes that arrived.
async fn read_body(mut body: Incoming, limit: usize) -> Result<Vec<u8>, Error> {
    let too_large = Error::TooLarge { limit };
    if body.size_hint().lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(too_large);
    }
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Error::of)?;
        if let Ok(data) = frame.into_data() {
            if data.len() > limit - out.len() {
                return Err(too_large);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
