//! A network namespace of the test's own, for what loopback alone cannot show: a peer that
//! vanishes (its loopback cut), or a non-loopback address. A namespace belongs to a thread and
//! to the threads it spawns, and a socket stays in the namespace it was made in, so a proxy
//! started on a thread inside it connects and listens there. Needs root and iproute2 (`ip
//! netns`); `cut` also needs nftables (`nft`).

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

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

    /// Its name, for `ip netns exec`.
    pub fn name(&self) -> &str {
        &self.name
    }

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

    /// From now on every packet on the namespace's loopback vanishes without an answer.
    pub fn cut(&self) {
        self.exec(&["nft", "add table inet vanish"]);
        self.exec(&[
            "nft",
            "add chain inet vanish input { type filter hook input priority filter; policy drop; }",
        ]);
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Runs `f` on a thread that has joined the namespace: sockets it creates, and threads it
    /// spawns, live there.
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
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
