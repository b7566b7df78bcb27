#!/usr/bin/env python3
"""Transaction pooling against one connection per client (issue 22): thousands of clients on
backends that accept 60 connections each.

    python3 benches/load/pooling.py [--rounds 3] [--time 5] [--threads 64,512,2000]
                                    [--binary target/release/mysql-lb] [--test T] [--ps]

Starts three MariaDB backends with --max-connections=60, HAProxy (mode tcp, roundrobin) and two
mysql-lb in front of them: one in session mode (the default: a server connection per client) and
one whose default pool is in transaction mode (`pooling: {mode: transaction,
max_server_connections: 50}`: 10 left per server for health checks and the script's own
connection). Then sysbench oltp_point_select (or `--test`), text protocol (`--db-ps-mode=disable`), or with
`--ps` server-side prepared statements (`--db-ps-mode=auto`, which a transaction-mode pool shares
among sessions), at each thread count on each path, interleaved by round so that drift on a
shared machine hits all paths alike:

  direct       sysbench -> the three backends (sysbench spreads its connections round-robin)
  haproxy      sysbench -> HAProxy -> backends
  session      sysbench -> mysql-lb, session mode -> backends
  transaction  sysbench -> mysql-lb, transaction mode -> backends
  across       sysbench -> mysql-lb, transaction mode with `across_backends: true` -> backends
               (each transaction on any backend with an idle connection of its key)

Past 60 connections per server the first three are refused (ERR 1040 from the server): such a
run is reported as failed, with sysbench's error, not as a number. Before every run the script
waits until the backends are back to their idle connections (the pooled proxy's idle timeout is
1 s), so one path's connections never crowd out another's, and resets `Max_used_connections`;
after it, the highest of the three is reported (a server-side count).

Per cell: median qps (min-max over rounds), median p95 latency, the proxy process's CPU seconds
(utime+stime from /proc) per 10k queries, and the most connections any server had at once. At
the end, transaction mode's CPU per query against session mode's, per thread count both ran.
Written to --out (default benches/load/results-issue22.md).
"""

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import myclient  # noqa: E402
import procs  # noqa: E402
from procs import log  # noqa: E402
from sysbench import TABLE_SIZE, TABLES, Target, parse_sysbench, sysbench_argv, tcp_args  # noqa: E402

SERVER_MAX = 60
POOL_MAX = 50
PATHS = ("direct", "haproxy", "session", "transaction", "across")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=5, help="seconds per sysbench run")
    ap.add_argument("--threads", default="64,512,2000")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/mysql-lb"))
    ap.add_argument("--paths", default=",".join(PATHS), help="paths to run (default all)")
    ap.add_argument("--out", default=os.path.join(HERE, "results-issue22.md"))
    ap.add_argument("--test", default="oltp_point_select",
                    help="the sysbench test (oltp_point_select, oltp_read_only, ...)")
    ap.add_argument("--ps", action="store_true",
                    help="server-side prepared statements (sysbench --db-ps-mode=auto)")
    return ap.parse_args()


def status(db, name):
    conn = db.connect()
    try:
        rows = conn.query("SHOW GLOBAL STATUS LIKE '%s'" % name)
    finally:
        conn.close()
    return int(rows[0][1])


def settle(backends, timeout=30):
    """Waits until each backend holds at most 2 connections (the pooled proxy's one idle
    connection, this script's own), then resets Max_used_connections."""
    deadline = time.time() + timeout
    while True:
        counts = [status(b, "Threads_connected") for b in backends]
        if all(c <= 2 for c in counts):
            break
        if time.time() > deadline:
            raise RuntimeError("backends never settled: Threads_connected %s" % counts)
        time.sleep(0.25)
    for b in backends:
        conn = b.connect()
        try:
            conn.query("FLUSH STATUS")
        finally:
            conn.close()


def first_error(text):
    for line in text.splitlines():
        if "error" in line.lower() and ("FATAL" in line or "ALERT" in line):
            return line.split(":", 1)[-1].strip()[:120]
    return text.strip().splitlines()[-1][:120] if text.strip() else "no output"


def run_cell(reg, backends, target, threads, seconds, ps_mode, test):
    settle(backends)
    pid = target.pid
    cpu_before = procs.cpu_seconds(pid) if pid else None
    argv = sysbench_argv(test, target, threads, seconds,
                         ["--mysql-ignore-errors=none"], ps_mode)
    code, text = procs.run_capture(reg, argv, timeout=seconds + 120)
    cpu = procs.cpu_seconds(pid) - cpu_before if pid else None
    target.check_alive()
    max_used = max(status(b, "Max_used_connections") for b in backends)
    refused = sum(status(b, "Connection_errors_max_connections") for b in backends)
    r = parse_sysbench(text)
    ok = code == 0 and r["queries"] and not r["errors"]
    return {
        "ok": bool(ok),
        "error": None if ok else first_error(text),
        "qps": r["qps"],
        "p95": r["p95"],
        "cpu_10k": cpu / r["queries"] * 10000 if ok and cpu is not None else None,
        "max_used": max_used,
        "refused": refused,
    }


def main():
    args = parse_args()
    ps_mode = "auto" if args.ps else "disable"
    threads = [int(t) for t in args.threads.split(",")]
    paths = [p for p in PATHS if p in args.paths.split(",")]
    reg = procs.Registry()
    started = time.time()
    busy_before, own_before = procs.machine_busy(), reg.own_cpu()
    try:
        template = procs.make_template(reg)
        backends = [procs.MariaDB(reg, "db%d" % i, template) for i in (1, 2, 3)]
        for b in backends:
            b.start(["--max-connections=%d" % SERVER_MAX])
        log("sysbench prepare: %d tables x %d rows on each backend" % (TABLES, TABLE_SIZE))
        for b in backends:
            argv = sysbench_argv("oltp_read_only", Target(b.name, tcp_args([b.addr])), 1, 0)[:-1]
            code, text = procs.run_capture(reg, argv + ["prepare"], timeout=300, name="prepare")
            if code != 0:
                raise RuntimeError("sysbench prepare failed:\n" + text[-2000:])

        hp, hp_addr = procs.start_haproxy(reg, backends, 5000)
        addrs = ["127.0.0.1:%d" % b.port for b in backends]
        common = "backend_tls: {mode: disabled}\nmax_connections: 5000\n"
        targets = {
            "direct": Target("direct", tcp_args([b.addr for b in backends])),
            "haproxy": Target("haproxy", tcp_args([hp_addr]), hp),
        }
        for name, body in (
            ("session", common),
            ("transaction", common + "pooling:\n  mode: transaction\n  max_server_connections: %d\n"
             "  idle_timeout: 1s\n  wait_timeout: 30s\n" % POOL_MAX),
            ("across", common + "pooling:\n  mode: transaction\n  max_server_connections: %d\n"
             "  idle_timeout: 1s\n  wait_timeout: 30s\n  across_backends: true\n" % POOL_MAX),
        ):
            if name not in paths:
                continue
            cfg = procs.write_config(os.path.join(reg.base, name + ".yaml"), addrs, body)
            listen = ("127.0.0.1", procs.free_port())
            proc, _, _ = procs.start_mysql_lb(reg, args.binary, "mysql-lb-" + name, listen, addrs,
                                              ["--config", cfg])
            targets[name] = Target(name, tcp_args([listen]), proc)

        cells = {}
        for rnd in range(args.rounds):
            for n in threads:
                for path in paths:
                    log("round %d: %s, %d threads" % (rnd + 1, path, n))
                    res = run_cell(reg, backends, targets[path], n, args.time, ps_mode,
                                   args.test)
                    log("  %s" % res)
                    cells.setdefault((n, path), []).append(res)
        wall = time.time() - started
        busy_after, own_after = procs.machine_busy(), reg.own_cpu()
    finally:
        reg.close()

    lines = []
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    lines.append("Run %s with `python3 benches/load/pooling.py --rounds %d --time %d --threads %s "
                 "--paths %s%s --test %s` "
                 "(%.0f s; mysql-lb %s, git %s). sysbench %s, `--tables=%d "
                 "--table-size=%d --db-ps-mode=%s`; backends `--max-connections=%d`, the "
                 "pool `max_server_connections: %d`."
                 % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    args.rounds, args.time, args.threads, ",".join(paths),
                    " --ps" if args.ps else "", args.test, wall, args.binary, rev, args.test,
                    TABLES,
                    TABLE_SIZE, ps_mode, SERVER_MAX, POOL_MAX))
    lines.append("")
    lines.append("| threads | path | qps median (min–max) | p95 ms | proxy CPU s / 10k q | "
                 "most connections on one server | runs failed |")
    lines.append("|---:|---|---|---:|---:|---:|---|")
    for n in threads:
        for path in paths:
            runs = cells[(n, path)]
            good = [r for r in runs if r["ok"]]
            failed = [r for r in runs if not r["ok"]]
            most = max(r["max_used"] for r in runs)
            if good:
                qps = [r["qps"] for r in good]
                q = "%.0f (%.0f–%.0f)" % (statistics.median(qps), min(qps), max(qps))
                p95 = "%.2f" % statistics.median(r["p95"] for r in good)
                cpus = [r["cpu_10k"] for r in good if r["cpu_10k"] is not None]
                cpu = "%.3f" % statistics.median(cpus) if cpus else "—"
            else:
                q, p95, cpu = "fails", "—", "—"
            fail = "%d of %d: %s" % (len(failed), len(runs), failed[0]["error"]) if failed else "0"
            lines.append("| %d | %s | %s | %s | %s | %d | %s |" % (n, path, q, p95, cpu, most,
                                                                 fail.replace("|", "/")))
    lines.append("")
    for n in threads:
        s = [r["cpu_10k"] for r in cells.get((n, "session"), []) if r["ok"] and r["cpu_10k"]]
        for other, what in (("transaction", "transaction mode"),
                            ("across", "transaction mode across backends")):
            t = [r["cpu_10k"] for r in cells.get((n, other), []) if r["ok"] and r["cpu_10k"]]
            if s and t:
                lines.append("- %d threads: %s's proxy CPU per query is %.2f× session "
                             "mode's (medians %.3f and %.3f s / 10k queries)."
                             % (n, what, statistics.median(t) / statistics.median(s),
                                statistics.median(t), statistics.median(s)))
    total = busy_after[1] - busy_before[1]
    other = (busy_after[0] - busy_before[0]) - (own_after - own_before)
    lines.append("- CPU taken by processes this script did not start: %.0f %% of the machine over "
                 "the run (a shared machine: compare paths within this run, not across files)."
                 % (100 * max(other, 0) / max(total, 1e-9)))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "a") as f:
        f.write("\n" + text)
    log("appended to %s" % args.out)


if __name__ == "__main__":
    main()
