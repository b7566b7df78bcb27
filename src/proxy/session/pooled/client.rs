//! Reading and answering a pooled session's client outside the relay: the commands the
//! session handles itself (a prepared-statement command, one refused for want of a server
//! connection) are read as far as needed, dropped whole (every 16 MiB chunk, without holding
//! it), or answered with an ERR of the proxy's in their response's place.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::backends::pooling::command::payload_len;
use crate::net::leg::LegStream;
use crate::proxy::relay::RelayEnd;
use crate::wire::protocol::errors::{err_packet, sqlstate_for};

/// Reads from the client until `up` holds at least `n` bytes.
pub(super) async fn fill<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
    n: usize,
) -> Result<(), RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    while up.len() < n {
        up.reserve(n - up.len());
        match client.read_buf(up).await {
            Ok(0) => return Err(RelayEnd::ClientClosed { quit: false }),
            Ok(_) => {}
            Err(e) => return Err(RelayEnd::ClientIo(e)),
        }
    }
    Ok(())
}

/// Drops the command packet at the front of `up`, every chunk of it, reading what is not here
/// yet; returns its last sequence id.
pub(super) async fn consume<C>(client: &mut LegStream<C>, up: &mut BytesMut) -> Result<u8, RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        fill(client, up, 4).await?;
        let (Some(len), Some(&seq)) = (payload_len(up), up.get(3)) else {
            // Four bytes are there: a header.
            return Err(RelayEnd::ClientIo(std::io::ErrorKind::UnexpectedEof.into()));
        };
        let mut left = 4 + len;
        loop {
            let here = left.min(up.len());
            up.advance(here);
            left -= here;
            if left == 0 {
                break;
            }
            fill(client, up, left.min(64 * 1024)).await?;
        }
        if len < 0xFF_FFFF {
            return Ok(seq);
        }
    }
}

/// Drops the command at the front of `up` unanswered (one the server does not answer).
pub(super) async fn drop_front<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
) -> Result<(), RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    consume(client, up).await.map(|_| ())
}

/// Answers the command at the front of `up` with an ERR of the proxy's, dropping the command.
pub(super) async fn answer<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
    code: u16,
    message: &str,
) -> Result<(), RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let seq = consume(client, up).await?.wrapping_add(1);
    write(
        client,
        &err_packet(seq, code, Some(sqlstate_for(code)), message),
    )
    .await
}

pub(super) async fn write<C>(client: &mut LegStream<C>, bytes: &[u8]) -> Result<(), RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let written = async {
        client.write_all(bytes).await?;
        client.flush().await
    };
    written.await.map_err(RelayEnd::ClientIo)
}
