//! Random command sequences against a small independent model: revisions strictly increase per
//! change, lists equal the model, pages as of every earlier revision (rebuilt from the events
//! since) equal that revision's own, a rejected command changes nothing, snapshots round-trip.

use crate::command::{
    DeploymentCommand, LockCommand, MemberCommand, ObjectCommand, OperationCommand, PoolCommand,
    ReservationCommand,
};
use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use std::collections::BTreeSet;

use super::*;
use crate::command::{Command, Response, TxnOp};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::selector::Requirement;
use crate::objects::selector::Selector;
use crate::rejection::Rejection;
use crate::state::State;

const KINDS: [&str; 2] = ["Director", "DeploymentLock"];
const NAMESPACES: [&str; 2] = ["default", "x"];
const NAMES: [&str; 3] = ["a", "b", "c"];
/// Key indexes 0..12 are valid keys; 12 is an invalid one.
const KEYS: usize = 13;

fn key_of(i: usize) -> ObjectKey {
    if i >= 12 {
        return ObjectKey::new("Director", "default", "Bad_Name");
    }
    ObjectKey::new(KINDS[i / 6], NAMESPACES[(i / 3) % 2], NAMES[i % 3])
}

/// How a generated op picks its expected revision.
#[derive(Clone, Debug)]
enum Expect {
    Any,
    Current,
    Guess(u64),
}

#[derive(Clone, Debug)]
enum GenOp {
    Create(usize, u8, u8),
    Update(usize, u8, u8, Expect),
    UpdateStatus(usize, u8, Expect),
    Delete(usize, Expect),
}

#[derive(Clone, Debug)]
enum GenCmd {
    One(GenOp),
    Txn(Vec<GenOp>),
    Retire(u64),
}

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        Just(Expect::Any),
        Just(Expect::Current),
        (0u64..12).prop_map(Expect::Guess)
    ]
}

fn gen_op() -> impl Strategy<Value = GenOp> {
    let k = 0..KEYS;
    prop_oneof![
        (k.clone(), 0u8..3, 0u8..3).prop_map(|(k, s, l)| GenOp::Create(k, s, l)),
        (k.clone(), 0u8..3, 0u8..3, expect()).prop_map(|(k, s, l, e)| GenOp::Update(k, s, l, e)),
        (k.clone(), 0u8..3, expect()).prop_map(|(k, s, e)| GenOp::UpdateStatus(k, s, e)),
        (k, expect()).prop_map(|(k, e)| GenOp::Delete(k, e)),
    ]
}

fn gen_cmd() -> impl Strategy<Value = GenCmd> {
    prop_oneof![
        4 => gen_op().prop_map(GenCmd::One),
        2 => prop::collection::vec(gen_op(), 0..5).prop_map(GenCmd::Txn),
        1 => (0u64..4).prop_map(GenCmd::Retire),
    ]
}

/// What the model keeps per object.
#[derive(Clone, Debug, PartialEq)]
struct ModelObj {
    spec: Value,
    status: Value,
    labels: BTreeMap<String, String>,
    rv: u64,
    generation: u64,
}

#[derive(Clone, Debug, Default)]
struct Model {
    revision: u64,
    objects: BTreeMap<ObjectKey, ModelObj>,
    retired: BTreeSet<u64>,
}

fn spec_value(n: u8) -> Value {
    json!({ "v": n })
}

fn labels_value(n: u8) -> BTreeMap<String, String> {
    (1..=n)
        .map(|i| (format!("l{i}"), "on".to_string()))
        .collect()
}

fn resource(key: &ObjectKey, spec: Value, labels: BTreeMap<String, String>) -> Resource {
    let mut r = Resource::new("example.com/v1", &key.kind, &key.namespace, &key.name);
    r.spec = RawJson::from_value(&spec);
    r.metadata.labels = labels.into();
    r
}

impl Model {
    fn expected(&self, key: &ObjectKey, e: &Expect) -> Option<u64> {
        match e {
            Expect::Any => None,
            Expect::Current => Some(self.objects.get(key).map_or(1, |o| o.rv)),
            Expect::Guess(r) => Some(*r),
        }
    }

    fn to_txn_op(&self, op: &GenOp) -> TxnOp {
        match op {
            GenOp::Create(k, s, l) => TxnOp::Create {
                object: resource(&key_of(*k), spec_value(*s), labels_value(*l)),
            },
            GenOp::Update(k, s, l, e) => TxnOp::Update {
                object: resource(&key_of(*k), spec_value(*s), labels_value(*l)),
                expected_revision: self.expected(&key_of(*k), e),
            },
            GenOp::UpdateStatus(k, s, e) => {
                let mut object = resource(&key_of(*k), json!({ "ignored": 1 }), BTreeMap::new());
                object.status = spec_value(*s);
                TxnOp::UpdateStatus {
                    object,
                    expected_revision: self.expected(&key_of(*k), e),
                }
            }
            GenOp::Delete(k, e) => TxnOp::Delete {
                key: key_of(*k),
                expected_revision: self.expected(&key_of(*k), e),
            },
        }
    }

    /// The model's verdict on one op: `Err(name of the rejection)`.
    fn apply_op(&mut self, op: &TxnOp) -> Result<(), &'static str> {
        let key = op.key();
        if key.name.contains('_') {
            return Err("Invalid");
        }
        let (expected, current) = match op {
            TxnOp::Create { object } => {
                if self.objects.contains_key(&key) {
                    return Err("AlreadyExists");
                }
                self.revision += 1;
                let (spec, labels) = (
                    object.spec.to_value(),
                    object.metadata.labels.clone().into(),
                );
                let obj = ModelObj {
                    spec,
                    status: Value::Null,
                    labels,
                    rv: self.revision,
                    generation: 1,
                };
                self.objects.insert(key, obj);
                return Ok(());
            }
            TxnOp::Update {
                expected_revision, ..
            }
            | TxnOp::UpdateStatus {
                expected_revision, ..
            }
            | TxnOp::Delete {
                expected_revision, ..
            } => (*expected_revision, self.objects.get(&key)),
        };
        let current = current.ok_or("NotFound")?.clone();
        if expected.is_some_and(|e| e != current.rv) {
            return Err("Conflict");
        }
        let mut next = current.clone();
        match op {
            TxnOp::Update { object, .. } => {
                // The model compares values; the state compares canonical text.
                let spec = object.spec.to_value();
                next.generation += u64::from(spec != current.spec);
                next.spec = spec;
                next.labels = object.metadata.labels.clone().into();
            }
            TxnOp::UpdateStatus { object, .. } => next.status = object.status.clone(),
            _ => {
                self.revision += 1;
                self.objects.remove(&key);
                return Ok(());
            }
        }
        if next != current {
            self.revision += 1;
            next.rv = self.revision;
            self.objects.insert(key, next);
        }
        Ok(())
    }
}

fn rejection_name(r: &Rejection) -> &'static str {
    match r {
        Rejection::AlreadyExists { .. } => "AlreadyExists",
        Rejection::NotFound { .. } => "NotFound",
        Rejection::Conflict { .. } => "Conflict",
        Rejection::Invalid { .. } => "Invalid",
        Rejection::TooLarge { .. } => "TooLarge",
        Rejection::TxnOpFailed { .. } => "TxnOpFailed",
        Rejection::NodeRetired { .. } => "NodeRetired",
        Rejection::LockBusy { .. } => "LockBusy",
        Rejection::LockDelayed { .. } => "LockDelayed",
        Rejection::LockNotHeld { .. } => "LockNotHeld",
        Rejection::FenceRejected { .. } => "FenceRejected",
        Rejection::LockOwnedByOperation { .. } => "LockOwnedByOperation",
        Rejection::OperationNotFound { .. } => "OperationNotFound",
        Rejection::WorkerNotFound { .. } => "WorkerNotFound",
        Rejection::OperationState { .. } => "OperationState",
        Rejection::OperationBehind { .. } => "OperationBehind",
        Rejection::OperationDeadlinePassed { .. } => "OperationDeadlinePassed",
        Rejection::WorkerUnfit { .. } => "WorkerUnfit",
        Rejection::StaleAssignment { .. } => "StaleAssignment",
        Rejection::ReservationNotDue { .. } => "ReservationNotDue",
        Rejection::DeploymentState { .. } => "DeploymentState",
        Rejection::DeploymentResourceNotFound { .. } => "DeploymentResourceNotFound",
        Rejection::PoolEmpty { .. } => "PoolEmpty",
        Rejection::PoolNotOwner { .. } => "PoolNotOwner",
        Rejection::PoolState { .. } => "PoolState",
        Rejection::UserNotFound { .. } => "UserNotFound",
        Rejection::UserExists { .. } => "UserExists",
        Rejection::AuthState { .. } => "AuthState",
        Rejection::AuthChanged { .. } => "AuthChanged",
        Rejection::NotStamped { .. } => "NotStamped",
        Rejection::NoSpace { .. } => "NoSpace",
        Rejection::Kv(_) => "Kv",
    }
}

/// Applies one generated command to the model and returns the expected outcome:
/// `Ok(())` or `Err((txn op index, rejection name))`.
fn model_step(model: &mut Model, cmd: &Command) -> Result<(), (Option<usize>, &'static str)> {
    let op = match cmd {
        Command::Objects(ObjectCommand::Txn { ops, .. }) if ops.is_empty() => {
            return Err((None, "Invalid"))
        }
        Command::Objects(ObjectCommand::Txn { ops, .. }) => {
            let mut scratch = model.clone();
            for (i, op) in ops.iter().enumerate() {
                scratch.apply_op(op).map_err(|e| (Some(i), e))?;
            }
            *model = scratch;
            return Ok(());
        }
        Command::Members(MemberCommand::Retire { node_id }) => {
            model.retired.insert(*node_id);
            return Ok(());
        }
        Command::Objects(ObjectCommand::Create { object, .. }) => TxnOp::Create {
            object: object.clone(),
        },
        Command::Objects(ObjectCommand::Update {
            object,
            expected_revision,
            ..
        }) => TxnOp::Update {
            object: object.clone(),
            expected_revision: *expected_revision,
        },
        Command::Objects(ObjectCommand::UpdateStatus {
            object,
            expected_revision,
            ..
        }) => TxnOp::UpdateStatus {
            object: object.clone(),
            expected_revision: *expected_revision,
        },
        Command::Objects(ObjectCommand::Delete {
            key,
            expected_revision,
            ..
        }) => TxnOp::Delete {
            key: key.clone(),
            expected_revision: *expected_revision,
        },
        Command::Locks(LockCommand::Acquire { .. })
        | Command::Locks(LockCommand::Refresh { .. })
        | Command::Locks(LockCommand::Release { .. })
        | Command::Locks(LockCommand::CancelWait { .. })
        | Command::Locks(LockCommand::Sweep { .. }) => {
            unreachable!("lock commands are tested in locks::proptests")
        }
        Command::Operations(OperationCommand::RegisterWorker { .. })
        | Command::Operations(OperationCommand::Heartbeat { .. })
        | Command::Operations(OperationCommand::DeregisterWorker { .. })
        | Command::Operations(OperationCommand::Submit { .. })
        | Command::Operations(OperationCommand::Assign { .. })
        | Command::Operations(OperationCommand::Report { .. })
        | Command::Operations(OperationCommand::Abort { .. })
        | Command::Operations(OperationCommand::Sweep { .. })
        | Command::Reservations(ReservationCommand::Decommission { .. }) => {
            unreachable!("op commands are tested in operations::proptests")
        }
        Command::Deployments(DeploymentCommand { .. }) => {
            unreachable!("deployments are tested in deployment::tests")
        }
        Command::Pools(PoolCommand { .. }) => unreachable!("pools are tested in pool::tests"),
        Command::Auth(_) | Command::Guarded { .. } => {
            unreachable!("auth is tested in auth::tests and apply::tests")
        }
        Command::Alarms(_) => unreachable!("alarms are tested in apply::tests"),
        Command::Kv(_) => unreachable!("the keyspace is tested in kv::tests and kv::proptests"),
    };
    model.apply_op(&op).map_err(|e| (None, e))
}

fn to_command(model: &Model, cmd: &GenCmd) -> Command {
    match cmd {
        GenCmd::Retire(n) => Command::Members(MemberCommand::Retire { node_id: *n }),
        GenCmd::Txn(ops) => Command::Objects(ObjectCommand::Txn {
            ops: ops.iter().map(|o| model.to_txn_op(o)).collect(),
            fence: None,
        }),
        GenCmd::One(op) => model.to_txn_op(op).into_command(None),
    }
}

fn outcome(response: &Response) -> Result<(), (Option<usize>, &'static str)> {
    match response {
        Response::Rejected(Rejection::TxnOpFailed { index, cause }) => {
            Err((Some(*index), rejection_name(cause)))
        }
        Response::Rejected(r) => Err((None, rejection_name(r))),
        _ => Ok(()),
    }
}

/// The state's contents in the model's terms.
fn as_model(state: &State) -> BTreeMap<ObjectKey, ModelObj> {
    let objects = state.objects();
    objects
        .map(|o| {
            let m = &o.metadata;
            let obj = ModelObj {
                spec: o.spec.to_value(),
                status: o.status.clone(),
                labels: m.labels.clone().into(),
                rv: m.resource_version,
                generation: m.generation,
            };
            (o.key(), obj)
        })
        .collect()
}

/// Every kind, paged two at a time, equals the model's keys of that kind in order.
/// The kept label counts equal a count over the objects (a namespace filter forces the scan).
fn check_label_counts(state: &State) {
    let everything = Selector::everything();
    for kind in KINDS {
        for key in ["l1", "l2", "l3"] {
            let by = crate::objects::count::CountBy::Label(key.to_string());
            let kept = state.count(kind, None, &everything, &by).expect("kept");
            let mut scanned = crate::objects::count::Counts::default();
            for ns in NAMESPACES {
                let part = state.count(kind, Some(ns), &everything, &by).expect("scan");
                scanned.total += part.total;
                scanned.missing += part.missing;
                for (v, n) in part.buckets {
                    *scanned.buckets.entry(v).or_default() += n;
                }
            }
            assert_eq!(kept, scanned, "{kind} by {key}");
        }
    }
}

fn check_pages(state: &State, model: &Model) {
    for kind in KINDS {
        let mut after = None;
        let mut paged = Vec::new();
        loop {
            let page = state.list(kind, None, &Selector::everything(), after.as_ref(), 2);
            assert!(page.items.len() <= 2);
            paged.extend(page.items.iter().map(Resource::key));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let want: Vec<ObjectKey> = model
            .objects
            .keys()
            .filter(|k| k.kind == kind)
            .cloned()
            .collect();
        assert_eq!(paged, want);
    }
}

/// Every kind, under a few selectors, paged two at a time as of `then`'s revision (the current
/// state with the later `events` undone) equals `then`'s own pages.
fn check_pages_as_of(state: &State, events: &[crate::command::Event], then: &State) {
    let since = || events.iter().filter(|e| e.revision > then.revision());
    for kind in KINDS {
        for selector in ["", "l1", "!l2,l1"] {
            let selector = Selector::parse(selector).expect("selector");
            let mut after = None;
            loop {
                let page = state.list_as_of(kind, None, &selector, after.as_ref(), 2, since());
                let want = then.list(kind, None, &selector, after.as_ref(), 2);
                assert_eq!(page, want, "{kind} {selector} after {after:?}");
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
    }
}

proptest! {
    // No regression files: shrunk failures become table tests next to the code instead.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn apply_agrees_with_the_model(steps in prop::collection::vec((0u64..10_000, gen_cmd()), 1..40)) {
        let mut state = State::new();
        let mut model = Model::default();
        let mut events = Vec::new();
        let mut pinned = Vec::new();
        for (i, (time_ms, gen)) in steps.iter().enumerate() {
            let cmd = to_command(&model, gen);
            let before = state.clone();
            pinned.push(before.clone());
            let events_before = events.len();
            let ctx = ApplyContext { log_index: i as u64 + 1, term: 1, time_ms: *time_ms, stamped: true, wall_ms: None };
            let response = apply(&mut state, &ctx, &cmd, &mut events);
            let want = model_step(&mut model, &cmd);
            prop_assert_eq!(outcome(&response), want, "{}", cmd);
            prop_assert_eq!(state.time_ms(), before.time_ms().max(*time_ms));
            prop_assert_eq!(state.revision(), model.revision);
            let new_revs: Vec<u64> = events[events_before..].iter().map(|e| e.revision).collect();
            let want_revs: Vec<u64> = (before.revision() + 1..=state.revision()).collect();
            prop_assert_eq!(new_revs, want_revs);
            if want.is_err() {
                prop_assert_eq!(&state.with_clock_of(&before), &before);
            }
            prop_assert_eq!(as_model(&state), model.objects.clone());
            check_label_counts(&state);
            for n in 0..4 {
                prop_assert_eq!(state.is_retired(n), model.retired.contains(&n));
            }
        }
        check_pages(&state, &model);
        for then in &pinned {
            check_pages_as_of(&state, &events, then);
        }
        let restored = State::from_snapshot_bytes(&state.to_snapshot_bytes());
        prop_assert_eq!(restored, Ok(state));
    }

    #[test]
    fn selector_display_round_trips(
        reqs in prop::collection::vec((0u8..6, "[a-c]{1,2}", prop::collection::btree_set("[x-z]{0,2}", 1..3)), 0..4)
    ) {
        let requirements: Vec<Requirement> = reqs
            .into_iter()
            .map(|(op, k, set)| {
                let first = set.iter().next().cloned().unwrap_or_default();
                match op {
                    0 => Requirement::Exists(k),
                    1 => Requirement::DoesNotExist(k),
                    2 => Requirement::Equals(k, first),
                    3 => Requirement::NotEquals(k, first),
                    4 => Requirement::In(k, set),
                    _ => Requirement::NotIn(k, set),
                }
            })
            .collect();
        let selector = Selector::from_requirements(requirements);
        prop_assert_eq!(Selector::parse(&selector.to_string()), Ok(selector));
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn parsers_never_panic(noise in "\\PC{0,40}", near in "([a-c!=(), <>/_.-]|in |notin ){0,24}") {
        for text in [&noise, &near] {
            if let Ok(selector) = Selector::parse(text) {
                // Whatever parses has a canonical form that parses to the same selector.
                prop_assert_eq!(Selector::parse(&selector.to_string()), Ok(selector));
            }
            let _ = Resource::from_json(text);
        }
    }

    #[test]
    fn apply_never_panics_on_odd_input(
        parts in prop::collection::vec("\\PC{0,6}", 4),
        expected in any::<Option<u64>>(),
        (time_ms, log_index, term) in any::<(u64, u64, u64)>(),
    ) {
        let mut object = Resource::new("v1", &parts[0], &parts[1], &parts[2]);
        object.metadata.labels.insert(parts[3].clone(), parts[3].clone());
        let key = object.key();
        let ctx = ApplyContext { log_index, term, time_ms, stamped: true, wall_ms: None };
        let mut state = State::new();
        let mut events = Vec::new();
        let ops = vec![
            TxnOp::Create { object: object.clone() },
            TxnOp::Update { object: object.clone(), expected_revision: expected },
            TxnOp::UpdateStatus { object: object.clone(), expected_revision: expected },
            TxnOp::Delete { key, expected_revision: expected },
        ];
        for op in &ops {
            let _ = apply(&mut state, &ctx, &op.clone().into_command(None), &mut events);
        }
        let _ = apply(&mut state, &ctx, &Command::Objects(ObjectCommand::Txn { ops, fence: None }), &mut events);
        prop_assert_eq!(events.len() as u64, state.revision());
        prop_assert_eq!(State::from_snapshot_bytes(&state.to_snapshot_bytes()), Ok(state));
    }
}
