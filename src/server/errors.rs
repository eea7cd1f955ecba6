//! The one error table: every domain rejection and Raft error becomes a gRPC status here.
//!
//! Handlers never build statuses for these cases themselves. Unavailable statuses carry the
//! leader's client address (when known) in the `x-steward-leader` metadata entry.

use tonic::{Code, Status};

use crate::raft::types::{ClientWriteError, ForwardToLeader, NodeAddr, RaftError};
use crate::state::Rejection;

/// Metadata key of the leader hint on Unavailable statuses.
pub const LEADER_HINT: &str = "x-steward-leader";

/// Metadata key on an Unavailable write that was refused before any leader appended it (no
/// leader, or every leader tried said it was not one): it was not applied and never will be,
/// so a client may send it again.
pub const NOT_APPLIED: &str = "x-steward-not-applied";

/// Marks `status` as a write refused before it was appended (see `NOT_APPLIED`).
pub fn not_applied(mut status: Status) -> Status {
    status.metadata_mut().insert(
        NOT_APPLIED,
        tonic::metadata::MetadataValue::from_static("true"),
    );
    status
}

/// Maps a domain rejection to its gRPC status; the message names the field and the rule.
pub fn rejection(r: &Rejection) -> Status {
    let status = Status::new(rejection_code(r), r.to_string());
    match r {
        // Nothing was applied: the client may send it again, and is re-authorized.
        Rejection::AuthChanged { .. } => not_applied(status),
        _ => status,
    }
}

fn rejection_code(r: &Rejection) -> Code {
    match r {
        Rejection::AlreadyExists { .. } => Code::AlreadyExists,
        Rejection::NotFound { .. } => Code::NotFound,
        Rejection::Conflict { .. } => Code::Aborted,
        Rejection::Invalid { .. } => Code::InvalidArgument,
        Rejection::TooLarge { .. } => Code::ResourceExhausted,
        Rejection::TxnOpFailed { cause, .. } => rejection_code(cause),
        Rejection::NodeRetired { .. } => Code::FailedPrecondition,
        Rejection::LockBusy { .. } | Rejection::LockDelayed { .. } => Code::Aborted,
        Rejection::LockNotHeld { .. } | Rejection::FenceRejected { .. } => Code::FailedPrecondition,
        Rejection::LockOwnedByOperation { .. } => Code::FailedPrecondition,
        Rejection::OperationNotFound { .. }
        | Rejection::WorkerNotFound { .. }
        | Rejection::DeploymentResourceNotFound { .. }
        | Rejection::PoolEmpty { .. } => Code::NotFound,
        Rejection::OperationState { .. }
        | Rejection::OperationBehind { .. }
        | Rejection::OperationDeadlinePassed { .. }
        | Rejection::WorkerUnfit { .. }
        | Rejection::ReservationNotDue { .. }
        | Rejection::DeploymentState { .. }
        | Rejection::PoolNotOwner { .. }
        | Rejection::PoolState { .. } => Code::FailedPrecondition,
        // A sequencer (epoch) check failed: the worker lost its assignment and must stop, not
        // retry (gRPC's own example of Aborted).
        Rejection::StaleAssignment { .. } => Code::Aborted,
        Rejection::UserNotFound { .. } => Code::NotFound,
        Rejection::UserExists { .. } => Code::AlreadyExists,
        Rejection::AuthState { .. } => Code::FailedPrecondition,
        Rejection::AuthChanged { .. } => Code::Aborted,
        Rejection::NoSpace { .. } => Code::ResourceExhausted,
    }
}

/// Unavailable, with the leader's client address as a hint when known.
pub fn unavailable(message: impl Into<String>, leader: Option<&NodeAddr>) -> Status {
    let mut status = Status::unavailable(message);
    if let Some(addr) = leader {
        if let Ok(v) = addr.client_addr.parse() {
            status.metadata_mut().insert(LEADER_HINT, v);
        }
    }
    status
}

pub fn no_leader() -> Status {
    unavailable("no leader is elected at the moment; retry shortly", None)
}

pub fn forward_to_leader(f: &ForwardToLeader) -> Status {
    unavailable(
        format!("this node is not the leader (leader: {:?})", f.leader_id),
        f.leader_node.as_ref(),
    )
}

/// A write that failed inside Raft.
pub fn client_write(e: &RaftError<ClientWriteError>) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => forward_to_leader(f),
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => unavailable(
            format!(
                "leadership changed while the write was in flight; its outcome is unknown: {f}"
            ),
            f.leader_node.as_ref(),
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(m)) => {
            Status::failed_precondition(m.to_string())
        }
        RaftError::APIError(ClientWriteError::PreconditionFailed(p)) => {
            Status::failed_precondition(p.to_string())
        }
        RaftError::Fatal(f) => Status::unavailable(format!("this node's Raft has stopped: {f}")),
    }
}

/// A failure of this node's storage or Raft core: logged where it is handled, once.
pub fn internal(context: &str, e: impl std::fmt::Display) -> Status {
    tracing::error!(error = %e, "{context}");
    Status::internal(format!("{context}: {e}"))
}
