"""Shared helpers for the Python client checks (run by tests/other_clients.rs).

Settings come from the environment (see other_clients.rs): the direct server, the proxy in front
of it (TCP and unix socket), the accounts, and a scratch directory.
"""

import os
import sys
import threading
import time
import traceback

ENV = os.environ
DIRECT = (ENV.get("MLB_DIRECT_HOST", "127.0.0.1"), int(ENV.get("MLB_DIRECT_PORT", "3306")))
PROXY = (ENV.get("MLB_PROXY_HOST", "127.0.0.1"), int(ENV.get("MLB_PROXY_PORT", "4040")))
PROXY_SOCKET = ENV.get("MLB_PROXY_SOCKET", "")
USER = ENV.get("MLB_USER", "bench")
PASS = ENV.get("MLB_PASS", "bench")
ED_USER = ENV.get("MLB_ED_USER", "")
ED_PASS = ENV.get("MLB_ED_PASS", "")
TMP = ENV.get("MLB_TMP", "/tmp")
# The backend offers TLS (the proxy must hide it).
BACKEND_TLS = ENV.get("MLB_BACKEND_TLS", "") == "1"
# mysql-lb greets clients with ids in [PROXY_ID_BASE, 2**31) (src/backends/kill.rs).
PROXY_ID_BASE = 0x60000000

_failures = []
_lock = threading.Lock()


def check(cond, what):
    if not cond:
        with _lock:
            _failures.append(what)
        print(f"MISMATCH: {what}", file=sys.stderr, flush=True)


def short(v, n=200):
    r = repr(v)
    return r if len(r) <= n else f"{r[:n]}... ({len(r)} chars)"


def eq(got, want, what):
    check(got == want, f"{what}: got {short(got)}, want {short(want)}")


def step(name, fn, *args):
    """Runs one check; an unexpected exception is a failure, and the next check still runs."""
    try:
        fn(*args)
        print(f"ok: {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - report everything
        check(False, f"{name}: unexpected {type(e).__name__}: {short(str(e), 300)}")
        traceback.print_exc(limit=-3)


def finish(client):
    if _failures:
        print(f"{client}: {len(_failures)} mismatch(es)", file=sys.stderr)
        for f in _failures:
            print(f"  - {f.splitlines()[0]}", file=sys.stderr)
        sys.exit(1)
    print(f"{client}: all checks passed")


def blob(n):
    """n deterministic bytes covering every byte value (escaping and 16 MiB packet splits)."""
    pattern = bytes(range(256)) * 64
    reps, rest = divmod(n, len(pattern))
    return pattern * reps + pattern[:rest]


def kill_when_running(query, thread_id, sql, timeout=20):
    """KILL CONNECTION of server thread `thread_id` once it runs `sql` (no quotes in it); `query`
    runs SQL on an admin connection straight to the server and returns the rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = query("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        f"WHERE ID = {thread_id} AND INFO = '{sql}'")
        if running[0][0] == 1:
            query(f"KILL CONNECTION {thread_id}")
            return
        time.sleep(0.02)
    check(False, f"thread {thread_id} never ran {sql}")
