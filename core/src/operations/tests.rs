//! The harness for table-driven operation and worker sequences through `apply_effects`, with
//! made-up leader times and terms (shared with `submit_tests`, `assign_tests`, `sweep_tests` and
//! `proptests`), and the wire forms of the operation types.

use crate::command::OperationReply;
use crate::command::{ObjectCommand, OperationCommand};
use serde_json::json;

use super::*;
use crate::apply::{apply_blank, apply_effects};
use crate::command::{Command, EventType, Response, WorkerReport};
use crate::effects::{ApplyContext, Effects};
use crate::locks::{LockLimits, LockMode};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::Resource;
use crate::rejection::Rejection;
use crate::state::State;

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
            stamped: true,
            wall_ms: None,
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
            stamped: true,
            wall_ms: None,
        };
        apply_blank(&mut self.state, &ctx);
    }

    /// Runs a command that must answer an operation; returns it.
    pub(super) fn op_ok(&mut self, time_ms: u64, cmd: Command) -> Operation {
        match self.run(time_ms, cmd) {
            Response::Operations(OperationReply::Operation { operation }) => operation,
            Response::Operations(OperationReply::Submitted { operation, .. }) => operation,
            other => panic!("expected an operation, got {other:?}"),
        }
    }

    /// Submits; returns the new operation's id.
    pub(super) fn submit(&mut self, time_ms: u64, cmd: Command) -> OperationId {
        match self.run(time_ms, cmd) {
            Response::Operations(OperationReply::Submitted {
                operation,
                created: true,
            }) => operation.id,
            other => panic!("expected a new operation, got {other:?}"),
        }
    }

    pub(super) fn worker_ok(&mut self, time_ms: u64, cmd: Command) -> Worker {
        match self.run(time_ms, cmd) {
            Response::Operations(OperationReply::Worker { worker }) => worker,
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
                e.object.metadata.name.to_string(),
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
    r.spec = RawJson::from_value(&json!({ "options": "{}" }));
    r.metadata
        .labels
        .insert("instance_guid".into(), name.into());
    r
}

pub(super) fn create(name: &str) -> Command {
    Command::Objects(ObjectCommand::Create {
        object: director(name),
        fence: None,
    })
}

pub(super) fn register(worker: &str, handles: &[&str], capacity: u32, ttl_ms: u64) -> Command {
    Command::Operations(OperationCommand::RegisterWorker {
        worker: worker.into(),
        handles: handles.iter().map(|h| h.parse().expect("handle")).collect(),
        capacity,
        ttl_ms,
        limits: LIMITS,
    })
}

pub(super) fn heartbeat(worker: &str) -> Command {
    Command::Operations(OperationCommand::Heartbeat {
        worker: worker.into(),
    })
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
    Command::Operations(OperationCommand::Submit {
        target: key(name),
        verb: verb.into(),
        params: json!({ "plan": "small" }),
        idempotency_key: None,
        create: None,
        policy,
        limits: LIMITS,
    })
}

pub(super) fn with_key(mut cmd: Command, key: &str) -> Command {
    if let Command::Operations(OperationCommand::Submit {
        idempotency_key, ..
    }) = &mut cmd
    {
        *idempotency_key = Some(key.into());
    }
    cmd
}

pub(super) fn assign(id: OperationId, worker: &str) -> Command {
    Command::Operations(OperationCommand::Assign {
        id,
        worker: worker.into(),
        lock_limits: LOCK_LIMITS,
    })
}

/// A report for `op`'s current assignment.
pub(super) fn report(op: &Operation, report: WorkerReport) -> Command {
    Command::Operations(OperationCommand::Report {
        id: op.id,
        worker: op.worker.clone().unwrap_or_default(),
        attempt: op.attempt,
        epoch: op.epoch,
        report,
        limits: LIMITS,
    })
}

pub(super) fn succeeded() -> WorkerReport {
    WorkerReport::Succeeded {
        response: json!({ "dashboard_url": "https://d" }),
    }
}

pub(super) fn abort(id: OperationId) -> Command {
    Command::Operations(OperationCommand::Abort { id, limits: LIMITS })
}

pub(super) fn sweep(workers: &[&str], operations: &[OperationId], grace_ms: u64) -> Command {
    Command::Operations(OperationCommand::Sweep {
        workers: workers.iter().map(|w| w.to_string()).collect(),
        operations: operations.to_vec(),
        grace_ms,
        limits: LIMITS,
    })
}

pub(super) fn s(text: &str) -> String {
    text.to_string()
}

pub(super) fn invalid(field: &str) -> impl Fn(&Rejection) -> bool + '_ {
    move |r| matches!(r, Rejection::Invalid { field: f, .. } if f == field)
}

pub(super) fn too_large(field: &str) -> impl Fn(&Rejection) -> bool + '_ {
    move |r| matches!(r, Rejection::TooLarge { field: f, .. } if f == field)
}

use OpState::Queued;

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
