"""The load benchmark's `--only hetero` part (issue 13): balancing policies over a pool where
one backend is slow, beside HAProxy, in one interleaved run.

    python3 benches/load/run.py --only hetero                     # 3 rounds x 10 s per cell
    python3 benches/load/run.py --only hetero --rounds 1 --time 5 # a quick look

Three MariaDB backends. In the *slow* pool the third is reached through the bare relay
(benches/load/pump.rs) with `--delay-ms N`: every chunk from that backend reaches its client N ms
late (at least N, at most about N + 1: tokio's timer ticks in milliseconds), in order, by a task
that sleeps on the timer. A point select's response, the greeting and the auth OK are one chunk
each, so every query, and the start of every login, answers N ms later than on the other two.
The delay does not depend on load or CPU, and the same for every path, because every proxy
reaches backend 3 through that same relay. The relay's own hop is there too, a few tens of µs.
The *uniform* pool is the three backends reached directly.

Clients (sysbench 1.0, text protocol, --hetero-threads threads):
  short  benches/load/short.lua: per event a new connection, --short-queries point selects
         (default 3), COM_QUIT; p95 is sysbench's per-event (whole visit) p95
  long   oltp_point_select: one connection per thread for the whole run

Paths on the slow pool: mysql-lb `--balancer round_robin | least_connections | least_latency`
and HAProxy `balance roundrobin | leastconn` (mode tcp, no checks); on the uniform pool mysql-lb
round_robin and least_latency. Every round runs each (pool, clients) cell on each of its paths
in turn. The split per backend comes from each backend's own counters (`SHOW GLOBAL STATUS` over
its unix socket) read before and after each run, so it counts the same for every path:
sessions = Connections - Aborted_connects (mysql-lb's health checks connect, read the greeting and
close, so the server counts them as aborted connects; they are subtracted and reported), queries =
Questions minus the reading's own SHOW.
"""

import datetime
import os
import resource
import shlex
import statistics
import sys
import time

import myclient
import procs
import sysbench
from procs import log

HERE = os.path.dirname(os.path.abspath(__file__))
LB_POLICIES = ("round_robin", "least_connections", "least_latency")
HAPROXY_POLICIES = ("roundrobin", "leastconn")
REFERENCE = "haproxy leastconn"
CASES = ("short", "long")
STATUS_SQL = ("SHOW GLOBAL STATUS WHERE Variable_name IN "
              "('Connections', 'Aborted_connects', 'Questions')")


class Counters:
    """A persistent connection per backend, reading the counters the split is made of."""

    def __init__(self, backends):
        self.conns = [b.connect() for b in backends]

    def read(self):
        out = []
        for c in self.conns:
            values = {name: int(v) for name, v in c.query(STATUS_SQL)}
            out.append(values)
        return out

    def close(self):
        for c in self.conns:
            c.close()


def deltas(before, after):
    """Per backend: (sessions, queries, aborted connects) between two readings."""
    out = []
    for a, b in zip(before, after):
        aborted = b["Aborted_connects"] - a["Aborted_connects"]
        sessions = b["Connections"] - a["Connections"] - aborted
        out.append((sessions, b["Questions"] - a["Questions"] - 1, aborted))
    return out


class Hetero:
    def __init__(self, args, reg, binary):
        self.args = args
        self.reg = reg
        self.binary = binary
        self.pools = {}  # pool -> [Target]
        self.results = {}  # (pool, case, path) -> [run dicts]
        self.notes = []
        self.added_ms = None

    # set-up

    def start(self):
        template = procs.make_template(self.reg)
        self.backends = [procs.MariaDB(self.reg, "db%d" % i, template) for i in (1, 2, 3)]
        for b in self.backends:
            b.start()
        self.prepare()
        slow = self.backends[2]
        self.delay_addr = ("127.0.0.1", procs.free_port())
        procs.start_pump(self.reg, procs.pump_binary(self.binary), "delay", self.delay_addr,
                         ["127.0.0.1:%d" % slow.port],
                         ["--threads", "1", "--delay-ms", str(self.args.delay_ms)])
        log("backends: %s; db3 delayed by %d ms at 127.0.0.1:%d" % (
            ", ".join("%s 127.0.0.1:%d" % (b.name, b.port) for b in self.backends),
            self.args.delay_ms, self.delay_addr[1]))
        self.added_ms = self.measure_delay(slow)
        fast = [b.addr for b in self.backends[:2]]
        self.pools["slow"] = self.start_paths("slow", fast + [self.delay_addr], True)
        self.pools["uniform"] = self.start_paths(
            "uniform", [b.addr for b in self.backends], False, ("round_robin", "least_latency"))

    def prepare(self):
        log("sysbench prepare: %d tables x %d rows on each backend" % (sysbench.TABLES, sysbench.TABLE_SIZE))
        running = []
        for b in self.backends:
            t = sysbench.Target(b.name, sysbench.tcp_args([b.addr]))
            argv = sysbench.prepare_argv(t)
            running.append(self.reg.spawn("prepare-" + b.name, argv))
        for proc, log_path in running:
            if proc.wait(300) != 0:
                raise RuntimeError("sysbench prepare failed" + procs.tail(log_path))
            self.reg.stop(proc)

    def measure_delay(self, slow):
        """Median `SELECT 1` round trip through the delay stage minus straight to db3, in ms."""
        def median_rtt(addr):
            c = myclient.Conn(addr, procs.BENCH_USER, procs.BENCH_PASS)
            try:
                times = []
                for _ in range(50):
                    t0 = time.perf_counter()
                    c.query("SELECT 1")
                    times.append(time.perf_counter() - t0)
                return statistics.median(times) * 1e3
            finally:
                c.close()

        direct, delayed = median_rtt(slow.addr), median_rtt(self.delay_addr)
        log("SELECT 1 round trip: db3 direct %.2f ms, through the delay stage %.2f ms"
            % (direct, delayed))
        return direct, delayed

    def start_paths(self, pool, addrs, with_haproxy, policies=LB_POLICIES):
        targets = []
        backends = ["%s:%d" % a for a in addrs]
        cfg = procs.write_config(os.path.join(self.reg.base, "hetero-%s.yaml" % pool), backends,
                                 "backend_tls: {mode: disabled}\n")
        for policy in policies:
            addr = ("127.0.0.1", procs.free_port())
            flags = self.args.lb_args.split() + ["--config", cfg, "--balancer", policy]
            proc, _, _ = procs.start_mysql_lb(
                self.reg, self.binary, "mysql-lb-%s-%s" % (pool, policy), addr, backends, flags)
            targets.append(sysbench.Target("mysql-lb " + policy, sysbench.tcp_args([addr]), proc))
        if with_haproxy:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            hard = hard if hard != resource.RLIM_INFINITY else 1 << 20
            for balance in HAPROXY_POLICIES:
                proc, addr = procs.start_haproxy(self.reg, addrs, min(10000, (hard - 200) // 2),
                                                 balance, "haproxy-%s-%s" % (pool, balance))
                targets.append(sysbench.Target("haproxy " + balance, sysbench.tcp_args([addr]), proc))
        return targets

    # the runs

    def cells(self):
        return [(pool, case) for pool in self.pools for case in CASES]

    def run(self):
        counters = Counters(self.backends)
        try:
            for rnd in range(self.args.rounds):
                for pool, case in self.cells():
                    for target in self.pools[pool]:
                        self.run_one(counters, rnd, pool, case, target)
                        # Let this run's TIME_WAIT sockets not crowd the next one's ports.
                        time.sleep(1)
        finally:
            counters.close()

    def sysbench_argv(self, case, target):
        threads, seconds = self.args.hetero_threads, self.args.time
        if case == "short":
            return sysbench.sysbench_argv(os.path.join(HERE, "short.lua"), target, threads, seconds,
                                     ["--queries=%d" % self.args.short_queries])
        return sysbench.sysbench_argv("oltp_point_select", target, threads, seconds)

    def run_one(self, counters, rnd, pool, case, target):
        target.check_alive()
        before = counters.read()
        own0, (busy0, total0) = self.reg.own_cpu(), procs.machine_busy()
        rc, text = procs.run_capture(self.reg, self.sysbench_argv(case, target), self.args.time + 120)
        own1, (busy1, total1) = self.reg.own_cpu(), procs.machine_busy()
        split = deltas(before, counters.read())
        res = sysbench.parse_sysbench(text) if rc == 0 else {}
        tag = "[round %d/%d] %-7s %-5s %-26s" % (rnd + 1, self.args.rounds, pool, case, target.name)
        runs = self.results.setdefault((pool, case, target.name), [])
        if rc != 0 or not res.get("qps"):
            log("%s FAILED (exit %s):\n%s" % (tag, rc, "\n".join(text.splitlines()[-15:])))
            return
        res["foreign"] = max(0.0, (busy1 - busy0) - (own1 - own0)) / max(total1 - total0, 1e-9)
        res["sessions"] = [s for s, _, _ in split]
        res["questions"] = [q for _, q, _ in split]
        res["aborted"] = sum(a for _, _, a in split)
        res["rate"] = res["events"] / res["total_time"]
        runs.append(res)
        log("%s %8.0f qps %7.0f events/s  p95 %7.2f ms  sessions %s  queries %s  (other processes: %.0f %% of the CPUs)"
            % (tag, res["qps"], res["rate"], res["p95"] or 0, shares(res["sessions"]),
               shares(res["questions"]), 100 * res["foreign"]))

    # output

    def median(self, pool, case, path, key):
        runs = self.results.get((pool, case, path)) or []
        vals = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    def report(self, info):
        a = self.args
        lines = []
        w = lines.append
        w("# mysql-lb balancing over a heterogeneous pool")
        w("")
        w("Run %s with `%s` (%d round%s x %d s per cell, interleaved; %d sysbench threads, "
          "`--tables=%d --table-size=%d --db-ps-mode=disable`)."
          % (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), command_line(), a.rounds,
             "s" if a.rounds > 1 else "", a.time, a.hetero_threads, sysbench.TABLES, sysbench.TABLE_SIZE))
        w("")
        for k, v in info.items():
            w("- %s: %s" % (k, v))
        w("")
        w("Pools: three MariaDB backends. **slow**: db3 is reached through benches/load/pump.rs "
          "`--delay-ms %d`, which writes every chunk from db3 to its client %d ms after reading it "
          "(timer sleep, order kept; a response, the greeting and the auth OK are a chunk each), "
          "for every path alike. **uniform**: the three backends reached directly."
          % (a.delay_ms, a.delay_ms))
        if self.added_ms:
            w("Measured before the runs: median `SELECT 1` round trip %.2f ms to db3 directly, "
              "%.2f ms through the delay stage." % self.added_ms)
        w("")
        w("Clients: **short** = benches/load/short.lua, per event a new connection, %d point "
          "selects, COM_QUIT (p95 of the whole visit); **long** = `oltp_point_select`, one "
          "connection per thread for the whole run." % a.short_queries)
        w("")
        for pool, case in self.cells():
            w(self.table(pool, case))
        foreign = [r["foreign"] for runs in self.results.values() for r in runs]
        if foreign:
            w("Other CPU: share of the machine's CPUs taken by processes this benchmark did not "
              "start, during the runs: median %.0f %%, max %.0f %%. Above a few percent the "
              "machine was shared and absolute numbers are low; the interleaving keeps the "
              "comparison fair on average." % (100 * statistics.median(foreign), 100 * max(foreign)))
            w("")
        aborted = [r["aborted"] for runs in self.results.values() for r in runs]
        if aborted:
            w("Split: each backend's `Connections - Aborted_connects` (sessions) and `Questions` "
              "(queries) over each run, summed over the rounds, in the order db1 / db2 / db3. "
              "Aborted connects (mysql-lb's health checks: connect, greeting, close; %d mysql-lb "
              "processes check each backend every 2 s) were %d–%d per run, all backends together, "
              "and are not counted as sessions."
              % (sum(t.name.startswith("mysql-lb") for ts in self.pools.values() for t in ts),
                 min(aborted), max(aborted)))
            w("")
        w("## Issue 13 goals on this run")
        w("")
        for g in self.goals():
            w("- " + g)
        w("")
        for n in self.notes:
            w("- " + n)
        return "\n".join(lines)

    def table(self, pool, case):
        lines = ["### %s pool, %s-lived clients" % (pool, case), ""]
        ref_q, ref_p = (self.median(pool, case, REFERENCE, k) for k in ("qps", "p95"))
        has_ref = ref_q is not None
        lines.append("| path | qps median (min–max) | %s | p95 ms |%s sessions db1/db2/db3 | "
                     "queries db1/db2/db3 | other CPU %% |"
                     % ("sessions/s" if case == "short" else "events/s",
                        " × %s qps | × its p95 |" % REFERENCE if has_ref else ""))
        lines.append("|---|---|---:|---:|%s---|---|---:|" % ("---:|---:|" if has_ref else ""))
        for t in self.pools[pool]:
            runs = self.results.get((pool, case, t.name)) or []
            if not runs:
                lines.append("| %s | failed | | |%s | | |" % (t.name, " | |" if has_ref else ""))
                continue
            qps = [r["qps"] for r in runs]
            med, p95 = statistics.median(qps), self.median(pool, case, t.name, "p95")
            ratios = ""
            if has_ref:
                ratios = " %.2f | %.2f |" % (med / ref_q, p95 / ref_p if ref_p else float("nan"))
            lines.append("| %s | %.0f (%.0f–%.0f) | %.0f | %.2f |%s %s | %s | %.0f |" % (
                t.name, med, min(qps), max(qps), self.median(pool, case, t.name, "rate"), p95,
                ratios, shares(summed(runs, "sessions")), shares(summed(runs, "questions")),
                100 * statistics.median(r["foreign"] for r in runs)))
        lines.append("")
        return "\n".join(lines)

    def goals(self):
        def verdict(ok):
            return "met" if ok else "NOT met"

        out = []
        ll, ref = "mysql-lb least_latency", REFERENCE
        q, rq = self.median("slow", "short", ll, "qps"), self.median("slow", "short", ref, "qps")
        p, rp = self.median("slow", "short", ll, "p95"), self.median("slow", "short", ref, "p95")
        if q and rq:
            out.append("slow pool, short-lived: least_latency qps ≥ 1.3× HAProxy leastconn: "
                       "%.2f× — %s" % (q / rq, verdict(q / rq >= 1.3)))
        if p and rp:
            out.append("slow pool, short-lived: least_latency p95 ≤ 0.7× HAProxy leastconn: "
                       "%.2f× (%.2f vs %.2f ms) — %s" % (p / rp, p, rp, verdict(p / rp <= 0.7)))
        q, rq = self.median("slow", "long", ll, "qps"), self.median("slow", "long", ref, "qps")
        if q and rq:
            out.append("slow pool, long-lived (reported): least_latency qps %.2f× HAProxy leastconn"
                       % (q / rq))
        for case in CASES:
            q, rr = (self.median("uniform", case, "mysql-lb " + n, "qps")
                     for n in ("least_latency", "round_robin"))
            if q and rr:
                out.append("uniform pool, %s-lived: least_latency ≥ 0.97× round_robin: %.2f× — %s"
                           % (case, q / rr, verdict(q / rr >= 0.97)))
        return out + self.burst_notes()

    def burst_notes(self):
        """Names the uniform-pool runs where least_latency left a backend without a session."""
        out = []
        for (pool, case, path), runs in self.results.items():
            sessions = summed(runs, "sessions")
            if pool != "uniform" or path != "mysql-lb least_latency" or not sessions or min(sessions) > 0:
                continue
            out.append(
                "uniform pool, %s-lived, %s: db%d got no session in any round. sysbench opens all its "
                "connections at once, and mysql-lb counts a session on its backend only once the "
                "backend's greeting has arrived, so every choice in such a burst sees the same "
                "session counts; least_latency then gives each pair to the lower average, and the "
                "backend with the highest one gets nothing." % (case, path, sessions.index(0) + 1))
        return out


def summed(runs, key):
    total = None
    for r in runs:
        total = list(r[key]) if total is None else [a + b for a, b in zip(total, r[key])]
    return total or []


def shares(values):
    total = sum(values)
    if total <= 0:
        return "—"
    return " / ".join("%.0f" % (100 * v / total) for v in values) + " %"


def command_line():
    argv = [os.path.relpath(sys.argv[0], os.getcwd())] + sys.argv[1:]
    return "python3 " + " ".join(shlex.quote(x) for x in argv)


def main(args, binary, info):
    """Runs the part and writes its report; returns the exit status."""
    started = time.monotonic()
    reg = procs.Registry()
    bench = Hetero(args, reg, binary)
    failed = False
    try:
        bench.start()
        log("-- set-up took %.0f s" % (time.monotonic() - started))
        bench.run()
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        reg.close()
        return 130
    except Exception as e:  # keep what was measured so far
        log("benchmark failed: %s: %s" % (type(e).__name__, e))
        bench.notes.append("The run stopped early: %s: %s" % (type(e).__name__, e))
        failed = True
    finally:
        reg.close()
    info["wall time"] = "%.0f s" % (time.monotonic() - started)
    text = bench.report(info)
    print(text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    log("written to %s" % args.out)
    return 1 if failed else 0
