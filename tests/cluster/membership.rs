//! Membership under a write load: grow 3 -> 5, shrink 5 -> 3, nothing acknowledged lost; a
//! removed id is never accepted again.

use std::time::Duration;

use steward::proto::v1::*;
use tonic::Code;

use crate::harness::*;

async fn voters(cluster: &TestCluster, via: u64) -> Vec<u64> {
    let mut c = cluster.cluster(via).await;
    let list = c
        .member_list(MemberListRequest {})
        .await
        .expect("member list")
        .into_inner();
    list.members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.id)
        .collect()
}

/// Removes `id`, retrying while leadership moves (a removed leader steps down mid-request, and
/// its answer is Unavailable); NotFound on a retry means an earlier attempt did it.
async fn remove_with_retry(cluster: &TestCluster, via: u64, id: u64) {
    for attempt in 0..10 {
        let mut admin = cluster.cluster(via).await;
        match admin.remove_member(RemoveMemberRequest { id }).await {
            Ok(_) => return,
            Err(e) if e.code() == Code::NotFound && attempt > 0 => return,
            Err(e) if e.code() == Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("remove {id}: {e:?}"),
        }
    }
    panic!("remove {id}: still Unavailable after 10 attempts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_to_five_and_shrink_to_three_under_load() {
    let mut cluster = TestCluster::start(3).await;
    let load = Load::start((1..=3).map(|id| cluster.endpoint(id)).collect(), 4, "m");
    load.wait_acked(50).await;

    for id in [4, 5] {
        let (peer, client) = cluster.prepare_joiner(id);
        cluster.spawn(id);
        let mut admin = cluster.cluster(1).await;
        let reply = admin
            .add_learner(AddLearnerRequest {
                id,
                peer_addr: peer,
                client_addr: client,
            })
            .await
            .expect("add learner")
            .into_inner();
        let me = reply
            .members
            .iter()
            .find(|m| m.id == id)
            .expect("learner listed");
        assert!(!me.voter);
        // Adding it twice is refused.
        let again = admin
            .add_learner(AddLearnerRequest {
                id,
                peer_addr: cluster.nodes[&id].config.peer_addr.clone(),
                client_addr: cluster.nodes[&id].config.client_addr.clone(),
            })
            .await
            .expect_err("duplicate learner");
        assert_eq!(again.code(), Code::AlreadyExists);
        admin.promote(PromoteRequest { id }).await.expect("promote");
        load.endpoints
            .lock()
            .expect("eps")
            .push(cluster.endpoint(id));
    }
    assert_eq!(voters(&cluster, 2).await, vec![1, 2, 3, 4, 5]);
    let mid = load.acked();
    load.wait_acked(mid + 50).await;

    // Shrink: remove two of the original nodes, whoever leads.
    for id in [1, 2] {
        let via = cluster
            .running()
            .into_iter()
            .find(|n| *n > 2)
            .expect("a remaining node");
        *load.endpoints.lock().expect("eps") = cluster
            .running()
            .into_iter()
            .filter(|n| *n > 2)
            .map(|n| cluster.endpoint(n))
            .collect();
        remove_with_retry(&cluster, via, id).await;
    }
    wait_for("3 voters", Duration::from_secs(20), || async {
        let v = voters(&cluster, 3).await;
        (v == vec![3, 4, 5]).then_some(())
    })
    .await;
    cluster.kill(1);
    cluster.kill(2);
    let leader = cluster.wait_leader_among(&[3, 4, 5]).await;
    let after = load.acked();
    load.wait_acked(after + 50).await;
    let acks = load.stop().await;

    let mut c = cluster.res(leader).await;
    let (items, _) = list_all(&mut c, "load=yes", 0).await;
    assert_all_present(&acks, &items);

    // A removed id is retired for good.
    let mut admin = cluster.cluster(leader).await;
    let reuse = admin
        .add_learner(AddLearnerRequest {
            id: 1,
            peer_addr: "127.0.0.1:1".into(),
            client_addr: "127.0.0.1:2".into(),
        })
        .await
        .expect_err("retired id");
    assert_eq!(reuse.code(), Code::FailedPrecondition, "{reuse:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_membership_changes_are_refused_and_a_dead_learner_times_out() {
    let mut cluster = TestCluster::start(3).await;
    // Node 4 is configured but not running: adding it cannot finish (it never catches up).
    let (peer, client) = cluster.prepare_joiner(4);
    let mut admin = cluster.cluster(1).await;
    let slow = {
        let channel = tonic::transport::Endpoint::from_shared(cluster.endpoint(1))
            .expect("endpoint")
            .timeout(Duration::from_secs(60))
            .connect_lazy();
        let mut admin = steward::proto::v1::cluster_client::ClusterClient::new(channel);
        tokio::spawn(async move {
            admin
                .add_learner(AddLearnerRequest {
                    id: 4,
                    peer_addr: peer,
                    client_addr: client,
                })
                .await
        })
    };
    // Node 4 shows up as a learner while the add still waits for it to catch up ...
    wait_for(
        "node 4 listed as a learner",
        Duration::from_secs(10),
        || {
            let mut admin = admin.clone();
            async move {
                let list = admin
                    .member_list(MemberListRequest {})
                    .await
                    .ok()?
                    .into_inner();
                list.members
                    .iter()
                    .any(|m| m.id == 4 && !m.voter)
                    .then_some(())
            }
        },
    )
    .await;
    // ... and while it is in progress, another change is refused, not queued or mixed. (Removing
    // an unknown node would otherwise be NotFound: the refusal comes first.)
    let refused = admin
        .remove_member(RemoveMemberRequest { id: 99 })
        .await
        .expect_err("concurrent change");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("membership change is in progress"),
        "{refused:?}"
    );
    // The dead learner's add ends with DeadlineExceeded (election_timeout_ms_max * 10 = 12 s here).
    let err = slow
        .await
        .expect("task")
        .expect_err("learner never catches up");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // Once it runs, it catches up; the lock is free again and it can be promoted.
    cluster.spawn(4);
    wait_for("learner 4 to catch up", Duration::from_secs(20), || {
        let mut admin = admin.clone();
        async move {
            let list = admin
                .member_list(MemberListRequest {})
                .await
                .ok()?
                .into_inner();
            let leader_last = list.last_log_index;
            list.members
                .iter()
                .find(|m| m.id == 4 && m.matched_index >= leader_last)
                .map(|_| ())
        }
    })
    .await;
    admin
        .promote(PromoteRequest { id: 4 })
        .await
        .expect("promote after catch-up");
    assert_eq!(voters(&cluster, 1).await, vec![1, 2, 3, 4]);
}
