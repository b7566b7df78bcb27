//! A statement's text as a client sends it in COM_QUERY / COM_STMT_PREPARE (any bytes), behind
//! one byte choosing how much of it the digest may read.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::sql_digest::sql_digest(data));
