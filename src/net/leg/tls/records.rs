//! The client leg's record layer past the handshake: TLS 1.2 and 1.3 records sealed and opened
//! with ring's AEAD, sans I/O.
//!
//! rustls negotiates (see [`super::accept`]) and then hands over the traffic keys, the sequence
//! numbers and a [`KernelConnection`], which derives the next keys on a TLS 1.3 key update.
//! Everything else is here: the reason is the cost per query. rustls copies every record's
//! plaintext into a `Vec` of its own and encrypts every record into a new `Vec`; here a record
//! is opened in place in the buffer it was read into, and sealed in place: in the relay's buffer
//! ([`Records::seal_data_in_place`], no copy), or in the one outgoing buffer, which is reused
//! (one copy, from the relay's buffer).
//!
//! What a record may carry past the handshake, and what happens to it:
//! - application data: handed out;
//! - close_notify: the clean end of the stream; up to 4 warnings (TLS 1.2's, or TLS 1.3's
//!   user_canceled, which some clients send for nothing) are let pass, as rustls does; any
//!   other alert ends the stream with an error;
//! - TLS 1.3 KeyUpdate (at most 32 between two application data records, as rustls): the
//!   receiving keys move on, and when the peer asks, ours too, with a
//!   KeyUpdate of our own before our next record (one for all the requests that came
//!   meanwhile, RFC 8446 4.6.3, so requests from a client that reads nothing queue nothing);
//! - any other handshake message (a TLS 1.2 renegotiation, a TLS 1.3 message that has no place
//!   after the handshake), a change_cipher_spec, an unknown type: a fatal alert and an error.
//!
//! Limits are the RFCs': a record's ciphertext at most 2^14 + 256 bytes, its plaintext at most
//! 2^14; a sequence number never wraps. A record that does not open is `bad_record_mac`.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};

/// Record header: type, version, length.
pub const HEADER: usize = 5;
/// Most plaintext one record carries.
pub const MAX_PLAINTEXT: usize = 1 << 14;
/// Most ciphertext one record may carry (RFC 8446 5.2, RFC 5246 6.2.3).
pub const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
/// The largest record on the wire.
pub const MAX_RECORD: usize = HEADER + MAX_CIPHERTEXT;
const TAG: usize = 16;
/// TLS 1.2 AES-GCM's explicit nonce, carried in each record.
const EXPLICIT_NONCE: usize = 8;

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

const KEY_UPDATE: u8 = 24;
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;
const WARNING: u8 = 1;

/// Warning alerts a connection may receive (some clients, Java's among them, send a pointless
/// user_canceled), and KeyUpdates between two application data records.
const WARNING_ALERTS: u8 = 4;
const KEY_UPDATES: u8 = 32;

/// TLS 1.3 keys are renewed after this many records sent, far below any AEAD's
/// confidentiality limit (AES-GCM: 2^24.5 in RFC 8446 5.5).
const TLS13_TX_RECORDS_PER_KEY: u64 = 1 << 23;

/// Why the stream cannot go on. Each is an alert for the peer (see [`RecordError::alert`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    #[error("a TLS record does not decrypt (bad_record_mac)")]
    BadRecordMac,
    #[error("a TLS record is larger than the protocol allows")]
    RecordOverflow,
    #[error("a TLS record is malformed")]
    Decode,
    #[error("the peer sent a TLS message of type {0} past the handshake")]
    Unexpected(u8),
    #[error("the peer sent TLS alert {0}")]
    PeerAlert(u8),
    #[error("the TLS sequence numbers are exhausted")]
    SequenceExhausted,
    #[error("the TLS keys cannot be used: {0}")]
    Keys(String),
}

impl RecordError {
    /// The alert telling the peer why, if one is sent.
    pub fn alert(&self) -> Option<u8> {
        match self {
            Self::BadRecordMac => Some(20),
            Self::RecordOverflow => Some(22),
            Self::Decode => Some(50),
            Self::Unexpected(_) => Some(10),
            // The peer already said why; nothing to answer.
            Self::PeerAlert(_) => None,
            Self::SequenceExhausted | Self::Keys(_) => Some(80),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Tls12,
    Tls13,
}

/// One direction's key.
struct Keys {
    key: LessSafeKey,
    iv: [u8; aead::NONCE_LEN],
    seq: u64,
    /// TLS 1.2 AES-GCM: the nonce's last 8 bytes travel in the record (the first 4 are `iv`'s).
    explicit: bool,
}

impl Keys {
    fn new(
        version: Version,
        seq: u64,
        secrets: ConnectionTrafficSecrets,
    ) -> Result<Self, RecordError> {
        let (algorithm, key, iv, gcm) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, true),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, true),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv, false)
            }
            _ => return Err(RecordError::Keys("an AEAD ring does not offer".into())),
        };
        let unbound = UnboundKey::new(algorithm, key.as_ref())
            .map_err(|_| RecordError::Keys("a key of the wrong length".into()))?;
        let iv: [u8; aead::NONCE_LEN] = iv
            .as_ref()
            .try_into()
            .map_err(|_| RecordError::Keys("an IV of the wrong length".into()))?;
        Ok(Self {
            key: LessSafeKey::new(unbound),
            iv,
            seq,
            explicit: gcm && version == Version::Tls12,
        })
    }

    /// The IV XOR the sequence number (RFC 8446 5.3; rustls builds TLS 1.2 AES-GCM's explicit
    /// part the same way).
    #[inline]
    fn nonce(&self) -> [u8; aead::NONCE_LEN] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }

    #[inline]
    fn next(&mut self) -> Result<(), RecordError> {
        self.seq = self
            .seq
            .checked_add(1)
            .filter(|s| *s < u64::MAX)
            .ok_or(RecordError::SequenceExhausted)?;
        Ok(())
    }
}

/// Appends `payload` to `out` a few KiB at a time. glibc copies more than 8 KiB with `rep
/// movsb`, which callgrind (`benches/load/instructions.py`) counts as one instruction per byte;
/// in pieces the copy is counted as what it costs on the CPU, where either way is about as fast.
fn copy_in_pieces(payload: &[u8], out: &mut Vec<u8>) {
    for piece in payload.chunks(4096) {
        out.extend_from_slice(piece);
    }
}

/// TLS 1.2's additional data: sequence number, type, version, plaintext length.
fn tls12_aad(seq: u64, typ: u8, len: usize) -> [u8; 13] {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = typ;
    aad[9] = 3;
    aad[10] = 3;
    aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
    aad
}

/// What the front of the incoming bytes held.
#[derive(Debug, PartialEq, Eq)]
pub enum Opened {
    /// Not a whole record yet: it needs `total` bytes from the front.
    Incomplete { total: usize },
    /// A record of `consumed` bytes; its application data is at `data` (possibly empty: the
    /// record carried something else, handled here).
    Record {
        consumed: usize,
        data: std::ops::Range<usize>,
    },
    /// close_notify, in a record of `consumed` bytes: nothing after it counts.
    Closed { consumed: usize },
}

/// What goes on the wire around a record's body sealed in place: before it the header (and TLS
/// 1.2 AES-GCM's explicit nonce), after it the tag.
pub struct Framing {
    head: [u8; HEADER + EXPLICIT_NONCE],
    head_len: usize,
    pub tag: [u8; TAG],
}

impl Framing {
    #[inline]
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }
}

/// Both directions of an established client leg.
pub struct Records {
    version: Version,
    tx: Keys,
    rx: Keys,
    /// Where the next keys come from after a TLS 1.3 key update.
    kernel: KernelConnection<ServerConnectionData>,
    /// TLS 1.2: records sent under the one key the connection has.
    tx_limit: u64,
    /// The peer asked for a key update: ours goes out before our next record. Requests that
    /// come while we send nothing are answered by that one update (RFC 8446 4.6.3), so a
    /// client that floods requests and reads nothing queues nothing here.
    owe_update: bool,
    /// Warning alerts the peer may still send (TLS 1.2; TLS 1.3 allows only user_canceled),
    /// and KeyUpdates before its next application data: as many as rustls (and BoringSSL)
    /// allow, so a client may not make us spin on them.
    warnings_left: u8,
    key_updates_left: u8,
}

impl Records {
    /// The record layer for the secrets rustls extracted at the end of the handshake.
    pub fn new(
        tx: (u64, ConnectionTrafficSecrets),
        rx: (u64, ConnectionTrafficSecrets),
        kernel: KernelConnection<ServerConnectionData>,
    ) -> Result<Self, RecordError> {
        let version = match kernel.protocol_version() {
            ProtocolVersion::TLSv1_3 => Version::Tls13,
            ProtocolVersion::TLSv1_2 => Version::Tls12,
            _ => {
                return Err(RecordError::Keys(
                    "a version other than TLS 1.2 or 1.3".into(),
                ))
            }
        };
        let tx_limit = match kernel.negotiated_cipher_suite() {
            SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
            SupportedCipherSuite::Tls13(_) => TLS13_TX_RECORDS_PER_KEY,
        };
        Ok(Self {
            version,
            tx: Keys::new(version, tx.0, tx.1)?,
            rx: Keys::new(version, rx.0, rx.1)?,
            kernel,
            tx_limit,
            owe_update: false,
            warnings_left: WARNING_ALERTS,
            key_updates_left: KEY_UPDATES,
        })
    }

    /// Bytes a record adds around its plaintext.
    pub fn overhead(&self) -> usize {
        match (self.version, self.tx.explicit) {
            (Version::Tls13, _) => HEADER + 1 + TAG,
            (Version::Tls12, true) => HEADER + EXPLICIT_NONCE + TAG,
            (Version::Tls12, false) => HEADER + TAG,
        }
    }

    /// Appends records carrying all of `data` as application data to `out`.
    pub fn seal_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        let records = data.len().div_ceil(MAX_PLAINTEXT);
        out.reserve(data.len() + records * self.overhead());
        for chunk in data.chunks(MAX_PLAINTEXT) {
            self.seal(APPLICATION_DATA, chunk, out)?;
        }
        Ok(())
    }

    /// Appends the alert `description` (fatal, unless it is close_notify) to `out`.
    pub fn seal_alert(&mut self, description: u8, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let level = if description == CLOSE_NOTIFY { 1 } else { 2 };
        self.seal(ALERT, &[level, description], out)
    }

    /// Sends a TLS 1.3 KeyUpdate (asking the peer to update too when `request`) and moves our
    /// sending keys on. An error in TLS 1.2, which has no key updates.
    pub fn update_tx(&mut self, request: bool, out: &mut Vec<u8>) -> Result<(), RecordError> {
        if self.version != Version::Tls13 {
            return Err(RecordError::Keys("TLS 1.2 has no key update".into()));
        }
        self.seal_raw(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, u8::from(request)], out)?;
        let (seq, secrets) = self
            .kernel
            .update_tx_secret()
            .map_err(|e| RecordError::Keys(e.to_string()))?;
        self.tx = Keys::new(self.version, seq, secrets)?;
        Ok(())
    }

    /// One record of type `typ` carrying `payload` (at most [`MAX_PLAINTEXT`]), renewing the
    /// keys first when they have sealed their share or the peer asked.
    #[inline]
    fn seal(&mut self, typ: u8, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        if self.owe_update || self.tx.seq >= self.tx_limit {
            self.renew_tx(out)?;
        }
        self.seal_raw(typ, payload, out)
    }

    /// Moves our sending keys on before the next record: the peer asked, or they sealed their
    /// share (TLS 1.2 has no key update: its connection ends there).
    #[cold]
    #[inline(never)]
    fn renew_tx(&mut self, out: &mut Vec<u8>) -> Result<(), RecordError> {
        if self.owe_update {
            self.owe_update = false;
            self.update_tx(false, out)?;
        }
        if self.tx.seq >= self.tx_limit {
            if self.version != Version::Tls13 {
                return Err(RecordError::SequenceExhausted);
            }
            self.update_tx(false, out)?;
        }
        Ok(())
    }

    fn seal_raw(&mut self, typ: u8, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        debug_assert!(payload.len() <= MAX_PLAINTEXT);
        let head_at = out.len();
        out.extend_from_slice(&[0; HEADER + EXPLICIT_NONCE][..self.head_len()]);
        let body_at = out.len();
        copy_in_pieces(payload, out);
        out.resize(out.len() + self.trailer_room(), 0);
        let framing = self.seal_body(typ, &mut out[body_at..])?;
        out[head_at..body_at].copy_from_slice(framing.head());
        out.extend_from_slice(&framing.tag);
        Ok(())
    }

    /// Bytes before a record's sealed body: the header, and TLS 1.2 AES-GCM's explicit nonce.
    fn head_len(&self) -> usize {
        if self.tx.explicit {
            HEADER + EXPLICIT_NONCE
        } else {
            HEADER
        }
    }

    /// Bytes of room a record's body needs after its payload: TLS 1.3's inner content type.
    pub fn trailer_room(&self) -> usize {
        usize::from(self.version == Version::Tls13)
    }

    /// Seals `body` in place as one application data record: `body` is its payload followed by
    /// [`trailer_room`](Self::trailer_room) bytes of room. `None` (and `body` untouched) when
    /// the payload is larger than a record's or our keys are due for renewal: then
    /// [`seal_data`](Self::seal_data), which renews them first.
    #[inline]
    pub fn seal_data_in_place(&mut self, body: &mut [u8]) -> Result<Option<Framing>, RecordError> {
        let fits =
            body.len() >= self.trailer_room() && body.len() - self.trailer_room() <= MAX_PLAINTEXT;
        if !fits || self.owe_update || self.tx.seq >= self.tx_limit {
            return Ok(None);
        }
        self.seal_body(APPLICATION_DATA, body).map(Some)
    }

    /// Seals one record's `body` in place (the payload, then [`trailer_room`](Self::trailer_room)
    /// bytes written here) and returns what goes around it.
    #[inline(always)]
    fn seal_body(&mut self, typ: u8, body: &mut [u8]) -> Result<Framing, RecordError> {
        let nonce = self.tx.nonce();
        let mut framing = Framing {
            head: [0; HEADER + EXPLICIT_NONCE],
            head_len: self.head_len(),
            tag: [0; TAG],
        };
        let tag = match self.version {
            Version::Tls13 => {
                // TLS 1.3 hides the real type inside the record, after the payload.
                if let Some(inner) = body.last_mut() {
                    *inner = typ;
                }
                let len = body.len() + TAG;
                let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
                framing.head[..HEADER].copy_from_slice(&header);
                self.tx.key.seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(header),
                    body,
                )
            }
            Version::Tls12 => {
                let explicit = framing.head_len - HEADER;
                let len = explicit + body.len() + TAG;
                framing.head[..HEADER].copy_from_slice(&[typ, 3, 3, (len >> 8) as u8, len as u8]);
                framing.head[HEADER..framing.head_len]
                    .copy_from_slice(&nonce[aead::NONCE_LEN - explicit..]);
                let aad = tls12_aad(self.tx.seq, typ, body.len());
                self.tx.key.seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    body,
                )
            }
        }
        .map_err(|_| RecordError::SequenceExhausted)?;
        framing.tag.copy_from_slice(tag.as_ref());
        self.tx.next()?;
        Ok(framing)
    }

    /// Opens the record at the front of `buf` in place. Handshake messages it carries are
    /// handled here (a KeyUpdate that asks for ours is answered before our next record).
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Opened, RecordError> {
        let Some(header) = buf.get(..HEADER) else {
            return Ok(Opened::Incomplete { total: HEADER });
        };
        let typ = header[0];
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if header[1] != 3 {
            return Err(RecordError::Decode);
        }
        if len > MAX_CIPHERTEXT {
            return Err(RecordError::RecordOverflow);
        }
        let total = HEADER + len;
        if buf.len() < total {
            return Ok(Opened::Incomplete { total });
        }
        let mut header_bytes = [0u8; HEADER];
        header_bytes.copy_from_slice(&buf[..HEADER]);
        let body = &mut buf[HEADER..total];
        let (typ, range) = match self.version {
            Version::Tls13 => self.open13(typ, header_bytes, body)?,
            Version::Tls12 => self.open12(typ, body)?,
        };
        self.rx.next()?;
        match typ {
            APPLICATION_DATA => {
                self.key_updates_left = KEY_UPDATES;
                Ok(Opened::Record {
                    consumed: total,
                    data: range,
                })
            }
            ALERT => match buf[range] {
                [_, CLOSE_NOTIFY] => Ok(Opened::Closed { consumed: total }),
                // TLS 1.2's warnings and TLS 1.3's user_canceled go on, as with rustls.
                [WARNING, description]
                    if self.warnings_left > 0
                        && (self.version == Version::Tls12 || description == USER_CANCELED) =>
                {
                    self.warnings_left -= 1;
                    Ok(Opened::Record {
                        consumed: total,
                        data: total..total,
                    })
                }
                [_, description] => Err(RecordError::PeerAlert(description)),
                _ => Err(RecordError::Decode),
            },
            HANDSHAKE if self.version == Version::Tls13 => {
                self.handshake(&buf[range])?;
                Ok(Opened::Record {
                    consumed: total,
                    data: total..total,
                })
            }
            CHANGE_CIPHER_SPEC | HANDSHAKE => Err(RecordError::Unexpected(typ)),
            other => Err(RecordError::Unexpected(other)),
        }
    }

    /// Decrypts a TLS 1.3 record's `body` (its header is `header`): the inner content type
    /// and where its content lies in the record.
    fn open13(
        &mut self,
        typ: u8,
        header: [u8; HEADER],
        body: &mut [u8],
    ) -> Result<(u8, std::ops::Range<usize>), RecordError> {
        if typ != APPLICATION_DATA {
            return Err(RecordError::Unexpected(typ));
        }
        if body.len() < TAG + 1 {
            return Err(RecordError::Decode);
        }
        let nonce = self.rx.nonce();
        let plain = self
            .rx
            .key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(header), body)
            .map_err(|_| RecordError::BadRecordMac)?;
        // The content type is the last byte that is not padding.
        let Some(end) = plain.iter().rposition(|b| *b != 0) else {
            return Err(RecordError::Unexpected(0));
        };
        let inner = plain[end];
        if end > MAX_PLAINTEXT {
            return Err(RecordError::RecordOverflow);
        }
        Ok((inner, HEADER..HEADER + end))
    }

    /// Decrypts a TLS 1.2 record's `body` of type `typ`: the type and where its content lies
    /// in the record.
    fn open12(
        &mut self,
        typ: u8,
        body: &mut [u8],
    ) -> Result<(u8, std::ops::Range<usize>), RecordError> {
        let explicit = if self.rx.explicit { EXPLICIT_NONCE } else { 0 };
        if body.len() < explicit + TAG {
            return Err(RecordError::Decode);
        }
        let plain_len = body.len() - explicit - TAG;
        if plain_len > MAX_PLAINTEXT {
            return Err(RecordError::RecordOverflow);
        }
        let mut nonce = self.rx.nonce();
        if explicit > 0 {
            nonce[aead::NONCE_LEN - explicit..].copy_from_slice(&body[..explicit]);
        }
        let aad = tls12_aad(self.rx.seq, typ, plain_len);
        self.rx
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body[explicit..],
            )
            .map_err(|_| RecordError::BadRecordMac)?;
        let start = HEADER + explicit;
        Ok((typ, start..start + plain_len))
    }

    /// TLS 1.3 handshake messages past the handshake: only KeyUpdate has a place here (a
    /// client does not send tickets, and no post-handshake authentication was asked for).
    /// Messages must be whole within their record.
    fn handshake(&mut self, mut messages: &[u8]) -> Result<(), RecordError> {
        if messages.is_empty() {
            return Err(RecordError::Decode);
        }
        while !messages.is_empty() {
            let [typ, a, b, c, rest @ ..] = messages else {
                return Err(RecordError::Decode);
            };
            let len = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
            let Some(body) = rest.get(..len) else {
                return Err(RecordError::Decode);
            };
            if *typ != KEY_UPDATE {
                return Err(RecordError::Unexpected(HANDSHAKE));
            }
            self.key_updates_left = self
                .key_updates_left
                .checked_sub(1)
                .ok_or(RecordError::Unexpected(HANDSHAKE))?;
            let requested = match body {
                [0] => false,
                [1] => true,
                _ => return Err(RecordError::Decode),
            };
            let (seq, secrets) = self
                .kernel
                .update_rx_secret()
                .map_err(|e| RecordError::Keys(e.to_string()))?;
            self.rx = Keys::new(self.version, seq, secrets)?;
            self.owe_update |= requested;
            messages = &rest[len..];
            // A key change ends the record (RFC 8446 5.1): what follows was sealed with the
            // old key.
            if !messages.is_empty() {
                return Err(RecordError::Unexpected(HANDSHAKE));
            }
        }
        Ok(())
    }
}
