//! The client leg's TLS handshake, driven by hand through rustls' unbuffered API, so that it
//! ends in a [`KernelConnection`] and the record layer of [`super::records`].
//!
//! rustls decides everything (versions, suites, certificates, client verification, tickets);
//! this only moves bytes. The handshake ends when rustls would let us write application data
//! and is no longer handshaking: by then the TLS 1.3 tickets it sends after the client's
//! Finished are out. rustls is handed one record at a time, so that it stops at the client's
//! Finished: whatever the client pipelined after it (MySQL's HandshakeResponse, a KeyUpdate)
//! goes to the record layer unread. Were rustls given the whole read, it would also take a
//! KeyUpdate sent in the same flight, move its keys on and queue its answer, which the
//! extraction of the secrets then drops: the client could not read our first record.

use std::io;
use std::sync::Arc;

use rustls::server::{ServerConfig, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::records::{
    Records, APPLICATION_DATA, CHANGE_CIPHER_SPEC, HEADER, MAX_CIPHERTEXT, MAX_RECORD,
};

/// What the handshake leaves for the record layer.
pub struct Accepted {
    pub records: Records,
    /// Application data rustls decrypted before the handshake was over.
    pub plaintext: Vec<u8>,
    /// Bytes read that rustls did not process: the start of the next records.
    pub ciphertext: Vec<u8>,
    /// "TLSv1.3 TLS13_AES_128_GCM_SHA256", for the session's debug line.
    pub description: String,
    /// The client's certificate, when it presented one.
    pub peer_certificate: Option<CertificateDer<'static>>,
}

fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Where the record that starts at `at` in `buf` ends, when it is whole. What is no TLS record
/// (a content type or version no record has, a length past any record's: a plaintext probe,
/// garbage) hands rustls everything read, which refuses it at once with its alert, as it did
/// before it was given a record at a time.
fn record_end(buf: &[u8], at: usize) -> Option<usize> {
    let header = buf.get(at..at + HEADER)?;
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    if !(CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&header[0])
        || header[1] != 3
        || len > MAX_CIPHERTEXT
    {
        return Some(buf.len());
    }
    let end = at + HEADER + len;
    (end <= buf.len()).then_some(end)
}

/// Runs the server side of a handshake on `io` with `config`, which must have
/// `enable_secret_extraction`.
pub async fn accept<S>(config: Arc<ServerConfig>, io: &mut S) -> io::Result<Accepted>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = UnbufferedServerConnection::new(config).map_err(invalid)?;
    // Handshake records in, records out: a flight of certificates fits in a few KiB.
    let mut incoming = Vec::with_capacity(MAX_RECORD);
    let mut outgoing = Vec::with_capacity(4096);
    let mut plaintext = Vec::new();
    // rustls sees `incoming[..window]`: whole records, one more each time it needs one. What
    // it keeps of them (a handshake message begun) stays in the window.
    let mut window = 0;
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming[..window]);
        let mut read = false;
        let mut done = false;
        match state {
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                let at = outgoing.len();
                outgoing.resize(at + 4096, 0);
                let n = match encode.encode(&mut outgoing[at..]) {
                    Err(EncodeError::InsufficientSize(s)) => {
                        outgoing.resize(at + s.required_size, 0);
                        encode.encode(&mut outgoing[at..])
                    }
                    other => other,
                }
                .map_err(io::Error::other)?;
                outgoing.truncate(at + n);
            }
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                transmit.done();
                io.write_all(&outgoing).await?;
                io.flush().await?;
                outgoing.clear();
            }
            Ok(ConnectionState::BlockedHandshake) => match record_end(&incoming, window) {
                Some(end) => window = end,
                None => read = true,
            },
            Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                while let Some(record) = traffic.next_record() {
                    plaintext.extend_from_slice(record.map_err(invalid)?.payload);
                }
            }
            // TLS 1.3 lets a server write once its Finished is out; the handshake is over only
            // with the client's.
            Ok(ConnectionState::WriteTraffic(_)) => done = true,
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client closed the connection during the TLS handshake",
                ))
            }
            Ok(_) => {
                return Err(io::Error::other(
                    "unexpected state of the TLS handshake (early data is not offered)",
                ))
            }
            Err(e) => {
                incoming.drain(..discard);
                send_alert(&mut conn, io, &mut outgoing).await;
                return Err(invalid(e));
            }
        }
        incoming.drain(..discard);
        window -= discard;
        if done {
            if !conn.is_handshaking() {
                break;
            }
            match record_end(&incoming, window) {
                Some(end) => window = end,
                None => read = true,
            }
        }
        if read {
            if incoming.len() == incoming.capacity() {
                incoming.reserve(MAX_RECORD);
            }
            if io.read_buf(&mut incoming).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client closed the connection during the TLS handshake",
                ));
            }
        }
    }
    let description = crate::net::tls::describe(&conn);
    let peer_certificate = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned());
    let (secrets, kernel) = conn.dangerous_into_kernel_connection().map_err(invalid)?;
    let records = Records::new(secrets.tx, secrets.rx, kernel)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Accepted {
        records,
        plaintext,
        ciphertext: incoming,
        description,
        peer_certificate,
    })
}

/// After a failed handshake: one attempt to send the alert rustls queued about it.
async fn send_alert<S>(conn: &mut UnbufferedServerConnection, io: &mut S, outgoing: &mut Vec<u8>)
where
    S: AsyncWrite + Unpin,
{
    outgoing.clear();
    for _ in 0..4 {
        let UnbufferedStatus { state, .. } = conn.process_tls_records(&mut []);
        match state {
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                let at = outgoing.len();
                outgoing.resize(at + 512, 0);
                match encode.encode(&mut outgoing[at..]) {
                    Ok(n) => outgoing.truncate(at + n),
                    Err(_) => {
                        outgoing.truncate(at);
                        break;
                    }
                }
            }
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                transmit.done();
                break;
            }
            _ => break,
        }
    }
    if !outgoing.is_empty() {
        let _ = io.write_all(outgoing).await;
        let _ = io.flush().await;
    }
}
