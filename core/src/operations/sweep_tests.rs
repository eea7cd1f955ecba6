//! Table-driven sequences about time and recovery: dead workers' assignments taken back (and
//! finished by another worker with a larger epoch), the last attempt failing, the grace after a
//! leader change, deadlines, deregistration, the dispatch plan, `ops_due`, eviction of ended
//! operations, and snapshots.

use crate::command::OperationCommand;
use crate::command::OperationReply;
use serde_json::json;

use super::tests::*;
use super::*;
use crate::command::{Command, Response, WorkerReport};
use crate::rejection::Rejection;
use crate::state::State;
use OpState::{Aborted, Aborting, Dispatched, Failed, InProgress, Queued, Succeeded};

fn swept(tally: OpTally) -> Response {
    Response::Operations(OperationReply::Swept { tally })
}

#[test]
fn a_dead_workers_operation_is_requeued_and_finished_by_another() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 1_000));
    log.run(1_000, register("w2", &DIRECTOR_VERBS, 1, 60_000));
    let id = log.submit(1_100, submit("d1", "update"));
    let first = log.op_ok(1_200, assign(id, "w1"));
    let first = log.op_ok(1_300, report(&first, WorkerReport::Started));
    let lock = "Director/default/d1";

    // Past w1's ttl it gets no new work, but keeps what it has until a sweep.
    assert_eq!(log.state.ops_due(1_999).workers, Vec::<String>::new());
    assert_eq!(log.state.ops_due(2_000).workers, ["w1"]);
    assert_eq!(log.holders(lock).len(), 1);
    log.op_events();
    log.object_events();
    let tally = OpTally {
        workers_removed: 1,
        requeued: 1,
        ..OpTally::default()
    };
    assert_eq!(log.run(2_100, sweep(&["w1"], &[], 0)), swept(tally));
    let op = log.op(id);
    assert_eq!((op.state, op.attempt, op.worker.clone()), (Queued, 2, None));
    assert!(
        log.holders(lock).is_empty(),
        "its lock is released in the same step"
    );
    assert!(log.state.worker("w1").is_none());
    assert_eq!(log.shown("d1").0, "in_queue");
    assert_eq!(log.op_events(), [(id, Queued)]);
    assert_eq!(log.object_events().len(), 1);

    // w1 comes back from a pause: its report is stale, and stays so after the reassignment.
    let r = log.rejection(2_200, report(&first, WorkerReport::Started));
    let Rejection::StaleAssignment { reason, .. } = &r else {
        panic!("{r:?}");
    };
    assert_eq!(
        reason,
        "the operation was taken back and waits for attempt 2"
    );
    let second = log.op_ok(2_300, assign(id, "w2"));
    assert!(
        second.epoch > first.epoch,
        "a new epoch for every assignment"
    );
    assert_eq!((second.attempt, second.worker.as_deref()), (2, Some("w2")));
    let r = log.rejection(2_400, report(&first, succeeded()));
    assert!(matches!(r, Rejection::StaleAssignment { .. }), "{r:?}");
    let done = log.op_ok(2_500, report(&second, succeeded()));
    assert_eq!(done.state, Succeeded);
    let attempts: Vec<(OpState, u32)> = done
        .transitions
        .iter()
        .map(|t| (t.state, t.attempt))
        .collect();
    assert_eq!(
        attempts,
        [
            (Queued, 1),
            (Dispatched, 1),
            (InProgress, 1),
            (Queued, 2),
            (Dispatched, 2),
            (Succeeded, 2)
        ]
    );
    log.check();
}

#[test]
fn the_last_attempt_fails_and_an_aborting_one_ends_aborted() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, create("d2"));
    let mut p = policy("d1", "update");
    p.max_attempts = 1;
    let once = log.submit(1_000, submit_with("d1", "update", p));
    let aborting = log.submit(1_000, submit("d2", "update"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 1_000));
    log.op_ok(1_100, assign(once, "w1"));
    log.op_ok(1_100, assign(aborting, "w1"));
    log.op_ok(1_200, abort(aborting));
    let tally = OpTally {
        workers_removed: 1,
        failed: 1,
        aborted: 1,
        ..OpTally::default()
    };
    assert_eq!(log.run(3_000, sweep(&["w1"], &[], 0)), swept(tally));
    let op = log.op(once);
    assert_eq!(op.state, Failed);
    let error = "worker w1 stopped heartbeating (expired at 2000 ms); that was attempt 1 of 1";
    assert_eq!(op.result, Some(OpResult::Error(error.into())));
    assert_eq!(log.object("d1").expect("d1").status["error"], error);
    assert_eq!(log.op(aborting).state, Aborted);
    assert_eq!(log.state.lock_count(), 0);
    log.check();
}

#[test]
fn a_lost_workers_late_end_report_is_stale_not_a_repeat_of_the_sweeps_end() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    let mut p = policy("d1", "update");
    p.max_attempts = 1;
    let id = log.submit(1_000, submit_with("d1", "update", p));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 1_000));
    let mine = log.op_ok(1_100, assign(id, "w1"));
    log.run(3_000, sweep(&["w1"], &[], 0));
    assert_eq!(log.op(id).state, Failed);
    // w1 comes back and reports its own failure: the operation ended Failed under its
    // assignment, but by the sweep, so the report is stale, not a repeat.
    let failed = WorkerReport::Failed {
        error: "disk full".into(),
    };
    let r = log.rejection(3_100, report(&mine, failed));
    let Rejection::StaleAssignment { reason, .. } = &r else {
        panic!("{r:?}");
    };
    assert!(
        reason.starts_with("the operation ended Failed without this report"),
        "{reason}"
    );
    let r = log.rejection(3_100, report(&mine, succeeded()));
    assert!(matches!(r, Rejection::OperationState { .. }), "{r:?}");
    log.check();
}

#[test]
fn a_repeat_of_the_report_that_ended_an_operation_is_answered_unchanged() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 60_000));
    let id = log.submit(1_000, submit("d1", "update"));
    let mine = log.op_ok(1_100, assign(id, "w1"));
    let failed = WorkerReport::Failed {
        error: "disk full".into(),
    };
    let done = log.op_ok(1_200, report(&mine, failed.clone()));
    assert_eq!(done.state, Failed);
    assert_eq!(log.op_ok(1_300, report(&mine, failed)), done);
    log.check();
}

#[test]
fn sweeps_wait_out_the_grace_after_a_leader_change_and_recheck() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 1_000));
    let id = log.submit(1_000, submit("d1", "update"));
    log.op_ok(1_000, assign(id, "w1"));
    log.new_term();
    let nothing = swept(OpTally::default());
    // The new leader's first stamped entry expires nothing, whatever its grace.
    assert_eq!(log.run(5_000, sweep(&["w1"], &[], 0)), nothing);
    assert_eq!(log.run(5_999, sweep(&["w1"], &[], 1_000)), nothing);
    assert_eq!(log.op(id).state, Dispatched);
    // A heartbeat that lands first revives it: the sweep re-checks and leaves it.
    log.worker_ok(6_000, heartbeat("w1"));
    assert_eq!(log.run(6_000, sweep(&["w1"], &[], 1_000)), nothing);
    // Unknown names and ids are skipped.
    assert_eq!(
        log.run(6_100, sweep(&["w9"], &[OperationId(99)], 0)),
        nothing
    );
    let tally = OpTally {
        workers_removed: 1,
        requeued: 1,
        ..OpTally::default()
    };
    assert_eq!(
        log.run(7_000, sweep(&["w1", "w1"], &[], 1_000)),
        swept(tally)
    );
    log.check();

    let many = vec!["w".to_string(); OP_SWEEP_ITEMS_MAX + 1];
    let cmd = Command::Operations(OperationCommand::Sweep {
        workers: many,
        operations: Vec::new(),
        grace_ms: 0,
        limits: LIMITS,
    });
    let r = log.rejection(7_100, cmd);
    assert!(
        matches!(&r, Rejection::TooLarge { field, .. } if field == "workers"),
        "{r:?}"
    );
}

#[test]
fn deadlines_fail_queued_operations_and_abort_running_ones() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, create("d2"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 60_000));
    let with_deadline = |name: &str| {
        let mut p = policy(name, "update");
        p.deadline_ms = Some(500);
        submit_with(name, "update", p)
    };
    let queued = log.submit(1_000, with_deadline("d1"));
    let running = log.submit(1_000, with_deadline("d2"));
    let r = log.op_ok(1_100, assign(running, "w1"));
    assert_eq!(log.op(queued).deadline_at_ms, Some(1_500));
    assert!(log.state.ops_due(1_499).operations.is_empty());
    assert_eq!(log.state.ops_due(1_500).operations, [queued, running]);
    // Past its deadline an operation is not offered any more.
    assert!(log.state.ops_dispatchable(1_500, 4, 10).is_empty());
    let tally = OpTally {
        failed: 1,
        aborting: 1,
        ..OpTally::default()
    };
    assert_eq!(
        log.run(1_600, sweep(&[], &[queued, running], 0)),
        swept(tally)
    );
    assert_eq!(log.op(queued).state, Failed);
    assert_eq!(log.shown("d1").0, "failed");
    let op = log.op(running);
    assert_eq!(op.state, Aborting);
    assert_eq!(
        log.holders("Director/default/d2").len(),
        1,
        "kept until the worker stops"
    );
    assert!(
        log.state.ops_due(9_999).operations.is_empty(),
        "acted on once"
    );
    let op = log.op_ok(1_700, report(&r, WorkerReport::Aborted));
    assert_eq!(op.state, Aborted);
    let error = "its deadline of 500 ms passed at 1500 ms while it ran";
    assert_eq!(op.result, Some(OpResult::Error(error.into())));
    assert_eq!(log.object("d2").expect("d2").status["error"], error);
    log.check();
}

#[test]
fn deregistering_takes_work_back_at_once() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 1, 60_000));
    let id = log.submit(1_000, submit("d1", "update"));
    log.op_ok(1_100, assign(id, "w1"));
    let deregister = Command::Operations(OperationCommand::DeregisterWorker {
        worker: "w1".into(),
        limits: LIMITS,
    });
    let tally = OpTally {
        workers_removed: 1,
        requeued: 1,
        ..OpTally::default()
    };
    assert_eq!(
        log.run(1_200, deregister),
        Response::Operations(OperationReply::WorkerDeregistered { tally })
    );
    assert_eq!((log.op(id).state, log.op(id).attempt), (Queued, 2));
    assert_eq!(log.state.lock_count(), 0);
    assert_eq!(log.state.workers().count(), 0);
    log.check();
}

#[test]
fn the_dispatch_plan_is_fifo_per_target_and_fills_the_emptiest_worker() {
    let mut log = Log::new();
    for name in ["d1", "d2", "d3", "d4"] {
        log.run(1_000, create(name));
    }
    log.run(1_000, register("big", &DIRECTOR_VERBS, 3, 60_000));
    log.run(1_000, register("small", &DIRECTOR_VERBS, 1, 60_000));
    log.run(1_000, register("creator", &["Director:create"], 4, 60_000));
    log.run(1_000, register("gone", &DIRECTOR_VERBS, 4, 10));
    let a = log.submit(1_100, submit("d1", "update"));
    let _behind_a = log.submit(1_100, submit("d1", "update"));
    let b = log.submit(1_100, submit("d2", "update"));
    let c = log.submit(1_100, submit("d3", "create"));
    let d = log.submit(1_100, submit("d4", "update"));
    let plan = log.state.ops_dispatchable(1_200, 4, 10);
    let plan: Vec<(OperationId, &str)> = plan.iter().map(|p| (p.id, p.worker.as_str())).collect();
    // a -> big (room 3), b -> big (2 vs small's 1: most room wins), c -> creator (4), d -> big
    // (1 vs 1: the smaller id); the second on d1 waits for a; "gone" is dead.
    assert_eq!(plan, [(a, "big"), (b, "big"), (c, "creator"), (d, "big")]);
    let plan = log.state.ops_dispatchable(1_200, 4, 2);
    assert_eq!(plan.len(), 2, "at most max");
    // Proposed as planned, every one applies.
    for p in log.state.ops_dispatchable(1_200, 4, 10) {
        log.op_ok(1_300, assign(p.id, &p.worker));
    }
    assert!(log.state.ops_dispatchable(1_300, 4, 10).is_empty());
    let by_worker = OpFilter {
        worker: Some("big".into()),
        ..OpFilter::default()
    };
    let listed: Vec<OperationId> = log
        .state
        .operations(&by_worker, None, 0)
        .iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(listed, [a, b, d]);
    let queued = OpFilter {
        state: Some(Queued),
        target: Some(key("d1")),
        ..OpFilter::default()
    };
    assert_eq!(log.state.operations(&queued, None, 0).len(), 1);
    let page: Vec<OperationId> = log
        .state
        .operations(&OpFilter::default(), Some(a), 2)
        .iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(page.len(), 2);
    assert!(page.iter().all(|&id| id > a));
    log.check();
}

#[test]
fn ended_operations_are_evicted_oldest_end_first() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    let limits = OpLimits {
        finished_max: 2,
        ..LIMITS
    };
    let mut ids = Vec::new();
    for i in 0..4u64 {
        let cmd = with_key(submit("d1", "update"), &format!("k{i}"));
        let id = log.submit(1_000 + i, cmd);
        ids.push(id);
        let cmd = Command::Operations(OperationCommand::Abort { id, limits });
        log.op_ok(1_000 + i, cmd);
    }
    let kept: Vec<OperationId> = log
        .state
        .operations(&OpFilter::default(), None, 0)
        .iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(kept, ids[2..]);
    assert!(
        log.state.operation_by_key("k0").is_none(),
        "its key is free again"
    );
    let again = log.submit(2_000, with_key(submit("d1", "update"), "k0"));
    assert!(again > ids[3]);
    log.check();
}

#[test]
fn snapshots_carry_operations_and_workers() {
    let mut log = Log::new();
    log.run(1_000, create("d1"));
    log.run(1_000, create("d2"));
    log.run(1_000, register("w1", &DIRECTOR_VERBS, 2, 5_000));
    let a = log.submit(1_100, with_key(submit("d1", "update"), "k1"));
    let b = log.submit(1_100, submit("d2", "backup"));
    log.submit(1_100, submit("d1", "delete"));
    let a = log.op_ok(1_200, assign(a, "w1"));
    log.op_ok(1_200, assign(b, "w1"));
    log.op_ok(1_300, report(&a, succeeded()));
    let bytes = log.state.to_snapshot_bytes();
    let back = State::from_snapshot_bytes(&bytes).expect("restores");
    assert_eq!(back, log.state, "indexes are rebuilt exactly");
    assert_eq!(back.to_snapshot_bytes(), bytes);
    assert_eq!(
        back.ops_dispatchable(1_400, 4, 10),
        log.state.ops_dispatchable(1_400, 4, 10)
    );

    // A snapshot whose operations disagree with its locks is refused.
    let mut body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    body["locks"] = json!([]);
    let broken = serde_json::to_vec(&body).expect("ser");
    let err = State::from_snapshot_bytes(&broken).expect_err("no grant for an assignment");
    assert!(err.contains("snapshot operations"), "{err}");
    let mut body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    body["workers"][0]["assigned"] = json!([]);
    let broken = serde_json::to_vec(&body).expect("ser");
    assert!(State::from_snapshot_bytes(&broken).is_err());

    // Format 2 (before operations) still restores, and may not hold any.
    let mut old: serde_json::Value =
        serde_json::from_slice(&State::new().to_snapshot_bytes()).expect("json");
    old["format"] = json!(2);
    if let Some(body) = old.as_object_mut() {
        body.remove("operations");
        body.remove("workers");
    }
    let restored = State::from_snapshot_bytes(&serde_json::to_vec(&old).expect("ser"));
    assert_eq!(restored, Ok(State::new()));
    let mut old: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    old["format"] = json!(2);
    assert!(State::from_snapshot_bytes(&serde_json::to_vec(&old).expect("ser")).is_err());
}
