//! Real MariaDB servers for the integration tests.
//!
//! The proxy is only as correct as what real servers accept, so tests talk to real `mariadbd`
//! processes, not mocks. Each test binary runs `mariadb-install-db` once into a template datadir
//! (with the `bench` user and the `sbtest`/`test` schemas already in it) and copies that template
//! per instance, so an instance costs a directory copy plus a server start. Every process is
//! tracked by its pid and stopped by pid, at `Drop` or at process exit — never by name, so the
//! developer's own servers are left alone.
#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// The account every instance has (`'bench'@'%'` and `'bench'@'localhost'`, all privileges).
pub const BENCH_USER: &str = "bench";
pub const BENCH_PASS: &str = "bench";

/// Generous: tests share two cores with several servers.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
const EXIT_STOP_TIMEOUT: Duration = Duration::from_secs(5);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// A free port can be taken by someone else between our probe and the server's bind.
const START_ATTEMPTS: usize = 5;
/// `sun_path` holds 108 bytes including the NUL.
const MAX_SOCKET_PATH: usize = 100;

const NOT_FOUND: &str =
    "MariaDB server not found: run scripts/install-deps.sh (apt-get install mariadb-server mariadb-client)";

/// Run by `mariadb-install-db --extra-file` while it bootstraps the template. Bootstrap mode
/// starts with the grant tables unloaded, hence the leading FLUSH PRIVILEGES.
const SETUP_SQL: &str = "\
FLUSH PRIVILEGES;
CREATE USER IF NOT EXISTS 'bench'@'%' IDENTIFIED BY 'bench';
CREATE USER IF NOT EXISTS 'bench'@'localhost' IDENTIFIED BY 'bench';
GRANT ALL PRIVILEGES ON *.* TO 'bench'@'%' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'bench'@'localhost' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS sbtest;
CREATE DATABASE IF NOT EXISTS test;
";

/// Options shared by the template bootstrap and every server. The redo log size must match, or
/// each start would resize it; dumping the buffer pool makes every shutdown (the bootstrap's too)
/// take a second or more instead of ~20 ms. Native AIO (io_uring here) is off: its rings count
/// against the small locked-memory limit, and several servers at once (parallel test binaries)
/// then fail InnoDB's start.
const COMMON_ARGS: [&str; 5] = [
    "--innodb-use-native-aio=0",
    "--innodb-log-file-size=16M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-buffer-pool-dump-at-shutdown=OFF",
    "--innodb-buffer-pool-load-at-startup=OFF",
];

/// A `REQUIRE SSL` account (all privileges) that [`MariaDb::create_tls_users`] adds.
pub const SSL_USER: &str = "ssl_only";
pub const SSL_PASS: &str = "ssl-pass";
/// A `REQUIRE X509` account: it must present a certificate the server's `ssl_ca` signed.
pub const X509_USER: &str = "x509_only";
pub const X509_PASS: &str = "x509-pass";

/// TLS for a server: `ssl_cert`, `ssl_key` and (for client certificates) `ssl_ca`, as PEM files.
pub struct ServerTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: Option<&'a Path>,
    /// `require_secure_transport=ON`: plaintext TCP logins are refused (the unix socket stays
    /// usable, as it counts as secure).
    pub require_secure_transport: bool,
}

impl ServerTls<'_> {
    /// The `mariadbd` options that say it.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            format!("--ssl-cert={}", self.cert.display()),
            format!("--ssl-key={}", self.key.display()),
        ];
        if let Some(ca) = self.ca {
            args.push(format!("--ssl-ca={}", ca.display()));
        }
        if self.require_secure_transport {
            args.push("--require-secure-transport=ON".to_string());
        }
        args
    }
}

/// One `mariadbd` process with its own datadir, TCP port and unix socket.
pub struct MariaDb {
    pub name: String,
    pub port: u16,
    pub socket: PathBuf,
    pub datadir: PathBuf,
    /// Temp dir holding the datadir, socket, pid file and stderr capture; removed on drop.
    base: PathBuf,
    server_id: u32,
    /// Appended to the standard options at every start (a later option wins in mariadbd).
    extra_args: Vec<String>,
    child: Mutex<Option<Child>>,
}

/// Why a start attempt failed: a lost port race is retried on another port, anything else is fatal.
enum StartError {
    PortTaken,
    Failed(String),
}

impl MariaDb {
    /// Starts a fresh instance from the template datadir on a free port; blocks until it accepts
    /// connections on both its unix socket and its TCP port.
    pub fn start(name: &str) -> MariaDb {
        Self::start_with_args(name, &[])
    }

    /// Like [`start`](Self::start), with extra `mariadbd` options that also apply on restart, e.g.
    /// `--log-bin` for a replication primary. Each instance already has a unique `--server-id`.
    pub fn start_with_args(name: &str, extra_args: &[&str]) -> MariaDb {
        let template = template_datadir();
        let base = new_temp_dir(name);
        // Traversable by every OS user, as a server's socket directory (/run/mysqld) is: a
        // mysql-lb running as root connects unix-socket backends as `nobody`.
        fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o711))
            .unwrap_or_else(|e| panic!("cannot open {} to other users: {e}", base.display()));
        let datadir = base.join("data");
        copy_dir(template, &datadir);
        let socket = base.join("mysqld.sock");
        assert!(
            socket.as_os_str().len() <= MAX_SOCKET_PATH,
            "unix socket path too long for sun_path ({}); set TMPDIR to a shorter directory",
            socket.display()
        );
        static SERVER_IDS: AtomicU32 = AtomicU32::new(1);
        let mut db = MariaDb {
            name: name.to_string(),
            port: 0,
            socket,
            datadir,
            base,
            server_id: SERVER_IDS.fetch_add(1, Ordering::Relaxed),
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            child: Mutex::new(None),
        };
        for _ in 0..START_ATTEMPTS {
            // Below the ephemeral range: no outgoing connection can hold it when the server
            // binds it, nor while a restart has it down.
            db.port = named_port();
            match db.spawn_and_wait() {
                Ok(()) => return db,
                Err(StartError::PortTaken) => continue,
                Err(StartError::Failed(msg)) => panic!("{msg}"),
            }
        }
        panic!(
            "{}: no free port after {START_ATTEMPTS} attempts; error log tail:\n{}",
            db.name,
            db.error_log_tail()
        );
    }

    /// Like [`start`](Self::start), with TLS; fails the test if the server does not report
    /// `have_ssl=YES` (it starts without TLS when it cannot load the files).
    pub fn start_tls(name: &str, tls: &ServerTls<'_>) -> MariaDb {
        let args = tls.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let db = Self::start_with_args(name, &args);
        let have_ssl = db.root_query("SELECT @@have_ssl");
        assert_eq!(
            have_ssl.trim(),
            "YES",
            "{name}: TLS did not come up; error log tail:\n{}",
            db.error_log_tail()
        );
        db
    }

    /// Adds [`SSL_USER`] (`REQUIRE SSL`) and [`X509_USER`] (`REQUIRE X509`), each for `%` and
    /// `localhost`, with all privileges.
    pub fn create_tls_users(&self) {
        let mut sql = String::new();
        for (user, pass, require) in [(SSL_USER, SSL_PASS, "SSL"), (X509_USER, X509_PASS, "X509")] {
            for host in ["%", "localhost"] {
                sql.push_str(&format!(
                    "CREATE USER IF NOT EXISTS '{user}'@'{host}' IDENTIFIED BY '{pass}' \
                     REQUIRE {require}; GRANT ALL PRIVILEGES ON *.* TO '{user}'@'{host}'; "
                ));
            }
        }
        self.root_exec(&sql);
    }

    /// SIGTERM to our pid, wait up to 30 s, then SIGKILL. A no-op when not running.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child_slot().take() else {
            return;
        };
        let pid = child.id();
        send_signal(pid, libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                _ => {
                    // Past the deadline (or try_wait failed): make sure it is gone.
                    kill_and_reap(&mut child, &self.name);
                    break;
                }
            }
        }
        unregister_pid(pid);
    }

    /// SIGKILL, as a crash would: no clean shutdown, clients see their connections reset.
    pub fn kill9(&mut self) {
        let Some(mut child) = self.child_slot().take() else {
            return;
        };
        let pid = child.id();
        kill_and_reap(&mut child, &self.name);
        unregister_pid(pid);
    }

    /// Stops (if running) and starts again on the same datadir, port and socket.
    pub fn restart(&mut self) {
        self.stop();
        match self.spawn_and_wait() {
            Ok(()) => {}
            Err(StartError::PortTaken) => panic!(
                "{}: port {} was taken while the server was down; error log tail:\n{}",
                self.name,
                self.port,
                self.error_log_tail()
            ),
            Err(StartError::Failed(msg)) => panic!("{msg}"),
        }
    }

    pub fn is_running(&self) -> bool {
        match self.child_slot().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child_slot().as_ref().map(Child::id)
    }

    pub fn tcp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// mysql_async options for this server over TCP (see [`tcp_opts`]).
    pub fn opts(&self, user: &str, pass: &str) -> mysql_async::Opts {
        tcp_opts(&self.tcp_addr(), user, pass)
    }

    /// Runs SQL as root through the `mariadb` CLI over the unix socket; panics with stderr.
    pub fn root_exec(&self, sql: &str) {
        self.root_query(sql);
    }

    /// Like [`root_exec`](Self::root_exec), returning the output in batch form
    /// (tab-separated, no column names).
    pub fn root_query(&self, sql: &str) -> String {
        let out = Command::new(&binaries().client)
            .arg("--no-defaults")
            .arg("--protocol=socket")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["--user=root", "--batch", "--skip-column-names", "-e", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: cannot run the mariadb CLI: {e}", self.name));
        assert!(
            out.status.success(),
            "{}: root SQL failed ({}): {sql}\n{}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The last lines of the server's error log, for failure messages.
    pub fn error_log_tail(&self) -> String {
        let mut text = fs::read_to_string(self.datadir.join("error.log")).unwrap_or_default();
        if let Ok(stderr) = fs::read_to_string(self.base.join("stderr.log")) {
            text.push_str(&stderr);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn child_slot(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log_path = self.datadir.join("error.log");
        // Only what this attempt logs tells whether its bind failed.
        let log_offset = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("stderr.log"))
            .unwrap_or_else(|e| panic!("{}: cannot open stderr log: {e}", self.name));
        let mut cmd = Command::new(&binaries().mariadbd);
        cmd.arg("--no-defaults");
        if is_root() {
            // mariadbd refuses to run as root unless told so explicitly.
            cmd.arg("--user=root");
        }
        cmd.arg(format!("--datadir={}", self.datadir.display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket.display()))
            .arg(format!(
                "--pid-file={}",
                self.base.join("mysqld.pid").display()
            ))
            .arg(format!("--log-error={}", log_path.display()))
            .arg(format!("--server-id={}", self.server_id))
            .arg(format!("--tmpdir={}", private_tmpdir(&self.base).display()))
            .args(COMMON_ARGS)
            .args([
                "--performance-schema=OFF",
                "--skip-name-resolve",
                "--max-connections=500",
                "--skip-log-bin",
                "--local-infile=1",
                "--max-allowed-packet=64M",
            ])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot spawn mariadbd: {e}", self.name));
        register_pid(child.id());
        *self.child_slot() = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.reap_if_exited() {
                let new_log = read_from(&log_path, log_offset);
                if new_log.contains("Address already in use")
                    || new_log.contains("Bind on TCP/IP port")
                {
                    return Err(StartError::PortTaken);
                }
                return Err(StartError::Failed(format!(
                    "{}: mariadbd exited during start ({status}); error log tail:\n{}",
                    self.name,
                    self.error_log_tail()
                )));
            }
            if greets_on_unix(&self.socket) && greets_on_tcp(self.port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill9();
                return Err(StartError::Failed(format!(
                    "{}: mariadbd not ready after {READY_TIMEOUT:?}; error log tail:\n{}",
                    self.name,
                    self.error_log_tail()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn reap_if_exited(&mut self) -> Option<ExitStatus> {
        let mut slot = self.child_slot();
        let status = match slot.as_mut()?.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            Err(e) => panic!("{}: waiting for mariadbd failed: {e}", self.name),
        };
        if let Some(child) = slot.take() {
            unregister_pid(child.id());
        }
        Some(status)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
        if fs::remove_dir_all(&self.base).is_ok() {
            unregister_dir(&self.base);
        }
    }
}

/// Two instances shared by all tests of one binary, started in parallel on first use and
/// stopped at process exit. Tests that stop or kill a server must start their own.
pub fn shared_pair() -> &'static [MariaDb; 2] {
    static PAIR: OnceLock<[MariaDb; 2]> = OnceLock::new();
    PAIR.get_or_init(|| {
        // Bootstrap first so the two threads do not both wait on it.
        template_datadir();
        thread::scope(|s| {
            let a = s.spawn(|| MariaDb::start("shared-a"));
            let b = s.spawn(|| MariaDb::start("shared-b"));
            let join = |h: thread::ScopedJoinHandle<'_, MariaDb>| {
                h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            };
            // Statics are never dropped: the exit hook stops these and removes their dirs.
            [join(a), join(b)]
        })
    })
}

/// mysql_async options for any `host:port` (a server or the proxy). `prefer_socket` is off:
/// otherwise mysql_async, seeing a loopback address, asks the server for `@@socket` and
/// silently reconnects over that unix socket — bypassing whatever sits on the TCP port.
pub fn tcp_opts(addr: &str, user: &str, pass: &str) -> mysql_async::Opts {
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("bad address {addr:?}: {e}"));
    mysql_async::OptsBuilder::default()
        .ip_or_hostname(addr.ip().to_string())
        .tcp_port(addr.port())
        .user(Some(user))
        .pass(Some(pass))
        .prefer_socket(false)
        .into()
}

/// A new temp dir (short name) removed when the test process exits, for files a test makes.
pub fn scratch_dir(name: &str) -> PathBuf {
    new_temp_dir(name)
}

/// A port to write into a config before anything listens on it (a server's, a peer's admin
/// address, two daemons sharing one port): one below the kernel's ephemeral range, free when
/// returned. A port
/// from [`free_port`] comes from that range, so any connection another test opens meanwhile can
/// take it as its local port and the later bind fails (`AddrInUse`); below the range only an
/// explicit bind can, and the pick is spread over some 20,000 ports.
pub fn named_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const FLOOR: u16 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low < FLOOR + 1_000 {
        return free_port();
    }
    let span = u64::from(ephemeral_low - FLOOR);
    for _ in 0..200 {
        // A fresh RandomState is seeded anew: a random number without a crate for it.
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = FLOOR + u16::try_from(r % span).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range ({FLOOR}..{ephemeral_low}) in 200 tries")
}

/// An address where nothing listens, and nothing can while the guard lives: a socket bound to
/// it without `SO_REUSEADDR` and never listening. A connection to it is refused at once, and
/// no daemon another test starts, nor any outgoing connection, can take the port meanwhile (a
/// port from [`free_port`] could be listening again by the time the test connects).
pub struct ClosedPort {
    _held: socket2::Socket,
    pub addr: std::net::SocketAddr,
}

impl ClosedPort {
    /// `127.0.0.1:port`, as configs and connects want it.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }
}

pub fn closed_port() -> ClosedPort {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)
        .unwrap_or_else(|e| panic!("cannot open a socket: {e}"));
    let any: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
    socket
        .bind(&any.into())
        .unwrap_or_else(|e| panic!("cannot bind a closed port: {e}"));
    let addr = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .unwrap_or_else(|| panic!("a bound socket has an address"));
    ClosedPort {
        _held: socket,
        addr,
    }
}

/// A port from the ephemeral range nobody listens on right now: [`named_port`]'s fallback on a
/// host whose ephemeral range leaves no room below it. Anyone's outgoing connection can take it
/// before it is bound, so tests never use it directly: a test's own daemon binds port 0 and
/// reports the port ([`super::daemon::Daemon::proxy_addr`]), an address that must refuse is a
/// [`closed_port`], and one written into a config before its listener starts is a
/// [`named_port`].
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

struct Binaries {
    mariadbd: PathBuf,
    install_db: PathBuf,
    client: PathBuf,
}

fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(|| {
        let find = |name: &str| find_binary(name).unwrap_or_else(|| panic!("{NOT_FOUND} ({name})"));
        Binaries {
            mariadbd: find("mariadbd"),
            install_db: find("mariadb-install-db"),
            client: find("mariadb"),
        }
    })
}

fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Bootstraps the template datadir once per test binary.
fn template_datadir() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let bins = binaries();
        let base = new_temp_dir("template");
        let setup = base.join("setup.sql");
        fs::write(&setup, SETUP_SQL).unwrap_or_else(|e| panic!("cannot write setup SQL: {e}"));
        let datadir = base.join("data");
        let mut cmd = Command::new(&bins.install_db);
        cmd.arg("--no-defaults");
        if is_root() {
            cmd.arg("--user=root");
        }
        let out = cmd
            .arg(format!("--datadir={}", datadir.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg("--skip-name-resolve")
            .arg(format!("--extra-file={}", setup.display()))
            .arg(format!("--tmpdir={}", private_tmpdir(&base).display()))
            .args(COMMON_ARGS)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run mariadb-install-db: {e}"));
        assert!(
            out.status.success(),
            "mariadb-install-db failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        datadir
    })
}

/// Each server (and the bootstrap) gets its own tmpdir: at start-up mariadbd deletes every
/// `#sql*` file in its tmpdir, so a shared /tmp let one server's start delete another's temporary
/// tables (seen: a concurrent bootstrap failing with "Error on delete of /tmp/#sql-temptable-…").
fn private_tmpdir(base: &Path) -> PathBuf {
    let dir = base.join("tmp");
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// A fresh directory under the temp dir, removed when the test process exits.
pub fn new_temp_dir(name: &str) -> PathBuf {
    // Short, path-safe names keep the socket path under the sun_path limit.
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(16)
        .collect();
    let dir = tempfile::Builder::new()
        .prefix(&format!("mlb-{clean}-"))
        .tempdir_in(std::env::temp_dir())
        .unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"))
        .keep();
    register_dir(&dir);
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cp: {e}"));
    assert!(
        out.status.success(),
        "cp -a {} {} failed: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read_from(path: &Path, offset: u64) -> String {
    let text = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(text.len());
    String::from_utf8_lossy(&text[start..]).into_owned()
}

/// Ready means a protocol-10 greeting: the socket exists a little before the server accepts.
fn greets_on_unix(path: &Path) -> bool {
    UnixStream::connect(path)
        .map(|s| s.set_read_timeout(Some(Duration::from_secs(2))).is_ok() && reads_greeting(s))
        .unwrap_or(false)
}

fn greets_on_tcp(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port))
        .map(|s| s.set_read_timeout(Some(Duration::from_secs(2))).is_ok() && reads_greeting(s))
        .unwrap_or(false)
}

fn reads_greeting(mut stream: impl Read) -> bool {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && head[4] == 10
}

/// SIGKILL and reap. Reports instead of panicking: it also runs from `Drop`, maybe mid-unwind.
fn kill_and_reap(child: &mut Child, name: &str) {
    if let Err(e) = child.kill().and_then(|()| child.wait().map(drop)) {
        eprintln!("{name}: cannot kill mariadbd pid {}: {e}", child.id());
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn send_signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) with a pid we spawned and have not reaped yet; no memory is involved.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Pids still running and temp dirs still on disk, for the exit hook.
struct Registry {
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pids: Vec::new(),
    dirs: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: registering a plain extern "C" fn that never unwinds.
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
    });
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn register_pid(pid: u32) {
    registry().pids.push(pid);
}

fn unregister_pid(pid: u32) {
    registry().pids.retain(|&p| p != pid);
}

fn register_dir(dir: &Path) {
    let mut reg = registry();
    if !reg.dirs.iter().any(|d| d == dir) {
        reg.dirs.push(dir.to_path_buf());
    }
}

fn unregister_dir(dir: &Path) {
    registry().dirs.retain(|d| d != dir);
}

/// Static instances are never dropped, so the process's exit stops them: SIGTERM, a short wait,
/// then SIGKILL; then the temp dirs go. Must not panic (it runs inside libc's `exit`).
extern "C" fn cleanup_at_exit() {
    // try_lock: a thread stuck while holding the lock must not hang the exit.
    let (pids, dirs) = match REGISTRY.try_lock() {
        Ok(mut reg) => (std::mem::take(&mut reg.pids), std::mem::take(&mut reg.dirs)),
        Err(std::sync::TryLockError::Poisoned(p)) => {
            let mut reg = p.into_inner();
            (std::mem::take(&mut reg.pids), std::mem::take(&mut reg.dirs))
        }
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    for &pid in &pids {
        send_signal(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + EXIT_STOP_TIMEOUT;
    let mut left: Vec<u32> = pids;
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&pid| !reaped(pid));
        if !left.is_empty() {
            thread::sleep(POLL_INTERVAL);
        }
    }
    for &pid in &left {
        send_signal(pid, libc::SIGKILL);
        wait_blocking(pid);
    }
    for dir in dirs {
        if let Err(e) = fs::remove_dir_all(&dir) {
            // Best effort at exit; a write error to stderr is ignored on purpose.
            let _ = writeln!(std::io::stderr(), "cannot remove {}: {e}", dir.display());
        }
    }
}

/// True once `pid` has exited (reaping it) or is not our child any more.
fn reaped(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    let mut status = 0;
    // SAFETY: waitpid on a child pid with a valid status pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    r != 0
}

fn wait_blocking(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    let mut status = 0;
    // SAFETY: waitpid on a child pid with a valid status pointer.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
    }
}

/// Starts dedicated servers in parallel (tests that stop, drain or kill servers must not share
/// them).
pub fn start_dedicated(names: &[&str]) -> Vec<MariaDb> {
    std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|n| s.spawn(move || MariaDb::start(n)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}
