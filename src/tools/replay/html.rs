//! The report as one self-contained HTML page: a summary, two inline SVG charts (commands per
//! second captured against replayed; p50 and p95 latency of the top digests, captured against
//! replayed) and the digest table. No script, no external asset: it opens anywhere, offline.

use std::fmt::Write as _;

use super::report::Report;
use crate::telemetry::html::esc;

/// Digests drawn in the latency chart.
const CHART_DIGESTS: usize = 10;
const CAPTURED: &str = "#4c78a8";
const REPLAYED: &str = "#f58518";

/// Commands per second over time, one line per run.
fn throughput_svg(r: &Report) -> String {
    let (w, h, pad) = (720.0, 240.0, 40.0);
    let seconds = r
        .captured_per_second
        .len()
        .max(r.replayed_per_second.len())
        .max(2);
    let top = r
        .captured_per_second
        .iter()
        .chain(&r.replayed_per_second)
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let x = |i: usize| pad + (w - 2.0 * pad) * i as f64 / (seconds - 1) as f64;
    let y = |v: u64| h - pad - (h - 2.0 * pad) * v as f64 / top;
    let line = |series: &[u64], color: &str, name: &str| {
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect();
        format!(
            r#"<polyline class="series" data-series="{name}" fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        )
    };
    let mut svg = format!(
        r#"<svg id="throughput" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="commands per second">"#
    );
    let _ = write!(
        svg,
        r##"<line x1="{pad}" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{b}" stroke="#888"/><text x="{pad}" y="{t}" font-size="11">{top:.0}/s</text><text x="{r}" y="{lb}" font-size="11" text-anchor="end">{s} s</text>"##,
        b = h - pad,
        r = w - pad,
        t = pad - 6.0,
        lb = h - pad + 16.0,
        s = seconds - 1
    );
    svg += &line(&r.captured_per_second, CAPTURED, "captured");
    svg += &line(&r.replayed_per_second, REPLAYED, "replayed");
    svg += "</svg>";
    svg
}

/// p50 and p95 latency of the top digests, captured and replayed side by side.
fn latency_svg(r: &Report) -> String {
    let rows: Vec<_> = r
        .digests
        .iter()
        .filter(|d| d.replayed > 0)
        .take(CHART_DIGESTS)
        .collect();
    let (w, bar_h, label_w) = (720.0, 9.0, 260.0);
    let h = 20.0 + rows.len() as f64 * (4.0 * bar_h + 10.0);
    let top = rows
        .iter()
        .flat_map(|d| [d.captured_us[1], d.replayed_us[1]])
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let len = |us: u64| (w - label_w - 60.0) * us as f64 / top;
    let mut svg = format!(
        r#"<svg id="latency" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="latency per digest">"#
    );
    for (i, d) in rows.iter().enumerate() {
        let y0 = 10.0 + i as f64 * (4.0 * bar_h + 10.0);
        let label: String = d.text.chars().take(40).collect();
        let _ = write!(
            svg,
            r#"<text x="0" y="{:.1}" font-size="10">{} {}</text>"#,
            y0 + 2.0 * bar_h,
            d.kind,
            esc(&label)
        );
        for (j, (us, color, what)) in [
            (d.captured_us[0], CAPTURED, "captured p50"),
            (d.replayed_us[0], REPLAYED, "replayed p50"),
            (d.captured_us[1], CAPTURED, "captured p95"),
            (d.replayed_us[1], REPLAYED, "replayed p95"),
        ]
        .into_iter()
        .enumerate()
        {
            let y = y0 + j as f64 * bar_h;
            let _ = write!(
                svg,
                r#"<rect class="bar" x="{label_w}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}" opacity="{}"><title>{what}: {:.2} ms</title></rect>"#,
                len(us).max(1.0),
                bar_h - 1.0,
                if j < 2 { "1" } else { "0.6" },
                us as f64 / 1000.0
            );
        }
    }
    svg += "</svg>";
    svg
}

pub fn render(r: &Report) -> String {
    let mut page = String::from(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mysql-lb replay report</title><style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}td,th{border-bottom:1px solid #ddd;padding:2px 8px;text-align:right}td.t{text-align:left;font-family:monospace}.warn{color:#b00}.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}</style></head><body>"#,
    );
    let speed = r
        .speed
        .map_or("as fast as possible".to_owned(), |s| format!("{s}×"));
    let _ = write!(
        page,
        "<h1>Replay report</h1><p id=\"summary\">{} of {} commands replayed ({} skipped, {} of them redacted) from {} sessions at {}: {:.1} s captured, {:.1} s replayed, <b>{}</b> new errors.</p>",
        r.replayed_commands, r.captured_commands, r.skipped_commands, r.redacted_commands, r.sessions, esc(&speed),
        r.captured_seconds, r.replay_seconds, r.new_errors
    );
    if r.moves > 0 {
        let _ = write!(
            page,
            "<p id=\"moves\">Captured across backends: {} sessions moved {} times (replayed each on its one connection).</p>",
            r.moved_sessions, r.moves
        );
    }
    if let Some(why) = &r.ended_early {
        let _ = write!(page, "<p class=\"warn\">Ended early: {}</p>", esc(why));
    }
    for d in &r.damaged_files {
        let _ = write!(
            page,
            "<p class=\"warn\">{} stopped at offset {}: {}</p>",
            esc(&d.file),
            d.offset,
            esc(&d.error)
        );
    }
    let key = format!(
        r#"<p class="key"><span style="background:{CAPTURED}"></span>captured<span style="background:{REPLAYED}"></span>replayed</p>"#
    );
    page += "<h2>Commands per second</h2>";
    page += &key;
    page += &throughput_svg(r);
    page += "<h2>Latency of the top digests (p50, then p95)</h2>";
    page += &latency_svg(r);
    page += "<h2>Digests</h2><table id=\"digests\"><tr><th>kind</th><th>captured</th><th>replayed</th><th>skipped</th><th>new errors</th><th>p50 ms captured</th><th>p50 ms replayed</th><th>p95 ms captured</th><th>p95 ms replayed</th><th>p99 ms captured</th><th>p99 ms replayed</th><th>rows differ</th><th>statement</th></tr>";
    for d in &r.digests {
        let ms = |us: u64| format!("{:.2}", us as f64 / 1000.0);
        let error = d
            .first_new_error
            .as_deref()
            .map(|e| format!("<br><span class=\"warn\">{}</span>", esc(e)))
            .unwrap_or_default();
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"t\">{}{}</td></tr>",
            d.kind, d.captured, d.replayed, d.skipped, d.new_errors,
            ms(d.captured_us[0]), ms(d.replayed_us[0]), ms(d.captured_us[1]), ms(d.replayed_us[1]),
            ms(d.captured_us[2]), ms(d.replayed_us[2]), d.rows_differ, esc(&d.text), error
        );
    }
    page += "</table></body></html>\n";
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_texts_are_escaped() {
        assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
    }
}
