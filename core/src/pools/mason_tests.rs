//! Virtual resources through `apply_effects`, with the construct operation run as the leader's
//! Mason task and a worker would run it: recycling, fulfilling all needs in one step or waiting,
//! constructing, freeing; a virtual lease moving its leased resources with it; failures giving
//! the needs back dirty; every refusal. And a property: whatever the sequence, the index equals
//! a rebuilt one and every leased resource belongs to exactly one virtual resource that lists it
//! and shares its lease.

use crate::command::{ObjectCommand, OperationCommand, PoolCommand};
use crate::command::{ObjectReply, OperationReply};
use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::command::{Command, Response, WorkerReport};
use crate::locks::LockLimits;
use crate::objects::resource::{ObjectKey, DEFAULT_NAMESPACE};
use crate::operations::{OpLimits, OpLock, OpPolicy, OperationId};
use crate::rejection::Rejection;
use crate::{apply_effects, ApplyContext, Effects, LockMode, State};

const T0: u64 = 1_795_341_600_000;
const LIMITS: OpLimits = OpLimits {
    active_max: 64,
    per_target_max: 3,
    finished_max: 64,
    params_bytes_max: 65_536,
    result_bytes_max: 4_096,
    attempts_max: 5,
    deadline_ms_max: 100_000,
    workers_max: 4,
    handles_max: 4,
    capacity_max: 8,
};
const LOCK_LIMITS: LockLimits = LockLimits {
    holders_max: 4,
    waiters_max: 4,
    locks_max: 256,
    details_bytes_max: 1024,
};

pub(super) struct Log {
    pub(super) state: State,
    pub(super) effects: Effects,
    index: u64,
    pub(super) now: u64,
}

impl Log {
    /// Projects p1-p3, VMs m1 (dirty) and m2 (free), a virtual type `vcluster` needing two
    /// projects and a VM, and virtual resources v1 and v2, dirty; a worker for constructs.
    fn new() -> Log {
        let mut log = Log::empty();
        log.ok(PoolAction::SyncVirtual {
            configs: vec![vcluster()],
        });
        log.ok(sync(&[
            ("p1", "project", "free"),
            ("p2", "project", "free"),
            ("p3", "project", "dirty"),
            ("m1", "vm", "dirty"),
            ("m2", "vm", "free"),
            ("v1", "vcluster", "dirty"),
            ("v2", "vcluster", "dirty"),
        ]));
        log
    }

    /// An empty pool with a worker for constructs.
    pub(super) fn empty() -> Log {
        let mut log = Log {
            state: State::new(),
            effects: Effects::default(),
            index: 0,
            now: T0,
        };
        let register = Command::Operations(OperationCommand::RegisterWorker {
            worker: "builder".into(),
            handles: vec![format!("{CONSTRUCT_KIND}:construct")
                .parse()
                .expect("handle")],
            capacity: 8,
            ttl_ms: 3_600_000,
            limits: LIMITS,
        });
        assert!(!matches!(log.cmd(register), Response::Rejected(_)));
        log
    }

    pub(super) fn cmd(&mut self, cmd: Command) -> Response {
        self.index += 1;
        self.now += 10;
        let ctx = ApplyContext {
            log_index: self.index,
            term: 1,
            time_ms: self.now,
            stamped: true,
            wall_ms: None,
        };
        apply_effects(&mut self.state, &ctx, &cmd, &mut self.effects)
    }

    pub(super) fn run(&mut self, action: PoolAction) -> Response {
        self.cmd(Command::Pools(PoolCommand {
            action,
            grace_ms: 0,
        }))
    }

    pub(super) fn ok(&mut self, action: PoolAction) -> Vec<PoolView> {
        match self.run(action.clone()) {
            Response::Objects(ObjectReply::Object { object, .. }) => {
                PoolView::of(&object).into_iter().collect()
            }
            Response::Objects(ObjectReply::Txn { objects, .. }) => {
                objects.iter().filter_map(PoolView::of).collect()
            }
            other => panic!("{action:?}: {other:?}"),
        }
    }

    pub(super) fn refused(&mut self, action: PoolAction) -> Rejection {
        let before = self.state.clone();
        match self.run(action.clone()) {
            Response::Rejected(r) => {
                assert_eq!(self.state.with_clock_of(&before), before, "{action:?}");
                r
            }
            other => panic!("{action:?}: expected a refusal, got {other:?}"),
        }
    }

    pub(super) fn view(&self, name: &str) -> PoolView {
        self.state
            .get(&ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, name))
            .and_then(PoolView::of)
            .unwrap_or_else(|| panic!("{name} is gone"))
    }

    pub(super) fn exists(&self, kind: &str, name: &str) -> bool {
        self.state
            .get(&ObjectKey::new(kind, DEFAULT_NAMESPACE, name))
            .is_some()
    }

    /// What the leader's Mason task would do now: submit the construct operations due and
    /// propose `Constructed` for the ended ones. Returns the operations it submitted.
    pub(super) fn mason(&mut self) -> Vec<OperationId> {
        let mut submitted = Vec::new();
        for due in self.state.mason_due(self.now) {
            match due {
                MasonDue::Submit { name, key, params } => {
                    let target = ObjectKey::new(CONSTRUCT_KIND, DEFAULT_NAMESPACE, &name);
                    let policy = OpPolicy {
                        lock: Some(OpLock::on_target(&target, LockMode::Write)),
                        max_attempts: 2,
                        deadline_ms: None,
                        deletes_target: false,
                    };
                    let response = self.cmd(Command::Operations(OperationCommand::Submit {
                        target,
                        verb: "construct".into(),
                        params,
                        idempotency_key: Some(key),
                        create: None,
                        policy,
                        limits: LIMITS,
                    }));
                    match response {
                        Response::Operations(OperationReply::Submitted { operation, .. }) => {
                            submitted.push(operation.id)
                        }
                        other => panic!("construct submit: {other:?}"),
                    }
                }
                MasonDue::Ended { name } => {
                    self.ok(PoolAction::Constructed { name });
                }
            }
        }
        submitted
    }

    /// The worker runs operation `id` to the end with `report`.
    pub(super) fn work(&mut self, id: OperationId, report: WorkerReport) {
        let assigned = self.cmd(Command::Operations(OperationCommand::Assign {
            id,
            worker: "builder".into(),
            lock_limits: LOCK_LIMITS,
        }));
        let op = match assigned {
            Response::Operations(OperationReply::Operation { operation })
            | Response::Operations(OperationReply::Submitted { operation, .. }) => operation,
            other => panic!("assign: {other:?}"),
        };
        let reported = self.cmd(Command::Operations(OperationCommand::Report {
            id,
            worker: "builder".into(),
            attempt: op.attempt,
            epoch: op.epoch,
            report,
            limits: LIMITS,
        }));
        assert!(!matches!(reported, Response::Rejected(_)), "{reported:?}");
    }

    /// The janitor cleans `name`: dirty -> free.
    pub(super) fn clean(&mut self, name: &str) {
        self.ok(PoolAction::AcquireByState {
            state: "dirty".into(),
            dest: "cleaning".into(),
            owner: "janitor".into(),
            names: vec![name.into()],
        });
        self.ok(release(name, "janitor", "free"));
    }
}

pub(super) fn vcluster() -> VirtualConfig {
    VirtualConfig {
        name: "vcluster".into(),
        needs: BTreeMap::from([("project".into(), 2), ("vm".into(), 1)]),
        config_type: "GCPResourceConfig".into(),
        content: "projectconfigs: []".into(),
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
        expiry_ms: BTreeMap::new(),
        dynamic: Vec::new(),
    }
}

pub(super) fn release(name: &str, owner: &str, dest: &str) -> PoolAction {
    PoolAction::Release {
        name: name.into(),
        owner: owner.into(),
        dest: dest.into(),
    }
}

pub(super) fn acquire(rtype: &str, owner: &str) -> PoolAction {
    PoolAction::Acquire {
        rtype: rtype.into(),
        state: "free".into(),
        dest: "busy".into(),
        owner: owner.into(),
        request_id: String::new(),
        wait_ms: 0,
    }
}

pub(super) fn built() -> WorkerReport {
    WorkerReport::Succeeded {
        response: json!({"kubeconfig": "apiVersion: v1", "nodes": 3}),
    }
}

pub(super) fn summary(v: &PoolView) -> (&str, &str, &str) {
    (v.state.as_str(), v.owner.as_str(), v.parent.as_str())
}

#[test]
fn a_dirty_virtual_resource_is_built_from_all_its_needs_at_once() {
    let mut log = Log::new();
    // Recycled at once; v1 (first by name, same age) takes the two free projects and m2 in one
    // step; v2 waits for more.
    let v1 = log.view("v1");
    assert_eq!(summary(&v1), (CONSTRUCTING, MASON_OWNER, ""));
    assert_eq!(leased_of(&v1.user_data), ["p1", "p2", "m2"]);
    for child in ["p1", "p2", "m2"] {
        assert_eq!(summary(&log.view(child)), (CONSTRUCTING, MASON_OWNER, "v1"));
    }
    assert_eq!(summary(&log.view("v2")), (FULFILLING, MASON_OWNER, ""));
    assert!(log.exists(CONSTRUCT_KIND, "v1"));
    assert!(log
        .effects
        .pool_events
        .contains(&PoolEvent::Fulfilled { name: "v1".into() }));
    // The leader submits v1's construct once; the work describes what to build from.
    let ops = log.mason();
    assert_eq!(ops.len(), 1);
    assert!(
        log.mason().is_empty(),
        "submitted once, then nothing while it runs"
    );
    let op = log.state.operation(ops[0]).expect("op").clone();
    assert_eq!(
        op.params["leasedResources"],
        json!({"project": ["p1", "p2"], "vm": ["m2"]})
    );
    assert_eq!(op.params["config"]["type"], "GCPResourceConfig");
    // Not constructed while it runs.
    assert!(matches!(
        log.refused(PoolAction::Constructed { name: "v1".into() }),
        Rejection::PoolState { .. }
    ));
    log.work(ops[0], built());
    assert!(log.mason().is_empty(), "Constructed proposed, nothing left");
    let v1 = log.view("v1");
    assert_eq!(summary(&v1), ("free", "", ""));
    assert_eq!(v1.user_data["kubeconfig"], "apiVersion: v1");
    assert_eq!(v1.user_data["nodes"], "3");
    assert_eq!(leased_of(&v1.user_data), ["p1", "p2", "m2"]);
    for child in ["p1", "p2", "m2"] {
        assert_eq!(summary(&log.view(child)), ("v1", "", "v1"));
    }
    assert!(!log.exists(CONSTRUCT_KIND, "v1"));
    // v2 waits: one project (p3) and one VM (m1) are dirty. Cleaning one is not enough; all at once.
    log.clean("p3");
    assert_eq!(summary(&log.view("v2")), (FULFILLING, MASON_OWNER, ""));
    assert_eq!(summary(&log.view("p3")), ("free", "", ""));
    log.clean("m1");
    assert_eq!(summary(&log.view("v2")), (FULFILLING, MASON_OWNER, ""));
    // Needs two projects: p3 alone is free.
    assert_eq!(log.state.pools().free_len("project", "free"), 1);
}

#[test]
fn a_virtual_lease_moves_its_leased_resources_with_it() {
    let mut log = Log::new();
    let ops = log.mason();
    log.work(ops[0], built());
    log.mason();
    // Its leased resources cannot be taken on their own.
    assert!(matches!(
        log.refused(acquire("project", "bob")),
        Rejection::PoolEmpty { .. }
    ));
    let by_state = PoolAction::AcquireByState {
        state: "v1".into(),
        dest: "busy".into(),
        owner: "bob".into(),
        names: vec!["p1".into()],
    };
    assert!(matches!(log.refused(by_state), Rejection::PoolState { .. }));
    // Acquiring v1 leases them too, in the same step, and answers them after it.
    let got = log.ok(acquire("vcluster", "alice"));
    let names: Vec<(&str, &str, &str)> = got.iter().map(summary).collect();
    assert_eq!(
        names,
        [
            ("busy", "alice", ""),
            ("busy", "alice", "v1"),
            ("busy", "alice", "v1"),
            ("busy", "alice", "v1")
        ]
    );
    // Heartbeats go through v1; its leased resources follow.
    let heartbeat = |name: &str| PoolAction::Update {
        name: name.into(),
        owner: "alice".into(),
        state: "busy".into(),
        user_data: BTreeMap::from([("job".into(), "e2e-17".into())]),
    };
    assert!(matches!(
        log.refused(heartbeat("p1")),
        Rejection::PoolState { .. }
    ));
    assert!(matches!(
        log.refused(release("m2", "alice", "dirty")),
        Rejection::PoolState { .. }
    ));
    log.ok(heartbeat("v1"));
    assert_eq!(log.view("p1").last_update_ms, log.view("v1").last_update_ms);
    let steal = PoolAction::Update {
        name: "v1".into(),
        owner: "alice".into(),
        state: "busy".into(),
        user_data: BTreeMap::from([(LEASED_RESOURCES.into(), "[]".into())]),
    };
    assert!(matches!(log.refused(steal), Rejection::Invalid { .. }));
    // Released dirty: recycled in the same step, its needs dirty for the janitor.
    log.ok(release("v1", "alice", "dirty"));
    let v1 = log.view("v1");
    assert_eq!(summary(&v1), (FULFILLING, MASON_OWNER, ""));
    assert!(v1.user_data.is_empty());
    for child in ["p1", "p2", "m2"] {
        assert_eq!(summary(&log.view(child)), ("dirty", "", ""));
    }
    // Cleaned, they build v1 or v2 again (v2 waited longer).
    for n in ["p1", "p2", "p3", "m1", "m2"] {
        if log.view(n).state == "dirty" {
            log.clean(n);
        }
    }
    assert_eq!(log.view("v2").state, CONSTRUCTING);
    // A virtual resource released free keeps its leased resources, parked under its name.
    let ops = log.mason();
    log.work(ops[0], built());
    log.mason();
    log.ok(acquire("vcluster", "carol"));
    log.ok(release("v2", "carol", "free"));
    let v2 = log.view("v2");
    assert_eq!(summary(&v2), ("free", "", ""));
    for child in leased_of(&v2.user_data) {
        assert_eq!(summary(&log.view(&child)), ("v2", "", "v2"));
    }
}

#[test]
fn a_failed_construct_gives_the_needs_back_dirty_and_waits_again() {
    let mut log = Log::new();
    let ops = log.mason();
    log.work(
        ops[0],
        WorkerReport::Failed {
            error: "quota exceeded".into(),
        },
    );
    log.mason();
    assert_eq!(summary(&log.view("v1")), (FULFILLING, MASON_OWNER, ""));
    for child in ["p1", "p2", "m2"] {
        assert_eq!(summary(&log.view(child)), ("dirty", "", ""));
    }
    assert!(!log.exists(CONSTRUCT_KIND, "v1"));
    // A response that cannot be user data is a failure too.
    for n in ["p1", "p2", "m2"] {
        log.clean(n);
    }
    // v2 has waited longer than v1, back in the queue since its failure.
    assert_eq!(log.view("v2").state, CONSTRUCTING, "v2 waited longest");
    assert_eq!(log.view("v1").state, FULFILLING);
    let ops = log.mason();
    // POOL_USER_DATA_MAX entries, and leasedResources makes one more.
    let full: serde_json::Map<String, serde_json::Value> = (0..POOL_USER_DATA_MAX)
        .map(|i| (format!("k{i}"), json!("v")))
        .collect();
    log.work(
        ops[0],
        WorkerReport::Succeeded {
            response: serde_json::Value::Object(full),
        },
    );
    log.mason();
    assert_eq!(log.view("v2").state, FULFILLING);
    for child in ["p1", "p2", "m2"] {
        assert_eq!(summary(&log.view(child)), ("dirty", "", ""));
    }
}

#[test]
fn removed_virtual_types_and_resources_let_go_of_their_needs() {
    let mut log = Log::new();
    // v1 constructing, v2 fulfilling. The config drops vcluster: v2 goes back dirty, unowned.
    log.ok(PoolAction::SyncVirtual { configs: vec![] });
    assert_eq!(summary(&log.view("v2")), ("dirty", "", ""));
    assert!(!log.exists(VIRTUAL_CONFIG_KIND, "vcluster"));
    // v1's construct fails: no longer virtual, it goes back dirty too.
    let ops = log.mason();
    log.work(
        ops[0],
        WorkerReport::Failed {
            error: "gone".into(),
        },
    );
    log.mason();
    assert_eq!(summary(&log.view("v1")), ("dirty", "", ""));
    // Virtual again: both are recycled; the sync that removes a built one frees its needs.
    log.ok(PoolAction::SyncVirtual {
        configs: vec![vcluster()],
    });
    for n in ["p1", "p2", "m2"] {
        log.clean(n);
    }
    let ops = log.mason();
    log.work(ops[0], built());
    log.mason();
    let built = leased_of(&log.view("v1").user_data);
    assert_eq!(built.len(), 3);
    log.ok(sync(&[
        ("p1", "project", "free"),
        ("p2", "project", "free"),
        ("p3", "project", "dirty"),
        ("m1", "vm", "dirty"),
        ("m2", "vm", "free"),
    ]));
    assert!(!log.exists(POOL_KIND, "v1"));
    for child in built {
        assert_eq!(summary(&log.view(&child)), ("dirty", "", ""));
    }
}

#[test]
fn configs_are_checked_and_written_only_by_sync_virtual() {
    let mut log = Log::new();
    let bad = |f: fn(&mut VirtualConfig)| {
        let mut c = vcluster();
        f(&mut c);
        PoolAction::SyncVirtual { configs: vec![c] }
    };
    for action in [
        bad(|c| c.needs.clear()),
        bad(|c| {
            c.needs.insert("vm".into(), 0);
        }),
        bad(|c| {
            c.needs.insert("vcluster".into(), 1);
        }),
        bad(|c| c.name = "Not A Type".into()),
    ] {
        assert!(
            matches!(log.refused(action.clone()), Rejection::Invalid { .. }),
            "{action:?}"
        );
    }
    // At the limits: VIRTUAL_NEEDS_MAX resources is fine, one more is not.
    let at = bad(|c| c.needs = BTreeMap::from([("project".into(), VIRTUAL_NEEDS_MAX)]));
    log.ok(at);
    let over = bad(|c| c.needs = BTreeMap::from([("project".into(), VIRTUAL_NEEDS_MAX + 1)]));
    assert!(matches!(log.refused(over), Rejection::TooLarge { .. }));
    let content = bad(|c| c.content = "x".repeat(VIRTUAL_CONTENT_BYTES_MAX + 1));
    assert!(matches!(log.refused(content), Rejection::TooLarge { .. }));
    // A virtual type cannot need another virtual type.
    let mut other = vcluster();
    other.name = "vpair".into();
    other.needs = BTreeMap::from([("vcluster".into(), 1)]);
    assert!(matches!(
        log.refused(PoolAction::SyncVirtual {
            configs: vec![vcluster(), other]
        }),
        Rejection::Invalid { .. }
    ));
    // Written directly: refused.
    let direct = Command::Objects(ObjectCommand::Create {
        object: vcluster().object(),
        fence: None,
    });
    assert!(matches!(
        log.cmd(direct),
        Response::Rejected(Rejection::Invalid { .. })
    ));
}

#[derive(Clone, Debug)]
enum Step {
    Acquire(bool, usize),
    Release(usize, usize, bool),
    Clean(usize),
    Build(bool),
    Config(bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (any::<bool>(), 0usize..2).prop_map(|(v, o)| Step::Acquire(v, o)),
        (0usize..7, 0usize..2, any::<bool>()).prop_map(|(n, o, d)| Step::Release(n, o, d)),
        (0usize..7).prop_map(Step::Clean),
        any::<bool>().prop_map(Step::Build),
        any::<bool>().prop_map(Step::Config),
    ]
}

const NAMES: [&str; 7] = ["p1", "p2", "p3", "m1", "m2", "v1", "v2"];
const OWNERS: [&str; 2] = ["alice", "bob"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn leased_resources_always_belong_to_one_virtual_resource(steps in prop::collection::vec(step(), 1..50)) {
        let mut log = Log::new();
        for s in steps {
            match s {
                Step::Acquire(virt, o) => {
                    let _ = log.run(acquire(if virt { "vcluster" } else { "project" }, OWNERS[o]));
                }
                Step::Release(n, o, dirty) => {
                    let _ = log.run(release(NAMES[n], OWNERS[o], if dirty { "dirty" } else { "free" }));
                }
                Step::Clean(n) => {
                    if log.view(NAMES[n]).state == "dirty" && log.view(NAMES[n]).owner.is_empty() {
                        log.clean(NAMES[n]);
                    }
                }
                Step::Build(ok) => {
                    for id in log.mason() {
                        let report = match ok {
                            true => built(),
                            false => WorkerReport::Failed { error: "no".into() },
                        };
                        log.work(id, report);
                    }
                    log.mason();
                }
                Step::Config(on) => {
                    let configs = if on { vec![vcluster()] } else { vec![] };
                    log.ok(PoolAction::SyncVirtual { configs });
                }
            }
            let restored = State::from_snapshot_bytes(&log.state.to_snapshot_bytes()).expect("restore");
            prop_assert_eq!(restored.pools(), log.state.pools());
            let mut owners: BTreeMap<String, String> = BTreeMap::new();
            for v in ["v1", "v2"] {
                let parent = log.view(v);
                for child in leased_of(&parent.user_data) {
                    prop_assert!(owners.insert(child.clone(), v.to_string()).is_none(), "{} in two", child);
                    let c = log.view(&child);
                    prop_assert_eq!(c.parent.as_str(), v);
                    if parent.owner.is_empty() {
                        prop_assert_eq!((c.state.as_str(), c.owner.as_str()), (v, ""));
                    } else {
                        prop_assert_eq!((&c.state, &c.owner), (&parent.state, &parent.owner));
                    }
                }
            }
            for n in &NAMES[..5] {
                let c = log.view(n);
                prop_assert_eq!(owners.get(*n).map(String::as_str).unwrap_or(""), c.parent.as_str());
            }
        }
    }
}
