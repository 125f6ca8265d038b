//! A run's timeline as a self-contained SVG: throughput, errors and p99 latency in
//! three panels over one time axis, with the faults shaded across all three.

use std::fmt::Write;

use serde::Serialize;

/// What to draw. Index `i` of each series is the bucket starting at `i * bucket_secs`;
/// the series may have different lengths (missing buckets are not drawn).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timeline {
    pub title: String,
    pub bucket_secs: f64,
    pub ok_per_sec: Vec<f64>,
    pub errors_per_sec: Vec<f64>,
    pub p99_ms: Vec<f64>,
    pub faults: Vec<FaultMark>,
}

/// A fault injected from `start_secs` until `end_secs` (`None`: until the end).
#[derive(Debug, Clone, Serialize)]
pub struct FaultMark {
    pub label: String,
    pub start_secs: f64,
    pub end_secs: Option<f64>,
}

const WIDTH: f64 = 960.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 70.0;
const PANEL_H: f64 = 150.0;
const GAP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const FAULT_LABEL_ROWS: usize = 3;

/// The SVG document (starts with `<svg`, ends with `</svg>`). Non-finite or negative
/// values are drawn as 0; a non-positive `bucket_secs` is taken as 1.
pub fn svg(t: &Timeline) -> String {
    let bucket = if t.bucket_secs.is_finite() && t.bucket_secs > 0.0 {
        t.bucket_secs
    } else {
        1.0
    };
    let buckets = t
        .ok_per_sec
        .len()
        .max(t.errors_per_sec.len())
        .max(t.p99_ms.len());
    let fault_end = t
        .faults
        .iter()
        .flat_map(|f| [Some(f.start_secs), f.end_secs])
        .flatten()
        .filter(|s| s.is_finite())
        .fold(0.0_f64, f64::max);
    let duration = (buckets as f64 * bucket).max(fault_end);
    let (x_max, x_step) = nice_axis(duration);

    let plot_w = WIDTH - LEFT - RIGHT;
    let height = TOP + 3.0 * PANEL_H + 2.0 * GAP + BOTTOM;
    let x = |secs: f64| LEFT + plot_w * (clean(secs) / x_max).min(1.0);

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    s.push('\n');
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(&t.title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="22" text-anchor="end" fill="#555">bucket {} s; shaded: faults</text>"##,
        WIDTH - RIGHT,
        fmt_num(bucket)
    );

    // Faults: a band through all three panels, its label above the first.
    let bottom = TOP + 3.0 * PANEL_H + 2.0 * GAP;
    for (i, f) in t.faults.iter().enumerate() {
        let x0 = x(f.start_secs);
        let x1 = x(f.end_secs.unwrap_or(x_max)).max(x0 + 1.0);
        let label_y = TOP - 8.0 - 12.0 * (i % FAULT_LABEL_ROWS) as f64;
        let label = escape(&f.label);
        let _ = writeln!(
            s,
            r##"<g class="fault"><title>{label}</title><rect x="{}" y="{}" width="{}" height="{}" fill="#f4a261" fill-opacity="0.25"/><line x1="{x0:.1}" y1="{label_y:.1}" x2="{x0:.1}" y2="{bottom:.1}" stroke="#e76f51" stroke-dasharray="3,3"/><text x="{:.1}" y="{label_y:.1}" fill="#c1440e">{label}</text></g>"##,
            fmt_num(x0),
            fmt_num(TOP),
            fmt_num(x1 - x0),
            fmt_num(bottom - TOP),
            x0 + 3.0,
        );
    }

    let panels: [(&str, &str, &[f64]); 3] = [
        ("throughput (ok ops/s)", "#2a9d8f", &t.ok_per_sec),
        ("errors/s", "#d62828", &t.errors_per_sec),
        ("p99 latency (ms)", "#3a5a9f", &t.p99_ms),
    ];
    for (p, (name, color, series)) in panels.into_iter().enumerate() {
        let top = TOP + p as f64 * (PANEL_H + GAP);
        let (y_max, y_step) = nice_axis(series.iter().copied().map(clean).fold(0.0, f64::max));
        let y = |v: f64| top + PANEL_H * (1.0 - (clean(v) / y_max).min(1.0));
        let _ = writeln!(s, r#"<g class="panel">"#);
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{}" width="{}" height="{PANEL_H}" fill="none" stroke="#999"/>"##,
            fmt_num(top),
            fmt_num(plot_w)
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-weight="bold" fill="{color}">{name}</text>"#,
            LEFT + 4.0,
            fmt_num(top - 5.0)
        );
        // y ticks and grid lines
        let mut v = 0.0;
        while v <= y_max + y_step * 1e-9 {
            let yy = fmt_num(y(v));
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yy}" x2="{}" y2="{yy}" stroke="#eee"/><line x1="{}" y1="{yy}" x2="{LEFT}" y2="{yy}" stroke="#999"/><text x="{}" y="{yy}" dy="4" text-anchor="end">{}</text>"##,
                fmt_num(LEFT + plot_w),
                LEFT - 4.0,
                LEFT - 6.0,
                fmt_num(v)
            );
            v += y_step;
        }
        // x ticks (labels on the bottom panel only)
        let mut secs = 0.0;
        while secs <= x_max + x_step * 1e-9 {
            let xx = fmt_num(x(secs));
            let _ = write!(
                s,
                r##"<line x1="{xx}" y1="{}" x2="{xx}" y2="{}" stroke="#999"/>"##,
                fmt_num(top + PANEL_H),
                fmt_num(top + PANEL_H + 4.0)
            );
            if p == 2 {
                let _ = write!(
                    s,
                    r#"<text x="{xx}" y="{}" text-anchor="middle">{}</text>"#,
                    fmt_num(top + PANEL_H + 16.0),
                    fmt_num(secs)
                );
            }
            s.push('\n');
            secs += x_step;
        }
        // the series, one point per bucket at its middle
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let xx = x((i as f64 + 0.5) * bucket);
                format!("{},{}", fmt_num(xx), fmt_num(y(v)))
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            points.join(" ")
        );
        let _ = writeln!(s, "</g>");
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time (s)</text>"#,
        fmt_num(LEFT + plot_w / 2.0),
        fmt_num(height - 12.0)
    );
    s.push_str("\n</svg>");
    s
}

/// Finite and non-negative, else 0.
fn clean(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 {
        v
    } else {
        0.0
    }
}

/// An axis from 0 covering `max`: (end, tick step), the step 1, 2 or 5 times a power
/// of ten, for about five ticks. Never zero, NaN or infinite.
fn nice_axis(max: f64) -> (f64, f64) {
    let max = clean(max);
    if !(1e-9..=1e300).contains(&max) {
        return (1.0, 0.2);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude);
    ((max / step).ceil() * step, step)
}

/// A number for SVG text and attributes: at most two decimals, no trailing zeros.
fn fmt_num(v: f64) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// Text safe inside an element or a double-quoted attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Timeline {
        Timeline {
            title: "partition <primary> & \"friends\"".to_string(),
            bucket_secs: 1.0,
            ok_per_sec: vec![100.0, 120.0, 0.0, 0.0, 95.5, 110.0],
            errors_per_sec: vec![0.0, 0.0, 30.0, 12.0, 0.0, 0.0],
            p99_ms: vec![3.0, 3.2, 1500.0, 900.0, 4.0, 3.1],
            faults: vec![
                FaultMark {
                    label: "kill <shard-0> & restart".to_string(),
                    start_secs: 2.0,
                    end_secs: Some(4.0),
                },
                FaultMark {
                    label: "clock skew".to_string(),
                    start_secs: 5.0,
                    end_secs: None,
                },
            ],
        }
    }

    /// A minimal well-formedness check: tags balance, attributes are quoted, and no
    /// raw `<` or stray `&` in text or attribute values.
    fn assert_well_formed(doc: &str) {
        assert!(doc.starts_with("<svg"), "{doc}");
        assert!(doc.ends_with("</svg>"), "{doc}");
        let mut stack: Vec<String> = Vec::new();
        let mut rest = doc;
        while let Some(lt) = rest.find('<') {
            check_text(&rest[..lt]);
            let gt = rest[lt..].find('>').expect("unclosed tag") + lt;
            let tag = &rest[lt + 1..gt];
            assert!(!tag.contains('<'), "'<' inside tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else {
                let self_closing = tag.ends_with('/');
                let body = tag.trim_end_matches('/');
                let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
                let (name, mut attrs) = body.split_at(name_end);
                assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()));
                loop {
                    attrs = attrs.trim_start();
                    if attrs.is_empty() {
                        break;
                    }
                    let eq = attrs.find("=\"").expect("unquoted attribute");
                    let key = &attrs[..eq];
                    assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
                    let value_end = attrs[eq + 2..].find('"').expect("open attribute") + eq + 2;
                    check_text(&attrs[eq + 2..value_end]);
                    attrs = &attrs[value_end + 1..];
                }
                if !self_closing {
                    stack.push(name.to_string());
                }
            }
            rest = &rest[gt + 1..];
            if stack.is_empty() {
                assert!(rest.trim().is_empty(), "content after the root: {rest}");
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    fn check_text(text: &str) {
        assert!(!text.contains('>'), "raw > in {text}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "stray & in {text}"
            );
        }
    }

    fn assert_numbers_finite(doc: &str) {
        for bad in ["NaN", "nan", "inf"] {
            assert!(!doc.contains(bad), "{bad} in {doc}");
        }
    }

    #[test]
    fn draws_three_series_faults_and_escapes_labels() {
        let doc = svg(&sample());
        assert_well_formed(&doc);
        assert_numbers_finite(&doc);
        assert_eq!(doc.matches("<polyline").count(), 3);
        assert!(doc.contains("kill &lt;shard-0&gt; &amp; restart"));
        assert!(!doc.contains("kill <shard-0>"));
        assert!(doc.contains("partition &lt;primary&gt; &amp; &quot;friends&quot;"));
        assert_eq!(doc.matches(r#"<g class="fault">"#).count(), 2);
        for name in ["throughput (ok ops/s)", "errors/s", "p99 latency (ms)"] {
            assert!(doc.contains(name), "{name}");
        }
        // Six points per series, and tick labels on both axes.
        let first = doc.split("points=\"").nth(1).unwrap();
        let points = &first[..first.find('"').unwrap()];
        assert_eq!(points.split(' ').count(), 6);
        assert!(doc.contains(">1500<") || doc.contains(">1600<"), "{doc}");
        assert!(doc.contains(">time (s)<"));
    }

    #[test]
    fn empty_and_all_zero_series() {
        let empty = Timeline {
            title: String::new(),
            bucket_secs: 0.0,
            ..Timeline::default()
        };
        let doc = svg(&empty);
        assert_well_formed(&doc);
        assert_numbers_finite(&doc);
        assert_eq!(doc.matches("<polyline").count(), 3);

        let zeros = Timeline {
            title: "idle".to_string(),
            bucket_secs: 0.5,
            ok_per_sec: vec![0.0; 10],
            errors_per_sec: vec![0.0; 10],
            p99_ms: vec![0.0; 10],
            faults: vec![FaultMark {
                label: "nothing".to_string(),
                start_secs: 1.0,
                end_secs: Some(1.0),
            }],
        };
        let doc = svg(&zeros);
        assert_well_formed(&doc);
        assert_numbers_finite(&doc);
        assert_eq!(doc.matches("<polyline").count(), 3);
    }

    #[test]
    fn non_finite_values_are_drawn_as_zero() {
        let t = Timeline {
            title: "odd".to_string(),
            bucket_secs: f64::NAN,
            ok_per_sec: vec![f64::NAN, f64::INFINITY, -3.0, 5.0],
            errors_per_sec: vec![f64::NEG_INFINITY],
            p99_ms: vec![1e308, 2.0],
            faults: vec![FaultMark {
                label: "x".to_string(),
                start_secs: f64::NAN,
                end_secs: Some(f64::INFINITY),
            }],
        };
        let doc = svg(&t);
        assert_well_formed(&doc);
        assert_numbers_finite(&doc);
    }

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
        assert_eq!(nice_axis(f64::NAN), (1.0, 0.2));
        assert_eq!(nice_axis(100.0), (100.0, 20.0));
        assert_eq!(nice_axis(1234.0), (1500.0, 500.0));
        assert_eq!(nice_axis(7.0), (8.0, 2.0));
        assert_eq!(fmt_num(1.5), "1.5");
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(-0.0001), "0");
    }
}
