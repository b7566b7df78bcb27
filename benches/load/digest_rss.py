#!/usr/bin/env python3
"""Memory of the query digest table: mysql-lb's RSS with N live digests (default 5,000).

    python3 benches/load/digest_rss.py [--digests 5000] [--binary target/release/mysql-lb]

Starts one MariaDB and two mysql-lb in front of it, one with `digests.max_entries` = N and one
with the table off, sends each the same N distinct statements (`SELECT 1 AS c<i>`: a distinct
alias is a distinct digest) over one connection, and reads each process's VmRSS before and after.
The difference between the two growths is what the N rows cost. Prints a markdown table.
"""

import argparse
import os
import sys
import time
import urllib.request
import json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import procs  # noqa: E402
import myclient  # noqa: E402


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--digests", type=int, default=5000, help="distinct statements (and max_entries)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/mysql-lb"))
    args = ap.parse_args()
    reg = procs.Registry()
    try:
        template = procs.make_template(reg)
        db = procs.MariaDB(reg, "db1", template)
        db.start()
        backend = "%s:%d" % db.addr
        rows = []
        for name, body in (
            ("digests on", "digests: {max_entries: %d}\n" % args.digests),
            ("digests off", "digests: {enabled: false}\n"),
        ):
            cfg = procs.write_config(os.path.join(reg.base, name.replace(" ", "-") + ".yaml"),
                                     [backend], "backend_tls: {mode: disabled}\n" + body)
            listen = ("127.0.0.1", procs.free_port())
            proc, admin, _ = procs.start_mysql_lb(
                reg, args.binary, "mysql-lb-" + name.replace(" ", "-"), listen, [backend],
                ["--config", cfg, "--worker-threads", "2"])
            conn = myclient.Conn(listen, procs.BENCH_USER, procs.BENCH_PASS)
            conn.query("SELECT 1")
            time.sleep(0.5)
            before = procs.rss_kib(proc.pid)
            started = time.time()
            for i in range(args.digests):
                conn.query("SELECT 1 AS c%d" % i)
            took = time.time() - started
            time.sleep(0.5)
            after = procs.rss_kib(proc.pid)
            with urllib.request.urlopen("http://127.0.0.1:%d/queries?limit=1" % admin) as r:
                entries = json.load(r)["entries"]
            conn.close()
            rows.append((name, before, after, entries, took))
            reg.stop(proc)
        print("| mysql-lb | RSS before (KiB) | RSS after %d statements (KiB) | growth (KiB) | rows kept |"
              % args.digests)
        print("|---|---:|---:|---:|---:|")
        for name, before, after, entries, _ in rows:
            print("| %s | %d | %d | %d | %d |" % (name, before, after, after - before, entries))
        on, off = rows[0], rows[1]
        per_row = ((on[2] - on[1]) - (off[2] - off[1])) * 1024 / max(on[3], 1)
        print()
        print("%d live digests: %.1f MiB more than with the table off (%.0f bytes per row)"
              % (on[3], ((on[2] - on[1]) - (off[2] - off[1])) / 1024, per_row))
    finally:
        reg.close()


if __name__ == "__main__":
    main()
