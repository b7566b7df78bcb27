//! Taking a leg to TLS during the connection phase: the client's first packet read exactly
//! (its ClientHello must stay in the socket for rustls), the client leg's handshake after its
//! SSLRequest, and the backend leg's after ours.

use std::sync::Arc;

use super::*;
use crate::net::leg::TlsSocket;

/// An SSLRequest is a HandshakeResponse41's fixed 32-byte header alone, CLIENT_SSL set.
const SSL_REQUEST_LEN: usize = 32;

/// Sends the client's (patched) response to the backend with the bits of the backend leg,
/// after taking that leg to TLS where planned; returns the sequence id it went with.
pub(super) async fn forward_response<B>(
    backend: &mut LegStream<B>,
    packet: &mut BytesMut,
    greeting: &PatchedGreeting,
    plan: &TransportPlan<'_>,
) -> Result<u8, AuthError>
where
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut set = 0;
    if plan.backend_compression {
        set |= CLIENT_COMPRESS;
    }
    if plan.backend_tls.is_some() {
        set |= CLIENT_SSL;
    }
    set_client_bits(&mut packet[4..], set, 0).map_err(AuthError::ClientHandshake)?;
    let seq = match plan.backend_tls {
        Some((connector, ref name)) => {
            backend_to_tls(backend, packet, greeting, connector, name.clone()).await?;
            2
        }
        None => 1,
    };
    packet[3] = seq;
    backend
        .write_all(packet)
        .await
        .map_err(AuthError::BackendWrite)?;
    Ok(seq)
}

/// Reads the client's first packet; after an SSLRequest, takes the client leg to TLS and reads
/// the HandshakeResponse inside it. A plaintext TCP client is refused here under `tls.require`.
pub(super) async fn client_response<C>(
    client: &mut LegStream<C>,
    buf: &mut BytesMut,
    plan: &TransportPlan<'_>,
    max: usize,
    next_seq: &mut u8,
) -> Result<Response, AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    // With TLS offered, the first packet is read to its last byte and no further: a client
    // sends its ClientHello right behind the SSLRequest, and those bytes belong to the TLS
    // handshake, not to a buffer of ours.
    let first = match plan.client_tls {
        Some(_) => read_packet_exact(client, max).await,
        None => read_packet(client, buf, max).await,
    }
    .map_err(AuthError::ClientRead)?;
    if first[3] != 1 {
        return Err(AuthError::ClientSequence(first[3]));
    }
    *next_seq = 2;
    // Only a packet of an SSLRequest's length can be one: a HandshakeResponse is parsed once,
    // when it is patched for the backend, not here as well.
    let wants_tls = first.len() == 4 + SSL_REQUEST_LEN
        && matches!(
            parse_client_first(&first[4..]),
            Ok(ClientFirst::SslRequest { .. })
        );
    if !wants_tls {
        if plan.client_tls.is_some_and(|t| t.require) && !plan.client_local {
            return Err(AuthError::InsecureTransport {
                user: match parse_client_first(&first[4..]) {
                    Ok(ClientFirst::Response(r)) => r.user,
                    _ => String::new(),
                },
                mariadb: plan.mariadb,
            });
        }
        return Ok(Response {
            packet: first,
            client_seq: 1,
        });
    }
    let Some(tls) = plan.client_tls else {
        return Err(AuthError::ClientWantsTls);
    };
    let plain = client.take_plain().map_err(AuthError::ClientTls)?;
    let stream = TlsSocket::accept(Arc::clone(&tls.config), plain)
        .await
        .map_err(AuthError::ClientTls)?;
    *client = LegStream::Tls(Box::new(stream));
    let packet = read_packet(client, buf, max)
        .await
        .map_err(AuthError::ClientRead)?;
    if packet[3] != 2 {
        return Err(AuthError::ClientSequence(packet[3]));
    }
    *next_seq = 3;
    Ok(Response {
        packet,
        client_seq: 2,
    })
}

/// Sends the backend the SSLRequest that `response` implies and takes the backend leg to TLS.
pub(super) async fn backend_to_tls<B>(
    backend: &mut LegStream<B>,
    response: &[u8],
    greeting: &PatchedGreeting,
    connector: &TlsConnector,
    name: ServerName<'static>,
) -> Result<(), AuthError>
where
    B: AsyncRead + AsyncWrite + Unpin,
{
    if !greeting.rest.is_empty() {
        return Err(AuthError::BackendTls(std::io::Error::other(
            "it sent bytes after its greeting, before the TLS handshake",
        )));
    }
    let request = ssl_request_for(&response[4..]).map_err(AuthError::ClientHandshake)?;
    let mut packet = Vec::with_capacity(4 + request.len());
    packet.extend_from_slice(&[request.len() as u8, 0, 0, 1]);
    packet.extend_from_slice(&request);
    backend
        .write_all(&packet)
        .await
        .map_err(AuthError::BackendWrite)?;
    let plain = backend.take_plain().map_err(AuthError::BackendTls)?;
    let stream = connector
        .connect(name, plain)
        .await
        .map_err(AuthError::BackendTls)?;
    *backend = LegStream::tls(TlsStream::Client(stream));
    Ok(())
}

/// Reads one packet exactly, leaving every byte behind it in the stream.
async fn read_packet_exact<S: AsyncRead + Unpin>(
    stream: &mut S,
    max: usize,
) -> Result<BytesMut, PacketReadError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match stream.read(&mut header[got..]).await? {
            0 if got == 0 => return Err(PacketReadError::Closed),
            0 => return Err(PacketReadError::Truncated),
            n => got += n,
        }
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    if len > max {
        return Err(PacketReadError::TooLarge { len, max });
    }
    let mut packet = BytesMut::zeroed(4 + len);
    packet[..4].copy_from_slice(&header);
    stream
        .read_exact(&mut packet[4..])
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => PacketReadError::Truncated,
            _ => PacketReadError::Io(e),
        })?;
    Ok(packet)
}
