//! Bulk transfers that every leg combination must carry intact: a 20 MiB BLOB each way (logical
//! packets past 16 MiB, so chunking runs inside TLS records and compressed frames) and a LOAD
//! DATA LOCAL INFILE (the client streams a file mid-command).
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, WhiteListFsHandler};

pub const BLOB_LEN: usize = 20 << 20;
pub const INFILE_ROWS: u32 = 20_000;

/// A table name no other test of this process uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Deterministic bytes with every value in them (0x00, 0xFB, 0xFE, 0xFF included).
pub fn pattern(len: usize) -> Vec<u8> {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(data);
    crc.sum()
}

/// 20 MiB up as a prepared statement's parameter (checked by the server's LENGTH and CRC32),
/// then down in a text result, compared byte for byte; `what` names the legs in failures.
pub async fn blob_both_ways(conn: &mut Conn, what: &str) {
    let t = unique("tls_blob");
    conn.query_drop(format!(
        "CREATE TABLE test.{t} (id INT PRIMARY KEY, b LONGBLOB)"
    ))
    .await
    .unwrap_or_else(|e| panic!("{what}: create: {e}"));
    // Sixteen byte values, so every 16 MiB chunk compresses: mysql_async (mysql_common 0.38)
    // writes a compressed frame's length in 3 bytes without checking, so a chunk that zlib
    // makes larger than 16 MiB (random bytes) breaks its compressed protocol against MariaDB
    // directly as well (`direct_blob_both_ways_compressed` is the reference).
    let data: Vec<u8> = pattern(BLOB_LEN)
        .iter()
        .map(|b| b'a' + (b & 0x0F))
        .collect();
    conn.exec_drop(
        format!("INSERT INTO test.{t} VALUES (1, ?)"),
        (data.clone(),),
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: 20 MiB up: {e}"));
    let (len, crc): (u64, u32) = conn
        .query_first(format!("SELECT LENGTH(b), CRC32(b) FROM test.{t}"))
        .await
        .unwrap_or_else(|e| panic!("{what}: server-side check: {e}"))
        .expect("a row");
    assert_eq!(
        (len, crc),
        (BLOB_LEN as u64, crc32(&data)),
        "{what}: the server stored other bytes"
    );
    let back: Vec<u8> = conn
        .query_first(format!("SELECT b FROM test.{t}"))
        .await
        .unwrap_or_else(|e| panic!("{what}: 20 MiB down: {e}"))
        .expect("a row");
    assert!(
        back == data,
        "{what}: 20 MiB read back differs (got {} bytes)",
        back.len()
    );
    conn.query_drop(format!("DROP TABLE test.{t}"))
        .await
        .unwrap_or_else(|e| panic!("{what}: drop: {e}"));
}

/// LOAD DATA LOCAL INFILE of [`INFILE_ROWS`] rows written under `dir`, over a new connection
/// from `opts`; checks the count and a checksum of what arrived.
pub async fn load_data_local(opts: OptsBuilder, dir: &Path, what: &str) {
    let t = unique("tls_infile");
    let path = dir.join(format!("{t}.tsv"));
    let mut text = String::new();
    for i in 0..INFILE_ROWS {
        text.push_str(&format!(
            "{i}\tname-{i}-{}\n",
            "x".repeat((i % 97) as usize)
        ));
    }
    std::fs::write(&path, &text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let opts = opts.local_infile_handler(Some(WhiteListFsHandler::new([path.clone()])));
    let mut conn = Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("{what}: connect: {e}"));
    conn.query_drop(format!(
        "CREATE TABLE test.{t} (id INT PRIMARY KEY, name VARCHAR(200))"
    ))
    .await
    .unwrap_or_else(|e| panic!("{what}: create: {e}"));
    conn.query_drop(format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE test.{t} (id, name)",
        path.display()
    ))
    .await
    .unwrap_or_else(|e| panic!("{what}: LOAD DATA LOCAL: {e}"));
    assert_eq!(conn.affected_rows(), u64::from(INFILE_ROWS), "{what}");
    let (count, bytes): (u64, u64) = conn
        .query_first(format!("SELECT COUNT(*), SUM(LENGTH(name)) FROM test.{t}"))
        .await
        .unwrap_or_else(|e| panic!("{what}: count: {e}"))
        .expect("a row");
    let want_bytes: usize = (0..INFILE_ROWS)
        .map(|i| format!("name-{i}-").len() + (i % 97) as usize)
        .sum();
    assert_eq!(
        (count, bytes),
        (u64::from(INFILE_ROWS), want_bytes as u64),
        "{what}: rows loaded"
    );
    conn.query_drop(format!("DROP TABLE test.{t}"))
        .await
        .unwrap_or_else(|e| panic!("{what}: drop: {e}"));
    conn.disconnect()
        .await
        .unwrap_or_else(|e| panic!("{what}: disconnect: {e}"));
}
