//! The page's table of the pools across backends (`pooling.across_backends`): what a DBA
//! watches while sessions move between a pool's backends, above all during a drain.
//!
//! One row per backend of such a pool, from its `/backends` entry: sessions there now,
//! connections taken there (about one per transaction or autocommit statement begun there),
//! transactions moved in, reads retried there, the sessions that cannot move (pinned ones stay
//! until they end; a key whose connections are all there has nowhere to go), and for a backend
//! out of rotation how much is left before it is empty. A page whose pools share no connections
//! across backends has no such table, so it looks as before.

use std::fmt::Write;

use serde_json::Value;

use super::{cell, esc, state_class};

/// Whether `b` (a `/backends` entry) is a backend of a pool across backends.
fn is_across(b: &Value) -> bool {
    b["server_pool"]["across_backends"] == Value::Bool(true)
}

/// How far emptying a backend out of rotation has come; None for one in rotation.
fn drain_progress(b: &Value) -> Option<String> {
    let state = b["admin_state"].as_str()?;
    if !matches!(state, "draining" | "maintenance") {
        return None;
    }
    let pool = &b["server_pool"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let sessions = n(&b["active_connections"]);
    let pinned = n(&pool["pinned_sessions"]);
    let (open, idle) = (n(&pool["open"]), n(&pool["idle"]));
    let in_use = open.saturating_sub(idle);
    let state = esc(state);
    if sessions == 0 && open == 0 {
        return Some(format!("{state}: empty, no session or connection left"));
    }
    let pinned = if pinned > 0 {
        format!(" ({pinned} pinned: they stay until they end)")
    } else {
        String::new()
    };
    Some(format!(
        "{state}: {sessions} session(s) left{pinned}, {in_use} connection(s) in use, \
         {idle} idle connection(s) left"
    ))
}

/// The table, when any backend of `list` belongs to a pool across backends; nothing otherwise.
pub(super) fn section(p: &mut String, list: &[Value]) {
    let rows: Vec<&Value> = list.iter().filter(|b| is_across(b)).collect();
    if rows.is_empty() {
        return;
    }
    p.push_str(
        "<h2>Pools across backends</h2>\n<p class=\"note\">Sessions move between the backends \
         of these pools at transaction boundaries. Pinned sessions stay on their backend until \
         they end; a key whose connections are all on one backend cannot move from it.</p>\n\
         <table id=\"across\"><thead><tr><th>backend</th><th>pool</th><th>sessions</th>\
         <th title=\"connections sessions holding none took here: about one per transaction\">taken</th>\
         <th>moved in</th><th>retried</th><th>pinned sessions</th><th>keys only here</th>\
         <th>out of rotation</th></tr></thead><tbody>\n",
    );
    for b in rows {
        let pool = &b["server_pool"];
        let name = cell(&b["name"]);
        let _ = write!(
            p,
            "<tr data-backend=\"{name}\"><td>{name}</td><td>{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td>",
            cell(&b["pool"]),
            cell(&b["active_connections"]),
            cell(&pool["acquired"]),
            cell(&pool["moved_in"]),
            cell(&pool["retried"]),
            cell(&pool["pinned_sessions"]),
            cell(&pool["keys_only_here"]),
        );
        match drain_progress(b) {
            Some(progress) => {
                let _ = writeln!(
                    p,
                    "<td class=\"{}\">{progress}</td></tr>",
                    state_class(&b["admin_state"])
                );
            }
            None => p.push_str("<td>–</td></tr>\n"),
        }
    }
    p.push_str("</tbody></table>\n");
}
