//! The few GETs `top` makes: one HTTP/1.1 request per connection (`Connection: close`) over a
//! std socket, every step under a timeout and the response read to a bound.
//!
//! An HTTP client crate would be the only user of its dependencies in the crate; the admin
//! endpoint answers JSON with a Content-Length, so a bounded read and a small parser
//! ([`parse_response`], tested on bytes) are all it takes.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The most a response may hold (a `/queries` answer at its default bound is well under this).
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// Why a GET got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot resolve {0}")]
    Resolve(String),
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("response over {MAX_RESPONSE} bytes")]
    TooLarge,
    #[error("malformed response: {0}")]
    Malformed(&'static str),
}

/// GETs `path` from `addr` (`host:port`) with an optional bearer token: (status, body).
pub fn get(
    addr: &str,
    path: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), HttpError> {
    let deadline = Instant::now() + timeout;
    let targets: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|_| HttpError::Resolve(addr.to_owned()))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for target in targets {
        match TcpStream::connect_timeout(&target, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(mut stream) = stream else {
        return Err(match last {
            Some(source) => HttpError::Connect {
                addr: addr.to_owned(),
                source,
            },
            None => HttpError::Resolve(addr.to_owned()),
        });
    };
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n"
    );
    if let Some(t) = token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::with_capacity(64 * 1024);
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HttpError::Timeout(timeout));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if response.len() + n > MAX_RESPONSE {
                    return Err(HttpError::TooLarge);
                }
                response.extend_from_slice(&chunk[..n]);
                // Done as soon as the body is whole, whether or not the server closes first.
                if let Ok(Some(done)) = complete(&response) {
                    return Ok(done);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HttpError::Timeout(timeout));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    parse_response(&response)
}

/// The response once its Content-Length is all there; None while more is due or the length
/// is not given (then the end of the connection ends it).
fn complete(bytes: &[u8]) -> Result<Option<(u16, Vec<u8>)>, HttpError> {
    let Some((status, headers, body)) = split_head(bytes)? else {
        return Ok(None);
    };
    match header(headers, "content-length").map(str::parse::<usize>) {
        Some(Ok(n)) if body.len() >= n => Ok(Some((status, body[..n].to_vec()))),
        _ => Ok(None),
    }
}

/// A whole response as read to the end of the connection: (status, body), the body de-chunked
/// when sent chunked and cut to its Content-Length when one is given.
pub fn parse_response(bytes: &[u8]) -> Result<(u16, Vec<u8>), HttpError> {
    let (status, headers, body) =
        split_head(bytes)?.ok_or(HttpError::Malformed("the head never ended"))?;
    if header(headers, "transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        return Ok((status, dechunk(body)?));
    }
    match header(headers, "content-length") {
        Some(n) => {
            let n: usize = n
                .parse()
                .map_err(|_| HttpError::Malformed("bad Content-Length"))?;
            let body = body
                .get(..n)
                .ok_or(HttpError::Malformed("body shorter than its Content-Length"))?;
            Ok((status, body.to_vec()))
        }
        None => Ok((status, body.to_vec())),
    }
}

/// A response's status, header block and the bytes after the head.
type Parts<'a> = (u16, &'a str, &'a [u8]);

/// The parts of a response once its head has ended.
fn split_head(bytes: &[u8]) -> Result<Option<Parts<'_>>, HttpError> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..end])
        .map_err(|_| HttpError::Malformed("head is not UTF-8"))?;
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed("not an HTTP/1 status line"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..600).contains(s))
        .ok_or(HttpError::Malformed("bad status code"))?;
    Ok(Some((status, headers, &bytes[end + 4..])))
}

/// The value of header `name` (case-insensitive), trimmed.
fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.split("\r\n").find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A chunked body joined; the trailer after the last chunk is ignored.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, HttpError> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or(HttpError::Malformed("chunk size line never ended"))?;
        let size_text = std::str::from_utf8(&body[..line_end])
            .map_err(|_| HttpError::Malformed("chunk size is not text"))?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Malformed("bad chunk size"))?;
        let rest = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest
            .get(..size)
            .ok_or(HttpError::Malformed("chunk shorter than its size"))?;
        if out.len() + size > MAX_RESPONSE {
            return Err(HttpError::TooLarge);
        }
        out.extend_from_slice(chunk);
        body = rest
            .get(size..)
            .and_then(|r| r.strip_prefix(b"\r\n"))
            .ok_or(HttpError::Malformed("chunk not followed by CRLF"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_bodies() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(parse_response(r).unwrap(), (200, b"{}".to_vec()));
        assert_eq!(complete(r).unwrap(), Some((200, b"{}".to_vec())));
        assert_eq!(complete(&r[..r.len() - 1]).unwrap(), None);
        let extra = b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\nabcdef";
        assert_eq!(parse_response(extra).unwrap(), (404, b"abc".to_vec()));
        let short = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nabc";
        assert!(parse_response(short).is_err());
    }

    #[test]
    fn chunked_and_unframed_bodies() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(r).unwrap(), (200, b"abcde".to_vec()));
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n";
        assert!(parse_response(bad).is_err());
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nabc";
        assert!(parse_response(cut).is_err());
        let eof = b"HTTP/1.0 200 OK\r\n\r\nuntil the end";
        assert_eq!(
            parse_response(eof).unwrap(),
            (200, b"until the end".to_vec())
        );
        assert_eq!(complete(eof).unwrap(), None);
    }

    #[test]
    fn malformed_heads() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 999 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
            b"",
        ] {
            assert!(
                parse_response(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn refused_connect_is_an_error_not_a_panic() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap().to_string();
        drop(free);
        let e = get(&addr, "/backends", None, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains(&addr), "{e}");
        assert!(
            get("127.0.0.1", "/", None, Duration::from_secs(1)).is_err(),
            "no port"
        );
    }

    #[test]
    fn a_silent_server_times_out() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let started = Instant::now();
        let e = get(&addr, "/", None, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, HttpError::Timeout(_)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
