//! The client leg's TLS record layer: byte 0 chooses the version, the AEAD and how the records
//! arrive; the rest, operations that seal records with keys the check knows (data, any content
//! type, KeyUpdates, alerts, padding past the limit, bits flipped, raw bytes, records of the
//! layer's own), so the bytes reach past the MAC (`mysql_lb_fuzz::tls_records`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| mysql_lb_fuzz::tls_records::tls_records(data));
