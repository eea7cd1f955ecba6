//! The simulated cluster: steward nodes (the real openraft, log store and state machine over a
//! simulated disk and network) that crash and start again, and the way clients reach them.
//!
//! A client calls one node. The node serves it as steward's `Node` does: a write goes through
//! steward's own `server::route` (proposed on the leader, forwarded there, one more hop through
//! the network, when this node is not it; held across an election; never sent again once a
//! leader may have it); a linearizable read takes a read index from the leader (ReadIndex),
//! waits until this node has applied it, and reads here. Answers come back through the network
//! too, so they can be lost, and an answer from an incarnation that has crashed since is never
//! delivered.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use steward::client::not_applied;
use steward::config::{LocksConfig, OperationsConfig};
use steward::raft::log_store::{LogStore, RaftDb};
use steward::raft::network::{decode, encode};
use steward::raft::state_machine::StateMachine;
use steward::raft::types::{
    raft_settings, LogId, NodeAddr, NodeId, Raft, RaftError, RaftMetrics, ReadPolicy, ServerState,
    WatchReceiver,
};
use steward::server::errors::{self, outcome_unknown};
use steward::server::etcd::watch::WatchHost;
use steward::server::forward::{ForwardError, ForwardReply};
use steward::server::locks::sweeper::sweep_round;
use steward::server::node::LocalProposeError;
use steward::server::operations::op_limits;
use steward::server::operations::scheduler::lock_limits_of;
use steward::server::read_index::{self, SharedReadIndex};
use steward::server::route;
use steward::server::time::{ClusterClock, Observers};
use steward::server::watch::WatchHub;
use steward::state::kv::lease::LEASE_SWEEP_MAX;
use steward::state::kv::KvCommand;
use steward::state::{Command, OperationCommand, Response, State};

use crate::clock::{SimClock, DRIFT_MAX};
use crate::disk::{Disk, DiskFaults};
use crate::net::{Copies, Factory, Net, Refused};
use crate::trace::Trace;

/// What a message or a client's call reaches on a running node.
#[derive(Clone)]
pub struct Host {
    pub raft: Raft,
    /// Its cluster clock (steward's, over this node's [`SimClock`]).
    pub time: Arc<ClusterClock>,
}

/// How often a leader's lock sweeper runs, and after how long a quiet log gets a checkpoint:
/// a node's defaults (`locks.sweep_interval_ms`, `time.checkpoint_interval_ms`) scaled down
/// with its election timeouts.
const SWEEP_EVERY: Duration = Duration::from_millis(50);
const CHECKPOINT_MS: u64 = 250;
/// Log entries a node keeps behind its snapshot (`raft.log_behind_snapshot_max`, scaled down):
/// few, so a follower that fell behind is sent a snapshot.
const SNAPSHOT_LOG_KEPT: u64 = 20;
/// The most assignments one scheduler round proposes (`operations.schedule_batch_max`).
const SCHEDULE_MAX: usize = 16;
/// The lock-delay sweeps carry: none, so a lock lost early is granted to another at once.
const LOCK_DELAY_MS: u64 = 0;
/// The longest a new leader waits to apply an entry of its term before a write is refused
/// for want of a time stamp (a node waits an election timeout).
const STAMP_WAIT: Duration = Duration::from_millis(600);
/// How long a follower waits for the leader's answer to a forwarded write: a node's
/// `raft.rpc_timeout_ms * 5`, with the simulated cluster's 300 ms RPC timeout scaled down, so
/// that a lost answer leaves time before the client's deadline to show what the node does next.
const FORWARD_TIMEOUT: Duration = Duration::from_millis(400);

/// Items a node's watch stream queues before its watches are detached to catch up from the
/// store (`limits.watch_buffer`; also the most a catch-up replays at once): few, so a watch
/// client that reads slowly falls behind and catches up.
const WATCH_BUFFER: usize = 8;

/// A running node.
struct Live {
    incarnation: u64,
    host: Host,
    /// Its watch hub, fed by its state machine.
    hub: Arc<WatchHub>,
    state: Arc<RwLock<State>>,
    /// The log ids its WAL holds (the checker compares what it applied).
    ids: Arc<Mutex<BTreeMap<u64, (LogId, u64)>>>,
    /// Its ReadIndex calls to the leader, shared by its reads as `server::Node` shares them.
    read_index: Arc<SharedReadIndex>,
}

/// What a node sees of itself, for the checker.
pub struct View {
    pub node: NodeId,
    pub incarnation: u64,
    pub metrics: RaftMetrics,
    pub revision: u64,
    pub ids: Arc<Mutex<BTreeMap<u64, (LogId, u64)>>>,
    pub state: Arc<RwLock<State>>,
}

/// How a client call ended.
#[derive(Debug)]
pub enum Answer<T> {
    Ok(T),
    /// Refused with an answer that proves it did not take effect.
    Fail(String),
    /// It may or may not have taken effect.
    Unknown(String),
}

pub struct Cluster {
    pub ids: Vec<NodeId>,
    pub net: Net,
    pub trace: Trace,
    disks: BTreeMap<NodeId, Disk>,
    /// Each machine's clocks, kept across its crashes.
    clocks: BTreeMap<NodeId, Arc<SimClock>>,
    live: Mutex<BTreeMap<NodeId, Live>>,
    /// Nodes being started (a second start of one waits for nothing and does nothing).
    starting: Mutex<std::collections::BTreeSet<NodeId>>,
    /// Nodes whose machine was replaced: they start next from an empty disk and directory.
    replaced: Mutex<std::collections::BTreeSet<NodeId>>,
    settings: Arc<openraft::Config>,
    /// Where each node's snapshot file is (on the real file system: it is written whole and
    /// renamed into place, and survives a crash).
    dirs: BTreeMap<NodeId, PathBuf>,
    _tmp: tempfile::TempDir,
    /// How long a node waits for a leader, or a client for an answer.
    pub timeout: Duration,
}

fn addr(id: NodeId) -> NodeAddr {
    NodeAddr {
        peer_addr: format!("n{id}:peer"),
        client_addr: format!("n{id}:client"),
    }
}

fn name(id: NodeId) -> String {
    format!("n{id}")
}

impl Cluster {
    /// `nodes` nodes, none started yet.
    pub fn new(
        nodes: u64,
        seed: u64,
        net: Net,
        disk_faults: DiskFaults,
        trace: Trace,
        leader_restore: bool,
        snapshot_every: Option<u64>,
    ) -> anyhow::Result<Cluster> {
        let ids: Vec<NodeId> = (1..=nodes).collect();
        let tmp = tempfile::tempdir()?;
        let mut disks = BTreeMap::new();
        let mut dirs = BTreeMap::new();
        let mut clocks = BTreeMap::new();
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xc10c_0000);
        for &id in &ids {
            let origin_ms = rng.random_range(0..1_000_000_000);
            let drift = rng.random_range(-DRIFT_MAX..=DRIFT_MAX);
            clocks.insert(id, Arc::new(SimClock::new(origin_ms, drift)));
            let seed = seed ^ (0xd15c_0000 + id);
            disks.insert(id, Disk::new(id, seed, disk_faults.clone(), trace.clone()));
            let dir = tmp.path().join(name(id));
            std::fs::create_dir_all(&dir)?;
            dirs.insert(id, dir);
        }
        // Elections and heartbeats an order of magnitude faster than a node's defaults, so a
        // few simulated seconds hold many of them; the same translation into openraft's.
        let raft = steward::config::RaftConfig {
            heartbeat_interval_ms: 50,
            election_timeout_ms_min: 400,
            election_timeout_ms_max: 600,
            rpc_timeout_ms: 300,
            ..Default::default()
        };
        let raft = steward::config::RaftConfig {
            snapshot_logs_since_last: snapshot_every.unwrap_or(u64::MAX),
            log_behind_snapshot_max: SNAPSHOT_LOG_KEPT,
            ..raft
        };
        let mut settings = raft_settings(&raft)?;
        if snapshot_every.is_none() {
            settings.snapshot_policy = openraft::SnapshotPolicy::Never;
        }
        if leader_restore {
            settings.enable_leader_restore = Some(true);
        }
        Ok(Cluster {
            ids,
            net,
            trace,
            disks,
            clocks,
            live: Mutex::new(BTreeMap::new()),
            starting: Mutex::new(Default::default()),
            replaced: Mutex::new(Default::default()),
            settings: Arc::new(settings),
            dirs,
            _tmp: tmp,
            timeout: Duration::from_millis(1_000),
        })
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Live>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts node `id` from what its disk holds.
    pub async fn start(&self, id: NodeId) -> anyhow::Result<()> {
        if self.live().contains_key(&id) {
            return Ok(());
        }
        if !self
            .starting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id)
        {
            return Ok(());
        }
        let started = self.start_now(id).await;
        self.starting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        started
    }

    async fn start_now(&self, id: NodeId) -> anyhow::Result<()> {
        if self
            .replaced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        {
            // Emptied as it starts, not as it crashed: the crashed incarnation's tasks may
            // still have finished a snapshot file meanwhile.
            self.disks[&id].wipe();
            let dir = &self.dirs[&id];
            std::fs::remove_dir_all(dir)?;
            std::fs::create_dir_all(dir)?;
        }
        let wal = self.disks[&id].open();
        let ids = wal.ids();
        let incarnation = wal.incarnation();
        let db = RaftDb::open_in_memory(&self.dirs[&id])?;
        let clock: Arc<dyn steward::server::time::Clock> = self.clocks[&id].clone();
        let time = Arc::new(ClusterClock::new(clock));
        let limits = steward::config::Limits {
            watch_buffer: WATCH_BUFFER,
            ..Default::default()
        };
        let hub = Arc::new(WatchHub::new(&limits));
        let observers = Arc::new(Observers {
            hub: hub.clone(),
            time: time.clone(),
        });
        let sm = StateMachine::open(db.clone(), observers.clone())?;
        let state = sm.state();
        // What the node starts with anchors its watches and its count, as `server::run` does.
        steward::server::starts_from(
            &state.read().unwrap_or_else(|p| p.into_inner()),
            &hub,
            &time,
        );
        let log = LogStore::with_wal(db, Box::new(wal)).observed_by(observers);
        let network = Factory {
            net: self.net.clone(),
            from: id,
            incarnation,
            trace: self.trace.clone(),
        };
        let raft = Raft::new(id, self.settings.clone(), network, log, sm).await?;
        let host = Host { raft, time };
        self.net.up(id, incarnation, host.clone());
        let read_index = Arc::new(SharedReadIndex::new(
            leader_read_index(self.net.clone(), id, host.raft.clone(), self.timeout),
            Default::default(),
        ));
        tokio::spawn(sweeper(
            self.net.clone(),
            id,
            incarnation,
            host.clone(),
            state.clone(),
        ));
        self.live().insert(
            id,
            Live {
                incarnation,
                host,
                hub,
                state,
                ids,
                read_index,
            },
        );
        self.trace
            .log(&name(id), format!("started (incarnation {incarnation})"));
        Ok(())
    }

    /// Makes every node a member: once, on node 1, at the start.
    pub async fn initialize(&self) -> anyhow::Result<()> {
        let raft = self
            .raft(1)
            .ok_or_else(|| anyhow::anyhow!("node 1 is down"))?;
        let members: BTreeMap<NodeId, NodeAddr> =
            self.ids.iter().map(|&id| (id, addr(id))).collect();
        raft.initialize(members).await?;
        Ok(())
    }

    /// Node `id` loses power: it stops at once, and its disk keeps what the seed says.
    pub fn crash(&self, id: NodeId) {
        let Some(live) = self.live().remove(&id) else {
            return;
        };
        self.net.down(id);
        let lost = self.disks[&id].crash();
        self.trace
            .log(&name(id), format!("crashed ({lost} unsynced records lost)"));
        // Its tasks wind down; nothing they do reaches the network or the disk any more.
        tokio::spawn(async move {
            let _ = live.host.raft.shutdown().await;
        });
    }

    /// Node `id`'s machine is replaced by an empty one under the same id: it stops, and starts
    /// next with nothing on its disk. Only for a node out of the membership: a voter that forgot
    /// its vote and its log could help elect two leaders of one term. (steward's own member
    /// commands retire a removed id for good; the simulator reuses it to keep its set of nodes.)
    pub fn replace_machine(&self, id: NodeId) {
        self.crash(id);
        self.replaced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        self.trace
            .log(&name(id), "its machine is replaced by an empty one");
    }

    /// The node that leads in the greatest term among those that think they lead, and its Raft.
    pub fn leader(&self) -> Option<(NodeId, Raft)> {
        self.live()
            .iter()
            .filter_map(|(&id, l)| {
                let m = l.host.raft.metrics().borrow_watched().clone();
                (m.state == ServerState::Leader).then(|| (m.current_term, id, l.host.raft.clone()))
            })
            .max_by_key(|(term, id, _)| (*term, *id))
            .map(|(_, id, raft)| (id, raft))
    }

    /// The address a node is added to the membership with.
    pub fn addr(&self, id: NodeId) -> NodeAddr {
        addr(id)
    }

    pub fn is_up(&self, id: NodeId) -> bool {
        self.live().contains_key(&id)
    }

    pub fn disk(&self, id: NodeId) -> &Disk {
        &self.disks[&id]
    }

    /// Node `id`'s machine clocks.
    pub fn clock(&self, id: NodeId) -> &SimClock {
        &self.clocks[&id]
    }

    fn raft(&self, id: NodeId) -> Option<Raft> {
        self.live().get(&id).map(|l| l.host.raft.clone())
    }

    /// What each running node sees now.
    pub fn views(&self) -> Vec<View> {
        self.live()
            .iter()
            .map(|(&node, live)| {
                let metrics = live.host.raft.metrics().borrow_watched().clone();
                let revision = live
                    .state
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .revision();
                View {
                    node,
                    incarnation: live.incarnation,
                    metrics,
                    revision,
                    ids: live.ids.clone(),
                    state: live.state.clone(),
                }
            })
            .collect()
    }

    /// A client's write through node `via`, routed as steward's `Node` routes it
    /// (`server::route`): proposed here on the leader, forwarded to it (one more hop, whose
    /// answer can be lost) from a follower, held across an election and sent to the next
    /// leader while no leader took it, never sent again once one may have.
    pub async fn write(&self, via: NodeId, command: Command) -> Answer<Response> {
        let Some((incarnation, host)) = self.reach(via) else {
            return Answer::Fail(format!("n{via} is down"));
        };
        let node = SimRoute {
            id: via,
            ids: self.ids.clone(),
            host,
            net: self.net.clone(),
            trace: self.trace.clone(),
        };
        // The node works for the client until shortly before the client gives up, as a node
        // does within a call's deadline (`server::deadline::budget`).
        let until = tokio::time::Instant::now() + self.timeout - self.timeout / 10;
        let work = async move {
            match route::route(&node, command, until).await {
                Ok(response) => Answer::Ok(response),
                Err(status) if not_applied(&status) => Answer::Fail(status.message().into()),
                Err(status) => Answer::Unknown(status.message().into()),
            }
        };
        self.answer(via, incarnation, work).await
    }

    /// A client's linearizable read through node `via`: `read` runs on its state once it has
    /// applied the leader's read index.
    pub async fn read<T: Send + 'static>(
        &self,
        via: NodeId,
        read: impl Fn(&State) -> T + Send + Sync + 'static,
    ) -> Answer<T> {
        let Some((incarnation, host)) = self.reach(via) else {
            return Answer::Fail(format!("n{via} is down"));
        };
        let raft = host.raft;
        let Some((state, shared)) = self
            .live()
            .get(&via)
            .map(|l| (l.state.clone(), l.read_index.clone()))
        else {
            return Answer::Fail(format!("n{via} is down"));
        };
        let timeout = self.timeout;
        let work = async move {
            if !steward::bugs::active(steward::bugs::Bug::LocalReads) {
                if let Err(e) = read_barrier(&raft, &shared, timeout).await {
                    return e;
                }
            }
            let state = state.read().unwrap_or_else(|p| p.into_inner());
            Answer::Ok(read(&state))
        };
        self.answer(via, incarnation, work).await
    }

    /// Node `id`'s applied state, if it runs: what a stream served from that node reads.
    pub fn state_of(&self, id: NodeId) -> Option<Arc<RwLock<State>>> {
        self.live().get(&id).map(|l| l.state.clone())
    }

    /// What a watch stream opened on `via` runs on (the real etcd Watch session runs over
    /// it), with the incarnation it belongs to: none if `via` is down.
    pub fn watch_host(&self, via: NodeId) -> Option<(u64, WatchHost)> {
        self.live().get(&via).map(|l| {
            let host = WatchHost {
                id: via,
                raft: l.host.raft.clone(),
                hub: l.hub.clone(),
                state: l.state.clone(),
            };
            (l.incarnation, host)
        })
    }

    /// The running incarnation of `via` and its Raft, if a client's request reaches it.
    fn reach(&self, via: NodeId) -> Option<(u64, Host)> {
        self.live()
            .get(&via)
            .map(|l| (l.incarnation, l.host.clone()))
    }

    /// Runs `work` as node `via` would for a client, within the client's timeout, with the
    /// client's hops through the network: the request can be lost (the client times out), and
    /// so can the answer. An answer from an incarnation that has crashed is never sent.
    async fn answer<T: Send + 'static>(
        &self,
        via: NodeId,
        incarnation: u64,
        work: impl std::future::Future<Output = Answer<T>> + Send + 'static,
    ) -> Answer<T> {
        let work = Arc::new(Mutex::new(Some(work)));
        let net = self.net.clone();
        let call = self.net.call(None, via, Copies::Never, move |_raft| {
            let (work, net) = (work.clone(), net.clone());
            async move {
                // A copy of the request finds the work taken: it is answered nothing.
                let taken = work.lock().unwrap_or_else(|p| p.into_inner()).take();
                let Some(work) = taken else {
                    return std::future::pending().await;
                };
                let answer = work.await;
                if !net.is_current(via, incarnation) {
                    return std::future::pending().await;
                }
                answer
            }
        });
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => answer,
            Err(_) => Answer::Unknown("client timed out".into()),
        }
    }

    /// Stops every node's Raft (the end of a run).
    pub async fn shutdown(&self) {
        let rafts: Vec<Raft> = self.live().values().map(|l| l.host.raft.clone()).collect();
        for raft in rafts {
            let _ = raft.shutdown().await;
        }
    }

    /// The current leader as node `id` sees it.
    pub fn leader_seen_by(&self, id: NodeId) -> Option<NodeId> {
        self.raft(id)
            .and_then(|r| r.metrics().borrow_watched().current_leader)
    }

    /// Whether `id` is up and leads.
    pub fn leads(&self, id: NodeId) -> bool {
        self.raft(id)
            .is_some_and(|r| r.metrics().borrow_watched().state == ServerState::Leader)
    }
}

/// How node `id` proposes and forwards a client's write (`server::route::Route`).
struct SimRoute {
    id: NodeId,
    /// Every member, to find the node a leader's address names.
    ids: Vec<NodeId>,
    host: Host,
    net: Net,
    trace: Trace,
}

/// Proposes `command` on `host` (node `id`), which believes it leads: steward's own
/// `route::propose_here`, stamped with the node's cluster time. No shown wall time: it is for
/// display only.
async fn propose(id: NodeId, host: &Host, command: Command) -> Result<Response, LocalProposeError> {
    route::propose_here(&host.raft, &host.time, id, STAMP_WAIT, || None, command).await
}

impl route::Route for SimRoute {
    fn id(&self) -> NodeId {
        self.id
    }

    fn raft(&self) -> &Raft {
        &self.host.raft
    }

    fn propose_local(
        &self,
        command: Command,
    ) -> impl std::future::Future<Output = Result<Response, LocalProposeError>> + Send {
        propose(self.id, &self.host, command)
    }

    /// The forward as the peer port carries it (`server::forward`): the command encoded, the
    /// leader's proposal answered as a `ForwardReply`, within the forward's timeout. A leader
    /// whose process is not running refuses the connection: not sent. Any other silence leaves
    /// the outcome unknown.
    fn forward(
        &self,
        leader: &NodeAddr,
        command: &Command,
    ) -> impl std::future::Future<Output = Result<ForwardReply, ForwardError>> + Send {
        let (net, from, trace) = (self.net.clone(), self.id, self.trace.clone());
        let to = node_of(&self.ids, leader);
        let leader = leader.clone();
        let data = encode(command);
        async move {
            let data =
                data.map_err(|e| ForwardError::Refused(not_sent(&e.to_string(), &leader)))?;
            let Some(to) = to else {
                return Err(ForwardError::Refused(not_sent("no such node", &leader)));
            };
            trace.log(&name(from), format!("forwards a write to n{to}"));
            let call = net.call_or_refused(Some(from), to, Copies::Never, move |host| {
                let data = data.clone();
                async move {
                    let reply = match decode::<Command>(&data) {
                        Ok(command) => ForwardReply::answer(propose(to, &host, command).await),
                        Err(e) => ForwardReply::Failed {
                            code: tonic::Code::InvalidArgument as i32,
                            message: e.to_string(),
                            leader: None,
                            not_applied: true,
                            details: Vec::new(),
                        },
                    };
                    encode(&reply).map_err(|e| e.to_string())
                }
            });
            match tokio::time::timeout(FORWARD_TIMEOUT, call).await {
                Ok(Ok(Ok(data))) => decode::<ForwardReply>(&data).map_err(|e| {
                    ForwardError::Unknown(outcome_unknown(e.to_string(), Some(&leader)))
                }),
                Ok(Ok(Err(e))) => Err(ForwardError::Unknown(outcome_unknown(e, Some(&leader)))),
                Ok(Err(Refused)) => Err(ForwardError::NotSent(not_sent(
                    "the leader refused the connection",
                    &leader,
                ))),
                Err(_) => {
                    trace.log(&name(from), format!("forward to n{to} timed out"));
                    Err(ForwardError::Unknown(outcome_unknown(
                        "forwarding to the leader timed out; the write's outcome is unknown",
                        Some(&leader),
                    )))
                }
            }
        }
    }

    fn resent(&self) {
        self.trace
            .log(&name(self.id), "sends a write again: no leader took it");
    }
}

/// The member of `ids` whose address (`addr`) is `leader`, as a real node dials the address its
/// membership holds.
fn node_of(ids: &[NodeId], leader: &NodeAddr) -> Option<NodeId> {
    ids.iter().copied().find(|&id| addr(id) == *leader)
}

/// A forward that never left: not applied, so it may go to the next leader.
fn not_sent(why: &str, leader: &NodeAddr) -> tonic::Status {
    errors::not_applied(errors::unavailable(
        format!("the write was not sent: {why}"),
        Some(leader),
    ))
}

/// ReadIndex on `raft`: the leader's read index (through the node's shared calls when it is a
/// follower, as `server::Node` asks), then this node's apply up to it.
async fn read_barrier<T>(
    raft: &Raft,
    shared: &SharedReadIndex,
    timeout: Duration,
) -> Result<(), Answer<T>> {
    let index = match raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
        Ok(linearizer) => linearizer.read_log_id().index(),
        Err(RaftError::APIError(steward::raft::types::LinearizableReadError::ForwardToLeader(
            _,
        ))) => match shared.read_index(timeout).await {
            Ok(index) => index,
            Err(status) => return Err(Answer::Fail(status.message().to_string())),
        },
        Err(e) => return Err(Answer::Fail(e.to_string())),
    };
    match raft
        .wait(Some(timeout))
        .applied_index_at_least(Some(index), "read index")
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => Err(Answer::Fail(e.to_string())),
    }
}

/// One ReadIndex call from node `via` to the leader it knows, in one simulated message: the
/// leader confirms its leadership and names its read index.
fn leader_read_index(net: Net, via: NodeId, raft: Raft, timeout: Duration) -> read_index::Fetch {
    Arc::new(move || {
        let (net, raft) = (net.clone(), raft.clone());
        Box::pin(async move {
            let leader = raft.metrics().borrow_watched().current_leader;
            let Some(leader) = leader.filter(|&l| l != via) else {
                return Err(tonic::Status::unavailable("no leader"));
            };
            let asked = net.call(Some(via), leader, Copies::Never, |host| async move {
                host.raft
                    .get_read_linearizer(ReadPolicy::ReadIndex)
                    .await
                    .map(|l| l.read_log_id().index())
                    .map_err(|e| e.to_string())
            });
            match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(index)) => Ok(index),
                Ok(Err(e)) => Err(tonic::Status::unavailable(e)),
                Err(_) => Err(tonic::Status::unavailable("read index timed out")),
            }
        })
    })
}

/// A leader's loops for one incarnation of node `id`: the operation scheduler's and sweeper's
/// rounds, then the lock and lease sweepers: steward's sweeper
/// rounds (`server::locks::sweeper::sweep_round`, then the etcd leases due) every
/// [`SWEEP_EVERY`], proposed where it runs.
async fn sweeper(net: Net, id: NodeId, incarnation: u64, host: Host, state: Arc<RwLock<State>>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        if !net.is_current(id, incarnation) {
            return;
        }
        let Some(stamp) = host
            .time
            .leader_stamp(&host.raft.metrics().borrow_watched())
        else {
            continue;
        };
        let quiet_ms = host.time.quiet_ms();
        let lock_limits = lock_limits_of(&LocksConfig::default());
        let (round, leases_due, dispatch, ops_due) = {
            let state = state.read().unwrap_or_else(|p| p.into_inner());
            // The scheduler's round (`server::operations::scheduler`), on this tick rather
            // than on every operation event: what may be assigned now.
            let dispatch = state.ops_dispatchable(stamp.0, lock_limits.holders_max, SCHEDULE_MAX);
            if !state.sweep_may_act(stamp.0, 0) {
                (None, Vec::new(), dispatch, None)
            } else {
                (
                    Some(sweep_round(
                        &state,
                        stamp.0,
                        quiet_ms,
                        CHECKPOINT_MS,
                        0,
                        LOCK_DELAY_MS,
                    )),
                    state.kv().leases().due(stamp.0, LEASE_SWEEP_MAX),
                    dispatch,
                    Some(state.ops_due(stamp.0)),
                )
            }
        };
        for d in dispatch {
            let assign = OperationCommand::Assign {
                id: d.id,
                worker: d.worker,
                lock_limits,
            };
            let _ = propose(id, &host, assign.into()).await;
        }
        // The operation sweeper's round (`server::operations::sweeper`): dead workers' work
        // taken back, passed deadlines acted on; apply checks again.
        if let Some(due) = ops_due.filter(|d| !d.is_empty()) {
            let sweep = OperationCommand::Sweep {
                workers: due.workers,
                operations: due.operations,
                grace_ms: 0,
                limits: op_limits(&OperationsConfig::default()),
            };
            let _ = propose(id, &host, sweep.into()).await;
        }
        let Some(round) = round else {
            continue;
        };
        if let Some(command) = round.command {
            let _ = propose(id, &host, command.into()).await;
        }
        // The etcd lease sweeper's round (`server::etcd::lease::run_sweeper`): the leases this
        // leader's clock says have ended, which apply checks again at the entry's time.
        if !leases_due.is_empty() {
            let expire = KvCommand::LeaseExpire {
                ids: leases_due,
                grace_ms: 0,
            };
            let _ = propose(id, &host, expire.into()).await;
        }
    }
}
