"""The processes the load benchmark runs: MariaDB backends, HAProxy, mysql-lb.

Every child is started in its own session (a terminal's Ctrl-C reaches only this script, which
then stops them in order), remembered by its Popen, and stopped by that pid alone: SIGTERM, a
bounded wait, SIGKILL. Nothing is ever stopped by name, so servers the user runs are left alone.
All files live in one temp dir that `Registry.close` removes.
"""

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import myclient

BENCH_USER = "bench"
BENCH_PASS = "bench"

SETUP_SQL = """\
FLUSH PRIVILEGES;
CREATE USER IF NOT EXISTS 'bench'@'%' IDENTIFIED BY 'bench';
CREATE USER IF NOT EXISTS 'bench'@'localhost' IDENTIFIED BY 'bench';
GRANT ALL PRIVILEGES ON *.* TO 'bench'@'%';
GRANT ALL PRIVILEGES ON *.* TO 'bench'@'localhost';
CREATE DATABASE IF NOT EXISTS sbtest;
"""

# Shared by the bootstrap and every start (the redo log size must match). Dumping the buffer pool
# would make every shutdown slow. Native AIO (io_uring) rings count against the small locked-memory
# limit and fail InnoDB's start when test servers run at the same time; a read-only load never
# waits on it.
COMMON_ARGS = [
    "--innodb-use-native-aio=0",
    "--innodb-log-file-size=16M",
    "--innodb-buffer-pool-size=64M",
    "--innodb-buffer-pool-dump-at-shutdown=OFF",
    "--innodb-buffer-pool-load-at-startup=OFF",
]
SERVER_ARGS = [
    "--performance-schema=OFF",
    "--skip-log-bin",
    "--skip-name-resolve",
    "--bind-address=127.0.0.1",
    "--max-connections=12000",
    # Health checks (connect, greeting, close) count as aborted connects; never block the host.
    "--max-connect-errors=1000000000",
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def find_binary(name):
    path = shutil.which(name)
    if path:
        return path
    for d in ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    raise RuntimeError("%s not found (run scripts/install-deps.sh)" % name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, check, timeout, proc=None, log_path=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited (%s) during start%s" % (what, proc.returncode, tail(log_path)))
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError("%s not ready after %ss%s" % (what, timeout, tail(log_path)))


def tail(path, lines=20):
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        text = f.read().splitlines()[-lines:]
    return "; log tail:\n  " + "\n  ".join(text)


class Registry:
    """Owns the temp dir and every child process."""

    def __init__(self):
        # Short base path: unix socket paths must fit in 108 bytes.
        self.base = tempfile.mkdtemp(prefix="mlb-load-", dir="/tmp")
        # Traversable by every OS user, as /run/mysqld is: run as root, mysql-lb connects
        # unix-socket backends as `nobody` (backend_socket_user).
        os.chmod(self.base, 0o711)
        self.children = []  # (name, Popen)

    def spawn(self, name, argv, log_name=None, **kwargs):
        log_path = os.path.join(self.base, (log_name or name) + ".log")
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )
        self.children.append((name, proc))
        return proc, log_path

    def stop(self, proc, timeout=20, sig=signal.SIGTERM):
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.children = [(n, p) for n, p in self.children if p is not proc]

    def own_cpu(self):
        """CPU seconds used by this script and everything it started (running or reaped)."""
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            r = resource.getrusage(who)
            total += r.ru_utime + r.ru_stime
        for _, proc in self.children:
            if proc.poll() is None:
                try:
                    total += cpu_seconds(proc.pid)
                except (OSError, IndexError):
                    pass
        return total

    def close(self):
        for name, proc in reversed(list(self.children)):
            if proc.poll() is None:
                log("stopping %s (pid %d)" % (name, proc.pid))
            self.stop(proc, timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)


def is_root():
    return os.geteuid() == 0


def make_template(reg):
    """mariadb-install-db once; every backend starts from a copy."""
    base = os.path.join(reg.base, "template")
    os.makedirs(base)
    setup = os.path.join(base, "setup.sql")
    with open(setup, "w") as f:
        f.write(SETUP_SQL)
    datadir = os.path.join(base, "data")
    argv = [find_binary("mariadb-install-db"), "--no-defaults"]
    if is_root():
        argv.append("--user=root")
    argv += [
        "--datadir=" + datadir,
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
        "--extra-file=" + setup,
    ] + COMMON_ARGS
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("mariadb-install-db failed:\n%s%s" % (out.stdout.decode(), out.stderr.decode()))
    return datadir


class MariaDB:
    _ids = 0

    def __init__(self, reg, name, template):
        MariaDB._ids += 1
        self.server_id = MariaDB._ids
        self.reg = reg
        self.name = name
        self.dir = os.path.join(reg.base, name)
        os.makedirs(self.dir)
        self.datadir = os.path.join(self.dir, "data")
        shutil.copytree(template, self.datadir, symlinks=True)
        self.socket = os.path.join(self.dir, "mysqld.sock")
        self.port = 0
        self.proc = None
        self.log_path = os.path.join(self.dir, "error.log")

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    def start(self, extra_args=()):
        for _ in range(5):
            if not self.port:
                self.port = free_port()
            argv = [find_binary("mariadbd"), "--no-defaults"]
            if is_root():
                argv.append("--user=root")
            argv += [
                "--datadir=" + self.datadir,
                "--port=%d" % self.port,
                "--socket=" + self.socket,
                "--pid-file=" + os.path.join(self.dir, "mysqld.pid"),
                "--log-error=" + self.log_path,
                "--server-id=%d" % self.server_id,
            ] + COMMON_ARGS + SERVER_ARGS + list(extra_args)
            offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
            self.proc, _ = self.reg.spawn(self.name, argv, log_name=self.name + "-stderr")
            try:
                wait_until(
                    self.name,
                    lambda: myclient.greets(self.socket) and myclient.greets(self.addr),
                    90,
                    self.proc,
                    self.log_path,
                )
                return
            except RuntimeError:
                with open(self.log_path, errors="replace") as f:
                    f.seek(offset)
                    new = f.read()
                if "Address already in use" in new or "Bind on TCP/IP port" in new:
                    self.reg.stop(self.proc)
                    self.port = 0
                    continue
                raise
        raise RuntimeError("%s: no free port after 5 attempts" % self.name)

    def stop(self):
        if self.proc is not None:
            self.reg.stop(self.proc, timeout=60)
            self.proc = None

    def connect(self):
        return myclient.Conn(self.socket, BENCH_USER, BENCH_PASS)


def start_haproxy(reg, backends, maxconn, balance="roundrobin", name="haproxy", server_opts=""):
    """backends: MariaDB objects, or ("127.0.0.1", port) pairs; server_opts is appended to each
    `server` line (e.g. "send-proxy-v2")."""
    port = free_port()
    cfg = os.path.join(reg.base, name + ".cfg")
    servers = "\n".join(
        ("    server db%d 127.0.0.1:%d " % (i + 1, b[1] if isinstance(b, tuple) else b.port) + server_opts).rstrip()
        for i, b in enumerate(backends)
    )
    with open(cfg, "w") as f:
        f.write(
            f"""global
    maxconn {maxconn}

defaults
    mode tcp
    maxconn {maxconn}
    timeout connect 5s
    timeout client 1h
    timeout server 1h

frontend mysql
    bind 127.0.0.1:{port}
    default_backend dbs

backend dbs
    balance {balance}
{servers}
"""
        )
    # -db: stay in the foreground, one process (threads: nbthread defaults to the CPU count).
    proc, log_path = reg.spawn(name, [find_binary("haproxy"), "-db", "-f", cfg])
    wait_until(name, lambda: myclient.greets(("127.0.0.1", port)), 30, proc, log_path)
    return proc, ("127.0.0.1", port)


def start_pump(reg, binary, name, listen, backends, extra_args=()):
    """The bare relay (benches/load/pump.rs). listen: ("127.0.0.1", port) or a socket path;
    backends: strings (ip:port or socket paths); extra_args e.g. ["--delay-ms", "5"]."""
    listen_s = listen if isinstance(listen, str) else "%s:%d" % listen
    proc, log_path = reg.spawn(name, [binary, listen_s] + list(backends) + list(extra_args))
    wait_until(name, lambda: myclient.greets(listen), 30, proc, log_path)
    return proc


def start_mysql_lb(reg, binary, name, listen, backends, extra_args=(), prlimit_nofile=None, ready=None):
    """listen: ("127.0.0.1", port) or a socket path; backends: strings for the flag. ready: the
    readiness probe (default: `listen` greets), e.g. for a listener that wants a PROXY header
    first."""
    admin_port = free_port()
    listen_s = listen if isinstance(listen, str) else "%s:%d" % listen
    argv = [binary, "--proxy-address", listen_s]
    for b in backends:
        argv += ["--proxy-backend-addresses", b]
    argv += ["--admin-address", "127.0.0.1:%d" % admin_port, "--log-level", "warn"]
    argv += list(extra_args)
    if prlimit_nofile:
        # prlimit execs the command: the pid we get is mysql-lb's own.
        argv = [find_binary("prlimit"), "--nofile=%s" % prlimit_nofile, "--"] + argv
    proc, log_path = reg.spawn(name, argv)
    probe = ready or (lambda: myclient.greets(listen))
    wait_until(name, probe, 30, proc, log_path)
    return proc, admin_port, log_path


# --- /proc readings -----------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of the whole process (all threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy():
    """(busy, total) CPU seconds of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    return busy / CLK_TCK, (busy + v[3] + v[4]) / CLK_TCK


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def nofile_limits(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                parts = line.split()
                return parts[3], parts[4]
    return None


# --- TLS material and configuration files --------------------------------------------------------


def make_tls_files(base):
    """A throwaway CA, a server certificate for 127.0.0.1/localhost (the backends and mysql-lb
    present it) and a client certificate, made with openssl. sysbench 1.0 reads its TLS files
    from fixed names in its working directory (cacert.pem, client-cert.pem, client-key.pem), so
    they are laid out that way in `sysbench_dir`."""
    d = os.path.join(base, "tls")
    sb = os.path.join(d, "sysbench")
    os.makedirs(sb)

    def openssl(*argv):
        out = subprocess.run([find_binary("openssl")] + list(argv), cwd=d, stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("openssl %s failed:\n%s" % (argv[0], out.stderr.decode()))

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bench CA",
            "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=bench " + name,
                "-keyout", name + ".key", "-out", name + ".csr")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem")
    for src, dst in (("ca.pem", "cacert.pem"), ("client.pem", "client-cert.pem"), ("client.key", "client-key.pem")):
        shutil.copy(os.path.join(d, src), os.path.join(sb, dst))
    return {
        "ca": os.path.join(d, "ca.pem"),
        "cert": os.path.join(d, "server.pem"),
        "key": os.path.join(d, "server.key"),
        "sysbench_dir": sb,
    }


def write_config(path, backends, body):
    """A mysql-lb YAML file: `backends` (the flags replace them anyway) and `body` (YAML text)."""
    with open(path, "w") as f:
        f.write("backends:\n" + "".join("  - %s\n" % b for b in backends) + body)
    return path


def pump_binary(binary):
    """The bare relay anchor (benches/load/pump.rs), built beside mysql-lb."""
    return os.path.join(os.path.dirname(binary), "examples", "pump")


def run_capture(reg, argv, timeout, name="sysbench", cwd=None):
    """Runs a command to completion in its own session (stopped on Ctrl-C like every child)."""
    proc, log_path = reg.spawn(name, argv, log_name="%s-%d" % (name, time.monotonic_ns()), cwd=cwd)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        reg.stop(proc, timeout=5, sig=signal.SIGKILL)
        raise RuntimeError("%s timed out after %ss" % (name, timeout))
    finally:
        reg.stop(proc, timeout=5)
    with open(log_path, errors="replace") as f:
        text = f.read()
    os.unlink(log_path)
    return proc.returncode, text
