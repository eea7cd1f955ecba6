//! Reservations through `apply_effects`: a reservation that ends (or is marked `toDelete`) is
//! decommissioned exactly once, by a delete operation submitted and marked in one step, and the
//! per-node counters follow every object change, rollbacks and restores included.

use serde_json::json;

use super::tests::{assign, key, register, report, succeeded, Log, LIMITS};
use crate::state::command::{Command, Rejection, Response, TxnOp};
use crate::state::reservation::{Reservation, Units};
use crate::state::resource::Resource;
use crate::state::State;

/// 2026-11-22T10:00:00Z
const T0: u64 = 1_795_341_600_000;

fn reserved(name: &str, reservation: serde_json::Value) -> Resource {
    let mut r = super::tests::director(name);
    let reservation: Reservation = serde_json::from_value(reservation).expect("reservation");
    r.reservation = Some(Box::new(reservation));
    r
}

fn create(object: Resource) -> Command {
    Command::Create {
        object,
        fence: None,
    }
}

fn decommission(name: &str) -> Command {
    Command::Decommission {
        target: key(name),
        verb: "delete".into(),
        policy: super::tests::policy(name, "delete"),
        limits: LIMITS,
    }
}

fn reservation_of(log: &Log, name: &str) -> Reservation {
    let object = log.object(name).expect("object");
    *object.reservation.expect("reservation")
}

fn not_due(log: &mut Log, time_ms: u64, name: &str) -> String {
    match log.rejection(time_ms, decommission(name)) {
        Rejection::ReservationNotDue { key: k, reason } if k == key(name) => reason,
        other => panic!("expected ReservationNotDue, got {other:?}"),
    }
}

#[test]
fn an_ended_reservation_is_decommissioned_once_and_its_delete_removes_it() {
    let mut log = Log::new();
    let res = json!({ "nodeId": "node-7", "durationSeconds": 60, "units": { "cru": 2, "mru": 4 } });
    log.run(T0 + 500, create(reserved("d1", res)));
    let stored = reservation_of(&log, "d1");
    assert_eq!(
        stored.expires_at,
        Some(T0 + 60_000),
        "from the creation second"
    );
    let node = log.state.reservations().node("node-7").cloned().unwrap();
    assert_eq!((node.workloads, node.units.cru, node.units.mru), (1, 2, 4));

    // Before the end: nothing due, and a proposal is refused without effect.
    assert!(log.state.reservations_due(T0 + 59_999).is_empty());
    let reason = not_due(&mut log, T0 + 59_999, "d1");
    assert!(reason.contains("2026-11-22T10:01:00Z"), "{reason}");

    // At the end: due; the decommission submits a delete and marks the reservation in one step.
    assert_eq!(log.state.reservations_due(T0 + 60_000), vec![key("d1")]);
    let revision = log.state.revision();
    let op = match log.run(T0 + 60_000, decommission("d1")) {
        Response::OpSubmitted {
            operation,
            created: true,
        } => operation,
        other => panic!("expected a submit, got {other:?}"),
    };
    assert_eq!(op.verb, "delete");
    let uid = log.object("d1").unwrap().metadata.uid.to_string();
    assert_eq!(op.idempotency_key, Some(format!("decommission/{uid}")));
    assert_eq!(
        op.params,
        json!({ "decommission": { "reason": "expired" } })
    );
    assert_eq!(log.state.revision(), revision + 1, "one object change");
    assert_eq!(reservation_of(&log, "d1").decommission, Some(op.id));
    assert_eq!(log.shown("d1").1, "in_queue");

    // Exactly once: no longer due, and a second proposal is refused.
    assert!(log.state.reservations_due(u64::MAX).is_empty());
    let reason = not_due(&mut log, T0 + 61_000, "d1");
    assert!(reason.contains(&op.id.to_string()), "{reason}");
    // Still counted while it is being decommissioned.
    assert_eq!(
        log.state.reservations().node("node-7").unwrap().workloads,
        1
    );

    // A worker deletes it: the object and its counters are gone.
    log.worker_ok(T0 + 61_000, register("w", &["Director:delete"], 1, 10_000));
    let assigned = log.op_ok(T0 + 61_000, assign(op.id, "w"));
    log.op_ok(T0 + 62_000, report(&assigned, succeeded()));
    assert_eq!(log.object("d1"), None);
    assert_eq!(log.state.reservations().nodes().count(), 0);
    assert_eq!(log.state.reservations().pending_len(), 0);
    log.check();
}

#[test]
fn to_delete_makes_it_due_at_once_and_an_update_without_reservation_keeps_it() {
    let mut log = Log::new();
    log.run(
        T0,
        create(reserved(
            "d1",
            json!({ "nodeId": "n", "durationSeconds": 3600 }),
        )),
    );
    // An update that knows nothing of reservations keeps it.
    let mut plain = super::tests::director("d1");
    plain.spec = crate::state::RawJson::from_value(&json!({ "options": "{\"a\":1}" }));
    let cmd = Command::Update {
        object: plain,
        expected_revision: None,
        fence: None,
    };
    assert!(matches!(log.run(T0 + 1, cmd), Response::Object { .. }));
    assert_eq!(reservation_of(&log, "d1").expires_at, Some(T0 + 3_600_000));
    assert!(not_due(&mut log, T0 + 2, "d1").contains("ends at"));

    let marked = reserved(
        "d1",
        json!({ "nodeId": "n", "durationSeconds": 3600, "toDelete": true }),
    );
    let cmd = Command::Update {
        object: marked,
        expected_revision: None,
        fence: None,
    };
    assert!(matches!(log.run(T0 + 3, cmd), Response::Object { .. }));
    assert_eq!(log.state.reservations_due(T0 + 3), vec![key("d1")]);
    let op = log.submit(T0 + 4, decommission("d1"));
    assert_eq!(
        log.op(op).params,
        json!({ "decommission": { "reason": "toDelete" } })
    );
    // Frozen now: changing it is refused, naming the operation.
    let changed = reserved(
        "d1",
        json!({ "nodeId": "n", "durationSeconds": 7200, "toDelete": true }),
    );
    let cmd = Command::Update {
        object: changed,
        expected_revision: None,
        fence: None,
    };
    let rejection = log.rejection(T0 + 5, cmd);
    assert!(
        matches!(&rejection, Rejection::Invalid { field, rule } if field == "reservation" && rule.contains(&op.to_string())),
        "{rejection:?}"
    );
    log.check();
}

#[test]
fn a_reservation_without_end_is_never_due_and_other_objects_are_refused() {
    let mut log = Log::new();
    log.run(T0, create(reserved("open", json!({ "nodeId": "n" }))));
    log.run(T0, super::tests::create("plain"));
    assert!(log.state.reservations_due(u64::MAX).is_empty());
    assert!(not_due(&mut log, T0 + 1, "open").contains("no end"));
    assert!(not_due(&mut log, T0 + 1, "plain").contains("no reservation"));
    let missing = log.rejection(T0 + 1, decommission("gone"));
    assert_eq!(missing, Rejection::NotFound { key: key("gone") });
}

#[test]
fn a_full_queue_refuses_the_decommission_and_it_stays_due() {
    let mut log = Log::new();
    log.run(
        T0,
        create(reserved("d1", json!({ "nodeId": "n", "toDelete": true }))),
    );
    // Fill operations.active_max with queued updates on other targets.
    for i in 0..LIMITS.active_max {
        let name = format!("x{i}");
        log.run(T0, super::tests::create(&name));
        log.submit(T0, super::tests::submit(&name, "update"));
    }
    let rejection = log.rejection(T0 + 1, decommission("d1"));
    assert!(
        matches!(&rejection, Rejection::TooLarge { field, .. } if field == "operations"),
        "{rejection:?}"
    );
    assert_eq!(log.state.reservations_due(T0 + 1), vec![key("d1")]);
}

#[test]
fn counters_follow_rolled_back_txns_and_survive_a_snapshot() {
    let mut log = Log::new();
    log.run(
        T0,
        create(reserved(
            "a",
            json!({ "nodeId": "n1", "units": { "sru": 7 } }),
        )),
    );
    let before = log.state.clone();
    // A txn that reserves more and then fails rolls the counters back with the objects.
    let cmd = Command::Txn {
        ops: vec![
            TxnOp::Create {
                object: reserved("b", json!({ "nodeId": "n1", "units": { "sru": 1 } })),
            },
            TxnOp::Delete {
                key: key("a"),
                expected_revision: None,
            },
            TxnOp::Delete {
                key: key("missing"),
                expected_revision: None,
            },
        ],
        fence: None,
    };
    assert!(matches!(log.run(T0 + 1, cmd), Response::Rejected(_)));
    assert_eq!(log.state.with_clock_of(&before), before);
    let n1 = log.state.reservations().node("n1").unwrap();
    assert_eq!(
        (n1.workloads, n1.units),
        (
            1,
            Units {
                sru: 7,
                ..Units::default()
            }
        )
    );

    log.run(
        T0 + 2,
        create(reserved(
            "c",
            json!({ "nodeId": "n2", "durationSeconds": 5 }),
        )),
    );
    let restored = State::from_snapshot_bytes(&log.state.to_snapshot_bytes()).unwrap();
    assert_eq!(restored, log.state, "the index is rebuilt from the objects");
    assert_eq!(restored.reservations_due(T0 + 5_000), vec![key("c")]);
}
