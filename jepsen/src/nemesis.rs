//! Faults on a `NetCluster`: partitions and packet loss with nftables rules inside the node
//! namespaces, kill -9 and SIGSTOP by PID, wall-clock steps and drift (libfaketime, `clock`),
//! and membership changes (a member removed, a fresh one added in its place, `membership`);
//! each one reversed by `heal` and recorded on a timeline. `schedule` turns a seed into the
//! faults of a run.
//!
//! Who calls it: the runner (apply a scheduled fault, wait its length, heal) and tests.
//!
//! Network faults follow Jepsen's "grudge" model: a fault is, for each node, the set of peers
//! whose packets it drops on arrival (`rules`). A one-way partition drops, at the receiving
//! node, only what the cut-off peer sends to the node's listening ports (client 7001, peer
//! 7101): TCP needs packets both ways, so dropping everything from the peer would also kill
//! the connections the receiving node opens and cut both directions. Only traffic between node
//! addresses is touched; clients come from the root namespace's address (`.254`) and keep reaching every
//! node, so each client sees the side of the partition its node is on. The rules live in a
//! table `inet jepsen` with one input chain; `heal` flushes the ruleset of every node namespace
//! (nothing else puts rules there).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::clock::FakeClock;
use crate::cluster::NetCluster;
use crate::membership;
use crate::rng::Rng;

/// As a node id in a `Fault`: whichever node leads when the fault is applied (node ids start
/// at 1, so 0 is free). `schedule` uses it for "isolate / kill / pause the leader"; the
/// timeline records the node it turned out to be.
pub const LEADER: u64 = 0;

/// The nemesis kinds `schedule` knows, as named on the command line.
pub const KINDS: [&str; 6] = ["partition", "kill", "pause", "loss", "clock", "membership"];

/// One fault. Node ids are cluster ids, or `LEADER`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// The node and all others cannot reach each other.
    PartitionIsolate(u64),
    /// Two sides that cannot reach each other (Jepsen's random halves: minority | majority).
    PartitionHalves(Vec<u64>, Vec<u64>),
    /// Two sides that cannot reach each other, and one node that reaches both (Jepsen's bridge).
    PartitionBridge {
        left: Vec<u64>,
        middle: u64,
        right: Vec<u64>,
    },
    /// `from` cannot reach `to`, while `to` still reaches `from`: `to` drops every packet from
    /// `from` addressed to its listening ports (client and peer), so no connection from `from`
    /// opens and none already open carries anything more to `to` (Raft RPCs and forwarded
    /// writes from `from` to `to` fail), whereas the connections `to` opens to `from` work both
    /// ways (`from`'s answers come from its own listening ports). Stateless (no conntrack), so
    /// connections opened before the fault are cut the same way.
    PartitionOneWay { from: u64, to: u64 },
    /// SIGKILL; restarted (same data dir) by `heal`.
    Kill(u64),
    /// SIGSTOP; SIGCONT by `heal`.
    Pause(u64),
    /// `percent`% of the packets between `a` and `b` are dropped, both ways.
    PacketLoss { a: u64, b: u64, percent: u8 },
    /// The node's wall clock steps by `delta_ms` (negative: back); `heal` steps it back to
    /// real time.
    ClockJump { node: u64, delta_ms: i64 },
    /// The node's wall clock runs at `percent`% of real speed from now on (no step); `heal`
    /// steps it back to real time.
    ClockRate { node: u64, percent: u32 },
    /// The member in the node's slot is removed from the cluster and its process stopped;
    /// `heal` starts a fresh member (new id, empty data dir) there and adds it as a voter.
    Replace(u64),
}

impl Fault {
    /// The nemesis kind (as in `KINDS`) this fault belongs to.
    pub fn nemesis_kind(&self) -> &'static str {
        match self {
            Fault::PartitionIsolate(_)
            | Fault::PartitionHalves(..)
            | Fault::PartitionBridge { .. }
            | Fault::PartitionOneWay { .. } => "partition",
            Fault::Kill(_) => "kill",
            Fault::Pause(_) => "pause",
            Fault::PacketLoss { .. } => "loss",
            Fault::ClockJump { .. } | Fault::ClockRate { .. } => "clock",
            Fault::Replace(_) => "membership",
        }
    }
}

fn node(id: u64) -> String {
    match id {
        LEADER => "the leader".to_string(),
        id => format!("node {id}"),
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::PartitionIsolate(id) => write!(f, "partition: isolate {}", node(*id)),
            Fault::PartitionHalves(a, b) => write!(f, "partition: halves {a:?} | {b:?}"),
            Fault::PartitionBridge {
                left,
                middle,
                right,
            } => write!(f, "partition: bridge {left:?} - {middle} - {right:?}"),
            Fault::PartitionOneWay { from, to } => {
                write!(
                    f,
                    "partition: one-way, {} cannot reach {} (its packets to {}'s ports {} and \
                     {} dropped), which still reaches it",
                    node(*from),
                    node(*to),
                    node(*to),
                    crate::cluster::CLIENT_PORT,
                    crate::cluster::PEER_PORT
                )
            }
            Fault::Kill(id) => write!(f, "kill -9 {}", node(*id)),
            Fault::Pause(id) => write!(f, "pause (SIGSTOP) {}", node(*id)),
            Fault::PacketLoss { a, b, percent } => {
                write!(
                    f,
                    "packet loss {percent}% between {} and {}",
                    node(*a),
                    node(*b)
                )
            }
            Fault::ClockJump { node: id, delta_ms } => {
                let secs = *delta_ms as f64 / 1000.0;
                write!(f, "clock: {} steps {secs:+.3} s", node(*id))
            }
            Fault::ClockRate { node: id, percent } => {
                let rate = f64::from(*percent) / 100.0;
                write!(f, "clock: {} runs at {rate:.2}x real speed", node(*id))
            }
            Fault::Replace(id) => write!(
                f,
                "membership: remove {}, then add a fresh member in its place",
                node(*id)
            ),
        }
    }
}

/// Whether a timeline entry starts a fault or heals everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimelineKind {
    Fault,
    Heal,
}

impl TimelineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TimelineKind::Fault => "fault",
            TimelineKind::Heal => "heal",
        }
    }
}

/// So readers can write `entry.kind == "fault"`, as in the JSON.
impl PartialEq<&str> for TimelineKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One thing the nemesis did. Serialized as
/// `{"at_ns":..,"what":"..","kind":"fault"|"heal","nemesis":".."}` (`nemesis` only when set).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// When it was done, in ns since the run's start (the same clock as the history).
    pub at_ns: u64,
    pub what: String,
    pub kind: TimelineKind,
    /// For a fault that took effect, its nemesis kind (`Fault::nemesis_kind`); `None` for a
    /// heal and for a fault that changed nothing (killing or pausing a node that was not
    /// running), which tested nothing. `kinds_missing` reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nemesis: Option<String>,
}

/// One input rule in a node's namespace: drop `percent`% (100 = all) of what arrives from a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DropRule {
    pub from: u64,
    pub percent: u8,
    /// Only what `from` sends to this node's listening ports (its requests, on new and open
    /// connections alike), so this node's own connections to `from` still work (a one-way
    /// partition); `false`: every packet from `from`.
    pub to_listeners_only: bool,
}

/// Applies and heals faults. Holds no cluster: only what it did (to undo it) and the timeline.
#[derive(Debug)]
pub struct Nemesis {
    start: Instant,
    /// Killed by `apply`, restarted by `heal`.
    killed: BTreeSet<u64>,
    /// Paused by `apply`, resumed by `heal`.
    paused: BTreeSet<u64>,
    /// Clocks moved by `apply`, set back to real time by `heal`.
    skewed: BTreeSet<u64>,
    /// Slots whose member `apply` removed; `heal` adds a fresh member in each.
    vacated: BTreeSet<u64>,
    timeline: Vec<TimelineEntry>,
}

impl Nemesis {
    /// A nemesis whose timeline counts from `start` (the run's start, as for the history).
    pub fn new(start: Instant) -> Nemesis {
        Nemesis {
            start,
            killed: BTreeSet::new(),
            paused: BTreeSet::new(),
            skewed: BTreeSet::new(),
            vacated: BTreeSet::new(),
            timeline: Vec::new(),
        }
    }

    /// Applies `fault` (resolving `LEADER` first) and records it. Killing or pausing a node that
    /// is not running is recorded as such and changes nothing; a fault naming unknown nodes or
    /// overlapping sides is an error.
    pub async fn apply(&mut self, cluster: &mut NetCluster, fault: &Fault) -> anyhow::Result<()> {
        let (fault, note) = resolve_leader(cluster, fault).await;
        validate(&fault, &cluster.node_ids())?;
        let mut what = format!("{fault}{note}");
        let mut took_effect = true;
        match fault {
            Fault::Kill(id) => match cluster.pid(id) {
                Some(_) => {
                    cluster.kill(id);
                    self.paused.remove(&id);
                    self.killed.insert(id);
                }
                None => {
                    what.push_str(" (not running: nothing done)");
                    took_effect = false;
                }
            },
            Fault::Pause(id) => match cluster.pid(id) {
                Some(_) if !cluster.is_paused(id) => {
                    cluster.pause(id);
                    self.paused.insert(id);
                }
                _ => {
                    what.push_str(" (not running or already paused: nothing done)");
                    took_effect = false;
                }
            },
            Fault::ClockJump { node: id, delta_ms } => {
                let (clock, _) = cluster.clock(id).unwrap_or((FakeClock::REAL, 0.0));
                cluster.set_clock(id, clock.jumped(delta_ms as f64 / 1000.0))?;
                self.skewed.insert(id);
            }
            Fault::ClockRate { node: id, percent } => {
                let (clock, elapsed) = cluster.clock(id).unwrap_or((FakeClock::REAL, 0.0));
                cluster.set_clock(id, clock.at_rate(f64::from(percent) / 100.0, elapsed))?;
                self.skewed.insert(id);
            }
            Fault::Replace(id) => {
                let old = membership::remove(cluster, id).await?;
                self.paused.remove(&id);
                self.vacated.insert(id);
                what.push_str(&format!(" (member {old} removed, process stopped)"));
            }
            ref network_fault => {
                let scripts: Vec<(String, String)> = rules(network_fault, &cluster.node_ids())
                    .into_iter()
                    .map(|(id, drops)| {
                        let ns = cluster.netns(id).unwrap_or_default().to_string();
                        (ns, nft_script(cluster, &drops))
                    })
                    .collect();
                tokio::task::spawn_blocking(move || {
                    scripts
                        .iter()
                        .try_for_each(|(ns, script)| crate::netns::nft(ns, script))
                })
                .await??;
            }
        }
        tracing::info!(fault = %what, "nemesis: fault");
        let kind = took_effect.then(|| fault.nemesis_kind().to_string());
        self.record(TimelineKind::Fault, what, kind);
        Ok(())
    }

    /// Undoes everything: flushes the nftables ruleset of every node namespace, resumes paused
    /// nodes, restarts killed ones (same data dir). Tries every step; returns the first error.
    pub async fn heal(&mut self, cluster: &mut NetCluster) -> anyhow::Result<()> {
        let namespaces: Vec<String> = cluster
            .node_ids()
            .iter()
            .filter_map(|&id| cluster.netns(id).map(str::to_string))
            .collect();
        let flushed = tokio::task::spawn_blocking(move || {
            // Every namespace, even after a failure in one.
            let results: Vec<anyhow::Result<()>> = namespaces
                .iter()
                .map(|ns| crate::netns::nft(ns, "flush ruleset\n"))
                .collect();
            results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
        })
        .await?;
        let mut clock_err = None;
        for id in std::mem::take(&mut self.skewed) {
            if let Err(e) = cluster.set_clock(id, FakeClock::REAL) {
                clock_err.get_or_insert(e);
            }
        }
        let resumed: Vec<u64> = std::mem::take(&mut self.paused).into_iter().collect();
        for &id in &resumed {
            cluster.resume(id);
        }
        let restarted: Vec<u64> = std::mem::take(&mut self.killed).into_iter().collect();
        let mut restart_err = None;
        for &id in &restarted {
            if let Err(e) = cluster.restart(id) {
                restart_err.get_or_insert(e);
            }
        }
        // After the restarts: a fresh member joins a cluster with every other node up.
        let mut joined = Vec::new();
        let mut join_err = None;
        for id in std::mem::take(&mut self.vacated) {
            match membership::add_fresh(cluster, id).await {
                Ok(raft_id) => joined.push(format!("node {id} as member {raft_id}")),
                Err(e) => {
                    join_err.get_or_insert(e);
                }
            }
        }
        let mut what = format!("heal: rules flushed, resumed {resumed:?}, restarted {restarted:?}");
        if !joined.is_empty() {
            what.push_str(&format!(", joined {}", joined.join(", ")));
        }
        tracing::info!(heal = %what, "nemesis: heal");
        self.record(TimelineKind::Heal, what, None);
        flushed?;
        match [clock_err, restart_err, join_err]
            .into_iter()
            .flatten()
            .next()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Everything applied and healed so far, in order.
    pub fn timeline(&self) -> &[TimelineEntry] {
        &self.timeline
    }

    fn record(&mut self, kind: TimelineKind, what: String, nemesis: Option<String>) {
        let at_ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.timeline.push(TimelineEntry {
            at_ns,
            what,
            kind,
            nemesis,
        });
    }
}

/// `fault` with `LEADER` replaced by the current leader (or, if none is known, the lowest
/// running node), and a note for the timeline saying which it was.
async fn resolve_leader(cluster: &NetCluster, fault: &Fault) -> (Fault, String) {
    let uses_leader = match fault {
        Fault::PartitionIsolate(id)
        | Fault::Kill(id)
        | Fault::Pause(id)
        | Fault::Replace(id)
        | Fault::ClockJump { node: id, .. }
        | Fault::ClockRate { node: id, .. } => *id == LEADER,
        _ => false,
    };
    if !uses_leader {
        return (fault.clone(), String::new());
    }
    let (id, note) = match cluster.leader().await {
        Some(leader) => (leader, " (leader)".to_string()),
        None => {
            let fallback = cluster
                .node_ids()
                .into_iter()
                .find(|&id| cluster.pid(id).is_some())
                .unwrap_or(1);
            (
                fallback,
                " (no leader known; lowest running node)".to_string(),
            )
        }
    };
    let resolved = match fault {
        Fault::PartitionIsolate(_) => Fault::PartitionIsolate(id),
        Fault::Kill(_) => Fault::Kill(id),
        Fault::Replace(_) => Fault::Replace(id),
        Fault::ClockJump { delta_ms, .. } => Fault::ClockJump {
            node: id,
            delta_ms: *delta_ms,
        },
        Fault::ClockRate { percent, .. } => Fault::ClockRate {
            node: id,
            percent: *percent,
        },
        _ => Fault::Pause(id),
    };
    (resolved, note)
}

/// Checks that a resolved fault names only cluster nodes, with disjoint sides.
pub fn validate(fault: &Fault, ids: &[u64]) -> anyhow::Result<()> {
    let known = |id: &u64| ids.contains(id);
    let named: Vec<u64> = match fault {
        Fault::PartitionIsolate(id)
        | Fault::Kill(id)
        | Fault::Pause(id)
        | Fault::Replace(id)
        | Fault::ClockJump { node: id, .. }
        | Fault::ClockRate { node: id, .. } => vec![*id],
        Fault::PartitionHalves(a, b) => a.iter().chain(b).copied().collect(),
        Fault::PartitionBridge {
            left,
            middle,
            right,
        } => left.iter().chain(right).chain([middle]).copied().collect(),
        Fault::PartitionOneWay { from, to } => vec![*from, *to],
        Fault::PacketLoss { a, b, .. } => vec![*a, *b],
    };
    anyhow::ensure!(
        named.iter().all(known),
        "{fault}: names a node not in the cluster {ids:?}"
    );
    let distinct: BTreeSet<u64> = named.iter().copied().collect();
    anyhow::ensure!(
        distinct.len() == named.len(),
        "{fault}: a node appears twice (sides must be disjoint)"
    );
    match fault {
        Fault::PartitionHalves(a, b) => {
            anyhow::ensure!(!a.is_empty() && !b.is_empty(), "{fault}: a side is empty")
        }
        Fault::PartitionBridge { left, right, .. } => anyhow::ensure!(
            !left.is_empty() && !right.is_empty(),
            "{fault}: a side is empty"
        ),
        Fault::PacketLoss { percent, .. } => {
            anyhow::ensure!(
                (1..=100).contains(percent),
                "{fault}: percent must be 1..=100"
            )
        }
        Fault::ClockRate { percent, .. } => anyhow::ensure!(
            (1..=10_000).contains(percent) && *percent != 100,
            "{fault}: percent must be 1..=10000 and not 100"
        ),
        Fault::ClockJump { delta_ms, .. } => {
            anyhow::ensure!(*delta_ms != 0, "{fault}: a step of 0 changes nothing")
        }
        _ => {}
    }
    Ok(())
}

/// The grudge of a network fault among the nodes `ids`: for each node, what it drops on arrival.
/// Nodes absent from the map keep all their traffic. Process faults give no rules; resolve
/// `LEADER` first.
pub fn rules(fault: &Fault, ids: &[u64]) -> BTreeMap<u64, Vec<DropRule>> {
    let mut out: BTreeMap<u64, Vec<DropRule>> = BTreeMap::new();
    let mut drop = |at: u64, from: u64, percent: u8| {
        out.entry(at).or_default().push(DropRule {
            from,
            percent,
            to_listeners_only: false,
        });
    };
    let mut cut = |a: &[u64], b: &[u64]| {
        for &x in a {
            for &y in b {
                drop(x, y, 100);
                drop(y, x, 100);
            }
        }
    };
    match fault {
        Fault::PartitionIsolate(id) => {
            let others: Vec<u64> = ids.iter().copied().filter(|o| o != id).collect();
            cut(&[*id], &others)
        }
        Fault::Kill(_)
        | Fault::Pause(_)
        | Fault::Replace(_)
        | Fault::ClockJump { .. }
        | Fault::ClockRate { .. } => {}
        Fault::PartitionHalves(a, b) => cut(a, b),
        Fault::PartitionBridge { left, right, .. } => cut(left, right),
        Fault::PartitionOneWay { from, to } => out.entry(*to).or_default().push(DropRule {
            from: *from,
            percent: 100,
            to_listeners_only: true,
        }),
        Fault::PacketLoss { a, b, percent } => {
            drop(*a, *b, *percent);
            drop(*b, *a, *percent);
        }
    }
    for drops in out.values_mut() {
        drops.sort_unstable();
    }
    out
}

/// The nft script that installs `drops` in a node's namespace (additive: applying a second
/// fault before healing adds its rules).
fn nft_script(cluster: &NetCluster, drops: &[DropRule]) -> String {
    let mut s = String::from(
        "add table inet jepsen\n\
         add chain inet jepsen input { type filter hook input priority 0 ; policy accept ; }\n",
    );
    for d in drops {
        let ip = cluster.ip(d.from);
        if d.to_listeners_only {
            s.push_str(&format!(
                "add rule inet jepsen input ip saddr {ip} tcp dport {{ {}, {} }} drop\n",
                crate::cluster::CLIENT_PORT,
                crate::cluster::PEER_PORT
            ));
        } else if d.percent >= 100 {
            s.push_str(&format!("add rule inet jepsen input ip saddr {ip} drop\n"));
        } else {
            s.push_str(&format!(
                "add rule inet jepsen input ip saddr {ip} numgen random mod 100 < {} drop\n",
                d.percent
            ));
        }
    }
    s
}

/// Checks command-line nemesis kinds against `KINDS` (call before `schedule`).
pub fn check_kinds(kinds: &[&str]) -> anyhow::Result<()> {
    match kinds.iter().find(|k| !KINDS.contains(k)) {
        Some(k) => anyhow::bail!("unknown nemesis {k:?}; known: {}", KINDS.join(", ")),
        None => Ok(()),
    }
}

/// Checks that a cluster of `nodes` can have every fault of `kinds` (partitions and loss need
/// two nodes, membership three: removing one of two would leave a single voter).
pub fn check_kinds_for(kinds: &[&str], nodes: u64) -> anyhow::Result<()> {
    for kind in kinds {
        let needs = match *kind {
            "membership" => 3,
            "partition" | "loss" => 2,
            _ => 1,
        };
        anyhow::ensure!(
            nodes >= needs,
            "--nemesis {kind} needs at least {needs} nodes (--nodes {nodes})"
        );
    }
    Ok(())
}

/// The requested kinds (duplicates ignored) of which no fault took effect on `timeline`: a run
/// that lacks one did not test what its command line says (too short for its slots, a slot
/// skipped at the end, or a fault that found nothing to do).
pub fn kinds_missing(kinds: &[&str], timeline: &[TimelineEntry]) -> Vec<String> {
    let applied: BTreeSet<&str> = timeline
        .iter()
        .filter_map(|e| e.nemesis.as_deref())
        .collect();
    let mut missing: Vec<String> = Vec::new();
    for kind in kinds {
        if !applied.contains(kind) && !missing.iter().any(|m| m == kind) {
            missing.push(kind.to_string());
        }
    }
    missing
}

/// A seeded schedule: `(start, fault, length)` in time order, never overlapping, each ending
/// by `duration`. Time is cut into slots of `interval`; the first slot is quiet (a baseline),
/// then each slot starts one fault within its first tenth, lasting 40-60% of the slot, so the
/// cluster has at least 30% of every slot to recover. Kinds come in rounds: each round is a
/// seeded shuffle of `kinds` (duplicates ignored), so every kind runs once before any runs
/// twice, and a run of at least `kinds.len()` slots (`duration >= (kinds + 1) * interval`
/// always is) has every kind. The same seed, kinds and nodes give the same schedule.
///
/// - partition: isolate the leader, isolate a random node, random halves (minority |
///   majority), bridge, or one-way between two random nodes;
/// - kill: the leader or a random node (half each); pause: the leader two times in three;
/// - loss: 20-60% on the link between two random nodes;
/// - clock: on the leader two times in three (only the leader's clock reaches the log), a step
///   of 2-60 s either way, or a rate of 0.25x, 0.5x, 2x or 4x;
/// - membership: remove the leader (one time in three) or a random node, and add a fresh one.
///
/// Panics on a kind not in `KINDS` (see `check_kinds`). Partitions and loss need two nodes,
/// bridges and membership three (`check_kinds_for`); slots whose fault cannot be made stay
/// quiet.
pub fn schedule(
    seed: u64,
    kinds: &[&str],
    node_ids: &[u64],
    duration: Duration,
    interval: Duration,
) -> Vec<(Duration, Fault, Duration)> {
    if let Err(e) = check_kinds(kinds) {
        panic!("{e}");
    }
    let mut ids = node_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    if kinds.is_empty() || ids.is_empty() || interval.is_zero() {
        return out;
    }
    let mut distinct: Vec<&str> = Vec::new();
    for kind in kinds {
        if !distinct.contains(kind) {
            distinct.push(kind);
        }
    }
    let mut rng = Rng::new(seed);
    let slot_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    // The kinds left in this round; refilled with a fresh shuffle when empty.
    let mut round: Vec<&str> = Vec::new();
    for slot in 1u32.. {
        let jitter = Duration::from_nanos(rng.below(slot_ns / 10 + 1));
        let length = Duration::from_nanos(slot_ns / 100 * (40 + rng.below(21)));
        let start = interval
            .checked_mul(slot)
            .and_then(|slot_start| slot_start.checked_add(jitter));
        match start.and_then(|s| s.checked_add(length)) {
            Some(end) if end <= duration => {}
            _ => break,
        }
        let start = start.unwrap_or_default();
        if round.is_empty() {
            round = shuffled(&mut rng, &distinct);
        }
        let Some(kind) = round.pop() else {
            break;
        };
        if let Some(fault) = pick(&mut rng, kind, &ids) {
            out.push((start, fault, length));
        }
    }
    out
}

/// One fault of `kind` among `ids` (sorted), or `None` if there are too few nodes for it.
fn pick(rng: &mut Rng, kind: &str, ids: &[u64]) -> Option<Fault> {
    let n = ids.len();
    let any = |rng: &mut Rng| ids[rng.below(n as u64) as usize];
    match kind {
        "kill" => Some(Fault::Kill(if rng.below(2) == 0 {
            LEADER
        } else {
            any(rng)
        })),
        "pause" => Some(Fault::Pause(if rng.below(3) < 2 {
            LEADER
        } else {
            any(rng)
        })),
        "clock" => {
            let id = if rng.below(3) < 2 { LEADER } else { any(rng) };
            Some(if rng.below(2) == 0 {
                let secs = 2 + rng.below(59) as i64;
                let sign = if rng.below(2) == 0 { 1 } else { -1 };
                Fault::ClockJump {
                    node: id,
                    delta_ms: sign * secs * 1000,
                }
            } else {
                Fault::ClockRate {
                    node: id,
                    percent: [25, 50, 200, 400][rng.below(4) as usize],
                }
            })
        }
        // Removing one of two would leave a single voter: not a fault a real operator makes.
        "membership" if n >= 3 => Some(Fault::Replace(if rng.below(3) == 0 {
            LEADER
        } else {
            any(rng)
        })),
        "loss" if n >= 2 => {
            let s = shuffled(rng, ids);
            let percent = 20 + 10 * rng.below(5) as u8;
            Some(Fault::PacketLoss {
                a: s[0],
                b: s[1],
                percent,
            })
        }
        "partition" if n >= 2 => {
            let s = shuffled(rng, ids);
            let sorted = |v: &[u64]| {
                let mut v = v.to_vec();
                v.sort_unstable();
                v
            };
            let variants = if n >= 3 { 5 } else { 4 };
            Some(match rng.below(variants) {
                0 => Fault::PartitionIsolate(LEADER),
                1 => Fault::PartitionIsolate(s[0]),
                2 => Fault::PartitionHalves(sorted(&s[..n / 2]), sorted(&s[n / 2..])),
                3 => Fault::PartitionOneWay {
                    from: s[0],
                    to: s[1],
                },
                _ => {
                    let half = (n - 1) / 2;
                    Fault::PartitionBridge {
                        left: sorted(&s[1..1 + half]),
                        middle: s[0],
                        right: sorted(&s[1 + half..]),
                    }
                }
            })
        }
        _ => None,
    }
}

/// Fisher-Yates over a copy.
fn shuffled<T: Clone>(rng: &mut Rng, items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<u64> {
        vec![1, 2, 3, 4, 5]
    }

    fn dropped(rules: &BTreeMap<u64, Vec<DropRule>>, at: u64) -> Vec<u64> {
        rules
            .get(&at)
            .map(|d| d.iter().map(|r| r.from).collect())
            .unwrap_or_default()
    }

    #[test]
    fn isolate_cuts_one_node_from_all_others_both_ways() {
        let r = rules(&Fault::PartitionIsolate(2), &ids());
        assert_eq!(dropped(&r, 2), vec![1, 3, 4, 5]);
        for other in [1, 3, 4, 5] {
            assert_eq!(dropped(&r, other), vec![2]);
        }
    }

    #[test]
    fn halves_and_bridge_follow_the_grudge() {
        let r = rules(&Fault::PartitionHalves(vec![1, 2], vec![3, 4, 5]), &ids());
        assert_eq!(dropped(&r, 1), vec![3, 4, 5]);
        assert_eq!(dropped(&r, 4), vec![1, 2]);
        let fault = Fault::PartitionBridge {
            left: vec![1, 2],
            middle: 3,
            right: vec![4, 5],
        };
        let r = rules(&fault, &ids());
        assert_eq!(
            dropped(&r, 3),
            Vec::<u64>::new(),
            "the bridge sees everyone"
        );
        assert_eq!(dropped(&r, 1), vec![4, 5]);
        assert_eq!(dropped(&r, 5), vec![1, 2]);
    }

    #[test]
    fn one_way_drops_in_one_direction_and_loss_in_both() {
        let r = rules(&Fault::PartitionOneWay { from: 1, to: 2 }, &ids());
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[&2],
            vec![DropRule {
                from: 1,
                percent: 100,
                to_listeners_only: true
            }],
            "only node 2 drops, and only node 1's requests"
        );
        let fault = Fault::PacketLoss {
            a: 1,
            b: 3,
            percent: 30,
        };
        let r = rules(&fault, &ids());
        assert_eq!(
            r[&1],
            vec![DropRule {
                from: 3,
                percent: 30,
                to_listeners_only: false
            }]
        );
        assert_eq!(
            r[&3],
            vec![DropRule {
                from: 1,
                percent: 30,
                to_listeners_only: false
            }]
        );
        assert!(rules(&Fault::Kill(1), &ids()).is_empty());
        assert!(rules(&Fault::Replace(1), &ids()).is_empty());
        let jump = Fault::ClockJump {
            node: 1,
            delta_ms: 5_000,
        };
        assert!(rules(&jump, &ids()).is_empty());
    }

    #[test]
    fn validate_refuses_unknown_and_overlapping_nodes() {
        let ids = ids();
        assert!(validate(&Fault::Kill(9), &ids).is_err());
        assert!(validate(&Fault::PartitionHalves(vec![1, 2], vec![2, 3]), &ids).is_err());
        assert!(validate(&Fault::PartitionHalves(vec![], vec![2, 3]), &ids).is_err());
        assert!(validate(&Fault::PartitionOneWay { from: 1, to: 1 }, &ids).is_err());
        let loss = Fault::PacketLoss {
            a: 1,
            b: 2,
            percent: 0,
        };
        assert!(validate(&loss, &ids).is_err());
        assert!(validate(&Fault::PartitionHalves(vec![1, 2], vec![3, 4, 5]), &ids).is_ok());
        let still = Fault::ClockRate {
            node: 1,
            percent: 100,
        };
        assert!(validate(&still, &ids).is_err());
        let no_step = Fault::ClockJump {
            node: 2,
            delta_ms: 0,
        };
        assert!(validate(&no_step, &ids).is_err());
        assert!(validate(&Fault::Replace(6), &ids).is_err());
        assert!(validate(&Fault::Replace(5), &ids).is_ok());
    }

    #[test]
    fn schedule_is_seeded_ordered_disjoint_and_within_the_run() {
        let kinds = KINDS;
        let duration = Duration::from_secs(400);
        let interval = Duration::from_secs(8);
        let a = schedule(7, &kinds, &ids(), duration, interval);
        let b = schedule(7, &kinds, &[5, 4, 3, 2, 1], duration, interval);
        assert_eq!(
            a, b,
            "same seed, same schedule (node order does not matter)"
        );
        assert_ne!(a, schedule(8, &kinds, &ids(), duration, interval));
        assert!(a.len() >= 30, "{} faults", a.len());
        assert!(a[0].0 >= interval, "the first slot is quiet");
        for w in a.windows(2) {
            assert!(w[0].0 + w[0].2 < w[1].0, "faults do not overlap");
        }
        let (start, _, length) = a.last().expect("faults");
        assert!(*start + *length <= duration);
        for (_, fault, _) in &a {
            let resolved = match fault.clone() {
                Fault::PartitionIsolate(LEADER) => Fault::PartitionIsolate(1),
                Fault::Kill(LEADER) => Fault::Kill(1),
                Fault::Pause(LEADER) => Fault::Pause(1),
                Fault::Replace(LEADER) => Fault::Replace(1),
                Fault::ClockJump {
                    node: LEADER,
                    delta_ms,
                } => Fault::ClockJump { node: 1, delta_ms },
                Fault::ClockRate {
                    node: LEADER,
                    percent,
                } => Fault::ClockRate { node: 1, percent },
                f => f,
            };
            validate(&resolved, &ids()).expect("scheduled faults are valid");
        }
        let seen: BTreeSet<&str> = a
            .iter()
            .map(|(_, f, _)| match f {
                Fault::Kill(_) => "kill",
                Fault::Pause(_) => "pause",
                Fault::PacketLoss { .. } => "loss",
                Fault::ClockJump { .. } | Fault::ClockRate { .. } => "clock",
                Fault::Replace(_) => "membership",
                _ => "partition",
            })
            .collect();
        assert_eq!(seen.len(), KINDS.len(), "every kind appears: {seen:?}");
    }

    #[test]
    fn schedule_uses_only_the_kinds_asked_for() {
        let s = schedule(
            1,
            &["pause"],
            &[1, 2, 3],
            Duration::from_secs(60),
            Duration::from_secs(5),
        );
        assert!(!s.is_empty());
        assert!(s.iter().all(|(_, f, _)| matches!(f, Fault::Pause(_))));
        assert!(schedule(
            1,
            &[],
            &[1, 2, 3],
            Duration::from_secs(60),
            Duration::from_secs(5)
        )
        .is_empty());
        assert!(check_kinds(&["partition", "clock", "membership"]).is_ok());
        assert!(check_kinds(&["partition", "bitflip"]).is_err());
    }

    #[test]
    fn timeline_kind_reads_as_its_json_name() {
        let e = TimelineEntry {
            at_ns: 5,
            what: "x".into(),
            kind: TimelineKind::Heal,
            nemesis: None,
        };
        assert!(e.kind == "heal");
        let json = serde_json::to_string(&e).expect("json");
        assert_eq!(json, r#"{"at_ns":5,"what":"x","kind":"heal"}"#);
        let f = TimelineEntry {
            kind: TimelineKind::Fault,
            nemesis: Some("kill".into()),
            ..e
        };
        let json = serde_json::to_string(&f).expect("json");
        assert_eq!(
            json,
            r#"{"at_ns":5,"what":"x","kind":"fault","nemesis":"kill"}"#
        );
    }

    /// Every non-empty subset of `KINDS`, in `KINDS` order.
    fn kind_sets() -> Vec<Vec<&'static str>> {
        (1u32..1 << KINDS.len())
            .map(|bits| {
                KINDS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, k)| *k)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_round_of_the_schedule_has_every_kind_once() {
        let interval = Duration::from_secs(6);
        for nodes in [vec![1, 2, 3], vec![1, 2, 3, 4, 5]] {
            for kinds in kind_sets() {
                let k = kinds.len();
                // Two full rounds fit: the quiet slot, then 2k slots of at most 70% each.
                let duration = interval * (2 * k as u32 + 1);
                for seed in 0..200 {
                    let s = schedule(seed, &kinds, &nodes, duration, interval);
                    assert!(
                        s.len() >= 2 * k,
                        "seed {seed} {kinds:?}: {} faults",
                        s.len()
                    );
                    for (r, round) in s.chunks(k).enumerate() {
                        let mut seen: Vec<&str> =
                            round.iter().map(|(_, f, _)| f.nemesis_kind()).collect();
                        seen.sort_unstable();
                        let mut want = kinds.clone();
                        want.sort_unstable();
                        if round.len() == k {
                            assert_eq!(seen, want, "seed {seed}, round {r}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_shortest_run_that_fits_the_kinds_has_them_all() {
        let interval = Duration::from_secs(6);
        for kinds in kind_sets() {
            let duration = interval * (kinds.len() as u32 + 1);
            for seed in 0..200 {
                let s = schedule(seed, &kinds, &[1, 2, 3], duration, interval);
                let seen: BTreeSet<&str> = s.iter().map(|(_, f, _)| f.nemesis_kind()).collect();
                assert_eq!(seen.len(), kinds.len(), "seed {seed} {kinds:?}: {s:?}");
            }
        }
        // Duplicates count once: "kill,kill,pause" is two kinds in rounds of two.
        let s = schedule(
            3,
            &["kill", "kill", "pause"],
            &[1, 2, 3],
            interval * 3,
            interval,
        );
        let mut seen: Vec<&str> = s.iter().map(|(_, f, _)| f.nemesis_kind()).collect();
        seen.sort_unstable();
        assert_eq!(seen, vec!["kill", "pause"]);
    }

    fn entry(kind: TimelineKind, nemesis: Option<&str>) -> TimelineEntry {
        TimelineEntry {
            at_ns: 0,
            what: String::new(),
            kind,
            nemesis: nemesis.map(str::to_string),
        }
    }

    #[test]
    fn a_timeline_without_a_requested_kind_is_flagged() {
        let timeline = vec![
            entry(TimelineKind::Fault, Some("partition")),
            entry(TimelineKind::Heal, None),
            // A kill that found its node not running: it tested nothing.
            entry(TimelineKind::Fault, None),
            entry(TimelineKind::Heal, None),
            entry(TimelineKind::Fault, Some("pause")),
            entry(TimelineKind::Heal, None),
        ];
        assert_eq!(
            kinds_missing(&["partition", "kill", "pause", "kill"], &timeline),
            vec!["kill".to_string()]
        );
        assert_eq!(
            kinds_missing(&["pause", "partition"], &timeline),
            Vec::<String>::new()
        );
        assert_eq!(
            kinds_missing(&["membership"], &[]),
            vec!["membership".to_string()]
        );
        assert!(check_kinds_for(&["membership"], 2).is_err());
        assert!(check_kinds_for(&["partition", "loss"], 1).is_err());
        assert!(check_kinds_for(&KINDS, 3).is_ok());
    }
}
