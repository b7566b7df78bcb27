//! A pooled session's client between transactions: byte 0 chooses how the bytes arrive and
//! how many parameters each prepared statement has, the rest is what the client sends, walked
//! command by command as the session reads it (`mysql_lb::backends::pooling::command`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::pooled_front::pooled_front(data));
