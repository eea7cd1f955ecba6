//! The cluster under test: real `steward serve` processes, one per network namespace.
//!
//! `NetCluster::start` makes the namespaces (`netns`), writes one config per node (client port
//! 7001 and peer port 7101 on the node's own address), starts every node with
//! `ip netns exec <ns> <steward> serve --config <file>` (output appended to
//! `<work_dir>/node<N>.log`, data in `<work_dir>/node<N>/`) and waits until every node answers
//! and they agree on a leader. Faults act on processes by PID (`kill`, `pause`, ...); the nemesis
//! is the only other caller that changes anything here.
//!
//! Each node is a *slot*: a number (1..=nodes), a namespace, an address, a config file and a
//! log, all stable for the run. The member running there has Raft id = slot at first; the
//! membership nemesis removes it and starts a fresh member with a new id (ids are never reused)
//! in the same slot, so faults and clients keep naming nodes by slot (`raft_id` tells which
//! member runs where).
//!
//! Every node process is watched for its whole life (`process::Watched`): a thread per process
//! owns its `Child`, and every exit goes to the cluster's exit record (`exits`) with whether the
//! harness asked for it, so a crash stays on record even when a later fault kills, restarts or
//! replaces the slot.
//!
//! Processes die with the harness, whatever happens to it:
//! - `stop` sends SIGTERM, waits a bounded time, then SIGKILL, then removes the namespaces;
//! - `Drop` (an error, a panic, a cancelled future) sends SIGCONT then SIGKILL to every node and
//!   reaps it before the `Network` field removes the namespaces;
//! - a harness killed with SIGKILL takes its nodes with it: every node is started with
//!   `PR_SET_PDEATHSIG = SIGKILL` from one long-lived spawner thread (the signal follows the
//!   *thread* that forked, so it must not be a short-lived runtime thread); the namespaces left
//!   behind are removed by the next run's `netns::cleanup_stale`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use steward::config::{LocksConfig, MemberConfig, RaftConfig};
use steward::proto::v1::cluster_client::ClusterClient;
use steward::proto::v1::{ClusterStatusReply, ClusterStatusRequest};
use tokio::time::Instant;

use crate::clock::{self, FakeClock};
use crate::netns::Network;
use crate::process::{Ask, Exit, ExitRecord, Identity, Watched};

mod faults;
mod spawn;

use spawn::{log_marker, signal, spawn_from_spawner, write_config, SpawnRequest};

/// Every node's client API port (on its own address).
pub const CLIENT_PORT: u16 = 7001;
/// Every node's peer (Raft) port (on its own address).
pub const PEER_PORT: u16 = 7101;
/// Most nodes in one cluster (the suite runs 3 or 5).
pub const NODES_MAX: u64 = 9;
/// How long a fresh cluster gets to elect a leader that every node knows.
pub const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long a node gets to exit after SIGTERM in `stop` before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Deadline of one Cluster.Status call (a node asks its peers with a 1 s limit of its own).
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// How often waits re-check their condition.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long `pause` / `resume` wait for the process to be (no longer) stopped.
const SIGNAL_WAIT: Duration = Duration::from_secs(1);
/// Log lines quoted when a node dies early or a wait times out.
const LOG_TAIL_LINES: usize = 6;

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Number of nodes, ids 1..=nodes (3 or 5; at most `NODES_MAX`).
    pub nodes: u64,
    /// The `steward` binary (`cargo build --bin steward` makes target/debug/steward).
    pub steward_bin: PathBuf,
    /// Configs, data dirs and logs go here; created if missing.
    pub work_dir: PathBuf,
    pub raft: RaftConfig,
    pub locks: LocksConfig,
    /// libfaketime, preloaded into every node so the clock nemesis can move its wall clock
    /// (`clock::find_libfaketime`); `None`: real clocks.
    pub faketime: Option<PathBuf>,
}

/// One node: its files, its process (if running) and whether it is stopped by SIGSTOP.
#[derive(Debug)]
struct Node {
    /// The Raft id of the member running in this slot.
    raft_id: u64,
    ns: String,
    ip: String,
    config_path: PathBuf,
    log_path: PathBuf,
    /// The latest process started in this slot (ended ones stay until the next start; their
    /// exits are in the cluster's record).
    process: Option<Watched>,
    /// Set by `pause`, cleared by `resume` / `kill`, so `stop` and `Drop` can SIGCONT first.
    paused: AtomicBool,
    /// libfaketime's settings file for this slot (used only with `ClusterSpec::faketime`).
    faketime_file: PathBuf,
    /// What that file says now.
    clock: FakeClock,
    /// When the running process was started (libfaketime scales time since then).
    started_at: Option<std::time::Instant>,
}

/// A running cluster in its own namespaces. Dropping it kills every node and removes the
/// namespaces; `stop` does the same gracefully.
#[derive(Debug)]
pub struct NetCluster {
    spec: ClusterSpec,
    nodes: BTreeMap<u64, Node>,
    /// The highest Raft id given to any member so far (fresh members get the next one).
    last_raft_id: u64,
    /// Every exit of every node process, filled in by the watchers.
    exits: ExitRecord,
    /// Where exit times count from (the run's start; `set_epoch`).
    epoch: std::time::Instant,
    /// Declared last: dropped after `Drop::drop` has killed and reaped the processes.
    net: Network,
}

impl NetCluster {
    /// Makes the namespaces, writes the configs, starts every node and waits (up to
    /// `LEADER_WAIT`) until every node answers and all report the same leader. On failure
    /// everything made so far is removed; `netns::NetnsUnavailable` when namespaces cannot be
    /// made here.
    pub async fn start(spec: ClusterSpec) -> anyhow::Result<NetCluster> {
        anyhow::ensure!(
            (1..=NODES_MAX).contains(&spec.nodes),
            "cluster size {} out of range 1..={NODES_MAX}",
            spec.nodes
        );
        anyhow::ensure!(
            spec.steward_bin.is_file(),
            "steward binary {} not found; build it with `cargo build --bin steward`",
            spec.steward_bin.display()
        );
        std::fs::create_dir_all(&spec.work_dir)
            .with_context(|| format!("cannot create {}", spec.work_dir.display()))?;
        let mut spec = spec;
        spec.work_dir = spec.work_dir.canonicalize()?;
        spec.steward_bin = spec.steward_bin.canonicalize()?;

        let ids: Vec<u64> = (1..=spec.nodes).collect();
        let net = {
            let ids = ids.clone();
            // Dozens of `ip` commands: off the async threads. If this future is dropped the
            // network is dropped (and removed) when the blocking task ends.
            tokio::task::spawn_blocking(move || Network::create(&ids)).await??
        };
        let members: Vec<MemberConfig> = ids
            .iter()
            .map(|&id| MemberConfig {
                id,
                peer_addr: format!("{}:{PEER_PORT}", net.ip(id)),
                client_addr: format!("{}:{CLIENT_PORT}", net.ip(id)),
            })
            .collect();
        let mut nodes = BTreeMap::new();
        for &id in &ids {
            let node = Node {
                raft_id: id,
                ns: net.node_ns(id),
                ip: net.ip(id),
                config_path: spec.work_dir.join(format!("node{id}.toml")),
                log_path: spec.work_dir.join(format!("node{id}.log")),
                process: None,
                paused: AtomicBool::new(false),
                faketime_file: spec.work_dir.join(format!("node{id}.faketime")),
                clock: FakeClock::REAL,
                started_at: None,
            };
            write_config(&spec, id, id, &node.ip, &members, &node.config_path)?;
            if spec.faketime.is_some() {
                clock::write(&node.faketime_file, FakeClock::REAL)?;
            }
            nodes.insert(id, node);
        }
        let last_raft_id = spec.nodes;
        let mut cluster = NetCluster {
            spec,
            nodes,
            last_raft_id,
            exits: Arc::new(Mutex::new(Vec::new())),
            epoch: std::time::Instant::now(),
            net,
        };
        for id in ids {
            cluster.spawn(id)?;
        }
        cluster.wait_for_leader(LEADER_WAIT).await?;
        Ok(cluster)
    }

    /// "http://<ip>:7001" of every node, by id.
    pub fn client_endpoints(&self) -> Vec<String> {
        self.nodes
            .keys()
            .map(|&id| self.client_endpoint(id))
            .collect()
    }

    /// "http://<ip>:7001" of node `id`.
    pub fn client_endpoint(&self, id: u64) -> String {
        format!("http://{}:{CLIENT_PORT}", self.ip(id))
    }

    /// Every node (slot), ascending.
    pub fn node_ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// The Raft id of the member in slot `id` (equal to `id` until the membership nemesis
    /// replaces it).
    pub fn raft_id(&self, id: u64) -> Option<u64> {
        self.nodes.get(&id).map(|n| n.raft_id)
    }

    /// The slot the member with Raft id `raft_id` runs in (`None`: removed, or never existed).
    pub fn slot_of(&self, raft_id: u64) -> Option<u64> {
        self.nodes
            .iter()
            .find(|(_, n)| n.raft_id == raft_id)
            .map(|(&id, _)| id)
    }

    /// The peer and client addresses of slot `id` (what `AddLearner` is told).
    pub fn member_addrs(&self, id: u64) -> (String, String) {
        let ip = self.ip(id);
        (format!("{ip}:{PEER_PORT}"), format!("{ip}:{CLIENT_PORT}"))
    }

    /// Node `id`'s address (e.g. "10.213.7.2"); empty for an unknown id.
    pub fn ip(&self, id: u64) -> String {
        self.nodes
            .get(&id)
            .map(|n| n.ip.clone())
            .unwrap_or_default()
    }

    /// Node `id`'s network namespace.
    pub fn netns(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|n| n.ns.as_str())
    }

    /// The run's namespace prefix (e.g. "stw41827a").
    pub fn prefix(&self) -> &str {
        self.net.prefix()
    }

    /// The address client traffic comes from (the root namespace's end, `.254`).
    pub fn root_ip(&self) -> String {
        self.net.root_ip()
    }

    /// Node `id`'s log file.
    pub fn log_path(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|n| n.log_path.as_path())
    }

    /// The PID of node `id`'s process, if it runs (`None` once it ended, asked for or not).
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.running(id).map(Watched::pid)
    }

    /// Node `id`'s process, if it has not been seen to end.
    fn running(&self, id: u64) -> Option<&Watched> {
        self.nodes
            .get(&id)?
            .process
            .as_ref()
            .filter(|p| p.is_running())
    }

    /// Whether node `id` is stopped by `pause`.
    pub fn is_paused(&self, id: u64) -> bool {
        self.nodes
            .get(&id)
            .is_some_and(|n| n.paused.load(Ordering::SeqCst))
    }

    /// Every exit of every node process so far, in order, asked for or not.
    pub fn exits(&self) -> Vec<Exit> {
        self.exits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The exits nobody asked for (crashes, panics, fatal errors that ended the process): each
    /// one is a finding.
    pub fn unexpected_exits(&self) -> Vec<Exit> {
        self.exits()
            .into_iter()
            .filter(|e| e.asked.is_none())
            .collect()
    }

    /// Counts exit times (and `life::report`'s) from `epoch`, the run's start as on the
    /// timeline. Until called: the cluster's creation.
    pub fn set_epoch(&mut self, epoch: std::time::Instant) {
        self.epoch = epoch;
    }

    /// See `set_epoch`.
    pub fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// Cluster.Status as answered by node `id` (`None` if it does not answer in time).
    pub async fn status(&self, id: u64) -> Option<ClusterStatusReply> {
        self.nodes.get(&id)?;
        query_status(self.client_endpoint(id)).await
    }

    /// The node (slot) node `id` believes leads (`None`: no answer, no leader known to it, or
    /// one that is no longer in any slot).
    pub async fn leader_seen_by(&self, id: u64) -> Option<u64> {
        let reply = self.status(id).await?;
        self.slot_of(reply.leader_id)
    }

    /// The leader (its slot) as reported by the reachable nodes, asked at once; when they
    /// disagree (an isolated old leader still believes in itself), the answer of the node with
    /// the highest term wins.
    pub async fn leader(&self) -> Option<u64> {
        let asks = self.nodes.iter().map(|(&id, node)| async move {
            let reply = self.status(id).await?;
            let me = node.raft_id;
            let term = reply.nodes.iter().find(|n| n.id == me).map(|n| n.term)?;
            (reply.leader_id != 0).then_some((term, reply.leader_id))
        });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .max()
            .and_then(|(_, leader)| self.slot_of(leader))
    }

    /// Waits until every running, unpaused node answers and all name the same leader; returns
    /// it. Fails at the deadline (naming what each node said) or, with `NodeExited`, when a
    /// node's process has ended on its own.
    pub async fn wait_for_leader(&mut self, timeout: Duration) -> anyhow::Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let crashed = self.unexpected_exits();
            if let Some(e) = crashed.first() {
                return Err(anyhow::Error::new(NodeExited {
                    exits: crashed.clone(),
                })
                .context(format!(
                    "node {} exited ({}) while waiting for a leader; {}",
                    e.slot, e.how, e.log_tail
                )));
            }
            let live: Vec<u64> = self
                .nodes
                .iter()
                .filter(|(&id, n)| self.running(id).is_some() && !n.paused.load(Ordering::SeqCst))
                .map(|(&id, _)| id)
                .collect();
            let seen =
                futures::future::join_all(live.iter().map(|&id| self.leader_seen_by(id))).await;
            let first = seen.first().copied().flatten();
            if let Some(leader) = first.filter(|_| seen.iter().all(|s| *s == first)) {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                let said: Vec<String> = live
                    .iter()
                    .zip(&seen)
                    .map(|(id, s)| match s {
                        Some(l) => format!("node {id}: leader {l}"),
                        None => format!("node {id}: no answer or no leader"),
                    })
                    .collect();
                anyhow::bail!(
                    "no agreed leader after {timeout:?} ({}); logs in {}",
                    said.join(", "),
                    self.spec.work_dir.display()
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Stops every node (SIGCONT, SIGTERM, up to `STOP_GRACE`, then SIGKILL), removes the
    /// namespaces, and returns every exit of the run (`exits`): a node that fails at shutdown
    /// (exits non-zero, aborts) is on it as not asked for. Cleanup failures are logged: there
    /// is nothing left for the caller to do about them.
    pub async fn stop(mut self) -> Vec<Exit> {
        for (&id, node) in &self.nodes {
            if let Some(process) = self.running(id) {
                process.signal(libc::SIGCONT, None);
                node.paused.store(false, Ordering::SeqCst);
                process.signal(libc::SIGTERM, Some(Ask::Stop));
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && !self.all_exited() {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        self.kill_all(Ask::Stop);
        // A few `ip` commands; blocking briefly is fine at the end of a run.
        if let Err(e) = self.net.cleanup() {
            tracing::error!(error = %format!("{e:#}"), "namespace cleanup failed");
        }
        self.exits()
    }

    /// Whether every started process has been seen to end.
    fn all_exited(&self) -> bool {
        self.nodes.keys().all(|&id| self.running(id).is_none())
    }

    fn kill_all(&mut self, ask: Ask) {
        let ids = self.node_ids();
        for &id in &ids {
            self.resume(id);
        }
        for id in ids {
            self.kill_as(id, ask);
        }
    }

    /// Starts node `id`'s process, log appended.
    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let bin = self.spec.steward_bin.clone();
        let cwd = self.spec.work_dir.clone();
        let node = self.nodes.get_mut(&id).context("no such node")?;
        log_marker(
            &node.log_path,
            &format!("starting node {id} in {}", node.ns),
        );
        let env = match &self.spec.faketime {
            Some(lib) => clock::env(lib, &node.faketime_file),
            None => Vec::new(),
        };
        let request = SpawnRequest {
            ns: node.ns.clone(),
            bin,
            config: node.config_path.clone(),
            log: node.log_path.clone(),
            cwd,
            env,
        };
        let child = spawn_from_spawner(request)
            .with_context(|| format!("cannot start node {id} in {}", node.ns))?;
        let pid = child.id();
        let who = Identity {
            slot: id,
            raft_id: node.raft_id,
            log_path: node.log_path.clone(),
        };
        let process = match Watched::start(child, who, self.exits.clone(), LOG_TAIL_LINES) {
            Ok(p) => p,
            Err(e) => {
                // Unwatched, it must not outlive this error.
                signal(pid, libc::SIGKILL);
                return Err(e).context("cannot start a watcher thread");
            }
        };
        tracing::info!(node = id, raft_id = node.raft_id, pid, ns = %node.ns, "node started");
        node.process = Some(process);
        node.started_at = Some(std::time::Instant::now());
        node.paused.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// `NetCluster::start` / `wait_for_leader` failed because node processes ended on their own:
/// a crash, not a slow cluster. The runner finds it with `downcast_ref` and calls the run
/// INVALID.
#[derive(Debug)]
pub struct NodeExited {
    pub exits: Vec<Exit>,
}

impl std::fmt::Display for NodeExited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .exits
            .iter()
            .map(|e| format!("node {} ({})", e.slot, e.how))
            .collect();
        write!(f, "nodes ended on their own: {}", nodes.join(", "))
    }
}

impl std::error::Error for NodeExited {}

impl Drop for NetCluster {
    fn drop(&mut self) {
        // `net` (a field) removes the namespaces after this, once the processes are reaped.
        self.kill_all(Ask::Kill);
    }
}

/// Cluster.Status from one endpoint, within `STATUS_TIMEOUT` (connection included).
async fn query_status(endpoint: String) -> Option<ClusterStatusReply> {
    let ask = async {
        let channel = tonic::transport::Endpoint::from_shared(endpoint)
            .ok()?
            .connect_timeout(STATUS_TIMEOUT)
            .connect()
            .await
            .ok()?;
        ClusterClient::new(channel)
            .status(ClusterStatusRequest {})
            .await
            .ok()
            .map(tonic::Response::into_inner)
    };
    tokio::time::timeout(STATUS_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
}
