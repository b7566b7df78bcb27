//! Shared test support: real MariaDB servers, a raw protocol client, and mysql-lb in-process.
#![allow(dead_code)]

pub mod bulk;
pub mod certs;
pub mod daemon;
pub mod faultgate;
pub mod mariadb;
pub mod netns;
pub mod pp;
pub mod proxy;
pub mod rawclient;
pub mod scripts;
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
