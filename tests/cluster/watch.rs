//! Watch: list-then-watch, resume from a revision, several watchers agree, too-old revisions,
//! bookmarks, and a slow watcher cut off without stalling writes.

use std::time::Duration;

use steward::config::Limits;
use steward::proto::v1::*;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::harness::*;

type Events = tonic::Streaming<WatchEvent>;

async fn watch(
    c: &mut Res,
    start_revision: u64,
    bookmark_interval_ms: u32,
) -> Result<Events, tonic::Status> {
    c.watch(WatchRequest {
        kind: "Director".into(),
        namespace: String::new(),
        label_selector: String::new(),
        start_revision,
        bookmark_interval_ms,
    })
    .await
    .map(|r| r.into_inner())
}

/// The next `n` non-bookmark events, within a deadline.
async fn next_events(s: &mut Events, n: usize) -> Vec<WatchEvent> {
    let mut out = vec![];
    while out.len() < n {
        let e = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("event within 10s")
            .expect("stream open")
            .expect("event ok");
        if e.r#type != EventType::Bookmark as i32 {
            out.push(e);
        }
    }
    out
}

fn txn_creates(names: impl Iterator<Item = String>, spec_bytes: usize) -> TxnRequest {
    TxnRequest {
        ops: names
            .map(|n| TxnOp {
                op: Some(txn_op::Op::Create(CreateRequest {
                    object_json: serde_json::json!({
                        "kind": "Director", "apiVersion": "v1",
                        "metadata": {"name": n}, "spec": {"blob": "y".repeat(spec_bytes)}
                    })
                    .to_string(),
                    ..Default::default()
                })),
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_resume_too_old_and_bookmarks() {
    let limits = Limits {
        watch_history: 20,
        ..Limits::default()
    };
    let cluster = TestCluster::start_with(3, test_raft(10_000, 1_000), limits).await;
    let leader = cluster.wait_leader().await;
    let follower = cluster.followers().await[0];
    let mut c = cluster.res(leader).await;
    for i in 0..5 {
        create(&mut c, director(&format!("w{i}"), &[]))
            .await
            .expect("create");
    }

    // List, then watch from the list's revision + 1 on a follower: nothing missed.
    let (items, list_rev) = list_all(&mut c, "", 0).await;
    assert_eq!(items.len(), 5);
    let mut f = cluster.res(follower).await;
    let mut w1 = watch(&mut f, list_rev + 1, 0).await.expect("watch");
    let mut w2 = watch(&mut c, list_rev + 1, 0)
        .await
        .expect("second watcher");
    create(&mut c, director("w5", &[])).await.expect("create");
    let mut w0 = get(&mut c, "w0", Consistency::Linearizable)
        .await
        .expect("get");
    w0["spec"]["options"] = "new".into();
    c.update(UpdateRequest {
        object_json: w0.to_string(),
        expected_revision: 0,
        ..Default::default()
    })
    .await
    .expect("update");
    c.delete(DeleteRequest {
        kind: "Director".into(),
        namespace: "default".into(),
        name: "w1".into(),
        expected_revision: 0,
        ..Default::default()
    })
    .await
    .expect("delete");

    let seen1 = next_events(&mut w1, 3).await;
    let seen2 = next_events(&mut w2, 3).await;
    assert_eq!(
        seen1, seen2,
        "two watchers from the same revision see the same events"
    );
    let types: Vec<i32> = seen1.iter().map(|e| e.r#type).collect();
    assert_eq!(
        types,
        vec![
            EventType::Added as i32,
            EventType::Modified as i32,
            EventType::Deleted as i32
        ]
    );
    assert!(seen1[0].revision == list_rev + 1);
    assert!(
        seen1.windows(2).all(|w| w[1].revision == w[0].revision + 1),
        "no gaps: {seen1:?}"
    );

    // Resume from the second event's revision: the stream starts exactly there.
    let mut resumed = watch(&mut f, seen1[1].revision, 0).await.expect("resume");
    let again = next_events(&mut resumed, 2).await;
    assert_eq!(again, seen1[1..].to_vec());

    // An idle watch gets bookmarks carrying the current revision.
    let mut idle = watch(&mut c, 0, 50).await.expect("idle watch");
    let bm = tokio::time::timeout(Duration::from_secs(30), idle.next())
        .await
        .expect("a bookmark")
        .expect("open")
        .expect("ok");
    assert_eq!(bm.r#type, EventType::Bookmark as i32);
    assert!(bm.revision >= seen1[2].revision);

    // Push the start of history past revision 1: watching from it is refused with the current revision.
    c.txn(txn_creates((0..30).map(|i| format!("old{i}")), 10))
        .await
        .expect("txn");
    // (On the leader, which applied the txn before acknowledging it.)
    let too_old = match watch(&mut c, 1, 0).await {
        Err(s) => s,
        Ok(mut s) => s.next().await.expect("an item").expect_err("too old"),
    };
    assert_eq!(too_old.code(), Code::OutOfRange, "{too_old:?}");
    assert!(
        too_old.message().contains("current revision"),
        "{too_old:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_watcher_is_cut_off_and_writes_go_on() {
    let limits = Limits {
        watch_buffer: 8,
        ..Limits::default()
    };
    let cluster = TestCluster::start_with(3, test_raft(10_000, 1_000), limits).await;
    let leader = cluster.wait_leader().await;
    let mut c = cluster.res(leader).await;
    // A watcher that never reads.
    let mut slow = watch(&mut c, 0, 0).await.expect("watch");
    // ~1.2 MB of events: more than transport buffers and the watch buffer hold.
    for batch in 0..12 {
        tokio::time::timeout(
            Duration::from_secs(10),
            c.txn(txn_creates((0..100).map(|i| format!("s{batch}-{i}")), 1000)),
        )
        .await
        .expect("writes are not stalled by a slow watcher")
        .expect("txn");
    }
    // Draining the slow watcher ends in ResourceExhausted naming the limit.
    let mut status = None;
    while let Some(item) = tokio::time::timeout(Duration::from_secs(10), slow.next())
        .await
        .expect("item")
    {
        if let Err(s) = item {
            status = Some(s);
            break;
        }
    }
    let status = status.expect("the slow watcher was cut off");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("watch_buffer"), "{status:?}");
}
