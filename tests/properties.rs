//! Properties of the sans-IO protocol code, checked with proptest: the fuzz targets' own checks
//! (fuzz/src/checks.rs, included below) on generated and mutated input, round trips of generated
//! well-formed traffic, and a replay of every committed fuzz seed and crash reproducer, so what
//! a long fuzz run found stays fixed without a fuzzer. Fast: a few hundred cases per property.

#[allow(dead_code)]
#[path = "../fuzz/src/checks.rs"]
mod checks;
#[path = "../fuzz/src/gtid_pos.rs"]
mod gtid_pos_checks;
#[path = "../fuzz/src/pooled_front.rs"]
mod pooled_front_checks;
#[path = "../fuzz/src/proxy_in.rs"]
mod proxy_in_checks;
#[path = "../fuzz/src/query_rules.rs"]
mod query_rules_checks;
#[path = "../fuzz/src/sql_digest.rs"]
mod sql_digest_checks;
#[path = "../fuzz/src/tls_records.rs"]
mod tls_records_checks;

use std::path::{Path, PathBuf};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::Config;

use bytes::BytesMut;
use checks::{Segment, TrackerInput, XorShift};
use mysql_lb::backends::kill;
use mysql_lb::wire::protocol::caps::{self, Negotiated};
use mysql_lb::wire::protocol::codec::{header, PacketScanner, MAX_CHUNK, PREFIX_LEN};
use mysql_lb::wire::protocol::compress::{FrameDecoder, FrameEncoder, Role};
use mysql_lb::wire::protocol::handshake::{parse_client_first, parse_greeting, ClientFirst};
use mysql_lb::wire::protocol::response::{cmd, may_be_kill};

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Failures are kept as named regression tests below, not as files beside the sources.
        failure_persistence: None,
        ..Config::default()
    }
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Files of `fuzz/<kind>/<target>/`, sorted (none when the directory does not exist).
fn files(kind: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            let bytes = std::fs::read(e.path()).expect("read a fuzz file");
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    out.sort();
    out
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let seeds: Vec<_> = files("corpus", target)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert!(!seeds.is_empty(), "no seeds in fuzz/corpus/{target}");
    seeds
}

/// A seed with a few bytes overwritten and maybe cut short.
fn mutated(seeds: &[Vec<u8>], pick: usize, edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    let mut bytes = seeds[pick % seeds.len()].clone();
    if bytes.is_empty() {
        return bytes;
    }
    for &(at, value) in edits {
        let at = at % bytes.len();
        bytes[at] = value;
    }
    let keep = bytes.len() - cut.min(bytes.len());
    bytes.truncate(keep);
    bytes
}

fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = header(payload.len(), seq).to_vec();
    p.extend_from_slice(payload);
    p
}

use mysql_lb::wire::protocol::codec::put_lenenc_bytes as lenenc;

/// Cuts `bytes` into pieces of 1..=`largest` bytes chosen by `seed`.
fn cut(bytes: &[u8], seed: u64, largest: usize) -> Vec<&[u8]> {
    let mut rng = XorShift(seed);
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = 1 + (rng.next_u64() % largest as u64) as usize;
        let (a, b) = rest.split_at(n.min(rest.len()));
        out.push(a);
        rest = b;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// codec

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn codec_check_holds_for_any_bytes(data in vec(any::<u8>(), 0..2048)) {
        checks::codec(&data);
    }

    #[test]
    fn codec_check_holds_for_mutated_captures(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..64,
        control in any::<u8>(),
    ) {
        let mut data = mutated(&seeds("codec"), pick, &edits, cut);
        if let Some(first) = data.first_mut() {
            *first = control;
        }
        checks::codec(&data);
    }

    /// Any sequence of well-formed packets, split into reads anywhere, gives back exactly those
    /// packets, each ending where it was written.
    #[test]
    fn well_formed_packets_survive_any_split(
        packets in vec((any::<u8>(), vec(any::<u8>(), 0..300)), 0..24),
        seed in any::<u64>(),
        largest in 1usize..400,
    ) {
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for (seq, payload) in &packets {
            stream.extend(packet(*seq, payload));
            ends.push(stream.len());
        }
        let scanned = checks::scan_chunks(1 << 30, &cut(&stream, seed, largest));
        prop_assert_eq!(scanned.error, None);
        prop_assert!(scanned.at_boundary);
        prop_assert_eq!(scanned.packets.len(), packets.len());
        for ((seq, payload), (seen, end)) in packets.iter().zip(scanned.packets.iter().zip(&ends)) {
            prop_assert_eq!((seen.first_seq, seen.last_seq), (*seq, *seq));
            prop_assert_eq!(seen.len, payload.len() as u64);
            prop_assert_eq!(&seen.prefix[..], &payload[..payload.len().min(PREFIX_LEN)]);
            prop_assert_eq!(seen.end, *end);
        }
    }
}

proptest! {
    #![proptest_config(config(6))]

    /// Packets of 16 MiB and more arrive in chunks; split anywhere they are still one packet.
    #[test]
    fn large_packets_survive_any_split(
        extra in prop_oneof![0usize..4, MAX_CHUNK - 2..MAX_CHUNK + 2],
        seq in any::<u8>(),
        cuts in vec(any::<usize>(), 1..4),
    ) {
        let len = MAX_CHUNK + extra;
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut stream = Vec::with_capacity(len + 64);
        let mut chunk_seq = seq;
        let mut rest = &payload[..];
        loop {
            let n = rest.len().min(MAX_CHUNK);
            stream.extend_from_slice(&header(n, chunk_seq));
            stream.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if n < MAX_CHUNK {
                break;
            }
            chunk_seq = chunk_seq.wrapping_add(1);
        }
        stream.extend(packet(chunk_seq.wrapping_add(1), b"next"));
        let mut points: Vec<usize> = cuts.iter().map(|c| c % stream.len()).collect();
        points.sort_unstable();
        points.dedup();
        let mut chunks = Vec::new();
        let mut from = 0;
        for p in points.into_iter().chain([stream.len()]) {
            chunks.push(&stream[from..p]);
            from = p;
        }
        let scanned = checks::scan_chunks(1 << 30, &chunks);
        prop_assert_eq!(scanned.error, None);
        prop_assert_eq!(scanned.packets.len(), 2);
        let big = &scanned.packets[0];
        prop_assert_eq!((big.first_seq, big.last_seq, big.len), (seq, chunk_seq, len as u64));
        prop_assert_eq!(big.first_chunk_len, MAX_CHUNK);
        prop_assert_eq!(&big.prefix[..], &payload[..PREFIX_LEN]);
        prop_assert_eq!(&scanned.packets[1].prefix[..], b"next");
    }
}

/// A packet whose header came in an earlier read does not start in the buffer being scanned:
/// its `start` must be `None`, not an offset into that earlier read (the relay slices the current
/// buffer with it).
#[test]
fn packet_start_is_none_when_its_header_came_in_an_earlier_read() {
    let mut scanner = PacketScanner::new(1 << 30);
    let mut starts = Vec::new();
    for read in [&[1u8, 0, 0, 0][..], b"x"] {
        scanner
            .scan(read, |p| {
                starts.push((p.start, p.end));
                Ok::<(), mysql_lb::wire::protocol::codec::FrameError>(())
            })
            .unwrap();
    }
    assert_eq!(starts, vec![(None, 1)]);
}

// ---------------------------------------------------------------------------------------------
// greeting

/// A HandshakeV10 laid out as documented, with its fields.
#[derive(Debug, Clone)]
struct GreetingFields {
    version: String,
    connection_id: u32,
    capabilities: u32,
    mariadb_capabilities: u32,
    charset: u8,
    status: u16,
    auth_data_len: u8,
    plugin: String,
}

impl GreetingFields {
    fn build(&self) -> Vec<u8> {
        let mut p = vec![10];
        p.extend_from_slice(self.version.as_bytes());
        p.push(0);
        p.extend_from_slice(&self.connection_id.to_le_bytes());
        p.extend_from_slice(b"scramble");
        p.push(0);
        p.extend_from_slice(&(self.capabilities as u16).to_le_bytes());
        p.push(self.charset);
        p.extend_from_slice(&self.status.to_le_bytes());
        p.extend_from_slice(&((self.capabilities >> 16) as u16).to_le_bytes());
        p.push(self.auth_data_len);
        p.extend_from_slice(&[0; 6]);
        p.extend_from_slice(&self.mariadb_capabilities.to_le_bytes());
        if self.capabilities & caps::CLIENT_SECURE_CONNECTION != 0 {
            let part2 = usize::from(self.auth_data_len).saturating_sub(8).max(13);
            p.extend(std::iter::repeat_n(b'z', part2 - 1));
            p.push(0);
        }
        if self.capabilities & caps::CLIENT_PLUGIN_AUTH != 0 {
            p.extend_from_slice(self.plugin.as_bytes());
            p.push(0);
        }
        p
    }
}

fn greeting_fields() -> impl Strategy<Value = GreetingFields> {
    (
        "[ -~]{0,40}",
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        any::<u16>(),
        any::<u8>(),
        "[a-z_0-9]{0,30}",
    )
        .prop_map(
            |(version, connection_id, capabilities, mariadb, charset, status, len, plugin)| {
                GreetingFields {
                    version,
                    connection_id,
                    capabilities,
                    mariadb_capabilities: mariadb,
                    charset,
                    status,
                    auth_data_len: len,
                    plugin,
                }
            },
        )
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn greeting_check_holds_for_any_bytes(mut data in vec(any::<u8>(), 0..200), ten in any::<bool>()) {
        if let (Some(first), true) = (data.first_mut(), ten) {
            *first = 10;
        }
        checks::greeting(&data);
    }

    #[test]
    fn greeting_check_holds_for_mutated_captures(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..32,
    ) {
        checks::greeting(&mutated(&seeds("greeting"), pick, &edits, cut));
    }

    /// A greeting built from fields parses back to those fields, and passes the greeting check.
    #[test]
    fn generated_greetings_parse_to_their_fields(f in greeting_fields()) {
        let bytes = f.build();
        let g = parse_greeting(&bytes).expect("a well-formed greeting parses");
        prop_assert_eq!(&g.server_version, &f.version);
        prop_assert_eq!(g.connection_id, f.connection_id);
        prop_assert_eq!(g.capabilities, f.capabilities);
        let mariadb = if f.capabilities & caps::CLIENT_MYSQL == 0 { f.mariadb_capabilities } else { 0 };
        prop_assert_eq!(g.mariadb_capabilities, mariadb);
        prop_assert_eq!((g.charset, g.status), (f.charset, f.status));
        let plugin = (f.capabilities & caps::CLIENT_PLUGIN_AUTH != 0 && !f.plugin.is_empty())
            .then(|| f.plugin.clone());
        prop_assert_eq!(g.auth_plugin, plugin);
        checks::greeting(&bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// handshake response

/// A HandshakeResponse41 laid out as documented, with its fields.
#[derive(Debug, Clone)]
struct ResponseFields {
    capabilities: u32,
    mariadb_capabilities: u32,
    max_packet: u32,
    charset: u8,
    user: String,
    auth: Vec<u8>,
    database: String,
    plugin: String,
    attributes: Vec<(String, String)>,
}

impl ResponseFields {
    fn build(&self) -> Vec<u8> {
        let c = self.capabilities;
        let mut p = c.to_le_bytes().to_vec();
        p.extend_from_slice(&self.max_packet.to_le_bytes());
        p.push(self.charset);
        p.extend_from_slice(&[0; 19]);
        p.extend_from_slice(&self.mariadb_capabilities.to_le_bytes());
        p.extend_from_slice(self.user.as_bytes());
        p.push(0);
        if c & caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            lenenc(&mut p, &self.auth);
        } else if c & caps::CLIENT_SECURE_CONNECTION != 0 {
            p.push(self.auth.len() as u8);
            p.extend_from_slice(&self.auth);
        } else {
            p.extend_from_slice(&self.auth);
            p.push(0);
        }
        if c & caps::CLIENT_CONNECT_WITH_DB != 0 {
            p.extend_from_slice(self.database.as_bytes());
            p.push(0);
        }
        if c & caps::CLIENT_PLUGIN_AUTH != 0 {
            p.extend_from_slice(self.plugin.as_bytes());
            p.push(0);
        }
        if c & caps::CLIENT_CONNECT_ATTRS != 0 {
            let mut block = Vec::new();
            for (k, v) in &self.attributes {
                lenenc(&mut block, k.as_bytes());
                lenenc(&mut block, v.as_bytes());
            }
            lenenc(&mut p, &block);
        }
        if c & caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM != 0 {
            p.push(3);
        }
        p
    }
}

fn response_fields() -> impl Strategy<Value = ResponseFields> {
    let optional = caps::CLIENT_MYSQL
        | caps::CLIENT_CONNECT_WITH_DB
        | caps::CLIENT_COMPRESS
        | caps::CLIENT_LOCAL_FILES
        | caps::CLIENT_SSL
        | caps::CLIENT_SECURE_CONNECTION
        | caps::CLIENT_MULTI_STATEMENTS
        | caps::CLIENT_PLUGIN_AUTH
        | caps::CLIENT_CONNECT_ATTRS
        | caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
        | caps::CLIENT_SESSION_TRACK
        | caps::CLIENT_DEPRECATE_EOF
        | caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM;
    (
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u8>()),
        "[a-zA-Z0-9_]{0,16}",
        vec(1u8..=255, 0..300),
        "[a-zA-Z0-9_]{0,16}",
        "[a-z_0-9]{0,24}",
        vec(("[a-z_]{1,12}", "[ -~]{0,40}"), 0..5),
    )
        .prop_map(
            move |((bits, mariadb, max_packet, charset), user, auth, db, plugin, attrs)| {
                let capabilities = caps::CLIENT_PROTOCOL_41 | (bits & optional);
                let mut auth = auth;
                if capabilities & caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA == 0 {
                    auth.truncate(250);
                }
                ResponseFields {
                    capabilities,
                    mariadb_capabilities: mariadb,
                    max_packet,
                    charset,
                    user,
                    auth,
                    database: db,
                    plugin,
                    attributes: attrs,
                }
            },
        )
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn handshake_response_check_holds_for_any_bytes(
        mut data in vec(any::<u8>(), 0..200),
        protocol_41 in any::<bool>(),
    ) {
        if let (Some(b), true) = (data.get_mut(1), protocol_41) {
            *b |= 0x02;
        }
        checks::handshake_response(&data);
    }

    #[test]
    fn handshake_response_check_holds_for_mutated_captures(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..32,
    ) {
        checks::handshake_response(&mutated(&seeds("handshake_response"), pick, &edits, cut));
    }

    /// A response built from fields parses back to those fields (a 32-byte CLIENT_SSL packet is
    /// an SSLRequest), and passes the response check.
    #[test]
    fn generated_responses_parse_to_their_fields(f in response_fields()) {
        let bytes = f.build();
        let parsed = parse_client_first(&bytes);
        let r = match parsed {
            Ok(ClientFirst::Response(r)) => r,
            Ok(ClientFirst::SslRequest { capabilities }) => {
                prop_assert_eq!(bytes.len(), 32);
                prop_assert_eq!(capabilities, f.capabilities);
                checks::handshake_response(&bytes);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e} for {f:?}"))),
        };
        let c = f.capabilities;
        prop_assert_eq!(r.capabilities, c);
        let mariadb = if c & caps::CLIENT_MYSQL == 0 { f.mariadb_capabilities } else { 0 };
        prop_assert_eq!(r.mariadb_capabilities, mariadb);
        prop_assert_eq!((r.max_packet_size, r.charset), (f.max_packet, f.charset));
        prop_assert_eq!(&r.user, &f.user);
        let database = (c & caps::CLIENT_CONNECT_WITH_DB != 0).then(|| f.database.clone());
        prop_assert_eq!(r.database, database);
        let plugin = (c & caps::CLIENT_PLUGIN_AUTH != 0 && !f.plugin.is_empty())
            .then(|| f.plugin.clone());
        prop_assert_eq!(r.auth_plugin, plugin);
        let attributes = if c & caps::CLIENT_CONNECT_ATTRS != 0 { f.attributes.clone() } else { Vec::new() };
        prop_assert_eq!(r.attributes.pairs(), attributes);
        checks::handshake_response(&bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// tracker

fn segments() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
    vec((0u8..4, vec(any::<u8>(), 0..120)), 0..12)
}

fn encode(config: u8, raw: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let segments: Vec<Segment<'_>> = raw
        .iter()
        .map(|(tag, bytes)| {
            if tag & 1 != 0 {
                Segment::Server(bytes)
            } else {
                Segment::Client {
                    bytes,
                    written: tag & 2 != 0,
                }
            }
        })
        .collect();
    checks::encode_tracker(config, &segments)
}

/// A server reply to a query or an execute.
#[derive(Debug, Clone)]
enum Reply {
    Ok,
    Err,
    Rows { columns: u8, rows: Vec<Vec<u8>> },
}

/// One command and the server's answer.
#[derive(Debug, Clone)]
enum Command {
    /// COM_QUERY answered by result after result (SERVER_MORE_RESULTS_EXISTS chains them; an ERR
    /// ends the chain), with progress reports first when negotiated.
    Query {
        replies: Vec<Reply>,
        progress: u8,
    },
    /// COM_STMT_EXECUTE: the same, in the binary protocol.
    Execute {
        replies: Vec<Reply>,
    },
    /// COM_STMT_EXECUTE opening a cursor: column definitions, then an end with CURSOR_EXISTS.
    ExecuteCursor {
        columns: u8,
    },
    Fetch {
        rows: Vec<Vec<u8>>,
    },
    Prepare {
        params: u16,
        columns: u16,
        err: bool,
    },
    FieldList {
        columns: u8,
    },
    Ping,
    InitDb {
        err: bool,
    },
    Statistics,
    /// COM_STMT_CLOSE / COM_STMT_SEND_LONG_DATA: no answer.
    Silent {
        long_data: bool,
    },
    /// LOAD DATA LOCAL INFILE: the server asks for a file, the client streams it.
    Infile {
        file: Vec<Vec<u8>>,
    },
    /// COM_CHANGE_USER with one auth switch round trip.
    ChangeUser {
        err: bool,
    },
}

impl Command {
    /// Whether the client speaks again after the server's first packet (cannot be pipelined).
    fn converses(&self) -> bool {
        matches!(self, Command::Infile { .. } | Command::ChangeUser { .. })
    }
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        Just(Reply::Ok),
        Just(Reply::Err),
        (1u8..6, vec(vec(any::<u8>(), 0..40), 0..6))
            .prop_map(|(columns, rows)| Reply::Rows { columns, rows }),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    let rows = || vec(vec(any::<u8>(), 0..40), 0..5);
    prop_oneof![
        4 => (vec(reply(), 1..4), 0u8..3).prop_map(|(replies, progress)| Command::Query { replies, progress }),
        2 => vec(reply(), 1..3).prop_map(|replies| Command::Execute { replies }),
        1 => (1u8..5).prop_map(|columns| Command::ExecuteCursor { columns }),
        1 => rows().prop_map(|rows| Command::Fetch { rows }),
        2 => (0u16..4, 0u16..4, any::<bool>())
            .prop_map(|(params, columns, err)| Command::Prepare { params, columns, err }),
        1 => (0u8..4).prop_map(|columns| Command::FieldList { columns }),
        1 => Just(Command::Ping),
        1 => any::<bool>().prop_map(|err| Command::InitDb { err }),
        1 => Just(Command::Statistics),
        1 => any::<bool>().prop_map(|long_data| Command::Silent { long_data }),
        1 => vec(vec(any::<u8>(), 1..60), 0..3).prop_map(|file| Command::Infile { file }),
        1 => any::<bool>().prop_map(|err| Command::ChangeUser { err }),
    ]
}

/// Builds one exchange: packets in the order they travel, each marked client (true) or server.
struct Exchange {
    deprecate_eof: bool,
    seq: u8,
    packets: Vec<(bool, Vec<u8>)>,
}

const AUTOCOMMIT: u16 = 0x0002;
const CURSOR_EXISTS: u16 = caps::SERVER_STATUS_CURSOR_EXISTS;
const LAST_ROW_SENT: u16 = 0x0080;

impl Exchange {
    fn new(deprecate_eof: bool) -> Self {
        Self {
            deprecate_eof,
            seq: 0,
            packets: Vec::new(),
        }
    }

    fn push(&mut self, client: bool, payload: &[u8]) {
        self.packets.push((client, packet(self.seq, payload)));
        self.seq = self.seq.wrapping_add(1);
    }

    fn server(&mut self, payload: &[u8]) {
        self.push(false, payload);
    }

    fn ok(&mut self, status: u16) {
        let mut p = vec![0x00, 0, 0];
        p.extend_from_slice(&status.to_le_bytes());
        p.extend_from_slice(&[0, 0]);
        self.server(&p);
    }

    fn err(&mut self) {
        self.server(b"\xff\x28\x04#42000You have an error");
    }

    fn eof(&mut self, status: u16) {
        let mut p = vec![0xFE, 0, 0];
        p.extend_from_slice(&status.to_le_bytes());
        self.server(&p);
    }

    /// What ends rows: EOF, or with CLIENT_DEPRECATE_EOF an OK with the 0xFE header.
    fn end_of_rows(&mut self, status: u16) {
        if self.deprecate_eof {
            let mut p = vec![0xFE, 0, 0];
            p.extend_from_slice(&status.to_le_bytes());
            p.extend_from_slice(&[0, 0]);
            self.server(&p);
        } else {
            self.eof(status);
        }
    }

    fn column_defs(&mut self, n: u16) {
        for i in 0..n {
            let mut p = b"\x03def\x04shop\x01t\x01t".to_vec();
            lenenc(&mut p, format!("c{i}").as_bytes());
            p.extend_from_slice(b"\x02c0\x0c\x3f\x00\x0b\x00\x00\x00\x03\x03\x50\x00\x00\x00");
            self.server(&p);
        }
    }

    fn columns_then_eof(&mut self, n: u16, status: u16) {
        self.column_defs(n);
        if !self.deprecate_eof {
            self.eof(status);
        }
    }

    /// A text row: lenenc strings (0xFB is NULL); a binary row starts with 0x00.
    fn row(&mut self, cells: &[u8], binary: bool) {
        let mut p = Vec::new();
        if binary {
            p.push(0x00);
            p.push(0x00);
            p.extend_from_slice(cells);
        } else if cells.first() == Some(&0xFB) {
            p.push(0xFB);
        } else {
            lenenc(&mut p, cells);
        }
        self.server(&p);
    }

    fn reply(&mut self, reply: &Reply, more: bool, binary: bool) {
        let status = AUTOCOMMIT
            | if more {
                caps::SERVER_MORE_RESULTS_EXISTS
            } else {
                0
            };
        match reply {
            Reply::Ok => self.ok(status),
            Reply::Err => self.err(),
            Reply::Rows { columns, rows } => {
                self.server(&[*columns]);
                self.columns_then_eof(u16::from(*columns), AUTOCOMMIT);
                for r in rows {
                    self.row(r, binary);
                }
                self.end_of_rows(status);
            }
        }
    }

    fn replies(&mut self, replies: &[Reply], binary: bool, progress: u8) {
        for (i, r) in replies.iter().enumerate() {
            for stage in 0..progress {
                self.server(&[
                    0xFF, 0xFF, 0xFF, 1, 1, stage, 0, 0, 4, b'w', b'o', b'r', b'k',
                ]);
            }
            let last = i + 1 == replies.len() || matches!(r, Reply::Err);
            self.reply(r, !last, binary);
            if last {
                break;
            }
        }
    }
}

/// The packets of one command's exchange and the command byte a `Completed` must name (None for
/// a command with no answer).
fn exchange(c: &Command, caps: Negotiated) -> (Vec<(bool, Vec<u8>)>, Option<u8>) {
    let mut x = Exchange::new(caps.has(caps::CLIENT_DEPRECATE_EOF));
    let progress = caps.has_mariadb(caps::MARIADB_CLIENT_PROGRESS);
    let stmt = [1u8, 0, 0, 0];
    let completed = match c {
        Command::Query {
            replies,
            progress: n,
        } => {
            x.push(true, b"\x03SELECT 1");
            x.replies(replies, false, if progress { *n } else { 0 });
            Some(cmd::QUERY)
        }
        Command::Execute { replies } => {
            x.push(true, &[cmd::STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0]);
            x.replies(replies, true, 0);
            Some(cmd::STMT_EXECUTE)
        }
        Command::ExecuteCursor { columns } => {
            x.push(true, &[cmd::STMT_EXECUTE, 1, 0, 0, 0, 1, 1, 0, 0, 0]);
            x.server(&[*columns]);
            x.column_defs(u16::from(*columns));
            x.end_of_rows(AUTOCOMMIT | CURSOR_EXISTS);
            Some(cmd::STMT_EXECUTE)
        }
        Command::Fetch { rows } => {
            x.push(true, &[cmd::STMT_FETCH, 1, 0, 0, 0, 5, 0, 0, 0]);
            for r in rows {
                x.row(r, true);
            }
            x.end_of_rows(AUTOCOMMIT | CURSOR_EXISTS | LAST_ROW_SENT);
            Some(cmd::STMT_FETCH)
        }
        Command::Prepare {
            params,
            columns,
            err,
        } => {
            x.push(true, b"\x16SELECT ?");
            if *err {
                x.err();
            } else {
                let mut ok = vec![0x00];
                ok.extend_from_slice(&stmt);
                ok.extend_from_slice(&columns.to_le_bytes());
                ok.extend_from_slice(&params.to_le_bytes());
                ok.extend_from_slice(&[0, 0, 0]);
                x.server(&ok);
                if *params > 0 {
                    x.columns_then_eof(*params, AUTOCOMMIT);
                }
                if *columns > 0 {
                    x.columns_then_eof(*columns, AUTOCOMMIT);
                }
            }
            Some(cmd::STMT_PREPARE)
        }
        Command::FieldList { columns } => {
            x.push(true, b"\x04t\x00");
            x.column_defs(u16::from(*columns));
            x.eof(AUTOCOMMIT);
            Some(cmd::FIELD_LIST)
        }
        Command::Ping => {
            x.push(true, &[0x0E]);
            x.ok(AUTOCOMMIT);
            Some(0x0E)
        }
        Command::InitDb { err } => {
            x.push(true, b"\x02shop");
            if *err {
                x.err();
            } else {
                x.ok(AUTOCOMMIT);
            }
            Some(cmd::INIT_DB)
        }
        Command::Statistics => {
            x.push(true, &[cmd::STATISTICS]);
            x.server(b"Uptime: 56  Threads: 1  Questions: 96");
            Some(cmd::STATISTICS)
        }
        Command::Silent { long_data } => {
            if *long_data {
                x.push(true, &[cmd::STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0, b'x']);
            } else {
                x.push(true, &[cmd::STMT_CLOSE, 1, 0, 0, 0]);
            }
            None
        }
        Command::Infile { file } => {
            x.push(true, b"\x03LOAD DATA LOCAL INFILE 'f' INTO TABLE t");
            x.server(b"\xfbf");
            for piece in file {
                x.push(true, piece);
            }
            x.push(true, b"");
            x.ok(AUTOCOMMIT);
            Some(cmd::QUERY)
        }
        Command::ChangeUser { err } => {
            x.push(
                true,
                b"\x11app\x00\x00shop\x00\x2d\x00mysql_native_password\x00",
            );
            x.server(b"\xfemysql_native_password\x00abcdefghijklmnopqrst\x00");
            x.push(true, &[7; 20]);
            if *err {
                x.err();
            } else {
                x.ok(AUTOCOMMIT);
            }
            Some(cmd::CHANGE_USER)
        }
    };
    (x.packets, completed)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn tracker_check_holds_for_any_segments(config in any::<u8>(), raw in segments()) {
        checks::tracker(&encode(config, &raw));
    }

    #[test]
    fn tracker_check_holds_for_any_bytes(data in vec(any::<u8>(), 0..1024)) {
        checks::tracker(&data);
    }

    #[test]
    fn tracker_check_holds_for_mutated_captures(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..64,
    ) {
        checks::tracker(&mutated(&seeds("tracker"), pick, &edits, cut));
    }

    /// Generated commands answered by well-formed OK / ERR / result sets / prepare / cursor /
    /// infile / change-user exchanges, in any split and (when the client need not wait)
    /// pipelined: exactly one `Completed` per command that has an answer, in order, and the
    /// tracker ends idle.
    #[test]
    fn generated_responses_complete_each_command_once(
        commands in vec(command(), 1..12),
        deprecate_eof in any::<bool>(),
        progress in any::<bool>(),
        pipelined in any::<bool>(),
        seed in any::<u64>(),
        largest in prop_oneof![1usize..8, 8usize..600],
    ) {
        let mut caps = Negotiated::default();
        if deprecate_eof {
            caps.capabilities |= caps::CLIENT_DEPRECATE_EOF;
        }
        if progress {
            caps.mariadb_capabilities |= caps::MARIADB_CLIENT_PROGRESS;
        }
        let pipelined = pipelined && !commands.iter().any(Command::converses);
        let mut expected = Vec::new();
        // Runs of same-direction bytes, in the order they travel.
        let mut runs: Vec<(bool, Vec<u8>)> = Vec::new();
        let append = |client: bool, bytes: &[u8], runs: &mut Vec<(bool, Vec<u8>)>| {
            match runs.last_mut() {
                Some((c, b)) if *c == client => b.extend_from_slice(bytes),
                _ => runs.push((client, bytes.to_vec())),
            }
        };
        let mut server_tail = Vec::new();
        for c in &commands {
            let (packets, completed) = exchange(c, caps);
            expected.extend(completed);
            for (client, bytes) in packets {
                if pipelined && !client {
                    server_tail.extend_from_slice(&bytes);
                } else {
                    append(client, &bytes, &mut runs);
                }
            }
        }
        if pipelined {
            append(false, &server_tail, &mut runs);
        }
        let mut segments = Vec::new();
        for (i, (client, bytes)) in runs.iter().enumerate() {
            for piece in cut(bytes, seed ^ i as u64, largest) {
                segments.push(if *client {
                    Segment::Client { bytes: piece, written: true }
                } else {
                    Segment::Server(piece)
                });
            }
        }
        let run = checks::run_tracker(&TrackerInput {
            caps,
            max_packet: 1 << 30,
            renumber: (false, false),
            segments,
        });
        prop_assert_eq!(run.error, None);
        prop_assert_eq!(run.completed, expected);
        prop_assert_eq!(run.pending, 0);
        prop_assert!(run.idle);
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// The same generated exchanges with every packet's sequence id replaced by a random one, as
    /// behind a compressed leg, through a tracker renumbering both directions: what it lets
    /// through is the plain exchange byte for byte, and every command completes once, in order.
    #[test]
    fn drifting_ids_are_renumbered_to_the_generated_exchange(
        commands in vec(command(), 1..12),
        deprecate_eof in any::<bool>(),
        seed in any::<u64>(),
        largest in prop_oneof![1usize..8, 8usize..600],
    ) {
        let mut caps = Negotiated::default();
        if deprecate_eof {
            caps.capabilities |= caps::CLIENT_DEPRECATE_EOF;
        }
        let mut expected = Vec::new();
        let mut runs: Vec<(bool, Vec<u8>)> = Vec::new();
        for c in &commands {
            let (packets, completed) = exchange(c, caps);
            expected.extend(completed);
            for (client, bytes) in packets {
                match runs.last_mut() {
                    Some((c, b)) if *c == client => b.extend_from_slice(&bytes),
                    _ => runs.push((client, bytes)),
                }
            }
        }
        let drifted: Vec<Vec<u8>> = runs
            .iter()
            .enumerate()
            .map(|(i, (_, bytes))| drift(bytes, seed ^ ((i as u64) << 32)))
            .collect();
        let mut segments = Vec::new();
        for (i, ((client, _), bytes)) in runs.iter().zip(&drifted).enumerate() {
            for piece in cut(bytes, seed ^ i as u64, largest) {
                segments.push(if *client {
                    Segment::Client { bytes: piece, written: true }
                } else {
                    Segment::Server(piece)
                });
            }
        }
        let run = checks::run_tracker(&TrackerInput {
            caps,
            max_packet: 1 << 30,
            renumber: (true, true),
            segments,
        });
        prop_assert_eq!(run.error, None);
        prop_assert_eq!(run.completed, expected);
        let plain = |side: bool| -> Vec<u8> {
            runs.iter().filter(|r| r.0 == side).flat_map(|r| r.1.clone()).collect()
        };
        prop_assert!(run.client_out == plain(true), "client bytes not renumbered to plain");
        prop_assert!(run.server_out == plain(false), "server bytes not renumbered to plain");
        prop_assert!(run.idle);
    }
}

/// `bytes` (whole packets below 16 MiB) with every header's sequence id replaced by one drawn
/// from `seed`.
fn drift(bytes: &[u8], seed: u64) -> Vec<u8> {
    let mut rng = XorShift(seed | 1);
    let mut out = bytes.to_vec();
    let mut at = 0;
    while at + 4 <= out.len() {
        out[at + 3] = rng.next_u64() as u8;
        at += 4 + u32::from_le_bytes([out[at], out[at + 1], out[at + 2], 0]) as usize;
    }
    out
}

/// Real sessions captured from MariaDB 10.11 (mariadb CLI and a raw client: text and binary
/// protocol, cursors, multi-statements, LOAD DATA LOCAL with a progress report, change user,
/// pipelining) complete every command with no protocol error.
#[test]
fn captured_sessions_complete_every_command() {
    for (name, bytes) in files("corpus", "tracker") {
        let input = checks::decode_tracker(&bytes).expect("a tracker seed");
        let run = checks::run_tracker(&input);
        assert_eq!(run.error, None, "{name}");
        assert_eq!(run.pending, 0, "{name}");
        assert_eq!(run.completed.len(), run.commands, "{name}");
        assert!(run.idle, "{name}");
        // Plain numbering already: renumbering both directions changes nothing.
        let renumbered = checks::run_tracker(&TrackerInput {
            renumber: (true, true),
            ..input
        });
        assert_eq!(renumbered, run, "{name}");
    }
}

/// The relay slices `buf[start..end]` for a KILL candidate: the offsets must span one whole
/// packet in the buffer just scanned, even when the packet's header came in an earlier read.
#[test]
fn kill_offsets_span_one_packet_in_the_buffer_scanned() {
    // A COM_PING, then a KILL whose header and first bytes come in that read, the rest later.
    let first = [&[1u8, 0, 0, 0, 0x0E][..], &[7, 0, 0, 0], b"\x03KI"].concat();
    let second = b"LL 5".to_vec();
    let input = TrackerInput {
        caps: Negotiated::default(),
        max_packet: 1 << 30,
        renumber: (false, false),
        segments: vec![
            Segment::Client {
                bytes: &first,
                written: true,
            },
            Segment::Client {
                bytes: &second,
                written: true,
            },
        ],
    };
    let run = checks::run_tracker(&input);
    assert_eq!(run.commands, 2);
}

// ---------------------------------------------------------------------------------------------
// KILL parsing

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn kill_parse_never_panics(payload in vec(any::<u8>(), 0..64)) {
        let _ = kill::parse(&payload);
    }

    /// Statements built the way clients write KILL parse to their id; the prefix keeps the words
    /// (a query id, after `ID`, is never a connection's).
    #[test]
    fn kill_statements_parse_to_their_id(
        words in vec(prop::sample::select(vec!["HARD", "soft", "CONNECTION", "query", "ID"]), 0..3),
        id in any::<u64>(),
        space in prop::sample::select(vec![" ", "  ", "\t", "\n", " \r\n"]),
        semicolon in any::<bool>(),
    ) {
        let mut sql = String::from("kill");
        for w in &words {
            sql.push_str(space);
            sql.push_str(w);
        }
        sql.push_str(space);
        sql.push_str(&id.to_string());
        if semicolon {
            sql.push(';');
        }
        let payload = [&[cmd::QUERY][..], sql.as_bytes()].concat();
        prop_assert!(may_be_kill(&payload));
        // `KILL QUERY ID n` names a query id, never a connection: not mapped.
        if words.contains(&"ID") {
            prop_assert_eq!(kill::parse(&payload), None);
            return Ok(());
        }
        let k = kill::parse(&payload).expect("a KILL statement parses");
        prop_assert_eq!(k.id, id);
        let expected_prefix = std::iter::once("kill").chain(words.iter().copied()).collect::<Vec<_>>().join(" ") + " ";
        prop_assert_eq!(k.prefix, expected_prefix);
    }
}

/// MariaDB reads a vertical tab (\x0b) as whitespace, so `\x0bKILL QUERY <proxy id>` is a KILL
/// there; the relay must offer it to `kill::parse` (through `may_be_kill`) to map the id.
#[test]
fn kill_after_a_vertical_tab_is_offered_for_mapping() {
    let payload = [&[cmd::QUERY][..], b"\x0bKILL QUERY 3221225473"].concat();
    assert!(kill::parse(&payload).is_some());
    assert!(may_be_kill(&payload));
}

// ---------------------------------------------------------------------------------------------
// compress

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn compress_check_holds_for_any_bytes(data in vec(any::<u8>(), 0..2048)) {
        checks::compress(&data);
    }

    #[test]
    fn compress_check_holds_for_mutated_captures(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..64,
        control in any::<u8>(),
    ) {
        let mut data = mutated(&seeds("compress"), pick, &edits, cut);
        if let Some(first) = data.first_mut() {
            *first = control;
        }
        checks::compress(&data);
    }

    /// Well-formed plain packets, written in any split, come back whole through both roles,
    /// and the client role gives every command (inner id 0, not a continuation) a frame of
    /// its own with id 0.
    #[test]
    fn packets_round_trip_through_frames_in_both_roles(
        packets in vec((0u8..4, vec(any::<u8>(), 0..300)), 0..24),
        control in any::<u8>(),
    ) {
        let mut plain = Vec::new();
        let mut command_starts = Vec::new();
        for (seq, payload) in &packets {
            if *seq == 0 {
                command_starts.push(plain.len());
            }
            plain.extend(packet(*seq, payload));
        }
        let mut data = vec![control];
        data.extend_from_slice(&plain);
        checks::compress(&data);
        let mut e = FrameEncoder::new(Role::Client);
        e.on_frame_read(41);
        let mut wire = BytesMut::new();
        for w in checks::split(&plain, control) {
            e.encode(w, &mut wire);
        }
        let mut at = 0;
        let mut pos = 0;
        while pos < wire.len() {
            let h = &wire[pos..pos + 7];
            let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
            let mut frame = BytesMut::new();
            FrameDecoder::new().decode(&wire[pos..pos + 7 + len], &mut frame).unwrap();
            if command_starts.contains(&at) {
                prop_assert_eq!(h[3], 0, "a command starting at {} in a frame of its own", at);
            }
            for &c in &command_starts {
                prop_assert!(!(at < c && c < at + frame.len()), "command at {} inside a frame", c);
            }
            at += frame.len();
            pos += 7 + len;
        }
        prop_assert_eq!(at, plain.len());
    }
}

// ---------------------------------------------------------------------------------------------
// seeds and crash reproducers

/// Every committed seed (fuzz/corpus/) and every crash reproducer (fuzz/artifacts/) passes its
/// target's check: a crash found by a long fuzz run fails here until it is fixed.
#[test]
fn fuzz_seeds_and_crash_reproducers_pass_the_checks() {
    type Check = fn(&[u8]);
    let targets: [(&str, Check); 11] = [
        ("codec", checks::codec),
        ("compress", checks::compress),
        ("greeting", checks::greeting),
        ("handshake_response", checks::handshake_response),
        ("tracker", checks::tracker),
        ("proxy_header", proxy_in_checks::proxy_header),
        ("sql_digest", sql_digest_checks::sql_digest),
        ("pooled_front", pooled_front_checks::pooled_front),
        ("tls_records", tls_records_checks::tls_records),
        ("gtid_pos", gtid_pos_checks::gtid_pos),
        ("query_rules", query_rules_checks::query_rules),
    ];
    let mut failed = Vec::new();
    for (target, check) in targets {
        for kind in ["corpus", "artifacts"] {
            for (name, bytes) in files(kind, target) {
                if name.starts_with("slow-unit-") {
                    continue;
                }
                if std::panic::catch_unwind(|| check(&bytes)).is_err() {
                    failed.push(format!("fuzz/{kind}/{target}/{name}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "checks fail on: {failed:#?}");
}

// ---------------------------------------------------------------------------------------------
// PROXY protocol headers

proptest! {
    #![proptest_config(config(300))]

    /// The fuzz target's check (verdicts stable as bytes arrive) on mutated seed headers.
    #[test]
    fn proxy_header_check_holds_for_mutated_seeds(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..4),
        cut in 0usize..16,
    ) {
        proxy_in_checks::proxy_header(&mutated(&seeds("proxy_header"), pick, &edits, cut));
    }
}

// ---------------------------------------------------------------------------------------------
// a pooled session's command front

proptest! {
    #![proptest_config(config(300))]

    /// The fuzz target's check (verdicts stable, ranges inside their packet, rewrites exact)
    /// on any client bytes.
    #[test]
    fn pooled_front_check_holds_for_any_bytes(data in vec(any::<u8>(), 0..512)) {
        pooled_front_checks::pooled_front(&data);
    }

    /// The same on mutated seeds: real statement traffic, empty packets, malformed commands.
    #[test]
    fn pooled_front_check_holds_for_mutated_seeds(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..32,
    ) {
        pooled_front_checks::pooled_front(&mutated(&seeds("pooled_front"), pick, &edits, cut));
    }
}

// ---------------------------------------------------------------------------------------------
// the client leg's TLS records

proptest! {
    #![proptest_config(config(300))]

    /// The fuzz target's check (data as sealed, limits and rules refused, offsets inside the
    /// bytes given, the layer's own records open) on any operations.
    #[test]
    fn tls_records_check_holds_for_any_bytes(data in vec(any::<u8>(), 0..600)) {
        tls_records_checks::tls_records(&data);
    }

    /// The same on mutated seeds: data, KeyUpdates both ways, padding at and past the limit,
    /// alerts, records after close_notify, both versions and both AEADs.
    #[test]
    fn tls_records_check_holds_for_mutated_seeds(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..6),
        cut in 0usize..32,
    ) {
        tls_records_checks::tls_records(&mutated(&seeds("tls_records"), pick, &edits, cut));
    }
}

// ---------------------------------------------------------------------------------------------
// MariaDB GTID positions

proptest! {
    #![proptest_config(config(300))]

    /// The fuzz target's check (errors say where, round trips, merge and covers on itself) on
    /// any bytes.
    #[test]
    fn gtid_pos_check_holds_for_any_bytes(data in vec(any::<u8>(), 0..128)) {
        gtid_pos_checks::gtid_pos(&data);
    }

    /// The same on mutated seeds: positions captured from MariaDB, whitespace around commas,
    /// the largest numbers, 1024 and 1025 domains, and broken ones.
    #[test]
    fn gtid_pos_check_holds_for_mutated_seeds(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..4),
        cut in 0usize..16,
    ) {
        gtid_pos_checks::gtid_pos(&mutated(&seeds("gtid_pos"), pick, &edits, cut));
    }

    /// Query rules' check (one answer per text, a refusal kept after another statement, no
    /// empty statement) on mutated seeds: comments, escapes, dynamic SQL, unfollowable texts.
    #[test]
    fn query_rules_check_holds_for_mutated_seeds(
        pick in any::<usize>(),
        edits in vec((any::<usize>(), any::<u8>()), 0..4),
        cut in 0usize..16,
    ) {
        query_rules_checks::query_rules(&mutated(&seeds("query_rules"), pick, &edits, cut));
    }
}
