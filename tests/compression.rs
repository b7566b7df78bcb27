//! The compressed protocol on each leg of mysql-lb, against real MariaDB servers.
//!
//! A compressed session must be as visible to the proxy as a plain one: every command counted
//! once in the latency histograms, KILL mapped, bulk transfers intact, on either leg alone or on
//! both, with TLS or without. The raw client here frames packets itself (zlib through flate2,
//! apart from the proxy's own codec) so a test controls exactly what goes into each frame:
//! several commands in one frame, and corrupt frames. `direct_*` tests run the same client
//! against MariaDB: the reference, and the proof that the test's framing is right.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bulk::{blob_both_ways, load_data_local};
use common::mariadb::{shared_pair, tcp_opts, MariaDb, ServerTls, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::{RawClient, CLIENT_COMPRESS, COM_PING, COM_QUERY};
use common::tls_server::certs;
use mysql_async::prelude::Queryable;
use mysql_async::{Compression, Conn, OptsBuilder, SslOpts};
use mysql_lb::config::{BackendTls, BackendTlsMode, ClientTls, TlsVersion};
use mysql_lb::wire::protocol::response::CommandKind;

const DEADLINE: Duration = Duration::from_secs(20);
const COM_PROCESS_KILL: u8 = 0x0c;

// ---------------------------------------------------------------------------------------------
// A compressed raw session

/// A logged-in [`RawClient`] that speaks compressed frames: 3-byte compressed length, sequence
/// id, 3-byte uncompressed length (0: stored as is), then the (zlib) body holding MySQL packets.
struct Compressed {
    raw: RawClient,
    /// Decompressed bytes not yet returned as packets.
    pending: Vec<u8>,
}

impl Compressed {
    async fn login(addr: &str) -> Compressed {
        let raw = RawClient::connect_tcp(addr, BENCH_USER, BENCH_PASS, None, CLIENT_COMPRESS, 0)
            .await
            .unwrap_or_else(|e| panic!("compressed login to {addr}: {e}"));
        assert_ne!(
            raw.server_caps & CLIENT_COMPRESS,
            0,
            "{addr} must offer CLIENT_COMPRESS"
        );
        Compressed {
            raw,
            pending: Vec::new(),
        }
    }

    /// Sends `commands` in one write, each its own zlib frame with sequence 0 holding one command
    /// packet (sequence 0). MariaDB drops a second command packed into the same frame as the
    /// first, so clients never do that.
    async fn send(&mut self, commands: &[(u8, &[u8])]) -> Result<(), String> {
        let mut bytes = Vec::new();
        for (command, body) in commands {
            let len = u32::try_from(body.len() + 1).unwrap().to_le_bytes();
            let packet = [&len[..3], &[0, *command], body].concat();
            bytes.extend_from_slice(&frame(0, &packet, true));
        }
        self.raw.send_raw(&bytes).await
    }

    async fn query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.send(&[(COM_QUERY, sql.as_bytes())]).await?;
        self.read_result().await
    }

    async fn read_frame(&mut self) -> Result<(), String> {
        let head = self.raw.read_bytes(7).await?;
        let comp_len =
            usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
        let plain_len =
            usize::from(head[4]) | usize::from(head[5]) << 8 | usize::from(head[6]) << 16;
        let body = self.raw.read_bytes(comp_len).await?;
        if plain_len == 0 {
            self.pending.extend_from_slice(&body);
            return Ok(());
        }
        let mut out = Vec::with_capacity(plain_len);
        flate2::read::ZlibDecoder::new(&body[..])
            .read_to_end(&mut out)
            .map_err(|e| format!("bad zlib from the server: {e}"))?;
        if out.len() != plain_len {
            return Err(format!(
                "frame says {plain_len} bytes, inflated {}",
                out.len()
            ));
        }
        self.pending.extend_from_slice(&out);
        Ok(())
    }

    async fn read_packet(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if self.pending.len() >= 4 {
                let len = usize::from(self.pending[0])
                    | usize::from(self.pending[1]) << 8
                    | usize::from(self.pending[2]) << 16;
                if self.pending.len() >= 4 + len {
                    let packet = self.pending[4..4 + len].to_vec();
                    self.pending.drain(..4 + len);
                    return Ok(packet);
                }
            }
            self.read_frame().await?;
        }
    }

    /// One response: OK (no rows), ERR (`Err("code: message")`) or a text result set (the
    /// session has no CLIENT_DEPRECATE_EOF: definitions, EOF, rows, EOF).
    async fn read_result(&mut self) -> Result<Vec<Vec<Option<String>>>, String> {
        let first = self.read_packet().await?;
        match first.first() {
            Some(0x00) => return Ok(Vec::new()),
            Some(0xff) => return Err(common::rawclient::parse_err(&first)),
            _ => {}
        }
        let columns = usize::from(first[0]);
        for _ in 0..=columns {
            self.read_packet().await?; // definitions and their EOF
        }
        let mut rows = Vec::new();
        loop {
            let p = self.read_packet().await?;
            if p.first() == Some(&0xfe) && p.len() < 9 {
                return Ok(rows);
            }
            if p.first() == Some(&0xff) {
                // An error in row position (a KILL QUERY interrupting the statement).
                return Err(common::rawclient::parse_err(&p));
            }
            rows.push(text_row(&p, columns));
        }
    }
}

/// A compressed frame with sequence id `seq` around `plain`.
fn frame(seq: u8, plain: &[u8], compress: bool) -> Vec<u8> {
    let (body, plain_len) = if compress {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(plain).unwrap();
        (z.finish().unwrap(), plain.len())
    } else {
        (plain.to_vec(), 0)
    };
    let mut out = Vec::with_capacity(7 + body.len());
    out.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes()[..3]);
    out.push(seq);
    out.extend_from_slice(&u32::try_from(plain_len).unwrap().to_le_bytes()[..3]);
    out.extend_from_slice(&body);
    out
}

/// Length-encoded strings (under 16 MiB, as the tests select) and NULLs.
fn text_row(p: &[u8], columns: usize) -> Vec<Option<String>> {
    let mut row = Vec::new();
    let mut i = 0;
    for _ in 0..columns {
        match p[i] {
            0xfb => {
                row.push(None);
                i += 1;
            }
            width @ (0xfc | 0xfd) => {
                let w = if width == 0xfc { 2 } else { 3 };
                let n = (0..w).fold(0, |n, k| n | usize::from(p[i + 1 + k]) << (8 * k));
                let start = i + 1 + w;
                row.push(Some(
                    String::from_utf8_lossy(&p[start..start + n]).into_owned(),
                ));
                i = start + n;
            }
            n => {
                let n = usize::from(n);
                row.push(Some(
                    String::from_utf8_lossy(&p[i + 1..i + 1 + n]).into_owned(),
                ));
                i += 1 + n;
            }
        }
    }
    row
}

/// Reads until EOF; panics if the peer keeps the connection open past [`DEADLINE`].
async fn assert_closed(c: &mut RawClient, what: &str) {
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if c.read_bytes(1).await.is_err() {
            return;
        }
    }
    panic!("{what}: still open after {DEADLINE:?}");
}

// ---------------------------------------------------------------------------------------------
// Proxies and counts

fn proxy_for(db: &str, client_compression: bool, backend_compression: bool) -> TestProxy {
    let mut cfg = config(&[db.to_string()]);
    cfg.compression = client_compression;
    for b in &mut cfg.backends {
        b.compression = backend_compression;
    }
    TestProxy::start_with(cfg)
}

fn kind_count(proxy: &TestProxy, kind: CommandKind) -> u64 {
    let text = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 exposition");
    let label = format!("command=\"{}\"", kind.as_str());
    text.lines()
        .filter(|l| {
            l.starts_with("mysql_lb_backend_query_duration_seconds_count{") && l.contains(&label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Waits until `value()` reaches `target` or 5 s pass, then returns it for an exact assertion.
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

fn one(rows: &[Vec<Option<String>>]) -> &str {
    rows[0][0].as_deref().unwrap_or("NULL")
}

/// Runs the compressed script every test below uses and checks each answer: five queries, a
/// query and a ping pipelined in one write, a 200 KB result (many frames).
/// Returns the (queries, pings) it sent.
async fn compressed_script(c: &mut Compressed) -> (u64, u64) {
    for i in 0..5 {
        let rows = c.query(&format!("SELECT {i} * 10")).await.unwrap();
        assert_eq!(one(&rows), (i * 10).to_string());
    }
    c.send(&[(COM_QUERY, b"SELECT 'pipelined'"), (COM_PING, b"")])
        .await
        .unwrap();
    assert_eq!(one(&c.read_result().await.unwrap()), "pipelined");
    assert_eq!(
        c.read_result().await.unwrap(),
        Vec::<Vec<Option<String>>>::new(),
        "ping's OK"
    );
    let rows = c
        .query("SELECT LENGTH(REPEAT('abc', 70000)), MD5(REPEAT('abc', 70000))")
        .await
        .unwrap();
    assert_eq!(one(&rows), "210000");
    let big = c.query("SELECT REPEAT('xyz', 70000)").await;
    let big = big.unwrap_or_else(|e| panic!("200 KB result: {e}"));
    assert_eq!(big[0][0].as_ref().map(String::len), Some(210_000));
    (5 + 1 + 2, 1)
}

// ---------------------------------------------------------------------------------------------
// The reference

#[tokio::test]
async fn direct_compressed_raw_client_against_mariadb() {
    let db = &shared_pair()[0];
    let mut c = Compressed::login(&db.tcp_addr()).await;
    compressed_script(&mut c).await;
    let rows = c
        .query("SHOW SESSION STATUS LIKE 'Compression'")
        .await
        .unwrap();
    assert_eq!(rows[0][1].as_deref(), Some("ON"));
}

#[test]
fn direct_mariadb_cli_compress() {
    let db = &shared_pair()[0];
    let out = cli_compressed(db.port, true, "status");
    assert!(out.contains("Protocol:\t\tCompressed"), "{out}");
}

fn cli_compressed(port: u16, compress: bool, sql: &str) -> String {
    let mut cmd = Command::new("mariadb");
    cmd.arg("--no-defaults")
        .args([
            "--host=127.0.0.1",
            "--protocol=tcp",
            "--skip-ssl",
            "--batch",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--user={BENCH_USER}"))
        .arg(format!("--password={BENCH_PASS}"));
    if compress {
        cmd.arg("--compress");
    }
    let out = cmd
        .args(["-e", sql])
        .stdin(Stdio::null())
        .output()
        .expect("run the mariadb CLI");
    assert!(out.status.success(), "mariadb CLI: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Through mysql-lb

#[tokio::test]
async fn compressed_client_leg_counts_every_command_exactly() {
    let db = shared_pair()[0].tcp_addr();
    let proxy = proxy_for(&db, true, false);
    let mut c = Compressed::login(&proxy.addr_string()).await;
    let (queries, pings) = compressed_script(&mut c).await;
    let rows = c
        .query("SHOW SESSION STATUS LIKE 'Compression'")
        .await
        .unwrap();
    assert_eq!(
        rows[0][1].as_deref(),
        Some("OFF"),
        "the backend leg is plain"
    );
    let queries = queries + 1;
    assert_eq!(
        wait_for_count(queries, || kind_count(&proxy, CommandKind::Query)).await,
        queries
    );
    assert_eq!(kind_count(&proxy, CommandKind::Other), pings);
}

#[tokio::test]
async fn compressed_on_both_legs_counts_every_command_exactly() {
    let db = shared_pair()[0].tcp_addr();
    let proxy = proxy_for(&db, true, true);
    let mut c = Compressed::login(&proxy.addr_string()).await;
    let (queries, pings) = compressed_script(&mut c).await;
    let rows = c
        .query("SHOW SESSION STATUS LIKE 'Compression'")
        .await
        .unwrap();
    assert_eq!(
        rows[0][1].as_deref(),
        Some("ON"),
        "the backend leg is compressed"
    );
    let queries = queries + 1;
    assert_eq!(
        wait_for_count(queries, || kind_count(&proxy, CommandKind::Query)).await,
        queries
    );
    assert_eq!(kind_count(&proxy, CommandKind::Other), pings);
}

#[tokio::test]
async fn plain_client_over_a_compressed_backend_leg() {
    let db = shared_pair()[0].tcp_addr();
    let proxy = proxy_for(&db, false, true);
    let mut raw = RawClient::connect_tcp(&proxy.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .unwrap();
    assert_eq!(
        raw.server_caps & CLIENT_COMPRESS,
        0,
        "`compression: false` offers no CLIENT_COMPRESS to clients"
    );
    let rows = raw
        .query_text("SHOW SESSION STATUS LIKE 'Compression'")
        .await
        .unwrap();
    assert_eq!(
        rows[0][1].as_deref(),
        Some("ON"),
        "the backend leg is compressed"
    );
    for i in 0..4 {
        raw.query_text(&format!("SELECT {i}")).await.unwrap();
    }
    assert_eq!(
        wait_for_count(5, || kind_count(&proxy, CommandKind::Query)).await,
        5
    );
}

/// `mariadb --compress` through mysql-lb: its own connection is compressed ("Protocol:
/// Compressed"), and its statements are counted exactly as an uncompressed run's.
#[test]
fn mariadb_cli_compress_is_counted_like_a_plain_session() {
    let db = shared_pair()[0].tcp_addr();
    let sql = "SELECT 1; SELECT 2; SELECT REPEAT('a', 100000) = REPEAT('a', 100000);\nstatus";
    let mut counts = Vec::new();
    for compress in [false, true] {
        let proxy = proxy_for(&db, true, false);
        let out = cli_compressed(proxy.addr.port(), compress, sql);
        assert_eq!(
            out.contains("Protocol:\t\tCompressed"),
            compress,
            "compress={compress}: {out}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let want = if compress { counts[0] } else { 3 };
        counts.push(rt.block_on(wait_for_count(want, || {
            kind_count(&proxy, CommandKind::Query)
        })));
    }
    assert!(counts[0] >= 3, "at least the three SELECTs: {counts:?}");
    assert_eq!(counts[1], counts[0], "compressed vs plain counts");
}

fn compressed_opts(addr: &str) -> OptsBuilder {
    OptsBuilder::from_opts(tcp_opts(addr, BENCH_USER, BENCH_PASS))
        .db_name(Some("test"))
        .compression(Compression::fast())
}

#[tokio::test]
async fn blob_both_ways_and_load_data_local_compressed() {
    let db = shared_pair()[0].tcp_addr();
    let dir = common::mariadb::scratch_dir("zinfile");
    for (client, backend) in [(true, false), (true, true), (false, true)] {
        let proxy = proxy_for(&db, client, backend);
        let what = format!("client leg compressed={client}, backend leg compressed={backend}");
        let opts = if client {
            compressed_opts(&proxy.addr_string())
        } else {
            OptsBuilder::from_opts(proxy.opts(BENCH_USER, BENCH_PASS)).db_name(Some("test"))
        };
        let mut conn = Conn::new(opts.clone()).await.unwrap();
        let want = if backend { "ON" } else { "OFF" };
        let row: Option<(String, String)> = conn
            .query_first("SHOW SESSION STATUS LIKE 'Compression'")
            .await
            .unwrap();
        assert_eq!(row.map(|r| r.1).as_deref(), Some(want), "{what}");
        blob_both_ways(&mut conn, &what).await;
        load_data_local(opts, &dir, &what).await;
    }
}

/// TLS and compression together, on both legs.
#[tokio::test]
async fn blob_both_ways_and_load_data_local_over_tls_and_compression() {
    let c = certs();
    let db = MariaDb::start_tls(
        "tls-zlib",
        &ServerTls {
            cert: &c.server.cert,
            key: &c.server.key,
            ca: None,
            require_secure_transport: true,
        },
    );
    let mut cfg = config(&[db.tcp_addr()]);
    cfg.tls = Some(ClientTls {
        cert: c.server.cert.clone(),
        key: c.server.key.clone(),
        ca: None,
        verify_client: false,
        min_version: TlsVersion::V1_2,
        require: true,
        cipher_suites: mysql_lb::config::default_cipher_suites(),
    });
    for b in &mut cfg.backends {
        b.tls = BackendTls {
            mode: BackendTlsMode::VerifyIdentity,
            ca: Some(c.ca.clone()),
            ..BackendTls::default()
        };
        b.compression = true;
    }
    let proxy = TestProxy::start_with(cfg);
    let ssl = SslOpts::default()
        .with_root_certs(vec![c.ca.clone().into()])
        .with_disable_built_in_roots(true);
    let opts = compressed_opts(&proxy.addr_string()).ssl_opts(ssl);
    let mut conn = Conn::new(opts.clone()).await.unwrap();
    let status: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Compression', 'Ssl_version')")
        .await
        .unwrap();
    assert!(
        status.iter().any(|(k, v)| k == "Compression" && v == "ON")
            && status
                .iter()
                .any(|(k, v)| k == "Ssl_version" && !v.is_empty()),
        "backend leg TLS and compressed: {status:?}"
    );
    blob_both_ways(&mut conn, "TLS + compression").await;
    let dir = common::mariadb::scratch_dir("tzinfile");
    load_data_local(opts, &dir, "TLS + compression").await;
}

#[tokio::test]
async fn kill_query_from_and_of_compressed_sessions() {
    let db = &shared_pair()[0];
    let proxy = proxy_for(&db.tcp_addr(), true, false);
    let mut victim = Compressed::login(&proxy.addr_string()).await;
    let mut killer = Compressed::login(&proxy.addr_string()).await;
    victim
        .send(&[(COM_QUERY, b"SELECT SLEEP(30), 'zlib-kill-marker'")])
        .await
        .unwrap();
    common::wait_until("the compressed victim's query to run", || {
        common::running_on_shared_backends("zlib-kill-marker")
    });
    let started = Instant::now();
    killer
        .query(&format!("KILL QUERY {}", victim.raw.connection_id))
        .await
        .expect("KILL QUERY of a proxy id, sent compressed");
    match victim.read_result().await {
        Err(e) => assert!(e.starts_with("1317:"), "{e}"),
        Ok(rows) => assert_eq!(one(&rows), "1", "SLEEP interrupted"),
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    // COM_PROCESS_KILL inside a frame ends the victim's session.
    killer
        .send(&[(COM_PROCESS_KILL, &victim.raw.connection_id.to_le_bytes())])
        .await
        .unwrap();
    killer.read_result().await.expect("COM_PROCESS_KILL's OK");
    assert_closed(&mut victim.raw, "the killed compressed session").await;
    assert_eq!(
        one(&killer.query("SELECT 'killer ok'").await.unwrap()),
        "killer ok"
    );
}

// ---------------------------------------------------------------------------------------------
// Bad frames from a client

async fn assert_bad_frame_closes_only_its_session(bad: Vec<u8>, what: &str) {
    let db = shared_pair()[0].tcp_addr();
    let proxy = proxy_for(&db, true, false);
    let mut other = Compressed::login(&proxy.addr_string()).await;
    let mut plain =
        RawClient::connect_tcp(&proxy.addr_string(), BENCH_USER, BENCH_PASS, None, 0, 0)
            .await
            .unwrap();
    let mut c = Compressed::login(&proxy.addr_string()).await;
    c.raw.send_raw(&bad).await.unwrap();
    assert_closed(&mut c.raw, what).await;
    assert_eq!(
        one(&other.query("SELECT 'other'").await.unwrap()),
        "other",
        "{what}"
    );
    plain
        .ping()
        .await
        .unwrap_or_else(|e| panic!("{what}: plain session: {e}"));
    let mut again = Compressed::login(&proxy.addr_string()).await;
    assert_eq!(
        one(&again.query("SELECT 'new'").await.unwrap()),
        "new",
        "{what}"
    );
}

#[tokio::test]
async fn corrupt_zlib_data_from_a_client_closes_only_that_session() {
    let mut bad = frame(0, &[0x55; 40], false);
    // Claim a zlib body of 100 bytes; the 40 stored bytes are no zlib stream.
    bad[4] = 100;
    assert_bad_frame_closes_only_its_session(bad, "bad zlib data").await;
}

#[tokio::test]
async fn wrong_uncompressed_length_closes_only_that_session() {
    let packet = [&[9, 0, 0, 0, COM_QUERY][..], b"SELECT 1"].concat();
    let mut bad = frame(0, &packet, true);
    bad[4] = u8::try_from(packet.len() + 7).unwrap();
    assert_bad_frame_closes_only_its_session(bad, "wrong uncompressed length").await;
}

/// The reference for the bulk test above: the same client straight to MariaDB.
#[tokio::test]
async fn direct_blob_both_ways_compressed() {
    let db = shared_pair()[0].tcp_addr();
    let mut conn = Conn::new(compressed_opts(&db)).await.unwrap();
    blob_both_ways(&mut conn, "direct, compressed").await;
}
