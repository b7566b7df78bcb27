//! Transaction pooling (`pooling.mode: transaction`) where it could go wrong, against real
//! MariaDB: logins the server refuses leave no slot behind, users (and, with the PROXY protocol
//! to the backend, client addresses) never share a server connection, TLS and compression on the
//! backend leg pool like plain ones, a backend killed under load runs no statement twice, a
//! pooled connection killed on the server is noticed before a statement lands on it, a client
//! gone mid-statement leaves its connection in sync for the others, KILL reaches the connection
//! its session holds now and nobody else's, the drain closes the pool, a reload's limit takes
//! effect, and COM_RESET_CONNECTION / COM_CHANGE_USER behave as they do directly.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::mariadb::{shared_pair, tcp_opts, MariaDb, BENCH_PASS, BENCH_USER};
use common::pooling::{counts, open_connections, server_id, transaction_mode};
use common::proxy::{config, TestProxy};
use common::rawclient::RawClient;
use common::{running_on_shared_backends, start_sleeping, wait_until};
use mysql_async::prelude::*;

/// A second account on every shared backend, to check that users never share.
const OTHER_USER: &str = "pf_other";
const OTHER_PASS: &str = "pf_other_pw";

fn other_user() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        for db in shared_pair() {
            db.root_exec(&format!(
                "CREATE USER IF NOT EXISTS '{OTHER_USER}'@'%' IDENTIFIED BY '{OTHER_PASS}'; \
                 CREATE USER IF NOT EXISTS '{OTHER_USER}'@'localhost' IDENTIFIED BY '{OTHER_PASS}'; \
                 GRANT SELECT ON *.* TO '{OTHER_USER}'@'%'; \
                 GRANT SELECT ON *.* TO '{OTHER_USER}'@'localhost'"
            ));
        }
    });
}

/// A proxy in transaction mode on one backend.
fn pooled(backend: &str, max: usize, idle: Duration) -> TestProxy {
    common::pooling::pooled(&[backend.to_owned()], max, idle, Duration::from_secs(2))
}

fn server_code(e: &mysql_async::Error) -> u16 {
    match e {
        mysql_async::Error::Server(s) => s.code,
        other => panic!("expected a server error, got {other}"),
    }
}

async fn login_error(addr: &str, user: &str, pass: &str) -> u16 {
    match mysql_async::Conn::new(tcp_opts(addr, user, pass)).await {
        Ok(_) => panic!("{user} logged in to {addr} with a wrong password"),
        Err(e) => server_code(&e),
    }
}

/// Whether server thread `id` still exists on `db`.
fn thread_alive(db: &MariaDb, id: u64) -> bool {
    !db.root_query(&format!(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = {id}"
    ))
    .trim()
    .is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_and_an_unknown_user_are_refused_as_directly_and_free_their_slot() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 2, Duration::from_secs(60));
    let proxied = proxy.addr_string();
    for (user, pass) in [(BENCH_USER, "wrong"), ("pf_nobody", "x")] {
        let direct = login_error(&backend, user, pass).await;
        // More refusals than the pool has slots: a leaked slot would make the last ones wait.
        for _ in 0..3 {
            let started = Instant::now();
            assert_eq!(login_error(&proxied, user, pass).await, direct, "{user}");
            assert!(started.elapsed() < Duration::from_secs(1), "no slot wait");
        }
        assert_eq!(direct, 1045);
    }
    // The slot comes free as the refused session ends, just after its ERR.
    open_connections(&proxy, &backend, 0).await;
    assert_eq!(
        proxy.series(&format!(
            "mysql_lb_pool_server_connections{{backend=\"{backend}\",pool=\"default\",state=\"in_use\"}}"
        )),
        Some(0.0)
    );
    // Both slots are there for real logins.
    let mut a = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut b = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    assert_eq!(counts(&proxy, &backend).open, 2);
    server_id(&mut a).await;
    server_id(&mut b).await;
    a.disconnect().await.unwrap();
    b.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_never_share_a_server_connection() {
    other_user();
    let db = &shared_pair()[1];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 8, Duration::from_millis(300));
    let mut sessions = Vec::new();
    for (user, pass) in [
        (BENCH_USER, BENCH_PASS),
        (OTHER_USER, OTHER_PASS),
        (BENCH_USER, BENCH_PASS),
        (OTHER_USER, OTHER_PASS),
    ] {
        let conn = mysql_async::Conn::new(proxy.opts(user, pass))
            .await
            .unwrap();
        sessions.push((user, conn));
    }
    // Idle connections close down to one per user: each user's two sessions share it.
    open_connections(&proxy, &backend, 2).await;
    let mut ids: [HashSet<u64>; 2] = Default::default();
    for round in 0..5 {
        for (i, (user, conn)) in sessions.iter_mut().enumerate() {
            let (current, id): (String, u64) = conn
                .query_first("SELECT CURRENT_USER(), @@pseudo_thread_id")
                .await
                .unwrap()
                .unwrap();
            assert!(
                current.starts_with(&format!("{user}@")),
                "round {round}: session {i} of {user} ran as {current}"
            );
            ids[usize::from(*user == OTHER_USER)].insert(id);
        }
    }
    assert_eq!(ids[0].len(), 1, "bench's sessions shared one: {ids:?}");
    assert_eq!(
        ids[1].len(),
        1,
        "{OTHER_USER}'s sessions shared one: {ids:?}"
    );
    assert!(
        ids[0].is_disjoint(&ids[1]),
        "no connection of both: {ids:?}"
    );
    for (_, conn) in sessions {
        conn.disconnect().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_query_reaches_the_statement_its_session_runs_now_and_nobody_elses() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_secs(1));
    let addr = proxy.addr_string();
    let login = || RawClient::connect_tcp(&addr, BENCH_USER, BENCH_PASS, None, 0, 0);
    let mut victim = login().await.unwrap();
    let mut other = login().await.unwrap();
    open_connections(&proxy, &backend, 1).await;
    // @@pseudo_thread_id shows the server connection in use (CONNECTION_ID() would pin it), not
    // the proxy id of the greeting.
    let shared_id = pp_value(&mut victim, "SELECT @@pseudo_thread_id").await;
    assert_ne!(shared_id, victim.connection_id.to_string());
    assert_eq!(
        pp_value(&mut other, "SELECT @@pseudo_thread_id").await,
        shared_id
    );

    // The victim holds no connection between statements: a KILL QUERY naming it must not
    // reach the statement another session now runs on the connection it used last.
    start_sleeping(&mut other, "pf-not-the-victim").await;
    let mut killer = login().await.unwrap();
    killer
        .query_results(&format!("KILL QUERY {}", victim.connection_id))
        .await
        .expect("KILL QUERY of an idle session is an OK, as directly");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        running_on_shared_backends("pf-not-the-victim"),
        "another session's statement was killed"
    );
    killer
        .query_results(&format!("KILL QUERY {}", other.connection_id))
        .await
        .expect("KILL QUERY of the sleeping session");
    let err = other.read_results().await.expect_err("interrupted");
    assert!(err.starts_with("1317"), "{err}");

    // Running, the victim is reached on whichever connection it holds.
    start_sleeping(&mut victim, "pf-the-victim").await;
    let running_on = db.root_query(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%pf-the-victim%' \
         AND INFO NOT LIKE '%PROCESSLIST%'",
    );
    // The idle ones closed meanwhile (the victim holds the last): a new login makes another.
    killer.quit().await.unwrap();
    let mut killer = login().await.unwrap();
    let started = Instant::now();
    killer
        .query_results(&format!("KILL QUERY {}", victim.connection_id))
        .await
        .expect("KILL QUERY of the victim");
    let err = victim.read_results().await.expect_err("interrupted");
    assert!(err.starts_with("1317"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // It still works, and its statements run where @@pseudo_thread_id says.
    let id = pp_value(&mut victim, "SELECT @@pseudo_thread_id").await;
    assert_eq!(
        running_on.trim(),
        id,
        "the sleep ran on the connection it reports"
    );

    // KILL CONNECTION of a session between statements would have to end it from outside:
    // refused, nothing killed. Running, it ends the server connection the session holds.
    let err = killer
        .query_text(&format!("KILL {}", victim.connection_id))
        .await
        .expect_err("refused");
    assert!(
        err.starts_with("1095") && err.contains("nothing was killed"),
        "{err}"
    );
    assert_eq!(pp_value(&mut other, "SELECT 1").await, "1");
    start_sleeping(&mut victim, "pf-victim-connection").await;
    killer
        .query_results(&format!("KILL {}", victim.connection_id))
        .await
        .expect("KILL CONNECTION of the running victim");
    assert!(victim.read_results().await.is_err(), "its connection ended");
    wait_until("the killed statement to go", || {
        !running_on_shared_backends("pf-victim-connection")
    });
    assert_eq!(
        pp_value(&mut other, "SELECT 1").await,
        "1",
        "the others go on"
    );
    for c in [other, killer] {
        c.quit().await.unwrap();
    }
}

async fn pp_value(client: &mut RawClient, sql: &str) -> String {
    common::pp::value(client, sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pooled_connection_killed_on_the_server_is_noticed_before_a_statement_lands_on_it()
{
    let db = &shared_pair()[1];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_secs(60));
    let mut a = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut b = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let first = server_id(&mut a).await;
    let second = server_id(&mut b).await;
    let ids: HashSet<u64> = [first, second].into();
    assert_eq!(ids.len(), 2, "two connections, one per login");
    open_connections(&proxy, &backend, 2).await;
    db.root_exec(&format!("KILL {first}"));
    wait_until("the killed thread to go", || !thread_alive(db, first));
    for _ in 0..4 {
        assert_eq!(
            server_id(&mut a).await,
            second,
            "the statement ran on the connection left"
        );
        assert_eq!(server_id(&mut b).await, second);
    }
    open_connections(&proxy, &backend, 1).await;

    // None left: a clear error, not a statement sent into a dead socket.
    db.root_exec(&format!("KILL {second}"));
    wait_until("the killed thread to go", || !thread_alive(db, second));
    let err = a
        .query_drop("SELECT 1")
        .await
        .expect_err("no connection is left");
    assert_eq!(server_code(&err), 1040, "{err}");
    assert!(err.to_string().contains("reconnect"), "{err}");
    assert_eq!(counts(&proxy, &backend).open, 0);
    // A new login makes a new connection.
    let mut c = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    assert!(!ids.contains(&server_id(&mut c).await));
    c.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_ends_pooled_sessions_at_a_boundary_and_closes_the_pools_connections() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_secs(60));
    let addr = proxy.addr_string();
    let mut busy = RawClient::connect_tcp(&addr, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .unwrap();
    let mut idle = RawClient::connect_tcp(&addr, BENCH_USER, BENCH_PASS, None, 0, 0)
        .await
        .unwrap();
    let mut ids = HashSet::new();
    ids.insert(pp_value(&mut busy, "SELECT @@pseudo_thread_id").await);
    ids.insert(pp_value(&mut idle, "SELECT @@pseudo_thread_id").await);
    busy.send_command(0x03, b"SELECT SLEEP(1), 'pf-drain'")
        .await
        .unwrap();
    wait_until("the sleep to run", || {
        running_on_shared_backends("pf-drain")
    });
    proxy.begin_shutdown();
    let rows = busy.read_results().await.expect("the statement finishes");
    assert_eq!(rows[0].len(), 1, "its result arrives whole");
    assert!(busy.read_packet().await.is_err(), "then the session ends");
    assert!(idle.read_packet().await.is_err(), "the idle session ends");
    let ids: Vec<u64> = ids.iter().map(|i| i.parse().unwrap()).collect();
    wait_until("the pool's connections to close", || {
        ids.iter().all(|id| !thread_alive(db, *id))
    });
    assert_eq!(counts(&proxy, &backend).open, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_connection_and_change_user_behave_as_directly() {
    other_user();
    let db = &shared_pair()[1];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_millis(300));
    let direct = db.opts(BENCH_USER, BENCH_PASS);
    let proxied = proxy.opts(BENCH_USER, BENCH_PASS);
    let mut seen = Vec::new();
    for opts in [direct, proxied] {
        let mut c = mysql_async::Conn::new(opts).await.unwrap();
        c.query_drop("SET @pf = 7").await.unwrap();
        c.reset().await.unwrap();
        let after_reset: Option<u64> = c.query_first("SELECT @pf").await.unwrap().unwrap();
        c.change_user(
            mysql_async::ChangeUserOpts::default()
                .with_user(Some(OTHER_USER.into()))
                .with_pass(Some(OTHER_PASS.into())),
        )
        .await
        .unwrap();
        let user: String = c
            .query_first("SELECT CURRENT_USER()")
            .await
            .unwrap()
            .unwrap();
        let wrong = c
            .change_user(
                mysql_async::ChangeUserOpts::default()
                    .with_user(Some(BENCH_USER.into()))
                    .with_pass(Some("wrong".into())),
            )
            .await
            .map_err(|e| server_code(&e));
        seen.push((after_reset, user, wrong));
    }
    assert_eq!(seen[0], seen[1], "direct, then through the pool");
    assert_eq!(seen[1].0, None);
    assert!(seen[1].1.starts_with(OTHER_USER), "{seen:?}");
    assert_eq!(seen[1].2, Err(1045));

    // The connection a session changed users on never serves another session of bench (two
    // connections: the other session runs on the other one).
    let proxy = pooled(&backend, 4, Duration::from_secs(60));
    let mut a = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut b = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    open_connections(&proxy, &backend, 2).await;
    a.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some(OTHER_USER.into()))
            .with_pass(Some(OTHER_PASS.into())),
    )
    .await
    .unwrap();
    let changed = server_id(&mut a).await;
    a.disconnect().await.unwrap();
    for _ in 0..3 {
        let (user, id): (String, u64) = b
            .query_first("SELECT CURRENT_USER(), @@pseudo_thread_id")
            .await
            .unwrap()
            .unwrap();
        assert!(user.starts_with(BENCH_USER), "{user}");
        assert_ne!(id, changed);
    }
    b.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_under_load_tells_its_sessions_and_runs_no_statement_twice() {
    let mut db = MariaDb::start("pf-killed");
    db.root_exec("CREATE TABLE test.pf_count (id INT AUTO_INCREMENT PRIMARY KEY, c INT)");
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_secs(60));
    let succeeded = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..8 {
        let opts = proxy.opts(BENCH_USER, BENCH_PASS);
        let succeeded = Arc::clone(&succeeded);
        clients.push(tokio::spawn(async move {
            let mut conn = match mysql_async::Conn::new(opts).await {
                Ok(conn) => conn,
                Err(e) => return Some(format!("login: {e}")),
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                match conn
                    .query_drop(format!("INSERT INTO test.pf_count (c) VALUES ({c})"))
                    .await
                {
                    Ok(()) => succeeded.fetch_add(1, Ordering::SeqCst),
                    Err(e) => return Some(e.to_string()),
                };
                // A write keeps the connection for one more command (its LAST_INSERT_ID()):
                // this one lets it go.
                if let Err(e) = conn.query_drop("DO 0").await {
                    return Some(e.to_string());
                }
            }
            None
        }));
    }
    // Four connections for eight sessions: the statements share them.
    let started = Instant::now();
    while succeeded.load(Ordering::SeqCst) < 200 {
        assert!(started.elapsed() < Duration::from_secs(20), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    db.kill9();
    let killed = Instant::now();
    let mut told = 0;
    for c in clients {
        let err = c.await.unwrap();
        if err.is_some() {
            told += 1;
        }
    }
    assert_eq!(told, 8, "every session was told");
    assert!(killed.elapsed() < Duration::from_secs(10), "promptly");
    db.restart();
    let rows: u64 = db
        .root_query("SELECT COUNT(*) FROM test.pf_count")
        .trim()
        .parse()
        .unwrap();
    let ok = succeeded.load(Ordering::SeqCst);
    // Each session had at most one statement in flight when the server died, which may or may
    // not have committed; a statement run twice would show as more rows than that.
    assert!(
        rows >= ok && rows <= ok + 8,
        "{rows} rows for {ok} statements the clients saw succeed"
    );
    // Every session ended: the pool kept no slot, and the backend back takes new logins.
    open_connections(&proxy, &backend, 0).await;
    let mut again = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect("a login once the backend is back");
    server_id(&mut again).await;
    again.disconnect().await.unwrap();
}

/// A server that takes PROXY headers from loopback, for the tests that send them.
fn accepting_proxy_headers() -> &'static MariaDb {
    static DB: OnceLock<MariaDb> = OnceLock::new();
    DB.get_or_init(|| MariaDb::start_with_args("pf-pp", &["--proxy-protocol-networks=127.0.0.0/8"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_proxy_protocol_clients_of_one_user_from_two_addresses_never_share() {
    let db = accepting_proxy_headers();
    let backend = db.tcp_addr();
    let mut cfg = config(std::slice::from_ref(&backend));
    cfg.proxy_protocol = mysql_lb::config::ProxyProtocol::V2;
    transaction_mode(
        &mut cfg,
        8,
        Duration::from_millis(300),
        Duration::from_secs(2),
    );
    let proxy = TestProxy::start_with(cfg);
    let mut clients = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.2"] {
        let (client, _) = common::pp::login_from(from, proxy.addr, BENCH_USER, BENCH_PASS)
            .await
            .unwrap_or_else(|e| panic!("login from {from}: {e}"));
        clients.push((from, client));
    }
    // One connection per address is left: the two clients from 127.0.0.2 share theirs.
    open_connections(&proxy, &backend, 2).await;
    let mut ids: [HashSet<String>; 2] = Default::default();
    for round in 0..4 {
        for (from, client) in &mut clients {
            let user = pp_value(client, "SELECT USER()").await;
            assert_eq!(user, format!("{BENCH_USER}@{from}"), "round {round}");
            let id = pp_value(client, "SELECT @@pseudo_thread_id").await;
            ids[usize::from(*from == "127.0.0.3")].insert(id);
        }
    }
    assert_eq!(ids[0].len(), 1, "127.0.0.2's clients share one: {ids:?}");
    assert!(
        ids[0].is_disjoint(&ids[1]),
        "no connection of both: {ids:?}"
    );
    for (_, c) in clients {
        c.quit().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_on_both_legs_and_a_compressed_backend_leg_pool_like_plain_ones() {
    use common::tls_server::certs;
    use mysql_lb::config::{BackendTls, BackendTlsMode, ClientTls, TlsVersion};
    let c = certs();
    let db = MariaDb::start_tls(
        "pf-tls",
        &common::mariadb::ServerTls {
            cert: &c.server.cert,
            key: &c.server.key,
            ca: Some(&c.ca),
            require_secure_transport: false,
        },
    );
    let backend = db.tcp_addr();
    let tls_proxy = {
        let mut cfg = config(std::slice::from_ref(&backend));
        cfg.tls = Some(ClientTls {
            cert: c.server.cert.clone(),
            key: c.server.key.clone(),
            ca: None,
            verify_client: false,
            min_version: TlsVersion::V1_2,
            require: true,
            cipher_suites: mysql_lb::config::default_cipher_suites(),
        });
        cfg.backends[0].tls = BackendTls {
            mode: BackendTlsMode::VerifyIdentity,
            ca: Some(c.ca.clone()),
            cert: None,
            key: None,
            min_version: TlsVersion::V1_2,
            allow_cleartext_passwords: false,
        };
        transaction_mode(
            &mut cfg,
            4,
            Duration::from_millis(300),
            Duration::from_secs(2),
        );
        TestProxy::start_with(cfg)
    };
    let ssl = mysql_async::SslOpts::default()
        .with_root_certs(vec![c.ca.clone().into()])
        .with_disable_built_in_roots(true);
    let tls_opts: mysql_async::Opts =
        mysql_async::OptsBuilder::from_opts(tls_proxy.opts(BENCH_USER, BENCH_PASS))
            .ssl_opts(ssl)
            .into();
    shares_one_connection(&tls_proxy, &backend, tls_opts, "Ssl_cipher", |v| {
        !v.is_empty()
    })
    .await;

    let compressed_proxy = {
        let mut cfg = config(std::slice::from_ref(&backend));
        cfg.backends[0].compression = true;
        transaction_mode(
            &mut cfg,
            4,
            Duration::from_millis(300),
            Duration::from_secs(2),
        );
        TestProxy::start_with(cfg)
    };
    let opts = compressed_proxy.opts(BENCH_USER, BENCH_PASS);
    shares_one_connection(&compressed_proxy, &backend, opts, "Compression", |v| {
        v == "ON"
    })
    .await;
}

/// Two sessions through `proxy` with `opts` end up on one server connection whose session
/// status `status` satisfies `leg` (the backend leg is what the test says), and a result
/// bigger than a packet comes through whole on it.
async fn shares_one_connection(
    proxy: &TestProxy,
    backend: &str,
    opts: mysql_async::Opts,
    status: &str,
    leg: impl Fn(&str) -> bool,
) {
    let mut a = mysql_async::Conn::new(opts.clone()).await.unwrap();
    let mut b = mysql_async::Conn::new(opts).await.unwrap();
    open_connections(proxy, backend, 1).await;
    for conn in [&mut a, &mut b] {
        let (_, value): (String, String) = conn
            .query_first(format!("SHOW SESSION STATUS LIKE '{status}'"))
            .await
            .unwrap()
            .unwrap();
        assert!(leg(&value), "{status} = {value:?}");
        let long: String = conn
            .query_first("SELECT REPEAT('x', 100000)")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(long.len(), 100_000);
    }
    assert_eq!(server_id(&mut a).await, server_id(&mut b).await);
    a.disconnect().await.unwrap();
    b.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_max_server_connections_takes_effect() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let with_max = |max| {
        let mut cfg = config(std::slice::from_ref(&backend));
        transaction_mode(
            &mut cfg,
            max,
            Duration::from_secs(60),
            Duration::from_secs(2),
        );
        cfg.validate().expect("valid config")
    };
    let proxy = pooled(&backend, 2, Duration::from_secs(60));
    let mut a = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    let mut b = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .unwrap();
    a.query_drop("BEGIN").await.unwrap();
    b.query_drop("BEGIN").await.unwrap();
    // Both connections are held: a third login finds no slot, and is told as a full server
    // tells it.
    let refused = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS)).await;
    let err = refused.expect_err("a login beyond max_server_connections");
    assert_eq!(server_code(&err), 1040, "{err}");
    assert!(
        err.to_string().contains("max_server_connections 2"),
        "{err}"
    );
    assert!(!err.to_string().contains("down"), "{err}");

    mysql_lb::control::reload::apply(&proxy.state, &with_max(3)).expect("reload");
    let mut c = mysql_async::Conn::new(proxy.opts(BENCH_USER, BENCH_PASS))
        .await
        .expect("a third login after the reload raised the limit");
    assert_eq!(counts(&proxy, &backend).open, 3);

    // Lowered again: the connection above the limit closes once idle (c gives it back just
    // after its answer), while a and b keep theirs; those serve everyone once they commit.
    server_id(&mut c).await;
    mysql_lb::control::reload::apply(&proxy.state, &with_max(2)).expect("reload");
    open_connections(&proxy, &backend, 2).await;
    a.query_drop("COMMIT").await.unwrap();
    b.query_drop("COMMIT").await.unwrap();
    server_id(&mut c).await;
    assert_eq!(counts(&proxy, &backend).open, 2);
    for conn in [a, b, c] {
        conn.disconnect().await.unwrap();
    }
}

/// The `mariadb` CLI (it has the client_ed25519 plugin mysql_async lacks), reading statements
/// from a pipe and answering each as it comes.
struct Cli {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Cli {
    fn login(addr: std::net::SocketAddr, user: &str, pass: &str) -> Cli {
        use std::process::{Command, Stdio};
        let mut child = Command::new("mariadb")
            .args([
                "--no-defaults",
                "--batch",
                "--skip-column-names",
                "--unbuffered",
            ])
            .args([
                "--protocol=tcp",
                "-h",
                "127.0.0.1",
                "-P",
                &addr.port().to_string(),
            ])
            .arg(format!("--user={user}"))
            .arg(format!("--password={pass}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the mariadb CLI");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        Cli { child, out }
    }

    /// One statement whose answer is one line.
    fn line(&mut self, sql: &str) -> String {
        use std::io::{BufRead, Write};
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{sql};").expect("write to the CLI");
        stdin.flush().expect("flush");
        let mut line = String::new();
        self.out.read_line(&mut line).expect("read the CLI");
        line.trim().to_owned()
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn an_ed25519_user_logs_in_and_shares_connections() {
    let db = &shared_pair()[1];
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let installed = db.root_query(
            "SELECT COUNT(*) FROM information_schema.PLUGINS \
             WHERE PLUGIN_NAME = 'ed25519' AND PLUGIN_STATUS = 'ACTIVE'",
        );
        if installed.trim() == "0" {
            db.root_exec("INSTALL SONAME 'auth_ed25519'");
        }
        db.root_exec(
            "DROP USER IF EXISTS 'pf_ed'@'%'; \
             CREATE USER 'pf_ed'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('edpass')",
        );
    });
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_millis(300));
    let mut a = Cli::login(proxy.addr, "pf_ed", "edpass");
    let mut b = Cli::login(proxy.addr, "pf_ed", "edpass");
    assert!(a.line("SELECT CURRENT_USER()").starts_with("pf_ed@"));
    assert!(b.line("SELECT CURRENT_USER()").starts_with("pf_ed@"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while counts(&proxy, &backend).open != 1 {
        assert!(Instant::now() < deadline, "{:?}", counts(&proxy, &backend));
        std::thread::sleep(Duration::from_millis(50));
    }
    let id = a.line("SELECT @@pseudo_thread_id");
    assert_eq!(
        b.line("SELECT @@pseudo_thread_id"),
        id,
        "one connection for both"
    );
    // A wrong password is the server's own refusal.
    let refused = std::process::Command::new("mariadb")
        .args(["--no-defaults", "--protocol=tcp", "-h", "127.0.0.1"])
        .args([
            "-P",
            &proxy.addr.port().to_string(),
            "--user=pf_ed",
            "--password=nope",
        ])
        .args(["-e", "SELECT 1"])
        .output()
        .expect("run the mariadb CLI");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("1045"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_statement_leaves_its_connection_in_sync_for_the_others() {
    let db = &shared_pair()[0];
    let backend = db.tcp_addr();
    let proxy = pooled(&backend, 4, Duration::from_millis(300));
    let addr = proxy.addr_string();
    let login = || RawClient::connect_tcp(&addr, BENCH_USER, BENCH_PASS, None, 0, 0);
    let mut gone = login().await.unwrap();
    let mut stays = login().await.unwrap();
    open_connections(&proxy, &backend, 1).await;
    let shared_id = pp_value(&mut stays, "SELECT @@pseudo_thread_id").await;

    // Mid-statement, between two rows of a result.
    sleep_briefly(&mut gone, "pf-gone-mid-statement").await;
    drop(gone);
    let started = Instant::now();
    assert_eq!(
        pp_value(&mut stays, "SELECT @@pseudo_thread_id").await,
        shared_id,
        "the user's one connection is still there, its answer read to the end"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(pp_value(&mut stays, "SELECT 'mine'").await, "mine");

    // Mid-transaction: its statement's answer is read, then the connection is reset (rolled
    // back) before anyone else runs on it.
    stays
        .query_text("CREATE TABLE IF NOT EXISTS test.pf_gone (id INT PRIMARY KEY)")
        .await
        .unwrap();
    stays.query_text("DELETE FROM test.pf_gone").await.unwrap();
    let mut gone = login().await.unwrap();
    open_connections(&proxy, &backend, 1).await;
    let shared_id = pp_value(&mut gone, "SELECT @@pseudo_thread_id").await;
    gone.query_text("BEGIN").await.unwrap();
    gone.query_text("INSERT INTO test.pf_gone VALUES (1)")
        .await
        .unwrap();
    sleep_briefly(&mut gone, "pf-gone-mid-transaction").await;
    drop(gone);
    assert_eq!(
        pp_value(
            &mut stays,
            "SELECT CONCAT(@@pseudo_thread_id, ' ', @@in_transaction, ' ', COUNT(*)) \
             FROM test.pf_gone"
        )
        .await,
        format!("{shared_id} 0 0"),
        "the same connection, no transaction left open, nothing committed"
    );
    assert_eq!(counts(&proxy, &backend).open, 1);
    stays.quit().await.unwrap();
}

/// Starts `SELECT SLEEP(1)` tagged `marker` (shorter than the pool's wait_timeout) and waits
/// until the server runs it.
async fn sleep_briefly(client: &mut RawClient, marker: &str) {
    client
        .send_command(0x03, format!("SELECT SLEEP(1), '{marker}'").as_bytes())
        .await
        .unwrap();
    wait_until(marker, || running_on_shared_backends(marker));
}
