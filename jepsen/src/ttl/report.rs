//! What the ttl checker reports: early losses, late releases and the lateness of silent holds
//! per kind (p50 / p99 / max), as one summary line, and as the text of verdict.txt (the anomalies
//! named one per line, the lateness tables, then the whole report as JSON).

use std::collections::BTreeMap;

use serde::Serialize;

use super::check::Bounds;
use super::{End, Kind};
use crate::finding::Counts;

/// A hold lost before its deadline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EarlyLoss {
    pub kind: Kind,
    pub holder: String,
    pub target: String,
    /// What showed it: e.g. "refresh refused: FailedPrecondition: ...", "read showed it gone",
    /// "given to p4-2 (its acquire acknowledged at N ns)".
    pub how: String,
    /// When it was shown lost (a call's completion; for two holders, the start of the overlap).
    pub at_ns: u64,
    /// The deadline it was shown lost before.
    pub deadline_ns: u64,
    pub early_ms: f64,
}

/// A silent hold released later than promise 2 allows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LateRelease {
    pub kind: Kind,
    pub holder: String,
    pub target: String,
    /// Last acknowledged refresh's completion + TTL.
    pub deadline_ns: u64,
    /// It was still there at least this long after that.
    pub late_ms_at_least: f64,
    pub bound_ms: u64,
}

/// p50 / p99 / max of a sample, in ms.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Stats {
    /// Nearest-rank percentiles; `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stats> {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        (!v.is_empty()).then(|| Stats {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        })
    }
}

/// The lateness of one kind's silent holds (release time minus last acknowledged refresh's
/// sending + TTL).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KindLateness {
    pub kind: Kind,
    /// Silent holds whose release was seen, with a certain deadline.
    pub measured: usize,
    /// Upper bounds (the first sign it was gone) and lower bounds (the last sign it was there).
    pub upper: Option<Stats>,
    pub lower: Option<Stats>,
}

#[derive(Debug, Default, Serialize)]
pub struct TtlReport {
    pub holds: usize,
    pub by_kind: BTreeMap<Kind, usize>,
    pub ends: BTreeMap<End, usize>,
    pub refreshes: Counts,
    /// Refreshes, fenced writes and releases refused because the hold was gone.
    pub refused_as_lost: usize,
    pub early_count: usize,
    pub early: Vec<EarlyLoss>,
    pub late_count: usize,
    pub late: Vec<LateRelease>,
    /// Silent holds judged against promise 2, and those not judged because a fault that may
    /// leave no quorum (`Bounds::judged_faults`) overlapped their silence, or a refresh's
    /// outcome was unknown.
    pub judged: usize,
    pub excused_by_fault: usize,
    pub uncertain: usize,
    pub bounds: Option<Bounds>,
    /// Every silent hold with a certain deadline whose release was seen.
    pub lateness: Vec<KindLateness>,
    /// Those of them judged against promise 2 (no fault but `Bounds::judged_faults` in their
    /// silence).
    pub lateness_judged: Vec<KindLateness>,
}

impl TtlReport {
    pub fn valid(&self) -> bool {
        self.early_count == 0 && self.late_count == 0
    }

    pub fn summary(&self) -> String {
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(k, n)| format!("{n} {}", k.as_str()))
            .collect();
        let ends: Vec<String> = self
            .ends
            .iter()
            .map(|(e, n)| format!("{n} {}", e.as_str()))
            .collect();
        // The shape matrix.sh reads: the first number, then "(N ok, N failed, N unknown)".
        let r = self.refreshes;
        format!(
            "ttl: {} holds, {} refreshes ({r}), {}; {}; {} refused as lost, anomalies {} ({} \
             early losses, {} late releases of {} judged): {}",
            self.holds,
            r.ok + r.failed + r.unknown,
            kinds.join(", "),
            ends.join(", "),
            self.refused_as_lost,
            self.early_count + self.late_count,
            self.early_count,
            self.late_count,
            self.judged,
            if self.valid() { "VALID" } else { "INVALID" }
        )
    }

    /// The report for verdict.txt: the anomalies named one per line, the lateness table, then
    /// the whole report as JSON.
    pub fn text(&self) -> anyhow::Result<String> {
        let mut s = String::new();
        for e in &self.early {
            s.push_str(&format!(
                "early loss: {} {} of {}: {} at {} ns, {:.1} ms before its deadline {} ns (last \
                 acknowledged acquire or refresh sent + TTL)\n",
                e.kind.as_str(),
                e.target,
                e.holder,
                e.how,
                e.at_ns,
                e.early_ms,
                e.deadline_ns
            ));
        }
        for l in &self.late {
            s.push_str(&format!(
                "late release: {} {} of {}: still there {:.1} ms after its last acknowledged \
                 refresh's completion + TTL ({} ns), bound {} ms\n",
                l.kind.as_str(),
                l.target,
                l.holder,
                l.late_ms_at_least,
                l.deadline_ns,
                l.bound_ms
            ));
        }
        s.push_str(
            "lateness of silent holds' release, ms (upper: first sign it was gone minus the last \
             acknowledged refresh's sending + TTL; lower: last sign it was there minus that \
             refresh's answer + TTL), all:\n",
        );
        s.push_str(&lateness_table(&self.lateness));
        let judged = self.bounds.map_or(vec![], |b| b.judged_faults().to_vec());
        s.push_str(&format!(
            "\nthe same, judged windows only (no fault but {} during the silence):\n",
            judged.join(", ")
        ));
        s.push_str(&lateness_table(&self.lateness_judged));
        s.push('\n');
        s.push_str(&serde_json::to_string_pretty(self)?);
        Ok(s)
    }
}

/// The lateness as a markdown table (ms; "-" for no samples).
pub fn lateness_table(rows: &[KindLateness]) -> String {
    let mut s = String::from(
        "| kind | n | upper p50 | upper p99 | upper max | lower p50 | lower p99 | lower max |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let cell = |s: Option<Stats>, f: fn(&Stats) -> f64| match s {
        Some(s) => format!("{:.0}", f(&s)),
        None => "-".to_string(),
    };
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.kind.as_str(),
            r.measured,
            cell(r.upper, |s| s.p50_ms),
            cell(r.upper, |s| s.p99_ms),
            cell(r.upper, |s| s.max_ms),
            cell(r.lower, |s| s.p50_ms),
            cell(r.lower, |s| s.p99_ms),
            cell(r.lower, |s| s.max_ms),
        ));
    }
    s
}
