//! Ending a backend handshake without a login, so that the server does not count it.
//!
//! Servers count every handshake that ends before a login (closed after the greeting, or in
//! the middle of the auth exchange) as a connect error of the client's address, and
//! `max_connect_errors` of them block it for every client (error 1129). Behind mysql-lb that
//! address is the proxy's. A login the server refuses is an authentication error instead, which
//! does not count. So wherever the proxy gives up a backend handshake (its own greeting-only
//! connections: health checks without an account, a deferred connect's first greeting; a client
//! that leaves before its login is over) it answers the server with a login that fails and reads
//! the refusal before closing. Measured on MariaDB 10.11 (`performance_schema.host_cache`): a
//! close after the greeting or after an auth switch adds to `SUM_CONNECT_ERRORS`; this adds
//! only to `COUNT_AUTHENTICATION_ERRORS`.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use crate::net::stream::read_packet;
use crate::wire::protocol::cleartext::sends_cleartext;
use crate::wire::protocol::codec::header;
use crate::wire::protocol::handshake::greeting_scramble;
use crate::wire::protocol::login::{native_answer, refused_login, AuthSwitch, REFUSED_PASSWORD};

/// Replies are an ERR, an OK, an auth switch or a plugin's short request: small.
const MAX_REPLY: usize = 1 << 16;
/// Answers given before giving up (a switch, then a plugin's request for more).
const MAX_ROUNDS: usize = 3;
/// How long a client's session waits for the refusal after the client left.
const ABANDON_WITHIN: Duration = Duration::from_secs(1);
const COM_QUIT: u8 = 0x01;

/// Sends `response` (a [`refused_login`], patched for TLS if the stream is encrypted) on
/// `stream`, whose greeting has been read (`buf` holds what came after it), and reads the
/// server's answer, all within `within`; then closes.
pub async fn decline<S>(mut stream: S, mut buf: BytesMut, response: Vec<u8>, within: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        stream.write_all(&response).await?;
        answer_wrongly(&mut stream, &mut buf, None).await
    };
    log_outcome(tokio::time::timeout(within, exchange).await);
    if let Err(e) = stream.shutdown().await {
        debug!(error = %e, "own handshake: closing");
    }
}

/// A client left after the backend sent `greeting` (its payload) and before the proxy sent its
/// response: the backend gets a refused login instead.
pub async fn abandon_greeted<S>(backend: &mut S, buf: &mut BytesMut, greeting: &[u8], caps: u32)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(Ok(login)) = greeting_scramble(greeting).map(|nonce| refused_login(caps, &nonce)) else {
        return;
    };
    let exchange = async {
        backend.write_all(&login).await?;
        answer_wrongly(backend, buf, None).await
    };
    log_outcome(tokio::time::timeout(ABANDON_WITHIN, exchange).await);
}

/// A client left in the middle of the auth exchange. `pending` is the backend's packet it left
/// unanswered (None: the backend owes the next packet); the backend gets wrong answers until it
/// refuses the login.
pub async fn abandon_login<S>(backend: &mut S, buf: &mut BytesMut, pending: Option<BytesMut>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = answer_wrongly(backend, buf, pending);
    log_outcome(tokio::time::timeout(ABANDON_WITHIN, exchange).await);
}

/// Answers the backend's auth requests with [`REFUSED_PASSWORD`] until it sends OK or ERR.
async fn answer_wrongly<S>(
    stream: &mut S,
    buf: &mut BytesMut,
    mut pending: Option<BytesMut>,
) -> std::io::Result<&'static str>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    for _ in 0..MAX_ROUNDS {
        let packet = match pending.take() {
            Some(p) => p,
            None => read_packet(stream, buf, MAX_REPLY)
                .await
                .map_err(std::io::Error::other)?,
        };
        let seq = packet[3].wrapping_add(1);
        let answer = match packet.get(4..).unwrap_or_default() {
            [0xFF, ..] => return Ok("refused"),
            [0x00, ..] => {
                // Someone made the account with this password, or the client had finished:
                // leave politely.
                let mut quit = header(1, 0).to_vec();
                quit.push(COM_QUIT);
                stream.write_all(&quit).await?;
                return Ok("logged in");
            }
            // caching_sha2_password's "fast auth passed": its OK follows.
            [0x01, 0x03] => continue,
            // A plugin that takes the password as it is (PAM's dialog, clear_password): this
            // text, which a PAM module or a log may show, rather than bytes that are not text.
            switch @ [0xFE, ..] if takes_cleartext(switch) => text_answer(seq),
            // dialog's prompts (0x02, 0x04 for a password) after its switch.
            [0x02 | 0x04, ..] => text_answer(seq),
            // Whatever the plugin, this password's answer to its data is wrong.
            switch @ [0xFE, ..] => {
                native_answer(AuthSwitch::parse(switch).data, REFUSED_PASSWORD, seq)
            }
            _ => native_answer(&[], REFUSED_PASSWORD, seq),
        };
        stream.write_all(&answer).await?;
    }
    Ok("asked for more")
}

/// Whether the AuthSwitchRequest `switch` names a plugin that takes the password as it is.
fn takes_cleartext(switch: &[u8]) -> bool {
    std::str::from_utf8(AuthSwitch::parse(switch).plugin).is_ok_and(sends_cleartext)
}

/// [`REFUSED_PASSWORD`] as a cleartext plugin sends a password: the text and a NUL.
fn text_answer(seq: u8) -> Vec<u8> {
    let mut packet = header(REFUSED_PASSWORD.len() + 1, seq).to_vec();
    packet.extend_from_slice(REFUSED_PASSWORD.as_bytes());
    packet.push(0);
    packet
}

fn log_outcome(outcome: Result<std::io::Result<&'static str>, tokio::time::error::Elapsed>) {
    match outcome {
        Ok(Ok(outcome)) => debug!(outcome, "backend handshake ended with a login"),
        Ok(Err(e)) => debug!(error = %e, "backend handshake: the login was not answered"),
        Err(_) => debug!("backend handshake: no answer to the login in time"),
    }
}
