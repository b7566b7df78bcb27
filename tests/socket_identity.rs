//! A unix-socket backend authenticates by the OS user of its peer (MariaDB's `unix_socket`), and
//! that peer is mysql-lb: no client may be admitted on the proxy's own OS identity. The server
//! here has Debian's default accounts (`root@localhost` and `mysql@localhost` as
//! `mysql_native_password USING 'invalid' OR unix_socket`, what `mariadb-install-db` creates by
//! default) and mysql-lb runs as root, as a packaged daemon often does.

mod common;

use std::path::Path;
use std::process::Output;

use common::daemon::Daemon;
use common::mariadb::MariaDb;

/// Debian's default accounts, as `mariadb-install-db --auth-root-authentication-method=socket`
/// creates them.
const DEBIAN_ACCOUNTS: &str = "\
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING 'invalid' OR unix_socket; \
CREATE USER 'mysql'@'localhost' IDENTIFIED VIA mysql_native_password USING 'invalid' OR unix_socket; \
GRANT ALL PRIVILEGES ON *.* TO 'mysql'@'localhost' WITH GRANT OPTION;";

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn cli(port: u16, user: &str, password: Option<&str>, sql: &str) -> Output {
    let mut cmd = std::process::Command::new("mariadb");
    cmd.args(["--no-defaults", "--protocol=TCP", "-h127.0.0.1", "-N"])
        .arg(format!("-P{port}"))
        .arg(format!("-u{user}"));
    if let Some(p) = password {
        cmd.arg(format!("-p{p}"));
    }
    cmd.args(["-e", sql])
        .output()
        .expect("run the mariadb CLI (apt-get install mariadb-client)")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// mysql-lb in front of the socket with `extra` YAML; returns it and its port.
fn proxy(socket: &Path, extra: &str) -> (Daemon, u16) {
    let dir = common::mariadb::new_temp_dir("sockid-cfg");
    let file = dir.join("mysql-lb.yaml");
    std::fs::write(
        &file,
        format!(
            "listen: [\"127.0.0.1:0\"]\nbackends: [\"{}\"]\nadmin_address: \"off\"\n{extra}",
            socket.display()
        ),
    )
    .unwrap();
    let mut daemon = Daemon::start(&[format!("--config={}", file.display())], None);
    let port = daemon.proxy_addr().port();
    (daemon, port)
}

fn debian_server(name: &str) -> MariaDb {
    assert!(is_root(), "this test runs mysql-lb as root, as CI does");
    let db = MariaDb::start(name);
    db.root_exec(DEBIAN_ACCOUNTS);
    // The reproduction's premise: straight to the socket, OS root is root with any password.
    let direct = db.root_query("SELECT CURRENT_USER()");
    assert_eq!(direct.trim(), "root@localhost");
    db
}

fn assert_refused(out: &Output, who: &str) {
    let t = text(out);
    assert!(!out.status.success(), "{who} was admitted: {t}");
    // 1698 is the server's own refusal where unix_socket found another OS user.
    assert!(
        t.contains("ERROR 1045") || t.contains("ERROR 1698"),
        "{who}: {t}"
    );
    assert!(!t.contains("root@localhost"), "{who}: {t}");
}

fn root_and_mysql_are_refused_and_bench_works(port: u16) {
    assert_refused(
        &cli(port, "root", Some("WRONG"), "SELECT CURRENT_USER()"),
        "root -pWRONG",
    );
    assert_refused(
        &cli(port, "root", None, "SELECT CURRENT_USER()"),
        "root, no password",
    );
    assert_refused(
        &cli(port, "mysql", Some("x"), "SELECT CURRENT_USER()"),
        "mysql",
    );
    let bench = cli(port, "bench", Some("bench"), "SELECT CURRENT_USER()");
    assert!(bench.status.success(), "{}", text(&bench));
    assert_eq!(
        String::from_utf8_lossy(&bench.stdout).trim(),
        "bench@localhost"
    );
}

#[test]
fn root_cannot_log_in_through_a_unix_socket_backend_immediate_or_deferred() {
    let db = debian_server("sockid");
    for mode in ["immediate", "deferred"] {
        let (_proxy, port) = proxy(&db.socket, &format!("connect_mode: {mode}\n"));
        root_and_mysql_are_refused_and_bench_works(port);
    }
}

#[test]
fn a_login_under_the_identity_mysql_lb_connects_as_is_refused_by_mysql_lb() {
    // An account for the OS user mysql-lb connects as (here `nobody`, the default): the server
    // would admit it by the socket's peer, so mysql-lb refuses it before the server sees it.
    // `backend_socket_user: daemon` below must then start: the probe at start asks as `daemon`.
    // Created after mysql-lb started (at start it would have refused the backend, see below).
    let db = debian_server("sockid2");
    let (_proxy, port) = proxy(&db.socket, "");
    db.root_exec(
        "CREATE USER 'nobody'@'localhost' IDENTIFIED VIA unix_socket; \
         GRANT SELECT ON *.* TO 'nobody'@'localhost';",
    );
    let out = cli(port, "nobody", None, "SELECT CURRENT_USER()");
    let t = text(&out);
    assert!(!out.status.success(), "nobody was admitted: {t}");
    assert!(
        t.contains("ERROR 1045") && t.contains("mysql-lb: Access denied for user 'nobody'"),
        "{t}"
    );
    // And the same through a named user: `backend_socket_user` picks who mysql-lb connects as.
    let (_proxy, port) = proxy(&db.socket, "backend_socket_user: daemon\n");
    let out = cli(port, "nobody", None, "SELECT CURRENT_USER()");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        !text(&out).contains("mysql-lb: Access denied"),
        "as `daemon`, the server itself refuses nobody: {}",
        text(&out)
    );
    root_and_mysql_are_refused_and_bench_works(port);
}

#[test]
fn backend_socket_user_that_does_not_exist_or_is_root_stops_the_start() {
    for (user, says) in [
        (
            "no-such-user-mysql-lb",
            "no OS user named `no-such-user-mysql-lb`",
        ),
        ("root", "`root` is root"),
    ] {
        let out = std::process::Command::new(common::daemon::BIN)
            .args([
                "--proxy-address=127.0.0.1:0",
                "--proxy-backend-addresses=/run/no-such.sock",
                "--admin-address=off",
            ])
            .env("MYSQL_LB_TEST_UNUSED", "1")
            .arg(format!("--config={}", {
                let dir = common::mariadb::new_temp_dir("sockid-bad");
                let f = dir.join("c.yaml");
                std::fs::write(&f, format!("backend_socket_user: {user}\n")).unwrap();
                f.display().to_string()
            }))
            .output()
            .unwrap();
        let t = text(&out);
        assert!(!out.status.success(), "{user}: started: {t}");
        assert!(t.contains(says), "{user}: {t}");
    }
}

#[test]
fn a_backend_that_admits_the_identity_stops_the_start_and_is_refused_on_reload() {
    // mysql-lb run as an OS user that has a socket-authenticated account (as Debian's `mysql`
    // does): any client's COM_CHANGE_USER to it would be admitted, so the configuration is.
    let db = debian_server("sockid3");
    db.root_exec("CREATE USER 'daemon'@'localhost' IDENTIFIED VIA unix_socket;");
    let dir = common::mariadb::new_temp_dir("sockid-adm");
    let file = dir.join("mysql-lb.yaml");
    let with_socket = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin_address: \"off\"\nbackend_socket_user: daemon\n\
         backends: [\"{}\"]\n",
        db.socket.display()
    );
    std::fs::write(&file, &with_socket).unwrap();
    let out = std::process::Command::new(common::daemon::BIN)
        .arg(format!("--config={}", file.display()))
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "started: {t}");
    assert!(
        t.contains("admits mysql-lb's OS user `daemon`") && t.contains("as account `daemon`"),
        "{t}"
    );
    // Started on TCP alone, a reload that adds the socket is refused and changes nothing.
    let tcp_only = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin_address: \"off\"\nbackend_socket_user: daemon\n\
         backends: [\"{}\"]\n",
        db.tcp_addr()
    );
    std::fs::write(&file, &tcp_only).unwrap();
    let mut proxy = Daemon::start(&[format!("--config={}", file.display())], None);
    let port = proxy.proxy_addr().port();
    // The file watch reloads it (a SIGHUP sent this early could come before the handler is in).
    std::fs::write(&file, &with_socket).unwrap();
    let line = proxy.wait_for_line("reload refused");
    assert!(
        line.contains("admits mysql-lb's OS user `daemon`"),
        "{line}"
    );
    let out = cli(port, "bench", Some("bench"), "SELECT @@socket IS NOT NULL");
    assert!(out.status.success(), "{}", text(&out));
}
