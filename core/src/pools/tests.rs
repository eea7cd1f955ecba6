//! Pools through `apply_effects`: every transition allowed and refused, oldest-updated first,
//! idempotent request ids, the reaper's reset with its grace, sync from a config; and a
//! model-based property: whatever the sequence, the kept index equals one rebuilt from the
//! objects, no resource has two owners, no claim is granted once its wait has ended, and none
//! whose wait has ended survives an applied command (steps often jump to a claim's deadline).

use crate::command::ObjectReply;
use crate::command::{ObjectCommand, PoolCommand};
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::command::{Command, Response};
use crate::objects::count::CountBy;
use crate::objects::resource::{ObjectKey, DEFAULT_NAMESPACE};
use crate::objects::selector::Selector;
use crate::rejection::Rejection;
use crate::{apply_blank, apply_effects, ApplyContext, Effects, State};

pub(super) const T0: u64 = 1_795_341_600_000;
const GRACE: u64 = 1_000;

pub(super) struct Log {
    pub(super) state: State,
    pub(super) effects: Effects,
    index: u64,
    term: u64,
}

impl Log {
    /// A log whose term's clock started at T0 and whose grace has passed by T0 + GRACE.
    pub(super) fn new() -> Log {
        let mut log = Log {
            state: State::new(),
            effects: Effects::default(),
            index: 0,
            term: 1,
        };
        log.run(
            T0,
            sync(&[
                ("p1", "gce", "free"),
                ("p2", "gce", "free"),
                ("p3", "gce", "dirty"),
            ]),
        );
        log
    }

    pub(super) fn run(&mut self, time_ms: u64, action: PoolAction) -> Response {
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: self.term,
            time_ms,
            stamped: true,
            wall_ms: None,
        };
        let cmd = Command::Pools(PoolCommand {
            action,
            grace_ms: GRACE,
        });
        apply_effects(&mut self.state, &ctx, &cmd, &mut self.effects)
    }

    pub(super) fn ok(&mut self, time_ms: u64, action: PoolAction) -> Vec<PoolView> {
        match self.run(time_ms, action.clone()) {
            Response::Objects(ObjectReply::Object { object, .. }) => {
                vec![PoolView::of(&object).expect("view")]
            }
            // Pool resources only (a cancel or an expiry answers the claims it removed).
            Response::Objects(ObjectReply::Txn { objects, .. }) => {
                objects.iter().filter_map(PoolView::of).collect()
            }
            other => panic!("{action:?}: {other:?}"),
        }
    }

    pub(super) fn refused(&mut self, time_ms: u64, action: PoolAction) -> Rejection {
        let before = self.state.clone();
        match self.run(time_ms, action.clone()) {
            Response::Rejected(r) => {
                assert_eq!(self.state.with_clock_of(&before), before, "{action:?}");
                r
            }
            other => panic!("{action:?}: expected a refusal, got {other:?}"),
        }
    }

    pub(super) fn view(&self, name: &str) -> Option<PoolView> {
        self.state
            .get(&ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, name))
            .and_then(PoolView::of)
    }

    fn new_term(&mut self) {
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
}

pub(super) fn sync(entries: &[(&str, &str, &str)]) -> PoolAction {
    PoolAction::Sync {
        entries: entries
            .iter()
            .map(|(n, t, s)| PoolEntry {
                name: n.to_string(),
                rtype: t.to_string(),
                state: s.to_string(),
            })
            .collect(),
        expiry_ms: [("gce".to_string(), [("busy".to_string(), 10_000)].into())].into(),
        dynamic: Vec::new(),
    }
}

pub(super) fn acquire(owner: &str, request_id: &str) -> PoolAction {
    acquire_wait(owner, request_id, 0)
}

pub(super) fn acquire_wait(owner: &str, request_id: &str, wait_ms: u64) -> PoolAction {
    PoolAction::Acquire {
        rtype: "gce".into(),
        state: "free".into(),
        dest: "busy".into(),
        owner: owner.into(),
        request_id: request_id.into(),
        wait_ms,
    }
}

/// Runs an acquire that must queue; returns its claim.
pub(super) fn queued(log: &mut Log, time_ms: u64, action: PoolAction) -> ClaimView {
    match log.run(time_ms, action.clone()) {
        Response::Objects(ObjectReply::Object { object, .. }) => {
            ClaimView::of(&object).expect("a claim")
        }
        other => panic!("{action:?}: expected a claim, got {other:?}"),
    }
}

fn release(name: &str, owner: &str) -> PoolAction {
    PoolAction::Release {
        name: name.into(),
        owner: owner.into(),
        dest: "dirty".into(),
    }
}

fn heartbeat(name: &str, owner: &str, data: &[(&str, &str)]) -> PoolAction {
    PoolAction::Update {
        name: name.into(),
        owner: owner.into(),
        state: "busy".into(),
        user_data: data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[test]
fn acquire_takes_the_oldest_free_one_and_answers_not_found_when_none_is_left() {
    let mut log = Log::new();
    // p1 and p2 were added at T0; touching p1 makes p2 the oldest.
    log.ok(T0 + 10, acquire("job-a", ""));
    assert_eq!(log.view("p1").expect("p1").owner, "job-a");
    log.ok(T0 + 20, release("p1", "job-a"));
    // p1 was released dirty; p2 is the only free one.
    let got = log.ok(T0 + 30, acquire("job-b", ""));
    assert_eq!(
        (got[0].state.as_str(), got[0].owner.as_str()),
        ("busy", "job-b")
    );
    assert_eq!(log.view("p2").expect("p2").owner, "job-b");
    assert_eq!(got[0].last_update_ms, T0 + 30);
    match log.refused(T0 + 40, acquire("job-c", "")) {
        Rejection::PoolEmpty { rtype, state } => {
            assert_eq!((rtype.as_str(), state.as_str()), ("gce", "free"))
        }
        other => panic!("{other:?}"),
    }
    // The labels carry type, state and owner, so counts come from the kept counters.
    let by_state = log
        .state
        .count(
            POOL_KIND,
            None,
            &Selector::everything(),
            &CountBy::Label("state".into()),
        )
        .expect("count");
    assert_eq!(
        by_state.buckets,
        [("busy".to_string(), 1), ("dirty".into(), 2)].into()
    );
    let by_owner = log
        .state
        .count(
            POOL_KIND,
            None,
            &Selector::everything(),
            &CountBy::Label("owner".into()),
        )
        .expect("count");
    assert_eq!((by_owner.buckets.len(), by_owner.missing), (1, 2));
}

#[test]
fn a_repeated_request_id_answers_the_same_lease() {
    let mut log = Log::new();
    let first = log.ok(T0 + 10, acquire("job-a", "req-1"));
    let revision = log.state.revision();
    let again = log.ok(T0 + 20, acquire("job-a", "req-1"));
    assert_eq!(first, again);
    assert_eq!(log.state.revision(), revision, "nothing changed");
    // Another owner's same id is another request.
    let other = log.ok(T0 + 30, acquire("job-b", "req-1"));
    assert_ne!(log.view("p1"), None);
    assert_eq!(other[0].owner, "job-b");
    // Released, the id is forgotten: a new acquire with it takes a new lease.
    let name = ["p1", "p2"]
        .into_iter()
        .find(|n| log.view(n).expect("view").owner == "job-a")
        .expect("job-a's lease");
    log.ok(T0 + 40, release(name, "job-a"));
    assert!(matches!(
        log.refused(T0 + 50, acquire("job-a", "req-1")),
        Rejection::PoolEmpty { .. }
    ));
}

#[test]
fn updates_and_releases_need_the_owner_and_the_current_state() {
    let mut log = Log::new();
    log.ok(T0 + 10, acquire("job-a", ""));
    assert!(matches!(
        log.refused(T0 + 20, heartbeat("p1", "job-b", &[])),
        Rejection::PoolNotOwner { .. }
    ));
    let wrong_state = PoolAction::Update {
        name: "p1".into(),
        owner: "job-a".into(),
        state: "free".into(),
        user_data: BTreeMap::new(),
    };
    assert!(matches!(
        log.refused(T0 + 20, wrong_state),
        Rejection::PoolState { .. }
    ));
    let v = log.ok(
        T0 + 30,
        heartbeat("p1", "job-a", &[("project", "x"), ("zone", "a")]),
    );
    assert_eq!(v[0].last_update_ms, T0 + 30);
    let v = log.ok(
        T0 + 40,
        heartbeat("p1", "job-a", &[("zone", ""), ("k", "v")]),
    );
    assert_eq!(
        v[0].user_data,
        [
            ("k".to_string(), "v".to_string()),
            ("project".into(), "x".into())
        ]
        .into()
    );
    assert!(matches!(
        log.refused(T0 + 50, release("p1", "job-b")),
        Rejection::PoolNotOwner { .. }
    ));
    assert!(matches!(
        log.refused(T0 + 50, release("nope", "job-a")),
        Rejection::NotFound { .. }
    ));
    let v = log.ok(T0 + 60, release("p1", "job-a"));
    assert_eq!((v[0].state.as_str(), v[0].owner.as_str()), ("dirty", ""));
    assert!(matches!(
        log.refused(T0 + 70, release("p1", "job-a")),
        Rejection::PoolNotOwner { .. }
    ));
    // Bad words name their field.
    match log.refused(T0 + 80, acquire("Bad Owner", "")) {
        Rejection::Invalid { field, .. } => assert_eq!(field, "owner"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn acquire_by_state_takes_all_or_none() {
    let mut log = Log::new();
    let by_state = |names: &[&str]| PoolAction::AcquireByState {
        state: "free".into(),
        dest: "busy".into(),
        owner: "mason".into(),
        names: names.iter().map(|n| n.to_string()).collect(),
    };
    // p3 is dirty: nothing is taken.
    assert!(matches!(
        log.refused(T0 + 10, by_state(&["p1", "p3"])),
        Rejection::PoolState { .. }
    ));
    assert!(matches!(
        log.refused(T0 + 10, by_state(&["p1", "p1"])),
        Rejection::Invalid { .. }
    ));
    let got = log.ok(T0 + 20, by_state(&["p1", "p2"]));
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|v| v.owner == "mason" && v.state == "busy"));
}

#[test]
fn the_reaper_resets_only_expired_leases_and_nothing_in_the_grace() {
    let mut log = Log::new();
    log.ok(T0 + 2_000, acquire("job-a", ""));
    log.ok(T0 + 2_000, acquire("job-b", ""));
    // job-b heartbeats; job-a does not.
    log.ok(T0 + 9_000, heartbeat("p2", "job-b", &[]));
    assert_eq!(log.state.pools_expired(T0 + 12_001), vec!["p1".to_string()]);
    let reset = |names: &[&str]| PoolAction::Reset {
        names: names.iter().map(|n| n.to_string()).collect(),
        dest: "dirty".into(),
    };
    // A reset naming both (say, a leader's stale view) resets only the expired one.
    let got = log.ok(T0 + 12_001, reset(&["p1", "p2"]));
    assert_eq!(got.len(), 1);
    assert_eq!(log.view("p1").expect("p1").owner, "");
    assert_eq!(log.view("p1").expect("p1").state, "dirty");
    assert_eq!(log.view("p2").expect("p2").owner, "job-b");
    // After a leader change, nothing is reset until the grace has passed.
    log.new_term();
    let t = T0 + 30_000;
    assert!(
        log.ok(t, reset(&["p2"])).is_empty(),
        "first entry of the term"
    );
    assert!(
        log.ok(t + GRACE - 1, reset(&["p2"])).is_empty(),
        "within the grace"
    );
    assert_eq!(log.ok(t + GRACE, reset(&["p2"])).len(), 1);
    assert!(log.state.pools_expired(t + 100_000).is_empty());
}

#[test]
fn sync_adds_removes_and_defers_removing_leased_resources() {
    let mut log = Log::new();
    log.ok(T0 + 10, acquire("job-a", ""));
    // The config drops p1 (leased) and p3 (unowned) and adds p4.
    log.ok(
        T0 + 20,
        sync(&[("p2", "gce", "free"), ("p4", "gke", "dirty")]),
    );
    assert!(log.view("p3").is_none());
    assert!(log.view("p1").expect("p1").to_be_deleted);
    assert_eq!(log.view("p4").expect("p4").state, "dirty");
    assert_eq!(log.view("p4").expect("p4").rtype, "gke");
    // Releasing p1 removes it.
    log.ok(T0 + 30, release("p1", "job-a"));
    assert!(log.view("p1").is_none());
    // The same config again changes nothing.
    let revision = log.state.revision();
    assert!(log
        .ok(
            T0 + 40,
            sync(&[("p2", "gce", "free"), ("p4", "gke", "dirty")])
        )
        .is_empty());
    assert_eq!(log.state.revision(), revision);
    // Resource writes to the kind are refused.
    let object = log
        .state
        .get(&ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, "p2"))
        .cloned()
        .expect("p2");
    log.index += 1;
    let ctx = ApplyContext {
        log_index: log.index,
        term: log.term,
        time_ms: T0 + 50,
        stamped: true,
        wall_ms: None,
    };
    let cmd = Command::Objects(ObjectCommand::UpdateStatus {
        object,
        expected_revision: None,
        fence: None,
    });
    assert!(matches!(
        apply_effects(&mut log.state, &ctx, &cmd, &mut log.effects),
        Response::Rejected(Rejection::Invalid { .. })
    ));
}

#[test]
fn waiting_acquires_are_served_in_arrival_order_as_resources_free_up() {
    let mut log = Log::new();
    log.ok(T0 + 10, acquire("a", ""));
    log.ok(T0 + 10, acquire("b", ""));
    let c = queued(&mut log, T0 + 20, acquire_wait("c", "", 60_000));
    let d = queued(&mut log, T0 + 30, acquire_wait("d", "req-d", 60_000));
    assert!(c.seq < d.seq);
    assert_eq!(c.request_id, claim_name(c.seq));
    // A repeated request id while waiting answers the same claim.
    assert_eq!(
        queued(&mut log, T0 + 35, acquire_wait("d", "req-d", 60_000)),
        d
    );
    // Nobody jumps the queue, waiting or not.
    assert!(matches!(
        log.refused(T0 + 40, acquire("e", "")),
        Rejection::PoolEmpty { .. }
    ));
    // a's release serves c, in the same step; b's serves d.
    let before = log.effects.pool_events.len();
    log.ok(
        T0 + 50,
        PoolAction::Release {
            name: "p1".into(),
            owner: "a".into(),
            dest: "free".into(),
        },
    );
    assert_eq!(
        log.effects.pool_events[before..],
        [PoolEvent::Claim {
            claim: claim_name(c.seq),
            resource: Some("p1".into())
        }]
    );
    let p1 = log.view("p1").expect("p1");
    assert_eq!(
        (p1.owner.as_str(), p1.state.as_str(), p1.request_id.as_str()),
        ("c", "busy", c.request_id.as_str())
    );
    log.ok(
        T0 + 60,
        PoolAction::Release {
            name: "p2".into(),
            owner: "b".into(),
            dest: "free".into(),
        },
    );
    assert_eq!(log.view("p2").expect("p2").owner, "d");
    assert_eq!(log.state.pools().claims_len("gce", "free"), 0);
    // The claims are gone from the store.
    let claims = log
        .state
        .list(POOL_CLAIM_KIND, None, &Selector::everything(), None, 0);
    assert!(claims.items.is_empty());
    // A release to another state serves nobody waiting for free.
    let e = queued(&mut log, T0 + 70, acquire_wait("e", "", 60_000));
    log.ok(T0 + 80, release("p1", "c"));
    assert_eq!(log.view("p1").expect("p1").state, "dirty");
    assert_eq!(
        log.state.pools().first_claim("gce", "free"),
        Some(claim_name(e.seq).as_str())
    );
    // A sync adding a free resource serves e.
    log.ok(
        T0 + 90,
        sync(&[
            ("p1", "gce", "free"),
            ("p2", "gce", "free"),
            ("p3", "gce", "dirty"),
            ("p9", "gce", "free"),
        ]),
    );
    assert_eq!(log.view("p9").expect("p9").owner, "e");
}

#[test]
fn waits_end_at_their_deadline_or_when_cancelled_and_a_late_grant_is_kept_or_released() {
    let mut log = Log::new();
    log.ok(T0 + 10, acquire("a", ""));
    log.ok(T0 + 10, acquire("b", ""));
    let c = queued(&mut log, T0 + 20, acquire_wait("c", "", 1_000));
    let expire = |names: Vec<String>| PoolAction::ExpireClaims { claims: names };
    // Not yet past its deadline: kept.
    assert!(log.ok(T0 + 500, expire(vec![claim_name(c.seq)])).is_empty());
    assert_eq!(
        log.state.pool_claims_expired(T0 + 1_021),
        vec![claim_name(c.seq)]
    );
    let before = log.effects.pool_events.len();
    match log.run(T0 + 1_021, expire(vec![claim_name(c.seq)])) {
        Response::Objects(ObjectReply::Txn { objects, .. }) => assert_eq!(objects.len(), 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        log.effects.pool_events[before..],
        [PoolEvent::Claim {
            claim: claim_name(c.seq),
            resource: None
        }]
    );
    // A claim past its deadline is dropped, not served, when a resource frees up.
    let d = queued(&mut log, T0 + 2_000, acquire_wait("d", "", 100));
    queued(&mut log, T0 + 2_000, acquire_wait("e", "", 60_000));
    log.ok(
        T0 + 3_000,
        PoolAction::Release {
            name: "p1".into(),
            owner: "a".into(),
            dest: "free".into(),
        },
    );
    assert_eq!(log.view("p1").expect("p1").owner, "e");
    assert!(log
        .state
        .pools()
        .claim_by_request("d", &d.request_id)
        .is_none());
    // Cancelling a waiting claim removes it; only its owner may.
    let f = queued(&mut log, T0 + 4_000, acquire_wait("f", "", 60_000));
    let cancel = |owner: &str, claim: &ClaimView, release: bool| PoolAction::CancelWait {
        claim: claim_name(claim.seq),
        owner: owner.into(),
        request_id: claim.request_id.clone(),
        state: "free".into(),
        release,
    };
    assert!(matches!(
        log.refused(T0 + 4_100, cancel("x", &f, false)),
        Rejection::PoolNotOwner { .. }
    ));
    assert_eq!(
        log.ok(T0 + 4_100, cancel("f", &f, false)).len(),
        0,
        "the claim is no pool resource"
    );
    assert_eq!(log.state.pools().claims_len("gce", "free"), 0);
    // Granted just before the cancel: kept (the waiter answers it) or released (nobody left).
    let g = queued(&mut log, T0 + 5_000, acquire_wait("g", "", 60_000));
    log.ok(
        T0 + 5_100,
        PoolAction::Release {
            name: "p2".into(),
            owner: "b".into(),
            dest: "free".into(),
        },
    );
    assert_eq!(log.ok(T0 + 5_200, cancel("g", &g, false))[0].owner, "g");
    log.ok(
        T0 + 5_300,
        PoolAction::Release {
            name: "p2".into(),
            owner: "g".into(),
            dest: "busy".into(),
        },
    );
    log.ok(
        T0 + 5_400,
        PoolAction::Release {
            name: "p1".into(),
            owner: "e".into(),
            dest: "busy".into(),
        },
    );
    let h = queued(&mut log, T0 + 6_000, acquire_wait("h", "", 60_000));
    log.ok(
        T0 + 6_100,
        sync(&[
            ("p1", "gce", "free"),
            ("p2", "gce", "free"),
            ("p3", "gce", "dirty"),
            ("p8", "gce", "free"),
        ]),
    );
    assert_eq!(log.view("p8").expect("p8").owner, "h");
    let released = log.ok(T0 + 6_200, cancel("h", &h, true));
    assert_eq!(
        (released[0].owner.as_str(), released[0].state.as_str()),
        ("", "free")
    );
}

#[derive(Clone, Debug)]
enum Step {
    Acquire(usize, bool),
    Wait(usize, u64),
    Expire(u64),
    Release(usize, usize),
    Heartbeat(usize, usize),
    Reset(usize),
    Sync(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..3, any::<bool>()).prop_map(|(o, r)| Step::Acquire(o, r)),
        (0usize..3, 1u64..20_000).prop_map(|(o, w)| Step::Wait(o, w)),
        (0u64..60).prop_map(Step::Expire),
        (0usize..5, 0usize..3).prop_map(|(n, o)| Step::Release(n, o)),
        (0usize..5, 0usize..3).prop_map(|(n, o)| Step::Heartbeat(n, o)),
        (0usize..5).prop_map(Step::Reset),
        any::<u8>().prop_map(Step::Sync),
    ]
}

const OWNERS: [&str; 3] = ["a", "b", "c"];
const NAMES: [&str; 5] = ["p1", "p2", "p3", "p4", "p5"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_index_always_matches_the_objects(
        steps in prop::collection::vec((1u64..5_000, prop::bool::weighted(0.3), step()), 1..60)
    ) {
        let mut log = Log::new();
        let mut now = T0;
        // Claim name -> deadline of each claim queued and not yet granted or removed.
        let mut open: BTreeMap<String, u64> = BTreeMap::new();
        for (dt, to_deadline, s) in steps {
            // Either a little later, or exactly the next deadline of an open claim.
            let next_deadline = open.values().copied().filter(|&d| d > now).min();
            now = match (to_deadline, next_deadline) {
                (true, Some(deadline)) => deadline,
                _ => now + dt,
            };
            let action = match s {
                Step::Acquire(o, r) => acquire(OWNERS[o], if r { "r" } else { "" }),
                Step::Wait(o, w) => acquire_wait(OWNERS[o], "", w),
                Step::Expire(seq) => PoolAction::ExpireClaims { claims: vec![claim_name(seq)] },
                Step::Release(n, o) => release(NAMES[n], OWNERS[o]),
                Step::Heartbeat(n, o) => heartbeat(NAMES[n], OWNERS[o], &[]),
                Step::Reset(n) => PoolAction::Reset { names: vec![NAMES[n].to_string()], dest: "free".into() },
                Step::Sync(mask) => {
                    let entries: Vec<(&str, &str, &str)> = NAMES
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << i) != 0)
                        .map(|(_, n)| (*n, "gce", "free"))
                        .collect();
                    sync(&entries)
                }
            };
            let before = log.state.clone();
            let events_before = log.effects.pool_events.len();
            match log.run(now, action) {
                Response::Rejected(_) => {
                    prop_assert_eq!(log.state.with_clock_of(&before), before);
                }
                response => {
                    let time = log.state.time_ms();
                    let ended = log.state.pool_claims_expired(time);
                    prop_assert!(ended.is_empty(), "claims {ended:?} outlived their wait");
                    if let Response::Objects(ObjectReply::Object { object, .. }) = &response {
                        if let Some(claim) = ClaimView::of(object) {
                            open.insert(claim_name(claim.seq), claim.deadline_ms);
                        }
                    }
                }
            }
            for event in &log.effects.pool_events[events_before..] {
                let PoolEvent::Claim { claim, resource } = event else { continue };
                let deadline = open.remove(claim);
                prop_assert!(deadline.is_some(), "claim {claim} ended twice or never was");
                if resource.is_some() {
                    let time = log.state.time_ms();
                    prop_assert!(
                        deadline.is_some_and(|d| d > time),
                        "claim {claim} granted at {time}, its wait had ended at {deadline:?}"
                    );
                }
            }
            // The kept index equals the one a restore rebuilds from the objects.
            let restored = State::from_snapshot_bytes(&log.state.to_snapshot_bytes()).expect("restore");
            prop_assert_eq!(restored.pools(), log.state.pools());
            // Nobody waits while something is free for them.
            if log.state.pools().claims_len("gce", "free") > 0 {
                prop_assert_eq!(log.state.pools().oldest_free("gce", "free"), None);
            }
            // The oldest free one is what a scan finds.
            let oldest = NAMES
                .iter()
                .filter_map(|n| log.view(n).map(|v| (v, *n)))
                .filter(|(v, _)| v.owner.is_empty() && v.state == "free" && v.rtype == "gce")
                .map(|(v, n)| (v.last_update_ms, n.to_string()))
                .min();
            prop_assert_eq!(
                log.state.pools().oldest_free("gce", "free").map(str::to_string),
                oldest.map(|(_, n)| n)
            );
        }
    }
}
