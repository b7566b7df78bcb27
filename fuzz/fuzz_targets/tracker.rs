//! Byte 0 chooses capabilities; the rest is a series of client and server reads fed to a
//! command-phase tracker, which must never panic and keep its queue bounded and consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::checks::tracker(data));
