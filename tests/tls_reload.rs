//! Certificate renewal by SIGHUP, with the real binary, a real MariaDB behind it and real TLS
//! clients: the usual renewal overwrites the files at the paths the configuration names, so a
//! reload must read them again even though the configuration itself did not change. New
//! sessions get the new certificate, running ones keep their TLS session, a file that does not
//! load is refused (old certificate kept), and the expiry gauge always shows what is served.
//!
//! Each certificate is told apart by its DER, as the client received it in the handshake, and
//! by its notAfter, as the gauge reports it; every certificate has its own expiry date.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::certs::{CertPair, Certs};
use common::daemon::Daemon;
use common::mariadb::{shared_pair, BENCH_PASS, BENCH_USER};
use common::proxy::http_get;
use common::rawclient::RawClient;
use common::tls_server::{client_config, read_certs};

const GAUGE: &str = "mysql_lb_tls_certificate_expiry_timestamp_seconds{";

/// The served files: the paths in the configuration, overwritten by each "renewal".
struct Served<'a> {
    cert: &'a Path,
    key: &'a Path,
}

impl Served<'_> {
    fn install(&self, pair: &CertPair) {
        std::fs::copy(&pair.cert, self.cert).expect("copy the certificate into place");
        std::fs::copy(&pair.key, self.key).expect("copy the key into place");
    }
}

/// A new TLS session to the proxy: a fresh client configuration each time (no ticket from an
/// earlier session to resume), verifying the proxy against the test CA.
async fn tls_client(addr: &str, certs: &Certs) -> RawClient {
    RawClient::connect_tls(
        addr,
        client_config(&certs.ca, None),
        "127.0.0.1",
        BENCH_USER,
        BENCH_PASS,
        None,
        0,
        0,
    )
    .await
    .unwrap_or_else(|e| panic!("TLS login through the proxy at {addr}: {e}"))
}

/// The DER of the certificate in `pair`'s PEM file.
fn der(pair: &CertPair) -> Vec<u8> {
    read_certs(&pair.cert)
        .first()
        .expect("a certificate in the file")
        .to_vec()
}

/// Asserts `client` was served `expected` (named `what` in the failure).
fn assert_served(client: &RawClient, expected: &CertPair, what: &str) {
    let tls = client.tls.as_ref().expect("a TLS session");
    assert!(
        tls.peer_cert == der(expected),
        "{what}: the client was served another certificate than {} (notAfter {})",
        expected.cert.display(),
        expected.not_after
    );
}

/// The client leg's expiry gauge, or None while the admin endpoint does not answer.
fn client_expiry_gauge(admin: SocketAddr) -> Option<i64> {
    let (status, body) = http_get(admin, "/metrics").ok()?;
    assert_eq!(status, 200, "/metrics: {body}");
    let values: Vec<i64> = body
        .lines()
        .filter(|l| {
            l.starts_with(GAUGE) && l.contains("leg=\"client\"") && l.contains("backend=\"\"")
        })
        .map(|l| {
            let v = l.rsplit(' ').next().unwrap_or_default();
            v.parse::<f64>()
                .unwrap_or_else(|e| panic!("gauge value {v:?}: {e}")) as i64
        })
        .collect();
    assert_eq!(values.len(), 1, "one client-leg expiry series:\n{body}");
    Some(values[0])
}

async fn assert_runs_queries(client: &mut RawClient, what: &str) {
    let rows = client
        .query_text("SELECT 'still here'")
        .await
        .unwrap_or_else(|e| panic!("{what}: its TLS session broke: {e}"));
    assert_eq!(rows, vec![vec![Some("still here".to_string())]], "{what}");
}

/// Both listeners on port 0: the test learns the bound ports from the daemon's log.
fn write_config(path: &Path, served: &Served<'_>, backend: &str) {
    let yaml = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin_address: \"127.0.0.1:0\"\n\
         log: {{ level: info }}\ntls:\n  cert: \"{}\"\n  key: \"{}\"\n\
         backends:\n  - \"{backend}\"\n",
        served.cert.display(),
        served.key.display()
    );
    std::fs::write(path, yaml).expect("write the configuration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_serves_renewed_certificate_files_and_keeps_old_on_a_bad_one() {
    let db = &shared_pair()[0];
    let dir = tempfile::tempdir().unwrap();
    let certs = Certs::generate(dir.path());
    let a = certs.fresh_server_cert("cert-a", (2040, 1, 1));
    let b = certs.fresh_server_cert("cert-b", (2041, 2, 2));
    let c = certs.fresh_server_cert("cert-c", (2042, 3, 3));
    assert!(a.not_after < b.not_after && b.not_after < c.not_after);
    let (cert_path, key_path) = (
        dir.path().join("served.pem"),
        dir.path().join("served-key.pem"),
    );
    let served = Served {
        cert: &cert_path,
        key: &key_path,
    };
    served.install(&a);
    let config = dir.path().join("mysql-lb.yaml");
    write_config(&config, &served, &db.tcp_addr());
    let mut d = Daemon::start(&["--config".into(), config.display().to_string()], None);
    let (addr, admin) = (d.proxy_addr().to_string(), d.admin_addr());

    // 1. Certificate A.
    let mut on_a = tls_client(&addr, &certs).await;
    assert_served(&on_a, &a, "at start");
    common::wait_until("the admin endpoint", || {
        client_expiry_gauge(admin).is_some()
    });
    assert_eq!(
        client_expiry_gauge(admin),
        Some(a.not_after),
        "gauge at start"
    );
    assert_runs_queries(&mut on_a, "the session on A").await;

    // 2. B overwrites A at the same paths; the configuration file is unchanged.
    served.install(&b);
    d.signal(libc::SIGHUP);
    d.wait_for_new_line("configuration reloaded");
    let mut on_b = tls_client(&addr, &certs).await;
    assert_served(&on_b, &b, "after the renewal to B");
    assert_eq!(
        client_expiry_gauge(admin),
        Some(b.not_after),
        "gauge after B"
    );
    assert_runs_queries(&mut on_a, "the session on A after the reload").await;
    assert_runs_queries(&mut on_b, "the session on B").await;

    // 3. A broken certificate file: refused, B stays.
    std::fs::write(served.cert, "this is not a certificate\n").unwrap();
    d.signal(libc::SIGHUP);
    let line = d.wait_for_new_line("reload refused");
    let file = served.cert.display().to_string();
    assert!(
        line.contains("tls.cert") && line.contains(&file),
        "the refusal names the key and the file {file}: {line}"
    );
    let mut still_b = tls_client(&addr, &certs).await;
    assert_served(&still_b, &b, "after the refused reload");
    assert_eq!(
        client_expiry_gauge(admin),
        Some(b.not_after),
        "gauge after the refused reload"
    );
    assert_runs_queries(&mut on_a, "the session on A after the refusal").await;
    assert_runs_queries(&mut on_b, "the session on B after the refusal").await;
    assert_runs_queries(&mut still_b, "the session on B made after the refusal").await;

    // 4. The file fixed with C.
    served.install(&c);
    d.signal(libc::SIGHUP);
    d.wait_for_new_line("configuration reloaded");
    let mut on_c = tls_client(&addr, &certs).await;
    assert_served(&on_c, &c, "after the fix to C");
    assert_eq!(
        client_expiry_gauge(admin),
        Some(c.not_after),
        "gauge after C"
    );
    assert_runs_queries(&mut on_c, "the session on C").await;
    assert_runs_queries(&mut on_a, "the session on A at the end").await;
    assert_runs_queries(&mut on_b, "the session on B at the end").await;

    let status = d.stop();
    assert!(status.success(), "{status:?}");
}
