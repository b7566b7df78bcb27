//! [`TlsSocket`] against rustls over an in-memory pipe, TLS 1.2 and 1.3, either side (the server
//! side is the record layer of our own, the client side rustls' connection): bulk data in records
//! of mixed sizes (more plaintext in one read than rustls holds), clean close, truncation, a
//! forged record, key updates; for the server side also every cipher suite, data pipelined
//! after the client's Finished, records split across reads and many in one read, a flipped
//! ciphertext byte, an oversize record, a 16 MiB payload.

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
            std::io::Write::write_all(&mut client.conn.writer(), pipelined).expect("plaintext");
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
