//! Bytes as an L4 load balancer's connection starts: a PROXY protocol v1/v2 header, fed to the
//! parser one more byte at a time.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::proxy_in::proxy_header(data));
