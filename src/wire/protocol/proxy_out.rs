//! The PROXY protocol header (HAProxy's, versions 1 and 2) that mysql-lb writes first on a
//! backend connection, so a server with `proxy_protocol_networks` sees the client's address
//! rather than the proxy's: in `USER()`, the processlist, host-restricted grants and per-host
//! limits.
//!
//! Encoding only, into a small fixed buffer (no allocation on the connect path). A header is
//! built from the session's client addresses, or from none (a unix-socket client, whose
//! address the server cannot use): then v2 sends `LOCAL` and v1 `UNKNOWN`, and the server keeps
//! the connection's own address. Addresses of two families (an IPv4 client on an IPv6
//! listener) are sent as IPv6, the IPv4 one mapped (`::ffff:a.b.c.d`); two IPv4-mapped IPv6
//! addresses (a dual-stack listener's IPv4 clients) are sent as plain IPv4, since that is the
//! address the client really has and what host grants name.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The version of the header a backend is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Text: `PROXY TCP4 src dst sport dport\r\n`.
    V1,
    /// Binary: a 12-byte signature, then command, family, length and the addresses.
    V2,
}

/// The twelve bytes every v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Version 2, command PROXY: the addresses that follow are the client's.
const V2_PROXY: u8 = 0x21;
/// Version 2, command LOCAL: the connection is the sender's own (addresses ignored).
const V2_LOCAL: u8 = 0x20;
const V2_UNSPEC: u8 = 0x00;
/// Address family (high nibble) and transport (low nibble): AF_INET or AF_INET6, STREAM.
const V2_TCP4: u8 = 0x11;
const V2_TCP6: u8 = 0x21;
/// The longest header this module writes: v2 with two IPv6 addresses (16 + 36 bytes); v1's
/// longest (two full IPv6 addresses) is 104 bytes, within the spec's 107.
pub const MAX_HEADER: usize = 108;

/// One encoded header, ready to write.
#[derive(Clone)]
pub struct Header {
    buf: [u8; MAX_HEADER],
    len: usize,
}

impl Header {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Header").field(&self.as_bytes()).finish()
    }
}

/// The header saying that a connection from `source` reached the proxy at `destination`
/// (`addrs`), or, with None, that the proxy speaks for itself.
pub fn encode(version: Version, addrs: Option<(SocketAddr, SocketAddr)>) -> Header {
    let addrs = addrs.map(|(src, dst)| same_family(src, dst));
    let mut h = Header {
        buf: [0; MAX_HEADER],
        len: 0,
    };
    match version {
        Version::V1 => encode_v1(&mut h, addrs),
        Version::V2 => encode_v2(&mut h, addrs),
    }
    h
}

/// Both addresses in one family: IPv4 where both can be, else IPv6 (see the module docs).
fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    let (s, d) = (unmapped(src), unmapped(dst));
    if s.is_ipv4() == d.is_ipv4() {
        return (s, d);
    }
    (to_v6(s), to_v6(d))
}

fn unmapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

fn to_v6(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

/// Appends text to a header's buffer; the buffer is larger than any v1 line, so nothing is cut.
struct Text<'a>(&'a mut Header);

impl std::fmt::Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.0.len + s.len();
        let dst = self.0.buf.get_mut(self.0.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.0.len = end;
        Ok(())
    }
}

fn encode_v1(h: &mut Header, addrs: Option<(SocketAddr, SocketAddr)>) {
    let mut out = Text(h);
    let written = match addrs {
        Some((src, dst)) => write!(
            out,
            "PROXY {} {} {} {} {}\r\n",
            if src.is_ipv4() { "TCP4" } else { "TCP6" },
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port()
        ),
        None => out.write_str("PROXY UNKNOWN\r\n"),
    };
    // The longest line fits MAX_HEADER (see the test with two full IPv6 addresses).
    debug_assert!(written.is_ok());
}

fn encode_v2(h: &mut Header, addrs: Option<(SocketAddr, SocketAddr)>) {
    h.buf[..12].copy_from_slice(&V2_SIGNATURE);
    let mut at = 16;
    let mut put = |bytes: &[u8]| {
        h.buf[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    let (command, family) = match addrs {
        None => (V2_LOCAL, V2_UNSPEC),
        Some((src, dst)) => {
            let family = match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    put(&s.octets());
                    put(&d.octets());
                    V2_TCP4
                }
                (s, d) => {
                    put(&v6(s).octets());
                    put(&v6(d).octets());
                    V2_TCP6
                }
            };
            put(&src.port().to_be_bytes());
            put(&dst.port().to_be_bytes());
            (V2_PROXY, family)
        }
    };
    let body = u16::try_from(at - 16).unwrap_or(0);
    h.buf[12] = command;
    h.buf[13] = family;
    h.buf[14..16].copy_from_slice(&body.to_be_bytes());
    h.len = at;
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V6(ip) => ip,
        IpAddr::V4(ip) => ip.to_ipv6_mapped(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn pair(src: &str, dst: &str) -> Option<(SocketAddr, SocketAddr)> {
        Some((addr(src), addr(dst)))
    }

    fn text(h: &Header) -> &str {
        std::str::from_utf8(h.as_bytes()).unwrap()
    }

    #[test]
    fn v1_ipv4_names_source_then_destination() {
        let h = encode(Version::V1, pair("127.0.0.2:50123", "127.0.0.1:4040"));
        assert_eq!(text(&h), "PROXY TCP4 127.0.0.2 127.0.0.1 50123 4040\r\n");
    }

    #[test]
    fn v1_ipv6_uses_the_compressed_text_form() {
        let h = encode(Version::V1, pair("[2001:db8::7]:1", "[::1]:3306"));
        assert_eq!(text(&h), "PROXY TCP6 2001:db8::7 ::1 1 3306\r\n");
    }

    #[test]
    fn v1_without_addresses_is_unknown() {
        assert_eq!(text(&encode(Version::V1, None)), "PROXY UNKNOWN\r\n");
    }

    #[test]
    fn v1_longest_line_fits_the_spec_limit() {
        let full = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
        let h = encode(Version::V1, pair(full, full));
        let line = text(&h);
        assert!(line.len() <= 107, "{} bytes", line.len());
        assert!(line.starts_with("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "));
        assert!(line.ends_with(" 65535 65535\r\n"));
    }

    #[test]
    fn v2_ipv4_fixture() {
        let h = encode(Version::V2, pair("127.0.0.2:50123", "10.1.2.3:4040"));
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0x00, 12]);
        want.extend_from_slice(&[127, 0, 0, 2, 10, 1, 2, 3]);
        want.extend_from_slice(&50123u16.to_be_bytes());
        want.extend_from_slice(&4040u16.to_be_bytes());
        assert_eq!(h.as_bytes(), want.as_slice());
    }

    #[test]
    fn v2_ipv6_fixture() {
        let h = encode(Version::V2, pair("[2001:db8::7]:258", "[::1]:3306"));
        let bytes = h.as_bytes();
        assert_eq!(bytes.len(), 16 + 36);
        assert_eq!(&bytes[..12], &V2_SIGNATURE);
        assert_eq!(&bytes[12..16], &[0x21, 0x21, 0x00, 36]);
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        src[15] = 7;
        assert_eq!(&bytes[16..32], &src);
        let mut dst = [0u8; 16];
        dst[15] = 1;
        assert_eq!(&bytes[32..48], &dst);
        assert_eq!(&bytes[48..], &[0x01, 0x02, 0x0c, 0xea]);
    }

    #[test]
    fn v2_without_addresses_is_local_with_no_body() {
        let h = encode(Version::V2, None);
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
        assert_eq!(h.as_bytes(), want.as_slice());
    }

    #[test]
    fn mixed_families_are_sent_as_ipv6_with_the_ipv4_one_mapped() {
        let addrs = pair("127.0.0.2:5000", "[::1]:4040");
        assert_eq!(
            text(&encode(Version::V1, addrs)),
            "PROXY TCP6 ::ffff:127.0.0.2 ::1 5000 4040\r\n"
        );
        let v2 = encode(Version::V2, addrs);
        assert_eq!(v2.as_bytes()[13], 0x21);
        assert_eq!(
            &v2.as_bytes()[16..32],
            &"::ffff:127.0.0.2".parse::<Ipv6Addr>().unwrap().octets()
        );
    }

    #[test]
    fn ipv4_mapped_pairs_from_a_dual_stack_listener_are_sent_as_ipv4() {
        let addrs = pair("[::ffff:127.0.0.2]:5000", "[::ffff:127.0.0.1]:4040");
        assert_eq!(
            text(&encode(Version::V1, addrs)),
            "PROXY TCP4 127.0.0.2 127.0.0.1 5000 4040\r\n"
        );
        assert_eq!(encode(Version::V2, addrs).as_bytes()[13], 0x11);
    }

    fn any_addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::from((ip, p))),
        ]
    }

    proptest! {
        /// Whatever the addresses: v1 is one CRLF-terminated line within the spec's 107 bytes
        /// whose fields read back as the addresses sent; v2's length field matches its body and
        /// the family its size.
        #[test]
        fn headers_are_well_formed_for_any_addresses(src in any_addr(), dst in any_addr()) {
            let (s, d) = same_family(src, dst);
            let v1 = encode(Version::V1, Some((src, dst)));
            let line = std::str::from_utf8(v1.as_bytes()).unwrap();
            prop_assert!(line.len() <= 107);
            let fields: Vec<&str> = line.strip_suffix("\r\n").unwrap().split(' ').collect();
            prop_assert_eq!(fields.len(), 6);
            prop_assert_eq!(fields[2].parse::<IpAddr>().unwrap(), s.ip());
            prop_assert_eq!(fields[3].parse::<IpAddr>().unwrap(), d.ip());
            prop_assert_eq!(fields[4].parse::<u16>().unwrap(), src.port());
            prop_assert_eq!(fields[5].parse::<u16>().unwrap(), dst.port());

            let v2 = encode(Version::V2, Some((src, dst)));
            let b = v2.as_bytes();
            prop_assert_eq!(&b[..12], &V2_SIGNATURE);
            prop_assert_eq!(usize::from(u16::from_be_bytes([b[14], b[15]])), b.len() - 16);
            let want = if s.is_ipv4() { (V2_TCP4, 12) } else { (V2_TCP6, 36) };
            prop_assert_eq!((b[13], b.len() - 16), want);
        }
    }
}
