//! The steps that take work back: a sweep (workers past their TTL, operations past their
//! deadline) and a worker's deregistration. They refuse nothing once their input is checked; each
//! assignment is taken back in its own small step (operation, lock release, target) of the same
//! kind as every other.

use super::target::{self, TargetWrite};
use super::{evict, not_registered, op_grant, publish, release};
use crate::command::OperationReply;
use crate::command::Response;
use crate::effects::{ApplyContext, Effects};
use crate::operations::{
    check_sweep, check_worker, OpLimits, OpResult, OpState, OpTally, Operation, OperationId,
};
use crate::rejection::Rejection;
use crate::state::State;
use crate::wait::wait_ended;

/// The worker leaves: its work is taken back (as if it had died, without waiting for a grace)
/// and it is removed.
pub(super) fn deregister(
    state: &mut State,
    ctx: &ApplyContext,
    worker: &str,
    limits: &OpLimits,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    check_worker(worker)?;
    if state.ops.worker(worker).is_none() {
        return Err(not_registered(worker));
    }
    let mut tally = OpTally::default();
    let reason = format!("worker {worker} deregistered");
    remove_worker(state, ctx, worker, &reason, &mut tally, out);
    evict(state, limits);
    Ok(Response::Operations(OperationReply::WorkerDeregistered {
        tally,
    }))
}

/// A borrowed `Command::OpSweep`.
pub(super) struct Sweep<'a> {
    pub(super) workers: &'a [String],
    pub(super) operations: &'a [OperationId],
    pub(super) grace_ms: u64,
    pub(super) limits: &'a OpLimits,
}

/// Removes the named workers that are past their TTL, taking their work back, and acts on the
/// named operations past their deadline; nothing at all until `grace_ms` after the current
/// term's first stamped entry.
pub(super) fn apply_sweep(
    state: &mut State,
    ctx: &ApplyContext,
    sweep: &Sweep<'_>,
    out: &mut Effects,
) -> Result<Response, Rejection> {
    check_sweep(sweep.workers, sweep.operations)?;
    let now = state.time_ms;
    let past_grace = state
        .term_started_ms
        .is_some_and(|started| now >= started.saturating_add(sweep.grace_ms));
    let mut tally = OpTally::default();
    if !past_grace {
        return Ok(Response::Operations(OperationReply::Swept { tally }));
    }
    for worker in sweep.workers {
        let Some(expired) = state.ops.worker(worker).map(|w| w.expires_at_ms()) else {
            continue;
        };
        if expired <= now {
            let reason = format!("worker {worker} stopped heartbeating (expired at {expired} ms)");
            remove_worker(state, ctx, worker, &reason, &mut tally, out);
        }
    }
    for &id in sweep.operations {
        pass_deadline(state, ctx, id, &mut tally, out);
    }
    evict(state, sweep.limits);
    Ok(Response::Operations(OperationReply::Swept { tally }))
}

/// Takes every assignment of `worker` back, then removes it.
fn remove_worker(
    state: &mut State,
    ctx: &ApplyContext,
    worker: &str,
    reason: &str,
    tally: &mut OpTally,
    out: &mut Effects,
) {
    let assigned = state.ops.worker(worker).map(|w| w.assigned.clone());
    for id in assigned.unwrap_or_default() {
        take_back(state, ctx, id, reason, tally, out);
    }
    if state.ops.remove_worker(worker).is_some() {
        tally.workers_removed += 1;
    }
}

/// An assignment whose worker is gone: back to `Queued` for the next attempt, or `Failed` after
/// the last one; an aborting operation ends `Aborted`. Its lock is released in the same step.
fn take_back(
    state: &mut State,
    ctx: &ApplyContext,
    id: OperationId,
    reason: &str,
    tally: &mut OpTally,
    out: &mut Effects,
) {
    let Some(op) = state.ops.get(id) else {
        return;
    };
    let now = state.time_ms;
    let grant = op_grant(op);
    let mut next = op.clone();
    if op.state == OpState::Aborting {
        let result = op
            .result
            .is_none()
            .then(|| OpResult::Error(format!("{reason} while aborting")));
        next.end(OpState::Aborted, result, now);
        tally.aborted += 1;
    } else if op.attempt >= op.policy.max_attempts {
        let (attempt, max) = (op.attempt, op.policy.max_attempts);
        let error = format!("{reason}; that was attempt {attempt} of {max}");
        next.end(OpState::Failed, Some(OpResult::Error(error)), now);
        tally.failed += 1;
    } else {
        next.requeue(now);
        tally.requeued += 1;
    }
    let released = release(state, ctx, grant, out);
    debug_assert_eq!(released, Ok(()), "{id}: an assignment without its grant");
    system_step(state, ctx, next, out);
}

/// An operation past its deadline: a queued one fails; an assigned one becomes `Aborting` (its
/// worker must stop before the lock can go to anyone else), the deadline recorded as its error.
fn pass_deadline(
    state: &mut State,
    ctx: &ApplyContext,
    id: OperationId,
    tally: &mut OpTally,
    out: &mut Effects,
) {
    let now = state.time_ms;
    let Some(op) = state.ops.get(id) else {
        return;
    };
    let Some(at) = op.deadline_at_ms.filter(|&at| wait_ended(at, now)) else {
        return;
    };
    let deadline = op.policy.deadline_ms.unwrap_or_default();
    let mut next = op.clone();
    match op.state {
        OpState::Queued => {
            let error =
                format!("its deadline of {deadline} ms passed at {at} ms before a worker took it");
            next.end(OpState::Failed, Some(OpResult::Error(error)), now);
            tally.failed += 1;
        }
        OpState::Dispatched | OpState::InProgress => {
            let error = format!("its deadline of {deadline} ms passed at {at} ms while it ran");
            next.result = Some(OpResult::Error(error));
            next.enter(OpState::Aborting, now);
            tally.aborting += 1;
        }
        _ => return,
    }
    system_step(state, ctx, next, out);
}

/// Stores a change steward made on its own (a sweep's or a deregistration's) and shows it on
/// the target. Nothing here is refused: the target write carries only steward's small
/// bookkeeping, and only an exhausted revision counter could stop it (then the operation still
/// moves, since its lock has already been released).
fn system_step(state: &mut State, ctx: &ApplyContext, next: Operation, out: &mut Effects) {
    let write = target::prepare(state, &next, false).unwrap_or(TargetWrite::Nothing);
    target::write(state, ctx, write, &mut out.events);
    publish(state, next, out);
}
