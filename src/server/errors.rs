//! The one error table: every refusal the server sends is built here, with its gRPC code, a
//! message that names the field and the rule, and the `grpc-status-details-bin` details a client
//! decides by (proto/errors.proto): a `google.rpc.ErrorInfo` (domain "steward", a reason from
//! `ErrorReason`, metadata) and, where waiting may help, a `google.rpc.RetryInfo`.
//!
//! Handlers never build statuses themselves: a domain rejection goes through `rejection`, the
//! other refusals through the helpers below (`invalid`, `limit`, `not_found`, ...). Unavailable
//! statuses carry the leader's client address (when known) in the `x-steward-leader` trailer
//! and in the ErrorInfo metadata `leader`; a write refused before any leader appended it carries
//! `x-steward-not-applied` (`not_applied`), kept for clients older than the reasons.
//!
//! Here: the helpers and the reasons. Beside it: `rejection.rs` (the state machine's refusals),
//! `raft.rs` (openraft's errors) and `layer.rs` (details on tonic's own refusals).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::proto::v1::ErrorReason;
use crate::raft::types::NodeAddr;
use crate::wire::{ERROR_DOMAIN, LEADER_HINT, REASON_PREFIX};

mod layer;
mod raft;
mod rejection;

pub use layer::{Details, DetailsLayer};
pub use raft::{
    client_write, forward_to_leader, read_index_catch_up, read_index_from_leader,
    read_index_not_applied, read_index_refused, read_leader_unreachable, read_linearizer,
    read_raft_stopped,
};
pub use rejection::{rejection, txn_op};

/// Kept here for tests/cluster/admission.rs; the key is defined in `crate::wire`.
pub use crate::wire::NOT_APPLIED;

/// RetryInfo of OVERLOADED: the least wait before sending again after too many proposals or
/// calls were in flight (about the time a group of proposals takes to commit).
pub const OVERLOADED_RETRY_DELAY: Duration = Duration::from_millis(100);

/// RetryInfo of CHANGE_IN_PROGRESS: a membership change or compaction takes about this long.
pub const CHANGE_IN_PROGRESS_RETRY_DELAY: Duration = Duration::from_secs(1);

/// RetryInfo of NOT_APPLIED, in ms: about one election timeout, the time a new leader takes to
/// appear. `set_election_timeout` sets it from the node's config at start-up; this default is
/// the config's default `raft.election_timeout_ms_min`.
static NOT_APPLIED_RETRY_MS: AtomicU64 = AtomicU64::new(1500);

/// Sets NOT_APPLIED's RetryInfo to this node's election timeout (called once at start-up).
pub fn set_election_timeout(timeout: Duration) {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    NOT_APPLIED_RETRY_MS.store(ms, Ordering::Relaxed);
}

fn not_applied_retry_delay() -> Duration {
    Duration::from_millis(NOT_APPLIED_RETRY_MS.load(Ordering::Relaxed))
}

/// `ErrorInfo.reason` of `reason`: its proto name without the `ERROR_REASON_` prefix, so the
/// proto and the code share one list.
pub fn reason_name(reason: ErrorReason) -> &'static str {
    let name = reason.as_str_name();
    name.strip_prefix(REASON_PREFIX).unwrap_or(name)
}

/// The reason an `ErrorInfo.reason` names, if it is one of ours.
pub fn reason_from_name(name: &str) -> Option<ErrorReason> {
    ErrorReason::from_str_name(&format!("{REASON_PREFIX}{name}"))
        .filter(|r| *r != ErrorReason::Unspecified)
}

/// The reason `status` carries in its details (domain "steward"), if any.
pub fn reason_of(status: &Status) -> Option<ErrorReason> {
    let info = status.get_details_error_info()?;
    if info.domain != ERROR_DOMAIN {
        return None;
    }
    reason_from_name(&info.reason)
}

/// A refusal being built: code, reason, message, metadata, an optional retry delay.
#[derive(Debug)]
pub struct Refusal {
    code: Code,
    reason: ErrorReason,
    message: String,
    metadata: HashMap<String, String>,
    retry_after: Option<Duration>,
    leader: Option<String>,
}

impl Refusal {
    pub fn new(code: Code, reason: ErrorReason, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            reason,
            message: message.into(),
            metadata: HashMap::new(),
            retry_after: None,
            leader: None,
        }
    }

    /// Adds an ErrorInfo metadata entry.
    pub fn meta(mut self, key: &str, value: impl ToString) -> Refusal {
        self.metadata.insert(key.to_string(), value.to_string());
        self
    }

    /// Adds a RetryInfo: the least wait before sending the request again.
    pub fn retry_after(mut self, delay: Duration) -> Refusal {
        self.retry_after = Some(delay);
        self
    }

    /// Names the leader (its client address) in the trailer and the metadata, when known.
    pub fn leader(mut self, leader: Option<&NodeAddr>) -> Refusal {
        if let Some(addr) = leader.filter(|a| !a.client_addr.is_empty()) {
            self.leader = Some(addr.client_addr.clone());
        }
        self
    }

    pub fn status(self) -> Status {
        let mut metadata = MetadataMap::new();
        let mut info = self.metadata;
        if let Some(leader) = self.leader {
            if let Ok(v) = leader.parse() {
                metadata.insert(LEADER_HINT, v);
            }
            info.insert("leader".to_string(), leader);
        }
        build(
            self.code,
            self.message,
            self.reason,
            info,
            self.retry_after,
            metadata,
        )
    }
}

fn build(
    code: Code,
    message: String,
    reason: ErrorReason,
    info: HashMap<String, String>,
    retry_after: Option<Duration>,
    mut metadata: MetadataMap,
) -> Status {
    let mut details = ErrorDetails::with_error_info(reason_name(reason), ERROR_DOMAIN, info);
    if let Some(delay) = retry_after {
        details.set_retry_info(Some(delay));
    }
    if reason == ErrorReason::NotApplied || reason == ErrorReason::AuthChanged {
        metadata.insert(NOT_APPLIED, MetadataValue::from_static("true"));
    }
    Status::with_error_details_and_metadata(code, message, details, metadata)
}

/// Marks `status` as a write refused before any leader appended it: it did not take effect and
/// never will, so the client may send it again. The code, message and trailers stay; the reason
/// becomes NOT_APPLIED (with RetryInfo of about an election timeout) unless the status already
/// has a more specific reason that itself says "not applied" (OVERLOADED, LIMIT_EXCEEDED,
/// NO_SPACE, AUTH_CHANGED, ...: sending those again unchanged would not help at once), which
/// is kept. The `x-steward-not-applied` trailer is set either way.
pub fn not_applied(status: Status) -> Status {
    let details = status.get_error_details();
    let kept = details.error_info().filter(|i| {
        i.domain == ERROR_DOMAIN
            && reason_from_name(&i.reason).is_some_and(|r| {
                !matches!(
                    r,
                    ErrorReason::NotApplied
                        | ErrorReason::OutcomeUnknown
                        | ErrorReason::Unavailable
                        | ErrorReason::Internal
                )
            })
    });
    let mut metadata = status.metadata().clone();
    // Rebuilt below from the details; the old encoding must not shadow them.
    metadata.remove("grpc-status-details-bin");
    if kept.is_some() {
        metadata.insert(NOT_APPLIED, MetadataValue::from_static("true"));
        return Status::with_error_details_and_metadata(
            status.code(),
            status.message(),
            details,
            metadata,
        );
    }
    let info = details
        .error_info()
        .filter(|i| i.domain == ERROR_DOMAIN)
        .map(|i| i.metadata.clone())
        .unwrap_or_default();
    let retry = details
        .retry_info()
        .and_then(|r| r.retry_delay)
        .unwrap_or_else(not_applied_retry_delay);
    build(
        status.code(),
        status.message().to_string(),
        ErrorReason::NotApplied,
        info,
        Some(retry),
        metadata,
    )
}

/// InvalidArgument: `field` breaks `rule` (the message is "field: rule").
pub fn invalid(field: &str, rule: impl std::fmt::Display) -> Status {
    Refusal::new(
        Code::InvalidArgument,
        ErrorReason::InvalidArgument,
        format!("{field}: {rule}"),
    )
    .meta("field", field)
    .status()
}

/// ResourceExhausted, LIMIT_EXCEEDED: the request exceeds the config limit `limit`.
pub fn limit(limit: &str, message: impl Into<String>) -> Status {
    limit_with_code(Code::ResourceExhausted, limit, message)
}

/// LIMIT_EXCEEDED with another code (InvalidArgument for a command too large to ever fit).
pub fn limit_with_code(code: Code, limit: &str, message: impl Into<String>) -> Status {
    Refusal::new(code, ErrorReason::LimitExceeded, message)
        .meta("limit", limit)
        .status()
}

/// ResourceExhausted, OVERLOADED: too much is in flight (`limit` names the bound); retry later.
pub fn overloaded(limit: &str, message: impl Into<String>) -> Status {
    Refusal::new(Code::ResourceExhausted, ErrorReason::Overloaded, message)
        .meta("limit", limit)
        .retry_after(OVERLOADED_RETRY_DELAY)
        .status()
}

/// ResourceExhausted, RATE_LIMITED: over the per-client rate `limit`; retry after `delay`.
pub fn rate_limited(limit: &str, delay: Duration, message: impl Into<String>) -> Status {
    Refusal::new(Code::ResourceExhausted, ErrorReason::RateLimited, message)
        .meta("limit", limit)
        .retry_after(delay)
        .status()
}

/// NotFound: the `resource_type` named `name` does not exist.
pub fn not_found(resource_type: &str, name: impl ToString, message: impl Into<String>) -> Status {
    Refusal::new(Code::NotFound, ErrorReason::NotFound, message)
        .meta("resource_type", resource_type)
        .meta("name", name)
        .status()
}

/// AlreadyExists: the `resource_type` named `name` exists already.
pub fn already_exists(
    resource_type: &str,
    name: impl ToString,
    message: impl Into<String>,
) -> Status {
    Refusal::new(Code::AlreadyExists, ErrorReason::AlreadyExists, message)
        .meta("resource_type", resource_type)
        .meta("name", name)
        .status()
}

/// A refusal with a code and reason and no metadata (the reasons with nothing to name).
pub fn refused(code: Code, reason: ErrorReason, message: impl Into<String>) -> Status {
    Refusal::new(code, reason, message).status()
}

/// Aborted, LOCK_WAIT_EXPIRED: the lock was not granted within the request's `wait_ms`.
pub fn lock_wait_expired(lock: &str, wait: Duration) -> Status {
    Refusal::new(
        Code::Aborted,
        ErrorReason::LockWaitExpired,
        format!(
            "lock {lock} was not granted within wait_ms = {} ms; the waiter was removed from \
             the queue",
            wait.as_millis()
        ),
    )
    .meta("lock", lock)
    .meta("wait_ms", wait.as_millis())
    .status()
}

/// Aborted, POOL_WAIT_EXPIRED: nothing of type `rtype` was leased within the acquire's wait.
pub fn pool_wait_expired(rtype: &str, wait: Duration, message: impl Into<String>) -> Status {
    Refusal::new(Code::Aborted, ErrorReason::PoolWaitExpired, message)
        .meta("type", rtype)
        .meta("wait_ms", wait.as_millis())
        .status()
}

/// FailedPrecondition, CHANGE_IN_PROGRESS: another change of this kind runs; retry after it.
pub fn change_in_progress(message: impl Into<String>) -> Status {
    Refusal::new(
        Code::FailedPrecondition,
        ErrorReason::ChangeInProgress,
        message,
    )
    .retry_after(CHANGE_IN_PROGRESS_RETRY_DELAY)
    .status()
}

/// FailedPrecondition, MEMBERSHIP_STATE: a membership rule refuses the change to `node_id`.
pub fn membership(node_id: Option<u64>, message: impl Into<String>) -> Status {
    let refusal = Refusal::new(
        Code::FailedPrecondition,
        ErrorReason::MembershipState,
        message,
    );
    match node_id {
        Some(id) => refusal.meta("node_id", id),
        None => refusal,
    }
    .status()
}

/// DeadlineExceeded, NOT_SETTLED: the change to `node_id` was made (or started) but its effect
/// was not seen within the server's wait.
pub fn not_settled(node_id: u64, message: impl Into<String>) -> Status {
    Refusal::new(Code::DeadlineExceeded, ErrorReason::NotSettled, message)
        .meta("node_id", node_id)
        .status()
}

/// Unauthenticated: no valid credentials.
pub fn unauthenticated(message: impl Into<String>) -> Status {
    refused(Code::Unauthenticated, ErrorReason::Unauthenticated, message)
}

/// PermissionDenied: the caller may not call `method` ("" when not known).
pub fn permission_denied(method: &str, message: impl Into<String>) -> Status {
    let refusal = Refusal::new(
        Code::PermissionDenied,
        ErrorReason::PermissionDenied,
        message,
    );
    if method.is_empty() {
        refusal.status()
    } else {
        refusal.meta("method", method).status()
    }
}

/// OutOfRange, REVISION_COMPACTED: a watch cannot start (or go on) at a revision no longer kept.
pub fn revision_compacted(
    current_revision: u64,
    oldest_revision: u64,
    message: impl Into<String>,
) -> Status {
    Refusal::new(Code::OutOfRange, ErrorReason::RevisionCompacted, message)
        .meta("current_revision", current_revision)
        .meta("oldest_revision", oldest_revision)
        .status()
}

/// OutOfRange, REVISION_COMPACTED: a `List` continue token's revision is no longer kept (as a
/// watch's start revision, above); its ErrorInfo also carries `inconsistent_continue_token`,
/// which goes on after the same key as of `current_revision`, for a client that accepts a list
/// whose earlier pages were read at an older revision (Kubernetes' "inconsistent continue").
pub fn continue_expired(
    current_revision: u64,
    oldest_revision: u64,
    inconsistent_continue_token: &str,
    message: impl Into<String>,
) -> Status {
    Refusal::new(Code::OutOfRange, ErrorReason::RevisionCompacted, message)
        .meta("current_revision", current_revision)
        .meta("oldest_revision", oldest_revision)
        .meta("inconsistent_continue_token", inconsistent_continue_token)
        .status()
}

/// ResourceExhausted, WATCH_TOO_SLOW: a watcher fell further behind than `limit` and was cut off.
pub fn watch_too_slow(limit: &str, message: impl Into<String>) -> Status {
    Refusal::new(Code::ResourceExhausted, ErrorReason::WatchTooSlow, message)
        .meta("limit", limit)
        .status()
}

/// Unavailable, UNAVAILABLE: this node cannot serve the request now, with the leader's client
/// address as a hint when known. A write failing so has an unknown outcome unless it is then
/// marked `not_applied`.
pub fn unavailable(message: impl Into<String>, leader: Option<&NodeAddr>) -> Status {
    Refusal::new(Code::Unavailable, ErrorReason::Unavailable, message)
        .leader(leader)
        .status()
}

/// The message of [`shutting_down`] (etcd's API answers it in etcd's words).
pub const SHUTTING_DOWN: &str = "this node is shutting down";

/// Unavailable, UNAVAILABLE, no leader hint: the node is shutting down.
pub fn shutting_down() -> Status {
    unavailable(SHUTTING_DOWN, None)
}

/// Unavailable, OUTCOME_UNKNOWN: a write reached (or may have reached) a leader and its answer
/// was lost; it may still take effect.
pub fn outcome_unknown(message: impl Into<String>, leader: Option<&NodeAddr>) -> Status {
    Refusal::new(Code::Unavailable, ErrorReason::OutcomeUnknown, message)
        .leader(leader)
        .status()
}

/// The message of [`no_leader`] (etcd's API answers it in etcd's words).
pub const NO_LEADER: &str = "no leader is elected at the moment; retry shortly";

/// Unavailable, UNAVAILABLE: no leader to serve the request.
pub fn no_leader() -> Status {
    unavailable(NO_LEADER, None)
}

/// A failure of this node's storage or Raft core: logged where it is handled, once.
pub fn internal(context: &str, e: impl std::fmt::Display) -> Status {
    tracing::error!(error = %e, "{context}");
    internal_message(format!("{context}: {e}"))
}

/// Internal, not logged (the caller logs it, or it is an answer nobody waits for).
pub fn internal_message(message: impl Into<String>) -> Status {
    refused(Code::Internal, ErrorReason::Internal, message)
}

/// A status rebuilt from its parts as they travel between nodes (a forwarded write's answer):
/// `details` is the leader's encoded `google.rpc.Status`, kept as it was so the client sees the
/// leader's reason; without them (an older leader), the reason follows from the code.
pub fn from_parts(
    code: Code,
    message: String,
    details: &[u8],
    leader: Option<&NodeAddr>,
) -> Status {
    let mut metadata = MetadataMap::new();
    if let Some(v) = leader.and_then(|a| a.client_addr.parse().ok()) {
        metadata.insert(LEADER_HINT, v);
    }
    if details.is_empty() {
        let reason = match code {
            // An older leader's Unavailable: the entry may have been discarded and still commit.
            Code::Unavailable => ErrorReason::OutcomeUnknown,
            other => reason_for_code(other),
        };
        return build(code, message, reason, HashMap::new(), None, metadata);
    }
    Status::with_details_and_metadata(
        code,
        message,
        bytes::Bytes::copy_from_slice(details),
        metadata,
    )
}

/// The reason a status of `code` gets when nothing more is known about it (a status tonic made,
/// or an older leader's answer); INTERNAL, which promises nothing, where the code says too little.
pub fn reason_for_code(code: Code) -> ErrorReason {
    match code {
        // A method this node does not serve: the request is wrong, not the node.
        Code::InvalidArgument | Code::Unimplemented => ErrorReason::InvalidArgument,
        // gRPC's own message size limits.
        Code::OutOfRange => ErrorReason::LimitExceeded,
        Code::NotFound => ErrorReason::NotFound,
        Code::AlreadyExists => ErrorReason::AlreadyExists,
        Code::ResourceExhausted => ErrorReason::LimitExceeded,
        Code::Unauthenticated => ErrorReason::Unauthenticated,
        Code::PermissionDenied => ErrorReason::PermissionDenied,
        Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded => ErrorReason::Unavailable,
        _ => ErrorReason::Internal,
    }
}

#[cfg(test)]
mod tests;
