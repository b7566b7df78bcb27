//! The capture file format (see `docs/src/capture-format.md`), encoded and decoded without I/O.
//!
//! A file is a fixed header, then blocks; a block is a deflate-compressed run of whole records
//! with its lengths and a CRC-32 of the records, so a reader can stop at the first block that is
//! cut short or damaged and say where, having kept every record before it. Each record carries
//! its own length, so a reader skips kinds it does not know: a kind added later (such as
//! [`KIND_MOVED`]) leaves the version as it is, so an older reader still reads the file, without
//! what the new kind says, and a newer one reads files written before the kind existed.

use std::io::{Read, Write};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::{Compression, Crc};

use crate::wire::protocol::response::cmd;

pub const MAGIC: &[u8; 8] = b"MLBCAP\r\n";
pub const VERSION: u16 = 1;
/// Magic, version, flags (0), capture start (unix µs), file index.
pub const HEADER_LEN: usize = 8 + 2 + 2 + 8 + 4;
/// Compressed length, records' length, CRC-32 of the records.
pub const BLOCK_HEADER_LEN: usize = 12;
/// A block holds at most this much (uncompressed): a reader refuses larger lengths as corrupt.
pub const MAX_BLOCK: usize = 8 << 20;
/// Statement payloads are kept up to this many bytes; longer ones are cut and marked.
pub const MAX_PAYLOAD: usize = 1 << 20;

pub const KIND_SESSION_START: u8 = 1;
pub const KIND_COMMAND: u8 = 2;
pub const KIND_RESPONSE: u8 = 3;
pub const KIND_SESSION_END: u8 = 4;
/// Added within version 1: a session of a pool across backends moved; its later commands ran on
/// the backend named.
pub const KIND_MOVED: u8 = 5;

/// Session start flag: the session was open before the capture began (captured from its next
/// command; its earlier state, such as a `USE` or prepared statements, is not in the file).
pub const STARTED_BEFORE: u8 = 1;
/// Command flag: the payload was cut at [`MAX_PAYLOAD`].
pub const TRUNCATED: u8 = 1;
/// Command flag: the command may carry a password and was written without its text or values
/// (see `capture::redact`). A COM_QUERY or COM_STMT_PREPARE is its command byte and the text's
/// digest (8 bytes, little-endian, of its first [`DIGEST_LEN`] bytes); a COM_STMT_EXECUTE,
/// COM_STMT_BULK_EXECUTE or COM_STMT_SEND_LONG_DATA its command byte and statement id.
pub const REDACTED: u8 = 2;
/// Bytes of a statement text digested for a redacted record (and by a replay's report).
pub const DIGEST_LEN: usize = 1024;

/// Whether the server answers a captured command (all but COM_QUIT, COM_STMT_CLOSE and
/// COM_STMT_SEND_LONG_DATA): a response record follows it, and a replay waits for one.
pub fn answered(command: u8) -> bool {
    !matches!(
        command,
        cmd::QUIT | cmd::STMT_CLOSE | cmd::STMT_SEND_LONG_DATA
    )
}

/// The statement id in bytes 1..5 of a payload that names one (COM_STMT_EXECUTE, ...).
pub fn statement_id(payload: &[u8]) -> Option<u32> {
    let b = payload.get(1..5)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The digest a redacted COM_QUERY or COM_STMT_PREPARE record carries.
pub fn redacted_digest(payload: &[u8]) -> Option<u64> {
    let b: [u8; 8] = payload.get(1..9)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// The fixed start of every capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// When the capture started, in microseconds since the Unix epoch.
    pub started_unix_us: u64,
    /// Files of one capture are numbered from 1.
    pub index: u32,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..10].copy_from_slice(&VERSION.to_le_bytes());
        h[12..20].copy_from_slice(&self.started_unix_us.to_le_bytes());
        h[20..24].copy_from_slice(&self.index.to_le_bytes());
        h
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() < HEADER_LEN {
            return Err(FormatError::ShortHeader);
        }
        if &b[..8] != MAGIC {
            return Err(FormatError::NotACapture);
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != VERSION {
            return Err(FormatError::Version(version));
        }
        Ok(Self {
            started_unix_us: le_u64(&b[12..20]),
            index: u32::from_le_bytes([b[20], b[21], b[22], b[23]]),
        })
    }
}

/// Who a captured session was, as it started (or as the capture first saw it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionStart {
    pub flags: u8,
    pub capabilities: u32,
    /// The client's character set id, 0 when the proxy did not keep it.
    pub charset: u8,
    pub user: String,
    pub schema: String,
    pub pool: String,
    pub backend: String,
    pub client: String,
}

/// One command as the client sent it (a COM_CHANGE_USER without its auth data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Numbers the session's commands that expect a response, for [`Response::seq`].
    pub seq: u32,
    pub flags: u8,
    /// The payload, command byte first.
    pub payload: Vec<u8>,
}

impl Command {
    pub fn command(&self) -> u8 {
        self.payload.first().copied().unwrap_or(0)
    }
}

/// What the backend answered to the command of the same `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Response {
    pub seq: u32,
    pub command: u8,
    pub error: bool,
    pub rows: u64,
    pub affected: u64,
    pub latency_us: u64,
    /// The statement id a COM_STMT_PREPARE got (0 otherwise).
    pub prepared: u32,
    /// The ERR packet's error code (0 if the response was no error).
    pub error_code: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    SessionStart(SessionStart),
    Command(Command),
    Response(Response),
    SessionEnd,
    /// The session's commands from here on ran on `backend` (a pool across backends moved it).
    Moved {
        backend: String,
    },
}

/// One record: which session, when (µs since the capture started), what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub session: u64,
    pub t_us: u64,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("file shorter than its header")]
    ShortHeader,
    #[error("not a mysql-lb capture file (bad magic)")]
    NotACapture,
    #[error("capture format version {0}, this build reads version {VERSION}")]
    Version(u16),
    #[error("block cut short")]
    ShortBlock,
    #[error("block lengths out of range")]
    BadBlockLength,
    #[error("block does not decompress")]
    Decompress,
    #[error("block checksum mismatch")]
    Checksum,
    #[error("record cut short or malformed")]
    BadRecord,
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let b = &b[..b.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

impl Record {
    /// Appends the record's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let kind = match self.body {
            Body::SessionStart(_) => KIND_SESSION_START,
            Body::Command(_) => KIND_COMMAND,
            Body::Response(_) => KIND_RESPONSE,
            Body::SessionEnd => KIND_SESSION_END,
            Body::Moved { .. } => KIND_MOVED,
        };
        out.push(kind);
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.session.to_le_bytes());
        out.extend_from_slice(&self.t_us.to_le_bytes());
        match &self.body {
            Body::SessionStart(s) => {
                out.push(s.flags);
                out.extend_from_slice(&s.capabilities.to_le_bytes());
                out.push(s.charset);
                for text in [&s.user, &s.schema, &s.pool, &s.backend, &s.client] {
                    put_str(out, text);
                }
            }
            Body::Command(c) => {
                out.extend_from_slice(&c.seq.to_le_bytes());
                out.push(c.flags);
                out.extend_from_slice(&c.payload);
            }
            Body::Response(r) => {
                out.extend_from_slice(&r.seq.to_le_bytes());
                out.push(r.command);
                out.push(u8::from(r.error));
                out.extend_from_slice(&r.rows.to_le_bytes());
                out.extend_from_slice(&r.affected.to_le_bytes());
                out.extend_from_slice(&r.latency_us.to_le_bytes());
                out.extend_from_slice(&r.prepared.to_le_bytes());
                out.extend_from_slice(&r.error_code.to_le_bytes());
            }
            Body::SessionEnd => {}
            Body::Moved { backend } => put_str(out, backend),
        }
        let len = (out.len() - len_at - 4) as u32;
        out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Appends a command record to `out` straight from the payload it carries (what
    /// [`encode`](Self::encode) writes for a [`Body::Command`], without building one).
    pub fn encode_command(out: &mut Vec<u8>, session: u64, t_us: u64, command: (u32, u8, &[u8])) {
        let (seq, flags, payload) = command;
        out.push(KIND_COMMAND);
        let len = 8 + 8 + 4 + 1 + payload.len();
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&session.to_le_bytes());
        out.extend_from_slice(&t_us.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.push(flags);
        out.extend_from_slice(payload);
    }

    /// Decodes the records of one block's bytes; None for a kind this version does not know
    /// (skipped by the caller).
    pub fn decode_all(mut b: &[u8]) -> Result<Vec<Record>, FormatError> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let (kind, rest) = b.split_first().ok_or(FormatError::BadRecord)?;
            let len = rest.get(..4).ok_or(FormatError::BadRecord)?;
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let body = rest.get(4..4 + len).ok_or(FormatError::BadRecord)?;
            b = &rest[4 + len..];
            if let Some(r) = Self::decode_one(*kind, body)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    fn decode_one(kind: u8, b: &[u8]) -> Result<Option<Record>, FormatError> {
        if !(KIND_SESSION_START..=KIND_MOVED).contains(&kind) {
            return Ok(None);
        }
        let mut r = Reader(b);
        let session = r.u64()?;
        let t_us = r.u64()?;
        let body = match kind {
            KIND_SESSION_START => Body::SessionStart(SessionStart {
                flags: r.u8()?,
                capabilities: r.u32()?,
                charset: r.u8()?,
                user: r.str()?,
                schema: r.str()?,
                pool: r.str()?,
                backend: r.str()?,
                client: r.str()?,
            }),
            KIND_COMMAND => Body::Command(Command {
                seq: r.u32()?,
                flags: r.u8()?,
                payload: r.0.to_vec(),
            }),
            KIND_RESPONSE => Body::Response(Response {
                seq: r.u32()?,
                command: r.u8()?,
                error: r.u8()? != 0,
                rows: r.u64()?,
                affected: r.u64()?,
                latency_us: r.u64()?,
                prepared: r.u32()?,
                error_code: {
                    let b = r.take(2)?;
                    u16::from_le_bytes([b[0], b[1]])
                },
            }),
            KIND_MOVED => Body::Moved { backend: r.str()? },
            _ => Body::SessionEnd,
        };
        Ok(Some(Record {
            session,
            t_us,
            body,
        }))
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], FormatError> {
        if self.0.len() < n {
            return Err(FormatError::BadRecord);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, FormatError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(le_u64(self.take(8)?))
    }
    fn str(&mut self) -> Result<String, FormatError> {
        let b = self.take(2)?;
        let n = u16::from_le_bytes([b[0], b[1]]) as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

/// Compresses encoded records into one block (header included).
pub fn encode_block(records: &[u8]) -> Vec<u8> {
    let mut crc = Crc::new();
    crc.update(records);
    let mut enc = DeflateEncoder::new(
        Vec::with_capacity(records.len() / 3 + 64),
        Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let compressed = enc
        .write_all(records)
        .and_then(|()| enc.finish())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(BLOCK_HEADER_LEN + compressed.len());
    out.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&compressed);
    out
}

/// Decodes the block at the start of `b`: its records and how many bytes it took.
pub fn decode_block(b: &[u8]) -> Result<(Vec<Record>, usize), FormatError> {
    let head = b.get(..BLOCK_HEADER_LEN).ok_or(FormatError::ShortBlock)?;
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let (clen, rlen, sum) = (word(0) as usize, word(4) as usize, word(8));
    if rlen > MAX_BLOCK || clen > MAX_BLOCK + 1024 {
        return Err(FormatError::BadBlockLength);
    }
    let compressed = b
        .get(BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + clen)
        .ok_or(FormatError::ShortBlock)?;
    let mut records = Vec::with_capacity(rlen);
    DeflateDecoder::new(compressed)
        .take(rlen as u64 + 1)
        .read_to_end(&mut records)
        .map_err(|_| FormatError::Decompress)?;
    if records.len() != rlen {
        return Err(FormatError::Decompress);
    }
    let mut crc = Crc::new();
    crc.update(&records);
    if crc.sum() != sum {
        return Err(FormatError::Checksum);
    }
    Ok((Record::decode_all(&records)?, BLOCK_HEADER_LEN + clen))
}

/// Everything valid in one file's bytes, and where (and why) reading stopped early, if it did.
#[derive(Debug)]
pub struct Decoded {
    pub header: FileHeader,
    pub records: Vec<Record>,
    pub stopped: Option<(usize, FormatError)>,
}

/// Reads a whole file's bytes up to its last valid block.
pub fn decode_file(b: &[u8]) -> Result<Decoded, FormatError> {
    let header = FileHeader::decode(b)?;
    let mut at = HEADER_LEN;
    let mut records = Vec::new();
    let mut stopped = None;
    while at < b.len() {
        match decode_block(&b[at..]) {
            Ok((mut r, used)) => {
                records.append(&mut r);
                at += used;
            }
            Err(e) => {
                stopped = Some((at, e));
                break;
            }
        }
    }
    Ok(Decoded {
        header,
        records,
        stopped,
    })
}

#[cfg(test)]
mod tests;
