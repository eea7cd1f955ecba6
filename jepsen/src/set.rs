//! The set workload: unique creates, then one final linearizable list. Every acknowledged create
//! must be present; nothing that was never attempted may appear; a create that was definitely
//! refused must be absent.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use steward::client::Client;

use crate::finding::{self, write_jsonl, Counts, Finding};
use crate::history::Outcome;
use crate::outcome::classify;

pub const KIND: &str = "SetItem";

#[derive(Clone, Debug, Serialize)]
pub struct AddEvent {
    pub process: u64,
    pub element: String,
    pub outcome: Outcome,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

pub async fn process(
    id: u64,
    client: Client,
    start: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Arc<Mutex<Vec<AddEvent>>>,
) {
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let element = format!("e-{id}-{n}");
        let obj = json!({"kind": KIND, "apiVersion": "jepsen/v1", "metadata": {"name": element}});
        let invoke = start.elapsed().as_nanos() as u64;
        let (outcome, error) = match client.create(&obj).await {
            Ok(_) => (Outcome::Ok, String::new()),
            Err(e) => (classify(&e), format!("{:?}: {}", e.code(), e.message())),
        };
        let failed = outcome != Outcome::Ok;
        out.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(AddEvent {
                process: id,
                element,
                outcome,
                invoke_ns: invoke,
                complete_ns: start.elapsed().as_nanos() as u64,
                error,
            });
        if failed {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Elements listed per anomaly in the report (all are counted).
const LISTED_MAX: usize = 50;

/// What the final read found, judged against the adds.
#[derive(Debug, Serialize)]
pub struct SetReport {
    pub acknowledged: usize,
    pub present: usize,
    /// How many of each anomaly, uncapped (the lists below stop at `LISTED_MAX`).
    pub lost_count: usize,
    pub unexpected_count: usize,
    pub refused_but_present_count: usize,
    /// Acknowledged but missing: lost writes.
    pub lost: Vec<String>,
    /// Present but never attempted.
    pub unexpected: Vec<String>,
    /// Definitely refused, yet present.
    pub refused_but_present: Vec<String>,
    /// Unknown outcome, and present (fine either way).
    pub unknown_present: usize,
}

impl SetReport {
    pub fn valid(&self) -> bool {
        self.anomalies() == 0
    }

    pub fn anomalies(&self) -> usize {
        self.lost_count + self.unexpected_count + self.refused_but_present_count
    }
}

pub fn check(adds: &[AddEvent], final_read: &BTreeSet<String>) -> SetReport {
    let attempted: BTreeSet<&str> = adds.iter().map(|a| a.element.as_str()).collect();
    let lost: Vec<String> = adds
        .iter()
        .filter(|a| a.outcome == Outcome::Ok && !final_read.contains(&a.element))
        .map(|a| a.element.clone())
        .collect();
    let unexpected: Vec<String> = final_read
        .iter()
        .filter(|e| !attempted.contains(e.as_str()))
        .cloned()
        .collect();
    let refused_but_present: Vec<String> = adds
        .iter()
        .filter(|a| a.outcome == Outcome::Fail && final_read.contains(&a.element))
        .map(|a| a.element.clone())
        .collect();
    let cap = |mut v: Vec<String>| {
        v.truncate(LISTED_MAX);
        v
    };
    SetReport {
        acknowledged: adds.iter().filter(|a| a.outcome == Outcome::Ok).count(),
        present: final_read.len(),
        lost_count: lost.len(),
        unexpected_count: unexpected.len(),
        refused_but_present_count: refused_but_present.len(),
        lost: cap(lost),
        unexpected: cap(unexpected),
        refused_but_present: cap(refused_but_present),
        unknown_present: adds
            .iter()
            .filter(|a| a.outcome == Outcome::Unknown && final_read.contains(&a.element))
            .count(),
    }
}

/// Writes the adds to `history_file` and judges them against the final read.
pub fn finding(
    adds: &[AddEvent],
    present: &BTreeSet<String>,
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    write_jsonl(history_file, adds)?;
    let report = check(adds, present);
    let counts = Counts::of(adds.iter().map(|a| a.outcome));
    let (word, code) = finding::verdict(report.valid(), true);
    Ok(Finding {
        summary: format!(
            "set: {} adds ({counts}), {} present, anomalies {} ({} acknowledged adds lost, {} \
             unexpected, {} refused but present): {word}",
            adds.len(),
            report.present,
            report.anomalies(),
            report.lost_count,
            report.unexpected_count,
            report.refused_but_present_count,
        ),
        report: serde_json::to_string_pretty(&report)?,
        code,
        points: finding::points(adds, |a| (a.invoke_ns, a.complete_ns, a.outcome)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(e: &str, outcome: Outcome) -> AddEvent {
        AddEvent {
            process: 0,
            element: e.into(),
            outcome,
            invoke_ns: 0,
            complete_ns: 1,
            error: String::new(),
        }
    }

    #[test]
    fn lost_unexpected_and_refused_are_flagged() {
        let adds = vec![
            add("a", Outcome::Ok),
            add("b", Outcome::Ok),
            add("c", Outcome::Fail),
            add("d", Outcome::Unknown),
        ];
        let read: BTreeSet<String> = ["a", "c", "z"].iter().map(|s| s.to_string()).collect();
        let r = check(&adds, &read);
        assert_eq!(r.lost, vec!["b"]);
        assert_eq!(r.unexpected, vec!["z"]);
        assert_eq!(r.refused_but_present, vec!["c"]);
        assert_eq!(r.anomalies(), 3);
        assert!(!r.valid());
        let ok: BTreeSet<String> = ["a", "b", "d"].iter().map(|s| s.to_string()).collect();
        let r = check(&adds, &ok);
        assert!(r.valid(), "{r:?}");
        assert_eq!(r.unknown_present, 1);
    }

    /// The report lists at most `LISTED_MAX` lost elements but counts them all, so the verdict
    /// never understates a loss.
    #[test]
    fn lost_adds_are_counted_past_the_listed_ones() {
        let names: Vec<String> = (0..LISTED_MAX + 10).map(|i| format!("e-{i}")).collect();
        let adds: Vec<AddEvent> = names.iter().map(|e| add(e, Outcome::Ok)).collect();
        let r = check(&adds, &BTreeSet::new());
        assert_eq!(r.lost_count, LISTED_MAX + 10);
        assert_eq!(r.lost.len(), LISTED_MAX);
        assert_eq!(r.anomalies(), LISTED_MAX + 10);
    }
}
