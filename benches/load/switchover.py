#!/usr/bin/env python3
"""sysbench oltp_read_write through a read/write split while the replication cluster switches
over: queries per second each second, and the errors clients saw.

    python3 benches/load/switchover.py [--binary target/release/mysql-lb] [--time 16]
        [--switch-at 6] [--threads 4]

It starts three MariaDB servers with GTID replication (a primary and two `read_only` replicas,
`gtid_strict_mode`, row binlogs), an account `app` without `READ ONLY ADMIN` (so a read-only
server refuses its writes, as an application's account), and mysql-lb over them with
`role: auto` (health checks every 200 ms) and `pooling: {mode: transaction, across_backends: true,
read_write_split: true}`. Then, for each way sysbench writes (autocommit statements,
`--skip_trx=on`; and its default `BEGIN .. COMMIT` transactions), sysbench runs `--time` seconds
with `--mysql-ignore-errors=all` (an error is counted, not fatal) while a thread switches the
primary over `--switch-at` seconds in: the old primary `read_only = 1`, the new one caught up
and promoted, the old one and the other replica repointed to it (`MASTER_DEMOTE_TO_SLAVE`). The
next run switches back. It prints sysbench's per-second report and a summary: queries, errors,
the lowest qps second, and mysql-lb's own counts (`mysql_lb_split_refused_writes_total`).

What to expect: autocommit writes that the old primary refused before mysql-lb saw it read-only
run again on the new primary (no error); inside a `BEGIN .. COMMIT` transaction they cannot (the
server's ERR 1290 reaches the client, and sysbench counts it). Reads go on throughout.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import procs  # noqa: E402
from procs import log  # noqa: E402
from sysbench import TABLE_SIZE, TABLES, Target, tcp_args  # noqa: E402

REPL_ARGS = [
    "--log-bin=mysql-bin",
    "--log-slave-updates=ON",
    "--binlog-format=ROW",
    "--gtid-strict-mode=ON",
    "--skip-slave-start",
]
APP = ("app", "app")


def q(db, sql):
    # root over the socket: the set-up grants, which `bench` (no GRANT OPTION) cannot.
    conn = procs.myclient.Conn(db.socket, "root", "")
    try:
        return conn.query(sql)
    finally:
        conn.close()


def scalar(db, sql):
    rows = q(db, sql)
    return rows[0][0] if rows else None


def repoint(db, primary, demote):
    if not demote:
        q(db, "STOP SLAVE")
    extra = ", MASTER_DEMOTE_TO_SLAVE=1" if demote else ""
    q(db, "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='%s', "
          "MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos%s"
      % (primary.port, procs.BENCH_USER, procs.BENCH_PASS, extra))
    q(db, "SET GLOBAL read_only = 1")
    q(db, "START SLAVE")


def wait_gtid(db, pos, timeout=30):
    if pos:
        got = scalar(db, "SELECT MASTER_GTID_WAIT('%s', %d)" % (pos, timeout))
        if got != "0":
            raise RuntimeError("%s did not reach %s" % (db.name, pos))


def switchover(dbs, old, new):
    """The planned switchover a tool does: returns its duration."""
    started = time.monotonic()
    q(dbs[old], "SET GLOBAL read_only = 1")
    wait_gtid(dbs[new], scalar(dbs[old], "SELECT @@gtid_binlog_pos"))
    q(dbs[new], "STOP SLAVE")
    q(dbs[new], "RESET SLAVE ALL")
    q(dbs[new], "SET GLOBAL read_only = 0")
    for i, db in enumerate(dbs):
        if i != new:
            repoint(db, dbs[new], demote=(i == old))
    return time.monotonic() - started


def metric(admin, name, label):
    body = urllib.request.urlopen("http://%s/metrics" % admin, timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + "{") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="target/release/mysql-lb")
    ap.add_argument("--time", type=int, default=16, help="seconds per sysbench run")
    ap.add_argument("--switch-at", type=float, default=6.0, help="seconds into each run")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--only", type=int, choices=[0, 1], help="one run: 0 autocommit, 1 BEGIN")
    args = ap.parse_args()
    reg = procs.Registry()
    lb_log = None
    try:
        template = procs.make_template(reg)
        dbs = []
        for i in range(3):
            db = procs.MariaDB(reg, "db%d" % (i + 1), template)
            db.start(REPL_ARGS + (["--read-only=ON"] if i else []))
            dbs.append(db)
        primary = 0
        q(dbs[0], "CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'app'")
        q(dbs[0], "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX ON sbtest.* TO 'app'@'%'")
        for db in dbs[1:]:
            repoint(db, dbs[0], demote=False)
        target = Target("primary", tcp_args([dbs[0].addr]))
        prep = ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-user=bench",
                "--mysql-password=bench", "--mysql-db=sbtest", "--tables=%d" % TABLES,
                "--table-size=%d" % TABLE_SIZE] + target.conn_args + ["prepare"]
        subprocess.run(prep, check=True, capture_output=True, timeout=600)
        for db in dbs[1:]:
            wait_gtid(db, scalar(dbs[0], "SELECT @@gtid_binlog_pos"))
        log("cluster: db1 primary, db2 and db3 replicas, sbtest prepared (%d x %d rows)" % (TABLES, TABLE_SIZE))

        cfg = os.path.join(reg.base, "lb.yaml")
        with open(cfg, "w") as f:
            f.write("backends:\n")
            for db in dbs:
                f.write("  - {name: %s, address: 127.0.0.1:%d, role: auto}\n" % (db.name, db.port))
            f.write("health_check: {interval: 200ms, timeout: 1s, fall: 2, rise: 1, "
                    "user: bench, password: bench}\n"
                    "pooling: {mode: transaction, across_backends: true, read_write_split: true, "
                    "wait_timeout: 10s}\n")
        port, admin_port = procs.free_port(), procs.free_port()
        admin = "127.0.0.1:%d" % admin_port
        lb, lb_log = reg.spawn("mysql-lb", [args.binary, "--config", cfg, "--proxy-address",
                                            "127.0.0.1:%d" % port, "--admin-address", admin,
                                            "--log-level", "info"])
        log("mysql-lb log: %s" % lb_log)
        procs.wait_until("mysql-lb", lambda: procs.myclient.greets(("127.0.0.1", port)), 30, lb)
        time.sleep(1.0)

        summary = []
        modes = [("autocommit writes (--skip_trx=on --delete_inserts=0)",
                  ["--skip_trx=on", "--delete_inserts=0"]),
                 ("BEGIN .. COMMIT transactions (sysbench's default)", [])]
        if args.only is not None:
            modes = [modes[args.only]]
        for name, extra in modes:
            new = 1 if primary == 0 else 0
            before = (metric(admin, "mysql_lb_split_refused_writes_total", "replayed"),
                      metric(admin, "mysql_lb_split_refused_writes_total", "forwarded"))
            argv = ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-user=%s" % APP[0],
                    "--mysql-password=%s" % APP[1], "--mysql-db=sbtest", "--tables=%d" % TABLES,
                    "--table-size=%d" % TABLE_SIZE, "--db-ps-mode=disable",
                    "--threads=%d" % args.threads, "--time=%d" % args.time, "--report-interval=1",
                    "--mysql-ignore-errors=all", "--mysql-host=127.0.0.1",
                    "--mysql-port=%d" % port] + extra + ["run"]
            took = {}

            def switch(old=primary, new=new):
                time.sleep(args.switch_at)
                try:
                    took["s"] = switchover(dbs, old, new)
                except Exception as e:  # noqa: BLE001 -- reported with the run
                    took["error"] = repr(e)

            t = threading.Thread(target=switch)
            t.start()
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=args.time + 60)
            except subprocess.TimeoutExpired as e:
                print("sysbench did not end (%s); its output:\n%s" % (name, (e.stdout or b"")[-3000:]))
                raise
            t.join()
            if "error" in took:
                raise RuntimeError("the switchover failed: %s" % took["error"])
            for line in out.stderr.splitlines() + out.stdout.splitlines():
                if "error" in line.lower() and "ignored errors" not in line:
                    print("sysbench: " + line.strip())
            primary = new
            text = out.stdout
            per_second = re.findall(r"\[ (\d+)s \].*?qps: ([\d.]+).*?err/s: ([\d.]+)", text)
            queries = re.search(r"queries:\s+(\d+)", text)
            errors = re.search(r"ignored errors:\s+(\d+)", text)
            after = (metric(admin, "mysql_lb_split_refused_writes_total", "replayed"),
                     metric(admin, "mysql_lb_split_refused_writes_total", "forwarded"))
            print("\n## %s\n" % name)
            print("| second | qps | errors/s |\n|---:|---:|---:|")
            for s, qps, err in per_second:
                print("| %s | %s | %s |" % (s, qps, err))
            lowest = min((float(x[1]) for x in per_second), default=0.0)
            summary.append((name, queries.group(1) if queries else "?",
                            errors.group(1) if errors else "?", lowest, took.get("s", 0.0),
                            after[0] - before[0], after[1] - before[1]))
        print("\n| sysbench writes | queries | errors | lowest qps second | switchover took | "
              "writes run again | refusals forwarded |\n|---|---:|---:|---:|---:|---:|---:|")
        for name, queries, errors, lowest, took, replayed, forwarded in summary:
            print("| %s | %s | %s | %.0f | %.0f ms | %.0f | %.0f |"
                  % (name, queries, errors, lowest, took * 1000, replayed, forwarded))
    finally:
        if lb_log and os.path.exists(lb_log):
            # Kept past the temp dir, for what the proxy said during the run.
            shutil.copy(lb_log, "/tmp/mysql-lb-switchover.log")
        reg.close()


if __name__ == "__main__":
    main()
