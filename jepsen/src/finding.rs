//! What a checked run comes to, in the same shape for every workload: each workload's `finding`
//! turns its history and final reads into a `Finding`, and the runner (main.rs) writes and
//! prints it.

use std::fmt;
use std::path::Path;

use crate::history::Outcome;
use crate::plot::Point;

/// Exit code of an INVALID run.
pub const EXIT_INVALID: i32 = 1;
/// Exit code of a run whose check could not decide (UNKNOWN).
pub const EXIT_UNKNOWN: i32 = 2;

/// A checked run.
pub struct Finding {
    /// One line, ending in VALID, INVALID or UNKNOWN.
    pub summary: String,
    /// The checker's report, for verdict.txt.
    pub report: String,
    /// 0 VALID, `EXIT_INVALID`, `EXIT_UNKNOWN`.
    pub code: i32,
    /// One per client operation, for the latency plot.
    pub points: Vec<Point>,
}

impl Finding {
    /// This finding for a run whose timeline lacks the nemesis kinds `missing` (asked for on
    /// the command line, never applied): a VALID becomes UNKNOWN, because the run did not test
    /// what it claims to and found nothing wrong either; an INVALID stays INVALID (the anomaly
    /// is real whatever else ran). Unchanged when nothing is missing.
    pub fn untested(self, missing: &[String]) -> Finding {
        if missing.is_empty() {
            return self;
        }
        let list = missing.join(", ");
        let (summary, code) = match self.code {
            0 => (
                format!(
                    "{}; nemesis never applied: {list}: UNKNOWN",
                    self.summary.trim_end_matches(": VALID")
                ),
                EXIT_UNKNOWN,
            ),
            code => (
                format!("{}; nemesis never applied: {list}", self.summary),
                code,
            ),
        };
        let report = format!(
            "The nemesis kinds {list} were asked for but no fault of theirs took effect (see \
             timeline.json: the run had too few fault slots, a slot fell after the end, or a \
             fault found nothing to do), so this run does not show how the cluster behaves \
             under them.\n\n{}",
            self.report
        );
        Finding {
            summary,
            report,
            code,
            points: self.points,
        }
    }
}

/// The verdict word and exit code: VALID unless `invalid`; UNKNOWN when neither is proven.
pub fn verdict(valid: bool, invalid: bool) -> (&'static str, i32) {
    if valid {
        ("VALID", 0)
    } else if invalid {
        ("INVALID", EXIT_INVALID)
    } else {
        ("UNKNOWN", EXIT_UNKNOWN)
    }
}

/// How the operations of a history ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
}

impl Counts {
    pub fn of(outcomes: impl Iterator<Item = Outcome>) -> Counts {
        outcomes.fold(Counts::default(), |mut c, o| {
            match o {
                Outcome::Ok => c.ok += 1,
                Outcome::Fail => c.failed += 1,
                Outcome::Unknown => c.unknown += 1,
            }
            c
        })
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ok, {} failed, {} unknown",
            self.ok, self.failed, self.unknown
        )
    }
}

/// A plot point per item: (invoke ns, complete ns, outcome).
pub fn points<T>(items: &[T], at: impl Fn(&T) -> (u64, u64, Outcome)) -> Vec<Point> {
    items
        .iter()
        .map(|item| {
            let (invoke_ns, complete_ns, outcome) = at(item);
            Point {
                invoke_ns,
                latency_ns: complete_ns.saturating_sub(invoke_ns),
                outcome,
            }
        })
        .collect()
}

/// Writes `items` as JSON lines (the run's history.jsonl).
pub fn write_jsonl<T: serde::Serialize>(path: &Path, items: &[T]) -> anyhow::Result<()> {
    let mut s = String::new();
    for i in items {
        s.push_str(&serde_json::to_string(i)?);
        s.push('\n');
    }
    std::fs::write(path, s)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_counts_and_points() {
        assert_eq!(verdict(true, false), ("VALID", 0));
        assert_eq!(verdict(false, true), ("INVALID", EXIT_INVALID));
        assert_eq!(verdict(false, false), ("UNKNOWN", EXIT_UNKNOWN));
        let outcomes = [Outcome::Ok, Outcome::Unknown, Outcome::Ok, Outcome::Fail];
        let counts = Counts::of(outcomes.into_iter());
        assert_eq!(counts.to_string(), "2 ok, 1 failed, 1 unknown");
        let points = points(&[(5u64, 3u64)], |&(i, c)| (i, c, Outcome::Ok));
        assert_eq!(
            points[0].latency_ns, 0,
            "a completion before the invoke saturates"
        );
    }

    fn finding(summary: &str, code: i32) -> Finding {
        Finding {
            summary: summary.into(),
            report: "checker report".into(),
            code,
            points: vec![],
        }
    }

    #[test]
    fn a_run_missing_a_nemesis_kind_is_not_valid() {
        let missing = vec!["kill".to_string(), "membership".to_string()];
        let f = finding("register: 10 ops, anomalies 0: VALID", 0).untested(&missing);
        assert_eq!(f.code, EXIT_UNKNOWN);
        assert_eq!(
            f.summary,
            "register: 10 ops, anomalies 0; nemesis never applied: kill, membership: UNKNOWN"
        );
        assert!(f.report.contains("kill, membership were asked for"));
        assert!(f.report.ends_with("checker report"));
        let f = finding("register: anomalies 2: INVALID", EXIT_INVALID).untested(&missing);
        assert_eq!(f.code, EXIT_INVALID, "an anomaly stays an anomaly");
        let f = finding("x: VALID", 0).untested(&[]);
        assert_eq!((f.summary.as_str(), f.code), ("x: VALID", 0));
    }
}
