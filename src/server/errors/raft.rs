//! openraft's errors as the table's statuses: a write the leader refused or lost, a read that
//! could not be made linearizable, a leader to forward to.

use tonic::{Code, Status};

use super::{membership, not_applied_retry_delay, outcome_unknown, unavailable, Refusal};
use crate::proto::v1::ErrorReason;
use crate::raft::types::{
    ClientWriteError, Fatal, ForwardToLeader, LinearizableReadError, NodeAddr, RaftError, WaitError,
};

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
