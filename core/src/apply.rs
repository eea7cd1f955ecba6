//! `apply_effects`, the only code that changes a `State` (`state.rs`): the cross-cutting guard
//! (time, term, auth revision, space, mirror objects) in front of each capability's apply.
//!
//! The Raft state machine calls `apply_effects` once per committed entry, in log order, on every
//! replica (and `apply_blank` for blank and membership entries); readers call `get`/`list`/`lock`
//! on the same `State`. Everything here is deterministic: no clock (time comes from the
//! leader-stamped `ApplyContext::time_ms`), no I/O, no randomness, no hash-order iteration. A
//! `Rejection` is an ordinary `Response`: it leaves objects, revision, retired set and locks
//! exactly as they were (the state's time and term tracking may still advance to the entry's,
//! which is harmless and keeps time monotone across every entry).

use std::sync::Arc;

use crate::command::{Command, Event, Rejection, Response, TxnOp};
use crate::deployments::DEPLOYMENT_KIND;
use crate::locks::{Fence, LockContext, LockEvent};
use crate::objects::apply::{apply_object_op, Change, ObjectOp};
use crate::objects::resource::ObjectKey;
use crate::operations::OpEvent;
use crate::pools::POOL_KIND;
use crate::state::State;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod read_tests;
#[cfg(test)]
mod tests;

pub use crate::snapshot::SNAPSHOT_FORMAT;

/// Most ops in one `Command::Txn` (etcd's default `--max-txn-ops`).
pub const TXN_OPS_MAX: usize = 128;

/// Where the entry being applied sits in the log, and the time its leader stamped on it.
#[derive(Clone, Copy, Debug)]
pub struct ApplyContext {
    /// Raft log index of the entry; feeds uids.
    pub log_index: u64,
    /// Raft term of the entry; feeds uids and the lock grace after a leader change.
    pub term: u64,
    /// Leader wall-clock time in ms since the Unix epoch (`Proposal::time_ms`).
    pub time_ms: u64,
}

/// What one or more applied entries did besides their `Response`: object changes for resource
/// watchers, lock changes for lock watchers and waiting acquires, and operation changes for
/// operation watchers and worker streams. Cleared by the caller.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    /// One per object change, in revision order.
    pub events: Vec<Event>,
    /// One per grant, release, expiry, cancelled or expired wait, in the order they happened.
    pub lock_events: Vec<LockEvent>,
    /// One per operation change, in the order they happened.
    pub op_events: Vec<OpEvent>,
    /// One per waiting pool acquire granted or removed.
    pub pool_events: Vec<crate::pools::PoolEvent>,
}

impl Effects {
    /// True when nothing happened.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
            && self.lock_events.is_empty()
            && self.op_events.is_empty()
            && self.pool_events.is_empty()
    }
}

/// Applies one committed command: THE entry that changes `State`. Pure: no clock, I/O or
/// randomness. Never panics on any `Command`. Pushes one `Event` per object change, in revision
/// order, and one `LockEvent` per lock change; a rejected command pushes none. Lock commands
/// never change the store revision.
pub fn apply_effects(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    out: &mut Effects,
) -> Response {
    if let Command::Guarded {
        auth_revision,
        command,
    } = cmd
    {
        if *auth_revision == state.auth.revision {
            return apply_effects(state, ctx, command, out);
        }
        advance_time(state, ctx);
        observe_term(state, ctx);
        start_term_clock(state, ctx);
        return Response::Rejected(Rejection::AuthChanged {
            authorized_at: *auth_revision,
            now: state.auth.revision,
        });
    }
    let revision_before = state.revision;
    let events_before = out.events.len();
    advance_time(state, ctx);
    observe_term(state, ctx);
    if let Some(rejection) = mirror_write(cmd).or(state.ensure_space_for(cmd).err()) {
        start_term_clock(state, ctx);
        return Response::Rejected(rejection);
    }
    let events = &mut out.events;
    let response = match cmd {
        Command::Create { object, fence } => {
            apply_single(state, ctx, fence, ObjectOp::Create(object), events)
        }
        Command::Update {
            object,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::Update(object, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        Command::UpdateStatus {
            object,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::UpdateStatus(object, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        Command::Delete {
            key,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::Delete(key, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        Command::Txn { ops, fence } => apply_txn(state, ctx, ops, fence, events),
        Command::RetireNode { node_id } => {
            state.retired.insert(*node_id);
            Response::Done {
                revision: state.revision,
            }
        }
        Command::LockAcquire { .. }
        | Command::LockRefresh { .. }
        | Command::LockRelease { .. }
        | Command::LockCancelWait { .. }
        | Command::LockSweep { .. } => {
            let lock_ctx = LockContext {
                now_ms: state.time_ms,
                log_index: ctx.log_index,
                term_started_ms: state.term_started_ms,
                revision: state.revision,
            };
            state
                .locks
                .apply_command(&lock_ctx, cmd, &mut out.lock_events)
        }
        Command::WorkerRegister { .. }
        | Command::WorkerHeartbeat { .. }
        | Command::WorkerDeregister { .. }
        | Command::OpSubmit { .. }
        | Command::OpAssign { .. }
        | Command::OpReport { .. }
        | Command::OpAbort { .. }
        | Command::OpSweep { .. }
        | Command::Decommission { .. } => {
            crate::operations::apply::apply_operations_command(state, ctx, cmd, out)
        }
        Command::Deployment {
            key,
            action,
            limits,
        } => crate::deployments::apply::apply_deployment(state, ctx, key, action, limits, events),
        Command::Pool { action, grace_ms } => crate::pools::apply::apply_pool(
            state,
            ctx,
            action,
            *grace_ms,
            events,
            &mut out.pool_events,
        ),
        Command::Auth { action } => Arc::make_mut(&mut state.auth).apply(action, state.time_ms),
        Command::Alarm { action } => state.alarms.apply(action, state.time_ms),
        Command::Guarded { .. } => unreachable!("unwrapped above"),
    };
    // After the command: a sweep that is itself the term's first stamped entry sees no start,
    // so it expires nothing whatever its grace.
    start_term_clock(state, ctx);
    debug_assert!(state.revision >= revision_before, "revision went backwards");
    debug_assert_eq!(
        out.events.len() - events_before,
        usize::try_from(state.revision - revision_before).unwrap_or(usize::MAX),
        "one event per revision"
    );
    response
}

/// The refusal of a resource write (or an operation) aimed at a deployment's mirror object: those
/// change only with their deployment (`Command::Deployment`), or mirror and table would part.
fn mirror_write(cmd: &Command) -> Option<Rejection> {
    let refuse = |key: &ObjectKey| {
        let api = match key.kind.as_str() {
            DEPLOYMENT_KIND => {
                "mirror deployments and change only through the StatusService API \
                                (steward deployment ...)"
            }
            POOL_KIND
            | crate::pools::POOL_CLAIM_KIND
            | crate::pools::VIRTUAL_CONFIG_KIND
            | crate::pools::DYNAMIC_KIND
            | crate::pools::CONSTRUCT_KIND => {
                "are leased and synced only through the LeaseService API (steward pool ...)"
            }
            _ => return None,
        };
        Some(Rejection::Invalid {
            field: "kind".to_string(),
            rule: format!(
                "{} objects {api}; {key} cannot be written directly",
                key.kind
            ),
        })
    };
    match cmd {
        Command::Create { object, .. }
        | Command::Update { object, .. }
        | Command::UpdateStatus { object, .. } => refuse(&object.key()),
        Command::Delete { key, .. } => refuse(key),
        // The leader's Mason task submits the construct operations on their objects.
        Command::OpSubmit { target: key, .. } if key.kind == crate::pools::CONSTRUCT_KIND => None,
        Command::OpSubmit { target: key, .. } => refuse(key),
        Command::Txn { ops, .. } => ops.iter().find_map(|op| refuse(&op.key())),
        _ => None,
    }
}

/// `apply_effects` for callers that only care about objects (resource-only tools and tests):
/// lock events are dropped. The Raft state machine must use `apply_effects`, or waiting
/// acquires and lock watchers would never hear of grants.
pub fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    cmd: &Command,
    events: &mut Vec<Event>,
) -> Response {
    let mut out = Effects {
        events: std::mem::take(events),
        ..Effects::default()
    };
    let response = apply_effects(state, ctx, cmd, &mut out);
    *events = out.events;
    response
}

/// Applies a blank or membership entry: only the time and the term advance (such entries carry
/// no leader time, so they never start the term's grace clock).
pub fn apply_blank(state: &mut State, ctx: &ApplyContext) {
    advance_time(state, ctx);
    observe_term(state, ctx);
}

fn advance_time(state: &mut State, ctx: &ApplyContext) {
    let before = state.time_ms;
    state.time_ms = state.time_ms.max(ctx.time_ms);
    debug_assert!(state.time_ms >= before, "time ran backwards");
}

/// A newer term resets the term's start (the new leader has not stamped anything yet).
fn observe_term(state: &mut State, ctx: &ApplyContext) {
    if ctx.term > state.term {
        state.term = ctx.term;
        state.term_started_ms = None;
    }
}

/// The first time-stamped entry of the current term starts its clock at the state time (not the
/// raw entry time: that may lag behind a previous leader's clock, and measuring the grace from
/// it would shorten the grace).
fn start_term_clock(state: &mut State, ctx: &ApplyContext) {
    if ctx.term == state.term && state.term_started_ms.is_none() {
        state.term_started_ms = Some(state.time_ms);
    }
}

/// One object op, after its fence (if any) holds.
fn apply_single(
    state: &mut State,
    ctx: &ApplyContext,
    fence: &Option<Fence>,
    op: ObjectOp<'_>,
    events: &mut Vec<Event>,
) -> Response {
    if let Err(rejection) = state.check_fence(fence.as_ref()) {
        return Response::Rejected(rejection);
    }
    match apply_object_op(state, ctx, op) {
        Ok(change) => {
            emit(events, &change);
            Response::Object {
                // The store and the event share the object; the reply takes its own copy.
                object: Arc::unwrap_or_clone(change.object),
                revision: state.revision,
            }
        }
        Err(rejection) => Response::Rejected(rejection),
    }
}

/// All ops or none, under one fence checked first. Ops change the live map and record undo
/// entries (previous values moved out of the map, so no copy of the store is made); a failure
/// replays them backwards.
fn apply_txn(
    state: &mut State,
    ctx: &ApplyContext,
    ops: &[TxnOp],
    fence: &Option<Fence>,
    events: &mut Vec<Event>,
) -> Response {
    if ops.is_empty() {
        return Response::Rejected(Rejection::Invalid {
            field: "ops".to_string(),
            rule: "at least one op".to_string(),
        });
    }
    if ops.len() > TXN_OPS_MAX {
        return Response::Rejected(Rejection::TooLarge {
            field: "ops".to_string(),
            rule: format!(
                "{} ops, more than the limit TXN_OPS_MAX = {TXN_OPS_MAX}",
                ops.len()
            ),
        });
    }
    if let Err(rejection) = state.check_fence(fence.as_ref()) {
        return Response::Rejected(rejection);
    }
    let revision_before = state.revision;
    let events_before = events.len();
    let mut undo = Vec::with_capacity(ops.len());
    let mut objects = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        match apply_object_op(state, ctx, op.into()) {
            Ok(change) => {
                emit(events, &change);
                undo.extend(change.undo);
                objects.push(Arc::unwrap_or_clone(change.object));
            }
            Err(cause) => {
                for (key, previous) in undo.into_iter().rev() {
                    match previous {
                        Some(object) => state.put_object(key, object),
                        None => state.remove_object(&key),
                    };
                }
                state.revision = revision_before;
                events.truncate(events_before);
                return Response::Rejected(Rejection::TxnOpFailed {
                    index,
                    cause: Box::new(cause),
                });
            }
        }
    }
    Response::Txn {
        objects,
        revision: state.revision,
    }
}

pub(crate) fn emit(events: &mut Vec<Event>, change: &Change) {
    if let Some(event_type) = change.event_type {
        events.push(Event {
            event_type,
            revision: change.object.metadata.resource_version,
            object: Arc::clone(&change.object),
        });
    }
}
