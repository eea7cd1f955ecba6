//! The lock workload: lock-protected read-modify-write of a counter, with readers beside.
//!
//! Most processes take the WRITE lock (waiting in line, 5 s TTL), read the counter, write
//! counter + 1 fenced with their token, and release; every `READER_EVERY`th process takes the
//! READ lock instead and reads the counter twice. Each hold is recorded with the real-time bounds
//! of its acquire, its write or reads, and its release (and the release's outcome).
//!
//! Checked:
//! - Mutual exclusion itself, by the reader-writer mutex model of `mutex` over the grants: no two
//!   holders definitely held at once unless both were READ, and tokens grow in real time. A
//!   grant is definitely held from its acquire's completion to the invocation of its release
//!   when that succeeded, or of its last acknowledged fenced write; nothing is assumed from TTLs.
//! - The counter: `acked <= final <= acked + unknown` over the fenced increments, two
//!   acknowledged increments never read the same value, and tokens of acknowledged increments
//!   never go backwards along the values they wrote.
//! - A READ hold whose release succeeded saw one value: no write landed while it held.
//!
//! Each increment is also guarded by the counter's resourceVersion. That guard is not what
//! catches two holders (the mutex model does, from the grants alone); it keeps the counter
//! bounds exact when a holder's own delayed write lands late under its still-live token (sent,
//! timed out on the client, applied after the holder's next read: legal, and without the guard
//! it would write an old value and look like a lost increment).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use steward::client::{Client, Consistency, Fence, LockMode};

use crate::finding::{self, write_jsonl, Counts, Finding};
use crate::history::Outcome;
use crate::mutex::{self, Grant, Mode, MutexReport};
use crate::outcome::classify;

pub const KIND: &str = "LockedCounter";
pub const NAME: &str = "counter";
pub const LOCK: &str = "jepsen-counter";
/// Every this many processes, one (the last) takes READ locks and only reads.
pub const READER_EVERY: u64 = 4;
/// The lock TTL each hold asks for.
pub const TTL: Duration = Duration::from_secs(5);
/// How long an acquire waits in line.
const WAIT: Duration = Duration::from_secs(5);
/// Anomalies of each kind written out in full (the counts are always complete).
const SHOWN: usize = 20;

/// One client call and how it ended.
#[derive(Clone, Debug, Serialize)]
pub struct Call {
    pub outcome: Outcome,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The fenced increment of a WRITE hold.
#[derive(Clone, Debug, Serialize)]
pub struct Increment {
    /// The value read under the lock; the write stored `read + 1`.
    pub read: i64,
    #[serde(flatten)]
    pub call: Call,
}

/// One acknowledged acquire and what its holder did with it.
#[derive(Clone, Debug, Serialize)]
pub struct Hold {
    pub process: u64,
    /// The mode the grant answered.
    pub mode: Mode,
    pub token: u64,
    pub ttl_ms: u64,
    pub acquire_invoke_ns: u64,
    pub acquire_complete_ns: u64,
    /// WRITE: the increment, absent when the read before it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<Increment>,
    /// READ: the values of the reads that succeeded, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<i64>,
    pub release: Call,
}

impl Hold {
    /// The grant as the mutex model sees it: held for sure until the invocation of the last
    /// call that found the token live (a release or fenced write the server acknowledged).
    pub fn grant(&self) -> Grant {
        let released = self.release.outcome == Outcome::Ok;
        let written = self.write.as_ref().map(|w| &w.call);
        let written = written.filter(|c| c.outcome == Outcome::Ok);
        let live_until_ns = match (released, written) {
            (true, _) => Some(self.release.invoke_ns),
            (false, Some(write)) => Some(write.invoke_ns),
            (false, None) => None,
        };
        // If the leader's clock keeps pace with ours; for reports only.
        let ttl_end_ns = self
            .acquire_complete_ns
            .saturating_add(self.ttl_ms.saturating_mul(1_000_000));
        let possibly_until_ns = match released {
            true => self.release.complete_ns,
            false => ttl_end_ns.max(self.release.complete_ns),
        };
        Grant {
            process: self.process,
            mode: self.mode,
            token: self.token,
            acquire_invoke_ns: self.acquire_invoke_ns,
            acquire_complete_ns: self.acquire_complete_ns,
            live_until_ns,
            possibly_until_ns,
        }
    }
}

/// The mode process `id` locks in.
pub fn mode_of(id: u64) -> Mode {
    match id % READER_EVERY == READER_EVERY - 1 {
        true => Mode::Read,
        false => Mode::Write,
    }
}

fn counter(value: i64) -> Value {
    json!({"kind": KIND, "apiVersion": "jepsen/v1", "metadata": {"name": NAME}, "spec": {"value": value}})
}

fn ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

pub async fn init(client: &Client) -> anyhow::Result<()> {
    client
        .create(&counter(0))
        .await
        .map_err(|e| anyhow::anyhow!("creating the counter: {e}"))?;
    Ok(())
}

/// Runs one process until `stop`: acquire, increment (WRITE) or read twice (READ), release.
pub async fn process(
    id: u64,
    client: Client,
    start: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Arc<Mutex<Vec<Hold>>>,
) {
    let holder = format!("jepsen-{id}");
    let asked = match mode_of(id) {
        Mode::Read => LockMode::Read,
        Mode::Write => LockMode::Write,
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let acquire_invoke_ns = ns(start);
        let grant = client
            .lock_acquire(LOCK, asked, &holder, Some(TTL), None, Some(WAIT))
            .await;
        let acquire_complete_ns = ns(start);
        let Some(granted) = grant.ok().and_then(|g| g.holder) else {
            // Busy, refused or unknown: an unknown grant is not recorded (nothing proves it), and
            // it ends by its TTL or is refreshed by this holder's next acquire.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let mode = match granted.mode() {
            LockMode::Read => Mode::Read,
            LockMode::Write => Mode::Write,
            LockMode::Unspecified => {
                // steward.proto: a grant always names its mode. One that does not is logged,
                // not recorded (its mode is unknown), and released so it blocks no one.
                tracing::warn!(token = granted.token, "a grant with no mode; releasing it");
                let _ = client.lock_release(LOCK, &holder, granted.token).await;
                continue;
            }
        };
        let token = granted.token;
        let (write, reads) = match mode {
            Mode::Write => (increment(&client, token, start).await, vec![]),
            Mode::Read => (None, read_twice(&client).await),
        };
        let release = call(start, client.lock_release(LOCK, &holder, token)).await;
        let hold = Hold {
            process: id,
            mode,
            token,
            ttl_ms: TTL.as_millis() as u64,
            acquire_invoke_ns,
            acquire_complete_ns,
            write,
            reads,
            release,
        };
        out.lock().unwrap_or_else(|p| p.into_inner()).push(hold);
    }
}

/// Times `fut` and classifies its result.
pub async fn call<T>(
    start: Instant,
    fut: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Call {
    let invoke_ns = ns(start);
    let result = fut.await;
    let complete_ns = ns(start);
    let (outcome, error) = match result {
        Ok(_) => (Outcome::Ok, String::new()),
        Err(e) => (classify(&e), format!("{:?}: {}", e.code(), e.message())),
    };
    Call {
        outcome,
        invoke_ns,
        complete_ns,
        error,
    }
}

/// Reads the counter and writes it + 1 under the fence of `token` (and the revision read).
/// `None` when the read failed: nothing was written.
async fn increment(client: &Client, token: u64, start: Instant) -> Option<Increment> {
    let obj = client
        .get(KIND, "default", NAME, Consistency::Linearizable)
        .await
        .ok()?;
    let read = obj["spec"]["value"].as_i64().unwrap_or(0);
    let rv: u64 = obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let fence = Some(Fence {
        lock: LOCK.to_string(),
        token,
    });
    let next = counter(read + 1);
    let call = call(start, client.update_fenced(&next, rv, fence)).await;
    Some(Increment { read, call })
}

/// Two linearizable reads of the counter; the values of those that succeeded.
async fn read_twice(client: &Client) -> Vec<i64> {
    let mut values = vec![];
    for _ in 0..2 {
        if let Ok(obj) = client
            .get(KIND, "default", NAME, Consistency::Linearizable)
            .await
        {
            values.push(obj["spec"]["value"].as_i64().unwrap_or(0));
        }
    }
    values
}

#[derive(Debug, Serialize)]
pub struct LockReport {
    pub holds: usize,
    pub read_holds: usize,
    /// Fenced increments by outcome.
    pub increments_ok: usize,
    pub increments_failed: usize,
    pub increments_unknown: usize,
    pub final_value: i64,
    /// `acked - final` when the counter is below the acknowledged increments.
    pub lost: u64,
    /// `final - (acked + unknown)` when the counter is above what any write explains.
    pub unexplained: u64,
    /// Values written by more than one acknowledged increment.
    pub duplicate_writes: Vec<i64>,
    /// Acknowledged increments under an older token than the one before them in value order, or
    /// under the same token from another holder.
    pub token_order_violations: usize,
    /// READ holds, released with success, whose reads differ: `(process, token, reads)`.
    pub changed_under_read: Vec<(u64, u64, Vec<i64>)>,
    /// How many overlaps of each kind, and token inversions, the mutex model found (its lists
    /// keep only the first `SHOWN`).
    pub overlaps: BTreeMap<&'static str, usize>,
    pub token_inversions: usize,
    pub mutex: MutexReport,
}

impl LockReport {
    pub fn valid(&self) -> bool {
        self.anomalies() == 0
    }

    pub fn anomalies(&self) -> usize {
        self.overlaps.values().sum::<usize>()
            + self.token_inversions
            + usize::from(self.lost > 0)
            + usize::from(self.unexplained > 0)
            + self.duplicate_writes.len()
            + self.token_order_violations
            + self.changed_under_read.len()
    }

    /// The anomalies by kind, for the summary line: "3 overlapping WRITE holders, 1 token
    /// inversions".
    fn kinds(&self) -> String {
        let mut kinds: Vec<String> = self
            .overlaps
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        let counts = [
            (self.token_inversions, "token inversions"),
            (usize::from(self.lost > 0), "counter below the acknowledged"),
            (
                usize::from(self.unexplained > 0),
                "counter above the written",
            ),
            (self.duplicate_writes.len(), "duplicate writes"),
            (self.token_order_violations, "tokens out of value order"),
            (self.changed_under_read.len(), "values changed under READ"),
        ];
        for (n, what) in counts {
            if n > 0 {
                kinds.push(format!("{n} {what}"));
            }
        }
        kinds.join(", ")
    }

    /// One line per anomaly shown, for verdict.txt.
    fn details(&self) -> String {
        let mut lines: Vec<String> = vec![];
        lines.extend(self.mutex.overlaps.iter().map(|o| o.to_string()));
        lines.extend(self.mutex.token_inversions.iter().map(|t| t.to_string()));
        let acked = self.increments_ok;
        if self.lost > 0 {
            lines.push(format!(
                "counter {} below the {acked} acknowledged increments ({} lost)",
                self.final_value, self.lost
            ));
        }
        if self.unexplained > 0 {
            lines.push(format!(
                "counter {} above the {acked} acknowledged + {} unknown increments",
                self.final_value, self.increments_unknown
            ));
        }
        for (process, token, reads) in &self.changed_under_read {
            lines.push(format!(
                "value changed under READ: process {process} (token {token}) read {reads:?}"
            ));
        }
        lines.join("\n")
    }
}

/// Judges the holds (mutex model, reads under READ) and the fenced increments against the
/// counter's final value.
pub fn check(holds: &[Hold], final_value: i64) -> LockReport {
    let grants: Vec<Grant> = holds.iter().map(Hold::grant).collect();
    let mut mutex = mutex::check(&grants);
    let mut overlaps = BTreeMap::new();
    for o in &mutex.overlaps {
        *overlaps.entry(o.kind()).or_default() += 1;
    }
    let token_inversions = mutex.token_inversions.len();
    mutex.overlaps.truncate(SHOWN);
    mutex.token_inversions.truncate(SHOWN);
    let incs: Vec<&Increment> = holds.iter().filter_map(|h| h.write.as_ref()).collect();
    let counts = Counts::of(incs.iter().map(|i| i.call.outcome));
    let (acked, unknown) = (counts.ok as i64, counts.unknown as i64);
    let changed_under_read = holds
        .iter()
        .filter(|h| h.mode == Mode::Read && h.release.outcome == Outcome::Ok)
        .filter(|h| h.reads.windows(2).any(|w| w[0] != w[1]))
        .map(|h| (h.process, h.token, h.reads.clone()))
        .collect();
    let (duplicate_writes, token_order_violations) = value_order(holds);
    LockReport {
        holds: holds.len(),
        read_holds: holds.iter().filter(|h| h.mode == Mode::Read).count(),
        increments_ok: counts.ok,
        increments_failed: counts.failed,
        increments_unknown: counts.unknown,
        final_value,
        lost: (acked - final_value).max(0) as u64,
        unexplained: (final_value - acked - unknown).max(0) as u64,
        duplicate_writes,
        token_order_violations,
        changed_under_read,
        overlaps,
        token_inversions,
        mutex,
    }
}

/// Along the values the acknowledged increments read: values read twice, and tokens that go
/// backwards (one token twice is fine only for the same holder, whose re-acquire after a release
/// that did not get through refreshed the same grant).
fn value_order(holds: &[Hold]) -> (Vec<i64>, usize) {
    let mut acked: Vec<(i64, u64, u64)> = holds
        .iter()
        .filter_map(|h| {
            let w = h.write.as_ref().filter(|w| w.call.outcome == Outcome::Ok)?;
            Some((w.read, h.token, h.process))
        })
        .collect();
    acked.sort();
    let mut duplicates: Vec<i64> = acked
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| w[0].0 + 1)
        .collect();
    duplicates.dedup();
    let backwards = acked
        .windows(2)
        .filter(|w| w[1].1 < w[0].1 || (w[1].1 == w[0].1 && w[1].2 != w[0].2))
        .count();
    (duplicates, backwards)
}

/// Writes the holds to `history_file` and judges them against the counter's final value;
/// `workload` starts the summary line.
pub fn finding(
    workload: &str,
    holds: &[Hold],
    final_value: i64,
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    write_jsonl(history_file, holds)?;
    let report = check(holds, final_value);
    let (word, code) = finding::verdict(report.valid(), true);
    let kinds = match report.anomalies() {
        0 => String::new(),
        _ => format!(" ({})", report.kinds()),
    };
    let increments = report.increments_ok + report.increments_failed + report.increments_unknown;
    let summary = format!(
        "{workload}: {} holds, {increments} fenced increments ({} ok, {} failed, {} unknown), {} READ \
         holds, counter {}, anomalies {}{kinds}: {word}",
        report.holds,
        report.increments_ok,
        report.increments_failed,
        report.increments_unknown,
        report.read_holds,
        report.final_value,
        report.anomalies(),
    );
    let details = report.details();
    let json = serde_json::to_string_pretty(&report)?;
    Ok(Finding {
        summary,
        report: match details.is_empty() {
            true => json,
            false => format!("{details}\n\n{json}"),
        },
        code,
        points: finding::points(holds, |h| {
            (
                h.acquire_invoke_ns,
                h.release.complete_ns,
                h.release.outcome,
            )
        }),
    })
}

#[cfg(test)]
mod tests;
