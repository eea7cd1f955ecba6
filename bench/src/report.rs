//! What a run measured: each client fills its own [`Recorder`] (no sharing on the hot path), the
//! runner merges them, and [`Report`] is the result in the shape printed as a table or as JSON.
//! Pure: no I/O.
//!
//! JSON fields (`-o json`, one object):
//! - `workload`, `target` (`steward` or `etcd`), `endpoints` (as dialled), `clients`, `conns`, `value_size` (bytes);
//! - `elapsed_s`: from the start signal until the last client finished;
//! - `ops`: successful operations (for `watch`: deliveries, one per watcher per write);
//! - `ops_per_s`: `ops / elapsed_s`;
//! - `latency_ms`: `p50`, `p90`, `p99`, `p99_9`, `max`, `mean` of the successful operations, in
//!   milliseconds (microsecond resolution, 3 significant digits); all 0 when `ops` is 0;
//! - `errors`: count by gRPC code name (`Unavailable`, `Aborted`, ...), plus `WrongResult` (an
//!   answer that was not what the workload expects) and `Missed` (watch: a write a watcher never
//!   received); `errors_total` is their sum;
//! - `writes`: for `watch`, the writes the writer had acknowledged; for `dispatch`, the
//!   acknowledged submits; `null` otherwise;
//! - `servers`: with `--server-pids`, `{pids, cpu_s, cpu_pct, peak_rss_mib, peak_rss_reset}` of
//!   those processes during the measured interval (see `servers`); `null` otherwise;
//! - `warmup`: with `--warmup`, `{s, ops, errors_total}` of the unmeasured warm-up before the
//!   clock started (none of it is in the fields above); `null` otherwise.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::servers::ServerUsage;

/// Highest latency the histogram tracks exactly: 1 hour, in microseconds (higher is clamped).
const LATENCY_US_MAX: u64 = 3_600_000_000;

/// One client's successes (latency histogram, microseconds) and failures (count by code).
#[derive(Debug, Clone)]
pub struct Recorder {
    hist: Histogram<u64>,
    errors: BTreeMap<String, u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            hist: Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid bounds"),
            errors: BTreeMap::new(),
        }
    }
}

impl Recorder {
    pub fn ok(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.hist.saturating_record(us.clamp(1, LATENCY_US_MAX));
    }

    /// Counts one failure under `code` (a gRPC code name, `WrongResult` or `Missed`).
    pub fn error(&mut self, code: &str) {
        self.errors_n(code, 1);
    }

    pub fn errors_n(&mut self, code: &str, n: u64) {
        if n > 0 {
            *self.errors.entry(code.to_string()).or_default() += n;
        }
    }

    pub fn merge(&mut self, other: &Recorder) {
        self.hist.add(&other.hist).expect("same bounds");
        for (code, n) in &other.errors {
            self.errors_n(code, *n);
        }
    }

    pub fn ops(&self) -> u64 {
        self.hist.len()
    }
}

/// The gRPC code name of a status (`Unavailable`, `DeadlineExceeded`, ...), as in the report.
pub fn code_name(status: &tonic::Status) -> String {
    format!("{:?}", status.code())
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
    pub mean: f64,
}

/// The result of one run; see the module doc for the JSON fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub workload: String,
    pub target: String,
    pub endpoints: Vec<String>,
    pub clients: usize,
    pub conns: usize,
    pub value_size: usize,
    pub elapsed_s: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub latency_ms: Latency,
    pub errors: BTreeMap<String, u64>,
    pub errors_total: u64,
    pub writes: Option<u64>,
    pub servers: Option<ServerUsage>,
    pub warmup: Option<Warmup>,
}

/// The warm-up before the clock started: how long it took (until every client had finished
/// its last warm-up operation) and what the clients did in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warmup {
    pub s: f64,
    pub ops: u64,
    pub errors_total: u64,
}

impl Warmup {
    pub fn new(rec: &Recorder, elapsed: Duration) -> Warmup {
        Warmup {
            s: round3(elapsed.as_secs_f64()),
            ops: rec.ops(),
            errors_total: rec.errors.values().sum(),
        }
    }
}

/// What the run was, for the report's header fields.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub workload: String,
    pub target: String,
    pub endpoints: Vec<String>,
    pub clients: usize,
    pub conns: usize,
    pub value_size: usize,
}

impl Report {
    pub fn new(info: RunInfo, all: &Recorder, elapsed: Duration, writes: Option<u64>) -> Report {
        let ms = |us: u64| round3(us as f64 / 1000.0);
        let h = &all.hist;
        let latency_ms = if h.is_empty() {
            Latency {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p99_9: 0.0,
                max: 0.0,
                mean: 0.0,
            }
        } else {
            Latency {
                p50: ms(h.value_at_quantile(0.50)),
                p90: ms(h.value_at_quantile(0.90)),
                p99: ms(h.value_at_quantile(0.99)),
                p99_9: ms(h.value_at_quantile(0.999)),
                max: ms(h.max()),
                mean: round3(h.mean() / 1000.0),
            }
        };
        let elapsed_s = elapsed.as_secs_f64();
        let ops = all.ops();
        Report {
            workload: info.workload,
            target: info.target,
            endpoints: info.endpoints,
            clients: info.clients,
            conns: info.conns,
            value_size: info.value_size,
            elapsed_s: round3(elapsed_s),
            ops,
            ops_per_s: if elapsed_s > 0.0 {
                round3(ops as f64 / elapsed_s)
            } else {
                0.0
            },
            latency_ms,
            errors_total: all.errors.values().sum(),
            errors: all.errors.clone(),
            writes,
            servers: None,
            warmup: None,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// A one-row table in the steward CLI's style, then the errors by code, if any.
    pub fn to_table(&self) -> String {
        let l = &self.latency_ms;
        let header = [
            "WORKLOAD", "TARGET", "CLIENTS", "CONNS", "SECS", "OPS", "OPS/S", "P50-MS", "P90-MS",
            "P99-MS", "P99.9-MS", "MAX-MS", "ERRORS",
        ];
        let row = [
            self.workload.clone(),
            self.target.clone(),
            self.clients.to_string(),
            self.conns.to_string(),
            format!("{:.2}", self.elapsed_s),
            self.ops.to_string(),
            format!("{:.0}", self.ops_per_s),
            format!("{:.2}", l.p50),
            format!("{:.2}", l.p90),
            format!("{:.2}", l.p99),
            format!("{:.2}", l.p99_9),
            format!("{:.2}", l.max),
            self.errors_total.to_string(),
        ];
        let mut out = String::new();
        for (i, (h, v)) in header.iter().zip(&row).enumerate() {
            let w = h.len().max(v.len());
            if i + 1 < header.len() {
                out.push_str(&format!("{h:<w$}   "));
            } else {
                out.push_str(h);
            }
        }
        out.push('\n');
        for (i, (h, v)) in header.iter().zip(&row).enumerate() {
            let w = h.len().max(v.len());
            if i + 1 < header.len() {
                out.push_str(&format!("{v:<w$}   "));
            } else {
                out.push_str(v);
            }
        }
        out.push('\n');
        match (self.writes, self.workload.as_str()) {
            (Some(writes), "dispatch") => out.push_str(&format!(
                "submitted: {writes} (each delivered to one worker)\n"
            )),
            (Some(writes), _) => out.push_str(&format!(
                "writes: {writes} (each delivered to every watcher)\n"
            )),
            (None, _) => {}
        }
        if let Some(s) = &self.servers {
            out.push_str(&format!(
                "servers: cpu {:.0}% ({:.1} s), peak rss {:.1} MiB{} over {} processes\n",
                s.cpu_pct,
                s.cpu_s,
                s.peak_rss_mib,
                if s.peak_rss_reset {
                    ""
                } else {
                    " (since start-up)"
                },
                s.pids.len()
            ));
        }
        if let Some(w) = &self.warmup {
            out.push_str(&format!(
                "warm-up (not measured): {:.2} s, {} ops, {} errors\n",
                w.s, w.ops, w.errors_total
            ));
        }
        if !self.errors.is_empty() {
            let by_code: Vec<String> = self
                .errors
                .iter()
                .map(|(c, n)| format!("{c}={n}"))
                .collect();
            out.push_str(&format!("errors: {}\n", by_code.join(" ")));
        }
        out
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> RunInfo {
        RunInfo {
            workload: "create".into(),
            target: "steward".into(),
            endpoints: vec!["http://127.0.0.1:7001".into()],
            clients: 2,
            conns: 1,
            value_size: 256,
        }
    }

    #[test]
    fn recorders_merge_into_percentiles() {
        // Client a: 1..=500 ms; client b: 501..=1000 ms and two errors.
        let (mut a, mut b) = (Recorder::default(), Recorder::default());
        for ms in 1..=500 {
            a.ok(Duration::from_millis(ms));
        }
        for ms in 501..=1000 {
            b.ok(Duration::from_millis(ms));
        }
        b.error("Unavailable");
        b.error("Unavailable");
        a.error("Aborted");
        let mut all = Recorder::default();
        all.merge(&a);
        all.merge(&b);
        let r = Report::new(info(), &all, Duration::from_secs(2), None);
        assert_eq!(r.ops, 1000);
        assert_eq!(r.ops_per_s, 500.0);
        // 3 significant digits: within 0.1% of the exact percentile.
        let near = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 0.001;
        let l = r.latency_ms;
        assert!(near(l.p50, 500.0), "{l:?}");
        assert!(near(l.p90, 900.0), "{l:?}");
        assert!(near(l.p99, 990.0), "{l:?}");
        assert!(near(l.p99_9, 999.0), "{l:?}");
        assert!(near(l.max, 1000.0), "{l:?}");
        assert!(near(l.mean, 500.5), "{l:?}");
        assert_eq!(r.errors_total, 3);
        assert_eq!(r.errors["Unavailable"], 2);
        assert_eq!(r.errors["Aborted"], 1);
    }

    #[test]
    fn no_ops_reports_zeros_not_garbage() {
        let mut all = Recorder::default();
        all.error("Unavailable");
        let r = Report::new(info(), &all, Duration::from_secs(1), None);
        assert_eq!((r.ops, r.ops_per_s, r.latency_ms.max), (0, 0.0, 0.0));
    }

    #[test]
    fn json_has_the_documented_fields() {
        let mut all = Recorder::default();
        all.ok(Duration::from_micros(1500));
        let r = Report::new(info(), &all, Duration::from_secs(1), Some(7));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let mut want = vec![
            "workload",
            "target",
            "endpoints",
            "clients",
            "conns",
            "value_size",
            "elapsed_s",
            "ops",
            "ops_per_s",
            "latency_ms",
            "errors",
            "errors_total",
            "writes",
            "servers",
            "warmup",
        ];
        let mut keys = keys.clone();
        keys.sort();
        want.sort();
        assert_eq!(keys, want);
        let lat: Vec<&str> = v["latency_ms"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(lat.len(), 6);
        for k in ["p50", "p90", "p99", "p99_9", "max", "mean"] {
            assert!(v["latency_ms"][k].is_f64(), "{k}");
        }
        assert!((v["latency_ms"]["p50"].as_f64().unwrap() - 1.5).abs() < 0.01);
        assert_eq!(v["writes"], 7);
        assert_eq!(v["errors"], serde_json::json!({}));
        assert!(!r.to_json().contains('\n'), "one line");
    }

    #[test]
    fn table_aligns_header_and_row() {
        let mut all = Recorder::default();
        all.ok(Duration::from_millis(2));
        all.error("DeadlineExceeded");
        let t = Report::new(info(), &all, Duration::from_secs(1), None).to_table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0]
            .starts_with("WORKLOAD   TARGET    CLIENTS   CONNS   SECS   OPS   OPS/S   P50-MS"));
        assert!(lines[1]
            .starts_with("create     steward   2         1       1.00   1     1       2.00"));
        // Every value starts under its header.
        for h in ["OPS/S", "P99-MS", "ERRORS"] {
            let col = lines[0].find(h).unwrap();
            assert_ne!(&lines[1][col..col + 1], " ", "{h}");
            assert_eq!(&lines[1][col - 1..col], " ", "{h}");
        }
        assert_eq!(lines[2], "errors: DeadlineExceeded=1");
    }

    #[test]
    fn code_names_are_grpc_names() {
        assert_eq!(code_name(&tonic::Status::unavailable("x")), "Unavailable");
        assert_eq!(
            code_name(&tonic::Status::deadline_exceeded("x")),
            "DeadlineExceeded"
        );
    }
}
