//! Unit tests of CIDR parsing and matching.

use proptest::prelude::*;

use super::*;

fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn cidr_parses_networks_and_bare_addresses() {
    assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
    assert_eq!(cidr("192.0.2.7").to_string(), "192.0.2.7/32");
    assert_eq!(cidr("::1").to_string(), "::1/128");
    assert_eq!(cidr("fd00::/8").to_string(), "fd00::/8");
    assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
    assert_eq!(cidr(" 10.1.0.0/16 ").to_string(), "10.1.0.0/16");
}

#[test]
fn cidr_errors_say_what_is_wrong() {
    let e = |s: &str| s.parse::<Cidr>().unwrap_err().to_string();
    assert!(e("10.0.0.0/33").contains("prefix length `33` is not 0..=32"));
    assert!(e("::/129").contains("not 0..=128"));
    assert!(e("10.0.0.0/").contains("prefix length"));
    assert!(e("10.0.0.0/+8").contains("prefix length"));
    assert!(e("10.0.0.0/x").contains("prefix length"));
    assert!(e("10.0.0/8").contains("is not an IP address"));
    assert!(e("db.example/8").contains("is not an IP address"));
    assert!(e("").contains("is not an IP address"));
    let host_bits = e("10.1.2.3/16");
    assert!(
        host_bits.contains("did you mean 10.1.0.0/16"),
        "{host_bits}"
    );
}

#[test]
fn cidr_contains_matches_the_prefix_only() {
    let net = cidr("10.1.0.0/16");
    assert!(net.contains(ip("10.1.0.0")));
    assert!(net.contains(ip("10.1.255.255")));
    assert!(!net.contains(ip("10.2.0.0")));
    assert!(!net.contains(ip("10.0.255.255")));
    assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
    assert!(!cidr("0.0.0.0/0").contains(ip("2001:db8::1")));
    assert!(cidr("192.0.2.7").contains(ip("192.0.2.7")));
    assert!(!cidr("192.0.2.7").contains(ip("192.0.2.8")));
    let v6 = cidr("2001:db8::/32");
    assert!(v6.contains(ip("2001:db8:ffff::1")));
    assert!(!v6.contains(ip("2001:db9::1")));
    assert!(cidr("::/0").contains(ip("::1")));
    assert!(cidr("::1").contains(ip("::1")));
    assert!(!cidr("::1").contains(ip("::2")));
}

#[test]
fn ipv4_mapped_clients_match_ipv4_networks_and_back() {
    assert!(cidr("10.1.0.0/16").contains(ip("::ffff:10.1.2.3")));
    assert!(!cidr("10.1.0.0/16").contains(ip("::ffff:10.2.2.3")));
    // Not mapped: an IPv4-compatible or other v6 address is not an IPv4 client.
    assert!(!cidr("10.1.0.0/16").contains(ip("::10.1.2.3")));
    assert!(cidr("::ffff:10.0.0.0/104").contains(ip("10.9.9.9")));
    assert!(!cidr("::ffff:10.0.0.0/104").contains(ip("11.9.9.9")));
}

proptest! {
    #[test]
    fn a_network_contains_every_address_sharing_its_prefix(a: u32, b: u32, prefix in 0u8..=32) {
        let mask = mask_v4(prefix);
        let net: Cidr = format!("{}/{prefix}", Ipv4Addr::from(a & mask)).parse().unwrap();
        prop_assert!(net.contains(IpAddr::V4(Ipv4Addr::from(a))));
        prop_assert_eq!(net.contains(IpAddr::V4(Ipv4Addr::from(b))), a & mask == b & mask);
    }
}
