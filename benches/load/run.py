#!/usr/bin/env python3
"""mysql-lb load benchmark: the same three MariaDB backends reached directly, through HAProxy
and through mysql-lb, measured side by side.

    python3 benches/load/run.py            # full: 3 rounds x 10 s per cell, about 13 minutes
    python3 benches/load/run.py --quick    # 1 round x 5 s, fewer connections, about 2.5 minutes

What it does (issue 5): installs missing tools (scripts/install-deps.sh; strace), builds the
release binary, starts three mariadbd instances from one mariadb-install-db template, HAProxy
(mode tcp, balance roundrobin) and mysql-lb (metrics and latency recording on) in front of them,
plus a second mysql-lb that listens on a unix socket and reaches the backends by their sockets.
Then sysbench oltp_point_select and oltp_read_only at 8 and 64 threads, text protocol
(--db-ps-mode=disable), interleaved: every round runs each cell on every path in turn, so drift on
a shared machine hits all paths alike, and every other round in the opposite order, so no path
always runs right after the same one. Paths:

  direct          sysbench -> the three backends over TCP (comma-separated --mysql-host/--mysql-port:
                  sysbench 1.0 hands its connections to the hosts round-robin)
  haproxy         sysbench -> HAProxy -> backends (TCP)
  bare relay      sysbench -> benches/load/pump.rs -> backends (TCP): copies bytes, nothing else;
                  the floor any user-space proxy stands on
  mysql-lb        sysbench -> mysql-lb -> backends (TCP), as configured by default (the query
                  digest table on)
  direct unix     sysbench -> the backends' unix sockets (comma-separated --mysql-socket)
  bare relay unix sysbench -> pump.rs's unix socket -> backends' unix sockets
  mysql-lb unix   sysbench -> mysql-lb's unix socket -> backends' unix sockets
  direct tls      sysbench --mysql-ssl=on -> the backends (TLS; sysbench 1.0 cannot verify)
  mysql-lb tls    sysbench --mysql-ssl=on -> mysql-lb (TLS) -> backends (plaintext)
  mysql-lb tls both
                  sysbench --mysql-ssl=on -> mysql-lb (TLS) -> backends (TLS, verify_identity)
  direct compressed, mysql-lb compressed
                  sysbench --mysql-compression=on -> the backends / mysql-lb (its backend leg
                  uncompressed)
  mysql-lb digests off
                  the plaintext mysql-lb with the query digest table off (`digests: {enabled:
                  false}`; on by default): what it costs per query is "mysql-lb" against this
  mysql-lb capture
                  the plaintext mysql-lb with a capture running for the whole run (`POST
                  /capture/start` into the temp dir): what capturing costs is this path against
                  "mysql-lb"; the capture's size per million queries is reported at the end
  mysql-lb deferred
                  sysbench -> mysql-lb with `connect_mode: deferred` -> backends (TCP): mysql-lb
                  greets the client itself, reads its login, then connects a backend, whose
                  AuthSwitchRequest does the real exchange (one round trip more per connection)
  mysql-lb pp v1, mysql-lb pp v2
                  only with --proxy-protocol: the plaintext mysql-lb with `proxy_protocol: v1` /
                  `v2`, each backend connection starting with the PROXY header; the backends then
                  run with --proxy-protocol-networks=127.0.0.0/8,localhost on every path (a
                  connection without a header is served as before)
  haproxy+mysql-lb, haproxy+mysql-lb pp both
                  only with --proxy-protocol: sysbench -> HAProxy (tcp mode) -> a plaintext
                  mysql-lb of its own -> backends; without headers, and with HAProxy's
                  `send-proxy-v2` into `accept_proxy_protocol: [127.0.0.0/8]` and
                  `proxy_protocol: v2` to the backends (the header on both legs). Their CPU
                  column is the mysql-lb process's

The backends speak TLS (a throwaway CA and certificates made with openssl); the plaintext
mysql-lb paths set `backend_tls: {mode: disabled}` so they stay plaintext on both legs.

Per cell: median qps (min-max over rounds), qps relative to direct TCP, median p95 latency, the
proxy process's CPU seconds (utime+stime from /proc, all threads) per 10k queries, syscalls per
query and I/O calls per query (all syscalls except epoll_wait/epoll_pwait/futex), from a separate
sample run per proxy and cell with `strace -c -f -p PID` attached for --sample seconds (strace
slows the traced proxy, so this never happens during a measured run; queries in the window come
from the backends' Questions counters; `--syscalls perf` counts with perf's raw_syscalls
tracepoint instead, which barely slows the proxy but gives no per-call breakdown), the proxy's RSS
at the end of the cell, and how much CPU processes this script did not start took meanwhile.

Then the connection tests: the setup rate (N sysbench threads running benches/load/connect.lua:
connect, authenticate, SELECT 1, COM_QUIT, in a loop) on every path (or --paths), interleaved;
and 10,000 concurrent client connections held by a fresh mysql-lb started under
`prlimit --nofile=1024:<hard>` (it must raise its own soft limit), with the backends restarted
with --thread-handling=pool-of-threads, every connection then answering SELECT 1.

`--only hetero` runs instead the balancing part of issue 13 (benches/load/hetero.py): mysql-lb's
policies and HAProxy's over a pool whose third backend answers --delay-ms later, with short- and
long-lived clients, and the split of sessions and queries per backend; it writes
benches/load/results-balancing.md.

The table is printed and written to --out (default benches/load/results.md). Everything started
here is stopped by pid and the temp dir removed on exit, Ctrl-C included.
"""

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import hetero  # noqa: E402
import myclient  # noqa: E402
import procs  # noqa: E402
from procs import log, pump_binary, run_capture  # noqa: E402
from sysbench import (  # noqa: E402
    TABLE_SIZE,
    TABLES,
    Target,
    parse_sysbench,
    prepare_argv,
    socket_args,
    sysbench_argv,
    tcp_args,
)

IDLE_EXCLUDED = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "futex")


# --- set-up -------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true", help="1 round of 5 s, fewer connections (~2.5 min)")
    ap.add_argument("--time", type=int, help="seconds per sysbench run (default 10; quick 5)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3; quick 1)")
    ap.add_argument("--threads", default="8,64", help="sysbench thread counts (default 8,64)")
    ap.add_argument("--tests", default="oltp_point_select,oltp_read_only", help="sysbench tests (default %(default)s)")
    ap.add_argument("--sample", type=float, default=2.0, help="seconds of syscall sampling (default 2)")
    ap.add_argument(
        "--syscalls",
        choices=("strace", "perf", "off"),
        default="strace",
        help="syscall counter: strace -c -f -p (default) or perf stat on raw_syscalls tracepoints",
    )
    ap.add_argument("--conns", type=int, help="concurrent connections test size (default 10000; quick 2000)")
    ap.add_argument("--connect-time", type=int, help="seconds per connection-rate run (default 5; quick 3)")
    ap.add_argument("--connect-workers", type=int, default=16, help="parallel connecting clients (default 16)")
    ap.add_argument("--out", help="markdown output file (default benches/load/results.md; "
                    "with --only hetero benches/load/results-balancing.md)")
    ap.add_argument("--no-build", action="store_true", help="use the existing target/release/mysql-lb")
    ap.add_argument(
        "--lb-args",
        default="",
        help="extra flags for both mysql-lb processes, e.g. \"--worker-threads 1\"",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="one more mysql-lb (TCP) in the matrix with these extra flags, e.g. "
        "\"1 thread=--worker-threads 1\" (repeatable)",
    )
    ap.add_argument(
        "--proxy-protocol",
        action="store_true",
        help="backends accept PROXY headers from loopback; adds the \"mysql-lb pp v1\" and "
        "\"mysql-lb pp v2\" paths (e.g. --only connect-rate --paths \"mysql-lb,mysql-lb pp v2\")",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to skip: matrix, syscalls, connect-rate, conns",
    )
    ap.add_argument(
        "--baseline",
        metavar="BINARY",
        help="another mysql-lb binary (e.g. one built from the main branch) measured in the same "
        "interleaved runs as \"baseline\", \"baseline deferred\" and \"baseline unix\", for an A/B comparison",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated parts to run, the rest skipped (e.g. --only connect-rate: about 3 min); "
        "`hetero` (balancing over a pool with one slow backend, benches/load/hetero.py, about 9 min) "
        "runs only when asked for, and alone",
    )
    ap.add_argument("--delay-ms", type=int, default=5,
                    help="hetero: delay added to every response of the slow backend (default 5)")
    ap.add_argument("--hetero-threads", type=int, default=8,
                    help="hetero: sysbench threads in every run (default 8)")
    ap.add_argument("--short-queries", type=int, default=3,
                    help="hetero: point selects per short-lived connection (default 3)")
    ap.add_argument(
        "--paths",
        default="",
        help="comma-separated paths to measure (default all), e.g. \"haproxy,mysql-lb,baseline\"",
    )
    args = ap.parse_args()
    args.time = args.time or (5 if args.quick else 10)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.conns = args.conns or (2000 if args.quick else 10000)
    args.connect_time = args.connect_time or (3 if args.quick else 5)
    args.threads = [int(t) for t in args.threads.split(",") if t]
    args.tests = [t for t in args.tests.split(",") if t]
    args.skip = {s for s in args.skip.split(",") if s}
    parts = {"matrix", "syscalls", "connect-rate", "conns", "hetero"}
    only = {s for s in args.only.split(",") if s}
    if only - parts or args.skip - parts:
        ap.error("parts are: " + ", ".join(sorted(parts)))
    if "hetero" in only and len(only) > 1:
        ap.error("--only hetero runs alone (it starts its own backends and proxies)")
    args.skip |= (parts - only) if only else {"hetero"}
    if args.delay_ms < 1 or args.hetero_threads < 1 or args.short_queries < 1:
        ap.error("--delay-ms, --hetero-threads and --short-queries must be at least 1")
    args.out = args.out or os.path.join(HERE, "results-balancing.md" if "hetero" in only else "results.md")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    return args


def sh(argv, **kw):
    return subprocess.run(argv, check=True, **kw)


def ensure_deps(args):
    sh(["bash", os.path.join(ROOT, "scripts", "install-deps.sh")])
    needed = {"strace": "strace", "perf": "linux-perf"}.get(args.syscalls)
    if needed and not shutil.which(args.syscalls):
        log("%s is missing: installing it with apt-get (package %s)" % (args.syscalls, needed))
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        sh(sudo + ["apt-get", "update"])
        sh(sudo + ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--no-install-recommends", needed])
    for tool in ("prlimit",):
        procs.find_binary(tool)


def build(args):
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    binary = os.path.join(target, "release", "mysql-lb")
    if not args.no_build:
        log("building: cargo build --release --bin mysql-lb --example pump")
        sh(["cargo", "build", "--release", "--bin", "mysql-lb", "--example", "pump"], cwd=ROOT)
    for b in (binary, pump_binary(binary)):
        if not os.access(b, os.X_OK):
            raise RuntimeError("%s not found" % b)
    return binary


def versions(binary):
    def first_line(argv):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"

    rev = first_line(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True).stdout
    return {
        "mysql-lb": "%s (git %s%s)" % (binary, rev, ", uncommitted changes" if dirty.strip() else ""),
        "mariadbd": first_line([procs.find_binary("mariadbd"), "--version"]),
        "haproxy": first_line([procs.find_binary("haproxy"), "-v"]),
        "sysbench": first_line(["sysbench", "--version"]),
        "kernel": platform.release(),
        "cpus": str(os.cpu_count()),
    }


# --- counters ----------------------------------------------------------------------------------


class Monitor:
    """A persistent connection per backend for reading its Questions counter."""

    def __init__(self, backends):
        self.conns = [b.connect() for b in backends]

    def questions(self):
        out = []
        for c in self.conns:
            rows = c.query("SHOW GLOBAL STATUS LIKE 'Questions'")
            out.append(int(rows[0][1]))
        return out

    def close(self):
        for c in self.conns:
            c.close()


# --- syscall counting ---------------------------------------------------------------------------


class Counter:
    """Counts one process's syscalls over a window that must enclose the caller's query window.

    strace: counting starts when it reports every thread attached ("Process N attached with M
    threads") and ends when it detaches on SIGINT; the proxy runs far slower while traced.
    perf: starts with its events disabled and is switched on and off through a control FIFO,
    each switch acknowledged, so the window is exact and the proxy runs at nearly full speed.
    """

    def __init__(self, reg, kind, pid):
        self.reg = reg
        self.kind = kind
        tag = "%s-%d" % (kind, time.monotonic_ns())
        self.out_path = os.path.join(reg.base, tag + ".txt")
        if kind == "strace":
            argv = ["strace", "-c", "-f", "-p", str(pid), "-o", self.out_path]
        else:
            ctl, ack = (os.path.join(reg.base, tag + x) for x in (".ctl", ".ack"))
            os.mkfifo(ctl)
            os.mkfifo(ack)
            # O_RDWR: opening a FIFO that way never blocks, whatever order perf opens its ends in.
            self.ctl = os.open(ctl, os.O_RDWR)
            self.ack = os.open(ack, os.O_RDWR | os.O_NONBLOCK)
            argv = ["perf", "stat", "-x", ",", "-o", self.out_path, "-p", str(pid), "-D", "-1",
                    "--control", "fifo:%s,%s" % (ctl, ack)]
            for e in ["raw_syscalls:sys_enter"] + ["syscalls:sys_enter_" + n for n in IDLE_EXCLUDED]:
                argv += ["-e", e]
        self.proc, self.log_path = reg.spawn(kind, argv, log_name=tag)

    def _alive(self):
        if self.proc.poll() is not None:
            raise RuntimeError("%s exited (%s)%s" % (self.kind, self.proc.returncode, procs.tail(self.log_path)))

    def _command(self, word, timeout=10):
        os.write(self.ctl, word.encode() + b"\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._alive()
            try:
                if b"ack" in os.read(self.ack, 64):
                    return
            except BlockingIOError:
                pass
            time.sleep(0.005)
        raise RuntimeError("perf did not acknowledge %r within %ss" % (word, timeout))

    def begin(self, timeout=10):
        if self.kind == "perf":
            return self._command("enable")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._alive()
            with open(self.log_path, errors="replace") as f:
                if "attached" in f.read():
                    return
            time.sleep(0.02)
        raise RuntimeError("strace did not attach within %ss%s" % (timeout, procs.tail(self.log_path)))

    def end(self):
        if self.kind == "perf":
            self._command("disable")
        self.reg.stop(self.proc, timeout=30, sig=signal.SIGINT)
        return parse_counter(self.kind, self.out_path)

    def close(self):
        self.reg.stop(self.proc, timeout=5)
        if self.kind == "perf":
            os.close(self.ctl)
            os.close(self.ack)


def parse_counter(kind, path):
    """Returns {syscall: calls} (perf: only the idle ones plus "total")."""
    calls = {}
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    if kind == "strace":
        for line in lines:
            parts = line.split()
            if len(parts) < 5 or parts[-1] == "total" or not re.match(r"^[\d.]+$", parts[0]):
                continue
            nums = parts[:-1]
            calls[parts[-1]] = int(nums[3])
        calls["total"] = sum(calls.values())
    else:
        for line in lines:
            if not line or line.startswith("#"):
                continue
            fields = line.split(",")
            if len(fields) < 3 or not fields[0].isdigit():
                continue
            event = fields[2]
            name = "total" if event == "raw_syscalls:sys_enter" else event.split("sys_enter_")[-1]
            calls[name] = int(fields[0])
        if "total" in calls:
            # perf counts only these events: name the rest as one figure for the breakdown.
            calls["all but epoll/futex"] = calls["total"] - sum(calls.get(n, 0) for n in IDLE_EXCLUDED)
    return calls


# --- the benchmark ------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, reg, binary):
        self.args = args
        self.reg = reg
        self.binary = binary
        self.results = {}  # (test, threads, path) -> [run dicts]
        self.rss = {}  # (test, threads, path) -> KiB
        self.syscalls = {}  # (test, threads, path) -> {"per_query": ..., "calls": ..., "queries": ...}
        self.dist = {}  # path -> [questions per backend, summed over runs]
        self.connect = {}  # path -> [run dicts]
        self.conns = None
        self.notes = []

    # set-up

    def start(self):
        template = procs.make_template(self.reg)
        self.tls = procs.make_tls_files(self.reg.base)
        self.backends = [procs.MariaDB(self.reg, "db%d" % i, template) for i in (1, 2, 3)]
        pp = ["--proxy-protocol-networks=127.0.0.0/8,localhost"] if self.args.proxy_protocol else []
        for b in self.backends:
            b.start(["--ssl-cert=" + self.tls["cert"], "--ssl-key=" + self.tls["key"],
                     "--ssl-ca=" + self.tls["ca"]] + pp)
        log("backends: " + ", ".join("%s 127.0.0.1:%d %s" % (b.name, b.port, b.socket) for b in self.backends))
        self.prepare()
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.hard = hard if hard != resource.RLIM_INFINITY else 1 << 20
        # HAProxy refuses to start when 2 x maxconn (plus its own few) exceeds the fd limit.
        self.haproxy_maxconn = min(10000, (self.hard - 200) // 2)
        self.start_proxies()

    def prepare(self):
        log("sysbench prepare: %d tables x %d rows on each backend" % (TABLES, TABLE_SIZE))
        running = []
        for b in self.backends:
            t = Target(b.name, tcp_args([b.addr]))
            argv = prepare_argv(t)
            running.append(self.reg.spawn("prepare-" + b.name, argv))
        for proc, log_path in running:
            if proc.wait(300) != 0:
                raise RuntimeError("sysbench prepare failed" + procs.tail(log_path))
            self.reg.stop(proc)

    def start_proxies(self):
        hp, hp_addr = procs.start_haproxy(self.reg, self.backends, self.haproxy_maxconn)
        lb_addr = ("127.0.0.1", procs.free_port())
        extra = self.args.lb_args.split()
        tcp_backends = ["127.0.0.1:%d" % b.port for b in self.backends]
        # The backends offer TLS, which mysql-lb takes by default (`preferred`): the plaintext
        # paths say no, so they stay what they measure.
        plain = extra + ["--config", procs.write_config(
            os.path.join(self.reg.base, "plain.yaml"), tcp_backends, "backend_tls: {mode: disabled}\n")]
        lb, self.lb_admin, _ = procs.start_mysql_lb(
            self.reg, self.binary, "mysql-lb", lb_addr, tcp_backends, plain
        )
        self.lb_addr = lb_addr
        # Issue 12's deferred connect: the same plaintext proxy, greeting clients itself.
        lbd_addr = ("127.0.0.1", procs.free_port())
        deferred = extra + ["--config", procs.write_config(
            os.path.join(self.reg.base, "deferred.yaml"), tcp_backends,
            "backend_tls: {mode: disabled}\nconnect_mode: deferred\n")]
        lbd, _, _ = procs.start_mysql_lb(
            self.reg, self.binary, "mysql-lb-deferred", lbd_addr, tcp_backends, deferred
        )
        self.lb_deferred = Target("mysql-lb deferred", tcp_args([lbd_addr]), lbd)
        # The plaintext proxy with the query digest table off (on by default): what digests
        # cost per query is "mysql-lb" against this path.
        lbn_addr = ("127.0.0.1", procs.free_port())
        digests = extra + ["--config", procs.write_config(
            os.path.join(self.reg.base, "digests.yaml"), tcp_backends,
            "backend_tls: {mode: disabled}\ndigests: {enabled: false}\n")]
        lbn, _, _ = procs.start_mysql_lb(
            self.reg, self.binary, "mysql-lb-digests-off", lbn_addr, tcp_backends, digests
        )
        self.lb_digests = Target("mysql-lb digests off", tcp_args([lbn_addr]), lbn)
        # The plaintext proxy capturing everything for the whole run (POST /capture/start):
        # what a running capture costs is this path against "mysql-lb".
        lbc_addr = ("127.0.0.1", procs.free_port())
        lbc, lbc_admin, _ = procs.start_mysql_lb(
            self.reg, self.binary, "mysql-lb-capture", lbc_addr, tcp_backends, plain
        )
        start_capture(lbc_admin, os.path.join(self.reg.base, "capture"))
        self.lb_capture_admin = lbc_admin
        self.lb_capture = Target("mysql-lb capture", tcp_args([lbc_addr]), lbc)
        lb_sock = os.path.join(self.reg.base, "mysql-lb.sock")
        lbu, self.lbu_admin, _ = procs.start_mysql_lb(
            self.reg, self.binary, "mysql-lb-unix", lb_sock, [b.socket for b in self.backends], extra
        )
        variants = []
        for spec in self.args.variant:
            name, _, flags = spec.partition("=")
            addr = ("127.0.0.1", procs.free_port())
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.binary, "mysql-lb-" + name.replace(" ", "-"), addr, tcp_backends,
                plain + flags.split(),
            )
            variants.append(Target("mysql-lb " + name, tcp_args([addr]), proc))
        for version in ("v1", "v2") if self.args.proxy_protocol else ():
            addr = ("127.0.0.1", procs.free_port())
            flags = extra + ["--config", procs.write_config(
                os.path.join(self.reg.base, "pp-%s.yaml" % version), tcp_backends,
                "backend_tls: {mode: disabled}\nproxy_protocol: %s\n" % version)]
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.binary, "mysql-lb-pp-" + version, addr, tcp_backends, flags)
            variants.append(Target("mysql-lb pp " + version, tcp_args([addr]), proc))
        if self.args.proxy_protocol:
            variants += self.start_haproxy_fronted(extra, tcp_backends)
        baseline, baseline_unix = [], []
        if self.args.baseline:
            addr = ("127.0.0.1", procs.free_port())
            # The same plaintext backend leg as "mysql-lb" (with `extra` alone it took TLS to
            # the backends, which offer it, and measured a TLS path against a plaintext one).
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.args.baseline, "baseline", addr, tcp_backends, plain)
            baseline.append(Target("baseline", tcp_args([addr]), proc))
            # And its deferred connect, beside "mysql-lb deferred".
            addr = ("127.0.0.1", procs.free_port())
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.args.baseline, "baseline-deferred", addr, tcp_backends, deferred)
            baseline.append(Target("baseline deferred", tcp_args([addr]), proc))
            sock = os.path.join(self.reg.base, "baseline.sock")
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.args.baseline, "baseline-unix", sock, [b.socket for b in self.backends], extra)
            baseline_unix.append(Target("baseline unix", socket_args([sock]), proc))
        self.direct = Target("direct", tcp_args([b.addr for b in self.backends]))
        self.haproxy = Target("haproxy", tcp_args([hp_addr]), hp)
        pump_addr = ("127.0.0.1", procs.free_port())
        pump = procs.start_pump(self.reg, pump_binary(self.binary), "pump", pump_addr, tcp_backends)
        self.pump = Target("bare relay", tcp_args([pump_addr]), pump)
        pump_sock = os.path.join(self.reg.base, "pump.sock")
        pumpu = procs.start_pump(
            self.reg, pump_binary(self.binary), "pump-unix", pump_sock, [b.socket for b in self.backends]
        )
        self.pump_unix = Target("bare relay unix", socket_args([pump_sock]), pumpu)
        self.lb = Target("mysql-lb", tcp_args([lb_addr]), lb)
        self.direct_unix = Target("direct unix", socket_args([b.socket for b in self.backends]))
        self.lb_unix = Target("mysql-lb unix", socket_args([lb_sock]), lbu)
        tls_targets, tls_proxies = self.start_tls_proxies(extra, tcp_backends)
        self.targets = [self.direct, self.haproxy, self.pump, self.lb, self.lb_digests, self.lb_capture, self.lb_deferred] + baseline + variants + [
            self.direct_unix, self.pump_unix, self.lb_unix] + baseline_unix + tls_targets
        self.proxies = [self.haproxy, self.pump, self.lb, self.lb_digests, self.lb_capture, self.lb_deferred] + baseline + variants + [
            self.pump_unix, self.lb_unix] + baseline_unix + tls_proxies
        if self.args.paths:
            unknown = set(self.args.paths) - {t.name for t in self.targets}
            if unknown:
                raise RuntimeError("--paths: no such path %s" % ", ".join(sorted(unknown)))
            self.targets = [t for t in self.targets if t.name in self.args.paths]
            self.proxies = [t for t in self.proxies if t.name in self.args.paths]
        log("haproxy pid %d (maxconn %d), mysql-lb pid %d (admin %d), mysql-lb unix pid %d (admin %d)"
            % (hp.pid, self.haproxy_maxconn, lb.pid, self.lb_admin, lbu.pid, self.lbu_admin))

    def start_haproxy_fronted(self, extra, tcp_backends):
        """HAProxy (tcp mode) in front of a mysql-lb of its own: without headers, and with
        `send-proxy-v2` into `accept_proxy_protocol` and `proxy_protocol: v2` on to the backends.
        Each target's CPU is its mysql-lb's."""
        paths = {
            "haproxy+mysql-lb": ("", ""),
            "haproxy+mysql-lb pp both": (
                "accept_proxy_protocol: [127.0.0.0/8]\nproxy_protocol: v2\n", "send-proxy-v2"),
        }
        targets = []
        for name, (body, server_opts) in paths.items():
            slug = name.replace(" ", "-").replace("+", "-")
            cfg = procs.write_config(os.path.join(self.reg.base, slug + ".yaml"), tcp_backends,
                                     "backend_tls: {mode: disabled}\n" + body)
            addr = ("127.0.0.1", procs.free_port())
            # A listener in accept_proxy_protocol waits for a header before it greets: the
            # readiness probe is then start_haproxy's, a greeting through the whole chain.
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.binary, slug, addr, tcp_backends, extra + ["--config", cfg],
                ready=(lambda: True) if server_opts else None)
            _, hp_addr = procs.start_haproxy(self.reg, [addr], self.haproxy_maxconn,
                                             name="haproxy-" + slug, server_opts=server_opts)
            targets.append(Target(name, tcp_args([hp_addr]), proc))
        return targets

    def start_tls_proxies(self, extra, tcp_backends):
        """The TLS and compressed paths: (targets, the proxies among them)."""
        t = self.tls
        ssl = ["--mysql-ssl=on"]
        zlib = ["--mysql-compression=on"]
        client_leg = "tls: {cert: %s, key: %s}\n" % (t["cert"], t["key"])
        cli_tls = ["--ssl", "--ssl-ca=" + t["ca"], "--ssl-verify-server-cert"]
        configs = {
            "mysql-lb tls": client_leg + "backend_tls: {mode: disabled}\n",
            "mysql-lb tls both": client_leg + "backend_tls: {mode: verify_identity, ca: %s}\n" % t["ca"],
        }
        targets, proxies = [], []
        for name, body in configs.items():
            slug = name.replace(" ", "-")
            cfg = procs.write_config(os.path.join(self.reg.base, slug + ".yaml"), tcp_backends, body)
            addr = ("127.0.0.1", procs.free_port())
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.binary, slug, addr, tcp_backends, extra + ["--config", cfg])
            target = Target(name, tcp_args([addr]) + ssl, proc, cwd=t["sysbench_dir"],
                            probe=(addr, cli_tls))
            targets.append(target)
            proxies.append(target)
        first = self.backends[0].addr
        direct_tls = Target("direct tls", tcp_args([b.addr for b in self.backends]) + ssl,
                            cwd=t["sysbench_dir"], probe=(first, cli_tls))
        direct_zlib = Target("direct compressed", tcp_args([b.addr for b in self.backends]) + zlib,
                             probe=(first, ["--compress"]))
        lb_zlib = Target("mysql-lb compressed", self.lb.conn_args + zlib, self.lb.proc,
                         probe=(self.lb_addr, ["--compress"]))
        return [direct_tls] + targets + [direct_zlib, lb_zlib], proxies + [lb_zlib]

    def check_tls(self):
        """Each TLS or compressed path must be what it says: sysbench 1.0 falls back to plaintext
        (and uncompressed) without a word when the server does not offer it. The `mariadb` CLI,
        which refuses to fall back, checks the client leg (`status`: "Cipher in use", "Protocol:
        Compressed"); where the backends can tell (direct tls, mysql-lb tls both), a 1 s
        connection loop must raise their Ssl_finished_accepts. A path that fails is dropped from
        the run with a note, the rest goes on."""
        script = os.path.join(HERE, "connect.lua")
        for target in [t for t in self.targets if t.probe]:
            (host, port), flags = target.probe
            out = subprocess.run(
                ["mariadb", "--no-defaults", "--protocol=tcp", "--host=" + host, "--port=%d" % port,
                 "--user=" + procs.BENCH_USER, "--password=" + procs.BENCH_PASS] + flags + ["-e", "status"],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
            want = "Cipher in use" if "--ssl" in flags else "Compressed"
            problem = None
            if out.returncode != 0 or want not in out.stdout:
                problem = "the mariadb CLI (%s) did not get it: %s" % (
                    " ".join(flags[:1]), (out.stderr.strip() or "no %r in its status" % want)[:200])
            elif target.name in ("direct tls", "mysql-lb tls both"):
                before = self.ssl_accepts()
                rc, _ = run_capture(self.reg, sysbench_argv(script, target, 1, 1), 60, cwd=target.cwd)
                gained = self.ssl_accepts() - before
                if rc != 0 or gained <= 0:
                    problem = "sysbench made %d TLS handshakes at the backends (exit %s)" % (gained, rc)
                else:
                    log("%s: %d TLS handshakes at the backends in a 1 s check" % (target.name, gained))
            if problem:
                log("%s: dropped: %s" % (target.name, problem))
                self.notes.append("Path `%s` was dropped: %s." % (target.name, problem))
                self.targets = [t for t in self.targets if t is not target]
                self.proxies = [t for t in self.proxies if t is not target]

    def ssl_accepts(self):
        total = 0
        for b in self.backends:
            c = b.connect()
            try:
                total += int(c.query("SHOW GLOBAL STATUS LIKE 'Ssl_finished_accepts'")[0][1])
            finally:
                c.close()
        return total

    # the sysbench matrix

    def cells(self):
        return [(test, threads) for test in self.args.tests for threads in self.args.threads]

    def run_matrix(self):
        monitor = Monitor(self.backends)
        try:
            for rnd in range(self.args.rounds):
                # Every other round runs the paths in the opposite order, so no path always
                # follows the same one (and inherits its teardown: the backends closing its
                # connections while the next run starts).
                order = self.targets if rnd % 2 == 0 else self.targets[::-1]
                for test, threads in self.cells():
                    for target in order:
                        self.run_one(monitor, rnd, test, threads, target)
                    for p in self.proxies:
                        self.rss[(test, threads, p.name)] = procs.rss_kib(p.pid)
        finally:
            monitor.close()

    def run_one(self, monitor, rnd, test, threads, target):
        target.check_alive()
        argv = sysbench_argv(test, target, threads, self.args.time)
        q0 = monitor.questions()
        cpu0 = procs.cpu_seconds(target.pid) if target.pid else None
        own0, (busy0, total0) = self.reg.own_cpu(), procs.machine_busy()
        rc, text = run_capture(self.reg, argv, self.args.time + 120, cwd=target.cwd)
        own1, (busy1, total1) = self.reg.own_cpu(), procs.machine_busy()
        cpu1 = procs.cpu_seconds(target.pid) if target.pid else None
        q1 = monitor.questions()
        # CPU that processes this benchmark did not start took from the machine: on a shared
        # machine, the honest caveat on every number.
        foreign = max(0.0, (busy1 - busy0) - (own1 - own0)) / max(total1 - total0, 1e-9)
        res = parse_sysbench(text) if rc == 0 else {}
        tag = "[round %d/%d] %s %dt %-13s" % (rnd + 1, self.args.rounds, test, threads, target.name)
        if rc != 0 or not res.get("qps"):
            log("%s FAILED (exit %s):\n%s" % (tag, rc, "\n".join(text.splitlines()[-15:])))
            self.results.setdefault((test, threads, target.name), [])
            return
        if cpu0 is not None:
            res["cpu"] = cpu1 - cpu0
        res["foreign"] = foreign
        self.results.setdefault((test, threads, target.name), []).append(res)
        d = self.dist.setdefault(target.name, [0] * len(q0))
        for i, (a, b) in enumerate(zip(q0, q1)):
            d[i] += b - a
        extra = ""
        if cpu0 is not None:
            extra = "  proxy CPU %.2f s/10k q" % (res["cpu"] / res["queries"] * 1e4)
        log("%s %9.0f qps  p95 %6.2f ms%s  (other processes: %.0f %% of the CPUs)"
            % (tag, res["qps"], res["p95"] or 0, extra, 100 * foreign))

    # syscalls per query

    def sample_syscalls(self):
        kind = self.args.syscalls
        cells = self.cells()
        if self.args.quick:
            # Quick mode keeps to its time budget: point selects only (the goal's own cell).
            cells = [c for c in cells if c[0] == "oltp_point_select"] or cells[:1]
        monitor = Monitor(self.backends)
        warm = 1.5
        try:
            for test, threads in cells:
                for target in self.proxies:
                    target.check_alive()
                    # Long enough for any attach delay; stopped as soon as the sample is taken.
                    seconds = int(warm + self.args.sample + 30)
                    argv = sysbench_argv(test, target, threads, seconds)
                    sb, sb_log = self.reg.spawn("sysbench", argv, log_name="sample-%d" % time.monotonic_ns(),
                                                cwd=target.cwd)
                    counter = None
                    try:
                        time.sleep(warm)
                        counter = Counter(self.reg, kind, target.pid)
                        # The query window sits inside the counted one.
                        counter.begin()
                        q0 = sum(monitor.questions())
                        time.sleep(self.args.sample)
                        q1 = sum(monitor.questions())
                        calls = counter.end()
                        alive = sb.poll() is None
                    finally:
                        if counter is not None:
                            counter.close()
                        self.reg.stop(sb)
                    if not alive:
                        log("syscall sample %s %dt %s: sysbench ended early%s" % (test, threads, target.name, procs.tail(sb_log)))
                        continue
                    queries = q1 - q0 - len(self.backends)  # minus the second reading's own SHOW
                    if queries <= 0 or not calls.get("total"):
                        log("syscall sample %s %dt %s: nothing counted" % (test, threads, target.name))
                        continue
                    idle = sum(calls.get(n, 0) for n in IDLE_EXCLUDED)
                    s = {
                        "queries": queries,
                        "calls": calls,
                        "total": calls["total"] / queries,
                        "io": (calls["total"] - idle) / queries,
                    }
                    self.syscalls[(test, threads, target.name)] = s
                    log("syscalls %s %dt %-13s %.2f per query, %.2f I/O (%d queries sampled)"
                        % (test, threads, target.name, s["total"], s["io"], queries))
        finally:
            monitor.close()

    # connection setup rate

    def connect_rate(self):
        script = os.path.join(HERE, "connect.lua")
        targets = self.targets
        for rnd in range(self.args.rounds):
            for target in targets:
                target.check_alive()
                argv = sysbench_argv(script, target, self.args.connect_workers, self.args.connect_time)
                cpu0 = procs.cpu_seconds(target.pid) if target.pid else None
                own0, (busy0, total0) = self.reg.own_cpu(), procs.machine_busy()
                rc, text = run_capture(self.reg, argv, self.args.connect_time + 120, cwd=target.cwd)
                own1, (busy1, total1) = self.reg.own_cpu(), procs.machine_busy()
                cpu1 = procs.cpu_seconds(target.pid) if target.pid else None
                res = parse_sysbench(text)
                res["foreign"] = max(0.0, (busy1 - busy0) - (own1 - own0)) / max(total1 - total0, 1e-9)
                if rc != 0 or not res.get("events"):
                    log("connect rate %s FAILED (exit %s):\n%s" % (target.name, rc, "\n".join(text.splitlines()[-15:])))
                    continue
                res["rate"] = res["events"] / res["total_time"]
                if cpu0 is not None:
                    res["cpu"] = cpu1 - cpu0
                self.connect.setdefault(target.name, []).append(res)
                extra = ""
                if cpu0 is not None:
                    extra = "  proxy CPU %.3f ms/connection" % (res["cpu"] / res["events"] * 1e3)
                log("[round %d/%d] connect rate %-15s %7.0f connections/s%s  (other processes: %.0f %% of the CPUs)"
                    % (rnd + 1, self.args.rounds, target.name, res["rate"], extra, 100 * res["foreign"]))
                # Let the TIME_WAIT sockets of this run not crowd the next one's ports.
                time.sleep(1)

    # 10,000 concurrent connections

    def many_connections(self):
        n = self.args.conns
        # Two descriptors per connection plus a reserve: what mysql-lb asks for.
        fits = (self.hard - 64) // 2
        max_conns = None
        if n > fits:
            max_conns = fits // 100 * 100
            self.notes.append(
                "Concurrent connections: %d do not fit the fd hard limit %d (2 per connection + 64); "
                "ran %d with --max-connections %d." % (n, self.hard, max_conns, max_conns)
            )
            n = max_conns
        log("restarting backends with --thread-handling=pool-of-threads for %d connections" % n)
        for b in self.backends:
            b.stop()
            b.start(["--thread-handling=pool-of-threads"])
        soft = min(1024, self.hard)
        extra = ["--max-connections", str(max_conns)] if max_conns else []
        addr = ("127.0.0.1", procs.free_port())
        proc, admin, log_path = procs.start_mysql_lb(
            self.reg, self.binary, "mysql-lb-10k", addr,
            ["127.0.0.1:%d" % b.port for b in self.backends], extra, prlimit_nofile="%d:%d" % (soft, self.hard),
        )
        limits = procs.nofile_limits(proc.pid)
        # Python needs a descriptor per client connection too.
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.hard, self.hard))
        # A first connection warms what every session shares (runtime, pools) before the baseline.
        c = myclient.Conn(addr, procs.BENCH_USER, procs.BENCH_PASS)
        c.query("SELECT 1")
        c.close()
        time.sleep(0.5)
        rss0 = procs.rss_kib(proc.pid)
        t0 = time.monotonic()
        result = asyncio.run(hold_connections(addr, n, lambda: procs.rss_kib(proc.pid), admin))
        result.update(
            {
                "n": n,
                "rss_before_kib": rss0,
                "limits": limits,
                "started_with": "%d:%d" % (soft, self.hard),
                "seconds": time.monotonic() - t0,
            }
        )
        result["per_conn_kib"] = (result["rss_after_select_kib"] - rss0) / max(result["opened"], 1)
        self.reg.stop(proc, timeout=30)
        self.conns = result
        log("concurrent connections: %(opened)d/%(n)d opened, %(answered)d answered SELECT 1" % result)

    # output

    def report(self, info):
        a = self.args
        lines = []
        w = lines.append
        w("# mysql-lb load benchmark")
        w("")
        w("Run %s with `python3 benches/load/run.py%s` (%d round%s x %d s per cell, interleaved; "
          "sysbench `--tables=%d --table-size=%d --db-ps-mode=disable`, i.e. the text protocol)."
          % (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), " --quick" if a.quick else "",
             a.rounds, "s" if a.rounds > 1 else "", a.time, TABLES, TABLE_SIZE))
        w("")
        for k, v in info.items():
            w("- %s: %s" % (k, v))
        w("")
        if self.results:
            w("## Throughput and cost per query")
            w("")
            w("| test | threads | path | qps median (min–max) | × direct | × haproxy | p95 ms | proxy CPU s / 10k q | syscalls / q | I/O calls / q | proxy RSS MiB | other CPU % |")
            w("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for test, threads in self.cells():
                base = self.median_qps(test, threads, "direct")
                hp = self.median_qps(test, threads, "haproxy")
                for t in self.targets:
                    w(self.row(test, threads, t.name, base, hp))
            w("")
            w("× direct, × haproxy: median qps over the median of direct TCP (of HAProxy) in the same "
              "cell. bare relay: benches/load/pump.rs, bytes copied and nothing else. CPU: utime+stime of "
              "the proxy process (all threads) over each measured run. Syscalls: %s attached to the proxy "
              "for %.1f s in a separate run per proxy and cell%s; queries in that window from the "
              "backends' `Questions` counters; I/O calls = all but epoll_wait/epoll_pwait/futex. RSS: "
              "VmRSS at the end of the cell's last round. Other CPU: median share of the machine's CPUs "
              "used by processes this benchmark did not start during the runs (see below)."
              % ("`strace -c -f -p PID`" if a.syscalls == "strace" else "`perf stat` on raw_syscalls:sys_enter",
                 a.sample, " (quick mode: point selects only)" if a.quick else ""))
            w("")
            foreign = [r["foreign"] for runs in self.results.values() for r in runs]
            if foreign:
                w("CPU taken by processes this benchmark did not start, during the measured runs "
                  "(/proc/stat busy time minus this script's own process tree, as a share of all CPUs): "
                  "median %.0f %%, max %.0f %%. Above a few percent, the machine was shared and the "
                  "absolute numbers are low; the interleaving keeps the comparison fair on average."
                  % (100 * statistics.median(foreign), 100 * max(foreign)))
                w("")
            cap = capture_status(self.lb_capture_admin) if getattr(self, "lb_capture_admin", None) else None
            if cap:
                commands = max(cap.get("commands", 0), 1)
                written = cap.get("bytes_written", 0)
                w("Capture (path \"mysql-lb capture\", running for the whole run): %d sessions, %d commands, "
                  "%d bytes written (%.1f MB per million commands), %d records dropped."
                  % (cap.get("sessions", 0), cap.get("commands", 0), written,
                     written / commands, cap.get("dropped", 0)))
                w("")
            if self.dist:
                w("Share of queries per backend over all measured runs (checks that every path spreads load):")
                w("")
                for name, d in self.dist.items():
                    total = sum(d) or 1
                    w("- %s: %s" % (name, " / ".join("%.0f %%" % (100 * x / total) for x in d)))
                w("")
        if self.syscalls:
            w("## Syscalls per query, by call")
            w("")
            for (test, threads, name), s in self.syscalls.items():
                top = sorted(((c, k) for k, c in s["calls"].items() if k != "total"), reverse=True)[:8]
                w("- %s %dt %s (%d queries): %s" % (test, threads, name, s["queries"],
                  ", ".join("%s %.2f" % (k, c / s["queries"]) for c, k in top)))
            w("")
        if self.connect:
            w("## Connection setup rate")
            w("")
            w("%d sysbench threads, each looping connect → authenticate → `SELECT 1` → COM_QUIT "
              "(benches/load/connect.lua), %d s per run, %d round%s interleaved."
              % (a.connect_workers, a.connect_time, a.rounds, "s" if a.rounds > 1 else ""))
            w("")
            w("| path | connections/s median (min–max) | × haproxy | proxy CPU ms / connection | other CPU % |")
            w("|---|---|---:|---:|---:|")
            hp = self.connect.get("haproxy")
            hp_med = statistics.median(r["rate"] for r in hp) if hp else None
            for name in [t.name for t in self.targets]:
                runs = self.connect.get(name)
                if not runs:
                    w("| %s | failed | | | |" % name)
                    continue
                rates = [r["rate"] for r in runs]
                med = statistics.median(rates)
                cpu = [r["cpu"] / r["events"] * 1e3 for r in runs if "cpu" in r]
                w("| %s | %.0f (%.0f–%.0f) | %s | %s | %.0f |" % (
                    name, med, min(rates), max(rates),
                    "%.2f" % (med / hp_med) if hp_med else "",
                    "%.3f" % statistics.median(cpu) if cpu else "—",
                    100 * statistics.median(r["foreign"] for r in runs)))
            w("")
        if self.conns:
            c = self.conns
            w("## Concurrent connections")
            w("")
            w("A fresh mysql-lb started under `prlimit --nofile=%s` (soft:hard); its limits once running: "
              "soft %s, hard %s. Backends restarted with `--thread-handling=pool-of-threads "
              "--max-connections=12000`." % (c["started_with"], c["limits"][0], c["limits"][1]))
            w("")
            w("| connections | opened | answered SELECT 1 | errors | proxy RSS before → all open → after SELECT 1 (MiB) | RSS per connection (KiB) | client_connections gauge |")
            w("|---:|---:|---:|---|---|---:|---:|")
            per_conn = c["per_conn_kib"]
            w("| %d | %d | %d | %s | %.1f → %.1f → %.1f | %.1f | %s |" % (
                c["n"], c["opened"], c["answered"], "; ".join(c["errors"]) or "none",
                c["rss_before_kib"] / 1024, c["rss_open_kib"] / 1024, c["rss_after_select_kib"] / 1024,
                per_conn, c.get("gauge", "?")))
            w("")
        goals = self.goals()
        if goals:
            w("## Issue 5 and issue 11 goals on this run")
            w("")
            for g in goals:
                w("- " + g)
            w("")
        if self.notes:
            w("## Notes")
            w("")
            for n in self.notes:
                w("- " + n)
            w("")
        return "\n".join(lines)

    def floor(self, relay, anchor):
        """How far the bare relay itself gets against `anchor`: the ceiling for any proxy here."""
        ratios = []
        for test, threads in self.cells():
            r, a = self.median_qps(test, threads, relay), self.median_qps(test, threads, anchor)
            if r and a:
                ratios.append(r / a)
        if not ratios:
            return ""
        return " (the %s, which only copies bytes, reaches %.2f–%.2f× %s)" % (
            relay, min(ratios), max(ratios), "direct TCP" if anchor == "direct" else "HAProxy")

    def median_qps(self, test, threads, name):
        runs = self.results.get((test, threads, name))
        return statistics.median(r["qps"] for r in runs) if runs else None

    def row(self, test, threads, name, base, hp):
        runs = self.results.get((test, threads, name)) or []
        if not runs:
            return "| %s | %d | %s | failed | | | | | | | | |" % (test, threads, name)
        qps = [r["qps"] for r in runs]
        med = statistics.median(qps)
        p95 = statistics.median(r["p95"] for r in runs if r["p95"] is not None)
        cpu = [r["cpu"] / r["queries"] * 1e4 for r in runs if "cpu" in r]
        s = self.syscalls.get((test, threads, name))
        rss = self.rss.get((test, threads, name))
        return "| %s | %d | %s | %.0f (%.0f–%.0f) | %s | %s | %.2f | %s | %s | %s | %s | %.0f |" % (
            test, threads, name, med, min(qps), max(qps),
            "%.2f" % (med / base) if base else "",
            "%.2f" % (med / hp) if hp else "",
            p95,
            "%.3f" % statistics.median(cpu) if cpu else "—",
            "%.2f" % s["total"] if s else "—",
            "%.2f" % s["io"] if s else "—",
            "%.1f" % (rss / 1024) if rss else "—",
            100 * statistics.median(r["foreign"] for r in runs),
        )

    def goals(self):
        out = []

        def verdict(ok):
            return "met" if ok else "NOT met"

        if self.results:
            worst = None
            for test, threads in self.cells():
                lb, hp = self.median_qps(test, threads, "mysql-lb"), self.median_qps(test, threads, "haproxy")
                if lb and hp:
                    r = lb / hp
                    worst = r if worst is None else min(worst, r)
            if worst is not None:
                out.append("3. throughput ≥ 1.2× HAProxy in every cell: lowest mysql-lb/HAProxy ratio %.2f — %s%s"
                           % (worst, verdict(worst >= 1.2), self.floor("bare relay", "haproxy")))
            cpu_ok, p95_ok, parts = True, True, []
            for test, threads in self.cells():
                def med(name, key):
                    runs = self.results.get((test, threads, name)) or []
                    vals = [r[key] / r["queries"] * 1e4 if key == "cpu" else r[key] for r in runs if r.get(key) is not None]
                    return statistics.median(vals) if vals else None
                lc, hc = med("mysql-lb", "cpu"), med("haproxy", "cpu")
                if lc is not None and hc is not None:
                    cpu_ok &= lc <= hc
                    parts.append("%s %dt %.3f vs %.3f" % (test, threads, lc, hc))
                if threads == 8:
                    lp, hpp = med("mysql-lb", "p95"), med("haproxy", "p95")
                    if lp is not None and hpp is not None:
                        p95_ok &= lp <= hpp
            if parts:
                out.append("4a. proxy CPU per query ≤ HAProxy's (s/10k q, mysql-lb vs HAProxy: %s) — %s"
                           % ("; ".join(parts), verdict(cpu_ok)))
            out.append("5. p95 at 8 threads ≤ HAProxy's — %s" % verdict(p95_ok))
            ratios = []
            for test, threads in self.cells():
                u, d = self.median_qps(test, threads, "mysql-lb unix"), self.median_qps(test, threads, "direct")
                if u and d:
                    ratios.append(u / d)
            if ratios:
                out.append("6. unix end to end ≥ 0.85× direct TCP: lowest %.2f — %s%s"
                           % (min(ratios), verdict(min(ratios) >= 0.85), self.floor("bare relay unix", "direct")))
            def cpu_of(test, threads, name):
                runs = self.results.get((test, threads, name)) or []
                vals = [r["cpu"] / r["queries"] * 1e4 for r in runs if r.get("cpu") is not None]
                return statistics.median(vals) if vals else None

            floor = []
            for test, threads in self.cells():
                for lb_name, relay in (("mysql-lb", "bare relay"), ("mysql-lb unix", "bare relay unix")):
                    lc, rc = cpu_of(test, threads, lb_name), cpu_of(test, threads, relay)
                    if lc is not None and rc:
                        floor.append((lc / rc, "%s %dt %s %.3f vs %.3f" % (test, threads, lb_name, lc, rc)))
            if floor:
                out.append("10.2. proxy CPU per query within 5 %% of the bare relay in every cell (s/10k q: %s) — %s"
                           % ("; ".join(f[1] for f in floor), verdict(max(f[0] for f in floor) <= 1.05)))
        if self.syscalls:
            io = [s["io"] for (t, _, n), s in self.syscalls.items() if t == "oltp_point_select" and n == "mysql-lb"]
            if io:
                out.append("4b. ≤ 4.5 I/O syscalls per point select through mysql-lb: worst %.2f — %s" % (max(io), verdict(max(io) <= 4.5)))
            fewer, seen = True, False
            for (t, th, n), s in self.syscalls.items():
                if n == "mysql-lb" and (t, th, "haproxy") in self.syscalls:
                    seen = True
                    fewer &= s["total"] < self.syscalls[(t, th, "haproxy")]["total"]
            if seen:
                out.append("4c. fewer syscalls in total than HAProxy in every sampled cell — %s" % verdict(fewer))
        if self.conns:
            c = self.conns
            ok = c["answered"] == c["n"] and c["per_conn_kib"] <= 32
            out.append("7. %d concurrent connections, all answering SELECT 1, RSS ≤ 32 KiB each: %d answered, %.1f KiB each — %s"
                       % (c["n"], c["answered"], c["per_conn_kib"], verdict(ok)))
        hp, lb = self.connect.get("haproxy"), self.connect.get("mysql-lb")
        if hp and lb:
            r = statistics.median(x["rate"] for x in lb) / statistics.median(x["rate"] for x in hp)
            out.append("8. connection setup ≥ 0.8× HAProxy: %.2f — %s" % (r, verdict(r >= 0.8)))
        lbd = self.connect.get("mysql-lb deferred")
        if lbd and lb:
            r = statistics.median(x["rate"] for x in lbd) / statistics.median(x["rate"] for x in lb)
            out.append("12. connection setup with deferred connect vs immediate mysql-lb (reported): %.2f" % r)
        return out + self.tls_goals(verdict)

    def tls_goals(self, verdict):
        """Issue 11's goals: TLS and compressed paths beside plaintext mysql-lb."""
        out = []
        for name, goal in (("mysql-lb tls", 0.85), ("mysql-lb tls both", 0.75)):
            ratios = []
            for test, threads in self.cells():
                t, p = self.median_qps(test, threads, name), self.median_qps(test, threads, "mysql-lb")
                if t and p:
                    ratios.append(t / p)
            if ratios:
                out.append("11. %s ≥ %.2f× plaintext mysql-lb qps: lowest %.2f — %s"
                           % (name, goal, min(ratios), verdict(min(ratios) >= goal)))
        lt, dt = self.connect.get("mysql-lb tls"), self.connect.get("direct tls")
        if lt and dt:
            r = statistics.median(x["rate"] for x in lt) / statistics.median(x["rate"] for x in dt)
            out.append("11. TLS connection setup through mysql-lb ≥ 0.8× direct TLS: %.2f — %s"
                       % (r, verdict(r >= 0.8)))
        parts = []
        for test, threads in self.cells():
            cpu = {}
            for name in ("mysql-lb", "mysql-lb tls", "mysql-lb tls both", "mysql-lb compressed"):
                runs = self.results.get((test, threads, name)) or []
                vals = [r["cpu"] / r["queries"] * 1e4 for r in runs if r.get("cpu") is not None]
                if vals:
                    cpu[name] = statistics.median(vals)
            if len(cpu) > 1:
                parts.append("%s %dt: %s" % (test, threads, ", ".join("%s %.3f" % kv for kv in cpu.items())))
        if parts:
            out.append("11. proxy CPU s / 10k q, plaintext vs TLS vs compressed (reported): " + "; ".join(parts))
        return out


async def hold_connections(addr, n, rss, admin_port):
    """Opens n connections (bounded concurrency), then runs SELECT 1 on every one."""
    conns, errors = [], {}
    sem = asyncio.Semaphore(256)

    def note(e):
        key = "%s: %s" % (type(e).__name__, str(e)[:80])
        errors[key] = errors.get(key, 0) + 1

    async def open_one():
        async with sem:
            try:
                conns.append(await asyncio.wait_for(
                    myclient.AsyncConn.connect(addr, procs.BENCH_USER, procs.BENCH_PASS), 60))
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, myclient.MySQLError) as e:
                note(e)

    async def select_one(c):
        async with sem:
            try:
                rows = await asyncio.wait_for(c.query("SELECT 1"), 60)
                return rows == [["1"]]
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, myclient.MySQLError) as e:
                note(e)
                return False

    await asyncio.gather(*(open_one() for _ in range(n)))
    await asyncio.sleep(0.5)
    rss_open = rss()
    gauge = await asyncio.get_running_loop().run_in_executor(None, read_gauge, admin_port)
    answered = sum(await asyncio.gather(*(select_one(c) for c in conns)))
    rss_select = rss()
    for c in conns:
        c.abort()
    await asyncio.sleep(0.2)
    return {
        "opened": len(conns),
        "answered": answered,
        "errors": ["%s (x%d)" % (k, v) for k, v in errors.items()],
        "rss_open_kib": rss_open,
        "rss_after_select_kib": rss_select,
        "gauge": gauge,
    }


def start_capture(admin_port, directory):
    """Starts a capture of everything into `directory` (which must not exist) on the mysql-lb
    whose admin endpoint is `admin_port`."""
    body = ('{"dir": "%s"}' % directory).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/capture/start" % admin_port, data=body,
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()


def capture_status(admin_port):
    """The running capture's `GET /capture` answer, or None."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/capture" % admin_port, timeout=10) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def read_gauge(admin_port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin_port, timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        return "unreadable (%s)" % e
    m = re.search(r"^mysql_lb_client_connections(?:\{[^}]*\})? ([\d.e+]+)$", text, re.M)
    return "%.0f" % float(m.group(1)) if m else "absent"


def latency_samples(admin_port):
    """Total of mysql-lb's query latency histogram counts: proof that recording was on."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % admin_port, timeout=10) as r:
        text = r.read().decode()
    return sum(
        float(v) for v in re.findall(r"^mysql_lb_backend_query_duration_seconds_count\{[^}]*\} ([\d.e+]+)$", text, re.M)
    )


def main():
    args = parse_args()

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    started = time.monotonic()
    ensure_deps(args)
    binary = build(args)
    info = versions(binary)
    if "hetero" not in args.skip:
        info["load average at start"] = " ".join("%.2f" % x for x in os.getloadavg())
        sys.exit(hetero.main(args, binary, info))
    if args.baseline:
        info["baseline"] = args.baseline
    reg = procs.Registry()
    bench = Bench(args, reg, binary)
    try:
        phase = time.monotonic()

        def done(what):
            nonlocal phase
            log("-- %s took %.0f s" % (what, time.monotonic() - phase))
            phase = time.monotonic()

        bench.start()
        bench.check_tls()
        done("set-up")
        if "matrix" not in args.skip:
            bench.run_matrix()
            done("sysbench matrix")
            for name, port in (("mysql-lb", bench.lb_admin), ("mysql-lb unix", bench.lbu_admin)):
                n = latency_samples(port)
                bench.notes.append("%s recorded %d query latencies in its metrics (recording on)." % (name, n))
        if "syscalls" not in args.skip and args.syscalls != "off":
            bench.sample_syscalls()
            done("syscall samples")
        if "connect-rate" not in args.skip:
            bench.connect_rate()
            done("connection rate")
        if "conns" not in args.skip:
            bench.many_connections()
            done("concurrent connections")
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        reg.close()
        sys.exit(130)
    except Exception as e:  # keep what was measured so far
        log("benchmark failed: %s: %s" % (type(e).__name__, e))
        bench.notes.append("The run stopped early: %s: %s" % (type(e).__name__, e))
        failed = True
    else:
        failed = False
    finally:
        reg.close()
    info["wall time"] = "%.0f s" % (time.monotonic() - started)
    text = bench.report(info)
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    log("written to %s" % args.out)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
