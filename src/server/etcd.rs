//! etcd's v3 API (package etcdserverpb, proto/etcd/), served on the client port beside steward's
//! own, on the same replicated state: etcd clients (etcdctl, clientv3, a Kubernetes apiserver)
//! switch to steward by changing an endpoint (README "Use steward as etcd").
//!
//! Thin like the other services: parse the wire request into the core's `kv` command (refusing
//! what etcd refuses, with etcd's code and words, before anything is proposed), then
//! `Node::propose_command` (writes, and read-only txns' reads... see `kv.rs`) or
//! `Node::read_barrier` + a local read. What is shared by every etcd service is here: the
//! response header, the error table in etcd's words, the request-size check and `hasleader`.
//!
//! - `auth`: Auth (status, and login for steward's users with their tokens).
//! - `kv`: KV (Range, Put, DeleteRange, Txn, Compact); `compactor`: the leader's
//!   auto-compaction.
//! - `lease`: Lease (grant, revoke, keep-alive, time-to-live, list) on cluster time, and the
//!   leader's lease sweeper.
//! - `lock`: Lock and Election (v3lockpb, v3electionpb), as clientv3/concurrency does them.
//! - `maintenance`: Cluster (members) and Maintenance (status, alarms, defragment, hashes,
//!   snapshot, leadership), mapped to steward's own cluster operations.
//! - `watch`: Watch (many watches per stream, from any revision since the compaction), fed by
//!   `hub`.

pub mod auth;
pub mod compactor;
pub mod hub;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod watch;

use bytes::Bytes;
use prost::Message;
use tonic::{Code, Status};

use crate::proto::etcd::ResponseHeader;
use crate::raft::types::{NodeId, Raft, WatchReceiver};
use crate::server::node::Node;
use crate::state::kv::{KvCommand, KvError, KvReply, Txn, TxnResult};
use crate::state::{Rejection, Response};

/// The header of every etcd answer: this member, the store revision the answer is at, and the
/// Raft term. etcd's cluster id has no steward counterpart yet: 0.
pub fn header(node: &Node, revision: u64) -> Option<ResponseHeader> {
    header_of(node.id, &node.raft, revision)
}

/// `header` for member `id` with Raft `raft`, where there is no `Node` (a watch session's host).
pub fn header_of(id: NodeId, raft: &Raft, revision: u64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        cluster_id: 0,
        member_id: id,
        revision: i64::try_from(revision).unwrap_or(i64::MAX),
        raft_term: raft.metrics().borrow_watched().current_term,
    })
}

/// etcd's answer to a keyspace refusal: its code and its exact message, which clients match on.
pub fn kv_error(error: &KvError) -> Status {
    let code = match error.code() {
        "OutOfRange" => Code::OutOfRange,
        "NotFound" => Code::NotFound,
        "FailedPrecondition" => Code::FailedPrecondition,
        _ => Code::InvalidArgument,
    };
    Status::new(code, error.to_string())
}

/// A refusal by apply, as etcd words it where etcd has words for it, else steward's own.
pub fn rejection(rejection: &Rejection) -> Status {
    match rejection {
        Rejection::Kv(error) => kv_error(error),
        Rejection::NoSpace { .. } => Status::new(
            Code::ResourceExhausted,
            "etcdserver: mvcc: database space exceeded",
        ),
        other => status(crate::server::errors::rejection(other)),
    }
}

/// An error on the way to the state machine (no leader, a timeout, an overloaded node), with
/// etcd's code and words where etcd has them (clientv3 turns known texts into its typed errors,
/// and applications compare those): no leader, a lost answer ("request timed out"), too many
/// requests, a stopping server, NOSPACE. steward's error details ride along unchanged, so a
/// client that reads them still learns whether the write was applied. Anything else keeps
/// steward's code and message, which name what happened.
pub fn status(status: Status) -> Status {
    use crate::proto::v1::ErrorReason;
    use crate::server::errors::{reason_of, NO_LEADER, SHUTTING_DOWN};
    let etcd = match (reason_of(&status), status.message()) {
        (Some(ErrorReason::NoSpace), _) => Some((
            Code::ResourceExhausted,
            "etcdserver: mvcc: database space exceeded",
        )),
        (Some(ErrorReason::Overloaded | ErrorReason::RateLimited), _) => {
            Some((Code::ResourceExhausted, "etcdserver: too many requests"))
        }
        (Some(ErrorReason::OutcomeUnknown), _) => {
            Some((Code::Unavailable, "etcdserver: request timed out"))
        }
        // etcd's ErrAuthOldRevision: clientv3 answers it by fetching a new token and
        // sending the request again, which is what steward asks of its own clients.
        (Some(ErrorReason::AuthChanged), _) => Some((
            Code::InvalidArgument,
            "etcdserver: revision of auth store is old",
        )),
        (_, NO_LEADER) => Some((Code::Unavailable, "etcdserver: no leader")),
        (_, SHUTTING_DOWN) => Some((Code::Unavailable, "etcdserver: server stopped")),
        _ => None,
    };
    match etcd {
        Some((code, message)) => Status::with_details_and_metadata(
            code,
            message,
            status.details().to_vec().into(),
            status.metadata().clone(),
        ),
        None => status,
    }
}

/// Proposes a kv command: its reply, or apply's refusal left to the caller (who may answer it
/// as etcd does); an error on the way is in etcd's words. `what` names the caller in an
/// internal error.
pub async fn propose_kv(
    node: &Node,
    command: KvCommand,
    what: &str,
) -> Result<Result<KvReply, Rejection>, Status> {
    match node.propose_command(command.into()).await {
        Ok(Response::Kv(reply)) => Ok(Ok(reply)),
        Ok(Response::Rejected(rejection)) => Ok(Err(rejection)),
        Ok(other) => Err(crate::server::errors::internal(
            what,
            format!("answered with another family's reply: {other:?}"),
        )),
        Err(error) => Err(status(error)),
    }
}

/// Proposes a kv command: its reply, or any refusal in etcd's words.
pub async fn propose(node: &Node, command: KvCommand, what: &str) -> Result<KvReply, Status> {
    propose_kv(node, command, what)
        .await?
        .map_err(|refused| rejection(&refused))
}

/// Proposes a txn: its result, or any refusal in etcd's words.
pub async fn txn(node: &Node, txn: Txn, what: &str) -> Result<TxnResult, Status> {
    match propose(node, KvCommand::Txn(txn), what).await? {
        KvReply::Txn(result) => Ok(result),
        other => Err(crate::server::errors::internal(
            what,
            format!("a txn answered with {other:?}"),
        )),
    }
}

/// A request's bytes in an allocation of their own, for what outlives the request (a put's key
/// and value in the keyspace, a watch's key and range end, every key and value a write's command
/// carries: the leader's log keeps the command while the entry is recent). prost decodes a
/// `bytes` field as a slice of the buffer the request was read into
/// (tonic's, 8 KiB or more, shared by the requests read with it), so a kept slice would keep
/// that whole buffer alive until the version is compacted away. Only the leader applies the
/// very command a client sent it (followers decode theirs from the log), so only the leader
/// paid. 64 clients putting new keys through the etcd API for 7 s (about 30,000 puts of 511
/// bytes): the leader's peak RSS was 193 and 196 MB against 98-100 MB for each follower; with
/// the copy, 114 MB.
pub fn owned(bytes: &Bytes) -> Bytes {
    Bytes::copy_from_slice(bytes)
}

/// etcd's `--max-request-bytes`: a request larger than `etcd.request_bytes_max` is refused as
/// etcd refuses it. (gRPC lets through up to 512 KiB more, as etcd's server does, so this check
/// answers rather than the transport's.)
pub fn check_size(node: &Node, request: &impl Message) -> Result<(), Status> {
    if request.encoded_len() > node.config.etcd.request_bytes_max {
        return Err(Status::new(
            Code::InvalidArgument,
            "etcdserver: request is too large",
        ));
    }
    Ok(())
}

/// The transport's ceiling on etcd requests: `etcd.request_bytes_max` plus etcd's 512 KiB of
/// gRPC overhead.
pub fn decoding_limit(node: &Node) -> usize {
    node.config.etcd.request_bytes_max + 512 * 1024
}

/// clientv3's `WithRequireLeader` (metadata `hasleader: true`): refused at once, as etcd does,
/// when this node knows of no leader, instead of waiting for one.
pub fn require_leader<T>(node: &Node, request: &tonic::Request<T>) -> Result<(), Status> {
    let asked = request
        .metadata()
        .get("hasleader")
        .is_some_and(|v| v.as_bytes() == b"true");
    if asked
        && node
            .raft
            .metrics()
            .borrow_watched()
            .current_leader
            .is_none()
    {
        return Err(Status::new(Code::Unavailable, "etcdserver: no leader"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::ErrorReason;
    use crate::server::errors::{self, reason_of};

    #[test]
    fn errors_on_the_way_read_as_etcds_and_keep_stewards_details() {
        let cases = [
            (
                errors::no_leader(),
                Code::Unavailable,
                "etcdserver: no leader",
                ErrorReason::Unavailable,
            ),
            (
                errors::outcome_unknown("the leader went away", None),
                Code::Unavailable,
                "etcdserver: request timed out",
                ErrorReason::OutcomeUnknown,
            ),
            (
                errors::shutting_down(),
                Code::Unavailable,
                "etcdserver: server stopped",
                ErrorReason::Unavailable,
            ),
            (
                errors::overloaded("limits.proposals_max", "too many proposals"),
                Code::ResourceExhausted,
                "etcdserver: too many requests",
                ErrorReason::Overloaded,
            ),
            (
                errors::rejection(&Rejection::AuthChanged {
                    authorized_at: 2,
                    now: 3,
                }),
                Code::InvalidArgument,
                "etcdserver: revision of auth store is old",
                ErrorReason::AuthChanged,
            ),
        ];
        for (steward, code, message, reason) in cases {
            let etcd = status(steward);
            assert_eq!(etcd.code(), code, "{etcd:?}");
            assert_eq!(etcd.message(), message);
            assert_eq!(reason_of(&etcd), Some(reason), "{etcd:?}");
        }
        // What etcd has no words for keeps steward's.
        let other = errors::unavailable("forwarding to the leader failed", None);
        assert_eq!(status(other.clone()).message(), other.message());
    }
}
