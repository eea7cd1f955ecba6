//! The error table: every rejection kind's code, reason and metadata; details that decode with
//! tonic-types as any client would; trailers kept through `not_applied`.

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;

use super::layer::add_details;
use super::*;
use crate::raft::types::{Fatal, ForwardToLeader, LinearizableReadError, RaftError, WaitError};
use crate::state::alarms::{Alarm, AlarmKind};
use crate::state::Rejection;
use crate::state::{LockMode, ObjectKey, OpState, OperationId};

/// The reason, domain and metadata a client decodes from `status`.
fn info(status: &Status) -> (String, String, HashMap<String, String>) {
    let details = status.check_error_details().expect("details decode");
    let info = details.error_info().expect("an ErrorInfo").clone();
    (info.reason, info.domain, info.metadata)
}

fn key() -> ObjectKey {
    ObjectKey::new("Director", "default", "d1")
}

/// One row of the table: a rejection, its code, its reason, metadata that must be there.
type Row = (Rejection, Code, &'static str, Vec<(&'static str, String)>);

/// One row per rejection kind.
fn table() -> Vec<Row> {
    let op = OperationId(7);
    vec![
        (
            Rejection::AlreadyExists { key: key() },
            Code::AlreadyExists,
            "ALREADY_EXISTS",
            vec![
                ("resource_type", "object".into()),
                ("name", key().to_string()),
            ],
        ),
        (
            Rejection::NotFound { key: key() },
            Code::NotFound,
            "NOT_FOUND",
            vec![
                ("resource_type", "object".into()),
                ("name", key().to_string()),
            ],
        ),
        (
            Rejection::Conflict {
                key: key(),
                expected: 3,
                actual: 4,
            },
            Code::Aborted,
            "REVISION_CONFLICT",
            vec![
                ("expected_revision", "3".into()),
                ("current_revision", "4".into()),
                ("key", key().to_string()),
            ],
        ),
        (
            Rejection::Invalid {
                field: "metadata.name".into(),
                rule: "must be a DNS-1123 subdomain".into(),
            },
            Code::InvalidArgument,
            "INVALID_ARGUMENT",
            vec![("field", "metadata.name".into())],
        ),
        (
            Rejection::TooLarge {
                field: "spec".into(),
                rule: "70000 bytes, over limits.object_bytes_max = 65536".into(),
            },
            Code::ResourceExhausted,
            "LIMIT_EXCEEDED",
            vec![
                ("field", "spec".into()),
                ("limit", "limits.object_bytes_max".into()),
            ],
        ),
        (
            Rejection::TxnOpFailed {
                index: 2,
                cause: Box::new(Rejection::Conflict {
                    key: key(),
                    expected: 1,
                    actual: 9,
                }),
            },
            Code::Aborted,
            "REVISION_CONFLICT",
            vec![("op_index", "2".into()), ("current_revision", "9".into())],
        ),
        (
            Rejection::NodeRetired { node_id: 4 },
            Code::FailedPrecondition,
            "NODE_RETIRED",
            vec![("node_id", "4".into())],
        ),
        (
            Rejection::LockBusy {
                name: "l".into(),
                mode_held: LockMode::Write,
                holders: 1,
                waiters: 2,
            },
            Code::Aborted,
            "LOCK_BUSY",
            vec![
                ("lock", "l".into()),
                ("holders", "1".into()),
                ("waiters", "2".into()),
            ],
        ),
        (
            Rejection::LockDelayed {
                name: "l".into(),
                until_ms: 5,
                remaining_ms: 2,
            },
            Code::Aborted,
            "LOCK_DELAYED",
            vec![("lock", "l".into()), ("until_ms", "5".into())],
        ),
        (
            Rejection::LockNotHeld {
                name: "l".into(),
                holder: "h".into(),
                token: 3,
            },
            Code::FailedPrecondition,
            "LOCK_NOT_HELD",
            vec![("holder", "h".into()), ("token", "3".into())],
        ),
        (
            Rejection::FenceRejected {
                lock: "l".into(),
                token: 3,
                reason: "released".into(),
            },
            Code::FailedPrecondition,
            "FENCE_REJECTED",
            vec![("lock", "l".into()), ("token", "3".into())],
        ),
        (
            Rejection::LockOwnedByOperation {
                name: "l".into(),
                holder: "h".into(),
                operation: op,
            },
            Code::FailedPrecondition,
            "LOCK_OWNED_BY_OPERATION",
            vec![("operation", "op-7".into())],
        ),
        (
            Rejection::ReservationNotDue {
                key: key(),
                reason: "not yet".into(),
            },
            Code::FailedPrecondition,
            "RESERVATION_NOT_DUE",
            vec![("key", key().to_string())],
        ),
        (
            Rejection::PoolEmpty {
                rtype: "vm".into(),
                state: "free".into(),
            },
            Code::NotFound,
            "POOL_EMPTY",
            vec![("type", "vm".into()), ("state", "free".into())],
        ),
        (
            Rejection::PoolNotOwner {
                name: "vm-1".into(),
                owner: "a".into(),
                holder: "b".into(),
            },
            Code::FailedPrecondition,
            "POOL_NOT_OWNER",
            vec![("name", "vm-1".into()), ("owner", "a".into())],
        ),
        (
            Rejection::PoolState {
                name: "vm-1".into(),
                reason: "r".into(),
            },
            Code::FailedPrecondition,
            "POOL_STATE",
            vec![("name", "vm-1".into())],
        ),
        (
            Rejection::DeploymentState {
                key: key(),
                reason: "r".into(),
            },
            Code::FailedPrecondition,
            "DEPLOYMENT_STATE",
            vec![("key", key().to_string())],
        ),
        (
            Rejection::DeploymentResourceNotFound {
                key: key(),
                what: "app a".into(),
            },
            Code::NotFound,
            "NOT_FOUND",
            vec![("resource_type", "deployment_resource".into())],
        ),
        (
            Rejection::OperationNotFound { id: op },
            Code::NotFound,
            "NOT_FOUND",
            vec![
                ("resource_type", "operation".into()),
                ("name", "op-7".into()),
            ],
        ),
        (
            Rejection::WorkerNotFound { worker: "w".into() },
            Code::NotFound,
            "NOT_FOUND",
            vec![("resource_type", "worker".into()), ("name", "w".into())],
        ),
        (
            Rejection::OperationState {
                id: op,
                state: OpState::Queued,
                action: "report".into(),
                allowed: "in progress".into(),
            },
            Code::FailedPrecondition,
            "OPERATION_STATE",
            vec![("operation", "op-7".into())],
        ),
        (
            Rejection::OperationBehind {
                id: op,
                target: key(),
                ahead: OperationId(6),
            },
            Code::FailedPrecondition,
            "OPERATION_BEHIND",
            vec![("ahead", "op-6".into())],
        ),
        (
            Rejection::OperationDeadlinePassed {
                id: op,
                deadline_at_ms: 10,
                now_ms: 11,
            },
            Code::FailedPrecondition,
            "OPERATION_DEADLINE_PASSED",
            vec![("deadline_at_ms", "10".into())],
        ),
        (
            Rejection::WorkerUnfit {
                worker: "w".into(),
                id: op,
                reason: "full".into(),
            },
            Code::FailedPrecondition,
            "WORKER_UNFIT",
            vec![("worker", "w".into())],
        ),
        (
            Rejection::StaleAssignment {
                id: op,
                worker: "w".into(),
                attempt: 2,
                epoch: 5,
                reason: "r".into(),
            },
            Code::Aborted,
            "STALE_ASSIGNMENT",
            vec![("attempt", "2".into()), ("epoch", "5".into())],
        ),
        (
            Rejection::UserNotFound { name: "u".into() },
            Code::NotFound,
            "NOT_FOUND",
            vec![("resource_type", "user".into())],
        ),
        (
            Rejection::UserExists { name: "u".into() },
            Code::AlreadyExists,
            "ALREADY_EXISTS",
            vec![("resource_type", "user".into())],
        ),
        (
            Rejection::AuthState {
                reason: "no admin".into(),
            },
            Code::FailedPrecondition,
            "AUTH_STATE",
            vec![],
        ),
        (
            Rejection::AuthChanged {
                authorized_at: 1,
                now: 2,
            },
            Code::Aborted,
            "AUTH_CHANGED",
            vec![("authorized_at", "1".into()), ("auth_revision", "2".into())],
        ),
        (
            Rejection::NoSpace {
                alarm: Alarm {
                    node_id: 1,
                    kind: AlarmKind::NoSpace,
                    raised_ms: 0,
                    reason: "full".into(),
                },
            },
            Code::ResourceExhausted,
            "NO_SPACE",
            vec![],
        ),
    ]
}

#[test]
fn every_rejection_kind_has_its_code_reason_and_metadata() {
    for (r, code, reason, metadata) in table() {
        let status = rejection(&r);
        assert_eq!(status.code(), code, "{r:?}");
        assert_eq!(status.message(), r.to_string());
        let (got_reason, domain, got) = info(&status);
        assert_eq!(got_reason, reason, "{r:?}");
        assert_eq!(domain, "steward");
        assert!(reason_from_name(&got_reason).is_some(), "{got_reason}");
        for (k, v) in metadata {
            assert_eq!(got.get(k), Some(&v), "{r:?}: metadata {k} in {got:?}");
        }
    }
}

#[test]
fn reason_names_are_the_proto_names_without_the_prefix() {
    assert_eq!(
        reason_name(ErrorReason::LockWaitExpired),
        "LOCK_WAIT_EXPIRED"
    );
    assert_eq!(
        reason_from_name("NOT_APPLIED"),
        Some(ErrorReason::NotApplied)
    );
    assert_eq!(reason_from_name("UNSPECIFIED"), None);
    assert_eq!(reason_from_name("ERROR_REASON_NOT_APPLIED"), None);
    assert_eq!(reason_from_name("nope"), None);
    // Every value round-trips, so the proto and the code share one list.
    for n in 1..100 {
        if let Ok(r) = ErrorReason::try_from(n) {
            assert_eq!(reason_from_name(reason_name(r)), Some(r));
        }
    }
}

#[test]
fn a_lock_delay_says_when_to_retry() {
    // `until_ms` is cluster time, which no wall clock reads: the delay is what apply found left.
    let status = rejection(&Rejection::LockDelayed {
        name: "l".into(),
        until_ms: 1_000_000,
        remaining_ms: 60_000,
    });
    let delay = status
        .get_details_retry_info()
        .and_then(|r| r.retry_delay)
        .expect("RetryInfo");
    assert_eq!(delay, Duration::from_secs(60));
    // A busy lock gives no retry delay: nothing says when it frees up.
    let busy = rejection(&Rejection::LockBusy {
        name: "l".into(),
        mode_held: LockMode::Read,
        holders: 1,
        waiters: 0,
    });
    assert!(busy.get_details_retry_info().is_none());
}

#[test]
fn not_applied_sets_the_reason_keeps_the_code_and_the_leader_hint() {
    let leader = NodeAddr {
        peer_addr: "127.0.0.1:1".into(),
        client_addr: "127.0.0.1:2".into(),
    };
    let status = not_applied(unavailable("cannot reach the leader", Some(&leader)));
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "cannot reach the leader");
    let (reason, _, metadata) = info(&status);
    assert_eq!(reason, "NOT_APPLIED");
    assert_eq!(
        metadata.get("leader").map(String::as_str),
        Some("127.0.0.1:2")
    );
    assert!(status.get_details_retry_info().is_some());
    let trailer = |s: &Status, k: &str| {
        s.metadata()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(
        trailer(&status, LEADER_HINT).as_deref(),
        Some("127.0.0.1:2")
    );
    assert_eq!(trailer(&status, NOT_APPLIED).as_deref(), Some("true"));

    // Internal keeps its code and becomes NOT_APPLIED.
    let internal = not_applied(internal_message("cannot encode"));
    assert_eq!(internal.code(), Code::Internal);
    assert_eq!(info(&internal).0, "NOT_APPLIED");

    // A more specific reason that already says "not applied" stays.
    let overloaded = not_applied(overloaded("limits.pending_proposals_max", "busy"));
    assert_eq!(overloaded.code(), Code::ResourceExhausted);
    let (reason, _, metadata) = info(&overloaded);
    assert_eq!(reason, "OVERLOADED");
    assert_eq!(
        metadata.get("limit").map(String::as_str),
        Some("limits.pending_proposals_max")
    );
    assert_eq!(trailer(&overloaded, NOT_APPLIED).as_deref(), Some("true"));
    assert_eq!(
        overloaded
            .get_details_retry_info()
            .and_then(|r| r.retry_delay),
        Some(OVERLOADED_RETRY_DELAY)
    );

    // A plain status (no details) gets NOT_APPLIED too.
    assert_eq!(
        info(&not_applied(Status::unavailable("x"))).0,
        "NOT_APPLIED"
    );
}

#[test]
fn refusals_survive_the_wire() {
    // As a status travels: into HTTP trailers and back, as tonic does.
    let leader = NodeAddr {
        peer_addr: String::new(),
        client_addr: "127.0.0.1:7001".into(),
    };
    let sent = not_applied(unavailable("no leader", Some(&leader)));
    let response = sent.into_http::<()>();
    let received = Status::from_header_map(response.headers()).expect("a status");
    assert_eq!(received.code(), Code::Unavailable);
    assert_eq!(info(&received).0, "NOT_APPLIED");
    assert!(received.metadata().get(NOT_APPLIED).is_some());
    assert!(received.metadata().get(LEADER_HINT).is_some());
    assert!(received.get_details_retry_info().is_some());
}

/// A status tonic made (no handler saw the call) leaves with an ErrorInfo from its code; one
/// with details already keeps them; a success is untouched.
#[test]
fn the_details_layer_fills_in_what_tonic_left_out() {
    let mut headers = Status::unimplemented("no such method")
        .into_http::<()>()
        .headers()
        .clone();
    add_details(&mut headers);
    let status = Status::from_header_map(&headers).expect("a status");
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(status.message(), "no such method");
    assert_eq!(info(&status).0, "INVALID_ARGUMENT");
    let mut headers = Status::invalid_argument("decode")
        .into_http::<()>()
        .headers()
        .clone();
    add_details(&mut headers);
    let status = Status::from_header_map(&headers).expect("a status");
    assert_eq!(info(&status).0, "INVALID_ARGUMENT");

    let busy = rejection(&Rejection::LockBusy {
        name: "l".into(),
        mode_held: LockMode::Write,
        holders: 1,
        waiters: 0,
    });
    let mut headers = busy.into_http::<()>().headers().clone();
    add_details(&mut headers);
    let status = Status::from_header_map(&headers).expect("a status");
    assert_eq!(info(&status).0, "LOCK_BUSY");

    let mut ok = http::HeaderMap::new();
    add_details(&mut ok);
    assert!(ok.is_empty());
}

#[test]
fn a_forwarded_answer_keeps_the_leaders_details() {
    let on_leader = rejection(&Rejection::LockBusy {
        name: "l".into(),
        mode_held: LockMode::Write,
        holders: 1,
        waiters: 0,
    });
    let rebuilt = from_parts(
        on_leader.code(),
        on_leader.message().to_string(),
        on_leader.details(),
        None,
    );
    assert_eq!(info(&rebuilt), info(&on_leader));
    // An older leader sent no details: an Unavailable is an unknown outcome.
    let old = from_parts(Code::Unavailable, "entry discarded".into(), &[], None);
    assert_eq!(info(&old).0, "OUTCOME_UNKNOWN");
    let old = from_parts(Code::NotFound, "x".into(), &[], None);
    assert_eq!(info(&old).0, "NOT_FOUND");
}

#[test]
fn helpers_name_the_field_and_the_limit() {
    let status = invalid("ops[1].object_json", "not JSON");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "ops[1].object_json: not JSON");
    assert_eq!(
        info(&status).2.get("field").map(String::as_str),
        Some("ops[1].object_json")
    );
    let status = limit("limits.object_bytes_max", "too big");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(info(&status).0, "LIMIT_EXCEEDED");
    let status = lock_wait_expired("l", Duration::from_millis(400));
    assert_eq!(status.code(), Code::Aborted);
    let (reason, _, metadata) = info(&status);
    assert_eq!(reason, "LOCK_WAIT_EXPIRED");
    assert_eq!(metadata.get("wait_ms").map(String::as_str), Some("400"));
    // A txn op's refusal names the op and prefixes the field.
    let status = txn_op(3, invalid("object_json", "not JSON"));
    assert_eq!(status.message(), "ops[3]: object_json: not JSON");
    let (reason, _, metadata) = info(&status);
    assert_eq!(reason, "INVALID_ARGUMENT");
    assert_eq!(
        metadata.get("field").map(String::as_str),
        Some("ops[3].object_json")
    );
    assert_eq!(metadata.get("op_index").map(String::as_str), Some("3"));
    assert_eq!(
        info(&rate_limited(
            "limits.client_requests_per_second",
            Duration::from_millis(2),
            "slow"
        ))
        .0,
        "RATE_LIMITED"
    );
}

/// The client address a status names in its leader hint trailer, if any.
fn hint(status: &Status) -> Option<&str> {
    status
        .metadata()
        .get(LEADER_HINT)
        .and_then(|v| v.to_str().ok())
}

fn read_leader() -> NodeAddr {
    NodeAddr {
        peer_addr: "127.0.0.1:1".into(),
        client_addr: "127.0.0.1:2".into(),
    }
}

/// Asserts a read-path refusal: Unavailable, reason UNAVAILABLE, this message, this hint.
fn assert_read_refusal(status: &Status, message: &str, leader: Option<&str>) {
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(info(status).0, "UNAVAILABLE", "{status:?}");
    assert_eq!(status.message(), message);
    assert_eq!(hint(status), leader, "{status:?}");
}

#[test]
fn a_read_without_a_quorum_cannot_confirm_leadership() {
    let q = crate::raft::types::QuorumNotEnough {
        cluster: "voters [1, 2, 3]".into(),
        got: [1].into_iter().collect(),
    };
    let message = format!("cannot confirm leadership: {q}");
    let e = RaftError::APIError(LinearizableReadError::QuorumNotEnough(q));
    assert_read_refusal(&read_linearizer(&e), &message, None);
}

#[test]
fn a_read_whose_raft_stopped_says_so() {
    let e = RaftError::Fatal(Fatal::Stopped);
    assert_read_refusal(&read_linearizer(&e), "raft stopped: raft stopped", None);
    assert_read_refusal(
        &read_raft_stopped(&Fatal::Panicked),
        "raft stopped: panicked",
        None,
    );
}

#[test]
fn a_read_sent_to_a_follower_names_the_leader() {
    let f = ForwardToLeader::new(2, read_leader());
    let e = RaftError::APIError(LinearizableReadError::ForwardToLeader(f));
    assert_read_refusal(
        &read_linearizer(&e),
        "this node is not the leader (leader: Some(2))",
        Some("127.0.0.1:2"),
    );
}

#[test]
fn a_read_index_not_applied_in_time_is_unavailable() {
    assert_read_refusal(
        &read_index_not_applied(),
        "timed out waiting to apply the read index",
        None,
    );
}

#[test]
fn a_leader_that_cannot_serve_a_read_index_says_why() {
    let e = RaftError::Fatal(Fatal::Stopped);
    let message = format!("cannot serve a read index: {e}");
    assert_read_refusal(&read_index_refused(&e), &message, None);
}

#[test]
fn an_unreachable_leader_is_named() {
    assert_read_refusal(
        &read_leader_unreachable("connection refused", &read_leader()),
        "cannot reach the leader: connection refused",
        Some("127.0.0.1:2"),
    );
}

#[test]
fn the_leaders_read_index_refusal_keeps_its_message_and_names_it() {
    let refusal = Status::unavailable("cannot serve a read index: raft stopped");
    assert_read_refusal(
        &read_index_from_leader(&refusal, &read_leader()),
        "read index from the leader: cannot serve a read index: raft stopped",
        Some("127.0.0.1:2"),
    );
}

#[test]
fn a_follower_behind_the_read_index_says_so() {
    let e = WaitError::Timeout(Duration::from_millis(500), "read index".into());
    let message = format!("this node did not catch up with the read index: {e}");
    assert_read_refusal(&read_index_catch_up(&e), &message, None);
    assert_read_refusal(
        &read_index_catch_up(&WaitError::ShuttingDown),
        "this node did not catch up with the read index: raft is shutting down",
        None,
    );
}
