//! The GTID replication cluster harness (tests/common/replication.rs) against itself: writes
//! replicate, replicas refuse unprivileged writes, no write lands on a replica, and a planned
//! switchover, a crash promotion and a lagging replica behave as a DBA expects.

mod common;

use std::time::{Duration, Instant};

use common::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};
use common::replication::{
    com_select, gtid_binlog_pos, gtid_current_pos, gtid_slave_pos, own_gtids, parse_gtid, Cluster,
    APP_PASS, APP_SCHEMA, APP_USER, ER_READ_ONLY,
};
use mysql_async::prelude::*;

async fn connect(db: &MariaDb, user: &str, pass: &str) -> mysql_async::Conn {
    let opts = mysql_async::OptsBuilder::from_opts(db.opts(user, pass)).db_name(Some(APP_SCHEMA));
    mysql_async::Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("{}: connect as {user}: {e}", db.name))
}

async fn app(db: &MariaDb) -> mysql_async::Conn {
    connect(db, APP_USER, APP_PASS).await
}

async fn exec(db: &MariaDb, sql: &str) {
    let mut conn = app(db).await;
    conn.query_drop(sql)
        .await
        .unwrap_or_else(|e| panic!("{}: {sql}: {e}", db.name));
    conn.disconnect().await.expect("disconnect");
}

/// `v` of row `id` in `app.t` on `db`, read as [`APP_USER`].
async fn row(db: &MariaDb, id: u32) -> Option<String> {
    let mut conn = app(db).await;
    let v = conn
        .query_first(format!("SELECT v FROM t WHERE id = {id}"))
        .await
        .unwrap_or_else(|e| panic!("{}: reading row {id}: {e}", db.name));
    conn.disconnect().await.expect("disconnect");
    v
}

async fn read_only(db: &MariaDb) -> u8 {
    let mut conn = app(db).await;
    let v: Option<u8> = conn
        .query_first("SELECT @@read_only")
        .await
        .expect("read_only");
    conn.disconnect().await.expect("disconnect");
    v.expect("a row")
}

/// The server error code a write by `user` on `db` gets (`None`: it went through).
async fn write_error(db: &MariaDb, user: &str, pass: &str, sql: &str) -> Option<u16> {
    let mut conn = connect(db, user, pass).await;
    let result = conn.query_drop(sql).await;
    conn.disconnect().await.expect("disconnect");
    match result {
        Ok(()) => None,
        Err(mysql_async::Error::Server(e)) => Some(e.code),
        Err(e) => panic!("{}: {sql}: {e}", db.name),
    }
}

async fn start(name: &str) -> Cluster {
    let t = Instant::now();
    let cluster = Cluster::start(name, 2).await;
    eprintln!("{name}: 3-server cluster started in {:?}", t.elapsed());
    exec(
        cluster.primary(),
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(32))",
    )
    .await;
    cluster
}

#[tokio::test]
async fn primary_writes_reach_every_replica_and_replicas_refuse_app_writes() {
    let t = Instant::now();
    let cluster = start("rh-basic").await;
    assert_eq!(cluster.primary_index(), 0);
    assert_eq!(cluster.replica_indices(), vec![1, 2]);

    exec(
        cluster.primary(),
        "INSERT INTO t VALUES (1, 'from-primary')",
    )
    .await;
    cluster.wait_caught_up().await;
    for replica in cluster.replicas() {
        assert_eq!(row(replica, 1).await.as_deref(), Some("from-primary"));
        assert_eq!(read_only(replica).await, 1, "{}", replica.name);
        // gtid positions compare per domain: the replica applied what the primary logged.
        assert_eq!(
            gtid_slave_pos(replica),
            gtid_binlog_pos(cluster.primary()),
            "{}",
            replica.name
        );
    }
    assert_eq!(read_only(cluster.primary()).await, 0);

    for replica in cluster.replicas() {
        let refused = write_error(replica, APP_USER, APP_PASS, "INSERT INTO t VALUES (2, 'x')");
        assert_eq!(refused.await, Some(ER_READ_ONLY), "{}", replica.name);
        // ALL PRIVILEGES ON *.* includes READ ONLY ADMIN (10.11): read_only does not stop it.
        // Rolled back, so nothing reaches the replica's binary log.
        let bypass = write_error(
            replica,
            BENCH_USER,
            BENCH_PASS,
            "BEGIN; INSERT INTO t VALUES (2, 'x'); ROLLBACK",
        );
        assert_eq!(bypass.await, None, "{}", replica.name);
    }

    let primary_gtids = own_gtids(cluster.primary());
    assert!(!primary_gtids.is_empty());
    assert!(
        primary_gtids
            .iter()
            .all(|g| parse_gtid(g).is_some_and(|(d, s, _)| d == 0 && s == 1)),
        "{primary_gtids:?}"
    );
    for replica in cluster.replicas() {
        assert_eq!(own_gtids(replica), Vec::<String>::new(), "{}", replica.name);
    }

    // Com_select counts the test's reads only: one SELECT is one, and none of the harness's
    // probes (catch-up wait, status, GTID positions, binlog scan) counts.
    let replica = cluster.server(1);
    let mut conn = app(replica).await;
    let before = com_select(replica);
    let _: Option<String> = conn
        .query_first("SELECT v FROM t WHERE id = 1")
        .await
        .expect("select");
    assert_eq!(com_select(replica) - before, 1);
    cluster.wait_caught_up().await;
    assert!(cluster.slave_status(1).await.is_some());
    gtid_current_pos(replica);
    own_gtids(replica);
    assert_eq!(com_select(replica) - before, 1);
    conn.disconnect().await.expect("disconnect");
    eprintln!("rh-basic: test took {:?}", t.elapsed());
}

#[tokio::test]
async fn switchover_moves_writes_and_replication_to_the_new_primary() {
    let t = Instant::now();
    let mut cluster = start("rh-switch").await;
    exec(cluster.primary(), "INSERT INTO t VALUES (1, 'on-0')").await;
    cluster.wait_caught_up().await;
    let own_0 = own_gtids(cluster.server(0));

    let took = Instant::now();
    cluster.switchover(1).await;
    eprintln!("rh-switch: switchover 0 -> 1 took {:?}", took.elapsed());
    assert_eq!(cluster.primary_index(), 1);
    assert_eq!(cluster.replica_indices(), vec![0, 2]);
    assert_eq!(read_only(cluster.server(1)).await, 0);
    assert!(cluster.slave_status(1).await.is_none());
    for i in [0, 2] {
        assert_eq!(read_only(cluster.server(i)).await, 1, "server {i}");
        let status = cluster.slave_status(i).await.expect("a replica");
        assert_eq!(status["Master_Port"], cluster.server(1).port.to_string());
        assert_eq!(status["Slave_IO_Running"], "Yes", "server {i}");
        assert_eq!(status["Slave_SQL_Running"], "Yes", "server {i}");
        assert_eq!(status["Using_Gtid"], "Slave_Pos", "server {i}");
    }

    exec(cluster.server(1), "INSERT INTO t VALUES (2, 'on-1')").await;
    cluster.wait_caught_up().await;
    for i in [0, 2] {
        assert_eq!(row(cluster.server(i), 2).await.as_deref(), Some("on-1"));
        let refused = write_error(
            cluster.server(i),
            APP_USER,
            APP_PASS,
            "INSERT INTO t VALUES (3, 'x')",
        );
        assert_eq!(refused.await, Some(ER_READ_ONLY), "server {i}");
    }
    assert_eq!(own_gtids(cluster.server(0)), own_0);
    let own_1 = own_gtids(cluster.server(1));
    assert!(!own_1.is_empty());
    assert!(own_1.iter().all(|g| g.starts_with("0-2-")), "{own_1:?}");
    assert_eq!(own_gtids(cluster.server(2)), Vec::<String>::new());

    // And back: server 1 now has a gtid_slave_pos left from its replica days.
    let took = Instant::now();
    cluster.switchover(0).await;
    eprintln!("rh-switch: switchover 1 -> 0 took {:?}", took.elapsed());
    assert_eq!(cluster.primary_index(), 0);
    exec(cluster.server(0), "INSERT INTO t VALUES (4, 'on-0-again')").await;
    cluster.wait_caught_up().await;
    for i in [1, 2] {
        assert_eq!(
            row(cluster.server(i), 4).await.as_deref(),
            Some("on-0-again")
        );
        assert_eq!(read_only(cluster.server(i)).await, 1, "server {i}");
    }
    assert_eq!(own_gtids(cluster.server(1)), own_1);
    assert_eq!(own_gtids(cluster.server(2)), Vec::<String>::new());
    eprintln!("rh-switch: test took {:?}", t.elapsed());
}

#[tokio::test]
async fn lagging_replicas_catch_up_and_a_killed_primary_is_replaced() {
    let t = Instant::now();
    let mut cluster = start("rh-kill").await;
    cluster.wait_caught_up().await;

    cluster.stop_sql_thread(2).await;
    exec(cluster.primary(), "INSERT INTO t VALUES (1, 'burst')").await;
    cluster.wait_replica_caught_up(1).await;
    assert_eq!(row(cluster.server(1), 1).await.as_deref(), Some("burst"));
    assert_eq!(row(cluster.server(2), 1).await, None);
    cluster.start_sql_thread(2).await;
    cluster.wait_caught_up().await;
    assert_eq!(row(cluster.server(2), 1).await.as_deref(), Some("burst"));

    cluster.delay_replica(2, 2).await;
    let written = Instant::now();
    exec(cluster.primary(), "INSERT INTO t VALUES (2, 'delayed')").await;
    cluster.wait_replica_caught_up(1).await;
    assert_eq!(row(cluster.server(2), 2).await, None);
    cluster.wait_replica_caught_up(2).await;
    let lag = written.elapsed();
    assert!(lag >= Duration::from_secs(1), "applied after {lag:?}");
    eprintln!("rh-kill: a 2 s delayed replica applied after {lag:?}");
    cluster.delay_replica(2, 0).await;

    let took = Instant::now();
    // Both replicas received everything: the one asked for is promoted.
    assert_eq!(cluster.kill_primary_and_promote(1).await, 1);
    eprintln!("rh-kill: kill and promote took {:?}", took.elapsed());
    assert!(!cluster.server(0).is_running());
    assert_eq!(cluster.primary_index(), 1);
    assert_eq!(cluster.replica_indices(), vec![2]);
    assert_eq!(read_only(cluster.server(1)).await, 0);
    let status = cluster.slave_status(2).await.expect("a replica");
    assert_eq!(status["Master_Port"], cluster.server(1).port.to_string());
    exec(cluster.server(1), "INSERT INTO t VALUES (3, 'after-crash')").await;
    cluster.wait_caught_up().await;
    assert_eq!(
        row(cluster.server(2), 3).await.as_deref(),
        Some("after-crash")
    );
    assert_eq!(own_gtids(cluster.server(2)), Vec::<String>::new());
    eprintln!("rh-kill: test took {:?}", t.elapsed());
}
