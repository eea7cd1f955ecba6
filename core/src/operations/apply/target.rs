//! How an operation shows on its target resource, in the words of Service Fabrik's resources:
//! `status.state` and the `state` label (`in_queue`, `in_progress`, `succeeded`, `failed`,
//! `aborting`, `aborted`; see `OpState::resource_state`), `status.lastOperation` (the verb),
//! `status.operation` (its id), and once it ended `status.response` or `status.error`. Other
//! status fields and labels are the owner's and are kept.
//!
//! A write is prepared (every check, the next revision) before the step's first change and
//! written after it, as one `Event` like any other object change. An operation writes only the
//! object it was submitted for: if the target was deleted, or deleted and created again (another
//! uid), nothing is written. A successful operation whose policy `deletes_target` deletes it.

use serde_json::Value;

use crate::command::{Event, EventType};
use crate::effects::ApplyContext;
use crate::objects::apply::{apply_object_op, commit, emit, ObjectOp};
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::validate::validate_object_size;
use crate::operations::{OpResult, OpState, Operation, OperationId};
use crate::rejection::Rejection;
use crate::state::State;

/// The label that carries the lifecycle state, as in Service Fabrik's resources.
pub(crate) const STATE_LABEL: &str = "state";

/// What one step of an operation does to its target.
#[derive(Debug)]
pub(super) enum TargetWrite {
    /// Gone, another object now, or already showing it.
    Nothing,
    /// The next version; its resourceVersion is the next revision.
    Put(Resource),
    /// A successful operation that deletes its target.
    Delete(ObjectKey),
}

/// Marks the reservation of the next version with its decommission `id` (a write that puts an
/// object with a reservation; `Nothing` and `Delete` stay as they are).
pub(super) fn mark_decommission(write: &mut TargetWrite, id: OperationId) {
    if let TargetWrite::Put(object) = write {
        if let Some(reservation) = object.reservation.as_deref_mut() {
            reservation.decommission = Some(id);
        }
    }
}

/// Sets the lifecycle fields of `object` from `op`.
pub(super) fn show(object: &mut Resource, op: &Operation) {
    let shown = op.state.resource_state();
    let labels = &mut object.metadata.labels;
    labels.insert(STATE_LABEL.to_string(), shown.to_string());
    if !object.status.is_object() {
        object.status = Value::Object(serde_json::Map::new());
    }
    let Some(status) = object.status.as_object_mut() else {
        return;
    };
    status.insert("state".to_string(), shown.into());
    status.insert("lastOperation".to_string(), op.verb.clone().into());
    status.insert("operation".to_string(), op.id.to_string().into());
    status.remove("response");
    status.remove("error");
    match (&op.result, op.state.is_final()) {
        (Some(OpResult::Response(response)), true) => {
            status.insert("response".to_string(), response.clone());
        }
        (Some(OpResult::Error(error)), true) => {
            status.insert("error".to_string(), error.clone().into());
        }
        _ => {}
    }
}

/// The target write for `op` (as it is after the step). `checked`: the step carries a worker's
/// response, and the target must stay within `OBJECT_BYTES_MAX` with it. Everything else is held
/// only to its own limit: steward's bookkeeping is a few short strings and an error is at most
/// `operations.result_bytes_max`, so an object may pass `OBJECT_BYTES_MAX` by that much rather
/// than an operation be unable to end (a worker could not fail it, a sweep could not take it back).
pub(super) fn prepare(
    state: &State,
    op: &Operation,
    checked: bool,
) -> Result<TargetWrite, Rejection> {
    let Some(current) = state.objects.get(&op.target) else {
        return Ok(TargetWrite::Nothing);
    };
    if current.metadata.uid != op.target_uid {
        return Ok(TargetWrite::Nothing);
    }
    if op.state == OpState::Succeeded && op.policy.deletes_target {
        state.next_revision()?;
        return Ok(TargetWrite::Delete(op.target.clone()));
    }
    let mut next = (**current).clone();
    show(&mut next, op);
    if next == **current {
        return Ok(TargetWrite::Nothing);
    }
    if checked {
        validate_object_size(&next).map_err(|r| too_large_with(r, &op.target))?;
    }
    next.metadata.resource_version = state.next_revision()?;
    Ok(TargetWrite::Put(next))
}

/// Writes what `prepare` returned, with its `Event`. Cannot fail: `prepare` checked it and
/// nothing that changes objects or the revision ran in between.
pub(super) fn write(
    state: &mut State,
    ctx: &ApplyContext,
    write: TargetWrite,
    events: &mut Vec<Event>,
) {
    let change = match write {
        TargetWrite::Nothing => return,
        TargetWrite::Put(object) => commit(state, object.key(), object, EventType::Modified),
        TargetWrite::Delete(key) => match apply_object_op(state, ctx, ObjectOp::Delete(&key, None))
        {
            Ok(change) => change,
            Err(rejection) => {
                debug_assert!(false, "a prepared delete of {key} failed: {rejection}");
                return;
            }
        },
    };
    emit(events, &change);
}

/// A worker's response or error that would take the target past the object size limit.
fn too_large_with(rejection: Rejection, target: &ObjectKey) -> Rejection {
    match rejection {
        Rejection::TooLarge { rule, .. } => Rejection::TooLarge {
            field: "report".to_string(),
            rule: format!("with it, target {target} would be {rule}"),
        },
        other => other,
    }
}
