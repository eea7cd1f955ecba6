//! Dynamic pools through `apply_effects`: kept at their min, grown for waiters up to their max
//! (each new resource granted in the step that creates it), shrunk to a lowered max as leases
//! end, resources deleted after their lifespan and replaced, virtual dynamic types built by
//! Mason for a waiter; every refusal.

use crate::command::ObjectReply;
use std::collections::BTreeMap;

use super::mason_tests::{built, release, summary, vcluster, Log};
use super::*;
use crate::command::Response;
use crate::rejection::Rejection;
use crate::State;

fn dynamic(rtype: &str, state: &str, min: u32, max: u32, lifespan_ms: u64) -> DynamicPool {
    DynamicPool {
        rtype: rtype.into(),
        state: state.into(),
        min_count: min,
        max_count: max,
        lifespan_ms,
        expiry_ms: BTreeMap::new(),
    }
}

fn sync(statics: &[(&str, &str, &str)], pools: Vec<DynamicPool>) -> PoolAction {
    PoolAction::Sync {
        entries: statics
            .iter()
            .map(|(n, t, s)| PoolEntry {
                name: n.to_string(),
                rtype: t.to_string(),
                state: s.to_string(),
            })
            .collect(),
        expiry_ms: BTreeMap::new(),
        dynamic: pools,
    }
}

fn acquire_wait(rtype: &str, owner: &str) -> PoolAction {
    PoolAction::Acquire {
        rtype: rtype.into(),
        state: "free".into(),
        dest: "busy".into(),
        owner: owner.into(),
        request_id: String::new(),
        wait_ms: 60_000,
    }
}

/// The resources of `rtype`, by name: (state, owner).
fn of_type(log: &Log, rtype: &str) -> BTreeMap<String, (String, String)> {
    log.state
        .pools()
        .of_type(rtype)
        .into_iter()
        .map(|n| {
            let v = log.view(&n);
            (n, (v.state, v.owner))
        })
        .collect()
}

fn owners(log: &Log, rtype: &str) -> Vec<String> {
    let mut o: Vec<String> = of_type(log, rtype)
        .into_values()
        .map(|(_, owner)| owner)
        .collect();
    o.sort();
    o
}

#[test]
fn a_dynamic_pool_keeps_its_min_and_grows_for_waiters_up_to_its_max() {
    let mut log = Log::empty();
    log.ok(sync(&[], vec![dynamic("vm", "free", 1, 3, 0)]));
    let vms = of_type(&log, "vm");
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert!(log.exists(DYNAMIC_KIND, "vm"));
    log.ok(acquire_wait("vm", "alice"));
    // Nothing free: a waiter makes the pool grow by one, granted in the same step.
    for who in ["bob", "carol"] {
        log.run(acquire_wait("vm", who));
    }
    assert_eq!(owners(&log, "vm"), ["alice", "bob", "carol"]);
    // At the max: dave waits, and gets alice's when she releases it.
    log.run(acquire_wait("vm", "dave"));
    assert_eq!(log.state.pools().type_len("vm"), 3);
    assert_eq!(log.state.pools().claims_len("vm", "free"), 1);
    let alices = of_type(&log, "vm")
        .into_iter()
        .find(|(_, (_, o))| o == "alice")
        .map(|(n, _)| n)
        .expect("alice's");
    log.ok(release(&alices, "alice", "free"));
    assert_eq!(owners(&log, "vm"), ["bob", "carol", "dave"]);
    // The max drops to 1: nothing is taken from its holders; each released one goes until 1 is left.
    log.ok(sync(&[], vec![dynamic("vm", "free", 0, 1, 0)]));
    assert_eq!(log.state.pools().type_len("vm"), 3);
    for who in ["bob", "carol"] {
        let name = of_type(&log, "vm")
            .into_iter()
            .find(|(_, (_, o))| o == who)
            .map(|(n, _)| n)
            .expect("held");
        log.ok(release(&name, who, "free"));
    }
    assert_eq!(owners(&log, "vm"), ["dave"]);
    // No longer dynamic: its unowned resources go like any unlisted one; dave's on release.
    log.ok(sync(&[], vec![]));
    assert!(!log.exists(DYNAMIC_KIND, "vm"));
    assert_eq!(owners(&log, "vm"), ["dave"]);
}

#[test]
fn resources_past_their_lifespan_are_deleted_and_replaced_once_unowned() {
    let mut log = Log::empty();
    log.ok(sync(&[], vec![dynamic("vm", "free", 1, 2, 1_000)]));
    let first: Vec<String> = of_type(&log, "vm").into_keys().collect();
    let end = log.view(&first[0]).delete_after_ms;
    assert_eq!(end, log.now + 1_000, "created by the last entry");
    assert!(!log.state.pools_reconcile_due(end - 1));
    assert!(log.state.pools_reconcile_due(end));
    // Leased, it outlives its lifespan until it is released.
    log.ok(acquire_wait("vm", "alice"));
    log.now = end + 100;
    assert!(!log.state.pools_reconcile_due(log.now));
    log.ok(PoolAction::Reconcile);
    assert_eq!(of_type(&log, "vm").len(), 1);
    log.ok(release(&first[0], "alice", "free"));
    let now: Vec<String> = of_type(&log, "vm").into_keys().collect();
    assert_eq!(now.len(), 1, "replaced to keep the min");
    assert_ne!(now, first);
    // Unowned at the end of its lifespan: the reaper's Reconcile deletes and replaces it.
    log.now = log.view(&now[0]).delete_after_ms;
    assert!(log.state.pools_reconcile_due(log.now + 10));
    log.ok(PoolAction::Reconcile);
    let later: Vec<String> = of_type(&log, "vm").into_keys().collect();
    assert_eq!(later.len(), 1);
    assert_ne!(later, now);
    // A new lifespan applies to the resources already there, counted from their creation.
    let created = log.view(&later[0]).created_ms;
    log.ok(sync(&[], vec![dynamic("vm", "free", 1, 2, 5_000)]));
    assert_eq!(log.view(&later[0]).delete_after_ms, created + 5_000);
    log.ok(sync(&[], vec![dynamic("vm", "free", 1, 2, 0)]));
    assert_eq!(log.view(&later[0]).delete_after_ms, 0);
}

#[test]
fn a_virtual_dynamic_type_is_built_for_its_waiter() {
    let mut log = Log::empty();
    let mut config = vcluster();
    config.needs = BTreeMap::from([("project".into(), 1)]);
    log.ok(PoolAction::SyncVirtual {
        configs: vec![config],
    });
    log.ok(sync(
        &[("p1", "project", "free"), ("p2", "project", "free")],
        vec![dynamic("vcluster", "dirty", 1, 2, 0)],
    ));
    // The min's one is created dirty, recycled and fulfilled in the same step.
    let first: Vec<String> = of_type(&log, "vcluster").into_keys().collect();
    assert_eq!(first.len(), 1);
    assert_eq!(log.view(&first[0]).state, CONSTRUCTING);
    let ops = log.mason();
    log.work(ops[0], built());
    log.mason();
    log.ok(acquire_wait("vcluster", "alice"));
    // Bob waits: a second is created, built from p2, and granted to him when it is free.
    let claim = match log.run(acquire_wait("vcluster", "bob")) {
        Response::Objects(ObjectReply::Object { object, .. }) => {
            ClaimView::of(&object).expect("a claim")
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(log.state.pools().type_len("vcluster"), 2);
    let ops = log.mason();
    assert_eq!(ops.len(), 1);
    log.work(ops[0], built());
    log.mason();
    assert!(log.effects.pool_events.iter().any(|e| matches!(e,
        PoolEvent::Claim { claim: c, resource: Some(_) } if *c == claim_name(claim.seq))));
    assert_eq!(owners(&log, "vcluster"), ["alice", "bob"]);
    let bobs = of_type(&log, "vcluster")
        .into_iter()
        .find(|(_, (_, o))| o == "bob")
        .map(|(n, _)| n)
        .expect("bob's");
    assert_eq!(summary(&log.view("p2")), ("busy", "bob", bobs.as_str()));
    // At the max, carol waits without a third.
    log.run(acquire_wait("vcluster", "carol"));
    assert_eq!(log.state.pools().type_len("vcluster"), 2);
}

#[test]
fn dynamic_pools_are_checked() {
    let mut log = Log::empty();
    let cases = [
        sync(
            &[("vm-1", "vm", "free")],
            vec![dynamic("vm", "free", 0, 1, 0)],
        ),
        sync(&[], vec![dynamic("vm", "free", 2, 1, 0)]),
        sync(&[], vec![dynamic("vm", "free", 0, 0, 0)]),
        sync(&[], vec![dynamic("VM_Big", "free", 0, 1, 0)]),
        sync(
            &[],
            vec![
                dynamic("vm", "free", 0, 1, 0),
                dynamic("vm", "dirty", 0, 1, 0),
            ],
        ),
    ];
    for action in cases {
        assert!(
            matches!(log.refused(action.clone()), Rejection::Invalid { .. }),
            "{action:?}"
        );
    }
    log.ok(sync(
        &[],
        vec![dynamic("vm", "free", 0, DYNAMIC_COUNT_MAX, 0)],
    ));
    let over = sync(
        &[],
        vec![dynamic("vm", "free", 0, DYNAMIC_COUNT_MAX + 1, 0)],
    );
    assert!(matches!(log.refused(over), Rejection::TooLarge { .. }));
}

#[derive(Clone, Debug)]
enum Step {
    Wait(usize),
    Release(usize),
    Config(u32, u32, bool),
    Later(u64),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        (0usize..4).prop_map(Step::Wait),
        (0usize..4).prop_map(Step::Release),
        (0u32..3, 1u32..4, any::<bool>()).prop_map(|(min, max, l)| Step::Config(min, max, l)),
        (1u64..3_000).prop_map(Step::Later),
    ]
}

const OWNERS: [&str; 4] = ["a", "b", "c", "d"];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 96, failure_persistence: None, ..Default::default() })]

    /// Whatever the sequence: at least the min; never grown past the max, and more than it
    /// only while the extra ones are held (after the max was lowered); nobody waits while the pool could grow; the index equals a rebuilt one.
    #[test]
    fn a_dynamic_pool_stays_within_its_bounds(steps in proptest::collection::vec(step(), 1..40)) {
        let mut log = Log::empty();
        let mut pool = dynamic("vm", "free", 1, 2, 0);
        log.ok(sync(&[], vec![pool.clone()]));
        for s in steps {
            let before = log.state.pools().type_len("vm");
            match s {
                Step::Wait(o) => {
                    log.run(acquire_wait("vm", OWNERS[o]));
                }
                Step::Release(o) => {
                    let held: Vec<String> = of_type(&log, "vm")
                        .into_iter()
                        .filter(|(_, (_, owner))| owner == OWNERS[o])
                        .map(|(n, _)| n)
                        .collect();
                    if let Some(name) = held.first() {
                        log.ok(release(name, OWNERS[o], "free"));
                    }
                }
                Step::Config(min, extra, lifespan) => {
                    pool = dynamic("vm", "free", min, min + extra, if lifespan { 2_000 } else { 0 });
                    log.ok(sync(&[], vec![pool.clone()]));
                }
                Step::Later(ms) => {
                    log.now += ms;
                    log.ok(PoolAction::Reconcile);
                }
            }
            let all = of_type(&log, "vm");
            let held = all.values().filter(|(_, o)| !o.is_empty()).count();
            let max = usize::try_from(pool.max_count).unwrap_or(usize::MAX);
            let min = usize::try_from(pool.min_count).unwrap_or(0);
            proptest::prop_assert!(all.len() >= min, "{all:?} under the min {min}");
            // Over the max only after the max was lowered, never by growing, and all held.
            proptest::prop_assert!(all.len() <= max.max(before), "{all:?} grew past the max {max}");
            proptest::prop_assert!(all.len() <= max.max(held), "{all:?} over the max {max}");
            if log.state.pools().claims_len("vm", "free") > 0 {
                proptest::prop_assert!(all.len() >= max, "a waiter while the pool could grow: {all:?}");
                proptest::prop_assert_eq!(log.state.pools().free_len("vm", "free"), 0);
            }
            let restored = State::from_snapshot_bytes(&log.state.to_snapshot_bytes()).expect("restore");
            proptest::prop_assert_eq!(restored.pools(), log.state.pools());
        }
    }
}

#[test]
fn a_dynamic_pool_does_not_grow_for_a_waiter_whose_wait_ended() {
    let mut log = Log::empty();
    log.ok(sync(&[], vec![dynamic("vm", "free", 0, 1, 0)]));
    log.ok(acquire_wait("vm", "alice"));
    let mut short = acquire_wait("vm", "dave");
    if let PoolAction::Acquire { wait_ms, .. } = &mut short {
        *wait_ms = 100;
    }
    log.run(short);
    assert_eq!(log.state.pools().claims_len("vm", "free"), 1);
    // Dave's wait ends with no reaper entry and no cancel; then the max goes up.
    log.now += 100;
    log.ok(sync(&[], vec![dynamic("vm", "free", 0, 2, 0)]));
    assert_eq!(owners(&log, "vm"), ["alice"], "grown for nobody");
    assert_eq!(log.state.pools().claims_len("vm", "free"), 0);
}
