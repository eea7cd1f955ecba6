//! etcd's KV service: Range, Put, DeleteRange, Txn and Compact on the core's keyspace
//! (`state::kv`).
//!
//! Writes (a put or a delete is a txn of one request) are proposed and applied like any
//! command; etcd's request checks run first, so a request etcd would refuse never reaches the
//! log. Reads are local after the read barrier (none when `serializable`), and so are txns
//! that write nothing, as etcd serves them: a read-only txn is linearizable unless every range
//! in it is serializable.

use std::sync::Arc;

use tonic::{Request, Response as GrpcResponse, Status};

use super::{check_size, header, kv_error, require_leader};
use crate::proto::etcd::compare::{CompareResult, CompareTarget as PbTarget, TargetUnion};
use crate::proto::etcd::kv_server::Kv;
use crate::proto::etcd::range_request::{SortOrder as PbOrder, SortTarget as PbSortTarget};
use crate::proto::etcd::{
    request_op, response_op, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp as PbOp,
    ResponseOp, TxnRequest, TxnResponse,
};
use crate::proto::mvccpb;
use crate::proto::v1::Consistency;
use crate::server::errors;
use crate::server::node::Node;
use crate::state::kv::{
    Compare, CompareOp, CompareTarget, DeleteOp, KeyValue, KvCommand, KvReply, OpResult, PutOp,
    RangeOp, RangeResult, RequestOp, SortOrder, SortTarget, Txn, TxnResult,
};

pub struct KvService {
    node: Arc<Node>,
}

impl KvService {
    pub fn new(node: Arc<Node>) -> Self {
        KvService { node }
    }

    fn ops_max(&self) -> usize {
        self.node.config.etcd.txn_ops_max
    }

    /// Proposes a txn that writes, and returns its result.
    async fn write(&self, txn: Txn) -> Result<TxnResult, Status> {
        super::txn(&self.node, txn, "etcd write").await
    }

    /// The read barrier of a read, then the store.
    async fn barrier(&self, serializable: bool) -> Result<(), Status> {
        let consistency = if serializable {
            Consistency::Serializable
        } else {
            Consistency::Linearizable
        };
        self.node
            .read_barrier(consistency)
            .await
            .map_err(super::status)
    }
}

#[tonic::async_trait]
impl Kv for KvService {
    #[tracing::instrument(level = "debug", name = "etcd.Range", skip_all)]
    async fn range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<GrpcResponse<RangeResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        check_size(&self.node, &req)?;
        let op = range_op(&req, "")?;
        RequestOp::Range(op.clone())
            .check(self.ops_max())
            .map_err(|e| kv_error(&e))?;
        self.barrier(req.serializable).await?;
        let (result, revision) = {
            let state = self.node.state();
            let current = state.revision();
            let result = state.kv().range(&op, current).map_err(|e| kv_error(&e))?;
            (result, current)
        };
        Ok(GrpcResponse::new(range_response(
            &self.node, result, revision,
        )))
    }

    #[tracing::instrument(level = "debug", name = "etcd.Put", skip_all)]
    async fn put(&self, request: Request<PutRequest>) -> Result<GrpcResponse<PutResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        check_size(&self.node, &req)?;
        let op = RequestOp::Put(put_op(req));
        op.check(self.ops_max()).map_err(|e| kv_error(&e))?;
        let result = self.write(Txn::of(op)).await?;
        match result.responses.into_iter().next() {
            Some(OpResult::Put { prev_kv }) => Ok(GrpcResponse::new(PutResponse {
                header: header(&self.node, result.revision),
                prev_kv: prev_kv.map(kv_pb),
            })),
            other => Err(unexpected("put", other)),
        }
    }

    #[tracing::instrument(level = "debug", name = "etcd.DeleteRange", skip_all)]
    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<GrpcResponse<DeleteRangeResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        check_size(&self.node, &req)?;
        let op = RequestOp::Delete(delete_op(req));
        op.check(self.ops_max()).map_err(|e| kv_error(&e))?;
        let result = self.write(Txn::of(op)).await?;
        match result.responses.into_iter().next() {
            Some(OpResult::Delete { deleted, prev_kvs }) => {
                Ok(GrpcResponse::new(DeleteRangeResponse {
                    header: header(&self.node, result.revision),
                    deleted: count(deleted),
                    prev_kvs: prev_kvs.into_iter().map(kv_pb).collect(),
                }))
            }
            other => Err(unexpected("delete", other)),
        }
    }

    #[tracing::instrument(level = "debug", name = "etcd.Txn", skip_all)]
    async fn txn(&self, request: Request<TxnRequest>) -> Result<GrpcResponse<TxnResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        check_size(&self.node, &req)?;
        let txn = txn(&req, "")?;
        txn.check(self.ops_max()).map_err(|e| kv_error(&e))?;
        let result = if txn.writes() {
            self.write(txn).await?
        } else {
            self.barrier(all_serializable(&req)).await?;
            let state = self.node.state();
            crate::state::kv::apply::read_txn(state.kv(), state.revision(), &txn)
                .map_err(|e| kv_error(&e))?
        };
        Ok(GrpcResponse::new(txn_response(&self.node, result)))
    }

    #[tracing::instrument(level = "info", name = "etcd.Compact", skip_all)]
    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<GrpcResponse<CompactionResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        let revision = u64::try_from(req.revision).unwrap_or(0);
        let command = KvCommand::Compact { revision };
        match super::propose(&self.node, command, "etcd compact").await? {
            KvReply::Compacted { revision } => {
                tracing::info!(compacted = req.revision, "etcd keyspace compacted");
                Ok(GrpcResponse::new(CompactionResponse {
                    header: header(&self.node, revision),
                }))
            }
            other => Err(unexpected("compact", Some(other))),
        }
    }
}

fn unexpected(what: &str, answer: Option<impl std::fmt::Debug>) -> Status {
    errors::internal(
        "etcd KV",
        format!("a {what} answered with {answer:?} instead of its own result"),
    )
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A revision or limit from the wire: <= 0 means "none" to etcd.
fn non_negative(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A max filter from the wire: etcd filters every key out with a negative one.
fn max_filter(field: &str, n: i64) -> Result<u64, Status> {
    if n < 0 {
        return Err(errors::invalid(
            field,
            format!("{n} is negative; give a revision, or 0 for no bound"),
        ));
    }
    Ok(n as u64)
}

/// `at` names the request in a txn ("success[2].") for error messages.
fn range_op(r: &RangeRequest, at: &str) -> Result<RangeOp, Status> {
    let sort_order = match PbOrder::try_from(r.sort_order) {
        Ok(PbOrder::None) => SortOrder::None,
        Ok(PbOrder::Ascend) => SortOrder::Ascend,
        Ok(PbOrder::Descend) => SortOrder::Descend,
        Err(_) => return Err(kv_error(&crate::state::kv::KvError::InvalidSortOption)),
    };
    let sort_target = match PbSortTarget::try_from(r.sort_target) {
        Ok(PbSortTarget::Key) => SortTarget::Key,
        Ok(PbSortTarget::Version) => SortTarget::Version,
        Ok(PbSortTarget::Create) => SortTarget::Create,
        Ok(PbSortTarget::Mod) => SortTarget::Mod,
        Ok(PbSortTarget::Value) => SortTarget::Value,
        Err(_) => return Err(kv_error(&crate::state::kv::KvError::InvalidSortOption)),
    };
    Ok(RangeOp {
        key: r.key.clone(),
        range_end: r.range_end.clone(),
        limit: non_negative(r.limit),
        revision: non_negative(r.revision),
        sort_order,
        sort_target,
        keys_only: r.keys_only,
        count_only: r.count_only,
        min_mod_revision: non_negative(r.min_mod_revision),
        max_mod_revision: max_filter(&format!("{at}max_mod_revision"), r.max_mod_revision)?,
        min_create_revision: non_negative(r.min_create_revision),
        max_create_revision: max_filter(
            &format!("{at}max_create_revision"),
            r.max_create_revision,
        )?,
    })
}

fn put_op(p: PutRequest) -> PutOp {
    PutOp {
        key: super::owned(&p.key),
        value: super::owned(&p.value),
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    }
}

fn delete_op(d: DeleteRangeRequest) -> DeleteOp {
    DeleteOp {
        key: super::owned(&d.key),
        range_end: super::owned(&d.range_end),
        prev_kv: d.prev_kv,
    }
}

fn txn(t: &TxnRequest, at: &str) -> Result<Txn, Status> {
    let compare = t
        .compare
        .iter()
        .enumerate()
        .map(|(i, c)| compare(c, &format!("{at}compare[{i}].")))
        .collect::<Result<_, _>>()?;
    let branch = |ops: &[PbOp], name: &str| -> Result<Vec<RequestOp>, Status> {
        ops.iter()
            .enumerate()
            .map(|(i, op)| request_op(op, &format!("{at}{name}[{i}].")))
            .collect()
    };
    Ok(Txn {
        compare,
        success: branch(&t.success, "success")?,
        failure: branch(&t.failure, "failure")?,
    })
}

fn request_op(op: &PbOp, at: &str) -> Result<RequestOp, Status> {
    match &op.request {
        Some(request_op::Request::RequestRange(r)) => {
            // Kept in the txn's command, unlike a Range request's own op: copied here only.
            let mut op = range_op(r, at)?;
            op.key = super::owned(&op.key);
            op.range_end = super::owned(&op.range_end);
            Ok(RequestOp::Range(op))
        }
        Some(request_op::Request::RequestPut(p)) => Ok(RequestOp::Put(put_op(p.clone()))),
        Some(request_op::Request::RequestDeleteRange(d)) => {
            Ok(RequestOp::Delete(delete_op(d.clone())))
        }
        Some(request_op::Request::RequestTxn(t)) => Ok(RequestOp::Txn(txn(t, at)?)),
        None => Err(errors::invalid(
            &format!("{at}request"),
            "is empty; give one of request_range, request_put, request_delete_range, request_txn",
        )),
    }
}

/// etcd reads the operand of the compare's target; an operand of another kind (or none) is
/// that target's zero, as etcd takes it.
fn compare(c: &crate::proto::etcd::Compare, at: &str) -> Result<Compare, Status> {
    let op = match CompareResult::try_from(c.result) {
        Ok(CompareResult::Equal) => CompareOp::Equal,
        Ok(CompareResult::Greater) => CompareOp::Greater,
        Ok(CompareResult::Less) => CompareOp::Less,
        Ok(CompareResult::NotEqual) => CompareOp::NotEqual,
        Err(_) => {
            return Err(errors::invalid(
                &format!("{at}result"),
                format!(
                    "{} is not a CompareResult (EQUAL, GREATER, LESS, NOT_EQUAL)",
                    c.result
                ),
            ))
        }
    };
    let int =
        |pick: fn(&TargetUnion) -> Option<i64>| c.target_union.as_ref().and_then(pick).unwrap_or(0);
    let target = match PbTarget::try_from(c.target) {
        Ok(PbTarget::Version) => CompareTarget::Version(int(|u| match u {
            TargetUnion::Version(v) => Some(*v),
            _ => None,
        })),
        Ok(PbTarget::Create) => CompareTarget::Create(int(|u| match u {
            TargetUnion::CreateRevision(v) => Some(*v),
            _ => None,
        })),
        Ok(PbTarget::Mod) => CompareTarget::Mod(int(|u| match u {
            TargetUnion::ModRevision(v) => Some(*v),
            _ => None,
        })),
        Ok(PbTarget::Lease) => CompareTarget::Lease(int(|u| match u {
            TargetUnion::Lease(v) => Some(*v),
            _ => None,
        })),
        Ok(PbTarget::Value) => CompareTarget::Value(match &c.target_union {
            Some(TargetUnion::Value(v)) => super::owned(v),
            _ => Default::default(),
        }),
        Err(_) => {
            return Err(errors::invalid(
                &format!("{at}target"),
                format!(
                    "{} is not a CompareTarget (VERSION, CREATE, MOD, VALUE, LEASE)",
                    c.target
                ),
            ))
        }
    };
    Ok(Compare {
        key: super::owned(&c.key),
        range_end: super::owned(&c.range_end),
        op,
        target,
    })
}

/// Whether every range of a read-only txn asks to be serializable (then the txn is).
fn all_serializable(t: &TxnRequest) -> bool {
    t.success
        .iter()
        .chain(&t.failure)
        .all(|op| match &op.request {
            Some(request_op::Request::RequestRange(r)) => r.serializable,
            Some(request_op::Request::RequestTxn(t)) => all_serializable(t),
            _ => true,
        })
}

pub(super) fn kv_pb(kv: KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: count(kv.create_revision),
        mod_revision: count(kv.mod_revision),
        version: count(kv.version),
        value: kv.value,
        lease: kv.lease,
    }
}

fn range_response(node: &Node, result: RangeResult, revision: u64) -> RangeResponse {
    RangeResponse {
        header: header(node, revision),
        kvs: result.kvs.into_iter().map(kv_pb).collect(),
        more: result.more,
        count: count(result.count),
    }
}

fn txn_response(node: &Node, result: TxnResult) -> TxnResponse {
    let revision = result.revision;
    let responses = result
        .responses
        .into_iter()
        .map(|r| ResponseOp {
            response: Some(match r {
                OpResult::Range(range) => {
                    response_op::Response::ResponseRange(range_response(node, range, revision))
                }
                OpResult::Put { prev_kv } => response_op::Response::ResponsePut(PutResponse {
                    header: header(node, revision),
                    prev_kv: prev_kv.map(kv_pb),
                }),
                OpResult::Delete { deleted, prev_kvs } => {
                    response_op::Response::ResponseDeleteRange(DeleteRangeResponse {
                        header: header(node, revision),
                        deleted: count(deleted),
                        prev_kvs: prev_kvs.into_iter().map(kv_pb).collect(),
                    })
                }
                OpResult::Txn(nested) => {
                    response_op::Response::ResponseTxn(txn_response(node, nested))
                }
            }),
        })
        .collect();
    TxnResponse {
        header: header(node, revision),
        succeeded: result.succeeded,
        responses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use prost::Message;

    /// A put's key and value do not share the buffer its request was decoded from, which would
    /// stay alive as long as the keyspace keeps the version (`etcd::owned`).
    #[test]
    fn a_put_keeps_its_own_bytes_not_the_request_buffer() {
        let request = PutRequest {
            key: Bytes::from_static(b"/registry/pods/default/a"),
            value: Bytes::from(vec![7u8; 511]),
            ..PutRequest::default()
        };
        let wire = Bytes::from(request.encode_to_vec());
        let in_wire = |b: &Bytes| wire.as_ptr_range().contains(&b.as_ptr());
        let decoded = PutRequest::decode(wire.clone()).expect("decodes");
        // What the test guards against: prost hands out slices of the buffer.
        assert!(in_wire(&decoded.key) && in_wire(&decoded.value));
        let op = put_op(decoded);
        assert_eq!((&op.key, &op.value), (&request.key, &request.value));
        assert!(
            !in_wire(&op.key),
            "the key is a slice of the request buffer"
        );
        assert!(
            !in_wire(&op.value),
            "the value is a slice of the request buffer"
        );
    }

    /// Nor does anything else a txn keeps in its command (which the leader's log keeps while
    /// the entry is recent): compares, ranges, deletes.
    #[test]
    fn a_txn_keeps_its_own_bytes_not_the_request_buffer() {
        use crate::proto::etcd::Compare as PbCompare;
        let key = || Bytes::from_static(b"/registry/pods/default/a");
        let end = || Bytes::from_static(b"/registry/pods/default/b");
        let request = TxnRequest {
            compare: vec![PbCompare {
                key: key(),
                range_end: end(),
                target: PbTarget::Value as i32,
                target_union: Some(TargetUnion::Value(Bytes::from_static(b"old"))),
                ..PbCompare::default()
            }],
            success: vec![PbOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key: key(),
                        range_end: end(),
                        ..DeleteRangeRequest::default()
                    },
                )),
            }],
            failure: vec![PbOp {
                request: Some(request_op::Request::RequestRange(RangeRequest {
                    key: key(),
                    range_end: end(),
                    ..RangeRequest::default()
                })),
            }],
        };
        let wire = Bytes::from(request.encode_to_vec());
        let in_wire = |b: &Bytes| !b.is_empty() && wire.as_ptr_range().contains(&b.as_ptr());
        let decoded = TxnRequest::decode(wire.clone()).expect("decodes");
        assert!(in_wire(&decoded.compare[0].key));
        let t = txn(&decoded, "").expect("a valid txn");
        let c = &t.compare[0];
        let CompareTarget::Value(value) = &c.target else {
            panic!("a value compare: {:?}", c.target)
        };
        let RequestOp::Delete(d) = &t.success[0] else {
            panic!("a delete: {:?}", t.success[0])
        };
        let RequestOp::Range(r) = &t.failure[0] else {
            panic!("a range: {:?}", t.failure[0])
        };
        for (what, b) in [
            ("compare key", &c.key),
            ("compare range end", &c.range_end),
            ("compare value", value),
            ("delete key", &d.key),
            ("delete range end", &d.range_end),
            ("range key", &r.key),
            ("range end", &r.range_end),
        ] {
            assert!(!b.is_empty(), "{what} is empty");
            assert!(!in_wire(b), "the {what} is a slice of the request buffer");
        }
    }
}
