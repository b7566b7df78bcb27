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

`--faults` (with the transaction and/or across paths) then runs, on each of them, what a replica
pool's operator does under load: sysbench oltp_read_only (8 long-lived threads) while db1 is
drained on that proxy 3 s in (the statements db1 still ran from 1 s after the drain to the end
of the run, and how long until it held no connection of the proxy's), then db1 made ready
again; and sysbench oltp_point_select (8 threads) while one backend is SIGKILLed 3 s in (db3
under transaction mode, db2 under across). sysbench runs with `--mysql-ignore-errors=none`, so
one lost connection ends it: its errors and exit status are the figure.
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
from sysbench import TABLE_SIZE, TABLES, Target, parse_sysbench, prepare_argv, sysbench_argv, tcp_args  # noqa: E402

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
    ap.add_argument("--faults", action="store_true",
                    help="then a drain and a SIGKILL under load on the transaction and across "
                         "paths (see above)")
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


def admin_post(port, path):
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def threads_connected(db):
    """The server's connections but the one this asks on."""
    return status(db, "Threads_connected") - 1


def fault_run(reg, target, test, seconds, at, act):
    """sysbench `test` (8 threads) on `target` for `seconds`; `act()` runs `at` s in and returns
    a function called once sysbench ended (its figures)."""
    argv = sysbench_argv(test, target, 8, seconds, ["--mysql-ignore-errors=none"], "disable")
    proc, log_path = reg.spawn("sysbench-fault", argv, log_name="sysbench-fault-%d" % time.monotonic_ns())
    time.sleep(at)
    after = act()
    try:
        proc.wait(seconds + 120)
    finally:
        reg.stop(proc, timeout=5)
    with open(log_path, errors="replace") as f:
        text = f.read()
    r = parse_sysbench(text)
    return {
        "exit": proc.returncode,
        "queries": r["queries"] or 0,
        "errors": r["errors"] or 0,
        "error": None if proc.returncode == 0 and not r["errors"] else first_error(text),
        "extra": after(),
    }


def drain_fault(reg, backends, target, admin, seconds=10):
    db1 = backends[0]
    name = "127.0.0.1:%d" % db1.port
    state = {}

    def act():
        admin_post(admin, "/backends/%s/drain" % name)
        t0 = time.time()
        state["empty_after"] = None
        # How long until db1 holds none of the proxy's connections (checked every 0.1 s), and
        # its question count 1 s after the drain.
        while time.time() - t0 < seconds:
            elapsed = time.time() - t0
            if "q1" not in state and elapsed >= 1:
                state["q1"] = status(db1, "Questions")
            if state["empty_after"] is None and threads_connected(db1) == 0:
                state["empty_after"] = elapsed
            if "q1" in state and state["empty_after"] is not None:
                break
            time.sleep(0.1)
        return lambda: {
            # With the script's own SHOW STATUS questions since q1 (one per call, at most 100).
            "after_drain": status(db1, "Questions") - state["q1"],
            "empty_after": state["empty_after"],
        }

    res = fault_run(reg, target, "oltp_read_only", seconds, 3, act)
    admin_post(admin, "/backends/%s/ready" % name)
    return res


def kill_fault(reg, victim, target, seconds=8):
    def act():
        victim.proc.kill()
        victim.proc.wait()
        return lambda: {}

    return fault_run(reg, target, "oltp_point_select", seconds, 3, act)


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
            argv = prepare_argv(Target(b.name, tcp_args([b.addr])))
            code, text = procs.run_capture(reg, argv, timeout=300, name="prepare")
            if code != 0:
                raise RuntimeError("sysbench prepare failed:\n" + text[-2000:])

        hp, hp_addr = procs.start_haproxy(reg, backends, 5000)
        addrs = ["127.0.0.1:%d" % b.port for b in backends]
        common = "backend_tls: {mode: disabled}\nmax_connections: 5000\n"
        admins = {}
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
            proc, admin, _ = procs.start_mysql_lb(reg, args.binary, "mysql-lb-" + name, listen,
                                                  addrs, ["--config", cfg])
            targets[name] = Target(name, tcp_args([listen]), proc)
            admins[name] = admin

        cells = {}
        for rnd in range(args.rounds):
            for n in threads:
                for path in paths:
                    log("round %d: %s, %d threads" % (rnd + 1, path, n))
                    res = run_cell(reg, backends, targets[path], n, args.time, ps_mode,
                                   args.test)
                    log("  %s" % res)
                    cells.setdefault((n, path), []).append(res)
        faults = []
        if args.faults:
            fault_paths = [p for p in ("transaction", "across") if p in paths]
            for path in fault_paths:
                settle(backends)
                log("fault: drain db1 under %s" % path)
                faults.append((path, "drain db1", drain_fault(reg, backends, targets[path], admins[path])))
                log("  %s" % (faults[-1][2],))
            for path, victim in (("transaction", backends[2]), ("across", backends[1])):
                if path in fault_paths:
                    time.sleep(2)
                    log("fault: SIGKILL %s under %s" % (victim.name, path))
                    faults.append((path, "SIGKILL " + victim.name, kill_fault(reg, victim, targets[path])))
                    log("  %s" % (faults[-1][2],))
        wall = time.time() - started
        busy_after, own_after = procs.machine_busy(), reg.own_cpu()
    finally:
        reg.close()

    lines = []
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    lines.append("Run %s with `python3 benches/load/pooling.py --rounds %d --time %d --threads %s "
                 "--paths %s%s%s --test %s` "
                 "(%.0f s; mysql-lb %s, git %s). sysbench %s, `--tables=%d "
                 "--table-size=%d --db-ps-mode=%s`; backends `--max-connections=%d`, the "
                 "pool `max_server_connections: %d`."
                 % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    args.rounds, args.time, args.threads, ",".join(paths),
                    " --ps" if args.ps else "", " --faults" if args.faults else "", args.test, wall, args.binary, rev, args.test,
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
    if faults:
        lines.append("")
        lines.append("| path | fault | sysbench | queries | errors | on db1 from 1 s after the drain | "
                     "db1 without the proxy's connections after |")
        lines.append("|---|---|---|---:|---:|---:|---:|")
        for path, fault, r in faults:
            run = "completed" if r["exit"] == 0 else "ended: %s" % (r["error"] or "exit %d" % r["exit"])
            extra = r["extra"]
            after = extra.get("after_drain")
            empty = extra.get("empty_after")
            lines.append("| %s | %s | %s | %d | %d | %s | %s |" % (
                path, fault, run.replace("|", "/"), r["queries"], r["errors"],
                "—" if after is None else "%d" % after,
                "—" if "empty_after" not in extra else
                ("not within 10 s" if empty is None else "%.2f s" % empty)))
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
