//! etcd's Lock and Election services (v3lockpb, v3electionpb), done on the keyspace the way
//! clientv3/concurrency's Mutex and Election do them, so a client of either and a client of
//! the concurrency package share locks and elections:
//!
//! - a contender's key is `name/<lease in hex>`, put under its lease if it does not exist;
//! - the contender whose key has the lowest creation revision under `name/` holds the lock (or
//!   leads); the others wait until every key created before theirs is gone (deleted, or its
//!   lease ended);
//! - unlocking or resigning deletes the key; a waiter that gives up deletes its own.
//!
//! The wait is a watch of the prefix on this node's hub, registered before each look at the
//! store, so no delete goes unseen; the first look follows a read barrier, so this node has
//! applied the contender's own key and every key created before it.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response as GrpcResponse, Status};

use super::hub::{Item, Registered, StreamReceiver};
use super::kv::kv_pb;
use super::{header, require_leader};
use crate::proto::v1::Consistency;
use crate::proto::v3electionpb::election_server::Election;
use crate::proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use crate::proto::v3lockpb::lock_server::Lock;
use crate::proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use crate::server::errors;
use crate::server::node::{CancelOnDrop, Node};
use crate::state::kv::{
    prefix_end, Bytes, Compare, CompareOp, CompareTarget, DeleteOp, KeyValue, KvCommand, OpResult,
    PutOp, RangeOp, RequestOp, SortOrder, SortTarget, Span, Txn, TxnResult,
};

/// concurrency's error when a waiter's key is gone (its lease ended) before it got the lock.
const SESSION_EXPIRED: &str = "mutex: session is expired";
/// concurrency's errors for elections.
const NOT_LEADER: &str = "election: not leader";
const NO_LEADER: &str = "election: no leader";

pub struct LockService {
    node: Arc<Node>,
}

impl LockService {
    pub fn new(node: Arc<Node>) -> Self {
        LockService { node }
    }
}

/// `name` + "/": the prefix of an election's or a lock's keys.
fn prefix(name: &Bytes) -> Bytes {
    let mut p = name.to_vec();
    p.push(b'/');
    Bytes::from(p)
}

fn contender_key(name: &Bytes, lease: i64) -> Bytes {
    let mut key = prefix(name).to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    Bytes::from(key)
}

fn same_create(key: &Bytes, rev: u64) -> Compare {
    Compare {
        key: key.clone(),
        range_end: Bytes::new(),
        op: CompareOp::Equal,
        target: CompareTarget::Create(i64::try_from(rev).unwrap_or(i64::MAX)),
    }
}

fn get(key: &Bytes) -> RequestOp {
    RequestOp::Range(RangeOp {
        key: key.clone(),
        ..RangeOp::default()
    })
}

fn put(key: &Bytes, value: Bytes, lease: i64) -> RequestOp {
    RequestOp::Put(PutOp {
        key: key.clone(),
        value: super::owned(&value),
        lease,
        ..PutOp::default()
    })
}

fn delete(key: &Bytes) -> RequestOp {
    RequestOp::Delete(DeleteOp {
        key: key.clone(),
        ..DeleteOp::default()
    })
}

async fn txn(node: &Node, txn: Txn) -> Result<TxnResult, Status> {
    super::txn(node, txn, "etcd lock").await
}

/// The first kv of a range answer of a txn.
fn first_kv(result: &TxnResult, at: usize) -> Option<KeyValue> {
    match result.responses.get(at) {
        Some(OpResult::Range(range)) => range.kvs.first().cloned(),
        _ => None,
    }
}

/// Puts the contender's key under `lease` unless it exists; (its creation revision, and
/// whether it was there already with its value).
async fn enter(
    node: &Node,
    key: &Bytes,
    lease: i64,
    value: Bytes,
) -> Result<(u64, Option<KeyValue>), Status> {
    let result = txn(
        node,
        Txn {
            compare: vec![Compare {
                key: key.clone(),
                range_end: Bytes::new(),
                op: CompareOp::Equal,
                target: CompareTarget::Create(0),
            }],
            success: vec![put(key, value, lease)],
            failure: vec![get(key)],
        },
    )
    .await?;
    if result.succeeded {
        return Ok((result.revision, None));
    }
    let existing = first_kv(&result, 0)
        .ok_or_else(|| errors::internal("etcd lock", "the contender's key vanished"))?;
    Ok((existing.create_revision, Some(existing)))
}

/// A live watch of `span` on this node's hub, for waiting on its changes.
struct Waiter {
    node: Arc<Node>,
    stream: u64,
    rx: StreamReceiver,
}

impl Waiter {
    fn open(node: &Arc<Node>, span: Span) -> Result<Waiter, Status> {
        let (stream, rx) = node.hub.kv.open_stream();
        let waiter = Waiter {
            node: node.clone(),
            stream,
            rx,
        };
        match node
            .hub
            .kv
            .register(stream, span, 0, |_, to, _| Ok((Vec::new(), to)))
        {
            Ok(Registered::Live { .. }) => Ok(waiter),
            Ok(_) => Err(errors::internal("etcd lock", "a live watch replayed")),
            Err(refused) => Err(errors::overloaded(
                "limits.watchers_max",
                format!("cannot watch for the lock: {refused:?}"),
            )),
        }
    }

    /// Until the next change (or a catch-up notice: either way, look again).
    async fn changed(&mut self) -> Result<(), Status> {
        match self.rx.recv().await {
            Some(Item::Events { .. } | Item::Lagged(_) | Item::Progress { .. }) => Ok(()),
            None => Err(errors::shutting_down()),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.node.hub.kv.close_stream(self.stream);
    }
}

/// Waits until no key under `prefix` was created before `rev` (the contender `key`'s), i.e.
/// `key` is first; fails when `key` itself is gone meanwhile (its lease ended).
async fn wait_first(node: &Arc<Node>, prefix: &Bytes, key: &Bytes, rev: u64) -> Result<(), Status> {
    let span = Span::Between(prefix.clone(), prefix_end(prefix.as_ref()));
    let mut waiter = Waiter::open(node, span.clone())?;
    node.read_barrier(Consistency::Linearizable)
        .await
        .map_err(super::status)?;
    loop {
        {
            let state = node.state();
            let kv = state.kv();
            if kv.get_at(key, u64::MAX).is_none() {
                return Err(Status::new(Code::Unknown, SESSION_EXPIRED));
            }
            // max_create_revision 0 would mean "no bound": nothing is older than revision 1.
            if rev <= 1 {
                return Ok(());
            }
            let earlier = RangeOp {
                key: prefix.clone(),
                range_end: prefix_end(prefix.as_ref()),
                max_create_revision: rev - 1,
                limit: 1,
                keys_only: true,
                ..RangeOp::default()
            };
            let found = kv
                .range(&earlier, state.revision())
                .map_err(|e| super::kv_error(&e))?;
            if found.kvs.is_empty() {
                return Ok(());
            }
        }
        waiter.changed().await?;
    }
}

/// The leader of an election: the key under its prefix created first.
fn leader_of(node: &Node, name: &Bytes) -> Option<KeyValue> {
    let prefix = prefix(name);
    let state = node.state();
    let first = RangeOp {
        key: prefix.clone(),
        range_end: prefix_end(prefix.as_ref()),
        limit: 1,
        sort_order: SortOrder::Ascend,
        sort_target: SortTarget::Create,
        ..RangeOp::default()
    };
    state
        .kv()
        .range(&first, state.revision())
        .ok()?
        .kvs
        .into_iter()
        .next()
}

/// Deletes the contender's key if the waiting call is dropped before it got what it waited
/// for, as concurrency's Mutex.Lock does when its context ends.
fn abandon_guard(node: &Arc<Node>, key: &Bytes) -> CancelOnDrop {
    CancelOnDrop::new(
        node.clone(),
        KvCommand::Txn(Txn::of(delete(key))),
        "etcd lock wait",
    )
}

#[tonic::async_trait]
impl Lock for LockService {
    #[tracing::instrument(level = "debug", name = "etcd.Lock", skip_all)]
    async fn lock(
        &self,
        request: Request<LockRequest>,
    ) -> Result<GrpcResponse<LockResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        let key = contender_key(&req.name, req.lease);
        let (rev, _) = enter(&self.node, &key, req.lease, Bytes::new()).await?;
        let mut guard = abandon_guard(&self.node, &key);
        if !crate::bugs::active(crate::bugs::Bug::EtcdLockNoWait) {
            wait_first(&self.node, &prefix(&req.name), &key, rev).await?;
        }
        guard.disarm();
        Ok(GrpcResponse::new(LockResponse {
            header: header(&self.node, self.node.state().revision()),
            key,
        }))
    }

    #[tracing::instrument(level = "debug", name = "etcd.Unlock", skip_all)]
    async fn unlock(
        &self,
        request: Request<UnlockRequest>,
    ) -> Result<GrpcResponse<UnlockResponse>, Status> {
        require_leader(&self.node, &request)?;
        let key = request.into_inner().key;
        let result = txn(&self.node, Txn::of(delete(&key))).await?;
        Ok(GrpcResponse::new(UnlockResponse {
            header: header(&self.node, result.revision),
        }))
    }
}

pub struct ElectionService {
    node: Arc<Node>,
}

impl ElectionService {
    pub fn new(node: Arc<Node>) -> Self {
        ElectionService { node }
    }

    fn leader_key(leader: Option<LeaderKey>) -> Result<LeaderKey, Status> {
        leader.ok_or_else(|| {
            errors::invalid("leader", "is required: the LeaderKey Campaign answered")
        })
    }
}

#[tonic::async_trait]
impl Election for ElectionService {
    #[tracing::instrument(level = "debug", name = "etcd.Campaign", skip_all)]
    async fn campaign(
        &self,
        request: Request<CampaignRequest>,
    ) -> Result<GrpcResponse<CampaignResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        let key = contender_key(&req.name, req.lease);
        let (rev, existing) = enter(&self.node, &key, req.lease, req.value.clone()).await?;
        // Campaigning again with the same lease proclaims the new value, as concurrency does.
        if existing.is_some_and(|kv| kv.value != req.value) {
            let proclaimed = txn(
                &self.node,
                Txn {
                    compare: vec![same_create(&key, rev)],
                    success: vec![put(&key, req.value.clone(), req.lease)],
                    failure: vec![],
                },
            )
            .await?;
            if !proclaimed.succeeded {
                return Err(Status::new(Code::Unknown, SESSION_EXPIRED));
            }
        }
        let mut guard = abandon_guard(&self.node, &key);
        wait_first(&self.node, &prefix(&req.name), &key, rev).await?;
        guard.disarm();
        Ok(GrpcResponse::new(CampaignResponse {
            header: header(&self.node, self.node.state().revision()),
            leader: Some(LeaderKey {
                name: req.name,
                key,
                rev: i64::try_from(rev).unwrap_or(i64::MAX),
                lease: req.lease,
            }),
        }))
    }

    #[tracing::instrument(level = "debug", name = "etcd.Proclaim", skip_all)]
    async fn proclaim(
        &self,
        request: Request<ProclaimRequest>,
    ) -> Result<GrpcResponse<ProclaimResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        let leader = Self::leader_key(req.leader)?;
        let rev = u64::try_from(leader.rev).unwrap_or(0);
        let result = txn(
            &self.node,
            Txn {
                compare: vec![same_create(&leader.key, rev)],
                success: vec![put(&leader.key, req.value, leader.lease)],
                failure: vec![],
            },
        )
        .await?;
        if !result.succeeded {
            return Err(Status::new(Code::FailedPrecondition, NOT_LEADER));
        }
        Ok(GrpcResponse::new(ProclaimResponse {
            header: header(&self.node, result.revision),
        }))
    }

    #[tracing::instrument(level = "debug", name = "etcd.Leader", skip_all)]
    async fn leader(
        &self,
        request: Request<LeaderRequest>,
    ) -> Result<GrpcResponse<LeaderResponse>, Status> {
        require_leader(&self.node, &request)?;
        let name = request.into_inner().name;
        self.node
            .read_barrier(Consistency::Linearizable)
            .await
            .map_err(super::status)?;
        let kv =
            leader_of(&self.node, &name).ok_or_else(|| Status::new(Code::Unknown, NO_LEADER))?;
        Ok(GrpcResponse::new(LeaderResponse {
            header: header(&self.node, self.node.state().revision()),
            kv: Some(kv_pb(kv)),
        }))
    }

    type ObserveStream = ReceiverStream<Result<LeaderResponse, Status>>;

    /// The current leader's value, then every change of leader or of its value, in order.
    #[tracing::instrument(level = "debug", name = "etcd.Observe", skip_all)]
    async fn observe(
        &self,
        request: Request<LeaderRequest>,
    ) -> Result<GrpcResponse<Self::ObserveStream>, Status> {
        require_leader(&self.node, &request)?;
        let name = request.into_inner().name;
        let p = prefix(&name);
        let mut waiter = Waiter::open(&self.node, Span::Between(p.clone(), prefix_end(&p)))?;
        self.node
            .read_barrier(Consistency::Linearizable)
            .await
            .map_err(super::status)?;
        let (tx, rx) = mpsc::channel(16);
        let node = self.node.clone();
        tokio::spawn(async move {
            let mut last: Option<(Bytes, u64)> = None;
            loop {
                if let Some(kv) = leader_of(&node, &name) {
                    let seen = (kv.key.clone(), kv.mod_revision);
                    if last.as_ref() != Some(&seen) {
                        last = Some(seen);
                        let answer = LeaderResponse {
                            header: header(&node, node.state().revision()),
                            kv: Some(kv_pb(kv)),
                        };
                        if tx.send(Ok(answer)).await.is_err() {
                            return;
                        }
                    }
                }
                tokio::select! {
                    changed = waiter.changed() => {
                        if let Err(status) = changed {
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(GrpcResponse::new(ReceiverStream::new(rx)))
    }

    #[tracing::instrument(level = "debug", name = "etcd.Resign", skip_all)]
    async fn resign(
        &self,
        request: Request<ResignRequest>,
    ) -> Result<GrpcResponse<ResignResponse>, Status> {
        require_leader(&self.node, &request)?;
        let leader = Self::leader_key(request.into_inner().leader)?;
        let rev = u64::try_from(leader.rev).unwrap_or(0);
        let result = txn(
            &self.node,
            Txn {
                compare: vec![same_create(&leader.key, rev)],
                success: vec![delete(&leader.key)],
                failure: vec![],
            },
        )
        .await?;
        Ok(GrpcResponse::new(ResignResponse {
            header: header(&self.node, result.revision),
        }))
    }
}
