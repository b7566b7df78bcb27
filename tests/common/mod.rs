//! Shared test support: real MariaDB servers, a raw protocol client, and mysql-lb in-process.
#![allow(dead_code)]

pub mod daemon;
pub mod mariadb;
pub mod proxy;
pub mod rawclient;
