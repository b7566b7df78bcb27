"""Two Python connectors against mysql-lb's SQL admin port: PyMySQL and mysql-connector-python
(pure Python mode), each logging in with the admin account, reading tables and a SHOW command,
and refused with 1045 for a wrong password and for a client's account.

Exits non-zero with one line per mismatch. Run by tests/admin_sql.rs.
"""

import os
import sys

import mysql.connector
import pymysql

ENV = os.environ
HOST = "127.0.0.1"
PORT = int(ENV["MLB_ADMIN_PORT"])
ADMIN = ENV["MLB_ADMIN_USER"]
ADMIN_PASS = ENV["MLB_ADMIN_PASS"]
CLIENT = ENV["MLB_USER"]
CLIENT_PASS = ENV["MLB_PASS"]
BACKENDS = int(ENV["MLB_EXPECT_BACKENDS"])

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def rows(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    names = [d[0] for d in cur.description]
    got = cur.fetchall()
    cur.close()
    return names, got


def exercise(name, connect, error_type):
    conn = connect(ADMIN, ADMIN_PASS)
    _, got = rows(conn, "SELECT count(*) FROM backends")
    check(int(got[0][0]) == BACKENDS, f"{name}: backends {got}")
    names, got = rows(conn, "SHOW POOLS")
    check("pool" in names and "sv_idle" in names, f"{name}: SHOW POOLS columns {names}")
    check(len(got) == BACKENDS, f"{name}: SHOW POOLS rows {got}")
    _, got = rows(conn, "SELECT state, count(*) AS n FROM backends GROUP BY state ORDER BY state")
    check(sum(int(r[1]) for r in got) == BACKENDS, f"{name}: GROUP BY {got}")
    _, got = rows(conn, "SELECT @@version_comment")
    check(got[0][0] == "mysql-lb admin", f"{name}: version_comment {got}")
    try:
        rows(conn, "DELETE FROM backends")
        check(False, f"{name}: a DELETE was accepted")
    except error_type as e:
        check("only reads" in str(e), f"{name}: DELETE refused with {e}")
    conn.close()
    for user, password, what in ((ADMIN, ADMIN_PASS + "x", "wrong password"),
                                 (CLIENT, CLIENT_PASS, "client account")):
        try:
            connect(user, password).close()
            check(False, f"{name}: {what} logged in")
        except error_type as e:
            code = e.args[0] if name == "pymysql" else e.errno
            check(code == 1045, f"{name}: {what}: {e}")


def pymysql_connect(user, password):
    return pymysql.connect(host=HOST, port=PORT, user=user, password=password,
                           ssl_disabled=True, connect_timeout=10)


def connector_connect(user, password):
    return mysql.connector.connect(host=HOST, port=PORT, user=user, password=password,
                                   use_pure=True, ssl_disabled=True, connection_timeout=10)


exercise("pymysql", pymysql_connect, pymysql.err.MySQLError)
exercise("mysql-connector", connector_connect, mysql.connector.Error)
for f in failures:
    print(f)
print(f"admin_check: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
