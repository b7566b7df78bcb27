#!/usr/bin/env python3
"""Records the byte streams benches/hot_path.rs replays (benches/fixtures/*.bin).

    python3 benches/load/capture.py [--out benches/fixtures]

Starts one MariaDB (as the load benchmark does), prepares one sysbench table, and puts a
recording TCP relay between sysbench and the server. Each file is one client connection of a
sysbench run, as the relay's reads saw it: greeting, handshake response, auth OK, then the
command phase. Format: a sequence of records `direction (b'c' client→server, b's'
server→client) | u32 little-endian length | bytes`, one record per read.

  point_select.bin  oltp_point_select, 100 events (100 `SELECT c FROM sbtest1 WHERE id=?`)
  read_only.bin     oltp_read_only, 2 events (BEGIN, 10 point selects, 4 range queries of 100
                    rows, COMMIT each)

Both use --db-ps-mode=disable (text protocol) and --rand-seed=1.
"""

import argparse
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procs  # noqa: E402


class Relay:
    """Accepts on a free port, connects each client to the backend, records both directions."""

    def __init__(self, backend):
        self.backend = backend
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections = []  # one record list per connection
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.backend)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            records = []
            with self.lock:
                self.connections.append(records)
            threading.Thread(target=self._pump, args=(client, server, b"c", records), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, b"s", records), daemon=True).start()

    def _pump(self, src, dst, direction, records):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                # Recorded before forwarding, so the order of records is the order of the exchange.
                with self.lock:
                    records.append((direction, data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take(self):
        with self.lock:
            conns, self.connections = self.connections, []
        return conns


def sysbench(test, port, extra):
    argv = [
        "sysbench", test, "--db-driver=mysql", "--mysql-host=127.0.0.1", "--mysql-port=%d" % port,
        "--mysql-user=bench", "--mysql-password=bench", "--mysql-db=sbtest",
        "--tables=1", "--table-size=10000", "--db-ps-mode=disable", "--rand-seed=1",
    ] + extra
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("sysbench %s failed:\n%s%s" % (test, out.stdout, out.stderr))


def write(path, records):
    with open(path, "wb") as f:
        for direction, data in records:
            f.write(direction + struct.pack("<I", len(data)) + data)
    procs.log("wrote %s (%d records, %d bytes)" % (path, len(records), os.path.getsize(path)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "fixtures"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    reg = procs.Registry()
    try:
        db = procs.MariaDB(reg, "capture", procs.make_template(reg))
        db.start()
        sysbench("oltp_read_only", db.port, ["prepare"])
        relay = Relay(db.addr)
        runs = [
            ("point_select.bin", "oltp_point_select", ["--threads=1", "--events=100", "--time=0", "run"]),
            ("read_only.bin", "oltp_read_only", ["--threads=1", "--events=2", "--time=0", "run"]),
        ]
        for name, test, extra in runs:
            sysbench(test, relay.port, extra)
            # sysbench may open more than one connection; the one that ran the events is the largest.
            time.sleep(0.5)  # let the pumps record the last reads (COM_QUIT, close)
            conns = relay.take()
            biggest = max(conns, key=lambda recs: sum(len(d) for _, d in recs))
            write(os.path.join(args.out, name), biggest)
    finally:
        reg.close()


if __name__ == "__main__":
    main()
