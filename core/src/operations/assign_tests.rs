//! Table-driven sequences of assignments, reports and aborts: every assignment refusal, a client's
//! lock keeping operations off a target (and unable to touch theirs), stale reports, abort in
//! every state, backups sharing a READ lock, operations without a lock.

use crate::command::LockReply;
use crate::command::{LockCommand, ObjectCommand, OperationCommand};
use serde_json::json;

use super::tests::*;
use super::*;
use crate::command::{Command, Response, WorkerReport};
use crate::locks::LockMode;
use crate::objects::raw_json::RawJson;
use crate::objects::validate::{json_len, OBJECT_BYTES_MAX};
use crate::rejection::Rejection;
use OpState::{Aborted, Aborting, Dispatched, Failed, Succeeded};

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
    let acquire = |holder: &str, mode| {
        Command::Locks(LockCommand::Acquire {
            name: lock.into(),
            holder: holder.into(),
            mode,
            ttl_ms: None,
            details: serde_json::Value::Null,
            wait_ms: 0,
            limits: LOCK_LIMITS,
        })
    };
    log.run(1_000, acquire("broker", LockMode::Write));
    let id = log.submit(1_100, submit("d1", "update"));
    let busy = log.rejection(1_200, assign(id, "w1"));
    assert!(matches!(busy, Rejection::LockBusy { .. }), "{busy:?}");
    assert!(log.state.ops_dispatchable(1_200, 4, 10).is_empty());
    log.run(
        1_300,
        Command::Locks(LockCommand::Release {
            name: lock.into(),
            holder: "broker".into(),
            token: 1,
        }),
    );
    let op = log.op_ok(1_400, assign(id, "w1"));
    assert_eq!(op.epoch, 2);

    // Nobody may take the operation's grant away, refresh it, or re-acquire under its name.
    let owned = Rejection::LockOwnedByOperation {
        name: lock.into(),
        holder: "op-4@w1".into(),
        operation: id,
    };
    let release = Command::Locks(LockCommand::Release {
        name: lock.into(),
        holder: "op-4@w1".into(),
        token: 2,
    });
    log.rejected(1_500, release, owned.clone());
    let refresh = Command::Locks(LockCommand::Refresh {
        name: lock.into(),
        holder: "op-4@w1".into(),
        token: 2,
        ttl_ms: Some(1),
    });
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
    let unassigned = Operation {
        worker: Some("w1".into()),
        ..log.op(id)
    };
    let early = log.rejection(1_150, report(&unassigned, WorkerReport::Started));
    assert!(
        early
            .to_string()
            .ends_with("the operation has not been assigned yet"),
        "{early}"
    );
    let op = log.op_ok(1_200, assign(id, "w1"));
    let stale = |worker: &str, attempt: u32, epoch: u64| {
        Command::Operations(OperationCommand::Report {
            id,
            worker: worker.into(),
            attempt,
            epoch,
            report: succeeded(),
            limits: LIMITS,
        })
    };
    for (worker, attempt, epoch) in [("w1", 1, 7), ("w1", 2, 1), ("w2", 1, 1)] {
        let r = log.rejection(1_300, stale(worker, attempt, epoch));
        let Rejection::StaleAssignment { reason, .. } = &r else {
            panic!("{r:?}");
        };
        assert_eq!(reason, "the current assignment is attempt 1, epoch 1 of w1");
    }
    let missing = Command::Operations(OperationCommand::Report {
        id: OperationId(77),
        worker: "w1".into(),
        attempt: 1,
        epoch: 1,
        report: WorkerReport::Started,
        limits: LIMITS,
    });
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
fn two_writers_on_one_lock_run_one_after_the_other() {
    let mut log = Log::new();
    for name in ["d1", "bind1"] {
        log.run(1_000, create(name));
    }
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 10_000));
    log.run(1_000, register("w2", &DIRECTOR_VERBS, 2, 10_000));
    // Different targets, one deployment lock: an update of d1 and a change of its binding.
    let mut p = policy("bind1", "update");
    p.lock = Some(OpLock::on_target(&key("d1"), LockMode::Write));
    let first = log.submit(1_100, submit("d1", "update"));
    let second = log.submit(1_100, submit_with("bind1", "update", p));
    let plan: Vec<OperationId> = log
        .state
        .ops_dispatchable(1_200, 4, 10)
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(plan, [first]);
    let a = log.op_ok(1_200, assign(first, "w1"));
    let busy = log.rejection(1_300, assign(second, "w2"));
    assert!(matches!(busy, Rejection::LockBusy { .. }), "{busy:?}");
    assert!(log.state.ops_dispatchable(1_300, 4, 10).is_empty());
    log.op_ok(1_400, report(&a, succeeded()));
    let b = log.op_ok(1_500, assign(second, "w2"));
    assert!(b.epoch > a.epoch);
    log.check();
}

#[test]
fn a_response_the_target_cannot_hold_is_refused_but_an_end_never_is() {
    let mut log = Log::new();
    let mut big = director("d1");
    let filler = OBJECT_BYTES_MAX - big.to_json().len() - 60;
    big.spec = RawJson::from_value(&json!({ "blob": "x".repeat(filler) }));
    log.run(
        1_000,
        Command::Objects(ObjectCommand::Create {
            object: big,
            fence: None,
        }),
    );
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 1_000));
    // Steward's own fields take the object past the limit: they are not held to it.
    let id = log.submit(1_100, submit("d1", "update"));
    let op = log.op_ok(1_200, assign(id, "w1"));
    let size = |log: &Log| json_len(&log.object("d1").expect("d1"));
    assert!(size(&log) > OBJECT_BYTES_MAX);
    // A worker's response must fit ...
    let response = WorkerReport::Succeeded {
        response: json!({ "r": "y" }),
    };
    let r = log.rejection(1_300, report(&op, response));
    assert!(too_large("report")(&r), "{r:?}");
    assert!(
        r.to_string()
            .contains("target Director/default/d1 would be"),
        "{r}"
    );
    // ... but it can always end the operation with an error.
    let failed = WorkerReport::Failed {
        error: "the response did not fit".into(),
    };
    assert_eq!(log.op_ok(1_300, report(&op, failed)).state, Failed);
    assert_eq!(log.shown("d1").0, "failed");
    log.check();
}

#[test]
fn a_plan_besides_pending_assignments_skips_them_and_their_room() {
    let mut log = Log::new();
    for name in ["a", "b", "c"] {
        log.run(1_000, create(name));
    }
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 10_000));
    let ids: Vec<OperationId> = ["a", "b", "c"]
        .iter()
        .map(|n| log.submit(1_100, submit(n, "update")))
        .collect();
    let planned = |log: &Log, pending: &std::collections::BTreeMap<OperationId, String>| {
        let plan = log.state.ops_dispatchable_besides(1_200, 4, 10, pending);
        plan.iter().map(|d| d.id).collect::<Vec<_>>()
    };
    let none = Default::default();
    assert_eq!(planned(&log, &none), [ids[0], ids[1]], "room for 2");
    // `a` is proposed to w1 and not applied: it is not offered again, and w1 has room for 1.
    let mut pending = [(ids[0], "w1".to_string())].into();
    assert_eq!(planned(&log, &pending), [ids[1]]);
    // Once applied, the state itself counts it: the same answer, not one less.
    log.op_ok(1_200, assign(ids[0], "w1"));
    assert_eq!(planned(&log, &pending), [ids[1]]);
    // Pending on both slots: nothing.
    pending.insert(ids[1], "w1".to_string());
    assert_eq!(planned(&log, &pending), Vec::<OperationId>::new());
}

#[test]
fn an_operation_past_its_deadline_is_never_assigned() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 100_000));
    let mut with_deadline = policy("d1", "update");
    with_deadline.deadline_ms = Some(500);
    let id = log.submit(1_000, submit_with("d1", "update", with_deadline));
    // The leader's plan skips it from its deadline on, by the same rule apply uses.
    assert_eq!(log.state.ops_dispatchable(1_499, 4, 8).len(), 1);
    assert!(log.state.ops_dispatchable(1_500, 4, 8).is_empty());
    // A plan made just before, applied at the deadline: refused, nothing changes, no lock.
    let late = Rejection::OperationDeadlinePassed {
        id,
        deadline_at_ms: 1_500,
        now_ms: 1_500,
    };
    log.rejected(1_500, assign(id, "w1"), late);
    assert!(log.state.lock("d1").is_none());
    // The sweep, not the refused assignment, ends it.
    let swept = log.run(1_500, sweep(&[], &[id], 0));
    assert!(!matches!(swept, Response::Rejected(_)), "{swept:?}");
    assert_eq!(log.op(id).state, Failed);
    log.check();
}

#[test]
fn an_operation_ending_does_not_grant_its_lock_to_a_waiter_whose_wait_ended() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 100_000));
    let id = log.submit(1_000, submit("d1", "update"));
    let op = log.op_ok(1_000, assign(id, "w1"));
    // A client queues behind the operation for 100 ms; its cancel is never proposed.
    let lock = "Director/default/d1";
    let waits = Command::Locks(LockCommand::Acquire {
        name: lock.into(),
        holder: "broker".into(),
        mode: LockMode::Write,
        ttl_ms: None,
        details: serde_json::Value::Null,
        wait_ms: 100,
        limits: LOCK_LIMITS,
    });
    let queued = log.run(1_000, waits);
    assert!(
        matches!(queued, Response::Locks(LockReply::Queued { .. })),
        "{queued:?}"
    );
    // The operation ends at the end of that wait: the lock is free, not the broker's for ever.
    log.op_ok(1_100, report(&op, succeeded()));
    assert!(log.state.lock(lock).is_none(), "{:?}", log.state.lock(lock));
    log.check();
}
