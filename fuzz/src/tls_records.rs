//! The client leg's TLS record layer (`src/net/leg/tls/records.rs`) fed records sealed with keys
//! this check knows, so the fuzzer's bytes reach past the MAC: the rules that apply to what a
//! record carries (content types, padding, alerts, KeyUpdates, limits) are only reachable by
//! records that open. The module is private to the crate; it is sans I/O and needs only ring,
//! rustls' key types and thiserror, so it is included here by path, as `tests/properties.rs`
//! includes this file.
//!
//! Byte 0: bit 0 the version (TLS 1.3 or 1.2), bit 1 the AEAD (AES-256-GCM or
//! ChaCha20-Poly1305), bits 2-4 `k`, the records arriving in reads of 4^k bytes (at most 2^14).
//! Then operations, each `[op, a, b, n, n bytes]`:
//! - 0: application data, the n bytes (TLS 1.3: `a` bytes of padding);
//! - 1: a record of content type `a`, the n bytes (TLS 1.3: `b` bytes of padding);
//! - 2: a KeyUpdate of value `a` (0 or 1 move the check's keys on, as they move the layer's);
//! - 3: the n bytes as they are, no record around them;
//! - 4: an alert, level `a`, description `b`;
//! - 5: a TLS 1.3 record of `a * 256 + b` bytes of inner plaintext, all zeros but the first
//!   (the content type 23 there when `n` is even; else nothing but padding);
//! - 6: flips bit `a % 8` of byte `b` of the last record;
//! - 7: the layer seals the n bytes of its own: the check opens them with the layer's keys,
//!   first the KeyUpdate it owes when the peer asked for one.
//!
//! Checked: no panic; every offset inside the bytes given; the application data handed out is
//! exactly what the check sealed as such, record by record and in order; a record over the
//! limits, or of nothing but padding, is refused, and well-formed data never is; nothing opens
//! after close_notify; what the layer seals opens with its keys.

#[allow(dead_code)]
#[path = "../../src/net/leg/tls/records.rs"]
mod records;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::ConnectionTrafficSecrets;

use records::{
    KeySchedule, Opened, RecordError, Records, Version, ALERT, APPLICATION_DATA, HANDSHAKE, HEADER,
    KEY_UPDATE, MAX_PLAINTEXT, MAX_RECORD,
};

/// One direction's key material: a stand-in for TLS 1.3's key schedule moves it on by adding
/// one to every byte. The layer only needs keys that differ; the check mirrors the change.
#[derive(Clone)]
struct Material {
    key: [u8; 32],
    iv: [u8; 12],
    chacha: bool,
}

impl Material {
    fn secrets(&self) -> ConnectionTrafficSecrets {
        let (key, iv) = (AeadKey::from(self.key), Iv::from(self.iv));
        if self.chacha {
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv }
        } else {
            ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        }
    }

    fn next(&mut self) {
        for b in self.key.iter_mut().chain(self.iv.iter_mut()) {
            *b = b.wrapping_add(1);
        }
    }

    fn sealer(&self, version: Version) -> Sealer {
        let algorithm = if self.chacha {
            &aead::CHACHA20_POLY1305
        } else {
            &aead::AES_256_GCM
        };
        Sealer {
            key: LessSafeKey::new(UnboundKey::new(algorithm, &self.key).expect("a 32-byte key")),
            iv: self.iv,
            seq: 0,
            explicit: version == Version::Tls12 && !self.chacha,
            version,
        }
    }
}

/// The layer's key schedule in this check: both directions' material.
struct Stand {
    tx: Material,
    rx: Material,
}

impl KeySchedule for Stand {
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RecordError> {
        self.tx.next();
        Ok((0, self.tx.secrets()))
    }

    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), RecordError> {
        self.rx.next();
        Ok((0, self.rx.secrets()))
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

/// Seals and opens records as the peer, independently of the layer under test.
struct Sealer {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
    explicit: bool,
    version: Version,
}

impl Sealer {
    fn nonce(&self) -> [u8; 12] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }

    /// A record of type `typ` (TLS 1.3: hidden inside, before `padding` zeros) carrying
    /// `content`; `inner` instead gives TLS 1.3's whole inner plaintext.
    fn seal(&mut self, typ: u8, content: &[u8], padding: usize, inner: Option<&[u8]>) -> Vec<u8> {
        let nonce = self.nonce();
        let seq = self.seq;
        self.seq += 1;
        match self.version {
            Version::Tls13 => {
                let mut body = match inner {
                    Some(inner) => inner.to_vec(),
                    None => [content, &[typ], &vec![0; padding]].concat(),
                };
                let len = body.len() + 16;
                let header = [APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
                self.key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(header),
                        &mut body,
                    )
                    .expect("seal");
                [header.as_slice(), &body].concat()
            }
            Version::Tls12 => {
                let mut body = content.to_vec();
                let aad = tls12_aad(seq, typ, body.len());
                self.key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(aad),
                        &mut body,
                    )
                    .expect("seal");
                let explicit: &[u8] = if self.explicit { &nonce[4..] } else { &[] };
                let len = explicit.len() + body.len();
                let header = [typ, 3, 3, (len >> 8) as u8, len as u8];
                [header.as_slice(), explicit, &body].concat()
            }
        }
    }

    /// Opens the record at the front of `wire`: its type, its content, its length.
    fn open(&mut self, wire: &[u8]) -> (u8, Vec<u8>, usize) {
        assert!(wire.len() >= HEADER, "a record's header");
        let len = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        let total = HEADER + len;
        assert!(wire.len() >= total, "a whole record");
        let header: [u8; HEADER] = wire[..HEADER].try_into().expect("a header");
        let mut nonce = self.nonce();
        let explicit = if self.explicit { 8 } else { 0 };
        if explicit > 0 {
            nonce[4..].copy_from_slice(&wire[HEADER..HEADER + 8]);
        }
        let mut body = wire[HEADER + explicit..total].to_vec();
        let plain_len = body.len() - 16;
        let plain = match self.version {
            Version::Tls13 => self.key.open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut body,
            ),
            Version::Tls12 => {
                let aad = tls12_aad(self.seq, header[0], plain_len);
                self.key.open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    &mut body,
                )
            }
        }
        .expect("what the layer sealed opens with its keys")
        .to_vec();
        self.seq += 1;
        match self.version {
            Version::Tls13 => {
                let end = plain.iter().rposition(|b| *b != 0).expect("a content type");
                (plain[end], plain[..end].to_vec(), total)
            }
            Version::Tls12 => (header[0], plain, total),
        }
    }
}

/// What the check expects of the record it sealed at some offset.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    /// Application data: handed out as it is, unless an earlier rule ended the stream.
    Data(Vec<u8>),
    /// Refused whatever came before: over the limits, or nothing but padding.
    Refused,
    /// Depends on the rules (alerts, handshake messages, other types): not handed out.
    NoData,
}

/// One sealed record's place in the stream.
struct Placed {
    start: usize,
    end: usize,
    expect: Expect,
    /// A bit flipped in it: it may fail, or (a TLS 1.2 header byte outside the additional
    /// data) still open, or end elsewhere.
    tampered: bool,
}

/// What RFC 8446 5.4 makes of a TLS 1.3 inner plaintext: the content type is its last byte
/// that is not zero.
fn expect13(inner: &[u8]) -> Expect {
    if inner.len() > MAX_PLAINTEXT + 1 {
        return Expect::Refused;
    }
    match inner.iter().rposition(|b| *b != 0) {
        None => Expect::Refused,
        Some(end) if inner[end] == APPLICATION_DATA => Expect::Data(inner[..end].to_vec()),
        Some(_) => Expect::NoData,
    }
}

/// Whether a record of type `typ` carrying `content` (TLS 1.3: then `padding` zeros) is a
/// well-formed KeyUpdate, which moves the layer's receiving keys on.
fn moves_keys(version: Version, typ: u8, content: &[u8], padding: usize) -> bool {
    if version != Version::Tls13 {
        return false;
    }
    let inner = [content, &[typ], &vec![0; padding]].concat();
    match inner.iter().rposition(|b| *b != 0) {
        Some(end) => {
            inner[end] == HANDSHAKE && matches!(inner[..end], [KEY_UPDATE, 0, 0, 1, 0 | 1])
        }
        None => false,
    }
}

/// What the check expects of a record of type `typ` carrying `content` (TLS 1.3: then
/// `padding` zeros).
fn expect(version: Version, typ: u8, content: &[u8], padding: usize) -> Expect {
    match version {
        Version::Tls13 => expect13(&[content, &[typ], &vec![0; padding]].concat()),
        Version::Tls12 if typ == APPLICATION_DATA => Expect::Data(content.to_vec()),
        Version::Tls12 => Expect::NoData,
    }
}

/// A short byte string from the input: `n` bytes at `at`.
fn take(data: &[u8], at: usize, n: usize) -> &[u8] {
    &data[at.min(data.len())..(at + n).min(data.len())]
}

pub fn tls_records(data: &[u8]) {
    let Some((&control, mut ops)) = data.split_first() else {
        return;
    };
    let version = if control & 1 == 0 {
        Version::Tls13
    } else {
        Version::Tls12
    };
    let chacha = control & 2 != 0;
    let largest = 1usize << (2 * usize::from((control >> 2) & 7)).min(14);
    let client = Material {
        key: [0x11; 32],
        iv: [0x22; 12],
        chacha,
    };
    let server = Material {
        key: [0x33; 32],
        iv: [0x44; 12],
        chacha,
    };
    let stand = Stand {
        tx: server.clone(),
        rx: client.clone(),
    };
    let mut layer = Records::with_schedule(
        version,
        (0, server.secrets()),
        (0, client.secrets()),
        stand,
        1 << 23,
    )
    .expect("the layer takes its keys");
    // The peer's view: its sending keys (the layer's receiving ones) and the layer's.
    let mut peer_material = client;
    let mut peer = peer_material.sealer(version);
    let mut leg_material = server;
    let mut leg = leg_material.sealer(version);

    // Build the peer's wire, and note what each sealed record should give.
    let mut wire = Vec::new();
    let mut placed: Vec<Placed> = Vec::new();
    // The layer's own records, sealed between reads: checked as they come.
    let mut own: Vec<(usize, Vec<u8>)> = Vec::new();
    while let [op, a, b, n, rest @ ..] = ops {
        let n = usize::from(*n);
        let content = take(rest, 0, n);
        ops = &rest[content.len()..];
        let start = wire.len();
        let (record, expect) = match op % 8 {
            0 => (
                peer.seal(APPLICATION_DATA, content, usize::from(*a), None),
                expect(version, APPLICATION_DATA, content, usize::from(*a)),
            ),
            1 | 2 => {
                let message = [KEY_UPDATE, 0, 0, 1, *a];
                let (typ, content, padding) = if op % 8 == 1 {
                    (*a, content, usize::from(*b))
                } else {
                    (HANDSHAKE, &message[..], 0)
                };
                let record = peer.seal(typ, content, padding, None);
                // A well-formed KeyUpdate moves the layer's keys on: the peer's follow.
                if moves_keys(version, typ, content, padding) {
                    peer_material.next();
                    peer = peer_material.sealer(version);
                }
                (record, expect(version, typ, content, padding))
            }
            3 if content.is_empty() => continue,
            3 => (content.to_vec(), Expect::NoData),
            4 => (peer.seal(ALERT, &[*a, *b], 0, None), Expect::NoData),
            5 if version == Version::Tls13 => {
                let len = (usize::from(*a) << 8 | usize::from(*b)).max(1);
                let mut inner = vec![0u8; len];
                if n % 2 == 0 {
                    inner[0] = APPLICATION_DATA;
                }
                (peer.seal(0, &[], 0, Some(&inner)), expect13(&inner))
            }
            6 => {
                if let Some(last) = placed.last_mut() {
                    let at = last.start + usize::from(*b) % (last.end - last.start).max(1);
                    if at < wire.len() {
                        wire[at] ^= 1 << (*a % 8);
                        last.tampered = true;
                    }
                }
                continue;
            }
            7 => {
                own.push((placed.len(), content.to_vec()));
                continue;
            }
            _ => continue,
        };
        wire.extend_from_slice(&record);
        placed.push(Placed {
            start,
            end: wire.len(),
            expect,
            // Raw bytes have no record boundary the check can vouch for.
            tampered: op % 8 == 3,
        });
    }

    // Feed the wire in reads of up to `largest` bytes, opening records as a leg does.
    let mut buf: Vec<u8> = Vec::new();
    let mut next = 0;
    let mut fed = 0;
    let mut index = 0;
    let mut sealed_own = 0;
    let mut ended = false;
    let mut closed = false;
    while !ended {
        let more = (wire.len() - fed).min(largest);
        if more == 0 {
            // Nothing more comes: what is left is a record cut short.
            break;
        }
        buf.extend_from_slice(&wire[fed..fed + more]);
        fed += more;
        loop {
            // The layer's own records that come before the peer's record `index`.
            while sealed_own < own.len() && own[sealed_own].0 <= index {
                let mut out = Vec::new();
                let sent = layer.seal_data(&own[sealed_own].1, &mut out);
                sealed_own += 1;
                // All of it, or (a TLS 1.2 key used up part way) what the records before the
                // limit carry.
                let Ok(sent) = sent else {
                    continue;
                };
                let mut at = 0;
                let mut got = Vec::new();
                while at < out.len() {
                    let (typ, content, len) = leg.open(&out[at..]);
                    at += len;
                    if typ == HANDSHAKE {
                        assert_eq!(content[..4], [KEY_UPDATE, 0, 0, 1], "a KeyUpdate");
                        leg_material.next();
                        leg = leg_material.sealer(version);
                    } else {
                        assert_eq!(typ, APPLICATION_DATA, "the layer seals data as data");
                        got.extend_from_slice(&content);
                    }
                }
                assert_eq!(got, own[sealed_own - 1].1[..sent], "what the layer sealed");
            }
            let at_record = placed.get(index).filter(|p| p.start == next);
            let available = buf.len() - next;
            match layer.open(&mut buf[next..]) {
                Ok(Opened::Incomplete { total }) => {
                    assert!(
                        total > available && total <= MAX_RECORD,
                        "need {total} of {available}"
                    );
                    break;
                }
                Ok(Opened::Record { consumed, data }) => {
                    assert!(
                        consumed <= available && consumed >= HEADER,
                        "consumed {consumed}"
                    );
                    assert!(
                        data.start >= HEADER && data.start <= data.end && data.end <= consumed,
                        "data {data:?} in a record of {consumed}"
                    );
                    let out = &buf[next + data.start..next + data.end];
                    let at_record = at_record.expect("only records the check sealed open");
                    if !at_record.tampered {
                        assert_eq!(next + consumed, at_record.end, "a record ends as sealed");
                    }
                    match &at_record.expect {
                        Expect::Data(sent) => assert_eq!(out, &sent[..], "data as sealed"),
                        Expect::Refused => panic!("a record over the limits was taken"),
                        Expect::NoData => assert!(out.is_empty(), "nothing but data handed out"),
                    }
                    next += consumed;
                    index += 1;
                }
                Ok(Opened::Closed { consumed }) => {
                    assert!(consumed <= available, "consumed {consumed}");
                    next += consumed;
                    closed = true;
                    ended = true;
                    break;
                }
                Err(e) => {
                    if let Some(p) = at_record.filter(|p| !p.tampered) {
                        assert!(
                            !matches!(p.expect, Expect::Data(_)),
                            "well-formed data refused: {e}"
                        );
                    }
                    let _ = e.alert();
                    ended = true;
                    break;
                }
            }
        }
    }
    // Whatever follows close_notify is never opened.
    if closed {
        let rest = &mut buf[next..];
        assert!(
            matches!(layer.open(rest), Ok(Opened::Closed { .. })),
            "a record opened after close_notify"
        );
    }
}
