//! The PROXY protocol header parser's properties, kept apart from `checks.rs` (the MySQL
//! protocol's): on any bytes, [`mysql_lb::wire::protocol::proxy_in::parse`] never panics, takes no
//! more than it was given nor more than the cap, and is consistent as bytes arrive — "need more"
//! only until a verdict, and a verdict (header or error) never changes when more bytes follow.

use mysql_lb::wire::protocol::proxy_in::{parse, MAX_HEADER_LEN};

/// Feeds every prefix of `data` (up to a little past the cap: beyond it nothing can change).
pub fn proxy_header(data: &[u8]) {
    let end = data.len().min(MAX_HEADER_LEN + 8);
    let mut verdict = None;
    for k in 0..=end {
        let result = parse(&data[..k]);
        if let Ok(Some((_, n))) = result {
            assert!(n <= k && n <= MAX_HEADER_LEN, "consumed {n} of {k}");
        }
        match &verdict {
            None if result == Ok(None) => {}
            None => verdict = Some((k, result)),
            Some((at, first)) => match (first, &result) {
                (Ok(Some(a)), Ok(Some(b))) => {
                    assert_eq!(a, b, "header found at {at} changed at {k}")
                }
                (Err(_), Err(_)) => {}
                _ => panic!("verdict at {at} ({first:?}) became {result:?} at {k}"),
            },
        }
    }
}
