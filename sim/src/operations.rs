//! The operations workload: lifecycle operations submitted through any node and run by workers
//! that crash, judged by the fault-injection suite's own checker (`jepsen::operations::check`)
//! as a library: one worker per (operation, epoch), epochs growing with attempts, at most one
//! effect per (operation, epoch) and none lost, effects on a target in epoch and submit order
//! (no fenced-out write got through), every success backed by its effect, no report accepted
//! after its fence was refused, every operation final in the end, one operation per
//! idempotency key.
//!
//! Submitters queue `update` operations on 2 targets, each with a fresh idempotency key; one of
//! unknown outcome is sent again with the same key, some acknowledged ones are sent again on
//! purpose, and some are aborted. The leader schedules them (`State::ops_dispatchable`, the
//! scheduler's query) and sweeps dead workers (`State::ops_due`), proposing on its sweep tick.
//! A worker registers with a TTL, heartbeats, and reads its assignments from one node's applied
//! state after another, as its assignment stream is served from the node it is connected to.
//! For each new (operation, epoch) it reports Started, works a little, appends its *effect* to
//! the target's effect log (a compare-and-set on the log's revision, fenced by the assignment's
//! lock under its epoch) and reports the end. A worker lives a while, then crashes while it runs
//! something: it *vanishes* (its runs stop where they are) or becomes a *zombie* (no more
//! heartbeats or reads of its assignments, but its runs go on after a stall longer than its TTL,
//! so their effects and reports come after the takeover and must be refused). A fresh worker
//! takes its slot. After the faults, workers stop crashing and run what is left; the run then
//! waits until every operation is final.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jepsen::history::Outcome;
use jepsen::operations::{
    AbortEvent, Delivery, EffectEntry, EffectEvent, EffectResult, FinalOp, FinalState, Record,
    ReportEvent, ReportKind, SubmitEvent, WorkerEvent, WorkerLife,
};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use steward::config::OperationsConfig;
use steward::server::operations::{op_limits, policy};
use steward::state::{
    Command, Fence, Handle, ObjectCommand, ObjectKey, OpFilter, OpState, Operation,
    OperationCommand, OperationReply, Rejection, Resource, Response, State, WorkerReport,
};
use tokio::time::Instant;

use crate::cluster::{Answer, Cluster};

/// Targets the operations run on, `t0`, `t1`, ...
const TARGETS: u64 = 2;
const TARGET_KIND: &str = "SimTarget";
/// Each target's effect log: an object of this kind with the target's name.
const EFFECTS_KIND: &str = "SimEffects";
const VERB: &str = "update";
/// A worker's TTL, drawn per worker (ms).
const WORKER_TTL_MS: (u64, u64) = (300, 800);
/// How long a worker lives before it crashes (ms); after that it crashes once it runs something,
/// or `BUSY_WAIT` later.
const LIFETIME_MS: (u64, u64) = (500, 3_000);
const BUSY_WAIT: Duration = Duration::from_millis(300);
/// How often a worker reads its assignments.
const POLL_EVERY: Duration = Duration::from_millis(30);
/// What a zombie's runs wait before they go on: longer than any TTL, so the takeover comes first.
const ZOMBIE_STALL: Duration = Duration::from_millis(1_500);
/// The work of one run, drawn per submit (ms).
const WORK_MS: (u64, u64) = (5, 80);
const RETRY: Duration = Duration::from_millis(30);
/// How long the healed cluster has to end every operation.
const FINISH: Duration = Duration::from_secs(10);

/// What the workload shares: the records, and where the run is.
#[derive(Default)]
pub struct Ops {
    records: Mutex<Vec<Record>>,
    /// The faults are over: workers no longer crash.
    stopped: AtomicBool,
    /// The run is over: every worker stops.
    halted: AtomicBool,
    /// Every worker generation's tasks, to stop at the halt.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Ops {
    fn record(&self, r: Record) {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r);
    }

    fn halted(&self) -> bool {
        self.halted.load(Ordering::Relaxed)
    }

    /// A task to stop at the halt.
    pub fn keep(&self, task: &tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
    }

    /// The faults are over: workers stop crashing.
    pub fn stop_crashing(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Stops every worker and every run, and hands over the records.
    pub fn halt(&self) -> Vec<Record> {
        self.halted.store(true, Ordering::Relaxed);
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
        std::mem::take(&mut *self.records.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn config() -> OperationsConfig {
    OperationsConfig::default()
}

fn target(t: u64) -> ObjectKey {
    ObjectKey {
        kind: TARGET_KIND.into(),
        namespace: "default".into(),
        name: format!("t{t}").into(),
    }
}

fn effects_key(name: &str) -> ObjectKey {
    ObjectKey {
        kind: EFFECTS_KIND.into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

fn object(kind: &str, name: &str, spec: Value) -> Option<Resource> {
    serde_json::from_value(json!({
        "kind": kind,
        "apiVersion": "sim.steward.dev/v1",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .ok()
}

fn now_ns(cluster: &Cluster) -> u64 {
    cluster.trace.now_ns()
}

fn random_node(cluster: &Cluster, rng: &mut SmallRng) -> u64 {
    cluster.ids[rng.random_range(0..cluster.ids.len())]
}

/// One submitter, `c<process>`: it creates target `t<own>` and its effect log, then queues
/// operations on random targets until `until`.
pub async fn submitter(
    cluster: Arc<Cluster>,
    process: u64,
    own: u64,
    mut rng: SmallRng,
    until: Instant,
    ops: Arc<Ops>,
) {
    let who = format!("c{process}");
    if own < TARGETS {
        let name = format!("t{own}");
        for (kind, spec) in [
            (TARGET_KIND, json!({"plan": "small"})),
            (EFFECTS_KIND, json!({"effects": []})),
        ] {
            let Some(object) = object(kind, &name, spec) else {
                continue;
            };
            while Instant::now() < until {
                let node = random_node(&cluster, &mut rng);
                let create = ObjectCommand::Create {
                    object: object.clone(),
                    fence: None,
                };
                match cluster.write(node, Command::Objects(create)).await {
                    Answer::Ok(Response::Rejected(r)) if !already_exists(&r) => {}
                    Answer::Ok(_) => break,
                    _ => {}
                }
                tokio::time::sleep(RETRY).await;
            }
        }
        cluster.trace.log(&who, format!("created {name}"));
    }
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let key = format!("{who}-{n}");
        let t = target(rng.random_range(0..TARGETS));
        let params = json!({
            "workMs": rng.random_range(WORK_MS.0..WORK_MS.1),
            "fail": rng.random_bool(0.1),
        });
        let mut id = submit(&cluster, &mut rng, process, &key, &t, &params, false, &ops).await;
        for _ in 0..3 {
            if id != Submitted::Unknown {
                break;
            }
            id = submit(&cluster, &mut rng, process, &key, &t, &params, false, &ops).await;
        }
        if let Submitted::Ok(op) = id {
            if rng.random_bool(0.1) {
                submit(&cluster, &mut rng, process, &key, &t, &params, true, &ops).await;
            }
            if rng.random_bool(0.1) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..100))).await;
                abort(&cluster, &mut rng, process, &op, &ops).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..150))).await;
    }
}

fn already_exists(r: &Rejection) -> bool {
    matches!(r, Rejection::AlreadyExists { .. })
}

#[derive(Debug, PartialEq)]
enum Submitted {
    Ok(steward::state::OperationId),
    Failed,
    Unknown,
}

#[allow(clippy::too_many_arguments)]
async fn submit(
    cluster: &Cluster,
    rng: &mut SmallRng,
    process: u64,
    key: &str,
    target: &ObjectKey,
    params: &Value,
    repeat: bool,
    ops: &Ops,
) -> Submitted {
    let who = format!("c{process}");
    let c = config();
    let command = OperationCommand::Submit {
        target: target.clone(),
        verb: VERB.into(),
        params: params.clone(),
        idempotency_key: Some(key.to_string()),
        create: None,
        policy: policy(&c, target, VERB, 0, 0),
        limits: op_limits(&c),
    };
    let node = random_node(cluster, rng);
    cluster
        .trace
        .log(&who, format!("submit {key} on {} via n{node}", target.name));
    let invoke_ns = now_ns(cluster);
    let answer = cluster.write(node, Command::Operations(command)).await;
    let (outcome, id, created, error, result) = match answer {
        Answer::Ok(Response::Operations(OperationReply::Submitted { operation, created })) => (
            Outcome::Ok,
            operation.id.to_string(),
            created,
            String::new(),
            Submitted::Ok(operation.id),
        ),
        Answer::Ok(Response::Rejected(r)) => (
            Outcome::Fail,
            String::new(),
            false,
            r.to_string(),
            Submitted::Failed,
        ),
        Answer::Ok(other) => (
            Outcome::Fail,
            String::new(),
            false,
            format!("unexpected answer {other:?}"),
            Submitted::Failed,
        ),
        Answer::Fail(e) => (Outcome::Fail, String::new(), false, e, Submitted::Failed),
        Answer::Unknown(e) => (
            Outcome::Unknown,
            String::new(),
            false,
            e,
            Submitted::Unknown,
        ),
    };
    cluster
        .trace
        .log(&who, format!("{outcome:?} {id} {error}").trim_end());
    ops.record(Record::Submit(SubmitEvent {
        process,
        key: key.to_string(),
        target: target.name.to_string(),
        verb: VERB.into(),
        outcome,
        id,
        created,
        repeat,
        invoke_ns,
        complete_ns: now_ns(cluster),
        error,
    }));
    result
}

async fn abort(
    cluster: &Cluster,
    rng: &mut SmallRng,
    process: u64,
    id: &steward::state::OperationId,
    ops: &Ops,
) {
    let node = random_node(cluster, rng);
    cluster
        .trace
        .log(&format!("c{process}"), format!("abort {id} via n{node}"));
    let invoke_ns = now_ns(cluster);
    let command = OperationCommand::Abort {
        id: *id,
        limits: op_limits(&config()),
    };
    let (outcome, error) = match cluster.write(node, Command::Operations(command)).await {
        Answer::Ok(Response::Rejected(r)) => (Outcome::Fail, r.to_string()),
        Answer::Ok(_) => (Outcome::Ok, String::new()),
        Answer::Fail(e) => (Outcome::Fail, e),
        Answer::Unknown(e) => (Outcome::Unknown, e),
    };
    ops.record(Record::Abort(AbortEvent {
        process,
        id: id.to_string(),
        outcome,
        invoke_ns,
        complete_ns: now_ns(cluster),
        error,
    }));
}

/// One worker slot: a worker lives, crashes, and a fresh one (`w<slot>-<generation>`) takes its
/// place, until the halt.
pub async fn worker_slot(cluster: Arc<Cluster>, slot: u64, seed: u64, ops: Arc<Ops>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for generation in 1.. {
        if ops.halted() {
            return;
        }
        let w = Arc::new(Worker {
            id: format!("w{slot}-{generation}"),
            ttl_ms: rng.random_range(WORKER_TTL_MS.0..WORKER_TTL_MS.1),
            cluster: cluster.clone(),
            ops: ops.clone(),
            zombie: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            runs: Mutex::default(),
            aborts: Mutex::default(),
        });
        let seed = rng.random();
        if !w.register(&mut SmallRng::seed_from_u64(seed)).await {
            return;
        }
        ops.record(Record::Worker(WorkerEvent {
            worker: w.id.clone(),
            event: WorkerLife::Started,
            at_ns: now_ns(&cluster),
        }));
        let heartbeat = tokio::spawn(w.clone().heartbeat(rng.random()));
        let poll = tokio::spawn(w.clone().poll(rng.random()));
        ops.keep(&heartbeat);
        ops.keep(&poll);
        let lifetime = rng.random_range(LIFETIME_MS.0..LIFETIME_MS.1);
        let dies_at = Instant::now() + Duration::from_millis(lifetime);
        let busy_or = dies_at + BUSY_WAIT;
        let alive = |now: Instant| now < dies_at || (now < busy_or && w.busy() == 0);
        while !ops.halted() && (ops.stopped.load(Ordering::Relaxed) || alive(Instant::now())) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        heartbeat.abort();
        poll.abort();
        if ops.halted() {
            return;
        }
        let event = if rng.random_bool(1.0 / 3.0) {
            w.zombie.store(true, Ordering::Relaxed);
            WorkerLife::Zombied
        } else {
            w.vanish();
            WorkerLife::Vanished
        };
        cluster.trace.log(&w.id, format!("crashes: {event:?}"));
        ops.record(Record::Worker(WorkerEvent {
            worker: w.id.clone(),
            event,
            at_ns: now_ns(&cluster),
        }));
    }
}

struct Worker {
    id: String,
    ttl_ms: u64,
    cluster: Arc<Cluster>,
    ops: Arc<Ops>,
    zombie: AtomicBool,
    /// Runs between their delivery and their end report.
    busy: AtomicUsize,
    /// Every (operation, epoch) it was given, with the abort signal while its run goes on and
    /// the run's task.
    runs: Mutex<BTreeMap<(String, u64), Run>>,
    /// (operation, epoch) whose abort it answered without a run.
    aborts: Mutex<BTreeSet<(String, u64)>>,
}

struct Run {
    abort: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::AbortHandle,
}

impl Worker {
    fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Registers (again), until it is done or the run halts.
    async fn register(&self, rng: &mut SmallRng) -> bool {
        let c = config();
        while !self.ops.halted() {
            let node = random_node(&self.cluster, rng);
            let command = OperationCommand::RegisterWorker {
                worker: self.id.clone(),
                handles: vec![Handle::new(TARGET_KIND, VERB)],
                capacity: 1,
                ttl_ms: self.ttl_ms,
                limits: op_limits(&c),
            };
            self.cluster.trace.log(
                &self.id,
                format!("register, ttl {} ms, via n{node}", self.ttl_ms),
            );
            if let Answer::Ok(Response::Operations(OperationReply::Worker { .. })) =
                self.cluster.write(node, Command::Operations(command)).await
            {
                return true;
            }
            tokio::time::sleep(RETRY).await;
        }
        false
    }

    async fn heartbeat(self: Arc<Self>, seed: u64) {
        let mut rng = SmallRng::seed_from_u64(seed);
        loop {
            tokio::time::sleep(Duration::from_millis(self.ttl_ms / 4)).await;
            let node = random_node(&self.cluster, &mut rng);
            let command = OperationCommand::Heartbeat {
                worker: self.id.clone(),
            };
            let answer = self.cluster.write(node, Command::Operations(command)).await;
            if let Answer::Ok(Response::Rejected(Rejection::WorkerNotFound { .. })) = answer {
                // Presumed dead, its work taken back; it lives on and registers again.
                self.cluster
                    .trace
                    .log(&self.id, "not found: registers again");
                if self.register(&mut rng).await {
                    self.ops.record(Record::Worker(WorkerEvent {
                        worker: self.id.clone(),
                        event: WorkerLife::Reregistered,
                        at_ns: now_ns(&self.cluster),
                    }));
                }
            }
        }
    }

    /// Reads its assignments from one node after another, as its stream is served from the
    /// node's applied state.
    async fn poll(self: Arc<Self>, seed: u64) {
        let mut rng = SmallRng::seed_from_u64(seed);
        loop {
            tokio::time::sleep(POLL_EVERY).await;
            let node = random_node(&self.cluster, &mut rng);
            let Some(state) = self.cluster.state_of(node) else {
                continue;
            };
            let mine: Vec<Operation> = {
                let state = state.read().unwrap_or_else(|p| p.into_inner());
                assignments(&state, &self.id)
            };
            for op in mine {
                self.deliver(op);
            }
        }
    }

    fn deliver(self: &Arc<Self>, op: Operation) {
        let abort = op.state == OpState::Aborting;
        let key = (op.id.to_string(), op.epoch);
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let repeat = match abort {
            true => self
                .aborts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&key),
            false => runs.contains_key(&key),
        };
        if !repeat {
            let what = if abort { "abort" } else { "run" };
            self.cluster.trace.log(
                &self.id,
                format!("given {} epoch {} to {what}", op.id, op.epoch),
            );
        }
        self.ops.record(Record::Delivery(Delivery {
            worker: self.id.clone(),
            op: op.id.to_string(),
            target: op.target.name.to_string(),
            attempt: op.attempt,
            epoch: op.epoch,
            abort,
            repeat,
            at_ns: now_ns(&self.cluster),
        }));
        if abort {
            if let Some(tx) = runs.get_mut(&key).and_then(|r| r.abort.take()) {
                let _ = tx.send(());
                return;
            }
            if !self
                .aborts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key)
            {
                return;
            }
            let w = self.clone();
            let task = tokio::spawn(async move {
                w.report(&op, WorkerReport::Aborted).await;
            });
            self.ops.keep(&task);
            return;
        }
        if repeat {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let w = self.clone();
        let task = tokio::spawn(async move {
            w.busy.fetch_add(1, Ordering::Relaxed);
            w.run(&op, rx).await;
            w.busy.fetch_sub(1, Ordering::Relaxed);
        });
        self.ops.keep(&task);
        runs.insert(
            key,
            Run {
                abort: Some(tx),
                task: task.abort_handle(),
            },
        );
    }

    /// Crashes: every run stops where it is.
    fn vanish(&self) {
        for r in self.runs.lock().unwrap_or_else(|p| p.into_inner()).values() {
            r.task.abort();
        }
    }

    async fn run(&self, op: &Operation, mut abort: tokio::sync::oneshot::Receiver<()>) {
        let work = Duration::from_millis(op.params["workMs"].as_u64().unwrap_or(WORK_MS.0));
        let fail = op.params["fail"].as_bool().unwrap_or(false);
        if !self.report(op, WorkerReport::Started).await {
            return;
        }
        let aborted = tokio::select! {
            biased;
            r = &mut abort => r.is_ok(),
            _ = tokio::time::sleep(work) => false,
        };
        if aborted {
            self.report(op, WorkerReport::Aborted).await;
            return;
        }
        if self.zombie.load(Ordering::Relaxed) {
            tokio::time::sleep(ZOMBIE_STALL).await;
        }
        if !self.effect(op).await {
            return;
        }
        let end = match fail {
            true => WorkerReport::Failed {
                error: "the submit asked this operation to fail".into(),
            },
            false => WorkerReport::Succeeded {
                response: json!({"worker": self.id, "epoch": op.epoch}),
            },
        };
        self.report(op, end).await;
    }

    /// Appends this assignment's effect to the target's log: a linearizable read, then a
    /// compare-and-set on the log's revision under the assignment's fence. An unknown outcome
    /// is settled by reading again. True once the write is acknowledged, found or refused by
    /// the fence; false on halt.
    async fn effect(&self, op: &Operation) -> bool {
        let mut rng = SmallRng::seed_from_u64(op.epoch ^ u64::from(op.attempt));
        let entry = EffectEntry {
            op: op.id.to_string(),
            attempt: op.attempt,
            epoch: op.epoch,
            worker: self.id.clone(),
        };
        let Some(lock) = op.policy.lock.as_ref() else {
            return false;
        };
        let fence = Fence {
            lock: lock.name.clone(),
            token: op.epoch,
        };
        let name = op.target.name.to_string();
        let record = |result: EffectResult, invoke_ns: u64, error: String| {
            self.ops.record(Record::Effect(EffectEvent {
                worker: self.id.clone(),
                op: op.id.to_string(),
                target: name.clone(),
                attempt: op.attempt,
                epoch: op.epoch,
                result,
                invoke_ns,
                complete_ns: now_ns(&self.cluster),
                error,
            }))
        };
        while !self.ops.halted() {
            let invoke_ns = now_ns(&self.cluster);
            let node = random_node(&self.cluster, &mut rng);
            let key = effects_key(&name);
            let read = self
                .cluster
                .read(node, move |s| {
                    s.get(&key)
                        .map(|r| (effect_log(r), r.metadata.resource_version))
                })
                .await;
            let (mut entries, revision) = match read {
                Answer::Ok(Some(found)) => found,
                _ => {
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            if entries.contains(&entry) {
                record(EffectResult::Found, invoke_ns, String::new());
                return true;
            }
            entries.push(entry.clone());
            let Some(next) = object(EFFECTS_KIND, &name, json!({ "effects": entries })) else {
                return false;
            };
            let update = ObjectCommand::Update {
                object: next,
                expected_revision: Some(revision),
                fence: Some(fence.clone()),
            };
            self.cluster.trace.log(
                &self.id,
                format!(
                    "effect of {} epoch {} on {name} via n{node}",
                    op.id, op.epoch
                ),
            );
            match self.cluster.write(node, Command::Objects(update)).await {
                Answer::Ok(Response::Rejected(Rejection::FenceRejected { reason, .. })) => {
                    self.cluster
                        .trace
                        .log(&self.id, format!("fence refused: {reason}"));
                    record(EffectResult::FenceRefused, invoke_ns, reason);
                    return true;
                }
                // The log changed since the read (an earlier write of unknown outcome): again.
                Answer::Ok(Response::Rejected(Rejection::Conflict { .. })) | Answer::Fail(_) => {}
                Answer::Ok(Response::Rejected(r)) => {
                    self.cluster
                        .trace
                        .log(&self.id, format!("effect refused: {r}"));
                    tokio::time::sleep(RETRY).await;
                }
                Answer::Ok(_) => {
                    record(EffectResult::Ok, invoke_ns, String::new());
                    return true;
                }
                Answer::Unknown(e) => {
                    record(EffectResult::Unknown, invoke_ns, e);
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
        false
    }

    /// Sends a report, again while it was not answered (a repeat is answered like the first).
    /// False when it was refused (the assignment is no longer this worker's) or on halt.
    async fn report(&self, op: &Operation, report: WorkerReport) -> bool {
        let kind = match &report {
            WorkerReport::Started => ReportKind::Started,
            WorkerReport::Succeeded { .. } => ReportKind::Succeeded,
            WorkerReport::Failed { .. } => ReportKind::Failed,
            WorkerReport::Aborted => ReportKind::Aborted,
        };
        let mut rng = SmallRng::seed_from_u64(op.epoch.rotate_left(17) ^ kind as u64);
        while !self.ops.halted() {
            let node = random_node(&self.cluster, &mut rng);
            let invoke_ns = now_ns(&self.cluster);
            let command = OperationCommand::Report {
                id: op.id,
                worker: self.id.clone(),
                attempt: op.attempt,
                epoch: op.epoch,
                report: report.clone(),
                limits: op_limits(&config()),
            };
            self.cluster.trace.log(
                &self.id,
                format!(
                    "report {kind:?} for {} epoch {} via n{node}",
                    op.id, op.epoch
                ),
            );
            let answer = self.cluster.write(node, Command::Operations(command)).await;
            let (outcome, stale, error) = match &answer {
                Answer::Ok(Response::Rejected(r)) => (
                    Outcome::Fail,
                    matches!(r, Rejection::StaleAssignment { .. }),
                    r.to_string(),
                ),
                Answer::Ok(_) => (Outcome::Ok, false, String::new()),
                Answer::Fail(e) => (Outcome::Fail, false, e.clone()),
                Answer::Unknown(e) => (Outcome::Unknown, false, e.clone()),
            };
            if !error.is_empty() {
                self.cluster
                    .trace
                    .log(&self.id, format!("{outcome:?}: {error}"));
            }
            self.ops.record(Record::Report(ReportEvent {
                worker: self.id.clone(),
                op: op.id.to_string(),
                attempt: op.attempt,
                epoch: op.epoch,
                report: kind,
                outcome,
                stale,
                invoke_ns,
                complete_ns: now_ns(&self.cluster),
                error,
            }));
            match answer {
                Answer::Ok(Response::Rejected(_)) => return false,
                Answer::Ok(_) => return true,
                // Not applied (the node was down) or not answered: sent again.
                Answer::Fail(_) | Answer::Unknown(_) => tokio::time::sleep(RETRY).await,
            }
        }
        false
    }
}

/// The operations assigned to `worker` in `state`: what its assignment stream sends it (to run,
/// or to abort when `Aborting`).
fn assignments(state: &State, worker: &str) -> Vec<Operation> {
    let filter = OpFilter {
        worker: Some(worker.to_string()),
        ..Default::default()
    };
    state
        .operations(&filter, None, 0)
        .into_iter()
        .filter(|o| o.state.is_assigned())
        .cloned()
        .collect()
}

fn effect_log(r: &Resource) -> Vec<EffectEntry> {
    serde_json::from_value(r.spec.to_value()["effects"].clone()).unwrap_or_default()
}

/// Waits, within [`FINISH`], until every operation the node furthest ahead holds has ended.
pub async fn finish(cluster: &Cluster) -> bool {
    let deadline = Instant::now() + FINISH;
    while Instant::now() < deadline {
        let furthest = cluster.views().into_iter().max_by_key(|v| v.revision);
        if let Some(view) = furthest {
            let state = view.state.read().unwrap_or_else(|p| p.into_inner());
            if state.operation_counts().1 == 0 {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What is left, for the trace of a failing seed.
    if let Some(view) = cluster.views().into_iter().max_by_key(|v| v.revision) {
        let state = view.state.read().unwrap_or_else(|p| p.into_inner());
        let workers: Vec<String> = state.workers().map(|w| w.id.clone()).collect();
        let open: Vec<String> = state
            .operations(&OpFilter::default(), None, 0)
            .into_iter()
            .filter(|o| !o.state.is_final())
            .take(5)
            .map(|o| {
                format!(
                    "{} {:?} on {} ({:?})",
                    o.id, o.state, o.target.name, o.worker
                )
            })
            .collect();
        cluster.trace.log(
            "CHK",
            format!(
                "operations not ended within {FINISH:?} on n{}: {}; workers: {}",
                view.node,
                open.join(", "),
                workers.join(", ")
            ),
        );
    }
    false
}

/// The final operations and effect logs of `state`, checked with the records.
pub fn check(records: &[Record], state: &State) -> (Vec<String>, String) {
    let final_ops: Vec<FinalOp> = state
        .operations(&OpFilter::default(), None, 0)
        .into_iter()
        .map(|o| FinalOp {
            id: o.id.to_string(),
            key: o.idempotency_key.clone().unwrap_or_default(),
            target: o.target.name.to_string(),
            verb: o.verb.clone(),
            state: match o.state {
                OpState::Succeeded => FinalState::Succeeded,
                OpState::Failed => FinalState::Failed,
                OpState::Aborted => FinalState::Aborted,
                other => FinalState::Other(format!("{other:?}")),
            },
            attempt: o.attempt,
            epoch: o.epoch,
            worker: o.worker.clone().unwrap_or_default(),
        })
        .collect();
    let logs: BTreeMap<String, Vec<EffectEntry>> = (0..TARGETS)
        .filter_map(|t| {
            let name = format!("t{t}");
            let log = state.get(&effects_key(&name)).map(effect_log)?;
            Some((name, log))
        })
        .collect();
    let report = jepsen::operations::check(records, &final_ops, &logs);
    let found = report
        .anomalies
        .iter()
        .take(10)
        .map(|a| {
            format!(
                "operations: {}",
                serde_json::to_string(a).unwrap_or_default()
            )
        })
        .collect();
    (found, report.summary())
}
