#!/usr/bin/env python3
"""CPU per query of mysql-lb with the query digest table off and on, at a fixed rate, with an
A/A control: how large a difference of a few percent has to be before this machine can see it.

Why beside run.py: run.py drives every path as fast as it goes, so a path's CPU per query also
moves with its throughput (at a higher rate each wake-up finds more to do, so fewer system
calls per query): on two shared cores one path's rounds spread by 10 % and more, and a 3 %
difference between two paths is within one run's noise. Here sysbench sends a fixed rate
(`--rate`, below what every path sustains), so each path does the same work per second, and
a second proxy with the first path's configuration runs as a control: its ratio to the first
is what noise alone gives. Each round runs every path once, in an order that rotates, and the
figures are per-round ratios to the first path (mean, standard deviation, standard error), so
a slow stretch of the machine weighs on all paths of a round alike.

    cargo build --release --bin mysql-lb
    python3 benches/load/cost_ab.py [--test oltp_read_only --rate 1000] [--rounds 10]
        [--time 10] [--baseline OTHER_BINARY]

`--rate` is sysbench's, in events per second: one query per event for oltp_point_select, 16
(BEGIN, 14 selects, COMMIT) for oltp_read_only; `--rate 0` is unthrottled, as run.py drives
its paths (the control then shows how far saturated rounds spread). `--baseline` adds another build with the table
on ("baseline digests on"), to compare two builds' cost the same way. CPU: utime+stime of the
proxy process over each run. It runs scripts/install-deps.sh demo (MariaDB, sysbench) when
they are missing.
"""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import procs  # noqa: E402
import sysbench  # noqa: E402
from instructions import ensure_deps  # noqa: E402
from procs import log  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", default="oltp_point_select")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rate", type=int, default=15000,
                    help="sysbench events per second (0: as fast as it goes)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--time", type=int, default=10, help="seconds per run")
    ap.add_argument("--baseline", help="another mysql-lb binary, with the table on")
    args = ap.parse_args()
    binary = os.path.join(ROOT, "target/release/mysql-lb")
    paths = [
        ("digests off", binary, False),
        ("digests off (control)", binary, False),
        ("digests on", binary, True),
    ]
    if args.baseline:
        paths.append(("baseline digests on", args.baseline, True))
    ensure_deps()
    reg = procs.Registry()
    try:
        db = procs.MariaDB(reg, "db1", procs.make_template(reg))
        db.start()
        backends = ["127.0.0.1:%d" % db.port]
        at_db = sysbench.Target("db1", sysbench.tcp_args([db.addr]))
        proc, _ = reg.spawn("prepare", sysbench.prepare_argv(at_db, 4))
        if proc.wait(300) != 0:
            sys.exit("sysbench prepare failed")
        lbs = []
        for i, (name, path, on) in enumerate(paths):
            body = "backend_tls: {mode: disabled}\ndigests: {enabled: %s}\n" % (
                "true" if on else "false")
            config = procs.write_config(os.path.join(reg.base, "p%d.yaml" % i), backends, body)
            addr = ("127.0.0.1", procs.free_port())
            proc, _, _ = procs.start_mysql_lb(reg, path, "lb%d" % i, addr, backends,
                                              ["--config", config])
            lbs.append(sysbench.Target(name, sysbench.tcp_args([addr]), proc))
        cpu = [[] for _ in paths]
        for r in range(args.rounds):
            order = [(i + r) % len(paths) for i in range(len(paths))]
            for i in order:
                target = lbs[i]
                argv = sysbench.sysbench_argv(args.test, target, args.threads, args.time,
                                              ["--rate=%d" % args.rate])
                c0 = procs.cpu_seconds(target.pid)
                out = subprocess.run(argv, capture_output=True, text=True, timeout=args.time + 120)
                c1 = procs.cpu_seconds(target.pid)
                s = sysbench.parse_sysbench(out.stdout)
                if out.returncode != 0 or not s.get("queries"):
                    sys.exit("sysbench failed on %s:\n%s" % (paths[i][0], out.stderr[-2000:]))
                cpu[i].append((c1 - c0) / s["queries"] * 1e6)
                log("[round %d/%d] %-22s %8.0f qps  proxy CPU %.2f us/q"
                    % (r + 1, args.rounds, paths[i][0], s["qps"], cpu[i][-1]))
        report(args, paths, cpu)
    finally:
        reg.close()


def report(args, paths, cpu):
    print()
    print("%s, %d threads, sysbench --rate=%d, %d rounds x %d s, interleaved:"
          % (args.test, args.threads, args.rate, args.rounds, args.time))
    print()
    print("| path | CPU µs/query (median) | × first path, per round: mean | sd | standard error |")
    print("|---|---:|---:|---:|---:|")
    for i, (name, _, _) in enumerate(paths):
        ratios = [a / b for a, b in zip(cpu[i], cpu[0])]
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        print("| %s | %.2f | %.3f | %.3f | %.3f |" % (
            name, statistics.median(cpu[i]), statistics.mean(ratios), sd,
            sd / len(ratios) ** 0.5))
    print()
    print("The control runs the first path's configuration in a second process: its ratio is "
          "what noise alone gives.")


if __name__ == "__main__":
    main()
