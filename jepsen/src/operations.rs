//! The operations workload: lifecycle operations submitted by clients and run by workers that
//! crash, checked for exactly-once effects per epoch and for every operation reaching an end.
//!
//! Submitters (`SUBMITTERS` processes, each starting at another node) submit create, update and
//! delete operations on `TARGETS` targets of kind `JepsenTarget`, each with a fresh idempotency
//! key; a submit with an unknown outcome is sent again with the same key, some acknowledged ones
//! are sent again on purpose (the answer must name the same operation), and some are aborted.
//!
//! Workers run inside this process through steward's client (`WORKER_SLOTS` slots): each
//! registers with a `WORKER_TTL` of a few seconds, heartbeats, and streams its assignments from
//! one node after another (re-opening every `STREAM_MAX_AGE`, so repeats are normal). For each
//! new (operation, epoch) it reports Started, works a little, performs the *effect* — appending
//! (operation, attempt, epoch, worker) to the target's `JepsenEffects` log with a
//! compare-and-set on the log's revision, fenced with the assignment's fence (the target's lock
//! under the epoch) — and reports Succeeded (or Failed when the submit asked for it). A worker
//! lives `LIFETIME_MS`, then crashes while it runs something (or `BUSY_WAIT` later): it
//! *vanishes* (its tasks dropped mid-way, no report) or it becomes a *zombie* (no more heartbeats
//! or streams, but its runs go on after `ZOMBIE_STALL`, usually past the takeover, so their
//! effects and reports are refused, and must never land after a successor's; a run already past
//! its work writes on time). A fresh worker takes its slot. Every delivery, effect write and report is recorded with its outcome.
//!
//! After the run and the heal, submitters stop, workers stop crashing and keep working, and the
//! run waits (up to `SETTLE`, polling a linearizable list) until every operation is final and
//! every acknowledged submit's operation is listed. Then the effect logs are read and `check`
//! judges (see `check.rs`): one worker per (operation, epoch); epochs strictly increasing with
//! attempts; at most one effect per (operation, epoch), none lost or unexplained; per target,
//! effects in strictly increasing epochs and non-decreasing operation ids (one operation at a
//! time, in submit order, and no fenced-out write); every success backed by an effect in its
//! final epoch; no report accepted after its fence was refused; every operation final; one
//! operation per idempotency key.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};
use steward::client::{
    reason, Assignment, AssignmentKind, Client, Consistency, ErrorReason, Fence, OpListOptions,
    OpReport, OperationInfo, SubmitOptions,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::Code;

use crate::finding::{self, write_jsonl, Finding};
use crate::history::Outcome;
use crate::outcome::classify;
use crate::plot::Point;
use crate::rng::Rng;

mod check;
mod records;
mod worker;
pub use check::{check, Anomaly, OpsReport};
pub use records::*;
use worker::worker_slot;

pub const TARGET_KIND: &str = "JepsenTarget";
pub const EFFECTS_KIND: &str = "JepsenEffects";
/// Targets t0..t5; each has its own effect log of the same name.
pub const TARGETS: u64 = 6;
pub const SUBMITTERS: u64 = 4;
pub const WORKER_SLOTS: u64 = 4;
/// Operations one worker runs at once.
const CAPACITY: u32 = 2;
/// Short, so takeovers happen during the run.
pub const WORKER_TTL: Duration = Duration::from_secs(3);
const HEARTBEAT_EVERY: Duration = Duration::from_millis(750);
/// Deadline of one worker request (a heartbeat must not wait out the TTL).
const WORKER_TIMEOUT: Duration = Duration::from_secs(2);
/// A worker drops its assignment stream on purpose after this long and opens one on the next node.
const STREAM_MAX_AGE: Duration = Duration::from_secs(5);
/// How long a worker lives before it crashes, in ms.
const LIFETIME_MS: (u64, u64) = (6_000, 14_000);
/// Past its lifetime, a worker waits up to this long for a run in progress before it crashes.
const BUSY_WAIT: Duration = Duration::from_secs(3);
/// A zombie's runs wait this long (past its TTL and a sweep) before going on.
const ZOMBIE_STALL: Duration = Duration::from_secs(7);
/// How long one run works before its effect, in ms.
const WORK_MS: (u64, u64) = (50, 400);
/// Pause between two submits of one submitter, in ms.
const SUBMIT_PAUSE_MS: (u64, u64) = (100, 500);
/// Attempts each operation gets (steward's default is 3; crashes are frequent here).
const MAX_ATTEMPTS: u32 = 8;
/// How long the run waits after the heal for every operation to end.
pub const SETTLE: Duration = Duration::from_secs(60);
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Writes the run's records to `history_file`; the finding is the checker's `report`.
pub fn finding(
    records: &[Record],
    report: &OpsReport,
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    write_jsonl(history_file, records)?;
    let (_, code) = finding::verdict(report.valid(), true);
    Ok(Finding {
        summary: report.summary(),
        report: serde_json::to_string_pretty(report)?,
        code,
        points: points(records),
    })
}

/// Submit latencies, for the plot.
pub fn points(records: &[Record]) -> Vec<Point> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Submit(s) => Some(Point {
                invoke_ns: s.invoke_ns,
                latency_ns: s.complete_ns.saturating_sub(s.invoke_ns),
                outcome: s.outcome,
            }),
            _ => None,
        })
        .collect()
}

fn effects_object(target: &str, entries: &[EffectEntry]) -> Value {
    json!({"kind": EFFECTS_KIND, "apiVersion": "jepsen/v1", "metadata": {"name": target},
           "spec": {"effects": entries}})
}

fn target_object(target: &str) -> Value {
    json!({"kind": TARGET_KIND, "apiVersion": "jepsen/v1", "metadata": {"name": target}, "spec": {}})
}

fn error_text(e: &tonic::Status) -> String {
    format!("{:?}: {}", e.code(), e.message())
}

/// Creates the empty effect logs (retried while the fresh cluster settles).
pub async fn init(client: &Client) -> anyhow::Result<()> {
    for t in 0..TARGETS {
        let obj = effects_object(&format!("t{t}"), &[]);
        let mut tries = 0;
        loop {
            match client.create(&obj).await {
                Ok(_) => break,
                Err(e) if e.code() == Code::AlreadyExists => break,
                Err(e) if tries < 20 => {
                    tries += 1;
                    tracing::warn!(error = %e, "creating an effect log; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => anyhow::bail!("creating the effect log t{t}: {e}"),
            }
        }
    }
    Ok(())
}

// ---- the run ----

struct Shared {
    endpoints: Vec<String>,
    seed: u64,
    start: Instant,
    /// The run is over: no more submits, no more crashes.
    stop: Arc<AtomicBool>,
    /// The wait is over: every worker stops.
    halt: AtomicBool,
    records: Mutex<Vec<Record>>,
    /// Every run task of every worker, so a halt ends them all (zombies' too).
    runs: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn record(&self, r: Record) {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn halted(&self) -> bool {
        self.halt.load(Ordering::Relaxed)
    }

    /// The endpoints starting at the `i`-th, so processes spread over the nodes.
    fn rotated(&self, i: u64) -> Vec<String> {
        let mut e = self.endpoints.clone();
        let n = e.len();
        e.rotate_left((i as usize) % n.max(1));
        e
    }
}

/// The submitters and worker slots of a running workload.
pub struct Run {
    shared: Arc<Shared>,
    submitters: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// Starts the submitters and the worker slots; they run until `stop` (submitters) and until
/// `Run::finish` has what it needs (workers).
pub fn start(endpoints: &[String], seed: u64, start: Instant, stop: Arc<AtomicBool>) -> Run {
    let shared = Arc::new(Shared {
        endpoints: endpoints.to_vec(),
        seed,
        start,
        stop,
        halt: AtomicBool::new(false),
        records: Mutex::default(),
        runs: Mutex::default(),
    });
    let submitters = (0..SUBMITTERS)
        .map(|p| tokio::spawn(submitter(p, shared.clone())))
        .collect();
    let workers = (0..WORKER_SLOTS)
        .map(|s| tokio::spawn(worker_slot(s, shared.clone())))
        .collect();
    Run {
        shared,
        submitters,
        workers,
    }
}

impl Run {
    /// After `stop` and the heal: waits for every operation to end (up to `SETTLE`), stops the
    /// workers, reads the effect logs and checks. Returns every record and the report.
    pub async fn finish(self, client: &Client) -> anyhow::Result<(Vec<Record>, OpsReport)> {
        for s in self.submitters {
            let _ = s.await;
        }
        let acked: BTreeSet<String> = {
            let records = self
                .shared
                .records
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            records
                .iter()
                .filter_map(|r| match r {
                    Record::Submit(s) if s.outcome == Outcome::Ok => Some(s.id.clone()),
                    _ => None,
                })
                .collect()
        };
        let settle_started = Instant::now();
        let final_ops = settle(client, &acked).await;
        let settle_ms = settle_started.elapsed().as_millis() as u64;
        self.shared.halt.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.await;
        }
        let runs = std::mem::take(&mut *self.shared.runs.lock().unwrap_or_else(|p| p.into_inner()));
        for r in runs {
            r.abort();
            let _ = r.await;
        }
        let final_ops = final_ops?;
        let mut logs = BTreeMap::new();
        for t in 0..TARGETS {
            let name = format!("t{t}");
            logs.insert(name.clone(), read_log(client, &name).await?);
        }
        let records = std::mem::take(
            &mut *self
                .shared
                .records
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let mut report = check(&records, &final_ops, &logs);
        report.settle_ms = settle_ms;
        Ok((records, report))
    }
}

/// Polls a linearizable list until every operation is final and every acknowledged one is
/// listed, or `SETTLE` passed; returns the last list.
async fn settle(client: &Client, acked: &BTreeSet<String>) -> anyhow::Result<Vec<FinalOp>> {
    let deadline = Instant::now() + SETTLE;
    loop {
        match list_ops(client).await {
            Ok(ops) => {
                let listed: BTreeSet<&str> = ops.iter().map(|o| o.id.as_str()).collect();
                let done = ops.iter().all(|o| o.state.is_final())
                    && acked.iter().all(|id| listed.contains(id.as_str()));
                if done || Instant::now() >= deadline {
                    return Ok(ops);
                }
            }
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "listing operations failed; retrying");
            }
            Err(e) => anyhow::bail!("final list of operations: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn list_ops(client: &Client) -> Result<Vec<FinalOp>, tonic::Status> {
    let mut opts = OpListOptions {
        limit: 1000,
        consistency: Consistency::Linearizable,
        ..OpListOptions::default()
    };
    let mut out = vec![];
    loop {
        let page = client.op_list(&opts).await?;
        out.extend(page.operations.iter().map(FinalOp::of));
        if page.continue_token.is_empty() {
            return Ok(out);
        }
        opts.continue_token = page.continue_token;
    }
}

/// A target's effect log, read linearizably (retried for up to a minute).
async fn read_log(client: &Client, target: &str) -> anyhow::Result<Vec<EffectEntry>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client
            .get(EFFECTS_KIND, "default", target, Consistency::Linearizable)
            .await
        {
            Ok(obj) => return Ok(serde_json::from_value(obj["spec"]["effects"].clone())?),
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "reading an effect log failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => anyhow::bail!("reading the effect log {target}: {e}"),
        }
    }
}

// ---- submitters ----

async fn submitter(p: u64, sh: Arc<Shared>) {
    let mut rng = Rng::new(sh.seed ^ (p + 1).wrapping_mul(0x5151));
    let Ok(client) = Client::connect_with_timeout(&sh.rotated(p), Duration::from_secs(5)) else {
        return;
    };
    let mut n = 0u64;
    while !sh.stopped() {
        n += 1;
        let target = format!("t{}", rng.below(TARGETS));
        let verb = match rng.below(10) {
            0..=2 => "create",
            3..=7 => "update",
            _ => "delete",
        };
        let key = format!("s{p}-{n}");
        let work_ms = WORK_MS.0 + rng.below(WORK_MS.1 - WORK_MS.0);
        let opts = SubmitOptions {
            params: Some(json!({"workMs": work_ms, "fail": rng.below(10) == 0})),
            idempotency_key: Some(key.clone()),
            create: (verb == "create").then(|| target_object(&target)),
            max_attempts: Some(MAX_ATTEMPTS),
            deadline: None,
            lock: None,
        };
        let submit = |repeat: bool| {
            let (client, sh, key, target, opts) = (&client, &sh, &key, &target, &opts);
            async move {
                let invoke_ns = sh.now_ns();
                let r = client
                    .op_submit(TARGET_KIND, "default", target, verb, opts)
                    .await;
                let mut ev = SubmitEvent {
                    process: p,
                    key: key.clone(),
                    target: target.clone(),
                    verb: verb.to_string(),
                    outcome: Outcome::Ok,
                    id: String::new(),
                    created: false,
                    repeat,
                    invoke_ns,
                    complete_ns: sh.now_ns(),
                    error: String::new(),
                };
                match r {
                    Ok(reply) => {
                        ev.id = reply.operation.map(|o| o.id).unwrap_or_default();
                        ev.created = reply.created;
                    }
                    Err(e) => {
                        ev.outcome = classify(&e);
                        ev.error = error_text(&e);
                    }
                }
                sh.record(Record::Submit(ev.clone()));
                ev
            }
        };
        // An unknown outcome is sent again with the same key: it must not make a second one.
        let mut id = None;
        for _ in 0..3 {
            let ev = submit(false).await;
            match ev.outcome {
                Outcome::Ok => id = Some(ev.id),
                Outcome::Fail => break,
                Outcome::Unknown if !sh.stopped() => continue,
                Outcome::Unknown => break,
            }
            break;
        }
        if let Some(id) = id {
            if rng.below(6) == 0 {
                submit(true).await;
            }
            if rng.below(8) == 0 {
                tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
                abort(p, &client, &sh, &id).await;
            }
        }
        let pause = SUBMIT_PAUSE_MS.0 + rng.below(SUBMIT_PAUSE_MS.1 - SUBMIT_PAUSE_MS.0);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

async fn abort(p: u64, client: &Client, sh: &Shared, id: &str) {
    let invoke_ns = sh.now_ns();
    let r = client.op_abort(id).await;
    let (outcome, error) = match &r {
        Ok(_) => (Outcome::Ok, String::new()),
        Err(e) => (classify(e), error_text(e)),
    };
    sh.record(Record::Abort(AbortEvent {
        process: p,
        id: id.to_string(),
        outcome,
        invoke_ns,
        complete_ns: sh.now_ns(),
        error,
    }));
}
