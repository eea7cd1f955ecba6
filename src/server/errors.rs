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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::proto::v1::ErrorReason;
use crate::raft::types::{
    ClientWriteError, Fatal, ForwardToLeader, LinearizableReadError, NodeAddr, RaftError, WaitError,
};
use crate::state::Rejection;
use crate::wire::{ERROR_DOMAIN, LEADER_HINT, REASON_PREFIX};

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
static NOT_APPLIED_RETRY_MS: AtomicU64 = AtomicU64::new(500);

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
        Rejection::LockDelayed { name, until_ms } => new(Code::Aborted, R::LockDelayed)
            .meta("lock", name)
            .meta("until_ms", until_ms)
            .retry_after(remaining(*until_ms)),
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
        Rejection::NoSpace { alarm } => {
            new(Code::ResourceExhausted, R::NoSpace).meta("alarm", alarm)
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

/// The time left until `until_ms` (leader-stamped wall-clock time), by this node's clock: the
/// state's time follows the leaders' clocks, so this is close, and a retry a little early is
/// refused again with the new remainder.
fn remaining(until_ms: u64) -> Duration {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Duration::from_millis(until_ms.saturating_sub(now_ms))
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

/// Unavailable, UNAVAILABLE, no leader hint: the node is shutting down.
pub fn shutting_down() -> Status {
    unavailable("this node is shutting down", None)
}

/// Unavailable, OUTCOME_UNKNOWN: a write reached (or may have reached) a leader and its answer
/// was lost; it may still take effect.
pub fn outcome_unknown(message: impl Into<String>, leader: Option<&NodeAddr>) -> Status {
    Refusal::new(Code::Unavailable, ErrorReason::OutcomeUnknown, message)
        .leader(leader)
        .status()
}

pub fn no_leader() -> Status {
    unavailable("no leader is elected at the moment; retry shortly", None)
}

/// This node is not the leader: NOT_APPLIED (nothing was appended), with the leader's hint.
pub fn forward_to_leader(f: &ForwardToLeader) -> Status {
    Refusal::new(
        Code::Unavailable,
        ErrorReason::NotApplied,
        format!("this node is not the leader (leader: {:?})", f.leader_id),
    )
    .leader(f.leader_node.as_ref())
    .retry_after(not_applied_retry_delay())
    .status()
}

/// A write that failed inside Raft.
pub fn client_write(e: &RaftError<ClientWriteError>) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => forward_to_leader(f),
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => outcome_unknown(
            format!(
                "leadership changed while the write was in flight; its outcome is unknown: {f}"
            ),
            f.leader_node.as_ref(),
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(m)) => {
            membership(None, m.to_string())
        }
        RaftError::APIError(ClientWriteError::PreconditionFailed(p)) => {
            membership(None, p.to_string())
        }
        RaftError::Fatal(f) => unavailable(format!("this node's Raft has stopped: {f}"), None),
    }
}

/// A linearizable read this node could not start (ReadIndex here). `Node::linearize` asks the
/// leader itself on ForwardToLeader and never maps it; were it mapped, it is Unavailable with the
/// leader's hint.
pub fn read_linearizer(e: &RaftError<LinearizableReadError>) -> Status {
    match e {
        RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => unavailable(
            format!("this node is not the leader (leader: {:?})", f.leader_id),
            f.leader_node.as_ref(),
        ),
        RaftError::APIError(LinearizableReadError::QuorumNotEnough(q)) => {
            unavailable(format!("cannot confirm leadership: {q}"), None)
        }
        RaftError::Fatal(f) => read_raft_stopped(f),
    }
}

/// A linearizable read whose Raft stopped while it got or awaited its read index.
pub fn read_raft_stopped(f: &Fatal) -> Status {
    unavailable(format!("raft stopped: {f}"), None)
}

/// A linearizable read whose read index this node did not apply within the leader wait.
pub fn read_index_not_applied() -> Status {
    unavailable("timed out waiting to apply the read index", None)
}

/// A leader that cannot give a follower a read index (the peer service's ReadIndex).
pub fn read_index_refused(e: &RaftError<LinearizableReadError>) -> Status {
    unavailable(format!("cannot serve a read index: {e}"), None)
}

/// A follower that has no channel to the leader it would ask for a read index.
pub fn read_leader_unreachable(e: impl std::fmt::Display, leader: &NodeAddr) -> Status {
    unavailable(format!("cannot reach the leader: {e}"), Some(leader))
}

/// A follower whose ReadIndex call to the leader failed (`refusal` is the leader's answer, or
/// the transport's).
pub fn read_index_from_leader(refusal: &Status, leader: &NodeAddr) -> Status {
    unavailable(
        format!("read index from the leader: {}", refusal.message()),
        Some(leader),
    )
}

/// A follower that did not apply the leader's read index within the leader wait.
pub fn read_index_catch_up(e: &WaitError) -> Status {
    unavailable(
        format!("this node did not catch up with the read index: {e}"),
        None,
    )
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

/// Adds an ErrorInfo to a refusal that leaves the client API without details: the statuses tonic
/// itself makes (an unknown method, a request it cannot decode or that is too large), which no
/// handler builds. The reason follows from the code (`reason_for_code`). Only statuses in the
/// response headers (trailers-only responses, as every refusal before a reply is) are seen; one
/// in the trailers of a streamed body (an encoding failure mid-stream) is left as it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct DetailsLayer;

impl<S> tower::Layer<S> for DetailsLayer {
    type Service = Details<S>;

    fn layer(&self, inner: S) -> Details<S> {
        Details { inner }
    }
}

/// The service `DetailsLayer` wraps around the client API's router.
#[derive(Clone, Debug)]
pub struct Details<S> {
    inner: S,
}

type DetailsFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

impl<S, B, RB> tower::Service<http::Request<B>> for Details<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = DetailsFuture<Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            add_details(response.headers_mut());
            Ok(response)
        })
    }
}

/// The details header for a refusal in `headers` that has none (see `DetailsLayer`).
fn add_details(headers: &mut http::HeaderMap) {
    const DETAILS: &str = "grpc-status-details-bin";
    if headers.contains_key(DETAILS) {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if status.code() == Code::Ok {
        return;
    }
    let code = status.code();
    let with_details = refused(code, reason_for_code(code), status.message()).into_http::<()>();
    if let Some(v) = with_details.headers().get(DETAILS) {
        headers.insert(DETAILS, v.clone());
    }
}

#[cfg(test)]
mod tests;
