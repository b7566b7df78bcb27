//! A server greeting payload (no header): parse, patch (only capability bytes, idempotently)
//! and set the connection id.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::checks::greeting(data));
