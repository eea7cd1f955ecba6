//! The four object ops (create, update, update-status, delete), shared by single commands and
//! txns. Each op runs every check before its first mutation, so an `Err` leaves the state as it
//! was, and each returns the undo record a txn needs to roll it back.

use crate::command::ObjectCommand;
use crate::command::ObjectReply;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use crate::command::{Event, EventType, Response};
use crate::effects::ApplyContext;
use crate::locks::Fence;
use crate::objects::command::{TxnOp, TXN_OPS_MAX};
use crate::objects::resource::{ObjectKey, ObjectMeta, Resource, Uid};
use crate::objects::validate::{validate_key, validate_object, validate_object_size};
use crate::rejection::Rejection;
use crate::reservations::{self, Reservation};
use crate::state::State;

/// A borrowed object op, shared by `Command` and `TxnOp`.
#[derive(Clone, Copy)]
pub(crate) enum ObjectOp<'a> {
    Create(&'a Resource),
    Update(&'a Resource, Option<u64>),
    UpdateStatus(&'a Resource, Option<u64>),
    Delete(&'a ObjectKey, Option<u64>),
}

impl<'a> From<&'a TxnOp> for ObjectOp<'a> {
    fn from(op: &'a TxnOp) -> ObjectOp<'a> {
        match op {
            TxnOp::Create { object } => ObjectOp::Create(object),
            TxnOp::Update {
                object,
                expected_revision,
            } => ObjectOp::Update(object, *expected_revision),
            TxnOp::UpdateStatus {
                object,
                expected_revision,
            } => ObjectOp::UpdateStatus(object, *expected_revision),
            TxnOp::Delete {
                key,
                expected_revision,
            } => ObjectOp::Delete(key, *expected_revision),
        }
    }
}

/// What one successful op did.
pub(crate) struct Change {
    /// The object as changed: the very `Arc` now in the store (or, for a delete, the removed
    /// object at its deletion revision), shared with the change's event so no object is held
    /// twice (the watch history keeps many events).
    pub(crate) object: Arc<Resource>,
    /// `None` for a no-op update: nothing changed, no revision, no event.
    pub(crate) event_type: Option<EventType>,
    /// How to put the map back: the key and its previous value (`None`: it was absent).
    pub(crate) undo: Option<(ObjectKey, Option<Arc<Resource>>)>,
}

/// Applies one op atomically: every check runs before the first mutation, so an `Err` leaves
/// the state untouched.
pub(crate) fn apply_object_op(
    state: &mut State,
    ctx: &ApplyContext,
    op: ObjectOp<'_>,
) -> Result<Change, Rejection> {
    match op {
        ObjectOp::Create(object) => create(state, ctx, object),
        ObjectOp::Update(object, expected) => update(state, object, expected),
        ObjectOp::UpdateStatus(object, expected) => update_status(state, object, expected),
        ObjectOp::Delete(key, expected) => delete(state, key, expected),
    }
}

fn create(state: &mut State, ctx: &ApplyContext, object: &Resource) -> Result<Change, Rejection> {
    validate_object(object)?;
    let key = object.key();
    if state.objects.contains_key(&key) {
        return Err(Rejection::AlreadyExists { key });
    }
    let revision = state.next_revision()?;
    let mut stored = object.clone();
    if let Some(given) = &object.reservation {
        let settled = reservations::settle(given, None, state.time_ms)?;
        stored.reservation = Some(Box::new(settled));
    }
    // Client-supplied bookkeeping is ignored, as in Kubernetes.
    stored.metadata.uid = uid(ctx, revision);
    stored.metadata.resource_version = revision;
    stored.metadata.generation = 1;
    stored.metadata.creation_timestamp = rfc3339_seconds(state.shown_ms).into();
    // DELIBERATE BUG (src/bugs.rs, test-only builds): answer "created" and store nothing. Keyed
    // on the log index so every replica drops the same creates and the bug stays invisible to
    // anything but a client that reads its acknowledged write back.
    if crate::bugs::active(crate::bugs::Bug::LostCreates) && ctx.log_index % 10 == 0 {
        return Ok(Change {
            object: Arc::new(stored),
            event_type: None,
            undo: None,
        });
    }
    Ok(commit(state, key, stored, EventType::Added))
}

fn update(
    state: &mut State,
    object: &Resource,
    expected: Option<u64>,
) -> Result<Change, Rejection> {
    validate_object(object)?;
    let key = object.key();
    let current = current(state, &key, expected)?;
    // Both specs are canonical text (`RawJson`), so unequal text means an unequal value.
    let spec_changed = current.spec != object.spec;
    let reservation = next_reservation(current, object)?;
    let meta = &object.metadata;
    if !spec_changed
        && current.reservation == reservation
        && current.api_version == object.api_version
        && current.metadata.labels == meta.labels
        && current.metadata.annotations == meta.annotations
    {
        return Ok(unchanged(current));
    }
    let revision = state.next_revision()?;
    let next = Resource {
        kind: current.kind.clone(),
        api_version: object.api_version.clone(),
        metadata: ObjectMeta {
            name: current.metadata.name.clone(),
            namespace: current.metadata.namespace.clone(),
            uid: current.metadata.uid.clone(),
            resource_version: revision,
            generation: current
                .metadata
                .generation
                .saturating_add(u64::from(spec_changed)),
            creation_timestamp: current.metadata.creation_timestamp.clone(),
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
        },
        spec: object.spec.clone(),
        status: current.status.clone(),
        reservation,
    };
    validate_object_size(&next)?;
    Ok(commit(state, key, next, EventType::Modified))
}

fn update_status(
    state: &mut State,
    object: &Resource,
    expected: Option<u64>,
) -> Result<Change, Rejection> {
    let key = object.key();
    validate_key(&key)?;
    let current = current(state, &key, expected)?;
    if current.status == object.status {
        return Ok(unchanged(current));
    }
    let revision = state.next_revision()?;
    let mut next = (**current).clone();
    next.metadata.resource_version = revision;
    next.status = object.status.clone();
    // Only status is new, so this checks its shape and the size of the result.
    validate_object(&next)?;
    Ok(commit(state, key, next, EventType::Modified))
}

fn delete(state: &mut State, key: &ObjectKey, expected: Option<u64>) -> Result<Change, Rejection> {
    validate_key(key)?;
    current(state, key, expected)?;
    let revision = state.next_revision()?;
    let Some(previous) = state.remove_object(key) else {
        return Err(Rejection::NotFound { key: key.clone() });
    };
    state.revision = revision;
    let mut deleted = (*previous).clone();
    deleted.metadata.resource_version = revision;
    Ok(Change {
        object: Arc::new(deleted),
        event_type: Some(EventType::Deleted),
        undo: Some((key.clone(), Some(previous))),
    })
}

/// The reservation an update stores: the client's, settled against the current one, or the
/// current one when the update carries none (an update that does not know about reservations
/// must not drop one; only deleting the object ends a reservation early, or `toDelete`).
fn next_reservation(
    current: &Resource,
    object: &Resource,
) -> Result<Option<Box<Reservation>>, Rejection> {
    let Some(given) = &object.reservation else {
        return Ok(current.reservation.clone());
    };
    let created_ms = match current.reservation.as_deref() {
        // The cluster time the current end was computed from, so an update keeps it exact.
        Some(Reservation {
            expires_at: Some(end),
            duration_seconds: Some(seconds),
            ..
        }) => end.saturating_sub(seconds.saturating_mul(1000)),
        // A shown time, never behind the cluster time it was shown at (`State::shown_ms`): an
        // end computed from it is never early, at worst late by what the display was ahead.
        _ => created_ms(current)?,
    };
    let settled = reservations::settle(given, current.reservation.as_deref(), created_ms)?;
    Ok(Some(Box::new(settled)))
}

/// The latest time the object's `creationTimestamp` (whole seconds) may stand for: an end
/// counted from it is never early.
fn created_ms(object: &Resource) -> Result<u64, Rejection> {
    let text = &object.metadata.creation_timestamp;
    let time = humantime::parse_rfc3339(text).map_err(|e| Rejection::Invalid {
        field: "metadata.creationTimestamp".to_string(),
        rule: format!("stored value {text:?} is not an RFC 3339 time: {e}"),
    })?;
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
    Ok(ms.saturating_add(999))
}

/// The stored object, if it exists and (when `expected` is given) has that resourceVersion.
fn current<'s>(
    state: &'s State,
    key: &ObjectKey,
    expected: Option<u64>,
) -> Result<&'s Arc<Resource>, Rejection> {
    let current = state
        .objects
        .get(key)
        .ok_or_else(|| Rejection::NotFound { key: key.clone() })?;
    let actual = current.metadata.resource_version;
    match expected {
        Some(expected) if expected != actual => Err(Rejection::Conflict {
            key: key.clone(),
            expected,
            actual,
        }),
        _ => Ok(current),
    }
}

/// Stores `next` in place of the object under its key, which must exist (for writers that build
/// the whole object, like pools): one revision, one event; uid and creation time kept,
/// generation bumped when the spec changed.
pub(crate) fn replace(state: &mut State, mut next: Resource) -> Result<Change, Rejection> {
    let key = next.key();
    let current = Arc::clone(current(state, &key, None)?);
    validate_object(&next)?;
    let revision = state.next_revision()?;
    let spec_changed = current.spec != next.spec;
    next.metadata.uid = current.metadata.uid.clone();
    next.metadata.creation_timestamp = current.metadata.creation_timestamp.clone();
    next.metadata.generation = current
        .metadata
        .generation
        .saturating_add(u64::from(spec_changed));
    next.metadata.resource_version = revision;
    Ok(commit(state, key, next, EventType::Modified))
}

fn unchanged(current: &Arc<Resource>) -> Change {
    Change {
        object: Arc::clone(current),
        event_type: None,
        undo: None,
    }
}

/// Stores `object` (whose resourceVersion is the next revision) and advances the revision.
pub(crate) fn commit(
    state: &mut State,
    key: ObjectKey,
    object: Resource,
    event_type: EventType,
) -> Change {
    debug_assert_eq!(object.metadata.resource_version, state.revision + 1);
    state.revision = object.metadata.resource_version;
    let object = Arc::new(object);
    let previous = state.put_object(Arc::clone(&object));
    Change {
        object,
        event_type: Some(event_type),
        undo: Some((key, previous)),
    }
}

/// A UUID-shaped id from the log position and the revision. Unique because the revision (all 64
/// bits of it, in the last two groups) is unique per change; the log position makes ids from
/// different stores unlikely to collide.
pub(crate) fn uid(ctx: &ApplyContext, revision: u64) -> Uid {
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(&((ctx.log_index & 0xffff_ffff) as u32).to_be_bytes());
    bytes[4..6].copy_from_slice(&((ctx.term & 0xffff) as u16).to_be_bytes());
    bytes[6..8].copy_from_slice(&(((ctx.log_index >> 32) & 0xffff) as u16).to_be_bytes());
    bytes[8..].copy_from_slice(&revision.to_be_bytes());
    Uid::from_bytes(bytes)
}

/// `2018-07-25T11:29:01Z`. Clamped to 9999-12-31T23:59:59Z, the last second humantime can print
/// (beyond it its formatter errors, which would panic in `to_string`).
fn rfc3339_seconds(time_ms: u64) -> String {
    const SECS_MAX: u64 = 253_402_300_799;
    let secs = (time_ms / 1000).min(SECS_MAX);
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// Applies one object command (`Command::Objects`): a single op under its fence, or a txn.
pub(crate) fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    command: &ObjectCommand,
    events: &mut Vec<Event>,
) -> Response {
    match command {
        ObjectCommand::Create { object, fence } => {
            apply_single(state, ctx, fence, ObjectOp::Create(object), events)
        }
        ObjectCommand::Update {
            object,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::Update(object, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        ObjectCommand::UpdateStatus {
            object,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::UpdateStatus(object, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        ObjectCommand::Delete {
            key,
            expected_revision,
            fence,
        } => {
            let op = ObjectOp::Delete(key, *expected_revision);
            apply_single(state, ctx, fence, op, events)
        }
        ObjectCommand::Txn { ops, fence } => apply_txn(state, ctx, ops, fence, events),
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
            Response::Objects(ObjectReply::Object {
                // The store and the event share the object; the reply takes its own copy.
                object: Arc::unwrap_or_clone(change.object),
                revision: state.revision,
            })
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
                        Some(object) => state.put_object(object),
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
    Response::Objects(ObjectReply::Txn {
        objects,
        revision: state.revision,
    })
}

/// The event of `change`, if it changed anything; its `prev` is the undo record's previous
/// object, which every op that changes something keeps (`commit`, `delete`).
pub(crate) fn emit(events: &mut Vec<Event>, change: &Change) {
    if let Some(event_type) = change.event_type {
        let prev = change
            .undo
            .as_ref()
            .and_then(|(_, previous)| previous.clone());
        events.push(Event {
            event_type,
            revision: change.object.metadata.resource_version,
            object: Arc::clone(&change.object),
            prev,
        });
    }
}
