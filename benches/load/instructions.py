#!/usr/bin/env python3
"""User-space instructions per query, counted by valgrind's callgrind: mysql-lb beside the bare
relay (and another mysql-lb binary), on one MariaDB backend.

Why: on two shared cores the CPU seconds of the load benchmark (run.py) move with whatever else
runs on the machine, so a change of a few percent in the proxy's own work is lost in the noise
unless the machine is quiet for the whole run. An instruction count is the same on a busy
machine: it measures exactly what the proxy's code does per query (not the kernel's part, not
cache misses or lock contention, which run.py's CPU figures include). Use it to compare two
builds; use run.py for what a user sees.

Each proxy runs under callgrind; sysbench runs a fixed number of events twice, N and 3N, each
counted alone (`callgrind_control --zero` before, `--dump` after), and the figure is the
difference over the difference in queries: start-up and each run's connects (TLS handshakes
are millions of instructions) cancel out.

    cargo build --release --bin mysql-lb --example pump
    python3 benches/load/instructions.py [--baseline OTHER_BINARY] [--events 4000]
        [--tests oltp_point_select,oltp_read_only] [--tls] [--digests] [--pooling] [--ps]
        [--across] [--deferred] [--split] [--connects] [--rules N]

--split counts what the read/write split (`pooling.read_write_split`) costs per query over the
pool across backends it builds on: it adds "mysql-lb split" and implies --across, so the
"mysql-lb across" row it is read against is counted in the same run by the same binary, and a
last line gives the difference per test. A split needs a primary and a replica, and a
replication cluster is more than this script starts; the split row names the one MariaDB twice
instead, the first entry `role: primary`, the second (same address, another `name:`) `role:
replica`, in the file (--proxy-backend-addresses would replace them with one backend of no
role), with `pooling: {mode: transaction, across_backends: true, read_write_split: true}`. The
proxy cannot tell the two entries share a server, so all the split adds is counted: where each
transaction may run, the check before each command a session on a replica makes, the order over
roles. oltp_point_select's autocommit SELECTs take the "replica" entry's connections;
oltp_read_only's BEGIN .. COMMIT transactions are not provably reads and run on the "primary"
entry. Its logins are placed by user, so the split connects deferred (`connect_mode: auto` does
for a split pool) where "mysql-lb across" (loopback backends) connects immediately, and its
transactions stay on one entry where "mysql-lb across" moves most of them between its three
servers: the difference is the split's cost less what those moves cost.

--rules N counts what query rules cost: "mysql-lb rules N" has N refusing rules, each on a
digest text no sysbench statement has, and none narrowed by user or client, so every session
reads every statement for them (held whole until it is, its case-blind digest looked up among
the rules' texts; a text whose readings differ is printed per reading first) and none matches;
a last line gives the difference to "mysql-lb" (no rules) per test.

The runtime's parks: how often a worker parks between queries (its scheduler, timer wheel and
I/O driver, `RUNTIME` below) depends on timing, which moves a path's count by several hundred
instructions per query between runs of one binary (the bare relay's from about 3,900 to 5,400).
The last column leaves those functions out: compare builds there, the others for what the
proxy costs in all.

Two things valgrind's CPU changes, which weigh on the TLS figures (--tls): it hides VAES,
VPCLMULQDQ and AVX-512, so ring's AES-GCM takes its AVX path (`aesni_gcm_encrypt`) rather than
the VAES one a native run on such a CPU takes; and glibc's memcpy (on the machine this was
written on) copies more than 8 KiB with `rep movsb`, which callgrind counts as one instruction
per byte (a 12,500-byte copy counts 12,499; one of 8,191 bytes, 794), so a copy of a large
response weighs far more here than on the CPU.

It runs scripts/install-deps.sh demo (MariaDB, sysbench) and installs valgrind with apt-get
when it is missing; build the release binary and the bare relay first (above).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import myclient  # noqa: E402
import procs  # noqa: E402
import sysbench  # noqa: E402
from procs import log  # noqa: E402

# --keep: a directory to copy each counted callgrind file to, for callgrind_annotate.
KEEP = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def total_instructions(path):
    """The `summary:`/`totals:` Ir of a callgrind output file."""
    with open(path) as f:
        for line in f:
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError("no totals in " + path)


# The runtime's own scheduling: its parks, timer wheel and I/O driver. How often a worker
# parks between queries depends on timing (how many queries one wake-up finds), so this part
# moves by several hundred instructions per query between runs of one binary; the table also
# gives each path's count without it.
RUNTIME = re.compile(r"^(tokio::runtime::(scheduler|time|io::driver)::|tokio::runtime::time::<|"
                     r"tokio::time::clock::|mio::)|epoll_wait")


def runtime_instructions(path):
    """The instructions of a callgrind file spent in functions RUNTIME names: each function's
    own cost, not what it calls (read from the file: a cost line after `calls=` is the call's,
    counted in the callee)."""
    names, total = {}, 0
    current, skip, counted = "", False, False
    with open(path) as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m and m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("fn="):
                    current = names.get(m.group(1), "") if m else line[3:].strip()
                    counted = bool(RUNTIME.search(current))
                continue
            if line.startswith("calls="):
                skip = True
                continue
            if not line[:1].isdigit() and not line[:1] in "+-*":
                continue
            if skip:
                skip = False
                continue
            parts = line.split()
            if len(parts) >= 2 and counted:
                total += int(parts[1])
    return total


def control(pid, flag):
    out = subprocess.run(["callgrind_control", flag, str(pid)], capture_output=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("callgrind_control %s: %s" % (flag, out.stderr.decode()))


def measure(reg, name, argv, listen, test, events, threads, tls_dir=None, ps_mode="disable"):
    """Starts argv under callgrind and counts two sysbench runs of `test`, of `events` and of
    3 × `events` transactions; returns (instructions, queries) of the difference, so what every
    run costs alike (its connections: a TLS handshake is a few million instructions) cancels."""
    out_prefix = os.path.join(reg.base, "cg-%s-%s" % (name.replace(" ", "_"), os.path.basename(test)))
    cg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s.%%p" % out_prefix]
    proc, log_path = reg.spawn(name, cg + argv)
    procs.wait_until(name, lambda: myclient.greets(listen), 120, proc, log_path)
    target = sysbench.Target(name, sysbench.tcp_args([listen]), cwd=tls_dir)
    counted = []
    for n in (events, 3 * events):
        extra = ["--events=%d" % n]
        if tls_dir:
            extra.append("--mysql-ssl=on")
        argv_sb = sysbench.sysbench_argv(test, target, threads, 0, extra, ps_mode)
        # Everything before (start-up, the readiness probe, the last run) is discarded here.
        control(proc.pid, "--zero")
        out = subprocess.run(argv_sb, capture_output=True, timeout=1800, cwd=tls_dir)
        if out.returncode != 0:
            raise RuntimeError("sysbench through %s failed:\n%s%s" % (
                name, out.stdout.decode()[-2000:], out.stderr.decode()[-2000:]))
        queries = int(re.search(r"queries:\s+(\d+)", out.stdout.decode()).group(1))
        control(proc.pid, "--dump")
        counted.append(queries)
    reg.stop(proc, timeout=120)
    # Each dump is named PREFIX.PID.N; the file written at exit (PREFIX.PID) holds the rest.
    dumps = sorted(glob.glob(out_prefix + ".*.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
    if len(dumps) != 2:
        raise RuntimeError("expected two callgrind dumps for %s, found %s" % (name, dumps))
    small, large = (total_instructions(f) for f in dumps)
    small_rt, large_rt = (runtime_instructions(f) for f in dumps)
    if KEEP:
        shutil.copy(dumps[1], os.path.join(KEEP, "callgrind.%s.%s" % (name.replace(" ", "_"), os.path.basename(test))))
    instr, queries = large - small, counted[1] - counted[0]
    own = instr - (large_rt - small_rt)
    log("%-20s %-18s %7.0f instructions per query, %7.0f without the runtime's parks (%d - %d queries)" % (
        name, test, instr / queries, own / queries, counted[1], counted[0]))
    return instr, own, queries


def ensure_deps():
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "install-deps.sh"), "demo"], check=True)
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        log("valgrind is missing: installing it with apt-get")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "update"], check=True)
        subprocess.run(sudo + ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
                               "--no-install-recommends", "valgrind"], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="another mysql-lb binary, counted the same way")
    ap.add_argument("--events", type=int, default=4000, help="sysbench transactions per count")
    ap.add_argument("--threads", type=int, default=8, help="sysbench threads")
    ap.add_argument("--tests", default="oltp_point_select,oltp_read_only")
    ap.add_argument("--digests", action="store_true",
                    help="also mysql-lb with the query digest table off (\"mysql-lb digests off\"; "
                    "on by default)")
    ap.add_argument("--pooling", action="store_true",
                    help="also mysql-lb with transaction pooling (\"mysql-lb pooled\")")
    ap.add_argument("--tls", action="store_true",
                    help="also count mysql-lb with a TLS client leg, and with TLS on both legs")
    ap.add_argument("--ps", action="store_true",
                    help="sysbench with server-side prepared statements (--db-ps-mode=auto) "
                         "instead of the text protocol")
    ap.add_argument("--across", action="store_true",
                    help="also mysql-lb with transaction pooling across three backends "
                         "(`across_backends: true`, \"mysql-lb across\"; two more MariaDB servers "
                         "start): what moving sessions between backends at each transaction costs "
                         "beside \"mysql-lb pooled\" (with --pooling) on one")
    ap.add_argument("--deferred", action="store_true",
                    help="also mysql-lb with `connect_mode: deferred` (\"mysql-lb deferred\")")
    ap.add_argument("--split", action="store_true",
                    help="also mysql-lb with the read/write split (`read_write_split: true`, "
                         "\"mysql-lb split\") over the one MariaDB named twice, as primary and "
                         "as replica; implies --across, the row it is read against")
    ap.add_argument("--connects", action="store_true",
                    help="count per connection instead of per query: each sysbench event is a new "
                         "connection, its login and one SELECT 1 (benches/load/connect.lua)")
    ap.add_argument("--rules", type=int, default=0,
                    help="also mysql-lb with N query rules no statement matches (\"mysql-lb "
                         "rules N\"): what reading every statement for rules costs")
    ap.add_argument("--keep", help="copy each callgrind file here (read with callgrind_annotate)")
    args = ap.parse_args()
    if args.split:
        # The split builds on pooling across backends: count that row beside it.
        args.across = True
    global KEEP
    KEEP = args.keep
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)

    ensure_deps()
    lb = os.path.join(ROOT, "target/release/mysql-lb")
    pump = procs.pump_binary(lb)
    reg = procs.Registry()
    try:
        template = procs.make_template(reg)
        tls = procs.make_tls_files(reg.base)
        db = procs.MariaDB(reg, "db1", template)
        db.start(["--ssl-cert=" + tls["cert"], "--ssl-key=" + tls["key"], "--ssl-ca=" + tls["ca"]])
        backend = "%s:%d" % db.addr
        direct = sysbench.Target("direct", sysbench.tcp_args([db.addr]))
        log("sysbench prepare: %d tables x %d rows" % (sysbench.TABLES, sysbench.TABLE_SIZE))
        prep = sysbench.prepare_argv(direct)
        subprocess.run(prep, check=True, capture_output=True, timeout=600)

        # With --across, two more servers, prepared alike: the pool's three backends.
        others = []
        if args.across:
            for name in ("db2", "db3"):
                other = procs.MariaDB(reg, name, template)
                other.start([])
                others.append("%s:%d" % other.addr)
                target = sysbench.Target(name, sysbench.tcp_args([other.addr]))
                prep = sysbench.prepare_argv(target)
                subprocess.run(prep, check=True, capture_output=True, timeout=600)

        paths = [("bare relay", lambda port: [pump, "127.0.0.1:%d" % port, backend, "--threads", "2"])]
        client_leg = "tls: {cert: %s, key: %s}\n" % (tls["cert"], tls["key"])
        configs = {"": "backend_tls: {mode: disabled}\n"}
        if args.digests:
            # The query digest table off (it is on by default): what it costs is the difference
            # of "mysql-lb" to this.
            configs[" digests off"] = "backend_tls: {mode: disabled}\ndigests: {enabled: false}\n"
        if args.pooling:
            # Sessions share server connections between transactions (and, with --ps, their
            # prepared statements): what that costs is the difference to "mysql-lb".
            configs[" pooled"] = ("backend_tls: {mode: disabled}\n"
                                  "pooling: {mode: transaction, max_server_connections: 16}\n")
        if args.across:
            # Round robin per transaction over three backends: most transactions move.
            configs[" across"] = ("backend_tls: {mode: disabled}\n"
                                  "pooling: {mode: transaction, max_server_connections: 16, "
                                  "across_backends: true}\n")
        if args.deferred:
            configs[" deferred"] = "backend_tls: {mode: disabled}\nconnect_mode: deferred\n"
        if args.rules:
            rules = "".join(
                "  - {name: r%d, digest_text: \"SELECT never_%d FROM nowhere WHERE id = ?\", "
                "error: closed}\n" % (i, i) for i in range(args.rules))
            configs[" rules %d" % args.rules] = ("backend_tls: {mode: disabled}\n"
                                                 "query_rules:\n" + rules)
        # Each config's backends: the entries of its YAML file, and the addresses given to
        # --proxy-backend-addresses (None: the file's entries stand, as named there).
        pools = {}
        if args.across:
            pools[" across"] = ([backend] + others, [backend] + others)
        if args.split:
            # The one server twice, as primary and as replica (distinct names: the same address
            # may back several entries). Reads take the "replica" entry's connections. Configured
            # roles need no health check login, and a split pool connects deferred by itself
            # (`connect_mode: auto`: its logins are placed by user). No flag: it would replace
            # the entries with one backend of no role.
            configs[" split"] = ("backend_tls: {mode: disabled}\n"
                                 "pooling: {mode: transaction, max_server_connections: 16, "
                                 "across_backends: true, read_write_split: true}\n")
            pools[" split"] = (["{address: %s, name: primary, role: primary}" % backend,
                                "{address: %s, name: replica, role: replica}" % backend], None)
        if args.tls:
            configs[" tls"] = client_leg + "backend_tls: {mode: disabled}\n"
            configs[" tls both"] = client_leg + "backend_tls: {mode: verify_identity, ca: %s}\n" % tls["ca"]
        for suffix, body in configs.items():
            entries, flag = pools.get(suffix, ([backend], [backend]))
            cfg = procs.write_config(os.path.join(reg.base, "lb%s.yaml" % suffix.replace(" ", "-")),
                                     entries, body)
            backend_args = ["--proxy-backend-addresses", ",".join(flag)] if flag else []
            for name, binary in (("mysql-lb", lb), ("baseline", args.baseline)):
                # An older baseline may not know the `digests:` key.
                if binary and not (name == "baseline" and ("digests" in body or "pooling" in body
                                                   or "query_rules" in body)):
                    paths.append((name + suffix, lambda port, b=binary, cfg=cfg, ba=backend_args: [
                        b, "--config", cfg, "--proxy-address", "127.0.0.1:%d" % port] + ba + [
                        "--admin-address", "127.0.0.1:%d" % procs.free_port(),
                        "--log-level", "warn", "--worker-threads", "2"]))
        rows = []
        tests = args.tests.split(",")
        if args.connects:
            tests = [os.path.join(ROOT, "benches", "load", "connect.lua")]
        for test in tests:
            for name, argv_of in paths:
                port = procs.free_port()
                listen = ("127.0.0.1", port)
                use_tls = tls["sysbench_dir"] if " tls" in name else None
                instr, own, queries = measure(reg, name, argv_of(port), listen, test, args.events,
                                              args.threads, use_tls, "auto" if args.ps else "disable")
                rows.append((test, name, instr / queries, own / queries))
        print()
        unit = "connection" if args.connects else "query"
        print("| test | path | instructions per %s | × bare relay | without the runtime's parks |" % unit)
        print("|---|---|---:|---:|---:|")
        for test, name, per, own in rows:
            relay = next(p for t, n, p, o in rows if t == test and n == "bare relay")
            print("| %s | %s | %.0f | %.2f | %.0f |" % (
                os.path.basename(test), name, per, per / relay, own))
        if args.rules:
            print()
            for test in tests:
                of = {n: (p, o) for t, n, p, o in rows if t == test}
                (ruled, ruled_own), (plain, plain_own) = of["mysql-lb rules %d" % args.rules], of["mysql-lb"]
                print("%s: mysql-lb rules %d - mysql-lb: %+.0f instructions per %s (%+.1f%%), "
                      "%+.0f without the runtime's parks" % (
                          os.path.basename(test), args.rules, ruled - plain, unit,
                          100 * (ruled / plain - 1), ruled_own - plain_own))
        if args.split:
            # The split's own cost: its row less the pool across backends it builds on.
            print()
            for test in tests:
                of = {n: (p, o) for t, n, p, o in rows if t == test}
                (split, split_own), (across, across_own) = of["mysql-lb split"], of["mysql-lb across"]
                print("%s: mysql-lb split - mysql-lb across: %+.0f instructions per %s (%+.1f%%), "
                      "%+.0f without the runtime's parks (%+.1f%%)" % (
                          os.path.basename(test), split - across, unit, 100 * (split / across - 1),
                          split_own - across_own, 100 * (split_own / across_own - 1)))
    finally:
        reg.close()


if __name__ == "__main__":
    main()
