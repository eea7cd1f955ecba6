//! Bound 2 across a change of leader to a node that applied the log late (README "Time"):
//! every node counts cluster time from the last stamped entry it applied, at the moment it
//! applied it, so a node that restarted in a quiet spell counts behind by its downtime until
//! the next stamped entry. The leader's checkpoints (`time.checkpoint_interval_ms`) bring that
//! entry; without them the lock below ends as late as the restarted node was down.

use std::time::Duration;

use crate::harness::{wait_for, TestCluster};

use super::holding::{take_lock, watch_ends};

/// The lock's TTL: longer than the downtime and the transfer after it.
const TTL: Duration = Duration::from_secs(10);
/// How long the follower is down while nothing is written: far more than the bound's
/// allowance past the TTL, so a count that lost it shows.
const DOWN_FOR: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lock_ends_in_bound_after_leadership_moves_to_a_node_that_restarted_in_a_quiet_spell(
) {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let endpoints: Vec<String> = cluster
        .running()
        .iter()
        .map(|id| cluster.endpoint(*id))
        .collect();
    let client = steward::client::Client::connect(&endpoints).expect("client");
    // The holder takes the lock and dies: nothing refreshes it, and nothing else is written.
    let held = take_lock(&client, "quiet", TTL).await;
    let restarted = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.kill(restarted);
    tokio::time::sleep(DOWN_FOR).await;
    cluster.spawn(restarted);
    let target = cluster.applied(leader).await.expect("the leader's status");
    wait_for(
        "the restarted node to apply the leader's log",
        Duration::from_secs(20),
        || {
            let cluster = &cluster;
            async move { (cluster.applied(restarted).await? >= target).then_some(()) }
        },
    )
    .await;
    client.transfer_leader(restarted).await.expect("transfer");
    let now_leading = cluster.wait_leader().await;
    assert_eq!(now_leading, restarted, "leadership moved to {restarted}");
    assert!(
        std::time::Instant::now() < held.deadline(),
        "the transfer ended {:?} after the deadline: too slow to test the count",
        held.deadline().elapsed()
    );
    let config = &cluster.nodes[&restarted].config;
    if let Err(out) = watch_ends(std::slice::from_ref(&held), &client, config, 1).await {
        panic!("ended out of bound after leadership moved to restarted node {restarted}:\n{out}");
    }
}
