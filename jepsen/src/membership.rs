//! The membership nemesis's two halves, through the normal Cluster API: take the member in a
//! slot out of the cluster (remove it, then stop its process), and later bring a fresh member
//! into that slot (start it with a new id and an empty data dir, add it as a learner, promote
//! it). Between the two the cluster runs one voter short, while the workload goes on.
//!
//! Each change is retried until it is known to have happened or `CHANGE_DEADLINE` passes:
//! leadership may move mid-change (removing the leader makes it step down, and its answer is
//! Unavailable), a concurrent change is refused with FailedPrecondition, and a change whose
//! answer was lost may already be done, which the next attempt (or the member list) shows.

use std::time::Duration;

use steward::client::Client;
use tokio::time::Instant;
use tonic::Code;

use crate::cluster::NetCluster;

/// How long one removal or one addition may take before the nemesis gives up (an error that
/// ends the run: a healthy cluster that cannot change membership is a finding in itself).
pub const CHANGE_DEADLINE: Duration = Duration::from_secs(60);
/// Deadline of one admin call (adding a learner waits for it to catch up).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

fn admin(cluster: &NetCluster) -> anyhow::Result<Client> {
    Client::connect_with_timeout(&cluster.client_endpoints(), ADMIN_TIMEOUT)
}

/// Removes the member in slot `id` from the cluster, then kills its process. Returns its Raft
/// id.
pub async fn remove(cluster: &mut NetCluster, id: u64) -> anyhow::Result<u64> {
    let raft_id = cluster
        .raft_id(id)
        .ok_or_else(|| anyhow::anyhow!("no node {id}"))?;
    let client = admin(cluster)?;
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let err = match client.remove_member(raft_id).await {
            Ok(_) => break,
            // Not a member (any more): an earlier attempt whose answer was lost did it.
            Err(e) if e.code() == Code::NotFound && attempts > 1 => break,
            Err(e) => e,
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "removing node {id} (id {raft_id}) did not succeed within {CHANGE_DEADLINE:?} ({attempts} attempts); last answer: {}: {}",
            err.code(),
            err.message()
        );
        tracing::info!(node = id, raft_id, error = %err, "membership: remove failed; retrying");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    cluster.kill(id);
    Ok(raft_id)
}

/// Starts a fresh member in slot `id` (whose process must be stopped) and makes it a voter:
/// add as learner (returns once it has caught up), then promote. Returns its Raft id.
pub async fn add_fresh(cluster: &mut NetCluster, id: u64) -> anyhow::Result<u64> {
    let raft_id = cluster.spawn_fresh_member(id)?;
    let (peer_addr, client_addr) = cluster.member_addrs(id);
    let client = admin(cluster)?;
    let deadline = Instant::now() + CHANGE_DEADLINE;
    let mut attempts = 0u32;
    let mut last = String::from("none");
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "adding node {id} as member {raft_id} did not succeed within {CHANGE_DEADLINE:?} ({attempts} attempts); last answer: {last}"
        );
        attempts += 1;
        // Where it stands decides the next step, so a retry never repeats a step that was done.
        let step = match client.member_list().await {
            Ok(list) => match list.members.iter().find(|m| m.id == raft_id) {
                Some(m) if m.voter => return Ok(raft_id),
                Some(_) => client.promote(raft_id).await.map(drop),
                None => client
                    .add_learner(raft_id, &peer_addr, &client_addr)
                    .await
                    .map(drop),
            },
            Err(e) => Err(e),
        };
        if let Err(err) = step {
            last = format!("{}: {}", err.code(), err.message());
            tracing::info!(node = id, raft_id, error = %err, "membership: add failed; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}
