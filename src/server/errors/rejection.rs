//! The state machine's refusals (`Rejection`) as statuses, one arm per rule, and a refusal
//! inside a transaction naming the operation that caused it.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;

use super::{reason_for_code, reason_name, Refusal};
use crate::proto::v1::ErrorReason;
use crate::state::Rejection;
use crate::wire::ERROR_DOMAIN;

/// Maps a domain rejection to its gRPC status; the message names the field and the rule.
pub fn rejection(r: &Rejection) -> Status {
    rejection_refusal(r).status()
}

/// The code, reason and metadata of each rejection kind (exhaustive: a new kind does not compile
/// without its row).
fn rejection_refusal(r: &Rejection) -> Refusal {
    use ErrorReason as R;
    let new = |code, reason| Refusal::new(code, reason, r.to_string());
    match r {
        Rejection::AlreadyExists { key } => new(Code::AlreadyExists, R::AlreadyExists)
            .meta("resource_type", "object")
            .meta("name", key),
        Rejection::NotFound { key } => new(Code::NotFound, R::NotFound)
            .meta("resource_type", "object")
            .meta("name", key),
        Rejection::Conflict {
            key,
            expected,
            actual,
        } => new(Code::Aborted, R::RevisionConflict)
            .meta("key", key)
            .meta("expected_revision", expected)
            .meta("current_revision", actual),
        Rejection::Invalid { field, .. } => {
            new(Code::InvalidArgument, R::InvalidArgument).meta("field", field)
        }
        Rejection::TooLarge { field, rule } => {
            let refusal = new(Code::ResourceExhausted, R::LimitExceeded).meta("field", field);
            match limit_named_in(rule) {
                Some(limit) => refusal.meta("limit", limit),
                None => refusal,
            }
        }
        Rejection::TxnOpFailed { index, cause } => {
            let inner = rejection_refusal(cause);
            Refusal {
                message: r.to_string(),
                ..inner
            }
            .meta("op_index", index)
        }
        Rejection::NodeRetired { node_id } => {
            new(Code::FailedPrecondition, R::NodeRetired).meta("node_id", node_id)
        }
        Rejection::LockBusy {
            name,
            holders,
            waiters,
            ..
        } => new(Code::Aborted, R::LockBusy)
            .meta("lock", name)
            .meta("holders", holders)
            .meta("waiters", waiters),
        Rejection::LockDelayed {
            name,
            until_ms,
            remaining_ms,
        } => new(Code::Aborted, R::LockDelayed)
            .meta("lock", name)
            .meta("until_ms", until_ms)
            .retry_after(Duration::from_millis(*remaining_ms)),
        Rejection::LockNotHeld {
            name,
            holder,
            token,
        } => new(Code::FailedPrecondition, R::LockNotHeld)
            .meta("lock", name)
            .meta("holder", holder)
            .meta("token", token),
        Rejection::FenceRejected { lock, token, .. } => {
            new(Code::FailedPrecondition, R::FenceRejected)
                .meta("lock", lock)
                .meta("token", token)
        }
        Rejection::LockOwnedByOperation {
            name,
            holder,
            operation,
        } => new(Code::FailedPrecondition, R::LockOwnedByOperation)
            .meta("lock", name)
            .meta("holder", holder)
            .meta("operation", operation),
        Rejection::ReservationNotDue { key, .. } => {
            new(Code::FailedPrecondition, R::ReservationNotDue).meta("key", key)
        }
        Rejection::PoolEmpty { rtype, state } => new(Code::NotFound, R::PoolEmpty)
            .meta("type", rtype)
            .meta("state", state),
        Rejection::PoolNotOwner { name, owner, .. } => {
            new(Code::FailedPrecondition, R::PoolNotOwner)
                .meta("name", name)
                .meta("owner", owner)
        }
        Rejection::PoolState { name, .. } => {
            new(Code::FailedPrecondition, R::PoolState).meta("name", name)
        }
        Rejection::DeploymentState { key, .. } => {
            new(Code::FailedPrecondition, R::DeploymentState).meta("key", key)
        }
        Rejection::DeploymentResourceNotFound { key, what } => new(Code::NotFound, R::NotFound)
            .meta("resource_type", "deployment_resource")
            .meta("name", format!("{key}: {what}")),
        Rejection::OperationNotFound { id } => new(Code::NotFound, R::NotFound)
            .meta("resource_type", "operation")
            .meta("name", id),
        Rejection::WorkerNotFound { worker } => new(Code::NotFound, R::NotFound)
            .meta("resource_type", "worker")
            .meta("name", worker),
        Rejection::OperationState { id, state, .. } => {
            new(Code::FailedPrecondition, R::OperationState)
                .meta("operation", id)
                .meta("state", state)
        }
        Rejection::OperationBehind { id, target, ahead } => {
            new(Code::FailedPrecondition, R::OperationBehind)
                .meta("operation", id)
                .meta("target", target)
                .meta("ahead", ahead)
        }
        Rejection::OperationDeadlinePassed {
            id, deadline_at_ms, ..
        } => new(Code::FailedPrecondition, R::OperationDeadlinePassed)
            .meta("operation", id)
            .meta("deadline_at_ms", deadline_at_ms),
        Rejection::WorkerUnfit { worker, id, .. } => new(Code::FailedPrecondition, R::WorkerUnfit)
            .meta("worker", worker)
            .meta("operation", id),
        // A sequencer (epoch) check failed: the worker lost its assignment and must stop, not
        // retry (gRPC's own example of Aborted).
        Rejection::StaleAssignment {
            id,
            worker,
            attempt,
            epoch,
            ..
        } => new(Code::Aborted, R::StaleAssignment)
            .meta("operation", id)
            .meta("worker", worker)
            .meta("attempt", attempt)
            .meta("epoch", epoch),
        Rejection::UserNotFound { name } => new(Code::NotFound, R::NotFound)
            .meta("resource_type", "user")
            .meta("name", name),
        Rejection::UserExists { name } => new(Code::AlreadyExists, R::AlreadyExists)
            .meta("resource_type", "user")
            .meta("name", name),
        Rejection::AuthState { .. } => new(Code::FailedPrecondition, R::AuthState),
        // Nothing was applied: the client may send it again, and is re-authorized.
        Rejection::AuthChanged { authorized_at, now } => new(Code::Aborted, R::AuthChanged)
            .meta("authorized_at", authorized_at)
            .meta("auth_revision", now),
        // Only a leader's sweeper proposes expiries; it sweeps again with its own clock.
        Rejection::NotStamped { term } => new(Code::Aborted, R::NotApplied).meta("term", term),
        Rejection::NoSpace { alarm } => {
            new(Code::ResourceExhausted, R::NoSpace).meta("alarm", alarm)
        }
        // etcd's API answers these itself (server/etcd.rs); here for completeness.
        Rejection::Kv(error) => {
            use crate::state::kv::KvError;
            match error {
                KvError::Compacted => new(Code::OutOfRange, R::RevisionCompacted),
                KvError::FutureRevision => new(Code::OutOfRange, R::InvalidArgument),
                KvError::LeaseNotFound => new(Code::NotFound, R::NotFound),
                KvError::LeaseExists => new(Code::FailedPrecondition, R::AlreadyExists),
                KvError::LeaseTtlTooLarge => new(Code::OutOfRange, R::LimitExceeded),
                KvError::EmptyKey
                | KvError::KeyNotFound
                | KvError::ValueProvided
                | KvError::LeaseProvided
                | KvError::TooManyOps
                | KvError::DuplicateKey
                | KvError::InvalidSortOption => new(Code::InvalidArgument, R::InvalidArgument),
            }
        }
    }
}

/// The refusal of op `index` of a txn: its message and its `field` metadata are prefixed with
/// `ops[index]`, and `op_index` names the op; code, reason, RetryInfo and trailers stay.
pub fn txn_op(index: usize, status: Status) -> Status {
    let prefix = format!("ops[{index}]");
    let mut details = status.get_error_details();
    let (reason, domain, mut info) = match details.error_info() {
        Some(i) => (i.reason.clone(), i.domain.clone(), i.metadata.clone()),
        None => (
            reason_name(reason_for_code(status.code())).to_string(),
            ERROR_DOMAIN.to_string(),
            HashMap::new(),
        ),
    };
    if let Some(field) = info.get_mut("field") {
        *field = format!("{prefix}.{field}");
    }
    info.insert("op_index".to_string(), index.to_string());
    details.set_error_info(reason, domain, info);
    let mut metadata = status.metadata().clone();
    metadata.remove("grpc-status-details-bin");
    Status::with_error_details_and_metadata(
        status.code(),
        format!("{prefix}: {}", status.message()),
        details,
        metadata,
    )
}

/// The config key a rule's text names (`limits.x`, `locks.x`, ...), if any: the rules of
/// `TooLarge` are written "... over limits.object_bytes_max = N".
fn limit_named_in(rule: &str) -> Option<&str> {
    rule.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .find(|word| {
            ["limits.", "locks.", "status.", "pools."]
                .iter()
                .any(|p| word.starts_with(p) && word.len() > p.len())
        })
        .map(|w| w.trim_end_matches('.'))
}
