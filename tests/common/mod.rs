//! Shared test support: real MariaDB servers, a raw protocol client, and mysql-lb in-process.
#![allow(dead_code)]

pub mod bulk;
pub mod cdp;
pub mod certs;
pub mod daemon;
pub mod faultgate;
pub mod kubekit;
pub mod mariadb;
pub mod netns;
pub mod png;
pub mod pooling;
pub mod pp;
pub mod proxy;
pub mod rawclient;
pub mod replication;
pub mod scripts;
pub mod steps;
pub mod sysbench;
pub mod tls_server;

/// Polls `cond` every 20 ms until it holds; panics naming `what` after 20 s.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// True while a statement containing `marker` runs on one of the shared test backends.
pub fn running_on_shared_backends(marker: &str) -> bool {
    mariadb::shared_pair().iter().any(|db| {
        db.root_query("SELECT INFO FROM information_schema.PROCESSLIST")
            .contains(marker)
    })
}

/// Starts `SELECT SLEEP(30)` tagged with `marker` on `victim` (a session on a shared backend)
/// and waits until the server runs it.
pub async fn start_sleeping(victim: &mut rawclient::RawClient, marker: &str) {
    victim
        .send_command(0x03, format!("SELECT SLEEP(30), '{marker}'").as_bytes())
        .await
        .expect("send the victim's query");
    wait_until(&format!("{marker} to run"), || {
        running_on_shared_backends(marker)
    });
}

/// Accounts for KILL tests, on `db`: `app` and `eve` (no privilege beyond SELECT: they may kill
/// only their own user's threads) and `lbkill` (only CONNECTION ADMIN: the proxy's `kill:`
/// account). Passwords equal the names.
pub fn create_kill_accounts(db: &mariadb::MariaDb) {
    let mut sql = String::new();
    for host in ["%", "localhost"] {
        for user in ["app", "eve", "lbkill"] {
            sql.push_str(&format!(
                "CREATE USER IF NOT EXISTS '{user}'@'{host}' IDENTIFIED BY '{user}'; "
            ));
        }
        sql.push_str(&format!(
            "GRANT SELECT ON *.* TO 'app'@'{host}'; GRANT SELECT ON *.* TO 'eve'@'{host}'; \
             GRANT CONNECTION ADMIN ON *.* TO 'lbkill'@'{host}'; "
        ));
    }
    db.root_exec(&sql);
}

/// The `kill:` account [`create_kill_accounts`] makes.
pub fn kill_account() -> mysql_lb::config::KillConfig {
    mysql_lb::config::KillConfig {
        user: Some("lbkill".into()),
        password: Some(mysql_lb::config::Secret::new("lbkill")),
        password_file: None,
    }
}
