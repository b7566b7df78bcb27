"""Routing and deferred connect through mysql-lb, for PyMySQL and MySQL Connector/Python.

`python3 route_check.py pymysql|pure|cext`. mysql-lb (MLB_PROXY_*) routes MLB_ROUTED_USER and
the schema MLB_ROUTED_SCHEMA to the server on MLB_PORT_B, everyone else to MLB_PORT_A; it greets
clients itself and the server's auth switch does the real exchange. Each login is checked for the
server it reached, the account, the proxy's connection id and the server version; refusals are
compared with the same login made directly. Exits non-zero with one line per mismatch.
Run by tests/routing.rs.
"""

import os
import sys

from checklib import PROXY_ID_BASE, check, eq, finish, step

ENV = os.environ
MODE = sys.argv[1] if len(sys.argv) > 1 else "pymysql"
HOST = ENV["MLB_PROXY_HOST"]
PROXY_PORT = int(ENV["MLB_PROXY_PORT"])
PORT_A = int(ENV["MLB_PORT_A"])
PORT_B = int(ENV["MLB_PORT_B"])
USER, PASS = ENV["MLB_USER"], ENV["MLB_PASS"]
ROUTED, ROUTED_PASS = ENV["MLB_ROUTED_USER"], ENV["MLB_ROUTED_PASS"]
SCHEMA = ENV["MLB_ROUTED_SCHEMA"]

if MODE == "pymysql":
    import pymysql

    LIB = "PyMySQL " + pymysql.VERSION_STRING
    Error = pymysql.err.MySQLError

    def connect(port, user, password, database=None):
        return pymysql.connect(host=HOST, port=port, user=user, password=password,
                               database=database, ssl_disabled=True, connect_timeout=10)

    def conn_id(conn):
        return conn.thread_id()

    def version(conn):
        return conn.get_server_info()

    def refusal(e):
        return tuple(e.args)

    def param_query(conn):
        with conn.cursor() as c:
            c.execute("SELECT %s + 1", (41,))
            return c.fetchall()
else:
    import mysql.connector

    LIB = "mysql-connector-python %s (%s)" % (mysql.connector.__version__, MODE)
    Error = mysql.connector.Error

    def connect(port, user, password, database=None):
        kw = {"database": database} if database else {}
        return mysql.connector.connect(host=HOST, port=port, user=user, password=password,
                                       use_pure=MODE == "pure", ssl_disabled=True,
                                       connection_timeout=10, **kw)

    def conn_id(conn):
        return conn.connection_id

    def version(conn):
        return conn.server_info

    def refusal(e):
        return (e.errno, e.sqlstate, e.msg)

    def param_query(conn):
        c = conn.cursor(prepared=True)
        c.execute("SELECT ? + 1", (41,))
        out = c.fetchall()
        c.close()
        return [tuple(r) for r in out]


def rows(conn, sql):
    c = conn.cursor()
    c.execute(sql)
    out = [tuple(r) for r in c.fetchall()]
    c.close()
    return out


def landing(user, password, database, want_port, what):
    conn = connect(PROXY_PORT, user, password, database)
    eq(rows(conn, "SELECT @@port, CURRENT_USER()"), [(want_port, f"{user}@%")], what)
    tid = conn_id(conn)
    check(PROXY_ID_BASE <= tid < 2**31, f"{what}: connection id {tid:#x} should be a proxy id")
    direct = connect(want_port, user, password, database)
    eq(version(conn), version(direct), f"{what}: server version as the backend says it")
    direct.close()
    eq([tuple(int(v) for v in r) for r in param_query(conn)], [(42,)], f"{what}: parameters")
    conn.close()


def logins():
    landing(USER, PASS, None, PORT_A, "unrouted user: pool default")
    landing(ROUTED, ROUTED_PASS, None, PORT_B, "routed user")
    landing(USER, PASS, SCHEMA, PORT_B, "routed schema")


def refused(port, user, password, database=None):
    try:
        connect(port, user, password, database).close()
        return None
    except Error as e:
        return refusal(e)


def refusals():
    for user, password, database, server in (
        (ROUTED, "wrong", None, PORT_B),
        (USER, "wrong", SCHEMA, PORT_B),
        ("nobody_here", "x", None, PORT_A),
    ):
        what = f"{user}/{password}/{database}"
        direct = refused(server, user, password, database)
        check(direct is not None and direct[0] == 1045, f"{what} direct: {direct}")
        eq(refused(PROXY_PORT, user, password, database), direct, f"{what}: proxy vs direct")


def main():
    step("logins land on their pools", logins)
    step("refusals are the server's own", refusals)
    finish(LIB + " routing")


if __name__ == "__main__":
    main()
