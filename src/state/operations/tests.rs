//! Table-driven operation and worker sequences through `apply_effects`, with made-up leader times
//! and terms: registration, submit (idempotent, creating the target), assignment under the
//! target's lock, reports (stale ones refused), abort in every state, serialisation on one target,
//! and every refusal leaving the state as it was. The harness here is shared with `sweep_tests`
//! and `proptests`.

use serde_json::json;

use super::*;
use crate::state::apply::{apply_blank, apply_effects, ApplyContext, Effects, State};
use crate::state::command::{Command, EventType, Rejection, Response, WorkerReport};
use crate::state::locks::{LockLimits, LockMode};
use crate::state::resource::Resource;

pub(super) const LIMITS: OpLimits = OpLimits {
    active_max: 8,
    per_target_max: 3,
    finished_max: 16,
    params_bytes_max: 256,
    result_bytes_max: 256,
    attempts_max: 5,
    deadline_ms_max: 100_000,
    workers_max: 4,
    handles_max: 4,
    capacity_max: 8,
};
pub(super) const LOCK_LIMITS: LockLimits = LockLimits {
    holders_max: 4,
    waiters_max: 4,
    locks_max: 16,
    details_bytes_max: 1024,
};
/// Handles of the test workers unless a test says otherwise.
pub(super) const DIRECTOR_VERBS: [&str; 4] = [
    "Director:create",
    "Director:update",
    "Director:delete",
    "Director:backup",
];

/// Runs commands as consecutive log entries; `new_term` models a leader change.
pub(super) struct Log {
    pub(super) state: State,
    pub(super) effects: Effects,
    pub(super) index: u64,
    term: u64,
}

impl Log {
    pub(super) fn new() -> Log {
        Log {
            state: State::new(),
            effects: Effects::default(),
            index: 0,
            term: 1,
        }
    }

    pub(super) fn run(&mut self, time_ms: u64, cmd: Command) -> Response {
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: self.term,
            time_ms,
        };
        apply_effects(&mut self.state, &ctx, &cmd, &mut self.effects)
    }

    /// A new leader's blank entry.
    pub(super) fn new_term(&mut self) {
        self.term += 1;
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: self.term,
            time_ms: self.state.time_ms(),
        };
        apply_blank(&mut self.state, &ctx);
    }

    /// Runs a command that must answer an operation; returns it.
    pub(super) fn op_ok(&mut self, time_ms: u64, cmd: Command) -> Operation {
        match self.run(time_ms, cmd) {
            Response::Operation { operation } => operation,
            Response::OpSubmitted { operation, .. } => operation,
            other => panic!("expected an operation, got {other:?}"),
        }
    }

    /// Submits; returns the new operation's id.
    pub(super) fn submit(&mut self, time_ms: u64, cmd: Command) -> OperationId {
        match self.run(time_ms, cmd) {
            Response::OpSubmitted {
                operation,
                created: true,
            } => operation.id,
            other => panic!("expected a new operation, got {other:?}"),
        }
    }

    pub(super) fn worker_ok(&mut self, time_ms: u64, cmd: Command) -> Worker {
        match self.run(time_ms, cmd) {
            Response::Worker { worker } => worker,
            other => panic!("expected a worker, got {other:?}"),
        }
    }

    /// Runs a command that must be refused with `want`, changing nothing but the clock.
    pub(super) fn rejected(&mut self, time_ms: u64, cmd: Command, want: Rejection) {
        let got = self.rejection(time_ms, cmd);
        assert_eq!(got, want);
    }

    /// Runs a command that must be refused; checks that it changed nothing and returns why.
    pub(super) fn rejection(&mut self, time_ms: u64, cmd: Command) -> Rejection {
        let before = self.state.clone();
        let effects_before = self.effects.clone();
        let got = match self.run(time_ms, cmd) {
            Response::Rejected(r) => r,
            other => panic!("expected a rejection, got {other:?}"),
        };
        assert_eq!(self.effects, effects_before, "a rejection had effects");
        assert_eq!(
            self.state.with_clock_of(&before),
            before,
            "a rejection changed the state"
        );
        got
    }

    pub(super) fn op(&self, id: OperationId) -> Operation {
        self.state.operation(id).cloned().expect("retained")
    }

    pub(super) fn object(&self, name: &str) -> Option<Resource> {
        self.state.get(&key(name)).cloned()
    }

    /// The target's lifecycle as (state label, status.state, status.lastOperation).
    pub(super) fn shown(&self, name: &str) -> (String, String, String) {
        let object = self.object(name).expect("target exists");
        let label = object.metadata.labels.get("state").cloned();
        let field = |f: &str| object.status[f].as_str().unwrap_or("").to_string();
        (
            label.unwrap_or_default(),
            field("state"),
            field("lastOperation"),
        )
    }

    /// Object events so far as (type, name, state label), and forgets them.
    pub(super) fn object_events(&mut self) -> Vec<(EventType, String, String)> {
        let events = std::mem::take(&mut self.effects.events);
        let summary = events.into_iter().map(|e| {
            let label = e.object.metadata.labels.get("state").cloned();
            (
                e.event_type,
                e.object.metadata.name.clone(),
                label.unwrap_or_default(),
            )
        });
        summary.collect()
    }

    /// Operation events so far as (id, state), and forgets them.
    pub(super) fn op_events(&mut self) -> Vec<(OperationId, OpState)> {
        let events = std::mem::take(&mut self.effects.op_events);
        let summary = events.into_iter();
        summary
            .map(|e| (e.operation.id, e.operation.state))
            .collect()
    }

    /// Holders of a lock as (holder, mode, token, operation).
    pub(super) fn holders(&self, lock: &str) -> Vec<(String, LockMode, u64, Option<OperationId>)> {
        let holders = self.state.lock(lock).map(|l| l.holders.clone());
        let summary = holders.unwrap_or_default().into_iter();
        summary
            .map(|h| (h.holder, h.mode, h.token, h.operation))
            .collect()
    }

    /// Checks every table invariant against the locks.
    pub(super) fn check(&self) {
        assert_eq!(self.state.check_operations(), Ok(()));
    }
}

pub(super) fn key(name: &str) -> ObjectKey {
    ObjectKey::new("Director", "default", name)
}

pub(super) fn director(name: &str) -> Resource {
    let mut r = Resource::new(
        "deployment.servicefabrik.io/v1alpha1",
        "Director",
        "default",
        name,
    );
    r.spec = json!({ "options": "{}" });
    r.metadata
        .labels
        .insert("instance_guid".into(), name.into());
    r
}

pub(super) fn create(name: &str) -> Command {
    Command::Create {
        object: director(name),
        fence: None,
    }
}

pub(super) fn register(worker: &str, handles: &[&str], capacity: u32, ttl_ms: u64) -> Command {
    Command::WorkerRegister {
        worker: worker.into(),
        handles: handles.iter().map(|h| h.parse().expect("handle")).collect(),
        capacity,
        ttl_ms,
        limits: LIMITS,
    }
}

pub(super) fn heartbeat(worker: &str) -> Command {
    Command::WorkerHeartbeat {
        worker: worker.into(),
    }
}

/// Mutating verbs take the WRITE lock, `backup` a READ lock; `delete` deletes its target.
pub(super) fn policy(name: &str, verb: &str) -> OpPolicy {
    let mode = match verb {
        "backup" => LockMode::Read,
        _ => LockMode::Write,
    };
    OpPolicy {
        lock: Some(OpLock::on_target(&key(name), mode)),
        max_attempts: 2,
        deadline_ms: None,
        deletes_target: verb == "delete",
    }
}

pub(super) fn submit(name: &str, verb: &str) -> Command {
    submit_with(name, verb, policy(name, verb))
}

pub(super) fn submit_with(name: &str, verb: &str, policy: OpPolicy) -> Command {
    Command::OpSubmit {
        target: key(name),
        verb: verb.into(),
        params: json!({ "plan": "small" }),
        idempotency_key: None,
        create: None,
        policy,
        limits: LIMITS,
    }
}

pub(super) fn with_key(mut cmd: Command, key: &str) -> Command {
    if let Command::OpSubmit {
        idempotency_key, ..
    } = &mut cmd
    {
        *idempotency_key = Some(key.into());
    }
    cmd
}

pub(super) fn assign(id: OperationId, worker: &str) -> Command {
    Command::OpAssign {
        id,
        worker: worker.into(),
        lock_limits: LOCK_LIMITS,
    }
}

/// A report for `op`'s current assignment.
pub(super) fn report(op: &Operation, report: WorkerReport) -> Command {
    Command::OpReport {
        id: op.id,
        worker: op.worker.clone().unwrap_or_default(),
        attempt: op.attempt,
        epoch: op.epoch,
        report,
        limits: LIMITS,
    }
}

pub(super) fn succeeded() -> WorkerReport {
    WorkerReport::Succeeded {
        response: json!({ "dashboard_url": "https://d" }),
    }
}

pub(super) fn abort(id: OperationId) -> Command {
    Command::OpAbort { id, limits: LIMITS }
}

pub(super) fn sweep(workers: &[&str], operations: &[OperationId], grace_ms: u64) -> Command {
    Command::OpSweep {
        workers: workers.iter().map(|w| w.to_string()).collect(),
        operations: operations.to_vec(),
        grace_ms,
        limits: LIMITS,
    }
}

pub(super) fn s(text: &str) -> String {
    text.to_string()
}

fn invalid(field: &str) -> impl Fn(&Rejection) -> bool + '_ {
    move |r| matches!(r, Rejection::Invalid { field: f, .. } if f == field)
}

fn too_large(field: &str) -> impl Fn(&Rejection) -> bool + '_ {
    move |r| matches!(r, Rejection::TooLarge { field: f, .. } if f == field)
}

use EventType::{Deleted, Modified};
use OpState::{Aborted, Aborting, Dispatched, Failed, InProgress, Queued, Succeeded};

#[test]
fn the_seed_lifecycle_create_then_succeed() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    let w = log.worker_ok(1_000, register("w1", &DIRECTOR_VERBS, 2, 10_000));
    assert_eq!(
        (w.registered_ms, w.expires_at_ms(), w.room()),
        (1_000, 11_000, 2)
    );
    log.object_events();

    // Submit: the resource shows in_queue in the same step.
    let id = log.submit(1_100, submit("d1", "create"));
    assert_eq!(id, OperationId(3), "the id is the submit's log index");
    let op = log.op(id);
    assert_eq!(
        (op.state, op.attempt, op.epoch, op.worker.clone()),
        (Queued, 1, 0, None)
    );
    assert_eq!(op.target_uid, log.object("d1").expect("d1").metadata.uid);
    assert_eq!(log.shown("d1"), (s("in_queue"), s("in_queue"), s("create")));
    let object = log.object("d1").expect("d1");
    assert_eq!(object.status["operation"], "op-3");
    assert_eq!(
        object.metadata.labels["instance_guid"], "d1",
        "owner labels kept"
    );
    assert_eq!(log.object_events(), [(Modified, s("d1"), s("in_queue"))]);

    // Assign: the lock is taken under op-3@w1; its token is the epoch.
    let op = log.op_ok(1_200, assign(id, "w1"));
    assert_eq!(
        (op.state, op.epoch, op.worker.as_deref()),
        (Dispatched, 1, Some("w1"))
    );
    let lock = "Director/default/d1";
    assert_eq!(
        log.holders(lock),
        [(s("op-3@w1"), LockMode::Write, 1, Some(id))]
    );
    let fence = op.fence().expect("a WRITE assignment fences");
    assert_eq!((fence.lock.as_str(), fence.token), (lock, 1));
    assert_eq!(log.state.worker("w1").map(|w| w.room()), Some(1));
    assert_eq!(log.shown("d1").0, "in_progress");
    assert_eq!(log.object_events(), [(Modified, s("d1"), s("in_progress"))]);

    // Started: the operation moves, the resource already shows in_progress.
    let op = log.op_ok(1_300, report(&op, WorkerReport::Started));
    assert_eq!(op.state, InProgress);
    assert!(log.object_events().is_empty());

    // The worker's fenced write applies while it holds the assignment.
    let mut status = log.object("d1").expect("d1");
    status.status["vms"] = json!(3);
    let fenced = Command::UpdateStatus {
        object: status,
        expected_revision: None,
        fence: op.fence(),
    };
    assert!(matches!(
        log.run(1_350, fenced.clone()),
        Response::Object { .. }
    ));
    log.object_events();

    let done = log.op_ok(1_400, report(&op, succeeded()));
    assert_eq!(done.state, Succeeded);
    assert_eq!(
        done.result,
        Some(OpResult::Response(json!({ "dashboard_url": "https://d" })))
    );
    let states: Vec<OpState> = done.transitions.iter().map(|t| t.state).collect();
    assert_eq!(states, [Queued, Dispatched, InProgress, Succeeded]);
    assert_eq!(done.transitions[1].worker.as_deref(), Some("w1"));
    assert!(
        log.state.lock(lock).is_none(),
        "the lock ends with the operation"
    );
    assert_eq!(log.state.worker("w1").map(|w| w.room()), Some(2));
    let object = log.object("d1").expect("d1");
    assert_eq!(object.status["state"], "succeeded");
    assert_eq!(object.status["response"]["dashboard_url"], "https://d");
    assert_eq!(
        object.status["vms"], 3,
        "the owner's status fields are kept"
    );
    assert_eq!(log.object_events(), [(Modified, s("d1"), s("succeeded"))]);
    assert_eq!(
        log.op_events(),
        [
            (id, Queued),
            (id, Dispatched),
            (id, InProgress),
            (id, Succeeded)
        ]
    );
    // The fence died with the assignment.
    let refused = log.rejection(1_500, fenced);
    assert!(
        matches!(refused, Rejection::FenceRejected { .. }),
        "{refused:?}"
    );
    log.check();
}

#[test]
fn submit_can_create_its_target_and_a_succeeded_delete_removes_it() {
    let mut log = Log::new();
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 10_000));
    let mut cmd = submit("d1", "create");
    if let Command::OpSubmit { create, .. } = &mut cmd {
        *create = Some(director("d1"));
    }
    let id = log.submit(1_100, cmd.clone());
    let object = log.object("d1").expect("created with the operation");
    assert_eq!(object.metadata.resource_version, 1);
    assert_eq!(object.status["state"], "in_queue");
    assert_eq!(log.op(id).target_uid, object.metadata.uid);
    assert_eq!(
        log.object_events(),
        [(EventType::Added, s("d1"), s("in_queue"))]
    );
    // It must not exist already, and must be the target.
    log.rejected(
        1_150,
        cmd.clone(),
        Rejection::AlreadyExists { key: key("d1") },
    );
    if let Command::OpSubmit { create, .. } = &mut cmd {
        *create = Some(director("other"));
    }
    assert!(invalid("create")(&log.rejection(1_150, cmd)));

    let op = log.op_ok(1_200, assign(id, "w1"));
    log.op_ok(1_300, report(&op, succeeded()));
    let delete = log.submit(1_400, submit("d1", "delete"));
    let op = log.op_ok(1_500, assign(delete, "w1"));
    log.object_events();
    let done = log.op_ok(1_600, report(&op, succeeded()));
    assert_eq!(done.state, Succeeded);
    assert!(
        log.object("d1").is_none(),
        "a succeeded delete removes the target"
    );
    assert_eq!(log.object_events(), [(Deleted, s("d1"), s("in_progress"))]);
    assert!(log.state.lock("Director/default/d1").is_none());
    // Other verbs need the target.
    log.rejected(
        1_700,
        submit("d1", "update"),
        Rejection::NotFound { key: key("d1") },
    );
    log.check();
}

#[test]
fn a_target_deleted_or_recreated_meanwhile_is_left_alone() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 10_000));
    let id = log.submit(1_100, submit("d1", "update"));
    let op = log.op_ok(1_200, assign(id, "w1"));
    let delete = Command::Delete {
        key: key("d1"),
        expected_revision: None,
        fence: None,
    };
    log.run(1_300, delete);
    log.run(1_400, create("d1"));
    log.object_events();
    // The new d1 is another object (another uid): the operation never writes it.
    let done = log.op_ok(1_500, report(&op, succeeded()));
    assert_eq!(done.state, Succeeded);
    assert!(log.object_events().is_empty());
    assert_eq!(
        log.object("d1").map(|o| o.status),
        Some(serde_json::Value::Null)
    );
    log.check();
}

#[test]
fn an_idempotent_submit_returns_the_first_and_changes_nothing() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    let first = log.submit(1_100, with_key(submit("d1", "update"), "k1"));
    let before = log.state.clone();
    let effects = log.effects.clone();
    let again = log.run(1_200, with_key(submit("d1", "update"), "k1"));
    assert_eq!(
        again,
        Response::OpSubmitted {
            operation: log.op(first),
            created: false
        }
    );
    assert_eq!(log.state.with_clock_of(&before), before);
    assert_eq!(log.effects, effects);
    assert_eq!(
        log.state.operation_by_key("k1").map(|op| op.id),
        Some(first)
    );
    // The key reused for other work is a client bug.
    let other = with_key(submit("d1", "delete"), "k1");
    assert!(invalid("idempotency_key")(&log.rejection(1_300, other)));
    // Another key is another operation.
    let second = log.submit(1_400, with_key(submit("d1", "update"), "k2"));
    assert_ne!(first, second);
}

#[test]
fn submit_refusals_name_the_field_and_change_nothing() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, create("d2"));
    let with = |f: fn(&mut Command)| {
        let mut cmd = submit("d1", "update");
        f(&mut cmd);
        cmd
    };
    type Check = Box<dyn Fn(&Rejection) -> bool>;
    let cases: Vec<(Command, Check)> = vec![
        (submit("d1", ""), Box::new(invalid("verb"))),
        (submit("d1", "no spaces"), Box::new(invalid("verb"))),
        (submit("d1", "9lives"), Box::new(invalid("verb"))),
        (
            with(|c| {
                if let Command::OpSubmit { target, .. } = c {
                    target.name = "Not_A_Name".into();
                }
            }),
            Box::new(invalid("target.metadata.name")),
        ),
        (
            with(|c| {
                if let Command::OpSubmit { params, .. } = c {
                    *params = json!([1]);
                }
            }),
            Box::new(invalid("params")),
        ),
        (
            with(|c| {
                if let Command::OpSubmit { params, .. } = c {
                    *params = json!({ "blob": "x".repeat(300) });
                }
            }),
            Box::new(too_large("params")),
        ),
        (
            with(|c| {
                if let Command::OpSubmit { policy, .. } = c {
                    policy.max_attempts = 0;
                }
            }),
            Box::new(invalid("policy.max_attempts")),
        ),
        (
            with(|c| {
                if let Command::OpSubmit { policy, .. } = c {
                    policy.max_attempts = LIMITS.attempts_max + 1;
                }
            }),
            Box::new(invalid("policy.max_attempts")),
        ),
        (
            with(|c| {
                if let Command::OpSubmit { policy, .. } = c {
                    policy.deadline_ms = Some(LIMITS.deadline_ms_max + 1);
                }
            }),
            Box::new(invalid("policy.deadline_ms")),
        ),
        (
            with(|c| {
                if let Command::OpSubmit { policy, .. } = c {
                    policy.lock = Some(OpLock {
                        name: "no spaces".into(),
                        mode: LockMode::Write,
                    });
                }
            }),
            Box::new(invalid("policy.lock.name")),
        ),
        (
            with_key(submit("d1", "update"), "has space"),
            Box::new(invalid("idempotency_key")),
        ),
    ];
    for (cmd, check) in cases {
        let shown = cmd.to_string();
        let r = log.rejection(1_100, cmd);
        assert!(check(&r), "{shown}: {r:?}");
    }
    assert_eq!(log.state.operation_counts(), (0, 0));

    // operations.per_target_max = 3, operations.active_max = 8.
    for _ in 0..3 {
        log.submit(1_200, submit("d1", "update"));
    }
    let r = log.rejection(1_300, submit("d1", "update"));
    assert!(too_large("target")(&r), "{r:?}");
    assert!(
        r.to_string().contains("operations.per_target_max = 3"),
        "{r}"
    );
    for name in ["d2", "d3", "d4"] {
        log.run(1_300, create(name));
    }
    for name in ["d2", "d2", "d2", "d3", "d3"] {
        log.submit(1_400, submit(name, "update"));
    }
    let r = log.rejection(1_500, submit("d4", "update"));
    assert!(too_large("operations")(&r), "{r:?}");
    assert!(r.to_string().contains("operations.active_max = 8"), "{r}");
}

#[test]
fn workers_register_heartbeat_and_refusals_change_nothing() {
    let mut log = Log::new();
    let w = log.worker_ok(1_000, register("w1", &["Director:create"], 1, 5_000));
    assert_eq!(w.handles.len(), 1);
    // Re-registering replaces handles, capacity and ttl and counts as a heartbeat.
    let w = log.worker_ok(2_000, register("w1", &DIRECTOR_VERBS, 3, 1_000));
    assert_eq!(
        (
            w.registered_ms,
            w.last_heartbeat_ms,
            w.capacity,
            w.handles.len()
        ),
        (1_000, 2_000, 3, 4)
    );
    let w = log.worker_ok(2_500, heartbeat("w1"));
    assert_eq!(w.expires_at_ms(), 3_500);
    assert!(w.is_alive(3_499) && !w.is_alive(3_500));

    let many: Vec<String> = (0..5).map(|i| format!("Director:v{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let cases: Vec<(Command, Rejection)> = vec![
        (
            heartbeat("w9"),
            Rejection::WorkerNotFound { worker: s("w9") },
        ),
        (
            Command::WorkerDeregister {
                worker: s("w9"),
                limits: LIMITS,
            },
            Rejection::WorkerNotFound { worker: s("w9") },
        ),
    ];
    for (cmd, want) in cases {
        log.rejected(3_000, cmd, want);
    }
    type Check = Box<dyn Fn(&Rejection) -> bool>;
    let checks: Vec<(Command, Check)> = vec![
        (
            register("", &DIRECTOR_VERBS, 1, 1_000),
            Box::new(invalid("worker")),
        ),
        (
            register("a b", &DIRECTOR_VERBS, 1, 1_000),
            Box::new(invalid("worker")),
        ),
        (register("w2", &[], 1, 1_000), Box::new(invalid("handles"))),
        (
            register("w2", &many, 1, 1_000),
            Box::new(too_large("handles")),
        ),
        (
            register("w2", &["director:create"], 1, 1_000),
            Box::new(invalid("handles[0].kind")),
        ),
        (
            register("w2", &["Director:x y"], 1, 1_000),
            Box::new(invalid("handles[0].verb")),
        ),
        (
            register("w2", &["Director:create", "Director:create"], 1, 1_000),
            Box::new(invalid("handles[1]")),
        ),
        (
            register("w2", &DIRECTOR_VERBS, 0, 1_000),
            Box::new(invalid("capacity")),
        ),
        (
            register("w2", &DIRECTOR_VERBS, 9, 1_000),
            Box::new(too_large("capacity")),
        ),
        (
            register("w2", &DIRECTOR_VERBS, 1, 0),
            Box::new(invalid("ttl_ms")),
        ),
        (
            register("w2", &DIRECTOR_VERBS, 1, WORKER_TTL_MS_MAX + 1),
            Box::new(invalid("ttl_ms")),
        ),
    ];
    for (cmd, check) in checks {
        let shown = cmd.to_string();
        let r = log.rejection(3_000, cmd);
        assert!(check(&r), "{shown}: {r:?}");
    }
    // operations.workers_max = 4; a registered one may still re-register.
    for w in ["w2", "w3", "w4"] {
        log.worker_ok(3_000, register(w, &DIRECTOR_VERBS, 1, 1_000));
    }
    let r = log.rejection(3_000, register("w5", &DIRECTOR_VERBS, 1, 1_000));
    assert!(r.to_string().contains("operations.workers_max = 4"), "{r}");
    log.worker_ok(3_000, register("w4", &DIRECTOR_VERBS, 2, 1_000));
    let ids: Vec<&str> = log.state.workers().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2", "w3", "w4"]);
}

#[test]
fn assign_refusals_change_nothing() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, create("d2"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 10_000));
    log.run(1_000, register("creator", &["Director:create"], 1, 10_000));
    log.run(1_000, register("short", &DIRECTOR_VERBS, 1, 100));
    let first = log.submit(1_100, submit("d1", "update"));
    let second = log.submit(1_100, submit("d1", "update"));
    let other = log.submit(1_100, submit("d2", "update"));
    let missing = OperationId(999);
    let unfit = |worker: &str, id: OperationId, reason: &str| Rejection::WorkerUnfit {
        worker: worker.into(),
        id,
        reason: reason.into(),
    };
    let cases = [
        (
            assign(missing, "w1"),
            Rejection::OperationNotFound { id: missing },
        ),
        (
            assign(second, "w1"),
            Rejection::OperationBehind {
                id: second,
                target: key("d1"),
                ahead: first,
            },
        ),
        (
            assign(first, "w9"),
            Rejection::WorkerNotFound { worker: s("w9") },
        ),
        (
            assign(first, "short"),
            unfit(
                "short",
                first,
                "its heartbeat expired at 1100 ms (now 1200 ms)",
            ),
        ),
        (
            assign(first, "creator"),
            unfit("creator", first, "it does not handle Director:update"),
        ),
    ];
    for (cmd, want) in cases {
        log.rejected(1_200, cmd, want);
    }
    let op = log.op_ok(1_300, assign(first, "w1"));
    log.rejected(
        1_400,
        assign(first, "w1"),
        Rejection::OperationState {
            id: first,
            state: Dispatched,
            action: s("assign"),
            allowed: s("Queued"),
        },
    );
    log.rejected(
        1_400,
        assign(other, "w1"),
        unfit("w1", other, "it runs 1 operations, its capacity"),
    );
    // The second one on d1 waits for the first to end, whoever would take it.
    log.run(1_400, register("w2", &DIRECTOR_VERBS, 1, 10_000));
    let behind = log.rejection(1_400, assign(second, "w2"));
    assert!(matches!(behind, Rejection::OperationBehind { .. }));
    log.op_ok(1_500, report(&op, succeeded()));
    let op2 = log.op_ok(1_600, assign(second, "w2"));
    assert!(op2.epoch > op.epoch, "epochs only grow");
    log.check();
}

#[test]
fn a_lock_held_by_a_client_keeps_operations_off_the_target() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 10_000));
    let lock = "Director/default/d1";
    let acquire = |holder: &str, mode| Command::LockAcquire {
        name: lock.into(),
        holder: holder.into(),
        mode,
        ttl_ms: None,
        details: serde_json::Value::Null,
        wait_ms: 0,
        limits: LOCK_LIMITS,
    };
    log.run(1_000, acquire("broker", LockMode::Write));
    let id = log.submit(1_100, submit("d1", "update"));
    let busy = log.rejection(1_200, assign(id, "w1"));
    assert!(matches!(busy, Rejection::LockBusy { .. }), "{busy:?}");
    assert!(log.state.ops_dispatchable(1_200, 4, 10).is_empty());
    log.run(
        1_300,
        Command::LockRelease {
            name: lock.into(),
            holder: "broker".into(),
            token: 1,
        },
    );
    let op = log.op_ok(1_400, assign(id, "w1"));
    assert_eq!(op.epoch, 2);

    // Nobody may take the operation's grant away, refresh it, or re-acquire under its name.
    let owned = Rejection::LockOwnedByOperation {
        name: lock.into(),
        holder: "op-4@w1".into(),
        operation: id,
    };
    let release = Command::LockRelease {
        name: lock.into(),
        holder: "op-4@w1".into(),
        token: 2,
    };
    log.rejected(1_500, release, owned.clone());
    let refresh = Command::LockRefresh {
        name: lock.into(),
        holder: "op-4@w1".into(),
        token: 2,
        ttl_ms: Some(1),
    };
    log.rejected(1_500, refresh, owned.clone());
    log.rejected(1_500, acquire("op-4@w1", LockMode::Read), owned);
    // A reader must wait for the operation.
    let busy = log.rejection(1_500, acquire("backup", LockMode::Read));
    assert!(matches!(busy, Rejection::LockBusy { .. }));
    log.check();
}

#[test]
fn stale_reports_are_refused() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 10_000));
    let id = log.submit(1_100, submit("d1", "update"));
    let op = log.op_ok(1_200, assign(id, "w1"));
    let stale = |worker: &str, attempt: u32, epoch: u64| Command::OpReport {
        id,
        worker: worker.into(),
        attempt,
        epoch,
        report: succeeded(),
        limits: LIMITS,
    };
    for (worker, attempt, epoch) in [("w1", 1, 7), ("w1", 2, 1), ("w2", 1, 1)] {
        let r = log.rejection(1_300, stale(worker, attempt, epoch));
        let Rejection::StaleAssignment { reason, .. } = &r else {
            panic!("{r:?}");
        };
        assert_eq!(reason, "the current assignment is attempt 1, epoch 1 of w1");
    }
    let missing = Command::OpReport {
        id: OperationId(77),
        worker: "w1".into(),
        attempt: 1,
        epoch: 1,
        report: WorkerReport::Started,
        limits: LIMITS,
    };
    log.rejected(
        1_300,
        missing,
        Rejection::OperationNotFound {
            id: OperationId(77),
        },
    );
    // Aborted needs an abort; a response too large for the limit is refused.
    log.rejected(
        1_300,
        report(&op, WorkerReport::Aborted),
        Rejection::OperationState {
            id,
            state: Dispatched,
            action: s("report Aborted"),
            allowed: s("Aborting (an abort was asked)"),
        },
    );
    let big = WorkerReport::Succeeded {
        response: json!({ "blob": "x".repeat(300) }),
    };
    assert!(too_large("report.response")(
        &log.rejection(1_300, report(&op, big))
    ));

    // Once ended, a repeat of the final report is answered unchanged; another is refused.
    let failed = WorkerReport::Failed {
        error: "bosh deploy failed".into(),
    };
    let done = log.op_ok(1_400, report(&op, failed.clone()));
    assert_eq!(log.shown("d1").0, "failed");
    assert_eq!(
        log.object("d1").expect("d1").status["error"],
        "bosh deploy failed"
    );
    let before = log.state.clone();
    assert_eq!(log.op_ok(1_500, report(&op, failed)), done);
    assert_eq!(log.op_ok(1_500, report(&op, WorkerReport::Started)), done);
    assert_eq!(log.state.with_clock_of(&before), before);
    let r = log.rejection(1_600, report(&op, succeeded()));
    assert!(
        matches!(r, Rejection::OperationState { state: Failed, .. }),
        "{r:?}"
    );
    log.check();
}

#[test]
fn abort_in_every_state() {
    let mut log = Log::new();
    for name in ["d1", "d2", "d3", "d4"] {
        log.run(1_000, create(name));
    }
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 4, 10_000));
    // Queued: aborted at once, nothing was locked.
    let queued = log.submit(1_100, submit("d1", "update"));
    let op = log.op_ok(1_200, abort(queued));
    assert_eq!(op.state, Aborted);
    assert_eq!(log.shown("d1").0, "aborted");
    // Aborting or aborted again: answered unchanged.
    assert_eq!(log.op_ok(1_250, abort(queued)), op);

    // Dispatched and InProgress: aborting until the worker confirms; the lock is kept.
    let dispatched = log.submit(1_300, submit("d2", "update"));
    let running = log.submit(1_300, submit("d3", "backup"));
    let d = log.op_ok(1_400, assign(dispatched, "w1"));
    let r = log.op_ok(1_400, assign(running, "w1"));
    let r = log.op_ok(1_450, report(&r, WorkerReport::Started));
    for (id, name, lock) in [
        (dispatched, "d2", "Director/default/d2"),
        (running, "d3", "Director/default/d3"),
    ] {
        let op = log.op_ok(1_500, abort(id));
        assert_eq!((op.state, op.worker.as_deref()), (Aborting, Some("w1")));
        assert_eq!(log.shown(name).0, "aborting");
        assert_eq!(log.holders(lock).len(), 1, "the worker still holds it");
        assert_eq!(log.op_ok(1_550, abort(id)), op);
    }
    // A start that crossed the abort changes nothing; the worker's Aborted ends it.
    let before = log.op(dispatched);
    assert_eq!(log.op_ok(1_600, report(&d, WorkerReport::Started)), before);
    let op = log.op_ok(1_700, report(&d, WorkerReport::Aborted));
    assert_eq!(op.state, Aborted);
    assert!(log.holders("Director/default/d2").is_empty());
    assert_eq!(log.shown("d2").0, "aborted");
    // Or it finished before it noticed: its result stands.
    let op = log.op_ok(1_700, report(&r, succeeded()));
    assert_eq!(op.state, Succeeded);
    assert!(log.holders("Director/default/d3").is_empty());

    // Ended: too late.
    let r = log.rejection(1_800, abort(running));
    assert_eq!(
        r,
        Rejection::OperationState {
            id: running,
            state: Succeeded,
            action: s("abort"),
            allowed: s("not ended"),
        }
    );
    log.rejected(
        1_800,
        abort(OperationId(99)),
        Rejection::OperationNotFound {
            id: OperationId(99),
        },
    );
    log.check();
}

#[test]
fn backups_share_a_read_lock_and_keep_writers_out() {
    let mut log = Log::new();
    for name in ["deploy", "b1", "b2"] {
        log.run(1_000, create(name));
    }
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 4, 10_000));
    // Two backups of one deployment: their own targets, a READ lock on the deployment.
    let on_deploy = |name: &str, verb: &str, mode| {
        let mut p = policy(name, verb);
        p.lock = Some(OpLock::on_target(&key("deploy"), mode));
        submit_with(name, verb, p)
    };
    let b1 = log.submit(1_100, on_deploy("b1", "backup", LockMode::Read));
    let b2 = log.submit(1_100, on_deploy("b2", "backup", LockMode::Read));
    let update = log.submit(1_100, submit("deploy", "update"));
    let plan = log.state.ops_dispatchable(1_200, 4, 10);
    let planned: Vec<OperationId> = plan.iter().map(|d| d.id).collect();
    assert_eq!(planned, [b1], "one assignment per lock name per plan");
    let o1 = log.op_ok(1_200, assign(b1, "w1"));
    let o2 = log.op_ok(1_200, assign(b2, "w1"));
    assert_eq!(o1.fence(), None, "a READ assignment does not fence writes");
    let lock = "Director/default/deploy";
    assert_eq!(log.holders(lock).len(), 2);
    assert!(matches!(
        log.rejection(1_300, assign(update, "w1")),
        Rejection::LockBusy { .. }
    ));
    log.op_ok(1_400, report(&o1, succeeded()));
    log.op_ok(1_400, report(&o2, succeeded()));
    let u = log.op_ok(1_500, assign(update, "w1"));
    assert_eq!(
        log.holders(lock),
        [(
            s(&format!("{update}@w1")),
            LockMode::Write,
            u.epoch,
            Some(update)
        )]
    );
    log.check();
}

#[test]
fn operations_without_a_lock_still_get_fresh_epochs() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 4, 10_000));
    let mut p = policy("d1", "update");
    p.lock = None;
    let a = log.submit(1_100, submit_with("d1", "update", p));
    let a = log.op_ok(1_200, assign(a, "w1"));
    assert_eq!((a.epoch, a.fence()), (1, None));
    assert_eq!(log.state.lock_count(), 0);
    assert_eq!(
        log.state.last_lock_token(),
        1,
        "the epoch came from the token counter"
    );
    log.op_ok(1_300, report(&a, succeeded()));
    log.check();
}

#[test]
fn wire_forms() {
    assert_eq!(OperationId(17).to_string(), "op-17");
    assert_eq!("op-17".parse::<OperationId>(), Ok(OperationId(17)));
    for bad in [
        "op-0",
        "op-",
        "17",
        "op-+1",
        "op-1x",
        "op-99999999999999999999",
    ] {
        assert!(bad.parse::<OperationId>().is_err(), "{bad}");
    }
    assert_eq!(
        serde_json::to_string(&OperationId(3)).expect("ser"),
        r#""op-3""#
    );
    assert!(serde_json::from_str::<OperationId>("3").is_err());
    let h: Handle = "Director:create".parse().expect("parses");
    assert_eq!(
        (h.kind.as_str(), h.verb.as_str(), h.to_string()),
        ("Director", "create", s("Director:create"))
    );
    assert!("Director".parse::<Handle>().is_err() && ":x".parse::<Handle>().is_err());
    let states: Vec<&str> = OpState::ALL.iter().map(|s| s.resource_state()).collect();
    assert_eq!(
        states,
        [
            "in_queue",
            "in_progress",
            "in_progress",
            "aborting",
            "succeeded",
            "failed",
            "aborted"
        ]
    );
    let cmd = report(
        &Operation {
            worker: Some("w1".into()),
            epoch: 4,
            ..sample_op()
        },
        WorkerReport::Started,
    );
    assert_eq!(cmd.to_string(), "op-report op-5 InProgress by w1 epoch 4");
    let text = serde_json::to_string(&sample_op()).expect("ser");
    assert!(
        text.contains(r#""id":"op-5""#) && text.contains(r#""state":"Queued""#),
        "{text}"
    );
    let back: Operation = serde_json::from_str(&text).expect("de");
    assert_eq!(back, sample_op());
    let r = Rejection::StaleAssignment {
        id: OperationId(5),
        worker: "w1".into(),
        attempt: 1,
        epoch: 4,
        reason: "the current assignment is attempt 2, epoch 9 of w2".into(),
    };
    assert_eq!(
        r.to_string(),
        "operation op-5: the report of w1 for attempt 1, epoch 4 is stale: the current \
         assignment is attempt 2, epoch 9 of w2"
    );
}

pub(super) fn sample_op() -> Operation {
    Operation {
        id: OperationId(5),
        idempotency_key: None,
        target: key("d1"),
        target_uid: "u".into(),
        verb: "create".into(),
        params: json!({}),
        policy: policy("d1", "create"),
        state: Queued,
        attempt: 1,
        worker: None,
        epoch: 0,
        submitted_ms: 1,
        deadline_at_ms: None,
        transitions: vec![Transition {
            state: Queued,
            time_ms: 1,
            attempt: 1,
            worker: None,
        }],
        result: None,
    }
}
