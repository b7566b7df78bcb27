//! The relay itself, over in-memory legs with a MySQL 8 backend written from the protocol
//! documentation (no MySQL 8 server can be installed here).
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::net::leg::LegStream;
use crate::proxy::auth::{
    read_greeting, relay_connection_phase, AuthError, HandshakeLimits, TransportPlan,
};
use crate::wire::protocol::caps::*;
use crate::wire::protocol::cleartext::Exposure;
use crate::wire::protocol::handshake::Strip;

const CAPS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_PROTOCOL_41
    | CLIENT_SECURE_CONNECTION
    | CLIENT_TRANSACTIONS
    | CLIENT_PLUGIN_AUTH;

fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = (payload.len() as u32).to_le_bytes().to_vec();
    p[3] = seq;
    p.extend_from_slice(payload);
    p
}

/// HandshakeV10 from MySQL 8.0, default plugin caching_sha2_password.
fn mysql8_greeting() -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"8.0.36\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(b"abcdefgh\0");
    p.extend_from_slice(&(CAPS as u16).to_le_bytes());
    p.push(0xFF);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&((CAPS >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(b"ijklmnopqrst\0caching_sha2_password\0");
    packet(0, &p)
}

/// HandshakeResponse41 for user `app` answering with `auth` for `plugin`.
fn response(plugin: &str, auth: &[u8]) -> Vec<u8> {
    let mut p = CAPS.to_le_bytes().to_vec();
    p.extend_from_slice(&(1u32 << 24).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(b"app\0");
    p.push(auth.len() as u8);
    p.extend_from_slice(auth);
    p.extend_from_slice(plugin.as_bytes());
    p.push(0);
    packet(1, &p)
}

struct Run {
    result: Result<crate::proxy::auth::Authenticated, AuthError>,
    next_seq: u8,
    /// Everything the client received after the greeting.
    client_got: Vec<u8>,
    /// Everything the backend received after the client's response (or at all, when
    /// `response_reaches_backend` is false).
    backend_got: Vec<u8>,
}

/// A unix-socket client (`local`, secure) or a plaintext TCP one logs in; the backend
/// answers its response with `reply` (seq 2), then both test ends read what is left.
async fn run(local: bool, guard: bool, client_response: Vec<u8>, reply: &[u8]) -> Run {
    let (client_io, mut client) = tokio::io::duplex(4096);
    let (backend_io, mut backend) = tokio::io::duplex(4096);
    backend.write_all(&mysql8_greeting()).await.unwrap();
    let mut backend_io = LegStream::Plain(backend_io);
    let greeting = read_greeting(&mut backend_io, 4096, Strip::UNSUPPORTED)
        .await
        .unwrap();
    let plan = TransportPlan {
        client_tls: None,
        client_local: local,
        offer_compression: false,
        backend_tls: None,
        backend_compression: false,
        mariadb: false,
        socket_identity: None,
        backend: "db",
        guard_cleartext: guard,
    };
    let limits = HandshakeLimits {
        max_packet: 4096,
        timeout: Duration::from_secs(5),
        strip: Strip::UNSUPPORTED,
    };
    let relay = tokio::spawn(async move {
        let mut client_io: LegStream<DuplexStream> = LegStream::Plain(client_io);
        let mut next_seq = 0;
        let result = relay_connection_phase(
            &mut client_io,
            &mut backend_io,
            greeting,
            limits,
            &plan,
            &mut next_seq,
        )
        .await;
        (result, next_seq)
    });
    let mut greeting = vec![0; mysql8_greeting().len()];
    client.read_exact(&mut greeting).await.unwrap();
    client.write_all(&client_response).await.unwrap();
    let mut backend_got = BytesMut::new();
    let expected = client_response.len();
    let _ = tokio::time::timeout(Duration::from_millis(300), async {
        while backend_got.len() < expected {
            if backend.read_buf(&mut backend_got).await.unwrap_or(0) == 0 {
                break;
            }
        }
    })
    .await;
    if backend_got.len() >= expected {
        backend.write_all(&packet(2, reply)).await.unwrap();
        backend_got.clear();
    }
    // A guarded relay ends and drops both legs (EOF here); one that forwarded waits for
    // the client's next packet, so the client end reads what came for a moment.
    let mut client_got = BytesMut::new();
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        while client.read_buf(&mut client_got).await.unwrap_or(0) > 0 {}
    })
    .await;
    drop(client);
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_millis(500), backend.read_to_end(&mut rest)).await;
    backend_got.extend_from_slice(&rest);
    drop(backend);
    let (result, next_seq) = tokio::time::timeout(Duration::from_secs(5), relay)
        .await
        .map_or((Err(AuthError::ClientTimeout("test".into())), 0), |r| {
            r.unwrap()
        });
    Run {
        result,
        next_seq,
        client_got: client_got.to_vec(),
        backend_got: backend_got.to_vec(),
    }
}

fn scramble_answer() -> Vec<u8> {
    (0u8..32).collect()
}

#[tokio::test]
async fn full_authentication_is_not_forwarded_to_a_secure_client() {
    let r = run(
        true,
        true,
        response("caching_sha2_password", &scramble_answer()),
        &[0x01, 0x04],
    )
    .await;
    assert!(
        matches!(
            r.result,
            Err(AuthError::CleartextPassword(Exposure::FullAuth))
        ),
        "{:?}",
        r.result.map(|_| ())
    );
    // The client never read "perform full authentication", so it sent no password;
    // our ERR takes that packet's place: sequence id 2.
    assert_eq!(r.client_got, b"");
    assert_eq!(r.next_seq, 2);
    // The backend is answered by the proxy (a wrong scramble, sequence 3, so that it refuses
    // the login rather than count an abandoned handshake), never by the client.
    assert_eq!(r.backend_got.len(), 4 + 20, "{:?}", r.backend_got);
    assert_eq!(r.backend_got[3], 3);
}

#[tokio::test]
async fn full_authentication_is_forwarded_when_not_guarded() {
    // A plaintext TCP client encrypts with the server's RSA key instead; an opted-in
    // backend gets the password as the client sends it.
    for (local, guard) in [(false, true), (true, false)] {
        let r = run(
            local,
            guard,
            response("caching_sha2_password", &scramble_answer()),
            &[0x01, 0x04],
        )
        .await;
        assert_eq!(
            r.client_got,
            packet(2, &[0x01, 0x04]),
            "local {local} guard {guard}"
        );
    }
}

#[tokio::test]
async fn a_sha256_password_response_never_reaches_the_backend() {
    // Over TLS or a unix socket, a client whose default plugin is sha256_password puts
    // its password, NUL-terminated, in its HandshakeResponse.
    let r = run(
        true,
        true,
        response("sha256_password", b"s3cret\0"),
        &[0x00, 0, 0, 2, 0, 0, 0],
    )
    .await;
    assert!(
        matches!(&r.result, Err(AuthError::CleartextPassword(Exposure::Response { plugin })) if plugin == "sha256_password"),
        "{:?}",
        r.result.map(|_| ())
    );
    // The response is not forwarded: the backend gets a login of the proxy's that it refuses.
    let got = &r.backend_got;
    let has = |needle: &[u8]| got.windows(needle.len()).any(|w| w == needle);
    assert!(!has(b"s3cret"), "the password reached the backend: {got:?}");
    // (The harness drops the first bytes the backend reads; the rest of the proxy's login
    // names its plugin, where the client's named sha256_password.)
    assert!(has(b"mysql_native_password\0"), "{got:?}");
    assert!(!has(b"sha256_password"), "{got:?}");
    // Our ERR answers the response: sequence id 2.
    assert_eq!(r.next_seq, 2);
}

#[tokio::test]
async fn a_switch_to_sha256_password_is_not_forwarded() {
    let mut switch = b"\xFEsha256_password\0".to_vec();
    switch.extend_from_slice(b"abcdefghijklmnopqrst\0");
    let r = run(
        true,
        true,
        response("caching_sha2_password", &scramble_answer()),
        &switch,
    )
    .await;
    assert!(
        matches!(&r.result, Err(AuthError::CleartextPassword(Exposure::Switch { plugin })) if plugin == "sha256_password"),
        "{:?}",
        r.result.map(|_| ())
    );
    assert_eq!(r.client_got, b"");
}
