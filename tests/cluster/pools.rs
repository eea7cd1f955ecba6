//! Leased pools on a real 3-node cluster (Boskos, seed 002): many clients on every node compete
//! for few resources and no resource is ever held by two owners at once; repeated request ids;
//! the leader's reaper takes back a lease whose owner stopped heartbeating; the CLI syncs Boskos'
//! own config and prints metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use steward::client::{Client, Consistency};
use steward::proto::v1 as pb;
use tonic::Code;

use crate::harness::*;

fn client(cluster: &TestCluster, id: u64) -> Client {
    Client::connect(&[cluster.endpoint(id)]).expect("client")
}

fn sync_msg(names: &[String], rtype: &str, expiry_busy_ms: Option<u64>) -> pb::PoolSyncRequest {
    let mut msg = pb::PoolSyncRequest {
        resources: names
            .iter()
            .map(|n| pb::PoolSyncEntry {
                name: n.clone(),
                r#type: rtype.into(),
                state: "free".into(),
            })
            .collect(),
        ..Default::default()
    };
    if let Some(ms) = expiry_busy_ms {
        msg.expiry.insert(
            rtype.into(),
            pb::PoolTypeExpiry {
                expiry_ms: [("busy".to_string(), ms)].into(),
            },
        );
    }
    msg
}

/// One lease as its owner saw it: acknowledged at `from`, release sent at `to`.
#[derive(Clone, Debug)]
struct Held {
    owner: String,
    from: Instant,
    to: Instant,
}

/// `clients` tasks (spread over every node) acquire, hold briefly and release `rounds` times each;
/// returns every lease per resource name, and the acquire latencies.
async fn contend(
    cluster: &TestCluster,
    rtype: &str,
    clients: usize,
    rounds: usize,
) -> (BTreeMap<String, Vec<Held>>, Vec<Duration>) {
    let held: Arc<Mutex<BTreeMap<String, Vec<Held>>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let nodes = cluster.running();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let api = client(cluster, nodes[c % nodes.len()]);
        let (held, latencies) = (held.clone(), latencies.clone());
        let rtype = rtype.to_string();
        tasks.push(tokio::spawn(async move {
            let owner = format!("job-{c}");
            let mut done = 0;
            while done < rounds {
                let sent = Instant::now();
                let reply = match api.pool_acquire(&rtype, "free", "busy", &owner, "").await {
                    Ok(r) => r,
                    Err(s) if s.code() == Code::NotFound => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    Err(s) => panic!("{owner}: acquire: {s:?}"),
                };
                let from = Instant::now();
                latencies.lock().expect("latencies").push(from - sent);
                let r = reply.resource.expect("a leased resource");
                assert_eq!(
                    (r.owner.as_str(), r.state.as_str()),
                    (owner.as_str(), "busy")
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
                let to = Instant::now();
                api.pool_release(&r.name, &owner, "free")
                    .await
                    .expect("release");
                held.lock()
                    .expect("held")
                    .entry(r.name)
                    .or_default()
                    .push(Held {
                        owner: owner.clone(),
                        from,
                        to,
                    });
                done += 1;
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let held = Arc::try_unwrap(held)
        .expect("held")
        .into_inner()
        .expect("held");
    let latencies = Arc::try_unwrap(latencies)
        .expect("lat")
        .into_inner()
        .expect("lat");
    (held, latencies)
}

/// No two leases of one resource overlap: each began (acknowledged) after the one before it was
/// given back (release sent).
fn assert_never_held_twice(held: &BTreeMap<String, Vec<Held>>) {
    for (name, leases) in held {
        let mut leases = leases.clone();
        leases.sort_by_key(|h| h.from);
        for pair in leases.windows(2) {
            assert!(
                pair[1].from > pair[0].to,
                "{name} was leased by {} while {} held it",
                pair[1].owner,
                pair[0].owner
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_few_resources_never_two_owners() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let api = client(&cluster, cluster.running()[0]);
    let names: Vec<String> = (0..4).map(|i| format!("proj-{i}")).collect();
    api.pool_sync(sync_msg(&names, "gce", None))
        .await
        .expect("sync");
    let (held, _) = contend(&cluster, "gce", 12, 5).await;
    assert_eq!(held.values().map(Vec::len).sum::<usize>(), 60);
    assert_never_held_twice(&held);
    // All given back: 4 free, no owners; from every node.
    for id in cluster.running() {
        let m = client(&cluster, id)
            .pool_metrics("gce", Consistency::Linearizable)
            .await
            .expect("metrics");
        assert_eq!(m.current, [("free".to_string(), 4)].into());
        assert!(m.owners.is_empty());
    }

    // A repeated request id answers the same lease, through another node.
    let a = client(&cluster, cluster.running()[1]);
    let first = api
        .pool_acquire("gce", "free", "busy", "job-x", "req-7")
        .await
        .expect("acquire");
    let again = a
        .pool_acquire("gce", "free", "busy", "job-x", "req-7")
        .await
        .expect("again");
    assert_eq!(first.resource, again.resource);
    assert_eq!(first.revision, again.revision, "nothing changed");
    let name = first.resource.expect("resource").name;
    // Only the owner may heartbeat or release, naming the current state.
    let bad = a
        .pool_release(&name, "job-y", "free")
        .await
        .expect_err("not the owner");
    assert_eq!(bad.code(), Code::FailedPrecondition, "{bad:?}");
    let hb = a
        .pool_update(pb::PoolUpdateRequest {
            name: name.clone(),
            owner: "job-x".into(),
            state: "busy".into(),
            user_data: [("cluster".to_string(), "c1".to_string())].into(),
        })
        .await
        .expect("heartbeat");
    assert_eq!(hb.resource.expect("r").user_data["cluster"], "c1");
    let bad = a
        .pool_acquire("gce", "free", "busy", "Bad Owner", "")
        .await
        .expect_err("bad owner");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("owner:"), "{bad:?}");
    // The objects are read-only to the resource API.
    let direct = api
        .delete("PoolResource", "default", &name, 0)
        .await
        .expect_err("direct");
    assert_eq!(direct.code(), Code::InvalidArgument, "{direct:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_takes_back_a_lease_whose_owner_stopped_heartbeating() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let api = client(&cluster, cluster.running()[2]);
    let names = vec!["vm-1".to_string(), "vm-2".to_string()];
    api.pool_sync(sync_msg(&names, "vm", Some(1_500)))
        .await
        .expect("sync");
    let gone = api
        .pool_acquire("vm", "free", "busy", "dead-job", "")
        .await
        .expect("acquire");
    let alive = api
        .pool_acquire("vm", "free", "busy", "live-job", "")
        .await
        .expect("acquire");
    let (gone, alive) = (
        gone.resource.expect("r").name,
        alive.resource.expect("r").name,
    );
    let start = Instant::now();
    // live-job heartbeats; dead-job does not.
    let reset = wait_for(
        "the dead job's lease to be reset",
        Duration::from_secs(20),
        || async {
            api.pool_update(pb::PoolUpdateRequest {
                name: alive.clone(),
                owner: "live-job".into(),
                state: "busy".into(),
                user_data: Default::default(),
            })
            .await
            .expect("heartbeat");
            let list = api
                .pool_list("vm", "", "", Consistency::Linearizable)
                .await
                .expect("list");
            list.resources
                .into_iter()
                .find(|r| r.name == gone && r.owner.is_empty())
        },
    )
    .await;
    assert_eq!(reset.state, "dirty");
    assert!(
        start.elapsed() >= Duration::from_millis(1_500),
        "not before its expiry"
    );
    let live = api
        .pool_list("vm", "busy", "live-job", Consistency::Linearizable)
        .await
        .expect("list");
    assert_eq!(live.resources.len(), 1, "the heartbeating lease stays");
    let late = api
        .pool_release(&gone, "dead-job", "free")
        .await
        .expect_err("reset lease");
    assert_eq!(late.code(), Code::FailedPrecondition);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_syncs_a_boskos_config_and_prints_metrics() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let endpoint = cluster.endpoint(cluster.running()[1]);
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("resources.yaml");
    std::fs::write(
        &config,
        "resources:\n- type: gce-project\n  state: dirty\n  names: [p-1, p-2, p-3]\n- type: gke\n  state: free\n  names: [k-1]\n",
    )
    .expect("write");
    let config = config.to_str().expect("path").to_string();
    let out = steward_cli(&endpoint, None, &["pool", "sync", "-f", &config]).await;
    assert_eq!(out, "pool synced: 4 resources in the config, 4 changed\n");
    let out = steward_cli(
        &endpoint,
        None,
        &[
            "pool",
            "acquire",
            "--type",
            "gce-project",
            "--state",
            "dirty",
            "--dest",
            "cleaning",
            "--owner",
            "janitor",
            "-o",
            "json",
        ],
    )
    .await;
    let leased: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(leased[0]["owner"], "janitor");
    let out = steward_cli(
        &endpoint,
        None,
        &["pool", "metrics", "--type", "gce-project", "-o", "json"],
    )
    .await;
    let mut metrics: Value = serde_json::from_str(&out).expect("json");
    metrics["revision"] = json!(0);
    assert_eq!(
        metrics,
        json!({"type": "gce-project", "current": {"cleaning": 1, "dirty": 2},
               "owners": {"janitor": 1}, "total": 3, "revision": 0})
    );
    let count = steward_cli(
        &endpoint,
        None,
        &[
            "count",
            "PoolResource",
            "-A",
            "--by",
            "label:type",
            "-o",
            "json",
        ],
    )
    .await;
    let count: Value = serde_json::from_str(&count).expect("json");
    assert_eq!(count["counts"], json!({"gce-project": 3, "gke": 1}));
}

/// Acquire latency with 64 clients competing for 100 resources (each client acquires, holds a
/// moment, releases), through every node. Prints p50/p99; the README's figures come from
/// `cargo test --release --test cluster pool_acquire_latency -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_acquire_latency_with_64_clients_and_100_resources() {
    let rounds = if cfg!(debug_assertions) { 3 } else { 30 };
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let api = client(&cluster, cluster.running()[0]);
    let names: Vec<String> = (0..100).map(|i| format!("r-{i}")).collect();
    api.pool_sync(sync_msg(&names, "bench", None))
        .await
        .expect("sync");
    let started = Instant::now();
    let (held, mut lat) = contend(&cluster, "bench", 64, rounds).await;
    let elapsed = started.elapsed();
    assert_never_held_twice(&held);
    lat.sort();
    let pct = |p: usize| lat[(lat.len() * p / 100).min(lat.len() - 1)];
    println!(
        "pool acquire, 64 clients over 3 nodes, 100 resources: {} leases in {:?} ({:.0}/s); \
         acquire p50 {:?} p90 {:?} p99 {:?}",
        lat.len(),
        elapsed,
        lat.len() as f64 / elapsed.as_secs_f64(),
        pct(50),
        pct(90),
        pct(99)
    );
}

/// Acquires that wait: queued in arrival order, served as leases are given back, through any
/// node; a wait that ends before anything frees up answers NotFound and leaves no claim behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_acquires_are_served_as_resources_free_up_and_time_out_cleanly() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let nodes = cluster.running();
    let api = client(&cluster, nodes[0]);
    let names = vec!["w-1".to_string(), "w-2".to_string()];
    api.pool_sync(sync_msg(&names, "wide", None))
        .await
        .expect("sync");
    let held: Arc<Mutex<BTreeMap<String, Vec<Held>>>> = Arc::default();
    let mut tasks = Vec::new();
    for c in 0..6 {
        let api = client(&cluster, nodes[c % nodes.len()]);
        let held = held.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("waiter-{c}");
            let reply = api
                .pool_acquire_wait("wide", "free", "busy", &owner, "", Duration::from_secs(8))
                .await
                .unwrap_or_else(|s| panic!("{owner}: {s:?}"));
            let from = Instant::now();
            let r = reply.resource.expect("a lease");
            assert_eq!(r.owner, owner);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let to = Instant::now();
            api.pool_release(&r.name, &owner, "free")
                .await
                .expect("release");
            held.lock()
                .expect("held")
                .entry(r.name)
                .or_default()
                .push(Held { owner, from, to });
        }));
    }
    for t in tasks {
        t.await.expect("waiter");
    }
    let held = Arc::try_unwrap(held)
        .expect("held")
        .into_inner()
        .expect("held");
    assert_eq!(
        held.values().map(Vec::len).sum::<usize>(),
        6,
        "every waiter was served"
    );
    assert_never_held_twice(&held);

    // Both held; a short wait ends with NotFound, and its claim is gone.
    let long = client(&cluster, nodes[1]);
    for owner in ["x", "y"] {
        long.pool_acquire("wide", "free", "busy", owner, "")
            .await
            .expect("acquire");
    }
    let started = Instant::now();
    let e = long
        .pool_acquire_wait("wide", "free", "busy", "z", "", Duration::from_millis(600))
        .await
        .expect_err("nothing frees up");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(started.elapsed() >= Duration::from_millis(600));
    let claims = long
        .count(
            "PoolClaim",
            "",
            "",
            "label:owner",
            Consistency::Linearizable,
        )
        .await
        .expect("count");
    assert_eq!(claims.total, 0, "no claim left behind");
}
