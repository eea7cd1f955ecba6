//! The pure check of the operations workload (see the parent module's docs for what it judges).
//! Input: every record of the run, the final operations (a linearizable list after the wait) and
//! the final effect logs; output: counts and anomalies. INVALID is any anomaly; the workload has
//! no UNKNOWN verdict of its own (a final read that never succeeds is an error of the run).

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// Anomalies listed in the report (all are counted).
const ANOMALIES_SHOWN: usize = 30;

/// One thing that must not happen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "anomaly", rename_all = "snake_case")]
pub enum Anomaly {
    /// One (operation, epoch) delivered to two different workers.
    DeliveredTwice {
        op: String,
        epoch: u64,
        workers: Vec<String>,
    },
    /// Epochs of one operation that do not strictly increase with its attempts (or one attempt
    /// under two epochs).
    EpochOrder { op: String, detail: String },
    /// An operation's effect acknowledged (or logged) more than once in one epoch.
    DoubleEffect {
        op: String,
        epoch: u64,
        acknowledged: usize,
        in_log: usize,
    },
    /// An acknowledged effect missing from its target's log.
    LostEffect {
        op: String,
        epoch: u64,
        target: String,
    },
    /// A logged effect that no delivery to its worker explains.
    UnexplainedEffect { target: String, entry: EffectEntry },
    /// Two effects on one target out of order: an older epoch after a newer one (a fenced-out
    /// worker's write got through), or an older operation after a newer one (two operations of
    /// one target ran at once, or out of submit order).
    TargetOrder {
        target: String,
        before: EffectEntry,
        after: EffectEntry,
    },
    /// Succeeded, but its final epoch left no effect (its worker reports success only after
    /// its effect was acknowledged).
    SucceededWithoutEffect { op: String, epoch: u64 },
    /// A report of an assignment accepted after the store had refused that assignment's fence.
    ReportAfterFenceRefused {
        op: String,
        epoch: u64,
        worker: String,
    },
    /// An acknowledged submit whose operation is not in the final list.
    Missing { id: String, key: String },
    /// Not in a final state when the wait ended.
    Stuck { id: String, state: String },
    /// Acknowledged submits with one idempotency key that answered different operations.
    IdempotencyMismatch { key: String, ids: Vec<String> },
    /// More than one acknowledged submit with one key said it created the operation.
    CreatedTwice { key: String, id: String },
}

/// Counts and anomalies of one run.
#[derive(Debug, Default, Serialize)]
pub struct OpsReport {
    pub submits: usize,
    pub submits_ok: usize,
    pub submits_failed: usize,
    pub submits_unknown: usize,
    /// Acknowledged repeats of a submit (same key) that answered the first operation.
    pub repeated_submits_ok: usize,
    pub aborts_ok: usize,
    /// Operations in the final list.
    pub operations: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub aborted: usize,
    /// Operations whose last attempt was not the first: a worker lost them.
    pub attempts_over_one: usize,
    pub deliveries: usize,
    pub effects_ok: usize,
    /// Effect writes the store refused because their fence no longer held.
    pub fence_refused: usize,
    /// Reports refused with Aborted (StaleAssignment).
    pub stale_reports_refused: usize,
    pub workers_vanished: usize,
    pub workers_zombied: usize,
    /// Whether every operation was final when the wait ended.
    pub settled: bool,
    /// How long the wait after the heal took (set by the run, not by `check`).
    pub settle_ms: u64,
    pub anomaly_count: usize,
    pub anomalies: Vec<Anomaly>,
}

impl OpsReport {
    pub fn valid(&self) -> bool {
        self.anomaly_count == 0
    }

    pub fn summary(&self) -> String {
        let word = if self.valid() { "VALID" } else { "INVALID" };
        format!(
            "operations: {} submits ({} ok, {} failed, {} unknown), {} repeats, {} operations \
             ({} succeeded, {} failed, {} aborted; {} with attempts > 1), {} deliveries, {} effects, \
             {} fence refusals, {} stale reports refused, workers {} vanished / {} zombied, \
             anomalies {}: {word}",
            self.submits,
            self.submits_ok,
            self.submits_failed,
            self.submits_unknown,
            self.repeated_submits_ok,
            self.operations,
            self.succeeded,
            self.failed,
            self.aborted,
            self.attempts_over_one,
            self.deliveries,
            self.effects_ok,
            self.fence_refused,
            self.stale_reports_refused,
            self.workers_vanished,
            self.workers_zombied,
            self.anomaly_count
        )
    }
}

/// `op-17` -> 17 (0 for anything else, which sorts first and is never a real id).
fn op_index(id: &str) -> u64 {
    id.strip_prefix("op-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub fn check(
    records: &[Record],
    final_ops: &[FinalOp],
    logs: &BTreeMap<String, Vec<EffectEntry>>,
) -> OpsReport {
    let mut report = OpsReport::default();
    let mut anomalies = vec![];
    count(records, final_ops, &mut report);
    check_submits(records, final_ops, &mut anomalies);
    check_deliveries(records, final_ops, &mut anomalies);
    check_effects(records, final_ops, logs, &mut anomalies);
    report.settled = final_ops.iter().all(|o| o.state.is_final());
    report.anomaly_count = anomalies.len();
    anomalies.truncate(ANOMALIES_SHOWN);
    report.anomalies = anomalies;
    report
}

fn count(records: &[Record], final_ops: &[FinalOp], r: &mut OpsReport) {
    for rec in records {
        match rec {
            Record::Submit(s) => {
                r.submits += 1;
                match s.outcome {
                    Outcome::Ok => r.submits_ok += 1,
                    Outcome::Fail => r.submits_failed += 1,
                    Outcome::Unknown => r.submits_unknown += 1,
                }
                if s.outcome == Outcome::Ok && s.repeat {
                    r.repeated_submits_ok += 1;
                }
            }
            Record::Abort(a) => r.aborts_ok += usize::from(a.outcome == Outcome::Ok),
            Record::Delivery(_) => r.deliveries += 1,
            Record::Effect(e) => match e.result {
                EffectResult::Ok | EffectResult::Found => r.effects_ok += 1,
                EffectResult::FenceRefused => r.fence_refused += 1,
                EffectResult::Unknown => {}
            },
            Record::Report(rep) => r.stale_reports_refused += usize::from(rep.stale),
            Record::Worker(w) => match w.event {
                WorkerLife::Vanished => r.workers_vanished += 1,
                WorkerLife::Zombied => r.workers_zombied += 1,
                WorkerLife::Started | WorkerLife::Reregistered => {}
            },
        }
    }
    r.operations = final_ops.len();
    for op in final_ops {
        match op.state {
            FinalState::Succeeded => r.succeeded += 1,
            FinalState::Failed => r.failed += 1,
            FinalState::Aborted => r.aborted += 1,
            FinalState::Other(_) => {}
        }
        r.attempts_over_one += usize::from(op.attempt > 1);
    }
}

/// Idempotency (one operation per key, created once) and liveness (every acknowledged submit's
/// operation exists, every operation ended).
fn check_submits(records: &[Record], final_ops: &[FinalOp], anomalies: &mut Vec<Anomaly>) {
    let mut by_key: BTreeMap<&str, (BTreeSet<&str>, usize)> = BTreeMap::new();
    for rec in records {
        let Record::Submit(s) = rec else { continue };
        if s.outcome != Outcome::Ok {
            continue;
        }
        let entry = by_key.entry(&s.key).or_default();
        entry.0.insert(&s.id);
        entry.1 += usize::from(s.created);
    }
    let present: BTreeMap<&str, &FinalOp> = final_ops.iter().map(|o| (o.id.as_str(), o)).collect();
    for (key, (ids, created)) in &by_key {
        if ids.len() > 1 {
            anomalies.push(Anomaly::IdempotencyMismatch {
                key: key.to_string(),
                ids: ids.iter().map(|s| s.to_string()).collect(),
            });
        }
        if *created > 1 {
            let id = ids.iter().next().map(|s| s.to_string()).unwrap_or_default();
            anomalies.push(Anomaly::CreatedTwice {
                key: key.to_string(),
                id,
            });
        }
        for id in ids {
            if !present.contains_key(id) {
                anomalies.push(Anomaly::Missing {
                    id: id.to_string(),
                    key: key.to_string(),
                });
            }
        }
    }
    for op in final_ops.iter().filter(|o| !o.state.is_final()) {
        anomalies.push(Anomaly::Stuck {
            id: op.id.clone(),
            state: op.state.to_string(),
        });
    }
}

/// One worker per (operation, epoch); epochs strictly increasing with attempts, and the final
/// operation agreeing with what was delivered.
fn check_deliveries(records: &[Record], final_ops: &[FinalOp], anomalies: &mut Vec<Anomaly>) {
    let mut workers: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    let mut epochs: BTreeMap<&str, BTreeMap<u32, BTreeSet<u64>>> = BTreeMap::new();
    for rec in records {
        let Record::Delivery(d) = rec else { continue };
        workers
            .entry((&d.op, d.epoch))
            .or_default()
            .insert(&d.worker);
        epochs
            .entry(&d.op)
            .or_default()
            .entry(d.attempt)
            .or_default()
            .insert(d.epoch);
    }
    for ((op, epoch), ws) in &workers {
        if ws.len() > 1 {
            anomalies.push(Anomaly::DeliveredTwice {
                op: op.to_string(),
                epoch: *epoch,
                workers: ws.iter().map(|w| w.to_string()).collect(),
            });
        }
    }
    let finals: BTreeMap<&str, &FinalOp> = final_ops.iter().map(|o| (o.id.as_str(), o)).collect();
    for (op, by_attempt) in &epochs {
        let mut last: Option<(u32, u64)> = None;
        for (&attempt, es) in by_attempt {
            if es.len() > 1 {
                anomalies.push(Anomaly::EpochOrder {
                    op: op.to_string(),
                    detail: format!("attempt {attempt} delivered under epochs {es:?}"),
                });
            }
            let epoch = es.iter().next().copied().unwrap_or_default();
            if let Some((a, e)) = last.filter(|&(_, e)| epoch <= e) {
                anomalies.push(Anomaly::EpochOrder {
                    op: op.to_string(),
                    detail: format!("attempt {attempt} epoch {epoch} after attempt {a} epoch {e}"),
                });
            }
            last = Some((attempt, epoch));
            if let Some(f) = finals.get(op) {
                if f.attempt < attempt || (f.attempt == attempt && !es.contains(&f.epoch)) {
                    anomalies.push(Anomaly::EpochOrder {
                        op: op.to_string(),
                        detail: format!(
                            "attempt {attempt} delivered under epochs {es:?}, but the operation \
                             ended at attempt {} epoch {}",
                            f.attempt, f.epoch
                        ),
                    });
                }
            }
        }
    }
}

/// Effects: at most one per (operation, epoch), none lost, each explained by a delivery, in
/// strictly increasing epochs and non-decreasing operation ids per target; every success backed
/// by an effect in its epoch; no report accepted after its fence was refused.
fn check_effects(
    records: &[Record],
    final_ops: &[FinalOp],
    logs: &BTreeMap<String, Vec<EffectEntry>>,
    anomalies: &mut Vec<Anomaly>,
) {
    let mut delivered: BTreeSet<(&str, u64, &str)> = BTreeSet::new();
    let mut acked: BTreeMap<(&str, u64), (usize, &str)> = BTreeMap::new();
    let mut refused: BTreeMap<(&str, u64, &str), u64> = BTreeMap::new();
    for rec in records {
        match rec {
            Record::Delivery(d) => {
                delivered.insert((&d.op, d.epoch, &d.worker));
            }
            Record::Effect(e) => match e.result {
                EffectResult::Ok | EffectResult::Found => {
                    let entry = acked.entry((&e.op, e.epoch)).or_insert((0, &e.target));
                    entry.0 += 1;
                }
                EffectResult::FenceRefused => {
                    let at = refused
                        .entry((&e.op, e.epoch, &e.worker))
                        .or_insert(u64::MAX);
                    *at = (*at).min(e.complete_ns);
                }
                EffectResult::Unknown => {}
            },
            _ => {}
        }
    }
    let mut in_log: BTreeMap<(&str, u64), usize> = BTreeMap::new();
    for (target, entries) in logs {
        for e in entries {
            *in_log.entry((&e.op, e.epoch)).or_default() += 1;
            if !delivered.contains(&(e.op.as_str(), e.epoch, e.worker.as_str())) {
                anomalies.push(Anomaly::UnexplainedEffect {
                    target: target.clone(),
                    entry: e.clone(),
                });
            }
        }
        for w in entries.windows(2) {
            if w[1].epoch <= w[0].epoch || op_index(&w[1].op) < op_index(&w[0].op) {
                anomalies.push(Anomaly::TargetOrder {
                    target: target.clone(),
                    before: w[0].clone(),
                    after: w[1].clone(),
                });
            }
        }
    }
    let keys: BTreeSet<(&str, u64)> = acked.keys().chain(in_log.keys()).copied().collect();
    for (op, epoch) in keys {
        let (n_acked, target) = acked.get(&(op, epoch)).copied().unwrap_or((0, ""));
        let n_log = in_log.get(&(op, epoch)).copied().unwrap_or(0);
        if n_acked > 1 || n_log > 1 {
            anomalies.push(Anomaly::DoubleEffect {
                op: op.to_string(),
                epoch,
                acknowledged: n_acked,
                in_log: n_log,
            });
        }
        if n_acked > 0 && n_log == 0 {
            anomalies.push(Anomaly::LostEffect {
                op: op.to_string(),
                epoch,
                target: target.to_string(),
            });
        }
    }
    for op in final_ops {
        if op.state == FinalState::Succeeded && !in_log.contains_key(&(op.id.as_str(), op.epoch)) {
            anomalies.push(Anomaly::SucceededWithoutEffect {
                op: op.id.clone(),
                epoch: op.epoch,
            });
        }
    }
    for rec in records {
        let Record::Report(r) = rec else { continue };
        let ends = matches!(r.report, ReportKind::Succeeded | ReportKind::Failed);
        if !ends || r.outcome != Outcome::Ok {
            continue;
        }
        let key = (r.op.as_str(), r.epoch, r.worker.as_str());
        if refused.get(&key).is_some_and(|&at| at < r.invoke_ns) {
            anomalies.push(Anomaly::ReportAfterFenceRefused {
                op: r.op.clone(),
                epoch: r.epoch,
                worker: r.worker.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
