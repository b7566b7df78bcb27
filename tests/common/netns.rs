//! Network namespaces for tests that need a network of their own: a peer that vanishes, or a
//! server that sees the proxy at an address other than loopback.
//!
//! A namespace belongs to a thread and to the threads (and processes) it spawns, and a socket
//! stays in the namespace it was made in: [`Netns::inside`] runs a closure on a thread that
//! joined one, so a proxy or a `mariadbd` started there lives there. Unix sockets cross
//! namespaces, which is how tests reach a server in one without routing.
//! Needs root and iproute2 (`ip netns`), as the tests run here.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs `program` with `args`; panics with its stderr when it fails.
pub fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}`: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with only its loopback up. Removed when dropped.
pub struct Netns {
    name: String,
}

impl Netns {
    pub fn new() -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "mlbns{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `command` inside the namespace (`ip netns exec`); panics when it fails.
    pub fn exec(&self, command: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(command);
        run("ip", &all);
    }

    /// Gives the namespace's loopback another address (e.g. `10.77.0.1/32`), one that is not
    /// a loopback address for anything that judges it by its value.
    pub fn add_address(&self, cidr: &str) {
        self.exec(&["ip", "addr", "add", cidr, "dev", "lo"]);
    }

    /// A `Command` for `program` that runs inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// From now on every packet on the namespace's loopback vanishes without an answer: an
    /// nftables input chain with policy drop discards it on arrival, so the sender gets no error
    /// either (as when a peer's host loses power).
    pub fn cut(&self) {
        self.exec(&["nft", "add table inet vanish"]);
        self.exec(&[
            "nft",
            "add chain inet vanish input { type filter hook input priority filter; policy drop; }",
        ]);
    }

    /// Joins `self` and `other` with a veth pair on 198.18.0.0/30 (the range set aside for network
    /// tests): `self` gets 198.18.0.1, `other` 198.18.0.2. Both namespaces are private, so every
    /// pair may use the same addresses.
    pub fn link(&self, other: &Netns) -> (Ipv4Addr, Ipv4Addr) {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        run(
            "ip",
            &[
                "link",
                "add",
                "veth-a",
                "netns",
                &self.name,
                "type",
                "veth",
                "peer",
                "name",
                "veth-b",
                "netns",
                &other.name,
            ],
        );
        for (ns, dev, addr) in [(self, "veth-a", a), (other, "veth-b", b)] {
            ns.exec(&["ip", "addr", "add", &format!("{addr}/30"), "dev", dev]);
            ns.exec(&["ip", "link", "set", dev, "up"]);
        }
        (a, b)
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Runs `f` on a thread that has joined the namespace: sockets it creates, and threads and
    /// processes it spawns, live there.
    pub fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = self.path();
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("namespace file");
            // SAFETY: a valid descriptor of a network namespace; only this thread moves.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("thread in the namespace")
    }

    /// Threads of this process whose name starts with `prefix` and that are in this namespace.
    pub fn threads_named(&self, prefix: &str) -> usize {
        let inode = std::fs::metadata(self.path())
            .expect("namespace file")
            .ino();
        let here = format!("net:[{inode}]");
        let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
        tasks
            .filter_map(Result::ok)
            .filter(|task| {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                let net = std::fs::read_link(task.path().join("ns/net")).unwrap_or_default();
                comm.starts_with(prefix) && net.as_os_str() == here.as_str()
            })
            .count()
    }

    /// Answers every DNS query made in the namespace with NXDOMAIN, at once (see [`NoNames`]).
    pub fn no_names(&self) -> NoNames {
        let servers = resolv_conf_nameservers();
        let mut sockets = Vec::new();
        for ip in servers {
            if !ip.is_loopback() {
                let (family, prefix) = if ip.is_ipv4() {
                    ("-4", 32)
                } else {
                    ("-6", 128)
                };
                let addr = format!("{ip}/{prefix}");
                self.exec(&["ip", family, "addr", "add", &addr, "dev", "lo"]);
            }
            let socket = self.inside(move || UdpSocket::bind((ip, 53)).expect("bind DNS port"));
            sockets.push(socket);
        }
        NoNames::serve(sockets)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// The name servers the C library asks (`nameserver` lines of /etc/resolv.conf; 127.0.0.1 when
/// there are none, as glibc does).
fn resolv_conf_nameservers() -> Vec<IpAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut servers: Vec<IpAddr> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse().ok())
        .collect();
    if servers.is_empty() {
        servers.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    servers
}

/// A DNS server that knows no names, at the name servers' addresses inside a namespace. A
/// reverse lookup there is then answered at once and for good (no such name), as on a network
/// where the proxy's address has no PTR record, rather than failing for a while: MariaDB keeps a
/// host it could not look up unvalidated and never blocks it, so without an answer there would
/// be nothing to test. Stops when dropped.
pub struct NoNames {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl NoNames {
    fn serve(sockets: Vec<UdpSocket>) -> NoNames {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = sockets
            .into_iter()
            .map(|socket| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || answer_nxdomain(&socket, &stop))
            })
            .collect();
        NoNames { stop, threads }
    }
}

impl Drop for NoNames {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn answer_nxdomain(socket: &UdpSocket, stop: &AtomicBool) {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    let mut query = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = socket.recv_from(&mut query) else {
            continue;
        };
        let Some(end) = question_end(&query[..n]) else {
            continue;
        };
        // The query's id, opcode and RD bit; QR, RA and rcode 3 (NXDOMAIN); its question only.
        let mut reply = query[..end].to_vec();
        reply[2] = 0x80 | (query[2] & 0x79);
        reply[3] = 0x80 | 3;
        reply[6..12].fill(0);
        let _ = socket.send_to(&reply, from);
    }
}

/// Where the first question of a DNS message ends (its name's labels, type and class).
fn question_end(message: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let len = usize::from(*message.get(at)?);
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    let end = at + 4;
    (end <= message.len()).then_some(end)
}
