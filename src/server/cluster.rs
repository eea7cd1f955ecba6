//! The `Cluster` gRPC service: node status and membership admin.
//!
//! Membership changes run on the leader; any other node proxies the call to the leader's client
//! API. One change at a time: a second concurrent one is refused with FailedPrecondition. A removed
//! node's id is retired in the replicated state first, so it can never be added again.

use crate::state::AlarmReply;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::raft_v1::CompactNodeRequest;
use crate::proto::v1::cluster_client::ClusterClient;
use crate::proto::v1::cluster_server::Cluster;
use crate::proto::v1::*;
use crate::raft::network::decode;
use crate::raft::types::{NodeAddr, NodeId, WatchReceiver};
use crate::server::auth;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::space::{self, Compaction};
use crate::state::alarms::{AlarmAction, AlarmKind};

mod members;
mod status;

pub use status::{
    status_warnings, STATUS_DISK_WARN_PERCENT, STATUS_LAG_WARN_ENTRIES, STATUS_QUOTA_WARN_PERCENT,
};

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
                created_ms: self.node.time.clock().wall_ms(),
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
                    wall_ms: v.wall_ms,
                    cluster_ms: v.cluster_ms,
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
        let mut warnings =
            status_warnings(&nodes, leader_id, self.node.config.time.clock_offset_ms_max);
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
        self.add_learner_here(r).await
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn promote(
        &self,
        r: Request<PromoteRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.promote(auth::delegate(r)).await;
        }
        self.promote_here(r).await
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn remove_member(
        &self,
        r: Request<RemoveMemberRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.remove_member(auth::delegate(r)).await;
        }
        self.remove_member_here(r).await
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn transfer_leader(
        &self,
        r: Request<TransferLeaderRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.transfer_leader(auth::delegate(r)).await;
        }
        self.transfer_leader_here(r).await
    }
}
