"""One TLS version and cipher suite with Python's ssl (OpenSSL) and PyMySQL, through mysql-lb.

`python3 tls_interop.py VERSION SUITE` (VERSION `TLSv1.2` or `TLSv1.3`, SUITE an OpenSSL name)
connects to MLB_HOST:MLB_PORT with TLS pinned to that version and offering that suite alone,
verifying the server's certificate against MLB_CA, and checks on the client's own socket that
the session uses them. It then sends a statement of several MiB (random bytes as a literal) and
reads them back: the server's SHA2 of what arrived and the bytes returned must both match.
Prints `key=value` lines for tests/tls_interop.rs; exits non-zero on any mismatch.
"""

import atexit
import os
import sys
import tempfile

VERSION, SUITE = sys.argv[1], sys.argv[2]

if VERSION == "TLSv1.3":
    # Python's ssl has no call for TLS 1.3 suites (OpenSSL's SSL_CTX_set_ciphersuites): every
    # new context takes them from OpenSSL's configuration, read once when OpenSSL first loads,
    # so the file must be named before ssl or hashlib is imported.
    conf = tempfile.NamedTemporaryFile("w", suffix=".cnf", delete=False)
    conf.write(
        "openssl_conf = conf_main\n[conf_main]\nssl_conf = ssl_sect\n"
        "[ssl_sect]\nsystem_default = system_default_sect\n"
        f"[system_default_sect]\nCiphersuites = {SUITE}\n")
    conf.close()
    atexit.register(os.unlink, conf.name)
    os.environ["OPENSSL_CONF"] = conf.name

import hashlib  # noqa: E402
import random  # noqa: E402
import ssl  # noqa: E402

import pymysql  # noqa: E402

ENV = os.environ
HOST = ENV.get("MLB_HOST", "127.0.0.1")
PORT = int(ENV.get("MLB_PORT", "3306"))
USER = ENV.get("MLB_USER", "bench")
PASS = ENV.get("MLB_PASS", "bench")
CA = ENV["MLB_CA"]
# Not a multiple of a record's 16 KiB, so the last record of each direction is a partial one.
SIZE = 4 * 1024 * 1024 + 12345

failures = []


def eq(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got!r:.200}, want {want!r:.200}")


def context():
    ctx = ssl.create_default_context(cafile=CA)
    version = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}[VERSION]
    ctx.minimum_version = version
    ctx.maximum_version = version
    if VERSION == "TLSv1.2":
        ctx.set_ciphers(SUITE)
    offered = [c["name"] for c in ctx.get_ciphers() if (c["protocol"] == "TLSv1.3") ==
               (VERSION == "TLSv1.3")]
    eq(offered, [SUITE], f"{VERSION} suites the client offers")
    return ctx


def main():
    conn = pymysql.connect(host=HOST, port=PORT, user=USER, password=PASS, database="test",
                           ssl=context(), connect_timeout=10, max_allowed_packet=64 << 20)
    sock = conn._sock
    print(f"openssl={ssl.OPENSSL_VERSION}")
    print(f"version={sock.version()}")
    print(f"cipher={sock.cipher()[0]}")
    data = random.Random(f"{VERSION} {SUITE}").randbytes(SIZE)
    cur = conn.cursor()
    cur.execute("CREATE TEMPORARY TABLE interop (b LONGBLOB)")
    cur.execute("INSERT INTO interop VALUES (%s)", (data,))
    print(f"statement_bytes={len(cur._executed)}")
    cur.execute("SELECT LENGTH(b), SHA2(b, 256) FROM interop")
    length, digest = cur.fetchone()
    eq(length, SIZE, "LENGTH of the blob the server stored")
    eq(digest, hashlib.sha256(data).hexdigest(), "SHA2 of the blob the server stored")
    cur.execute("SELECT b FROM interop")
    back = cur.fetchone()[0]
    eq(len(back), SIZE, "length of the blob read back")
    eq(back == data, True, "the blob read back equals the one sent")
    print(f"result_bytes={len(back)}")
    cur.execute("SELECT 'still here'")
    print(f"after={cur.fetchone()[0]}")
    conn.close()


try:
    main()
except Exception as e:  # noqa: BLE001 - the test shows whatever went wrong
    failures.append(f"{type(e).__name__}: {e}")
for f in failures:
    print(f"MISMATCH: {f}", file=sys.stderr)
sys.exit(1 if failures else 0)
