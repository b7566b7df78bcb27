"""PyMySQL (pure Python, its own protocol code) through mysql-lb, compared with a direct connection.

Exits non-zero with one line per mismatch. Run by tests/other_clients.rs.
"""

import datetime
import decimal
import hashlib
import os
import threading
import time

import pymysql
from pymysql.constants import CLIENT

from checklib import (BACKEND_TLS, DIRECT, PASS, PROXY, PROXY_ID_BASE, PROXY_SOCKET, TMP, USER,
                      blob, check, eq, finish, kill_when_running, step)


def connect(where, **kw):
    kw.setdefault("user", USER)
    kw.setdefault("password", PASS)
    kw.setdefault("database", "test")
    kw.setdefault("ssl_disabled", True)
    if where == "socket":
        return pymysql.connect(unix_socket=PROXY_SOCKET, **kw)
    host, port = DIRECT if where == "direct" else PROXY
    return pymysql.connect(host=host, port=port, **kw)


def one(conn, sql, args=None):
    with conn.cursor() as c:
        c.execute(sql, args)
        return c.fetchall()


def login_and_ids():
    for where in ("proxy", "socket"):
        conn = connect(where)
        eq(one(conn, "SELECT 1 + 1, CURRENT_USER()"), ((2, f"{USER}@%"),), f"{where}: select")
        tid = conn.thread_id()
        check(PROXY_ID_BASE <= tid < 2**31, f"{where}: thread_id {tid:#x} should be a proxy id")
        check(conn.get_server_info() == connect("direct").get_server_info(),
              f"{where}: server version differs: {conn.get_server_info()}")
        conn.ping(reconnect=False)
        conn.select_db("mysql")
        eq(one(conn, "SELECT DATABASE()"), (("mysql",),), f"{where}: select_db")
        conn.close()


def wrong_password():
    got = {}
    for where in ("direct", "proxy", "socket"):
        try:
            connect(where, password="wrong")
            got[where] = None
        except pymysql.err.OperationalError as e:
            got[where] = e.args
    check(got["direct"] is not None and got["direct"][0] == 1045, f"direct: {got['direct']}")
    eq(got["proxy"], got["direct"], "wrong password over TCP: proxy vs direct")
    # Over the socket the proxy still reaches the backend over TCP from 127.0.0.1.
    eq(got["socket"], got["direct"], "wrong password over the unix socket: proxy vs direct")
    try:
        connect("proxy", database="no_such_db")
        check(False, "unknown database accepted")
    except pymysql.err.OperationalError as e:
        eq(e.args[0], 1049, "unknown database error code")


def text_types():
    sql = ("SELECT 1, -9223372036854775808, 18446744073709551615, 3.25e0, CAST(12.345 AS DECIMAL(10,3)),"
           " NULL, 'h\u00e9llo \U0001F600', X'00FF27225C', DATE '2024-02-29',"
           " TIMESTAMP '2024-02-29 23:59:58.123456', TIME '-838:59:59', CAST(NULL AS CHAR)")
    want = ((1, -9223372036854775808, 18446744073709551615, 3.25, decimal.Decimal("12.345"), None,
             "h\u00e9llo \U0001F600", b"\x00\xff'\"\\", datetime.date(2024, 2, 29),
             datetime.datetime(2024, 2, 29, 23, 59, 58, 123456),
             -datetime.timedelta(hours=838, minutes=59, seconds=59), None),)
    d = connect("direct", charset="utf8mb4")
    p = connect("proxy", charset="utf8mb4")
    eq(one(d, sql), want, "direct text types")
    eq(one(p, sql), want, "proxy text types")
    # Parameters are interpolated client-side: quoting and NULL survive.
    args = (None, "it's \"q\" \\ %s", b"\x00\x01", decimal.Decimal("-0.001"), datetime.date(1999, 12, 31))
    eq(one(p, "SELECT %s, %s, %s, %s, %s", args),
       ((None, "it's \"q\" \\ %s", b"\x00\x01", decimal.Decimal("-0.001"), "1999-12-31"),),
       "proxy client-side params")
    # An error in the middle of a session keeps the session usable, same code as direct.
    errs = []
    for c in (d, p):
        try:
            one(c, "SELECT * FROM no_such_table_xyz")
        except pymysql.err.ProgrammingError as e:
            errs.append(e.args)
        eq(one(c, "SELECT 7"), ((7,),), "session usable after an error")
    eq(len(errs), 2, "both raised")
    eq(errs[0], errs[1], "syntax/table error: proxy vs direct")


def big_blob():
    p = connect("proxy", max_allowed_packet=64 << 20)
    data = blob(20 << 20)
    with p.cursor() as c:
        c.execute("CREATE TABLE IF NOT EXISTS pym_blob (id INT PRIMARY KEY, b LONGBLOB)")
        c.execute("REPLACE INTO pym_blob VALUES (1, %s)", (data,))
        c.execute("SELECT b, LENGTH(b), SHA2(b, 256) FROM pym_blob WHERE id = 1")
        b, n, sha = c.fetchone()
    eq(n, len(data), "blob length on the server")
    eq(sha, hashlib.sha256(data).hexdigest(), "blob hash on the server")
    check(b == data, "20 MiB blob read back differs")
    eq(one(p, "SELECT 'after blob'"), (("after blob",),), "session after 20 MiB")


def multi_results():
    for where in ("direct", "proxy"):
        multi_results_at(where)


def multi_results_at(where):
    p = connect(where, client_flag=CLIENT.MULTI_STATEMENTS)
    with p.cursor() as c:
        c.execute("DROP PROCEDURE IF EXISTS pym_two; CREATE PROCEDURE pym_two(IN x INT) "
                  "BEGIN SELECT x AS a; SELECT x * 2 AS b, 'two' AS c; END")
        while c.nextset():
            pass
        c.execute("SELECT 1; SELECT 'x', 2; DO 0; SELECT 3")
        sets = [tuple(c.fetchall())]
        while c.nextset():
            sets.append(tuple(c.fetchall()))
        eq(sets, [((1,),), (("x", 2),), (), ((3,),)], f"{where}: multi-statement result sets")
        c.execute("CALL pym_two(21)")
        sets = [tuple(c.fetchall())]
        while c.nextset():
            sets.append(tuple(c.fetchall()))
        eq(sets, [((21,),), ((42, "two"),), ()], f"{where}: CALL result sets")
        # An error in the second statement of a batch.
        c.execute("SELECT 1; SELECT * FROM no_such_table_q; SELECT 3")
        try:
            c.nextset()
            check(False, "error in the second statement not raised")
        except pymysql.err.ProgrammingError as e:
            eq(e.args[0], 1146, "second-statement error code")
        eq(one(p, "SELECT 'ok'"), (("ok",),), "after a failed batch")


def transactions():
    p = connect("proxy")
    other = connect("direct")
    one(p, "CREATE TABLE IF NOT EXISTS pym_tx (id INT PRIMARY KEY) ENGINE=InnoDB")
    one(p, "DELETE FROM pym_tx")
    p.commit()
    p.begin()
    one(p, "INSERT INTO pym_tx VALUES (1), (2)")
    eq(one(other, "SELECT COUNT(*) FROM test.pym_tx"), ((0,),), "uncommitted rows hidden")
    p.rollback()
    eq(one(p, "SELECT COUNT(*) FROM pym_tx"), ((0,),), "rollback")
    one(p, "INSERT INTO pym_tx VALUES (3)")
    p.commit()
    other.commit()
    eq(one(other, "SELECT id FROM test.pym_tx"), ((3,),), "commit visible")
    p.autocommit(True)
    eq(one(p, "SELECT @@autocommit"), ((1,),), "autocommit on")
    try:
        one(p, "INSERT INTO pym_tx VALUES (3)")
        check(False, "duplicate accepted")
    except pymysql.err.IntegrityError as e:
        eq(e.args[0], 1062, "duplicate key code")


def local_infile():
    path = os.path.join(TMP, "pymysql_infile.tsv")
    with open(path, "w") as f:
        for i in range(1000):
            f.write(f"{i}\tname {i}\n")
    p = connect("proxy", local_infile=True)
    one(p, "CREATE TABLE IF NOT EXISTS pym_load (id INT, name VARCHAR(20))")
    one(p, "DELETE FROM pym_load")
    with p.cursor() as c:
        n = c.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE pym_load")
    eq(n, 1000, "rows loaded")
    p.commit()
    eq(one(p, "SELECT COUNT(*), SUM(id), MAX(name) FROM pym_load"),
       ((1000, decimal.Decimal(499500), "name 999"),), "loaded contents")
    # A missing local file: PyMySQL sends an empty packet, the server answers, session goes on.
    try:
        one(p, "LOAD DATA LOCAL INFILE '/nonexistent/x' INTO TABLE pym_load")
        check(False, "missing file did not fail")
    except pymysql.err.OperationalError as e:
        eq(e.args[0], 1017, "missing local file error")
    except Exception:  # noqa: BLE001 PyMySQL raises its own for this
        pass
    eq(one(p, "SELECT 5"), ((5,),), "session after a failed LOAD DATA")


def kill_query_and_connection():
    for how in ("thread_id", "CONNECTION_ID()"):
        victim = connect("proxy")
        killer = connect("proxy")
        vid = victim.thread_id() if how == "thread_id" else one(victim, "SELECT CONNECTION_ID()")[0][0]
        result = {}

        def run():
            t = time.monotonic()
            try:
                result["rows"] = one(victim, "SELECT SLEEP(20)")
            except pymysql.err.OperationalError as e:
                result["err"] = e.args[0]
            result["secs"] = time.monotonic() - t

        th = threading.Thread(target=run)
        th.start()
        time.sleep(0.5)
        one(killer, f"KILL QUERY {vid}")
        th.join(15)
        check(not th.is_alive(), f"KILL QUERY {how}: victim still sleeping")
        check(result.get("secs", 99) < 10, f"KILL QUERY {how}: took {result.get('secs')}")
        check(result.get("err") == 1317 or result.get("rows") == ((1,),),
              f"KILL QUERY {how}: victim got {result}")
        eq(one(victim, "SELECT 'alive'"), (("alive",),), f"victim alive after KILL QUERY ({how})")
        # COM_PROCESS_KILL (PyMySQL's kill()) ends the victim's connection.
        killer.kill(vid)
        time.sleep(0.2)
        try:
            one(victim, "SELECT 1")
            check(False, f"victim survived COM_PROCESS_KILL ({how})")
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as e:
            check(e.args[0] in (1927, 2013, 2006, 0), f"killed victim error: {e.args}")
        eq(one(killer, "SELECT 'killer ok'"), (("killer ok",),), "killer usable")
    # KILL of an id no session has: same error as the server's for an unknown thread.
    k = connect("proxy")
    try:
        one(k, f"KILL QUERY {PROXY_ID_BASE + 0x1FFFFFF0}")
        check(False, "KILL of an unknown proxy id succeeded")
    except pymysql.err.OperationalError as e:
        eq(e.args[0], 1094, "unknown thread id error")


def tls_modes():
    # The proxy hides the backend's TLS: a client that requires TLS must fail, quickly.
    if BACKEND_TLS:
        d = connect("direct", ssl_disabled=False, ssl={"check_hostname": False, "verify_mode": 0})
        check(d.get_host_info() and one(d, "SHOW STATUS LIKE 'Ssl_cipher'")[0][1] != "",
              "direct TLS connection not encrypted")
    t = time.monotonic()
    try:
        p = connect("proxy", ssl_disabled=False, ssl={"check_hostname": False, "verify_mode": 0})
        cipher = one(p, "SHOW STATUS LIKE 'Ssl_cipher'")[0][1]
        eq(cipher, "", "PyMySQL with ssl= through the proxy: plaintext (PyMySQL only uses TLS when offered)")
    except pymysql.err.OperationalError:
        pass
    check(time.monotonic() - t < 5, "TLS attempt through the proxy took too long")


def lost_backend():
    """The server thread behind a session is killed mid-statement (MariaDB closes without an
    ERR): the error, and the way back, are what they are directly; retry logic keys on them."""
    seen = {}
    for where in ("direct", "proxy"):
        conn = connect(where)
        tid = one(conn, "SELECT CONNECTION_ID()")[0][0]
        admin = connect("direct")
        killer = threading.Thread(target=kill_when_running,
                                  args=(lambda sql: one(admin, sql), tid, "SELECT SLEEP(5)"))
        killer.start()
        try:
            one(conn, "SELECT SLEEP(5)")
            seen[where] = "no error"
        except pymysql.err.Error as e:
            seen[where] = (type(e).__name__, e.args[0])
        killer.join(30)
        admin.close()
        try:
            conn.ping()
            check(False, f"{where}: ping() works after the kill")
        except pymysql.err.Error:
            pass
        conn.connect()
        eq(one(conn, "SELECT 'back'"), (("back",),), f"{where}: connect() afterwards")
        conn.close()
    eq(seen["direct"], ("OperationalError", 2013), "direct: lost connection")
    eq(seen["proxy"], seen["direct"], "exception class and errno, through the proxy vs directly")


def main():
    step("login, ids, ping, select_db", login_and_ids)
    step("wrong password", wrong_password)
    step("text protocol types", text_types)
    step("20 MiB blob", big_blob)
    step("multi-statements and CALL", multi_results)
    step("transactions", transactions)
    step("LOAD DATA LOCAL INFILE", local_infile)
    step("KILL QUERY / COM_PROCESS_KILL", kill_query_and_connection)
    step("backend connection lost mid-statement", lost_backend)
    step("TLS", tls_modes)
    finish("PyMySQL " + pymysql.VERSION_STRING)


if __name__ == "__main__":
    main()
