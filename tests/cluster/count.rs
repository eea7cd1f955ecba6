//! `Resources.Count` on a real 3-node cluster: Service Fabrik's state labels and status fields
//! counted from every node, linearizably, with namespaces and selectors; the CLI's exact JSON.

use serde_json::{json, Value};
use steward::client::{Client, Consistency};
use tonic::Code;

use crate::harness::*;

fn client(cluster: &TestCluster, id: u64) -> Client {
    Client::connect(&[cluster.endpoint(id)]).expect("client")
}

fn director(ns: &str, name: &str, state: &str, tier: Option<&str>) -> Value {
    let mut labels = json!({"state": state});
    if let Some(t) = tier {
        labels["tier"] = json!(t);
    }
    json!({"kind": "Director", "apiVersion": "deployment.servicefabrik.io/v1alpha1",
           "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {}})
}

fn counts(reply: &steward::proto::v1::CountReply) -> Vec<(String, u64)> {
    reply
        .buckets
        .iter()
        .map(|b| (b.value.clone(), b.count))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_by_label_and_status_from_every_node() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let nodes = cluster.running();
    let api = client(&cluster, nodes[0]);
    let objects = [
        ("default", "d1", "in_queue", Some("gold")),
        ("default", "d2", "in_queue", None),
        ("default", "d3", "succeeded", Some("gold")),
        ("other", "d4", "succeeded", None),
        ("other", "d5", "failed", None),
    ];
    for (ns, name, state, tier) in objects {
        let mut created = api
            .create(&director(ns, name, state, tier))
            .await
            .expect("create");
        // The manager's own view in status: in progress for all but d5.
        created["status"] = json!({"lastOperation": {"state": if name == "d5" { "failed" } else { "in progress" }}});
        api.update_status(&created, 0).await.expect("status");
    }
    // Written through node 1, counted through every node right away.
    for id in &nodes {
        let c = client(&cluster, *id);
        let all = c
            .count("Director", "", "", "label:state", Consistency::Linearizable)
            .await
            .expect("count");
        assert_eq!(
            counts(&all),
            [
                ("failed".to_string(), 1),
                ("in_queue".into(), 2),
                ("succeeded".into(), 2)
            ]
        );
        assert_eq!((all.total, all.missing), (5, 0));
        let tier = c
            .count("Director", "", "", "label:tier", Consistency::Linearizable)
            .await
            .expect("count");
        assert_eq!(counts(&tier), [("gold".to_string(), 2)]);
        assert_eq!((tier.total, tier.missing), (5, 3));
    }
    let ns = api
        .count(
            "Director",
            "other",
            "",
            "label:state",
            Consistency::Linearizable,
        )
        .await
        .expect("count");
    assert_eq!(
        counts(&ns),
        [("failed".to_string(), 1), ("succeeded".into(), 1)]
    );
    let selected = api
        .count(
            "Director",
            "",
            "tier=gold",
            "label:state",
            Consistency::Linearizable,
        )
        .await
        .expect("count");
    assert_eq!(
        counts(&selected),
        [("in_queue".to_string(), 1), ("succeeded".into(), 1)]
    );
    let by_status = api
        .count(
            "Director",
            "",
            "",
            "status:lastOperation.state",
            Consistency::Serializable,
        )
        .await
        .expect("count");
    assert_eq!(
        counts(&by_status),
        [("failed".to_string(), 1), ("in progress".into(), 4)]
    );
    // A deleted object leaves the counts.
    api.delete("Director", "default", "d2", 0)
        .await
        .expect("delete");
    let after = client(&cluster, nodes[2])
        .count("Director", "", "", "label:state", Consistency::Linearizable)
        .await
        .expect("count");
    assert_eq!(
        counts(&after),
        [
            ("failed".to_string(), 1),
            ("in_queue".into(), 1),
            ("succeeded".into(), 2)
        ]
    );
    // Bad input names the field.
    for bad in ["state", "label:", "status:a..b"] {
        let e = api
            .count("Director", "", "", bad, Consistency::Linearizable)
            .await
            .expect_err("bad by");
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().starts_with("by:"), "{bad}: {e:?}");
    }
    let e = api
        .count("", "", "", "label:state", Consistency::Linearizable)
        .await
        .expect_err("no kind");
    assert_eq!(e.code(), Code::InvalidArgument);

    // The CLI: exact JSON for scripts.
    let endpoint = cluster.endpoint(nodes[1]);
    let out = steward_cli(
        &endpoint,
        None,
        &[
            "count",
            "Director",
            "-A",
            "--by",
            "label:state",
            "-o",
            "json",
        ],
    )
    .await;
    let mut printed: Value = serde_json::from_str(&out).expect("JSON");
    assert!(
        printed["revision"].as_u64().is_some_and(|r| r > 0),
        "{printed}"
    );
    printed["revision"] = json!(0);
    assert_eq!(
        printed,
        json!({"kind": "Director", "by": "label:state", "counts": {"failed": 1, "in_queue": 1, "succeeded": 2},
               "missing": 0, "total": 4, "revision": 0})
    );
}
