//! What reading a PROXY protocol header costs a connection from a load balancer: the parser on
//! a v1 line and a v2 header (IPv4, and IPv6 with a TLV), whole as they arrive in one read.
//! Inputs are built outside the timed loop.
//!
//! `cargo bench --bench proxy_header`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};

use mysql_lb::wire::protocol::proxy_in::{parse, V2_SIGNATURE};

fn headers() -> [(&'static str, Vec<u8>); 3] {
    let v1 = b"PROXY TCP4 203.0.113.77 10.0.1.11 51234 4040\r\n".to_vec();
    let mut v2 = V2_SIGNATURE.to_vec();
    v2.extend_from_slice(&[
        0x21, 0x11, 0x00, 0x0c, 203, 0, 113, 77, 10, 0, 1, 11, 0xc8, 0x22, 0x0f, 0xc8,
    ]);
    let mut v2_6 = V2_SIGNATURE.to_vec();
    v2_6.extend_from_slice(&[0x21, 0x21, 0x00, 41]);
    v2_6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
    v2_6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v2_6.extend_from_slice(&[0xc8, 0x22, 0x0f, 0xc8, 0x01, 0x00, 0x02, b'h', b'2']);
    [("v1_tcp4", v1), ("v2_tcp4", v2), ("v2_tcp6_tlv", v2_6)]
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("proxy_header");
    for (name, bytes) in headers() {
        assert!(matches!(parse(&bytes), Ok(Some((_, n))) if n == bytes.len()));
        group.bench_function(name, |b| b.iter(|| parse(black_box(&bytes))));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
