//! Workloads over steward's etcd v3 API, spoken with etcd's own wire types (steward's copies of
//! etcd's protos) and none of steward's client: what a clientv3 user would send.
//!
//! - [`register`]: per-key read, write and compare-and-set, checked for linearizability.
//! - [`lock`]: a counter incremented under etcd locks held by leases, fenced by the lock key's
//!   creation revision, checked by the mutex model and the counter's bounds.
//!
//! Every call has a deadline ([`CALL_TIMEOUT`]); a call that passes it is an unknown outcome, as
//! a timed-out etcd call is. Errors are classified as for steward's own API (`outcome`): steward's
//! etcd endpoint keeps the reasons of its refusals, and without one the gRPC code decides.

pub mod lock;
pub mod register;

use std::future::Future;
use std::time::Duration;

use steward::proto::etcd::compare::{CompareResult, CompareTarget, TargetUnion};
use steward::proto::etcd::kv_client::KvClient;
use steward::proto::etcd::request_op::Request as Op;
use steward::proto::etcd::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest,
    TxnResponse,
};
use steward::proto::mvccpb::KeyValue;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

/// The deadline of one unary call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A channel to one node (jepsen clients are bound to one node each), connected lazily.
pub fn channel(endpoint: &str) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(endpoint.to_string())?
        .connect_timeout(CALL_TIMEOUT)
        .tcp_nodelay(true)
        .connect_lazy())
}

/// `fut` under `limit`: past it, the client's DeadlineExceeded (an unknown outcome); dropping
/// the call cancels it on the server.
pub async fn within<T>(
    limit: Duration,
    fut: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {limit:?} (client deadline)"
        ))),
    }
}

/// A linearizable Range of one key.
pub async fn get(kv: &mut KvClient<Channel>, key: &str) -> Result<Option<KeyValue>, Status> {
    let request = RangeRequest {
        key: key.as_bytes().to_vec().into(),
        ..RangeRequest::default()
    };
    let reply: RangeResponse = within(CALL_TIMEOUT, kv.range(request)).await?;
    Ok(reply.kvs.into_iter().next())
}

/// A Put of `value` (no lease).
pub async fn put(kv: &mut KvClient<Channel>, key: &str, value: String) -> Result<(), Status> {
    let request = PutRequest {
        key: key.as_bytes().to_vec().into(),
        value: value.into_bytes().into(),
        ..PutRequest::default()
    };
    within(CALL_TIMEOUT, kv.put(request)).await.map(|_| ())
}

/// A Txn of `compare`, then `success` or nothing.
pub async fn txn(
    kv: &mut KvClient<Channel>,
    compare: Vec<Compare>,
    success: Vec<RequestOp>,
) -> Result<TxnResponse, Status> {
    let request = TxnRequest {
        compare,
        success,
        failure: vec![],
    };
    within(CALL_TIMEOUT, kv.txn(request)).await
}

/// `key`'s `target` is equal to `value`.
pub fn equal(key: &str, target: TargetUnion) -> Compare {
    let kind = match target {
        TargetUnion::Version(_) => CompareTarget::Version,
        TargetUnion::CreateRevision(_) => CompareTarget::Create,
        TargetUnion::ModRevision(_) => CompareTarget::Mod,
        TargetUnion::Value(_) => CompareTarget::Value,
        TargetUnion::Lease(_) => CompareTarget::Lease,
    };
    Compare {
        result: CompareResult::Equal as i32,
        target: kind as i32,
        key: key.as_bytes().to_vec().into(),
        target_union: Some(target),
        range_end: Default::default(),
    }
}

/// A Put inside a Txn.
pub fn put_op(key: &str, value: String, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: key.as_bytes().to_vec().into(),
            value: value.into_bytes().into(),
            lease,
            ..PutRequest::default()
        })),
    }
}

/// A DeleteRange of one key inside a Txn.
pub fn delete_op(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
            key: key.to_vec().into(),
            ..DeleteRangeRequest::default()
        })),
    }
}

/// A Range of one key inside a Txn.
pub fn get_op(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(RangeRequest {
            key: key.to_vec().into(),
            ..RangeRequest::default()
        })),
    }
}

/// The integer a register or counter value holds.
pub fn value_of(kv: &KeyValue) -> Option<i64> {
    std::str::from_utf8(&kv.value).ok()?.parse().ok()
}
