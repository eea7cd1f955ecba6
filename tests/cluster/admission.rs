//! The leader's admission holds for forwarded writes too: a write sent to a follower passes its
//! own admission there and the leader's again, and a refusal by the leader's comes back to the
//! client as such, marked not applied (it may be sent again).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use steward::config::Limits;
use tokio::sync::mpsc;

use crate::harness::{create, director, get, test_raft, TestCluster};

#[tokio::test(flavor = "multi_thread")]
async fn forwarded_writes_pass_the_leaders_pending_bound() {
    // One proposal in flight per node: two followers forwarding at once exceed the leader's.
    let limits = Limits {
        max_pending_proposals: 1,
        ..Limits::default()
    };
    let cluster = TestCluster::start_with(3, test_raft(10_000, 1_000), limits).await;
    let leader = cluster.wait_leader().await;
    let needle = format!("on node {leader} (limits.max_pending_proposals = 1)");
    let stop = Arc::new(AtomicBool::new(false));
    let (found, mut refusals) = mpsc::unbounded_channel();
    for follower in cluster.followers().await {
        for writer in 0..2 {
            let (mut client, stop, found, needle) = (
                cluster.res(follower).await,
                stop.clone(),
                found.clone(),
                needle.clone(),
            );
            tokio::spawn(async move {
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let name = format!("f{follower}-w{writer}-{i}");
                    if let Err(status) = create(&mut client, director(&name, &[])).await {
                        if status.message().contains(&needle) {
                            let _ = found.send((name, status));
                        }
                    }
                }
            });
        }
    }
    let refused = tokio::time::timeout(Duration::from_secs(60), refusals.recv()).await;
    stop.store(true, Ordering::Relaxed);
    let (name, status) = refused
        .expect("the leader refused a forwarded write within 60 s")
        .expect("writers running");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status
            .metadata()
            .get(steward::server::errors::NOT_APPLIED)
            .and_then(|v| v.to_str().ok()),
        Some("true"),
        "{status:?}"
    );
    // Not applied indeed: the object is nowhere, read through the leader.
    let mut reader = cluster.res(leader).await;
    let missing = get(
        &mut reader,
        &name,
        steward::proto::v1::Consistency::Linearizable,
    )
    .await
    .expect_err("never created");
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
}
