//! etcd's Lease service, and the leader's lease sweeper, on cluster time (README "Time"):
//! grants, keep-alives and revocations go through the log like every steward TTL, so a lease
//! never ends early, not even across a wall-clock step or a change of leader, and ends late by
//! at most the bound the README states. etcd keeps leases in its leader's memory and resets
//! them all on a change of leader; here a keep-alive is durable on a majority before it is
//! answered.
//!
//! A TTL below `min_ttl_s` (1.5 election timeouts, rounded up to a second, as etcd's own
//! minimum is) is raised to it: a shorter lease could end during an election before any
//! keep-alive could land.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response as GrpcResponse, Status, Streaming};

use super::{header, kv_error, require_leader};
use crate::proto::etcd::lease_server::Lease;
use crate::proto::etcd::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseStatus,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use crate::proto::v1::Consistency;
use crate::server::errors;
use crate::server::node::Node;
use crate::state::kv::lease::{LEASE_SWEEP_MAX, LEASE_TTL_S_MAX};
use crate::state::kv::{KvCommand, KvError, KvReply};
use crate::state::{Rejection, Response};

pub struct LeaseService {
    node: Arc<Node>,
}

impl LeaseService {
    pub fn new(node: Arc<Node>) -> Self {
        LeaseService { node }
    }
}

/// The shortest lease this cluster grants, in seconds.
pub fn min_ttl_s(node: &Node) -> i64 {
    let ms = node.config.raft.election_timeout_ms_max * 3 / 2;
    i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
}

/// Proposes a lease command; the reply, or the refusal in etcd's words.
async fn propose(node: &Node, command: KvCommand) -> Result<KvReply, Status> {
    super::propose(node, command, "etcd lease").await
}

fn seconds(ms: u64) -> i64 {
    i64::try_from(ms / 1000).unwrap_or(i64::MAX)
}

#[tonic::async_trait]
impl Lease for LeaseService {
    #[tracing::instrument(level = "debug", name = "etcd.LeaseGrant", skip_all)]
    async fn lease_grant(
        &self,
        request: Request<LeaseGrantRequest>,
    ) -> Result<GrpcResponse<LeaseGrantResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        if req.ttl > LEASE_TTL_S_MAX {
            return Err(kv_error(&KvError::LeaseTtlTooLarge));
        }
        let ttl_s = req.ttl.max(min_ttl_s(&self.node));
        let ttl_ms = u64::try_from(ttl_s).unwrap_or(0).saturating_mul(1000);
        match propose(&self.node, KvCommand::LeaseGrant { id: req.id, ttl_ms }).await? {
            KvReply::Lease {
                id,
                ttl_ms,
                revision,
            } => Ok(GrpcResponse::new(LeaseGrantResponse {
                header: header(&self.node, revision),
                id,
                ttl: seconds(ttl_ms),
                error: String::new(),
            })),
            other => Err(unexpected("grant", &other)),
        }
    }

    #[tracing::instrument(level = "debug", name = "etcd.LeaseRevoke", skip_all)]
    async fn lease_revoke(
        &self,
        request: Request<LeaseRevokeRequest>,
    ) -> Result<GrpcResponse<LeaseRevokeResponse>, Status> {
        require_leader(&self.node, &request)?;
        let id = request.into_inner().id;
        match propose(&self.node, KvCommand::LeaseRevoke { id }).await? {
            KvReply::LeasesEnded { revision, .. } => Ok(GrpcResponse::new(LeaseRevokeResponse {
                header: header(&self.node, revision),
            })),
            other => Err(unexpected("revoke", &other)),
        }
    }

    type LeaseKeepAliveStream = ReceiverStream<Result<LeaseKeepAliveResponse, Status>>;

    /// Each request is one keep-alive through the log, answered in order once durable; a lease
    /// that no longer exists is answered with TTL 0, as etcd does.
    #[tracing::instrument(level = "debug", name = "etcd.LeaseKeepAlive", skip_all)]
    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<GrpcResponse<Self::LeaseKeepAliveStream>, Status> {
        require_leader(&self.node, &request)?;
        let mut requests = request.into_inner();
        let (out, out_rx) = mpsc::channel(16);
        let node = self.node.clone();
        tokio::spawn(async move {
            loop {
                let id = tokio::select! {
                    request = requests.message() => match request {
                        Ok(Some(request)) => request.id,
                        Ok(None) | Err(_) => return,
                    },
                    _ = out.closed() => return,
                };
                let keep_alive = KvCommand::LeaseKeepAlive { id };
                let answer = match super::propose_kv(&node, keep_alive, "etcd lease").await {
                    Ok(Ok(KvReply::Lease {
                        ttl_ms, revision, ..
                    })) => Ok(LeaseKeepAliveResponse {
                        header: header(&node, revision),
                        id,
                        ttl: seconds(ttl_ms),
                    }),
                    Ok(Ok(other)) => Err(unexpected("keep-alive", &other)),
                    Ok(Err(Rejection::Kv(KvError::LeaseNotFound))) => Ok(LeaseKeepAliveResponse {
                        header: header(&node, node.state().revision()),
                        id,
                        ttl: 0,
                    }),
                    Ok(Err(refused)) => Err(super::rejection(&refused)),
                    Err(status) => Err(status),
                };
                let failed = answer.is_err();
                if out.send(answer).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(GrpcResponse::new(ReceiverStream::new(out_rx)))
    }

    #[tracing::instrument(level = "debug", name = "etcd.LeaseTimeToLive", skip_all)]
    async fn lease_time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Result<GrpcResponse<LeaseTimeToLiveResponse>, Status> {
        require_leader(&self.node, &request)?;
        let req = request.into_inner();
        self.node
            .read_barrier(Consistency::Linearizable)
            .await
            .map_err(super::status)?;
        let now = self.node.cluster_now();
        let state = self.node.state();
        let response = match state.kv().leases().get(req.id) {
            Some(lease) => LeaseTimeToLiveResponse {
                header: header(&self.node, state.revision()),
                id: req.id,
                ttl: seconds(lease.expires_ms.saturating_sub(now)),
                granted_ttl: seconds(lease.ttl_ms),
                keys: match req.keys {
                    true => lease.keys.iter().cloned().collect(),
                    false => Vec::new(),
                },
            },
            None => LeaseTimeToLiveResponse {
                header: header(&self.node, state.revision()),
                id: req.id,
                ttl: -1,
                ..LeaseTimeToLiveResponse::default()
            },
        };
        Ok(GrpcResponse::new(response))
    }

    #[tracing::instrument(level = "debug", name = "etcd.LeaseLeases", skip_all)]
    async fn lease_leases(
        &self,
        request: Request<LeaseLeasesRequest>,
    ) -> Result<GrpcResponse<LeaseLeasesResponse>, Status> {
        require_leader(&self.node, &request)?;
        self.node
            .read_barrier(Consistency::Linearizable)
            .await
            .map_err(super::status)?;
        let state = self.node.state();
        Ok(GrpcResponse::new(LeaseLeasesResponse {
            header: header(&self.node, state.revision()),
            leases: state
                .kv()
                .leases()
                .iter()
                .map(|l| LeaseStatus { id: l.id })
                .collect(),
        }))
    }
}

fn unexpected(what: &str, reply: &KvReply) -> Status {
    errors::internal(
        "etcd lease",
        format!("a lease {what} answered with {reply:?}"),
    )
}

/// The leader's lease sweeper: every `locks.sweep_interval_ms`, if this node leads, proposes
/// a `LeaseExpire` naming the leases its clock says have ended; apply re-checks each with the
/// entry's cluster time, after the term's grace.
pub async fn run_sweeper(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.locks.sweep_interval_ms);
    let grace_ms = node.term_grace_ms();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let due = node.sweep_due(grace_ms, |state, now| {
            state.kv().leases().due(now, LEASE_SWEEP_MAX)
        });
        let Some(ids) = due.filter(|ids| !ids.is_empty()) else {
            continue;
        };
        match node
            .propose_local(KvCommand::LeaseExpire { ids, grace_ms }.into())
            .await
        {
            Ok(Response::Kv(KvReply::LeasesEnded { ids, revision })) => {
                tracing::info!(leases = ids.len(), revision, "etcd leases expired");
            }
            Ok(Response::Rejected(Rejection::NoSpace { .. })) | Ok(_) => {}
            Err(_) => tracing::debug!("lease sweep not applied (leadership changed)"),
        }
    }
}
