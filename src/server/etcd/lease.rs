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

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, oneshot, Semaphore};
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
    keep_alives: KeepAlives,
}

impl LeaseService {
    pub fn new(node: Arc<Node>) -> Self {
        let keep_alives = KeepAlives::start(node.clone());
        LeaseService { node, keep_alives }
    }
}

/// A keep-alive's answer: the lease's TTL (`None`: it no longer exists) and the revision.
type Kept = Result<(Option<u64>, u64), Status>;

/// The node's keep-alives, gathered into entries (`KvCommand::LeaseKeepAlives`): while
/// `etcd.keep_alive_entries_in_flight_max` entries are in flight the next fills (up to
/// `etcd.keep_alives_per_entry_max`), so keep-alives from many streams cost one log entry, not
/// one each, and each is still answered only once its entry is durable on a majority and
/// applied (a keep-alive is as strong as before; only the entry is shared). At most
/// `etcd.keep_alives_queued_max` wait; past that, senders wait for room (backpressure on their
/// streams), never refused.
#[derive(Clone)]
struct KeepAlives {
    queue: mpsc::Sender<(i64, oneshot::Sender<Kept>)>,
    node: Arc<Node>,
}

impl KeepAlives {
    /// Starts the gathering task; it ends when the service (every sender) is dropped.
    fn start(node: Arc<Node>) -> KeepAlives {
        let limits = &node.config.etcd;
        let (queue, mut rx) =
            mpsc::channel::<(i64, oneshot::Sender<Kept>)>(limits.keep_alives_queued_max);
        let in_flight = Arc::new(Semaphore::new(limits.keep_alive_entries_in_flight_max));
        let per_entry = limits.keep_alives_per_entry_max;
        let gatherer = node.clone();
        tokio::spawn(async move {
            let node = gatherer;
            while let Some(first) = rx.recv().await {
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    return;
                };
                let mut batch = vec![first];
                while batch.len() < per_entry {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                node.metrics
                    .etcd_keep_alives_queued
                    .set(i64::try_from(rx.len()).unwrap_or(i64::MAX));
                let node = node.clone();
                tokio::spawn(async move {
                    keep_alive_entry(&node, batch).await;
                    drop(permit);
                });
            }
        });
        KeepAlives { queue, node }
    }

    /// Keeps lease `id` alive; once its entry is applied.
    async fn keep_alive(&self, id: i64) -> Kept {
        let (tx, rx) = oneshot::channel();
        match self.queue.try_send((id, tx)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(item)) => {
                self.node.metrics.etcd_keep_alives_waited.inc();
                self.queue
                    .send(item)
                    .await
                    .map_err(|_| errors::shutting_down())?;
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(errors::shutting_down()),
        }
        rx.await.map_err(|_| errors::shutting_down())?
    }
}

/// One LeaseKeepAlive stream: its requests, answered one by one.
struct KeepAliveStream {
    requests: Streaming<LeaseKeepAliveRequest>,
    node: Arc<Node>,
    keep_alives: KeepAlives,
    /// An answer was an error: it was the last.
    failed: bool,
}

impl KeepAliveStream {
    /// The answer to the next request; `None` when the client closed its side or an error was
    /// the last answer.
    async fn next(&mut self) -> Option<Result<LeaseKeepAliveResponse, Status>> {
        if self.failed {
            return None;
        }
        let id = match self.requests.message().await {
            Ok(Some(request)) => request.id,
            Ok(None) | Err(_) => return None,
        };
        let answer = self
            .keep_alives
            .keep_alive(id)
            .await
            .map(|(ttl_ms, revision)| LeaseKeepAliveResponse {
                header: header(&self.node, revision),
                id,
                // etcd answers a lease that no longer exists with TTL 0.
                ttl: ttl_ms.map_or(0, seconds),
            });
        self.failed = answer.is_err();
        Some(answer)
    }
}

/// Proposes one entry for `batch` and answers each keep-alive in it.
async fn keep_alive_entry(node: &Node, batch: Vec<(i64, oneshot::Sender<Kept>)>) {
    let ids: Vec<i64> = batch.iter().map(|(id, _)| *id).collect();
    let asked = ids.len();
    node.metrics.etcd_keep_alive_entries.inc();
    let answers: Result<(Vec<Option<u64>>, u64), Status> =
        match propose(node, KvCommand::LeaseKeepAlives { ids }).await {
            Ok(KvReply::LeasesKept { ttls_ms, revision }) if ttls_ms.len() == asked => {
                Ok((ttls_ms, revision))
            }
            Ok(other) => Err(unexpected("keep-alive", &other)),
            Err(status) => Err(status),
        };
    match answers {
        Ok((ttls_ms, revision)) => {
            node.metrics.etcd_keep_alives.inc_by(asked as u64);
            for ((_, answer), ttl_ms) in batch.into_iter().zip(ttls_ms) {
                let _ = answer.send(Ok((ttl_ms, revision)));
            }
        }
        Err(status) => {
            for (_, answer) in batch {
                let _ = answer.send(Err(status.clone()));
            }
        }
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

    type LeaseKeepAliveStream =
        Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

    /// Each request is one keep-alive through the log (gathered with the node's others into one
    /// entry, `KeepAlives`), answered in order once durable; a lease that no longer exists is
    /// answered with TTL 0, as etcd does. The response stream itself reads the next request
    /// when the transport asks for the next answer (no task and channel between), so a client
    /// that does not read its answers is not read from either.
    #[tracing::instrument(level = "debug", name = "etcd.LeaseKeepAlive", skip_all)]
    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<GrpcResponse<Self::LeaseKeepAliveStream>, Status> {
        require_leader(&self.node, &request)?;
        let stream = KeepAliveStream {
            requests: request.into_inner(),
            node: self.node.clone(),
            keep_alives: self.keep_alives.clone(),
            failed: false,
        };
        let answers = futures::stream::unfold(stream, |mut stream| async move {
            let answer = stream.next().await?;
            Some((answer, stream))
        });
        Ok(GrpcResponse::new(Box::pin(answers)))
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
