//! Behind a load balancer, with the real binary and real MariaDB: `/readyz` fails at SIGTERM
//! while the listeners keep serving for `shutdown_delay`, then the usual drain; and the config
//! file is watched, as a mounted ConfigMap changes, with no SIGHUP.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::mariadb::{shared_pair, tcp_opts, MariaDb};
use common::proxy::http_get;
use common::{running_on_shared_backends, wait_until};
use mysql_async::prelude::*;

/// The ports a proxy bound.
struct Ports {
    mysql: u16,
    admin: u16,
}

impl Ports {
    fn admin(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin))
    }

    fn mysql(&self) -> String {
        format!("127.0.0.1:{}", self.mysql)
    }
}

/// A config in front of `backends` (server, weight), with `extra` top-level keys. Both
/// listeners on port 0: [`start`] learns the ports the daemon bound.
fn config_text(backends: &[(&MariaDb, u32)], extra: &str) -> String {
    let mut yaml = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin_address: \"127.0.0.1:0\"\nlog: {{ level: info }}\n\
         health_check: {{ interval: 300ms }}\n{extra}backends:\n"
    );
    for (db, weight) in backends {
        yaml += &format!(
            "  - {{ address: \"{}\", name: \"port{}\", weight: {weight} }}\n",
            db.tcp_addr(),
            db.port
        );
    }
    yaml
}

fn start(config: &Path) -> (Daemon, Ports) {
    let mut d = Daemon::start(&["--config".into(), config.display().to_string()], None);
    let ports = Ports {
        mysql: d.proxy_addr().port(),
        admin: d.admin_addr().port(),
    };
    (d, ports)
}

fn get(ports: &Ports, path: &str) -> (u16, String) {
    http_get(ports.admin(), path).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

async fn connect(ports: &Ports) -> Result<mysql_async::Conn, mysql_async::Error> {
    mysql_async::Conn::new(tcp_opts(&ports.mysql(), "bench", "bench")).await
}

/// Waits (bounded) for the daemon to exit on its own; its exit status.
fn wait_exit(d: &mut Daemon, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = d.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "mysql-lb did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `/backends` as (name, weight) pairs.
fn backends(ports: &Ports) -> Vec<(String, u64)> {
    let (status, body) = get(ports, "/backends");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON from /backends");
    v["backends"]
        .as_array()
        .expect("a backends list")
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_owned(),
                b["weight"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_fails_readiness_at_once_serves_new_clients_for_the_delay_then_drains() {
    let pair = shared_pair();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    let delay = Duration::from_secs(3);
    let text = config_text(
        &[(&pair[0], 1), (&pair[1], 1)],
        "shutdown_delay: 3s\nshutdown_timeout: 15s\n",
    );
    std::fs::write(&path, text).unwrap();
    let (mut d, ports) = start(&path);
    assert_eq!(get(&ports, "/readyz"), (200, "ready\n".to_owned()));
    let mut held = connect(&ports).await.expect("a session before the signal");
    let one: u8 = held.query_first("SELECT 1").await.unwrap().unwrap();
    assert_eq!(one, 1);

    let signalled = Instant::now();
    d.signal(libc::SIGTERM);
    d.wait_for_line("signal received");
    let (status, body) = get(&ports, "/readyz");
    assert_eq!(status, 503, "not ready from the signal on: {body}");
    assert!(body.contains("shutting down"), "says why: {body}");
    assert_eq!(get(&ports, "/healthz").0, 200, "liveness untouched");

    // The load balancer has not noticed yet: a new client still gets in and is served.
    let mut late = connect(&ports)
        .await
        .expect("a new client during shutdown_delay");
    let two: u8 = late.query_first("SELECT 2").await.unwrap().unwrap();
    assert_eq!(two, 2);
    late.disconnect().await.unwrap();

    // The held session is busy when the drain begins: its command finishes, then it closes.
    let busy = tokio::spawn(async move {
        let row: Option<(i64, String)> = held
            .query_first("SELECT SLEEP(6), 'lifecycle-drain-marker'")
            .await
            .expect("the in-flight query finishes during the drain");
        let after = held.query_drop("SELECT 3").await;
        (row, after.is_err())
    });
    wait_until("the busy query to run", || {
        running_on_shared_backends("lifecycle-drain-marker")
    });
    d.wait_for_line("stopped accepting; draining sessions");
    assert!(
        signalled.elapsed() >= delay,
        "the drain began only after shutdown_delay: {:?}",
        signalled.elapsed()
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", ports.mysql)).is_err(),
        "no new client once the drain began"
    );
    assert_eq!(get(&ports, "/healthz").0, 200, "alive while draining");
    assert_eq!(get(&ports, "/readyz").0, 503, "still not ready");
    assert!(
        running_on_shared_backends("lifecycle-drain-marker"),
        "those answers came during the drain"
    );

    let (row, closed_after) = busy.await.unwrap();
    assert_eq!(row, Some((0, "lifecycle-drain-marker".to_owned())));
    assert!(closed_after, "the session closed at its command boundary");
    let status = wait_exit(&mut d, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() < delay + Duration::from_secs(15),
        "within shutdown_delay + shutdown_timeout: {:?}",
        signalled.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_shutdown_delay_sigterm_drains_at_once_as_before() {
    let pair = shared_pair();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    let text = config_text(&[(&pair[0], 1)], "shutdown_timeout: 30s\n");
    std::fs::write(&path, text).unwrap();
    let (mut d, ports) = start(&path);
    let mut held = connect(&ports).await.expect("a session");
    held.query_drop("SELECT 1").await.unwrap();

    let signalled = Instant::now();
    d.signal(libc::SIGTERM);
    let status = wait_exit(&mut d, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "the idle session closed at once, not at shutdown_timeout: {:?}",
        signalled.elapsed()
    );
    d.wait_for_line("shut down");
    assert!(
        d.seen.iter().all(|l| !l.contains("shutdown_delay")),
        "no delay step: {:#?}",
        d.seen
    );
    assert!(
        held.query_drop("SELECT 1").await.is_err(),
        "the session is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_the_delay_starts_the_drain_at_once() {
    let pair = shared_pair();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    let text = config_text(&[(&pair[0], 1)], "shutdown_delay: 10m\n");
    std::fs::write(&path, text).unwrap();
    let (mut d, ports) = start(&path);
    let mut held = connect(&ports).await.expect("a session");
    held.query_drop("SELECT 1").await.unwrap();

    let signalled = Instant::now();
    d.signal(libc::SIGTERM);
    d.wait_for_line("signal received");
    assert_eq!(get(&ports, "/readyz").0, 503);
    d.signal(libc::SIGTERM);
    d.wait_for_line("rest of shutdown_delay skipped");
    let status = wait_exit(&mut d, Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(60),
        "far sooner than the 10 minute delay: {:?}",
        signalled.elapsed()
    );
    assert!(held.query_drop("SELECT 1").await.is_err());
}

/// Waits (bounded) until `/backends` lists exactly `want`.
fn wait_for_backends(ports: &Ports, want: &[(String, u64)]) {
    wait_until(&format!("/backends to list {want:?}"), || {
        let mut got = backends(ports);
        got.sort();
        got == want
    });
}

fn named(db: &MariaDb, weight: u64) -> (String, u64) {
    (format!("port{}", db.port), weight)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_config_file_is_reloaded_without_sighup_and_an_invalid_one_is_ignored() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mysql-lb.yaml");
    std::fs::write(&path, config_text(&[(a, 1)], "")).unwrap();
    let (mut d, ports) = start(&path);
    d.wait_for_line("watching the config file");
    assert_eq!(backends(&ports), vec![named(a, 1)]);

    // Rewritten in place (not renamed over): a weight changes and a backend is added.
    std::fs::write(&path, config_text(&[(a, 3), (b, 1)], "")).unwrap();
    let mut want = vec![named(a, 3), named(b, 1)];
    want.sort();
    wait_for_backends(&ports, &want);
    d.wait_for_line("config file changed: reloading the configuration");
    d.wait_for_line("configuration reloaded");

    // An invalid edit: logged, and the running configuration stays.
    std::fs::write(&path, "backends: [\"127.0.0.1:1\"]\nno_such_key: 1\n").unwrap();
    let line = d.wait_for_line("reload refused");
    assert!(line.contains("no_such_key"), "{line}");
    let mut got = backends(&ports);
    got.sort();
    assert_eq!(got, want, "still the last valid configuration");
    let (mut conn, _) = common::proxy::connect_at(&ports.mysql()).await;
    conn.query_drop("SELECT 1").await.expect("still serving");
    conn.disconnect().await.unwrap();

    // Fixed again: picked up again.
    std::fs::write(&path, config_text(&[(b, 2)], "")).unwrap();
    wait_for_backends(&ports, &[named(b, 2)]);
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_style_symlink_swap_is_picked_up() {
    let pair = shared_pair();
    let (a, b) = (&pair[0], &pair[1]);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // As the kubelet lays a ConfigMap volume out: config.yaml -> ..data/config.yaml,
    // ..data -> a timestamped directory, swapped atomically by renaming a new link over it.
    let version = |name: &str, text: String| {
        std::fs::create_dir(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("config.yaml"), text).unwrap();
    };
    version("..2026_12_02_00_00_00.1", config_text(&[(a, 1)], ""));
    std::os::unix::fs::symlink("..2026_12_02_00_00_00.1", root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/config.yaml", root.join("config.yaml")).unwrap();
    let (mut d, ports) = start(&root.join("config.yaml"));
    d.wait_for_line("watching the config file");
    assert_eq!(backends(&ports), vec![named(a, 1)]);

    version(
        "..2026_12_02_00_01_00.2",
        config_text(&[(a, 1), (b, 4)], ""),
    );
    std::os::unix::fs::symlink("..2026_12_02_00_01_00.2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_12_02_00_00_00.1")).unwrap();
    let mut want = vec![named(a, 1), named(b, 4)];
    want.sort();
    wait_for_backends(&ports, &want);
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}
