//! Peer transport over tonic: openraft's `RaftNetworkV2` as calls to the `RaftPeer` service.
//!
//! openraft messages travel as serde_json payloads inside `RaftMessage.data`; snapshots stream in
//! chunks. Channels are cached per address and reused by every client to that peer; every RPC has
//! a deadline (openraft's hard TTL for append/vote, a configured timeout for the rest).
//!
//! This is the peer-network seam: everything openraft sends between nodes goes through
//! `PeerChannels`, so a simulator can replace it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::{RaftNetworkFactory, RaftNetworkV2};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use crate::proto::raft_v1::raft_peer_client::RaftPeerClient;
use crate::proto::raft_v1::{RaftMessage, SnapshotChunk};
use crate::raft::types::*;

/// Size of one snapshot chunk on the wire.
const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// A cache of lazily connected channels, one per peer address, shared by every user.
#[derive(Clone, Default)]
pub struct PeerChannels {
    channels: Arc<Mutex<BTreeMap<String, Channel>>>,
    connect_timeout: Duration,
}

impl PeerChannels {
    pub fn new(connect_timeout: Duration) -> Self {
        PeerChannels {
            channels: Arc::default(),
            connect_timeout,
        }
    }

    /// The channel to `addr` (host:port), created on first use and reused afterwards.
    pub fn get(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ch) = map.get(addr) {
            return Ok(ch.clone());
        }
        let ch = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .connect_lazy();
        map.insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    pub fn peer(&self, addr: &str) -> Result<RaftPeerClient<Channel>, tonic::transport::Error> {
        Ok(RaftPeerClient::new(self.get(addr)?)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX))
    }
}

/// Encodes a peer message payload.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing openraft's and steward's own types to JSON cannot fail: no non-string map keys.
    serde_json::to_vec(value).unwrap_or_else(|e| panic!("peer message encoding failed: {e}"))
}

/// Decodes a peer message payload.
pub fn decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(data)
}

/// Makes one `PeerNetwork` per target for openraft.
#[derive(Clone)]
pub struct PeerNetworkFactory {
    pub channels: PeerChannels,
    /// Deadline for RPCs openraft gives no TTL for (snapshot, transfer leader).
    pub rpc_timeout: Duration,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddr) -> PeerNetwork {
        PeerNetwork {
            target,
            addr: node.peer_addr.clone(),
            channels: self.channels.clone(),
            rpc_timeout: self.rpc_timeout,
        }
    }
}

/// openraft's connection to one peer.
pub struct PeerNetwork {
    target: NodeId,
    addr: String,
    channels: PeerChannels,
    rpc_timeout: Duration,
}

fn unreachable<E: std::error::Error + 'static>(e: &E) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(e))
}

impl PeerNetwork {
    fn client(&self) -> Result<RaftPeerClient<Channel>, RPCError<TypeConfig>> {
        self.channels.peer(&self.addr).map_err(|e| unreachable(&e))
    }

    /// One unary call: encode, send with a deadline, decode `Result<Resp, RaftError>`.
    async fn call<Req, Resp, F, Fut>(
        &self,
        req: &Req,
        ttl: Duration,
        f: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        F: FnOnce(RaftPeerClient<Channel>, tonic::Request<RaftMessage>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<RaftMessage>, tonic::Status>>,
    {
        let client = self.client()?;
        let mut request = tonic::Request::new(RaftMessage { data: encode(req) });
        request.set_timeout(ttl);
        let reply = match f(client, request).await {
            Ok(r) => r.into_inner(),
            Err(status) => return Err(status_to_rpc_error(&status)),
        };
        let result: Result<Resp, RaftError> =
            decode(&reply.data).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            // The only remote error of these RPCs is Fatal: the peer's Raft has stopped.
            tracing::debug!(target = self.target, error = %e, "peer raft error");
            unreachable(&e)
        })
    }
}

fn status_to_rpc_error(status: &tonic::Status) -> RPCError<TypeConfig> {
    match status.code() {
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            RPCError::Network(NetworkError::new(status))
        }
        _ => unreachable(status),
    }
}

impl RaftNetworkV2<TypeConfig> for PeerNetwork {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.append_entries(r).await
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.vote(r).await
        })
        .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RPCError<TypeConfig>> {
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.pre_vote(r).await
        })
        .await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest,
        _option: RPCOption,
    ) -> Result<TransferLeaderResponse, RPCError<TypeConfig>> {
        let ttl = self.rpc_timeout;
        self.call(
            &req,
            ttl,
            |mut c, r| async move { c.transfer_leader(r).await },
        )
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError<TypeConfig>> {
        let mut client = self.client().map_err(|e| match e {
            RPCError::Unreachable(u) => StreamingError::Unreachable(u),
            other => StreamingError::Network(NetworkError::new(&other)),
        })?;
        let meta = encode(&(vote, snapshot.meta.clone()));
        let data = snapshot.snapshot;
        let mut chunks: Vec<SnapshotChunk> = data
            .chunks(SNAPSHOT_CHUNK_BYTES)
            .map(|c| SnapshotChunk {
                meta: Vec::new(),
                data: c.to_vec(),
            })
            .collect();
        if chunks.is_empty() {
            chunks.push(SnapshotChunk::default());
        }
        chunks[0].meta = meta;
        tracing::info!(target = self.target, bytes = data.len(), "sending snapshot");
        let mut request = tonic::Request::new(tokio_stream::iter(chunks));
        // A snapshot may be large: give it ten ordinary RPC timeouts.
        request.set_timeout(self.rpc_timeout * 10);
        let send = client.install_snapshot(request);
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = send => r,
        };
        let reply = reply
            .map_err(|s| StreamingError::Unreachable(Unreachable::new(&s)))?
            .into_inner();
        let result: Result<SnapshotResponse, RaftError> =
            decode(&reply.data).map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))
    }
}
