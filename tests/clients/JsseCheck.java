// MariaDB Connector/J over Java's own TLS (JSSE) through mysql-lb (run by tests/tls_interop.rs).
//
// `java JsseCheck HOST PORT USER PASS CA PROTOCOL MIB ROUNDS` connects with TLS pinned to
// PROTOCOL (`TLSv1.2` or `TLSv1.3`), verifying the server's certificate against the PEM file CA,
// then ROUNDS times sends MIB MiB of random bytes in one statement and reads them back: the
// server's SHA2 of what arrived and the bytes returned must both match. A last query shows the
// session still works. What JSSE negotiates and whether it sends KeyUpdates is in its debug log
// (-Djavax.net.debug=ssl:handshake), which the Rust test reads; key limits come from a security
// properties file (-Djava.security.properties=FILE with jdk.tls.keyLimits). Once logged in it
// writes `JsseCheck: logged in` to stderr, where JSSE's log goes.
// Prints `key=value` lines; anything unexpected is `error=...` and a non-zero exit.

import java.security.MessageDigest;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Arrays;
import java.util.Random;

public class JsseCheck {
    static final String LOGGED_IN = "JsseCheck: logged in";

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {
            System.out.println("error=" + t);
            for (Throwable c = t.getCause(); c != null; c = c.getCause()) {
                System.out.println("cause=" + c);
            }
            System.out.flush();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        String url = "jdbc:mariadb://" + args[0] + ":" + args[1] + "/test?connectTimeout=10000"
                + "&useSsl=true&serverSslCert=" + args[4] + "&enabledSslProtocolSuites=" + args[5];
        int size = Integer.parseInt(args[6]) * 1024 * 1024 + 12345;
        int rounds = Integer.parseInt(args[7]);
        try (Connection conn = DriverManager.getConnection(url, args[2], args[3]);
                Statement s = conn.createStatement()) {
            // On stderr, in line with JSSE's log: what came before it came during the login.
            System.err.println(LOGGED_IN);
            System.out.println("driver=" + conn.getMetaData().getDriverVersion());
            System.out.println("java=" + System.getProperty("java.runtime.version"));
            s.execute("CREATE TEMPORARY TABLE interop (b LONGBLOB)");
            Random random = new Random(size);
            for (int round = 0; round < rounds; round++) {
                byte[] data = new byte[size];
                random.nextBytes(data);
                s.execute("DELETE FROM interop");
                try (PreparedStatement insert = conn.prepareStatement("INSERT INTO interop VALUES (?)")) {
                    insert.setBytes(1, data);
                    insert.executeUpdate();
                }
                String want = hex(MessageDigest.getInstance("SHA-256").digest(data));
                try (ResultSet rs = s.executeQuery("SELECT SHA2(b, 256), b FROM interop")) {
                    rs.next();
                    String got = rs.getString(1);
                    if (!want.equals(got)) {
                        throw new AssertionError("round " + round + ": the server's SHA2 " + got
                                + " of the blob sent, want " + want);
                    }
                    if (!Arrays.equals(rs.getBytes(2), data)) {
                        throw new AssertionError("round " + round + ": the blob read back differs");
                    }
                }
                System.out.println("round." + round + "=ok " + size);
            }
            try (ResultSet rs = s.executeQuery("SELECT 'still here'")) {
                rs.next();
                System.out.println("after=" + rs.getString(1));
            }
        }
    }

    static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes) {
            sb.append(String.format("%02x", b));
        }
        return sb.toString();
    }
}
