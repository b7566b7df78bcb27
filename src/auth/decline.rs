//! Ending a backend handshake the proxy opened for itself, so that the server does not count it.
//!
//! The proxy reads some greetings for its own sake: health checks without an account, and a
//! deferred connect's first greeting. Closing right after one is a handshake error on the server
//! (MariaDB's `COUNT_HANDSHAKE_ERRORS`), which counts toward `max_connect_errors` and, at the
//! limit, blocks the proxy's address for every client (error 1129). A login the server refuses
//! is an authentication error, which does not count; so the proxy logs in as an account no
//! server has and reads the refusal. Measured on MariaDB 10.11 (`performance_schema.host_cache`):
//! a greeting-only connection adds to `SUM_CONNECT_ERRORS`, this adds only to
//! `COUNT_AUTHENTICATION_ERRORS`. It runs on a task of its own: nothing waits for its outcome.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use crate::protocol::codec::header;
use crate::protocol::login::{native_answer, AuthSwitch, REFUSED_PASSWORD};
use crate::stream::read_packet;

/// Replies are an ERR, an OK or an auth switch: small.
const MAX_REPLY: usize = 1 << 16;
/// An auth switch, then the refusal; a server asking for more gets no more.
const MAX_ROUNDS: usize = 2;
const COM_QUIT: u8 = 0x01;

/// Sends `response` (a [`refused_login`](crate::protocol::login::refused_login), patched for
/// TLS if the stream is encrypted) on `stream`, whose greeting has been read (`buf` holds what
/// came after it), and reads the server's answer, all within `within`; then closes.
pub async fn decline<S>(mut stream: S, mut buf: BytesMut, response: Vec<u8>, within: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        stream.write_all(&response).await?;
        for _ in 0..MAX_ROUNDS {
            let reply = read_packet(&mut stream, &mut buf, MAX_REPLY)
                .await
                .map_err(std::io::Error::other)?;
            let seq = reply[3];
            match reply.get(4) {
                Some(0xFE) => {
                    // Whatever the plugin, this password's answer is wrong for it.
                    let switch = AuthSwitch::parse(&reply[4..]);
                    let answer = native_answer(switch.data, REFUSED_PASSWORD, seq.wrapping_add(1));
                    stream.write_all(&answer).await?;
                }
                Some(0x00) => {
                    // Someone made the account, with this password: leave politely.
                    let mut quit = header(1, 0).to_vec();
                    quit.push(COM_QUIT);
                    stream.write_all(&quit).await?;
                    return Ok("logged in");
                }
                Some(0xFF) => return Ok("refused"),
                _ => return Ok("asked for more"),
            }
        }
        Ok::<_, std::io::Error>("asked for more")
    };
    match tokio::time::timeout(within, exchange).await {
        Ok(Ok(outcome)) => debug!(outcome, "own handshake ended with a login"),
        Ok(Err(e)) => debug!(error = %e, "own handshake: the login was not answered"),
        Err(_) => debug!("own handshake: no answer to the login in time"),
    }
    if let Err(e) = stream.shutdown().await {
        debug!(error = %e, "own handshake: closing");
    }
}
