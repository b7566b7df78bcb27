//! What one captured command becomes on the replay's connection, decided without I/O: the
//! payload to send (prepared-statement ids mapped to the ones the target gave), or why it is
//! skipped; and which digest the report counts it under. A command the capture redacted (it may
//! carry a password, see `capture::redact`) is never sent: it counts under its digest, with no
//! text, as [`REDACTED`](Plan::Skip) skipped.

use std::collections::HashMap;

use crate::telemetry::capture::format::{
    answered, redacted_digest, statement_id as stmt_id, DIGEST_LEN, REDACTED, TRUNCATED,
};
use crate::wire::protocol::response::cmd;
use crate::wire::sql;

/// Why a redacted command is skipped (the report counts these apart).
pub const SKIP_REDACTED: &str = "redacted: it may carry a password";
/// The text a redacted statement is reported under.
pub const REDACTED_TEXT: &str = "(redacted)";

/// What the report groups a command under.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: &'static str,
    /// The statement's digest (hex), empty for commands without one.
    pub digest: String,
    pub text: String,
}

impl Key {
    fn bare(kind: &'static str) -> Self {
        Key {
            kind,
            digest: String::new(),
            text: String::new(),
        }
    }

    /// A redacted statement's key: its digest as captured, no text.
    fn redacted(kind: &'static str, payload: &[u8]) -> Self {
        Key {
            kind,
            digest: redacted_digest(payload).map_or(String::new(), |d| sql::Digest(d).to_string()),
            text: REDACTED_TEXT.to_owned(),
        }
    }

    fn of_text(kind: &'static str, text: &[u8]) -> Self {
        Key {
            kind,
            digest: sql::digest(text, DIGEST_LEN).to_string(),
            text: sql::normalize(text, DIGEST_LEN),
        }
    }
}

/// One command's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Send these payloads in order (a COM_CHANGE_USER becomes a reset and a COM_INIT_DB);
    /// `answered` for each: whether a response comes.
    Send(Vec<(Vec<u8>, bool)>),
    Skip(&'static str),
}

/// A captured prepared statement, by the id it had in the capture.
#[derive(Debug, Clone)]
struct Prepared {
    key: Key,
    /// Its id on the target; None if its prepare was skipped or failed there.
    id: Option<u32>,
}

/// One session's statements and options.
#[derive(Debug, Default)]
pub struct Planner {
    pub read_only: bool,
    prepared: HashMap<u32, Prepared>,
    /// The last prepare's key, for an execute of id 0xFFFFFFFF (MariaDB's "the last one").
    last_prepared: Option<Key>,
}

fn with_id(payload: &[u8], id: u32) -> Vec<u8> {
    let mut p = payload.to_vec();
    if let Some(b) = p.get_mut(1..5) {
        b.copy_from_slice(&id.to_le_bytes());
    }
    p
}

/// Whether `--read-only` skips a statement: anything not known to change no data in every
/// reading a server could take of it (a `SET`, `CALL` or `DO` may write, and so may what a
/// version-gated comment hides; see `sql::read_only`).
pub fn writes(text: &[u8]) -> bool {
    !sql::read_only(text)
}

/// COM_SET_OPTION's option that lets one COM_QUERY carry several statements.
const MULTI_STATEMENTS_ON: u16 = 0;

/// Commands `--read-only` sends besides statements it read: none of them changes data.
fn harmless(command: u8, body: &[u8]) -> bool {
    match command {
        cmd::SET_OPTION => body.get(..2) != Some(&MULTI_STATEMENTS_ON.to_le_bytes()[..]),
        cmd::INIT_DB
        | cmd::PING
        | cmd::QUIT
        | cmd::STATISTICS
        | cmd::FIELD_LIST
        | cmd::CHANGE_USER
        | cmd::RESET_CONNECTION => true,
        _ => false,
    }
}

impl Planner {
    pub fn new(read_only: bool) -> Self {
        Self {
            read_only,
            ..Self::default()
        }
    }

    /// The report's key for a captured command (`flags` of its record).
    pub fn key(&self, payload: &[u8], flags: u8) -> Key {
        let command = payload.first().copied().unwrap_or(0);
        let body = payload.get(1..).unwrap_or_default();
        let of_stmt = |kind| {
            let known = match stmt_id(payload) {
                Some(u32::MAX) => self.last_prepared.clone(),
                Some(id) => self.prepared.get(&id).map(|p| p.key.clone()),
                None => None,
            };
            match known {
                Some(k) => Key { kind, ..k },
                None => Key::bare(kind),
            }
        };
        let redacted = flags & REDACTED != 0;
        match command {
            cmd::QUERY if redacted => Key::redacted("query", payload),
            cmd::STMT_PREPARE if redacted => Key::redacted("prepare", payload),
            cmd::QUERY => Key::of_text("query", body),
            cmd::STMT_PREPARE => Key::of_text("prepare", body),
            cmd::STMT_EXECUTE => of_stmt("execute"),
            cmd::STMT_CLOSE => of_stmt("close"),
            cmd::STMT_RESET => of_stmt("reset"),
            cmd::STMT_SEND_LONG_DATA => of_stmt("long_data"),
            cmd::STMT_FETCH => of_stmt("fetch"),
            cmd::STMT_BULK_EXECUTE => of_stmt("bulk_execute"),
            cmd::INIT_DB => Key::bare("init_db"),
            cmd::PING => Key::bare("ping"),
            cmd::CHANGE_USER => Key::bare("change_user"),
            cmd::RESET_CONNECTION => Key::bare("reset_connection"),
            cmd::SET_OPTION => Key::bare("set_option"),
            _ => Key::bare("other"),
        }
    }

    /// What to send for a captured command (`flags` of its record).
    pub fn plan(&mut self, payload: &[u8], flags: u8, captured_id: Option<u32>) -> Plan {
        if flags & TRUNCATED != 0 {
            return Plan::Skip("payload cut in the capture");
        }
        let Some(&command) = payload.first() else {
            return Plan::Skip("empty");
        };
        let body = &payload[1..];
        let send = |p: Vec<u8>| Plan::Send(vec![(p, answered(command))]);
        if flags & REDACTED != 0 {
            // Its executes count under it, and are skipped as it is.
            if command == cmd::STMT_PREPARE {
                let key = Key::redacted("prepare", payload);
                self.remember(key.clone(), captured_id);
            }
            return Plan::Skip(SKIP_REDACTED);
        }
        let statement = matches!(
            command,
            cmd::QUERY
                | cmd::STMT_PREPARE
                | cmd::STMT_EXECUTE
                | cmd::STMT_CLOSE
                | cmd::STMT_RESET
                | cmd::STMT_SEND_LONG_DATA
                | cmd::STMT_FETCH
                | cmd::STMT_BULK_EXECUTE
        );
        if self.read_only && !statement && !harmless(command, body) {
            return Plan::Skip(if command == cmd::SET_OPTION {
                "multi-statements on (--read-only)"
            } else {
                "not a read (--read-only)"
            });
        }
        match command {
            cmd::QUERY if self.read_only && writes(body) => Plan::Skip("writes (--read-only)"),
            cmd::STMT_PREPARE => {
                let key = Key::of_text("prepare", body);
                let skip = self.read_only && writes(body);
                self.remember(key.clone(), captured_id);
                if skip {
                    Plan::Skip("writes (--read-only)")
                } else {
                    send(payload.to_vec())
                }
            }
            // Every command that names a statement has its id in bytes 1..5; a fetch reads the
            // cursor its statement's last execute opened on the target.
            cmd::STMT_EXECUTE
            | cmd::STMT_CLOSE
            | cmd::STMT_RESET
            | cmd::STMT_SEND_LONG_DATA
            | cmd::STMT_FETCH
            | cmd::STMT_BULK_EXECUTE => {
                let Some(id) = stmt_id(payload) else {
                    return Plan::Skip("malformed");
                };
                if id == u32::MAX {
                    return send(payload.to_vec());
                }
                let target = match self.prepared.get(&id) {
                    None => return Plan::Skip("prepared before the capture"),
                    Some(Prepared { id: None, .. }) => {
                        return Plan::Skip("its prepare was skipped or failed")
                    }
                    Some(Prepared { id: Some(t), .. }) => *t,
                };
                if command == cmd::STMT_CLOSE {
                    self.prepared.remove(&id);
                }
                send(with_id(payload, target))
            }
            cmd::CHANGE_USER => {
                // The replay keeps its own account: the session is reset and its schema set.
                let mut out = vec![(vec![cmd::RESET_CONNECTION], true)];
                if let Some(schema) = change_user_schema(body).filter(|s| !s.is_empty()) {
                    let mut init = vec![cmd::INIT_DB];
                    init.extend_from_slice(schema);
                    out.push((init, true));
                }
                Plan::Send(out)
            }
            _ => send(payload.to_vec()),
        }
    }

    /// A prepare under `key`, captured with id `captured`: its executes count under it, and
    /// an execute of 0xFFFFFFFF names it.
    fn remember(&mut self, key: Key, captured: Option<u32>) {
        if let Some(id) = captured {
            self.prepared.insert(
                id,
                Prepared {
                    key: key.clone(),
                    id: None,
                },
            );
        }
        self.last_prepared = Some(key);
    }

    /// The target answered a prepare captured with id `captured` by giving it `replayed`.
    pub fn prepared(&mut self, captured: u32, replayed: u32) {
        if let Some(p) = self.prepared.get_mut(&captured) {
            p.id = Some(replayed);
        }
    }
}

/// The schema of a redacted COM_CHANGE_USER body: user NUL, empty auth (one 0 byte), schema NUL.
fn change_user_schema(body: &[u8]) -> Option<&[u8]> {
    let user_end = body.iter().position(|&b| b == 0)?;
    let rest = body.get(user_end + 2..)?;
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    Some(&rest[..end])
}

#[cfg(test)]
mod tests;
