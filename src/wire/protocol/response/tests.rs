//! Byte-fixture tests for the response tracker: each builds the exact packets a server sends.

use super::*;
use std::time::Instant;

use crate::wire::protocol::caps::{
    Negotiated, CLIENT_DEPRECATE_EOF, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41,
    CLIENT_SECURE_CONNECTION, MARIADB_CLIENT_PROGRESS, SERVER_MORE_RESULTS_EXISTS,
    SERVER_STATUS_CURSOR_EXISTS,
};
use crate::wire::protocol::codec::{header, MAX_CHUNK};

const MORE: u16 = SERVER_MORE_RESULTS_EXISTS;
const AUTOCOMMIT: u16 = 0x0002;

fn caps(deprecate_eof: bool) -> Negotiated {
    Negotiated {
        capabilities: CLIENT_PROTOCOL_41
            | if deprecate_eof {
                CLIENT_DEPRECATE_EOF
            } else {
                0
            },
        mariadb_capabilities: MARIADB_CLIENT_PROGRESS,
    }
}

fn pkt(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = header(payload.len(), seq).to_vec();
    v.extend_from_slice(payload);
    v
}

fn ok(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0x00, 0x00, 0x00];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    pkt(seq, &p)
}

/// OK with large affected-rows / insert-id values so the status sits behind long lenencs.
fn ok_long(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0x00, 0xFE, 1, 2, 3, 4, 5, 6, 7, 8, 0xFD, 1, 2, 3];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    pkt(seq, &p)
}

fn eof(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    pkt(seq, &p)
}

/// The OK-with-0xFE that ends a result set under CLIENT_DEPRECATE_EOF.
fn eof_ok(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    pkt(seq, &p)
}

fn err(seq: u8, code: u16) -> Vec<u8> {
    let mut p = vec![0xFF];
    p.extend_from_slice(&code.to_le_bytes());
    p.extend_from_slice(b"#42000oops");
    pkt(seq, &p)
}

fn coldef(seq: u8) -> Vec<u8> {
    let mut p = vec![3];
    p.extend_from_slice(b"def");
    p.extend_from_slice(&[
        0, 0, 0, 1, b'a', 1, b'a', 0x0C, 0x3F, 0, 11, 0, 0, 0, 3, 0, 0, 0, 0, 0,
    ]);
    pkt(seq, &p)
}

fn row(seq: u8, text: &[u8]) -> Vec<u8> {
    let mut p = vec![text.len() as u8];
    p.extend_from_slice(text);
    pkt(seq, &p)
}

fn command(code: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![code];
    p.extend_from_slice(body);
    pkt(0, &p)
}

/// A result set of `cols` columns and `rows` rows starting at sequence id `seq`; returns the bytes
/// and the sequence id after it.
fn result_set(
    mut seq: u8,
    cols: u8,
    rows: usize,
    deprecate_eof: bool,
    status: u16,
) -> (Vec<u8>, u8) {
    let mut v = pkt(seq, &[cols]);
    seq += 1;
    for _ in 0..cols {
        v.extend(coldef(seq));
        seq += 1;
    }
    if !deprecate_eof {
        v.extend(eof(seq, AUTOCOMMIT));
        seq += 1;
    }
    for i in 0..rows {
        v.extend(row(seq, format!("{i}").as_bytes()));
        seq = seq.wrapping_add(1);
    }
    if deprecate_eof {
        v.extend(eof_ok(seq, status));
    } else {
        v.extend(eof(seq, status));
    }
    (v, seq.wrapping_add(1))
}

struct Run {
    t: Tracker,
    done: Vec<u8>,
}

impl Run {
    fn new(deprecate_eof: bool) -> Self {
        Self {
            t: Tracker::new(caps(deprecate_eof), 1 << 30),
            done: Vec::new(),
        }
    }

    fn client(&mut self, bytes: &[u8]) -> ClientScan {
        let s = self.t.on_client(bytes).expect("client bytes accepted");
        self.t.on_written(Instant::now());
        s
    }

    fn server(&mut self, bytes: &[u8]) {
        self.server_res(bytes).expect("server bytes accepted");
    }

    fn server_res(&mut self, bytes: &[u8]) -> Result<(), TrackError> {
        let done = &mut self.done;
        self.t
            .on_server(bytes, Instant::now(), |c| done.push(c.command))
    }

    /// Feeds server bytes one at a time, the worst split a socket can produce.
    fn server_bytewise(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.server(std::slice::from_ref(b));
        }
    }
}

mod rules;
mod statements;
mod tracker;
