//! The lock workload: lock-protected read-modify-write. Each process takes the WRITE lock (waiting
//! in line), reads a counter, writes counter + 1 carrying its fencing token (and guarded by the
//! revision it read), and releases. Checked: no acknowledged increment is lost, and no two
//! holders' fenced writes interleave — every acknowledged write stored a distinct value, the
//! final value accounts for every acknowledged increment, and tokens of acknowledged writes
//! increase with the values they wrote.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use steward::client::{Client, Consistency, Fence, LockMode};

use crate::finding::{self, write_jsonl, Counts, Finding};
use crate::history::Outcome;
use crate::outcome::classify;

pub const KIND: &str = "LockedCounter";
pub const NAME: &str = "counter";
pub const LOCK: &str = "jepsen-counter";

#[derive(Clone, Debug, Serialize)]
pub struct Increment {
    pub process: u64,
    pub token: u64,
    /// The value read under the lock; the write stored `read + 1`.
    pub read: i64,
    pub outcome: Outcome,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

fn counter(value: i64) -> Value {
    json!({"kind": KIND, "apiVersion": "jepsen/v1", "metadata": {"name": NAME}, "spec": {"value": value}})
}

pub async fn init(client: &Client) -> anyhow::Result<()> {
    client
        .create(&counter(0))
        .await
        .map_err(|e| anyhow::anyhow!("creating the counter: {e}"))?;
    Ok(())
}

pub async fn process(
    id: u64,
    client: Client,
    start: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Arc<Mutex<Vec<Increment>>>,
) {
    let holder = format!("jepsen-{id}");
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let grant = client
            .lock_acquire(
                LOCK,
                LockMode::Write,
                &holder,
                Some(Duration::from_secs(5)),
                None,
                Some(Duration::from_secs(5)),
            )
            .await;
        let Some(token) = grant.ok().and_then(|g| g.holder).map(|h| h.token) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let invoke_ns = start.elapsed().as_nanos() as u64;
        let mut inc = Increment {
            process: id,
            token,
            read: 0,
            outcome: Outcome::Fail,
            invoke_ns,
            complete_ns: 0,
            error: String::new(),
        };
        let obj = match client
            .get(KIND, "default", NAME, Consistency::Linearizable)
            .await
        {
            Ok(obj) => obj,
            Err(_) => {
                // Nothing was written: no increment to record.
                let _ = client.lock_release(LOCK, &holder, token).await;
                continue;
            }
        };
        inc.read = obj["spec"]["value"].as_i64().unwrap_or(0);
        let rv: u64 = obj["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let fence = Some(Fence {
            lock: LOCK.to_string(),
            token,
        });
        match client
            .update_fenced(&counter(inc.read + 1), rv, fence)
            .await
        {
            Ok(_) => inc.outcome = Outcome::Ok,
            Err(e) => {
                inc.outcome = classify(&e);
                inc.error = format!("{:?}: {}", e.code(), e.message());
            }
        }
        inc.complete_ns = start.elapsed().as_nanos() as u64;
        out.lock().unwrap_or_else(|p| p.into_inner()).push(inc);
        let _ = client.lock_release(LOCK, &holder, token).await;
    }
}

#[derive(Debug, Serialize)]
pub struct LockReport {
    pub acknowledged: usize,
    pub unknown: usize,
    pub final_value: i64,
    /// Values written by more than one acknowledged increment: two holders interleaved.
    pub duplicate_writes: Vec<i64>,
    /// Acknowledged increments the final value does not account for.
    pub lost: i64,
    /// Acknowledged writes under an older token than the write before them, or under the same token
    /// from another holder.
    pub token_order_violations: usize,
}

impl LockReport {
    pub fn valid(&self) -> bool {
        self.duplicate_writes.is_empty() && self.lost == 0 && self.token_order_violations == 0
    }
}

pub fn check(incs: &[Increment], final_value: i64) -> LockReport {
    let mut acked: Vec<&Increment> = incs.iter().filter(|i| i.outcome == Outcome::Ok).collect();
    acked.sort_by_key(|i| i.read);
    let mut duplicate_writes: Vec<i64> = acked
        .windows(2)
        .filter(|w| w[0].read == w[1].read)
        .map(|w| w[0].read + 1)
        .collect();
    duplicate_writes.dedup();
    let unknown = incs
        .iter()
        .filter(|i| i.outcome == Outcome::Unknown)
        .count();
    // Every acknowledged increment raised the counter by one; unknown ones may have too.
    let lost = (acked.len() as i64 - final_value).max(0);
    // Tokens never go backwards along the counter; one token twice is fine only for the same
    // holder (a re-acquire after a release that did not get through refreshes the same grant).
    let token_order_violations = acked
        .windows(2)
        .filter(|w| {
            w[1].token < w[0].token || (w[1].token == w[0].token && w[1].process != w[0].process)
        })
        .count();
    LockReport {
        acknowledged: acked.len(),
        unknown,
        final_value,
        duplicate_writes,
        lost,
        token_order_violations,
    }
}

/// Writes the increments to `history_file` and judges them against the counter's final value.
pub fn finding(
    incs: &[Increment],
    final_value: i64,
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    write_jsonl(history_file, incs)?;
    let report = check(incs, final_value);
    let counts = Counts::of(incs.iter().map(|i| i.outcome));
    let (word, code) = finding::verdict(report.valid(), true);
    let anomalies =
        report.duplicate_writes.len() + report.lost as usize + report.token_order_violations;
    Ok(Finding {
        summary: format!(
            "lock: {} fenced increments ({counts}), counter {}, anomalies {anomalies}: {word}",
            incs.len(),
            report.final_value
        ),
        report: serde_json::to_string_pretty(&report)?,
        code,
        points: finding::points(incs, |i| (i.invoke_ns, i.complete_ns, i.outcome)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc(token: u64, read: i64, outcome: Outcome) -> Increment {
        Increment {
            process: 0,
            token,
            read,
            outcome,
            invoke_ns: 0,
            complete_ns: 1,
            error: String::new(),
        }
    }

    #[test]
    fn interleaving_and_loss_are_flagged() {
        let ok = vec![
            inc(1, 0, Outcome::Ok),
            inc(2, 1, Outcome::Ok),
            inc(3, 2, Outcome::Unknown),
            inc(4, 3, Outcome::Ok),
        ];
        assert!(check(&ok, 4).valid(), "{:?}", check(&ok, 4));
        // Two holders both read 1 and both wrote 2.
        let twice = vec![
            inc(1, 0, Outcome::Ok),
            inc(2, 1, Outcome::Ok),
            inc(3, 1, Outcome::Ok),
        ];
        assert_eq!(check(&twice, 2).duplicate_writes, vec![2]);
        // Three acknowledged increments, counter at 2.
        let lost = vec![
            inc(1, 0, Outcome::Ok),
            inc(2, 1, Outcome::Ok),
            inc(3, 2, Outcome::Ok),
        ];
        assert_eq!(check(&lost, 2).lost, 1);
        // The same holder twice under one grant (its release was lost, its re-acquire refreshed).
        let regrant = vec![inc(7, 0, Outcome::Ok), inc(7, 1, Outcome::Ok)];
        assert!(check(&regrant, 2).valid());
        // Two holders under one token.
        let mut shared = vec![inc(7, 0, Outcome::Ok), inc(7, 1, Outcome::Ok)];
        shared[1].process = 1;
        assert_eq!(check(&shared, 2).token_order_violations, 1);
        // A later write under an older token.
        let order = vec![inc(5, 0, Outcome::Ok), inc(4, 1, Outcome::Ok)];
        assert_eq!(check(&order, 2).token_order_violations, 1);
    }
}
