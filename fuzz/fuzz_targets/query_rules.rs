//! A statement text matched against query rules: any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::query_rules::query_rules(data));
