//! The nemesis: faults on a schedule drawn from the seed. Crashes of one node or of all of
//! them at once (a power loss: what was not fsynced is gone), partitions of every shape (one
//! node cut off, a minority from a majority, one-way cuts), a lossy network that drops and
//! duplicates, and stalled disks. A crashed node starts again after a while. On schedules of
//! their own: clock faults, and membership changes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::RngExt;
use steward::raft::types::{may_change_membership, ChangeMembers, NodeId, Raft, WatchReceiver};

use crate::clock::DRIFT_MAX;
use crate::cluster::Cluster;
use crate::net::NetFaults;

/// Starts node `id` again after `after`.
pub fn restart_later(cluster: &Arc<Cluster>, id: NodeId, after: Duration) {
    let cluster = cluster.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        if let Err(e) = cluster.start(id).await {
            cluster
                .trace
                .log(&format!("n{id}"), format!("did not start: {e}"));
        }
    });
}

fn pick(rng: &mut SmallRng, ids: &[NodeId]) -> NodeId {
    ids[rng.random_range(0..ids.len())]
}

/// Every pair of nodes one in `a` and one not, both ways.
fn split(ids: &[NodeId], a: &BTreeSet<NodeId>) -> BTreeSet<(NodeId, NodeId)> {
    let mut cuts = BTreeSet::new();
    for &x in ids {
        for &y in ids {
            if a.contains(&x) != a.contains(&y) {
                cuts.insert((x, y));
            }
        }
    }
    cuts
}

/// Cuts `id` off from every other node, both ways, in place of the partition of the moment.
pub fn isolate(cluster: &Cluster, id: NodeId) {
    cluster
        .net
        .set_cuts(split(&cluster.ids, &BTreeSet::from([id])));
}

pub async fn run(cluster: Arc<Cluster>, mut rng: SmallRng, until: tokio::time::Instant) {
    let trace = cluster.trace.clone();
    let ids = cluster.ids.clone();
    let who = "NEM";
    loop {
        let pause = Duration::from_millis(rng.random_range(100..700));
        if tokio::time::Instant::now() + pause >= until {
            return;
        }
        tokio::time::sleep(pause).await;
        match rng.random_range(0..100) {
            0..=24 => {
                let id = pick(&mut rng, &ids);
                if cluster.is_up(id) {
                    trace.log(who, format!("crash n{id}"));
                    cluster.crash(id);
                    restart_later(
                        &cluster,
                        id,
                        Duration::from_millis(rng.random_range(50..1500)),
                    );
                }
            }
            25..=31 => {
                trace.log(who, "power loss: every node crashes");
                for &id in &ids {
                    cluster.crash(id);
                    restart_later(
                        &cluster,
                        id,
                        Duration::from_millis(rng.random_range(50..800)),
                    );
                }
            }
            32..=51 => {
                let cuts = match rng.random_range(0..3) {
                    0 => {
                        let id = pick(&mut rng, &ids);
                        trace.log(who, format!("partition: n{id} alone"));
                        split(&ids, &BTreeSet::from([id]))
                    }
                    1 => {
                        let mut minority = BTreeSet::new();
                        while minority.len() < (ids.len() - 1) / 2 {
                            minority.insert(pick(&mut rng, &ids));
                        }
                        trace.log(who, format!("partition: {minority:?} from the rest"));
                        split(&ids, &minority)
                    }
                    _ => {
                        let from = pick(&mut rng, &ids);
                        let to = pick(&mut rng, &ids);
                        let mut cuts = BTreeSet::new();
                        if from != to {
                            cuts.insert((from, to));
                        } else {
                            // Everything n sends is lost; it still hears the others.
                            for &other in &ids {
                                if other != from {
                                    cuts.insert((from, other));
                                }
                            }
                        }
                        trace.log(who, format!("one-way cut: {cuts:?}"));
                        cuts
                    }
                };
                cluster.net.set_cuts(cuts);
            }
            52..=66 => {
                trace.log(who, "heal the partition");
                cluster.net.set_cuts(BTreeSet::new());
            }
            67..=76 => {
                let faults = if rng.random_bool(0.5) {
                    NetFaults {
                        drop: rng.random_range(0.0..0.2),
                        duplicate: rng.random_range(0.0..0.2),
                        delay_us: (100, rng.random_range(2_000..30_000)),
                    }
                } else {
                    NetFaults::default()
                };
                trace.log(
                    who,
                    format!(
                        "network: drop {:.3} duplicate {:.3} delay {:?} us",
                        faults.drop, faults.duplicate, faults.delay_us
                    ),
                );
                cluster.net.set_faults(faults);
            }
            90..=94 => {
                trace.log(who, "the next node to grant a vote crashes as it answers");
                cluster.net.crash_next_voter();
            }
            87..=89 => {
                let id = pick(&mut rng, &ids);
                trace.log(who, format!("n{id}'s next fsync fails"));
                cluster.disk(id).fail_next_fsync();
            }
            77..=86 => {
                let id = pick(&mut rng, &ids);
                let stall = Duration::from_millis(rng.random_range(100..1500));
                trace.log(who, format!("n{id}'s disk stalls for {stall:?}"));
                cluster.disk(id).stall(tokio::time::Instant::now() + stall);
            }
            _ => {}
        }
    }
}

/// The clock nemesis, on a schedule of its own: a node's monotonic clock changes its drift
/// (within `clock::DRIFT_MAX`) or stalls a while, or its wall clock steps by up to an hour
/// either way.
pub async fn clocks(cluster: Arc<Cluster>, mut rng: SmallRng, until: tokio::time::Instant) {
    let trace = cluster.trace.clone();
    let ids = cluster.ids.clone();
    loop {
        let pause = Duration::from_millis(rng.random_range(200..1_500));
        if tokio::time::Instant::now() + pause >= until {
            return;
        }
        tokio::time::sleep(pause).await;
        let id = pick(&mut rng, &ids);
        let clock = cluster.clock(id);
        match rng.random_range(0..3) {
            0 => {
                let drift = rng.random_range(-DRIFT_MAX..=DRIFT_MAX);
                trace.log(
                    "CLK",
                    format!("n{id}'s monotonic clock drifts {:+.4}", drift),
                );
                clock.set_drift(drift);
            }
            1 => {
                let stall = Duration::from_millis(rng.random_range(50..1_500));
                trace.log(
                    "CLK",
                    format!("n{id}'s monotonic clock stalls for {stall:?}"),
                );
                clock.stall(tokio::time::Instant::now() + stall);
            }
            _ => {
                let step =
                    rng.random_range(1_000..3_600_000) * if rng.random_bool(0.5) { 1 } else { -1 };
                trace.log("CLK", format!("n{id}'s wall clock steps {step:+} ms"));
                clock.step_wall(step);
            }
        }
    }
}

/// How long the membership nemesis waits for the leader to answer a change.
const CHANGE_WAIT: Duration = Duration::from_secs(2);

/// The leader's membership as the nemesis sees it.
struct Seen {
    leader: NodeId,
    raft: Raft,
    /// The voters of its last (or only) configuration.
    voters: BTreeSet<NodeId>,
    /// Voters and learners.
    members: BTreeSet<NodeId>,
    /// A joint configuration: a change whose leader went before it was done. openraft leaves
    /// it so (a new leader does not finish it); a change from it starts from its new half.
    joint: bool,
    /// Whether the leader may make a change, by the rule steward's member commands keep
    /// (`raft::types::may_change_membership`): not when it removed itself, though it leads on
    /// until another is elected.
    may_change: bool,
}

/// What the leader holds; none while no node leads.
fn membership(cluster: &Cluster) -> Option<Seen> {
    let (leader, raft) = cluster.leader()?;
    let m = raft.metrics();
    let m = m.borrow_watched();
    let membership = m.membership_config.membership();
    let configs = membership.get_joint_config();
    Some(Seen {
        leader,
        raft: raft.clone(),
        voters: configs.last().cloned().unwrap_or_default(),
        members: membership.nodes().map(|(id, _)| *id).collect(),
        joint: configs.len() > 1,
        may_change: may_change_membership(&m, leader),
    })
}

/// The next change towards every node a voter, or away from it, from what the leader holds:
/// a joint configuration is finished first.
fn next_change(cluster: &Cluster, seen: &Seen, remove: NodeId) -> Change {
    if seen.joint {
        return Change::Finish(seen.voters.clone());
    }
    match cluster.ids.iter().find(|id| !seen.voters.contains(id)) {
        None => Change::Remove(remove),
        Some(&id) if !seen.members.contains(&id) => Change::AddLearner(id),
        Some(&id) => Change::Promote(id),
    }
}

/// One membership change on the leader, as steward's member commands make it
/// (`server::cluster::members`): a learner added without waiting for it, a learner promoted, a
/// voter removed. Answers whether the change was committed.
async fn change(cluster: &Cluster, leader: NodeId, raft: &Raft, what: Change) -> bool {
    let who = "NEM";
    cluster.trace.log(who, format!("{what} (on n{leader})"));
    let done = match what.clone() {
        Change::AddLearner(id) => {
            tokio::time::timeout(CHANGE_WAIT, raft.add_learner(id, cluster.addr(id), false))
                .await
                .map(|r| r.map(|_| ()).map_err(|e| e.to_string()))
        }
        Change::Promote(id) => {
            change_members(raft, ChangeMembers::AddVoterIds(BTreeSet::from([id]))).await
        }
        Change::Finish(voters) => {
            change_members(raft, ChangeMembers::ReplaceAllVoters(voters)).await
        }
        Change::Remove(id) => {
            change_members(raft, ChangeMembers::RemoveVoters(BTreeSet::from([id]))).await
        }
    };
    let (ok, outcome) = match done {
        Ok(Ok(())) => (true, "committed".to_string()),
        Ok(Err(e)) => (false, format!("refused: {e}")),
        Err(_) => (false, format!("no answer within {CHANGE_WAIT:?}")),
    };
    cluster.trace.log(who, format!("{what}: {outcome}"));
    ok
}

/// `raft.change_membership(members)`, waited for at most [`CHANGE_WAIT`].
async fn change_members(
    raft: &Raft,
    members: ChangeMembers,
) -> Result<Result<(), String>, tokio::time::error::Elapsed> {
    tokio::time::timeout(CHANGE_WAIT, raft.change_membership(members, false))
        .await
        .map(|r| r.map(|_| ()).map_err(|e| e.to_string()))
}

#[derive(Clone)]
enum Change {
    AddLearner(NodeId),
    Promote(NodeId),
    Remove(NodeId),
    /// A joint configuration made uniform: these voters.
    Finish(BTreeSet<NodeId>),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::AddLearner(id) => write!(f, "add n{id} as a learner"),
            Change::Promote(id) => write!(f, "promote n{id} to voter"),
            Change::Remove(id) => write!(f, "remove n{id} from the membership"),
            Change::Finish(voters) => write!(f, "finish the joint membership: voters {voters:?}"),
        }
    }
}

/// The membership nemesis, on a schedule of its own: a voter is removed (the leader too, now
/// and then) and sometimes its machine is replaced by an empty one; later it is added back as a
/// learner, which the leader sends the log or, when the log it needs is purged, a snapshot; later
/// still it is promoted. One node at most is out of the voters at a time, so a majority of the
/// full set is always a majority of the voters too.
pub async fn members(cluster: Arc<Cluster>, mut rng: SmallRng, until: tokio::time::Instant) {
    let ids = cluster.ids.clone();
    loop {
        let pause = Duration::from_millis(rng.random_range(200..1_200));
        if tokio::time::Instant::now() + pause >= until {
            return;
        }
        tokio::time::sleep(pause).await;
        // Drawn whatever the leader's view, so that the draws do not depend on it.
        let victim = pick(&mut rng, &ids);
        let replace = rng.random_bool(0.5);
        let restart_after = Duration::from_millis(rng.random_range(50..1_500));
        let Some(seen) = membership(&cluster) else {
            continue;
        };
        let what = next_change(&cluster, &seen, victim);
        if !seen.may_change {
            cluster.trace.log(
                "NEM",
                format!(
                    "{what} (on n{}): refused: the leader is not a voter of its membership",
                    seen.leader
                ),
            );
            continue;
        }
        let committed = change(&cluster, seen.leader, &seen.raft, what.clone()).await;
        if let (true, Change::Remove(id), true) = (committed, what, replace) {
            // The removal is committed: the node is out of every majority from now on.
            cluster.replace_machine(id);
            restart_later(&cluster, id, restart_after);
        }
    }
}

/// Every node a voter again, after the faults: what is left out is added and promoted.
pub async fn restore_members(cluster: &Cluster) {
    let deadline = tokio::time::Instant::now() + CHANGE_WAIT * 4;
    while tokio::time::Instant::now() < deadline {
        let Some(seen) = membership(cluster).filter(|seen| seen.may_change) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if !seen.joint && cluster.ids.iter().all(|id| seen.voters.contains(id)) {
            return;
        }
        let what = next_change(cluster, &seen, 0);
        if !change(cluster, seen.leader, &seen.raft, what).await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    cluster.trace.log(
        "NEM",
        "the membership is not whole again: settling will tell",
    );
}

/// Ends every fault: the network is whole and calm, every node runs and is a voter.
pub async fn heal(cluster: &Cluster) {
    cluster.trace.log("NEM", "heal everything");
    cluster.net.heal();
    for &id in &cluster.ids {
        if let Err(e) = cluster.start(id).await {
            cluster
                .trace
                .log(&format!("n{id}"), format!("did not start: {e}"));
        }
    }
    restore_members(cluster).await;
}
