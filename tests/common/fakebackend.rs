//! A tiny scripted MySQL server for the faults a real server will not produce on demand.
//!
//! MariaDB never sends garbage for a greeting, never closes in the middle of a result set on
//! purpose and never gets a sequence id wrong, yet the proxy must survive all three. This server
//! greets like MariaDB (HandshakeV10, `mysql_native_password`, no DEPRECATE_EOF so responses use
//! classic EOF packets), accepts any login with OK, and answers each COM_QUERY according to its
//! text: [`PARTIAL`] and [`BAD_SEQUENCE`] trigger the faults, anything else gets a one-row result.
//! It runs on its own thread and runtime, so sync and async tests can use it alike, and stops
//! when dropped.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Query text that gets column count, one column definition, EOF and one row, then a close.
pub const PARTIAL: &str = "SELECT 'partial result then close'";
/// Query text that gets the server's own ERR 1927 (SQLSTATE 70100, [`KILLED_MESSAGE`]), then a
/// close: what a server that announces a KILL CONNECTION sends.
pub const ERR_THEN_CLOSE: &str = "SELECT 'error then close'";
pub const KILLED_MESSAGE: &str = "Connection was killed";
/// Query text that gets an OK packet carrying sequence id 5 instead of 1.
pub const BAD_SEQUENCE: &str = "SELECT 'wrong sequence id'";
/// The value of the single row any other query gets.
pub const ROW_VALUE: &str = "fake";
pub const SERVER_VERSION: &str = "5.5.5-10.11.0-MariaDB-fake";

const CLIENT_LONG_FLAG: u32 = 0x0000_0004;
const CLIENT_CONNECT_WITH_DB: u32 = 0x0000_0008;
const CLIENT_PROTOCOL_41: u32 = 0x0000_0200;
const CLIENT_TRANSACTIONS: u32 = 0x0000_2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x0000_8000;
const CLIENT_MULTI_STATEMENTS: u32 = 0x0001_0000;
const CLIENT_MULTI_RESULTS: u32 = 0x0002_0000;
const CLIENT_PLUGIN_AUTH: u32 = 0x0008_0000;
const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 0x0020_0000;
/// What the fake advertises. CLIENT_LONG_PASSWORD (bit 0, "CLIENT_MYSQL") is clear, as MariaDB
/// does, so the last 4 reserved bytes are MariaDB's extended capabilities (none here).
const SERVER_CAPS: u32 = CLIENT_LONG_FLAG
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;
const SERVER_STATUS_AUTOCOMMIT: u16 = 0x0002;
const UTF8MB4_GENERAL_CI: u8 = 45;
const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
/// Generous for a test server: it only ever reads small handshakes and queries.
const MAX_PACKET: usize = 1 << 20;

/// How the fake behaves right after accepting a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Writes an HTTP-looking line instead of a greeting, then closes.
    Garbage,
    /// Accepts and never says a word (a hung server).
    Silent,
    /// Sends the server's own ERR 1040 in place of a greeting, as a full MariaDB does, then closes.
    TooManyConnections,
    /// Greets, reads the client's handshake response, then closes without answering.
    CloseDuringAuth,
    /// Greets, reads the client's handshake response, then never answers (a stuck server).
    SilentDuringAuth,
    /// Greets, accepts any login and answers queries by their text (see the module doc).
    Serve,
}

pub struct FakeBackend {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeBackend {
    pub fn start(behaviour: Behaviour) -> FakeBackend {
        let stop = CancellationToken::new();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let token = stop.clone();
        let counter = Arc::clone(&accepted);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("fake backend runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("fake backend binds");
                tx.send(listener.local_addr().expect("fake backend address"))
                    .expect("test waits for the address");
                let mut next_id = 1000u32;
                loop {
                    let (stream, _) = tokio::select! {
                        _ = token.cancelled() => return,
                        a = listener.accept() => match a {
                            Ok(a) => a,
                            Err(_) => continue,
                        },
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    next_id += 1;
                    let token = token.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = token.cancelled() => {}
                            _ = serve(stream, behaviour, next_id) => {}
                        }
                    });
                }
            });
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("fake backend started");
        FakeBackend {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FakeBackend {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection; any I/O error or protocol surprise just ends it (the peer sees a close).
async fn serve(mut stream: TcpStream, behaviour: Behaviour, id: u32) -> Option<()> {
    stream.set_nodelay(true).ok()?;
    match behaviour {
        Behaviour::Garbage => {
            stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                .await
                .ok()?;
            return None;
        }
        Behaviour::Silent => std::future::pending().await,
        Behaviour::TooManyConnections => {
            // Before the handshake MariaDB sends no SQLSTATE marker.
            let mut err = vec![0xFF];
            err.extend_from_slice(&1040u16.to_le_bytes());
            err.extend_from_slice(b"Too many connections");
            return write_packet(&mut stream, 0, &err).await;
        }
        Behaviour::CloseDuringAuth | Behaviour::SilentDuringAuth | Behaviour::Serve => {}
    }
    write_packet(&mut stream, 0, &greeting(id)).await?;
    let (seq, _response) = read_packet(&mut stream).await?;
    if behaviour == Behaviour::CloseDuringAuth {
        return None;
    }
    if behaviour == Behaviour::SilentDuringAuth {
        // Hold the connection without a word until the proxy gives up on it.
        let mut rest = [0u8; 64];
        while matches!(stream.read(&mut rest).await, Ok(n) if n > 0) {}
        return None;
    }
    write_packet(&mut stream, seq.wrapping_add(1), &ok_packet()).await?;
    loop {
        let (_, command) = read_packet(&mut stream).await?;
        match command.split_first() {
            Some((&COM_QUIT, _)) => return Some(()),
            Some((&COM_QUERY, sql)) if sql == PARTIAL.as_bytes() => {
                let mut bytes = Vec::new();
                push_packet(&mut bytes, 1, &[1]);
                push_packet(&mut bytes, 2, &column_definition("x"));
                push_packet(&mut bytes, 3, &eof_packet());
                push_packet(&mut bytes, 4, &text_row(ROW_VALUE));
                stream.write_all(&bytes).await.ok()?;
                // Closing with the response half sent is the fault under test.
                return Some(());
            }
            Some((&COM_QUERY, sql)) if sql == ERR_THEN_CLOSE.as_bytes() => {
                let mut err = vec![0xFF];
                err.extend_from_slice(&1927u16.to_le_bytes());
                err.extend_from_slice(b"#70100");
                err.extend_from_slice(KILLED_MESSAGE.as_bytes());
                write_packet(&mut stream, 1, &err).await?;
                return Some(());
            }
            Some((&COM_QUERY, sql)) if sql == BAD_SEQUENCE.as_bytes() => {
                write_packet(&mut stream, 5, &ok_packet()).await?;
                // Stay open: the proxy, not this server, must end the session.
                let mut sink = [0u8; 256];
                while stream.read(&mut sink).await.ok()? > 0 {}
                return Some(());
            }
            Some((&COM_QUERY, _)) => {
                let mut bytes = Vec::new();
                push_packet(&mut bytes, 1, &[1]);
                push_packet(&mut bytes, 2, &column_definition("x"));
                push_packet(&mut bytes, 3, &eof_packet());
                push_packet(&mut bytes, 4, &text_row(ROW_VALUE));
                push_packet(&mut bytes, 5, &eof_packet());
                stream.write_all(&bytes).await.ok()?;
            }
            // COM_PING and anything else: a plain OK.
            _ => write_packet(&mut stream, 1, &ok_packet()).await?,
        }
    }
}

/// A MariaDB-style HandshakeV10 payload offering `mysql_native_password`.
pub fn greeting(connection_id: u32) -> Vec<u8> {
    let scramble: Vec<u8> = (0..20u8).map(|i| b'A' + i).collect();
    let mut p = Vec::with_capacity(96);
    p.push(10);
    p.extend_from_slice(SERVER_VERSION.as_bytes());
    p.push(0);
    p.extend_from_slice(&connection_id.to_le_bytes());
    p.extend_from_slice(&scramble[..8]);
    p.push(0);
    p.extend_from_slice(&(SERVER_CAPS as u16).to_le_bytes());
    p.push(UTF8MB4_GENERAL_CI);
    p.extend_from_slice(&SERVER_STATUS_AUTOCOMMIT.to_le_bytes());
    p.extend_from_slice(&((SERVER_CAPS >> 16) as u16).to_le_bytes());
    p.push(21); // auth data length: 20 bytes of scramble plus the NUL
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&0u32.to_le_bytes()); // MariaDB extended capabilities
    p.extend_from_slice(&scramble[8..]);
    p.push(0);
    p.extend_from_slice(b"mysql_native_password");
    p.push(0);
    p
}

fn ok_packet() -> Vec<u8> {
    let mut p = vec![0x00, 0, 0];
    p.extend_from_slice(&SERVER_STATUS_AUTOCOMMIT.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes()); // warnings
    p
}

fn eof_packet() -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&SERVER_STATUS_AUTOCOMMIT.to_le_bytes());
    p
}

fn lenenc_str(p: &mut Vec<u8>, s: &str) {
    // Test strings are short: a one-byte length is always enough.
    p.push(u8::try_from(s.len()).expect("short test string"));
    p.extend_from_slice(s.as_bytes());
}

/// A Protocol::ColumnDefinition41 for a VARCHAR column.
fn column_definition(name: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(32 + name.len());
    for part in ["def", "", "", "", name, name] {
        lenenc_str(&mut p, part);
    }
    p.push(0x0C);
    p.extend_from_slice(&u16::from(UTF8MB4_GENERAL_CI).to_le_bytes());
    p.extend_from_slice(&255u32.to_le_bytes()); // column length
    p.push(0xFD); // MYSQL_TYPE_VAR_STRING
    p.extend_from_slice(&0u16.to_le_bytes()); // flags
    p.push(0); // decimals
    p.extend_from_slice(&[0, 0]);
    p
}

fn text_row(value: &str) -> Vec<u8> {
    let mut p = Vec::new();
    lenenc_str(&mut p, value);
    p
}

fn push_packet(out: &mut Vec<u8>, seq: u8, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("small test packet");
    out.extend_from_slice(&len.to_le_bytes()[..3]);
    out.push(seq);
    out.extend_from_slice(payload);
}

async fn write_packet(stream: &mut TcpStream, seq: u8, payload: &[u8]) -> Option<()> {
    let mut bytes = Vec::with_capacity(4 + payload.len());
    push_packet(&mut bytes, seq, payload);
    stream.write_all(&bytes).await.ok()
}

async fn read_packet(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).await.ok()?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    if len > MAX_PACKET {
        return None;
    }
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    Some((head[3], payload))
}
