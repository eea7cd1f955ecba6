//! The rich error model on real RPCs (proto/errors.proto): each refusal carries its
//! ErrorInfo reason (domain "steward") and metadata, decoded as any gRPC client would, and a
//! refusal through a follower carries the same reason as on the leader.

use std::collections::HashMap;
use std::time::Duration;

use steward::client::{reason, ErrorReason};
use steward::proto::v1::*;
use tonic::Code;
use tonic_types::StatusExt;

use crate::harness::*;

/// The reason and metadata `status` carries, failing the test when it has none.
fn info(status: &tonic::Status) -> (ErrorReason, HashMap<String, String>) {
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.domain, "steward", "{status:?}");
    let r = reason(status).unwrap_or_else(|| panic!("unknown reason in {status:?}"));
    (r, info.metadata)
}

fn stale_update(obj: &serde_json::Value, expected_revision: u64) -> UpdateRequest {
    let mut changed = obj.clone();
    changed["spec"]["replicas"] = 2.into();
    UpdateRequest {
        object_json: changed.to_string(),
        expected_revision,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_their_reasons_on_the_leader_and_through_a_follower() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let mut on_leader = cluster.res(leader).await;
    let mut on_follower = cluster.res(followers[0]).await;

    // Create twice: ALREADY_EXISTS, on the leader and through a follower alike.
    let a = create(&mut on_leader, director("a", &[]))
        .await
        .expect("create a");
    for c in [&mut on_leader, &mut on_follower] {
        let err = create(c, director("a", &[])).await.expect_err("duplicate");
        assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
        let (r, meta) = info(&err);
        assert_eq!(r, ErrorReason::AlreadyExists);
        assert_eq!(
            meta.get("resource_type").map(String::as_str),
            Some("object")
        );
    }

    // A stale precondition: REVISION_CONFLICT naming the current revision, the same through
    // the follower (whose write the leader refused).
    let current = rv(&a);
    let mut seen = Vec::new();
    for c in [&mut on_leader, &mut on_follower] {
        let err = c
            .update(stale_update(&a, current + 100))
            .await
            .expect_err("stale");
        assert_eq!(err.code(), Code::Aborted, "{err:?}");
        let (r, meta) = info(&err);
        assert_eq!(r, ErrorReason::RevisionConflict, "{err:?}");
        assert_eq!(
            meta.get("current_revision"),
            Some(&current.to_string()),
            "{meta:?}"
        );
        assert_eq!(
            meta.get("expected_revision"),
            Some(&(current + 100).to_string())
        );
        seen.push((r, meta));
    }
    assert_eq!(seen[0], seen[1], "the follower's answer is the leader's");

    // Invalid arguments name the field, on any node.
    for c in [&mut on_leader, &mut on_follower] {
        let err = c
            .list(ListRequest {
                kind: String::new(),
                ..Default::default()
            })
            .await
            .expect_err("no kind");
        assert_eq!(err.code(), Code::InvalidArgument);
        let (r, meta) = info(&err);
        assert_eq!(r, ErrorReason::InvalidArgument);
        assert_eq!(meta.get("field").map(String::as_str), Some("kind"));
        let bad_name = director("Not_A_Name", &[]);
        let err = create(c, bad_name).await.expect_err("bad name");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        let (r, meta) = info(&err);
        assert_eq!(r, ErrorReason::InvalidArgument);
        assert!(
            meta.get("field").is_some_and(|f| f.contains("name")),
            "{meta:?}"
        );
    }

    // A method no node serves: tonic's own Unimplemented, given a reason on the way out.
    let mut grpc = tonic::client::Grpc::new(cluster.channel(followers[1]).await);
    grpc.ready().await.expect("ready");
    let err = grpc
        .unary::<GetRequest, ObjectReply, _>(
            tonic::Request::new(GetRequest::default()),
            http::uri::PathAndQuery::from_static("/steward.v1.Resources/NoSuchMethod"),
            tonic_prost::ProstCodec::<GetRequest, ObjectReply>::default(),
        )
        .await
        .expect_err("no such method");
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert_eq!(info(&err).0, ErrorReason::InvalidArgument);

    // NOT_FOUND names what is missing.
    let err = get(&mut on_follower, "nope", Consistency::Linearizable)
        .await
        .expect_err("absent");
    let (r, meta) = info(&err);
    assert_eq!((err.code(), r), (Code::NotFound, ErrorReason::NotFound));
    assert_eq!(
        meta.get("resource_type").map(String::as_str),
        Some("object")
    );
}

async fn acquire(
    c: &mut steward::proto::v1::locks_client::LocksClient<tonic::transport::Channel>,
    holder: &str,
    wait_ms: u64,
) -> Result<LockGrant, tonic::Status> {
    c.acquire(AcquireRequest {
        name: "errors-lock".into(),
        mode: LockMode::Write as i32,
        holder: holder.into(),
        ttl_ms: 60_000,
        details_json: String::new(),
        wait_ms,
    })
    .await
    .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_lock_and_an_expired_wait_are_told_apart_from_deadlines() {
    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let mut on_leader = cluster.locks(leader).await;
    let mut on_follower = cluster.locks(followers[0]).await;

    acquire(&mut on_leader, "first", 0)
        .await
        .expect("free lock");
    for c in [&mut on_leader, &mut on_follower] {
        let busy = acquire(c, "second", 0).await.expect_err("held");
        assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
        let (r, meta) = info(&busy);
        assert_eq!(r, ErrorReason::LockBusy, "{busy:?}");
        assert_eq!(meta.get("lock").map(String::as_str), Some("errors-lock"));
        assert_eq!(meta.get("holders").map(String::as_str), Some("1"));
    }

    // Not granted within wait_ms: Aborted with LOCK_WAIT_EXPIRED, never DeadlineExceeded
    // (which a client cannot tell from its own deadline); the client's deadline is far off.
    let mut request = tonic::Request::new(AcquireRequest {
        name: "errors-lock".into(),
        mode: LockMode::Write as i32,
        holder: "waiter".into(),
        ttl_ms: 60_000,
        details_json: String::new(),
        wait_ms: 300,
    });
    request.set_timeout(Duration::from_secs(30));
    let expired = on_follower.acquire(request).await.expect_err("not granted");
    assert_eq!(expired.code(), Code::Aborted, "{expired:?}");
    let (r, meta) = info(&expired);
    assert_eq!(r, ErrorReason::LockWaitExpired, "{expired:?}");
    assert_eq!(meta.get("wait_ms").map(String::as_str), Some("300"));
    assert!(steward::client::lock_wait_expired(&expired));
}
