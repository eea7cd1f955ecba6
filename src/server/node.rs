//! `Node`: what every handler shares, and the two paths into the replicated state:
//! `propose` (writes, forwarded to the leader when this node is not it) and `read_barrier`
//! (ReadIndex for linearizable reads, on the leader or through it).

use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tonic::Status;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::proto::raft_v1::ReadIndexRequest;
use crate::proto::v1::Consistency;
use crate::raft::log_store::RaftDb;
use crate::raft::network::PeerChannels;
use crate::raft::types::{
    LinearizableReadError, NodeAddr, NodeId, Raft, RaftError, ReadPolicy, ServerState,
    WatchReceiver,
};
use crate::server::errors;
use crate::server::forward::{ForwardError, ForwardReply, Forwarder};
use crate::server::read_index::{self, SharedReadIndex};
use crate::server::route;
use crate::server::time::wall::ShownClock;
use crate::server::time::ClusterClock;
use crate::server::watch::WatchHub;
use crate::state::{Command, Family, Response, State};

/// How much of the caller's deadline `propose` leaves for its answer's way back, at most: a
/// write still not taken by a leader is answered "not applied" this long before the caller
/// would give up, so the caller learns it may send it again rather than seeing its own timeout.
const ANSWER_MARGIN_MAX: Duration = Duration::from_millis(100);

/// How long a new leader waits after its term's first stamped entry before its sweeps may
/// expire anything (the `grace_ms` they carry; core's `State::sweep_may_act`). None since
/// cluster time (README "Time"): a new leader's count never runs ahead of the count that set a
/// deadline (src/server/time/model_tests.rs checks it with no grace), so waiting an election
/// timeout more would only make every end across a change of leader later than bound 2. Old
/// entries keep the grace they carry.
pub const TERM_GRACE_MS: u64 = 0;

/// The grace of sweeps under the deliberate `takeover-grace` bug (src/bugs.rs), in election
/// timeouts.
const TAKEOVER_GRACE_BUG_ELECTIONS: u64 = 2;

/// When a leader loop (the pool reaper, the operation sweeper) runs: `Node::leader_rounds`.
pub struct LeaderRounds {
    interval: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
    /// The term whose clock this node last started (`Node::term_clock_started`).
    started: tokio::sync::watch::Receiver<u64>,
}

impl LeaderRounds {
    /// Waits for the next round: `interval`, or less when this node's term clock starts: a new
    /// leader ends what is overdue at once, not up to an interval after taking over (README
    /// "Time", bound 2). False once `stop` is set.
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(self.interval) => true,
            Ok(()) = self.started.changed() => true,
            _ = self.stop.wait_for(|s| *s) => false,
        }
    }
}

/// Shared by every handler of one node.
pub struct Node {
    pub id: NodeId,
    pub config: Config,
    pub raft: Raft,
    /// The applied state; read it with `state()`, never across an await.
    state: Arc<RwLock<State>>,
    pub hub: Arc<WatchHub>,
    pub channels: PeerChannels,
    /// Cluster time as this node sees it, and the count it stamps proposals with while it
    /// leads (server/time.rs).
    pub time: Arc<ClusterClock>,
    /// The nodes' wall clocks as this node reads them, and the shown time it stamps while it
    /// leads (server/time/wall.rs); display only.
    pub shown: ShownClock,
    /// This node's Prometheus metrics (src/metrics.rs).
    pub metrics: Arc<Metrics>,
    /// Serialises membership changes on this node: a second one is refused, not queued.
    pub membership_lock: tokio::sync::Mutex<()>,
    /// Bounds proposals in flight through this node (limits.pending_proposals_max).
    pending: Semaphore,
    /// Batches the commands this node forwards to the leader.
    forwarder: Forwarder,
    /// Shares this node's ReadIndex calls to the leader among its linearizable reads.
    read_index: SharedReadIndex,
    /// The node's database (for compaction, `space::compact`); its metrics are `metrics`.
    pub db: RaftDb,
    /// Held while a compaction runs on this node: a second one is refused.
    pub compaction: tokio::sync::Mutex<()>,
    /// The space check's last reading of the disk, served by status answers.
    pub usage: crate::server::space::UsageCache,
    /// The last term whose clock started while this node led it (its first stamped entry was
    /// applied): the leader loops sweep at once when it changes, not up to an interval later.
    term_clock: tokio::sync::watch::Sender<u64>,
}

impl Node {
    pub fn new(
        config: Config,
        raft: Raft,
        state: Arc<RwLock<State>>,
        hub: Arc<WatchHub>,
        channels: PeerChannels,
        time: Arc<ClusterClock>,
        db: RaftDb,
    ) -> Node {
        let shown = ShownClock::new(
            time.clock_handle(),
            config.time.clock_offset_ms_max,
            config.time.clock_probe_interval_ms,
            config.time.shown_slew_ms_per_s,
        );
        let read_index = SharedReadIndex::new(
            leader_read_index(
                raft.clone(),
                config.id,
                channels.clone(),
                Duration::from_millis(config.raft.rpc_timeout_ms),
                leader_wait(&config),
            ),
            db.metrics.read_index.clone(),
        );
        Node {
            id: config.id,
            shown,
            read_index,
            pending: Semaphore::new(config.limits.pending_proposals_max),
            forwarder: Forwarder::new(
                channels.clone(),
                Duration::from_millis(config.raft.rpc_timeout_ms * 5),
            ),
            config,
            raft,
            state,
            hub,
            channels,
            time,
            metrics: db.metrics.clone(),
            membership_lock: tokio::sync::Mutex::new(()),
            db,
            compaction: tokio::sync::Mutex::new(()),
            usage: Default::default(),
            term_clock: tokio::sync::watch::Sender::new(0),
        }
    }

    /// This node leads a term whose clock has started (`State::term_started_ms`): wakes the
    /// leader loops the first time it is told of that term.
    pub fn term_clock_started(&self) {
        if let Some((_, term)) = self.leader_now() {
            self.term_clock
                .send_if_modified(|t| std::mem::replace(t, term) != term);
        }
    }

    /// The grace this node's sweeps carry: `TERM_GRACE_MS`, or under the deliberate
    /// `takeover-grace` bug two election timeouts, as a design that distrusted a new leader's
    /// count might wait (jepsen ttl: late releases).
    pub fn term_grace_ms(&self) -> u64 {
        if crate::bugs::active(crate::bugs::Bug::TakeoverGrace) {
            TAKEOVER_GRACE_BUG_ELECTIONS * self.config.raft.election_timeout_ms_max
        } else {
            TERM_GRACE_MS
        }
    }

    /// The rounds of a leader loop: every `interval`, and at once when this node's term clock
    /// starts, until `stop` is set.
    pub fn leader_rounds(
        &self,
        interval: Duration,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> LeaderRounds {
        LeaderRounds {
            interval,
            stop,
            started: self.term_clock.subscribe(),
        }
    }

    /// The applied state, for reading. Do not hold the guard across an await.
    pub fn state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The applied state itself, for what keeps a handle beside the node (a watch session's
    /// host); read it as `state()` does, never across an await.
    pub fn shared_state(&self) -> &Arc<RwLock<State>> {
        &self.state
    }

    /// What a leader-only sweeper should sweep now: `due(state, now)` at the cluster time this
    /// leader stamps with, or `None` when this node does not lead (or has no time yet), or when
    /// apply would refuse any sweep as falling in the grace of `grace_ms` after a change of
    /// leader (`State::sweep_may_act`).
    pub fn sweep_due<T>(&self, grace_ms: u64, due: impl FnOnce(&State, u64) -> T) -> Option<T> {
        let (now, _term) = self.leader_now()?;
        let state = self.state();
        state.sweep_may_act(now, grace_ms).then(|| due(&state, now))
    }

    /// How long to wait for a leader to appear before answering Unavailable.
    fn leader_wait(&self) -> Duration {
        leader_wait(&self.config)
    }

    /// The current leader and its addresses, waiting for one up to a few election timeouts or
    /// until shortly before the caller's deadline, whichever comes first.
    pub async fn leader(&self) -> Result<(NodeId, NodeAddr), Status> {
        let wait = crate::server::deadline::budget(self.leader_wait(), ANSWER_MARGIN_MAX);
        self.leader_until(tokio::time::Instant::now() + wait).await
    }

    /// The current leader and its addresses, waiting for one until `deadline`.
    async fn leader_until(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<(NodeId, NodeAddr), Status> {
        route::leader_until(&self.raft, self.id, deadline).await
    }

    /// The cluster time this node stamps proposals with, and the term it is measured in:
    /// `None` unless it leads and has applied an entry of its term (server/time.rs).
    pub fn leader_now(&self) -> Option<(u64, u64)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        self.time.leader_stamp(&metrics)
    }

    /// Cluster time now as well as this node can tell: the leader's count while it leads,
    /// else what apply last reached plus the time since. For decisions apply checks again
    /// (dispatch plans) and for metrics.
    pub fn cluster_now(&self) -> u64 {
        self.leader_now()
            .map(|(now, _)| now)
            .or_else(|| self.time.estimate())
            .unwrap_or_else(|| self.state().time_ms())
    }

    pub fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        m.state == ServerState::Leader
    }

    /// Replicates a command of one family (`LockCommand`, `ObjectCommand`, ...) and returns that
    /// family's reply. A rejection comes back as its status, from the one error table, so no
    /// caller matches `Rejected` itself; a reply of another family is a bug, an internal error.
    pub async fn propose<C: Family>(&self, command: C) -> Result<C::Reply, Status> {
        reply::<C>(self.propose_command(command.into()).await?)
    }

    /// Replicates `command` and returns the state machine's response. Any node may call it: a
    /// follower forwards the command to the leader, which stamps the time and proposes it.
    ///
    /// A client call's command carries the auth revision it was authorized at
    /// (`auth::AUTH_REVISION`, set by the auth layer), so apply refuses it if users or roles
    /// changed in between.
    #[tracing::instrument(level = "debug", skip_all, fields(node = self.id))]
    pub async fn propose_command(&self, command: Command) -> Result<Response, Status> {
        let command = match crate::server::auth::current_revision() {
            Some(auth_revision) => Command::Guarded {
                auth_revision,
                command: Box::new(command),
            },
            None => command,
        };
        let _permit = self.admit(&command)?;
        // Held across elections, never sent again once a leader may have it (route.rs).
        let until = tokio::time::Instant::now()
            + crate::server::deadline::budget(self.leader_wait(), ANSWER_MARGIN_MAX);
        route::route(self, command, until).await
    }

    /// The admission every proposal passes: on the node a client reached, and again on the
    /// leader, which admits forwarded commands with this same function (peer.rs,
    /// `forward_batch`), so a leader's bounds hold whichever node a write came through.
    /// Refused, in this order: a command that may grow the state while a NOSPACE alarm is raised
    /// (apply would refuse it; not appending it keeps refused writes out of the log), a command
    /// whose JSON exceeds `limits.command_bytes_max` (peer message sizes rely on it,
    /// `raft::message_size`), and one more proposal than `limits.pending_proposals_max`. Every
    /// refusal is marked not applied. The permit is held until the proposal is answered.
    pub fn admit(&self, command: &Command) -> Result<SemaphorePermit<'_>, Status> {
        if let Err(rejection) = self.state().ensure_space_for(command) {
            self.metrics.space_refusals.inc();
            return Err(errors::not_applied(errors::rejection(&rejection)));
        }
        let limits = &self.config.limits;
        let command_bytes = crate::state::objects::validate::json_len(command);
        if command_bytes > limits.command_bytes_max {
            return Err(errors::not_applied(errors::limit_with_code(
                tonic::Code::InvalidArgument,
                "limits.command_bytes_max",
                format!(
                    "the command is {command_bytes} bytes as JSON, over limits.command_bytes_max = {}",
                    limits.command_bytes_max
                ),
            )));
        }
        self.pending.try_acquire().map_err(|_| {
            errors::not_applied(errors::overloaded(
                "limits.pending_proposals_max",
                format!(
                    "too many proposals in flight on node {} (limits.pending_proposals_max = {})",
                    self.id, limits.pending_proposals_max
                ),
            ))
        })
    }

    /// Proposes on this node, which believes it is the leader. The time stamp comes from here:
    /// the leader's cluster time and the term it is measured in (`stamp`).
    pub async fn propose_local(&self, command: Command) -> Result<Response, LocalProposeError> {
        let wait = Duration::from_millis(self.config.raft.election_timeout_ms_max);
        let wall_ms = || Some(self.shown.now());
        route::propose_here(&self.raft, &self.time, self.id, wait, wall_ms, command).await
    }

    /// Makes the next local read linearizable (ReadIndex), unless a serializable read was asked.
    ///
    /// A linearizable read also had to be authorized against users and roles at least as new
    /// as its read index: a call authorized (`auth::AUTH_REVISION`) before a change this node
    /// applied while it waited is refused, marked not applied, and the client sends it again.
    pub async fn read_barrier(&self, consistency: Consistency) -> Result<(), Status> {
        if consistency == Consistency::Serializable
            || crate::bugs::active(crate::bugs::Bug::LocalReads)
        {
            return Ok(());
        }
        self.linearize().await?;
        match crate::server::auth::current_revision() {
            Some(authorized_at) => {
                let now = self.state().auth().revision;
                if now == authorized_at {
                    Ok(())
                } else {
                    Err(errors::rejection(&crate::state::Rejection::AuthChanged {
                        authorized_at,
                        now,
                    }))
                }
            }
            None => Ok(()),
        }
    }

    /// ReadIndex: returns once this node has applied everything committed before the call.
    ///
    /// A leader that could not hear a quorum confirm it (followers slow to answer a heartbeat:
    /// a stalled disk, a loaded machine) asks again, for as long as the caller waits: the read
    /// has not been served, so asking again changes nothing, and the client sees the stall as
    /// latency; a leader that really lost its quorum is still refused once the wait is over.
    async fn linearize(&self) -> Result<(), Status> {
        let until = tokio::time::Instant::now()
            + crate::server::deadline::budget(self.leader_wait(), ANSWER_MARGIN_MAX);
        let mut pause = route::RESEND_PAUSE_MIN;
        loop {
            match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
                Ok(linearizer) => {
                    let timeout = Some(self.leader_wait());
                    return match linearizer.try_await_ready(&self.raft, timeout).await {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(_)) => Err(errors::read_index_not_applied()),
                        Err(f) => Err(errors::read_raft_stopped(&f)),
                    };
                }
                Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(_))) => {
                    return self.remote_read_barrier().await
                }
                Err(e @ RaftError::APIError(LinearizableReadError::QuorumNotEnough(_)))
                    if tokio::time::Instant::now() + pause < until =>
                {
                    tracing::debug!(error = %e, "leadership not confirmed; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(route::RESEND_PAUSE_MAX);
                }
                Err(e) => return Err(errors::read_linearizer(&e)),
            }
        }
    }

    /// Follower side of ReadIndex: the leader confirms its leadership and names an index (in a
    /// call this read shares with the others that arrived before it was sent,
    /// server/read_index.rs); once this node has applied up to it, local reads are
    /// linearizable.
    async fn remote_read_barrier(&self) -> Result<(), Status> {
        let budget = crate::server::deadline::budget(self.leader_wait(), ANSWER_MARGIN_MAX);
        let index = self.read_index.read_index(budget).await?;
        self.raft
            .wait(Some(self.leader_wait()))
            .applied_index_at_least(Some(index), "read index")
            .await
            .map_err(|e| errors::read_index_catch_up(&e))?;
        Ok(())
    }
}

/// How long a call waits for a leader to be known, or for this node to catch up with it: a few
/// election timeouts, at least 5 s.
fn leader_wait(config: &Config) -> Duration {
    Duration::from_millis((config.raft.election_timeout_ms_max * 5 / 2).max(5_000))
}

/// One ReadIndex call to the leader as a follower makes it: find the leader (waiting up to
/// `leader_wait` for one), then ask it, within `rpc_timeout`, to confirm its leadership and
/// name its commit index.
fn leader_read_index(
    raft: Raft,
    id: NodeId,
    channels: PeerChannels,
    rpc_timeout: Duration,
    leader_wait: Duration,
) -> read_index::Fetch {
    Arc::new(move || {
        let (raft, channels) = (raft.clone(), channels.clone());
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + leader_wait;
            let (leader_id, leader) = route::leader_until(&raft, id, deadline).await?;
            if leader_id == id {
                return Err(errors::no_leader());
            }
            let mut client = channels
                .peer(&leader.peer_addr)
                .map_err(|e| errors::read_leader_unreachable(e, &leader))?;
            let mut req = tonic::Request::new(ReadIndexRequest {});
            req.set_timeout(rpc_timeout);
            let reply = client
                .read_index(req)
                .await
                .map_err(|s| errors::read_index_from_leader(&s, &leader))?;
            Ok(reply.into_inner().read_index)
        })
    })
}

/// Proposes a cancel command when dropped still armed: a waiting call (a lock acquire, a pool
/// acquire) that ends without its grant, because its deadline passed or its caller went away and
/// the handler future was dropped. The leader's sweeper removes what a failed cancel leaves.
pub struct CancelOnDrop {
    node: Arc<Node>,
    command: Option<Command>,
    what: &'static str,
}

impl CancelOnDrop {
    pub fn new(node: Arc<Node>, command: impl Into<Command>, what: &'static str) -> CancelOnDrop {
        CancelOnDrop {
            node,
            command: Some(command.into()),
            what,
        }
    }

    /// The command, no longer proposed on drop.
    pub fn disarm(&mut self) -> Option<Command> {
        self.command.take()
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(command) = self.command.take() {
            let node = self.node.clone();
            let what = self.what;
            tokio::spawn(async move {
                if let Err(e) = node.propose_command(command).await {
                    tracing::warn!(error = %e, what, "could not cancel an abandoned wait; the sweeper removes it at its deadline");
                }
            });
        }
    }
}

/// A node routes its writes over gRPC: forwarded in batches (`forward::Forwarder`), counted.
impl route::Route for Node {
    fn id(&self) -> NodeId {
        self.id
    }

    fn raft(&self) -> &Raft {
        &self.raft
    }

    fn propose_local(
        &self,
        command: Command,
    ) -> impl std::future::Future<Output = Result<Response, LocalProposeError>> + Send {
        Node::propose_local(self, command)
    }

    fn forward(
        &self,
        leader: &NodeAddr,
        command: &Command,
    ) -> impl std::future::Future<Output = Result<ForwardReply, ForwardError>> + Send {
        self.forwarder.forward(leader, command)
    }

    fn resent(&self) {
        self.metrics.proposals_resent.inc();
    }

    fn unsent(&self) {
        self.metrics.proposals_unsent.inc();
    }
}

/// Why a local proposal failed: lost leadership (retry elsewhere) or anything else.
pub enum LocalProposeError {
    NotLeader(Status),
    Other(Status),
}

/// The reply of family `C` in `response`: a rejection becomes its status (the error table), a
/// reply of another family an internal error (apply answers each family with its own reply).
pub fn reply<C: Family>(response: Response) -> Result<C::Reply, Status> {
    match response {
        Response::Rejected(rejection) => Err(errors::rejection(&rejection)),
        response => C::reply(response).map_err(|other| {
            errors::internal(
                std::any::type_name::<C>(),
                format!("answered with another family's reply: {other:?}"),
            )
        }),
    }
}
