//! [`TlsSocket`] against tokio-rustls over an in-memory pipe, TLS 1.2 and 1.3, either side: bulk
//! data in records of mixed sizes (more plaintext in one read than rustls holds), clean close,
//! truncation, a forged record, key updates.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::net::tls::tests::certs;

const TLS12: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

struct Configs {
    _dir: tempfile::TempDir,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

fn configs(versions: &[&'static SupportedProtocolVersion]) -> Configs {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = certs::Certs::generate(dir.path());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&c.server.cert)
        .expect("server cert")
        .map(|c| c.expect("a certificate"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&c.server.key).expect("server key");
    let server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&c.ca).expect("ca") {
        roots.add(ca.expect("a CA certificate")).expect("usable CA");
    }
    let client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Configs {
        _dir: dir,
        server: Arc::new(server),
        client: Arc::new(client),
    }
}

type Peer = tokio_rustls::TlsStream<DuplexStream>;

/// A handshake over a pipe of `pipe` bytes; the side named by `leg_is_server` becomes a
/// [`TlsSocket`], the other stays a tokio-rustls stream.
async fn pair(
    versions: &[&'static SupportedProtocolVersion],
    leg_is_server: bool,
    pipe: usize,
) -> (TlsSocket<DuplexStream>, Peer) {
    let c = configs(versions);
    let (client_io, server_io) = tokio::io::duplex(pipe);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&c.server));
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&c.client));
    let name = ServerName::try_from("localhost").expect("a name");
    let (server, client) = tokio::join!(
        acceptor.accept(server_io),
        connector.connect(name, client_io)
    );
    let server = TlsStream::Server(server.expect("server handshake"));
    let client = TlsStream::Client(client.expect("client handshake"));
    if leg_is_server {
        (TlsSocket::new(server), client)
    } else {
        (TlsSocket::new(client), server)
    }
}

fn each_case() -> [(&'static [&'static SupportedProtocolVersion], bool); 4] {
    [(TLS12, true), (TLS12, false), (TLS13, true), (TLS13, false)]
}

/// Bytes that show where they sit in the stream.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Writes `data` as records of the sizes in `sizes` (cycled), one write each.
async fn write_in_records(peer: &mut (impl AsyncWriteExt + Unpin), data: &[u8], sizes: &[usize]) {
    let mut at = 0;
    for size in sizes.iter().cycle() {
        if at == data.len() {
            break;
        }
        let end = (at + size).min(data.len());
        peer.write_all(&data[at..end]).await.expect("peer write");
        at = end;
    }
    peer.flush().await.expect("peer flush");
}

#[tokio::test]
async fn bulk_both_ways_in_records_of_mixed_sizes() {
    for (versions, leg_is_server) in each_case() {
        let (mut leg, mut peer) = pair(versions, leg_is_server, 256 * 1024).await;
        let down = pattern(600_000, 1);
        let up = pattern(400_000, 2);
        // A full record then small ones: one 16 KiB read holds more plaintext than rustls takes.
        let sizes = [16 * 1024, 10, 7, 300, 16 * 1024, 1, 5000];
        let (down2, up2) = (down.clone(), up.clone());
        let peer_side = async move {
            write_in_records(&mut peer, &down2, &sizes).await;
            let mut got = vec![0u8; up2.len()];
            peer.read_exact(&mut got).await.expect("peer read");
            assert!(got == up2, "what the leg wrote arrives intact");
            peer.shutdown().await.expect("peer shutdown");
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest)
                .await
                .expect("peer sees a clean end");
            assert!(rest.is_empty());
        };
        let leg_side = async {
            // Let the pipe fill first, so reads find many records at once.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let mut got = vec![0u8; down.len()];
            leg.read_exact(&mut got).await.expect("leg read");
            assert!(got == down, "what the peer wrote arrives intact");
            write_in_records(&mut leg, &up, &[8192, 3, 65536]).await;
            let mut rest = Vec::new();
            leg.read_to_end(&mut rest)
                .await
                .expect("leg sees a clean end");
            assert!(rest.is_empty());
            leg.shutdown().await.expect("leg shutdown");
        };
        tokio::join!(peer_side, leg_side);
    }
}

#[tokio::test]
async fn close_notify_is_a_clean_end_after_the_data() {
    for (versions, leg_is_server) in each_case() {
        let (mut leg, mut peer) = pair(versions, leg_is_server, 64 * 1024).await;
        peer.write_all(b"last words").await.expect("write");
        peer.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        leg.read_to_end(&mut got).await.expect("a clean end");
        assert_eq!(got, b"last words");
        // And it stays ended.
        let mut more = [0u8; 8];
        assert_eq!(leg.read(&mut more).await.expect("still clean"), 0);
    }
}

#[tokio::test]
async fn a_socket_ending_without_close_notify_is_a_truncation() {
    for (versions, leg_is_server) in each_case() {
        let (mut leg, mut peer) = pair(versions, leg_is_server, 64 * 1024).await;
        peer.write_all(b"cut short").await.expect("write");
        peer.flush().await.expect("flush");
        // The socket closes under the peer's TLS: no close_notify.
        let (raw, _) = peer.get_mut();
        raw.shutdown().await.expect("raw shutdown");
        let mut buf = [0u8; 64];
        let n = leg.read(&mut buf).await.expect("the data first");
        assert_eq!(&buf[..n], b"cut short");
        let err = leg.read(&mut buf).await.expect_err("then the truncation");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }
}

#[tokio::test]
async fn a_forged_record_is_invalid_data_and_the_peer_gets_an_alert() {
    for (versions, leg_is_server) in each_case() {
        let (mut leg, mut peer) = pair(versions, leg_is_server, 64 * 1024).await;
        // Application data that no key encrypted.
        let mut forged = vec![0x17, 0x03, 0x03, 0x00, 0x40];
        forged.extend_from_slice(&[0x5a; 0x40]);
        let (raw, _) = peer.get_mut();
        raw.write_all(&forged).await.expect("raw write");
        let mut buf = [0u8; 64];
        let err = leg.read(&mut buf).await.expect_err("a bad record");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let err = peer.read(&mut buf).await.expect_err("the alert");
        assert!(err.to_string().contains("BadRecordMac"), "{err}");
    }
}

#[tokio::test]
async fn key_updates_either_way_keep_the_data_flowing() {
    let (mut leg, mut peer) = pair(TLS13, true, 64 * 1024).await;
    for round in 0..3u8 {
        let TlsStream::Client(client) = &mut peer else {
            panic!("the peer is the client")
        };
        client
            .get_mut()
            .1
            .refresh_traffic_keys()
            .expect("peer key update");
        let sent = pattern(20_000, round);
        peer.write_all(&sent).await.expect("write");
        peer.flush().await.expect("flush");
        let mut got = vec![0u8; sent.len()];
        leg.read_exact(&mut got)
            .await
            .expect("read after the key update");
        assert!(got == sent);
        // The leg answers the update with its own before its next record.
        leg.write_all(&sent).await.expect("leg write");
        leg.flush().await.expect("leg flush");
        let mut back = vec![0u8; sent.len()];
        peer.read_exact(&mut back).await.expect("peer read");
        assert!(back == sent);
    }
    leg.conn.refresh_traffic_keys().expect("leg key update");
    leg.write_all(b"after our update").await.expect("write");
    leg.flush().await.expect("flush");
    let mut got = [0u8; 16];
    peer.read_exact(&mut got).await.expect("peer read");
    assert_eq!(&got, b"after our update");
}

#[tokio::test]
async fn a_write_waits_for_a_full_pipe_and_completes() {
    for (versions, leg_is_server) in each_case() {
        // A pipe far smaller than what is written: writes must wait and resume.
        let (mut leg, mut peer) = pair(versions, leg_is_server, 4096).await;
        let data = pattern(300_000, 9);
        let expect = data.clone();
        let reader = async move {
            let mut got = vec![0u8; expect.len()];
            peer.read_exact(&mut got).await.expect("peer read");
            assert!(got == expect);
        };
        let writer = async {
            leg.write_all(&data).await.expect("leg write");
            leg.flush().await.expect("leg flush");
        };
        tokio::join!(reader, writer);
    }
}
