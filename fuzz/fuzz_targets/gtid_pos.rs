//! A MariaDB GTID position's text as a server prints it (`@@gtid_current_pos`,
//! `@@gtid_slave_pos`, `@@last_gtid`): any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::gtid_pos::gtid_pos(data));
