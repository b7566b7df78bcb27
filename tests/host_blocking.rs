//! The server's host cache must never block the proxy's address.
//!
//! MariaDB and MySQL count, per client address, handshakes that end before a login (a
//! connection closed before its HandshakeResponse, garbage instead of one); `max_connect_errors`
//! of them with no successful login in between block the address with error 1129 for everyone
//! behind it. Behind a proxy that address is the proxy's, and what ends handshakes early is
//! common there: an L4 load balancer's TCP health checks, port scans, Kubernetes `tcpSocket`
//! probes, and the proxy's own health checks without an account. Failed logins (wrong password,
//! unknown user) are authentication errors, which do not count.
//!
//! The server never blocks loopback, and only blocks an address it could look up (see
//! [`NoNames`](common::netns::NoNames)), so each test runs a real MariaDB in a network namespace
//! of its own, with `skip_name_resolve` OFF, `max_connect_errors=10` and performance_schema ON
//! (for `performance_schema.host_cache`), and mysql-lb in another namespace, the two joined by a
//! veth pair: the server sees the proxy at 198.18.0.2. Needs root and iproute2.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::netns::{Netns, NoNames};
use common::proxy::{config, TestProxy};
use common::rawclient::{
    handshake_response, parse_greeting, ssl_request, CLIENT_PLUGIN_AUTH, CLIENT_PROTOCOL_41,
    CLIENT_SECURE_CONNECTION,
};
use mysql_lb::config::{Config, ConnectMode, HealthCheckConfig};

const MAX_CONNECT_ERRORS: u32 = 10;
/// Well past `MAX_CONNECT_ERRORS`: any that counted would block.
const PROBES: usize = 3 * MAX_CONNECT_ERRORS as usize;
const DEADLINE: Duration = Duration::from_secs(30);

/// A server that sees the proxy at a blockable address, and the namespace the proxy runs in.
struct Site {
    db: MariaDb,
    backend: String,
    proxy_ip: String,
    proxy_ns: Netns,
    _db_ns: Netns,
    _names: NoNames,
}

impl Site {
    fn new(name: &'static str) -> Site {
        let db_ns = Netns::new();
        let proxy_ns = Netns::new();
        let (db_ip, proxy_ip) = db_ns.link(&proxy_ns);
        let names = db_ns.no_names();
        let db = db_ns.inside(move || {
            let max_connect_errors = format!("--max-connect-errors={MAX_CONNECT_ERRORS}");
            // In its own namespace, all addresses are just its loopback and its end of the veth.
            MariaDb::start_with_args(
                name,
                &[
                    "--bind-address=0.0.0.0",
                    "--skip-name-resolve=OFF",
                    &max_connect_errors,
                    "--performance-schema=ON",
                ],
            )
        });
        Site {
            backend: format!("{db_ip}:{}", db.port),
            proxy_ip: proxy_ip.to_string(),
            db,
            proxy_ns,
            _db_ns: db_ns,
            _names: names,
        }
    }

    /// mysql-lb in the proxy's namespace with `cfg` (made by [`Site::config`]).
    fn proxy(&self, cfg: Config) -> TestProxy {
        self.proxy_ns.inside(move || TestProxy::start_with(cfg))
    }

    /// The test default config in front of the server, without an admin listener (the proxy's
    /// metrics are read in-process).
    fn config(&self) -> Config {
        let mut cfg = config(std::slice::from_ref(&self.backend));
        cfg.admin_address = None;
        cfg
    }

    /// `n` TCP connections to the proxy, each closed at once without a byte sent, as an L4
    /// health check or a port scan does.
    fn probe(&self, proxy: &TestProxy, n: usize) {
        let target = proxy.addr;
        self.proxy_ns.inside(move || {
            for _ in 0..n {
                drop(TcpStream::connect(target).expect("probe connects"));
            }
        });
    }

    /// `n` probes of each kind that says a little and leaves: garbage at once (an HTTP check), an
    /// SSLRequest (TLS is not offered), and a HandshakeResponse left at the auth switch the
    /// server answers it with (its plugin is none the account uses), as a MySQL-aware check
    /// without a password would be.
    fn probe_speaking(&self, proxy: &TestProxy, n: usize) {
        let target = proxy.addr;
        self.proxy_ns.inside(move || {
            for _ in 0..n {
                let mut garbage = TcpStream::connect(target).expect("probe connects");
                garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("send");

                let mut tls = TcpStream::connect(target).expect("probe connects");
                let greeting = read_packet(&mut tls);
                let caps = parse_greeting(&greeting).expect("a greeting").caps;
                write_packet(&mut tls, 1, &ssl_request(caps & CLIENT_PROTOCOL_41));

                let mut login = TcpStream::connect(target).expect("probe connects");
                read_packet(&mut login);
                let caps = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
                let response = handshake_response(caps, BENCH_USER, &[], None, "none_of_these");
                write_packet(&mut login, 1, &response);
                let switch = read_packet(&mut login);
                assert_eq!(switch.first(), Some(&0xFE), "an auth switch: {switch:?}");
            }
        });
    }

    /// Waits until every connection the probes caused is over on both sides, so the server has
    /// counted whatever it counts of them.
    fn settled(&self, proxy: &TestProxy) {
        common::wait_until("the proxy to have no client left", || {
            proxy.series("mysql_lb_client_connections") == Some(0.0)
        });
        let from_proxy = format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE HOST LIKE '{}:%'",
            self.proxy_ip
        );
        common::wait_until("the server to have no connection from the proxy", || {
            self.db.root_query(&from_proxy).trim() == "0"
        });
    }

    /// The host cache's counts for the proxy's address (zeros when it has no entry).
    fn host_cache(&self) -> HostCache {
        let row = self.db.root_query(&format!(
            "SELECT SUM_CONNECT_ERRORS, COUNT_HANDSHAKE_ERRORS, COUNT_AUTHENTICATION_ERRORS, \
             COUNT_HOST_BLOCKED_ERRORS FROM performance_schema.host_cache WHERE IP = '{}'",
            self.proxy_ip
        ));
        let n: Vec<u64> = row
            .split_whitespace()
            .map(|v| v.parse().expect("a count"))
            .collect();
        match n[..] {
            [] => HostCache::default(),
            [connect, handshake, authentication, blocked] => HostCache {
                connect,
                handshake,
                authentication,
                blocked,
            },
            _ => panic!("host_cache row {row:?}"),
        }
    }

    /// A login of the `mariadb` CLI through the proxy, from the proxy's namespace.
    fn login(&self, proxy: &TestProxy) -> Result<String, String> {
        let out = self
            .proxy_ns
            .command("mariadb")
            .args(["--no-defaults", "--protocol=tcp", "--host=127.0.0.1"])
            .arg(format!("--port={}", proxy.addr.port()))
            .arg(format!("--user={BENCH_USER}"))
            .arg(format!("--password={BENCH_PASS}"))
            .args(["--batch", "--skip-column-names", "-e", "SELECT 1"])
            .output()
            .expect("run the mariadb CLI");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct HostCache {
    /// The blocking count: handshake errors since the last successful login.
    connect: u64,
    handshake: u64,
    authentication: u64,
    blocked: u64,
}

#[test]
fn probes_that_close_at_once_do_not_get_the_proxy_blocked() {
    let site = Site::new("probed");
    let proxy = site.proxy(site.config());
    site.probe(&proxy, PROBES);
    site.settled(&proxy);
    let counted = site.host_cache();
    let login = site.login(&proxy);
    assert!(
        counted.connect == 0 && login.as_deref() == Ok("1"),
        "the server counted handshake errors from the proxy ({counted:?}); a login: {login:?}"
    );
}

#[test]
fn probes_that_say_a_little_and_leave_do_not_get_the_proxy_blocked() {
    let site = Site::new("spoken");
    let proxy = site.proxy(site.config());
    site.probe_speaking(&proxy, PROBES / 3);
    site.settled(&proxy);
    let counted = site.host_cache();
    let login = site.login(&proxy);
    assert!(
        counted.connect == 0 && login.as_deref() == Ok("1"),
        "the server counted handshake errors from the proxy ({counted:?}); a login: {login:?}"
    );
    assert!(
        counted.authentication >= (PROBES / 3) as u64,
        "logins left at the auth switch end refused: {counted:?}"
    );
}

#[test]
fn with_an_immediate_connect_probes_do_not_get_the_proxy_blocked_either() {
    let site = Site::new("immediate");
    let mut cfg = site.config();
    cfg.connect_mode = ConnectMode::Immediate;
    let proxy = site.proxy(cfg);
    site.probe(&proxy, PROBES);
    site.probe_speaking(&proxy, PROBES / 3);
    site.settled(&proxy);
    let counted = site.host_cache();
    let login = site.login(&proxy);
    assert!(
        counted.connect == 0 && login.as_deref() == Ok("1"),
        "the server counted handshake errors from the proxy ({counted:?}); a login: {login:?}"
    );
    assert!(
        counted.authentication >= PROBES as u64,
        "each probe's backend handshake ends with a refused login: {counted:?}"
    );
}

#[test]
fn health_checks_without_an_account_do_not_get_the_proxy_blocked() {
    let site = Site::new("checked");
    let mut cfg = site.config();
    cfg.health_check = HealthCheckConfig {
        interval: Duration::from_millis(50),
        ..HealthCheckConfig::default()
    };
    let proxy = site.proxy(cfg);
    let start = Instant::now();
    loop {
        let c = site.host_cache();
        if c.handshake + c.authentication + c.blocked >= PROBES as u64 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "{PROBES} checks: {c:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let counted = site.host_cache();
    assert_eq!(
        (counted.connect, counted.handshake, counted.blocked),
        (0, 0, 0),
        "checks counted as handshake errors: {counted:?}"
    );
    assert!(
        counted.authentication >= PROBES as u64,
        "each check ends with a refused login: {counted:?}"
    );
    assert_eq!(
        proxy.series(&format!(
            "mysql_lb_backend_up{{backend=\"{}\"}}",
            site.backend
        )),
        Some(1.0)
    );
    assert_eq!(site.login(&proxy), Ok("1".to_owned()));
}

#[test]
fn a_remote_backend_is_connected_only_once_the_client_has_spoken() {
    let site = Site::new("deferred");
    let mut cfg = site.config();
    cfg.health_check.interval = Duration::ZERO;
    let proxy = site.proxy(cfg);
    // The first client has the greeting learned; the next is greeted from it.
    assert_eq!(site.login(&proxy), Ok("1".to_owned()));
    let target = proxy.addr;
    let mut stream = site
        .proxy_ns
        .inside(move || TcpStream::connect(target).expect("connect"));
    let greeting = read_packet(&mut stream);
    assert_eq!(greeting.first(), Some(&10), "a protocol-10 greeting");
    let connections = format!(
        "mysql_lb_backend_connections{{backend=\"{}\"}}",
        site.backend
    );
    assert_eq!(proxy.series(&connections), Some(0.0));
}

#[test]
fn a_loopback_backend_is_still_connected_at_accept() {
    let db = &common::mariadb::shared_pair()[0];
    let mut cfg = config(&[db.tcp_addr()]);
    cfg.health_check.interval = Duration::ZERO;
    let proxy = TestProxy::start_with(cfg);
    let mut stream = TcpStream::connect(proxy.addr).expect("connect");
    let greeting = read_packet(&mut stream);
    assert_eq!(greeting.first(), Some(&10), "a protocol-10 greeting");
    let connections = format!(
        "mysql_lb_backend_connections{{backend=\"{}\"}}",
        db.tcp_addr()
    );
    assert_eq!(proxy.series(&connections), Some(1.0));
}

fn write_packet(stream: &mut TcpStream, seq: u8, payload: &[u8]) {
    let len = u32::try_from(payload.len())
        .expect("a small packet")
        .to_le_bytes();
    let mut packet = vec![len[0], len[1], len[2], seq];
    packet.extend_from_slice(payload);
    stream.write_all(&packet).expect("send a packet");
}

/// One packet's payload, blocking (the greeting, which the proxy sends first).
fn read_packet(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(DEADLINE))
        .expect("read timeout");
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).expect("packet header");
    let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
    let mut payload = vec![0; len];
    stream.read_exact(&mut payload).expect("packet payload");
    payload
}
