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
//!
//! Here: the faults, applying and healing them, and the partition rules. Beside it:
//! `schedule.rs` (a run's timeline from its seed).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::clock::FakeClock;
use crate::cluster::NetCluster;
use crate::membership;

mod schedule;

pub use schedule::{check_kinds, check_kinds_for, kinds_missing, schedule, CLOCK_STEP_LARGE_S};

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

#[cfg(test)]
mod tests;
