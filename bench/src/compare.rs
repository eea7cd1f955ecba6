//! The side-by-side table of `bench/compare-etcd.sh`: reads the JSON reports of steward-bench
//! runs (one per line, both systems, several repetitions of each cell), groups them by
//! (workload, the API steward was driven through, clients, value size), and renders one row per
//! cell: for each system the median and the range (min-max) over its repetitions of throughput,
//! p50, p99 and server CPU per operation, and the ratios steward/etcd of the medians. Above the
//! table, what each workload does on each system and how many bytes each object holds. Pure:
//! the `steward-bench-compare` binary reads the file and prints.
//!
//! The script adds two fields to each report: `system` (which system served the run, since
//! with `--api etcd` both systems' reports say `"target":"etcd"`) and `steward_api` (`steward`
//! or `etcd`: the API steward was driven through in that comparison, on both systems' runs, so
//! the cells of the two modes stay apart). Reports without them count as before they existed:
//! the system is the `target`, the API steward's own.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::names::{self, RunId, StoredMeta};

/// The fields of a report the table needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub workload: String,
    pub target: String,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub steward_api: Option<String>,
    pub clients: usize,
    pub value_size: usize,
    pub ops: u64,
    pub ops_per_s: f64,
    pub latency_ms: RunLatency,
    pub errors_total: u64,
    pub servers: Option<RunServers>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunLatency {
    pub p50: f64,
    pub p99: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunServers {
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
}

impl Run {
    /// `steward` or `etcd`: which system served the run.
    pub fn system(&self) -> &str {
        self.system.as_deref().unwrap_or(&self.target)
    }

    /// `steward` or `etcd`: the API steward was driven through in the run's comparison.
    pub fn steward_api(&self) -> &str {
        self.steward_api.as_deref().unwrap_or("steward")
    }
}

/// Parses JSON lines (blank lines skipped); the error names the line.
pub fn parse_runs(text: &str) -> Result<Vec<Run>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// What a workload does on each API.
struct Operation {
    workload: &'static str,
    /// On steward's own API; None for the etcd-only workloads.
    steward: Option<&'static str>,
    /// On etcd's v3 API: etcd's, and steward's through its etcd endpoint (`--api etcd`).
    etcd: &'static str,
    /// How the two differ when steward runs on its own API (None: the same operation, one
    /// request each).
    differs: Option<&'static str>,
}

/// The workloads in README order.
const OPERATIONS: [Operation; 10] = [
    Operation {
        workload: "create",
        steward: Some("Create (fails if the object exists)"),
        etcd: "Txn: Put if the key's create_revision is 0 (absent), as an apiserver creates",
        differs: None,
    },
    Operation {
        workload: "update",
        steward: Some("Update with the last resourceVersion as precondition"),
        etcd: "Txn: Put if the key's mod_revision is the last update's",
        differs: None,
    },
    Operation {
        workload: "txn",
        steward: None,
        etcd: "Txn over the client's 2 keys: if both mod_revisions are the last written, Put \
               both, else Range both (an apiserver's OptimisticPut, over two keys)",
        differs: None,
    },
    Operation {
        workload: "get",
        steward: Some("Get, linearizable"),
        etcd: "Range of the key, linearizable",
        differs: None,
    },
    Operation {
        workload: "get-serializable",
        steward: Some("Get, serializable"),
        etcd: "Range of the key, serializable",
        differs: None,
    },
    Operation {
        workload: "list",
        steward: Some("List by label selector: 100 of the 200 objects of a namespace"),
        etcd: "Range of the 200 keys of a prefix, the same label filter in the bench client",
        differs: Some(
            "steward filters on the server, etcd returns all 200 and the client filters \
             (as a Kubernetes apiserver does); the filtering counts in etcd's latency, not in \
             its CPU/OP",
        ),
    },
    Operation {
        workload: "lock",
        steward: Some("Acquire WRITE + Release, own lock per client"),
        etcd: "Lock (under a lease per client) + Unlock, own lock per client",
        differs: None,
    },
    Operation {
        workload: "lock-contended",
        steward: Some("Acquire WRITE + Release, one lock for all clients"),
        etcd: "Lock (under a lease per client) + Unlock, one lock for all clients",
        differs: None,
    },
    Operation {
        workload: "lease-keep-alive",
        steward: None,
        etcd: "KeepAlive of the client's lease on its own LeaseKeepAlive stream, one answered",
        differs: None,
    },
    Operation {
        workload: "watch",
        steward: Some(
            "one writer Creates, every client Watches the namespace; an op is one delivery \
             (a write to a watcher), timed from the write's send to the watcher's receipt",
        ),
        etcd: "one writer Puts if absent (Txn), every client Watches the run's key prefix; an \
               op is one delivery (a write to a watcher), timed from the write's send to the \
               watcher's receipt",
        differs: None,
    },
];

/// The order rows appear in: the workloads as in [`OPERATIONS`], then anything else by name.
fn workload_rank(w: &str) -> usize {
    OPERATIONS
        .iter()
        .position(|o| o.workload == w)
        .unwrap_or(OPERATIONS.len())
}

/// Bytes of the document each object holds on both systems at `value_size`: steward stores
/// this JSON, and etcd's value is the same document ([`names::stored_json`]); names and
/// revisions vary by a few bytes from object to object.
pub fn object_bytes(value_size: usize) -> usize {
    let ns = RunId::from_parts(0, 0).namespace();
    let meta = StoredMeta::new(0, 0, 10_000, 1);
    names::stored_json(
        &ns,
        &names::created_name(0, 0),
        false,
        value_size,
        None,
        &meta,
    )
    .len()
}

/// The steward and the etcd runs (repetitions) of one cell; either may be empty.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    pub steward: Vec<Run>,
    pub etcd: Vec<Run>,
}

/// Where a cell is in the table: (order of the workload, workload, the API steward was driven
/// through, clients, value size).
pub type CellKey = (usize, String, String, usize, usize);

/// Cells in table order.
pub fn group(runs: &[Run]) -> BTreeMap<CellKey, Cell> {
    let mut cells: BTreeMap<CellKey, Cell> = BTreeMap::new();
    for r in runs {
        let key = (
            workload_rank(&r.workload),
            r.workload.clone(),
            r.steward_api().to_string(),
            r.clients,
            r.value_size,
        );
        let cell = cells.entry(key).or_default();
        match r.system() {
            "etcd" => cell.etcd.push(r.clone()),
            _ => cell.steward.push(r.clone()),
        }
    }
    cells
}

/// The median and the range of one figure over a cell's repetitions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// None for no values (or a NaN among them: a figure that cannot be ordered is no figure).
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }

    /// Whether the two ranges share a value: then the ratio of the medians is within the
    /// noise of these repetitions.
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }

    fn show(&self, digits: usize) -> String {
        format!(
            "{:.digits$} [{:.digits$}-{:.digits$}]",
            self.median, self.min, self.max
        )
    }
}

/// One figure of a run; None where the run lacks it (no `--server-pids`, no successful op).
type Figure = fn(&Run) -> Option<f64>;

fn ops_per_s(r: &Run) -> Option<f64> {
    Some(r.ops_per_s)
}

fn p50(r: &Run) -> Option<f64> {
    (r.ops > 0).then_some(r.latency_ms.p50)
}

fn p99(r: &Run) -> Option<f64> {
    (r.ops > 0).then_some(r.latency_ms.p99)
}

/// Server CPU per successful operation, microseconds (all three servers' user + system time).
fn cpu_us_per_op(r: &Run) -> Option<f64> {
    let s = r.servers.as_ref()?;
    (r.ops > 0).then(|| s.cpu_s * 1e6 / r.ops as f64)
}

fn rss(r: &Run) -> Option<f64> {
    r.servers.as_ref().map(|s| s.peak_rss_mib)
}

/// The spread of `f` over `runs`; None if any run lacks it.
fn spread(runs: &[Run], f: Figure) -> Option<Spread> {
    let values: Option<Vec<f64>> = runs.iter().map(f).collect();
    Spread::of(&values?)
}

const HEADER: [&str; 20] = [
    "WORKLOAD",
    "STEWARD-API",
    "CLIENTS",
    "VALUE-B",
    "RUNS(S/E)",
    "STEWARD-OPS/S",
    "ETCD-OPS/S",
    "RATIO",
    "STEWARD-P50-MS",
    "ETCD-P50-MS",
    "RATIO",
    "STEWARD-P99-MS",
    "ETCD-P99-MS",
    "RATIO",
    "STEWARD-CPU-US/OP",
    "ETCD-CPU-US/OP",
    "RATIO",
    "STEWARD-RSS-MIB",
    "ETCD-RSS-MIB",
    "ERRORS(S/E)",
];

fn cells(w: &str, api: &str, clients: usize, value_size: usize, cell: &Cell) -> Vec<String> {
    let (s, e) = (&cell.steward, &cell.etcd);
    let mut out = vec![
        w.to_string(),
        api.to_string(),
        clients.to_string(),
        object_bytes(value_size).to_string(),
        format!("{}/{}", s.len(), e.len()),
    ];
    for (f, digits) in [
        (ops_per_s as Figure, 0),
        (p50, 2),
        (p99, 2),
        (cpu_us_per_op, 0),
    ] {
        let (a, b) = (spread(s, f), spread(e, f));
        let show = |x: Option<Spread>| x.map(|x| x.show(digits)).unwrap_or_else(|| "-".into());
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b.median > 0.0 => {
                let mark = if a.overlaps(&b) { "~" } else { "" };
                format!("{:.2}{mark}", a.median / b.median)
            }
            _ => "-".into(),
        };
        out.extend([show(a), show(b), ratio]);
    }
    for runs in [s, e] {
        out.push(
            spread(runs, rss)
                .map(|x| format!("{:.1}", x.median))
                .unwrap_or_else(|| "-".into()),
        );
    }
    let errors = |runs: &[Run]| -> String {
        if runs.is_empty() {
            "-".into()
        } else {
            runs.iter().map(|r| r.errors_total).sum::<u64>().to_string()
        }
    };
    out.push(format!("{}/{}", errors(s), errors(e)));
    out
}

/// What the columns mean and what each workload in `runs` does on each system: the lines
/// above the table.
pub fn legend(runs: &[Run]) -> Vec<String> {
    let mut lines = vec![
        "Each figure is the median [min-max] over a cell's runs (RUNS: how many per system). \
         RATIO = steward/etcd of the medians; above 1 favours steward in OPS/S, below 1 in \
         P50, P99 and CPU/OP; '~' after a ratio: the two ranges overlap, so these runs do not \
         tell the systems apart on that figure."
            .to_string(),
        "CPU-US/OP: the three servers' CPU time (user + system) per successful operation, \
         microseconds; RSS-MIB: the sum of their peak resident sets, median."
            .to_string(),
        "VALUE-B: bytes of each object on both systems: the JSON document steward stores, \
         also written as etcd's value (metadata filled in by the client, as an apiserver does)."
            .to_string(),
        "STEWARD-API: the API steward was driven through. etcd: its etcd v3 endpoint (at its \
         client ports), by the very same steward-bench etcd client (--target etcd) as etcd, so \
         both systems get the same requests; steward: its own API (--target steward), with the \
         matching etcd operations on etcd."
            .to_string(),
    ];
    let mut present: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| (r.workload.as_str(), r.steward_api()))
        .collect();
    present.sort_by_key(|(w, api)| (*api, workload_rank(w), *w));
    present.dedup();
    let mut heading = "";
    for (w, api) in present {
        if api != heading {
            heading = api;
            lines.push(match api {
                "etcd" => "Operations with STEWARD-API etcd (the same on both):".to_string(),
                _ => format!("Operations with STEWARD-API {api} (steward | etcd):"),
            });
        }
        let Some(op) = OPERATIONS.iter().find(|o| o.workload == w) else {
            lines.push(format!("  {w}: (no etcd counterpart described)"));
            continue;
        };
        if api == "etcd" {
            lines.push(format!("  {w}: {}", op.etcd));
            continue;
        }
        let steward = op.steward.unwrap_or("(none on steward's own API)");
        lines.push(format!("  {w}: {steward} | {}", op.etcd));
        if let Some(d) = op.differs {
            lines.push(format!("    differs: {d}"));
        }
    }
    lines
}

/// The legend, then aligned columns (the steward CLI's style), or both as Markdown for the
/// README.
pub fn render(runs: &[Run], markdown: bool) -> String {
    let mut rows = vec![HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for ((_, w, api, c, v), cell) in group(runs) {
        rows.push(cells(&w, &api, c, v, &cell));
    }
    let mut out = String::new();
    for line in legend(runs) {
        if markdown && line.starts_with("    ") {
            out.push_str(&format!("  - {}\n", line.trim_start()));
        } else if markdown && line.starts_with("  ") {
            out.push_str(&format!("- {}\n", line.trim_start()));
        } else if markdown {
            out.push_str(&format!("{line}\n\n"));
        } else {
            out.push_str(&format!("{line}\n"));
        }
    }
    out.push('\n');
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

    fn line(target: &str, workload: &str, clients: usize, ops_s: f64, p99: f64) -> String {
        format!(
            r#"{{"workload":"{workload}","target":"{target}","clients":{clients},"value_size":256,"ops":{ops},"ops_per_s":{ops_s},"latency_ms":{{"p50":{p50},"p99":{p99}}},"errors_total":0,"errors":{{}},"servers":{{"cpu_pct":150.0,"peak_rss_mib":{rss},"cpu_s":{cpu_s},"pids":[1],"peak_rss_reset":true}}}}"#,
            ops = ops_s as u64 * 5,
            p50 = p99 / 4.0,
            // 100 us of server CPU per operation.
            cpu_s = ops_s * 5.0 * 1e-4,
            rss = if target == "etcd" { 60.0 } else { 30.0 }
        )
    }

    fn table_rows(t: &str) -> Vec<Vec<&str>> {
        t.lines()
            .skip_while(|l| !l.starts_with("WORKLOAD"))
            .map(|l| {
                l.split("   ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn medians_ranges_and_ratios_over_repetitions() {
        let text = [
            line("steward", "create", 64, 8000.0, 20.0),
            line("etcd", "create", 64, 4000.0, 40.0),
            line("steward", "create", 64, 9000.0, 22.0),
            line("etcd", "create", 64, 3000.0, 50.0),
            line("steward", "create", 64, 7000.0, 30.0),
            line("etcd", "create", 64, 4500.0, 45.0),
            String::new(),
            line("etcd", "get", 64, 5000.0, 10.0),
            line("steward", "create", 1, 500.0, 2.0),
        ]
        .join("\n");
        let runs = parse_runs(&text).unwrap();
        let t = render(&runs, false);
        let rows = table_rows(&t);
        assert_eq!(rows.len(), 4, "{t}");
        assert_eq!(rows[0][0], "WORKLOAD");
        assert_eq!(
            rows[1][..5],
            [
                "create",
                "steward",
                "1",
                &object_bytes(256).to_string(),
                "1/0"
            ]
        );
        let create64 = &rows[2];
        assert_eq!(
            create64[..8],
            [
                "create",
                "steward",
                "64",
                &object_bytes(256).to_string(),
                "3/3",
                "8000 [7000-9000]",
                "4000 [3000-4500]",
                "2.00"
            ],
            "{t}"
        );
        // p50 = p99/4: 5.50 [5.00-7.50] vs 11.25 [10.00-12.50]; p99 22 vs 45.
        assert_eq!(
            create64[8..11],
            ["5.50 [5.00-7.50]", "11.25 [10.00-12.50]", "0.49"]
        );
        assert_eq!(
            create64[11..14],
            ["22.00 [20.00-30.00]", "45.00 [40.00-50.00]", "0.49"]
        );
        // 100 us per op on both sides; the ranges are equal, so the ratio is marked.
        assert_eq!(
            create64[14..17],
            ["100 [100-100]", "100 [100-100]", "1.00~"]
        );
        assert_eq!(create64[17..], ["30.0", "60.0", "0/0"]);
        assert!(
            rows[3][0] == "get" && rows[3][5] == "-",
            "no steward get: {t}"
        );
        assert!(t.contains("  create: Create (fails if the object exists) | Txn: Put if"));
        assert!(t.contains("  get: Get, linearizable | Range"));
        assert!(!t.contains("  list:"), "only the workloads run: {t}");
    }

    /// A run of `--api etcd`: both systems report `"target":"etcd"`; the script adds which
    /// system it was and the API steward was driven through.
    fn etcd_api_line(system: &str, workload: &str, clients: usize, ops_s: f64) -> String {
        let tagged = format!(r#"{{"system":"{system}","steward_api":"etcd","#);
        line("etcd", workload, clients, ops_s, 10.0).replacen('{', &tagged, 1)
    }

    #[test]
    fn steward_through_its_etcd_api_is_its_own_cell_and_labelled() {
        let text = [
            etcd_api_line("steward", "txn", 64, 3000.0),
            etcd_api_line("etcd", "txn", 64, 2000.0),
            etcd_api_line("steward", "create", 64, 5000.0),
            etcd_api_line("etcd", "create", 64, 4000.0),
            // The same cell of a `--api steward` comparison, in the same file.
            line("steward", "create", 64, 8000.0, 20.0),
            line("etcd", "create", 64, 4000.0, 40.0),
        ]
        .join("\n");
        let runs = parse_runs(&text).unwrap();
        assert_eq!(
            (runs[0].system(), runs[0].steward_api()),
            ("steward", "etcd")
        );
        assert_eq!(
            (runs[4].system(), runs[4].steward_api()),
            ("steward", "steward")
        );
        assert_eq!(
            (runs[5].system(), runs[5].steward_api()),
            ("etcd", "steward")
        );
        let t = render(&runs, false);
        let rows = table_rows(&t);
        assert_eq!(rows.len(), 4, "{t}");
        let ops = |r: &[&str]| [r[0], r[1], r[2], r[4], r[5], r[6], r[7]].map(str::to_string);
        assert_eq!(
            ops(&rows[1]),
            [
                "create",
                "etcd",
                "64",
                "1/1",
                "5000 [5000-5000]",
                "4000 [4000-4000]",
                "1.25"
            ],
            "{t}"
        );
        assert_eq!(
            ops(&rows[2]),
            [
                "create",
                "steward",
                "64",
                "1/1",
                "8000 [8000-8000]",
                "4000 [4000-4000]",
                "2.00"
            ],
            "{t}"
        );
        assert_eq!(
            ops(&rows[3]),
            [
                "txn",
                "etcd",
                "64",
                "1/1",
                "3000 [3000-3000]",
                "2000 [2000-2000]",
                "1.50"
            ],
            "{t}"
        );
        assert!(
            t.contains("Operations with STEWARD-API etcd (the same on both):"),
            "{t}"
        );
        assert!(t.contains("\n  txn: Txn over the client's 2 keys"), "{t}");
        assert!(
            t.contains("Operations with STEWARD-API steward (steward | etcd):"),
            "{t}"
        );
        assert!(
            t.contains("\n  create: Create (fails if the object exists) | Txn"),
            "{t}"
        );
    }

    #[test]
    fn etcd_only_workloads_say_so_on_stewards_own_api() {
        let runs = parse_runs(&line("etcd", "lease-keep-alive", 16, 100.0, 3.0)).unwrap();
        let t = render(&runs, false);
        assert!(
            t.contains("  lease-keep-alive: (none on steward's own API) | KeepAlive"),
            "{t}"
        );
    }

    #[test]
    fn spreads_and_overlaps() {
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 10.0));
        let a = Spread::of(&[1.0, 2.0]).unwrap();
        assert!(a.overlaps(&Spread::of(&[2.0, 5.0]).unwrap()));
        assert!(!a.overlaps(&Spread::of(&[2.5, 5.0]).unwrap()));
    }

    #[test]
    fn a_missing_figure_is_a_dash_not_a_zero() {
        // No --server-pids on one etcd run: its CPU/OP is unknown, so the cell's is too.
        let with = line("etcd", "get", 16, 100.0, 3.0);
        let without = with.replace(
            &with[with.find(r#""servers""#).unwrap()..with.len() - 1],
            r#""servers":null"#,
        );
        let runs = parse_runs(&[line("steward", "get", 16, 100.0, 3.0), with, without].join("\n"))
            .unwrap();
        let t = render(&runs, false);
        let row = &table_rows(&t)[1];
        assert_eq!(row[4], "1/2");
        assert_eq!(row[14..17], ["100 [100-100]", "-", "-"], "{t}");
    }

    #[test]
    fn the_list_row_names_how_the_operations_differ() {
        let runs = parse_runs(&line("steward", "list", 16, 100.0, 3.0)).unwrap();
        let t = render(&runs, false);
        assert!(t.contains("  list: List by label selector"), "{t}");
        assert!(
            t.contains("    differs: steward filters on the server"),
            "{t}"
        );
    }

    #[test]
    fn markdown_has_a_separator_row() {
        let runs = parse_runs(&line("steward", "lock", 16, 100.0, 3.0)).unwrap();
        let md = render(&runs, true);
        let lines: Vec<&str> = md.lines().skip_while(|l| !l.starts_with("| ")).collect();
        assert_eq!(lines.len(), 3, "{md}");
        assert!(lines[0].starts_with("| WORKLOAD | STEWARD-API | CLIENTS |"));
        assert_eq!(lines[1], format!("|{}", "---|".repeat(HEADER.len())));
        assert!(lines[2].starts_with("| lock | steward | 16 | "), "{md}");
        assert!(md.contains("\n- lock: Acquire WRITE + Release"), "{md}");
    }

    #[test]
    fn object_bytes_grow_with_the_value_size() {
        assert_eq!(object_bytes(1000) - object_bytes(256), 744);
        assert!(object_bytes(256) > 256 + 150, "{}", object_bytes(256));
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse_runs("\n{\"workload\":1}\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
