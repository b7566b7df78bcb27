//! mysql-lb running in-process on its own runtime, as the daemon would, on free loopback ports.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

use mysql_lb::config::{BackendAddr, BackendConfig, Config, ListenAddr};
use mysql_lb::session::Shared;
use mysql_lb::Proxy;
use tokio_util::sync::CancellationToken;

pub struct TestProxy {
    pub addr: SocketAddr,
    pub unix: Option<PathBuf>,
    pub shared: Arc<Shared>,
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
                }
            })
            .collect(),
        connect_timeout: Duration::from_secs(2),
        ..Config::default()
    }
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
                tx.send((proxy.local_addrs(), proxy.shared())).unwrap();
                proxy.run(token).await;
            });
        });
        let (addrs, shared) = rx
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
            shared,
            shutdown,
            thread: Some(thread),
        }
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    pub fn opts(&self, user: &str, pass: &str) -> mysql_async::Opts {
        super::mariadb::tcp_opts(&self.addr_string(), user, pass)
    }

    /// Completed commands recorded for every backend.
    pub fn total_commands(&self) -> u64 {
        self.shared
            .backends
            .backends()
            .iter()
            .map(|b| b.stats.total_commands())
            .sum()
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
