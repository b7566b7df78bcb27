//! Byte 0 chooses the split, output room, role and level; the rest is decoded as compressed
//! frames (whole and split alike, never past the declared lengths) and round-tripped as plain
//! bytes through the encoder in both roles.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::checks::compress(data));
