"""TLS and compression with PyMySQL or MySQL Connector/Python (pure or C extension).

`python3 tls_check.py pymysql|pure|cext` connects to MLB_HOST:MLB_PORT (MariaDB itself, or
mysql-lb in front of it) with TLS required and the server's certificate verified against MLB_CA
for the name MLB_HOST, and with compression on (Connector/Python only: PyMySQL has none), and
in each mode runs a query, a 20 MiB BLOB round trip and LOAD DATA LOCAL INFILE. It prints what
the client library says its own connection uses and what the server says of the session (through
mysql-lb that is the backend leg, so MLB_EXPECT_BACKEND_TLS / MLB_EXPECT_BACKEND_COMPRESSION
say what to expect there: `client` = as the client leg, or 1/0 and ON/OFF). A client trusting
only MLB_OTHER_CA must be refused. Exits non-zero with one line per mismatch.
Run by tests/tls_clients.rs.
"""

import hashlib
import os
import random
import sys

from checklib import blob, check, eq, finish, step

ENV = os.environ
HOST = ENV.get("MLB_HOST", "127.0.0.1")
PORT = int(ENV.get("MLB_PORT", "3306"))
USER = ENV.get("MLB_USER", "bench")
PASS = ENV.get("MLB_PASS", "bench")
CA = ENV.get("MLB_CA", "")
OTHER_CA = ENV.get("MLB_OTHER_CA", "")
TMP = ENV.get("MLB_TMP", "/tmp")
EXPECT_TLS = ENV.get("MLB_EXPECT_BACKEND_TLS", "client")
EXPECT_COMPRESSION = ENV.get("MLB_EXPECT_BACKEND_COMPRESSION", "client")

LIB = sys.argv[1] if len(sys.argv) > 1 else "pymysql"
# PyMySQL has no protocol compression.
MODES = [("tls", True, False)] if LIB == "pymysql" else [
    ("tls", True, False), ("compress", False, True), ("tls+compress", True, True)]


def connect(tls, compress, ca=CA):
    if LIB == "pymysql":
        import pymysql
        return pymysql.connect(host=HOST, port=PORT, user=USER, password=PASS, database="test",
                               ssl_ca=ca, ssl_verify_cert=True, ssl_verify_identity=True,
                               local_infile=True, connect_timeout=10, max_allowed_packet=64 << 20)
    import mysql.connector
    kw = dict(host=HOST, port=PORT, user=USER, password=PASS, database="test",
              use_pure=LIB == "pure", compress=compress, allow_local_infile=True,
              connection_timeout=10)
    if tls:
        kw.update(ssl_ca=ca, ssl_verify_cert=True, ssl_verify_identity=True)
    else:
        kw.update(ssl_disabled=True)
    return mysql.connector.connect(**kw)


def query(conn, sql, args=None):
    c = conn.cursor()
    c.execute(sql, args)
    rows = c.fetchall() if c.description else None
    c.close()
    return rows


def client_view(conn):
    """(TLS version, cipher) as the library reports its own connection, or None."""
    if LIB == "pymysql":
        s = conn._sock
        return (s.version(), s.cipher()[0]) if hasattr(s, "cipher") else None
    if LIB == "pure":
        s = conn._socket.sock
        return (s.version(), s.cipher()[0]) if hasattr(s, "cipher") else None
    cipher = conn._cmysql.get_ssl_cipher()
    return ("(not reported)", cipher) if cipher else None


def status(conn, name):
    rows = query(conn, f"SHOW SESSION STATUS LIKE '{name}'")
    v = rows[0][1] if rows else ""
    return v.decode() if isinstance(v, bytes) else v


def session(mode, tls, compress):
    conn = connect(tls, compress)
    eq(query(conn, "SELECT 40 + 2"), [(42,)] if LIB != "pymysql" else ((42,),), f"{mode}: query")
    mine = client_view(conn)
    server_cipher, server_version = status(conn, "Ssl_cipher"), status(conn, "Ssl_version")
    server_compression = status(conn, "Compression")
    print(f"  {mode}: client says {mine}; server says Ssl_version={server_version!r} "
          f"Ssl_cipher={server_cipher!r} Compression={server_compression}", flush=True)
    check((mine is not None) == tls, f"{mode}: client-side TLS {mine} (want TLS: {tls})")
    want_tls = tls if EXPECT_TLS == "client" else EXPECT_TLS == "1"
    eq(server_cipher != "", want_tls, f"{mode}: server sees TLS ({server_cipher!r})")
    want_compression = ("ON" if compress else "OFF") if EXPECT_COMPRESSION == "client" else EXPECT_COMPRESSION
    eq(server_compression, want_compression, f"{mode}: server's Compression")
    big_blob(conn, mode, blob(20 << 20), "")
    big_blob(conn, mode, halving_blob(20 << 20), "_halving")
    conn.close()
    load_data(mode, tls, compress)


def halving_blob(n):
    """n bytes of 16 values in a pseudo-random order: zlib halves them and no more, so through a
    compressed client leg a 16 MiB packet outgrows what mysql-lb holds compressed and its rest
    goes stored; random bytes would not do, Connector/Python cannot send a chunk that zlib makes
    longer than 16 MiB."""
    table = bytes(b"abcdefghijklmnop"[b & 15] for b in range(256))
    return random.Random(n).randbytes(n).translate(table)


def big_blob(conn, mode, data, kind):
    table = f"tls_blob{kind}_{LIB}_{mode.replace('+', '_')}"
    query(conn, f"CREATE OR REPLACE TABLE {table} (id INT PRIMARY KEY, b LONGBLOB)")
    query(conn, f"INSERT INTO {table} VALUES (1, %s)", (data,))
    conn.commit()
    eq(query(conn, f"SELECT LENGTH(b), SHA2(b, 256) FROM {table}")[0],
       (len(data), hashlib.sha256(data).hexdigest()), f"{mode}{kind}: 20 MiB up")
    back = query(conn, f"SELECT b FROM {table}")[0][0]
    check(bytes(back) == data, f"{mode}{kind}: 20 MiB down differs ({len(back)} bytes)")
    query(conn, f"DROP TABLE {table}")


def load_data(mode, tls, compress):
    path = os.path.join(TMP, f"tls_infile_{LIB}_{os.getpid()}.tsv")
    with open(path, "w") as f:
        for i in range(5000):
            f.write(f"{i}\tname {i}\n")
    conn = connect(tls, compress)
    table = f"tls_load_{LIB}_{mode.replace('+', '_')}"
    query(conn, f"CREATE OR REPLACE TABLE {table} (id INT, name VARCHAR(20))")
    query(conn, f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE {table}")
    conn.commit()
    got = query(conn, f"SELECT COUNT(*), SUM(id), MAX(name) FROM {table}")[0]
    eq((int(got[0]), int(got[1]), got[2]), (5000, 12497500, "name 999"), f"{mode}: LOAD DATA LOCAL")
    query(conn, f"DROP TABLE {table}")
    conn.close()
    os.remove(path)


def other_ca_refused():
    if not OTHER_CA:
        return
    try:
        connect(True, False, ca=OTHER_CA).close()
        check(False, "a server certificate the client's CA did not sign was accepted")
    except Exception as e:  # noqa: BLE001 - any refusal will do
        print(f"  another CA: refused ({type(e).__name__}: {str(e)[:120]})", flush=True)


def main():
    for mode, tls, compress in MODES:
        step(f"{mode} session", session, mode, tls, compress)
    step("certificate from another CA refused", other_ca_refused)
    if LIB == "pymysql":
        print("  compression: skipped, PyMySQL has no protocol compression")
    finish(f"{LIB} over TLS/compression to {HOST}:{PORT}")


if __name__ == "__main__":
    main()
