// MariaDB Connector/J against a server, directly or through mysql-lb (run by tests/java_clients.rs).
//
// `java JavaCheck MODE HOST PORT DIRECT_HOST DIRECT_PORT USER PASS` prints `key=value` lines that
// the Rust test compares between a direct connection and the proxy (HOST:PORT is one or the other;
// DIRECT_HOST:DIRECT_PORT is always the server itself):
//   cancel: SELECT SLEEP(10), Statement.cancel() from another thread after about 1 s; what the
//           statement did, how long it took, and whether the session still works afterwards.
//   cancels N: `cancel` N times, each on a new connection (so through mysql-lb each lands on the
//           next backend, and so does each cancel's own connection), cancel() after 500 ms;
//           per attempt `attempt.I=OUTCOME ELAPSED_MS`.
//   admin:  HOST:PORT is mysql-lb's SQL admin port and USER/PASS its account: the number of
//           backends, SHOW POOLS' rows and first column, a GROUP BY, and a wrong password's
//           error code.
//   lost:   SELECT SLEEP(5) while an admin connection straight to the server kills the
//           statement's server thread (KILL CONNECTION); the exception, isValid(), and whether
//           a new connection works.
// Anything unexpected is printed as `error=...` and the exit code is non-zero.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

public class JavaCheck {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String url = url(args[1], args[2]);
        String direct = url(args[3], args[4]);
        String user = args[5];
        String pass = args[6];
        try {
            if (mode.equals("cancel")) {
                cancel(url, user, pass);
            } else if (mode.equals("cancels")) {
                cancels(url, user, pass, Integer.parseInt(args[7]));
            } else if (mode.equals("admin")) {
                admin(url, user, pass);
            } else if (mode.equals("lost")) {
                lost(url, direct, user, pass);
            } else {
                throw new IllegalArgumentException("unknown mode " + mode);
            }
        } catch (Throwable t) {
            System.out.println("error=" + t);
            System.out.flush();
            System.exit(1);
        }
    }

    static void admin(String url, String user, String pass) throws Exception {
        try (Connection conn = DriverManager.getConnection(url, user, pass);
                Statement s = conn.createStatement()) {
            try (ResultSet r = s.executeQuery("SELECT count(*) FROM backends")) {
                r.next();
                System.out.println("backends=" + r.getLong(1));
            }
            try (ResultSet r = s.executeQuery("SHOW POOLS")) {
                int rows = 0;
                while (r.next()) {
                    rows++;
                }
                System.out.println("pools=" + rows);
                System.out.println("pools_first_column=" + r.getMetaData().getColumnLabel(1));
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT state, count(*) AS n FROM backends GROUP BY state ORDER BY state")) {
                r.next();
                System.out.println("grouped=" + r.getString(1) + ":" + r.getLong(2));
            }
        }
        try {
            DriverManager.getConnection(url, user, pass + "x").close();
            System.out.println("wrong=logged_in");
        } catch (SQLException e) {
            System.out.println("wrong=" + e.getErrorCode());
        }
    }

    static String url(String host, String port) {
        return "jdbc:mariadb://" + host + ":" + port + "/test?connectTimeout=10000";
    }

    static void cancel(String url, String user, String pass) throws Exception {
        try (Connection conn = DriverManager.getConnection(url, user, pass)) {
            System.out.println("driver=" + conn.getMetaData().getDriverVersion());
            try (Statement s = conn.createStatement()) {
                Thread canceller = new Thread(() -> {
                    try {
                        Thread.sleep(1000);
                        s.cancel();
                    } catch (Exception e) {
                        System.out.println("cancel_error=" + e);
                    }
                });
                long start = System.nanoTime();
                canceller.start();
                String outcome;
                try (ResultSet rs = s.executeQuery("SELECT SLEEP(10)")) {
                    rs.next();
                    // MariaDB answers an interrupted SLEEP with 1 instead of an error.
                    outcome = "returned " + rs.getInt(1);
                } catch (SQLException e) {
                    outcome = "exception " + e.getClass().getSimpleName() + " " + e.getSQLState()
                            + " " + e.getErrorCode();
                }
                long millis = (System.nanoTime() - start) / 1_000_000;
                canceller.join();
                System.out.println("outcome=" + outcome);
                System.out.println("elapsed_ms=" + millis);
            }
            System.out.println("after=" + selectOne(conn));
        }
    }

    static void cancels(String url, String user, String pass, int count) throws Exception {
        for (int i = 0; i < count; i++) {
            try (Connection conn = DriverManager.getConnection(url, user, pass);
                    Statement s = conn.createStatement()) {
                Thread canceller = new Thread(() -> {
                    try {
                        Thread.sleep(500);
                        s.cancel();
                    } catch (Exception e) {
                        System.out.println("cancel_error=" + e);
                    }
                });
                long start = System.nanoTime();
                canceller.start();
                String outcome;
                try (ResultSet rs = s.executeQuery("SELECT SLEEP(10)")) {
                    rs.next();
                    outcome = "returned_" + rs.getInt(1);
                } catch (SQLException e) {
                    outcome = "exception_" + e.getSQLState() + "_" + e.getErrorCode();
                }
                long millis = (System.nanoTime() - start) / 1_000_000;
                canceller.join();
                System.out.println("attempt." + i + "=" + outcome + " " + millis);
            }
        }
    }

    static void lost(String url, String direct, String user, String pass) throws Exception {
        Connection conn = DriverManager.getConnection(url, user, pass);
        long threadId;
        try (Statement s = conn.createStatement();
                ResultSet rs = s.executeQuery("SELECT CONNECTION_ID()")) {
            rs.next();
            threadId = rs.getLong(1);
        }
        Thread killer = new Thread(() -> killWhenSleeping(direct, user, pass, threadId));
        killer.start();
        try (Statement s = conn.createStatement()) {
            s.executeQuery("SELECT SLEEP(5)");
            System.out.println("exception=none");
        } catch (SQLException e) {
            System.out.println("exception=" + e.getClass().getName());
            System.out.println("sqlstate=" + e.getSQLState());
            System.out.println("code=" + e.getErrorCode());
            System.out.println("message=" + e.getMessage().replace('\n', ' '));
        }
        killer.join();
        System.out.println("valid=" + conn.isValid(5));
        conn.close();
        try (Connection again = DriverManager.getConnection(url, user, pass)) {
            System.out.println("new_connection=" + selectOne(again));
        }
    }

    /** Waits (up to 20 s) until the thread runs the SLEEP, then kills its connection. */
    static void killWhenSleeping(String direct, String user, String pass, long threadId) {
        try (Connection admin = DriverManager.getConnection(direct, user, pass);
                Statement s = admin.createStatement()) {
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (System.nanoTime() < deadline) {
                try (ResultSet rs = s.executeQuery("SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                        + " WHERE ID = " + threadId + " AND INFO = 'SELECT SLEEP(5)'")) {
                    rs.next();
                    if (rs.getInt(1) == 1) {
                        s.execute("KILL CONNECTION " + threadId);
                        System.out.println("killed=yes");
                        return;
                    }
                }
                Thread.sleep(20);
            }
            System.out.println("killed=never saw the SLEEP running");
        } catch (Exception e) {
            System.out.println("killed=" + e);
        }
    }

    static String selectOne(Connection conn) throws SQLException {
        try (Statement s = conn.createStatement(); ResultSet rs = s.executeQuery("SELECT 1")) {
            rs.next();
            return "ok " + rs.getInt(1);
        }
    }
}
