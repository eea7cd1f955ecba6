//! Faults: kill -9 the leader under load, restart and catch up, catch up from a snapshot.

use std::time::{Duration, Instant};

use steward::proto::v1::*;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leader_under_load_loses_nothing_and_restarted_node_catches_up() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let endpoints = (1..=3).map(|id| cluster.endpoint(id)).collect();
    let load = Load::start(endpoints, 8, "k");
    load.wait_acked(200).await;

    let killed_at = Instant::now();
    cluster.kill(leader);
    let survivors: Vec<u64> = cluster.running();
    let new_leader = cluster.wait_leader_among(&survivors).await;
    assert_ne!(new_leader, leader);
    // Time from kill -9 to the first acknowledgement of a write SENT after it (replies the
    // dead leader had already sent may still arrive after the kill; they don't count).
    let failover = wait_for(
        "a write sent after the kill to be acknowledged",
        Duration::from_secs(30),
        || async {
            let acks = load.acks.lock().expect("acks");
            acks.names
                .iter()
                .filter(|(sent, _, _)| *sent > killed_at)
                .map(|(_, acked, _)| *acked - killed_at)
                .min()
        },
    )
    .await;
    println!(
        "FAILOVER: leader kill -9 to first acknowledged write: {} ms",
        failover.as_millis()
    );
    let before = load.acked();
    load.wait_acked(before + 200).await;
    let acks = load.stop().await;

    let mut c = cluster.res(new_leader).await;
    let (items, _) = list_all(&mut c, "load=yes", 0).await;
    assert_all_present(&acks, &items);

    // The killed node comes back on its data and catches up.
    cluster.spawn(leader);
    let target = cluster.applied(new_leader).await.expect("leader applied");
    wait_for(
        "restarted node to catch up",
        Duration::from_secs(30),
        || async { cluster.applied(leader).await.filter(|a| *a >= target) },
    )
    .await;
    // Every acknowledged write is in the restarted node's own state (a serializable read: what
    // it has applied, not what the leader would answer).
    let mut r = cluster.res(leader).await;
    let (items, _) = list_all_with(&mut r, "load=yes", 500, Consistency::Serializable).await;
    assert_all_present(&acks, &items);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_behind_the_purged_log_catches_up_from_a_snapshot() {
    // Snapshot every 50 entries, keep 10 behind it: a node down for 300 writes can't be fed logs.
    let mut cluster = TestCluster::start_with(3, test_raft(50, 10), Default::default()).await;
    let leader = cluster.wait_leader().await;
    let lagger = cluster.followers().await[0];
    let mut c = cluster.res(leader).await;
    for i in 0..10 {
        create(&mut c, director(&format!("pre{i}"), &[]))
            .await
            .expect("create");
    }
    let lagger_applied = wait_for("lagger applied", Duration::from_secs(10), || {
        cluster.applied(lagger)
    })
    .await;
    cluster.kill(lagger);
    for i in 0..300 {
        create(&mut c, director(&format!("snap{i}"), &[]))
            .await
            .expect("create");
    }
    let status = wait_for(
        "leader purged past the lagger",
        Duration::from_secs(30),
        || async {
            let mut cc = cluster.cluster(leader).await;
            let s = cc.status(ClusterStatusRequest {}).await.ok()?.into_inner();
            s.nodes
                .into_iter()
                .find(|n| n.id == leader)
                .filter(|n| n.purged_index > lagger_applied + 10)
        },
    )
    .await;

    cluster.spawn(lagger);
    let view = wait_for("lagger to catch up", Duration::from_secs(30), || async {
        let mut cc = cluster.cluster(lagger).await;
        let s = cc.status(ClusterStatusRequest {}).await.ok()?.into_inner();
        s.nodes
            .into_iter()
            .find(|n| n.id == lagger)
            .filter(|n| n.applied_index >= status.applied_index)
    })
    .await;
    assert!(
        view.snapshot_index > lagger_applied,
        "the lagger installed a snapshot ({} > {lagger_applied})",
        view.snapshot_index
    );
    let mut r = cluster.res(lagger).await;
    let n = r
        .list(ListRequest {
            kind: "Director".into(),
            limit: 1000,
            consistency: Consistency::Serializable as i32,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner()
        .objects_json
        .len();
    assert_eq!(n, 310);
}
