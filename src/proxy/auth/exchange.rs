//! The auth exchange after the client's response: packets relayed both ways until the backend's
//! OK or ERR, each moved to the sequence numbering of the leg it goes out on, and, in a guarded
//! session, stopped before one that carries or asks for a password in clear.

use super::*;

/// The plugin an AuthSwitchRequest names (its payload after the 0xFE).
fn switched_plugin(rest: &[u8]) -> Option<String> {
    let name = rest.split(|&b| b == 0).next()?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// Sequence ids across the two legs during the auth exchange: where only one leg had an
/// SSLRequest, the backend's ids run one ahead of (or behind) the client's.
pub(super) struct Sequences<'a> {
    pub(super) backend_ahead: u8,
    /// The client-leg id our own ERR would take next.
    pub(super) next: &'a mut u8,
    /// The auth plugin in use: the client's choice, then each AuthSwitchRequest's.
    pub(super) plugin: Option<String>,
    /// A backend packet that makes the client answer in clear ends the exchange unforwarded.
    pub(super) guard: bool,
}

/// Relays auth packets both ways until the backend sends OK (0x00) or ERR (0xFF). Either side may
/// speak next depending on the plugin (auth switch, ed25519, caching_sha2 more-data, PAM dialog),
/// so both are read at once rather than guessing whose turn it is. Each packet's sequence id is
/// moved to the numbering of the leg it is forwarded on.
pub(super) async fn exchange<C, B>(
    client: &mut C,
    backend: &mut B,
    client_buf: &mut BytesMut,
    backend_buf: &mut BytesMut,
    max: usize,
    seqs: &mut Sequences<'_>,
    turn: &mut Side,
) -> Result<(), AuthError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    // The backend's last packet while it waits for the client's answer to it: if the client
    // leaves (or the packet is refused), the backend is answered wrongly rather than left
    // mid-login, which servers count against the proxy's address (see `decline`).
    let mut unanswered: Option<BytesMut> = None;
    loop {
        // Both futures only read into their own buffers, and `read_packet` keeps partial data in
        // them, so dropping the one that loses the race loses nothing.
        tokio::select! {
            packet = read_packet(backend, backend_buf, max) => {
                let mut packet = packet.map_err(AuthError::BackendRead)?;
                unanswered = Some(packet.clone());
                packet[3] = packet[3].wrapping_sub(seqs.backend_ahead);
                if seqs.guard {
                    if let Some(exposure) = cleartext::in_server_packet(seqs.plugin.as_deref(), &packet[4..]) {
                        // Our ERR takes this packet's place in the client's sequence.
                        *seqs.next = packet[3];
                        abandon_login(backend, backend_buf, unanswered).await;
                        return Err(AuthError::CleartextPassword(exposure));
                    }
                }
                if let Err(e) = client.write_all(&packet).await {
                    abandon_login(backend, backend_buf, unanswered).await;
                    return Err(AuthError::ClientWrite(e));
                }
                *seqs.next = packet[3].wrapping_add(1);
                *turn = Side::Client;
                match packet.get(4) {
                    Some(0x00) => return Ok(()),
                    Some(0xFE) => seqs.plugin = switched_plugin(&packet[5..]),
                    Some(0xFF) => {
                        let ServerErr { code, message } = ServerErr::parse_lenient(&packet[4..]);
                        return Err(AuthError::Denied { code, message });
                    }
                    _ => {}
                }
            }
            packet = read_packet(client, client_buf, max) => {
                let mut packet = match packet {
                    Ok(packet) => packet,
                    Err(e) => {
                        abandon_login(backend, backend_buf, unanswered.take()).await;
                        return Err(AuthError::ClientRead(e));
                    }
                };
                unanswered = None;
                *seqs.next = packet[3].wrapping_add(1);
                packet[3] = packet[3].wrapping_add(seqs.backend_ahead);
                backend.write_all(&packet).await.map_err(AuthError::BackendWrite)?;
                *turn = Side::Backend;
            }
        }
    }
}
