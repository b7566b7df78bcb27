//! A password a client sends in clear over a secure leg (TLS, a unix socket) must not cross a
//! plaintext backend leg that leaves the host: end to end with MariaDB's PAM plugin (`auth_pam`,
//! whose client side is `dialog`, or `mysql_clear_password` when the client picks it itself)
//! and the `mariadb` CLI.
//!
//! The backend leg leaves the host for real: the proxy runs in a network namespace whose
//! loopback also carries 10.77.0.1, and reaches the server at that address through a relay to
//! the server's TCP port (see `common::netns`). PAM checks the password with `pam_exec`, whose
//! script logs each `user:password` it is given: a refused login must leave no line there (the
//! password never reached the server), an allowed one must. The PAM service is written to
//! /etc/pam.d/mysql-lb-cleartext-test (tests run as root here). caching_sha2_password and
//! sha256_password are MySQL-only; their cases are byte fixtures in `src/wire/protocol/cleartext.rs`
//! and `src/proxy/auth/cleartext_tests.rs`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::certs::Certs;
use common::mariadb::{new_temp_dir, MariaDb, ServerTls, BENCH_PASS, BENCH_USER};
use common::netns::Netns;
use common::proxy::{config, TestProxy};
use common::rawclient::{parse_err, RawClient};
use mysql_lb::config::{BackendTlsMode, ClientTls, Config, ConnectMode, ListenAddr, TlsVersion};

const PAM_SERVICE: &str = "mysql-lb-cleartext-test";
const PASSWORD: &str = "pam-secret-41";
/// Not a loopback address: the proxy's backend leg to it leaves the host as far as anything
/// judging the address can tell.
const BACKEND_IP: &str = "10.77.0.1";

struct Fixture {
    db: MariaDb,
    certs: Certs,
    /// Where the PAM check script logs `user:password` for every password it is given.
    log: PathBuf,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let certs = Certs::generate(&new_temp_dir("cleartext-certs"));
        let tls = ServerTls {
            cert: &certs.server.cert,
            key: &certs.server.key,
            ca: None,
            require_secure_transport: false,
        };
        let db = MariaDb::start_tls("cleartext", &tls);
        let dir = new_temp_dir("cleartext-pam");
        let log = dir.join("passwords.log");
        let script = dir.join("check.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\npw=$(tr -d '\\000')\nprintf '%s:%s\\n' \"$PAM_USER\" \"$pw\" >> {}\n\
                 [ \"$pw\" = '{PASSWORD}' ]\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            Path::new("/etc/pam.d").join(PAM_SERVICE),
            format!(
                "auth required pam_exec.so expose_authtok quiet {}\n\
                 account required pam_permit.so\n",
                script.display()
            ),
        )
        .expect("write the PAM service (needs root)");
        db.root_exec("INSTALL SONAME 'auth_pam'");
        Fixture { db, certs, log }
    })
}

/// A PAM account of the test's own, so parallel tests read their own lines in the log.
fn pam_user(name: &str) -> String {
    let fx = fixture();
    let mut sql = String::new();
    for host in ["%", "localhost"] {
        sql.push_str(&format!(
            "CREATE USER '{name}'@'{host}' IDENTIFIED VIA pam USING '{PAM_SERVICE}'; "
        ));
    }
    fx.db.root_exec(&sql);
    name.to_owned()
}

/// The passwords PAM was given for `user`, but the proxy's own: where it refuses a login it
/// answers the backend's prompt with its refused password (a login the server refuses, rather
/// than an abandoned handshake it would count against the proxy's address).
fn passwords_seen(user: &str) -> Vec<String> {
    let log = std::fs::read(&fixture().log).unwrap_or_default();
    let log = String::from_utf8_lossy(&log);
    log.lines()
        .filter_map(|l| l.strip_prefix(&format!("{user}:")))
        .filter(|pw| *pw != mysql_lb::wire::protocol::login::REFUSED_PASSWORD)
        .map(str::to_owned)
        .collect()
}

fn no_password_reached_pam(user: &str) {
    assert_eq!(
        passwords_seen(user),
        Vec::<String>::new(),
        "PAM got a password"
    );
}

/// After a refusal: PAM saw no password of the client's, and the refusal was counted (as the
/// session ends, a moment after the ERR left).
fn no_password_reached_pam_and_the_refusal_counted(proxy: &TestProxy, user: &str) {
    no_password_reached_pam(user);
    common::wait_until("the refusal counted", || {
        counted(proxy, "cleartext_password") == Some(1.0)
    });
}

/// Relays TCP connections accepted on `listener` (in the namespace) to the server's TCP port,
/// connected from this runtime's thread, outside the namespace.
async fn relay_to_server(listener: tokio::net::TcpListener, server: String) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        let server = server.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(server).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// A namespace where the server answers at 10.77.0.1 (the relay runs until the test ends).
fn network_backend() -> (Netns, String) {
    let ns = Netns::new();
    ns.add_address(&format!("{BACKEND_IP}/32"));
    let listener = ns.inside(|| std::net::TcpListener::bind((BACKEND_IP, 0)).expect("bind"));
    listener.set_nonblocking(true).unwrap();
    let backend = listener.local_addr().unwrap().to_string();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(relay_to_server(listener, fixture().db.tcp_addr()));
    (ns, backend)
}

/// A proxy config with a unix listener in `dir` and TLS for clients, in front of `backend`
/// whose leg is plaintext (`mode: disabled`).
fn proxy_config(dir: &Path, backend: &str) -> Config {
    let fx = fixture();
    let mut cfg = config(&[backend.to_owned()]);
    cfg.listen.push(ListenAddr::Unix(dir.join("proxy.sock")));
    cfg.admin_address = None;
    cfg.tls = Some(ClientTls {
        cert: fx.certs.server.cert.clone(),
        key: fx.certs.server.key.clone(),
        ca: None,
        verify_client: false,
        min_version: TlsVersion::V1_2,
        require: false,
        cipher_suites: mysql_lb::config::default_cipher_suites(),
    });
    cfg.backends[0].tls.mode = BackendTlsMode::Disabled;
    cfg
}

/// The `mariadb` CLI logging in as `user` over the proxy's unix socket, printing CURRENT_USER().
/// (The tests run on a multi-thread runtime: the CLI blocks a thread while the relay to the
/// server runs on the other.)
fn cli_over_unix(proxy: &TestProxy, user: &str, extra: &[&str]) -> Output {
    let socket = proxy.unix.as_ref().expect("the proxy's unix listener");
    Command::new("mariadb")
        .arg(format!("--socket={}", socket.display()))
        // No TLS on this leg: a unix socket is secure on its own.
        .arg("--skip-ssl")
        .args([&format!("--user={user}"), &format!("--password={PASSWORD}")])
        .args(extra)
        .args([
            "--batch",
            "--skip-column-names",
            "-e",
            "SELECT CURRENT_USER()",
        ])
        .output()
        .expect("run the mariadb CLI")
}

/// The same over TCP with TLS, from inside the namespace where the proxy listens.
fn cli_over_tls(ns: &Netns, proxy: &TestProxy, user: &str, extra: &[&str]) -> Output {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "mariadb",
            "--protocol=tcp",
            "--ssl",
        ])
        .args(["--host=127.0.0.1", &format!("--port={}", proxy.addr.port())])
        .args([&format!("--user={user}"), &format!("--password={PASSWORD}")])
        .args(extra)
        .args([
            "--batch",
            "--skip-column-names",
            "-e",
            "SELECT CURRENT_USER()",
        ])
        .output()
        .expect("run the mariadb CLI")
}

fn logged_in(out: &Output, user: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim().starts_with(&format!("{user}@")),
        "the login should succeed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The CLI was refused with our ERR, naming the backend, the fix and the opt-in.
fn refused(out: &Output, backend: &str, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the login should be refused");
    for expected in [
        "ERROR 1045 (28000)",
        "mysql-lb: refused: ",
        what,
        &format!("backend {backend} is plaintext TCP leaving this host"),
        "backend_tls.mode",
        "allow_cleartext_passwords: true",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in: {stderr}");
    }
}

fn counted(proxy: &TestProxy, reason: &str) -> Option<f64> {
    let metrics = String::from_utf8(proxy.state.metrics.render()).expect("UTF-8 metrics");
    let series = format!("mysql_lb_client_disconnections_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pam_dialog_from_a_unix_client_is_refused_before_the_password_leaves() {
    let user = pam_user("pam_dialog_unix");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let cfg = proxy_config(dir.path(), &backend);
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    let out = cli_over_unix(&proxy, &user, &[]);
    refused(
        &out,
        &backend,
        "the backend asked for the password in clear (dialog)",
    );
    no_password_reached_pam_and_the_refusal_counted(&proxy, &user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_clear_password_in_the_first_response_over_tls_is_never_forwarded() {
    let user = pam_user("pam_clear_tls");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = proxy_config(dir.path(), &backend);
    // The response itself reaches the backend only in immediate mode (a deferred connect
    // drops it unread; see a_deferred_connect_guards_the_relayed_exchange_too).
    cfg.connect_mode = ConnectMode::Immediate;
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    let out = cli_over_tls(
        &ns,
        &proxy,
        &user,
        &[
            "--enable-cleartext-plugin",
            "--default-auth=mysql_clear_password",
        ],
    );
    refused(
        &out,
        &backend,
        "the client sent its password in clear (mysql_clear_password)",
    );
    no_password_reached_pam(&user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_cleartext_passwords_the_pam_login_crosses_the_plaintext_leg() {
    let user = pam_user("pam_allowed");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = proxy_config(dir.path(), &backend);
    cfg.backends[0].tls.allow_cleartext_passwords = true;
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    logged_in(&cli_over_unix(&proxy, &user, &[]), &user);
    logged_in(&cli_over_tls(&ns, &proxy, &user, &[]), &user);
    assert_eq!(passwords_seen(&user), vec![PASSWORD, PASSWORD]);
    assert_eq!(counted(&proxy, "cleartext_password"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_or_loopback_backend_leg_takes_the_password() {
    let user = pam_user("pam_safe_legs");
    // The same network backend with TLS on its leg.
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = proxy_config(dir.path(), &backend);
    cfg.backends[0].tls.mode = BackendTlsMode::Required;
    let proxy = ns.inside(move || TestProxy::start_with(cfg));
    logged_in(&cli_over_unix(&proxy, &user, &[]), &user);

    // A loopback backend, plaintext: the password stays on this host.
    let dir = tempfile::tempdir().unwrap();
    let cfg = proxy_config(dir.path(), &fixture().db.tcp_addr());
    let local = TestProxy::start_with(cfg);
    logged_in(&cli_over_unix(&local, &user, &[]), &user);
    assert_eq!(passwords_seen(&user), vec![PASSWORD, PASSWORD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_connect_guards_the_relayed_exchange_too() {
    let user = pam_user("pam_deferred");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = proxy_config(dir.path(), &backend);
    cfg.connect_mode = ConnectMode::Deferred;
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    let out = cli_over_unix(&proxy, &user, &[]);
    refused(
        &out,
        &backend,
        "the backend asked for the password in clear (dialog)",
    );
    no_password_reached_pam(&user);
}

/// Logs in as `bench` over the proxy's unix socket, then runs COM_CHANGE_USER to the PAM
/// account `user` by hand, answering each dialog prompt with the password. The command names
/// mysql_native_password (as libmariadb does by default, with a scramble), or with `clear` it
/// names mysql_clear_password and carries the password itself. Ok once changed, or the ERR that
/// ended it.
async fn change_user(proxy: &TestProxy, user: &str, clear: bool) -> Result<(), String> {
    let socket = proxy.unix.as_ref().expect("the proxy's unix listener");
    let mut c = RawClient::connect_unix(socket, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .expect("bench logs in");
    let mut body = user.as_bytes().to_vec();
    body.push(0);
    let (auth, plugin) = if clear {
        (
            [PASSWORD.as_bytes(), b"\0"].concat(),
            "mysql_clear_password",
        )
    } else {
        (vec![0x11; 20], "mysql_native_password")
    };
    body.push(auth.len() as u8);
    body.extend_from_slice(&auth);
    body.push(0); // no database
    body.extend_from_slice(&45u16.to_le_bytes());
    body.extend_from_slice(plugin.as_bytes());
    body.push(0);
    c.send_command(0x11, &body).await?;
    for _ in 0..4 {
        let (seq, reply) = c.read_packet().await?;
        match reply.first() {
            Some(0x00) => return Ok(()),
            Some(0xFF) => return Err(parse_err(&reply)),
            // A switch to dialog carrying the first prompt, or a further prompt.
            _ => {
                let mut answer = PASSWORD.as_bytes().to_vec();
                answer.push(0);
                c.send_packet(seq.wrapping_add(1), &answer).await?;
            }
        }
    }
    Err("more than 3 prompts".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_user_to_a_pam_account_is_refused_before_the_password_leaves() {
    let user = pam_user("pam_change_user");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let cfg = proxy_config(dir.path(), &backend);
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    let refused = change_user(&proxy, &user, false)
        .await
        .expect_err("change user refused");
    for expected in [
        "1045: mysql-lb: refused: the backend asked for the password in clear (dialog)",
        "allow_cleartext_passwords: true",
    ] {
        assert!(refused.contains(expected), "{expected:?} not in {refused}");
    }
    no_password_reached_pam_and_the_refusal_counted(&proxy, &user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_cleartext_passwords_a_change_user_to_a_pam_account_succeeds() {
    let user = pam_user("pam_change_allowed");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = proxy_config(dir.path(), &backend);
    cfg.backends[0].tls.allow_cleartext_passwords = true;
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    change_user(&proxy, &user, false)
        .await
        .expect("change user");
    assert_eq!(passwords_seen(&user), vec![PASSWORD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_user_carrying_its_password_in_clear_is_never_forwarded() {
    let user = pam_user("pam_change_clear");
    let (ns, backend) = network_backend();
    let dir = tempfile::tempdir().unwrap();
    let cfg = proxy_config(dir.path(), &backend);
    let proxy = ns.inside(move || TestProxy::start_with(cfg));

    let refused = change_user(&proxy, &user, true)
        .await
        .expect_err("change user refused");
    let expected =
        "1045: mysql-lb: refused: the client sent its password in clear (mysql_clear_password)";
    assert!(refused.contains(expected), "{expected:?} not in {refused}");
    no_password_reached_pam_and_the_refusal_counted(&proxy, &user);
}
