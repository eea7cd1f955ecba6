//! The simulated network between nodes, and between clients and nodes.
//!
//! Peer messages are steward's own (openraft's requests and answers, encoded as the peer port
//! encodes them) carried by [`Peer`], openraft's `RaftNetworkV2`. Each message is delayed by the
//! seed, may be dropped (the caller waits out its deadline: a timeout), duplicated (the copy
//! arrives later, after messages sent after it: a reorder), and goes only where the partition
//! lets it: a cut is one-way, `from -> to`, so a partition of any shape is a set of cuts. An
//! answer takes the way back under the same rules, so a request can take effect and its
//! answer be lost.
//!
//! Replication runs as it does between real nodes: on an append stream per session (steward's
//! own two halves, `raft::network::append_requests` and `append_answers`, at the leader, and
//! `server::peer::serve_append_stream` at the follower), over a simulated TCP connection
//! ([`Net::carry`]): requests go out without waiting for answers, in order, never copied; a cut
//! stalls the connection until it is reset.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use openraft::base::BoxFuture;
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{stream_append_sequential, RPCOption};
use openraft::{RaftNetworkFactory, RaftNetworkV2};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use steward::proto::raft_v1::RaftMessage;
use steward::raft::network::{
    append_answers, append_requests, check_append, decode, encode, AppendStream, SentRequests,
};
use steward::server::peer::serve_append_stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;

use crate::cluster::Host;
use steward::raft::types::{
    AppendEntriesRequest, AppendEntriesResponse, NodeAddr, NodeId, RaftError, Snapshot,
    SnapshotData, SnapshotResponse, TransferLeaderRequest, TransferLeaderResponse, TypeConfig,
    Vote, VoteRequest, VoteResponse,
};

/// How the network misbehaves; drawn from the seed per run, changed by the nemesis.
#[derive(Clone, Debug)]
pub struct NetFaults {
    /// One-way delay of a message, simulated microseconds (uniform).
    pub delay_us: (u64, u64),
    /// The chance a message is lost.
    pub drop: f64,
    /// The chance a message is delivered twice (the copy later).
    pub duplicate: f64,
}

impl Default for NetFaults {
    fn default() -> Self {
        NetFaults {
            delay_us: (100, 2_000),
            drop: 0.0,
            duplicate: 0.0,
        }
    }
}

/// The network. Clones share it.
#[derive(Clone)]
pub struct Net {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    /// Each node's running incarnation and what a message reaches there; `None` while it is
    /// down.
    nodes: BTreeMap<NodeId, Option<(u64, Host)>>,
    /// Messages from `.0` to `.1` are lost.
    cuts: BTreeSet<(NodeId, NodeId)>,
    faults: NetFaults,
    rng: SmallRng,
    /// Armed by the nemesis: the next node to grant a vote crashes as it answers.
    crash_next_voter: bool,
    /// Set by the final heal: no fault is armed or started after it.
    healed: bool,
    /// Where such a crash is asked for: the voter, and the candidate it voted for.
    crashes: Option<tokio::sync::mpsc::UnboundedSender<VoterCrash>>,
}

/// A crash asked for as `voter` grants `candidate` its vote.
#[derive(Clone, Copy, Debug)]
pub struct VoterCrash {
    pub voter: NodeId,
    pub candidate: NodeId,
}

/// Whether a message may be delivered twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    /// Raft's own messages: yes.
    Raft,
    /// A call over one gRPC stream: never.
    Never,
}

/// How long a connection that stopped getting through (a cut, or an end whose process is gone)
/// lasts before it is reset: HTTP/2's keepalive interval and timeout between real nodes
/// (`raft::network::KEEPALIVE_*`), scaled down with the simulated cluster's timeouts.
const STREAM_RESET_AFTER: Duration = Duration::from_millis(1_500);
/// A segment lost on a connection arrives this much later (TCP sends it again).
const RETRANSMIT: Duration = Duration::from_millis(20);
/// The most bytes a peer message may have (`limits.peer_message_bytes_max`'s default).
const PEER_MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What happens to one message.
struct Fate {
    delay: Duration,
    lost: bool,
    /// Delivered again after this much more.
    copy_after: Option<Duration>,
}

impl Net {
    pub fn new(seed: u64, faults: NetFaults) -> Net {
        Net {
            inner: Arc::new(Mutex::new(Inner {
                nodes: BTreeMap::new(),
                cuts: BTreeSet::new(),
                faults,
                rng: SmallRng::seed_from_u64(seed),
                crash_next_voter: false,
                healed: false,
                crashes: None,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `node` is up, as `incarnation`.
    pub fn up(&self, node: NodeId, incarnation: u64, host: Host) {
        self.lock().nodes.insert(node, Some((incarnation, host)));
    }

    /// `node` is down: nothing reaches it, nothing it sent before goes on.
    pub fn down(&self, node: NodeId) {
        self.lock().nodes.insert(node, None);
    }

    /// Whether `node` runs as `incarnation`.
    pub fn is_current(&self, node: NodeId, incarnation: u64) -> bool {
        matches!(self.lock().nodes.get(&node), Some(Some((i, _))) if *i == incarnation)
    }

    /// Replaces the partition: messages `from -> to` are lost for every pair in `cuts`.
    pub fn set_cuts(&self, cuts: BTreeSet<(NodeId, NodeId)>) {
        self.lock().cuts = cuts;
    }

    /// Crashes of voters are asked for on `sink`.
    pub fn set_crash_sink(&self, sink: tokio::sync::mpsc::UnboundedSender<VoterCrash>) {
        self.lock().crashes = Some(sink);
    }

    /// The next node to grant a vote crashes as its answer leaves: a crash at the moment its
    /// vote must already be durable.
    pub fn crash_next_voter(&self) {
        self.lock().crash_next_voter = true;
    }

    /// The final heal: the network is whole and calm from now on, and a crash of a voter that
    /// was armed and has not happened never will.
    pub fn heal(&self) {
        let mut inner = self.lock();
        inner.healed = true;
        inner.crash_next_voter = false;
        inner.cuts.clear();
        inner.faults = NetFaults::default();
    }

    /// Whether the final heal has happened.
    pub fn healed(&self) -> bool {
        self.lock().healed
    }

    /// Called as `voter` grants `candidate` a vote.
    fn granted(&self, voter: NodeId, candidate: NodeId) {
        let mut inner = self.lock();
        if std::mem::take(&mut inner.crash_next_voter) {
            if let Some(sink) = &inner.crashes {
                let _ = sink.send(VoterCrash { voter, candidate });
            }
        }
    }

    pub fn set_faults(&self, faults: NetFaults) {
        self.lock().faults = faults;
    }

    pub fn faults(&self) -> NetFaults {
        self.lock().faults.clone()
    }

    /// Whether a message `from -> to` would pass the partition now (clients are never cut;
    /// they are `None`).
    pub fn passes(&self, from: Option<NodeId>, to: NodeId) -> bool {
        from.is_none_or(|from| !self.lock().cuts.contains(&(from, to)))
    }

    fn fate(&self) -> Fate {
        let mut inner = self.lock();
        let (lo, hi) = inner.faults.delay_us;
        let delay = Duration::from_micros(inner.rng.random_range(lo..=hi));
        let (drop, duplicate) = (inner.faults.drop, inner.faults.duplicate);
        let lost = drop > 0.0 && inner.rng.random_bool(drop);
        let copy_after = (duplicate > 0.0 && inner.rng.random_bool(duplicate))
            .then(|| Duration::from_micros(inner.rng.random_range(lo..=hi * 4)));
        Fate {
            delay,
            lost,
            copy_after,
        }
    }

    /// The running incarnation of `node`, if it runs.
    fn incarnation_of(&self, node: NodeId) -> Option<u64> {
        self.lock()
            .nodes
            .get(&node)
            .and_then(|n| n.as_ref().map(|(incarnation, _)| *incarnation))
    }

    /// Carries `items` into `tx` as one TCP connection from `from` (incarnation `from_inc`) to
    /// `to` (incarnation `to_inc`) would: in order, each after a delay drawn from the seed (a
    /// lost segment is sent again and arrives later), never copied. Once an item meets a cut or
    /// an end whose process is gone, nothing more gets through, and the connection is reset
    /// after [`STREAM_RESET_AFTER`] (or as soon as the receiving side hangs up). The sending
    /// side stops taking items when `stop`'s receiver is gone (the caller dropped the call).
    #[allow(clippy::too_many_arguments)]
    fn carry<S>(
        &self,
        from: NodeId,
        from_inc: u64,
        to: NodeId,
        to_inc: u64,
        mut items: S,
        tx: mpsc::UnboundedSender<Result<RaftMessage, Status>>,
        stop: Option<mpsc::UnboundedSender<Result<RaftMessage, Status>>>,
    ) where
        S: Stream<Item = Result<RaftMessage, Status>> + Send + Unpin + 'static,
    {
        let (wire, mut arriving) = mpsc::unbounded_channel();
        let net = self.clone();
        tokio::spawn(async move {
            let mut last = tokio::time::Instant::now();
            loop {
                let item = match &stop {
                    Some(stop) => tokio::select! {
                        item = items.next() => item,
                        () = stop.closed() => None,
                    },
                    None => items.next().await,
                };
                let Some(item) = item else { break };
                let fate = net.fate();
                let mut at = tokio::time::Instant::now() + fate.delay;
                if fate.lost {
                    at += RETRANSMIT;
                }
                last = last.max(at);
                if wire.send((last, item)).is_err() {
                    break;
                }
            }
        });
        let net = self.clone();
        tokio::spawn(async move {
            while let Some((at, item)) = arriving.recv().await {
                tokio::time::sleep_until(at).await;
                let through = net.passes(Some(from), to)
                    && net.is_current(from, from_inc)
                    && net.is_current(to, to_inc);
                if !through {
                    let _ = tokio::time::timeout(STREAM_RESET_AFTER, tx.closed()).await;
                    let _ = tx.send(Err(Status::unavailable("the connection was reset")));
                    return;
                }
                if tx.send(item).is_err() {
                    return;
                }
            }
        });
    }

    /// `to`'s host if it is up and a message from `from` gets through the partition.
    fn reach(&self, from: Option<NodeId>, to: NodeId) -> Option<Host> {
        self.arrive(from, to).ok().flatten()
    }

    /// Where a message from `from` to `to` ends: `to`'s host (`Ok(Some)`), lost in the
    /// partition (`Ok(None)`), or refused because `to`'s process is not running (`Err`: its
    /// machine answers a connection with a reset at once).
    fn arrive(&self, from: Option<NodeId>, to: NodeId) -> Result<Option<Host>, Refused> {
        let inner = self.lock();
        if from.is_some_and(|from| inner.cuts.contains(&(from, to))) {
            return Ok(None);
        }
        match inner.nodes.get(&to) {
            Some(Some((_, host))) => Ok(Some(host.clone())),
            _ => Err(Refused),
        }
    }

    /// Carries a call from `from` (a node, or a client) to `to` and its answer back, under the
    /// seed's delays, losses, copies and the partition. A message that does not arrive makes
    /// the call wait forever: the caller's deadline decides when it gives up. `deliver` runs the
    /// call at `to`; a copy runs it again, its answer dropped.
    ///
    /// Only Raft's own messages are copied (`Copies::Raft`): Raft must take any message twice.
    /// A forwarded write or a client's call rides one gRPC call over TCP, which may be cut off
    /// but never delivers a request twice; a copy there would be a double write no real network
    /// makes (a client or node that sends again is another matter: a bug of its own).
    pub async fn call<T, F, Fut>(
        &self,
        from: Option<NodeId>,
        to: NodeId,
        copies: Copies,
        deliver: F,
    ) -> T
    where
        T: Send + 'static,
        F: Fn(Host) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        match self.call_or_refused(from, to, copies, deliver).await {
            Ok(answer) => answer,
            Err(Refused) => std::future::pending().await,
        }
    }

    /// [`Net::call`], but a call to a node whose process is not running comes back `Refused`
    /// (after the way there and back) instead of never: what a client connecting afresh sees.
    pub async fn call_or_refused<T, F, Fut>(
        &self,
        from: Option<NodeId>,
        to: NodeId,
        copies: Copies,
        deliver: F,
    ) -> Result<T, Refused>
    where
        T: Send + 'static,
        F: Fn(Host) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let there = self.fate();
        tokio::time::sleep(there.delay).await;
        let target = match self.arrive(from, to) {
            Ok(Some(target)) => target,
            Ok(None) => return std::future::pending().await,
            Err(Refused) => {
                tokio::time::sleep(self.fate().delay).await;
                return Err(Refused);
            }
        };
        let deliver = Arc::new(deliver);
        let copy_after = there.copy_after.filter(|_| copies == Copies::Raft);
        if let Some(after) = copy_after {
            let (net, deliver) = (self.clone(), deliver.clone());
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                if let Some(target) = net.reach(from, to) {
                    drop(deliver(target).await);
                }
            });
        }
        if there.lost {
            return std::future::pending().await;
        }
        let answer = deliver(target).await;
        let back = self.fate();
        tokio::time::sleep(back.delay).await;
        // The answer goes back the other way: through the partition from `to` to `from`.
        let passes_back = from.is_none_or(|from| self.passes(Some(to), from));
        if back.lost || !passes_back {
            return std::future::pending().await;
        }
        Ok(answer)
    }
}

/// A call to a node whose process is not running: the connection was refused, nothing arrived.
#[derive(Debug)]
pub struct Refused;

/// openraft's network factory of one node's incarnation.
pub struct Factory {
    pub net: Net,
    pub from: NodeId,
    pub incarnation: u64,
    pub trace: crate::trace::Trace,
}

impl RaftNetworkFactory<TypeConfig> for Factory {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, _node: &NodeAddr) -> Peer {
        Peer {
            net: self.net.clone(),
            from: self.from,
            incarnation: self.incarnation,
            to: target,
            trace: self.trace.clone(),
        }
    }
}

/// One node's connection to another.
pub struct Peer {
    net: Net,
    from: NodeId,
    incarnation: u64,
    to: NodeId,
    trace: crate::trace::Trace,
}

fn unreachable(why: &str) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&io::Error::other(why.to_string())))
}

impl Peer {
    /// Sends `req` as the peer port would (encoded, decoded at the other end), runs `handle`
    /// there, and brings the answer back the same way, within `ttl`.
    async fn send<Req, Resp, F, Fut>(
        &self,
        req: &Req,
        ttl: Duration,
        handle: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize + DeserializeOwned + Send + 'static,
        Resp: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(steward::raft::types::Raft, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RaftError>> + Send + 'static,
    {
        if !self.net.is_current(self.from, self.incarnation) {
            return Err(unreachable("this node crashed"));
        }
        let data = encode(req).map_err(|e| unreachable(&e.to_string()))?;
        let handle = Arc::new(handle);
        let call = self
            .net
            .call(Some(self.from), self.to, Copies::Raft, move |host| {
                let (data, handle) = (data.clone(), handle.clone());
                async move {
                    let req: Req = decode(&data).map_err(|e| e.to_string())?;
                    let result = handle(host.raft, req).await;
                    encode(&result).map_err(|e| e.to_string())
                }
            });
        let answer = tokio::time::timeout(ttl, call)
            .await
            .map_err(|_| unreachable("timed out"))?
            .map_err(|e| unreachable(&e))?;
        let result: Result<Resp, RaftError> =
            decode(&answer).map_err(|e| unreachable(&e.to_string()))?;
        // The only remote error of these calls is Fatal: the peer's Raft stopped.
        result.map_err(|e| unreachable(&e.to_string()))
    }
}

impl Peer {
    /// An append openraft handed over that steward's transport refused to send.
    fn refused(&self, why: &str) {
        self.trace.log(
            &format!("n{}", self.from),
            format!("refuses to send n{} an append: {why}", self.to),
        );
    }

    /// Opens an append stream to the peer (a round trip, within `ttl`) and runs the session
    /// over a simulated connection each way.
    async fn open_stream<S>(
        &mut self,
        input: S,
        ttl: Duration,
    ) -> Result<AppendStream<'static>, RPCError<TypeConfig>>
    where
        S: Stream<Item = AppendEntriesRequest> + Send + Unpin + 'static,
    {
        if !self.net.is_current(self.from, self.incarnation) {
            return Err(unreachable("this node crashed"));
        }
        let net = self.net.clone();
        let to = self.to;
        let opening = self
            .net
            .call_or_refused(Some(self.from), to, Copies::Never, move |host| {
                let incarnation = net.incarnation_of(to);
                async move { incarnation.map(|i| (i, host)) }
            });
        let (to_inc, host) = match tokio::time::timeout(ttl, opening).await {
            Ok(Ok(Some(opened))) => opened,
            Ok(Ok(None)) | Ok(Err(Refused)) => return Err(unreachable("connection refused")),
            Err(_) => {
                let e = io::Error::new(io::ErrorKind::TimedOut, "opening an append stream");
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
        };
        let sent = Arc::new(SentRequests::default());
        let trace = (self.trace.clone(), self.from, to);
        let requests = append_requests(input, sent.clone(), PEER_MESSAGE_BYTES_MAX, to);
        let requests = Box::pin(requests.map(Ok));
        let (answers_tx, answers_rx) = mpsc::unbounded_channel();
        let (requests_tx, requests_rx) = mpsc::unbounded_channel();
        self.net.carry(
            self.from,
            self.incarnation,
            to,
            to_inc,
            requests,
            requests_tx,
            Some(answers_tx.clone()),
        );
        let served = serve_append_stream(&host.raft, UnboundedReceiverStream::new(requests_rx));
        self.net.carry(
            to,
            to_inc,
            self.from,
            self.incarnation,
            served,
            answers_tx,
            None,
        );
        let answers = append_answers(UnboundedReceiverStream::new(answers_rx), sent, ttl, to);
        // A refusal ends the session in a network error, the answer half's last item; shown in
        // the trace, as the real transport logs it.
        Ok(Box::pin(answers.inspect(move |answer| {
            if let Err(e) = answer {
                let e = e.to_string();
                if e.contains("no longer holds") {
                    let (trace, from, to) = &trace;
                    trace.log(
                        &format!("n{from}"),
                        format!("refuses to send n{to} an append: {e}"),
                    );
                }
            }
        })))
    }

    /// A vote asked and its answer, in the trace.
    fn log_vote(
        &self,
        what: &str,
        asked: &Vote,
        answer: &Result<VoteResponse, RPCError<TypeConfig>>,
    ) {
        let how = match answer {
            Ok(r) if r.vote_granted => {
                if what == "vote" {
                    self.net.granted(self.to, self.from);
                }
                format!("granted (n{} holds {})", self.to, r.vote)
            }
            Ok(r) => format!("refused (n{} holds {})", self.to, r.vote),
            Err(e) => format!("no answer from n{}: {e}", self.to),
        };
        self.trace
            .log(&format!("n{}", self.from), format!("{what} {asked}: {how}"));
    }
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RPCError<TypeConfig>> {
        if let Err(refused) = check_append(&rpc) {
            self.refused(&refused);
            return Err(RPCError::Network(NetworkError::new(&io::Error::other(
                refused,
            ))));
        }
        self.send(&rpc, option.hard_ttl(), |raft, req| async move {
            raft.append_entries(req).await
        })
        .await
    }

    /// As steward's peer network does: a session's requests on one append stream, answered in
    /// order; a single request (a heartbeat) as a unary call.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<AppendStream<'s>, RPCError<TypeConfig>>>
    where
        S: Stream<Item = AppendEntriesRequest> + Send + Unpin + 'static,
    {
        if input.size_hint() == (1, Some(1)) {
            return stream_append_sequential(self, input, option);
        }
        Box::pin(async move { self.open_stream(input, option.hard_ttl()).await })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RPCError<TypeConfig>> {
        let asked = rpc.vote;
        let answer = self
            .send(&rpc, option.hard_ttl(), |raft, req| async move {
                raft.vote(req).await
            })
            .await;
        self.log_vote("vote", &asked, &answer);
        answer
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RPCError<TypeConfig>> {
        let asked = rpc.vote;
        let answer = self
            .send(&rpc, option.hard_ttl(), |raft, req| async move {
                raft.pre_vote(req).await
            })
            .await;
        self.log_vote("pre-vote", &asked, &answer);
        answer
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse, RPCError<TypeConfig>> {
        self.send(&req, option.hard_ttl(), |raft, req| async move {
            raft.handle_transfer_leader(req)
                .await
                .map_err(RaftError::Fatal)
        })
        .await
    }

    /// A whole snapshot in one message: the leader's open snapshot file is handed to the
    /// follower's Raft, whose state machine copies it into its own directory before installing
    /// it, as it does with any snapshot that did not arrive as its own temporary file. The
    /// peer port's chunking is not simulated; the message can be delayed, lost or cut off
    /// like any other, never copied (it rides one stream).
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError<TypeConfig>> {
        let lost = |why: &str| {
            StreamingError::Unreachable(Unreachable::new(&io::Error::other(why.to_string())))
        };
        if !self.net.is_current(self.from, self.incarnation) {
            return Err(lost("this node crashed"));
        }
        self.trace.log(
            &format!("n{}", self.from),
            format!(
                "sends n{} its snapshot up to {:?}",
                self.to, snapshot.meta.last_log_id
            ),
        );
        let taken = Arc::new(Mutex::new(Some(snapshot)));
        let call = self
            .net
            .call(Some(self.from), self.to, Copies::Never, move |host| {
                let (taken, vote) = (taken.clone(), vote);
                async move {
                    let snapshot = taken.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let Some(snapshot) = snapshot else {
                        return std::future::pending().await;
                    };
                    host.raft
                        .install_full_snapshot(vote, snapshot)
                        .await
                        .map_err(|e| e.to_string())
                }
            });
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            answer = tokio::time::timeout(option.hard_ttl(), call) => match answer {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(e)) => Err(lost(&e)),
                Err(_) => Err(lost("timed out")),
            },
        }
    }
}
