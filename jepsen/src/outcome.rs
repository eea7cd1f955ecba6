//! How a client error is classified (see `history` for the contract).
//!
//! By the server's reason (proto/errors.proto) when the status carries one: NOT_APPLIED and
//! every refusal reason that says "applied: no" prove the operation did not take effect;
//! OUTCOME_UNKNOWN, UNAVAILABLE, INTERNAL and NOT_SETTLED do not. A status without a reason
//! (made on the client side, or by tonic) is classified by its code, definite refusals only.
//! When in doubt: unknown.

use steward::client::{reason, ErrorReason};
use tonic::Code;

use crate::history::Outcome;

/// Definite refusals prove the operation did not take effect; everything else is unknown.
pub fn classify(status: &tonic::Status) -> Outcome {
    match reason(status) {
        Some(r) => by_reason(r),
        None => by_code(status.code()),
    }
}

fn by_reason(reason: ErrorReason) -> Outcome {
    match reason {
        // It may have been, or may yet be, applied.
        ErrorReason::Unspecified
        | ErrorReason::OutcomeUnknown
        | ErrorReason::Unavailable
        | ErrorReason::Internal
        | ErrorReason::NotSettled => Outcome::Unknown,
        // Refused before any leader appended it, or refused by apply or by the node's checks:
        // each of these is documented "applied: no".
        ErrorReason::NotApplied
        | ErrorReason::InvalidArgument
        | ErrorReason::LimitExceeded
        | ErrorReason::NotFound
        | ErrorReason::AlreadyExists
        | ErrorReason::RevisionConflict
        | ErrorReason::RevisionCompacted
        | ErrorReason::WatchTooSlow
        | ErrorReason::Overloaded
        | ErrorReason::RateLimited
        | ErrorReason::NoSpace
        | ErrorReason::LockBusy
        | ErrorReason::LockDelayed
        | ErrorReason::LockWaitExpired
        | ErrorReason::LockNotHeld
        | ErrorReason::FenceRejected
        | ErrorReason::LockOwnedByOperation
        | ErrorReason::OperationState
        | ErrorReason::OperationBehind
        | ErrorReason::OperationDeadlinePassed
        | ErrorReason::WorkerUnfit
        | ErrorReason::StaleAssignment
        | ErrorReason::ReservationNotDue
        | ErrorReason::PoolEmpty
        | ErrorReason::PoolNotOwner
        | ErrorReason::PoolState
        | ErrorReason::PoolWaitExpired
        | ErrorReason::DeploymentState
        | ErrorReason::NodeRetired
        | ErrorReason::ChangeInProgress
        | ErrorReason::MembershipState
        | ErrorReason::Unauthenticated
        | ErrorReason::PermissionDenied
        | ErrorReason::AuthState
        | ErrorReason::AuthChanged => Outcome::Fail,
    }
}

fn by_code(code: Code) -> Outcome {
    match code {
        Code::NotFound
        | Code::AlreadyExists
        | Code::Aborted
        | Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::ResourceExhausted => Outcome::Fail,
        _ => Outcome::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward::server::errors;

    #[test]
    fn ambiguous_errors_are_unknown() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Unknown,
            Code::Internal,
            Code::Cancelled,
        ] {
            assert_eq!(
                classify(&tonic::Status::new(code, "x")),
                Outcome::Unknown,
                "{code:?}"
            );
        }
        for code in [
            Code::NotFound,
            Code::AlreadyExists,
            Code::Aborted,
            Code::FailedPrecondition,
        ] {
            assert_eq!(
                classify(&tonic::Status::new(code, "x")),
                Outcome::Fail,
                "{code:?}"
            );
        }
    }

    /// The reason decides over the code: a write the server marked not applied is a definite
    /// failure even as Unavailable; an outcome-unknown one stays unknown.
    #[test]
    fn reasons_decide_over_codes() {
        let not_applied = errors::not_applied(errors::no_leader());
        assert_eq!(not_applied.code(), Code::Unavailable);
        assert_eq!(classify(&not_applied), Outcome::Fail);
        let unknown = errors::outcome_unknown("leader changed", None);
        assert_eq!(classify(&unknown), Outcome::Unknown);
        assert_eq!(
            classify(&errors::unavailable("shutting down", None)),
            Outcome::Unknown
        );
        assert_eq!(classify(&errors::internal_message("bug")), Outcome::Unknown);
        // Made or begun: DeadlineExceeded with NOT_SETTLED is not a refusal.
        assert_eq!(
            classify(&errors::not_settled(4, "not caught up")),
            Outcome::Unknown
        );
        assert_eq!(
            classify(&errors::lock_wait_expired(
                "l",
                std::time::Duration::from_millis(5)
            )),
            Outcome::Fail
        );
    }
}
