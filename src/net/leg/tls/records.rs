//! The client leg's record layer past the handshake: TLS 1.2 and 1.3 records sealed and opened
//! with ring's AEAD, sans I/O.
//!
//! rustls negotiates (see [`super::accept`]) and then hands over the traffic keys, the sequence
//! numbers and a [`KernelConnection`], which derives the next keys on a TLS 1.3 key update.
//! Everything else is here: the reason is the cost per query. rustls copies every record's
//! plaintext into a `Vec` of its own and encrypts every record into a new `Vec`; here a record
//! is opened in place in the buffer it was read into, and sealed in place: in the relay's buffer
//! ([`Records::seal_data_in_place`], no copy), or in the one outgoing buffer, which is reused
//! (one copy, from the relay's buffer). Owning the records means owning what a TLS library
//! enforces on them, so the rules are listed here, each with the alert it answers (RFC 8446,
//! RFC 5246).
//!
//! What a record may carry past the handshake, and what happens to it:
//! - application data: handed out;
//! - close_notify: the clean end of the stream; whatever follows it is ignored (RFC 8446 6.1);
//! - a warning: TLS 1.2's, or TLS 1.3's user_canceled (which some clients, Java's among them,
//!   send for nothing), up to 4 in a connection as rustls and BoringSSL allow, then
//!   unexpected_message; any other TLS 1.3 warning is an error (RFC 8446 6), answered with
//!   decode_error as rustls does; an alert level other than warning or fatal, illegal_parameter;
//!   a fatal alert ends the stream without an answer;
//! - TLS 1.3 KeyUpdate: the receiving keys move on, and when the peer asks, ours too, with a
//!   KeyUpdate of our own before our next record (one for all the requests that came
//!   meanwhile, RFC 8446 4.6.3, so requests from a client that reads nothing queue nothing). A
//!   value other than 0 or 1 is illegal_parameter; anything after a KeyUpdate in its record is
//!   unexpected_message (a key change ends the record, RFC 8446 5.1). The peer may send 32
//!   KeyUpdates with no application data between, as rustls and BoringSSL allow, plus one for
//!   each record we sealed (a credit its data does not reset: a client that pipelines sends
//!   its next query before them): a peer may answer every record it reads past its own key
//!   limit with a KeyUpdate until ours arrives (Java's JSSE does, so a result streamed to it
//!   draws one per 16 KiB record already on its way), and a budget that ignores our own records
//!   cuts it off. A peer that sends KeyUpdates to a leg that sends nothing still gets
//!   unexpected_message at the 33rd;
//! - any other handshake message (a TLS 1.2 renegotiation, a TLS 1.3 message that has no place
//!   after the handshake), a change_cipher_spec, an unknown type: unexpected_message.
//!
//! Limits: a record's ciphertext at most 2^14 + 256 bytes, its plaintext at most 2^14, and TLS
//! 1.3's inner plaintext (content, type and padding) at most 2^14 + 1 (RFC 8446 5.2, 5.4):
//! record_overflow; a TLS 1.3 record with no content type (nothing but padding):
//! unexpected_message; a record that does not open or is too short for its tag: bad_record_mac. Sequence numbers never
//! wrap. Our TLS 1.3 keys are renewed with a KeyUpdate every 2^23 records sealed, far below
//! AES-GCM's limit (2^24.5, RFC 8446 5.5). TLS 1.2 has no key update: a connection that has
//! sealed as many records as its AEAD allows under one key (rustls' figure, 2^24 for AES-GCM)
//! is cut, the last record kept for a close_notify so the peer sees a clean end rather than a
//! reset. Once we sealed close_notify or a fatal alert, nothing more is sealed.

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

pub const CHANGE_CIPHER_SPEC: u8 = 20;
pub const ALERT: u8 = 21;
pub const HANDSHAKE: u8 = 22;
pub const APPLICATION_DATA: u8 = 23;

pub const KEY_UPDATE: u8 = 24;
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;
const WARNING: u8 = 1;
const FATAL: u8 = 2;

/// Warning alerts a connection may receive (some clients, Java's among them, send a pointless
/// user_canceled), and KeyUpdates between two application data records (more for each record
/// we seal meanwhile).
const WARNING_ALERTS: u8 = 4;
const KEY_UPDATES: u64 = 32;

/// TLS 1.3 keys are renewed after this many records sent, far below any AEAD's
/// confidentiality limit (AES-GCM: 2^24.5 in RFC 8446 5.5).
const TLS13_TX_RECORDS_PER_KEY: u64 = 1 << 23;

/// Why the stream cannot go on. Most are an alert for the peer (see [`RecordError::alert`]).
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
    #[error("the peer sent a TLS 1.3 record with no content type (nothing but padding)")]
    NoContentType,
    #[error("the peer sent more in a TLS record after a KeyUpdate, which ends it")]
    AfterKeyUpdate,
    #[error(
        "the peer sent more TLS KeyUpdates with no data between than it may ({KEY_UPDATES}, \
         and one for each record we sent)"
    )]
    TooManyKeyUpdates,
    #[error("the peer sent more than {WARNING_ALERTS} TLS warning alerts")]
    TooManyWarnings,
    #[error("the peer sent {0}")]
    IllegalParameter(&'static str),
    #[error("the peer sent TLS 1.3 warning alert {0}, which TLS 1.3 does not have")]
    Tls13Warning(u8),
    #[error("the peer sent TLS alert {0}")]
    PeerAlert(u8),
    #[error("the TLS sequence numbers are exhausted")]
    SequenceExhausted,
    #[error(
        "the TLS 1.2 connection sealed as many records as its cipher allows under one key \
         (TLS 1.2 has no key update): it ends with close_notify"
    )]
    KeyUsedUp,
    #[error("the TLS stream is closed for writing (close_notify or an alert was sent)")]
    WriteClosed,
    #[error("the TLS keys cannot be used: {0}")]
    Keys(String),
}

impl RecordError {
    /// The alert telling the peer why, if one is sent.
    pub fn alert(&self) -> Option<u8> {
        match self {
            Self::BadRecordMac => Some(20),
            Self::RecordOverflow => Some(22),
            Self::Decode | Self::Tls13Warning(_) => Some(50),
            Self::Unexpected(_)
            | Self::NoContentType
            | Self::AfterKeyUpdate
            | Self::TooManyKeyUpdates
            | Self::TooManyWarnings => Some(10),
            Self::IllegalParameter(_) => Some(47),
            // The peer already said why; nothing to answer.
            Self::PeerAlert(_) => None,
            // close_notify is sealed already, or an alert was.
            Self::KeyUsedUp | Self::WriteClosed => None,
            Self::SequenceExhausted | Self::Keys(_) => Some(80),
        }
    }
}

/// Where the next traffic keys come from at a TLS 1.3 key update: rustls' [`KernelConnection`]
/// on the client leg. The seam lets the fuzz target and tests build [`Records`] with keys they
/// know, so what they feed reaches past the MAC.
pub trait KeySchedule {
    /// Our next sending keys and their first sequence number.
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RecordError>;
    /// The peer's next sending keys and their first sequence number.
    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RecordError>;
}

impl KeySchedule for KernelConnection<ServerConnectionData> {
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RecordError> {
        self.update_tx_secret()
            .map_err(|e| RecordError::Keys(e.to_string()))
    }

    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RecordError> {
        self.update_rx_secret()
            .map_err(|e| RecordError::Keys(e.to_string()))
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
pub struct Records<K = KernelConnection<ServerConnectionData>> {
    version: Version,
    tx: Keys,
    rx: Keys,
    /// Where the next keys come from after a TLS 1.3 key update.
    kernel: K,
    /// Records sealed under one key before it is renewed (TLS 1.3) or, TLS 1.2, before the
    /// connection is cut: one short of the AEAD's limit, the last kept for close_notify.
    tx_limit: u64,
    /// The peer asked for a key update: ours goes out before our next record. Requests that
    /// come while we send nothing are answered by that one update (RFC 8446 4.6.3), so a
    /// client that floods requests and reads nothing queues nothing here.
    owe_update: bool,
    /// Warning alerts the peer may still send (TLS 1.2; TLS 1.3 allows only user_canceled),
    /// and KeyUpdates before its next application data: as many as rustls (and BoringSSL)
    /// allow, plus one for each record we sealed since (see the module's documentation), so a
    /// client may not make us spin on them.
    warnings_left: u8,
    key_updates_left: u64,
    /// close_notify came: nothing after it counts.
    rx_closed: bool,
    /// We sealed close_notify or a fatal alert: nothing more is sealed, and every seal says
    /// why (a TLS 1.2 key used up, or the stream closed for writing).
    tx_closed: Option<RecordError>,
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
        let records_per_key = match kernel.negotiated_cipher_suite() {
            SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
            SupportedCipherSuite::Tls13(_) => TLS13_TX_RECORDS_PER_KEY,
        };
        Self::with_schedule(version, tx, rx, kernel, records_per_key)
    }
}

impl<K: KeySchedule> Records<K> {
    /// The record layer for `version` with these keys; `kernel` gives the next ones at a TLS
    /// 1.3 key update. Our keys seal at most `records_per_key` records: TLS 1.3 renews them
    /// then, TLS 1.2 ends the connection.
    pub fn with_schedule(
        version: Version,
        tx: (u64, ConnectionTrafficSecrets),
        rx: (u64, ConnectionTrafficSecrets),
        kernel: K,
        records_per_key: u64,
    ) -> Result<Self, RecordError> {
        let tx_limit = match version {
            Version::Tls13 => records_per_key.max(1),
            Version::Tls12 => records_per_key.saturating_sub(1),
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
            rx_closed: false,
            tx_closed: None,
        })
    }

    /// Lowers the number of records our keys seal (TLS 1.3: before a KeyUpdate of ours; TLS
    /// 1.2: before the cut), so tests reach it.
    #[cfg(test)]
    pub fn limit_records_per_key(&mut self, records: u64) {
        self.tx_limit = match self.version {
            Version::Tls13 => records.max(1),
            Version::Tls12 => records.saturating_sub(1),
        };
    }

    /// Whether close_notify or a fatal alert of ours is sealed: nothing more will be.
    pub fn write_closed(&self) -> bool {
        self.tx_closed.is_some()
    }

    /// Why nothing more may be sealed, once [`write_closed`](Self::write_closed).
    pub fn closed_reason(&self) -> RecordError {
        self.tx_closed.clone().unwrap_or(RecordError::WriteClosed)
    }

    /// TLS 1.2: our key has sealed all the records it may but the close_notify kept for last.
    fn key_used_up(&self) -> bool {
        self.version == Version::Tls12 && self.tx.seq >= self.tx_limit
    }

    /// Bytes a record adds around its plaintext.
    pub fn overhead(&self) -> usize {
        match (self.version, self.tx.explicit) {
            (Version::Tls13, _) => HEADER + 1 + TAG,
            (Version::Tls12, true) => HEADER + EXPLICIT_NONCE + TAG,
            (Version::Tls12, false) => HEADER + TAG,
        }
    }

    /// Appends records carrying `data` as application data to `out`: how many bytes of it,
    /// all unless a TLS 1.2 key is used up part way (the rest is refused at the next call). A
    /// call that finds the key used up seals the close_notify kept for it and returns
    /// [`RecordError::KeyUsedUp`], so the peer reads whole writes, then a clean end.
    pub fn seal_data(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<usize, RecordError> {
        let records = data.len().div_ceil(MAX_PLAINTEXT);
        out.reserve(data.len() + records * self.overhead());
        let mut sealed = 0;
        for chunk in data.chunks(MAX_PLAINTEXT) {
            if sealed > 0 && self.key_used_up() {
                break;
            }
            self.seal(APPLICATION_DATA, chunk, out)?;
            sealed += chunk.len();
        }
        Ok(sealed)
    }

    /// Appends the alert `description` (fatal, unless it is close_notify) to `out`; nothing is
    /// sealed after it.
    pub fn seal_alert(&mut self, description: u8, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let level = if description == CLOSE_NOTIFY {
            WARNING
        } else {
            FATAL
        };
        self.seal(ALERT, &[level, description], out)?;
        self.tx_closed = Some(RecordError::WriteClosed);
        Ok(())
    }

    /// Sends a TLS 1.3 KeyUpdate (asking the peer to update too when `request`) and moves our
    /// sending keys on. An error in TLS 1.2, which has no key updates.
    pub fn update_tx(&mut self, request: bool, out: &mut Vec<u8>) -> Result<(), RecordError> {
        if self.version != Version::Tls13 {
            return Err(RecordError::Keys("TLS 1.2 has no key update".into()));
        }
        if let Some(e) = &self.tx_closed {
            return Err(e.clone());
        }
        self.seal_raw(HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, u8::from(request)], out)?;
        let (seq, secrets) = self.kernel.next_tx()?;
        self.tx = Keys::new(self.version, seq, secrets)?;
        Ok(())
    }

    /// One record of type `typ` carrying `payload` (at most [`MAX_PLAINTEXT`]), renewing the
    /// keys first when they have sealed their share or the peer asked.
    #[inline]
    fn seal(&mut self, typ: u8, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        if let Some(e) = &self.tx_closed {
            return Err(e.clone());
        }
        if self.owe_update || self.tx.seq >= self.tx_limit {
            self.renew_tx(typ, out)?;
        }
        self.seal_raw(typ, payload, out)
    }

    /// Moves our sending keys on before the next record, of type `typ`: the peer asked, or
    /// they sealed their share. TLS 1.2 has no key update: its connection ends there, with the
    /// record kept for close_notify (or the fatal alert that goes instead).
    #[cold]
    #[inline(never)]
    fn renew_tx(&mut self, typ: u8, out: &mut Vec<u8>) -> Result<(), RecordError> {
        if self.owe_update {
            self.owe_update = false;
            self.update_tx(false, out)?;
        }
        if self.tx.seq >= self.tx_limit {
            match self.version {
                Version::Tls13 => self.update_tx(false, out)?,
                Version::Tls12 if typ == ALERT => {}
                Version::Tls12 => {
                    self.seal_alert(CLOSE_NOTIFY, out)?;
                    self.tx_closed = Some(RecordError::KeyUsedUp);
                    return Err(RecordError::KeyUsedUp);
                }
            }
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
    /// the payload is larger than a record's, our keys are due for renewal or nothing may be
    /// sealed: then [`seal_data`](Self::seal_data), which renews them first or says why not.
    #[inline]
    pub fn seal_data_in_place(&mut self, body: &mut [u8]) -> Result<Option<Framing>, RecordError> {
        let fits =
            body.len() >= self.trailer_room() && body.len() - self.trailer_room() <= MAX_PLAINTEXT;
        if !fits || self.owe_update || self.tx_closed.is_some() || self.tx.seq >= self.tx_limit {
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
        // The peer may answer each record it reads with a KeyUpdate (see the module's
        // documentation).
        self.key_updates_left = self.key_updates_left.saturating_add(1);
        Ok(framing)
    }

    /// Opens the record at the front of `buf` in place. Handshake messages it carries are
    /// handled here (a KeyUpdate that asks for ours is answered before our next record).
    pub fn open(&mut self, buf: &mut [u8]) -> Result<Opened, RecordError> {
        if self.rx_closed {
            // RFC 8446 6.1: what follows close_notify is ignored.
            return Ok(Opened::Closed {
                consumed: buf.len(),
            });
        }
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
        let nothing = Opened::Record {
            consumed: total,
            data: total..total,
        };
        match typ {
            APPLICATION_DATA => {
                // Credit for our records still on their way stays: a client that pipelines
                // may answer each with a KeyUpdate after its own data.
                self.key_updates_left = self.key_updates_left.max(KEY_UPDATES);
                Ok(Opened::Record {
                    consumed: total,
                    data: range,
                })
            }
            ALERT => {
                if self.alert(&buf[range])? {
                    Ok(Opened::Closed { consumed: total })
                } else {
                    Ok(nothing)
                }
            }
            HANDSHAKE if self.version == Version::Tls13 => {
                self.handshake(&buf[range])?;
                Ok(nothing)
            }
            other => Err(RecordError::Unexpected(other)),
        }
    }

    /// An alert's two bytes: `true` for close_notify, `false` for a warning that lets the
    /// stream go on, an error for anything else.
    fn alert(&mut self, alert: &[u8]) -> Result<bool, RecordError> {
        let [level, description] = *alert else {
            return Err(RecordError::Decode);
        };
        if level != WARNING && level != FATAL {
            return Err(RecordError::IllegalParameter("an alert of unknown level"));
        }
        if description == CLOSE_NOTIFY {
            self.rx_closed = true;
            return Ok(true);
        }
        if level == FATAL {
            return Err(RecordError::PeerAlert(description));
        }
        // TLS 1.2's warnings and TLS 1.3's user_canceled go on, as with rustls.
        if self.version == Version::Tls13 && description != USER_CANCELED {
            return Err(RecordError::Tls13Warning(description));
        }
        self.warnings_left = self
            .warnings_left
            .checked_sub(1)
            .ok_or(RecordError::TooManyWarnings)?;
        Ok(false)
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
        // Too short for a tag: it cannot decrypt (RFC 8446 5.2); a tag alone decrypts to no
        // content type, below.
        if body.len() < TAG {
            return Err(RecordError::BadRecordMac);
        }
        // The whole inner plaintext, padding included, is bound by the plaintext's limit and
        // its type byte (RFC 8446 5.4); known from the length before decrypting.
        if body.len() - TAG > MAX_PLAINTEXT + 1 {
            return Err(RecordError::RecordOverflow);
        }
        let nonce = self.rx.nonce();
        let plain = self
            .rx
            .key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(header), body)
            .map_err(|_| RecordError::BadRecordMac)?;
        // The content type is the last byte that is not padding.
        let Some(end) = plain.iter().rposition(|b| *b != 0) else {
            return Err(RecordError::NoContentType);
        };
        Ok((plain[end], HEADER..HEADER + end))
    }

    /// Decrypts a TLS 1.2 record's `body` of type `typ`: the type and where its content lies
    /// in the record.
    fn open12(
        &mut self,
        typ: u8,
        body: &mut [u8],
    ) -> Result<(u8, std::ops::Range<usize>), RecordError> {
        let explicit = if self.rx.explicit { EXPLICIT_NONCE } else { 0 };
        // Too short for its nonce and tag: it cannot decrypt (RFC 5246 6.2.3.3).
        if body.len() < explicit + TAG {
            return Err(RecordError::BadRecordMac);
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
    /// client does not send tickets, and no post-handshake authentication was asked for). A
    /// message must be whole within its record, and a KeyUpdate must end it.
    fn handshake(&mut self, messages: &[u8]) -> Result<(), RecordError> {
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
        let requested = match body {
            [0] => false,
            [1] => true,
            [_] => {
                return Err(RecordError::IllegalParameter(
                    "a KeyUpdate of unknown value",
                ))
            }
            _ => return Err(RecordError::Decode),
        };
        // A key change ends the record (RFC 8446 5.1): what follows was sealed with the old
        // key.
        if rest.len() > len {
            return Err(RecordError::AfterKeyUpdate);
        }
        self.key_updates_left = self
            .key_updates_left
            .checked_sub(1)
            .ok_or(RecordError::TooManyKeyUpdates)?;
        let (seq, secrets) = self.kernel.next_rx()?;
        self.rx = Keys::new(self.version, seq, secrets)?;
        self.owe_update |= requested;
        Ok(())
    }
}
