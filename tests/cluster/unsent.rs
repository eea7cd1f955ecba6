//! Writes no leader took, and answers within the caller's deadline (issue 22, point 3 and 5).
//!
//! A follower holds a write it could not send to the leader (a leader just killed refuses the
//! connection) and sends it to the next leader while the caller waits; when none comes before
//! the caller's deadline it answers "not applied" before that deadline, never the caller's own
//! timeout. `Cluster.Status` answers within a short deadline with a node paused, marking it.
//! These use the generated gRPC clients directly, not steward's Rust client, which would hide
//! a server's refusal behind its own retries.

use std::time::{Duration, Instant};

use steward::client::{reason, retry_delay, ErrorReason};
use steward::proto::v1::{ClusterStatusRequest, CreateRequest};
use tonic::{Code, Request};

use crate::harness::{director, TestCluster};
use crate::observability::http_get;

/// A Create request for `name` carrying `deadline` as its `grpc-timeout`.
fn create_within(name: &str, deadline: Duration) -> Request<CreateRequest> {
    let mut request = Request::new(CreateRequest {
        object_json: director(name, &[]),
        ..Default::default()
    });
    request.set_timeout(deadline);
    request
}

/// Sum of a counter's samples in a node's /metrics text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// kill -9 of the leader, then writes through a follower at once: the follower still names
/// the dead leader, whose port refuses the connection, until the others elect a new one. Each
/// write is held and sent to the new leader within its 10 s deadline, so the caller sees no
/// error at all (before: Unavailable "not sent", or "outcome unknown" when the name did not
/// resolve), and the follower counts the writes it sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_a_follower_could_not_send_reach_the_next_leader_within_their_deadline() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let follower = cluster.followers().await[0];
    let mut res = cluster.res(follower).await;
    // The follower's connection to the leader exists before the kill.
    res.create(create_within("before-kill", Duration::from_secs(10)))
        .await
        .expect("a write through the follower");

    cluster.kill(leader);
    for i in 0..5 {
        let started = Instant::now();
        let reply = res
            .create(create_within(
                &format!("after-kill-{i}"),
                Duration::from_secs(10),
            ))
            .await;
        assert!(
            reply.is_ok(),
            "write {i} after the leader's kill failed after {:?}: {:?}",
            started.elapsed(),
            reply.err()
        );
    }
    let new_leader = cluster.wait_leader_among(&cluster.running()).await;
    assert_ne!(new_leader, leader);
    let (_, metrics) = http_get(&cluster.metrics_addr(follower), "/metrics").await;
    assert!(
        counter(&metrics, "steward_proposals_resent_total") >= 1,
        "the first write after the kill went to the dead leader and was sent again:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("proposals_"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// With two of three nodes dead no leader can be elected: a write to the survivor with a
/// 1.5 s deadline is answered Unavailable, marked not applied, before that deadline, not with
/// the caller's own timeout (before: Cancelled "Timeout expired" after the full 1.5 s, since
/// the node waited 5 s for a leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_leader_can_take_is_answered_not_applied_before_the_callers_deadline() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let survivor = cluster.followers().await[0];
    for id in [1, 2, 3] {
        if id != survivor {
            cluster.kill(id);
        }
    }
    assert!(!cluster.running().contains(&leader));
    let mut res = cluster.res(survivor).await;
    let deadline = Duration::from_millis(1500);
    let started = Instant::now();
    let status = res
        .create(create_within("no-quorum", deadline))
        .await
        .expect_err("no leader can be elected");
    let took = started.elapsed();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        reason(&status),
        Some(ErrorReason::NotApplied),
        "the reason says it may be sent again: {status:?}"
    );
    assert!(
        retry_delay(&status).is_some(),
        "with a RetryInfo: {status:?}"
    );
    assert!(
        status.metadata().get("x-steward-not-applied").is_some(),
        "and the trailer older clients read: {status:?}"
    );
    assert!(
        took < deadline,
        "answered after {took:?}, past the deadline"
    );
    let (_, metrics) = http_get(&cluster.metrics_addr(survivor), "/metrics").await;
    assert!(counter(&metrics, "steward_proposals_unsent_total") >= 1);
}

/// A paused node (SIGSTOP) takes the connection and never answers: Cluster.Status asked with a
/// 400 ms deadline still answers in time, the paused node given as unreachable with why
/// (before: each node was waited for up to 1 s, so the caller never got an answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_answers_within_a_short_deadline_with_a_node_paused() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let asked = cluster.followers().await[0];
    let paused = [1, 2, 3]
        .into_iter()
        .find(|&id| id != asked)
        .expect("another node");
    cluster.signal(paused, libc::SIGSTOP);
    let mut client = cluster.cluster(asked).await;
    let mut request = Request::new(ClusterStatusRequest {});
    request.set_timeout(Duration::from_millis(400));
    let started = Instant::now();
    let reply = client.status(request).await;
    let took = started.elapsed();
    cluster.signal(paused, libc::SIGCONT);
    let status = reply.expect("an answer within the deadline").into_inner();
    assert!(took < Duration::from_millis(400), "took {took:?}");
    let node = status
        .nodes
        .iter()
        .find(|n| n.id == paused)
        .expect("the paused node is listed");
    assert_eq!(node.state, "unreachable", "{node:?}");
    assert!(node.error.contains("no answer within"), "{node:?}");
    let me = status.nodes.iter().find(|n| n.id == asked).expect("itself");
    assert!(me.error.is_empty(), "{me:?}");
}
