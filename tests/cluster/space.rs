//! Disk quota and compaction: a cluster whose data dirs outgrow `limits.quota_bytes` raises
//! NOSPACE, refuses writes that grow the state on every node with ResourceExhausted naming the
//! limit, still serves reads and deletes; a disarm while still over the quota is undone by the
//! node; after deletes, `steward compact` shrinks every data dir, `steward alarm disarm` lets
//! writes in again, and a node killed and restarted after the compaction recovers everything.

use std::time::Duration;

use steward::config::Limits;
use steward::proto::v1::Consistency;
use tonic::Code;

use crate::harness::{create, get, parse, steward_cli, test_raft, wait_for, Res, TestCluster};
use crate::observability::{http_get, sample};

const QUOTA: u64 = 4 << 20;
const BLOB_BYTES: usize = 64 << 10;

fn blob(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Director",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"data": "x".repeat(BLOB_BYTES)},
    })
    .to_string()
}

/// The alarms `steward alarm list -o json` shows, as (node, kind, reason).
async fn alarms(endpoint: &str) -> Vec<(u64, String, String)> {
    let out = parse(&steward_cli(endpoint, None, &["alarm", "list", "-o", "json"]).await);
    out["alarms"]
        .as_array()
        .expect("alarms")
        .iter()
        .map(|a| {
            (
                a["nodeId"].as_u64().expect("nodeId"),
                a["kind"].as_str().expect("kind").to_string(),
                a["reason"].as_str().expect("reason").to_string(),
            )
        })
        .collect()
}

async fn refused(res: &mut Res, name: &str) -> tonic::Status {
    create(res, blob(name))
        .await
        .expect_err("a write that grows the state is refused while NOSPACE is raised")
}

#[tokio::test(flavor = "multi_thread")]
async fn over_quota_writes_are_refused_until_space_is_won_back_and_the_alarm_disarmed() {
    let limits = Limits {
        quota_bytes: QUOTA,
        space_check_interval_ms: 100,
        ..Limits::default()
    };
    // No automatic snapshot: the log grows until `steward compact`.
    let mut cluster = TestCluster::start_with(3, test_raft(1_000_000, 0), limits).await;
    let leader = cluster.wait_leader().await;
    let endpoint = cluster.endpoint(leader);
    let mut res = cluster.res(leader).await;

    // Fill: some writes succeed, then one is refused, naming the limit.
    let mut written = Vec::new();
    let refusal = loop {
        assert!(
            written.len() < 400,
            "no refusal after {} blobs",
            written.len()
        );
        let name = format!("blob-{}", written.len());
        match create(&mut res, blob(&name)).await {
            Ok(_) => written.push(name),
            Err(status) => break status,
        }
    };
    assert!(written.len() > 5, "refused too early: {refusal:?}");
    println!(
        "refused after {} blobs of {} KiB: {}",
        written.len(),
        BLOB_BYTES >> 10,
        refusal.message()
    );
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    assert!(
        refusal.message().contains("out of space")
            && refusal.message().contains("limits.quota_bytes")
            && refusal.message().contains("steward compact"),
        "{refusal:?}"
    );
    let raised = alarms(&endpoint).await;
    assert!(
        raised
            .iter()
            .all(|(_, kind, reason)| kind == "NOSPACE" && reason.contains("limits.quota_bytes")),
        "{raised:?}"
    );

    // Every node refuses growth; reads and deletes pass.
    for id in cluster.running() {
        let mut node = cluster.res(id).await;
        let status = refused(&mut node, "more").await;
        assert_eq!(
            status.code(),
            Code::ResourceExhausted,
            "node {id}: {status:?}"
        );
        let read = get(&mut node, &written[0], Consistency::Linearizable).await;
        assert!(read.is_ok(), "node {id} read: {read:?}");
    }
    let status_json =
        parse(&steward_cli(&endpoint, None, &["cluster", "status", "-o", "json"]).await);
    assert!(
        status_json["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w
                .as_str()
                .is_some_and(|w| w.starts_with("alarm NOSPACE on node"))),
        "{status_json}"
    );

    // Disarmed while still over the quota: the nodes raise it again.
    steward_cli(&endpoint, None, &["alarm", "disarm"]).await;
    wait_for("the alarm raised again", Duration::from_secs(10), || {
        let endpoint = endpoint.clone();
        async move { (!alarms(&endpoint).await.is_empty()).then_some(()) }
    })
    .await;

    // Win the space back: delete (allowed under the alarm), compact every node, disarm.
    for name in &written {
        steward_cli(&endpoint, None, &["delete", "Director", name]).await;
    }
    println!(
        "{}",
        steward_cli(&endpoint, None, &["cluster", "status"]).await
    );
    let compacted = parse(&steward_cli(&endpoint, None, &["compact", "-o", "json"]).await);
    println!("{compacted}");
    let nodes = compacted["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{compacted}");
    for n in nodes {
        let (before, after) = (
            n["dataBytesBefore"].as_u64().expect("before"),
            n["dataBytesAfter"].as_u64().expect("after"),
        );
        assert_eq!(n["error"], "", "{n}");
        assert!(after < QUOTA && after < before, "{n}");
        assert!(n["purgedIndex"].as_u64() > Some(0), "{n}");
    }
    let table = steward_cli(&endpoint, None, &["alarm", "disarm"]).await;
    assert!(table.starts_with("Disarmed;"), "{table}");
    // Below the quota now, nobody raises it again: writes are accepted.
    let name = "after-compaction";
    wait_for("a write accepted again", Duration::from_secs(10), || {
        let mut res = res.clone();
        async move { create(&mut res, blob(name)).await.ok() }
    })
    .await;
    assert!(alarms(&endpoint).await.is_empty());

    // The metrics say what the node measured.
    let (_, text) = http_get(&cluster.metrics_addr(leader), "/metrics").await;
    let size = sample(&text, "steward_data_dir_size_bytes").expect("data dir size");
    assert!(size > 0.0 && size < QUOTA as f64, "{size}");
    assert!(
        sample(&text, "steward_compactions_total") >= Some(1.0),
        "{text}"
    );

    // Recovery after compaction: a node killed and restarted holds the same state.
    let follower = cluster.followers().await[0];
    cluster.kill(follower);
    cluster.spawn(follower);
    let mut restarted = cluster.res(follower).await;
    let object = wait_for(
        "the restarted node serving",
        Duration::from_secs(20),
        || {
            let mut restarted = restarted.clone();
            async move {
                get(&mut restarted, name, Consistency::Linearizable)
                    .await
                    .ok()
            }
        },
    )
    .await;
    assert_eq!(
        object["spec"]["data"].as_str().map(str::len),
        Some(BLOB_BYTES)
    );
    let gone = get(&mut restarted, &written[0], Consistency::Linearizable).await;
    assert_eq!(gone.map_err(|s| s.code()).err(), Some(Code::NotFound));
}
