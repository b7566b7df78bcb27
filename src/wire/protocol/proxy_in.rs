//! PROXY protocol headers (v1 text, v2 binary) as an L4 load balancer sends them in front of the
//! MySQL stream, so the proxy learns the client's real address.
//!
//! Sans-IO and incremental: [`parse`] is called on whatever has arrived so far and answers
//! "need more", a header and how many bytes it took, or an error as soon as the bytes already
//! seen can no longer become a valid header — a wrong byte closes the connection at once, not
//! after the timeout. Nothing is allocated from a length the peer sent: v2 lengths are checked
//! against [`MAX_HEADER_LEN`] before anything else, and TLVs are skipped, never read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use thiserror::Error;

/// The v2 header's fixed 12-byte signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 header starts with this.
pub const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest v1 line the specification allows, CRLF included.
pub const V1_MAX_LEN: usize = 107;
/// The most a v2 header may take, its 16 fixed bytes, addresses and TLVs together. The
/// specification allows up to 16 + 65535 bytes; what load balancers send (addresses, and TLVs
/// such as AWS's VPC endpoint id or an SSL summary) stays far below 1 KiB.
pub const MAX_HEADER_LEN: usize = 1024;
/// v2's fixed part: signature, version/command, family/protocol, length.
const V2_FIXED_LEN: usize = 16;

/// What a header says about the connection. `None` for a LOCAL command (a health check of the
/// load balancer itself), `UNKNOWN`, or an address family without IP addresses: the connection's
/// own peer address is then the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// 1 or 2.
    pub version: u8,
    /// The client as the load balancer saw it.
    pub source: Option<SocketAddr>,
    /// The address the client connected to (the load balancer's listener).
    pub destination: Option<SocketAddr>,
}

/// Why bytes from the client are not a PROXY protocol header the proxy accepts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProxyHeaderError {
    #[error("client sent no PROXY protocol header (first bytes {0:02x?})")]
    NotProxy(Vec<u8>),
    #[error("client's PROXY v1 header has no CRLF within {V1_MAX_LEN} bytes")]
    V1TooLong,
    #[error("client's PROXY v1 header is malformed: {0}")]
    V1Malformed(&'static str),
    #[error("client's PROXY v2 header has version {0}, expected 2")]
    V2Version(u8),
    #[error("client's PROXY v2 header has command {0:#x} (only LOCAL 0x0 and PROXY 0x1 exist)")]
    V2Command(u8),
    #[error("client's PROXY v2 header has address family/protocol {0:#04x}, not TCP over IPv4/IPv6, UNIX or UNSPEC")]
    V2Family(u8),
    #[error("client's PROXY v2 header is {len} bytes, more than the {MAX_HEADER_LEN} accepted")]
    V2TooLong { len: usize },
    #[error("client's PROXY v2 header has {len} address bytes, too few for family {family:#04x} (needs {needed})")]
    V2AddressTooShort {
        family: u8,
        len: usize,
        needed: usize,
    },
}

/// Parses the header at the start of `buf`: `Ok(None)` while `buf` is a proper beginning of a
/// header, `Ok(Some((header, consumed)))` once it is whole (the bytes after `consumed` belong to
/// the stream behind it), or the error that no more bytes could fix.
pub fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, ProxyHeaderError> {
    if starts_like(buf, &V2_SIGNATURE) {
        if buf.len() < V2_SIGNATURE.len() {
            return Ok(None);
        }
        return parse_v2(buf);
    }
    if starts_like(buf, V1_PREFIX) {
        if buf.len() < V1_PREFIX.len() {
            return Ok(None);
        }
        return parse_v1(buf);
    }
    Err(ProxyHeaderError::NotProxy(
        buf[..buf.len().min(16)].to_vec(),
    ))
}

/// Whether `buf` begins (or could begin, being shorter) with `prefix`. Empty input could.
fn starts_like(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    buf[..n] == prefix[..n]
}

/// Whether `head` is the start of a PROXY header of either version (at least 4 bytes are needed
/// to say so): what a client outside `accept_proxy_protocol` is recognised by.
pub fn is_header_start(head: &[u8]) -> bool {
    head.len() >= 4 && (starts_like(head, V1_PREFIX) || starts_like(head, &V2_SIGNATURE))
}

/// The MySQL packet length a client appears to announce when its first bytes are a PROXY
/// header (v1, v2) — a length far beyond any handshake packet, so the handshake reader refuses
/// it as too large and the refusal can say what it really was.
pub const AS_PACKET_LENGTHS: [usize; 2] = [
    u32::from_le_bytes([b'P', b'R', b'O', 0]) as usize,
    u32::from_le_bytes([b'\r', b'\n', b'\r', 0]) as usize,
];

// ---------------------------------------------------------------------------------------------
// v1

fn parse_v1(buf: &[u8]) -> Result<Option<(Header, usize)>, ProxyHeaderError> {
    use ProxyHeaderError::V1Malformed;
    let window = &buf[..buf.len().min(V1_MAX_LEN)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        // Only printable ASCII may come before the CR: anything else fails at once.
        if window.iter().any(|&b| !(0x20..0x7f).contains(&b)) {
            return Err(V1Malformed("a byte that is not printable ASCII"));
        }
        return if window.len() == V1_MAX_LEN {
            Err(ProxyHeaderError::V1TooLong)
        } else {
            Ok(None)
        };
    };
    if window[..cr].iter().any(|&b| !(0x20..0x7f).contains(&b)) {
        return Err(V1Malformed("a byte that is not printable ASCII"));
    }
    match window.get(cr + 1) {
        None if cr + 1 < V1_MAX_LEN => return Ok(None),
        None => return Err(ProxyHeaderError::V1TooLong),
        Some(b'\n') => {}
        _ => return Err(V1Malformed("CR not followed by LF")),
    }
    let line =
        std::str::from_utf8(&window[V1_PREFIX.len()..cr]).map_err(|_| V1Malformed("not ASCII"))?;
    let header = parse_v1_line(line)?;
    Ok(Some((header, cr + 2)))
}

/// The part after "PROXY " up to the CRLF.
fn parse_v1_line(line: &str) -> Result<Header, ProxyHeaderError> {
    use ProxyHeaderError::V1Malformed;
    let unknown = Header {
        version: 1,
        source: None,
        destination: None,
    };
    if line == "UNKNOWN" || line.starts_with("UNKNOWN ") {
        // The specification says a receiver ignores whatever follows UNKNOWN.
        return Ok(unknown);
    }
    let mut fields = line.split(' ');
    let v6 = match fields.next() {
        Some("TCP4") => false,
        Some("TCP6") => true,
        _ => return Err(V1Malformed("protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let (Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(V1Malformed(
            "expected exactly: source, destination, source port, destination port, \
             separated by single spaces",
        ));
    };
    let src = v1_ip(src, v6)?;
    let dst = v1_ip(dst, v6)?;
    let sport = v1_port(sport)?;
    let dport = v1_port(dport)?;
    Ok(Header {
        version: 1,
        source: Some(SocketAddr::new(src, sport)),
        destination: Some(SocketAddr::new(dst, dport)),
    })
}

fn v1_ip(s: &str, v6: bool) -> Result<IpAddr, ProxyHeaderError> {
    use ProxyHeaderError::V1Malformed;
    if v6 {
        s.parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| V1Malformed("an address is not an IPv6 address (TCP6)"))
    } else {
        // std refuses leading zeros ("010.0.0.1"), which some parsers read as octal.
        s.parse::<Ipv4Addr>()
            .map(IpAddr::V4)
            .map_err(|_| V1Malformed("an address is not a dotted IPv4 address (TCP4)"))
    }
}

/// 0..=65535 in plain decimal: no sign, no leading zero, nothing else.
fn v1_port(s: &str) -> Result<u16, ProxyHeaderError> {
    let plain = !s.is_empty()
        && s.len() <= 5
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    plain
        .then(|| s.parse::<u16>().ok())
        .flatten()
        .ok_or(ProxyHeaderError::V1Malformed(
            "a port is not a decimal number 0..65535",
        ))
}

// ---------------------------------------------------------------------------------------------
// v2

const CMD_LOCAL: u8 = 0x0;
const CMD_PROXY: u8 = 0x1;
const TCP_V4: u8 = 0x11;
const TCP_V6: u8 = 0x21;
const UNSPEC: u8 = 0x00;
const UNIX_STREAM: u8 = 0x31;
const UNIX_DGRAM: u8 = 0x32;

fn parse_v2(buf: &[u8]) -> Result<Option<(Header, usize)>, ProxyHeaderError> {
    // Each fixed byte is checked as soon as it is there.
    if let Some(&ver_cmd) = buf.get(12) {
        if ver_cmd >> 4 != 2 {
            return Err(ProxyHeaderError::V2Version(ver_cmd >> 4));
        }
        if !matches!(ver_cmd & 0x0f, CMD_LOCAL | CMD_PROXY) {
            return Err(ProxyHeaderError::V2Command(ver_cmd & 0x0f));
        }
    }
    if let Some(&family) = buf.get(13) {
        if !matches!(family, TCP_V4 | TCP_V6 | UNSPEC | UNIX_STREAM | UNIX_DGRAM) {
            return Err(ProxyHeaderError::V2Family(family));
        }
    }
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    let total = V2_FIXED_LEN + len;
    if total > MAX_HEADER_LEN {
        return Err(ProxyHeaderError::V2TooLong { len: total });
    }
    let (command, family) = (buf[12] & 0x0f, buf[13]);
    let needed = match family {
        TCP_V4 => 12,
        TCP_V6 => 36,
        UNIX_STREAM | UNIX_DGRAM => 216,
        _ => 0,
    };
    // LOCAL carries no addresses worth checking; with PROXY the block must fit in the length.
    if command == CMD_PROXY && len < needed {
        return Err(ProxyHeaderError::V2AddressTooShort {
            family,
            len,
            needed,
        });
    }
    let Some(body) = buf.get(V2_FIXED_LEN..total) else {
        return Ok(None);
    };
    let (source, destination) = match (command, family) {
        (CMD_PROXY, TCP_V4) => v2_inet(body),
        (CMD_PROXY, TCP_V6) => v2_inet6(body),
        _ => (None, None),
    };
    let header = Header {
        version: 2,
        source,
        destination,
    };
    Ok(Some((header, total)))
}

/// src addr, dst addr (4 bytes each), src port, dst port; `body` is at least 12 bytes.
fn v2_inet(body: &[u8]) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let ip = |at: usize| {
        let mut a = [0u8; 4];
        a.copy_from_slice(&body[at..at + 4]);
        IpAddr::V4(Ipv4Addr::from(a))
    };
    let port = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
    (
        Some(SocketAddr::new(ip(0), port(8))),
        Some(SocketAddr::new(ip(4), port(10))),
    )
}

/// As [`v2_inet`] with 16-byte addresses; `body` is at least 36 bytes.
fn v2_inet6(body: &[u8]) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let ip = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&body[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    let port = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
    (
        Some(SocketAddr::new(ip(0), port(32))),
        Some(SocketAddr::new(ip(16), port(34))),
    )
}

#[cfg(test)]
mod tests;
