//! KILL through a balancer: proxy-unique connection ids, and KILLs mapped to the session meant.
//!
//! `KILL QUERY n` (the CLI's Ctrl-C, Connector/J's `Statement.cancel()` and query timeouts)
//! arrives on a *new* connection, which the balancer may send to another backend, where thread
//! `n` is a stranger. So each client is greeted with a proxy-unique id, mapped to (backend,
//! thread id); a KILL naming such an id is rewritten to the backend's thread id when the killing
//! session is on the same backend, and answered with an ERR otherwise (by turning it into a
//! `SIGNAL` the backend answers in sequence). The parsing here is sans-IO; the session owns the
//! registry.
//!
//! Id layout: `0b011` in the top bits, then 8 instance bits, then a 21-bit counter:
//! `0x6000_0000 | instance << 21 | counter`, so every id lies in [`ID_BASE`, 2^31). Below 2^31
//! because clients keep the id in a signed 32-bit int (Connector/J, and with it every JVM
//! client): an id past it comes back negative in their KILL (`KILL QUERY -1073741823`). Servers
//! count their thread ids up from 1 and do not get near 1.6 billion connections in practice, so
//! smaller ids are the servers' own (from SHOW PROCESSLIST or `CONNECTION_ID()`) and pass
//! unchanged. The instance bits (0 until several proxies share a pool of servers) keep
//! proxies' ids apart; the counter wraps and skips ids still in use, which the 2 million ids of
//! an instance leave plenty of room for. A KILL that writes an id in its negative 32-bit form (as
//! a client that kept the greeting's 4 bytes in a signed int prints it) is read as that id; with
//! every proxy id below 2^31 none has such a form, so these reach the server unchanged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::balancer::Backend;
use crate::protocol::codec::header;
#[cfg(test)]
use crate::protocol::response::may_be_kill;
use crate::protocol::response::{cmd, is_sql_space, statement_start};

/// The lowest proxy id (instance 0, counter 0).
pub const ID_BASE: u32 = 0x6000_0000;
/// The bits that say "a proxy id": the top three, `0b011`.
const ID_PREFIX_MASK: u32 = 0xE000_0000;
const INSTANCE_SHIFT: u32 = 21;
const COUNTER_MASK: u32 = (1 << INSTANCE_SHIFT) - 1;

/// Whether `id` lies in the range mysql-lb hands out (any instance).
pub fn is_proxy_id(id: u32) -> bool {
    id & ID_PREFIX_MASK == ID_BASE
}

/// The session a proxy id stands for.
#[derive(Debug, Clone)]
pub struct Target {
    pub backend: Arc<Backend>,
    pub thread_id: u32,
}

/// Live sessions by proxy id.
#[derive(Debug, Default)]
pub struct Registry {
    instance: u8,
    ids: Mutex<Ids>,
}

#[derive(Debug, Default)]
struct Ids {
    /// The counter part of the next id to try.
    next: u32,
    /// None while a deferred connect has greeted its client but not yet chosen a backend.
    sessions: HashMap<u32, Option<Target>>,
}

impl Registry {
    /// A registry whose ids carry `instance` (0 for a proxy on its own).
    pub fn with_instance(instance: u8) -> Registry {
        Registry {
            instance,
            ids: Mutex::default(),
        }
    }

    /// Gives the session a fresh proxy id, findable until the returned guard is dropped. None
    /// only if every id of this instance is in use (the session then keeps its backend's id).
    #[must_use = "the session is unregistered when the guard drops"]
    pub fn register(&self, target: Target) -> Option<Registration<'_>> {
        self.insert(Some(target))
    }

    /// Gives a session its proxy id before its backend is known (a deferred connect greets the
    /// client first); a KILL naming it is answered as unknown until [`Registration::bind`].
    #[must_use = "the session is unregistered when the guard drops"]
    pub fn reserve(&self) -> Option<Registration<'_>> {
        self.insert(None)
    }

    fn insert(&self, target: Option<Target>) -> Option<Registration<'_>> {
        let mut ids = self.ids.lock().ok()?;
        let first = ids.next;
        loop {
            let counter = ids.next;
            ids.next = (counter + 1) & COUNTER_MASK;
            let id = ID_BASE | u32::from(self.instance) << INSTANCE_SHIFT | counter;
            if let std::collections::hash_map::Entry::Vacant(slot) = ids.sessions.entry(id) {
                slot.insert(target);
                return Some(Registration { registry: self, id });
            }
            if ids.next == first {
                return None;
            }
        }
    }

    fn unregister(&self, id: u32) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.sessions.remove(&id);
        }
    }

    pub fn lookup(&self, id: u32) -> Option<Target> {
        self.ids.lock().ok()?.sessions.get(&id).cloned().flatten()
    }

    fn bind(&self, id: u32, target: Target) {
        if let Ok(mut ids) = self.ids.lock() {
            if let Some(slot) = ids.sessions.get_mut(&id) {
                *slot = Some(target);
            }
        }
    }
}

/// Keeps a session in the registry for as long as it lives.
#[derive(Debug)]
pub struct Registration<'a> {
    registry: &'a Registry,
    id: u32,
}

impl Registration<'_> {
    /// The proxy id the client is greeted with.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Names the backend session a reserved id stands for, from now on.
    pub fn bind(&self, target: Target) {
        self.registry.bind(self.id, target);
    }
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
    /// The id as a non-negative number; a negative 32-bit literal is read as its two's complement.
    pub id: u64,
}

/// Parses `KILL [HARD|SOFT] [CONNECTION|QUERY] <n>` (optionally `;`-terminated, after leading
/// comments) or COM_PROCESS_KILL. `n` is a number, quoted (`'n'`, as PDO and mysql2 bind it) or
/// in parentheses, and may be negative (`-1073741823`: a signed 32-bit id). `KILL QUERY ID n`
/// names a *query* id, not a connection, and is None like everything else (KILL USER,
/// expressions): it passes untouched.
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
    let sql = std::str::from_utf8(statement_start(body).ok()?).ok()?;
    let words = sql_words(sql)?;
    let (first, rest) = words.split_first()?;
    if !first.eq_ignore_ascii_case("KILL") {
        return None;
    }
    let allowed = ["HARD", "SOFT", "CONNECTION", "QUERY"];
    let keywords = rest
        .iter()
        .take_while(|w| allowed.iter().any(|a| w.eq_ignore_ascii_case(a)))
        .count();
    // What follows the keywords is the id, however spaced or commented: `( n )`, `n ;`.
    let id: String = rest[keywords..].concat();
    let id = parse_id(id.strip_suffix(';').unwrap_or(&id))?;
    Some(KillRequest {
        prefix: words[..=keywords].join(" ") + " ",
        id,
    })
}

/// The words of a statement, split at SQL whitespace and at comments (`/* */`, `#` and `-- ` to
/// the end of the line; sqlcommenter appends one). None for an unterminated or executable comment
/// (`/*!`, `/*M!`: its text is part of the statement, which is then not taken for a KILL).
fn sql_words(sql: &str) -> Option<Vec<&str>> {
    let bytes = sql.as_bytes();
    let mut words = Vec::new();
    let (mut i, mut word_start) = (0, 0);
    while i < bytes.len() {
        let rest = &bytes[i..];
        let skip_to = if is_sql_space(rest[0]) {
            Some(i + 1)
        } else if rest.starts_with(b"/*") {
            if rest.starts_with(b"/*!") || rest.starts_with(b"/*M!") {
                return None;
            }
            let end = rest[2..].windows(2).position(|w| w == b"*/")?;
            Some(i + 2 + end + 2)
        } else if rest[0] == b'#'
            || (rest.starts_with(b"--") && rest.get(2).is_some_and(|b| is_sql_space(*b)))
        {
            Some(
                rest.iter()
                    .position(|b| *b == b'\n')
                    .map_or(bytes.len(), |n| i + n + 1),
            )
        } else {
            None
        };
        match skip_to {
            Some(next) => {
                if i > word_start {
                    words.push(&sql[word_start..i]);
                }
                i = next;
                word_start = next;
            }
            None => i += 1,
        }
    }
    if bytes.len() > word_start {
        words.push(&sql[word_start..]);
    }
    Some(words)
}

/// `n`, `'n'`, `"n"` or `(n)`; a negative `-n` down to `i32::MIN` as the `u32` with the same bits.
fn parse_id(word: &str) -> Option<u64> {
    let unwrapped = [("'", "'"), ("\"", "\""), ("(", ")")]
        .iter()
        .find_map(|(open, close)| word.strip_prefix(open)?.strip_suffix(close));
    let word = unwrapped.unwrap_or(word);
    if word.starts_with('-') {
        let signed: i32 = word.parse().ok()?;
        return Some(u64::from(signed as u32));
    }
    word.parse().ok()
}

/// What became of a KILL naming a proxy id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Rewritten to the target's thread id on this session's backend.
    Mapped,
    /// The target is on another backend: answered with ERR 1095, nothing killed.
    OtherBackend,
    /// No such session (any more): answered with ERR 1094.
    Unknown,
}

/// What to send the backend instead of the client's KILL packet, if anything changes, and why.
pub fn rewrite(
    request: &KillRequest,
    registry: &Registry,
    own_backend: &Arc<Backend>,
) -> Option<(Mapping, Vec<u8>)> {
    let proxy_id = u32::try_from(request.id)
        .ok()
        .filter(|id| is_proxy_id(*id))?;
    let (mapping, sql) = match registry.lookup(proxy_id) {
        Some(t) if Arc::ptr_eq(&t.backend, own_backend) => (
            Mapping::Mapped,
            format!("{}{}", kill_statement(&request.prefix), t.thread_id),
        ),
        Some(t) => (
            Mapping::OtherBackend,
            signal(
                1095,
                &format!(
                    "mysql-lb: connection {proxy_id} is on backend {} and this session on {}; \
                 KILL refused, nothing was killed (run it through a session on the same backend)",
                    t.backend.name, own_backend.name
                ),
            ),
        ),
        None => (
            Mapping::Unknown,
            signal(1094, &format!("Unknown thread id: {proxy_id}")),
        ),
    };
    let mut payload = Vec::with_capacity(1 + sql.len());
    payload.push(cmd::QUERY);
    payload.extend_from_slice(sql.as_bytes());
    let mut packet = header(payload.len(), 0).to_vec();
    packet.extend_from_slice(&payload);
    Some((mapping, packet))
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
        // A query id, not a connection: never mapped.
        assert_eq!(parse(&query("KILL QUERY ID 9")), None);
        assert_eq!(parse(&[cmd::PROCESS_KILL, 2, 0, 0, 0]).unwrap().id, 2);
        assert_eq!(parse(&query("KILL USER bob")), None);
        assert_eq!(parse(&query("KILL QUERY 1+1")), None);
        assert_eq!(parse(&query("KILLALL 5")), None);
        assert_eq!(parse(&[cmd::PROCESS_KILL, 2]), None);
    }

    #[test]
    fn reads_ids_after_comments_and_in_quotes_or_parentheses() {
        for sql in [
            "/* app:checkout */ KILL QUERY 1610612737",
            "# note\nKILL QUERY 1610612737",
            "-- note\n  KILL QUERY 1610612737 ;",
            "KILL QUERY '1610612737'",
            "KILL QUERY \"1610612737\"",
            "KILL QUERY (1610612737)",
            "KILL QUERY 1610612737 /* traceparent='00-4bf9' */",
            "KILL QUERY 1610612737 -- cancel",
            "KILL/**/QUERY/**/1610612737",
            "KILL QUERY  ( 1610612737 )",
            "KILL QUERY 1610612737 ;",
            "KILL QUERY +1610612737",
        ] {
            let k = parse(&query(sql)).unwrap_or_else(|| panic!("not parsed: {sql:?}"));
            assert_eq!(
                (k.id, k.prefix.as_str()),
                (1610612737, "KILL QUERY "),
                "{sql:?}"
            );
        }
        for sql in [
            "/*!KILL QUERY 1610612737 */",
            "/*M!100000 KILL QUERY 1610612737 */",
            "KILL QUERY 1610612737 /* unterminated",
            "/* unterminated KILL QUERY 1610612737",
            "--KILL QUERY 1610612737",
            "KILL QUERY '1610612737",
            "SELECT 1; KILL QUERY 1610612737",
        ] {
            assert_eq!(parse(&query(sql)), None, "{sql:?}");
        }
    }

    #[test]
    fn a_kill_after_comments_is_offered_for_mapping_and_held_while_cut() {
        use crate::protocol::response::may_become_kill;
        assert!(may_be_kill(&query("/* a */ -- b\n kill 5")));
        assert!(!may_be_kill(&query("/* kill 5 */ SELECT 1")));
        assert!(!may_be_kill(&query("/*!kill 5 */")));
        let whole = [&[9, 0, 0, 0][..], &query("/* x */ k")].concat();
        for cut in 4..whole.len() {
            assert!(may_become_kill(&whole[..cut]), "cut at {cut}");
        }
        let select = [&[12, 0, 0, 0][..], &query("/* x */ SELE")].concat();
        assert!(!may_become_kill(&select));
    }

    #[test]
    fn reads_a_negative_id_as_its_32_bit_twos_complement() {
        // Connector/J 2.7 keeps the greeting's id in an int: 0xC000_0001 came back as this.
        let k = parse(&query("KILL QUERY -1073741823")).unwrap();
        assert_eq!(k.id, 0xC000_0001);
        assert_eq!(k.prefix, "KILL QUERY ");
        assert_eq!(parse(&query("KILL -1")).unwrap().id, 0xFFFF_FFFF);
        assert_eq!(parse(&query("KILL -2147483648")).unwrap().id, 0x8000_0000);
        assert_eq!(parse(&query("KILL -2147483649")), None, "not a 32-bit id");
        assert_eq!(parse(&query("KILL --5")), None);
        // Unary minus with a space is the same expression.
        assert_eq!(parse(&query("KILL - 5")).unwrap().id, 0xFFFF_FFFB);
    }

    fn target(backend: &Arc<Backend>, thread_id: u32) -> Target {
        Target {
            backend: Arc::clone(backend),
            thread_id,
        }
    }

    #[test]
    fn ids_fit_a_signed_int_and_carry_the_instance() {
        let set = two_backends();
        let a = &set.backends()[0];
        let first = Registry::default();
        let r = first.register(target(a, 1)).unwrap();
        assert_eq!(r.id(), 0x6000_0000);
        assert_eq!(first.register(target(a, 2)).unwrap().id(), 0x6000_0001);
        let last = Registry::with_instance(255);
        let id = last.register(target(a, 3)).unwrap().id();
        assert_eq!(id, 0x6000_0000 | 255 << 21);
        last.ids.lock().unwrap().next = COUNTER_MASK;
        let top = last.register(target(a, 4)).unwrap().id();
        assert_eq!(top, 0x7FFF_FFFF, "the highest id of the highest instance");
        for id in [r.id(), top] {
            assert!(
                i32::try_from(id).is_ok(),
                "{id:#x} reads as negative in an int"
            );
            assert!(is_proxy_id(id), "{id:#x}");
        }
        // A server's own thread ids stay below the range.
        assert!(!is_proxy_id(ID_BASE - 1));
        assert!(!is_proxy_id(0x8000_0000) && !is_proxy_id(0xC000_0001));
    }

    #[test]
    fn counter_wraps_and_skips_ids_still_in_use() {
        let set = two_backends();
        let a = &set.backends()[0];
        let reg = Registry::default();
        let zero = reg.register(target(a, 10)).unwrap();
        let one = reg.register(target(a, 11)).unwrap();
        let ended = reg.register(target(a, 12)).unwrap();
        assert_eq!(ended.id(), ID_BASE + 2);
        drop(ended);
        reg.ids.lock().unwrap().next = COUNTER_MASK;
        assert_eq!(
            reg.register(target(a, 13)).unwrap().id(),
            ID_BASE | COUNTER_MASK
        );
        let reused = reg.register(target(a, 14)).unwrap();
        assert_eq!(
            reused.id(),
            ID_BASE + 2,
            "0 and 1 are live, 2 is free again"
        );
        assert_eq!(reg.lookup(zero.id()).unwrap().thread_id, 10);
        assert_eq!(reg.lookup(one.id()).unwrap().thread_id, 11);
        assert_eq!(reg.lookup(reused.id()).unwrap().thread_id, 14);
    }

    fn two_backends() -> BackendSet {
        let configs: Vec<_> = ["a", "b"]
            .iter()
            .map(|n| BackendConfig {
                name: (*n).into(),
                address: BackendAddr::Unix(format!("/tmp/{n}").into()),
                weight: 1,
                kind: Default::default(),
                tls: Default::default(),
                compression: false,
                pool: "default".into(),
            })
            .collect();
        BackendSet::new(&configs, Duration::from_secs(1), false, &Metrics::new())
    }

    fn sql_of(packet: &[u8]) -> String {
        String::from_utf8(packet[5..].to_vec()).unwrap()
    }

    #[test]
    fn a_reserved_id_is_unknown_until_bound_and_free_once_dropped() {
        let set = two_backends();
        let a = &set.backends()[0];
        let reg = Registry::default();
        let reserved = reg.reserve().unwrap();
        let id = reserved.id();
        assert!(is_proxy_id(id));
        assert!(reg.lookup(id).is_none());
        let req = parse(&query(&format!("KILL {id}"))).unwrap();
        assert_eq!(rewrite(&req, &reg, a).unwrap().0, Mapping::Unknown);
        // Another session never gets the reserved id.
        assert_ne!(reg.register(target(a, 1)).unwrap().id(), id);
        reserved.bind(target(a, 77));
        assert_eq!(reg.lookup(id).map(|t| t.thread_id), Some(77));
        let (mapping, packet) = rewrite(&req, &reg, a).unwrap();
        assert_eq!(mapping, Mapping::Mapped);
        assert_eq!(sql_of(&packet), "KILL 77");
        drop(reserved);
        assert!(reg.lookup(id).is_none());
    }

    #[test]
    fn maps_to_the_thread_on_the_same_backend_and_refuses_across() {
        let set = two_backends();
        let (a, b) = (&set.backends()[0], &set.backends()[1]);
        let reg = Registry::default();
        let registration = reg.register(target(a, 42)).unwrap();
        let id = registration.id();
        let req = parse(&query(&format!("KILL QUERY {id}"))).unwrap();
        let (mapping, same) = rewrite(&req, &reg, a).unwrap();
        assert_eq!(mapping, Mapping::Mapped);
        assert_eq!(sql_of(&same), "KILL QUERY 42");
        assert_eq!(same[3], 0, "a command packet");
        let (mapping, across) = rewrite(&req, &reg, b).unwrap();
        assert_eq!(mapping, Mapping::OtherBackend);
        let across = sql_of(&across);
        assert!(across.starts_with("SIGNAL SQLSTATE"), "{across}");
        assert!(across.contains("1095") && across.contains("nothing was killed"));
        let binary = parse(&[cmd::PROCESS_KILL, 0, 0, 0, 0])
            .map(|mut r| {
                r.id = u64::from(id);
                r
            })
            .unwrap();
        assert_eq!(sql_of(&rewrite(&binary, &reg, a).unwrap().1), "KILL 42");
        drop(registration);
        let (mapping, gone) = rewrite(&req, &reg, a).unwrap();
        assert_eq!(mapping, Mapping::Unknown);
        let gone = sql_of(&gone);
        assert!(
            gone.contains("1094") && gone.contains("Unknown thread id"),
            "{gone}"
        );
        // Real thread ids (below the range) pass untouched, and so does a negative form, which
        // names no proxy id: the server answers it as it would directly.
        assert_eq!(rewrite(&parse(&query("KILL 17")).unwrap(), &reg, a), None);
        let below = format!("KILL QUERY {}", ID_BASE - 1);
        assert_eq!(rewrite(&parse(&query(&below)).unwrap(), &reg, a), None);
        let negative = parse(&query("KILL QUERY -1073741823")).unwrap();
        assert_eq!(rewrite(&negative, &reg, a), None);
    }
}
