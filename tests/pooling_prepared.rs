//! Server-side prepared statements through a transaction-mode pool: they are shared, not pinned.
//! Each session's statements run on whichever server connection it holds, prepared there again
//! when needed, with the session's ids and parameter types; the byte-level scripts here are run
//! once directly against MariaDB and once through the pool, and must give the same answers.

mod common;

use std::time::Duration;

use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::pooling::open_connections;
use common::proxy::TestProxy;
use common::rawclient::{parse_err, RawClient};

const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
const COM_STMT_CLOSE: u8 = 0x19;
const COM_RESET_CONNECTION: u8 = 0x1F;
const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;
/// MariaDB's id for the statement prepared last on the connection.
const LAST_PREPARED: u32 = 0xFFFF_FFFF;

/// A parameter: its type goes with the first execute (or every one, `bound`), its value always.
#[derive(Clone, Debug)]
enum Param {
    Int(i64),
    Str(String),
}

/// What one step of a script got: a row's values as strings, or the server's error code.
type Outcome = Result<Vec<Vec<String>>, String>;

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    out.push(0);
    out.extend_from_slice(payload);
    out
}

fn command(command: u8, body: &[u8]) -> Vec<u8> {
    let mut payload = vec![command];
    payload.extend_from_slice(body);
    frame(&payload)
}

/// A COM_STMT_EXECUTE of statement `id` with `params`; their types only when `bound`.
fn execute(id: u32, params: &[Param], bound: bool) -> Vec<u8> {
    let mut body = id.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&1u32.to_le_bytes());
    if !params.is_empty() {
        body.extend(std::iter::repeat_n(0u8, params.len().div_ceil(8)));
        body.push(u8::from(bound));
        if bound {
            for p in params {
                body.extend_from_slice(match p {
                    Param::Int(_) => &[8, 0],
                    Param::Str(_) => &[253, 0],
                });
            }
        }
        for p in params {
            match p {
                Param::Int(v) => body.extend_from_slice(&v.to_le_bytes()),
                Param::Str(s) => {
                    body.push(s.len() as u8);
                    body.extend_from_slice(s.as_bytes());
                }
            }
        }
    }
    command(COM_STMT_EXECUTE, &body)
}

async fn read(c: &mut RawClient) -> (u8, Vec<u8>) {
    c.read_packet().await.expect("a packet within 30 s")
}

fn ends_list(c: &RawClient) -> bool {
    c.caps & CLIENT_DEPRECATE_EOF == 0
}

fn err_code(payload: &[u8]) -> String {
    parse_err(payload)
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Reads a COM_STMT_PREPARE's answer: the statement id, or the error code.
async fn prepared(c: &mut RawClient) -> Result<u32, String> {
    let (_, ok) = read(c).await;
    if ok.first() == Some(&0xFF) {
        return Err(err_code(&ok));
    }
    assert_eq!(ok.first(), Some(&0), "STMT_PREPARE_OK: {ok:02x?}");
    let id = u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]]);
    for n in [
        u16::from_le_bytes([ok[7], ok[8]]),
        u16::from_le_bytes([ok[5], ok[6]]),
    ] {
        if n > 0 {
            for _ in 0..n + u16::from(ends_list(c)) {
                read(c).await;
            }
        }
    }
    Ok(id)
}

async fn prepare(c: &mut RawClient, sql: &str) -> Result<u32, String> {
    c.send_raw(&command(COM_STMT_PREPARE, sql.as_bytes()))
        .await
        .expect("send");
    prepared(c).await
}

/// Reads a binary result set whose columns are all strings (or an OK, or an ERR's code).
async fn binary_result(c: &mut RawClient) -> Outcome {
    let (_, first) = read(c).await;
    match first.first() {
        Some(0xFF) => return Err(err_code(&first)),
        Some(0x00) => return Ok(Vec::new()),
        _ => {}
    }
    let columns = usize::from(first[0]);
    for _ in 0..columns + usize::from(ends_list(c)) {
        read(c).await;
    }
    let mut rows = Vec::new();
    loop {
        let (_, row) = read(c).await;
        match row.first() {
            Some(0xFE) if row.len() < 9 => return Ok(rows),
            Some(0xFF) => return Err(err_code(&row)),
            _ => {}
        }
        let mut at = 1 + (columns + 2).div_ceil(8);
        let mut values = Vec::new();
        for _ in 0..columns {
            let len = usize::from(row[at]);
            values.push(String::from_utf8_lossy(&row[at + 1..at + 1 + len]).into_owned());
            at += 1 + len;
        }
        rows.push(values);
    }
}

async fn exec(c: &mut RawClient, id: u32, params: &[Param], bound: bool) -> Outcome {
    c.send_raw(&execute(id, params, bound)).await.expect("send");
    binary_result(c).await
}

async fn login(addr: &str) -> RawClient {
    RawClient::connect_tcp(addr, BENCH_USER, BENCH_PASS, Some("test"), 0, 0)
        .await
        .expect("log in")
}

fn row(values: &[&str]) -> Outcome {
    Ok(vec![values.iter().map(|v| v.to_string()).collect()])
}

/// A proxy on `backend` whose pool keeps one connection per user once idle (300 ms).
fn pooled(backend: &str) -> TestProxy {
    let (idle, wait) = (Duration::from_millis(300), Duration::from_secs(10));
    common::pooling::pooled(&[backend.to_owned()], 4, idle, wait)
}

fn pins(proxy: &TestProxy) -> f64 {
    let metrics = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 metrics");
    metrics
        .lines()
        .filter(|l| l.starts_with("mysql_lb_pool_pins_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two sessions, A and B, of one user prepare the same text and others, and execute them in
/// turn with parameters of other types; A sends its types only with its first execute, as
/// libmysqlclient and mysqlnd do. Midway A leaves a warning, so the connection is reset and
/// its statements are prepared again.
async fn two_sessions(mut a: RawClient, mut b: RawClient) -> Vec<Outcome> {
    let mut got = Vec::new();
    let a1 = prepare(&mut a, "SELECT CONCAT(?, '')")
        .await
        .expect("A prepares");
    let b1 = prepare(&mut b, "SELECT CONCAT(?, '')")
        .await
        .expect("B prepares");
    let b2 = prepare(&mut b, "SELECT CONCAT(?, ':', ?)")
        .await
        .expect("B prepares");
    for i in 0..8i64 {
        got.push(exec(&mut a, a1, &[Param::Int(i)], i == 0).await);
        let s = Param::Str(format!("s{i}"));
        got.push(exec(&mut b, b1, &[s], true).await);
        let two = [Param::Int(i * 10), Param::Str("x".into())];
        got.push(exec(&mut b, b2, &two, i == 0).await);
        if i == 4 {
            // A warning: the next command reads it, then the connection is reset.
            let warned = a.query_text("SELECT CAST('7z' AS SIGNED)").await;
            got.push(warned.map(|rows| vec![vec![format!("{rows:?}")]]));
            let count = a.query_text("SELECT @@warning_count").await;
            got.push(count.map(|rows| vec![vec![format!("{rows:?}")]]));
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_follow_their_session_to_any_server_connection_with_its_own_types() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let direct = two_sessions(login(&backend).await, login(&backend).await).await;
    for (i, outcome) in direct.iter().enumerate() {
        assert!(outcome.is_ok(), "direct step {i}: {outcome:?}");
    }
    assert_eq!(direct[0], row(&["0"]));
    assert_eq!(direct[1], row(&["s0"]));
    assert_eq!(direct[2], row(&["0:x"]));

    let proxy = pooled(&backend);
    let a = login(&proxy.addr_string()).await;
    let b = login(&proxy.addr_string()).await;
    // From here on A and B take turns on one server connection.
    open_connections(&proxy, &backend, 1).await;
    let through = two_sessions(a, b).await;
    assert_eq!(through, direct);
    assert_eq!(pins(&proxy), 0.0, "prepared statements pinned a session");
    let traces = proxy
        .series(&format!(
            "mysql_lb_pool_resets_total{{backend=\"{backend}\",outcome=\"ok\",pool=\"default\",reason=\"traces\"}}"
        ))
        .unwrap_or(0.0);
    assert!(
        traces >= 1.0,
        "A's warning should have had the shared connection reset (and its statements prepared again)"
    );
    assert_eq!(common::pooling::counts(&proxy, &backend).open, 1);
}

/// Ids a session does not hold, closes, the last prepared id, a reset: each answered as the
/// server answers it directly.
async fn ids(mut c: RawClient) -> Vec<Outcome> {
    let mut got = Vec::new();
    got.push(exec(&mut c, 77, &[], false).await);
    // A close of an unknown id has no answer: the next answer is the ping's.
    c.send_raw(&command(COM_STMT_CLOSE, &77u32.to_le_bytes()))
        .await
        .expect("send");
    got.push(c.ping().await.map(|()| Vec::new()));
    let id = prepare(&mut c, "SELECT CONCAT('one', ?)")
        .await
        .expect("prepare");
    got.push(exec(&mut c, id, &[Param::Str("!".into())], true).await);
    c.send_raw(&command(COM_STMT_CLOSE, &id.to_le_bytes()))
        .await
        .expect("send");
    got.push(exec(&mut c, id, &[Param::Str("!".into())], true).await);
    // Prepare and execute the last prepared statement, in one write.
    let mut batch = command(COM_STMT_PREPARE, b"SELECT CONCAT('two', ?)");
    batch.extend(execute(LAST_PREPARED, &[Param::Str("?".into())], true));
    c.send_raw(&batch).await.expect("send");
    let two = prepared(&mut c).await;
    got.push(two.clone().map(|_| Vec::new()));
    got.push(binary_result(&mut c).await);
    // A failed prepare leaves no last statement.
    let mut batch = command(COM_STMT_PREPARE, b"SELECT * FROM no_such_table_here");
    batch.extend(execute(LAST_PREPARED, &[], false));
    c.send_raw(&batch).await.expect("send");
    got.push(prepared(&mut c).await.map(|_| Vec::new()));
    got.push(binary_result(&mut c).await);
    // After a reset the session's statements are gone.
    let two = two.expect("prepared");
    got.push(exec(&mut c, two, &[Param::Str("x".into())], true).await);
    c.send_raw(&command(COM_RESET_CONNECTION, &[]))
        .await
        .expect("send");
    got.push(c.read_ok().await.map(|()| Vec::new()));
    got.push(exec(&mut c, two, &[Param::Str("x".into())], true).await);
    got.push(c.query_text("SELECT 'still here'").await.map(|rows| {
        rows.into_iter()
            .map(|r| r.into_iter().map(|v| v.unwrap_or_default()).collect())
            .collect()
    }));
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_closed_last_and_reset_statement_ids_answer_as_directly() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let direct = ids(login(&backend).await).await;
    assert_eq!(direct[0], Err("1243".into()), "{direct:?}");
    assert_eq!(direct[2], row(&["one!"]));
    assert_eq!(direct[5], row(&["two?"]));
    let proxy = pooled(&backend);
    let through = ids(login(&proxy.addr_string()).await).await;
    assert_eq!(through, direct);
}

/// Long data for a parameter, sent in two parts, then the execute that uses it.
async fn long_data(mut c: RawClient) -> Vec<Outcome> {
    let id = prepare(&mut c, "SELECT CONCAT(?, '|', ?)")
        .await
        .expect("prepare");
    for part in [&b"long "[..], b"data"] {
        let mut body = id.to_le_bytes().to_vec();
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(part);
        c.send_raw(&command(COM_STMT_SEND_LONG_DATA, &body))
            .await
            .expect("send");
    }
    // The first parameter's value comes from the long data: its place in the execute is empty.
    let mut body = id.to_le_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&[0, 1, 252, 0, 253, 0]);
    body.extend_from_slice(b"\x05short");
    c.send_raw(&command(COM_STMT_EXECUTE, &body))
        .await
        .expect("send");
    let first = binary_result(&mut c).await;
    let again = exec(
        &mut c,
        id,
        &[Param::Str("a".into()), Param::Str("b".into())],
        true,
    )
    .await;
    vec![first, again]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_data_reaches_its_execute_on_the_connection_it_pins() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let direct = long_data(login(&backend).await).await;
    assert_eq!(direct, vec![row(&["long data|short"]), row(&["a|b"])]);
    let proxy = pooled(&backend);
    let through = long_data(login(&proxy.addr_string()).await).await;
    assert_eq!(through, direct);
    let long = proxy
        .series(&format!(
            "mysql_lb_pool_pins_total{{backend=\"{backend}\",pool=\"default\",reason=\"long_data\"}}"
        ))
        .unwrap_or(0.0);
    assert_eq!(long, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_execute_their_statements_on_few_server_connections() {
    use mysql_async::prelude::Queryable;
    let db = &shared_pair()[1];
    let backend = db.tcp_addr();
    let proxy = common::pooling::pooled(
        std::slice::from_ref(&backend),
        3,
        Duration::from_secs(10),
        Duration::from_secs(20),
    );
    let opts = mysql_async::OptsBuilder::from_opts(proxy.opts(BENCH_USER, BENCH_PASS))
        .db_name(Some("test"));
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..8i64 {
        let opts = opts.clone();
        tasks.spawn(async move {
            let mut conn = mysql_async::Conn::new(opts).await.expect("connect");
            for i in 0..40i64 {
                let (n, text): (i64, String) = conn
                    .exec_first(
                        "SELECT ? * 2, CONCAT(?, '-', ?)",
                        (i + s, format!("s{s}"), i),
                    )
                    .await
                    .expect("execute")
                    .expect("a row");
                assert_eq!((n, text), ((i + s) * 2, format!("s{s}-{i}")));
                let float: f64 = conn
                    .exec_first("SELECT ? + 0.5", (i as f64,))
                    .await
                    .expect("execute")
                    .expect("a row");
                assert_eq!(float, i as f64 + 0.5);
            }
            conn.disconnect().await.expect("disconnect");
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a session failed");
    }
    assert!(common::pooling::counts(&proxy, &backend).open <= 3);
    assert_eq!(pins(&proxy), 0.0, "prepared statements pinned a session");
}

/// Inside A's transaction (its connection held), executes sent together: one whose types B
/// bound last on the shared connection (written in), then others rewritten in place.
async fn in_a_transaction(mut a: RawClient, mut b: RawClient) -> Vec<Outcome> {
    let mut got = Vec::new();
    let a1 = prepare(&mut a, "SELECT CONCAT(?, '')")
        .await
        .expect("A prepares");
    let a2 = prepare(&mut a, "SELECT CONCAT(?, ':', ?)")
        .await
        .expect("A prepares");
    got.push(exec(&mut a, a1, &[Param::Int(7)], true).await);
    let b1 = prepare(&mut b, "SELECT CONCAT(?, '')")
        .await
        .expect("B prepares");
    got.push(exec(&mut b, b1, &[Param::Str("b".into())], true).await);
    got.push(a.query_text("BEGIN").await.map(|_| Vec::new()));
    let mut batch = execute(a1, &[Param::Int(1)], false);
    batch.extend(execute(a2, &[Param::Int(2), Param::Str("x".into())], true));
    batch.extend(execute(a1, &[Param::Int(3)], false));
    batch.extend(execute(a2, &[Param::Int(4), Param::Str("y".into())], false));
    batch.extend(command(0x03, b"COMMIT"));
    a.send_raw(&batch).await.expect("send");
    for _ in 0..4 {
        got.push(binary_result(&mut a).await);
    }
    got.push(a.read_ok().await.map(|()| Vec::new()));
    got.push(exec(&mut b, b1, &[Param::Str("c".into())], true).await);
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executes_sent_together_in_a_transaction_keep_their_session_s_types() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let direct = in_a_transaction(login(&backend).await, login(&backend).await).await;
    assert_eq!(
        direct[3..7],
        [row(&["1"]), row(&["2:x"]), row(&["3"]), row(&["4:y"])]
    );
    let proxy = pooled(&backend);
    let a = login(&proxy.addr_string()).await;
    let b = login(&proxy.addr_string()).await;
    open_connections(&proxy, &backend, 1).await;
    let through = in_a_transaction(a, b).await;
    assert_eq!(through, direct);
    assert_eq!(pins(&proxy), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_at_max_prepared_stmt_count_gets_room_from_the_statements_a_connection_keeps() {
    // A server of its own: the limit counts every connection's statements.
    let db =
        common::mariadb::MariaDb::start_with_args("ps-limit", &["--max-prepared-stmt-count=6"]);
    let backend = db.tcp_addr();
    let proxy = pooled(&backend);
    let mut c = login(&proxy.addr_string()).await;
    // Each text stays prepared on the session's connection for other sessions, after the
    // session closes its id: the seventh would be refused without the pool making room.
    for i in 0..12 {
        let sql = format!("SELECT CONCAT(?, '-{i}')");
        let id = prepare(&mut c, &sql)
            .await
            .unwrap_or_else(|e| panic!("prepare {i}: {e}"));
        let got = exec(&mut c, id, &[Param::Int(i)], true).await;
        assert_eq!(got, row(&[&format!("{i}-{i}")]));
        c.send_raw(&command(COM_STMT_CLOSE, &id.to_le_bytes()))
            .await
            .expect("send");
    }
    let held: u64 = db
        .root_query("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'")
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("Prepared_stmt_count");
    assert!(held <= 6, "{held} statements held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_statement_commands_get_an_error_and_the_session_goes_on() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend);
    let mut c = login(&proxy.addr_string()).await;
    // Too short to name a statement.
    c.send_raw(&command(COM_STMT_EXECUTE, &[1, 0]))
        .await
        .expect("send");
    let (_, reply) = c.read_packet().await.expect("an answer");
    assert_eq!(reply.first(), Some(&0xFF), "{reply:02x?}");
    // An execute whose parameters run past its end: the server's error, as directly.
    let id = prepare(&mut c, "SELECT CONCAT(?, ?)")
        .await
        .expect("prepare");
    let mut body = id.to_le_bytes().to_vec();
    body.extend_from_slice(&[0, 1, 0, 0, 0]);
    c.send_raw(&command(COM_STMT_EXECUTE, &body))
        .await
        .expect("send");
    assert!(binary_result(&mut c).await.is_err());
    assert_eq!(c.ping().await, Ok(()));
    assert_eq!(
        exec(&mut c, id, &[Param::Int(1), Param::Str("a".into())], true).await,
        row(&["1a"])
    );
}
