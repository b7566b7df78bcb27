#!/usr/bin/env python3
"""Replay throughput against a direct sysbench run of the same shape (issue 21).

    python3 benches/load/replay_bench.py [--threads 8] [--time 10] [--no-build]

Two MariaDB servers, each with the benchmark's sysbench tables:

  1. direct    sysbench oltp_read_write (prepared statements on) with T threads for N seconds
               straight to server B.
  2. captured  the same run through mysql-lb in front of server A while a capture runs
               (`POST /capture/start`); what the capture wrote and how many commands it took.
  3. replay    B restored (sysbench cleanup + prepare), then `mysql-lb replay
               --as-fast-as-possible` of that capture onto B: T sessions, each its commands in
               order with no pause.

Statements per second compare like with like: sysbench's `queries` (every statement it runs,
BEGIN and COMMIT included, each one COM_STMT_EXECUTE with prepared statements on) against the
replay's `execute` and `query` commands; prepares and closes are left out of both (sysbench
prepares once per connection). The replay runs sessions side by side but each strictly in its
captured order, so it is not sysbench's scheduler: the ratio says how close a replay gets to the
load the capture came from. One run on a shared machine: the numbers are indicative.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procs  # noqa: E402
from procs import log  # noqa: E402
from sysbench import TABLE_SIZE, TABLES, parse_sysbench  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def sysbench(addr, action, extra=()):
    argv = [
        "sysbench", "oltp_read_write", "--db-driver=mysql",
        "--mysql-host=%s" % addr[0], "--mysql-port=%d" % addr[1],
        "--mysql-user=" + procs.BENCH_USER, "--mysql-password=" + procs.BENCH_PASS,
        "--mysql-db=sbtest", "--tables=%d" % TABLES, "--table-size=%d" % TABLE_SIZE,
        "--db-ps-mode=auto", "--rand-seed=1", "--report-interval=0",
    ] + list(extra) + [action]
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError("sysbench %s failed:\n%s%s" % (action, out.stdout, out.stderr))
    return out.stdout


def restore(db):
    sysbench(db.addr, "cleanup")
    sysbench(db.addr, "prepare")


def admin(port, method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def statements(report):
    """Replayed statements (executes and text queries) in a replay's JSON report."""
    return sum(d["replayed"] for d in report["digests"] if d["kind"] in ("execute", "query"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--time", type=int, default=10, help="seconds of each sysbench run")
    ap.add_argument("--no-build", action="store_true", help="use the existing target/release/mysql-lb")
    args = ap.parse_args()
    binary = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "mysql-lb")
    if not args.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "mysql-lb"], cwd=ROOT, check=True)
    load = ["--threads=%d" % args.threads, "--time=%d" % args.time]
    reg = procs.Registry()
    try:
        template = procs.make_template(reg)
        a = procs.MariaDB(reg, "source", template)
        b = procs.MariaDB(reg, "target", template)
        for db in (a, b):
            db.start()
            sysbench(db.addr, "prepare")

        log("direct: %d threads, %d s onto the target" % (args.threads, args.time))
        direct = parse_sysbench(sysbench(b.addr, "run", load))
        restore(b)

        cfg = procs.write_config(os.path.join(reg.base, "lb.yaml"), ["127.0.0.1:%d" % a.port],
                                 "backend_tls: {mode: disabled}\n")
        lb_addr = ("127.0.0.1", procs.free_port())
        _, admin_port, _ = procs.start_mysql_lb(reg, binary, "mysql-lb", lb_addr,
                                                ["127.0.0.1:%d" % a.port], ["--config", cfg])
        cap_dir = os.path.join(reg.base, "capture")
        admin(admin_port, "POST", "/capture/start", json.dumps({"dir": cap_dir}).encode())
        log("captured: %d threads, %d s through mysql-lb" % (args.threads, args.time))
        captured = parse_sysbench(sysbench(lb_addr, "run", load))
        cap = admin(admin_port, "POST", "/capture/stop")["capture"]
        on_disk = sum(os.path.getsize(os.path.join(cap_dir, f)) for f in os.listdir(cap_dir))

        password = os.path.join(reg.base, "password")
        fd = os.open(password, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, procs.BENCH_PASS.encode())
        os.close(fd)
        report_path = os.path.join(reg.base, "replay.json")
        log("replay: as fast as possible onto the restored target")
        started = time.monotonic()
        out = subprocess.run(
            [binary, "replay", cap_dir, "--target", "127.0.0.1:%d" % b.port,
             "--user", procs.BENCH_USER, "--password-file", password,
             "--as-fast-as-possible", "--json", report_path],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - started
        if out.returncode != 0:
            raise RuntimeError("replay failed:\n%s%s" % (out.stdout, out.stderr))
        with open(report_path) as f:
            report = json.load(f)
    finally:
        reg.close()

    replayed = statements(report)
    replay_qps = replayed / report["replay_seconds"]
    rows = [
        ("direct sysbench", direct["queries"], direct["total_time"], direct["qps"]),
        ("sysbench through mysql-lb, capturing", captured["queries"], captured["total_time"], captured["qps"]),
        ("replay --as-fast-as-possible", replayed, report["replay_seconds"], replay_qps),
    ]
    print("oltp_read_write, prepared statements, %d threads / sessions, %d s, %d tables x %d rows"
          % (args.threads, args.time, TABLES, TABLE_SIZE))
    print()
    print("| run | statements | seconds | statements/s | × direct |")
    print("|---|---:|---:|---:|---:|")
    for name, n, secs, qps in rows:
        print("| %s | %d | %.2f | %.0f | %.2f |" % (name, n, secs, qps, qps / direct["qps"]))
    print()
    commands = max(cap["commands"], 1)
    print("Capture: %d sessions, %d commands (prepares and closes included), %d bytes written "
          "(%d on disk, %d files), %d dropped: %.1f MB per million commands, %.1f MB per million "
          "sysbench queries."
          % (cap["sessions"], cap["commands"], cap["bytes_written"], on_disk, cap["files"], cap["dropped"],
             cap["bytes_written"] / commands, cap["bytes_written"] / captured["queries"]))
    print("Replay: %d of %d commands replayed, %d skipped, %d new errors, %.2f s in the report "
          "(%.2f s with the process's start and exit)."
          % (report["replayed_commands"], report["captured_commands"], report["skipped_commands"],
             report["new_errors"], report["replay_seconds"], wall))
    firsts = [d for d in report["digests"] if d["new_errors"]]
    for d in firsts[:5]:
        print("  new errors: %d x %s: %s" % (d["new_errors"], d["text"][:60], d["first_new_error"]))


if __name__ == "__main__":
    main()
