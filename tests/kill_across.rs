//! A KILL arriving on another backend than its target's (a cancel's new connection, balanced
//! like any other): with a `kill:` account mysql-lb runs it on the target's backend when killer
//! and target are the same user, as the server's own rule allows, and refuses it with the
//! server's 1095 otherwise. Three real MariaDB backends, round robin; `app` and `eve` hold no
//! privilege to kill other users' threads.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, MariaDb};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use common::{create_kill_accounts, kill_account, wait_until};

/// `SELECT SLEEP(30)` interrupted: far sooner than that, the KILL took effect. The time includes
/// starting the `mariadb` CLI and its login through the proxy, which on two cores busy with the
/// rest of the suite took just over 2 s once; the error code (1317) is what says the KILL did it.
const CANCELLED_WITHIN: Duration = Duration::from_secs(10);

/// A third server beside the shared pair, with the KILL accounts on all three.
fn third() -> &'static MariaDb {
    static THIRD: OnceLock<MariaDb> = OnceLock::new();
    THIRD.get_or_init(|| {
        let db = MariaDb::start("kill-third");
        for server in shared_pair().iter().chain([&db]) {
            create_kill_accounts(server);
        }
        db
    })
}

fn servers() -> Vec<&'static MariaDb> {
    let third = third();
    shared_pair().iter().chain([third]).collect()
}

/// mysql-lb over the three servers, round robin, with the `kill:` account or without.
fn proxy(with_account: bool) -> TestProxy {
    let addrs: Vec<String> = servers().iter().map(|s| s.tcp_addr()).collect();
    let mut cfg = config(&addrs);
    if with_account {
        cfg.kill = kill_account();
    }
    TestProxy::start_with(cfg)
}

fn running_anywhere(marker: &str) -> bool {
    servers().iter().any(|db| {
        db.root_query("SELECT INFO FROM information_schema.PROCESSLIST")
            .contains(marker)
    })
}

async fn login_as(proxy: &TestProxy, user: &str) -> RawClient {
    RawClient::connect_tcp(&proxy.addr_string(), user, user, None, 0, 0)
        .await
        .unwrap_or_else(|e| panic!("login as {user} through the proxy: {e}"))
}

async fn port_of(c: &mut RawClient) -> String {
    let rows = c.query_text("SELECT @@port").await.expect("SELECT @@port");
    rows[0][0].clone().expect("a port")
}

/// A session of `user` on the server listening on `port` (round robin gets there in three).
async fn session_on(proxy: &TestProxy, user: &str, port: &str) -> RawClient {
    for _ in 0..12 {
        let mut c = login_as(proxy, user).await;
        if port_of(&mut c).await == port {
            return c;
        }
    }
    panic!("round robin never gave the server on port {port}");
}

/// Starts `SELECT SLEEP(30)` tagged `marker` on `victim` and waits until a server runs it.
async fn start_sleeping(victim: &mut RawClient, marker: &str) {
    victim
        .send_command(0x03, format!("SELECT SLEEP(30), '{marker}'").as_bytes())
        .await
        .expect("send the victim's query");
    wait_until(&format!("{marker} to run"), || running_anywhere(marker));
}

/// The victim's statement ends with the interruption error, soon after `since`.
async fn assert_interrupted(victim: &mut RawClient, since: Instant, what: &str) {
    let rows = victim.read_results().await;
    let elapsed = since.elapsed();
    let err = rows.expect_err("the victim's query was interrupted");
    assert!(
        err.starts_with("1317"),
        "{what}: interrupted by the KILL: {err}"
    );
    assert!(
        elapsed < CANCELLED_WITHIN,
        "{what}: the query ended {elapsed:?} after the KILL"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_query_from_every_backend_interrupts_the_same_users_query() {
    let proxy = proxy(true);
    let ports: Vec<String> = servers().iter().map(|s| s.port.to_string()).collect();
    // Every placement of victim and killer: 3 × 3, the killer on the victim's backend included.
    for victim_port in &ports {
        for killer_port in &ports {
            let what = format!("victim on {victim_port}, killer on {killer_port}");
            let mut victim = session_on(&proxy, "app", victim_port).await;
            let mut killer = session_on(&proxy, "app", killer_port).await;
            let marker = format!("across-{victim_port}-{killer_port}");
            start_sleeping(&mut victim, &marker).await;
            let started = Instant::now();
            killer
                .query_results(&format!("KILL QUERY {}", victim.connection_id))
                .await
                .unwrap_or_else(|e| panic!("{what}: KILL QUERY answered {e}"));
            assert_interrupted(&mut victim, started, &what).await;
            // Both sessions stay in sync and usable.
            assert_eq!(&port_of(&mut victim).await, victim_port, "{what}");
            assert_eq!(&port_of(&mut killer).await, killer_port, "{what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn another_users_kill_across_backends_is_refused_with_the_servers_1095() {
    let proxy = proxy(true);
    let ports: Vec<String> = servers().iter().map(|s| s.port.to_string()).collect();
    let mut victim = session_on(&proxy, "app", &ports[0]).await;
    let id = victim.connection_id;
    start_sleeping(&mut victim, "not-eves").await;
    for port in &ports {
        let mut eve = session_on(&proxy, "eve", port).await;
        let err = eve
            .query_text(&format!("KILL QUERY {id}"))
            .await
            .expect_err("eve may not kill app's query");
        assert!(err.starts_with("1095"), "eve on {port}: {err}");
        assert!(
            err.contains("You are not owner of thread"),
            "eve on {port}: {err}"
        );
        assert!(running_anywhere("not-eves"), "app's query runs on");
        assert_eq!(&port_of(&mut eve).await, port, "eve's session in sync");
    }
    // Across backends the refusal names nothing but the id.
    let mut eve = session_on(&proxy, "eve", &ports[1]).await;
    let err = eve
        .query_text(&format!("KILL {id}"))
        .await
        .expect_err("eve may not kill app's connection");
    assert!(
        err.contains(&format!("You are not owner of thread {id}")) && !err.contains(&ports[0]),
        "{err}"
    );
    let mut killer = session_on(&proxy, "app", &ports[2]).await;
    let started = Instant::now();
    killer
        .query_results(&format!("KILL QUERY {id}"))
        .await
        .expect("app may");
    assert_interrupted(&mut victim, started, "app's own KILL after eve's").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_connection_across_backends_closes_the_target_session() {
    let proxy = proxy(true);
    let ports: Vec<String> = servers().iter().map(|s| s.port.to_string()).collect();
    let mut victim = session_on(&proxy, "app", &ports[1]).await;
    let mut bystander = session_on(&proxy, "app", &ports[1]).await;
    let mut killer = session_on(&proxy, "app", &ports[2]).await;
    killer
        .query_results(&format!("KILL CONNECTION {}", victim.connection_id))
        .await
        .expect("KILL CONNECTION of the same user's session");
    assert!(
        victim.query_text("SELECT 1").await.is_err(),
        "the victim's connection was closed"
    );
    assert_eq!(
        port_of(&mut bystander).await,
        ports[1],
        "bystander untouched"
    );
    assert_eq!(port_of(&mut killer).await, ports[2], "killer untouched");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_kill_account_the_refusal_says_how_to_enable_it() {
    let proxy = proxy(false);
    let ports: Vec<String> = servers().iter().map(|s| s.port.to_string()).collect();
    let mut victim = session_on(&proxy, "app", &ports[0]).await;
    start_sleeping(&mut victim, "no-account").await;
    let mut killer = session_on(&proxy, "app", &ports[1]).await;
    let err = killer
        .query_text(&format!("KILL QUERY {}", victim.connection_id))
        .await
        .expect_err("refused without an account");
    assert!(
        err.starts_with("1095") && err.contains("kill.user"),
        "{err}"
    );
    assert!(running_anywhere("no-account"), "nothing was killed");
    let mut same = session_on(&proxy, "app", &ports[0]).await;
    let started = Instant::now();
    same.query_results(&format!("KILL QUERY {}", victim.connection_id))
        .await
        .expect("on the same backend the KILL runs as before");
    assert_interrupted(&mut victim, started, "same backend").await;
}

/// The `mariadb` CLI with `app`'s credentials against the proxy, `sql` in batch mode.
fn cli(proxy: &TestProxy, sql: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("mariadb");
    cmd.args(["--no-defaults", "--protocol=TCP", "-h127.0.0.1"])
        .arg(format!("-P{}", proxy.addr.port()))
        .args(["-uapp", "-papp", "--batch", "-e", sql])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// The port of the server running the statement tagged `marker`, once one does.
fn server_running(marker: &str) -> u16 {
    let found = std::cell::Cell::new(None);
    wait_until(&format!("{marker} to run"), || {
        let on = servers().into_iter().find(|db| {
            db.root_query("SELECT INFO FROM information_schema.PROCESSLIST")
                .contains(marker)
        });
        found.set(on.map(|db| db.port));
        on.is_some()
    });
    found.get().expect("a server runs it")
}

/// Ctrl-C in the CLI opens a new connection (balanced anywhere) and sends `KILL QUERY n`.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_cli_ctrl_c_interrupts_its_query_wherever_its_kill_lands() {
    let proxy = proxy(true);
    let mut placements = std::collections::BTreeSet::new();
    for i in 0..6 {
        let marker = format!("cli-ctrl-c-{i}");
        let mut child = cli(&proxy, &format!("SELECT SLEEP(30), '{marker}'"))
            .spawn()
            .expect("run the mariadb CLI (apt-get install mariadb-client)");
        let port = tokio::task::block_in_place(|| server_running(&marker));
        placements.insert(port);
        let started = Instant::now();
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        // SAFETY: signalling our own child process, which is still running.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0, "SIGINT sent");
        let mut exited = None;
        while started.elapsed() < Duration::from_secs(10) {
            if let Some(status) = child.try_wait().expect("wait for the CLI") {
                exited = Some(status);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();
        if exited.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().expect("the CLI's output");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            stderr.contains("1317") && stderr.contains("interrupted"),
            "attempt {i} (query on {port}): the query was interrupted: {stdout} {stderr}"
        );
        assert!(
            elapsed < CANCELLED_WITHIN,
            "attempt {i}: ended {elapsed:?} after Ctrl-C"
        );
        assert!(
            !running_anywhere(&marker),
            "attempt {i}: nothing left running"
        );
    }
    assert_eq!(
        placements.len(),
        3,
        "the query ran on every backend: {placements:?}"
    );
}

/// `KILL QUERY n` from a second CLI connection, for every placement of the two.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_cli_kill_query_from_a_second_connection_interrupts_everywhere() {
    let proxy = proxy(true);
    for i in 0..6 {
        let marker = format!("cli-second-{i}");
        let mut victim = login_as(&proxy, "app").await;
        start_sleeping(&mut victim, &marker).await;
        let started = Instant::now();
        let out = tokio::task::block_in_place(|| {
            cli(&proxy, &format!("KILL QUERY {}", victim.connection_id))
                .output()
                .expect("run the mariadb CLI")
        });
        assert!(
            out.status.success(),
            "attempt {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_interrupted(&mut victim, started, &format!("attempt {i}")).await;
    }
}

/// A session that switched user (COM_CHANGE_USER, here app → eve) is no longer app's: app's
/// KILL from another backend is refused, as the server would refuse it, and kills nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_changed_user_is_not_killed_for_its_login_user() {
    use mysql_async::prelude::Queryable;
    let proxy = proxy(true);
    let mut switched = mysql_async::Conn::new(common::mariadb::tcp_opts(
        &proxy.addr_string(),
        "app",
        "app",
    ))
    .await
    .expect("app through the proxy");
    let port: Option<u16> = switched.query_first("SELECT @@port").await.unwrap();
    let port = port.expect("a port").to_string();
    switched
        .change_user(
            mysql_async::ChangeUserOpts::default()
                .with_user(Some("eve".into()))
                .with_pass(Some("eve".into())),
        )
        .await
        .expect("COM_CHANGE_USER to eve");
    let id = switched.id();
    let other = servers()
        .iter()
        .map(|s| s.port.to_string())
        .find(|p| *p != port)
        .expect("another server");
    let mut app = session_on(&proxy, "app", &other).await;
    let err = app
        .query_text(&format!("KILL CONNECTION {id}"))
        .await
        .expect_err("the session is eve's now");
    assert!(
        err.starts_with("1095") && err.contains("You are not owner of thread"),
        "{err}"
    );
    let me: Option<String> = switched.query_first("SELECT USER()").await.unwrap();
    assert!(
        me.is_some_and(|u| u.starts_with("eve@")),
        "eve's session lives on"
    );
}

/// A `kill:` account the backends refuse: the KILL fails with an ERR saying why, nothing is
/// killed, and the session stays in sync.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_account_the_backend_refuses_gets_an_err_and_kills_nothing() {
    let addrs: Vec<String> = servers().iter().map(|s| s.tcp_addr()).collect();
    let mut cfg = config(&addrs);
    cfg.kill = kill_account();
    cfg.kill.password = Some(mysql_lb::config::Secret::new("wrong"));
    let proxy = TestProxy::start_with(cfg);
    let ports: Vec<String> = servers().iter().map(|s| s.port.to_string()).collect();
    let mut victim = session_on(&proxy, "app", &ports[0]).await;
    start_sleeping(&mut victim, "bad-kill-account").await;
    let mut killer = session_on(&proxy, "app", &ports[1]).await;
    let err = killer
        .query_text(&format!("KILL QUERY {}", victim.connection_id))
        .await
        .expect_err("the kill account cannot log in");
    assert!(
        err.starts_with("1105")
            && err.contains("login as the kill account: 1045")
            && err.contains("nothing was killed"),
        "{err}"
    );
    assert!(running_anywhere("bad-kill-account"), "the query runs on");
    assert_eq!(
        port_of(&mut killer).await,
        ports[1],
        "the killer is in sync"
    );
}
