//! The client against local servers that write canned bytes: the framings hyper reads for it,
//! the bounds it adds, and every way a server can fail to answer.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

const LIMIT: usize = 64;

/// What a canned server saw: each request's head and body, and the connections it accepted.
#[derive(Default)]
struct Seen {
    requests: Vec<String>,
    accepted: usize,
}

/// A server on a local port answering every request with `answer`, closing the connection after
/// it when `close`. Returns its `host:port`.
async fn canned(answer: &'static [u8], close: bool) -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            log.lock().unwrap().accepted += 1;
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(request) = read_request(&mut stream, &mut buf).await {
                    log.lock().unwrap().requests.push(request);
                    if stream.write_all(answer).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// One request's head and Content-Length body as text; None at the end of the connection.
async fn read_request(stream: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                let request: Vec<u8> = buf.drain(..end + 4 + length).collect();
                return Some(String::from_utf8_lossy(&request).into_owned());
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn get(addr: &str, answer_limit: usize) -> Result<Response, Error> {
    fetch(
        addr,
        &Request::get("/backends", answer_limit),
        Duration::from_secs(5),
    )
    .await
}

#[tokio::test]
async fn a_content_length_body_is_read_and_the_request_says_who_asks() {
    let (addr, seen) = canned(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        false,
    )
    .await;
    let request = Request::get("/queries?sort=total", LIMIT).bearer(Some(b"s3cret"));
    let response = fetch(&addr, &request, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        response,
        Response {
            status: 200,
            body: b"{}".to_vec()
        }
    );
    let head = seen.lock().unwrap().requests[0].to_ascii_lowercase();
    assert!(
        head.starts_with("get /queries?sort=total http/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains(&format!("host: {addr}\r\n")), "{head}");
    assert!(head.contains("accept: application/json\r\n"), "{head}");
    assert!(head.contains("authorization: bearer s3cret\r\n"), "{head}");
    assert!(
        head.contains("connection: close\r\n"),
        "fetch closes: {head}"
    );
}

#[tokio::test]
async fn chunked_and_close_delimited_bodies_are_joined() {
    let (addr, _) = canned(
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        false,
    )
    .await;
    let response = get(&addr, LIMIT).await.unwrap();
    assert_eq!((response.status, &response.body[..]), (404, &b"abcde"[..]));
    let (addr, _) = canned(b"HTTP/1.0 200 OK\r\n\r\nuntil the end", true).await;
    let response = get(&addr, LIMIT).await.unwrap();
    assert_eq!(response.body, b"until the end");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_however_it_comes() {
    // Announced: refused before a byte of it is read, and no buffer sized from it.
    let (addr, _) = canned(
        b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000000000000\r\n\r\n{}",
        false,
    )
    .await;
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::TooLarge { limit: LIMIT }), "{e}");
    assert_eq!(e.to_string(), format!("response over {LIMIT} bytes"));
    // Chunked: refused once the bytes that came pass it.
    let (addr, _) = canned(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
          20\r\n0123456789abcdef0123456789abcdef\r\n\
          20\r\n0123456789abcdef0123456789abcdef\r\n\
          1\r\n!\r\n0\r\n\r\n",
        false,
    )
    .await;
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    assert_eq!(get(&addr, LIMIT + 1).await.unwrap().body.len(), LIMIT + 1);
    // Close-delimited, no length said.
    let (addr, _) = canned(
        b"HTTP/1.0 200 OK\r\n\r\n\
          0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef!",
        true,
    )
    .await;
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
}

#[tokio::test]
async fn what_is_not_http_is_malformed() {
    for garbage in [
        &b"SSH-2.0-OpenSSH_9.6\r\n\r\n"[..],
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
    ] {
        let (addr, _) = canned(garbage, true).await;
        let e = get(&addr, LIMIT).await.unwrap_err();
        assert!(
            matches!(e, Error::Malformed(_)),
            "{:?}: {e:?}",
            String::from_utf8_lossy(garbage)
        );
    }
}

#[tokio::test]
async fn an_answer_cut_short_is_closed_not_short() {
    let (addr, _) = canned(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nabc", true).await;
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::Closed(_)), "{e:?}");
    let (addr, _) = canned(b"HTTP/1.1 200 OK\r\n", true).await;
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::Closed(_)), "head cut: {e:?}");
    let (addr, _) = canned(b"", true).await;
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::Closed(_)), "nothing at all: {e:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    // Accepted by the kernel from the backlog; nobody reads or writes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let started = Instant::now();
    let timeout = Duration::from_millis(300);
    let e = fetch(&addr, &Request::get("/", LIMIT), timeout)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::TimedOut(t) if t == timeout), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_refused_connect_names_the_address() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let e = get(&addr, LIMIT).await.unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!("connect to {addr}: ")),
        "{e}"
    );
    assert!(get("127.0.0.1", LIMIT).await.is_err(), "no port");
}

#[tokio::test]
async fn bytes_no_header_can_carry_are_refused_on_this_side() {
    let (addr, seen) = canned(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", false).await;
    let request = Request::get("/", LIMIT).bearer(Some(b"tok\r\nX-Injected: 1"));
    let e = fetch(&addr, &request, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Request(_)), "{e:?}");
    let e = get(&addr, LIMIT).await;
    assert!(e.is_ok(), "the server is fine: {e:?}");
    let e = fetch(
        &addr,
        &Request::get("no path", LIMIT),
        Duration::from_secs(5),
    )
    .await;
    assert!(matches!(e, Err(Error::Request(_))), "{e:?}");
    assert_eq!(
        seen.lock().unwrap().requests.len(),
        1,
        "only the good one sent"
    );
}

#[tokio::test]
async fn a_kept_connection_carries_one_request_after_another() {
    let (addr, seen) = canned(
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}",
        false,
    )
    .await;
    let mut connection = Connection::open(&addr).await.unwrap();
    for _ in 0..3 {
        let response = connection
            .send(&Request::get("/connections/5", LIMIT))
            .await;
        assert_eq!(response.unwrap().status, 404);
        assert!(connection.is_open());
    }
    let seen = seen.lock().unwrap();
    assert_eq!((seen.accepted, seen.requests.len()), (1, 3));
    let head = seen.requests[0].to_ascii_lowercase();
    assert!(!head.contains("connection:"), "kept alive: {head}");
    assert!(
        !head.contains("authorization"),
        "no token, none sent: {head}"
    );
}

#[tokio::test]
async fn a_post_sends_its_body() {
    let (addr, seen) = canned(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ndone", false).await;
    let request = Request::post(
        "/queries/reset",
        "application/json",
        &b"{\"a\":1}"[..],
        LIMIT,
    );
    let response = fetch(&addr, &request, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(response.body, b"done");
    let sent = seen.lock().unwrap().requests[0].to_ascii_lowercase();
    assert!(
        sent.starts_with("post /queries/reset http/1.1\r\n"),
        "{sent}"
    );
    assert!(
        sent.contains("content-type: application/json\r\n"),
        "{sent}"
    );
    assert!(sent.ends_with("\r\n\r\n{\"a\":1}"), "{sent}");
}
