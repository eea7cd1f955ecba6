//! Reservations through `apply_effects`: a reservation that ends (or is marked `toDelete`) is
//! decommissioned exactly once, by a delete operation submitted and marked in one step, and the
//! per-node counters follow every object change, rollbacks and restores included.

use crate::command::{ObjectCommand, ReservationCommand};
use crate::command::{ObjectReply, OperationReply};
use serde_json::json;

use super::tests::{assign, key, register, report, succeeded, Log, LIMITS};
use crate::command::{Command, Response, TxnOp};
use crate::objects::resource::Resource;
use crate::rejection::Rejection;
use crate::reservations::{Reservation, Units};
use crate::State;

/// 2026-11-22T10:00:00Z
const T0: u64 = 1_795_341_600_000;

fn reserved(name: &str, reservation: serde_json::Value) -> Resource {
    let mut r = super::tests::director(name);
    let reservation: Reservation = serde_json::from_value(reservation).expect("reservation");
    r.reservation = Some(Box::new(reservation));
    r
}

fn create(object: Resource) -> Command {
    Command::Objects(ObjectCommand::Create {
        object,
        fence: None,
    })
}

fn update(object: Resource) -> Command {
    Command::Objects(ObjectCommand::Update {
        object,
        expected_revision: None,
        fence: None,
    })
}

fn decommission(name: &str) -> Command {
    Command::Reservations(ReservationCommand::Decommission {
        target: key(name),
        verb: "delete".into(),
        policy: super::tests::policy(name, "delete"),
        limits: LIMITS,
    })
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
    log.run(T0, create(reserved("d1", res)));
    let stored = reservation_of(&log, "d1");
    assert_eq!(stored.expires_at, Some(T0 + 60_000), "from the creation");
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
        Response::Operations(OperationReply::Submitted {
            operation,
            created: true,
        }) => operation,
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
    plain.spec = crate::RawJson::from_value(&json!({ "options": "{\"a\":1}" }));
    let cmd = update(plain);
    assert!(matches!(
        log.run(T0 + 1, cmd),
        Response::Objects(ObjectReply::Object { .. })
    ));
    assert_eq!(reservation_of(&log, "d1").expires_at, Some(T0 + 3_600_000));
    assert!(not_due(&mut log, T0 + 2, "d1").contains("ends at"));

    let marked = reserved(
        "d1",
        json!({ "nodeId": "n", "durationSeconds": 3600, "toDelete": true }),
    );
    let cmd = update(marked);
    assert!(matches!(
        log.run(T0 + 3, cmd),
        Response::Objects(ObjectReply::Object { .. })
    ));
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
    let cmd = update(changed);
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
    let cmd = Command::Objects(ObjectCommand::Txn {
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
    });
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
    // Created 2 ms into a second: its end is rounded up to the next whole one.
    assert!(restored.reservations_due(T0 + 5_999).is_empty());
    assert_eq!(restored.reservations_due(T0 + 6_000), vec![key("c")]);
}

/// Random creates, updates, deletes, failed txns, clock steps, decommission proposals (due or
/// not) and finished decommissions, checked after every step against a full scan of the
/// objects: the per-node counters and the due list agree with the scan, every proposal the due
/// list offers applies and any other is refused, no reservation gets a second decommission, and
/// the state survives a snapshot.
mod model {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::objects::resource::ObjectKey;
    use crate::operations::{OpFilter, OpState};
    use crate::reservations::NodeReservations;

    const NAMES: [&str; 4] = ["d1", "d2", "d3", "d4"];
    const NODES: [&str; 2] = ["n1", "n2"];

    #[derive(Clone, Debug)]
    enum Step {
        Create {
            name: usize,
            node: usize,
            cru: u64,
            seconds: Option<u64>,
            to_delete: bool,
        },
        Update {
            name: usize,
            cru: u64,
            seconds: Option<u64>,
            to_delete: bool,
        },
        /// An update that carries no reservation.
        Touch {
            name: usize,
        },
        Delete {
            name: usize,
        },
        /// A txn that reserves and then fails.
        FailedTxn {
            name: usize,
        },
        Tick {
            ms: u64,
        },
        /// Propose what `reservations_due` offers: each must apply.
        Due,
        /// Propose for any name: applies exactly when the full scan says it is due.
        Any {
            name: usize,
        },
        /// A worker runs the oldest queued decommission to success.
        Finish,
    }

    fn step() -> impl Strategy<Value = Step> {
        let name = 0..NAMES.len();
        let seconds = prop::option::of(1u64..5);
        prop_oneof![
            3 => (name.clone(), 0..NODES.len(), 0u64..4, seconds.clone(), prop::bool::weighted(0.2))
                .prop_map(|(name, node, cru, seconds, to_delete)| Step::Create { name, node, cru, seconds, to_delete }),
            2 => (name.clone(), 0u64..4, seconds, prop::bool::weighted(0.3))
                .prop_map(|(name, cru, seconds, to_delete)| Step::Update { name, cru, seconds, to_delete }),
            1 => name.clone().prop_map(|name| Step::Touch { name }),
            1 => name.clone().prop_map(|name| Step::Delete { name }),
            1 => name.clone().prop_map(|name| Step::FailedTxn { name }),
            3 => (0u64..3_000).prop_map(|ms| Step::Tick { ms }),
            2 => Just(Step::Due),
            2 => name.prop_map(|name| Step::Any { name }),
            2 => Just(Step::Finish),
        ]
    }

    fn reservation(
        node: &str,
        cru: u64,
        seconds: Option<u64>,
        to_delete: bool,
    ) -> serde_json::Value {
        let mut r = json!({ "nodeId": node, "units": { "cru": cru } });
        if let Some(s) = seconds {
            r["durationSeconds"] = json!(s);
        }
        if to_delete {
            r["toDelete"] = json!(true);
        }
        r
    }

    fn object(name: &str, node: &str, cru: u64, seconds: Option<u64>, to_delete: bool) -> Resource {
        reserved(name, reservation(node, cru, seconds, to_delete))
    }

    /// The counters and due list rebuilt by scanning every object.
    fn scan(state: &State, now: u64) -> (BTreeMap<String, NodeReservations>, Vec<ObjectKey>) {
        let mut nodes: BTreeMap<String, NodeReservations> = BTreeMap::new();
        let mut due = Vec::new();
        for o in state.objects() {
            let Some(r) = o.reservation.as_deref() else {
                continue;
            };
            let n = nodes.entry(r.node_id.to_string()).or_default();
            n.workloads += 1;
            *n.by_kind.entry(o.kind.clone()).or_default() += 1;
            n.units.cru += r.units.cru;
            if r.is_due(now) {
                due.push((r.due_ms().unwrap_or(0), o.key()));
            }
        }
        due.sort();
        (nodes, due.into_iter().map(|(_, k)| k).collect())
    }

    fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
        let mut log = Log::new();
        let mut now = T0;
        // Decommissions submitted per object uid.
        let mut submitted: BTreeMap<String, u32> = BTreeMap::new();
        log.worker_ok(now, register("w", &["Director:delete"], 8, 3_600_000));
        for step in steps {
            match step {
                Step::Create {
                    name,
                    node,
                    cru,
                    seconds,
                    to_delete,
                } => {
                    let o = object(NAMES[name], NODES[node], cru, seconds, to_delete);
                    log.run(now, create(o));
                }
                Step::Update {
                    name,
                    cru,
                    seconds,
                    to_delete,
                } => {
                    // Keep the node: a move is refused (tested above) and would only add noise.
                    let node = log
                        .object(NAMES[name])
                        .and_then(|o| o.reservation.map(|r| r.node_id.to_string()))
                        .unwrap_or_else(|| NODES[0].to_string());
                    let o = object(NAMES[name], &node, cru, seconds, to_delete);
                    log.run(now, update(o));
                }
                Step::Touch { name } => {
                    let before = log.object(NAMES[name]).and_then(|o| o.reservation);
                    let mut o = super::super::tests::director(NAMES[name]);
                    o.metadata.labels.insert("touched".into(), "yes".into());
                    log.run(now, update(o));
                    let after = log.object(NAMES[name]).and_then(|o| o.reservation);
                    prop_assert_eq!(before, after, "an update without reservation keeps it");
                }
                Step::Delete { name } => {
                    log.run(
                        now,
                        Command::Objects(ObjectCommand::Delete {
                            key: key(NAMES[name]),
                            expected_revision: None,
                            fence: None,
                        }),
                    );
                }
                Step::FailedTxn { name } => {
                    let ops = vec![
                        TxnOp::Create {
                            object: object("txn", "n1", 9, Some(1), true),
                        },
                        TxnOp::Delete {
                            key: key(NAMES[name]),
                            expected_revision: None,
                        },
                        TxnOp::Delete {
                            key: key("missing"),
                            expected_revision: None,
                        },
                    ];
                    let answer = log.run(
                        now,
                        Command::Objects(ObjectCommand::Txn { ops, fence: None }),
                    );
                    prop_assert!(matches!(answer, Response::Rejected(_)), "{:?}", answer);
                }
                Step::Tick { ms } => now += ms,
                Step::Due => {
                    for target in log.state.reservations_due(now) {
                        let uid = log.state.get(&target).map(|o| o.metadata.uid.to_string());
                        let cmd = decommission(&target.name);
                        match log.run(now, cmd) {
                            Response::Operations(OperationReply::Submitted {
                                created: true,
                                ..
                            }) => {
                                *submitted.entry(uid.unwrap_or_default()).or_default() += 1;
                            }
                            other => prop_assert!(false, "offered {} but got {:?}", target, other),
                        }
                    }
                }
                Step::Any { name } => {
                    let due = scan(&log.state, now).1.contains(&key(NAMES[name]));
                    let uid = log.object(NAMES[name]).map(|o| o.metadata.uid.to_string());
                    match log.run(now, decommission(NAMES[name])) {
                        Response::Operations(OperationReply::Submitted {
                            created: true, ..
                        }) => {
                            prop_assert!(due, "{} was not due", NAMES[name]);
                            *submitted.entry(uid.unwrap_or_default()).or_default() += 1;
                        }
                        Response::Rejected(_) => prop_assert!(!due, "{} was due", NAMES[name]),
                        other => prop_assert!(false, "unexpected {:?}", other),
                    }
                }
                Step::Finish => {
                    let queued = log
                        .state
                        .operations(&OpFilter::default(), None, 0)
                        .into_iter()
                        .find(|o| o.state == OpState::Queued)
                        .map(|o| o.id);
                    if let Some(id) = queued {
                        if let Response::Operations(OperationReply::Operation { operation }) =
                            log.run(now, assign(id, "w"))
                        {
                            let answer = log.run(now, report(&operation, succeeded()));
                            prop_assert!(
                                matches!(
                                    answer,
                                    Response::Operations(OperationReply::Operation { .. })
                                ),
                                "{:?}",
                                answer
                            );
                        }
                    }
                }
            }
            // The index agrees with a full scan.
            let (nodes, due) = scan(&log.state, now);
            let indexed: BTreeMap<String, NodeReservations> = log
                .state
                .reservations()
                .nodes()
                .map(|(id, n)| (id.to_string(), n.clone()))
                .collect();
            prop_assert_eq!(&indexed, &nodes);
            prop_assert_eq!(log.state.reservations_due(now), due);
            // Exactly once, and every mark names its own decommission.
            prop_assert!(submitted.values().all(|&n| n == 1), "{:?}", submitted);
            for o in log.state.objects() {
                if let Some(id) = o.reservation.as_deref().and_then(|r| r.decommission) {
                    let op = log.state.operation(id).expect("retained");
                    let want = format!("decommission/{}", o.metadata.uid);
                    prop_assert_eq!(op.idempotency_key.as_deref(), Some(want.as_str()));
                }
            }
            log.check();
        }
        let restored = State::from_snapshot_bytes(&log.state.to_snapshot_bytes())
            .map_err(TestCaseError::fail)?;
        prop_assert_eq!(&restored, &log.state);
        Ok(())
    }

    proptest! {
        // No regression files: shrunk failures become table tests next to the code instead.
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn reservations_follow_a_full_scan_and_decommission_once(
            steps in prop::collection::vec(step(), 1..60)
        ) {
            run(steps)?;
        }
    }
}
