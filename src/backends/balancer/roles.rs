//! Where a pool's writes go: each backend's role in a replication cluster, as configured
//! (`role: primary | replica`) or as its server says in each health check (`role: auto`, from
//! `@@read_only`), and the election of a pool's one primary.
//!
//! mysql-lb never promotes anything: it follows what the servers say. A pool with roles has at
//! most one primary; when two backends say they are writable at once (a switchover half done,
//! or a split brain), neither takes writes until one of them is read-only again, and the log
//! and the error a write gets name both. A backend whose role is not known yet (`auto` before
//! its first check) takes no writes either.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::{Backend, Pool};
use crate::config::Role;
use crate::wire::sql::gtid::GtidPos;

/// What the last health check read of `@@read_only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// No check read it yet (or no check logs in).
    Unknown,
    Writable,
    ReadOnly,
}

/// A backend's role: configured, and what its server last said.
#[derive(Debug)]
pub struct BackendRole {
    configured: Option<Role>,
    seen: AtomicU8,
    /// The GTID position its server is known to have applied (`@@gtid_current_pos` in the
    /// health check, or a `MASTER_GTID_WAIT` a read made there): only ever grows, so a read
    /// whose session's writes it covers goes there without a wait.
    applied: Mutex<GtidPos>,
    /// Its last health check found it past `health_check.max_replication_lag` (a passed check
    /// clears it): why a split's reads find no replica, when they do not.
    lagging: std::sync::atomic::AtomicBool,
}

impl BackendRole {
    pub fn new(configured: Option<Role>) -> Self {
        BackendRole {
            configured,
            seen: AtomicU8::new(Seen::Unknown as u8),
            applied: Mutex::new(GtidPos::default()),
            lagging: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// As configured: None in a pool without roles.
    pub fn configured(&self) -> Option<Role> {
        self.configured
    }

    /// What the last check read; true when that changed.
    pub fn observe(&self, read_only: bool) -> bool {
        let seen = if read_only {
            Seen::ReadOnly
        } else {
            Seen::Writable
        };
        self.seen.swap(seen as u8, Relaxed) != seen as u8
    }

    /// Its server has applied `position` (a health check read it, or a wait returned).
    pub fn learn_applied(&self, position: &GtidPos) {
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        applied.merge(position);
    }

    /// Whether its server is known to have applied `want`.
    pub fn applied_covers(&self, want: &GtidPos) -> bool {
        let applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        applied.covers(want)
    }

    /// What its server is known to have applied, for the status page.
    pub fn applied(&self) -> GtidPos {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What its last health check said of its replication lag: past the limit or not.
    pub fn set_lagging(&self, lagging: bool) {
        self.lagging.store(lagging, Relaxed);
    }

    pub fn lagging(&self) -> bool {
        self.lagging.load(Relaxed)
    }

    /// Its server is lost: what it said no longer holds.
    pub fn forget(&self) {
        self.seen.store(Seen::Unknown as u8, Relaxed);
    }

    pub fn seen(&self) -> Seen {
        match self.seen.load(Relaxed) {
            1 => Seen::Writable,
            2 => Seen::ReadOnly,
            _ => Seen::Unknown,
        }
    }

    /// Whether it may be the primary: configured so, or `auto` and writable.
    pub fn claims_primary(&self) -> bool {
        match self.configured {
            Some(Role::Primary) => true,
            Some(Role::Auto) => self.seen() == Seen::Writable,
            _ => false,
        }
    }

    /// Whether it may take a read of a split: a replica, configured or as its server says.
    pub fn serves_reads(&self) -> bool {
        match self.configured {
            Some(Role::Replica) => true,
            Some(Role::Auto) => self.seen() == Seen::ReadOnly,
            _ => false,
        }
    }

    /// Its role now, for the status page: `primary`, `replica`, `unknown`, or None without roles.
    pub fn describe(&self) -> Option<&'static str> {
        Some(match self.configured? {
            Role::Primary => "primary",
            Role::Replica => "replica",
            Role::Auto => match self.seen() {
                Seen::Writable => "primary",
                Seen::ReadOnly => "replica",
                Seen::Unknown => "unknown",
            },
        })
    }
}

/// Who takes a pool's writes.
#[derive(Debug, Clone)]
pub enum Primary<'p> {
    /// The pool has no roles: every backend takes writes, as before roles existed.
    Any,
    /// This one.
    One(&'p Arc<Backend>),
    /// None says it is writable (a switchover in progress, or every `auto` unchecked yet).
    None,
    /// More than one says it is writable: neither takes writes.
    Several(Vec<&'p Arc<Backend>>),
}

impl Pool {
    /// Whether its backends have roles (see `config/roles.rs`).
    pub fn has_roles(&self) -> bool {
        self.members.iter().any(|b| b.role.configured().is_some())
    }

    /// The pool's primary now (see the module's docs).
    pub fn primary(&self) -> Primary<'_> {
        if !self.has_roles() {
            return Primary::Any;
        }
        let mut claims = self.members.iter().filter(|b| b.role.claims_primary());
        match (claims.next(), claims.next()) {
            (None, _) => Primary::None,
            (Some(one), None) => Primary::One(one),
            (Some(a), Some(b)) => {
                let mut all = vec![a, b];
                all.extend(claims);
                Primary::Several(all)
            }
        }
    }

    /// Whether `backend` may take a write now: the pool has no roles, or it is the pool's one
    /// primary.
    pub fn takes_writes(&self, backend: &Backend) -> bool {
        match self.primary() {
            Primary::Any => true,
            Primary::One(p) => std::ptr::eq(Arc::as_ptr(p), backend),
            Primary::None | Primary::Several(_) => false,
        }
    }

    /// Why `backend` takes no write, for the error a refused write gets and the log.
    pub fn why_no_writes(&self, backend: &Backend) -> String {
        match self.primary() {
            Primary::Any => String::new(),
            Primary::One(p) => format!(
                "backend {} is a replica of pool {}: writes go to its primary {}",
                backend.name, self.name, p.name
            ),
            Primary::None => format!(
                "backend {} is a replica of pool {}, which has no writable primary now",
                backend.name, self.name
            ),
            Primary::Several(all) => {
                let names: Vec<&str> = all.iter().map(|b| b.name.as_str()).collect();
                format!(
                    "pool {} has more than one writable backend ({}): none takes writes until \
                     only one is",
                    self.name,
                    names.join(", ")
                )
            }
        }
    }
}
