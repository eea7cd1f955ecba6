//! The peer service: Raft RPCs from other nodes, commands forwarded by followers, read indexes
//! for followers' linearizable reads, and this node's status. Thin: decode, call, encode.

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tonic::{Request, Response as GrpcResponse, Status, Streaming};

use crate::proto::raft_v1::raft_peer_server::RaftPeer;
use crate::proto::raft_v1::{
    CompactNodeRequest, NodeStatusRequest, RaftMessage, ReadIndexReply, ReadIndexRequest,
    SnapshotChunk,
};
use crate::raft::network::{decode, encode, receive_snapshot};
use crate::raft::types::*;
use crate::server::errors;
use crate::server::forward::{decode_batch, ForwardReply};
use crate::server::node::{LocalProposeError, Node};

pub struct PeerService {
    node: Arc<Node>,
}

impl PeerService {
    pub fn new(node: Arc<Node>) -> Self {
        PeerService { node }
    }
}

/// The peer port's gate. Over TLS, the caller's certificate (already checked against the CA)
/// must name a node (`steward-node-<id>`), and, once this node knows the membership, one in it:
/// a client certificate, or a removed or foreign node, is refused with PermissionDenied.
/// Plaintext peers are not authenticated (`tls.plaintext` says so).
pub fn admit(node: &Node, request: Request<()>) -> Result<Request<()>, Status> {
    if node.config.tls.plaintext {
        return Ok(request);
    }
    let Some(cn) = crate::tls::peer_common_name(&request) else {
        tracing::warn!("peer port: refused a connection without a certificate");
        return Err(errors::permission_denied(
            "",
            "peer port: a node certificate is required",
        ));
    };
    let Some(id) = crate::tls::node_id_of(&cn) else {
        tracing::warn!(common_name = %cn, "peer port: refused a certificate that names no node");
        return Err(errors::permission_denied(
            "",
            format!(
                "peer port: certificate {cn:?} is not a node's (its common name must be \
                 steward-node-<id>)"
            ),
        ));
    };
    if !may_be_member(node, id) {
        tracing::warn!(peer = id, "peer port: refused a node not in the membership");
        return Err(errors::permission_denied(
            "",
            format!("peer port: node {id} is not a member of this cluster"),
        ));
    }
    Ok(request)
}

/// Whether node `id` is a member, as far as this node knows (any id while it knows no
/// membership yet).
pub fn may_be_member(node: &Node, id: u64) -> bool {
    let m = node.raft.metrics();
    let m = m.borrow_watched();
    let membership = m.membership_config.membership();
    let mut ids = membership.nodes().map(|(id, _)| *id).peekable();
    ids.peek().is_none() || ids.any(|n| n == id)
}

fn bad_payload(e: serde_json::Error) -> Status {
    errors::invalid("data", format!("undecodable peer message: {e}"))
}

fn reply<T: Serialize>(value: &T) -> Result<GrpcResponse<RaftMessage>, Status> {
    let data = encode(value)
        .map_err(|e| crate::server::errors::internal("cannot encode the peer reply", e))?;
    Ok(GrpcResponse::new(RaftMessage { data }))
}

/// One node's own view of itself, as `NodeStatus` returns it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeView {
    pub id: NodeId,
    pub state: String,
    pub term: u64,
    pub leader_id: Option<NodeId>,
    pub last_log_index: u64,
    pub committed_index: u64,
    pub applied_index: u64,
    pub snapshot_index: u64,
    pub purged_index: u64,
    pub revision: u64,
    /// The node's health probe passes (`health_serving`).
    #[serde(default)]
    pub serving: bool,
    /// The file system of its data_dir, 0 when unknown.
    #[serde(default)]
    pub disk_total_bytes: u64,
    #[serde(default)]
    pub disk_free_bytes: u64,
    /// Its data directory at the last space check, and its `limits.quota_bytes`.
    #[serde(default)]
    pub data_bytes: u64,
    #[serde(default)]
    pub quota_bytes: u64,
    /// Its process id (`std::process::id()`), for `cluster status`; 0 from an older node.
    #[serde(default)]
    pub pid: u32,
    /// Its wall clock and its count of cluster time when it answered (README "Time").
    #[serde(default)]
    pub wall_ms: u64,
    #[serde(default)]
    pub cluster_ms: u64,
}

impl NodeView {
    pub fn of(node: &Node) -> NodeView {
        let revision = node.state().revision();
        // Before the metrics borrow below: `cluster_now` borrows them too.
        let (wall_ms, cluster_ms) = (node.time.clock().wall_ms(), node.cluster_now());
        // The space check's last reading: no statvfs on this async thread.
        let disk = node.usage.last();
        let m = node.raft.metrics();
        let m = m.borrow_watched();
        NodeView {
            id: node.id,
            state: format!("{:?}", m.state).to_lowercase(),
            term: m.current_term,
            leader_id: m.current_leader,
            last_log_index: m.last_log_index.unwrap_or(0),
            committed_index: m.local_committed.as_ref().map(|l| l.index).unwrap_or(0),
            applied_index: m.last_applied.as_ref().map(|l| l.index).unwrap_or(0),
            snapshot_index: m.snapshot.as_ref().map(|l| l.index).unwrap_or(0),
            purged_index: m.purged.as_ref().map(|l| l.index).unwrap_or(0),
            revision,
            serving: node.metrics.serving.get() == 1,
            disk_total_bytes: disk.map_or(0, |d| d.disk_total_bytes),
            disk_free_bytes: disk.map_or(0, |d| d.disk_free_bytes),
            data_bytes: u64::try_from(node.metrics.data_bytes.get()).unwrap_or(0),
            quota_bytes: node.config.limits.quota_bytes,
            pid: std::process::id(),
            wall_ms,
            cluster_ms,
        }
    }
}

#[tonic::async_trait]
impl RaftPeer for PeerService {
    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        let req: AppendEntriesRequest = decode(&request.into_inner().data).map_err(bad_payload)?;
        reply(&self.node.raft.append_entries(req).await)
    }

    type AppendStreamStream = Pin<Box<dyn Stream<Item = Result<RaftMessage, Status>> + Send>>;

    /// A leader's append requests, handed to Raft as they arrive: [`serve_append_stream`].
    async fn append_stream(
        &self,
        request: Request<Streaming<RaftMessage>>,
    ) -> Result<GrpcResponse<Self::AppendStreamStream>, Status> {
        let answers = serve_append_stream(&self.node.raft, request.into_inner());
        Ok(GrpcResponse::new(answers))
    }

    async fn vote(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        let req: VoteRequest = decode(&request.into_inner().data).map_err(bad_payload)?;
        reply(&self.node.raft.vote(req).await)
    }

    async fn pre_vote(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        let req: VoteRequest = decode(&request.into_inner().data).map_err(bad_payload)?;
        reply(&self.node.raft.pre_vote(req).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        let (vote, snapshot) =
            receive_snapshot(&self.node.config.data_dir, request.into_inner()).await?;
        let (bytes, last) = (snapshot.snapshot.body_len(), snapshot.meta.last_log_id);
        tracing::info!(bytes, ?last, "installing snapshot from leader");
        let result: Result<SnapshotResponse, RaftError> = self
            .node
            .raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(RaftError::Fatal);
        reply(&result)
    }

    async fn transfer_leader(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        let req: TransferLeaderRequest = decode(&request.into_inner().data).map_err(bad_payload)?;
        let result: Result<TransferLeaderResponse, RaftError> = self
            .node
            .raft
            .handle_transfer_leader(req)
            .await
            .map_err(RaftError::Fatal);
        reply(&result)
    }

    async fn forward_batch(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        let commands = decode_batch(&request.into_inner().data).map_err(bad_payload)?;
        // Each passes the leader's own admission, as a local proposal does; the admitted are
        // proposed together, so Raft appends them as one group and they share one fsync.
        let node = &self.node;
        let proposals = commands.into_iter().map(|command| async move {
            let _permit = node.admit(&command).map_err(LocalProposeError::Other)?;
            node.propose_local(command).await
        });
        let answers: Vec<ForwardReply> = futures::future::join_all(proposals)
            .await
            .into_iter()
            .map(ForwardReply::answer)
            .collect();
        reply(&answers)
    }

    async fn read_index(
        &self,
        _request: Request<ReadIndexRequest>,
    ) -> Result<GrpcResponse<ReadIndexReply>, Status> {
        let linearizer = self
            .node
            .raft
            .get_read_linearizer(ReadPolicy::ReadIndex)
            .await
            .map_err(|e| errors::read_index_refused(&e))?;
        Ok(GrpcResponse::new(ReadIndexReply {
            read_index: linearizer.read_log_id().index(),
        }))
    }

    async fn node_status(
        &self,
        _request: Request<NodeStatusRequest>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        reply(&NodeView::of(&self.node))
    }

    async fn compact(
        &self,
        _request: Request<CompactNodeRequest>,
    ) -> Result<GrpcResponse<RaftMessage>, Status> {
        reply(&crate::server::space::compact(&self.node).await?)
    }
}

/// The follower's end of an append stream: the leader's requests, handed to Raft as they
/// arrive (Raft pipelines them), each answered in order. An undecodable request ends the
/// stream: what came before it is answered, then the stream ends with its InvalidArgument.
/// The gRPC service serves it; the simulator runs it over its own network.
pub fn serve_append_stream<I>(
    raft: &Raft,
    incoming: I,
) -> futures::stream::BoxStream<'static, Result<RaftMessage, Status>>
where
    I: Stream<Item = Result<RaftMessage, Status>> + Send + Unpin + 'static,
{
    let undecodable = Arc::new(Mutex::new(None::<Status>));
    let requests = futures::stream::unfold(
        (incoming, undecodable.clone()),
        |(mut incoming, undecodable)| async move {
            let message = match incoming.next().await? {
                Ok(message) => message,
                // The leader went away or cancelled: nothing more to answer.
                Err(status) => {
                    tracing::debug!(%status, "append stream ended by the leader");
                    return None;
                }
            };
            match decode::<AppendEntriesRequest>(&message.data) {
                Ok(request) => Some((request, (incoming, undecodable))),
                Err(e) => {
                    *undecodable.lock().unwrap_or_else(|p| p.into_inner()) = Some(bad_payload(e));
                    None
                }
            }
        },
    );
    let results = Box::pin(raft.stream_append(requests));
    let answers = futures::stream::unfold(Some((results, undecodable)), |state| async move {
        let (mut results, undecodable) = state?;
        let Some(result) = results.next().await else {
            let status = undecodable.lock().unwrap_or_else(|p| p.into_inner()).take();
            return status.map(|s| (Err(s), None));
        };
        let result: Result<StreamAppendResult, RaftError> = result.map_err(RaftError::Fatal);
        match encode(&result) {
            Ok(data) => Some((Ok(RaftMessage { data }), Some((results, undecodable)))),
            Err(e) => Some((
                Err(errors::internal("cannot encode the peer reply", e)),
                None,
            )),
        }
    });
    Box::pin(answers)
}
