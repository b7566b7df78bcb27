//! Reads a capture directory into sessions: every file in name order, each up to its last valid
//! block (what stopped it is kept, with the offset, for the report), records grouped by session
//! and each captured command paired with its response, and the backends a session of a pool
//! across backends moved to, so each command's backend is known.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::telemetry::capture::format::{self, Body, Response, SessionStart};

/// One captured command and what the backend answered then (None: no response was captured).
#[derive(Debug, Clone)]
pub struct Step {
    pub t_us: u64,
    pub flags: u8,
    pub payload: Vec<u8>,
    pub response: Option<Response>,
    /// The session's moves before it: it ran on `start.backend` when 0, else on the backend of
    /// `moves[moved - 1]` (see [`CapturedSession::backend_of`]).
    pub moved: u32,
}

#[derive(Debug, Clone, Default)]
pub struct CapturedSession {
    pub id: u64,
    pub start: SessionStart,
    /// When the capture first saw it.
    pub t_us: u64,
    pub steps: Vec<Step>,
    /// Where its commands ran from then on (`start.backend` before the first), in order.
    pub moves: Vec<Move>,
}

/// A session of a pool across backends moved at `t_us`: its next commands ran on `backend`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub t_us: u64,
    pub backend: String,
}

impl CapturedSession {
    /// The backend `step` ran on, as the capture says.
    pub fn backend_of(&self, step: &Step) -> &str {
        (step.moved as usize)
            .checked_sub(1)
            .and_then(|i| self.moves.get(i))
            .map_or(&self.start.backend, |m| &m.backend)
    }
}

/// Where reading a file stopped before its end.
#[derive(Debug, Clone)]
pub struct Damage {
    pub file: PathBuf,
    pub offset: usize,
    pub error: String,
}

#[derive(Debug, Default)]
pub struct Loaded {
    pub sessions: Vec<CapturedSession>,
    pub files: usize,
    pub damage: Vec<Damage>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: no capture files (capture-*.mlbcap) in it")]
    Empty(String),
    #[error("{path}: {source}")]
    Format {
        path: String,
        source: format::FormatError,
    },
}

/// Reads every capture file of `dir`.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    let io = |source| LoadError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("capture-") && n.ends_with(".mlbcap"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(LoadError::Empty(dir.display().to_string()));
    }
    let mut loaded = Loaded {
        files: files.len(),
        ..Loaded::default()
    };
    let mut sessions: BTreeMap<u64, CapturedSession> = BTreeMap::new();
    let mut waiting: HashMap<(u64, u32), (u64, usize)> = HashMap::new();
    for path in files {
        let bytes = std::fs::read(&path).map_err(|source| LoadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let decoded = format::decode_file(&bytes).map_err(|source| LoadError::Format {
            path: path.display().to_string(),
            source,
        })?;
        if let Some((offset, e)) = decoded.stopped {
            loaded.damage.push(Damage {
                file: path.clone(),
                offset,
                error: e.to_string(),
            });
        }
        for r in decoded.records {
            let s = sessions
                .entry(r.session)
                .or_insert_with(|| CapturedSession {
                    id: r.session,
                    t_us: r.t_us,
                    ..CapturedSession::default()
                });
            match r.body {
                Body::SessionStart(start) => {
                    s.start = start;
                    s.t_us = r.t_us;
                }
                Body::Command(c) => {
                    waiting.insert((r.session, c.seq), (r.session, s.steps.len()));
                    s.steps.push(Step {
                        t_us: r.t_us,
                        flags: c.flags,
                        payload: c.payload,
                        response: None,
                        moved: s.moves.len() as u32,
                    });
                }
                Body::Response(resp) => {
                    if let Some((_, i)) = waiting.remove(&(r.session, resp.seq)) {
                        if let Some(step) = s.steps.get_mut(i) {
                            step.response = Some(resp);
                        }
                    }
                }
                Body::Moved { backend } => s.moves.push(Move {
                    t_us: r.t_us,
                    backend,
                }),
                Body::SessionEnd => {}
            }
        }
    }
    loaded.sessions = sessions
        .into_values()
        .filter(|s| !s.steps.is_empty())
        .map(|mut s| {
            // A ping is recorded when its response came, stamped with when it was sent.
            s.steps.sort_by_key(|st| st.t_us);
            s
        })
        .collect();
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::capture::format::{encode_block, Command, FileHeader, Record};

    fn record(t_us: u64, body: Body) -> Record {
        Record {
            session: 1,
            t_us,
            body,
        }
    }

    fn query(t_us: u64, seq: u32) -> Record {
        record(
            t_us,
            Body::Command(Command {
                seq,
                flags: 0,
                payload: b"\x03SELECT 1".to_vec(),
            }),
        )
    }

    #[test]
    fn each_command_runs_on_the_backend_of_the_last_move_before_it() {
        let dir = std::env::temp_dir().join(format!("mlb-load-moves-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let start = SessionStart {
            backend: "db1".into(),
            ..SessionStart::default()
        };
        let moved = |t_us, to: &str| record(t_us, Body::Moved { backend: to.into() });
        let mut raw = Vec::new();
        for r in [
            record(1, Body::SessionStart(start)),
            query(10, 0),
            moved(20, "db2"),
            query(20, 1),
            moved(30, "db1"),
            query(40, 2),
            record(50, Body::SessionEnd),
        ] {
            r.encode(&mut raw);
        }
        let mut file = FileHeader {
            started_unix_us: 0,
            index: 1,
        }
        .encode()
        .to_vec();
        file.extend_from_slice(&encode_block(&raw));
        std::fs::write(dir.join("capture-000001.mlbcap"), file).unwrap();

        let loaded = load(&dir).unwrap();
        let s = &loaded.sessions[0];
        let ran: Vec<&str> = s.steps.iter().map(|st| s.backend_of(st)).collect();
        assert_eq!(ran, ["db1", "db2", "db1"]);
        assert_eq!(s.moves.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
