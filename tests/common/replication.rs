//! A real MariaDB GTID replication cluster on loopback: one primary, N replicas, planned
//! switchover and crash promotion the way a DBA does them with GTIDs.
//!
//! Every server runs with the binary log, `--log-slave-updates`, `--gtid-strict-mode=1`, row
//! format and domain 0; server ids are 1 (the initial primary), 2, 3, ... by index, so a GTID
//! `0-<id>-<seq>` names the server that took the write. Replicas run `--read-only=1`, so a user
//! without `READ ONLY ADMIN` ([`APP_USER`]) is refused writes there with error 1290, while
//! `bench` (all privileges) and root are not.
//!
//! Probes the harness sends itself never count as `Com_select`: status reads are `SHOW`
//! statements, the GTID wait is `DO MASTER_GTID_WAIT(..)`, and its `mysql_async` connections
//! are configured so the driver sends no `SELECT @@..` on connect. A test can therefore read
//! [`com_select`] to learn which server served its reads. The replicas are not as quiet: each
//! time a replica's IO thread connects (start, switchover, promotion) it runs three `SELECT`s on
//! its primary, so take a baseline after those return.
//!
//! The `--read-only=1` of the initial replicas is a start option: a promoted replica restarted
//! with [`MariaDb::restart`] comes back read-only, and the initial primary comes back writable.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql_async::prelude::*;

use super::mariadb::{MariaDb, BENCH_PASS, BENCH_USER};

/// An account without `SUPER` / `READ ONLY ADMIN`: `ALL` on the [`APP_SCHEMA`] schema only, for
/// `%` and `localhost` (as `bench` is made). Replicas refuse its writes with error 1290.
pub const APP_USER: &str = "app";
pub const APP_PASS: &str = "app";
/// Created on the primary (and so on every server) by [`Cluster::start`].
pub const APP_SCHEMA: &str = "app";

/// `REPLICATION SLAVE` only; exists on every server (outside the binary log), so any server can
/// be a primary. The same account health.rs's replication uses.
const REPL_USER: &str = "repl";
const REPL_PASS: &str = "repl";

/// Bound of every wait: catch-up, replication threads starting, `MASTER_GTID_WAIT`.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// `ER_OPTION_PREVENTS_STATEMENT`: what a read-only server answers a write without
/// `READ ONLY ADMIN`.
pub const ER_READ_ONLY: u16 = 1290;

/// One primary and its replicas. Index `i` is server id `i + 1`; index 0 is the initial primary.
pub struct Cluster {
    servers: Vec<MariaDb>,
    primary: usize,
}

impl Cluster {
    /// Starts `1 + replicas` servers in parallel, points the replicas at server 0 with
    /// `MASTER_USE_GTID=slave_pos`, waits until each replicates, then creates [`APP_SCHEMA`] and
    /// [`APP_USER`] on the primary (replicated, so identical everywhere) and waits until every
    /// replica has them.
    pub async fn start(name: &str, replicas: usize) -> Cluster {
        let servers: Vec<MariaDb> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..=replicas)
                .map(|i| {
                    s.spawn(move || {
                        let server_id = format!("--server-id={}", i + 1);
                        let mut args = vec![
                            "--log-bin=mysql-bin",
                            "--relay-log=relay-bin",
                            "--log-slave-updates",
                            "--gtid-strict-mode=1",
                            "--binlog-format=ROW",
                            "--gtid-domain-id=0",
                            server_id.as_str(),
                        ];
                        if i > 0 {
                            args.push("--read-only=1");
                        }
                        let db = MariaDb::start_with_args(&format!("{name}-{i}"), &args);
                        // Identical on every server and kept out of the binary log: no server
                        // starts with a GTID of its own, and any server can be a primary.
                        db.root_exec(&format!(
                            "SET sql_log_bin = 0; \
                             CREATE USER '{REPL_USER}'@'%' IDENTIFIED BY '{REPL_PASS}'; \
                             GRANT REPLICATION SLAVE ON *.* TO '{REPL_USER}'@'%';"
                        ));
                        db
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        let cluster = Cluster {
            servers,
            primary: 0,
        };
        for i in 1..=replicas {
            cluster
                .exec(
                    i,
                    &format!(
                        "CHANGE MASTER TO {}, MASTER_USE_GTID=slave_pos",
                        master_def(cluster.primary())
                    ),
                )
                .await;
            cluster.exec(i, "START SLAVE").await;
        }
        for i in 1..=replicas {
            cluster.wait_replicating(i).await;
        }
        let mut setup = vec![format!("CREATE DATABASE {APP_SCHEMA}")];
        for host in ["%", "localhost"] {
            setup.push(format!(
                "CREATE USER '{APP_USER}'@'{host}' IDENTIFIED BY '{APP_PASS}'"
            ));
            setup.push(format!(
                "GRANT ALL PRIVILEGES ON {APP_SCHEMA}.* TO '{APP_USER}'@'{host}'"
            ));
        }
        for sql in &setup {
            cluster.exec(0, sql).await;
        }
        cluster.wait_caught_up().await;
        cluster
    }

    /// Index of the current primary.
    pub fn primary_index(&self) -> usize {
        self.primary
    }

    pub fn primary(&self) -> &MariaDb {
        &self.servers[self.primary]
    }

    /// Indices of the running servers other than the primary, ascending.
    pub fn replica_indices(&self) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|&i| i != self.primary && self.servers[i].is_running())
            .collect()
    }

    /// The running servers other than the primary, by ascending index. (Not a slice: after a
    /// switchover the replicas are not contiguous in [`servers`](Self::servers).)
    pub fn replicas(&self) -> Vec<&MariaDb> {
        self.replica_indices()
            .into_iter()
            .map(|i| &self.servers[i])
            .collect()
    }

    /// Server `i`; 0 is the initial primary. Stable across switchovers.
    pub fn server(&self, i: usize) -> &MariaDb {
        &self.servers[i]
    }

    /// For stopping, killing or restarting one server by hand.
    pub fn server_mut(&mut self, i: usize) -> &mut MariaDb {
        &mut self.servers[i]
    }

    /// Every server, by index, the down ones included.
    pub fn servers(&self) -> &[MariaDb] {
        &self.servers
    }

    /// `127.0.0.1:port` of every server, by index: backends for a proxy config.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(MariaDb::tcp_addr).collect()
    }

    /// Waits (30 s at most) until every running replica has applied everything in the primary's
    /// binary log: for each domain of the primary's `@@gtid_binlog_pos`, the replica's
    /// `@@gtid_slave_pos` (or, for a demoted primary, its own `@@gtid_binlog_pos`) has a sequence
    /// number at least as high. A replica whose SQL thread is stopped or delayed makes this
    /// time out: use [`wait_replica_caught_up`](Self::wait_replica_caught_up) for the others.
    pub async fn wait_caught_up(&self) {
        for i in self.replica_indices() {
            self.wait_replica_caught_up(i).await;
        }
    }

    /// [`wait_caught_up`](Self::wait_caught_up) for replica `i` only.
    pub async fn wait_replica_caught_up(&self, i: usize) {
        let deadline = Instant::now() + WAIT;
        let want = self.variable(self.primary, "gtid_binlog_pos").await;
        loop {
            let slave = self.variable(i, "gtid_slave_pos").await;
            let binlog = self.variable(i, "gtid_binlog_pos").await;
            if covers(&slave, &want) || covers(&binlog, &want) {
                return;
            }
            if Instant::now() > deadline {
                let status = self.slave_status(i).await;
                panic!(
                    "{}: not caught up with {} after {WAIT:?}: primary gtid_binlog_pos={want:?}, \
                     replica gtid_slave_pos={slave:?} gtid_binlog_pos={binlog:?}; {}",
                    self.servers[i].name,
                    self.primary().name,
                    describe_status(status.as_ref())
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (30 s at most) until replica `i` runs both its IO and SQL threads; the panic names
    /// its `Last_IO_Error` / `Last_SQL_Error`.
    pub async fn wait_replicating(&self, i: usize) {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.slave_status(i).await;
            if let Some(s) = &status {
                if field(s, "Slave_IO_Running") == "Yes" && field(s, "Slave_SQL_Running") == "Yes" {
                    return;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "{}: replication not running after {WAIT:?}: {}\nerror log tail:\n{}",
                    self.servers[i].name,
                    describe_status(status.as_ref()),
                    self.servers[i].error_log_tail()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Planned switchover to `new_primary`: the old primary goes `read_only=1` (its client
    /// connections stay), the new one applies all of the old one's binary log
    /// (`MASTER_GTID_WAIT`), stops replicating (`RESET SLAVE ALL`) and goes `read_only=0`; every
    /// other running server — the old primary included, demoted with `MASTER_DEMOTE_TO_SLAVE=1`
    /// — replicates from it with `MASTER_USE_GTID=slave_pos`. Returns once all replicate and have
    /// caught up. `read_only=1` does not wait for a client's open transaction: its later
    /// `COMMIT` on the old primary fails with 1290 (unless the client has `READ ONLY ADMIN`).
    pub async fn switchover(&mut self, new_primary: usize) {
        let old = self.primary;
        assert_ne!(
            old, new_primary,
            "server {new_primary} is already the primary"
        );
        assert!(
            self.servers[new_primary].is_running(),
            "{} is down",
            self.servers[new_primary].name
        );
        self.exec(old, "SET GLOBAL read_only = 1").await;
        let pos = self.variable(old, "gtid_binlog_pos").await;
        self.wait_gtid(new_primary, &pos).await;
        self.promote(new_primary).await;
        for i in self.replica_indices() {
            self.repoint(i, i == old).await;
        }
        for i in self.replica_indices() {
            self.wait_replicating(i).await;
        }
        self.wait_caught_up().await;
    }

    /// Points server `i` at the current primary with GTIDs and starts it replicating;
    /// `demote`: it was the primary, its own writes are in its binlog but not in its (empty or
    /// stale) gtid_slave_pos, which `MASTER_DEMOTE_TO_SLAVE` merges in.
    async fn repoint(&self, i: usize, demote: bool) {
        let demote = if demote {
            ", MASTER_DEMOTE_TO_SLAVE=1"
        } else {
            self.exec(i, "STOP SLAVE").await;
            ""
        };
        self.exec(
            i,
            &format!(
                "CHANGE MASTER TO {}, MASTER_USE_GTID=slave_pos{demote}",
                master_def(self.primary())
            ),
        )
        .await;
        self.exec(i, "START SLAVE").await;
    }

    /// Crash failover: SIGKILL the primary (it stays down), stop every replica's IO thread,
    /// promote the replica that received the most of the old primary's binary log
    /// (`prefer` when none received more: a failover tool does the same, or a replica ahead of
    /// the new primary could not follow it in strict mode), let it apply what it received,
    /// promote it (`STOP SLAVE; RESET SLAVE ALL; read_only=0`) and repoint the other running
    /// replicas to it. Returns the index of the new primary.
    pub async fn kill_primary_and_promote(&mut self, prefer: usize) -> usize {
        let old = self.primary;
        assert_ne!(old, prefer, "server {prefer} is already the primary");
        self.servers[old].kill9();
        let mut received = Vec::new();
        for i in self.replica_indices() {
            self.exec(i, "STOP SLAVE IO_THREAD").await;
            let status = self.slave_status(i).await;
            let pos = status
                .as_ref()
                .map_or(String::new(), |s| field(s, "Gtid_IO_Pos").to_owned());
            let applying = status
                .as_ref()
                .is_some_and(|s| field(s, "Slave_SQL_Running") == "Yes");
            received.push((i, pos, applying));
        }
        let covers_all = |pos: &str| received.iter().all(|(_, other, _)| covers(pos, other));
        let new_primary = received
            .iter()
            .find(|(i, pos, _)| *i == prefer && covers_all(pos))
            .or_else(|| received.iter().find(|(_, pos, _)| covers_all(pos)))
            .map_or(prefer, |(i, _, _)| *i);
        if let Some((_, pos, true)) = received.iter().find(|(i, _, _)| *i == new_primary) {
            let pos = pos.clone();
            self.wait_gtid(new_primary, &pos).await;
        }
        self.promote(new_primary).await;
        for i in self.replica_indices() {
            self.repoint(i, false).await;
        }
        for i in self.replica_indices() {
            self.wait_replicating(i).await;
        }
        self.wait_caught_up().await;
        new_primary
    }

    /// Replica `i` applies events `seconds` after the primary committed them (0 undoes it).
    /// MariaDB refuses `MASTER_DELAY` while either thread runs (error 1198), so this stops and
    /// restarts both: a stopped SQL thread runs again afterwards.
    pub async fn delay_replica(&self, i: usize, seconds: u32) {
        self.exec(i, "STOP SLAVE").await;
        self.exec(i, &format!("CHANGE MASTER TO MASTER_DELAY={seconds}"))
            .await;
        self.exec(i, "START SLAVE").await;
        self.wait_replicating(i).await;
    }

    /// Replica `i` keeps receiving but stops applying: its data freezes until
    /// [`start_sql_thread`](Self::start_sql_thread).
    pub async fn stop_sql_thread(&self, i: usize) {
        self.exec(i, "STOP SLAVE SQL_THREAD").await;
    }

    pub async fn start_sql_thread(&self, i: usize) {
        self.exec(i, "START SLAVE SQL_THREAD").await;
    }

    /// `SHOW SLAVE STATUS` of server `i` by column name; `None` when it replicates from nothing.
    pub async fn slave_status(&self, i: usize) -> Option<BTreeMap<String, String>> {
        let mut conn = self.connect(i).await;
        let row: Option<mysql_async::Row> = conn
            .query_first("SHOW SLAVE STATUS")
            .await
            .unwrap_or_else(|e| panic!("{}: SHOW SLAVE STATUS: {e}", self.servers[i].name));
        drop(conn.disconnect().await);
        row.map(|row| {
            let columns = row.columns();
            let values = row.unwrap();
            columns
                .iter()
                .zip(values)
                .map(|(c, v)| {
                    let v: Option<String> = mysql_async::from_value_opt(v).unwrap_or(None);
                    (c.name_str().into_owned(), v.unwrap_or_default())
                })
                .collect()
        })
    }

    /// Runs one statement on server `i` as `bench` (all privileges), without blocking the
    /// runtime; panics with the server's error.
    pub async fn exec(&self, i: usize, sql: &str) {
        let mut conn = self.connect(i).await;
        conn.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{}: {sql}: {e}", self.servers[i].name));
        drop(conn.disconnect().await);
    }

    /// A global variable of server `i`, read with `SHOW` (not counted as `Com_select`).
    async fn variable(&self, i: usize, name: &str) -> String {
        let mut conn = self.connect(i).await;
        let row: Option<(String, String)> = conn
            .query_first(format!("SHOW GLOBAL VARIABLES LIKE '{name}'"))
            .await
            .unwrap_or_else(|e| panic!("{}: reading {name}: {e}", self.servers[i].name));
        drop(conn.disconnect().await);
        row.map(|(_, v)| v)
            .unwrap_or_else(|| panic!("{}: no variable {name}", self.servers[i].name))
    }

    /// Blocks (30 s at most) until server `i` has applied `pos`, then checks that it has.
    async fn wait_gtid(&self, i: usize, pos: &str) {
        let secs = WAIT.as_secs();
        // DO, not SELECT: the wait must not count as a Com_select; the check below tells a
        // timeout (-1) from success.
        self.exec(i, &format!("DO MASTER_GTID_WAIT('{pos}', {secs})"))
            .await;
        let applied = self.variable(i, "gtid_slave_pos").await;
        let binlog = self.variable(i, "gtid_binlog_pos").await;
        if !(covers(&applied, pos) || covers(&binlog, pos)) {
            let status = self.slave_status(i).await;
            panic!(
                "{}: has not applied {pos:?} within {WAIT:?} (gtid_slave_pos={applied:?}); {}",
                self.servers[i].name,
                describe_status(status.as_ref())
            );
        }
    }

    /// Server `i` stops replicating and takes writes.
    async fn promote(&mut self, i: usize) {
        self.exec(i, "STOP SLAVE").await;
        self.exec(i, "RESET SLAVE ALL").await;
        self.exec(i, "SET GLOBAL read_only = 0").await;
        self.primary = i;
    }

    async fn connect(&self, i: usize) -> mysql_async::Conn {
        let db = &self.servers[i];
        mysql_async::Conn::new(admin_opts(db))
            .await
            .unwrap_or_else(|e| panic!("{}: connect as {BENCH_USER}: {e}", db.name))
    }
}

/// `bench` over TCP, with the settings mysql_async would otherwise read with a `SELECT` on
/// connect given up front: the harness's own connections add nothing to `Com_select`.
fn admin_opts(db: &MariaDb) -> mysql_async::Opts {
    mysql_async::OptsBuilder::from_opts(db.opts(BENCH_USER, BENCH_PASS))
        .max_allowed_packet(Some(64 << 20))
        .wait_timeout(Some(28_800))
        .into()
}

/// The `CHANGE MASTER TO` connection clauses for replicating from `primary`.
fn master_def(primary: &MariaDb) -> String {
    format!(
        "MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='{REPL_USER}', \
         MASTER_PASSWORD='{REPL_PASS}', MASTER_CONNECT_RETRY=1",
        primary.port
    )
}

fn field<'a>(status: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    status.get(name).map(String::as_str).unwrap_or("")
}

fn describe_status(status: Option<&BTreeMap<String, String>>) -> String {
    let Some(s) = status else {
        return "not configured as a replica (no SHOW SLAVE STATUS row)".to_owned();
    };
    format!(
        "IO={} SQL={} Last_IO_Error={:?} Last_SQL_Error={:?} Gtid_IO_Pos={:?} state={:?}",
        field(s, "Slave_IO_Running"),
        field(s, "Slave_SQL_Running"),
        field(s, "Last_IO_Error"),
        field(s, "Last_SQL_Error"),
        field(s, "Gtid_IO_Pos"),
        field(s, "Slave_SQL_Running_State"),
    )
}

/// A GTID position (`0-1-5,1-2-7`) as domain -> sequence number.
pub fn parse_gtid_pos(pos: &str) -> BTreeMap<u32, u64> {
    pos.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| {
            let (domain, _server, seq) =
                parse_gtid(g).unwrap_or_else(|| panic!("bad GTID {g:?} in {pos:?}"));
            (domain, seq)
        })
        .collect()
}

/// `domain-server-seq` as its three numbers.
pub fn parse_gtid(gtid: &str) -> Option<(u32, u32, u64)> {
    let mut parts = gtid.split('-');
    let domain = parts.next()?.parse().ok()?;
    let server = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((domain, server, seq))
}

/// True when position `have` includes everything in `want`: per domain, by sequence number.
pub fn covers(have: &str, want: &str) -> bool {
    let have = parse_gtid_pos(have);
    parse_gtid_pos(want)
        .iter()
        .all(|(domain, seq)| have.get(domain).is_some_and(|h| h >= seq))
}

fn global_variable(db: &MariaDb, name: &str) -> String {
    let out = db.root_query(&format!("SHOW GLOBAL VARIABLES LIKE '{name}'"));
    out.trim_end_matches('\n')
        .split_once('\t')
        .map(|(_, v)| v.to_owned())
        .unwrap_or_else(|| panic!("{}: no variable {name}: {out:?}", db.name))
}

/// `@@gtid_binlog_pos`: the last GTID per domain in this server's binary log.
pub fn gtid_binlog_pos(db: &MariaDb) -> String {
    global_variable(db, "gtid_binlog_pos")
}

/// `@@gtid_current_pos`.
pub fn gtid_current_pos(db: &MariaDb) -> String {
    global_variable(db, "gtid_current_pos")
}

/// `@@gtid_slave_pos`: the last GTID per domain this server applied as a replica.
pub fn gtid_slave_pos(db: &MariaDb) -> String {
    global_variable(db, "gtid_slave_pos")
}

/// Global `Com_select`: SELECT statements the server ran (reads with `SHOW`, so not itself one).
pub fn com_select(db: &MariaDb) -> u64 {
    let out = db.root_query("SHOW GLOBAL STATUS LIKE 'Com_select'");
    out.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}: bad Com_select: {out:?}", db.name))
}

/// The GTIDs in this server's binary logs (all of them, oldest first) that carry its own server
/// id: transactions it took as a primary, or a write that landed on a replica.
pub fn own_gtids(db: &MariaDb) -> Vec<String> {
    let server_id: u32 = global_variable(db, "server_id")
        .parse()
        .unwrap_or_else(|e| panic!("{}: bad server_id: {e}", db.name));
    let logs = db.root_query("SHOW BINARY LOGS");
    let mut own = Vec::new();
    for log in logs.lines().filter_map(|l| l.split('\t').next()) {
        let events = db.root_query(&format!("SHOW BINLOG EVENTS IN '{log}'"));
        for event in events.lines() {
            // Log_name, Pos, Event_type, Server_id, End_log_pos, Info.
            let cols: Vec<&str> = event.split('\t').collect();
            if cols.get(2) != Some(&"Gtid") {
                continue;
            }
            // Info: "BEGIN GTID 0-2-17", "GTID 0-2-17" (DDL), maybe with " cid=..".
            let gtid = cols.get(5).and_then(|info| {
                info.split_whitespace()
                    .find_map(|w| parse_gtid(w).map(|_| w))
            });
            match gtid {
                Some(g) if parse_gtid(g).is_some_and(|(_, s, _)| s == server_id) => {
                    own.push(g.to_owned())
                }
                Some(_) => {}
                None => panic!("{}: Gtid event without a GTID: {event:?}", db.name),
            }
        }
    }
    own
}
