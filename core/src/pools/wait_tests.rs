//! Pool waits that ended without the reaper's expiry or the waiter's cancel (issue 20): at
//! every point that frees a resource the ended claim is dropped with the reaper's event, never
//! granted, and it holds no place in the queue or against `POOL_WAITERS_MAX`.

use super::tests::*;
use super::*;
use crate::command::ObjectReply;
use crate::command::Response;
use crate::rejection::Rejection;

fn free(name: &str, owner: &str) -> PoolAction {
    PoolAction::Release {
        name: name.into(),
        owner: owner.into(),
        dest: "free".into(),
    }
}

/// One point that frees a resource, run at the end of claim `c`'s wait (T0 + 1,100).
struct FreePoint {
    what: &'static str,
    /// Whether claim `d` (a long wait) queues behind `c`.
    live_behind: bool,
    action: fn() -> PoolAction,
    /// Who holds the freed resource after it ("" for nobody), and which it is.
    freed: (&'static str, &'static str),
}

const POINTS: &[FreePoint] = &[
    FreePoint {
        what: "a release, nobody else waits: the resource stays free",
        live_behind: false,
        action: || free("p1", "a"),
        freed: ("p1", ""),
    },
    FreePoint {
        what: "a release, a live claim behind: it gets the resource",
        live_behind: true,
        action: || free("p1", "a"),
        freed: ("p1", "d"),
    },
    FreePoint {
        what: "a sync that adds a free resource",
        live_behind: false,
        action: || {
            let entries = [
                ("p1", "gce", "free"),
                ("p2", "gce", "free"),
                ("p3", "gce", "dirty"),
                ("p9", "gce", "free"),
            ];
            sync(&entries)
        },
        freed: ("p9", ""),
    },
];

#[test]
fn a_claim_whose_wait_ended_is_never_granted() {
    for point in POINTS {
        let mut log = Log::new();
        log.ok(T0 + 10, acquire("a", ""));
        log.ok(T0 + 10, acquire("b", ""));
        let c = queued(&mut log, T0 + 1_000, acquire_wait("c", "", 100));
        assert_eq!(c.deadline_ms, T0 + 1_100);
        if point.live_behind {
            queued(&mut log, T0 + 1_000, acquire_wait("d", "", 60_000));
        }
        let before = log.effects.pool_events.len();
        // Exactly at c's deadline: its waiter has been answered POOL_WAIT_EXPIRED.
        log.ok(T0 + 1_100, (point.action)());
        let (name, owner) = point.freed;
        assert_eq!(log.view(name).expect(name).owner, owner, "{}", point.what);
        let ended = PoolEvent::Claim {
            claim: claim_name(c.seq),
            resource: None,
        };
        let events = &log.effects.pool_events[before..];
        assert_eq!(events.first(), Some(&ended), "{}", point.what);
        let pools = log.state.pools();
        assert!(pools.claim_by_request("c", &c.request_id).is_none());
        assert!(pools.by_request("c", &c.request_id).is_none());
    }
}

#[test]
fn a_claim_is_still_granted_one_ms_before_its_wait_ends() {
    let mut log = Log::new();
    log.ok(T0 + 10, acquire("a", ""));
    log.ok(T0 + 10, acquire("b", ""));
    queued(&mut log, T0 + 1_000, acquire_wait("c", "", 100));
    log.ok(T0 + 1_099, free("p1", "a"));
    assert_eq!(log.view("p1").expect("p1").owner, "c");
    assert_eq!(
        log.state.pool_claims_expired(T0 + 1_099),
        Vec::<String>::new()
    );
    // The reaper's rule is the same one: due at the deadline, not after.
    let d = queued(&mut log, T0 + 2_000, acquire_wait("d", "", 100));
    assert_eq!(
        log.state.pool_claims_expired(T0 + 2_100),
        [claim_name(d.seq)]
    );
}

#[test]
fn ended_claims_hold_no_place_against_pool_waiters_max() {
    let mut log = Log::new();
    log.ok(T0 + 10, acquire("a", ""));
    log.ok(T0 + 10, acquire("b", ""));
    for i in 0..POOL_WAITERS_MAX {
        queued(
            &mut log,
            T0 + 1_000,
            acquire_wait(&format!("w{i}"), "", 100),
        );
    }
    // At the limit while they wait: refused, naming it.
    match log.refused(T0 + 1_099, acquire_wait("late", "", 60_000)) {
        Rejection::TooLarge { field, rule } => {
            assert_eq!(field, "wait_ms");
            assert!(rule.contains("POOL_WAITERS_MAX"), "{rule}");
        }
        other => panic!("{other:?}"),
    }
    // Once their waits ended they are gone, and the newcomer is first in line.
    let first = queued(&mut log, T0 + 1_100, acquire_wait("late", "", 60_000));
    let pools = log.state.pools();
    assert_eq!(pools.claims_len("gce", "free"), 1);
    assert_eq!(
        pools.first_claim("gce", "free"),
        Some(claim_name(first.seq).as_str())
    );
    match log.run(T0 + 1_200, free("p1", "a")) {
        Response::Objects(ObjectReply::Object { .. })
        | Response::Objects(ObjectReply::Txn { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(log.view("p1").expect("p1").owner, "late");
}
