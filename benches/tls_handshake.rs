//! What a TLS handshake costs mysql-lb, full and resumed, on the legs `TlsMaterial` builds.
//!
//! Both ends run in one thread over an in-memory pipe, and the time reported is that thread's
//! CPU time (the machine is shared: wall time would count other processes), so one iteration
//! is the CPU of both sides of one handshake, with no network in it; the proxy pays one side
//! per leg.
//! The server is the client leg's acceptor (ECDSA P-256 certificate from
//! `tests/common/certs.rs`). `resumed`: the `verify_identity` backend leg's connector, shared as
//! the proxy shares it, so after the first iteration every handshake resumes from a TLS 1.3
//! ticket. `full`: a client with the same checks and resumption off. Each iteration also moves
//! one byte server to client, as the MySQL greeting would, which is what delivers the tickets.
//!
//! `cargo bench --bench tls_handshake` measures; `cargo test --benches` runs each case once.

#[path = "../tests/common/certs.rs"]
mod certs;

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rustls::client::Resumption;
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use mysql_lb::config::{
    BackendAddr, BackendConfig, BackendKind, BackendTls, BackendTlsMode, ClientTls, Config,
    TlsVersion,
};
use mysql_lb::net::tls::TlsMaterial;

struct TlsEnds {
    acceptor: TlsAcceptor,
    resuming: TlsConnector,
    full: TlsConnector,
    _dir: tempfile::TempDir,
}

fn tls_ends() -> TlsEnds {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = certs::Certs::generate(dir.path());
    let backend = BackendConfig {
        name: "db".to_owned(),
        address: BackendAddr::Tcp {
            host: "localhost".to_owned(),
            port: 3306,
        },
        weight: 1,
        kind: BackendKind::Rw,
        tls: BackendTls {
            mode: BackendTlsMode::VerifyIdentity,
            ca: Some(c.ca.clone()),
            ..BackendTls::default()
        },
        compression: false,
        proxy_protocol: None,
        pool: "default".into(),
        role: None,
    };
    let config = Config {
        tls: Some(ClientTls {
            cert: c.server.cert.clone(),
            key: c.server.key.clone(),
            ca: None,
            verify_client: false,
            min_version: TlsVersion::V1_2,
            require: false,
            cipher_suites: mysql_lb::config::default_cipher_suites(),
        }),
        backends: vec![backend],
        ..Config::default()
    };
    let material = TlsMaterial::load(&config).expect("load the material");
    let resuming = material.backend("db").unwrap().connector.clone().unwrap();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(&c.ca).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut full = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    full.resumption = Resumption::disabled();
    TlsEnds {
        acceptor: material.client.unwrap().acceptor,
        resuming,
        full: TlsConnector::from(Arc::new(full)),
        _dir: dir,
    }
}

async fn handshake(acceptor: &TlsAcceptor, connector: &TlsConnector) -> Option<HandshakeKind> {
    let (client_io, server_io) = tokio::io::duplex(16 * 1024);
    let server = async {
        let mut tls = acceptor.accept(server_io).await.expect("accept");
        tls.write_all(b"g").await.expect("write");
        tls.flush().await.expect("flush");
        tls
    };
    let client = async {
        let name = "localhost".try_into().unwrap();
        let mut tls = connector.connect(name, client_io).await.expect("connect");
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await.expect("read");
        tls.get_ref().1.handshake_kind()
    };
    let (_server, kind) = tokio::join!(server, client);
    kind
}

/// This thread's CPU time: the machine is shared, and wall time would count other processes.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `iters` handshakes with `connector`, each checked to be of `kind`; their CPU time.
fn run(
    rt: &tokio::runtime::Runtime,
    ends: &TlsEnds,
    connector: &TlsConnector,
    kind: HandshakeKind,
    iters: u64,
) -> Duration {
    let start = thread_cpu();
    for _ in 0..iters {
        let seen = rt.block_on(handshake(&ends.acceptor, connector));
        assert_eq!(seen, Some(kind));
    }
    thread_cpu() - start
}

fn bench(c: &mut Criterion) {
    let ends = tls_ends();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    // The first handshake of the shared connector is full; every later one resumes.
    rt.block_on(handshake(&ends.acceptor, &ends.resuming));
    let mut group = c.benchmark_group("tls_handshake_cpu");
    group.bench_function("full", |b| {
        b.iter_custom(|iters| run(&rt, &ends, &ends.full, HandshakeKind::Full, iters))
    });
    group.bench_function("resumed", |b| {
        b.iter_custom(|iters| run(&rt, &ends, &ends.resuming, HandshakeKind::Resumed, iters))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
