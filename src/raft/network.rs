//! Peer transport over tonic: openraft's `RaftNetworkV2` as calls to the `RaftPeer` service.
//!
//! A leader's replication to a follower runs on one `AppendStream` per session: requests go out
//! as openraft makes them, without waiting for the answers, which come back in order. Against a
//! unary call per request this takes one HTTP/2 frame each way instead of a new stream's headers,
//! body, end and trailers, and the commit that follows an append no longer waits for its answer.
//! A single request (openraft's heartbeat) stays a unary `AppendEntries`; so does everything
//! sent to a node that answers the stream Unimplemented (an older build).
//!
//! openraft messages travel as serde_json payloads inside `RaftMessage.data`; snapshots stream in
//! chunks, read from the sender's snapshot file and written to a file on the receiver as they go
//! ([`snapshot_chunks`], [`receive_snapshot`]), so neither side holds a snapshot in memory.
//! Channels are cached per address and reused by every client to that peer; every RPC has a
//! deadline (openraft's hard TTL for append/vote, a configured timeout for the rest).
//!
//! This is the peer-network seam: everything openraft sends between nodes goes through
//! `PeerChannels`, so a simulator can replace it.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{stream_append_sequential, RPCOption};
use openraft::type_config::TypeConfigExt;
use openraft::{RaftNetworkFactory, RaftNetworkV2, StorageError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Status;

use crate::proto::raft_v1::raft_peer_client::RaftPeerClient;
use crate::proto::raft_v1::{RaftMessage, SnapshotChunk};
use crate::raft::message_size::{check_peer_message, SNAPSHOT_CHUNK_BYTES};
use crate::raft::snapshot::{blocking, SnapshotFile, SnapshotWriter};
use crate::raft::types::*;
use crate::server::errors;

/// How often either end of a peer connection pings the other over HTTP/2.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a ping may go unanswered before the connection is closed.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A cache of lazily connected channels, one per peer address, shared by every user.
#[derive(Clone)]
pub struct PeerChannels {
    channels: Arc<Mutex<BTreeMap<String, Channel>>>,
    connect_timeout: Duration,
    /// TLS towards other nodes (mutual: this node presents its certificate); None: plaintext.
    tls: Option<ClientTlsConfig>,
    /// `limits.peer_message_bytes_max`: what this node sends and accepts back, either way.
    pub message_bytes_max: usize,
}

impl PeerChannels {
    pub fn new(
        connect_timeout: Duration,
        tls: Option<ClientTlsConfig>,
        message_bytes_max: usize,
    ) -> Self {
        PeerChannels {
            channels: Arc::default(),
            connect_timeout,
            tls,
            message_bytes_max,
        }
    }

    /// The channel to `addr` (host:port), created on first use and reused afterwards.
    pub fn get(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ch) = map.get(addr) {
            return Ok(ch.clone());
        }
        let endpoint = match &self.tls {
            Some(tls) => {
                Endpoint::from_shared(format!("https://{addr}"))?.tls_config(tls.clone())?
            }
            None => Endpoint::from_shared(format!("http://{addr}"))?,
        };
        let ch = endpoint
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .connect_lazy();
        map.insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    pub fn peer(&self, addr: &str) -> Result<RaftPeerClient<Channel>, tonic::transport::Error> {
        Ok(RaftPeerClient::new(self.get(addr)?)
            .max_decoding_message_size(self.message_bytes_max)
            .max_encoding_message_size(self.message_bytes_max))
    }

    /// Whether `len` bytes of `what` may go to a peer: checked here, before sending, so the
    /// refusal names the limit (tonic's own check, the backstop, does not).
    pub fn check_size(&self, what: &str, len: usize) -> Result<(), String> {
        check_peer_message(what, len, self.message_bytes_max)
    }
}

/// Encodes a peer message payload. Fails only on a value serde_json cannot write (a map with
/// non-string keys); no type steward sends has one today, but a command built from a client's
/// request must not be able to take the node down if one ever does: the caller answers an error.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(value)
}

/// `encode` into a buffer of `capacity` bytes to start with (what the caller expects it to
/// take), so a large message is not copied each time the buffer grows.
pub fn encode_sized<T: Serialize>(
    value: &T,
    capacity: usize,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut data = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut data, value)?;
    Ok(data)
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
            streams: true,
        }
    }
}

/// openraft's connection to one peer.
pub struct PeerNetwork {
    target: NodeId,
    addr: String,
    channels: PeerChannels,
    rpc_timeout: Duration,
    /// Replication goes on `AppendStream`; false once the peer answered it Unimplemented.
    streams: bool,
}

fn unreachable<E: std::error::Error + 'static>(e: &E) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(e))
}

impl PeerNetwork {
    fn client(&self) -> Result<RaftPeerClient<Channel>, RPCError<TypeConfig>> {
        self.channels.peer(&self.addr).map_err(|e| unreachable(&e))
    }

    /// Opens an `AppendStream` that sends `input` as openraft makes it; answers come back in
    /// order. Each request must be answered within `ttl` of being handed to the transport, or
    /// the stream ends in a timeout (a peer cut off mid-stream is noticed as fast as a unary
    /// call's deadline would).
    async fn open_append_stream<S>(
        &mut self,
        input: S,
        ttl: Duration,
    ) -> Result<AppendStream<'static>, RPCError<TypeConfig>>
    where
        S: Stream<Item = AppendEntriesRequest> + Send + Unpin + 'static,
    {
        let mut client = self.client()?;
        let sent = Arc::new(SentRequests::default());
        let requests = append_requests(
            input,
            sent.clone(),
            self.channels.message_bytes_max,
            self.target,
        );
        let opened = tokio::time::timeout(ttl, client.append_stream(requests)).await;
        let answers = match opened {
            Ok(Ok(answers)) => answers.into_inner(),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(
                    target = self.target,
                    "peer has no AppendStream (an older build): replicating by AppendEntries"
                );
                self.streams = false;
                return Err(unreachable(&status));
            }
            Ok(Err(status)) => return Err(status_to_rpc_error(&status)),
            Err(_) => {
                let e = io::Error::new(io::ErrorKind::TimedOut, "opening an append stream");
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
        };
        Ok(append_answers(answers, sent, ttl, self.target))
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
        let data = encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if let Err(refused) = self.channels.check_size("a raft message", data.len()) {
            // Cannot happen below the floor `Config::validate` enforces; if it does, the node
            // keeps running and openraft retries with the same entries.
            tracing::error!(target = self.target, %refused, "peer message refused");
            let e = io::Error::other(refused);
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let client = self.client()?;
        let mut request = tonic::Request::new(RaftMessage { data });
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

/// openraft's answer stream of one append session.
/// What openraft reads its append stream's answers from.
pub type AppendStream<'s> = BoxStream<'s, Result<StreamAppendResult, RPCError<TypeConfig>>>;

/// Whether `request`'s entries follow its `prev_log_id` and each other, as Raft's consistency
/// check needs: a follower that matched `prev_log_id` appends them after it. openraft can hand
/// the transport a request that breaks this: a replication stream that resumes its range after
/// the leader purged the start of it (the purge waits only for the range the leader's engine
/// believes in flight) reads the entries that are left, which begin later. Sent, it would give
/// the follower a log with a hole (its log store refuses the append and its Raft stops). Not
/// sent, the stream ends in a network error, and openraft starts the follower's replication
/// afresh from what it holds: with a snapshot, when the entries it needs are purged.
pub fn check_append(request: &AppendEntriesRequest) -> Result<(), String> {
    let first = request.prev_log_id.map_or(0, |p| p.index + 1);
    for (next, entry) in (first..).zip(&request.entries) {
        if entry.log_id.index != next {
            return Err(format!(
                "an append after {} holds entry {} where {next} must come: the leader's log \
                 no longer holds what the stream had left to send",
                request
                    .prev_log_id
                    .map_or("the start".to_string(), |p| p.to_string()),
                entry.log_id
            ));
        }
    }
    Ok(())
}

/// The request half of an append stream: openraft's requests, checked ([`check_append`]),
/// encoded and sized (`limits.peer_message_bytes_max`), each one's sending noted in `sent`.
/// A request that may not go ends the stream, with why in `sent`: the answer half then ends in
/// a network error, as a unary call's refusal would, and openraft tries again; the node keeps
/// running.
pub fn append_requests<S>(
    input: S,
    sent: Arc<SentRequests>,
    message_bytes_max: usize,
    target: NodeId,
) -> impl Stream<Item = RaftMessage> + Send + 'static
where
    S: Stream<Item = AppendEntriesRequest> + Send + Unpin + 'static,
{
    futures::stream::unfold((input, sent), move |(mut input, sent)| async move {
        let request = input.next().await?;
        let refused = match check_append(&request).and_then(|()| {
            let capacity = request
                .entries
                .iter()
                .map(entry_json_len_hint)
                .sum::<usize>()
                + 256;
            encode_sized(&request, capacity)
                .map_err(|e| format!("cannot encode a raft message: {e}"))
        }) {
            Ok(data) => match check_peer_message("a raft message", data.len(), message_bytes_max) {
                Ok(()) => {
                    sent.push();
                    return Some((RaftMessage { data }, (input, sent)));
                }
                Err(refused) => refused,
            },
            Err(refused) => refused,
        };
        tracing::error!(target, %refused, "peer message refused");
        sent.refuse(refused);
        None
    })
}

/// The answer half of an append stream: the peer's answers, in order, decoded for openraft.
/// Each request must be answered within `ttl` of being sent, or the stream ends in a timeout;
/// a conflict, a higher vote or the peer's fatal error ends it too.
pub fn append_answers<A>(
    answers: A,
    sent: Arc<SentRequests>,
    ttl: Duration,
    target: NodeId,
) -> AppendStream<'static>
where
    A: Stream<Item = Result<RaftMessage, Status>> + Send + Unpin + 'static,
{
    Box::pin(futures::stream::unfold(
        Some((answers, sent)),
        move |state| async move {
            let (mut answers, sent) = state?;
            let answer = match next_answer(&mut answers, &sent, ttl).await {
                Ok(Some(answer)) => answer,
                Ok(None) => {
                    let refused = sent.refused()?;
                    let e = io::Error::other(refused);
                    return Some((Err(RPCError::Network(NetworkError::new(&e))), None));
                }
                Err(e) => return Some((Err(e), None)),
            };
            let decoded: Result<Result<StreamAppendResult, RaftError>, _> = decode(&answer.data);
            match decoded {
                Ok(Ok(Ok(matching))) => Some((Ok(Ok(matching)), Some((answers, sent)))),
                // A conflict or a higher vote ends the stream; openraft acts on it.
                Ok(Ok(Err(stop))) => Some((Ok(Err(stop)), None)),
                Ok(Err(fatal)) => {
                    tracing::debug!(target, error = %fatal, "peer raft error");
                    Some((Err(unreachable(&fatal)), None))
                }
                Err(e) => Some((Err(RPCError::Network(NetworkError::new(&e))), None)),
            }
        },
    ))
}

/// What an append stream has sent and not had answered: when each request was handed to the
/// transport, oldest first (answers come in order), and why the stream stopped sending, if a
/// request could not go.
#[derive(Default)]
pub struct SentRequests {
    inner: Mutex<Sent>,
    /// Wakes the answer side when a request goes out while none was waiting for an answer.
    first: Notify,
}

#[derive(Default)]
struct Sent {
    at: VecDeque<Instant>,
    refused: Option<String>,
}

impl SentRequests {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sent> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self) {
        let mut sent = self.lock();
        sent.at.push_back(Instant::now());
        if sent.at.len() == 1 {
            self.first.notify_one();
        }
    }

    fn refuse(&self, why: String) {
        self.lock().refused = Some(why);
    }

    fn refused(&self) -> Option<String> {
        self.lock().refused.take()
    }

    /// By when the oldest unanswered request must be answered.
    fn deadline(&self, ttl: Duration) -> Option<Instant> {
        self.lock().at.front().map(|at| *at + ttl)
    }

    fn answered(&self) {
        self.lock().at.pop_front();
    }
}

/// The next answer on an append stream, `Ok(None)` when the peer ended it. Waits without a
/// deadline while nothing is unanswered, and at most until the oldest unanswered request's
/// deadline otherwise.
async fn next_answer<A>(
    answers: &mut A,
    sent: &SentRequests,
    ttl: Duration,
) -> Result<Option<RaftMessage>, RPCError<TypeConfig>>
where
    A: Stream<Item = Result<RaftMessage, Status>> + Unpin,
{
    loop {
        let next = match sent.deadline(ttl) {
            Some(deadline) => match tokio::time::timeout_at(deadline, answers.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let e = io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no answer on the append stream within {ttl:?}"),
                    );
                    return Err(RPCError::Network(NetworkError::new(&e)));
                }
            },
            None => tokio::select! {
                next = answers.next() => next,
                // A request went out: wait again, with its deadline.
                () = sent.first.notified() => continue,
            },
        };
        return match next {
            Some(Ok(answer)) => {
                sent.answered();
                Ok(Some(answer))
            }
            Some(Err(status)) => Err(status_to_rpc_error(&status)),
            None => Ok(None),
        };
    }
}

impl RaftNetworkV2<TypeConfig> for PeerNetwork {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RPCError<TypeConfig>> {
        if let Err(refused) = check_append(&rpc) {
            tracing::error!(target = self.target, %refused, "peer message refused");
            return Err(RPCError::Network(NetworkError::new(&io::Error::other(
                refused,
            ))));
        }
        self.call(&rpc, option.hard_ttl(), |mut c, r| async move {
            c.append_entries(r).await
        })
        .await
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<AppendStream<'s>, RPCError<TypeConfig>>>
    where
        S: Stream<Item = AppendEntriesRequest> + Send + Unpin + 'static,
    {
        // One request (a heartbeat) costs a stream as much as a unary call.
        if !self.streams || input.size_hint() == (1, Some(1)) {
            return stream_append_sequential(self, input, option);
        }
        Box::pin(async move {
            let answers: AppendStream<'s> =
                self.open_append_stream(input, option.hard_ttl()).await?;
            Ok(answers)
        })
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
        let signature = snapshot.meta.signature();
        let header = encode(&(vote, snapshot.meta.clone())).map_err(|e| {
            let source = TypeConfig::err_from_error(&e);
            StreamingError::StorageError(StorageError::read_snapshot(
                Some(signature.clone()),
                source,
            ))
        })?;
        let bytes = snapshot.snapshot.body_len();
        let (chunks, read_failed) =
            snapshot_chunks(snapshot.snapshot, header, SNAPSHOT_CHUNK_BYTES);
        tracing::info!(target = self.target, bytes, "sending snapshot");
        let mut request = tonic::Request::new(chunks);
        // A snapshot may be large: give it ten ordinary RPC timeouts.
        request.set_timeout(self.rpc_timeout * 10);
        let send = client.install_snapshot(request);
        // A failed read drops the call, so the peer sees the stream reset rather than end.
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            e = read_failed => {
                let source = TypeConfig::err_from_error(&e);
                let e = StorageError::read_snapshot(Some(signature), source);
                return Err(StreamingError::StorageError(e));
            }
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

/// The chunks `full_snapshot` sends: the first carries `header` (the vote and the snapshot's
/// meta), each at most `chunk_bytes` of the body, read from the file (on the blocking pool) only
/// as the stream is polled, so one chunk at a time is in memory. A failed read does not end the
/// stream, which the peer would take for the end of a short snapshot: the stream stops yielding
/// and the error comes out of the returned future instead, for the caller to drop the call.
pub fn snapshot_chunks(
    snapshot: SnapshotFile,
    header: Vec<u8>,
    chunk_bytes: usize,
) -> (
    impl Stream<Item = SnapshotChunk> + Send + 'static,
    impl Future<Output = io::Error> + Send + 'static,
) {
    struct Sending {
        snapshot: SnapshotFile,
        /// Until the first chunk is sent.
        header: Option<Vec<u8>>,
        failed: oneshot::Sender<io::Error>,
    }
    let (failed, failure) = oneshot::channel();
    let start = Sending {
        snapshot,
        header: Some(header),
        failed,
    };
    let chunks = futures::stream::unfold(start, move |sending| async move {
        let Sending {
            snapshot,
            header,
            failed,
        } = sending;
        // The first chunk goes even if the body is empty: it carries the header.
        if header.is_none() && snapshot.remaining() == 0 {
            return None;
        }
        let read = tokio::task::spawn_blocking(move || {
            let mut snapshot = snapshot;
            let chunk = snapshot.read_chunk(chunk_bytes);
            (snapshot, chunk)
        })
        .await;
        let error = match read {
            Ok((snapshot, Ok(data))) => {
                let chunk = SnapshotChunk {
                    meta: header.unwrap_or_default(),
                    data,
                };
                let next = Sending {
                    snapshot,
                    header: None,
                    failed,
                };
                return Some((chunk, next));
            }
            Ok((_, Err(e))) => e,
            Err(e) => io::Error::other(format!("read snapshot: blocking task failed: {e}")),
        };
        // The caller is waiting on `failure` and drops this stream.
        let _ = failed.send(error);
        futures::future::pending().await
    });
    let failure = async move {
        match failure.await {
            Ok(e) => e,
            // The stream ended (or was dropped) without a failure.
            Err(_) => futures::future::pending().await,
        }
    };
    (chunks, failure)
}

/// The receiving end of [`snapshot_chunks`], for the peer service: the chunks are written to a
/// temporary snapshot file in `dir` (the node's data directory) as they arrive, one chunk in
/// memory at a time, and come back as the vote and a file-backed snapshot for
/// `Raft::install_full_snapshot`, which moves the file into place. On any failure, or if openraft
/// turns the snapshot down, the temporary file is removed.
pub async fn receive_snapshot<S>(dir: &Path, mut chunks: S) -> Result<(Vote, Snapshot), Status>
where
    S: Stream<Item = Result<SnapshotChunk, Status>> + Unpin,
{
    let first = chunks
        .next()
        .await
        .ok_or_else(|| errors::invalid("chunks", "empty snapshot stream"))??;
    let (vote, meta): (Vote, SnapshotMeta) = decode(&first.meta)
        .map_err(|e| errors::invalid("meta", format!("undecodable snapshot header: {e}")))?;
    let disk = |e: io::Error| errors::internal("cannot store the snapshot", e);
    let (d, m) = (dir.to_path_buf(), meta.clone());
    let mut writer = blocking("receive snapshot", move || SnapshotWriter::create(&d, &m))
        .await
        .map_err(disk)?;
    let mut data = first.data;
    loop {
        writer = blocking("receive snapshot", move || {
            writer.write_all(&data)?;
            Ok(writer)
        })
        .await
        .map_err(disk)?;
        match chunks.next().await {
            Some(chunk) => data = chunk?.data,
            None => break,
        }
    }
    let snapshot = blocking("receive snapshot", move || writer.finish())
        .await
        .map_err(disk)?;
    Ok((vote, Snapshot { meta, snapshot }))
}

#[cfg(test)]
mod tests;
