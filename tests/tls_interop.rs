//! The client leg's own TLS record layer (src/net/leg/tls/) against TLS stacks other than
//! rustls, each driving a MySQL session through mysql-lb:
//!
//! - OpenSSL, through Python's `ssl` and PyMySQL: TLS 1.2 and 1.3, each with AES-128-GCM,
//!   AES-256-GCM and ChaCha20-Poly1305, the version and suite read back from the client's own
//!   socket, a statement of several MiB and a result of several MiB checked byte for byte
//!   (tests/clients/tls_interop.py);
//! - OpenSSL's `s_client -starttls mysql`, sending KeyUpdates (`k`, and `K`, which asks for ours)
//!   between queries; its `-msg` trace shows both sides' KeyUpdates;
//! - Java's JSSE under MariaDB Connector/J: TLS 1.2, and TLS 1.3 with KeyUpdates forced by low
//!   `jdk.tls.keyLimits`, every MiB during bulk transfers and every few hundred bytes from the
//!   login on; JSSE's debug log must show them (tests/clients/JsseCheck.java). The 1 MiB case
//!   also runs straight against MariaDB (OpenSSL), the reference that proves the check;
//! - GnuTLS, through a small C client compiled with gcc (gnutls-cli 3.7.9 has no MySQL
//!   STARTTLS): the three ciphers under TLS 1.2 and 1.3, bulk both ways, and under 1.3 a
//!   KeyUpdate asking for ours and one that does not (tests/clients/gnutls_check.c).
//!
//! The backend leg is plaintext: only the client leg is under test. A missing tool fails its
//! test with the command that installs it (scripts/install-deps.sh installs them all).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use common::mariadb::{MariaDb, ServerTls, BENCH_PASS, BENCH_USER};
use common::proxy::{config, TestProxy};
use common::rawclient::{
    handshake_response, CLIENT_LONG_FLAG, CLIENT_LONG_PASSWORD, CLIENT_PLUGIN_AUTH,
    CLIENT_PROTOCOL_41, CLIENT_SECURE_CONNECTION, CLIENT_SSL, CLIENT_TRANSACTIONS, COM_QUERY,
};
use common::scripts::{clients_dir, python, python_with};
use common::tls_server::certs;
use mysql_lb::config::{default_cipher_suites, BackendTls, BackendTlsMode, ClientTls, TlsVersion};

/// Generous for a loaded 2-core machine: a JVM start plus a few MiB each way, many times over.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// One step of the s_client conversation.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
const INSTALL: &str = "run scripts/install-deps.sh";
/// Debian's libmariadb-java (a symlink to the versioned jar).
const DRIVER_JAR: &str = "/usr/share/java/mariadb-java-client.jar";
/// An account without a password: s_client consumes the greeting, so its nonce is unknown to
/// whoever writes the login packet, and an empty password needs none.
const NOPASS_USER: &str = "interop_nopass";

struct Fixture {
    db: MariaDb,
    proxy: TestProxy,
    scratch: PathBuf,
}

/// A MariaDB with TLS (the JSSE reference runs straight against it) and mysql-lb in front of it
/// offering every suite it knows on the client leg, plaintext to the backend.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let c = certs();
        let db = MariaDb::start_tls(
            "tls-interop",
            &ServerTls {
                cert: &c.server.cert,
                key: &c.server.key,
                ca: Some(&c.ca),
                require_secure_transport: false,
            },
        );
        db.root_exec(&format!(
            "CREATE USER '{NOPASS_USER}'@'%'; GRANT ALL ON test.* TO '{NOPASS_USER}'@'%'"
        ));
        let mut cfg = config(&[db.tcp_addr()]);
        cfg.admin_address = None;
        cfg.tls = Some(ClientTls {
            cert: c.server.cert.clone(),
            key: c.server.key.clone(),
            ca: None,
            verify_client: false,
            min_version: TlsVersion::V1_2,
            require: false,
            cipher_suites: default_cipher_suites(),
        });
        for b in &mut cfg.backends {
            b.tls = BackendTls {
                mode: BackendTlsMode::Disabled,
                ..BackendTls::default()
            };
        }
        let proxy = TestProxy::start_with(cfg);
        Fixture {
            db,
            proxy,
            scratch: common::mariadb::scratch_dir("tls-interop"),
        }
    })
}

/// One client at a time: each moves several MiB each way, and a JVM is heavy on two cores.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// Running the clients

/// What a client program did.
struct Ran {
    what: String,
    ok: bool,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Ran {
    /// Its `key=value` lines.
    fn lines(&self) -> BTreeMap<String, String> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn field(&self, key: &str) -> String {
        self.lines().get(key).cloned().unwrap_or_else(|| {
            panic!(
                "{}: no `{key}=` line in its output:\n{}",
                self.what, self.stdout
            )
        })
    }

    /// Panics with the output (the end of stderr, which can be a long debug log) unless the
    /// program exited 0.
    fn assert_ok(&self) {
        assert!(
            self.ok,
            "{} failed after {:.1?}:\n{}\n--- stderr (last 60 lines) ---\n{}",
            self.what,
            self.elapsed,
            self.stdout,
            tail(&self.stderr, 60)
        );
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `cmd` to its end (killed after [`RUN_TIMEOUT`]).
fn run(what: &str, mut cmd: Command, install: &str) -> Ran {
    let start = Instant::now();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}; {install}"));
    // Read both pipes while waiting: a debug log fills a pipe long before the program ends.
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let status = loop {
        match child.try_wait().expect("wait for the client") {
            Some(status) => break Some(status),
            None if start.elapsed() > RUN_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let text = |h: std::thread::JoinHandle<Vec<u8>>| {
        String::from_utf8_lossy(&h.join().expect("pipe reader")).into_owned()
    };
    let ran = Ran {
        what: what.to_string(),
        ok: status.is_some_and(|s| s.success()),
        stdout: text(stdout),
        stderr: text(stderr),
        elapsed: start.elapsed(),
    };
    if status.is_none() {
        panic!(
            "{what}: still running after {RUN_TIMEOUT:?}, killed:\n{}\n{}",
            ran.stdout,
            tail(&ran.stderr, 60)
        );
    }
    eprintln!("{what} ({:.1?}):\n{}", ran.elapsed, ran.stdout);
    ran
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn require_tool(program: &str, args: &[&str], install: &str) {
    let works = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(works, "`{program} {}` failed: {install}", args.join(" "));
}

// ---------------------------------------------------------------------------------------------
// OpenSSL through Python's ssl and PyMySQL

/// One version and suite: OpenSSL's name for the client, rustls' for the proxy's list.
fn openssl_case(version: &str, openssl_suite: &str, rustls_suite: &str) {
    python_with("pymysql");
    assert!(
        default_cipher_suites().iter().any(|s| s == rustls_suite),
        "mysql-lb's default tls.cipher_suites no longer offer {rustls_suite}"
    );
    let f = fixture();
    let mut cmd = Command::new(python());
    cmd.current_dir(clients_dir())
        .args(["tls_interop.py", version, openssl_suite])
        .env("MLB_HOST", "127.0.0.1")
        .env("MLB_PORT", f.proxy.addr.port().to_string())
        .env("MLB_USER", BENCH_USER)
        .env("MLB_PASS", BENCH_PASS)
        .env("MLB_CA", &certs().ca)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let _turn = turn();
    let ran = run(&format!("PyMySQL {version} {openssl_suite}"), cmd, INSTALL);
    ran.assert_ok();
    assert_eq!(ran.field("version"), version, "the client's socket says");
    assert_eq!(
        ran.field("cipher"),
        openssl_suite,
        "the client's socket says"
    );
    let sent: usize = ran.field("statement_bytes").parse().expect("a number");
    assert!(
        sent > 4 << 20,
        "a statement of several MiB went out: {sent}"
    );
    let read: usize = ran.field("result_bytes").parse().expect("a number");
    assert!(read > 4 << 20, "a result of several MiB came back: {read}");
    assert_eq!(ran.field("after"), "still here");
}

#[test]
fn openssl_tls12_aes_128_gcm_carries_mib_both_ways() {
    openssl_case(
        "TLSv1.2",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    );
}

#[test]
fn openssl_tls12_aes_256_gcm_carries_mib_both_ways() {
    openssl_case(
        "TLSv1.2",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    );
}

#[test]
fn openssl_tls12_chacha20_poly1305_carries_mib_both_ways() {
    openssl_case(
        "TLSv1.2",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    );
}

#[test]
fn openssl_tls13_aes_128_gcm_carries_mib_both_ways() {
    openssl_case(
        "TLSv1.3",
        "TLS_AES_128_GCM_SHA256",
        "TLS13_AES_128_GCM_SHA256",
    );
}

#[test]
fn openssl_tls13_aes_256_gcm_carries_mib_both_ways() {
    openssl_case(
        "TLSv1.3",
        "TLS_AES_256_GCM_SHA384",
        "TLS13_AES_256_GCM_SHA384",
    );
}

#[test]
fn openssl_tls13_chacha20_poly1305_carries_mib_both_ways() {
    openssl_case(
        "TLSv1.3",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS13_CHACHA20_POLY1305_SHA256",
    );
}

// ---------------------------------------------------------------------------------------------
// OpenSSL's s_client and its KeyUpdate commands

/// KeyUpdates in s_client's `-msg` trace: sent, and received.
const SENT_KEY_UPDATE: &str = ">>> TLS 1.3, Handshake [length 0005], KeyUpdate";
const GOT_KEY_UPDATE: &str = "<<< TLS 1.3, Handshake [length 0005], KeyUpdate";

#[derive(Debug, Clone, Copy)]
enum Pipe {
    Out,
    Err,
}

/// s_client with its output read as it comes, and stdin to type into.
struct SClient {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl SClient {
    fn start(port: u16) -> SClient {
        require_tool(
            "openssl",
            &["version"],
            "apt-get install -y openssl (or run scripts/install-deps.sh)",
        );
        let mut child = Command::new("openssl")
            .args(["s_client", "-starttls", "mysql", "-tls1_3", "-msg"])
            .args(["-connect", &format!("127.0.0.1:{port}")])
            .arg("-CAfile")
            .arg(&certs().ca)
            .args(["-verify_hostname", "localhost", "-verify_return_error"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start openssl s_client: {e}; {INSTALL}"));
        let keep = |pipe: Box<dyn Read + Send>| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&buf);
            std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut chunk = [0u8; 16384];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            });
            buf
        };
        let stdout = keep(Box::new(child.stdout.take().expect("piped stdout")));
        let stderr = keep(Box::new(child.stderr.take().expect("piped stderr")));
        SClient {
            child,
            stdout,
            stderr,
        }
    }

    fn output(&self) -> (String, String) {
        let text =
            |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
        (text(&self.stdout), text(&self.stderr))
    }

    /// Waits until stdout shows `needle` `times` times in all; panics with both outputs if it
    /// does not within [`STEP_TIMEOUT`] or s_client exits.
    fn wait_for(&mut self, needle: &str, times: usize, what: &str) {
        self.wait_for_bytes(Pipe::Out, needle.as_bytes(), times, what);
    }

    fn wait_for_bytes(&mut self, pipe: Pipe, needle: &[u8], times: usize, what: &str) {
        let start = Instant::now();
        loop {
            let seen = {
                let buf = match pipe {
                    Pipe::Out => &self.stdout,
                    Pipe::Err => &self.stderr,
                };
                let buf = buf.lock().unwrap();
                buf.windows(needle.len()).filter(|w| *w == needle).count()
            };
            if seen >= times {
                return;
            }
            let (out, err) = self.output();
            let exited = self.child.try_wait().expect("wait for s_client");
            if exited.is_some() || start.elapsed() > STEP_TIMEOUT {
                panic!(
                    "{what}: no {:?} (x{times}) on s_client's {pipe:?} ({}):\n--- stdout ---\n\
                     {out}\n--- stderr ---\n{err}",
                    String::from_utf8_lossy(needle),
                    match exited {
                        Some(s) => format!("it exited: {s}"),
                        None => format!("after {STEP_TIMEOUT:?}"),
                    }
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types a command letter (`k`, `K`) and waits until s_client took it (its `times`th
    /// KEYUPDATE on stderr), so that what is typed next is not read with it: s_client would
    /// drop the rest of a chunk that starts with a command letter.
    fn key_update_command(&mut self, letter: u8, times: usize) {
        self.type_in(&[letter, b'\n']);
        self.wait_for_bytes(Pipe::Err, b"KEYUPDATE", times, "s_client takes the command");
    }

    /// Writes `bytes` in one write: s_client reads stdin in chunks and sends each as typed,
    /// unless the chunk starts with one of its command letters.
    fn type_in(&mut self, bytes: &[u8]) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        stdin.write_all(bytes).expect("write to s_client");
        stdin.flush().expect("flush s_client's stdin");
    }

    /// A MySQL packet typed in; its first byte (the length's low byte) must not be one of
    /// s_client's command letters, or s_client would take it for a command.
    fn send_packet(&mut self, seq: u8, body: &[u8]) {
        let len = body.len().to_le_bytes();
        assert!(
            !b"QRkK".contains(&len[0]),
            "a {}-byte packet would start with an s_client command letter",
            body.len()
        );
        let mut packet = vec![len[0], len[1], len[2], seq];
        packet.extend_from_slice(body);
        self.type_in(&packet);
    }

    fn query(&mut self, sql: &str) {
        let mut body = vec![COM_QUERY];
        body.extend_from_slice(sql.as_bytes());
        self.send_packet(0, &body);
    }
}

impl Drop for SClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// s_client's `k` sends a KeyUpdate, `K` one that asks for the peer's. After each the session
/// must go on: the next query is answered (its result, which the query's text does not
/// contain, arrives and decrypts), and after `K` s_client's trace shows mysql-lb's own
/// KeyUpdate coming in. Proves the receiving side of both key changes and the sending side of
/// ours, for OpenSSL's KeyUpdate as it puts it on the wire.
#[test]
fn openssl_s_client_key_updates_keep_the_session() {
    let f = fixture();
    let _turn = turn();
    let mut s = SClient::start(f.proxy.addr.port());
    s.wait_for("Verify return code: 0 (ok)", 1, "TLS 1.3 handshake");
    let caps = CLIENT_LONG_PASSWORD
        | CLIENT_LONG_FLAG
        | CLIENT_PROTOCOL_41
        | CLIENT_SSL
        | CLIENT_TRANSACTIONS
        | CLIENT_SECURE_CONNECTION
        | CLIENT_PLUGIN_AUTH;
    // Sequence 2: the SSLRequest, which s_client sent, was 1.
    s.send_packet(
        2,
        &handshake_response(caps, NOPASS_USER, &[], None, "mysql_native_password"),
    );
    // The OK as s_client prints it: sequence 2, no rows, no insert id. A query typed before
    // it would be a pipelined command during the login, which the protocol does not allow.
    s.wait_for_bytes(Pipe::Out, &[0, 0, 2, 0, 0, 0], 1, "the login's OK");
    s.query("SELECT REPEAT('b1', 3)");
    s.wait_for("b1b1b1", 1, "a query before any KeyUpdate");
    let (out, _) = s.output();
    let sent_before = out.matches(SENT_KEY_UPDATE).count();
    let came_before = out.matches(GOT_KEY_UPDATE).count();
    assert_eq!(
        (sent_before, came_before),
        (0, 0),
        "no KeyUpdate yet:\n{out}"
    );

    s.key_update_command(b'k', 1);
    s.query("SELECT REPEAT('k1', 3)");
    s.wait_for("k1k1k1", 1, "the query after a KeyUpdate (not requested)");
    s.wait_for(SENT_KEY_UPDATE, 1, "our KeyUpdate went out");

    s.key_update_command(b'K', 2);
    s.query("SELECT REPEAT('K2', 3)");
    s.wait_for(
        "K2K2K2",
        1,
        "the query after a KeyUpdate asking for mysql-lb's",
    );
    s.wait_for(SENT_KEY_UPDATE, 2, "our second KeyUpdate");
    s.wait_for(GOT_KEY_UPDATE, 1, "mysql-lb's KeyUpdate in answer");
    s.query("SELECT REPEAT('z3', 3)");
    s.wait_for("z3z3z3", 1, "a last query under the new keys both ways");
    let (out, err) = s.output();
    assert_eq!(
        err.matches("KEYUPDATE").count(),
        2,
        "s_client took both commands:\n{err}"
    );
    assert_eq!(
        out.matches(GOT_KEY_UPDATE).count(),
        1,
        "mysql-lb updates its keys once, when asked:\n{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// Java's JSSE under MariaDB Connector/J

/// The compiled JsseCheck class.
fn java_classes() -> &'static Path {
    static CLASSES: OnceLock<tempfile::TempDir> = OnceLock::new();
    CLASSES
        .get_or_init(|| {
            let install = "run scripts/install-deps.sh (apt-get install default-jdk-headless \
                           libmariadb-java)";
            require_tool("java", &["-version"], install);
            require_tool("javac", &["-version"], install);
            assert!(
                Path::new(DRIVER_JAR).exists(),
                "{DRIVER_JAR} not found: {install}"
            );
            let dir = tempfile::Builder::new()
                .prefix("mlb-jsse-")
                .tempdir()
                .expect("temp dir");
            let mut javac = Command::new("javac");
            javac
                .arg("-d")
                .arg(dir.path())
                .args(["-cp", DRIVER_JAR])
                .arg(clients_dir().join("JsseCheck.java"));
            run("javac JsseCheck.java", javac, install).assert_ok();
            dir
        })
        .path()
}

/// How one JsseCheck run is set up.
struct Jsse {
    protocol: &'static str,
    /// `jdk.tls.keyLimits` for AES-GCM, in bytes; None keeps the JDK's.
    key_limit: Option<u64>,
    mib: u32,
    rounds: u32,
    direct: bool,
}

/// Runs JsseCheck with JSSE's handshake debug log on (on stderr).
fn jsse(run_as: &Jsse) -> Ran {
    let f = fixture();
    let classes = java_classes();
    let port = if run_as.direct {
        f.db.port
    } else {
        f.proxy.addr.port()
    };
    let mut cmd = Command::new("java");
    if let Some(limit) = run_as.key_limit {
        let file = f.scratch.join(format!("key-limit-{limit}.security"));
        std::fs::write(
            &file,
            format!("jdk.tls.keyLimits=AES/GCM/NoPadding KeyUpdate {limit}\n"),
        )
        .expect("write the security properties");
        cmd.arg(format!("-Djava.security.properties={}", file.display()));
    }
    cmd.arg("-Djavax.net.debug=ssl:handshake")
        .args(["-cp", &format!("{}:{DRIVER_JAR}", classes.display())])
        .args([
            "JsseCheck",
            "127.0.0.1",
            &port.to_string(),
            BENCH_USER,
            BENCH_PASS,
        ])
        .arg(&certs().ca)
        .args([
            run_as.protocol,
            &run_as.mib.to_string(),
            &run_as.rounds.to_string(),
        ]);
    let what = format!(
        "JsseCheck {} key limit {:?} {}",
        run_as.protocol,
        run_as.key_limit,
        if run_as.direct {
            "direct"
        } else {
            "through mysql-lb"
        }
    );
    let _turn = turn();
    run(&what, cmd, INSTALL)
}

/// How many KeyUpdates JSSE's log says it produced (sent) and consumed (received).
fn key_updates(ran: &Ran) -> (usize, usize) {
    let produced = ran.stderr.matches(PRODUCED_KEY_UPDATE).count();
    let consumed = ran.stderr.matches(CONSUMED_KEY_UPDATE).count();
    (produced, consumed)
}

const PRODUCED_KEY_UPDATE: &str = "Produced KeyUpdate post-handshake message";
const CONSUMED_KEY_UPDATE: &str = "Consuming KeyUpdate post-handshake message";
/// What JsseCheck writes to stderr, in line with JSSE's log, once logged in.
const LOGGED_IN: &str = "JsseCheck: logged in";

/// JSSE sent at least `sent` KeyUpdates and received at least `received`. JSSE asks for the
/// peer's update (update_requested) once a key has carried the limit, and again after every
/// record it reads under the old key; the peer answers once for all the requests that came
/// meanwhile (RFC 8446 4.6.3), so fewer come back than went out.
fn assert_key_updates(ran: &Ran, sent: usize, received: usize) {
    let (produced, consumed) = key_updates(ran);
    let lines: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|l| l.contains("KeyUpdate") || l.contains("key update"))
        .take(20)
        .collect();
    assert!(
        produced >= sent && consumed >= received,
        "{}: JSSE sent {produced} KeyUpdates (want {sent} or more) and received {consumed} \
         (want {received} or more):\n{}",
        ran.what,
        lines.join("\n")
    );
}

/// JSSE's log names the version it negotiated.
fn assert_negotiated(ran: &Ran, version: &str) {
    let line = format!("Negotiated protocol version: {version}");
    assert!(
        ran.stderr.contains(&line),
        "{}: no `{line}` in JSSE's log:\n{}",
        ran.what,
        tail(&ran.stderr, 40)
    );
}

fn assert_rounds(ran: &Ran, rounds: u32) {
    ran.assert_ok();
    for round in 0..rounds {
        assert!(
            ran.field(&format!("round.{round}")).starts_with("ok "),
            "round {round}: {}",
            ran.stdout
        );
    }
    assert_eq!(ran.field("after"), "still here");
}

#[test]
fn jsse_tls12_carries_mib_both_ways() {
    let ran = jsse(&Jsse {
        protocol: "TLSv1.2",
        key_limit: None,
        mib: 4,
        rounds: 1,
        direct: false,
    });
    assert_negotiated(&ran, "TLSv1.2");
    assert_rounds(&ran, 1);
}

/// The reference for the two below: the same KeyUpdates straight against MariaDB (OpenSSL),
/// which shows the check itself, and JSSE's KeyUpdates, work.
#[test]
fn jsse_tls13_key_update_every_mib_works_directly_against_mariadb() {
    let ran = jsse(&Jsse {
        protocol: "TLSv1.3",
        key_limit: Some(1 << 20),
        mib: 4,
        rounds: 2,
        direct: true,
    });
    assert_negotiated(&ran, "TLSv1.3");
    assert_rounds(&ran, 2);
    // Each 4 MiB result read under a 1 MiB limit: 3 requests at least, one answer at least.
    assert_key_updates(&ran, 6, 2);
}

/// `jdk.tls.keyLimits` at 1 MiB: JSSE sends KeyUpdates asking for ours as each key passes
/// 1 MiB, so several during each 4 MiB statement and result; mysql-lb must take them between
/// records and answer them while it streams a result.
#[test]
fn jsse_tls13_key_update_every_mib_keeps_the_session_and_the_data() {
    let ran = jsse(&Jsse {
        protocol: "TLSv1.3",
        key_limit: Some(1 << 20),
        mib: 4,
        rounds: 2,
        direct: false,
    });
    assert_negotiated(&ran, "TLSv1.3");
    assert_rounds(&ran, 2);
    // Each 4 MiB result read under a 1 MiB limit: 3 requests at least, one answer at least.
    assert_key_updates(&ran, 6, 2);
}

/// `jdk.tls.keyLimits` at 300 bytes: the first KeyUpdate comes during the login (between the
/// handshake and the driver's first queries), then one around nearly every record.
#[test]
fn jsse_tls13_key_update_from_the_login_on_keeps_the_session() {
    let ran = jsse(&Jsse {
        protocol: "TLSv1.3",
        key_limit: Some(300),
        mib: 1,
        rounds: 1,
        direct: false,
    });
    assert_negotiated(&ran, "TLSv1.3");
    assert_rounds(&ran, 1);
    // 1 MiB each way in 16 KiB records, each past the limit.
    assert_key_updates(&ran, 64, 1);
    let first = ran
        .stderr
        .find(PRODUCED_KEY_UPDATE)
        .expect("a KeyUpdate was sent");
    let logged_in = ran
        .stderr
        .find(LOGGED_IN)
        .expect("JsseCheck's login marker");
    assert!(
        first < logged_in,
        "the first KeyUpdate went out during the login, before the driver returned the \
         connection"
    );
}

// ---------------------------------------------------------------------------------------------
// GnuTLS

/// tests/clients/gnutls_check.c, compiled.
fn gnutls_check() -> &'static Path {
    static BINARY: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, binary) = BINARY.get_or_init(|| {
        let install = "run scripts/install-deps.sh (apt-get install gcc libgnutls28-dev)";
        require_tool("gcc", &["--version"], install);
        let dir = tempfile::Builder::new()
            .prefix("mlb-gnutls-")
            .tempdir()
            .expect("temp dir");
        let binary = dir.path().join("gnutls_check");
        let mut gcc = Command::new("gcc");
        gcc.args(["-O1", "-Wall", "-o"])
            .arg(&binary)
            .arg(clients_dir().join("gnutls_check.c"))
            .arg("-lgnutls");
        run("gcc gnutls_check.c", gcc, install).assert_ok();
        (dir, binary)
    });
    binary
}

/// One GnuTLS priority string: the version and cipher GnuTLS reports, login, a query, a 2 MiB
/// statement and a 3 MiB result.
fn gnutls(version: &str, cipher: &str) -> Ran {
    let f = fixture();
    let priority = format!("NORMAL:-VERS-ALL:+VERS-{version}:-CIPHER-ALL:+{cipher}");
    let mut cmd = Command::new(gnutls_check());
    cmd.args(["127.0.0.1", &f.proxy.addr.port().to_string()])
        .arg(&certs().ca)
        .args([BENCH_USER, BENCH_PASS, &priority]);
    let ran = run(&format!("gnutls_check {priority}"), cmd, INSTALL);
    ran.assert_ok();
    assert_eq!(ran.field("version"), version, "GnuTLS says");
    assert_eq!(ran.field("cipher"), cipher, "GnuTLS says");
    for key in ["login", "query", "big_statement", "big_result"] {
        assert_eq!(ran.field(key), "ok", "{key}: {}", ran.stdout);
    }
    ran
}

const GNUTLS_CIPHERS: [&str; 3] = ["AES-128-GCM", "AES-256-GCM", "CHACHA20-POLY1305"];

#[test]
fn gnutls_tls12_each_cipher_carries_mib_both_ways() {
    let _turn = turn();
    for cipher in GNUTLS_CIPHERS {
        gnutls("TLS1.2", cipher);
    }
}

/// After a KeyUpdate asking for ours the next query is answered and GnuTLS's receiving key has
/// changed (mysql-lb's KeyUpdate came and was taken); after one that does not ask, the next
/// query is answered too.
#[test]
fn gnutls_tls13_each_cipher_carries_mib_and_survives_key_updates() {
    let _turn = turn();
    for cipher in GNUTLS_CIPHERS {
        let ran = gnutls("TLS1.3", cipher);
        assert_eq!(ran.field("after_key_update_requested"), "ok");
        assert_eq!(
            ran.field("read_key_changed"),
            "yes",
            "{cipher}: mysql-lb answered the requested KeyUpdate with its own"
        );
        assert_eq!(ran.field("after_key_update"), "ok");
        assert_eq!(
            ran.field("read_key_changed_unasked"),
            "no",
            "{cipher}: the control: mysql-lb keeps its keys when not asked"
        );
    }
}
