//! KILL through a balancer: proxy-unique connection ids, and KILLs mapped to the session meant.
//!
//! `KILL QUERY n` (the CLI's Ctrl-C, Connector/J query timeouts) arrives on a *new* connection,
//! which the balancer may send to another backend, where thread `n` is a stranger. So each client
//! is greeted with a proxy-unique id from a range no server hands out, mapped to (backend, thread
//! id); a KILL naming such an id is rewritten to the backend's thread id when the killing session
//! is on the same backend, and answered with an ERR otherwise (by turning it into a `SIGNAL` the
//! backend answers in sequence). Ids below the range are real thread ids (from SHOW PROCESSLIST)
//! and pass unchanged. The parsing here is sans-IO; the session owns the registry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::balancer::Backend;
use crate::protocol::codec::header;
#[cfg(test)]
use crate::protocol::response::may_be_kill;
use crate::protocol::response::{cmd, is_sql_space};

/// Proxy ids live in [BASE, u32::MAX]: servers count thread ids up from 1 and never get there.
pub const ID_BASE: u32 = 0xC000_0000;

/// The session a proxy id stands for.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: Arc<Backend>,
    pub thread_id: u32,
}

/// Live sessions by proxy id.
#[derive(Debug, Default)]
pub struct Registry {
    next: AtomicU32,
    sessions: Mutex<HashMap<u32, Target>>,
}

impl Registry {
    /// A fresh proxy id (wraps within the range after a billion sessions).
    pub fn allocate(&self) -> u32 {
        ID_BASE + (self.next.fetch_add(1, Relaxed) % (u32::MAX - ID_BASE)) + 1
    }

    /// Makes the session findable by `id` until the returned guard is dropped.
    #[must_use = "the session is unregistered when the guard drops"]
    pub fn register(&self, id: u32, target: Target) -> Registration<'_> {
        if let Ok(mut s) = self.sessions.lock() {
            s.insert(id, target);
        }
        Registration { registry: self, id }
    }

    fn unregister(&self, id: u32) {
        if let Ok(mut s) = self.sessions.lock() {
            s.remove(&id);
        }
    }

    pub fn lookup(&self, id: u32) -> Option<Target> {
        self.sessions.lock().ok()?.get(&id).cloned()
    }
}

/// Keeps a session in the registry for as long as it lives.
#[derive(Debug)]
pub struct Registration<'a> {
    registry: &'a Registry,
    id: u32,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.registry.unregister(self.id);
    }
}

/// A KILL statement or COM_PROCESS_KILL, as parsed from a command packet's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRequest {
    /// The statement up to the id (e.g. `KILL QUERY `), reused when rewriting; empty for
    /// COM_PROCESS_KILL.
    pub prefix: String,
    pub id: u64,
}

/// Parses `KILL [HARD|SOFT] [CONNECTION|QUERY [ID]] <n>` (optionally `;`-terminated) or
/// COM_PROCESS_KILL. Anything else (KILL USER, expressions) is None and passes untouched.
pub fn parse(payload: &[u8]) -> Option<KillRequest> {
    let (&command, body) = payload.split_first()?;
    if command == cmd::PROCESS_KILL {
        let id = u32::from_le_bytes(body.get(..4)?.try_into().ok()?);
        return Some(KillRequest {
            prefix: String::new(),
            id: u64::from(id),
        });
    }
    if command != cmd::QUERY {
        return None;
    }
    let space = |c: char| u8::try_from(c).is_ok_and(is_sql_space);
    let sql = std::str::from_utf8(body).ok()?.trim_matches(space);
    let sql = sql.strip_suffix(';').unwrap_or(sql).trim_end_matches(space);
    let mut words: Vec<&str> = sql.split(space).filter(|w| !w.is_empty()).collect();
    let id: u64 = words.pop()?.parse().ok()?;
    let mut rest = words.iter().map(|w| w.to_ascii_uppercase());
    if rest.next().as_deref() != Some("KILL") {
        return None;
    }
    let allowed = ["HARD", "SOFT", "CONNECTION", "QUERY", "ID"];
    if !rest.all(|w| allowed.contains(&w.as_str())) {
        return None;
    }
    Some(KillRequest {
        prefix: words.join(" ") + " ",
        id,
    })
}

/// What to send the backend instead of the client's KILL packet, if anything changes.
pub fn rewrite(
    request: &KillRequest,
    registry: &Registry,
    own_backend: &Arc<Backend>,
) -> Option<Vec<u8>> {
    let proxy_id = u32::try_from(request.id).ok().filter(|id| *id > ID_BASE)?;
    let sql = match registry.lookup(proxy_id) {
        Some(t) if Arc::ptr_eq(&t.backend, own_backend) => {
            format!("{}{}", kill_statement(&request.prefix), t.thread_id)
        }
        Some(t) => signal(
            1095,
            &format!(
                "mysql-lb: connection {proxy_id} is on backend {} and this session on {}; \
                 KILL refused, nothing was killed (run it through a session on the same backend)",
                t.backend.name, own_backend.name
            ),
        ),
        None => signal(1094, &format!("Unknown thread id: {proxy_id}")),
    };
    let mut payload = Vec::with_capacity(1 + sql.len());
    payload.push(cmd::QUERY);
    payload.extend_from_slice(sql.as_bytes());
    let mut packet = header(payload.len(), 0).to_vec();
    packet.extend_from_slice(&payload);
    Some(packet)
}

/// COM_PROCESS_KILL kills the connection, as `KILL` does.
fn kill_statement(prefix: &str) -> &str {
    if prefix.is_empty() {
        "KILL "
    } else {
        prefix
    }
}

/// A statement the backend answers with exactly this error, in sequence with everything else.
fn signal(code: u16, message: &str) -> String {
    let escaped = message.replace('\\', "\\\\").replace('\'', "''");
    format!("SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = {code}, MESSAGE_TEXT = '{escaped}'")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::BackendSet;
    use crate::config::{BackendAddr, BackendConfig};
    use crate::metrics::Metrics;
    use std::time::Duration;

    fn query(sql: &str) -> Vec<u8> {
        let mut p = vec![cmd::QUERY];
        p.extend_from_slice(sql.as_bytes());
        p
    }

    #[test]
    fn recognises_kill_statements() {
        assert!(may_be_kill(&query("  kill query 5")));
        assert!(may_be_kill(&[cmd::PROCESS_KILL, 1, 0, 0, 0]));
        assert!(!may_be_kill(&query("SELECT 1")));
        assert!(!may_be_kill(&query("kil")));
        let k = parse(&query("KILL QUERY 3221225473;")).unwrap();
        assert_eq!(k.id, 3221225473);
        assert_eq!(k.prefix, "KILL QUERY ");
        assert_eq!(parse(&query("kill hard connection 7")).unwrap().id, 7);
        assert_eq!(
            parse(&query("KILL QUERY ID 9")).unwrap().prefix,
            "KILL QUERY ID "
        );
        assert_eq!(parse(&[cmd::PROCESS_KILL, 2, 0, 0, 0]).unwrap().id, 2);
        assert_eq!(parse(&query("KILL USER bob")), None);
        assert_eq!(parse(&query("KILL QUERY 1+1")), None);
        assert_eq!(parse(&query("KILLALL 5")), None);
        assert_eq!(parse(&[cmd::PROCESS_KILL, 2]), None);
    }

    fn two_backends() -> BackendSet {
        let configs: Vec<_> = ["a", "b"]
            .iter()
            .map(|n| BackendConfig {
                name: (*n).into(),
                address: BackendAddr::Unix(format!("/tmp/{n}").into()),
                weight: 1,
                kind: Default::default(),
            })
            .collect();
        BackendSet::new(&configs, Duration::from_secs(1), false, &Metrics::new())
    }

    fn sql_of(packet: &[u8]) -> String {
        String::from_utf8(packet[5..].to_vec()).unwrap()
    }

    #[test]
    fn maps_to_the_thread_on_the_same_backend_and_refuses_across() {
        let set = two_backends();
        let (a, b) = (&set.backends()[0], &set.backends()[1]);
        let reg = Registry::default();
        let id = reg.allocate();
        assert!(id > ID_BASE);
        let registration = reg.register(
            id,
            Target {
                backend: Arc::clone(a),
                thread_id: 42,
            },
        );
        let req = parse(&query(&format!("KILL QUERY {id}"))).unwrap();
        let same = rewrite(&req, &reg, a).unwrap();
        assert_eq!(sql_of(&same), "KILL QUERY 42");
        assert_eq!(same[3], 0, "a command packet");
        let across = sql_of(&rewrite(&req, &reg, b).unwrap());
        assert!(across.starts_with("SIGNAL SQLSTATE"), "{across}");
        assert!(across.contains("1095") && across.contains("nothing was killed"));
        let binary = parse(&[cmd::PROCESS_KILL, 0, 0, 0, 0])
            .map(|mut r| {
                r.id = u64::from(id);
                r
            })
            .unwrap();
        assert_eq!(sql_of(&rewrite(&binary, &reg, a).unwrap()), "KILL 42");
        drop(registration);
        let gone = sql_of(&rewrite(&req, &reg, a).unwrap());
        assert!(
            gone.contains("1094") && gone.contains("Unknown thread id"),
            "{gone}"
        );
        // Real thread ids (below the range) pass untouched.
        assert_eq!(rewrite(&parse(&query("KILL 17")).unwrap(), &reg, a), None);
    }
}
