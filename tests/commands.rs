//! The command phase end to end: real MariaDB servers behind mysql-lb, driven by mysql_async, the
//! `mariadb` CLI and the raw protocol client.
//!
//! The proxy forwards bytes untouched but must know where each response ends: its sequence-id
//! checks, its pending-command queue and its latency metrics all depend on it. Every test runs a
//! command whose response has a distinct shape (result sets, cursors, multi-results, LOCAL
//! INFILE, 16 MiB chunks, auth exchanges, progress reports, pipelining) and checks the values.
//! The raw-protocol tests also pipeline a COM_PING behind the command: if the proxy ended the
//! response early or late, the next packet would break its sequence-id check and it would drop
//! the session, so reading the ping's OK proves the boundary. Exact command counts from the
//! latency sink prove each response was recorded once. Tests share two servers and run in
//! parallel, so each creates its own uniquely named objects.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::proxy::TestProxy;
use common::rawclient::{
    connect_raw, handshake_response, parse_err, parse_greeting, RawClient, Rows,
    CLIENT_CONNECT_WITH_DB, CLIENT_DEPRECATE_EOF, CLIENT_LONG_FLAG, CLIENT_LONG_PASSWORD,
    CLIENT_MULTI_RESULTS, CLIENT_MULTI_STATEMENTS, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41,
    CLIENT_PS_MULTI_RESULTS, CLIENT_SECURE_CONNECTION, CLIENT_TRANSACTIONS, COM_INIT_DB, COM_PING,
    COM_QUERY,
};
use mysql_async::prelude::Queryable;
use mysql_async::{ChangeUserOpts, Conn, OptsBuilder, Row, Value, WhiteListFsHandler};
use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use mysql_lb::wire::protocol::response::CommandKind;

const COM_FIELD_LIST: u8 = 0x04;
const COM_STATISTICS: u8 = 0x09;
const COM_CHANGE_USER: u8 = 0x11;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
const COM_STMT_CLOSE: u8 = 0x19;
const COM_STMT_FETCH: u8 = 0x1c;

const CURSOR_TYPE_READ_ONLY: u8 = 0x01;
const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;
const SERVER_STATUS_LAST_ROW_SENT: u16 = 0x0080;
/// MariaDB: a statement id of -1 means "the statement prepared last on this connection".
const LAST_PREPARED: u32 = 0xFFFF_FFFF;
const MAX_CHUNK: usize = 0xFF_FFFF;

const MYSQL_TYPE_TINY: u8 = 0x01;
const MYSQL_TYPE_SHORT: u8 = 0x02;
const MYSQL_TYPE_LONG: u8 = 0x03;
const MYSQL_TYPE_LONGLONG: u8 = 0x08;
const MYSQL_TYPE_INT24: u8 = 0x09;
const MYSQL_TYPE_YEAR: u8 = 0x0d;
const MYSQL_TYPE_VAR_STRING: u8 = 0xfd;

/// Bounds every wait on the proxy, so a desynchronised tracker fails a test instead of hanging it.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Setup helpers

fn pair_proxy() -> TestProxy {
    let pair = shared_pair();
    TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()])
}

/// A name no other test (nor an earlier run against the same servers) uses.
fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn opts_with_db(proxy: &TestProxy) -> OptsBuilder {
    OptsBuilder::from_opts(proxy.opts(BENCH_USER, BENCH_PASS)).db_name(Some("test"))
}

async fn connect(proxy: &TestProxy) -> Conn {
    Conn::new(opts_with_db(proxy))
        .await
        .expect("mysql_async connects through the proxy")
}

async fn raw(proxy: &TestProxy, extra_caps: u32, removed_caps: u32) -> RawClient {
    let client = RawClient::connect_tcp(
        &proxy.addr_string(),
        BENCH_USER,
        BENCH_PASS,
        Some("test"),
        extra_caps,
        removed_caps,
    )
    .await
    .expect("raw client logs in through the proxy");
    assert_ne!(
        client.server_caps & CLIENT_DEPRECATE_EOF,
        0,
        "the proxy should offer CLIENT_DEPRECATE_EOF (MariaDB 10.11 does)"
    );
    client
}

fn server_code(e: &mysql_async::Error) -> Option<(u16, &str)> {
    match e {
        mysql_async::Error::Server(s) => Some((s.code, s.state.as_str())),
        _ => None,
    }
}

/// Sums one per-kind series of `backend_query_duration_seconds` (`count` or `sum`) over every
/// backend, as /metrics shows it.
fn query_duration_series(proxy: &TestProxy, series: &str, kind: CommandKind) -> f64 {
    let text = String::from_utf8(proxy.state.metrics.render()).expect("exposition is UTF-8");
    let prefix = format!("mysql_lb_backend_query_duration_seconds_{series}{{");
    let label = format!("command=\"{}\"", kind.as_str());
    text.lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(&label))
        .map(|l| {
            let value = l.rsplit(' ').next().unwrap_or_default();
            value.parse::<f64>().unwrap_or_else(|e| panic!("{l}: {e}"))
        })
        .sum()
}

fn kind_count(proxy: &TestProxy, kind: CommandKind) -> u64 {
    query_duration_series(proxy, "count", kind) as u64
}

/// Waits until `value()` reaches `target` (recording runs as responses flow) or 5 s pass, then
/// returns it for the caller's exact assertion.
async fn wait_for_count(target: u64, value: impl Fn() -> u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = value();
        if v >= target || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deterministic bytes that include every value, 0x00/0xFB/0xFE/0xFF among them.
fn pseudo_random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&seed.to_le_bytes()[..take]);
    }
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

// ---------------------------------------------------------------------------------------------
// Raw protocol helpers (independent of the proxy's own parsing)

fn frame(seq: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < MAX_CHUNK, "test frames are single chunks");
    let len = u32::try_from(payload.len()).expect("small payload");
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&len.to_le_bytes()[..3]);
    out.push(seq);
    out.extend_from_slice(payload);
    out
}

fn command(cmd: u8, body: &[u8]) -> Vec<u8> {
    let mut payload = vec![cmd];
    payload.extend_from_slice(body);
    frame(0, &payload)
}

fn execute_body(stmt_id: u32, flags: u8) -> Vec<u8> {
    let mut body = stmt_id.to_le_bytes().to_vec();
    body.push(flags);
    body.extend_from_slice(&1u32.to_le_bytes()); // iteration count
    body
}

fn fetch_body(stmt_id: u32, rows: u32) -> Vec<u8> {
    let mut body = stmt_id.to_le_bytes().to_vec();
    body.extend_from_slice(&rows.to_le_bytes());
    body
}

async fn read(c: &mut RawClient) -> (u8, Vec<u8>) {
    tokio::time::timeout(STEP_TIMEOUT, c.read_logical())
        .await
        .unwrap_or_else(|_| panic!("no packet within {STEP_TIMEOUT:?}: the session is stuck"))
        .unwrap_or_else(|e| panic!("reading a packet through the proxy: {e}"))
}

async fn send(c: &mut RawClient, bytes: &[u8]) {
    c.send_raw(bytes).await.expect("write to the proxy");
}

fn lenenc(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let first = buf[*pos];
    *pos += 1;
    let width = match first {
        0xfb => return None,
        0..=0xfa => return Some(u64::from(first)),
        0xfc => 2,
        0xfd => 3,
        _ => 8,
    };
    let mut bytes = [0u8; 8];
    bytes[..width].copy_from_slice(&buf[*pos..*pos + width]);
    *pos += width;
    Some(u64::from_le_bytes(bytes))
}

fn lenenc_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len = usize::try_from(lenenc(buf, pos)?).expect("length fits");
    let bytes = &buf[*pos..*pos + len];
    *pos += len;
    Some(bytes)
}

fn deprecate_eof(c: &RawClient) -> bool {
    c.caps & CLIENT_DEPRECATE_EOF != 0
}

/// EOF, or the 0xFE-headed OK that replaces it under CLIENT_DEPRECATE_EOF.
fn is_end(c: &RawClient, payload: &[u8]) -> bool {
    payload.first() == Some(&0xfe)
        && if deprecate_eof(c) {
            payload.len() < MAX_CHUNK
        } else {
            payload.len() < 9
        }
}

fn ok_status(payload: &[u8]) -> u16 {
    let mut pos = 1;
    lenenc(payload, &mut pos);
    lenenc(payload, &mut pos);
    u16::from_le_bytes([payload[pos], payload[pos + 1]])
}

fn eof_status(payload: &[u8]) -> u16 {
    u16::from_le_bytes([payload[3], payload[4]])
}

fn end_status(c: &RawClient, payload: &[u8]) -> u16 {
    if deprecate_eof(c) {
        ok_status(payload)
    } else {
        eof_status(payload)
    }
}

/// The column type byte of a ColumnDefinition41.
fn column_type(def: &[u8]) -> u8 {
    let mut pos = 0;
    for _ in 0..6 {
        lenenc_bytes(def, &mut pos); // catalog, schema, table, org_table, name, org_name
    }
    lenenc(def, &mut pos); // length of the fixed fields
    def[pos + 2 + 4] // after charset (2) and column length (4)
}

fn text_row(payload: &[u8], columns: usize) -> Vec<Option<String>> {
    let mut pos = 0;
    (0..columns)
        .map(|_| lenenc_bytes(payload, &mut pos).map(|b| String::from_utf8_lossy(b).into_owned()))
        .collect()
}

fn binary_row(payload: &[u8], types: &[u8]) -> Vec<Option<String>> {
    assert_eq!(payload[0], 0x00, "binary row header: {payload:02x?}");
    let bitmap_len = (types.len() + 7 + 2) / 8;
    let bitmap = &payload[1..1 + bitmap_len];
    let mut pos = 1 + bitmap_len;
    let mut row = Vec::with_capacity(types.len());
    for (i, &ty) in types.iter().enumerate() {
        let bit = i + 2;
        if bitmap[bit / 8] & (1 << (bit % 8)) != 0 {
            row.push(None);
            continue;
        }
        let width = match ty {
            MYSQL_TYPE_TINY => 1,
            MYSQL_TYPE_SHORT | MYSQL_TYPE_YEAR => 2,
            MYSQL_TYPE_LONG | MYSQL_TYPE_INT24 => 4,
            MYSQL_TYPE_LONGLONG => 8,
            _ => 0,
        };
        let value = if width > 0 {
            let mut bytes = [0u8; 8];
            bytes[..width].copy_from_slice(&payload[pos..pos + width]);
            pos += width;
            // Sign-extend from the field's width.
            let shift = 64 - 8 * width as u32;
            ((i64::from_le_bytes(bytes) << shift) >> shift).to_string()
        } else {
            let bytes = lenenc_bytes(payload, &mut pos).expect("not NULL");
            String::from_utf8_lossy(bytes).into_owned()
        };
        row.push(Some(value));
    }
    row
}

/// One complete answer as a client sees it.
#[derive(Debug, PartialEq)]
enum Reply {
    Ok { status: u16 },
    Err(String),
    Rows { rows: Rows, status: u16 },
}

/// Reads one result (OK, ERR or a whole result set), text or binary rows.
async fn read_result(c: &mut RawClient, binary: bool) -> Reply {
    let (_, first) = read(c).await;
    match first.first() {
        Some(0x00) => Reply::Ok {
            status: ok_status(&first),
        },
        Some(0xff) => Reply::Err(parse_err(&first)),
        _ => {
            let mut pos = 0;
            let columns = lenenc(&first, &mut pos).expect("column count");
            let types = read_column_defs(c, columns).await;
            if !deprecate_eof(c) {
                let (_, eof) = read(c).await;
                assert!(is_end(c, &eof), "EOF after column definitions: {eof:02x?}");
            }
            let (rows, status) = read_rows(c, &types, binary).await;
            Reply::Rows { rows, status }
        }
    }
}

/// Reads every result of a multi-result response.
async fn read_results(c: &mut RawClient, binary: bool) -> Vec<Reply> {
    let mut replies = Vec::new();
    loop {
        let reply = read_result(c, binary).await;
        let more = match &reply {
            Reply::Ok { status } | Reply::Rows { status, .. } => {
                status & SERVER_MORE_RESULTS_EXISTS != 0
            }
            Reply::Err(_) => false,
        };
        replies.push(reply);
        if !more {
            return replies;
        }
    }
}

async fn read_column_defs(c: &mut RawClient, columns: u64) -> Vec<u8> {
    let mut types = Vec::new();
    for _ in 0..columns {
        let (_, def) = read(c).await;
        types.push(column_type(&def));
    }
    types
}

/// Rows up to the terminating EOF/OK; returns them with the terminator's status flags.
async fn read_rows(c: &mut RawClient, types: &[u8], binary: bool) -> (Rows, u16) {
    let mut rows = Vec::new();
    loop {
        let (_, packet) = read(c).await;
        assert_ne!(
            packet.first(),
            Some(&0xff),
            "ERR in rows: {}",
            parse_err(&packet)
        );
        if is_end(c, &packet) {
            return (rows, end_status(c, &packet));
        }
        rows.push(if binary {
            binary_row(&packet, types)
        } else {
            text_row(&packet, types.len())
        });
    }
}

/// A COM_STMT_PREPARE response: the statement id; the definitions are read and dropped.
async fn read_prepare_ok(c: &mut RawClient) -> (u32, u16, u16) {
    let (_, ok) = read(c).await;
    assert_eq!(
        ok.first(),
        Some(&0x00),
        "STMT_PREPARE_OK expected: {}",
        parse_err(&ok)
    );
    let id = u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]]);
    let columns = u16::from_le_bytes([ok[5], ok[6]]);
    let params = u16::from_le_bytes([ok[7], ok[8]]);
    for block in [params, columns] {
        if block > 0 {
            read_column_defs(c, u64::from(block)).await;
            if !deprecate_eof(c) {
                let (_, eof) = read(c).await;
                assert!(is_end(c, &eof), "EOF after definitions: {eof:02x?}");
            }
        }
    }
    (id, columns, params)
}

async fn prepare(c: &mut RawClient, sql: &str) -> (u32, u16, u16) {
    send(c, &command(COM_STMT_PREPARE, sql.as_bytes())).await;
    read_prepare_ok(c).await
}

async fn query(c: &mut RawClient, sql: &str) -> Rows {
    tokio::time::timeout(STEP_TIMEOUT, c.query_text(sql))
        .await
        .unwrap_or_else(|_| panic!("{sql}: no answer within {STEP_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Sends `bytes` with a COM_PING behind them in the same write. The proxy's tracker must end the
/// first response exactly where the server does: if it ended it early, the rest would be checked
/// against the ping's sequence ids; if late, the ping's OK against the first command's. Either
/// way the proxy would drop the session, so [`read_ping_ok`] proves the boundary was right.
async fn send_with_ping(c: &mut RawClient, bytes: &[u8]) {
    let mut out = bytes.to_vec();
    out.extend(command(COM_PING, &[]));
    send(c, &out).await;
}

async fn read_ping_ok(c: &mut RawClient) {
    let (seq, ok) = read(c).await;
    assert_eq!(
        (seq, ok.first()),
        (1, Some(&0x00)),
        "the pipelined ping's OK: {ok:02x?}"
    );
}

fn cell(s: &str) -> Option<String> {
    Some(s.to_owned())
}

// ---------------------------------------------------------------------------------------------
// 1. Text queries, errors, transactions

#[tokio::test]
async fn select_returns_the_rows_and_values_the_server_holds() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let t = unique("rows");
    conn.query_drop(format!(
        "CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(40), score DOUBLE NULL)"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "INSERT INTO {t} VALUES (1, 'alpha', 1.5), (2, 'beta', NULL), (3, 'gamma ünïcødé', -2.25)"
    ))
    .await
    .unwrap();

    let rows: Vec<(i32, String, Option<f64>)> = conn
        .query(format!("SELECT id, name, score FROM {t} ORDER BY id"))
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![
            (1, "alpha".to_owned(), Some(1.5)),
            (2, "beta".to_owned(), None),
            (3, "gamma ünïcødé".to_owned(), Some(-2.25)),
        ]
    );
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn select_matching_nothing_returns_an_empty_result_set_with_its_columns() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let t = unique("empty");
    conn.query_drop(format!("CREATE TABLE {t} (id INT, v VARCHAR(8))"))
        .await
        .unwrap();

    let mut result = conn
        .query_iter(format!("SELECT id, v FROM {t} WHERE id > 100"))
        .await
        .unwrap();
    assert_eq!(result.columns_ref().len(), 2, "column definitions arrive");
    let rows: Vec<Row> = result.collect().await.unwrap();
    assert!(rows.is_empty(), "no rows expected, got {}", rows.len());
    drop(result);

    // The empty result ended exactly where the proxy thought: the next answer is the right one.
    let n: Option<i64> = conn.query_first("SELECT 41 + 1").await.unwrap();
    assert_eq!(n, Some(42));
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn server_errors_pass_through_with_their_code_and_sqlstate() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let missing = unique("missing");

    let e = conn
        .query_drop(format!("SELECT * FROM {missing}"))
        .await
        .unwrap_err();
    assert_eq!(server_code(&e), Some((1146, "42S02")), "{e}");
    assert!(
        e.to_string().contains(&missing),
        "message names the table: {e}"
    );

    let e = conn.query_drop("SELEKT 1").await.unwrap_err();
    assert_eq!(server_code(&e), Some((1064, "42000")), "{e}");

    let e = conn
        .exec_drop(format!("SELECT * FROM {missing} WHERE id = ?"), (1,))
        .await
        .unwrap_err();
    assert_eq!(server_code(&e), Some((1146, "42S02")), "prepare error: {e}");

    let one: Option<i32> = conn.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1), "the session survives errors");

    let mut c = raw(&proxy, 0, 0).await;
    let e = c
        .query_text("SELECT * FROM no_such_table_here")
        .await
        .unwrap_err();
    assert_eq!(e, "1146: Table 'test.no_such_table_here' doesn't exist");
    assert_eq!(
        query(&mut c, "SELECT 'after'").await,
        vec![vec![cell("after")]]
    );
    conn.disconnect().await.unwrap();
}

/// A correlated subquery that returns one row for the first outer row and two for the second:
/// the server has sent column definitions and a row when it hits ERR 1242.
const FAILS_AFTER_ONE_ROW: &str =
    "SELECT t.seq, (SELECT s.seq FROM seq_1_to_2 s WHERE s.seq <= t.seq) \
     FROM seq_1_to_5 t ORDER BY t.seq";

/// Reads a result set that an ERR cuts short: the rows before it and the ERR's text.
async fn read_rows_until_err(c: &mut RawClient, binary: bool) -> (Rows, String) {
    let (_, first) = read(c).await;
    let mut pos = 0;
    let columns = lenenc(&first, &mut pos).expect("column count");
    let types = read_column_defs(c, columns).await;
    if !deprecate_eof(c) {
        let (_, eof) = read(c).await;
        assert!(is_end(c, &eof), "{eof:02x?}");
    }
    let mut rows = Vec::new();
    loop {
        let (_, packet) = read(c).await;
        if packet.first() == Some(&0xff) {
            return (rows, parse_err(&packet));
        }
        assert!(!is_end(c, &packet), "the result set ended without the ERR");
        rows.push(if binary {
            binary_row(&packet, &types)
        } else {
            text_row(&packet, types.len())
        });
    }
}

async fn error_mid_result_scenario(extra_caps: u32, removed_caps: u32) {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;
    send_with_ping(&mut c, &command(COM_QUERY, FAILS_AFTER_ONE_ROW.as_bytes())).await;
    let (rows, err) = read_rows_until_err(&mut c, false).await;
    assert_eq!(rows, vec![vec![cell("1"), cell("1")]]);
    assert!(err.starts_with("1242: "), "{err}");
    read_ping_ok(&mut c).await;

    let (stmt, _, _) = prepare(&mut c, FAILS_AFTER_ONE_ROW).await;
    send_with_ping(&mut c, &command(COM_STMT_EXECUTE, &execute_body(stmt, 0))).await;
    let (rows, err) = read_rows_until_err(&mut c, true).await;
    assert_eq!(rows, vec![vec![cell("1"), cell("1")]]);
    assert!(err.starts_with("1242: "), "{err}");
    read_ping_ok(&mut c).await;

    assert_eq!(
        query(&mut c, "SELECT 'next'").await,
        vec![vec![cell("next")]]
    );
    // query, prepare, execute, the last query and two pings.
    assert_eq!(wait_for_count(6, || proxy.total_commands()).await, 6);
}

#[tokio::test]
async fn an_error_after_rows_have_been_sent_ends_the_result_set() {
    error_mid_result_scenario(0, CLIENT_DEPRECATE_EOF).await;
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let e = conn.query_drop(FAILS_AFTER_ONE_ROW).await.unwrap_err();
    assert_eq!(server_code(&e), Some((1242, "21000")), "{e}");
    let n: Option<i32> = conn.query_first("SELECT 3").await.unwrap();
    assert_eq!(n, Some(3));
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn an_error_after_rows_have_been_sent_ends_the_result_set_deprecate_eof() {
    error_mid_result_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

#[tokio::test]
async fn rollback_discards_an_insert_and_commit_keeps_it() {
    // One backend, so a second connection sees the same server.
    let pair = shared_pair();
    let proxy = TestProxy::start(&[pair[0].tcp_addr()]);
    let mut conn = connect(&proxy).await;
    let t = unique("tx");
    conn.query_drop(format!(
        "CREATE TABLE {t} (id INT PRIMARY KEY) ENGINE=InnoDB"
    ))
    .await
    .unwrap();

    conn.query_drop("BEGIN").await.unwrap();
    conn.query_drop(format!("INSERT INTO {t} VALUES (1)"))
        .await
        .unwrap();
    let inside: Option<i64> = conn
        .query_first(format!("SELECT COUNT(*) FROM {t}"))
        .await
        .unwrap();
    assert_eq!(inside, Some(1), "the transaction sees its own insert");
    conn.query_drop("ROLLBACK").await.unwrap();
    let after_rollback: Option<i64> = conn
        .query_first(format!("SELECT COUNT(*) FROM {t}"))
        .await
        .unwrap();
    assert_eq!(after_rollback, Some(0), "ROLLBACK leaves no row");

    conn.query_drop("BEGIN").await.unwrap();
    conn.query_drop(format!("INSERT INTO {t} VALUES (2)"))
        .await
        .unwrap();
    conn.query_drop("COMMIT").await.unwrap();

    let mut other = connect(&proxy).await;
    let ids: Vec<i32> = other
        .query(format!("SELECT id FROM {t} ORDER BY id"))
        .await
        .unwrap();
    assert_eq!(
        ids,
        vec![2],
        "COMMIT keeps the row, visible to another session"
    );
    other.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    other.disconnect().await.unwrap();
    conn.disconnect().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 2. Prepared statements and cursors

#[tokio::test]
async fn prepared_statements_bind_ints_floats_strings_bytes_dates_and_null() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let t = unique("ps");
    conn.query_drop(format!(
        "CREATE TABLE {t} (id INT PRIMARY KEY, big BIGINT, d DOUBLE, s VARCHAR(64), \
         b VARBINARY(64), ts DATETIME, n INT NULL)"
    ))
    .await
    .unwrap();

    let bytes = vec![0x00u8, 0xfb, 0xfe, 0xff, b'x'];
    let ts = Value::Date(2024, 2, 29, 13, 14, 15, 0);
    conn.exec_drop(
        format!("INSERT INTO {t} VALUES (?, ?, ?, ?, ?, ?, ?)"),
        (
            7i32,
            -9_000_000_000i64,
            3.25f64,
            "naïve 'quoted'",
            bytes.clone(),
            ts.clone(),
            Option::<i32>::None,
        ),
    )
    .await
    .unwrap();

    let row: Row = conn
        .exec_first(
            format!("SELECT id, big, d, s, b, ts, n FROM {t} WHERE id = ?"),
            (7,),
        )
        .await
        .unwrap()
        .expect("the inserted row");
    assert_eq!(row.get::<i32, _>(0), Some(7));
    assert_eq!(row.get::<i64, _>(1), Some(-9_000_000_000));
    assert_eq!(row.get::<f64, _>(2), Some(3.25));
    assert_eq!(row.get::<String, _>(3).as_deref(), Some("naïve 'quoted'"));
    assert_eq!(row.get::<Vec<u8>, _>(4), Some(bytes));
    assert_eq!(row.as_ref(5), Some(&ts));
    assert_eq!(row.as_ref(6), Some(&Value::NULL));

    let nulls: Option<i64> = conn
        .exec_first(
            format!("SELECT COUNT(*) FROM {t} WHERE n IS NULL AND s = ?"),
            ("naïve 'quoted'",),
        )
        .await
        .unwrap();
    assert_eq!(nulls, Some(1));
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn a_prepared_statement_reused_many_times_answers_each_execution() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let stmt = conn.prep("SELECT ? * 2, CONCAT('n', ?)").await.unwrap();
    for i in 0..300i64 {
        let got: Option<(i64, String)> = conn.exec_first(&stmt, (i, i)).await.unwrap();
        assert_eq!(got, Some((i * 2, format!("n{i}"))));
    }
    conn.close(stmt).await.unwrap();
    let n: Option<i32> = conn.query_first("SELECT 5").await.unwrap();
    assert_eq!(n, Some(5));
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn many_prepared_statements_beyond_the_client_cache_stay_usable() {
    let proxy = pair_proxy();
    let mut conn = Conn::new(opts_with_db(&proxy).stmt_cache_size(8))
        .await
        .unwrap();
    // 120 distinct statements with a cache of 8: the client closes evicted ones as it goes,
    // so prepares, executes and COM_STMT_CLOSEs (which have no reply) interleave.
    for round in 0..2 {
        for i in 0..120i64 {
            let got: Option<i64> = conn
                .exec_first(format!("SELECT {i} + ? + {round}"), (1000,))
                .await
                .unwrap();
            assert_eq!(got, Some(i + 1000 + round));
        }
    }
    let n: Option<i32> = conn.query_first("SELECT 6").await.unwrap();
    assert_eq!(n, Some(6));
    conn.disconnect().await.unwrap();
}

/// Executes `stmt` with a read-only cursor (a ping pipelined behind it) and reads the metadata;
/// returns the column types and the status flags of the EOF/OK that ends it.
async fn execute_with_cursor(c: &mut RawClient, stmt: u32) -> (Vec<u8>, u16) {
    send_with_ping(
        c,
        &command(COM_STMT_EXECUTE, &execute_body(stmt, CURSOR_TYPE_READ_ONLY)),
    )
    .await;
    let (_, count) = read(c).await;
    let mut pos = 0;
    let columns = lenenc(&count, &mut pos).expect("column count");
    let types = read_column_defs(c, columns).await;
    let (_, end) = read(c).await;
    assert!(is_end(c, &end), "metadata ends with EOF/OK: {end:02x?}");
    let status = end_status(c, &end);
    read_ping_ok(c).await;
    (types, status)
}

/// One COM_STMT_FETCH (a ping pipelined behind it): the rows and the final status flags.
async fn fetch(c: &mut RawClient, stmt: u32, rows: u32, types: &[u8]) -> (Rows, u16) {
    send_with_ping(c, &command(COM_STMT_FETCH, &fetch_body(stmt, rows))).await;
    let batch = read_rows(c, types, true).await;
    read_ping_ok(c).await;
    batch
}

/// Prepare, execute with a read-only cursor, fetch in batches of two until the server says the
/// last row was sent, fetch once more (an ERR), then a plain query on the same connection. Every
/// command has a ping pipelined behind it, so the proxy must end each response exactly.
async fn cursor_fetch_scenario(extra_caps: u32, removed_caps: u32) {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;
    let t = unique("cur");
    query(
        &mut c,
        &format!("CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(16))"),
    )
    .await;
    query(
        &mut c,
        &format!("INSERT INTO {t} VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),(5,'e'),(6,'f'),(7,'g')"),
    )
    .await;
    let before_total = proxy.total_commands();
    let before_query = kind_count(&proxy, CommandKind::Query);
    let before_other = kind_count(&proxy, CommandKind::Other);

    let (stmt, columns, params) =
        prepare(&mut c, &format!("SELECT id, v FROM {t} ORDER BY id")).await;
    assert_eq!((columns, params), (2, 0));

    let (types, status) = execute_with_cursor(&mut c, stmt).await;
    assert_eq!(types, [MYSQL_TYPE_LONG, MYSQL_TYPE_VAR_STRING]);
    assert_ne!(
        status & SERVER_STATUS_CURSOR_EXISTS,
        0,
        "a cursor is open, no rows sent yet: {status:#06x}"
    );

    let mut rows = Vec::new();
    let mut fetches = 0u64;
    loop {
        assert!(fetches < 10, "the cursor never reported its last row");
        let (batch, status) = fetch(&mut c, stmt, 2, &types).await;
        fetches += 1;
        assert!(batch.len() <= 2, "fetch of 2 returned {} rows", batch.len());
        rows.extend(batch);
        if status & SERVER_STATUS_LAST_ROW_SENT != 0 {
            assert_eq!(
                status & SERVER_STATUS_CURSOR_EXISTS,
                0,
                "the last batch closes the cursor: {status:#06x}"
            );
            break;
        }
        assert_ne!(
            status & SERVER_STATUS_CURSOR_EXISTS,
            0,
            "status {status:#06x}"
        );
    }
    assert_eq!(fetches, 4, "7 rows in batches of 2");
    let expected: Rows = (b'a'..=b'g')
        .zip(1..)
        .map(|(v, id)| vec![Some(id.to_string()), Some(char::from(v).to_string())])
        .collect();
    assert_eq!(rows, expected);

    // The cursor is closed now: one more fetch is answered by a single ERR.
    send_with_ping(&mut c, &command(COM_STMT_FETCH, &fetch_body(stmt, 2))).await;
    let (_, err) = read(&mut c).await;
    assert_eq!(err.first(), Some(&0xff), "fetch past the end: {err:02x?}");
    read_ping_ok(&mut c).await;

    send(&mut c, &command(COM_STMT_CLOSE, &stmt.to_le_bytes())).await;
    assert_eq!(
        query(&mut c, "SELECT 'in sync'").await,
        vec![vec![cell("in sync")]]
    );

    // prepare + execute + 4 fetches + the failed fetch + the query, and a ping behind the
    // execute and behind each fetch; COM_STMT_CLOSE has no reply.
    let pings = 1 + fetches + 1;
    let expected_total = before_total + 1 + 1 + fetches + 1 + 1 + pings;
    let total = wait_for_count(expected_total, || proxy.total_commands()).await;
    assert_eq!(total, expected_total, "completed commands recorded");
    assert_eq!(kind_count(&proxy, CommandKind::Query), before_query + 1);
    assert_eq!(kind_count(&proxy, CommandKind::Prepare), 1);
    assert_eq!(kind_count(&proxy, CommandKind::Execute), 1 + fetches + 1);
    assert_eq!(kind_count(&proxy, CommandKind::Other), before_other + pings);
    query(&mut c, &format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn cursor_fetch_streams_rows_in_batches_with_eof_packets() {
    cursor_fetch_scenario(0, CLIENT_DEPRECATE_EOF).await;
}

#[tokio::test]
async fn cursor_fetch_streams_rows_in_batches_with_deprecate_eof() {
    cursor_fetch_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

/// A statement executed without a cursor while another statement's cursor is open: its
/// metadata EOF may still carry SERVER_STATUS_CURSOR_EXISTS, yet rows follow.
async fn interleaved_cursor_scenario(extra_caps: u32, removed_caps: u32) {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;
    let t = unique("curmix");
    query(&mut c, &format!("CREATE TABLE {t} (id INT PRIMARY KEY)")).await;
    query(
        &mut c,
        &format!("INSERT INTO {t} VALUES (1),(2),(3),(4),(5)"),
    )
    .await;

    let (a, _, _) = prepare(&mut c, &format!("SELECT id FROM {t} ORDER BY id")).await;
    let (b, _, _) = prepare(&mut c, &format!("SELECT id * 10 FROM {t} ORDER BY id")).await;
    let (types, status) = execute_with_cursor(&mut c, a).await;
    assert_ne!(status & SERVER_STATUS_CURSOR_EXISTS, 0);
    let (first, _) = fetch(&mut c, a, 2, &types).await;
    assert_eq!(first, vec![vec![cell("1")], vec![cell("2")]]);

    // B runs to completion (no cursor) while A's cursor stays open.
    send_with_ping(&mut c, &command(COM_STMT_EXECUTE, &execute_body(b, 0))).await;
    let reply = read_result(&mut c, true).await;
    let Reply::Rows { rows, .. } = reply else {
        panic!("B should return rows: {reply:?}");
    };
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[4], vec![cell("50")]);
    read_ping_ok(&mut c).await;
    assert_eq!(
        query(&mut c, "SELECT 'between'").await,
        vec![vec![cell("between")]]
    );

    let (rest, status) = fetch(&mut c, a, 10, &types).await;
    assert_eq!(
        rest,
        vec![vec![cell("3")], vec![cell("4")], vec![cell("5")]]
    );
    assert_ne!(
        status & SERVER_STATUS_LAST_ROW_SENT,
        0,
        "status {status:#06x}"
    );
    assert_eq!(query(&mut c, "SELECT 'end'").await, vec![vec![cell("end")]]);
    query(&mut c, &format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn executing_another_statement_while_a_cursor_is_open_keeps_both_in_sync() {
    interleaved_cursor_scenario(0, CLIENT_DEPRECATE_EOF).await;
}

#[tokio::test]
async fn executing_another_statement_while_a_cursor_is_open_keeps_both_in_sync_deprecate_eof() {
    interleaved_cursor_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

#[tokio::test]
async fn cursor_over_an_empty_result_and_over_a_non_select_stay_in_sync() {
    for (extra, removed) in [(0, CLIENT_DEPRECATE_EOF), (CLIENT_DEPRECATE_EOF, 0)] {
        let proxy = pair_proxy();
        let mut c = raw(&proxy, extra, removed).await;
        let t = unique("curempty");
        query(&mut c, &format!("CREATE TABLE {t} (id INT PRIMARY KEY)")).await;

        // MariaDB opens a cursor even for an empty result; the first fetch ends it.
        let (stmt, _, _) = prepare(&mut c, &format!("SELECT id FROM {t}")).await;
        let (types, status) = execute_with_cursor(&mut c, stmt).await;
        assert_ne!(status & SERVER_STATUS_CURSOR_EXISTS, 0, "{status:#06x}");
        let (rows, status) = fetch(&mut c, stmt, 5, &types).await;
        assert!(rows.is_empty());
        assert_ne!(
            status & SERVER_STATUS_LAST_ROW_SENT,
            0,
            "status {status:#06x}"
        );

        // The cursor flag on a statement without a result set is ignored: a plain OK.
        let (ins, _, _) = prepare(&mut c, &format!("INSERT INTO {t} VALUES (9)")).await;
        send_with_ping(
            &mut c,
            &command(COM_STMT_EXECUTE, &execute_body(ins, CURSOR_TYPE_READ_ONLY)),
        )
        .await;
        let reply = read_result(&mut c, true).await;
        assert!(matches!(reply, Reply::Ok { .. }), "{reply:?}");
        read_ping_ok(&mut c).await;
        assert_eq!(
            query(&mut c, &format!("SELECT COUNT(*) FROM {t}")).await,
            vec![vec![cell("1")]]
        );

        // On a CALL it is ignored too: every result set streams at once, then the final OK.
        let p = unique("curcall");
        query(
            &mut c,
            &format!("CREATE PROCEDURE {p}() BEGIN SELECT 1 AS a; SELECT 2 AS b, 3 AS c; END"),
        )
        .await;
        let (call, _, _) = prepare(&mut c, &format!("CALL {p}()")).await;
        send_with_ping(
            &mut c,
            &command(COM_STMT_EXECUTE, &execute_body(call, CURSOR_TYPE_READ_ONLY)),
        )
        .await;
        let replies = read_results(&mut c, true).await;
        read_ping_ok(&mut c).await;
        assert!(
            matches!(&replies[..], [
                Reply::Rows { rows: a, .. },
                Reply::Rows { rows: b, .. },
                Reply::Ok { .. },
            ] if a == &vec![vec![cell("1")]] && b == &vec![vec![cell("2"), cell("3")]]),
            "{replies:?}"
        );
        query(&mut c, &format!("DROP PROCEDURE {p}")).await;
        query(&mut c, &format!("DROP TABLE {t}")).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Multi-statements and stored procedures

#[tokio::test]
async fn multi_statement_mixing_updates_and_selects_yields_every_result_in_order() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let t = unique("multi");
    conn.query_drop(format!(
        "CREATE TABLE {t} (id INT PRIMARY KEY, v INT); INSERT INTO {t} VALUES (1, 1), (2, 2)"
    ))
    .await
    .unwrap();

    let mut result = conn
        .query_iter(format!(
            "UPDATE {t} SET v = v + 1 WHERE id = 1; SELECT v FROM {t} WHERE id = 1; \
             UPDATE {t} SET v = v * 10; SELECT id, v FROM {t} ORDER BY id; SELECT COUNT(*) FROM {t}"
        ))
        .await
        .unwrap();
    let mut sets: Vec<(usize, Vec<Vec<i64>>)> = Vec::new();
    while !result.is_empty() {
        let columns = result.columns_ref().len();
        let rows: Vec<Row> = result.collect().await.unwrap();
        let values = rows
            .into_iter()
            .map(|r| (0..r.len()).map(|i| r.get::<i64, _>(i).unwrap()).collect())
            .collect();
        sets.push((columns, values));
    }
    drop(result);
    assert_eq!(
        sets,
        vec![
            (0, vec![]),
            (1, vec![vec![2]]),
            (0, vec![]),
            (2, vec![vec![1, 20], vec![2, 20]]),
            (1, vec![vec![2]]),
        ]
    );

    // An error in the middle ends the response; later statements are not run.
    let e = conn
        .query_drop(format!(
            "SELECT 1; SELECT * FROM {t}_missing; UPDATE {t} SET v = 0"
        ))
        .await
        .unwrap_err();
    assert_eq!(server_code(&e), Some((1146, "42S02")), "{e}");
    let sum: Option<i64> = conn
        .query_first(format!("SELECT SUM(v) FROM {t}"))
        .await
        .unwrap();
    assert_eq!(sum, Some(40), "the UPDATE after the error never ran");
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn stored_procedure_call_returns_each_result_set_then_a_final_ok() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let t = unique("proct");
    let p = unique("proc");
    conn.query_drop(format!(
        "CREATE TABLE {t} (id INT PRIMARY KEY, v INT); INSERT INTO {t} VALUES (1, 0)"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "CREATE PROCEDURE {p}(IN n INT) BEGIN \
           SELECT n AS a; \
           SELECT n + 1 AS b, 'two' AS c UNION ALL SELECT n + 2, 'three'; \
           UPDATE {t} SET v = v + n; \
         END"
    ))
    .await
    .unwrap();

    // Text protocol.
    let mut result = conn.query_iter(format!("CALL {p}(5)")).await.unwrap();
    let first: Vec<i64> = result.collect().await.unwrap();
    let second: Vec<(i64, String)> = result.collect().await.unwrap();
    assert_eq!(first, vec![5]);
    assert_eq!(second, vec![(6, "two".to_owned()), (7, "three".to_owned())]);
    // mysql_async folds the final OK into the end of the second set (the raw view below sees it).
    while !result.is_empty() {
        assert!(result.columns_ref().is_empty(), "only the final OK is left");
        let rows: Vec<Row> = result.collect().await.unwrap();
        assert!(rows.is_empty());
    }
    drop(result);

    // Binary protocol: the same multi-result shape as a prepared statement.
    let mut result = conn.exec_iter(format!("CALL {p}(?)"), (10,)).await.unwrap();
    let first: Vec<i64> = result.collect().await.unwrap();
    let second: Vec<(i64, String)> = result.collect().await.unwrap();
    assert_eq!(first, vec![10]);
    assert_eq!(
        second,
        vec![(11, "two".to_owned()), (12, "three".to_owned())]
    );
    while !result.is_empty() {
        let _: Vec<Row> = result.collect().await.unwrap();
    }
    drop(result);

    let v: Option<i64> = conn
        .query_first(format!("SELECT v FROM {t} WHERE id = 1"))
        .await
        .unwrap();
    assert_eq!(v, Some(15), "both CALLs ran their UPDATE");

    // The raw view: three replies, the first two result sets flagged MORE_RESULTS.
    let mut c = raw(&proxy, 0, 0).await;
    query(
        &mut c,
        &format!("CREATE PROCEDURE {p}_raw() BEGIN SELECT 1; SELECT 2; END"),
    )
    .await;
    send_with_ping(
        &mut c,
        &command(COM_QUERY, format!("CALL {p}_raw()").as_bytes()),
    )
    .await;
    let replies = read_results(&mut c, false).await;
    read_ping_ok(&mut c).await;
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert!(matches!(&replies[0], Reply::Rows { rows, .. } if rows == &vec![vec![cell("1")]]));
    assert!(matches!(&replies[1], Reply::Rows { rows, .. } if rows == &vec![vec![cell("2")]]));
    assert!(matches!(replies[2], Reply::Ok { .. }));
    assert_eq!(
        query(&mut c, "SELECT 'after call'").await,
        vec![vec![cell("after call")]]
    );
    query(&mut c, &format!("DROP PROCEDURE {p}_raw")).await;

    conn.query_drop(format!("DROP PROCEDURE {p}; DROP TABLE {t}"))
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 4. LOAD DATA LOCAL INFILE

#[tokio::test]
async fn load_data_local_infile_streams_fifty_thousand_rows_across_sequence_id_wraps() {
    const ROWS: u32 = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.tsv");
    let mut data = Vec::new();
    let mut expected_crc_sum = 0u64;
    for id in 1..=ROWS {
        let name = format!("row-{id:06}-{:08x}", id.wrapping_mul(2_654_435_761));
        expected_crc_sum += u64::from(crc32(name.as_bytes()));
        data.extend_from_slice(format!("{id}\t{name}\n").as_bytes());
    }
    // mysql_async sends the file in 4 KiB packets: more than 256 makes the sequence id wrap.
    assert!(
        data.len() / 4096 > 300,
        "{} bytes is too few packets",
        data.len()
    );
    std::fs::write(&path, &data).unwrap();

    let proxy = pair_proxy();
    let opts =
        opts_with_db(&proxy).local_infile_handler(Some(WhiteListFsHandler::new([path.clone()])));
    let mut conn = Conn::new(opts).await.unwrap();
    let t = unique("infile");
    conn.query_drop(format!(
        "CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(64))"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE {t} (id, name)",
        path.display()
    ))
    .await
    .unwrap();
    assert_eq!(conn.affected_rows(), u64::from(ROWS));

    let (count, id_sum, crc_sum): (u64, String, String) = conn
        .query_first(format!(
            "SELECT COUNT(*), SUM(id), SUM(CRC32(name)) FROM {t}"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count, u64::from(ROWS));
    assert_eq!(
        id_sum,
        (u64::from(ROWS) * u64::from(ROWS + 1) / 2).to_string()
    );
    assert_eq!(
        crc_sum,
        expected_crc_sum.to_string(),
        "every byte arrived intact"
    );

    let one: Option<String> = conn
        .query_first(format!("SELECT name FROM {t} WHERE id = 12345"))
        .await
        .unwrap();
    assert_eq!(
        one.as_deref(),
        Some(format!("row-012345-{:08x}", 12345u32.wrapping_mul(2_654_435_761)).as_str())
    );
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

/// Sends a LOAD DATA LOCAL INFILE by hand: the file in one packet per row, with sequence ids
/// running past 255, the empty packet that ends it and a ping all in one write.
async fn raw_load_data(c: &mut RawClient, sql: &str, rows: std::ops::Range<u32>) -> Vec<Reply> {
    send(c, &command(COM_QUERY, sql.as_bytes())).await;
    let (seq, request) = read(c).await;
    assert_eq!(
        (seq, request.first()),
        (1, Some(&0xfb)),
        "LOCAL INFILE request: {request:02x?}"
    );
    let mut seq = seq;
    let mut upload = Vec::new();
    for id in rows {
        seq = seq.wrapping_add(1);
        upload.extend(frame(seq, format!("{id}\traw-{id}\n").as_bytes()));
    }
    upload.extend(frame(seq.wrapping_add(1), &[]));
    upload.extend(command(COM_PING, &[]));
    send(c, &upload).await;
    let replies = read_results(c, false).await;
    read_ping_ok(c).await;
    replies
}

#[tokio::test]
async fn raw_load_data_local_infile_with_wrapping_sequence_ids_and_a_trailing_select() {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    let t = unique("rawinfile");
    query(
        &mut c,
        &format!("CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(32))"),
    )
    .await;
    let before = proxy.total_commands();

    // 600 packets: the client's sequence ids wrap twice before the server answers.
    let replies = raw_load_data(
        &mut c,
        &format!(
            "LOAD DATA LOCAL INFILE 'any-name' INTO TABLE {t} (id, name); \
             SELECT COUNT(*), SUM(id), MAX(name) FROM {t}"
        ),
        1..601,
    )
    .await;
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert!(
        matches!(replies[0], Reply::Ok { status } if status & SERVER_MORE_RESULTS_EXISTS != 0),
        "{replies:?}"
    );
    assert!(
        matches!(&replies[1], Reply::Rows { rows, .. }
            if rows == &vec![vec![cell("600"), cell("180300"), cell("raw-99")]]),
        "{replies:?}"
    );

    // A client that has nothing to send answers with the empty packet alone.
    let replies = raw_load_data(
        &mut c,
        &format!("LOAD DATA LOCAL INFILE 'empty' INTO TABLE {t}"),
        0..0,
    )
    .await;
    assert!(matches!(replies[..], [Reply::Ok { .. }]), "{replies:?}");

    assert_eq!(
        query(&mut c, &format!("SELECT COUNT(*) FROM {t}")).await,
        vec![vec![cell("600")]]
    );
    // Two LOAD DATA queries, their pings and the count.
    let expected = before + 5;
    assert_eq!(
        wait_for_count(expected, || proxy.total_commands()).await,
        expected
    );
    query(&mut c, &format!("DROP TABLE {t}")).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Packets larger than 16 MiB

const BLOB_LEN: usize = 20 << 20;

async fn blob_conn(proxy: &TestProxy) -> (Conn, String) {
    let mut conn = connect(proxy).await;
    let max: Option<u64> = conn
        .query_first("SELECT @@max_allowed_packet")
        .await
        .unwrap();
    assert!(
        max.unwrap_or(0) >= 64 << 20,
        "the servers should run with max_allowed_packet=64M, have {max:?}"
    );
    let t = unique("blob");
    conn.query_drop(format!("CREATE TABLE {t} (id INT PRIMARY KEY, b LONGBLOB)"))
        .await
        .unwrap();
    (conn, t)
}

async fn assert_blob_reads_back(conn: &mut Conn, t: &str, id: i32, data: &[u8]) {
    let (len, crc): (u64, u32) = conn
        .query_first(format!(
            "SELECT LENGTH(b), CRC32(b) FROM {t} WHERE id = {id}"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(len, data.len() as u64, "stored length");
    assert_eq!(crc, crc32(data), "stored checksum");

    let text: Vec<u8> = conn
        .query_first(format!("SELECT b FROM {t} WHERE id = {id}"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        text == data,
        "text protocol read back {} bytes, first difference at {:?}",
        text.len(),
        first_difference(&text, data)
    );
    let binary: Vec<u8> = conn
        .exec_first(format!("SELECT b FROM {t} WHERE id = ?"), (id,))
        .await
        .unwrap()
        .unwrap();
    assert!(
        binary == data,
        "binary protocol read back {} bytes, first difference at {:?}",
        binary.len(),
        first_difference(&binary, data)
    );
}

#[tokio::test]
async fn a_twenty_mib_blob_inserted_as_a_prepared_parameter_reads_back_intact() {
    let proxy = pair_proxy();
    let (mut conn, t) = blob_conn(&proxy).await;
    let data = pseudo_random_bytes(BLOB_LEN, 0x9E37_79B9_7F4A_7C15);
    conn.exec_drop(format!("INSERT INTO {t} VALUES (?, ?)"), (1, data.clone()))
        .await
        .unwrap();
    assert_blob_reads_back(&mut conn, &t, 1, &data).await;
    let n: Option<i32> = conn.query_first("SELECT 8").await.unwrap();
    assert_eq!(n, Some(8));
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn a_twenty_mib_blob_inserted_by_a_forty_mib_text_query_reads_back_intact() {
    let proxy = pair_proxy();
    let (mut conn, t) = blob_conn(&proxy).await;
    let data = pseudo_random_bytes(BLOB_LEN, 0xD1B5_4A32_D192_ED03);
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut sql = Vec::with_capacity(2 * BLOB_LEN + 64);
    sql.extend_from_slice(format!("INSERT INTO {t} VALUES (2, X'").as_bytes());
    for b in &data {
        sql.push(HEX[usize::from(b >> 4)]);
        sql.push(HEX[usize::from(b & 0xf)]);
    }
    sql.extend_from_slice(b"')");
    let sql = String::from_utf8(sql).unwrap();
    conn.query_drop(sql).await.unwrap();
    assert_blob_reads_back(&mut conn, &t, 2, &data).await;
    conn.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    conn.disconnect().await.unwrap();
}

/// A response row whose payload is exactly 16 MiB - 1 is followed by an empty chunk; one of
/// 16 MiB + 9 starts with 0xFE (an 8-byte length) like an EOF does. Both must be read as rows.
async fn large_row_scenario(extra_caps: u32, removed_caps: u32) {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;
    let max = query(&mut c, "SELECT @@max_allowed_packet").await;
    assert!(
        max[0][0].as_deref().and_then(|m| m.parse::<u64>().ok()) >= Some(64 << 20),
        "the servers should run with max_allowed_packet=64M: {max:?}"
    );
    // A lenenc length of 0xFD + 3 bytes: 4 + 16_777_211 = 0xFF_FFFF.
    for len in [MAX_CHUNK - 4, MAX_CHUNK + 1] {
        send_with_ping(
            &mut c,
            &command(COM_QUERY, format!("SELECT REPEAT('x', {len})").as_bytes()),
        )
        .await;
        let reply = read_result(&mut c, false).await;
        let Reply::Rows { rows, .. } = reply else {
            panic!("rows expected: {reply:?}");
        };
        assert_eq!(rows.len(), 1);
        let value = rows[0][0].as_deref().unwrap_or("");
        assert_eq!(value.len(), len);
        assert!(value.bytes().all(|b| b == b'x'));
        read_ping_ok(&mut c).await;
    }
    assert_eq!(
        query(&mut c, "SELECT 'small'").await,
        vec![vec![cell("small")]]
    );
}

#[tokio::test]
async fn rows_at_and_just_past_the_16_mib_chunk_size_end_where_the_server_ends_them() {
    large_row_scenario(0, CLIENT_DEPRECATE_EOF).await;
}

#[tokio::test]
async fn rows_at_and_just_past_the_16_mib_chunk_size_end_where_the_server_ends_them_deprecate_eof()
{
    large_row_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

#[tokio::test]
async fn a_command_of_exactly_16_mib_minus_one_and_its_empty_chunk_are_one_command() {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    // 0x03 + "SELECT LENGTH('" + filler + "')" fills one whole chunk; an empty chunk ends it.
    let filler = MAX_CHUNK - 1 - "SELECT LENGTH('".len() - "')".len();
    let mut payload = vec![COM_QUERY];
    payload.extend_from_slice(b"SELECT LENGTH('");
    payload.resize(payload.len() + filler, b'y');
    payload.extend_from_slice(b"')");
    assert_eq!(payload.len(), MAX_CHUNK);
    let mut bytes = vec![0xff, 0xff, 0xff, 0];
    bytes.extend_from_slice(&payload);
    bytes.extend_from_slice(&[0, 0, 0, 1]); // the empty second chunk, sequence id 1
    bytes.extend(command(COM_PING, &[]));
    send(&mut c, &bytes).await;

    let reply = read_result(&mut c, false).await;
    let Reply::Rows { rows, .. } = reply else {
        panic!("rows expected: {reply:?}");
    };
    assert_eq!(rows, vec![vec![Some(filler.to_string())]]);
    read_ping_ok(&mut c).await;
    assert_eq!(wait_for_count(2, || proxy.total_commands()).await, 2);
    assert_eq!(kind_count(&proxy, CommandKind::Query), 1);
}

// ---------------------------------------------------------------------------------------------
// 6. COM_CHANGE_USER and COM_RESET_CONNECTION

/// A user on both servers (the proxy may pick either), dropped when the test ends.
struct TempUser {
    name: String,
    pass: String,
}

impl TempUser {
    fn create() -> Self {
        let name = unique("cu");
        let pass = format!("pw-{name}");
        for db in shared_pair() {
            db.root_exec(&format!(
                "CREATE USER '{name}'@'%' IDENTIFIED BY '{pass}'; \
                 GRANT SELECT ON test.* TO '{name}'@'%'"
            ));
        }
        Self { name, pass }
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        for db in shared_pair() {
            db.root_exec(&format!("DROP USER IF EXISTS '{}'@'%'", self.name));
        }
    }
}

#[tokio::test]
async fn change_user_switches_identity_and_the_session_keeps_working() {
    let user = TempUser::create();
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    let me: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(me.as_deref(), Some("bench@%"));

    conn.change_user(
        ChangeUserOpts::default()
            .with_user(Some(user.name.clone()))
            .with_pass(Some(user.pass.clone())),
    )
    .await
    .unwrap();
    let me: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(me, Some(format!("{}@%", user.name)));
    let n: Option<i32> = conn.query_first("SELECT 10 + 1").await.unwrap();
    assert_eq!(n, Some(11), "a query after COM_CHANGE_USER works");
    let e = conn
        .query_drop("CREATE TABLE test.not_allowed_here (id INT)")
        .await
        .unwrap_err();
    assert_eq!(
        server_code(&e).map(|c| c.0),
        Some(1142),
        "now without CREATE: {e}"
    );

    conn.change_user(
        ChangeUserOpts::default()
            .with_user(Some(BENCH_USER.to_owned()))
            .with_pass(Some(BENCH_PASS.to_owned())),
    )
    .await
    .unwrap();
    let me: Option<String> = conn.query_first("SELECT CURRENT_USER()").await.unwrap();
    assert_eq!(me.as_deref(), Some("bench@%"));
    conn.disconnect().await.unwrap();
}

/// A COM_CHANGE_USER packet for the raw client (no connect attributes: the client sent none).
fn change_user_packet(user: &str, auth: &[u8], db: &str, plugin: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(user.as_bytes());
    body.push(0);
    body.push(u8::try_from(auth.len()).unwrap());
    body.extend_from_slice(auth);
    body.extend_from_slice(db.as_bytes());
    body.push(0);
    body.extend_from_slice(&45u16.to_le_bytes()); // utf8mb4_general_ci
    body.extend_from_slice(plugin.as_bytes());
    body.push(0);
    command(COM_CHANGE_USER, &body)
}

/// Runs COM_CHANGE_USER by hand, answering auth switch requests; returns how many switches the
/// server asked for, or the ERR that ended it.
async fn raw_change_user(
    c: &mut RawClient,
    user: &str,
    pass: &str,
    plugin: &str,
) -> Result<usize, String> {
    let nonce = parse_greeting(&c.greeting_payload).unwrap().nonce;
    let auth = if plugin == "mysql_native_password" {
        scramble_native(&nonce, pass.as_bytes()).unwrap().to_vec()
    } else {
        vec![0x11; 32]
    };
    send(c, &change_user_packet(user, &auth, "test", plugin)).await;
    let mut switches = 0;
    loop {
        let (seq, reply) = read(c).await;
        let done = match reply.first() {
            Some(0x00) => Ok(switches),
            Some(0xff) => Err(parse_err(&reply)),
            Some(0xfe) => {
                switches += 1;
                assert!(switches < 3, "auth switch loop");
                let rest = &reply[1..];
                let nul = rest.iter().position(|&b| b == 0).unwrap();
                assert_eq!(&rest[..nul], b"mysql_native_password");
                let nonce = &rest[nul + 1..];
                let nonce = nonce.strip_suffix(&[0]).unwrap_or(nonce);
                let auth = scramble_native(nonce, pass.as_bytes()).unwrap();
                // A ping right behind the client's leg: the proxy must see the exchange end at
                // the server's OK/ERR, not at the client's packet.
                send_with_ping(c, &frame(seq.wrapping_add(1), &auth)).await;
                continue;
            }
            _ => panic!("unexpected COM_CHANGE_USER reply {reply:02x?}"),
        };
        if switches > 0 {
            read_ping_ok(c).await;
        }
        return done;
    }
}

#[tokio::test]
async fn change_user_with_a_wrong_password_fails_with_1045_through_the_auth_exchange() {
    let user = TempUser::create();
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    assert_ne!(c.caps & CLIENT_SECURE_CONNECTION, 0);
    let e = raw_change_user(
        &mut c,
        &user.name,
        "not the password",
        "mysql_native_password",
    )
    .await
    .unwrap_err();
    assert!(e.starts_with("1045: "), "{e}");
    // MariaDB keeps the session, as the previous user.
    assert_eq!(
        query(&mut c, "SELECT CURRENT_USER()").await,
        vec![vec![cell("bench@%")]]
    );
    let count = wait_for_count(3, || proxy.total_commands()).await;
    assert_eq!(
        count, 3,
        "the failed COM_CHANGE_USER, the pipelined ping and the query"
    );
}

#[tokio::test]
async fn change_user_auth_switch_exchange_is_relayed_both_ways() {
    let user = TempUser::create();
    let proxy = pair_proxy();
    for plugin in ["mysql_native_password", "client_ed25519"] {
        let mut c = raw(&proxy, 0, 0).await;
        let switches = raw_change_user(&mut c, &user.name, &user.pass, plugin)
            .await
            .unwrap_or_else(|e| panic!("change user ({plugin}): {e}"));
        // MariaDB answers COM_CHANGE_USER with an auth switch (a fresh nonce) even when the
        // plugin matches; either way the client speaks in the middle of the exchange.
        assert!(
            switches >= 1,
            "{plugin}: no auth switch, the client-side leg is untested"
        );
        assert_eq!(
            query(&mut c, "SELECT CURRENT_USER()").await,
            vec![vec![Some(format!("{}@%", user.name))]]
        );
        assert_eq!(c.ping().await, Ok(()));
    }
}

#[tokio::test]
async fn reset_connection_clears_session_state_and_the_session_keeps_working() {
    let proxy = pair_proxy();
    let mut conn = connect(&proxy).await;
    conn.query_drop("SET @kept = 42; CREATE TEMPORARY TABLE tmp_reset (id INT)")
        .await
        .unwrap();
    let before: Option<Option<i64>> = conn.query_first("SELECT @kept").await.unwrap();
    assert_eq!(before, Some(Some(42)));

    assert!(
        conn.reset().await.unwrap(),
        "MariaDB 10.11 supports COM_RESET_CONNECTION"
    );
    let after: Option<Option<i64>> = conn.query_first("SELECT @kept").await.unwrap();
    assert_eq!(after, Some(None), "user variables are gone");
    let e = conn
        .query_drop("SELECT * FROM tmp_reset")
        .await
        .unwrap_err();
    assert_eq!(
        server_code(&e).map(|c| c.0),
        Some(1146),
        "temporary table is gone: {e}"
    );
    let n: Option<i32> = conn.query_first("SELECT 12").await.unwrap();
    assert_eq!(n, Some(12));
    conn.disconnect().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 7. Single-packet administrative commands

async fn admin_commands_scenario(extra_caps: u32, removed_caps: u32) {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;
    let t = unique("fl");
    query(
        &mut c,
        &format!("CREATE TABLE {t} (id INT, name VARCHAR(8))"),
    )
    .await;

    let before = proxy.total_commands();
    // COM_STATISTICS answers with one bare string packet, neither OK nor a result set.
    send_with_ping(&mut c, &command(COM_STATISTICS, &[])).await;
    let (seq, stats) = read(&mut c).await;
    assert_eq!(seq, 1);
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.starts_with("Uptime: "), "COM_STATISTICS: {stats:?}");
    assert!(stats.contains("Threads: "), "COM_STATISTICS: {stats:?}");
    read_ping_ok(&mut c).await;

    assert_eq!(c.ping().await, Ok(()));

    send_with_ping(&mut c, &command(COM_INIT_DB, b"sbtest")).await;
    assert_eq!(c.read_ok().await, Ok(()));
    read_ping_ok(&mut c).await;
    assert_eq!(
        query(&mut c, "SELECT DATABASE()").await,
        vec![vec![cell("sbtest")]]
    );
    send_with_ping(&mut c, &command(COM_INIT_DB, b"no_such_database_xyz")).await;
    let e = c.read_ok().await.unwrap_err();
    assert!(e.starts_with("1049: "), "{e}");
    read_ping_ok(&mut c).await;
    send(&mut c, &command(COM_INIT_DB, b"test")).await;
    assert_eq!(c.read_ok().await, Ok(()));

    // COM_FIELD_LIST: column definitions up to an EOF (or its OK replacement).
    let mut body = t.as_bytes().to_vec();
    body.push(0);
    send_with_ping(&mut c, &command(COM_FIELD_LIST, &body)).await;
    let mut defs = 0;
    loop {
        let (_, p) = read(&mut c).await;
        assert_ne!(p.first(), Some(&0xff), "{}", parse_err(&p));
        if is_end(&c, &p) {
            break;
        }
        defs += 1;
    }
    assert_eq!(defs, 2);
    read_ping_ok(&mut c).await;

    assert_eq!(
        query(&mut c, "SELECT DATABASE(), 'ok'").await,
        vec![vec![cell("test"), cell("ok")]]
    );
    // statistics, 3 × init db, field list, the query, 5 pipelined pings and one plain ping.
    let expected = before + 6 + 6;
    assert_eq!(
        wait_for_count(expected, || proxy.total_commands()).await,
        expected
    );
    query(&mut c, &format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn statistics_ping_init_db_and_field_list_keep_the_session_in_sync() {
    admin_commands_scenario(0, CLIENT_DEPRECATE_EOF).await;
}

#[tokio::test]
async fn statistics_ping_init_db_and_field_list_keep_the_session_in_sync_deprecate_eof() {
    admin_commands_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

/// Each rarely used command gets exactly one answer of its own shape; a ping behind each proves
/// the proxy saw that answer end where the server ended it.
async fn rare_commands_scenario(extra_caps: u32, removed_caps: u32) {
    const COM_SLEEP: u8 = 0x00;
    const COM_PROCESS_INFO: u8 = 0x0a;
    const COM_PROCESS_KILL: u8 = 0x0c;
    const COM_STMT_RESET: u8 = 0x1a;
    const COM_SET_OPTION: u8 = 0x1b;
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;

    // COM_PROCESS_INFO: a whole result set (the process list), this connection in it.
    send_with_ping(&mut c, &command(COM_PROCESS_INFO, &[])).await;
    let reply = read_result(&mut c, false).await;
    let Reply::Rows { rows, .. } = reply else {
        panic!("process list expected: {reply:?}");
    };
    assert!(
        rows.iter().any(|r| r.get(1) == Some(&cell(BENCH_USER))),
        "{rows:?}"
    );
    read_ping_ok(&mut c).await;

    // COM_PROCESS_KILL of an unknown thread (below the proxy ids, so the server answers it), an
    // unknown command byte, COM_SLEEP and an empty packet: a single ERR each.
    for (what, packet) in [
        (
            "kill",
            command(COM_PROCESS_KILL, &0x5fff_fff0u32.to_le_bytes()),
        ),
        ("unknown", command(0x3f, &[])),
        ("sleep", command(COM_SLEEP, &[])),
        ("empty", frame(0, &[])),
    ] {
        send_with_ping(&mut c, &packet).await;
        let (seq, err) = read(&mut c).await;
        assert_eq!((seq, err.first()), (1, Some(&0xff)), "{what}: {err:02x?}");
        read_ping_ok(&mut c).await;
    }

    // COM_SET_OPTION turns multi-statements off (answered by EOF, or OK under DEPRECATE_EOF)…
    send_with_ping(&mut c, &command(COM_SET_OPTION, &1u16.to_le_bytes())).await;
    let (_, answer) = read(&mut c).await;
    assert!(
        matches!(answer.first(), Some(0x00 | 0xfe)),
        "COM_SET_OPTION: {answer:02x?}"
    );
    read_ping_ok(&mut c).await;
    let e = c.query_text("SELECT 1; SELECT 2").await.unwrap_err();
    assert!(e.starts_with("1064: "), "multi-statements are off: {e}");
    // …and on again.
    send_with_ping(&mut c, &command(COM_SET_OPTION, &0u16.to_le_bytes())).await;
    read(&mut c).await;
    read_ping_ok(&mut c).await;
    assert_eq!(
        c.query_results("SELECT 1; SELECT 2").await.unwrap().len(),
        2
    );

    // COM_STMT_SEND_LONG_DATA has no reply: two of them, the execute that uses them and a
    // ping go in one write, and the first packet back is the execute's.
    let (stmt, _, params) = prepare(&mut c, "SELECT CONCAT(?, '!')").await;
    assert_eq!(params, 1);
    let long_data = |chunk: &[u8]| {
        let mut body = stmt.to_le_bytes().to_vec();
        body.extend_from_slice(&0u16.to_le_bytes()); // parameter 0
        body.extend_from_slice(chunk);
        command(COM_STMT_SEND_LONG_DATA, &body)
    };
    let mut execute = execute_body(stmt, 0);
    execute.extend_from_slice(&[0x00, 0x01, 0xfe, 0x00]); // no NULLs, types bound: STRING
    let mut batch = long_data(b"hello, ");
    batch.extend(long_data(b"world"));
    batch.extend(command(COM_STMT_EXECUTE, &execute));
    send_with_ping(&mut c, &batch).await;
    let reply = read_result(&mut c, true).await;
    assert!(
        matches!(&reply, Reply::Rows { rows, .. } if rows == &vec![vec![cell("hello, world!")]]),
        "{reply:?}"
    );
    read_ping_ok(&mut c).await;

    // COM_STMT_RESET: one OK.
    send_with_ping(&mut c, &command(COM_STMT_RESET, &stmt.to_le_bytes())).await;
    assert_eq!(c.read_ok().await, Ok(()));
    read_ping_ok(&mut c).await;

    assert_eq!(
        query(&mut c, "SELECT 'done'").await,
        vec![vec![cell("done")]]
    );
    // process info, 4 errors, 2 set options, 2 queries, prepare, execute, reset, the last
    // query, and 9 pings; COM_STMT_SEND_LONG_DATA is never answered.
    let expected = 1 + 4 + 2 + 2 + 1 + 1 + 1 + 1 + 9;
    assert_eq!(
        wait_for_count(expected, || proxy.total_commands()).await,
        expected
    );
}

#[tokio::test]
async fn rarely_used_commands_each_get_exactly_one_answer() {
    rare_commands_scenario(0, CLIENT_DEPRECATE_EOF).await;
}

#[tokio::test]
async fn rarely_used_commands_each_get_exactly_one_answer_deprecate_eof() {
    rare_commands_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

/// Prepare responses of every shape (parameters and/or columns, neither, an ERR), each with a
/// ping behind it.
async fn prepare_shapes_scenario(extra_caps: u32, removed_caps: u32) {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, extra_caps, removed_caps).await;
    let t = unique("prep");
    query(&mut c, &format!("CREATE TABLE {t} (a INT, b INT)")).await;
    for (sql, shape) in [
        ("SELECT ?, ? + 1, CONCAT(?, 'x')".to_owned(), (3, 3)),
        (format!("INSERT INTO {t} VALUES (?, ?)"), (0, 2)),
        (format!("SELECT a, b FROM {t}"), (2, 0)),
        ("DO 1".to_owned(), (0, 0)),
    ] {
        send_with_ping(&mut c, &command(COM_STMT_PREPARE, sql.as_bytes())).await;
        let (_, columns, params) = read_prepare_ok(&mut c).await;
        assert_eq!((columns, params), shape, "{sql}");
        read_ping_ok(&mut c).await;
    }
    send_with_ping(&mut c, &command(COM_STMT_PREPARE, b"SELECT FROM WHERE")).await;
    let (_, err) = read(&mut c).await;
    assert!(parse_err(&err).starts_with("1064: "), "{}", parse_err(&err));
    read_ping_ok(&mut c).await;
    assert_eq!(wait_for_count(11, || proxy.total_commands()).await, 11);
    assert_eq!(kind_count(&proxy, CommandKind::Prepare), 5);
    query(&mut c, &format!("DROP TABLE {t}")).await;
}

#[tokio::test]
async fn prepare_responses_of_every_shape_end_where_the_server_ends_them() {
    prepare_shapes_scenario(0, CLIENT_DEPRECATE_EOF).await;
}

#[tokio::test]
async fn prepare_responses_of_every_shape_end_where_the_server_ends_them_deprecate_eof() {
    prepare_shapes_scenario(CLIENT_DEPRECATE_EOF, 0).await;
}

/// Logs in by hand with MariaDB extended capabilities (CLIENT_MYSQL cleared, the bits in the
/// last 4 filler bytes of the HandshakeResponse41), which RawClient does not send.
async fn raw_with_mariadb_caps(proxy: &TestProxy, mariadb_caps: u32) -> RawClient {
    let stream = connect_raw(&proxy.addr_string()).await;
    let mut c = RawClient::greeted(Box::new(stream)).await.unwrap();
    let g = parse_greeting(&c.greeting_payload).unwrap();
    assert_eq!(g.caps & CLIENT_LONG_PASSWORD, 0, "a MariaDB greeting");
    let caps = (CLIENT_LONG_FLAG
        | CLIENT_PROTOCOL_41
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_MULTI_STATEMENTS
        | CLIENT_MULTI_RESULTS
        | CLIENT_PS_MULTI_RESULTS
        | CLIENT_PLUGIN_AUTH
        | CLIENT_CONNECT_WITH_DB)
        & g.caps;
    c.server_caps = g.caps;
    c.caps = caps;
    let auth = scramble_native(&g.nonce, BENCH_PASS.as_bytes()).unwrap();
    let mut response = handshake_response(
        caps,
        BENCH_USER,
        &auth,
        Some("test"),
        "mysql_native_password",
    );
    // capabilities (4), max packet (4), charset (1), filler (19), MariaDB capabilities (4)
    response[28..32].copy_from_slice(&mariadb_caps.to_le_bytes());
    c.send_packet(1, &response).await.unwrap();
    let (_, reply) = read(&mut c).await;
    assert_eq!(reply.first(), Some(&0x00), "login: {reply:02x?}");
    c
}

fn is_progress(payload: &[u8]) -> bool {
    payload.starts_with(&[0xff, 0xff, 0xff])
}

/// Runs a copying ALTER TABLE with a ping behind it; returns how many progress reports came.
async fn alter_table_with_ping(c: &mut RawClient) -> usize {
    let t = unique("progress");
    query(
        c,
        &format!("CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(100))"),
    )
    .await;
    query(
        c,
        &format!("INSERT INTO {t} SELECT seq, REPEAT('v', 50) FROM seq_1_to_2000"),
    )
    .await;
    let alter = format!("ALTER TABLE {t} FORCE, ALGORITHM=COPY");
    send_with_ping(c, &command(COM_QUERY, alter.as_bytes())).await;
    let mut reports = 0;
    let (_, ok) = loop {
        let (seq, packet) = read(c).await;
        if !is_progress(&packet) {
            break (seq, packet);
        }
        reports += 1;
    };
    assert_eq!(ok.first(), Some(&0x00), "ALTER TABLE: {}", parse_err(&ok));
    read_ping_ok(c).await;
    query(c, &format!("DROP TABLE {t}")).await;
    reports
}

#[tokio::test]
async fn progress_reports_do_not_end_a_response_when_the_client_asked_for_them() {
    const MARIADB_CLIENT_PROGRESS: u32 = 1;
    let proxy = pair_proxy();
    // The server reports progress at once when an operation starts (then every
    // progress_report_time seconds), as ERR-headed packets with code 0xFFFF.
    let mut c = raw_with_mariadb_caps(&proxy, MARIADB_CLIENT_PROGRESS).await;
    let reports = alter_table_with_ping(&mut c).await;
    assert!(reports >= 1, "no progress report: the test proves nothing");
    assert_eq!(
        query(&mut c, "SELECT 'after'").await,
        vec![vec![cell("after")]]
    );

    // A client that did not ask gets none: the proxy must not have granted it.
    let mut plain = raw_with_mariadb_caps(&proxy, 0).await;
    assert_eq!(alter_table_with_ping(&mut plain).await, 0);
}

// ---------------------------------------------------------------------------------------------
// 8. Pipelining

#[tokio::test]
async fn pipelined_queries_and_a_ping_in_one_write_are_answered_in_order() {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    let mut batch = command(COM_QUERY, b"SELECT 1");
    batch.extend(command(COM_QUERY, b"SELECT 2"));
    batch.extend(command(COM_PING, &[]));
    batch.extend(command(COM_QUERY, b"SELECT * FROM no_such_table_pipelined"));
    batch.extend(command(COM_QUERY, b"SELECT 'last'"));
    send(&mut c, &batch).await;

    for expected in ["1", "2"] {
        let reply = read_result(&mut c, false).await;
        assert!(
            matches!(&reply, Reply::Rows { rows, .. } if rows == &vec![vec![cell(expected)]]),
            "expected {expected}: {reply:?}"
        );
    }
    assert_eq!(c.read_ok().await, Ok(()), "the ping's OK");
    let reply = read_result(&mut c, false).await;
    assert!(
        matches!(&reply, Reply::Err(e) if e.starts_with("1146: ")),
        "{reply:?}"
    );
    let reply = read_result(&mut c, false).await;
    assert!(
        matches!(&reply, Reply::Rows { rows, .. } if rows == &vec![vec![cell("last")]]),
        "{reply:?}"
    );
    let total = wait_for_count(5, || proxy.total_commands()).await;
    assert_eq!(total, 5);
}

#[tokio::test]
async fn pipelined_prepare_and_execute_of_the_last_prepared_statement_id() {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    let mut batch = command(
        COM_STMT_PREPARE,
        b"SELECT CONCAT('forty', '-', 'two'), 40 + 2",
    );
    batch.extend(command(COM_STMT_EXECUTE, &execute_body(LAST_PREPARED, 0)));
    send(&mut c, &batch).await;

    let (stmt, columns, params) = read_prepare_ok(&mut c).await;
    assert_eq!((columns, params), (2, 0));
    let reply = read_result(&mut c, true).await;
    assert!(
        matches!(&reply, Reply::Rows { rows, .. } if rows == &vec![vec![cell("forty-two"), cell("42")]]),
        "{reply:?}"
    );

    // COM_STMT_CLOSE has no reply: the next packet is the query's.
    let mut batch = command(COM_STMT_CLOSE, &stmt.to_le_bytes());
    batch.extend(command(COM_QUERY, b"SELECT 'after close'"));
    send(&mut c, &batch).await;
    let (seq, first) = read(&mut c).await;
    assert_eq!(
        (seq, first.as_slice()),
        (1, &[1u8][..]),
        "the query's column count"
    );
    let types = read_column_defs(&mut c, 1).await;
    let (_, eof) = read(&mut c).await;
    assert!(is_end(&c, &eof));
    let (rows, _) = read_rows(&mut c, &types, false).await;
    assert_eq!(rows, vec![vec![cell("after close")]]);

    // The statement really is closed.
    send(&mut c, &command(COM_STMT_EXECUTE, &execute_body(stmt, 0))).await;
    let reply = read_result(&mut c, true).await;
    assert!(
        matches!(&reply, Reply::Err(e) if e.starts_with("1243: ")),
        "{reply:?}"
    );

    // prepare, execute, query, failed execute.
    let total = wait_for_count(4, || proxy.total_commands()).await;
    assert_eq!(total, 4);
    assert_eq!(c.ping().await, Ok(()));
}

#[tokio::test]
async fn a_thousand_pipelined_queries_in_one_write_come_back_in_order() {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.extend(command(
            COM_QUERY,
            format!("SELECT {i}, REPEAT('p', 200)").as_bytes(),
        ));
    }
    // Responses flow back while the batch is still being written: neither direction may wait
    // for the other.
    send(&mut c, &batch).await;
    for i in 0..1000 {
        let reply = read_result(&mut c, false).await;
        let Reply::Rows { rows, .. } = reply else {
            panic!("query {i}: {reply:?}");
        };
        assert_eq!(
            rows[0][0],
            Some(i.to_string()),
            "query {i} answered out of order"
        );
    }
    assert_eq!(wait_for_count(1000, || proxy.total_commands()).await, 1000);
    assert_eq!(c.ping().await, Ok(()));
}

// ---------------------------------------------------------------------------------------------
// 9. The mariadb CLI

fn mariadb_cli(proxy: &TestProxy, sql: &str) -> String {
    let out = std::process::Command::new("mariadb")
        .args([
            "--no-defaults",
            "--protocol=TCP",
            "-h127.0.0.1",
            &format!("-P{}", proxy.addr.port()),
            &format!("-u{BENCH_USER}"),
            &format!("-p{BENCH_PASS}"),
            "-N",
            "-e",
            sql,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the mariadb CLI");
    assert!(
        out.status.success(),
        "mariadb -e {sql:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn mariadb_cli_runs_a_query_through_the_proxy() {
    let proxy = pair_proxy();
    let out = tokio::task::spawn_blocking(move || {
        let out = mariadb_cli(&proxy, "SELECT 1+1");
        let multi = mariadb_cli(&proxy, "SELECT 'a'; SELECT 'b', 2; DO 1; SELECT 'c'");
        (out, multi)
    })
    .await
    .unwrap();
    assert_eq!(out.0, "2\n");
    assert_eq!(out.1, "a\nb\t2\nc\n");
}

#[tokio::test]
async fn mariadb_cli_status_command_works_through_the_proxy() {
    let proxy = pair_proxy();
    let port = proxy.addr.port();
    let out = tokio::task::spawn_blocking(move || mariadb_cli(&proxy, "status"))
        .await
        .unwrap();
    assert!(out.contains("via TCP/IP"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("TCP port:") && l.trim_end().ends_with(&port.to_string())),
        "{out}"
    );
    assert!(out.contains("Current user:\t\tbench@"), "{out}");
    assert!(out.contains("Uptime:"), "statistics came back: {out}");
}

// ---------------------------------------------------------------------------------------------
// 10. The latency sink

#[tokio::test]
async fn latency_sink_records_every_command_a_mysql_async_session_completes() {
    let proxy = pair_proxy();
    let before = proxy.total_commands();
    let mut conn = connect(&proxy).await;
    let after_connect = wait_for_count(before + 1, || proxy.total_commands()).await;
    for _ in 0..50 {
        conn.query_drop("SELECT 1").await.unwrap();
    }
    let after = wait_for_count(after_connect + 50, || proxy.total_commands()).await;
    assert!(
        after >= after_connect + 50,
        "50 queries recorded: {after_connect} -> {after}"
    );
    assert!(
        kind_count(&proxy, CommandKind::Query) >= 50,
        "query kind counted"
    );
    let latency = query_duration_series(&proxy, "sum", CommandKind::Query);
    assert!(latency > 0.0, "latencies were summed: {latency}");
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn query_kind_counter_grows_by_exactly_the_com_query_count_sent() {
    let proxy = pair_proxy();
    let mut c = raw(&proxy, 0, 0).await;
    for i in 0..50 {
        assert_eq!(
            query(&mut c, &format!("SELECT {i}")).await,
            vec![vec![Some(i.to_string())]]
        );
    }
    let queries = wait_for_count(50, || kind_count(&proxy, CommandKind::Query)).await;
    assert_eq!(queries, 50);
    assert_eq!(c.ping().await, Ok(()));
    let other = wait_for_count(1, || kind_count(&proxy, CommandKind::Other)).await;
    assert_eq!(other, 1);
    assert_eq!(proxy.total_commands(), 51, "nothing else was recorded");
    assert_eq!(kind_count(&proxy, CommandKind::Prepare), 0);
    assert_eq!(kind_count(&proxy, CommandKind::Execute), 0);
}

#[tokio::test]
async fn commands_recorded_on_both_workers_add_up_in_metrics_and_backends() {
    // Each worker records on its own shard of the backend's histograms; /metrics and /backends
    // must show the sum, as a single histogram would.
    let pair = shared_pair();
    let mut cfg = common::proxy::config(&[pair[0].tcp_addr()]);
    cfg.worker_threads = Some(2);
    let proxy = TestProxy::start_with(cfg);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(raw(&proxy, 0, 0).await);
    }
    let (_, metrics) = proxy.admin_get("/metrics");
    for worker in ["0", "1"] {
        let series = format!("mysql_lb_worker_sessions{{worker=\"{worker}\"}} 2");
        assert!(
            metrics.contains(&series),
            "sessions on both workers:\n{metrics}"
        );
    }
    for (i, c) in clients.iter_mut().enumerate() {
        for j in 0..25 {
            let n = i * 100 + j;
            assert_eq!(
                query(c, &format!("SELECT {n}")).await,
                vec![vec![Some(n.to_string())]]
            );
        }
    }
    assert_eq!(
        wait_for_count(100, || kind_count(&proxy, CommandKind::Query)).await,
        100
    );
    assert_eq!(kind_count(&proxy, CommandKind::Other), 0);
    let (_, metrics) = proxy.admin_get("/metrics");
    let inf = format!(
        "mysql_lb_backend_first_byte_seconds_bucket{{backend=\"{}\",command=\"query\",le=\"+Inf\"}} 100",
        pair[0].tcp_addr()
    );
    assert!(metrics.contains(&inf), "missing {inf}:\n{metrics}");
    let (status, body) = proxy.admin_get("/backends");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["backends"][0]["commands"], 100, "{json}");
}
