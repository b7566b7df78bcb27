//! A TCP relay in front of a real MariaDB that the test can turn faulty: pass everything, stop
//! answering after the server's greeting (a login that is never answered), or cut every open
//! connection at once (a backend that closes sessions mid-command). The server behind it is real;
//! only the faults are staged.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

const PASS: u8 = 0;
const MUTE: u8 = 1;

pub struct FaultGate {
    pub addr: SocketAddr,
    mode: Arc<AtomicU8>,
    live: Arc<Mutex<Vec<AbortHandle>>>,
    _thread: std::thread::JoinHandle<()>,
}

impl FaultGate {
    /// A gate in front of `target` (`host:port`), passing everything.
    pub fn start(target: &str) -> FaultGate {
        let target: SocketAddr = target.parse().expect("target address");
        let mode = Arc::new(AtomicU8::new(PASS));
        let live: Arc<Mutex<Vec<AbortHandle>>> = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (m, l) = (Arc::clone(&mode), Arc::clone(&live));
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("gate runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("gate binds");
                tx.send(listener.local_addr().expect("gate address"))
                    .expect("report address");
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let muted = m.load(SeqCst) == MUTE;
                    let task = tokio::spawn(relay(client, target, muted));
                    let mut live = l.lock().expect("live list");
                    live.retain(|h| !h.is_finished());
                    live.push(task.abort_handle());
                }
            });
        });
        let addr = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("gate started");
        FaultGate {
            addr,
            mode,
            live,
            _thread: thread,
        }
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// New connections pass every byte both ways.
    pub fn pass(&self) {
        self.mode.store(PASS, SeqCst);
    }

    /// New connections get the server's greeting, then nothing: what the client sends is read
    /// and dropped, so its login is never answered.
    pub fn mute(&self) {
        self.mode.store(MUTE, SeqCst);
    }

    /// Closes every connection open through the gate now, both sides.
    pub fn sever(&self) {
        for h in self.live.lock().expect("live list").drain(..) {
            h.abort();
        }
    }
}

async fn relay(mut client: TcpStream, target: SocketAddr, muted: bool) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    if !muted {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        return;
    }
    // Forward the greeting (one read is enough on loopback), then swallow the client's bytes.
    let mut buf = vec![0u8; 16 * 1024];
    let Ok(n) = server.read(&mut buf).await else {
        return;
    };
    if n == 0 || client.write_all(&buf[..n]).await.is_err() {
        return;
    }
    while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
}
