//! The page's live chart: queries per second and p99 per backend over the last minutes, as
//! inline SVG drawn on the server.
//!
//! Inline SVG needs no script and no external resource, so the page's CSP stays as it is (the
//! colours are presentation attributes from a fixed palette, not style attributes); the page is
//! "live" the way the rest of it is, by reloading. [`chart`] is a pure function of the samples
//! in [`History`](super::super::history::History): one polyline per backend in each panel, axis
//! labels, and a legend whose backend names are escaped.

use std::fmt::Write;

use super::esc;
use crate::control::admin::history::{Point, Series, EVERY, POINTS};

/// Series colours, by the backend's place in the set (the legend says which is which).
pub const PALETTE: [&str; 6] = [
    "#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989",
];

/// One panel's size and its plot area's margins, in SVG user units (pixels at scale 1).
const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 170.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;

/// The shortest time the x axis spans, so a few first samples are not stretched across it.
const MIN_SPAN_MS: u64 = 10_000;

/// Milliseconds the x axis spans, ending at `end`: back to the oldest sample kept (a young
/// process's few minutes fill the width), at least [`MIN_SPAN_MS`], at most every sample kept.
fn span_ms(series: &[Series], end: u64) -> u64 {
    let oldest = series
        .iter()
        .filter_map(|s| s.points.first().map(|p| p.at_unix_ms))
        .min()
        .unwrap_or(end);
    let most = POINTS as u64 * EVERY.as_millis() as u64;
    end.saturating_sub(oldest).clamp(MIN_SPAN_MS, most)
}

/// How far back the left end of the x axis is, for its label.
fn ago(span_ms: u64) -> String {
    if span_ms >= 120_000 {
        format!("−{:.0} min", span_ms as f64 / 60_000.0)
    } else {
        format!("−{:.0} s", span_ms as f64 / 1000.0)
    }
}

/// A panel: what it plots of a [`Point`], its title, its unit.
struct Panel {
    id: &'static str,
    title: &'static str,
    value: fn(&Point) -> Option<f64>,
}

const PANELS: [Panel; 2] = [
    Panel {
        id: "chart-qps",
        title: "queries per second",
        value: |p| Some(p.qps),
    },
    Panel {
        id: "chart-p99",
        title: "p99 ms",
        value: |p| p.p99_seconds.map(|s| s * 1000.0),
    },
];

/// The chart section: both panels and the legend, or an honest "no data yet".
pub fn chart(series: &[Series]) -> String {
    let mut p = String::with_capacity(4096);
    let _ = writeln!(
        p,
        "<h2>Traffic <small>per backend, one sample every {} s, up to the last {:.0} minutes</small></h2>",
        EVERY.as_secs_f64(),
        POINTS as f64 * EVERY.as_secs_f64() / 60.0
    );
    let Some(end) = series
        .iter()
        .filter_map(|s| s.points.last().map(|p| p.at_unix_ms))
        .max()
    else {
        p.push_str(
            "<p class=\"off\" id=\"chart-none\">no data yet: the chart fills in from one sample \
             per backend a second</p>\n",
        );
        return p;
    };
    p.push_str("<figure id=\"chart\">");
    let span = span_ms(series, end);
    for panel in &PANELS {
        svg(&mut p, panel, series, (end, span));
    }
    p.push_str("<figcaption><ul class=\"legend\">");
    for (i, s) in series.iter().enumerate() {
        let _ = write!(
            p,
            "<li><svg width=\"12\" height=\"12\" aria-hidden=\"true\"><rect width=\"12\" \
             height=\"12\" fill=\"{}\"/></svg> {}</li>",
            PALETTE[i % PALETTE.len()],
            esc(&s.backend)
        );
    }
    p.push_str("</ul></figcaption></figure>\n");
    p
}

/// One panel: frame, axis labels, one polyline per series (points where the value is known),
/// over the time `(end, span)`.
fn svg(p: &mut String, panel: &Panel, series: &[Series], (end, span): (u64, u64)) {
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(panel.value))
        .fold(0.0_f64, f64::max);
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let (bottom, right) = (HEIGHT - BOTTOM, WIDTH - RIGHT);
    let _ = write!(
        p,
        "<svg id=\"{}\" class=\"panel\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{}\">\
         <rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#c8ced6\"/>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">{}</text>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">{}</text>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">0</text>\
         <text x=\"{LEFT}\" y=\"{}\" font-size=\"11\" fill=\"#555\">{}</text>\
         <text x=\"{right}\" y=\"{}\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">now</text>",
        panel.id,
        panel.title,
        right - LEFT,
        bottom - TOP,
        (LEFT + right) / 2.0,
        HEIGHT - 4.0,
        panel.title,
        LEFT - 4.0,
        TOP + 9.0,
        label(max),
        LEFT - 4.0,
        bottom,
        HEIGHT - 14.0,
        ago(span),
        HEIGHT - 14.0,
    );
    for (i, s) in series.iter().enumerate() {
        let _ = write!(
            p,
            "<polyline class=\"series\" data-backend=\"{}\" fill=\"none\" stroke=\"{}\" \
             stroke-width=\"2\" points=\"{}\"/>",
            esc(&s.backend),
            PALETTE[i % PALETTE.len()],
            points(&s.points, panel.value, (end, span), max),
        );
    }
    p.push_str("</svg>");
}

/// The polyline's points: time across (`span` ms ending at `end`), value up (0 to `max`).
fn points(
    points: &[Point],
    value: fn(&Point) -> Option<f64>,
    (end, span): (u64, u64),
    max: f64,
) -> String {
    let (w, h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let span = span as f64;
    let start = end as f64 - span;
    let mut out = String::new();
    for pt in points {
        let Some(v) = value(pt) else { continue };
        let x = LEFT + w * ((pt.at_unix_ms as f64 - start) / span).clamp(0.0, 1.0);
        let y = TOP + h - h * (v / max).clamp(0.0, 1.0);
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(out, "{x:.1},{y:.1}");
    }
    out
}

/// An axis maximum, short.
fn label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at_unix_ms: u64, qps: f64, p99_ms: Option<f64>) -> Point {
        Point {
            at_unix_ms,
            qps,
            p99_seconds: p99_ms.map(|ms| ms / 1000.0),
        }
    }

    fn polyline<'a>(svg: &'a str, panel: &str, backend: &str) -> &'a str {
        let panel_at = svg.find(&format!("id=\"{panel}\"")).expect("the panel");
        let tag = format!("data-backend=\"{backend}\"");
        let at = panel_at + svg[panel_at..].find(&tag).expect("the series");
        let from = at + svg[at..].find("points=\"").expect("points") + 8;
        &svg[from..from + svg[from..].find('"').expect("closing quote")]
    }

    #[test]
    fn points_sit_where_their_time_and_value_say() {
        let end = 1_000_000;
        let half = 30_000;
        let series = vec![
            Series {
                backend: "r1".to_owned(),
                points: vec![point(end - half, 50.0, Some(2.0)), point(end, 100.0, None)],
            },
            Series {
                backend: "r2".to_owned(),
                points: vec![point(end, 0.0, Some(8.0))],
            },
        ];
        let svg = chart(&series);
        // Plot area x from 52 to 468 (the oldest sample to the newest), y from 10 (the
        // maximum) down to 144 (zero).
        assert_eq!(polyline(&svg, "chart-qps", "r1"), "52.0,77.0 468.0,10.0");
        assert_eq!(polyline(&svg, "chart-qps", "r2"), "468.0,144.0");
        // No p99 where no statement completed: that sample is left out.
        assert_eq!(polyline(&svg, "chart-p99", "r1"), "52.0,110.5");
        assert_eq!(polyline(&svg, "chart-p99", "r2"), "468.0,10.0");
        assert_eq!(
            svg.matches("<polyline").count(),
            4,
            "one per backend per panel"
        );
        assert!(svg.contains(&format!("stroke=\"{}\"", PALETTE[0])));
        assert!(svg.contains(&format!("stroke=\"{}\"", PALETTE[1])));
        assert!(svg.contains(">100<"), "the qps axis maximum");
        assert!(svg.contains(">8.0<"), "the p99 axis maximum");
        assert!(svg.contains(">−30 s<"), "the left end: the oldest sample");
        // Ten seconds at least; five minutes at most.
        let one = |at| Series {
            backend: "r".to_owned(),
            points: vec![point(at, 1.0, None)],
        };
        assert_eq!(span_ms(&[one(end)], end), MIN_SPAN_MS);
        assert_eq!(span_ms(&[one(0), one(end)], end), 300_000);
        assert_eq!(ago(300_000), "−5 min");
    }

    #[test]
    fn backend_names_are_escaped_in_series_and_legend() {
        let evil = "\"><script>alert(1)</script>";
        let svg = chart(&[Series {
            backend: evil.to_owned(),
            points: vec![point(5, 1.0, Some(1.0))],
        }]);
        assert!(!svg.contains("<script"), "{svg}");
        let escaped = "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;";
        assert_eq!(svg.matches(escaped).count(), 3, "two series and the legend");
    }

    #[test]
    fn no_samples_yet_says_so() {
        for series in [
            vec![],
            vec![Series {
                backend: "r1".to_owned(),
                points: vec![],
            }],
        ] {
            let html = chart(&series);
            assert!(html.contains("id=\"chart-none\""), "{html}");
            assert!(!html.contains("<svg"), "{html}");
        }
    }
}
