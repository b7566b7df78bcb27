//! PROXY protocol from the client side, for the tests of `accept_proxy_protocol`: v1 and v2
//! headers built by hand (not by the code under test) and an L4 load-balancer stand-in that
//! connects from a chosen loopback address, writes a header and splices.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::rawclient::RawClient;

/// A v1 header naming `source` as the client and 127.0.0.1:`dest_port` as the destination.
pub fn v1(source: SocketAddr, dest_port: u16) -> Vec<u8> {
    format!(
        "PROXY TCP4 {} 127.0.0.1 {} {dest_port}\r\n",
        source.ip(),
        source.port()
    )
    .into_bytes()
}

/// The same as a v2 PROXY command over TCP/IPv4.
pub fn v2(source: SocketAddr, dest_port: u16) -> Vec<u8> {
    let SocketAddr::V4(s) = source else {
        panic!("v4 only here")
    };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&s.ip().octets());
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&s.port().to_be_bytes());
    h.extend_from_slice(&dest_port.to_be_bytes());
    h
}

/// A TCP connection to 127.0.0.1:`port` from `from` (a loopback address).
pub async fn connect_from(from: &str, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .expect("connect to mysql-lb")
}

/// The L4 stand-in: accepts on 127.0.0.1, connects to 127.0.0.1:`port` from `from`, writes
/// `header` and splices. Returns the address clients connect to.
pub async fn balancer(from: &'static str, port: u16, header: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let header = header.clone();
            tokio::spawn(async move {
                let mut upstream = connect_from(from, port).await;
                upstream.write_all(&header).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    addr
}

/// HAProxy (its `send-proxy-v2` and `send-proxy` server options, as docs/src/proxy-protocol.md
/// configures it), killed by pid on drop.
pub struct Haproxy(pub std::process::Child);

impl Haproxy {
    /// Starts `haproxy -db` on `cfg` (a config file's text), written into `dir`.
    pub fn start(dir: &std::path::Path, cfg: &str) -> Self {
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        Haproxy(
            std::process::Command::new("haproxy")
                .args(["-db", "-f"])
                .arg(&path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("start haproxy (scripts/install-deps.sh installs it)"),
        )
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Logs in to `to` over TCP from a socket bound to `from_ip`; returns the client and its own
/// address (what a server told by a PROXY header should see).
pub async fn login_from(
    from_ip: &str,
    to: SocketAddr,
    user: &str,
    pass: &str,
) -> Result<(RawClient, SocketAddr), String> {
    let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
    let bind: SocketAddr = format!("{from_ip}:0").parse().map_err(|_| "bad ip")?;
    socket.bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    let stream = socket
        .connect(to)
        .await
        .map_err(|e| format!("connect {to}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let local = stream.local_addr().map_err(|e| e.to_string())?;
    let client = RawClient::login(Box::new(stream), user, pass, None, 0, 0).await?;
    Ok((client, local))
}

/// One text value.
pub async fn value(client: &mut RawClient, sql: &str) -> String {
    let rows = client.query_text(sql).await.expect(sql);
    rows.first()
        .and_then(|r| r.first().cloned().flatten())
        .unwrap_or_else(|| panic!("{sql}: no value in {rows:?}"))
}

/// The `HOST` the server shows for this session in the processlist (`ip:port`, or `localhost`).
pub async fn processlist_host(client: &mut RawClient) -> String {
    value(
        client,
        "SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
    )
    .await
}
