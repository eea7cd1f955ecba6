//! etcd's Cluster and Maintenance services, mapped to steward's own cluster operations
//! (`server::cluster`): members as etcd lists them, a member's status, NOSPACE alarms, storage
//! compaction for Defragment, a hash of the keyspace, a streamed backup for Snapshot, and
//! leadership transfer. What steward cannot do as etcd asks is refused with a line that says
//! what to use instead.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Code, Request, Response as GrpcResponse, Status};

use super::{header, require_leader};
use crate::proto::etcd::alarm_request::AlarmAction as PbAlarmAction;
use crate::proto::etcd::cluster_server::Cluster;
use crate::proto::etcd::maintenance_server::Maintenance;
use crate::proto::etcd::*;
use crate::proto::v1 as steward;
use crate::proto::v1::cluster_server::Cluster as StewardCluster;
use crate::raft::backup::BackupWriter;
use crate::raft::types::WatchReceiver;
use crate::server::cluster::ClusterService;
use crate::server::node::Node;
use crate::server::peer::NodeView;

/// The etcd version steward answers as: the API it serves is etcd 3.5's, and the Kubernetes
/// apiserver turns on what it gates on >= 3.5.13 (progress notifications among them).
pub const ETCD_VERSION: &str = "3.5.17";

pub struct MaintenanceService {
    node: Arc<Node>,
    cluster: ClusterService,
}

impl MaintenanceService {
    pub fn new(node: Arc<Node>) -> Self {
        MaintenanceService {
            cluster: ClusterService::new(node.clone()),
            node,
        }
    }

    fn revision(&self) -> u64 {
        self.node.state().revision()
    }

    /// The URL of an address as etcd lists one.
    fn url(&self, addr: &str) -> String {
        match self.node.config.tls.plaintext {
            true => format!("http://{addr}"),
            false => format!("https://{addr}"),
        }
    }

    fn members(&self, reply: steward::MemberListReply) -> Vec<Member> {
        reply
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id,
                name: format!("steward-{}", m.id),
                peer_ur_ls: vec![self.url(&m.peer_addr)],
                client_ur_ls: vec![self.url(&m.client_addr)],
                is_learner: !m.voter,
            })
            .collect()
    }

    async fn member_list_now(&self) -> Result<Vec<Member>, Status> {
        let reply = self
            .cluster
            .member_list(Request::new(steward::MemberListRequest {}))
            .await?
            .into_inner();
        Ok(self.members(reply))
    }

    /// The HashKV of the keyspace's versions up to `revision` (0: the newest): the first four
    /// bytes of their SHA-256.
    fn hash_kv(&self, revision: u64) -> Result<(u32, u64, u64), Status> {
        let state = self.node.state();
        let at = state
            .kv()
            .read_revision(revision, state.revision())
            .map_err(|e| super::kv_error(&e))?;
        let mut hasher = Sha256::new();
        state.kv().feed_versions(at, |bytes| hasher.update(bytes));
        let digest = hasher.finalize();
        let hash = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        Ok((hash, state.kv().compacted(), at))
    }
}

fn refused(what: &str, instead: &str) -> Status {
    Status::new(
        Code::Unimplemented,
        format!("steward does not {what}; {instead}"),
    )
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[tonic::async_trait]
impl Cluster for MaintenanceService {
    async fn member_add(
        &self,
        _request: Request<MemberAddRequest>,
    ) -> Result<GrpcResponse<MemberAddResponse>, Status> {
        Err(refused(
            "add members through etcd's MemberAdd (it names no member id and no client address)",
            "run `steward member add-learner --id N --peer-addr HOST:PORT --client-addr HOST:PORT`, \
             then `steward member promote N`",
        ))
    }

    async fn member_remove(
        &self,
        request: Request<MemberRemoveRequest>,
    ) -> Result<GrpcResponse<MemberRemoveResponse>, Status> {
        let id = request.into_inner().id;
        let reply = self
            .cluster
            .remove_member(Request::new(steward::RemoveMemberRequest { id }))
            .await?
            .into_inner();
        Ok(GrpcResponse::new(MemberRemoveResponse {
            header: header(&self.node, self.revision()),
            members: self.members(reply),
        }))
    }

    async fn member_update(
        &self,
        _request: Request<MemberUpdateRequest>,
    ) -> Result<GrpcResponse<MemberUpdateResponse>, Status> {
        Err(refused(
            "change a member's addresses",
            "remove the member and add a new one with its new addresses (steward member remove, \
             steward member add-learner)",
        ))
    }

    async fn member_list(
        &self,
        request: Request<MemberListRequest>,
    ) -> Result<GrpcResponse<MemberListResponse>, Status> {
        require_leader(&self.node, &request)?;
        Ok(GrpcResponse::new(MemberListResponse {
            header: header(&self.node, self.revision()),
            members: self.member_list_now().await?,
        }))
    }

    async fn member_promote(
        &self,
        request: Request<MemberPromoteRequest>,
    ) -> Result<GrpcResponse<MemberPromoteResponse>, Status> {
        let id = request.into_inner().id;
        let reply = self
            .cluster
            .promote(Request::new(steward::PromoteRequest { id }))
            .await?
            .into_inner();
        Ok(GrpcResponse::new(MemberPromoteResponse {
            header: header(&self.node, self.revision()),
            members: self.members(reply),
        }))
    }
}

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(
        &self,
        request: Request<AlarmRequest>,
    ) -> Result<GrpcResponse<AlarmResponse>, Status> {
        let req = request.into_inner();
        let reply = match PbAlarmAction::try_from(req.action) {
            Ok(PbAlarmAction::Get) => {
                self.cluster
                    .alarms(Request::new(steward::AlarmListRequest {}))
                    .await?
            }
            Ok(PbAlarmAction::Deactivate) => {
                let kind = match AlarmType::try_from(req.alarm) {
                    Ok(AlarmType::Nospace) | Ok(AlarmType::None) => String::new(),
                    _ => {
                        return Ok(GrpcResponse::new(AlarmResponse {
                            header: header(&self.node, self.revision()),
                            alarms: Vec::new(),
                        }))
                    }
                };
                self.cluster
                    .alarm_disarm(Request::new(steward::AlarmDisarmRequest {
                        node_id: req.member_id,
                        kind,
                    }))
                    .await?
            }
            Ok(PbAlarmAction::Activate) | Err(_) => {
                return Err(refused(
                    "raise alarms on request",
                    "each node raises NOSPACE itself when its data outgrows limits.quota_bytes",
                ))
            }
        };
        let alarms = reply
            .into_inner()
            .alarms
            .into_iter()
            .filter(|a| a.kind.eq_ignore_ascii_case("NOSPACE"))
            .filter(|a| req.member_id == 0 || a.node_id == req.member_id)
            .map(|a| AlarmMember {
                member_id: a.node_id,
                alarm: AlarmType::Nospace as i32,
            })
            .collect();
        Ok(GrpcResponse::new(AlarmResponse {
            header: header(&self.node, self.revision()),
            alarms,
        }))
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<GrpcResponse<StatusResponse>, Status> {
        require_leader(&self.node, &request)?;
        let view = NodeView::of(&self.node);
        let learner = {
            let metrics = self.node.raft.metrics();
            let m = metrics.borrow_watched();
            let voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|id| id == self.node.id);
            !voter
        };
        let (errors, in_use) = {
            let state = self.node.state();
            let errors = state
                .alarms()
                .iter()
                .map(|a| format!("memberID:{} alarm:{}", a.node_id, a.kind))
                .collect();
            (errors, state.kv().footprint().1)
        };
        Ok(GrpcResponse::new(StatusResponse {
            header: header(&self.node, view.revision),
            version: ETCD_VERSION.to_string(),
            db_size: i64_of(view.data_bytes),
            leader: view.leader_id.unwrap_or(0),
            raft_index: view.committed_index,
            raft_term: view.term,
            raft_applied_index: view.applied_index,
            errors,
            db_size_in_use: i64_of(in_use),
            is_learner: learner,
            storage_version: String::new(),
            db_size_quota: i64_of(view.quota_bytes),
        }))
    }

    async fn defragment(
        &self,
        _request: Request<DefragmentRequest>,
    ) -> Result<GrpcResponse<DefragmentResponse>, Status> {
        crate::server::space::compact(&self.node).await?;
        Ok(GrpcResponse::new(DefragmentResponse {
            header: header(&self.node, self.revision()),
        }))
    }

    async fn hash(
        &self,
        _request: Request<HashRequest>,
    ) -> Result<GrpcResponse<HashResponse>, Status> {
        let (hash, _, at) = self.hash_kv(0)?;
        Ok(GrpcResponse::new(HashResponse {
            header: header(&self.node, at),
            hash,
        }))
    }

    async fn hash_kv(
        &self,
        request: Request<HashKvRequest>,
    ) -> Result<GrpcResponse<HashKvResponse>, Status> {
        let revision = u64::try_from(request.into_inner().revision).unwrap_or(0);
        let (hash, compacted, at) = self.hash_kv(revision)?;
        Ok(GrpcResponse::new(HashKvResponse {
            header: header(&self.node, self.revision()),
            hash,
            compact_revision: i64_of(compacted),
            hash_revision: i64_of(at),
        }))
    }

    type SnapshotStream = ReceiverStream<Result<SnapshotResponse, Status>>;

    /// steward's snapshot stream, framed as the backup file `steward snapshot save` writes, so
    /// `etcdctl snapshot save` saves a file `steward snapshot restore` takes.
    async fn snapshot(
        &self,
        _request: Request<SnapshotRequest>,
    ) -> Result<GrpcResponse<Self::SnapshotStream>, Status> {
        let mut chunks = self
            .cluster
            .snapshot(Request::new(steward::SnapshotRequest {}))
            .await?
            .into_inner();
        let first =
            chunks.next().await.transpose()?.ok_or_else(|| {
                Status::unavailable("the snapshot stream ended before its header")
            })?;
        let backup_header: crate::raft::backup::BackupHeader =
            serde_json::from_str(&first.header_json)
                .map_err(|e| crate::server::errors::internal("snapshot header", e))?;
        let mut writer = BackupWriter::new(Vec::new(), &backup_header)
            .map_err(|e| crate::server::errors::internal("snapshot header", e))?;
        let node = self.node.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        // Everything sent, for etcd's framing at the end.
        let mut sent = Sha256::new();
        let mut sent_bytes = 0u64;
        tokio::spawn(async move {
            let blob = |blob: Vec<u8>| SnapshotResponse {
                header: header(&node, backup_header.revision),
                remaining_bytes: 0,
                blob: blob.into(),
                version: ETCD_VERSION.to_string(),
            };
            let mut pending = writer.take();
            let mut count = |bytes: &[u8]| {
                sent.update(bytes);
                sent_bytes += bytes.len() as u64;
            };
            count(&pending);
            loop {
                let chunk = match chunks.next().await.transpose() {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        let _ = tx
                            .send(Err(Status::unavailable("the snapshot stream ended early")))
                            .await;
                        return;
                    }
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                if !chunk.data.is_empty() {
                    if let Err(e) = writer.write_body(&chunk.data) {
                        let _ = tx.send(Err(Status::internal(e.to_string()))).await;
                        return;
                    }
                    let piece = writer.take();
                    count(&piece);
                    pending.extend(piece);
                    if tx
                        .send(Ok(blob(std::mem::take(&mut pending))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                if !chunk.sha256.is_empty() {
                    let last = match writer.finish(&chunk.sha256, chunk.total_bytes) {
                        Ok((mut tail, _)) => {
                            count(&tail);
                            tail.extend(crate::raft::backup::etcd_frame(sent_bytes, sent.clone()));
                            Ok(blob(tail))
                        }
                        Err(e) => Err(Status::data_loss(e.to_string())),
                    };
                    let _ = tx.send(last).await;
                    return;
                }
            }
        });
        Ok(GrpcResponse::new(ReceiverStream::new(rx)))
    }

    async fn move_leader(
        &self,
        request: Request<MoveLeaderRequest>,
    ) -> Result<GrpcResponse<MoveLeaderResponse>, Status> {
        let to = request.into_inner().target_id;
        self.cluster
            .transfer_leader(Request::new(steward::TransferLeaderRequest { to }))
            .await?;
        Ok(GrpcResponse::new(MoveLeaderResponse {
            header: header(&self.node, self.revision()),
        }))
    }

    async fn downgrade(
        &self,
        _request: Request<DowngradeRequest>,
    ) -> Result<GrpcResponse<DowngradeResponse>, Status> {
        Err(refused(
            "downgrade: it has no cluster version",
            "run the older steward binary on a restored backup instead",
        ))
    }
}
