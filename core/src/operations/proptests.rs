//! Random sequences of worker and operation commands (with client locks on the targets, sweeps,
//! leader changes and clocks that jump) through `apply_effects`, against a model built only from
//! the responses and the `OpEvent`s. Checked after every step: never two live assignments of one
//! operation, nor two assigned operations on one target; every new assignment's epoch is above
//! every epoch before it; an ended operation never changes again and holds no lock (the table's
//! own invariants, checked against the lock table); an accepted report came from the current
//! assignment; what the dispatch plan offers applies; a rejection changes nothing; the targets'
//! `state` labels follow their operations; `ops_due` agrees with a full scan; snapshots
//! round-trip.

use crate::command::{LockCommand, ObjectCommand, OperationCommand};
use crate::command::{LockReply, OperationReply};
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::tests::{director, key, DIRECTOR_VERBS, LOCK_LIMITS};
use super::*;
use crate::apply::{apply_blank, apply_effects};
use crate::command::{Command, Response, WorkerReport};
use crate::effects::{ApplyContext, Effects};
use crate::locks::LockMode;
use crate::state::State;

const TARGETS: [&str; 3] = ["d1", "d2", "d3"];
const WORKERS: [&str; 3] = ["w1", "w2", "w3"];
/// Small, so the limits are reached; ended operations are all kept, so the model can look
/// them up.
const LIMITS: OpLimits = OpLimits {
    active_max: 6,
    per_target_max: 3,
    finished_max: 1_000,
    params_bytes_max: 64,
    result_bytes_max: 64,
    attempts_max: 3,
    deadline_ms_max: 2_000,
    workers_max: 3,
    handles_max: 4,
    capacity_max: 2,
};

#[derive(Clone, Debug)]
enum Step {
    Register {
        worker: usize,
        capacity: u32,
        ttl_ms: u64,
    },
    Heartbeat {
        worker: usize,
    },
    Deregister {
        worker: usize,
    },
    Submit {
        target: usize,
        backup: bool,
        attempts: u32,
        deadline_ms: Option<u64>,
    },
    /// Assign the `pick`-th operation seen to `worker` (often refused).
    Assign {
        pick: usize,
        worker: usize,
    },
    /// Propose the first assignment of the dispatch plan: it must apply.
    Plan,
    /// Report on the `pick`-th live assignment (or operation), for its current assignment or
    /// (`stale`) for one seen earlier.
    Report {
        pick: usize,
        kind: usize,
        stale: Option<usize>,
    },
    Abort {
        pick: usize,
    },
    /// The sweep `ops_due` asks for.
    Sweep {
        grace_ms: u64,
    },
    /// A client takes (or gives back) a WRITE lock on a target's lock.
    ClientLock {
        target: usize,
        release: bool,
    },
    NewTerm,
}

fn step() -> impl Strategy<Value = Step> {
    let worker = 0..WORKERS.len();
    let target = 0..TARGETS.len();
    prop_oneof![
        3 => (worker.clone(), 1u32..3, 300u64..3_000).prop_map(
            |(worker, capacity, ttl_ms)| Step::Register { worker, capacity, ttl_ms }
        ),
        2 => worker.clone().prop_map(|worker| Step::Heartbeat { worker }),
        1 => worker.clone().prop_map(|worker| Step::Deregister { worker }),
        4 => (target.clone(), prop::bool::weighted(0.3), 1u32..4, prop::option::weighted(0.3, 1u64..1_500))
            .prop_map(|(target, backup, attempts, deadline_ms)| Step::Submit { target, backup, attempts, deadline_ms }),
        2 => (0usize..32, worker).prop_map(|(pick, worker)| Step::Assign { pick, worker }),
        4 => Just(Step::Plan),
        5 => (0usize..32, 0usize..4, prop::option::weighted(0.25, 0usize..8)).prop_map(
            |(pick, kind, stale)| Step::Report { pick, kind, stale }
        ),
        1 => (0usize..32).prop_map(|pick| Step::Abort { pick }),
        3 => (0u64..400).prop_map(|grace_ms| Step::Sweep { grace_ms }),
        1 => (target, any::<bool>()).prop_map(|(target, release)| Step::ClientLock { target, release }),
        1 => Just(Step::NewTerm),
    ]
}

/// What the model knows, learned only from responses and events.
#[derive(Debug, Default)]
struct Model {
    /// Every operation submitted, in order.
    ops: Vec<OperationId>,
    /// Per operation, every assignment seen: (worker, attempt, epoch).
    assignments: BTreeMap<OperationId, Vec<(String, u32, u64)>>,
    /// Operations with a live assignment, and which.
    live: BTreeMap<OperationId, (String, u32, u64)>,
    ended: BTreeSet<OperationId>,
    last_epoch: u64,
    /// Per target, the operation whose change the target saw last.
    shown: BTreeMap<ObjectKey, OperationId>,
    client_token: BTreeMap<usize, u64>,
}

impl Model {
    fn pick(&self, pick: usize) -> OperationId {
        let n = self.ops.len().max(1);
        self.ops.get(pick % n).copied().unwrap_or(OperationId(999))
    }

    /// Feeds one operation change to the model, checking it against the rules.
    fn event(&mut self, op: &Operation) -> Result<(), TestCaseError> {
        let id = op.id;
        prop_assert!(!self.ended.contains(&id), "{id} changed after it ended");
        match op.state {
            OpState::Dispatched if !self.live.contains_key(&id) => {
                prop_assert!(op.epoch > self.last_epoch, "epoch {} reused", op.epoch);
                self.last_epoch = op.epoch;
                let assignment = (op.worker.clone().unwrap_or_default(), op.attempt, op.epoch);
                self.assignments
                    .entry(id)
                    .or_default()
                    .push(assignment.clone());
                self.live.insert(id, assignment);
            }
            OpState::Queued => {
                self.live.remove(&id);
            }
            state if state.is_final() => {
                self.live.remove(&id);
                self.ended.insert(id);
            }
            _ => {}
        }
        self.shown.insert(op.target.clone(), id);
        Ok(())
    }
}

fn policy(target: usize, backup: bool, attempts: u32, deadline_ms: Option<u64>) -> OpPolicy {
    // Backups of any target read-lock d1's lock, so READ sharing and WRITE exclusion meet.
    let (lock_on, mode) = match backup {
        true => (key("d1"), LockMode::Read),
        false => (key(TARGETS[target]), LockMode::Write),
    };
    OpPolicy {
        lock: Some(OpLock::on_target(&lock_on, mode)),
        max_attempts: attempts,
        deadline_ms,
        deletes_target: false,
    }
}

fn command(model: &Model, state: &State, step: &Step, now: u64) -> Option<Command> {
    let cmd = match step {
        Step::Register {
            worker,
            capacity,
            ttl_ms,
        } => {
            // w3 only updates.
            let handles = if *worker == 2 {
                &DIRECTOR_VERBS[1..2]
            } else {
                &DIRECTOR_VERBS[..]
            };
            Command::Operations(OperationCommand::RegisterWorker {
                worker: WORKERS[*worker].into(),
                handles: handles.iter().map(|h| h.parse().expect("handle")).collect(),
                capacity: *capacity,
                ttl_ms: *ttl_ms,
                limits: LIMITS,
            })
        }
        Step::Heartbeat { worker } => Command::Operations(OperationCommand::Heartbeat {
            worker: WORKERS[*worker].into(),
        }),
        Step::Deregister { worker } => Command::Operations(OperationCommand::DeregisterWorker {
            worker: WORKERS[*worker].into(),
            limits: LIMITS,
        }),
        Step::Submit {
            target,
            backup,
            attempts,
            deadline_ms,
        } => Command::Operations(OperationCommand::Submit {
            target: key(TARGETS[*target]),
            verb: if *backup {
                "backup".into()
            } else {
                "update".into()
            },
            params: serde_json::Value::Null,
            idempotency_key: None,
            create: None,
            policy: policy(*target, *backup, *attempts, *deadline_ms),
            limits: LIMITS,
        }),
        Step::Assign { pick, worker } => Command::Operations(OperationCommand::Assign {
            id: model.pick(*pick),
            worker: WORKERS[*worker].into(),
            lock_limits: LOCK_LIMITS,
        }),
        Step::Plan => {
            let first = state.ops_dispatchable(now, LOCK_LIMITS.holders_max, 1);
            let d = first.into_iter().next()?;
            Command::Operations(OperationCommand::Assign {
                id: d.id,
                worker: d.worker,
                lock_limits: LOCK_LIMITS,
            })
        }
        Step::Report { pick, kind, stale } => {
            // Mostly about live assignments, where the rules bite.
            let live = model.live.keys().nth(pick % model.live.len().max(1));
            let id = live
                .copied()
                .filter(|_| stale.is_none())
                .unwrap_or(model.pick(*pick));
            let seen = model.assignments.get(&id).cloned().unwrap_or_default();
            let (worker, attempt, epoch) = match (stale, state.operation(id)) {
                (Some(k), _) if !seen.is_empty() => seen[k % seen.len()].clone(),
                (_, Some(op)) => (op.worker.clone().unwrap_or_default(), op.attempt, op.epoch),
                _ => ("w1".into(), 1, 1),
            };
            let report = match kind {
                0 => WorkerReport::Started,
                1 => WorkerReport::Succeeded {
                    response: serde_json::json!({ "ok": true }),
                },
                2 => WorkerReport::Failed {
                    error: "boom".into(),
                },
                _ => WorkerReport::Aborted,
            };
            let worker = if worker.is_empty() {
                "w1".into()
            } else {
                worker
            };
            Command::Operations(OperationCommand::Report {
                id,
                worker,
                attempt,
                epoch,
                report,
                limits: LIMITS,
            })
        }
        Step::Abort { pick } => Command::Operations(OperationCommand::Abort {
            id: model.pick(*pick),
            limits: LIMITS,
        }),
        Step::Sweep { grace_ms } => {
            let due = state.ops_due(now);
            Command::Operations(OperationCommand::Sweep {
                workers: due.workers,
                operations: due.operations,
                grace_ms: *grace_ms,
                limits: LIMITS,
            })
        }
        Step::ClientLock { target, release } => {
            let name = key(TARGETS[*target]).to_string();
            match (release, model.client_token.get(target)) {
                (true, Some(&token)) => Command::Locks(LockCommand::Release {
                    name,
                    holder: "client".into(),
                    token,
                }),
                _ => Command::Locks(LockCommand::Acquire {
                    name,
                    holder: "client".into(),
                    mode: LockMode::Write,
                    ttl_ms: None,
                    details: serde_json::Value::Null,
                    wait_ms: 0,
                    limits: LOCK_LIMITS,
                }),
            }
        }
        Step::NewTerm => return None,
    };
    Some(cmd)
}

/// What `ops_due` must say, by a full scan.
fn due_by_scan(state: &State, now: u64) -> OpsDue {
    let mut workers: Vec<(u64, String)> = state
        .workers()
        .map(|w| (w.expires_at_ms(), w.id.clone()))
        .filter(|(at, _)| *at <= now)
        .collect();
    workers.sort();
    let open = |s: OpState| {
        matches!(
            s,
            OpState::Queued | OpState::Dispatched | OpState::InProgress
        )
    };
    let mut ops: Vec<(u64, OperationId)> = state
        .operations(&OpFilter::default(), None, 0)
        .into_iter()
        .filter(|op| open(op.state))
        .filter_map(|op| op.deadline_at_ms.map(|at| (at, op.id)))
        .filter(|(at, _)| *at <= now)
        .collect();
    ops.sort();
    OpsDue {
        workers: workers.into_iter().map(|(_, w)| w).collect(),
        operations: ops.into_iter().map(|(_, id)| id).collect(),
    }
}

/// Runs one generated case.
fn run(steps: &[(u64, bool, Step)]) -> Result<(), TestCaseError> {
    let mut state = State::new();
    let mut model = Model::default();
    let mut term = 1;
    let mut index = 0;
    let mut clock = 1_000u64;
    for name in TARGETS {
        index += 1;
        let ctx = ApplyContext {
            log_index: index,
            term,
            time_ms: clock,
            stamped: true,
            wall_ms: None,
        };
        let cmd = Command::Objects(ObjectCommand::Create {
            object: director(name),
            fence: None,
        });
        apply_effects(&mut state, &ctx, &cmd, &mut Effects::default());
    }
    for (dt, slow, step) in steps {
        index += 1;
        clock += dt;
        let time_ms = if *slow {
            clock.saturating_sub(700)
        } else {
            clock
        };
        let now = state.time_ms().max(time_ms);
        let ctx = ApplyContext {
            log_index: index,
            term,
            time_ms,
            stamped: true,
            wall_ms: None,
        };
        let Some(cmd) = command(&model, &state, step, now) else {
            if let Step::NewTerm = step {
                term += 1;
                apply_blank(&mut state, &ApplyContext { term, ..ctx });
            }
            continue;
        };
        let before = state.clone();
        let mut effects = Effects::default();
        let response = apply_effects(&mut state, &ctx, &cmd, &mut effects);

        if let Response::Rejected(r) = &response {
            prop_assert!(effects.is_empty(), "{cmd}: a rejection had effects");
            prop_assert_eq!(&state.with_clock_of(&before), &before);
            prop_assert!(
                !matches!(step, Step::Plan),
                "the plan offered {cmd}, refused: {r}"
            );
        }
        match (step, &response) {
            (
                Step::Submit { .. },
                Response::Operations(OperationReply::Submitted { operation, created }),
            ) => {
                prop_assert!(*created);
                prop_assert_eq!(operation.id, OperationId(index));
                model.ops.push(operation.id);
            }
            (Step::Report { .. }, Response::Operations(OperationReply::Operation { .. })) => {
                let Command::Operations(OperationCommand::Report {
                    id,
                    worker,
                    attempt,
                    epoch,
                    ..
                }) = &cmd
                else {
                    unreachable!()
                };
                let sent = (worker.clone(), *attempt, *epoch);
                let last = model.assignments.get(id).and_then(|a| a.last());
                prop_assert_eq!(
                    last,
                    Some(&sent),
                    "a report from an old assignment was accepted"
                );
                prop_assert!(model.live.contains_key(id) || model.ended.contains(id));
            }
            (Step::ClientLock { target, .. }, Response::Locks(LockReply::Granted { holder })) => {
                model.client_token.insert(*target, holder.token);
            }
            (Step::ClientLock { target, .. }, Response::Locks(LockReply::Released { .. })) => {
                model.client_token.remove(target);
            }
            _ => {}
        }
        for e in &effects.op_events {
            model.event(&e.operation)?;
        }

        // The whole state against the rules.
        prop_assert_eq!(state.check_operations(), Ok(()));
        let mut on_target = BTreeSet::new();
        for op in state.operations(&OpFilter::default(), None, 0) {
            if op.state.is_assigned() {
                prop_assert!(
                    on_target.insert(op.target.clone()),
                    "two assigned on {}",
                    op.target
                );
                let live = model.live.get(&op.id).map(|(w, a, e)| (w.as_str(), *a, *e));
                prop_assert_eq!(
                    live,
                    Some((op.worker.as_deref().unwrap_or(""), op.attempt, op.epoch))
                );
            }
            prop_assert_eq!(op.state.is_final(), model.ended.contains(&op.id));
        }
        for (target, id) in &model.shown {
            let label = state
                .get(target)
                .and_then(|o| o.metadata.labels.get("state").cloned());
            let want = state
                .operation(*id)
                .map(|op| op.state.resource_state().to_string());
            prop_assert_eq!(label, want, "{} does not show {}", target, id);
        }
        prop_assert!(state.operation_counts().1 <= LIMITS.active_max as usize);
        for probe in [now, now + 500, u64::MAX] {
            prop_assert_eq!(state.ops_due(probe), due_by_scan(&state, probe));
        }
    }
    let restored = State::from_snapshot_bytes(&state.to_snapshot_bytes());
    prop_assert_eq!(restored, Ok(state));
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
    fn apply_agrees_with_the_operation_model(
        steps in prop::collection::vec((0u64..300, prop::bool::weighted(0.1), step()), 1..80)
    ) {
        run(&steps)?;
    }
}
