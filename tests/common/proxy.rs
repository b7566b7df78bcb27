//! mysql-lb running in-process on its own runtime, as the daemon would, on free loopback ports.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

use mysql_lb::config::{BackendAddr, BackendConfig, Config, ListenAddr};
use mysql_lb::proxy::state::ProxyState;
use mysql_lb::Proxy;
use tokio_util::sync::CancellationToken;

pub struct TestProxy {
    pub addr: SocketAddr,
    pub unix: Option<PathBuf>,
    pub state: Arc<ProxyState>,
    /// The admin HTTP address, when enabled.
    pub admin: Option<SocketAddr>,
    /// The SQL admin port, when enabled.
    pub admin_sql: Option<SocketAddr>,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Logs go to the test's output when RUST_LOG is set (e.g. RUST_LOG=mysql_lb=debug).
pub fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

/// A config listening on 127.0.0.1:0 in front of `backends` ("host:port" or socket paths).
pub fn config(backends: &[String]) -> Config {
    Config {
        listen: vec![ListenAddr::Tcp("127.0.0.1:0".parse().unwrap())],
        backends: backends
            .iter()
            .map(|b| {
                let address: BackendAddr = b.parse().expect("backend address");
                BackendConfig {
                    name: address.to_string(),
                    address,
                    weight: 1,
                    kind: Default::default(),
                    tls: Default::default(),
                    compression: false,
                    proxy_protocol: None,
                    pool: "default".into(),
                    role: None,
                }
            })
            .collect(),
        connect_timeout: Duration::from_secs(2),
        shutdown_timeout: Duration::from_secs(5),
        admin_address: Some("127.0.0.1:0".parse().unwrap()),
        ..Config::default()
    }
}

/// [`config`] with the query digest table on (the default: this says so where a test needs it).
pub fn with_digests(backends: &[String]) -> Config {
    let mut c = config(backends);
    c.digests.enabled = true;
    c
}

impl TestProxy {
    pub fn start(backends: &[String]) -> Self {
        Self::start_with(config(backends))
    }

    pub fn start_with(config: Config) -> Self {
        init_logging();
        let config = config.validate().expect("valid test config");
        let shutdown = CancellationToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let token = shutdown.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let proxy = Proxy::bind(&config).await.expect("proxy binds");
                tx.send((
                    proxy.local_addrs(),
                    proxy.state(),
                    proxy.admin_addr(),
                    proxy.admin_sql_addr(),
                ))
                .unwrap();
                proxy.run(token).await;
            });
        });
        let (addrs, state, admin, admin_sql) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("proxy started");
        let mut addr = None;
        let mut unix = None;
        for a in addrs {
            match a {
                ListenAddr::Tcp(sa) if addr.is_none() => addr = Some(sa),
                ListenAddr::Unix(p) if unix.is_none() => unix = Some(p),
                _ => {}
            }
        }
        Self {
            addr: addr.expect("a TCP listener"),
            unix,
            state,
            admin,
            admin_sql,
            shutdown,
            thread: Some(thread),
        }
    }

    /// The value of one series (`name{labels}` as exposed) read in-process, so it works where
    /// the admin listener cannot be reached (a proxy in a network namespace).
    pub fn series(&self, series: &str) -> Option<f64> {
        let metrics = String::from_utf8(self.state.metrics.render()).expect("UTF-8 metrics");
        metrics.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    pub fn opts(&self, user: &str, pass: &str) -> mysql_async::Opts {
        super::mariadb::tcp_opts(&self.addr_string(), user, pass)
    }

    /// Starts the graceful shutdown (as SIGTERM does) without waiting for it.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Completed commands recorded for every backend.
    pub fn total_commands(&self) -> u64 {
        self.state
            .backends()
            .backends()
            .iter()
            .map(|b| b.stats.total_commands())
            .sum()
    }
}

impl TestProxy {
    /// GET `path` from the admin endpoint: (status code, body). Plain HTTP/1.0 over a socket keeps
    /// the tests free of an HTTP client dependency.
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        http_get(self.admin.expect("admin endpoint enabled"), path).expect("admin response")
    }

    /// The `/backends` entry of backend `name`.
    pub fn backend_entry(&self, name: &str) -> serde_json::Value {
        let (status, body) = self.admin_get("/backends");
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        v["backends"]
            .as_array()
            .and_then(|l| l.iter().find(|b| b["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no {name} in {body}"))
    }
}

impl TestProxy {
    /// POST `path` (an admin operation, no body) with optional extra header lines.
    pub fn admin_post(&self, path: &str, headers: &[&str]) -> (u16, String) {
        let admin = self.admin.expect("admin endpoint enabled");
        http_request(admin, "POST", path, headers, b"").expect("admin response")
    }

    /// PUT `body` to `path` with optional extra header lines.
    pub fn admin_put(&self, path: &str, headers: &[&str], body: &[u8]) -> (u16, String) {
        let admin = self.admin.expect("admin endpoint enabled");
        http_request(admin, "PUT", path, headers, body).expect("admin response")
    }
}

/// GET `path` from an HTTP server at `addr` (an admin endpoint): (status code, body), or why
/// the request failed.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    http_request(addr, "GET", path, &[], b"")
}

/// One HTTP/1.0 request (`headers` are whole lines without CRLF): (status code, body).
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n");
    for h in headers {
        head += h;
        head += "\r\n";
    }
    if method != "GET" {
        head += &format!("Content-Length: {}\r\n", body.len());
    }
    head += "\r\n";
    s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    s.write_all(body).map_err(|e| e.to_string())?;
    let mut response = String::new();
    s.read_to_string(&mut response)
        .map_err(|e| format!("read the response from {addr}: {e}"))?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// A new connection to `addr` (a proxy) and the backend port it landed on.
pub async fn connect_at(addr: &str) -> (mysql_async::Conn, u16) {
    use mysql_async::prelude::Queryable;
    let opts =
        super::mariadb::tcp_opts(addr, super::mariadb::BENCH_USER, super::mariadb::BENCH_PASS);
    let mut conn = mysql_async::Conn::new(opts)
        .await
        .expect("connect through the proxy");
    let port: u16 = conn
        .query_first("SELECT @@port")
        .await
        .expect("SELECT @@port")
        .expect("a row");
    (conn, port)
}

/// Backend ports of `n` sequential short connections to `addr`.
pub async fn spread_at(addr: &str, n: usize) -> std::collections::HashMap<u16, usize> {
    let mut per_port = std::collections::HashMap::new();
    for _ in 0..n {
        let (conn, port) = connect_at(addr).await;
        conn.disconnect().await.expect("disconnect");
        *per_port.entry(port).or_default() += 1;
    }
    per_port
}

impl TestProxy {
    /// A new connection through the proxy and the backend port it landed on.
    pub async fn connect(&self) -> (mysql_async::Conn, u16) {
        connect_at(&self.addr_string()).await
    }

    /// Backend ports of `n` sequential short connections through the proxy.
    pub async fn spread(&self, n: usize) -> std::collections::HashMap<u16, usize> {
        spread_at(&self.addr_string(), n).await
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
