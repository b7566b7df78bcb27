//! A minimal MySQL wire-protocol client for protocol corner cases.
//!
//! Real client crates hide what tests need to control: exact capability bits, sequence ids,
//! half-sent or malformed packets, pipelined commands. This client does only the handshake
//! (mysql_native_password, with an auth switch) and text queries itself, and otherwise lets a
//! test send and read raw packets. It parses independently of the proxy's own code, so a bug
//! shared by both cannot hide. Errors are `String`s: it is a test tool.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mysql_common::auth::plugins::mysql_native_password::scramble_native;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};

pub const CLIENT_LONG_PASSWORD: u32 = 0x0000_0001;
pub const CLIENT_LONG_FLAG: u32 = 0x0000_0004;
pub const CLIENT_CONNECT_WITH_DB: u32 = 0x0000_0008;
pub const CLIENT_COMPRESS: u32 = 0x0000_0020;
pub const CLIENT_LOCAL_FILES: u32 = 0x0000_0080;
pub const CLIENT_PROTOCOL_41: u32 = 0x0000_0200;
pub const CLIENT_SSL: u32 = 0x0000_0800;
pub const CLIENT_TRANSACTIONS: u32 = 0x0000_2000;
pub const CLIENT_SECURE_CONNECTION: u32 = 0x0000_8000;
pub const CLIENT_MULTI_STATEMENTS: u32 = 0x0001_0000;
pub const CLIENT_MULTI_RESULTS: u32 = 0x0002_0000;
pub const CLIENT_PS_MULTI_RESULTS: u32 = 0x0004_0000;
pub const CLIENT_PLUGIN_AUTH: u32 = 0x0008_0000;
pub const CLIENT_CONNECT_ATTRS: u32 = 0x0010_0000;
pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 0x0020_0000;
pub const CLIENT_SESSION_TRACK: u32 = 0x0080_0000;
pub const CLIENT_DEPRECATE_EOF: u32 = 0x0100_0000;

pub const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;

pub const COM_QUIT: u8 = 0x01;
pub const COM_INIT_DB: u8 = 0x02;
pub const COM_QUERY: u8 = 0x03;
pub const COM_PING: u8 = 0x0e;
pub const COM_RESET_CONNECTION: u8 = 0x1f;

/// `SERVER_SESSION_STATE_CHANGED`: the OK/EOF of a statement that changed tracked session state.
pub const SERVER_SESSION_STATE_CHANGED: u16 = 0x4000;

const DEFAULT_CAPS: u32 = CLIENT_LONG_PASSWORD
    | CLIENT_LONG_FLAG
    | CLIENT_PROTOCOL_41
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_STATEMENTS
    | CLIENT_MULTI_RESULTS
    | CLIENT_PS_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | CLIENT_LOCAL_FILES;

const READ_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_PAYLOAD: usize = 0xff_ffff;
const NATIVE_PLUGIN: &str = "mysql_native_password";
const UTF8MB4_GENERAL_CI: u8 = 45;

/// Any byte stream the client can run over (TCP, unix socket, an in-memory duplex).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// One result of a text query: the rows of a result set, or none for an OK.
pub type Rows = Vec<Vec<Option<String>>>;

pub struct RawClient {
    stream: BufReader<Box<dyn Stream>>,
    /// Capabilities the server advertised (lower and upper 16 bits of the greeting).
    pub server_caps: u32,
    /// Capabilities sent in the HandshakeResponse41.
    pub caps: u32,
    pub greeting_payload: Vec<u8>,
    pub server_version: String,
    pub connection_id: u32,
    /// The TLS session this client negotiated, when it logged in with [`RawClient::connect_tls`].
    pub tls: Option<TlsInfo>,
}

/// What the client's own end of a TLS session says it uses.
#[derive(Debug, Clone)]
pub struct TlsInfo {
    /// `TLSv1_3`, `TLSv1_2`.
    pub version: String,
    /// e.g. `TLS13_AES_256_GCM_SHA384`.
    pub cipher: String,
    /// The DER of the leaf certificate the server presented (empty if it sent none).
    pub peer_cert: Vec<u8>,
}

impl RawClient {
    /// Logs in over TCP. `extra_caps` are added to, and `removed_caps` taken from, the
    /// default set intersected with the server's.
    pub async fn connect_tcp(
        addr: &str,
        user: &str,
        pass: &str,
        db: Option<&str>,
        extra_caps: u32,
        removed_caps: u32,
    ) -> Result<RawClient, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Self::login(Box::new(stream), user, pass, db, extra_caps, removed_caps).await
    }

    pub async fn connect_unix(
        path: &Path,
        user: &str,
        pass: &str,
        db: Option<&str>,
        extra_caps: u32,
        removed_caps: u32,
    ) -> Result<RawClient, String> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| format!("connect {}: {e}", path.display()))?;
        Self::login(Box::new(stream), user, pass, db, extra_caps, removed_caps).await
    }

    /// Reads the greeting from `stream`, answers it, and follows an auth switch to OK or ERR.
    pub async fn login(
        stream: Box<dyn Stream>,
        user: &str,
        pass: &str,
        db: Option<&str>,
        extra_caps: u32,
        removed_caps: u32,
    ) -> Result<RawClient, String> {
        let mut client = RawClient::greeted(stream).await?;
        let greeting = client.take_greeting(db, extra_caps, removed_caps)?;
        client.authenticate(1, &greeting, user, pass, db).await?;
        Ok(client)
    }

    /// Logs in over TLS: greeting, SSLRequest (sequence 1), the TLS handshake with `config`
    /// for `host`, then the HandshakeResponse inside it (sequence 2). Fails when the greeting
    /// does not offer CLIENT_SSL.
    #[allow(clippy::too_many_arguments)]
    pub async fn connect_tls(
        addr: &str,
        config: Arc<rustls::ClientConfig>,
        host: &str,
        user: &str,
        pass: &str,
        db: Option<&str>,
        extra_caps: u32,
        removed_caps: u32,
    ) -> Result<RawClient, String> {
        let mut tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let (_, payload) = tokio::time::timeout(READ_TIMEOUT, read_packet_from(&mut tcp))
            .await
            .map_err(|_| format!("no greeting within {READ_TIMEOUT:?}"))??;
        if payload.first() == Some(&0xff) {
            return Err(parse_err(&payload));
        }
        let offered = parse_greeting(&payload)?.caps;
        if offered & CLIENT_SSL == 0 {
            return Err("the greeting does not offer CLIENT_SSL".to_string());
        }
        let caps = choose_caps(offered, db, extra_caps | CLIENT_SSL, removed_caps);
        let request = ssl_request(caps);
        let mut header = u32::try_from(request.len()).unwrap_or(0).to_le_bytes();
        header[3] = 1;
        tcp.write_all(&[&header[..], &request].concat())
            .await
            .map_err(|e| format!("write the SSLRequest: {e}"))?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("server name {host}: {e}"))?;
        let tls = tokio::time::timeout(READ_TIMEOUT, connector.connect(name, tcp))
            .await
            .map_err(|_| format!("no TLS handshake within {READ_TIMEOUT:?}"))?
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let (_, session) = tls.get_ref();
        let info = TlsInfo {
            version: session
                .protocol_version()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default(),
            cipher: session
                .negotiated_cipher_suite()
                .map(|c| format!("{:?}", c.suite()))
                .unwrap_or_default(),
            peer_cert: session
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|leaf| leaf.to_vec())
                .unwrap_or_default(),
        };
        let mut client = RawClient::new(Box::new(tls));
        client.tls = Some(info);
        client.greeting_payload = payload;
        let greeting = client.take_greeting(db, extra_caps | CLIENT_SSL, removed_caps)?;
        client.authenticate(2, &greeting, user, pass, db).await?;
        Ok(client)
    }

    /// Parses the greeting already read and chooses the capabilities to answer with.
    fn take_greeting(
        &mut self,
        db: Option<&str>,
        extra_caps: u32,
        removed_caps: u32,
    ) -> Result<Greeting, String> {
        let greeting = parse_greeting(&self.greeting_payload)?;
        self.server_caps = greeting.caps;
        self.server_version = greeting.version.clone();
        self.connection_id = greeting.connection_id;
        self.caps = choose_caps(greeting.caps, db, extra_caps, removed_caps);
        Ok(greeting)
    }

    /// Sends the HandshakeResponse with sequence id `seq` and follows an auth switch.
    async fn authenticate(
        &mut self,
        seq: u8,
        greeting: &Greeting,
        user: &str,
        pass: &str,
        db: Option<&str>,
    ) -> Result<(), String> {
        let plugin = if greeting.plugin.is_empty() {
            NATIVE_PLUGIN
        } else {
            greeting.plugin.as_str()
        };
        let auth = auth_response(plugin, &greeting.nonce, pass);
        let response = handshake_response(self.caps, user, &auth, db, plugin);
        self.send_packet(seq, &response).await?;

        let (seq, reply) = self.read_packet().await?;
        match reply.first() {
            Some(0x00) => Ok(()),
            Some(0xff) => Err(parse_err(&reply)),
            Some(0xfe) => {
                let (plugin, nonce) = parse_auth_switch(&reply)?;
                if plugin != NATIVE_PLUGIN {
                    return Err(format!("unsupported auth switch to {plugin}"));
                }
                let auth = auth_response(&plugin, &nonce, pass);
                self.send_packet(seq.wrapping_add(1), &auth).await?;
                self.read_ok().await
            }
            _ => Err(format!("unexpected auth reply {reply:02x?}")),
        }
    }

    fn new(stream: Box<dyn Stream>) -> RawClient {
        RawClient {
            stream: BufReader::new(stream),
            server_caps: 0,
            caps: 0,
            greeting_payload: Vec::new(),
            server_version: String::new(),
            connection_id: 0,
            tls: None,
        }
    }

    /// Reads only the server's first packet: for tests that want to do the rest by hand.
    /// Fails with the ERR's `code: message` when the server (or proxy) refuses at once.
    pub async fn greeted(stream: Box<dyn Stream>) -> Result<RawClient, String> {
        let mut client = RawClient::new(stream);
        let (_, greeting) = client.read_packet().await?;
        if greeting.first() == Some(&0xff) {
            return Err(parse_err(&greeting));
        }
        client.greeting_payload = greeting;
        Ok(client)
    }

    /// Puts another stream under the client (after login: a compression layer, say). `wrap`
    /// gets the stream and the bytes already read from it but not parsed yet.
    #[allow(dead_code)]
    pub fn rewrap(self, wrap: impl FnOnce(Box<dyn Stream>, Vec<u8>) -> Box<dyn Stream>) -> Self {
        let buffered = self.stream.buffer().to_vec();
        let stream = wrap(self.stream.into_inner(), buffered);
        RawClient {
            stream: BufReader::new(stream),
            ..self
        }
    }

    pub async fn send_packet(&mut self, seq: u8, payload: &[u8]) -> Result<(), String> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l as usize <= MAX_PAYLOAD)
            .ok_or_else(|| format!("payload of {} bytes needs splitting", payload.len()))?;
        let mut bytes = Vec::with_capacity(4 + payload.len());
        bytes.extend_from_slice(&len.to_le_bytes()[..3]);
        bytes.push(seq);
        bytes.extend_from_slice(payload);
        self.send_raw(&bytes).await
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), String> {
        let stream = self.stream.get_mut();
        stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))?;
        stream.flush().await.map_err(|e| format!("flush: {e}"))
    }

    /// Sends a command with sequence id 0, as every command starts.
    pub async fn send_command(&mut self, command: u8, body: &[u8]) -> Result<(), String> {
        let mut payload = Vec::with_capacity(1 + body.len());
        payload.push(command);
        payload.extend_from_slice(body);
        self.send_packet(0, &payload).await
    }

    /// One physical packet: (sequence id, payload). EOF and a 30 s silence are errors.
    pub async fn read_packet(&mut self) -> Result<(u8, Vec<u8>), String> {
        tokio::time::timeout(READ_TIMEOUT, self.read_packet_inner())
            .await
            .map_err(|_| format!("no packet within {READ_TIMEOUT:?}"))?
    }

    async fn read_packet_inner(&mut self) -> Result<(u8, Vec<u8>), String> {
        let mut head = [0u8; 4];
        self.stream
            .read_exact(&mut head)
            .await
            .map_err(|e| format!("read header: {e}"))?;
        let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
        let mut payload = vec![0u8; len];
        self.stream
            .read_exact(&mut payload)
            .await
            .map_err(|e| format!("read payload of {len} bytes: {e}"))?;
        Ok((head[3], payload))
    }

    /// Exactly `n` bytes as they come, whatever the framing (e.g. compressed frames).
    #[allow(dead_code)]
    pub async fn read_bytes(&mut self, n: usize) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0u8; n];
        tokio::time::timeout(READ_TIMEOUT, self.stream.read_exact(&mut bytes))
            .await
            .map_err(|_| format!("no {n} bytes within {READ_TIMEOUT:?}"))?
            .map_err(|e| format!("read {n} bytes: {e}"))?;
        Ok(bytes)
    }

    /// One logical packet: joins 16 MiB chunks. Returns the last chunk's sequence id.
    pub async fn read_logical(&mut self) -> Result<(u8, Vec<u8>), String> {
        let (mut seq, mut payload) = self.read_packet().await?;
        let mut last_len = payload.len();
        while last_len == MAX_PAYLOAD {
            let (s, more) = self.read_packet().await?;
            seq = s;
            last_len = more.len();
            payload.extend_from_slice(&more);
        }
        Ok((seq, payload))
    }

    /// Reads packets up to and including an EOF/OK-with-0xFE or an ERR.
    pub async fn read_until_eof_or_err(&mut self) -> Result<Vec<(u8, Vec<u8>)>, String> {
        let mut packets = Vec::new();
        loop {
            let packet = self.read_packet().await?;
            let end = is_terminator(&packet.1) || packet.1.first() == Some(&0xff);
            packets.push(packet);
            if end {
                return Ok(packets);
            }
        }
    }

    /// Expects OK; an ERR becomes `Err("code: message")`.
    pub async fn read_ok(&mut self) -> Result<(), String> {
        let (_, reply) = self.read_packet().await?;
        match reply.first() {
            Some(0x00) => Ok(()),
            Some(0xff) => Err(parse_err(&reply)),
            _ => Err(format!("expected OK, got {reply:02x?}")),
        }
    }

    /// Runs a text query and returns the rows of its first result; later results of a
    /// multi-statement are read (to stay in sync) and dropped.
    pub async fn query_text(&mut self, sql: &str) -> Result<Rows, String> {
        let mut results = self.query_results(sql).await?;
        Ok(if results.is_empty() {
            Vec::new()
        } else {
            results.swap_remove(0)
        })
    }

    /// Runs a text query and returns every result: rows for a result set, empty for an OK.
    /// An ERR anywhere ends the response and becomes `Err("code: message")`.
    pub async fn query_results(&mut self, sql: &str) -> Result<Vec<Rows>, String> {
        self.send_command(COM_QUERY, sql.as_bytes()).await?;
        self.read_results().await
    }

    /// Reads every result of a text query already sent (see [`query_results`](Self::query_results)).
    pub async fn read_results(&mut self) -> Result<Vec<Rows>, String> {
        let mut results = Vec::new();
        loop {
            let (_, first) = self.read_logical().await?;
            let status = match first.first() {
                Some(0x00) => {
                    results.push(Vec::new());
                    ok_status(&first, self.caps)?
                }
                Some(0xff) => return Err(parse_err(&first)),
                Some(0xfb) => return Err("LOCAL INFILE request: not handled here".to_string()),
                _ => {
                    let (rows, status) = self.read_result_set(&first).await?;
                    results.push(rows);
                    status
                }
            };
            if status & SERVER_MORE_RESULTS_EXISTS == 0 {
                return Ok(results);
            }
        }
    }

    /// Runs a text query of any bytes and reports what the server's packets said of it: see
    /// [`Tracked`]. Only a broken connection is an `Err`; an ERR from the server ends the
    /// response and is kept in [`Tracked::error`], with what came before it.
    pub async fn query_tracked(&mut self, sql: &[u8]) -> Result<Tracked, String> {
        self.send_command(COM_QUERY, sql).await?;
        let mut tracked = Tracked::default();
        loop {
            let (_, first) = self.read_logical().await?;
            let status = match first.first() {
                Some(0x00) => {
                    tracked.results.push(Vec::new());
                    let ok = parse_ok(&first, self.caps)?;
                    tracked.affected_rows += ok.affected_rows;
                    if !ok.session_state.is_empty() {
                        tracked.session_state.push(ok.session_state);
                    }
                    ok.status
                }
                Some(0xff) => {
                    tracked.error = Some(parse_err(&first));
                    return Ok(tracked);
                }
                Some(0xfb) => return Err("LOCAL INFILE request: not handled here".to_string()),
                _ => match self.read_result_set(&first).await {
                    Ok((rows, status)) => {
                        tracked.results.push(rows);
                        status
                    }
                    // An ERR in place of a row: the server's error, the stream in sync.
                    Err(e) if e.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
                        tracked.error = Some(e);
                        return Ok(tracked);
                    }
                    Err(e) => return Err(e),
                },
            };
            tracked.status |= status;
            if status & SERVER_MORE_RESULTS_EXISTS == 0 {
                return Ok(tracked);
            }
        }
    }

    /// COM_RESET_CONNECTION: the session as a fresh login leaves it (user variables, temporary
    /// tables, locks, prepared statements and session variables reset), same connection.
    pub async fn reset_connection(&mut self) -> Result<(), String> {
        self.send_command(COM_RESET_CONNECTION, &[]).await?;
        self.read_ok().await
    }

    /// Column definitions, [EOF], rows, then EOF or OK-with-0xFE; returns rows and status.
    async fn read_result_set(&mut self, first: &[u8]) -> Result<(Rows, u16), String> {
        let mut cur = Cursor::new(first);
        let columns = cur.lenenc()?.ok_or("NULL column count")?;
        for _ in 0..columns {
            self.read_logical().await?;
        }
        let deprecate_eof = self.caps & CLIENT_DEPRECATE_EOF != 0;
        if !deprecate_eof {
            let (_, eof) = self.read_packet().await?;
            if !is_terminator(&eof) {
                return Err(format!("expected EOF after columns, got {eof:02x?}"));
            }
        }
        let mut rows = Vec::new();
        loop {
            let (_, packet) = self.read_logical().await?;
            if packet.first() == Some(&0xff) {
                return Err(parse_err(&packet));
            }
            if is_terminator(&packet) {
                let status = if deprecate_eof {
                    ok_status(&packet, self.caps)?
                } else {
                    eof_status(&packet)?
                };
                return Ok((rows, status));
            }
            let mut cur = Cursor::new(&packet);
            let mut row = Vec::new();
            for _ in 0..columns {
                row.push(
                    cur.lenenc_bytes()?
                        .map(|b| String::from_utf8_lossy(b).into_owned()),
                );
            }
            rows.push(row);
        }
    }

    pub async fn ping(&mut self) -> Result<(), String> {
        self.send_command(COM_PING, &[]).await?;
        self.read_ok().await
    }

    /// Sends COM_QUIT; the server closes without answering.
    pub async fn quit(mut self) -> Result<(), String> {
        self.send_command(COM_QUIT, &[]).await
    }
}

/// The default set within what the server offers, `extra_caps` added, `removed_caps` taken.
fn choose_caps(offered: u32, db: Option<&str>, extra_caps: u32, removed_caps: u32) -> u32 {
    let mut caps = DEFAULT_CAPS & offered;
    if db.is_some() {
        caps |= CLIENT_CONNECT_WITH_DB & offered;
    }
    (caps | extra_caps) & !removed_caps
}

/// One packet from a bare stream: (sequence id, payload).
pub async fn read_packet_from<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 4];
    stream
        .read_exact(&mut head)
        .await
        .map_err(|e| format!("read header: {e}"))?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
    let mut payload = vec![0u8; len];
    stream
        .read_exact(&mut payload)
        .await
        .map_err(|e| format!("read payload of {len} bytes: {e}"))?;
    Ok((head[3], payload))
}

/// The 32-byte SSLRequest payload: capabilities (CLIENT_SSL among them), max packet size,
/// character set, filler.
pub fn ssl_request(caps: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(32);
    p.extend_from_slice(&(caps | CLIENT_SSL).to_le_bytes());
    p.extend_from_slice(&(16u32 << 20).to_le_bytes());
    p.push(UTF8MB4_GENERAL_CI);
    p.extend_from_slice(&[0; 23]);
    p
}

/// Reads one packet from a bare stream: (sequence id, payload); panics after 30 s or on EOF.
pub async fn read_raw_packet<S: AsyncRead + Unpin>(stream: &mut S) -> (u8, Vec<u8>) {
    let read = async {
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).await?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).await?;
        Ok::<_, std::io::Error>((head[3], payload))
    };
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => panic!("reading a packet: {e}"),
        Err(_) => panic!("no packet within {READ_TIMEOUT:?}"),
    }
}

pub async fn connect_raw(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_nodelay(true)
        .unwrap_or_else(|e| panic!("set_nodelay: {e}"));
    stream
}

/// What the client needs from a HandshakeV10.
pub struct Greeting {
    pub version: String,
    pub connection_id: u32,
    pub caps: u32,
    pub nonce: Vec<u8>,
    pub plugin: String,
}

pub fn parse_greeting(payload: &[u8]) -> Result<Greeting, String> {
    let mut cur = Cursor::new(payload);
    let protocol = cur.u8()?;
    if protocol != 10 {
        return Err(format!("protocol version {protocol}, expected 10"));
    }
    let version = String::from_utf8_lossy(cur.nul_str()?).into_owned();
    let connection_id = cur.u32()?;
    let mut nonce = cur.take(8)?.to_vec();
    cur.take(1)?; // filler
    let mut caps = u32::from(cur.u16()?);
    let mut plugin = String::new();
    if cur.remaining() > 0 {
        cur.take(1)?; // charset
        cur.take(2)?; // status
        caps |= u32::from(cur.u16()?) << 16;
        let auth_len = usize::from(cur.u8()?);
        cur.take(10)?; // reserved (MariaDB: 6 filler + 4 extended caps)
        if caps & CLIENT_SECURE_CONNECTION != 0 {
            let part2 = auth_len.saturating_sub(8).max(13);
            let rest = cur.take(part2)?;
            // The second part ends with a NUL that is not part of the nonce.
            nonce.extend_from_slice(rest.strip_suffix(&[0]).unwrap_or(rest));
        }
        if caps & CLIENT_PLUGIN_AUTH != 0 {
            let rest = cur.rest();
            let name = rest.strip_suffix(&[0]).unwrap_or(rest);
            plugin = String::from_utf8_lossy(name).into_owned();
        }
    }
    Ok(Greeting {
        version,
        connection_id,
        caps,
        nonce,
        plugin,
    })
}

/// Builds a HandshakeResponse41 payload (without the 4-byte header).
pub fn handshake_response(
    caps: u32,
    user: &str,
    auth: &[u8],
    db: Option<&str>,
    plugin: &str,
) -> Vec<u8> {
    let mut p = Vec::with_capacity(64 + user.len());
    p.extend_from_slice(&caps.to_le_bytes());
    p.extend_from_slice(&(16u32 << 20).to_le_bytes()); // max packet size
    p.push(UTF8MB4_GENERAL_CI);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    if caps & (CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | CLIENT_SECURE_CONNECTION) != 0 {
        // A one-byte length and a lenenc length agree below 251 bytes.
        p.push(u8::try_from(auth.len()).unwrap_or(u8::MAX));
        p.extend_from_slice(auth);
    } else {
        p.extend_from_slice(auth);
        p.push(0);
    }
    if caps & CLIENT_CONNECT_WITH_DB != 0 {
        p.extend_from_slice(db.unwrap_or("").as_bytes());
        p.push(0);
    }
    if caps & CLIENT_PLUGIN_AUTH != 0 {
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
    }
    if caps & CLIENT_CONNECT_ATTRS != 0 {
        p.push(0); // no attributes
    }
    p
}

fn auth_response(plugin: &str, nonce: &[u8], pass: &str) -> Vec<u8> {
    if plugin != NATIVE_PLUGIN || pass.is_empty() {
        // Unknown plugin: answer something; the server will switch to one we know.
        return Vec::new();
    }
    scramble_native(nonce, pass.as_bytes())
        .map(|s| s.to_vec())
        .unwrap_or_default()
}

fn parse_auth_switch(payload: &[u8]) -> Result<(String, Vec<u8>), String> {
    let mut cur = Cursor::new(payload);
    cur.u8()?; // 0xFE
    let plugin = String::from_utf8_lossy(cur.nul_str()?).into_owned();
    let rest = cur.rest();
    let nonce = rest.strip_suffix(&[0]).unwrap_or(rest).to_vec();
    Ok((plugin, nonce))
}

/// `"code: message"`, with or without the `#SQLSTATE` marker (pre-handshake ERRs lack it).
pub fn parse_err(payload: &[u8]) -> String {
    let code = match payload {
        [0xff, lo, hi, ..] => u16::from_le_bytes([*lo, *hi]),
        _ => return format!("malformed ERR {payload:02x?}"),
    };
    let mut msg = &payload[3..];
    if msg.first() == Some(&b'#') && msg.len() >= 6 {
        msg = &msg[6..];
    }
    format!("{code}: {}", String::from_utf8_lossy(msg))
}

/// An EOF packet, or an OK sent in its place under DEPRECATE_EOF. A row that starts with 0xFE
/// carries an 8-byte length, so it fills a whole 16 MiB packet.
fn is_terminator(payload: &[u8]) -> bool {
    payload.first() == Some(&0xfe) && payload.len() < MAX_PAYLOAD
}

/// What a text query's response said, beyond its rows: see [`RawClient::query_tracked`].
#[derive(Debug, Default)]
pub struct Tracked {
    /// Every result before the end or the error: rows for a result set, empty for an OK.
    pub results: Vec<Rows>,
    /// The OR of the status flags of every OK/EOF that ended a result.
    pub status: u16,
    /// The affected rows of every OK, summed.
    pub affected_rows: u64,
    /// The raw session-state-change blocks of the OKs that carried one
    /// (`CLIENT_SESSION_TRACK` and [`SERVER_SESSION_STATE_CHANGED`]).
    pub session_state: Vec<Vec<u8>>,
    /// The server's ERR (`code: message`) that ended the response, if any.
    pub error: Option<String>,
}

/// The fields of an OK packet [`Tracked`] keeps.
struct Ok41 {
    affected_rows: u64,
    status: u16,
    session_state: Vec<u8>,
}

/// OK: header, affected rows, last insert id, status, warnings, then (with
/// `CLIENT_SESSION_TRACK`) the info string and, when the status says so, the session state.
fn parse_ok(payload: &[u8], caps: u32) -> Result<Ok41, String> {
    let mut cur = Cursor::new(payload);
    cur.u8()?;
    let affected_rows = cur.lenenc()?.unwrap_or(0);
    cur.lenenc()?; // last insert id
    if caps & CLIENT_PROTOCOL_41 == 0 {
        return Ok(Ok41 {
            affected_rows,
            status: 0,
            session_state: Vec::new(),
        });
    }
    let status = cur.u16()?;
    cur.u16()?; // warnings
    let mut session_state = Vec::new();
    if caps & CLIENT_SESSION_TRACK != 0 && cur.remaining() > 0 {
        cur.lenenc_bytes()?; // info
        if status & SERVER_SESSION_STATE_CHANGED != 0 && cur.remaining() > 0 {
            session_state = cur.lenenc_bytes()?.unwrap_or_default().to_vec();
        }
    }
    Ok(Ok41 {
        affected_rows,
        status,
        session_state,
    })
}

fn ok_status(payload: &[u8], caps: u32) -> Result<u16, String> {
    let mut cur = Cursor::new(payload);
    cur.u8()?;
    cur.lenenc()?; // affected rows
    cur.lenenc()?; // last insert id
    if caps & CLIENT_PROTOCOL_41 == 0 {
        return Ok(0);
    }
    cur.u16()
}

fn eof_status(payload: &[u8]) -> Result<u16, String> {
    let mut cur = Cursor::new(payload);
    cur.u8()?;
    if cur.remaining() < 4 {
        return Ok(0); // pre-4.1 EOF: no status
    }
    cur.u16()?; // warnings
    cur.u16()
}

/// Bounds-checked reads over a payload; every short read is an error, never a panic.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.remaining() < n {
            return Err(format!(
                "packet too short: need {n} bytes at offset {}, have {}",
                self.pos,
                self.remaining()
            ));
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn rest(&mut self) -> &'a [u8] {
        let bytes = &self.buf[self.pos..];
        self.pos = self.buf.len();
        bytes
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn nul_str(&mut self) -> Result<&'a [u8], String> {
        let rest = &self.buf[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or("missing NUL terminator")?;
        self.pos += end + 1;
        Ok(&rest[..end])
    }

    /// A length-encoded integer; `None` is the 0xFB NULL marker.
    fn lenenc(&mut self) -> Result<Option<u64>, String> {
        let width = match self.u8()? {
            0xfb => return Ok(None),
            b @ 0..=0xfa => return Ok(Some(u64::from(b))),
            0xfc => 2,
            0xfd => 3,
            0xfe => 8,
            0xff => return Err("0xFF is not a length".to_string()),
        };
        let mut bytes = [0u8; 8];
        bytes[..width].copy_from_slice(self.take(width)?);
        Ok(Some(u64::from_le_bytes(bytes)))
    }

    fn lenenc_bytes(&mut self) -> Result<Option<&'a [u8]>, String> {
        match self.lenenc()? {
            None => Ok(None),
            Some(len) => {
                let len = usize::try_from(len).map_err(|_| "length overflows usize")?;
                self.take(len).map(Some)
            }
        }
    }
}
