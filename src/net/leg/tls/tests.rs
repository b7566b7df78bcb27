//! [`TlsSocket`] against rustls over an in-memory pipe, TLS 1.2 and 1.3, either side (the server
//! side is the record layer of our own, the client side rustls' connection): bulk data in records
//! of mixed sizes (more plaintext in one read than rustls holds), clean close, truncation, a
//! forged record, key updates; for the server side also every cipher suite, data pipelined
//! after the client's Finished, records split across reads and many in one read, a flipped
//! ciphertext byte, an oversize record, a 16 MiB payload, the KeyUpdates Java's JSSE sends,
//! hostile records sealed with the client's own keys (each answered with the RFC's alert), and
//! the key limits, lowered so that a test reaches them.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, RootCertStore, ServerConfig, SupportedCipherSuite,
    SupportedProtocolVersion,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;

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
    configs_for(versions, None)
}

/// Configurations offering `versions`, and only `suite` when one is named.
fn configs_for(
    versions: &[&'static SupportedProtocolVersion],
    suite: Option<SupportedCipherSuite>,
) -> Configs {
    let dir = tempfile::tempdir().expect("temp dir");
    let c = certs::Certs::generate(dir.path());
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(suite) = suite {
        provider.cipher_suites = vec![suite];
    }
    let provider = Arc::new(provider);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&c.server.cert)
        .expect("server cert")
        .map(|c| c.expect("a certificate"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&c.server.key).expect("server key");
    let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
    server.enable_secret_extraction = true;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&c.ca).expect("ca") {
        roots.add(ca.expect("a CA certificate")).expect("usable CA");
    }
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Tests that forge the client's records take its keys.
    client.enable_secret_extraction = true;
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
    pair_with(&configs(versions), leg_is_server, pipe).await
}

async fn pair_with(
    c: &Configs,
    leg_is_server: bool,
    pipe: usize,
) -> (TlsSocket<DuplexStream>, Peer) {
    let (client_io, server_io) = tokio::io::duplex(pipe);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&c.server));
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&c.client));
    let name = ServerName::try_from("localhost").expect("a name");
    if leg_is_server {
        let (server, client) = tokio::join!(
            TlsSocket::accept(Arc::clone(&c.server), server_io),
            connector.connect(name, client_io)
        );
        let client = TlsStream::Client(client.expect("client handshake"));
        (server.expect("server handshake"), client)
    } else {
        let (server, client) = tokio::join!(
            acceptor.accept(server_io),
            connector.connect(name, client_io)
        );
        let server = TlsStream::Server(server.expect("server handshake"));
        let client = TlsStream::Client(client.expect("client handshake"));
        (TlsSocket::new(client), server)
    }
}

fn each_case() -> [(&'static [&'static SupportedProtocolVersion], bool); 4] {
    [(TLS12, true), (TLS12, false), (TLS13, true), (TLS13, false)]
}

/// The client peer queues `n` KeyUpdates that ask for the leg's, each in a record of its own
/// (sent with its next write or flush).
fn peer_key_updates<S>(peer: &mut TlsStream<S>, n: usize) {
    let TlsStream::Client(client) = peer else {
        panic!("the peer is the client")
    };
    for _ in 0..n {
        client
            .get_mut()
            .1
            .refresh_traffic_keys()
            .expect("peer key update");
    }
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
        peer_key_updates(&mut peer, 1);
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
    leg.refresh_traffic_keys().expect("leg key update");
    leg.write_all(b"after our update").await.expect("write");
    leg.flush().await.expect("flush");
    let mut got = [0u8; 16];
    peer.read_exact(&mut got).await.expect("peer read");
    assert_eq!(&got, b"after our update");
}

/// A client that asks for key updates again and again and reads nothing gets one update, with
/// our next record: nothing piles up in the leg (each answer sent at once would fill the pipe
/// and then the leg's buffer, without bound).
#[tokio::test]
async fn key_update_requests_from_a_silent_reader_queue_nothing() {
    let (mut leg, mut peer) = pair(TLS13, true, 2048).await;
    let TlsStream::Client(client) = &mut peer else {
        panic!("the peer is the client")
    };
    let writer = async {
        for _ in 0..400 {
            client
                .get_mut()
                .1
                .refresh_traffic_keys()
                .expect("peer key update");
            client.write_all(b"q").await.expect("write");
        }
        client.flush().await.expect("flush");
    };
    let mut got = vec![0u8; 400];
    let (_, read) = tokio::join!(writer, leg.read_exact(&mut got));
    read.expect("leg read");
    assert!(got.iter().all(|&b| b == b'q'));
    assert_eq!(leg.queued(), 0, "nothing sealed while the leg sent nothing");
    leg.write_all(b"answer").await.expect("leg write");
    leg.flush().await.expect("leg flush");
    let mut back = [0u8; 6];
    peer.read_exact(&mut back).await.expect("peer read");
    assert_eq!(&back, b"answer");
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

/// The suites ring offers that the test certificate (ECDSA) can serve.
fn suites() -> Vec<SupportedCipherSuite> {
    rustls::crypto::ring::default_provider()
        .cipher_suites
        .into_iter()
        .filter(|s| {
            let name = s.suite().as_str().unwrap_or_default();
            name.starts_with("TLS13_") || name.contains("ECDSA")
        })
        .collect()
}

fn versions_of(suite: SupportedCipherSuite) -> &'static [&'static SupportedProtocolVersion] {
    match suite {
        SupportedCipherSuite::Tls13(_) => TLS13,
        SupportedCipherSuite::Tls12(_) => TLS12,
    }
}

#[tokio::test]
async fn every_suite_carries_data_both_ways_and_closes_cleanly() {
    let all = suites();
    assert_eq!(all.len(), 6, "three suites for each version");
    for suite in all {
        let name = suite.suite().as_str().unwrap_or_default();
        let c = configs_for(versions_of(suite), Some(suite));
        let (mut leg, mut peer) = pair_with(&c, true, 64 * 1024).await;
        assert!(leg.description().ends_with(name), "{}", leg.description());
        let down = pattern(100_000, 3);
        let up = pattern(70_000, 4);
        let (down2, up2) = (down.clone(), up.clone());
        let peer_side = async move {
            write_in_records(&mut peer, &down2, &[1, 16 * 1024, 200, 9000]).await;
            let mut got = vec![0u8; up2.len()];
            peer.read_exact(&mut got).await.expect("peer read");
            assert!(got == up2, "{name}: what the leg wrote arrives intact");
            peer.shutdown().await.expect("peer shutdown");
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest).await.expect("a clean end");
            assert!(rest.is_empty());
        };
        let leg_side = async {
            let mut got = vec![0u8; down.len()];
            leg.read_exact(&mut got).await.expect("leg read");
            assert!(got == down, "{name}: what the peer wrote arrives intact");
            write_in_records(&mut leg, &up, &[5, 20_000, 300]).await;
            let mut rest = Vec::new();
            leg.read_to_end(&mut rest).await.expect("a clean end");
            assert!(rest.is_empty());
            leg.shutdown().await.expect("leg shutdown");
        };
        tokio::join!(peer_side, leg_side);
    }
}

#[tokio::test]
async fn sixteen_mib_each_way() {
    for versions in [TLS12, TLS13] {
        let (mut leg, peer) = pair(versions, true, 256 * 1024).await;
        let down = pattern(16 << 20, 5);
        let up = pattern(16 << 20, 6);
        let (down2, up2) = (down.clone(), up.clone());
        let peer_side = async move {
            let (mut r, mut w) = tokio::io::split(peer);
            let write = async move {
                w.write_all(&down2).await.expect("peer write");
                w.flush().await.expect("peer flush");
            };
            let read = async move {
                let mut got = vec![0u8; up2.len()];
                r.read_exact(&mut got).await.expect("peer read");
                assert!(got == up2);
            };
            tokio::join!(write, read);
        };
        let leg_side = async move {
            let (mut r, mut w) = tokio::io::split(&mut leg);
            let write = async move {
                w.write_all(&up).await.expect("leg write");
                w.flush().await.expect("leg flush");
            };
            let read = async move {
                let mut got = vec![0u8; down.len()];
                r.read_exact(&mut got).await.expect("leg read");
                assert!(got == down);
            };
            tokio::join!(write, read);
        };
        tokio::join!(peer_side, leg_side);
    }
}

/// A rustls client driven by hand, to put exactly the bytes a test wants on the wire.
struct RawClient {
    conn: ClientConnection,
    io: DuplexStream,
}

impl RawClient {
    /// Handshakes with a [`TlsSocket::accept`] on the other end of a pipe, and sends `pipelined`
    /// in the same write as the client's Finished.
    async fn connect(
        versions: &[&'static SupportedProtocolVersion],
        pipelined: &[u8],
    ) -> (TlsSocket<DuplexStream>, RawClient, Configs) {
        Self::connect_then(versions, |conn| {
            std::io::Write::write_all(&mut conn.writer(), pipelined).expect("plaintext");
        })
        .await
    }

    /// Handshakes with a [`TlsSocket::accept`] on the other end of a pipe; what `after` makes
    /// the client send goes in the same write as its Finished.
    async fn connect_then(
        versions: &[&'static SupportedProtocolVersion],
        after: impl FnOnce(&mut ClientConnection),
    ) -> (TlsSocket<DuplexStream>, RawClient, Configs) {
        let c = configs(versions);
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let name = ServerName::try_from("localhost").expect("a name");
        let conn = ClientConnection::new(Arc::clone(&c.client), name).expect("client");
        let mut client = RawClient {
            conn,
            io: client_io,
        };
        let drive = async {
            while client.conn.is_handshaking() {
                client.flush().await;
                client.receive().await;
            }
            after(&mut client.conn);
            client.flush().await;
        };
        let (leg, ()) = tokio::join!(TlsSocket::accept(Arc::clone(&c.server), server_io), drive);
        (leg.expect("server handshake"), client, c)
    }

    /// Records carrying `data`, as rustls seals them (one per 16 KiB).
    fn seal(&mut self, data: &[u8]) -> Vec<u8> {
        std::io::Write::write_all(&mut self.conn.writer(), data).expect("plaintext");
        let mut records = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut records).expect("records");
        }
        records
    }

    async fn flush(&mut self) {
        let mut out = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut out).expect("records");
        }
        self.io.write_all(&out).await.expect("raw write");
    }

    /// One read from the pipe into rustls; the error rustls finds in it, if any.
    async fn receive(&mut self) -> Option<rustls::Error> {
        let mut buf = vec![0u8; 64 * 1024];
        let n = self.io.read(&mut buf).await.expect("raw read");
        let mut slice = &buf[..n];
        while !slice.is_empty() {
            self.conn.read_tls(&mut slice).expect("read_tls");
            if let Err(e) = self.conn.process_new_packets() {
                return Some(e);
            }
        }
        None
    }
}

#[tokio::test]
async fn data_pipelined_after_the_clients_finished_is_not_lost() {
    for versions in [TLS12, TLS13] {
        let first = pattern(30_000, 7);
        let (mut leg, mut client, _c) = RawClient::connect(versions, &first).await;
        let mut got = vec![0u8; first.len()];
        leg.read_exact(&mut got).await.expect("the pipelined data");
        assert!(got == first);
        leg.write_all(b"answer").await.expect("write");
        leg.flush().await.expect("flush");
        let mut answer = Vec::new();
        while answer.len() < 6 {
            assert!(client.receive().await.is_none());
            let mut buf = [0u8; 64];
            if let Ok(n) = std::io::Read::read(&mut client.conn.reader(), &mut buf) {
                answer.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(answer, b"answer");
    }
}

#[tokio::test]
async fn records_split_across_reads_and_many_in_one_read() {
    for versions in [TLS12, TLS13] {
        let (mut leg, mut client, _c) = RawClient::connect(versions, b"").await;
        let mut sent = Vec::new();
        let mut wire = Vec::new();
        for i in 0..300usize {
            let chunk = pattern(1 + i * 37 % 900, i as u8);
            wire.extend_from_slice(&client.seal(&chunk));
            sent.extend_from_slice(&chunk);
        }
        let big = pattern(40_000, 8);
        let split = client.seal(&big);
        sent.extend_from_slice(&big);
        let write = async {
            // Hundreds of records in one write, then records dribbled a few bytes at a time.
            client.io.write_all(&wire).await.expect("write");
            for piece in split.chunks(7) {
                client.io.write_all(piece).await.expect("write");
                client.io.flush().await.expect("flush");
                tokio::task::yield_now().await;
            }
        };
        let read = async {
            let mut got = vec![0u8; sent.len()];
            leg.read_exact(&mut got).await.expect("leg read");
            got
        };
        let ((), got) = tokio::join!(write, read);
        assert!(got == sent);
    }
}

#[tokio::test]
async fn a_flipped_ciphertext_byte_is_invalid_data_and_the_peer_gets_an_alert() {
    for versions in [TLS12, TLS13] {
        let (mut leg, mut client, _c) = RawClient::connect(versions, b"").await;
        let good = client.seal(b"fine");
        let mut bad = client.seal(b"tampered with");
        bad[12] ^= 0x40;
        client.io.write_all(&good).await.expect("write");
        client.io.write_all(&bad).await.expect("write");
        let mut buf = [0u8; 64];
        let n = leg.read(&mut buf).await.expect("the good record");
        assert_eq!(&buf[..n], b"fine");
        let err = leg.read(&mut buf).await.expect_err("the bad one");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let again = leg.read(&mut buf).await.expect_err("and it stays failed");
        assert_eq!(again.kind(), io::ErrorKind::InvalidData);
        let alert = client.receive().await.expect("an alert");
        assert!(alert.to_string().contains("BadRecordMac"), "{alert}");
    }
}

#[tokio::test]
async fn an_oversize_record_is_invalid_data() {
    for versions in [TLS12, TLS13] {
        let (mut leg, mut client, _c) = RawClient::connect(versions, b"").await;
        // 2^14 + 257 bytes of ciphertext: one more than any record may carry. The length
        // alone is refused, before the body arrives.
        client
            .io
            .write_all(&[0x17, 0x03, 0x03, 0x41, 0x01, 0, 0, 0])
            .await
            .expect("write");
        let mut buf = [0u8; 64];
        let err = leg.read(&mut buf).await.expect_err("too large");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        let alert = client.receive().await.expect("an alert");
        assert!(alert.to_string().contains("RecordOverflow"), "{alert}");
    }
}

#[tokio::test]
async fn a_record_cut_short_is_a_truncation() {
    for versions in [TLS12, TLS13] {
        let (mut leg, mut client, _c) = RawClient::connect(versions, b"").await;
        let records = client.seal(b"never whole");
        client
            .io
            .write_all(&records[..records.len() - 3])
            .await
            .expect("write");
        client.io.shutdown().await.expect("shutdown");
        let mut buf = [0u8; 64];
        let err = leg.read(&mut buf).await.expect_err("truncated");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }
}

#[tokio::test]
async fn garbage_after_the_handshake_never_panics() {
    // Headers of every type and odd lengths, with bodies that no key sealed.
    for versions in [TLS12, TLS13] {
        for (typ, len) in [
            (20u8, 1usize),
            (21, 2),
            (22, 4),
            (23, 0),
            (23, 16),
            (24, 30),
            (0, 5),
        ] {
            let (mut leg, mut client, _c) = RawClient::connect(versions, b"").await;
            let mut record = vec![typ, 3, 3, (len >> 8) as u8, len as u8];
            record.extend(std::iter::repeat_n(0x11, len));
            client.io.write_all(&record).await.expect("write");
            let mut buf = [0u8; 64];
            let err = leg.read(&mut buf).await.expect_err("refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Arbitrary bytes where records belong, after a real handshake, either version: the leg
    /// ends with an error or a clean end, never a panic, and never hands out bytes no key
    /// sealed.
    #[test]
    fn arbitrary_bytes_after_the_handshake_are_refused_without_a_panic(
        tls13 in proptest::bool::ANY,
        garbage in proptest::collection::vec(proptest::num::u8::ANY, 1..600),
        header in proptest::option::of((20u8..25, 0u16..0x4200)),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let versions = if tls13 { TLS13 } else { TLS12 };
            let (mut leg, mut client, _c) = RawClient::connect(versions, b"").await;
            let mut wire = Vec::new();
            if let Some((typ, len)) = header {
                wire.extend_from_slice(&[typ, 3, 3]);
                wire.extend_from_slice(&len.to_be_bytes());
            }
            wire.extend_from_slice(&garbage);
            client.io.write_all(&wire).await.expect("write");
            client.io.shutdown().await.expect("shutdown");
            let mut got = Vec::new();
            let end = leg.read_to_end(&mut got).await;
            assert!(got.is_empty(), "nothing forged is handed out");
            assert!(end.is_err(), "a stream of garbage does not end cleanly");
        });
    }
}

/// A TLS 1.3 record of the client's, sealed with its extracted keys: `inner` of content type
/// `typ`, at sequence number `seq`.
fn seal_as_client(
    secrets: &rustls::ConnectionTrafficSecrets,
    seq: u64,
    typ: u8,
    inner: &[u8],
) -> Vec<u8> {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey};
    use rustls::ConnectionTrafficSecrets as S;
    let (algorithm, key, iv) = match secrets {
        S::Aes128Gcm { key, iv } => (&ring::aead::AES_128_GCM, key, iv),
        S::Aes256Gcm { key, iv } => (&ring::aead::AES_256_GCM, key, iv),
        S::Chacha20Poly1305 { key, iv } => (&ring::aead::CHACHA20_POLY1305, key, iv),
        _ => panic!("a suite ring offers"),
    };
    let key = LessSafeKey::new(UnboundKey::new(algorithm, key.as_ref()).expect("key"));
    let mut nonce: [u8; 12] = iv.as_ref().try_into().expect("a 12-byte IV");
    for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *n ^= s;
    }
    let mut body = inner.to_vec();
    body.push(typ);
    let len = body.len() + 16;
    let header = [0x17, 3, 3, (len >> 8) as u8, len as u8];
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(header),
        &mut body,
    )
    .expect("seal");
    [header.as_slice(), &body].concat()
}

/// Some clients (Java's among them) send a user_canceled warning for nothing: up to four
/// warnings let the stream go on, as rustls does; a fifth, or a TLS 1.3 warning that is not
/// user_canceled, ends it.
#[tokio::test]
async fn user_canceled_warnings_pass_up_to_a_limit() {
    for (warnings, description) in [(5, 90u8), (1, 10u8)] {
        let (mut leg, peer) = pair(TLS13, true, 64 * 1024).await;
        let TlsStream::Client(client) = peer else {
            panic!("the peer is the client")
        };
        let (mut raw, conn) = client.into_inner();
        let secrets = conn.dangerous_extract_secrets().expect("client secrets");
        let (mut seq, keys) = secrets.tx;
        let mut wire = Vec::new();
        for i in 0..warnings {
            wire.extend(seal_as_client(&keys, seq, 21, &[1, description]));
            seq += 1;
            wire.extend(seal_as_client(&keys, seq, 23, &[b'0' + i]));
            seq += 1;
        }
        raw.write_all(&wire).await.expect("raw write");
        let passed = if description == 90 { 4 } else { 0 };
        let mut got = vec![0u8; passed];
        leg.read_exact(&mut got).await.expect("data after warnings");
        assert_eq!(got, b"0123"[..passed].to_vec());
        let mut more = [0u8; 8];
        let err = leg.read(&mut more).await.expect_err("one warning too many");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }
}

/// A handshake over loopback TCP, whose socket takes vectored writes (so the leg seals the
/// relay's bytes in place); the leg is the server.
async fn tcp_pair(c: &Configs) -> (TlsSocket<TcpStream>, TlsStream<TcpStream>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let (accepted, client_io) = tokio::join!(listener.accept(), TcpStream::connect(addr));
    let (server_io, _) = accepted.expect("accept");
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&c.client));
    let name = ServerName::try_from("localhost").expect("a name");
    let (server, client) = tokio::join!(
        TlsSocket::accept(Arc::clone(&c.server), server_io),
        connector.connect(name, client_io.expect("connect"))
    );
    let client = TlsStream::Client(client.expect("client handshake"));
    (server.expect("server handshake"), client)
}

/// Writes `data` in pieces of `sizes` (cycled) with `poll_write_from`, each from a buffer that
/// ends with it and has `spare` bytes of capacity after it, as the relay's; checks that the
/// buffer's length is kept. Does not flush.
async fn write_from_in_pieces<S: AsyncRead + AsyncWrite + Unpin>(
    leg: &mut TlsSocket<S>,
    data: &[u8],
    sizes: &[usize],
    spare: usize,
) {
    let mut at = 0;
    for size in sizes.iter().cycle() {
        if at == data.len() {
            break;
        }
        let end = (at + size).min(data.len());
        let mut buf = bytes::BytesMut::with_capacity(end - at + spare);
        buf.extend_from_slice(&data[at..end]);
        let mut written = 0;
        while written < buf.len() {
            let range = written..buf.len();
            let n = std::future::poll_fn(|cx| leg.poll_write_from(cx, &mut buf, range.clone()))
                .await
                .expect("write from");
            assert!(
                n > 0 && buf.len() == end - at,
                "the buffer's length is kept"
            );
            written += n;
        }
        at = end;
    }
}

#[tokio::test]
async fn writes_sealed_in_place_arrive_intact_in_every_suite() {
    for suite in suites() {
        let name = suite.suite().as_str().unwrap_or_default();
        let c = configs_for(versions_of(suite), Some(suite));
        let (mut leg, mut peer) = tcp_pair(&c).await;
        // One record each (in place), one too large for a record and one without spare room
        // (both copied), a byte.
        let sizes = [
            1,
            100,
            super::records::MAX_PLAINTEXT,
            super::records::MAX_PLAINTEXT + 1,
            12_000,
        ];
        let down = pattern(200_000, 5);
        let down2 = down.clone();
        let peer_side = async move {
            let mut got = vec![0u8; down2.len()];
            peer.read_exact(&mut got).await.expect("peer read");
            assert!(
                got == down2,
                "{name}: what the leg sealed in place arrives intact"
            );
            peer
        };
        let leg_side = async {
            let half = down.len() / 2;
            write_from_in_pieces(&mut leg, &down[..half], &sizes, 1).await;
            write_from_in_pieces(&mut leg, &down[half..], &sizes, 0).await;
            leg.flush().await.expect("leg flush");
        };
        let (mut peer, ()) = tokio::join!(peer_side, leg_side);
        leg.shutdown().await.expect("leg shutdown");
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.expect("a clean end");
        assert!(rest.is_empty());
    }
}

#[tokio::test]
async fn writes_sealed_in_place_to_a_full_socket_are_queued_and_bounded() {
    for versions in [TLS12, TLS13] {
        let c = configs(versions);
        let (mut leg, mut peer) = tcp_pair(&c).await;
        let down = pattern(16 << 20, 6);
        let down2 = down.clone();
        let peer_side = async move {
            // The leg fills the socket's buffers before anything is read.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let mut got = vec![0u8; down2.len()];
            peer.read_exact(&mut got).await.expect("peer read");
            assert!(got == down2, "what waited in the queue arrives in order");
        };
        let leg_side = async {
            let mut most = 0;
            for piece in down.chunks(12_000) {
                write_from_in_pieces(&mut leg, piece, &[piece.len()], 1).await;
                most = most.max(leg.queued());
            }
            leg.flush().await.expect("leg flush");
            assert!(
                most <= 64 * 1024 + super::records::MAX_RECORD,
                "queued {most}"
            );
        };
        tokio::join!(peer_side, leg_side);
    }
}

impl RawClient {
    /// Reads until `len` bytes of application data came, or rustls finds an error.
    async fn read_plaintext(&mut self, len: usize) -> Result<Vec<u8>, rustls::Error> {
        let mut got = Vec::new();
        while got.len() < len {
            if let Some(e) = self.receive().await {
                return Err(e);
            }
            let mut buf = [0u8; 1024];
            while let Ok(n) = std::io::Read::read(&mut self.conn.reader(), &mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        Ok(got)
    }
}

/// A KeyUpdate in the same flight as the client's Finished: rustls, given it, would move its
/// keys on and queue an answer that the handover drops, so the leg's first record would be
/// sealed with keys the client does not have yet.
#[tokio::test]
async fn a_key_update_in_the_flight_of_the_clients_finished_is_answered() {
    let (mut leg, mut client, _c) = RawClient::connect_then(TLS13, |conn| {
        std::io::Write::write_all(&mut conn.writer(), b"before").expect("plaintext");
        conn.refresh_traffic_keys().expect("client key update");
        std::io::Write::write_all(&mut conn.writer(), b"after").expect("plaintext");
    })
    .await;
    let mut got = [0u8; 11];
    leg.read_exact(&mut got)
        .await
        .expect("both sides of the update");
    assert_eq!(&got, b"beforeafter");
    leg.write_all(b"answer").await.expect("write");
    leg.flush().await.expect("flush");
    let answer = client
        .read_plaintext(6)
        .await
        .expect("the client reads the leg's first record");
    assert_eq!(answer, b"answer");
}

/// What Java 17's JSSE does once its read key reached its limit (`jdk.tls.keyLimits`): it
/// answers every record it reads with a KeyUpdate asking for ours, each in a record of its own,
/// until ours arrives. A result streamed to it draws one per record already on its way, with no
/// application data of its own between: here 64, twice the budget of a peer that sends nothing
/// but KeyUpdates. A client that pipelines sends its next query before those KeyUpdates: the
/// records of ours still on their way keep their credit across its data.
#[tokio::test]
async fn key_updates_answering_each_record_read_as_java_sends_them_are_taken() {
    for pipelined in [false, true] {
        java_key_updates(pipelined).await;
    }
}

async fn java_key_updates(pipelined: bool) {
    let (mut leg, mut peer) = pair(TLS13, true, 4 << 20).await;
    let result = pattern(64 * super::records::MAX_PLAINTEXT, 3);
    leg.write_all(&result).await.expect("leg write");
    leg.flush().await.expect("leg flush");
    let mut got = vec![0u8; result.len()];
    peer.read_exact(&mut got).await.expect("peer read");
    assert!(got == result);
    if pipelined {
        peer.write_all(b"pipelined").await.expect("write");
        peer.flush().await.expect("flush");
        let mut query = [0u8; 9];
        leg.read_exact(&mut query)
            .await
            .expect("the pipelined query");
        assert_eq!(&query, b"pipelined");
    }
    peer_key_updates(&mut peer, 64);
    peer.write_all(b"next query").await.expect("write");
    peer.flush().await.expect("flush");
    let mut query = [0u8; 10];
    leg.read_exact(&mut query)
        .await
        .expect("the query after the KeyUpdates");
    assert_eq!(&query, b"next query");
    leg.write_all(b"its answer").await.expect("leg write");
    leg.flush().await.expect("leg flush");
    let mut answer = [0u8; 10];
    peer.read_exact(&mut answer)
        .await
        .expect("the answer, after one KeyUpdate of ours");
    assert_eq!(&answer, b"its answer");
}

/// The peer that sends KeyUpdates to a leg that sends nothing is cut at the 33rd, with
/// unexpected_message.
#[tokio::test]
async fn the_33rd_key_update_with_nothing_between_is_unexpected_message() {
    let (mut leg, mut peer) = pair(TLS13, true, 64 * 1024).await;
    peer_key_updates(&mut peer, 33);
    peer.write_all(b"late").await.expect("write");
    peer.flush().await.expect("flush");
    let mut buf = [0u8; 4];
    let err = leg
        .read(&mut buf)
        .await
        .expect_err("one KeyUpdate too many");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    let err = peer.read(&mut buf).await.expect_err("the alert");
    assert!(err.to_string().contains("UnexpectedMessage"), "{err}");
}

/// One AEAD key and IV of extracted secrets.
fn aead_key(secrets: &rustls::ConnectionTrafficSecrets) -> (ring::aead::LessSafeKey, [u8; 12]) {
    use ring::aead::{LessSafeKey, UnboundKey};
    use rustls::ConnectionTrafficSecrets as S;
    let (algorithm, key, iv) = match secrets {
        S::Aes128Gcm { key, iv } => (&ring::aead::AES_128_GCM, key, iv),
        S::Aes256Gcm { key, iv } => (&ring::aead::AES_256_GCM, key, iv),
        S::Chacha20Poly1305 { key, iv } => (&ring::aead::CHACHA20_POLY1305, key, iv),
        _ => panic!("a suite ring offers"),
    };
    let key = LessSafeKey::new(UnboundKey::new(algorithm, key.as_ref()).expect("key"));
    let iv: [u8; 12] = iv.as_ref().try_into().expect("a 12-byte IV");
    (key, iv)
}

fn tls13_nonce(iv: [u8; 12], seq: u64) -> ring::aead::Nonce {
    let mut nonce = iv;
    for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *n ^= s;
    }
    ring::aead::Nonce::assume_unique_for_key(nonce)
}

/// The client of a TLS 1.3 leg, gone after the handshake: a test seals the client's records
/// with its keys, any inner plaintext it likes, and opens the leg's with the leg's.
struct Forger {
    raw: DuplexStream,
    tx: (u64, rustls::ConnectionTrafficSecrets),
    rx: (u64, rustls::ConnectionTrafficSecrets),
    /// Bytes read from the leg, not yet opened.
    received: Vec<u8>,
}

impl Forger {
    async fn connect(c: &Configs) -> (TlsSocket<DuplexStream>, Forger) {
        let (leg, peer) = pair_with(c, true, 64 * 1024).await;
        let TlsStream::Client(client) = peer else {
            panic!("the peer is the client")
        };
        let (raw, conn) = client.into_inner();
        let secrets = conn.dangerous_extract_secrets().expect("client secrets");
        let forger = Forger {
            raw,
            tx: secrets.tx,
            rx: secrets.rx,
            received: Vec::new(),
        };
        (leg, forger)
    }

    /// A record whose inner plaintext (content, type, padding) is `inner`.
    fn seal(&mut self, inner: &[u8]) -> Vec<u8> {
        let (key, iv) = aead_key(&self.tx.1);
        let mut body = inner.to_vec();
        let len = body.len() + 16;
        let header = [0x17, 3, 3, (len >> 8) as u8, len as u8];
        key.seal_in_place_append_tag(
            tls13_nonce(iv, self.tx.0),
            ring::aead::Aad::from(header),
            &mut body,
        )
        .expect("seal");
        self.tx.0 += 1;
        [header.as_slice(), &body].concat()
    }

    /// Application data `data` in one record.
    fn data(&mut self, data: &[u8]) -> Vec<u8> {
        self.seal(&[data, &[23]].concat())
    }

    async fn send(&mut self, wire: &[u8]) {
        self.raw.write_all(wire).await.expect("raw write");
    }

    /// The next record of the leg's with content type `typ` (tickets before it are skipped);
    /// `None` when none comes within a second.
    async fn next_of_type(&mut self, typ: u8) -> Option<Vec<u8>> {
        loop {
            while self.received.len() >= 5 {
                let len = usize::from(u16::from_be_bytes([self.received[3], self.received[4]]));
                if self.received.len() < 5 + len {
                    break;
                }
                let header: [u8; 5] = self.received[..5].try_into().expect("a header");
                let mut body = self.received[5..5 + len].to_vec();
                self.received.drain(..5 + len);
                let (key, iv) = aead_key(&self.rx.1);
                let plain = key
                    .open_in_place(
                        tls13_nonce(iv, self.rx.0),
                        ring::aead::Aad::from(header),
                        &mut body,
                    )
                    .expect("the leg's record opens");
                self.rx.0 += 1;
                let end = plain.iter().rposition(|b| *b != 0).expect("a content type");
                if plain[end] == typ {
                    return Some(plain[..end].to_vec());
                }
            }
            let mut buf = [0u8; 4096];
            let read =
                tokio::time::timeout(std::time::Duration::from_secs(1), self.raw.read(&mut buf))
                    .await;
            match read {
                Ok(Ok(n)) if n > 0 => self.received.extend_from_slice(&buf[..n]),
                _ => return None,
            }
        }
    }

    /// The description of the alert the leg sent, if one came.
    async fn alert(&mut self) -> Option<u8> {
        let alert = self.next_of_type(21).await?;
        assert_eq!(alert.len(), 2, "an alert is two bytes: {alert:?}");
        assert_eq!(alert[0], 2, "and fatal");
        Some(alert[1])
    }
}

/// A session set up before the hostile ones still carries data both ways.
async fn still_carries_data(leg: &mut TlsSocket<DuplexStream>, peer: &mut Peer) {
    peer.write_all(b"ping").await.expect("bystander write");
    peer.flush().await.expect("bystander flush");
    let mut got = [0u8; 4];
    leg.read_exact(&mut got).await.expect("bystander leg read");
    leg.write_all(b"pong").await.expect("bystander leg write");
    leg.flush().await.expect("bystander leg flush");
    peer.read_exact(&mut got).await.expect("bystander read");
    assert_eq!(&got, b"pong");
}

/// Records the client sealed with its own keys (they open) but that break the rules after they
/// open: each gets the alert RFC 8446 names, the leg hands out nothing of it, writes nothing
/// more, and another session from the same listener's configuration goes on.
#[tokio::test]
async fn hostile_authenticated_records_get_the_rfcs_alert_and_end_only_their_session() {
    const UNEXPECTED_MESSAGE: u8 = 10;
    const RECORD_OVERFLOW: u8 = 22;
    const ILLEGAL_PARAMETER: u8 = 47;
    const DECODE_ERROR: u8 = 50;
    let max = super::records::MAX_PLAINTEXT;
    let cases: Vec<(&str, Vec<u8>, u8)> = vec![
        (
            "inner plaintext of 2^14 + 2 bytes (padding past the limit)",
            [b"x".as_slice(), &[23], &vec![0; max]].concat(),
            RECORD_OVERFLOW,
        ),
        (
            "a full record with one byte of padding",
            [vec![b'y'; max], vec![23, 0]].concat(),
            RECORD_OVERFLOW,
        ),
        ("nothing but padding", vec![0; 40], UNEXPECTED_MESSAGE),
        ("change_cipher_spec inside", vec![1, 20], UNEXPECTED_MESSAGE),
        (
            "data after a KeyUpdate in its record",
            vec![24, 0, 0, 1, 0, 24, 0, 0, 1, 0, 22],
            UNEXPECTED_MESSAGE,
        ),
        (
            "a KeyUpdate of value 2",
            vec![24, 0, 0, 1, 2, 22],
            ILLEGAL_PARAMETER,
        ),
        ("a ClientHello", vec![1, 0, 0, 0, 22], UNEXPECTED_MESSAGE),
        ("an alert of level 3", vec![3, 0, 21], ILLEGAL_PARAMETER),
        ("an alert of level 0", vec![0, 90, 21], ILLEGAL_PARAMETER),
        (
            "a TLS 1.3 warning other than user_canceled",
            vec![1, 10, 21],
            DECODE_ERROR,
        ),
        ("an alert of three bytes", vec![2, 10, 0, 21], DECODE_ERROR),
        (
            "an unknown content type",
            vec![1, 2, 3, 99],
            UNEXPECTED_MESSAGE,
        ),
    ];
    let c = configs(TLS13);
    let (mut bystander, mut bystander_peer) = pair_with(&c, true, 64 * 1024).await;
    for (case, inner, expected) in cases {
        let (mut leg, mut forger) = Forger::connect(&c).await;
        let mut wire = forger.data(b"before");
        wire.extend(forger.seal(&inner));
        wire.extend(forger.data(b"never"));
        forger.send(&wire).await;
        let mut got = [0u8; 6];
        leg.read_exact(&mut got).await.expect(case);
        assert_eq!(&got, b"before", "{case}");
        let mut buf = [0u8; 64];
        let err = leg.read(&mut buf).await.expect_err(case);
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{case}: {err}");
        assert_eq!(forger.alert().await, Some(expected), "{case}: {err}");
        let err = leg.write_all(b"more").await.expect_err(case);
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{case}: {err}");
        assert_eq!(
            forger.next_of_type(23).await,
            None,
            "{case}: nothing after the alert"
        );
    }
    still_carries_data(&mut bystander, &mut bystander_peer).await;
}

/// The limit is on the inner plaintext: a full record's content and its type pass, padding or
/// not up to 2^14 + 1 bytes.
#[tokio::test]
async fn inner_plaintext_of_exactly_the_limit_is_taken() {
    let c = configs(TLS13);
    let (mut leg, mut forger) = Forger::connect(&c).await;
    let max = super::records::MAX_PLAINTEXT;
    let full = pattern(max, 1);
    let mut wire = forger.seal(&[full.as_slice(), &[23]].concat());
    wire.extend(forger.seal(&[b"z".as_slice(), &[23], &vec![0; max - 1]].concat()));
    forger.send(&wire).await;
    let mut got = vec![0u8; max + 1];
    leg.read_exact(&mut got).await.expect("both records");
    assert!(got[..max] == full[..] && got[max] == b'z');
}

/// After close_notify nothing counts: a record behind it, in the same read, is not handed out,
/// and the stream ends cleanly.
#[tokio::test]
async fn records_after_close_notify_are_ignored() {
    let c = configs(TLS13);
    let (mut leg, mut forger) = Forger::connect(&c).await;
    let mut wire = forger.data(b"last");
    wire.extend(forger.seal(&[1, 0, 21]));
    wire.extend(forger.data(b"after the end"));
    wire.extend(forger.seal(&[2, 10, 21]));
    forger.send(&wire).await;
    let mut got = Vec::new();
    leg.read_to_end(&mut got).await.expect("a clean end");
    assert_eq!(got, b"last");
    assert_eq!(leg.read(&mut [0u8; 8]).await.expect("still clean"), 0);
}

/// Nothing follows our own close_notify: once it is sealed (here behind data a full pipe has
/// not taken, so the socket is not shut yet), writes fail, whichever way they would have been
/// sealed, and the peer reads the data, then a clean end.
#[tokio::test]
async fn no_data_follows_our_close_notify() {
    for versions in [TLS12, TLS13] {
        let (mut leg, mut peer) = pair(versions, true, 4096).await;
        let data = pattern(20_000, 2);
        let n = std::future::poll_fn(|cx| Pin::new(&mut leg).poll_write(cx, &data))
            .await
            .expect("write");
        assert_eq!(n, data.len(), "sealed whole, queued behind the full pipe");
        let shut = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut leg).poll_shutdown(cx)));
        assert!(
            shut.await.is_pending(),
            "close_notify waits behind the data"
        );
        let err = std::future::poll_fn(|cx| Pin::new(&mut leg).poll_write(cx, b"late"))
            .await
            .expect_err("a write after close_notify");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
        write_in_place_is_refused(&mut leg, "close_notify").await;
        let reader = async {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).await.expect("a clean end");
            got
        };
        let (got, shut) = tokio::join!(reader, leg.shutdown());
        shut.expect("shutdown");
        assert!(got == data, "the data, then the end");
    }
}

/// A write the relay's way (sealed in place) after our close_notify or fatal alert (`after`)
/// fails with `BrokenPipe`.
async fn write_in_place_is_refused<S: AsyncRead + AsyncWrite + Unpin>(
    leg: &mut TlsSocket<S>,
    after: &str,
) {
    let mut buf = bytes::BytesMut::with_capacity(16);
    buf.extend_from_slice(b"late too");
    let err = std::future::poll_fn(|cx| leg.poll_write_from(cx, &mut buf, 0..8))
        .await
        .expect_err("a write in place is refused");
    assert_eq!(
        err.kind(),
        io::ErrorKind::BrokenPipe,
        "after {after}: {err}"
    );
}

/// Nothing follows our fatal alert either: after a forged record the leg answered with
/// bad_record_mac, writes fail, whichever way they would have been sealed.
#[tokio::test]
async fn no_data_follows_our_fatal_alert() {
    for versions in [TLS12, TLS13] {
        let c = configs(versions);
        let (mut leg, mut peer) = tcp_pair(&c).await;
        let mut forged = vec![0x17, 0x03, 0x03, 0x00, 0x40];
        forged.extend_from_slice(&[0x5a; 0x40]);
        let TlsStream::Client(client) = &mut peer else {
            panic!("the peer is the client")
        };
        client
            .get_mut()
            .0
            .write_all(&forged)
            .await
            .expect("raw write");
        let mut buf = [0u8; 64];
        leg.read(&mut buf).await.expect_err("a bad record");
        let err = leg
            .write_all(b"late")
            .await
            .expect_err("a write after the alert");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
        write_in_place_is_refused(&mut leg, "the alert").await;
        let err = peer
            .read(&mut buf)
            .await
            .expect_err("the alert, and only it");
        assert!(err.to_string().contains("BadRecordMac"), "{err}");
    }
}

/// With our TLS 1.3 keys renewed every 8 records, a rustls client reads on across each
/// KeyUpdate of ours, whichever way the records were sealed.
#[tokio::test]
async fn our_tls13_keys_are_renewed_at_the_limit_and_the_peer_reads_on() {
    let c = configs(TLS13);
    let (mut leg, mut peer) = tcp_pair(&c).await;
    leg.limit_records_per_key(8);
    let down = pattern(400_000, 4);
    let down2 = down.clone();
    let peer_side = async move {
        let mut got = vec![0u8; down2.len()];
        peer.read_exact(&mut got)
            .await
            .expect("peer read across our KeyUpdates");
        assert!(got == down2);
    };
    let leg_side = async {
        let half = down.len() / 2;
        write_from_in_pieces(&mut leg, &down[..half], &[100, 16_384, 7, 40_000], 1).await;
        write_in_records(&mut leg, &down[half..], &[3, 16_384, 20_000]).await;
        leg.flush().await.expect("leg flush");
    };
    tokio::join!(peer_side, leg_side);
}

/// A bulk write that reaches a TLS 1.2 key's limit part way, over a pipe too small to hold it:
/// the leg takes the records before the limit, the next write fails only once the close_notify
/// is sent, and the peer reads whole records of data, then a clean end.
#[tokio::test]
async fn a_tls12_bulk_write_cut_at_the_key_limit_over_a_full_pipe_ends_cleanly() {
    let (mut leg, mut peer) = pair(TLS12, true, 4096).await;
    leg.limit_records_per_key(8);
    let data = pattern(10 * super::records::MAX_PLAINTEXT, 3);
    let reader = async move {
        let mut got = Vec::new();
        peer.read_to_end(&mut got)
            .await
            .expect("a clean end, not a truncation");
        got
    };
    let writer = async move {
        let err = leg.write_all(&data).await.expect_err("cut at the limit");
        drop(leg);
        (err, data)
    };
    let (got, (err, data)) = tokio::join!(reader, writer);
    assert!(err.to_string().contains("TLS 1.2"), "{err}");
    // The Finished took the first record: six whole records of data before the close_notify.
    assert_eq!(got.len(), 6 * super::records::MAX_PLAINTEXT);
    assert!(got == data[..got.len()]);
}

/// Something that is no TLS record (a plaintext probe) is refused at once, not held while the
/// handshake waits for the rest of a record it announced.
#[tokio::test]
async fn a_plaintext_probe_is_refused_at_once() {
    let c = configs(TLS13);
    let (mut client_io, server_io) = tokio::io::duplex(4096);
    client_io
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write the probe");
    let accepted = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        TlsSocket::accept(Arc::clone(&c.server), server_io),
    )
    .await
    .expect("an answer without more bytes");
    assert!(accepted.is_err(), "no handshake from a plaintext probe");
}

/// TLS 1.2 has no key update: at the cipher's limit (lowered to 8 records here) the leg ends the
/// connection with the close_notify it kept the last record for, and the peer reads everything
/// sealed before it, then a clean end.
#[tokio::test]
async fn a_tls12_connection_is_cut_at_the_key_limit_with_a_close_notify() {
    for in_place in [false, true] {
        let c = configs(TLS12);
        let (mut leg, mut peer) = tcp_pair(&c).await;
        leg.limit_records_per_key(8);
        let mut accepted = Vec::new();
        let mut cut = None;
        for i in 0..20u8 {
            let record = pattern(100, i);
            let written = if in_place {
                let mut buf = bytes::BytesMut::with_capacity(128);
                buf.extend_from_slice(&record);
                std::future::poll_fn(|cx| leg.poll_write_from(cx, &mut buf, 0..100)).await
            } else {
                leg.write(&record).await
            };
            match written {
                Ok(n) => {
                    assert_eq!(n, 100);
                    accepted.extend_from_slice(&record);
                }
                Err(e) => {
                    cut = Some(e);
                    break;
                }
            }
        }
        let cut = cut.expect("the leg stops at the limit");
        assert!(cut.to_string().contains("TLS 1.2"), "{cut}");
        // The Finished took the first record; six of data, then the close_notify.
        assert_eq!(accepted.len(), 6 * 100);
        // No shutdown: the relay drops a leg whose write failed, so the close_notify must be
        // on the wire by the time the write says so.
        drop(leg);
        let mut got = Vec::new();
        peer.read_to_end(&mut got)
            .await
            .expect("a clean end, not a truncation");
        assert!(got == accepted);
    }
}
