//! Byte 0 chooses how the rest (one direction of a connection) is split into reads; the same
//! packets, offsets and errors must come out whole and split.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::checks::codec(data));
