//! A latency-over-time plot (SVG) with the fault windows shaded, so a person can see what a run
//! did: one dot per operation at its invoke time, height = latency (log scale), green ok, red
//! failed, grey unknown.

use std::fmt::Write;

use crate::history::Outcome;

pub struct Point {
    pub invoke_ns: u64,
    pub latency_ns: u64,
    pub outcome: Outcome,
}

/// `faults`: (start_ns, end_ns, label).
pub fn svg(points: &[Point], faults: &[(u64, u64, String)], title: &str) -> String {
    let (w, h, left, bottom) = (1200.0f64, 500.0f64, 70.0f64, 40.0f64);
    let t_max = points
        .iter()
        .map(|p| p.invoke_ns)
        .chain(faults.iter().map(|f| f.1))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let (lat_min, lat_max) = (1e5f64.ln(), 1e10f64.ln()); // 0.1 ms .. 10 s
    let x = |t: f64| left + (w - left - 10.0) * t / t_max;
    let y = |ns: f64| {
        let v = ns.clamp(1e5, 1e10).ln();
        (h - bottom) - (h - bottom - 20.0) * (v - lat_min) / (lat_max - lat_min)
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{w}" height="{h}" fill="white"/><text x="{left}" y="14">{}</text>"#,
        escape(title)
    );
    for (i, (a, b, label)) in faults.iter().enumerate() {
        let (xa, xb) = (x(*a as f64), x(*b as f64));
        let _ = writeln!(
            s,
            r#"<rect x="{xa:.1}" y="20" width="{:.1}" height="{:.1}" fill="orange" fill-opacity="0.2"/><text x="{xa:.1}" y="{}" fill="darkorange">{}</text>"#,
            (xb - xa).max(1.0),
            h - bottom - 20.0,
            32 + (i % 3) * 12,
            escape(label)
        );
    }
    for (ms, label) in [
        (1e6, "1ms"),
        (1e7, "10ms"),
        (1e8, "100ms"),
        (1e9, "1s"),
        (1e10, "10s"),
    ] {
        let yy = y(ms);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{w}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="5" y="{yy:.1}">{label}</text>"##
        );
    }
    for p in points {
        let color = match p.outcome {
            Outcome::Ok => "green",
            Outcome::Fail => "red",
            Outcome::Unknown => "grey",
        };
        let _ = writeln!(
            s,
            r#"<circle cx="{:.1}" cy="{:.1}" r="1.2" fill="{color}"/>"#,
            x(p.invoke_ns as f64),
            y(p.latency_ns as f64)
        );
    }
    let secs = t_max / 1e9;
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{}">0 s</text><text x="{}" y="{}">{secs:.0} s</text>"#,
        h - 10.0,
        w - 50.0,
        h - 10.0
    );
    s.push_str("</svg>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
