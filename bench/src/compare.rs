//! The side-by-side table of `bench/compare-etcd.sh`: reads the JSON reports of steward-bench
//! runs (one per line, both targets), pairs steward and etcd by (workload, clients), and renders
//! one row per pair with the ratios steward/etcd. Pure: the `steward-bench-compare` binary reads
//! the file and prints.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The fields of a report the table needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub workload: String,
    pub target: String,
    pub clients: usize,
    pub ops_per_s: f64,
    pub latency_ms: RunLatency,
    pub errors_total: u64,
    pub servers: Option<RunServers>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunLatency {
    pub p99: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunServers {
    pub cpu_pct: f64,
    pub peak_rss_mib: f64,
}

/// Parses JSON lines (blank lines skipped); the error names the line.
pub fn parse_runs(text: &str) -> Result<Vec<Run>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The order rows appear in: the workloads as in the README, then anything else by name.
fn workload_rank(w: &str) -> usize {
    const ORDER: [&str; 8] = [
        "create",
        "update",
        "get",
        "get-serializable",
        "list",
        "lock",
        "lock-contended",
        "watch",
    ];
    ORDER.iter().position(|o| *o == w).unwrap_or(ORDER.len())
}

/// The steward and the etcd run of a (workload, clients); either may be missing.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub steward: Option<Run>,
    pub etcd: Option<Run>,
}

/// Rows in table order, keyed by (order of the workload, workload, clients); the last run of a
/// target counts if there are several.
pub fn pair(runs: &[Run]) -> BTreeMap<(usize, String, usize), Row> {
    let mut rows: BTreeMap<(usize, String, usize), Row> = BTreeMap::new();
    for r in runs {
        let key = (workload_rank(&r.workload), r.workload.clone(), r.clients);
        let row = rows.entry(key).or_default();
        match r.target.as_str() {
            "etcd" => row.etcd = Some(r.clone()),
            _ => row.steward = Some(r.clone()),
        }
    }
    rows
}

const HEADER: [&str; 14] = [
    "WORKLOAD",
    "CLIENTS",
    "STEWARD-OPS/S",
    "ETCD-OPS/S",
    "RATIO",
    "STEWARD-P99-MS",
    "ETCD-P99-MS",
    "RATIO",
    "STEWARD-RSS-MIB",
    "ETCD-RSS-MIB",
    "RATIO",
    "STEWARD-CPU%",
    "ETCD-CPU%",
    "ERRORS(S/E)",
];

fn cells(w: &str, clients: usize, s: Option<&Run>, e: Option<&Run>) -> Vec<String> {
    let num = |r: Option<&Run>, f: &dyn Fn(&Run) -> Option<f64>, digits: usize| {
        r.and_then(f)
            .map(|v| format!("{v:.digits$}"))
            .unwrap_or_else(|| "-".into())
    };
    let ratio = |f: &dyn Fn(&Run) -> Option<f64>| match (s.and_then(f), e.and_then(f)) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    let ops = |r: &Run| Some(r.ops_per_s);
    let p99 = |r: &Run| Some(r.latency_ms.p99);
    let rss = |r: &Run| r.servers.as_ref().map(|s| s.peak_rss_mib);
    let cpu = |r: &Run| r.servers.as_ref().map(|s| s.cpu_pct);
    let errors = |r: Option<&Run>| r.map(|r| r.errors_total.to_string()).unwrap_or("-".into());
    vec![
        w.to_string(),
        clients.to_string(),
        num(s, &ops, 0),
        num(e, &ops, 0),
        ratio(&ops),
        num(s, &p99, 2),
        num(e, &p99, 2),
        ratio(&p99),
        num(s, &rss, 1),
        num(e, &rss, 1),
        ratio(&rss),
        num(s, &cpu, 0),
        num(e, &cpu, 0),
        format!("{}/{}", errors(s), errors(e)),
    ]
}

/// Aligned columns (the steward CLI's style), or a Markdown table for the README.
pub fn render(runs: &[Run], markdown: bool) -> String {
    let mut rows = vec![HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for ((_, w, c), row) in pair(runs) {
        rows.push(cells(&w, c, row.steward.as_ref(), row.etcd.as_ref()));
    }
    let mut out = String::new();
    if markdown {
        for (i, row) in rows.iter().enumerate() {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
            if i == 0 {
                out.push_str(&format!("|{}\n", "---|".repeat(row.len())));
            }
        }
        return out;
    }
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(target: &str, workload: &str, clients: usize, ops: f64, p99: f64) -> String {
        format!(
            r#"{{"workload":"{workload}","target":"{target}","clients":{clients},"ops_per_s":{ops},"latency_ms":{{"p50":1.0,"p99":{p99}}},"errors_total":0,"errors":{{}},"servers":{{"cpu_pct":150.0,"peak_rss_mib":{rss},"cpu_s":1.0,"pids":[1],"peak_rss_reset":true}}}}"#,
            rss = if target == "etcd" { 60.0 } else { 30.0 }
        )
    }

    #[test]
    fn pairs_by_workload_and_clients_with_ratios() {
        let text = [
            line("etcd", "get", 64, 5000.0, 10.0),
            line("steward", "create", 64, 8000.0, 20.0),
            line("etcd", "create", 64, 4000.0, 40.0),
            String::new(),
            line("steward", "create", 1, 500.0, 2.0),
            line("steward", "watch", 64, 9000.0, 5.0),
        ]
        .join("\n");
        let runs = parse_runs(&text).unwrap();
        let t = render(&runs, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        assert!(lines[0].starts_with("WORKLOAD   CLIENTS   STEWARD-OPS/S"));
        let create64: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            create64,
            [
                "create", "64", "8000", "4000", "2.00", "20.00", "40.00", "0.50", "30.0", "60.0",
                "0.50", "150", "150", "0/0"
            ]
        );
        assert!(lines[1].starts_with("create     1 "), "{t}");
        assert!(lines[3].starts_with("get "), "{t}");
        assert!(lines[3].contains("   -   "), "no steward get: {t}");
        assert!(lines[4].starts_with("watch "), "{t}");
    }

    #[test]
    fn markdown_has_a_separator_row() {
        let runs = parse_runs(&line("steward", "lock", 16, 100.0, 3.0)).unwrap();
        let md = render(&runs, true);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("| WORKLOAD | CLIENTS |"));
        assert_eq!(lines[1], format!("|{}", "---|".repeat(14)));
        assert!(lines[2].starts_with("| lock | 16 | 100 | - | - |"));
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse_runs("\n{\"workload\":1}\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
