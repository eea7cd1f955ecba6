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

/// What the final read found, judged against the adds.
#[derive(Debug, Serialize)]
pub struct SetReport {
    pub acknowledged: usize,
    pub present: usize,
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
        self.lost.is_empty() && self.unexpected.is_empty() && self.refused_but_present.is_empty()
    }
}

pub fn check(adds: &[AddEvent], final_read: &BTreeSet<String>) -> SetReport {
    let attempted: BTreeSet<&str> = adds.iter().map(|a| a.element.as_str()).collect();
    let cap = |mut v: Vec<String>| {
        v.truncate(50);
        v
    };
    SetReport {
        acknowledged: adds.iter().filter(|a| a.outcome == Outcome::Ok).count(),
        present: final_read.len(),
        lost: cap(adds
            .iter()
            .filter(|a| a.outcome == Outcome::Ok && !final_read.contains(&a.element))
            .map(|a| a.element.clone())
            .collect()),
        unexpected: cap(final_read
            .iter()
            .filter(|e| !attempted.contains(e.as_str()))
            .cloned()
            .collect()),
        refused_but_present: cap(adds
            .iter()
            .filter(|a| a.outcome == Outcome::Fail && final_read.contains(&a.element))
            .map(|a| a.element.clone())
            .collect()),
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
    let anomalies = report.lost.len() + report.unexpected.len() + report.refused_but_present.len();
    Ok(Finding {
        summary: format!(
            "set: {} adds ({counts}), {} present, anomalies {anomalies}: {word}",
            adds.len(),
            report.present
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
        assert!(!r.valid());
        let ok: BTreeSet<String> = ["a", "b", "d"].iter().map(|s| s.to_string()).collect();
        let r = check(&adds, &ok);
        assert!(r.valid(), "{r:?}");
        assert_eq!(r.unknown_present, 1);
    }
}
