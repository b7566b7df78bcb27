//! Security properties: no secrets in logs at any level, LOCAL INFILE can be turned off, admin on
//! loopback by default.

mod common;

use std::time::Duration;

use common::mariadb::shared_pair;
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use mysql_async::prelude::*;

const CLIENT_LOCAL_FILES: u32 = 1 << 7;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn trace_logs_hold_no_password_scramble_or_auth_data() {
    let db = &shared_pair()[0];
    let password = "Sekr1t-pa55word-xyzzy";
    db.root_exec(&format!(
        "CREATE USER IF NOT EXISTS 'secretive'@'%' IDENTIFIED BY '{password}'; \
         GRANT SELECT ON *.* TO 'secretive'@'%';"
    ));
    let mut daemon = common::daemon::Daemon::start(
        &[
            "--proxy-address=127.0.0.1:0".to_owned(),
            format!("--proxy-backend-addresses={}", db.tcp_addr()),
            "--admin-address=off".to_owned(),
            "--log-level=trace".to_owned(),
        ],
        None,
    );
    let port = daemon.proxy_addr().port();
    let addr = format!("127.0.0.1:{port}");
    let mut client = RawClient::connect_tcp(&addr, "secretive", password, None, 0, 0)
        .await
        .expect("login");
    let rows = client.query_text("SELECT CURRENT_USER()").await.unwrap();
    assert!(rows[0][0]
        .as_deref()
        .unwrap_or("")
        .starts_with("secretive@"));
    // A wrong password too: its scramble must not show either.
    let _ = RawClient::connect_tcp(&addr, "secretive", "wrong-pa55", None, 0, 0).await;
    let greeting = client.greeting_payload.clone();
    client.quit().await.ok();
    std::thread::sleep(Duration::from_millis(300));
    daemon.stop();
    let log = daemon.whole_log().join("\n");
    assert!(
        log.contains("client handshake response"),
        "trace log has the handshake:\n{log}"
    );
    assert!(
        log.contains("command completed"),
        "trace log has the commands"
    );
    // The nonce: 8 bytes after version and connection id, then 12 more after the capabilities.
    let version_end = greeting.iter().position(|&b| b == 0).unwrap();
    let part1 = &greeting[version_end + 5..version_end + 13];
    for secret in [password, "wrong-pa55"] {
        assert!(!log.contains(secret), "password {secret} in the log");
    }
    for needle in [hex(part1), format!("{part1:?}")] {
        assert!(!log.contains(&needle), "scramble {needle} in the log");
    }
    let lower = log.to_lowercase();
    assert!(
        !lower.contains("auth_response") && !lower.contains("scramble"),
        "auth data named in the log"
    );
}

#[tokio::test]
async fn allow_local_infile_false_clears_local_files_both_ways() {
    let pair = shared_pair();
    let mut cfg = config(&[pair[0].tcp_addr()]);
    cfg.allow_local_infile = false;
    let proxy = TestProxy::start_with(cfg);
    // The greeting no longer offers it...
    let client = RawClient::connect_tcp(
        &proxy.addr_string(),
        "bench",
        "bench",
        None,
        CLIENT_LOCAL_FILES,
        0,
    )
    .await
    .unwrap();
    assert_eq!(
        client.server_caps & CLIENT_LOCAL_FILES,
        0,
        "greeting offers LOCAL INFILE"
    );
    client.quit().await.ok();
    // ...and a client that asks anyway is refused by the server, which never saw the flag.
    let opts =
        mysql_async::OptsBuilder::from_opts(proxy.opts("bench", "bench")).db_name(Some("test"));
    let mut conn = mysql_async::Conn::new(opts).await.unwrap();
    conn.query_drop("CREATE TABLE IF NOT EXISTS infile_off (a INT)")
        .await
        .unwrap();
    let err = conn
        .query_drop("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE infile_off")
        .await
        .expect_err("LOCAL INFILE must be refused");
    let text = err.to_string();
    assert!(
        text.contains("1148") || text.contains("4166") || text.to_lowercase().contains("local"),
        "{text}"
    );
    conn.disconnect().await.unwrap();
}

#[test]
fn admin_endpoint_listens_on_loopback_by_default() {
    let c = mysql_lb::config::Config::default();
    let admin = c.admin_address.expect("admin enabled by default");
    assert!(admin.ip().is_loopback(), "{admin}");
    for l in &c.listen {
        assert!(l.to_string().starts_with("127.0.0.1:"), "{l}");
    }
}

#[tokio::test]
async fn names_from_the_wire_cannot_forge_text_log_lines() {
    use common::daemon::Daemon;
    let db = &shared_pair()[0];
    let mut daemon = Daemon::start(
        &[
            "--proxy-address=127.0.0.1:0".to_owned(),
            format!("--proxy-backend-addresses={}", db.tcp_addr()),
            "--admin-address=off".to_owned(),
            "--log-level=debug".to_owned(),
            "--log-format=text".to_owned(),
        ],
        None,
    );
    let port = daemon.proxy_addr().port();
    // A newline that would start a line of its own, and an ANSI colour escape, in the user
    // name (which the handshake line logs, and MariaDB's 1045 repeats) and the schema.
    let user = "evil\nFORGED-USER \u{1b}[31mred";
    let schema = "db\r\nFORGED-SCHEMA\u{1b}]0;title\u{7}";
    let err = RawClient::connect_tcp(
        &format!("127.0.0.1:{port}"),
        user,
        "whatever",
        Some(schema),
        0,
        0,
    )
    .await
    .err()
    .expect("no such account");
    assert!(err.contains("1045"), "the server's own denial: {err}");
    daemon.wait_for_line("authentication failed");
    assert!(daemon.stop().success());
    let lines = daemon.whole_log();
    let log = lines.join("\n");
    for line in &lines {
        assert!(
            !line.contains("FORGED") || line.contains("\\nFORGED"),
            "a line of its own from a peer's name: {line:?}\nin:\n{log}"
        );
        assert!(!line.contains('\u{1b}') && !line.contains('\r') && !line.contains('\u{7}'));
    }
    let handshake = daemon.wait_for_line("client handshake response");
    assert!(
        handshake.contains("user=evil\\nFORGED-USER \\u{1b}[31mred"),
        "{handshake}"
    );
    assert!(handshake.contains("FORGED-SCHEMA"), "{handshake}");
    // MariaDB writes the escape as `\001B` itself, but not the newline.
    let denied = daemon.wait_for_line("authentication failed");
    assert!(denied.contains("'evil\\nFORGED-USER "), "{denied}");
}
