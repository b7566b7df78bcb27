//! Shared test support: real MariaDB servers, a raw protocol client, and mysql-lb in-process.
#![allow(dead_code)]

pub mod daemon;
pub mod mariadb;
pub mod proxy;
pub mod rawclient;

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
