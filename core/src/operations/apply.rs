//! The op commands, each one atomic step over the operation table, the target's lock and the
//! target resource: workers register, heartbeat and leave; operations are submitted, assigned,
//! reported on, aborted and swept.
//!
//! Every command runs all its checks, and prepares the target's next version, before its first
//! change. The one change that may still be refused (taking or releasing the lock, by the lock
//! table's own rules) comes first and nothing after it can fail, so a `Rejection` leaves the state
//! and the effects as they were. Sweeps and deregistrations refuse nothing once their input is
//! checked: they take each assignment back in its own small step of the same kind.
//!
//! The target shows its operation in the same step (see `target`), so watchers of the resource
//! see the lifecycle as revisions, in log order with everything else.

use crate::command::OperationReply;
use crate::command::{OperationCommand, ReservationCommand};
use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::command::{Response, WorkerReport};
use crate::effects::{ApplyContext, Effects};
use crate::locks::{LockContext, LockLimits, OperationGrant};
use crate::objects::apply::{apply_object_op, emit, ObjectOp};
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::{
    at_limit, check_handles, check_idempotency_key, check_operation, check_params, check_policy,
    check_report, check_target, check_verb, check_worker, check_worker_terms, under, usize_of,
    Handle, OpEvent, OpLimits, OpPolicy, OpResult, OpState, Operation, OperationId, Worker,
};
use crate::rejection::Rejection;
use crate::reservations::{format_time_ms, DECOMMISSION_KEY_PREFIX};
use crate::state::State;
use crate::wait::wait_ended;
use sweep::{apply_sweep, deregister, Sweep};

mod submit;
mod sweep;
mod target;

use submit::{decommission, submit, Submit};

/// Applies one operation or worker command (`Command::Operations`).
pub(crate) fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &OperationCommand,
    out: &mut Effects,
) -> Response {
    let before = (out.events.len(), out.lock_events.len(), out.op_events.len());
    let result = match cmd {
        OperationCommand::RegisterWorker {
            worker,
            handles,
            capacity,
            ttl_ms,
            limits,
        } => register(state, worker, handles, (*capacity, *ttl_ms), limits),
        OperationCommand::Heartbeat { worker } => heartbeat(state, worker),
        OperationCommand::DeregisterWorker { worker, limits } => {
            deregister(state, ctx, worker, limits, out)
        }
        OperationCommand::Submit {
            target,
            verb,
            params,
            idempotency_key,
            create,
            policy,
            limits,
        } => {
            let req = Submit {
                target,
                verb,
                params,
                idempotency_key: idempotency_key.as_deref(),
                create: create.as_ref(),
                policy,
                limits,
                decommission: false,
            };
            submit(state, ctx, &req, out)
        }
        OperationCommand::Assign {
            id,
            worker,
            lock_limits,
        } => assign(state, ctx, *id, worker, lock_limits, out),
        OperationCommand::Report {
            id,
            worker,
            attempt,
            epoch,
            report,
            limits,
        } => {
            let req = Report {
                id: *id,
                worker,
                attempt: *attempt,
                epoch: *epoch,
                report,
                limits,
            };
            apply_report(state, ctx, &req, out)
        }
        OperationCommand::Abort { id, limits } => abort(state, ctx, *id, limits, out),
        OperationCommand::Sweep {
            workers,
            operations,
            grace_ms,
            limits,
        } => {
            let sweep = Sweep {
                workers,
                operations,
                grace_ms: *grace_ms,
                limits,
            };
            apply_sweep(state, ctx, &sweep, out)
        }
    };
    settle(state, result, before, out)
}

/// Applies one reservation command (`Command::Reservations`): a decommission is an operation
/// submitted with the reservation's mark, in one step.
pub(crate) fn apply_reservation(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &ReservationCommand,
    out: &mut Effects,
) -> Response {
    let before = (out.events.len(), out.lock_events.len(), out.op_events.len());
    let result = match cmd {
        ReservationCommand::Decommission {
            target,
            verb,
            policy,
            limits,
        } => decommission(state, ctx, target, (verb, policy), limits, out),
    };
    settle(state, result, before, out)
}

/// The response for `result`, after checking (debug builds) that a success left the changed
/// operations consistent and a rejection had no effect.
fn settle(
    state: &State,
    result: Result<Response, Rejection>,
    before: (usize, usize, usize),
    out: &Effects,
) -> Response {
    match result {
        Ok(response) => {
            debug_assert_eq!(check_changed(state, &out.op_events[before.2..]), Ok(()));
            response
        }
        Err(rejection) => {
            let after = (out.events.len(), out.lock_events.len(), out.op_events.len());
            debug_assert_eq!(after, before, "a rejection had effects");
            Response::Rejected(rejection)
        }
    }
}

/// The invariants of every operation a command changed (the whole table is checked on restore
/// and by the property tests).
fn check_changed(state: &State, changed: &[OpEvent]) -> Result<(), String> {
    let ids = changed.iter().map(|e| e.operation.id);
    for op in ids.filter_map(|id| state.ops.get(id)) {
        check_operation(op, &state.locks)?;
    }
    Ok(())
}

fn register(
    state: &mut State,
    worker: &str,
    handles: &[Handle],
    (capacity, ttl_ms): (u32, u64),
    limits: &OpLimits,
) -> Result<Response, Rejection> {
    check_worker(worker)?;
    check_handles(handles, limits)?;
    check_worker_terms(capacity, ttl_ms, limits)?;
    let now = state.time_ms;
    let handles: BTreeSet<Handle> = handles.iter().cloned().collect();
    if state.ops.worker(worker).is_some() {
        let updated = state.ops.update_worker(worker, |w| {
            w.handles = handles;
            w.capacity = capacity;
            w.ttl_ms = ttl_ms;
            w.last_heartbeat_ms = now;
        });
        return updated
            .map(|worker| Response::Operations(OperationReply::Worker { worker }))
            .ok_or_else(|| not_registered(worker));
    }
    let count = state.ops.worker_count();
    if count >= usize_of(limits.workers_max) {
        let what = format!("{count} workers are registered and {worker} would be new");
        let max = limits.workers_max;
        return Err(at_limit("worker", what, "operations.workers_max", max));
    }
    let registered = Worker {
        id: worker.to_string(),
        handles,
        capacity,
        ttl_ms,
        registered_ms: now,
        last_heartbeat_ms: now,
        assigned: BTreeSet::new(),
    };
    state.ops.add_worker(registered.clone());
    Ok(Response::Operations(OperationReply::Worker {
        worker: registered,
    }))
}

fn heartbeat(state: &mut State, worker: &str) -> Result<Response, Rejection> {
    check_worker(worker)?;
    let now = state.time_ms;
    let updated = state
        .ops
        .update_worker(worker, |w| w.last_heartbeat_ms = now);
    updated
        .map(|worker| Response::Operations(OperationReply::Worker { worker }))
        .ok_or_else(|| not_registered(worker))
}

/// Assigns a queued operation to a worker: takes the target's lock under the worker (its token
/// is the epoch; a bare token when the operation locks nothing) and shows `in_progress`.
fn assign(
    state: &mut State,
    ctx: &ApplyContext,
    id: OperationId,
    worker_id: &str,
    lock_limits: &LockLimits,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    check_worker(worker_id)?;
    let op = operation(state, id)?;
    if op.state != OpState::Queued {
        return Err(wrong_state(op, "assign", "Queued"));
    }
    // Active operations of a target are in id order: the first is the oldest.
    if let Some(ahead) = state.ops.active_on(&op.target).next().filter(|&a| a != id) {
        let target = op.target.clone();
        return Err(Rejection::OperationBehind { id, target, ahead });
    }
    let now = state.time_ms;
    // Refused, not failed here: a refusal changes nothing, and ending the operation stays the
    // deadline sweep's (`pass_deadline`), which waits out the grace after a leader change.
    if let Some(at) = op.deadline_at_ms.filter(|&at| wait_ended(at, now)) {
        return Err(Rejection::OperationDeadlinePassed {
            id,
            deadline_at_ms: at,
            now_ms: now,
        });
    }
    let worker = state
        .ops
        .worker(worker_id)
        .ok_or_else(|| not_registered(worker_id))?;
    let unfit = |reason: String| Rejection::WorkerUnfit {
        worker: worker_id.to_string(),
        id,
        reason,
    };
    if !worker.is_alive(now) {
        let at = worker.expires_at_ms();
        return Err(unfit(format!(
            "its heartbeat expired at {at} ms (now {now} ms)"
        )));
    }
    if !worker.handles(&op.target.kind, &op.verb) {
        let (kind, verb) = (&op.target.kind, &op.verb);
        return Err(unfit(format!("it does not handle {kind}:{verb}")));
    }
    if worker.room() == 0 {
        let n = worker.assigned.len();
        return Err(unfit(format!("it runs {n} operations, its capacity")));
    }
    let mut next = op.clone();
    next.assign(worker_id, 0, now);
    let write = target::prepare(state, &next, false)?;
    // The step's first change: the lock table's own rules may still refuse it.
    let lock_ctx = lock_context(state, ctx);
    let epoch = match &next.policy.lock {
        Some(lock) => {
            let holder = next.lock_holder().unwrap_or_default();
            let details = lock_details(&next);
            let grant = OperationGrant {
                name: &lock.name,
                holder: &holder,
                mode: lock.mode,
                details: &details,
                limits: *lock_limits,
                operation: id,
            };
            let locks = &mut state.locks;
            locks
                .acquire_for_operation(&lock_ctx, &grant, &mut out.lock_events)?
                .token
        }
        None => state.locks.issue_token()?,
    };
    next.epoch = epoch;
    target::write(state, ctx, write, &mut out.events);
    let stored = publish(state, next, out);
    Ok(Response::Operations(OperationReply::Operation {
        operation: stored,
    }))
}

/// A borrowed `Command::OpReport`.
struct Report<'a> {
    id: OperationId,
    worker: &'a str,
    attempt: u32,
    epoch: u64,
    report: &'a WorkerReport,
    limits: &'a OpLimits,
}

/// A worker's progress or result for its current assignment. A repeat of the report that ended
/// the operation is answered and changes nothing, so a worker may retry one.
fn apply_report(
    state: &mut State,
    ctx: &ApplyContext,
    req: &Report<'_>,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    check_worker(req.worker)?;
    check_report(req.report, req.limits)?;
    let op = operation(state, req.id)?;
    check_assignment(op, req)?;
    let now = state.time_ms;
    let mut next = op.clone();
    match (op.state, req.report) {
        (ended, report) if ended.is_final() => {
            if ended_by(op, report) || *report == WorkerReport::Started {
                return Ok(Response::Operations(OperationReply::Operation {
                    operation: op.clone(),
                }));
            }
            if ended == report.state() {
                // Ended so under this assignment, but not by this report: a sweep ended it
                // when its worker was presumed lost. Answering it as a repeat would tell the
                // worker its result counted (the simulator's seed 529).
                return Err(Rejection::StaleAssignment {
                    id: op.id,
                    worker: req.worker.to_string(),
                    attempt: req.attempt,
                    epoch: req.epoch,
                    reason: format!(
                        "the operation ended {ended} without this report ({})",
                        op.result
                            .as_ref()
                            .map_or("no result".to_string(), |r| match r {
                                OpResult::Response(v) => v.to_string(),
                                OpResult::Error(e) => e.clone(),
                            })
                    ),
                });
            }
            let action = format!("report {}", report.state());
            return Err(wrong_state(op, &action, ASSIGNED));
        }
        (OpState::Dispatched, WorkerReport::Started) => next.enter(OpState::InProgress, now),
        // A repeat, or a start that crossed the abort: nothing changes.
        (_, WorkerReport::Started) => {
            return Ok(Response::Operations(OperationReply::Operation {
                operation: op.clone(),
            }))
        }
        (_, WorkerReport::Succeeded { response }) => {
            let result = OpResult::Response(response.clone());
            next.end(OpState::Succeeded, Some(result), now);
        }
        (_, WorkerReport::Failed { error }) => {
            let result = OpResult::Error(error.clone());
            next.end(OpState::Failed, Some(result), now);
        }
        (OpState::Aborting, WorkerReport::Aborted) => next.end(OpState::Aborted, None, now),
        (_, WorkerReport::Aborted) => {
            return Err(wrong_state(
                op,
                "report Aborted",
                "Aborting (an abort was asked)",
            ));
        }
    }
    // A response must fit in the target; an error (bounded by operations.result_bytes_max) is
    // always taken, so a worker can end any operation it holds.
    let response = matches!(req.report, WorkerReport::Succeeded { .. });
    let write = target::prepare(state, &next, response)?;
    if next.state.is_final() {
        // The step's first change; it cannot be refused for an assignment that holds its lock.
        release(state, ctx, op_grant(op), out)?;
    }
    target::write(state, ctx, write, &mut out.events);
    let stored = publish(state, next, out);
    evict(state, req.limits);
    Ok(Response::Operations(OperationReply::Operation {
        operation: stored,
    }))
}

/// Abort: a queued operation ends `Aborted`; an assigned one becomes `Aborting` (keeping its
/// worker and lock) until its worker reports `Aborted`, or ends otherwise. Aborting an aborting
/// or aborted operation answers it unchanged.
fn abort(
    state: &mut State,
    ctx: &ApplyContext,
    id: OperationId,
    limits: &OpLimits,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    let op = operation(state, id)?;
    let now = state.time_ms;
    let mut next = op.clone();
    match op.state {
        OpState::Queued => next.end(OpState::Aborted, None, now),
        OpState::Dispatched | OpState::InProgress => next.enter(OpState::Aborting, now),
        OpState::Aborting | OpState::Aborted => {
            return Ok(Response::Operations(OperationReply::Operation {
                operation: op.clone(),
            }))
        }
        OpState::Succeeded | OpState::Failed => {
            return Err(wrong_state(op, "abort", "not ended"));
        }
    }
    let write = target::prepare(state, &next, false)?;
    target::write(state, ctx, write, &mut out.events);
    let stored = publish(state, next, out);
    evict(state, limits);
    Ok(Response::Operations(OperationReply::Operation {
        operation: stored,
    }))
}

/// The grant an assigned operation holds: (lock name, holder, token).
struct Grant {
    lock: String,
    holder: String,
    token: u64,
    operation: OperationId,
}

fn op_grant(op: &Operation) -> Option<Grant> {
    let lock = op.policy.lock.as_ref()?;
    Some(Grant {
        lock: lock.name.clone(),
        holder: op.lock_holder()?,
        token: op.epoch,
        operation: op.id,
    })
}

fn release(
    state: &mut State,
    ctx: &ApplyContext,
    grant: Option<Grant>,
    out: &mut Effects,
) -> Result<(), Rejection> {
    let Some(g) = grant else {
        return Ok(());
    };
    let lock_ctx = lock_context(state, ctx);
    let events = &mut out.lock_events;
    let locks = &mut state.locks;
    locks.release_for_operation(&lock_ctx, &g.lock, &g.holder, g.token, g.operation, events)
}

/// Stores the operation's new version and reports it; returns a copy for the response.
fn publish(state: &mut State, op: Operation, out: &mut Effects) -> Operation {
    let stored = state.ops.put(op);
    let copy = (*stored).clone();
    out.op_events.push(OpEvent { operation: stored });
    copy
}

fn evict(state: &mut State, limits: &OpLimits) {
    state.ops.evict_finished(usize_of(limits.finished_max));
}

fn lock_context(state: &State, ctx: &ApplyContext) -> LockContext {
    LockContext {
        now_ms: state.time_ms,
        log_index: ctx.log_index,
        term_started_ms: state.term_started_ms,
        revision: state.revision,
    }
}

/// `lockedResourceDetails` of an operation's grant, as Service Fabrik's DeploymentLock has them.
fn lock_details(op: &Operation) -> Value {
    json!({
        "resourceType": op.target.kind,
        "resourceNamespace": op.target.namespace,
        "resourceId": op.target.name,
        "operation": op.verb,
        "operationId": op.id.to_string(),
    })
}

const ASSIGNED: &str = "Dispatched, InProgress or Aborting";

/// Whether `report` is the one that ended `op` (so a repeat of it is answered, changing
/// nothing): an end in its state with its result. An Aborted report counts whenever the
/// operation ended aborted, since the worker was asked to stop.
fn ended_by(op: &Operation, report: &WorkerReport) -> bool {
    match report {
        WorkerReport::Started => false,
        WorkerReport::Succeeded { response } => {
            op.state == OpState::Succeeded
                && op.result.as_ref() == Some(&OpResult::Response(response.clone()))
        }
        WorkerReport::Failed { error } => {
            op.state == OpState::Failed
                && op.result.as_ref() == Some(&OpResult::Error(error.clone()))
        }
        WorkerReport::Aborted => op.state == OpState::Aborted,
    }
}

/// `StaleAssignment` unless the report names the operation's current (or, once it ended, last)
/// assignment.
fn check_assignment(op: &Operation, req: &Report<'_>) -> Result<(), Rejection> {
    let current = op.worker.as_deref() == Some(req.worker)
        && op.attempt == req.attempt
        && op.epoch == req.epoch;
    if current && op.state != OpState::Queued {
        return Ok(());
    }
    // DELIBERATE BUG (bugs.rs, test-only builds): an earlier assignment's end report is taken.
    if crate::bugs::active(crate::bugs::Bug::StaleReport)
        && op.state.is_assigned()
        && req.epoch < op.epoch
        && matches!(
            req.report,
            WorkerReport::Succeeded { .. } | WorkerReport::Failed { .. }
        )
    {
        return Ok(());
    }
    let (attempt, epoch) = (op.attempt, op.epoch);
    let reason = match (&op.worker, op.state) {
        (_, OpState::Queued) if epoch == 0 => "the operation has not been assigned yet".to_string(),
        (_, OpState::Queued) => {
            format!("the operation was taken back and waits for attempt {attempt}")
        }
        (Some(w), s) if s.is_final() => {
            format!("the operation ended {s} under attempt {attempt}, epoch {epoch} of {w}")
        }
        (Some(w), _) => {
            format!("the current assignment is attempt {attempt}, epoch {epoch} of {w}")
        }
        (None, s) => format!("the operation ended {s} without an assignment"),
    };
    Err(Rejection::StaleAssignment {
        id: op.id,
        worker: req.worker.to_string(),
        attempt: req.attempt,
        epoch: req.epoch,
        reason,
    })
}

fn operation(state: &State, id: OperationId) -> Result<&Operation, Rejection> {
    state.ops.get(id).ok_or(Rejection::OperationNotFound { id })
}

fn not_registered(worker: &str) -> Rejection {
    Rejection::WorkerNotFound {
        worker: worker.to_string(),
    }
}

fn wrong_state(op: &Operation, action: &str, allowed: &str) -> Rejection {
    Rejection::OperationState {
        id: op.id,
        state: op.state,
        action: action.to_string(),
        allowed: allowed.to_string(),
    }
}
