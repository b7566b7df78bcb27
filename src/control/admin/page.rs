//! `GET /`: the status page, one server-rendered HTML page over the same JSON as `/backends` and
//! `/queries`, and the samples of `/history`: the backends, for a pool across backends its
//! moves and a drain's progress ([`across`]), a chart of each backend's queries per second and
//! p99 over the last minutes ([`chart`]), and the top queries with each digest's backends side
//! by side ([`queries`]).
//!
//! It is read on the admin listener, often by a DBA's browser on loopback, and shows text that
//! clients chose (query texts, user and schema names): every value is HTML-escaped in one place
//! ([`esc`]), and the response's Content-Security-Policy runs only the page's own inline script
//! and style (a fresh nonce per response), so an escaping slip would still not run a script.
//! Reading needs no JavaScript; the drain/maintenance/ready buttons call the existing operation
//! endpoints with `fetch()`, with the admin token (when one is configured) typed into the page
//! and kept in the tab's `sessionStorage`, never in the page or a URL.

use std::fmt::Write;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use serde_json::Value;

use super::history::Series;
use super::Recent;
use crate::proxy::state::ProxyState;
use crate::telemetry::html::esc;

mod across;
mod chart;
mod queries;

/// Rows of the top-queries table.
pub const QUERY_ROWS: usize = 20;
/// `/queries` rows read to make them: a digest's rows on every backend, for the top ones.
const SOURCE_ROWS: usize = 2000;
/// Characters of a query text shown (the whole digest text is in `/queries`).
const TEXT_CHARS: usize = 400;

/// The page with its headers: HTML, a nonce-based CSP, no sniffing, no caching.
pub(super) fn response(
    state: &ProxyState,
    recent: &Recent,
    token_configured: bool,
) -> Response<Full<Bytes>> {
    let nonce = new_nonce();
    let backends = super::backends_json(state, recent);
    let queries = queries_json_for_page(state, token_configured);
    let body = render(
        &backends,
        &queries,
        &recent.history.series(),
        token_configured,
        &nonce,
    );
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let headers = r.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(csp) = HeaderValue::from_str(&content_security_policy(&nonce)) {
        headers.insert("content-security-policy", csp);
    }
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    r
}

/// The rows the top queries are grouped from: `GET /queries?sort=total&limit=2000`, with the sample texts
/// (the literals a client sent) only when `/queries` would show them to this caller, that is
/// when no admin token is configured (a browser's GET carries none).
fn queries_json_for_page(state: &ProxyState, token_configured: bool) -> Value {
    match super::queries::parse_params(Some(&format!("sort=total&limit={SOURCE_ROWS}"))) {
        Ok(params) => super::queries::render(&state.digests.snapshot(), &params, !token_configured),
        Err(e) => serde_json::json!({ "enabled": true, "queries": [], "error": e }),
    }
}

/// Only the page's own script and style (by nonce), requests to this endpoint, no framing.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    )
}

/// 128 random bits in hex; from the clock if the system has no randomness to give.
fn new_nonce() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().fold(String::with_capacity(32), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A JSON value as escaped cell text: strings bare, null as a dash.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".to_owned(),
        Value::String(s) => esc(s),
        other => esc(&other.to_string()),
    }
}

/// Seconds as milliseconds with two decimals; a dash when absent.
fn ms(v: &Value) -> String {
    v.as_f64()
        .filter(|s| s.is_finite())
        .map_or_else(|| "–".to_owned(), |s| format!("{:.2}", s * 1000.0))
}

/// The first `n` characters of `s`, with an ellipsis when cut.
fn truncated(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// A CSS class chosen from a fixed set, never the value itself.
fn state_class(state: &Value) -> &'static str {
    match state.as_str() {
        Some("up") => "up",
        Some("down") => "down",
        Some("ready") => "ready",
        Some("draining") => "draining",
        Some("maintenance") => "maintenance",
        _ => "other",
    }
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d232a;background:#fafbfc}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}
header p{margin:0;color:#555}a{color:#0b5cad}
table{border-collapse:collapse;background:#fff;box-shadow:0 0 0 1px #d8dde3}
th,td{padding:.3em .6em;border-bottom:1px solid #e6e9ed;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600;white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.sql{font-family:ui-monospace,monospace;font-size:.92em;max-width:48em;word-break:break-word}
.up{color:#147a2e;font-weight:600}.down{color:#b3261e;font-weight:600}
.draining,.maintenance{color:#9a5b00;font-weight:600}.other-row td{color:#666;font-style:italic}
button{margin-right:.3em;font:inherit;padding:.1em .6em;cursor:pointer}
#result{min-height:1.4em;font-weight:600}.off{color:#666}
#token-box{margin:.8em 0}#token-box small{color:#666}
th.backend{text-align:center}.first{border-left:1px solid #d8dde3}
td.slowest{color:#b3261e;font-weight:700}.note{margin:.2em 0 .5em;color:#555}
#chart{margin:0;display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}
#chart figcaption{flex-basis:100%}.legend{list-style:none;margin:0;padding:0;display:flex;gap:1.2em}
";

const SCRIPT: &str = r#"
(function () {
  "use strict";
  var TOKEN = "mysql-lb-admin-token", NOTE = "mysql-lb-result";
  var result = document.getElementById("result");
  var note = sessionStorage.getItem(NOTE);
  if (note) { result.textContent = note; sessionStorage.removeItem(NOTE); }
  var input = document.getElementById("token");
  var tokenState = document.getElementById("token-state");
  function showToken() {
    if (tokenState) {
      tokenState.textContent = sessionStorage.getItem(TOKEN) ? "token set for this tab" : "no token set";
    }
  }
  if (input) {
    input.addEventListener("change", function () {
      if (input.value) { sessionStorage.setItem(TOKEN, input.value); } else { sessionStorage.removeItem(TOKEN); }
      input.value = "";
      showToken();
    });
  }
  showToken();
  function operate(name, op) {
    var headers = {};
    var token = sessionStorage.getItem(TOKEN);
    if (token) { headers.Authorization = "Bearer " + token; }
    var what = op + " " + name;
    result.textContent = what + " …";
    fetch("/backends/" + encodeURIComponent(name) + "/" + op,
          { method: "POST", headers: headers, credentials: "omit", cache: "no-store" })
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (body) {
          if (r.ok) {
            sessionStorage.setItem(NOTE, what + ": now " + body.admin_state);
            location.reload();
          } else {
            result.textContent = what + " refused (" + r.status + "): " + (body.error || r.statusText);
          }
        });
      })
      .catch(function (e) { result.textContent = what + " failed: " + e; });
  }
  var buttons = document.querySelectorAll("button[data-op]");
  for (var i = 0; i < buttons.length; i++) {
    buttons[i].addEventListener("click", function (event) {
      var b = event.currentTarget;
      operate(b.getAttribute("data-backend"), b.getAttribute("data-op"));
    });
  }
})();
"#;

/// The whole page for `backends` (as `GET /backends` returns it), `queries` (as `GET /queries`
/// does) and `history` (the samples of `GET /history`), with `nonce` on its script and style.
pub fn render(
    backends: &Value,
    queries: &Value,
    history: &[Series],
    token_configured: bool,
    nonce: &str,
) -> String {
    let nonce = esc(nonce);
    let list = backends["backends"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let up = list.iter().filter(|b| b["state"] == "up").count();
    let mut p = String::with_capacity(16 * 1024);
    p.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    p.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    p.push_str("<title>mysql-lb status</title>\n<link rel=\"icon\" href=\"data:,\">\n");
    let _ = writeln!(p, "<style nonce=\"{nonce}\">{STYLE}</style>\n</head><body>");
    let _ = writeln!(
        p,
        "<header><h1>mysql-lb</h1><p>instance {} · {up} of {} backend(s) up · \
         <a href=\"/\">refresh</a> · JSON: <a href=\"/backends\">/backends</a> \
         <a href=\"/queries\">/queries</a> · <a href=\"/metrics\">/metrics</a></p></header>",
        cell(&backends["instance_id"]),
        list.len()
    );
    p.push_str(
        "<noscript><p>Reading needs no JavaScript; the buttons do (or use the operation \
         endpoints with curl).</p></noscript>\n",
    );
    if token_configured {
        p.push_str(
            "<p id=\"token-box\"><label>Admin token <input type=\"password\" id=\"token\" \
             autocomplete=\"off\"></label> <span id=\"token-state\"></span> <small>kept in this \
             tab's session storage only; operations need it</small></p>\n",
        );
    }
    p.push_str("<p id=\"result\" role=\"status\"></p>\n");
    backends_table(&mut p, list);
    across::section(&mut p, list);
    p.push_str(&chart::chart(history));
    let order: Vec<String> = list
        .iter()
        .filter_map(|b| b["name"].as_str().map(str::to_owned))
        .collect();
    queries::section(&mut p, queries, &order);
    let _ = writeln!(
        p,
        "<script nonce=\"{nonce}\">{SCRIPT}</script>\n</body></html>"
    );
    p
}

fn backends_table(p: &mut String, list: &[Value]) {
    // A pool with roles (a replication cluster) adds each backend's role and GTID position.
    let roles = list.iter().any(|b| !b["role"].is_null());
    p.push_str(
        "<h2>Backends</h2>\n<table id=\"backends\"><thead><tr><th>name</th><th>pool</th>\
         <th>address</th><th>state</th><th>admin state</th><th>weight</th><th>sessions</th>\
         <th>p50 ms</th><th>p99 ms</th><th>ejections</th>",
    );
    if roles {
        p.push_str("<th>role</th><th>GTID applied</th>");
    }
    p.push_str("<th>operations</th></tr></thead><tbody>\n");
    for b in list {
        let name = cell(&b["name"]);
        let ejection = &b["ejection"];
        let standing = match ejection["standing"].as_str() {
            Some(s) if s != "in" && s != "none" => format!(" ({})", esc(s)),
            _ => String::new(),
        };
        let _ = write!(
            p,
            "<tr data-backend=\"{name}\"><td>{name}</td><td>{}</td><td>{}</td>\
             <td class=\"{}\">{}</td><td class=\"{}\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}{standing}</td>",
            cell(&b["pool"]),
            cell(&b["address"]),
            state_class(&b["state"]),
            cell(&b["state"]),
            state_class(&b["admin_state"]),
            cell(&b["admin_state"]),
            cell(&b["weight"]),
            cell(&b["active_connections"]),
            ms(&b["recent_p50_seconds"]),
            ms(&b["recent_p99_seconds"]),
            cell(&ejection["ejections"]),
        );
        if roles {
            let writes = if b["takes_writes"] == true {
                " (takes writes)"
            } else {
                ""
            };
            let _ = write!(
                p,
                "<td>{}{writes}</td><td>{}</td>",
                cell(&b["role"]),
                cell(&b["gtid_applied"])
            );
        }
        p.push_str("<td>");
        for op in ["drain", "maintenance", "ready"] {
            let _ = write!(
                p,
                "<button type=\"button\" data-op=\"{op}\" data-backend=\"{name}\">{op}</button>"
            );
        }
        p.push_str("</td></tr>\n");
    }
    p.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests;
