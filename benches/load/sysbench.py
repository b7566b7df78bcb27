"""sysbench for the load benchmarks: the paths it is pointed at (`Target`), its command line over
the benchmark's tables, and what is read back from its report. Shared by run.py and hetero.py.
"""

import re

import procs

TABLES = 4
TABLE_SIZE = 10000


class Target:
    """One way of reaching the backends."""

    def __init__(self, name, conn_args, proc=None, cwd=None, probe=None):
        self.name = name
        self.conn_args = conn_args
        self.proc = proc
        # sysbench's working directory: where it finds its TLS files.
        self.cwd = cwd
        # (address, CLI flags) the `mariadb` CLI checks this path's TLS or compression with.
        self.probe = probe

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def check_alive(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (self.name, self.proc.returncode))


def tcp_args(addrs):
    return [
        "--mysql-host=" + ",".join(a[0] for a in addrs),
        "--mysql-port=" + ",".join(str(a[1]) for a in addrs),
    ]


def socket_args(paths):
    return ["--mysql-socket=" + ",".join(paths)]


def sysbench_argv(script, target, threads, seconds, extra=(), ps_mode="disable"):
    """ps_mode: sysbench's --db-ps-mode, `disable` (text protocol, the benchmarks' default) or
    `auto` (server-side prepared statements, sysbench's own default)."""
    return [
        "sysbench",
        script,
        "--db-driver=mysql",
        "--mysql-user=" + procs.BENCH_USER,
        "--mysql-password=" + procs.BENCH_PASS,
        "--mysql-db=sbtest",
        "--tables=%d" % TABLES,
        "--table-size=%d" % TABLE_SIZE,
        "--db-ps-mode=" + ps_mode,
        "--percentile=95",
        "--threads=%d" % threads,
        "--time=%d" % seconds,
        "--report-interval=0",
    ] + target.conn_args + list(extra) + ["run"]


def prepare_argv(target, threads=1):
    """sysbench's `prepare` of the benchmarks' tables (TABLES x TABLE_SIZE rows in `sbtest`)
    through `target`."""
    return sysbench_argv("oltp_read_only", target, threads, 0)[:-1] + ["prepare"]


def parse_sysbench(text):
    def num(pattern):
        m = re.search(pattern, text)
        return float(m.group(1)) if m else None

    return {
        "queries": num(r"queries:\s+(\d+)"),
        "qps": num(r"queries:\s+\d+\s+\(([\d.]+) per sec"),
        "events": num(r"total number of events:\s+(\d+)"),
        "total_time": num(r"total time:\s+([\d.]+)s"),
        "p95": num(r"95th percentile:\s+([\d.]+)"),
        "errors": num(r"ignored errors:\s+(\d+)"),
    }
