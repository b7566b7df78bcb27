//! Command-phase relaying through mysql-lb against real MariaDB servers, driven by mysql_async.

mod common;

use common::mariadb::shared_pair;
use common::proxy::TestProxy;
use mysql_async::prelude::*;

fn pair_proxy() -> TestProxy {
    let pair = shared_pair();
    TestProxy::start(&[pair[0].tcp_addr(), pair[1].tcp_addr()])
}

#[tokio::test]
async fn round_robin_spreads_twenty_connections_evenly() {
    let pair = shared_pair();
    let proxy = pair_proxy();
    let mut per_port = std::collections::HashMap::<u16, usize>::new();
    for _ in 0..20 {
        let mut conn = mysql_async::Conn::new(proxy.opts("bench", "bench")).await.unwrap();
        let port: u16 = conn.query_first("SELECT @@port").await.unwrap().unwrap();
        *per_port.entry(port).or_default() += 1;
        conn.disconnect().await.unwrap();
    }
    for db in pair.iter() {
        let n = per_port.get(&db.port).copied().unwrap_or(0);
        assert!((9..=11).contains(&n), "backend {} got {n} of 20: {per_port:?}", db.port);
    }
}
