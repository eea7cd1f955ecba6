//! Table-driven sequences of submits and workers: the seed's lifecycle end to end, a submit that
//! creates its target and a delete that removes it, targets deleted or re-created meanwhile,
//! idempotent submits, every submit and registration refusal leaving the state as it was.

use crate::command::{ObjectCommand, OperationCommand};
use crate::command::{ObjectReply, OperationReply};
use serde_json::json;

use super::tests::*;
use super::*;
use crate::command::{Command, EventType, Response, WorkerReport};
use crate::locks::LockMode;
use crate::rejection::Rejection;
use EventType::{Deleted, Modified};
use OpState::{Dispatched, InProgress, Queued, Succeeded};

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
    let fenced = Command::Objects(ObjectCommand::UpdateStatus {
        object: status,
        expected_revision: None,
        fence: op.fence(),
    });
    assert!(matches!(
        log.run(1_350, fenced.clone()),
        Response::Objects(ObjectReply::Object { .. })
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
    if let Command::Operations(OperationCommand::Submit { create, .. }) = &mut cmd {
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
    if let Command::Operations(OperationCommand::Submit { create, .. }) = &mut cmd {
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
    let delete = Command::Objects(ObjectCommand::Delete {
        key: key("d1"),
        expected_revision: None,
        fence: None,
    });
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
        Response::Operations(OperationReply::Submitted {
            operation: log.op(first),
            created: false
        })
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
                if let Command::Operations(OperationCommand::Submit { target, .. }) = c {
                    target.name = "Not_A_Name".into();
                }
            }),
            Box::new(invalid("target.metadata.name")),
        ),
        (
            with(|c| {
                if let Command::Operations(OperationCommand::Submit { params, .. }) = c {
                    *params = json!([1]);
                }
            }),
            Box::new(invalid("params")),
        ),
        (
            with(|c| {
                if let Command::Operations(OperationCommand::Submit { params, .. }) = c {
                    *params = json!({ "blob": "x".repeat(300) });
                }
            }),
            Box::new(too_large("params")),
        ),
        (
            with(|c| {
                if let Command::Operations(OperationCommand::Submit { policy, .. }) = c {
                    policy.max_attempts = 0;
                }
            }),
            Box::new(invalid("policy.max_attempts")),
        ),
        (
            with(|c| {
                if let Command::Operations(OperationCommand::Submit { policy, .. }) = c {
                    policy.max_attempts = LIMITS.attempts_max + 1;
                }
            }),
            Box::new(invalid("policy.max_attempts")),
        ),
        (
            with(|c| {
                if let Command::Operations(OperationCommand::Submit { policy, .. }) = c {
                    policy.deadline_ms = Some(LIMITS.deadline_ms_max + 1);
                }
            }),
            Box::new(invalid("policy.deadline_ms")),
        ),
        (
            with(|c| {
                if let Command::Operations(OperationCommand::Submit { policy, .. }) = c {
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
            Command::Operations(OperationCommand::DeregisterWorker {
                worker: s("w9"),
                limits: LIMITS,
            }),
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
