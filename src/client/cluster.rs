//! The `Cluster` service calls of `Client`: status, membership changes, leadership transfer;
//! and a node's grpc.health.v1 health.
//! Status and member list are reads; every membership change is a write (never retried after it
//! may have reached a node).

use tonic::Status;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::{
    cluster, request, AlarmsReply, Client, ClusterStatusReply, CompactReply, MemberListReply, Retry,
};
use crate::proto::v1 as pb;

impl Client {
    /// Every node's Raft state, as the answering node sees it.
    pub async fn cluster_status(&self) -> Result<ClusterStatusReply, Status> {
        self.call(Retry::Read, |ch, t| async move {
            cluster(ch)
                .status(request(pb::ClusterStatusRequest {}, t))
                .await
        })
        .await
    }

    /// The raised alarms (a linearizable read).
    pub async fn alarms(&self) -> Result<AlarmsReply, Status> {
        self.call(Retry::Read, |ch, t| async move {
            cluster(ch)
                .alarms(request(pb::AlarmListRequest {}, t))
                .await
        })
        .await
    }

    /// Clears the alarms of `node_id` (every node's when 0) of `kind` (every kind when empty);
    /// answers the alarms left.
    pub async fn alarm_disarm(&self, node_id: u64, kind: &str) -> Result<AlarmsReply, Status> {
        let msg = pb::AlarmDisarmRequest {
            node_id,
            kind: kind.to_string(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { cluster(ch).alarm_disarm(request(msg, t)).await }
        })
        .await
    }

    /// Compacts the storage of `node_ids` (every member when empty), one after another. Give
    /// the client a timeout long enough for all of them (`with_timeout`).
    pub async fn compact(&self, node_ids: &[u64]) -> Result<CompactReply, Status> {
        let msg = pb::CompactRequest {
            node_ids: node_ids.to_vec(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { cluster(ch).compact(request(msg, t)).await }
        })
        .await
    }

    /// grpc.health.v1 `Check` of the node as a whole (service ""): SERVING while it can answer a
    /// linearizable read. Asks the current endpoint, failing over like a read; pin the client
    /// (`with_endpoint_index`) to ask one node.
    pub async fn health(&self) -> Result<ServingStatus, Status> {
        let reply = self
            .call(Retry::Read, |ch, t| async move {
                HealthClient::new(ch)
                    .check(request(HealthCheckRequest::default(), t))
                    .await
            })
            .await?;
        Ok(reply.status())
    }

    /// The members, with the leader's view of their replication.
    pub async fn member_list(&self) -> Result<MemberListReply, Status> {
        self.call(Retry::Read, |ch, t| async move {
            cluster(ch)
                .member_list(request(pb::MemberListRequest {}, t))
                .await
        })
        .await
    }

    /// Adds node `id` as a learner; returns once it has caught up with the leader's log.
    pub async fn add_learner(
        &self,
        id: u64,
        peer_addr: &str,
        client_addr: &str,
    ) -> Result<MemberListReply, Status> {
        let msg = pb::AddLearnerRequest {
            id,
            peer_addr: peer_addr.to_string(),
            client_addr: client_addr.to_string(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { cluster(ch).add_learner(request(msg, t)).await }
        })
        .await
    }

    /// Makes learner `id` a voter.
    pub async fn promote(&self, id: u64) -> Result<MemberListReply, Status> {
        self.call(Retry::Write, |ch, t| async move {
            cluster(ch)
                .promote(request(pb::PromoteRequest { id }, t))
                .await
        })
        .await
    }

    /// Removes member `id`; its id is retired for good.
    pub async fn remove_member(&self, id: u64) -> Result<MemberListReply, Status> {
        self.call(Retry::Write, |ch, t| async move {
            cluster(ch)
                .remove_member(request(pb::RemoveMemberRequest { id }, t))
                .await
        })
        .await
    }

    /// Hands leadership to voter `to` (0: the most up-to-date other voter).
    pub async fn transfer_leader(&self, to: u64) -> Result<MemberListReply, Status> {
        self.call(Retry::Write, |ch, t| async move {
            cluster(ch)
                .transfer_leader(request(pb::TransferLeaderRequest { to }, t))
                .await
        })
        .await
    }
}

impl Client {
    /// A consistent copy of the whole state, streamed (`Cluster.Snapshot`): the first message
    /// holds the header, the last the checksum. Setting up fails over like a read; the stream
    /// itself has no deadline.
    pub async fn snapshot(&self) -> Result<tonic::Streaming<pb::SnapshotChunk>, Status> {
        self.call(Retry::LongRead, |ch, _t| async move {
            cluster(ch)
                .snapshot(tonic::Request::new(pb::SnapshotRequest {}))
                .await
        })
        .await
    }
}
