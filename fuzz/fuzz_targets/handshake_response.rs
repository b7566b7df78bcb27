//! A client's first packet payload (no header): parse as SSLRequest or HandshakeResponse41,
//! patch only capability bytes, idempotently, and negotiate.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::checks::handshake_response(data));
