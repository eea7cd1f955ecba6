//! The `Cluster` gRPC service: node status and membership admin.
//!
//! Membership changes run on the leader; any other node proxies the call to the leader's client
//! API. One change at a time: a second concurrent one is refused with FailedPrecondition. A removed
//! node's id is retired in the replicated state first, so it can never be added again.

use crate::state::AlarmReply;
use crate::state::MemberCommand;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::raft_v1::{CompactNodeRequest, NodeStatusRequest};
use crate::proto::v1::cluster_client::ClusterClient;
use crate::proto::v1::cluster_server::Cluster;
use crate::proto::v1::*;
use crate::raft::network::decode;
use crate::raft::types::{ChangeMembers, NodeAddr, NodeId, WatchReceiver};
use crate::server::auth;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::peer::NodeView;
use crate::server::space::{self, Compaction};
use crate::state::alarms::{AlarmAction, AlarmKind};
use crate::state::Rejection;

/// A node whose applied index is more than this many entries behind the leader's commit
/// index is reported as behind by `steward cluster status`.
pub const STATUS_LAG_WARN_ENTRIES: u64 = 1_000;

/// A node whose data_dir file system is more than this full (percent) is reported as filling.
pub const STATUS_DISK_WARN_PERCENT: u64 = 90;

/// A node whose data directory is at this share of its `limits.quota_bytes` (percent) or more
/// is reported as nearing its quota.
pub const STATUS_QUOTA_WARN_PERCENT: u64 = 80;

/// The alarms as the API shows them.
fn alarm_messages<'a>(alarms: impl Iterator<Item = &'a crate::state::alarms::Alarm>) -> Vec<Alarm> {
    alarms
        .map(|a| Alarm {
            node_id: a.node_id,
            kind: a.kind.to_string(),
            raised_ms: a.raised_ms,
            reason: a.reason.clone(),
        })
        .collect()
}

/// How long a compaction of another node may take, as seen from the node that asked.
const COMPACT_NODE_TIMEOUT: Duration = Duration::from_secs(300);

/// What `Cluster.Status` warns about, from the nodes' answers (see `ClusterStatusReply`).
pub fn status_warnings(nodes: &[NodeStatus], leader_id: u64) -> Vec<String> {
    let mut warnings = Vec::new();
    let voters: Vec<&NodeStatus> = nodes.iter().filter(|n| n.voter).collect();
    let quorum = voters.len() / 2 + 1;
    let healthy = voters.iter().filter(|n| n.serving).count();
    if leader_id == 0 || !nodes.iter().any(|n| n.id == leader_id && n.serving) {
        warnings.push("no leader serving: writes and linearizable reads wait".to_string());
    }
    if !voters.is_empty() {
        if healthy < quorum {
            warnings.push(format!(
                "no quorum: {healthy} of {} voters serving, {quorum} needed",
                voters.len()
            ));
        } else if healthy == quorum {
            warnings.push(format!(
                "no quorum margin: {healthy} of {} voters serving, {quorum} needed; losing one \
                 more stops writes",
                voters.len()
            ));
        }
    }
    let commit = nodes
        .iter()
        .find(|n| n.id == leader_id)
        .map_or(0, |n| n.committed_index);
    for n in nodes {
        if n.state == "unreachable" {
            warnings.push(format!("node {} is unreachable: {}", n.id, n.error));
            continue;
        }
        if !n.serving {
            warnings.push(format!(
                "node {} is not serving (it cannot answer a linearizable read)",
                n.id
            ));
        }
        let behind = commit.saturating_sub(n.applied_index);
        if behind > STATUS_LAG_WARN_ENTRIES {
            warnings.push(format!(
                "node {} is behind: applied index {}, {behind} entries behind the leader's \
                 commit index {commit} (STATUS_LAG_WARN_ENTRIES = {STATUS_LAG_WARN_ENTRIES})",
                n.id, n.applied_index
            ));
        }
        if let Some(percent) = n.data_bytes.saturating_mul(100).checked_div(n.quota_bytes) {
            if percent >= STATUS_QUOTA_WARN_PERCENT {
                warnings.push(format!(
                    "node {}'s data dir is at {percent}% of limits.quota_bytes ({} of {}; \
                     STATUS_QUOTA_WARN_PERCENT = {STATUS_QUOTA_WARN_PERCENT}): delete what is \
                     no longer needed and run steward compact",
                    n.id,
                    space::bytes(n.data_bytes),
                    space::bytes(n.quota_bytes)
                ));
            }
        }
        if n.disk_total_bytes > 0 {
            let used = n.disk_total_bytes.saturating_sub(n.disk_free_bytes);
            let percent = used.saturating_mul(100) / n.disk_total_bytes;
            if percent > STATUS_DISK_WARN_PERCENT {
                warnings.push(format!(
                    "node {}'s disk is filling: {percent}% used, {} MiB free \
                     (STATUS_DISK_WARN_PERCENT = {STATUS_DISK_WARN_PERCENT})",
                    n.id,
                    n.disk_free_bytes >> 20
                ));
            }
        }
    }
    warnings
}

/// Body bytes per `SnapshotChunk`.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// The encoder's side of `Cluster.Snapshot`: buffers the body into chunks, hashes it, and sends
/// each full chunk (blocking while the channel is full).
struct ChunkSender {
    tx: tokio::sync::mpsc::Sender<Result<SnapshotChunk, Status>>,
    buf: Vec<u8>,
    hasher: sha2::Sha256,
    total: u64,
}

impl ChunkSender {
    fn send_buf(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(SNAPSHOT_CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(SnapshotChunk {
                data,
                ..Default::default()
            }))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client went away"))
    }

    fn hex(&self) -> String {
        let digest = sha2::Digest::finalize(self.hasher.clone());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::io::Write for ChunkSender {
    fn write(&mut self, piece: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(&mut self.hasher, piece);
        self.total += piece.len() as u64;
        self.buf.extend_from_slice(piece);
        if self.buf.len() >= SNAPSHOT_CHUNK_BYTES {
            self.send_buf()?;
        }
        Ok(piece.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How long a status fan-out waits for one node, at most: less when the caller's deadline is
/// nearer (`deadline::budget`), so a paused node never keeps the answer from a caller.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);
/// What a fan-out leaves of the caller's deadline for its answer's way back, at most.
const STATUS_ANSWER_MARGIN_MAX: Duration = Duration::from_millis(100);

pub struct ClusterService {
    node: Arc<Node>,
}

impl ClusterService {
    pub fn new(node: Arc<Node>) -> Self {
        ClusterService { node }
    }

    /// None when this node leads; otherwise a client of the leader's Cluster service.
    async fn leader_proxy(&self) -> Result<Option<ClusterClient<Channel>>, Status> {
        let (leader_id, addr) = self.node.leader().await?;
        if leader_id == self.node.id {
            return Ok(None);
        }
        let channel = self.node.channels.get(&addr.client_addr).map_err(|e| {
            errors::unavailable(format!("cannot reach the leader: {e}"), Some(&addr))
        })?;
        Ok(Some(ClusterClient::new(channel)))
    }

    fn members(&self) -> BTreeMap<NodeId, (NodeAddr, bool)> {
        let m = self.node.raft.metrics();
        let m = m.borrow_watched();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, addr)| (*id, (addr.clone(), voters.contains(id))))
            .collect()
    }

    /// Asks one node for its own view, waiting `wait` at most; this node answers from memory.
    async fn node_view(
        &self,
        id: NodeId,
        addr: &NodeAddr,
        wait: Duration,
    ) -> Result<NodeView, String> {
        if id == self.node.id {
            return Ok(NodeView::of(&self.node));
        }
        let mut client = self
            .node
            .channels
            .peer(&addr.peer_addr)
            .map_err(|e| e.to_string())?;
        let mut req = Request::new(NodeStatusRequest {});
        req.set_timeout(wait);
        // The timeout here, not only in the request: a stopped (SIGSTOP) node's kernel still
        // completes the connection, and then nothing answers.
        let silent = || format!("no answer within {} ms", wait.as_millis());
        let reply = tokio::time::timeout(wait, client.node_status(req))
            .await
            .map_err(|_| silent())?
            .map_err(|s| match s.code() {
                // tonic's own end of the request's timeout, racing ours.
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => silent(),
                _ => s.message().to_string(),
            })?;
        decode(&reply.into_inner().data).map_err(|e| e.to_string())
    }

    /// Every member's view, asked of all at once; a member that has not answered when the
    /// caller's deadline is near (or after `STATUS_TIMEOUT`) is given as an error.
    async fn all_views(&self) -> Vec<(NodeId, NodeAddr, bool, Result<NodeView, String>)> {
        let wait = crate::server::deadline::budget(STATUS_TIMEOUT, STATUS_ANSWER_MARGIN_MAX)
            .min(STATUS_TIMEOUT);
        let members = self.members();
        let futures = members.iter().map(|(id, (addr, voter))| async move {
            (
                *id,
                addr.clone(),
                *voter,
                self.node_view(*id, addr, wait).await,
            )
        });
        futures::future::join_all(futures).await
    }

    async fn member_list_local(&self) -> MemberListReply {
        let views = self.all_views().await;
        let (term, last_log, leader, replication) = {
            let m = self.node.raft.metrics();
            let m = m.borrow_watched();
            let replication: BTreeMap<NodeId, u64> = m
                .replication
                .as_ref()
                .map(|r| {
                    r.iter()
                        .map(|(id, l)| (*id, l.as_ref().map(|l| l.index).unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default();
            (
                m.current_term,
                m.last_log_index.unwrap_or(0),
                m.current_leader,
                replication,
            )
        };
        let members = views
            .into_iter()
            .map(|(id, addr, voter, view)| {
                let matched = if id == self.node.id {
                    last_log
                } else {
                    replication.get(&id).copied().unwrap_or(0)
                };
                Member {
                    id,
                    peer_addr: addr.peer_addr,
                    client_addr: addr.client_addr,
                    voter,
                    leader: leader == Some(id),
                    term: view.as_ref().map(|v| v.term).unwrap_or(0),
                    matched_index: matched,
                    applied_index: view.as_ref().map(|v| v.applied_index).unwrap_or(0),
                    lag: last_log.saturating_sub(matched),
                    reachable: view.is_ok(),
                }
            })
            .collect();
        MemberListReply {
            members,
            leader_id: leader.unwrap_or(0),
            term,
            last_log_index: last_log,
        }
    }

    /// Has node at `addr` compact its storage (through its peer port).
    async fn compact_peer(&self, addr: &NodeAddr) -> Result<Compaction, Status> {
        let mut client = self
            .node
            .channels
            .peer(&addr.peer_addr)
            .map_err(|e| errors::unavailable(e.to_string(), Some(addr)))?;
        let mut req = Request::new(CompactNodeRequest {});
        req.set_timeout(COMPACT_NODE_TIMEOUT);
        let reply = client.compact(req).await?;
        decode(&reply.into_inner().data)
            .map_err(|e| errors::internal("undecodable compaction reply", e))
    }

    /// How long AddLearner waits for the new learner to catch up.
    fn catch_up_timeout(&self) -> Duration {
        Duration::from_millis(self.node.config.raft.election_timeout_ms_max * 20)
    }

    fn busy() -> Status {
        errors::change_in_progress(
            "another membership change is in progress; retry when it has finished",
        )
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    type SnapshotStream = tokio_stream::wrappers::ReceiverStream<Result<SnapshotChunk, Status>>;

    /// Reads the state at a linearizable point (ReadIndex) and streams it: the O(1) clone of
    /// the applied state is encoded on the blocking pool into chunks of `SNAPSHOT_CHUNK_BYTES`,
    /// at most a few in flight, so a slow client holds back the encoder, not memory.
    #[tracing::instrument(level = "info", skip_all)]
    async fn snapshot(
        &self,
        _r: Request<SnapshotRequest>,
    ) -> Result<GrpcResponse<Self::SnapshotStream>, Status> {
        self.node.read_barrier(Consistency::Linearizable).await?;
        let (state, header) = {
            let state = self.node.state().clone();
            let m = self.node.raft.metrics();
            let m = m.borrow_watched();
            let applied = m.last_applied.as_ref();
            let header = crate::raft::backup::BackupHeader {
                revision: state.revision(),
                term: applied.map_or(m.current_term, |l| l.leader_id.term),
                index: applied.map_or(0, |l| l.index),
                node_id: self.node.id,
                leader_id: m.current_leader.unwrap_or(0),
                objects: state.len() as u64,
                created_ms: self.node.clock.now_ms(),
            };
            (state, header)
        };
        let header_json =
            serde_json::to_string(&header).map_err(|e| errors::internal("snapshot header", e))?;
        tracing::info!(
            revision = header.revision,
            objects = header.objects,
            "streaming a snapshot"
        );
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let first = SnapshotChunk {
            header_json,
            ..Default::default()
        };
        tx.send(Ok(first)).await.map_err(|_| {
            errors::refused(
                tonic::Code::Cancelled,
                ErrorReason::Unavailable,
                "the client went away",
            )
        })?;
        tokio::task::spawn_blocking(move || {
            let mut out = ChunkSender {
                tx: tx.clone(),
                buf: Vec::with_capacity(SNAPSHOT_CHUNK_BYTES),
                hasher: <sha2::Sha256 as sha2::Digest>::new(),
                total: 0,
            };
            let last = match state.write_snapshot(&mut out).and_then(|_| out.send_buf()) {
                Ok(()) => Ok(SnapshotChunk {
                    sha256: out.hex(),
                    total_bytes: out.total,
                    ..Default::default()
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "snapshot stream stopped");
                    Err(errors::unavailable(
                        format!("snapshot stream stopped: {e}"),
                        None,
                    ))
                }
            };
            let _ = tx.blocking_send(last);
        });
        Ok(GrpcResponse::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn status(
        &self,
        _r: Request<ClusterStatusRequest>,
    ) -> Result<GrpcResponse<ClusterStatusReply>, Status> {
        let views = self.all_views().await;
        let leader_id = self
            .node
            .raft
            .metrics()
            .borrow_watched()
            .current_leader
            .unwrap_or(0);
        let nodes = views
            .into_iter()
            .map(|(id, addr, voter, view)| match view {
                Ok(v) => NodeStatus {
                    id,
                    peer_addr: addr.peer_addr,
                    client_addr: addr.client_addr,
                    state: v.state,
                    term: v.term,
                    leader_id: v.leader_id.unwrap_or(0),
                    last_log_index: v.last_log_index,
                    committed_index: v.committed_index,
                    applied_index: v.applied_index,
                    snapshot_index: v.snapshot_index,
                    purged_index: v.purged_index,
                    revision: v.revision,
                    error: String::new(),
                    serving: v.serving,
                    disk_total_bytes: v.disk_total_bytes,
                    disk_free_bytes: v.disk_free_bytes,
                    voter,
                    data_bytes: v.data_bytes,
                    quota_bytes: v.quota_bytes,
                    pid: v.pid,
                },
                Err(e) => NodeStatus {
                    id,
                    peer_addr: addr.peer_addr,
                    client_addr: addr.client_addr,
                    state: "unreachable".to_string(),
                    error: e,
                    voter,
                    ..Default::default()
                },
            })
            .collect::<Vec<_>>();
        let mut warnings = status_warnings(&nodes, leader_id);
        let alarms = alarm_messages(self.node.state().alarms().iter());
        for alarm in &alarms {
            warnings.push(format!(
                "alarm {} on node {}: {}; writes that may grow the state are refused \
                 (steward alarm list)",
                alarm.kind, alarm.node_id, alarm.reason
            ));
        }
        Ok(GrpcResponse::new(ClusterStatusReply {
            nodes,
            leader_id,
            warnings,
            alarms,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn alarms(
        &self,
        _r: Request<AlarmListRequest>,
    ) -> Result<GrpcResponse<AlarmsReply>, Status> {
        self.node.read_barrier(Consistency::Linearizable).await?;
        let alarms = alarm_messages(self.node.state().alarms().iter());
        Ok(GrpcResponse::new(AlarmsReply { alarms }))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn alarm_disarm(
        &self,
        r: Request<AlarmDisarmRequest>,
    ) -> Result<GrpcResponse<AlarmsReply>, Status> {
        let req = r.into_inner();
        let kind = match req.kind.as_str() {
            "" => None,
            name => Some(AlarmKind::parse(name).ok_or_else(|| {
                errors::invalid(
                    "kind",
                    format!(
                        "unknown alarm kind {name:?} (known: {})",
                        AlarmKind::NoSpace
                    ),
                )
            })?),
        };
        let action = AlarmAction::Disarm {
            node_id: (req.node_id != 0).then_some(req.node_id),
            kind,
        };
        tracing::info!(%action, "disarming alarms");
        let AlarmReply { alarms } = self.node.propose(action).await?;
        Ok(GrpcResponse::new(AlarmsReply {
            alarms: alarm_messages(alarms.iter()),
        }))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn compact(
        &self,
        r: Request<CompactRequest>,
    ) -> Result<GrpcResponse<CompactReply>, Status> {
        let members = self.members();
        let req = r.into_inner();
        let ids: Vec<NodeId> = if req.node_ids.is_empty() {
            members.keys().copied().collect()
        } else {
            req.node_ids
        };
        if let Some(id) = ids.iter().find(|id| !members.contains_key(id)) {
            return Err(errors::not_found(
                "member",
                id,
                format!("node_ids: node {id} is not a member of the cluster"),
            ));
        }
        // One node after another: a compaction stalls its node's log writes, and doing all at
        // once would stall a quorum.
        let mut nodes = Vec::with_capacity(ids.len());
        for id in ids {
            let result = if id == self.node.id {
                space::compact(&self.node).await
            } else {
                self.compact_peer(&members[&id].0).await
            };
            nodes.push(match result {
                Ok(c) => NodeCompaction {
                    node_id: c.node_id,
                    snapshot_index: c.snapshot_index,
                    purged_index: c.purged_index,
                    data_bytes_before: c.data_bytes_before,
                    data_bytes_after: c.data_bytes_after,
                    duration_ms: c.duration_ms,
                    error: String::new(),
                },
                Err(status) => NodeCompaction {
                    node_id: id,
                    error: status.message().to_string(),
                    ..Default::default()
                },
            });
        }
        Ok(GrpcResponse::new(CompactReply { nodes }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn member_list(
        &self,
        r: Request<MemberListRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.member_list(auth::delegate(r)).await;
        }
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn add_learner(
        &self,
        r: Request<AddLearnerRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.add_learner(auth::delegate(r)).await;
        }
        let req = r.into_inner();
        if req.id == 0 {
            return Err(errors::invalid("id", "must be >= 1"));
        }
        for (field, addr) in [
            ("peer_addr", &req.peer_addr),
            ("client_addr", &req.client_addr),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(errors::invalid(
                    field,
                    format!("must be ip:port, got {addr:?}"),
                ));
            }
        }
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        if self.node.state().is_retired(req.id) {
            return Err(errors::rejection(&Rejection::NodeRetired {
                node_id: req.id,
            }));
        }
        if self.members().contains_key(&req.id) {
            return Err(errors::already_exists(
                "member",
                req.id,
                format!("node {} is already a member", req.id),
            ));
        }
        let addr = NodeAddr {
            peer_addr: req.peer_addr,
            client_addr: req.client_addr,
        };
        tracing::info!(id = req.id, %addr, "adding learner");
        let added = self
            .node
            .raft
            .add_learner(req.id, addr, false)
            .await
            .map_err(|e| errors::client_write(&e))?;
        // Return once the learner holds the log up to its own membership entry. Bounded, so a
        // learner that never answers cannot hold the membership lock for ever.
        let target = added.log_id.index;
        let id = req.id;
        self.node
            .raft
            .wait(Some(self.catch_up_timeout()))
            .metrics(
                |m| {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(&id))
                        .is_some_and(|l| l.as_ref().is_some_and(|l| l.index >= target))
                },
                "learner caught up",
            )
            .await
            .map_err(|_| {
                errors::not_settled(
                    id,
                    format!(
                        "node {id} was added as a learner but has not caught up with the log \
                         within {:?}; check that it runs and that its peer_addr is reachable",
                        self.catch_up_timeout()
                    ),
                )
            })?;
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn promote(
        &self,
        r: Request<PromoteRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.promote(auth::delegate(r)).await;
        }
        let id = r.into_inner().id;
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        match self.members().get(&id) {
            None => {
                return Err(errors::not_found(
                    "member",
                    id,
                    format!("node {id} is not a member; add it as a learner first"),
                ))
            }
            Some((_, true)) => {
                return Err(errors::already_exists(
                    "voter",
                    id,
                    format!("node {id} is already a voter"),
                ))
            }
            Some((_, false)) => {}
        }
        tracing::info!(id, "promoting learner to voter");
        self.node
            .raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(|e| errors::client_write(&e))?;
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn remove_member(
        &self,
        r: Request<RemoveMemberRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.remove_member(auth::delegate(r)).await;
        }
        let id = r.into_inner().id;
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        let members = self.members();
        let voter = match members.get(&id) {
            None => {
                return Err(errors::not_found(
                    "member",
                    id,
                    format!("node {id} is not a member"),
                ))
            }
            Some((_, voter)) => *voter,
        };
        if voter && members.values().filter(|(_, v)| *v).count() == 1 {
            return Err(errors::membership(
                Some(id),
                format!("node {id} is the last voter; it cannot be removed"),
            ));
        }
        // Retire the id first: even if the removal below fails half-way, the id is never reused.
        self.node
            .propose(MemberCommand::Retire { node_id: id })
            .await?;
        tracing::info!(id, voter, "removing member");
        let change = if voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.node
            .raft
            .change_membership(change, false)
            .await
            .map_err(|e| errors::client_write(&e))?;
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn transfer_leader(
        &self,
        r: Request<TransferLeaderRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.transfer_leader(auth::delegate(r)).await;
        }
        let list_request = auth::delegated(&r, MemberListRequest {});
        let mut to = r.into_inner().to;
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        let members = self.members();
        if to == 0 {
            // The most up-to-date other voter.
            let list = self.member_list_local().await;
            to = list
                .members
                .iter()
                .filter(|m| m.voter && m.id != self.node.id)
                .max_by_key(|m| (m.matched_index, std::cmp::Reverse(m.id)))
                .map(|m| m.id)
                .ok_or_else(|| {
                    errors::membership(None, "there is no other voter to transfer leadership to")
                })?;
        }
        match members.get(&to) {
            Some((_, true)) => {}
            _ => {
                return Err(errors::membership(
                    Some(to),
                    format!("node {to} is not a voter"),
                ))
            }
        }
        if to == self.node.id {
            return Ok(GrpcResponse::new(self.member_list_local().await));
        }
        tracing::info!(to, "transferring leadership");
        self.node
            .raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| errors::unavailable(format!("raft stopped: {e}"), None))?;
        let timeout = Duration::from_millis(self.node.config.raft.election_timeout_ms_max * 5);
        self.node
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader == Some(to), "leader transferred")
            .await
            .map_err(|e| {
                errors::not_settled(to, format!("leadership did not move to node {to}: {e}"))
            })?;
        drop(_guard);
        // This node is no longer the leader: answer with the new leader's view.
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.member_list(list_request).await;
        }
        Ok(GrpcResponse::new(self.member_list_local().await))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64, applied: u64) -> NodeStatus {
        NodeStatus {
            id,
            state: if id == 1 { "leader" } else { "follower" }.into(),
            voter: true,
            serving: true,
            committed_index: 5_000,
            applied_index: applied,
            disk_total_bytes: 100 << 30,
            disk_free_bytes: 50 << 30,
            ..NodeStatus::default()
        }
    }

    #[test]
    fn a_healthy_cluster_has_no_warnings() {
        let nodes = [node(1, 5_000), node(2, 4_990), node(3, 5_000)];
        assert_eq!(status_warnings(&nodes, 1), Vec::<String>::new());
    }

    #[test]
    fn each_problem_gets_one_line() {
        let mut behind = node(2, 3_000);
        behind.disk_free_bytes = 5 << 30;
        let down = NodeStatus {
            id: 3,
            state: "unreachable".into(),
            voter: true,
            error: "connection refused".into(),
            ..NodeStatus::default()
        };
        let warnings = status_warnings(&[node(1, 5_000), behind, down], 1);
        assert_eq!(
            warnings,
            vec![
                "no quorum margin: 2 of 3 voters serving, 2 needed; losing one more stops writes",
                "node 2 is behind: applied index 3000, 2000 entries behind the leader's commit \
                 index 5000 (STATUS_LAG_WARN_ENTRIES = 1000)",
                "node 2's disk is filling: 95% used, 5120 MiB free (STATUS_DISK_WARN_PERCENT = 90)",
                "node 3 is unreachable: connection refused",
            ]
        );
    }

    #[test]
    fn no_leader_and_no_quorum_are_named() {
        let mut lone = node(2, 5_000);
        lone.serving = false;
        let down = |id| NodeStatus {
            id,
            state: "unreachable".into(),
            voter: true,
            error: "timeout".into(),
            ..NodeStatus::default()
        };
        let warnings = status_warnings(&[down(1), lone, down(3)], 1);
        assert_eq!(
            warnings[0],
            "no leader serving: writes and linearizable reads wait"
        );
        assert_eq!(warnings[1], "no quorum: 0 of 3 voters serving, 2 needed");
        assert!(warnings
            .contains(&"node 2 is not serving (it cannot answer a linearizable read)".to_string()));
        // A learner does not count towards the quorum.
        let mut learner = node(4, 5_000);
        learner.voter = false;
        let nodes = [node(1, 5_000), node(2, 5_000), node(3, 5_000), learner];
        assert_eq!(status_warnings(&nodes, 1), Vec::<String>::new());
    }
}
