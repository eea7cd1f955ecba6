//! Reservations on a real 3-node cluster (ThreeFold's provision engine, seed 003): a resource
//! that carries a reservation is decommissioned, once, when it ends or is marked `toDelete`; the
//! decommission is a `delete` operation a registered worker runs; per-node counters of workloads
//! and units follow, from any node; a leader change submits no second decommission.

use std::time::Duration;

use serde_json::{json, Value};
use steward::client::{
    AssignmentKind, AssignmentStream, Client, Consistency, OpListOptions, OpReport, OperationInfo,
};
use steward::config::OperationsConfig;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::harness::*;

const WAIT: Duration = Duration::from_secs(20);

fn client(cluster: &TestCluster, id: u64) -> Client {
    Client::connect(&[cluster.endpoint(id)]).expect("client")
}

fn container(name: &str, reservation: Value) -> Value {
    json!({
        "kind": "Container",
        "apiVersion": "provision.threefold.io/v1",
        "metadata": {"name": name},
        "spec": {"flist": "https://hub.grid.tf/ubuntu.flist"},
        "reservation": reservation,
    })
}

/// The next operation to run on `stream`, within `WAIT`.
async fn next_run(stream: &mut AssignmentStream) -> OperationInfo {
    let a = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an assignment in time")
        .expect("the stream is open")
        .expect("an assignment, not an error");
    assert_eq!(a.kind, AssignmentKind::Run as i32, "{a:?}");
    a.operation.expect("an assignment carries its operation")
}

/// Every retained operation on `Container/name`.
async fn ops_on(c: &Client, name: &str) -> Vec<OperationInfo> {
    let opts = OpListOptions {
        target: Some(("Container".into(), String::new(), name.into())),
        ..OpListOptions::default()
    };
    c.op_list(&opts).await.expect("op list").operations
}

/// (workloads, cru) reserved on `node`, read linearizably from `c`.
async fn reserved(c: &Client, node: &str) -> (u64, u64) {
    let reply = c
        .reservation_counters(node, Consistency::Linearizable)
        .await
        .expect("counters");
    match reply.nodes.as_slice() {
        [] => (0, 0),
        [n] => (n.workloads, n.units.unwrap_or_default().cru),
        more => panic!("asked for one node, got {more:?}"),
    }
}

/// Runs the decommission the worker was given to its end: the resource is deleted.
async fn decommission(worker: &Client, run: &OperationInfo, name: &str, reason: &str) {
    assert_eq!((run.kind.as_str(), run.name.as_str()), ("Container", name));
    assert_eq!(run.verb, "delete");
    let params: Value = serde_json::from_str(&run.params_json).expect("params");
    assert_eq!(
        params,
        json!({"decommission": {"reason": reason}}),
        "{run:?}"
    );
    assert!(run.idempotency_key.starts_with("decommission/"), "{run:?}");
    worker
        .worker_report(
            "provisiond@node-a",
            run,
            OpReport::Succeeded(json!({"state": "deleted"})),
        )
        .await
        .expect("report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_expire_into_one_decommission_and_counters_follow() {
    let operations = OperationsConfig {
        schedule_interval_ms: 20,
        sweep_interval_ms: 20,
        ..OperationsConfig::default()
    };
    let mut cluster =
        TestCluster::start_with_operations(3, test_raft(10_000, 1_000), operations).await;
    let leader = cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let (api, worker) = (
        client(&cluster, followers[0]),
        client(&cluster, followers[1]),
    );
    let id = "provisiond@node-a";
    worker
        .worker_register(id, &["Container:delete"], 4, Duration::from_secs(60))
        .await
        .expect("register");
    let mut stream = worker.worker_assignments(id).await.expect("assignments");

    // Bad input changes nothing and names the field.
    let bad = container("bad", json!({"nodeId": "node-a", "durationSeconds": 0}));
    let err = api.create(&bad).await.expect_err("zero duration");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("reservation.durationSeconds"),
        "{err:?}"
    );

    // c1 ends in 1 s, c2 never ends by itself, c3 in an hour.
    let units = |cru| json!({"cru": cru, "mru": 4, "sru": 50});
    let c1 = api
        .create(&container(
            "c1",
            json!({"nodeId": "node-a", "durationSeconds": 1, "units": units(2)}),
        ))
        .await
        .expect("c1");
    api.create(&container(
        "c2",
        json!({"nodeId": "node-a", "units": units(1)}),
    ))
    .await
    .expect("c2");
    api.create(&container(
        "c3",
        json!({"nodeId": "node-b", "durationSeconds": 3600, "units": units(8)}),
    ))
    .await
    .expect("c3");
    assert!(c1["reservation"]["expiresAt"].is_string(), "{c1}");
    for node in [1, 2, 3] {
        let c = client(&cluster, node);
        assert_eq!(reserved(&c, "node-a").await, (2, 3), "node {node}");
        assert_eq!(reserved(&c, "node-b").await, (1, 8), "node {node}");
    }

    // c1 ends: its decommission reaches the worker; the resource shows it.
    let run = next_run(&mut stream).await;
    let shown = api
        .get("Container", "default", "c1", Consistency::Linearizable)
        .await
        .expect("c1 still there");
    assert_eq!(
        shown["reservation"]["decommission"],
        run.id.as_str(),
        "{shown}"
    );
    decommission(&worker, &run, "c1", "expired").await;
    let gone = api
        .get("Container", "default", "c1", Consistency::Linearizable)
        .await;
    assert_eq!(gone.expect_err("c1 deleted").code(), Code::NotFound);
    assert_eq!(reserved(&api, "node-a").await, (1, 1));
    assert_eq!(ops_on(&api, "c1").await.len(), 1, "one decommission");

    // The owner marks c2 toDelete with a read-modify-write of what it got.
    let mut c2 = api
        .get("Container", "default", "c2", Consistency::Linearizable)
        .await
        .expect("c2");
    c2["reservation"]["toDelete"] = json!(true);
    let revision = rv(&c2);
    api.update(&c2, revision).await.expect("mark c2");
    let run = next_run(&mut stream).await;
    assert_eq!(run.name, "c2");

    // The leader dies before the worker reports: the next leader submits nothing again. Its
    // decommission round has run once c4 (marked at creation, after the change) gets its own.
    cluster.kill(leader);
    let survivors: Vec<u64> = cluster.running();
    let new_leader = cluster.wait_leader_among(&survivors).await;
    let api = client(&cluster, new_leader);
    wait_for("c4 created under the new leader", WAIT, || async {
        let c4 = container("c4", json!({"nodeId": "node-b", "toDelete": true}));
        match api.create(&c4).await {
            Ok(_) => Some(()),
            Err(e) if e.code() == Code::AlreadyExists => Some(()),
            Err(e) if e.code() == Code::Unavailable => None,
            Err(e) => panic!("create c4: {e}"),
        }
    })
    .await;
    // A new stream starts with the worker's current assignments: c2 (still its), then c4.
    let mut stream = worker.worker_assignments(id).await.expect("assignments");
    let mut runs: Vec<OperationInfo> = Vec::new();
    while !(runs.iter().any(|r| r.name == "c2") && runs.iter().any(|r| r.name == "c4")) {
        runs.push(next_run(&mut stream).await);
    }
    assert_eq!(ops_on(&api, "c2").await.len(), 1, "one decommission of c2");
    assert_eq!(ops_on(&api, "c4").await.len(), 1, "one decommission of c4");
    for run in &runs {
        decommission(&worker, run, &run.name, "toDelete").await;
    }
    wait_for("c2 and c4 deleted", WAIT, || async {
        let left = api.list("Container", "default", "", 0, "").await.ok()?;
        let names: Vec<&str> = left
            .items
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        (names == ["c3"]).then_some(())
    })
    .await;
    assert_eq!(reserved(&api, "node-a").await, (0, 0));
    assert_eq!(reserved(&api, "node-b").await, (1, 8));
    let all = api
        .reservation_counters("", Consistency::Serializable)
        .await
        .expect("counters");
    assert_eq!(all.pending_decommission, 1, "c3 waits for its end");

    // The CLI prints the same counters, exact JSON for scripts.
    let endpoint = cluster.endpoint(new_leader);
    let out = steward_cli(&endpoint, None, &["reservation", "counters", "-o", "json"]).await;
    let printed: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(printed["nodes"][0]["nodeId"], "node-b", "{printed}");
    assert_eq!(
        printed["nodes"][0]["workloadsByKind"],
        json!({"Container": 1})
    );
    assert_eq!(printed["total"]["units"]["cru"], 8);
}
