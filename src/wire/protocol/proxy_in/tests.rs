use super::*;
use proptest::prelude::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn whole(buf: &[u8]) -> (Header, usize) {
    parse(buf).unwrap().unwrap()
}

/// A test-only encoder (the proxy's own, for backends, lives elsewhere): v1 or v2 with the
/// PROXY command, or v2 LOCAL when `addrs` is None; `tlvs` bytes appended to a v2 header.
fn encode(version: u8, addrs: Option<(SocketAddr, SocketAddr)>, tlvs: &[u8]) -> Vec<u8> {
    if version == 1 {
        return match addrs {
            Some((s, d)) => {
                let family = if s.is_ipv4() { "TCP4" } else { "TCP6" };
                format!(
                    "PROXY {family} {} {} {} {}\r\n",
                    s.ip(),
                    d.ip(),
                    s.port(),
                    d.port()
                )
                .into_bytes()
            }
            None => b"PROXY UNKNOWN\r\n".to_vec(),
        };
    }
    let mut out = V2_SIGNATURE.to_vec();
    let mut body = Vec::new();
    let (cmd, family) = match addrs {
        Some((SocketAddr::V4(s), SocketAddr::V4(d))) => {
            body.extend_from_slice(&s.ip().octets());
            body.extend_from_slice(&d.ip().octets());
            body.extend_from_slice(&s.port().to_be_bytes());
            body.extend_from_slice(&d.port().to_be_bytes());
            (0x21, 0x11)
        }
        Some((SocketAddr::V6(s), SocketAddr::V6(d))) => {
            body.extend_from_slice(&s.ip().octets());
            body.extend_from_slice(&d.ip().octets());
            body.extend_from_slice(&s.port().to_be_bytes());
            body.extend_from_slice(&d.port().to_be_bytes());
            (0x21, 0x21)
        }
        Some(_) => panic!("mixed families"),
        None => (0x20, 0x00),
    };
    body.extend_from_slice(tlvs);
    out.push(cmd);
    out.push(family);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

// Fixtures: the examples of haproxy's doc/proxy-protocol.txt (section 2.1 and 2.2).

#[test]
fn v1_tcp4_example_from_the_specification() {
    let line = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
    assert_eq!(line.len(), 56, "the specification's worst case for TCP4");
    let (h, n) = whole(line);
    assert_eq!(n, 56);
    assert_eq!(h.version, 1);
    assert_eq!(h.source, Some(sa("255.255.255.255:65535")));
    assert_eq!(h.destination, Some(sa("255.255.255.255:65535")));
}

#[test]
fn v1_tcp6_longest_example_from_the_specification() {
    let line = b"PROXY TCP6 ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
    // The specification writes the addresses out; `f...f` shortens them in its prose.
    let full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let text = format!("PROXY TCP6 {full} {full} 65535 65535\r\n");
    assert_eq!(text.len(), 104);
    let (h, n) = whole(text.as_bytes());
    assert_eq!(n, 104);
    assert_eq!(h.source, Some(sa(&format!("[{full}]:65535"))));
    assert!(parse(line).is_err(), "f...f is not an address");
}

#[test]
fn v1_unknown_ignores_the_rest_of_the_line() {
    let (h, n) = whole(b"PROXY UNKNOWN\r\n");
    assert_eq!((h.source, h.destination, n), (None, None, 15));
    let full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let longest = format!("PROXY UNKNOWN {full} {full} 65535 65535\r\n");
    assert_eq!(
        longest.len(),
        V1_MAX_LEN,
        "the specification's 107-byte worst case"
    );
    let (h, n) = whole(longest.as_bytes());
    assert_eq!((h.source, n), (None, 107));
}

#[test]
fn v1_leaves_the_bytes_behind_the_header() {
    let mut buf = b"PROXY TCP4 10.9.8.7 192.0.2.1 5555 3306\r\n".to_vec();
    let header_len = buf.len();
    buf.extend_from_slice(b"\x05\x00\x00\x01hello");
    let (h, n) = whole(&buf);
    assert_eq!(n, header_len);
    assert_eq!(h.source, Some(sa("10.9.8.7:5555")));
    assert_eq!(h.destination, Some(sa("192.0.2.1:3306")));
}

#[test]
fn v1_needs_more_until_the_crlf() {
    let line = b"PROXY TCP4 10.9.8.7 192.0.2.1 5555 3306\r\n";
    for cut in 0..line.len() {
        assert_eq!(parse(&line[..cut]), Ok(None), "cut at {cut}");
    }
}

#[test]
fn v1_field_syntax_is_strict() {
    let bad: &[&[u8]] = &[
        b"PROXY TCP4 10.9.8.7 192.0.2.1 +5555 3306\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 05555 3306\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 65536 3306\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 55x5 3306\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 5555  3306\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 5555\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 5555 3306 7\r\n",
        b"PROXY TCP4 010.9.8.7 192.0.2.1 5555 3306\r\n",
        b"PROXY TCP4 10.9.8 192.0.2.1 5555 3306\r\n",
        b"PROXY TCP4 ::1 ::1 5555 3306\r\n",
        b"PROXY TCP6 10.9.8.7 192.0.2.1 5555 3306\r\n",
        b"PROXY UDP4 10.9.8.7 192.0.2.1 5555 3306\r\n",
        b"PROXY tcp4 10.9.8.7 192.0.2.1 5555 3306\r\n",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 5555 3306\r\r",
        b"PROXY TCP4 10.9.8.7 192.0.2.1 5555 3306\n",
        b"PROXY \r\n",
        b"PROXY UNKNOWNX\r\n",
    ];
    for b in bad {
        assert!(
            matches!(parse(b), Err(ProxyHeaderError::V1Malformed(_))),
            "{:?}: {:?}",
            String::from_utf8_lossy(b),
            parse(b)
        );
    }
}

#[test]
fn v1_without_crlf_within_107_bytes_is_too_long() {
    let mut line = b"PROXY UNKNOWN ".to_vec();
    line.resize(V1_MAX_LEN, b'a');
    assert_eq!(parse(&line), Err(ProxyHeaderError::V1TooLong));
    // A CR as the 107th byte would put the LF at the 108th.
    line[V1_MAX_LEN - 1] = b'\r';
    assert_eq!(parse(&line), Err(ProxyHeaderError::V1TooLong));
}

#[test]
fn v1_control_bytes_fail_before_the_line_ends() {
    assert!(matches!(
        parse(b"PROXY TCP4 1\x00"),
        Err(ProxyHeaderError::V1Malformed(_))
    ));
}

#[test]
fn v2_tcp4_as_haproxy_sends_it() {
    // A header haproxy's send-proxy-v2 wrote (172.19.0.1:42578 -> 172.19.0.3:80), then HTTP.
    let bytes: &[u8] = &[
        0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x11, 0x00,
        0x0c, 0xac, 0x13, 0x00, 0x01, 0xac, 0x13, 0x00, 0x03, 0xa6, 0x52, 0x00, 0x50, b'G', b'E',
        b'T',
    ];
    let (h, n) = whole(bytes);
    assert_eq!(n, 28);
    assert_eq!(h.version, 2);
    assert_eq!(h.source, Some(sa("172.19.0.1:42578")));
    assert_eq!(h.destination, Some(sa("172.19.0.3:80")));
}

#[test]
fn v2_tcp6_with_tlvs_skipped() {
    let s = sa("[2001:db8::7]:5555");
    let d = sa("[2001:db8::1]:3306");
    // PP2_TYPE_ALPN and an AWS-like custom TLV: skipped, counted in the length.
    let tlvs = [0x01, 0x00, 0x02, b'h', b'2', 0xea, 0x00, 0x03, 1, 2, 3];
    let bytes = encode(2, Some((s, d)), &tlvs);
    assert_eq!(bytes.len(), 16 + 36 + tlvs.len());
    let (h, n) = whole(&bytes);
    assert_eq!(
        (h.source, h.destination, n),
        (Some(s), Some(d), bytes.len())
    );
}

#[test]
fn v2_local_and_unspec_and_unix_carry_no_address() {
    let local = encode(2, None, &[]);
    assert_eq!(
        whole(&local),
        (
            Header {
                version: 2,
                source: None,
                destination: None
            },
            16
        )
    );
    // LOCAL with an INET block (as some balancers' health checks send): still no address.
    let mut local_inet = encode(2, Some((sa("1.2.3.4:1"), sa("5.6.7.8:2"))), &[]);
    local_inet[12] = 0x20;
    assert_eq!(whole(&local_inet).0.source, None);
    // PROXY over AF_UNIX: 216 address bytes, no IP address.
    let mut unix = V2_SIGNATURE.to_vec();
    unix.extend_from_slice(&[0x21, 0x31, 0x00, 216]);
    unix.extend_from_slice(&[0u8; 216]);
    assert_eq!(
        whole(&unix),
        (
            Header {
                version: 2,
                source: None,
                destination: None
            },
            232
        )
    );
}

#[test]
fn v2_fixed_bytes_are_checked_as_they_arrive() {
    let mut b = V2_SIGNATURE.to_vec();
    b.push(0x11);
    assert_eq!(parse(&b), Err(ProxyHeaderError::V2Version(1)));
    b[12] = 0x22;
    assert_eq!(parse(&b), Err(ProxyHeaderError::V2Command(2)));
    b[12] = 0x21;
    assert_eq!(parse(&b), Ok(None));
    b.push(0x12); // UDP over IPv4
    assert_eq!(parse(&b), Err(ProxyHeaderError::V2Family(0x12)));
    b[13] = 0x41;
    assert_eq!(parse(&b), Err(ProxyHeaderError::V2Family(0x41)));
}

#[test]
fn v2_length_is_capped_before_the_bytes_arrive() {
    let mut b = V2_SIGNATURE.to_vec();
    b.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    assert_eq!(
        parse(&b),
        Err(ProxyHeaderError::V2TooLong { len: 16 + 0xffff })
    );
    let at_cap = (MAX_HEADER_LEN - 16) as u16;
    b[14..16].copy_from_slice(&at_cap.to_be_bytes());
    assert_eq!(parse(&b), Ok(None), "exactly the cap is accepted");
    b[14..16].copy_from_slice(&(at_cap + 1).to_be_bytes());
    assert!(matches!(parse(&b), Err(ProxyHeaderError::V2TooLong { .. })));
}

#[test]
fn v2_address_block_must_fit_in_the_length() {
    let mut b = V2_SIGNATURE.to_vec();
    b.extend_from_slice(&[0x21, 0x21, 0x00, 12]);
    assert_eq!(
        parse(&b),
        Err(ProxyHeaderError::V2AddressTooShort {
            family: 0x21,
            len: 12,
            needed: 36
        })
    );
}

#[test]
fn v2_needs_more_until_the_length_is_in() {
    let bytes = encode(2, Some((sa("10.9.8.7:5555"), sa("10.0.0.1:3306"))), &[7; 5]);
    for cut in 0..bytes.len() {
        assert_eq!(parse(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
    assert!(parse(&bytes).unwrap().is_some());
}

#[test]
fn a_mysql_handshake_response_is_not_a_header() {
    let response = b"\x55\x00\x00\x01\x8d\xa6\x0f\x00";
    assert!(matches!(
        parse(response),
        Err(ProxyHeaderError::NotProxy(_))
    ));
    assert!(matches!(
        parse(b"PROXZ"),
        Err(ProxyHeaderError::NotProxy(_))
    ));
    assert!(matches!(
        parse(b"\r\n\r\n\0\r\nQUIX"),
        Err(ProxyHeaderError::NotProxy(_))
    ));
}

#[test]
fn header_starts_are_recognised_as_the_handshake_reader_sees_them() {
    assert!(is_header_start(b"PROXY TCP4"));
    assert!(is_header_start(&V2_SIGNATURE));
    assert!(!is_header_start(b"\x55\x00\x00\x01"));
    let v1 = u32::from_le_bytes([b'P', b'R', b'O', 0]) as usize;
    let v2 = u32::from_le_bytes([0x0d, 0x0a, 0x0d, 0]) as usize;
    assert_eq!(AS_PACKET_LENGTHS, [v1, v2]);
}

fn socket_pair() -> impl Strategy<Value = (SocketAddr, SocketAddr)> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<u16>(),
            any::<[u8; 4]>(),
            any::<u16>()
        )
            .prop_map(|(s, sp, d, dp)| (
                SocketAddr::new(IpAddr::V4(s.into()), sp),
                SocketAddr::new(IpAddr::V4(d.into()), dp)
            )),
        (
            any::<[u8; 16]>(),
            any::<u16>(),
            any::<[u8; 16]>(),
            any::<u16>()
        )
            .prop_map(|(s, sp, d, dp)| (
                SocketAddr::new(IpAddr::V6(s.into()), sp),
                SocketAddr::new(IpAddr::V6(d.into()), dp)
            )),
    ]
}

proptest! {
    #[test]
    fn encoded_headers_parse_back_whole_and_stream_bytes_stay(
        version in 1u8..=2,
        addrs in proptest::option::of(socket_pair()),
        tlvs in proptest::collection::vec(any::<u8>(), 0..64),
        after in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let tlvs = if version == 2 { tlvs } else { Vec::new() };
        let header = encode(version, addrs, &tlvs);
        let mut buf = header.clone();
        buf.extend_from_slice(&after);
        let (h, n) = parse(&buf).unwrap().unwrap();
        prop_assert_eq!(n, header.len());
        prop_assert_eq!(h.version, version);
        prop_assert_eq!(h.source, addrs.map(|a| a.0));
        prop_assert_eq!(h.destination, addrs.map(|a| a.1));
        for cut in 0..header.len() {
            prop_assert_eq!(parse(&header[..cut]), Ok(None));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_consume_within_bounds(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        prefix in 0usize..3,
    ) {
        let mut buf = match prefix {
            0 => Vec::new(),
            1 => V1_PREFIX.to_vec(),
            _ => V2_SIGNATURE.to_vec(),
        };
        buf.extend_from_slice(&data);
        if let Ok(Some((_, n))) = parse(&buf) {
            prop_assert!(n <= buf.len());
            prop_assert!(n <= MAX_HEADER_LEN);
            // What was accepted parses the same on its own.
            prop_assert_eq!(parse(&buf[..n]).unwrap().map(|x| x.1), Some(n));
        }
    }
}
