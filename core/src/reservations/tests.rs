//! The reservation's JSON form, `settle`'s rules, and the index kept through object changes.

use serde_json::json;

use super::*;

fn given(json: serde_json::Value) -> Reservation {
    serde_json::from_value(json).expect("reservation")
}

/// 2026-11-22T10:00:00Z
const CREATED: u64 = 1_795_341_600_000;

fn object(kind: &str, name: &str, reservation: Option<Reservation>) -> Resource {
    let mut r = Resource::new("v1", kind, "default", name);
    r.reservation = reservation.map(Box::new);
    r
}

#[test]
fn json_form_round_trips_and_shows_times_in_rfc3339() {
    let r = given(json!({
        "nodeId": "node-7",
        "expiresAt": "2026-11-22T10:00:00Z",
        "units": { "cru": 2, "mru": 4 },
        "toDelete": true,
    }));
    assert_eq!(r.expires_at, Some(CREATED));
    assert_eq!(
        r.units,
        Units {
            cru: 2,
            mru: 4,
            hru: 0,
            sru: 0
        }
    );
    let out = serde_json::to_value(&r).unwrap();
    assert_eq!(
        out,
        json!({
            "nodeId": "node-7",
            "expiresAt": "2026-11-22T10:00:00Z",
            "units": { "cru": 2, "mru": 4, "hru": 0, "sru": 0 },
            "toDelete": true,
        })
    );
    assert_eq!(format_time_ms(CREATED + 250), "2026-11-22T10:00:00.250Z");
    let back: Reservation = serde_json::from_value(out).unwrap();
    assert_eq!(back, r);
}

#[test]
fn json_form_refuses_unknown_fields_and_bad_times() {
    for bad in [
        json!({ "nodeId": "n", "expires": "2026-11-22T10:00:00Z" }),
        json!({ "nodeId": "n", "units": { "gpu": 1 } }),
        json!({ "nodeId": "n", "expiresAt": "tomorrow" }),
        json!({ "nodeId": "n", "units": { "cru": -1 } }),
    ] {
        assert!(
            serde_json::from_value::<Reservation>(bad.clone()).is_err(),
            "{bad} was accepted"
        );
    }
}

#[test]
fn settle_computes_the_end_from_the_creation_second() {
    let r =
        given(json!({ "nodeId": "n", "durationSeconds": 60, "expiresAt": "2030-01-01T00:00:00Z" }));
    // The duration wins over a given end; it counts from the creation, rounded up to a whole
    // second, so the end is never early (a create 1 ms into a second ends 59.999 s later, not
    // 59.001 s).
    let settled = settle(&r, None, CREATED + 1).unwrap();
    assert_eq!(settled.expires_at, Some(CREATED + 1_000 + 60_000));
    let on_the_second = settle(&r, None, CREATED).unwrap();
    assert_eq!(on_the_second.expires_at, Some(CREATED + 60_000));
    // The client's decommission mark is ignored.
    let forged = Reservation {
        decommission: Some(OperationId(3)),
        ..r.clone()
    };
    assert_eq!(settle(&forged, None, CREATED).unwrap().decommission, None);
    // No end at all is allowed: only toDelete ends it.
    let open = settle(&given(json!({ "nodeId": "n" })), None, CREATED).unwrap();
    assert_eq!(open.due_ms(), None);
}

#[test]
fn settle_refuses_bad_fields_naming_them() {
    let cases = [
        (json!({}), "reservation.nodeId"),
        (json!({ "nodeId": "a\nb" }), "reservation.nodeId"),
        (json!({ "nodeId": "x".repeat(254) }), "reservation.nodeId"),
        (
            json!({ "nodeId": "n", "durationSeconds": 0 }),
            "reservation.durationSeconds",
        ),
        (
            json!({ "nodeId": "n", "durationSeconds": RESERVATION_DURATION_SECONDS_MAX + 1 }),
            "reservation.durationSeconds",
        ),
        (
            json!({ "nodeId": "n", "units": { "sru": RESERVATION_UNITS_MAX + 1 } }),
            "reservation.units.sru",
        ),
    ];
    for (input, field) in cases {
        match settle(&given(input.clone()), None, CREATED) {
            Err(Rejection::Invalid { field: f, .. }) => assert_eq!(f, field, "{input}"),
            other => panic!("{input}: expected Invalid on {field}, got {other:?}"),
        }
    }
    // At the limits: accepted.
    let at = json!({
        "nodeId": "x".repeat(RESERVATION_NODE_CHARS_MAX),
        "durationSeconds": RESERVATION_DURATION_SECONDS_MAX,
        "units": { "cru": RESERVATION_UNITS_MAX },
    });
    assert!(settle(&given(at), None, CREATED).is_ok());
}

#[test]
fn settle_on_update_keeps_the_node_and_freezes_after_decommission() {
    let current = settle(
        &given(json!({ "nodeId": "n", "durationSeconds": 60 })),
        None,
        CREATED,
    )
    .unwrap();
    // Longer, marked, other units: fine before the decommission.
    let next = given(
        json!({ "nodeId": "n", "durationSeconds": 120, "toDelete": true, "units": { "cru": 1 } }),
    );
    let settled = settle(&next, Some(&current), CREATED).unwrap();
    assert_eq!(settled.expires_at, Some(CREATED + 120_000));
    assert!(settled.to_delete);
    // Another node: refused.
    let moved = given(json!({ "nodeId": "m", "durationSeconds": 60 }));
    let refused = settle(&moved, Some(&current), CREATED).unwrap_err();
    assert!(
        matches!(refused, Rejection::Invalid { ref field, .. } if field == "reservation.nodeId")
    );
    // After the decommission: the same reservation round-trips (the mark is kept), a change is
    // refused.
    let marked = Reservation {
        decommission: Some(OperationId(9)),
        ..current.clone()
    };
    let same = Reservation {
        decommission: None,
        ..marked.clone()
    };
    assert_eq!(settle(&same, Some(&marked), CREATED).unwrap(), marked);
    let refused = settle(&next, Some(&marked), CREATED).unwrap_err();
    assert!(
        matches!(refused, Rejection::Invalid { ref field, ref rule } if field == "reservation" && rule.contains("op-9"))
    );
}

#[test]
fn due_is_now_when_marked_at_the_end_otherwise_never_once_decommissioned() {
    let mut r = given(json!({ "nodeId": "n", "expiresAt": "2026-11-22T10:00:00Z" }));
    assert_eq!(r.due_ms(), Some(CREATED));
    assert!(!r.is_due(CREATED - 1));
    assert!(r.is_due(CREATED));
    r.to_delete = true;
    assert_eq!(r.due_ms(), Some(0));
    r.decommission = Some(OperationId(4));
    assert_eq!(r.due_ms(), None);
    assert!(!r.is_due(u64::MAX));
}

#[test]
fn index_counts_per_node_and_kind_and_orders_due_reservations() {
    let mut index = ReservationIndex::default();
    let units = |cru| Units {
        cru,
        mru: 10,
        hru: 0,
        sru: 5,
    };
    let res = |node: &str, expires: Option<u64>, cru| Reservation {
        node_id: node.into(),
        expires_at: expires,
        units: units(cru),
        ..Reservation::default()
    };
    let a = object("Container", "a", Some(res("n1", Some(300), 1)));
    let b = object("Container", "b", Some(res("n1", Some(100), 2)));
    let c = object("Zdb", "c", Some(res("n2", None, 4)));
    let plain = object("Container", "p", None);
    for o in [&a, &b, &c, &plain] {
        index.replace(None, Some(o));
    }
    let n1 = index.node("n1").unwrap();
    assert_eq!(n1.workloads, 2);
    assert_eq!(n1.by_kind.get("Container"), Some(&2));
    assert_eq!(
        n1.units,
        Units {
            cru: 3,
            mru: 20,
            hru: 0,
            sru: 10
        }
    );
    assert_eq!(index.nodes().count(), 2);
    assert_eq!(index.due(99, 10), Vec::<ObjectKey>::new());
    assert_eq!(index.due(300, 10), vec![b.key(), a.key()]);
    assert_eq!(index.due(300, 1), vec![b.key()]);
    assert_eq!(index.pending_len(), 2);

    // Marked toDelete: due at once.
    let c_marked = object(
        "Zdb",
        "c",
        Some(Reservation {
            to_delete: true,
            ..res("n2", None, 4)
        }),
    );
    index.replace(Some(&c), Some(&c_marked));
    assert_eq!(index.due(0, 10), vec![c_marked.key()]);
    // Decommissioned: no longer due, still counted until the object goes.
    let c_done = object(
        "Zdb",
        "c",
        Some(Reservation {
            decommission: Some(OperationId(8)),
            ..res("n2", None, 4)
        }),
    );
    index.replace(Some(&c_marked), Some(&c_done));
    assert_eq!(index.due(u64::MAX, 10), vec![b.key(), a.key()]);
    assert_eq!(index.node("n2").unwrap().workloads, 1);
    // Removed: uncounted; a node with nothing left disappears.
    index.replace(Some(&c_done), None);
    assert_eq!(index.node("n2"), None);
    index.replace(Some(&a), None);
    index.replace(Some(&b), Some(&plain));
    assert_eq!(index, ReservationIndex::default());
}
