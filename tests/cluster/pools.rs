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
    // Before the acquire is sent: the leader stamps the lease's expiry from a time after this,
    // so no reset can come sooner than 1.5 s after it (taken after the reply, the bound failed
    // by the acquires' own latency).
    let start = Instant::now();
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

/// 64 clients competing for 100 resources (each client acquires, holds a moment, releases),
/// through every node: no resource is ever held by two. It asserts no latency; it prints
/// p50/p90/p99 of the acquires, and the README's figures come from `cargo test --release --test
/// cluster pool_acquire_by_64_clients -- --nocapture --test-threads 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_acquire_by_64_clients_over_100_resources_never_grants_one_twice() {
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

    // Both held; a short wait ends with Aborted POOL_WAIT_EXPIRED, and its claim is gone.
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
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    assert_eq!(
        steward::client::reason(&e),
        Some(steward::client::ErrorReason::PoolWaitExpired),
        "{e:?}"
    );
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

/// `steward pool sync -f FILE --every`: keeps the pool in step with the file as it changes (a
/// file that does not parse changes nothing), and stops cleanly on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_sync_every_follows_the_config_file() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let api = client(&cluster, cluster.running()[0]);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("resources.yaml");
    let write = |names: &str| {
        std::fs::write(
            &path,
            format!("resources:\n- type: vm\n  state: free\n  names: [{names}]\n"),
        )
        .expect("write config")
    };
    write("a, b");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .arg("--endpoints")
        .arg(cluster.endpoint(cluster.running()[1]))
        .args(["pool", "sync", "--every", "100ms", "-f"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn steward pool sync");
    // Its stderr, line by line, so the test can wait for the line that says a bad file was skipped.
    let (err_tx, err_rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if err_tx.send(line).is_err() {
                break;
            }
        }
    });
    let names = |api: Client| async move {
        let list = api
            .pool_list("vm", "", "", Consistency::Linearizable)
            .await
            .expect("list");
        list.resources
            .into_iter()
            .map(|r| r.name)
            .collect::<Vec<_>>()
    };
    let want = |w: &'static [&'static str]| {
        let api = api.clone();
        async move {
            wait_for(
                "the pool to follow the file",
                Duration::from_secs(20),
                || {
                    let api = api.clone();
                    async move { (names(api).await == w).then_some(()) }
                },
            )
            .await
        }
    };
    want(&["a", "b"]).await;
    write("b, c, d");
    want(&["b", "c", "d"]).await;
    // Not a config: skipped, the pool keeps the last good one; the next good one applies.
    std::fs::write(&path, "resources: [oops").expect("write");
    let skipped = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match err_rx.recv_timeout(left) {
                Ok(line) if line.contains("keeping the last good config") => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .expect("join");
    assert!(
        skipped.is_some(),
        "the bad file was not reported as skipped"
    );
    assert_eq!(names(api.clone()).await, ["b", "c", "d"]);
    write("d");
    want(&["d"]).await;
    // SIGTERM ends it cleanly.
    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) with a pid this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::task::spawn_blocking(move || child.wait().expect("wait"))
        .await
        .expect("join");
    assert!(status.success(), "{status:?}");
}

/// Kills the child process when dropped (a worker a test started).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The state, owner and parent of every pool resource, by name.
async fn pool_states(api: &Client) -> BTreeMap<String, (String, String, String)> {
    let list = api
        .pool_list("", "", "", Consistency::Linearizable)
        .await
        .expect("list");
    list.resources
        .into_iter()
        .map(|r| (r.name, (r.state, r.owner, r.parent)))
        .collect()
}

/// Mason on a real cluster (seed 002): `steward pool sync -f` with Boskos' resources and Mason's
/// configs in one file; `steward worker run` with examples/mason/construct.sh builds both
/// virtual clusters; a client acquires one with its leased resources in one call and releases it
/// dirty; a janitor cleans the physical ones; after the leader is killed (-9) the new leader's
/// Mason task builds it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mason_builds_virtual_resources_with_a_worker_across_a_leader_kill() {
    let mut cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mason");
    let endpoints: Vec<String> = cluster
        .running()
        .iter()
        .map(|id| cluster.client_addr(*id))
        .collect();
    let out = steward_cli(
        &endpoints.join(","),
        Some(examples),
        &["pool", "sync", "-f", "pool.yaml"],
    )
    .await;
    assert_eq!(
        out.trim(),
        "pool synced: 1 virtual configs in the config, 1 changed; 8 resources in the config, 8 changed"
    );
    let built_log = cluster.dir.path().join("constructs.log");
    let worker_log = std::fs::File::create(cluster.dir.path().join("worker.log")).expect("log");
    let _worker = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
            .args(["--endpoints", &endpoints.join(","), "worker", "run"])
            .args(["--id", "mason-1", "--handles", "MasonConstruct:construct"])
            .args(["--ttl", "3s", "--exec"])
            .arg(format!("{examples}/construct.sh"))
            .env("CONSTRUCT_LOG", &built_log)
            .stdout(std::process::Stdio::null())
            .stderr(worker_log)
            .spawn()
            .expect("spawn the worker"),
    );
    let api = Client::connect(&endpoints).expect("client");
    let free_clusters = |api: Client| async move {
        let states = pool_states(&api).await;
        let free = ["cluster-1", "cluster-2"]
            .iter()
            .all(|c| states[*c].0 == "free");
        free.then_some(states)
    };
    let states = wait_for(
        "both virtual clusters built",
        Duration::from_secs(30),
        || free_clusters(api.clone()),
    )
    .await;
    // Six physical resources leased, each parked under its cluster's name.
    let parked: Vec<_> = states
        .iter()
        .filter(|(_, (_, _, parent))| !parent.is_empty())
        .map(|(name, (state, owner, parent))| (name.clone(), state == parent && owner.is_empty()))
        .collect();
    assert_eq!(parked.len(), 6, "{states:?}");
    assert!(parked.iter().all(|(_, ok)| *ok), "{states:?}");
    assert_eq!(
        std::fs::read_to_string(&built_log)
            .expect("constructs log")
            .lines()
            .count(),
        2
    );

    // A client acquires a cluster with its leased resources, in one call.
    let got = api
        .pool_acquire("gke-cluster", "free", "busy", "e2e-job", "")
        .await
        .expect("acquire");
    let cluster_res = got.resource.expect("resource");
    assert_eq!(cluster_res.owner, "e2e-job");
    assert!(cluster_res.user_data["endpoint"].starts_with("https://cluster-"));
    assert_eq!(got.leased.len(), 3);
    assert!(got
        .leased
        .iter()
        .all(|r| r.owner == "e2e-job" && r.state == "busy" && r.parent == cluster_res.name));
    let leased: Vec<String> = got.leased.iter().map(|r| r.name.clone()).collect();
    // Its leased resources cannot be released on their own.
    let alone = api
        .pool_release(&leased[0], "e2e-job", "free")
        .await
        .expect_err("release of a leased resource");
    assert_eq!(alone.code(), Code::FailedPrecondition, "{alone:?}");

    // The leader dies; the cluster is released dirty through a survivor.
    let leader = cluster.wait_leader().await;
    cluster.kill(leader);
    let survivors = cluster.running();
    // A write forwarded to the dead leader would be of unknown outcome; wait for the new one.
    cluster.wait_leader_among(&survivors).await;
    let api = Client::connect(
        &survivors
            .iter()
            .map(|id| cluster.client_addr(*id))
            .collect::<Vec<_>>(),
    )
    .expect("client");
    api.pool_release(&cluster_res.name, "e2e-job", "dirty")
        .await
        .expect("release dirty");
    let states = pool_states(&api).await;
    assert_eq!(
        states[&cluster_res.name],
        ("fulfilling".to_string(), "mason".to_string(), String::new())
    );
    for name in &leased {
        assert_eq!(
            states[name],
            ("dirty".to_string(), String::new(), String::new())
        );
    }
    // The janitor cleans them; the new leader's Mason task has the cluster built again.
    for name in &leased {
        let msg = pb::PoolAcquireByStateRequest {
            state: "dirty".into(),
            dest: "cleaning".into(),
            owner: "janitor".into(),
            names: vec![name.clone()],
        };
        api.pool_acquire_by_state(msg)
            .await
            .expect("janitor acquire");
        api.pool_release(name, "janitor", "free")
            .await
            .expect("janitor release");
    }
    wait_for("the cluster built again", Duration::from_secs(30), || {
        free_clusters(api.clone())
    })
    .await;
    let lines = std::fs::read_to_string(&built_log).expect("constructs log");
    assert_eq!(lines.lines().count(), 3, "{lines}");
    assert!(lines
        .lines()
        .last()
        .is_some_and(|l| l.starts_with(&cluster_res.name)));
}

/// Dynamic pools on a real cluster (Boskos' min-count/max-count, from `steward pool sync -f`):
/// waiting acquires through every node make the pool grow to its max and no further, a release
/// serves the next waiter, a lowered max shrinks it as leases end, and the leader's reaper
/// replaces a resource at the end of its lifespan.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamic_pools_grow_for_waiters_shrink_to_their_max_and_renew_after_their_lifespan() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let dir = tempfile::tempdir().expect("dir");
    let config = |max: u32, lifespan: &str| {
        let text = format!(
            "resources:\n- type: vm\n  state: free\n  min-count: 1\n  max-count: {max}\n{lifespan}"
        );
        std::fs::write(dir.path().join("pool.yaml"), text).expect("write config");
    };
    config(3, "");
    let endpoint = cluster.endpoint(cluster.running()[0]);
    let dir_text = dir.path().to_str().expect("utf-8 dir").to_string();
    let out = steward_cli(
        &endpoint,
        Some(&dir_text),
        &["pool", "sync", "-f", "pool.yaml"],
    )
    .await;
    assert!(out.starts_with("pool synced"), "{out}");
    let api = client(&cluster, cluster.running()[1]);
    let names = |api: Client| async move {
        let list = api
            .pool_list("vm", "", "", Consistency::Linearizable)
            .await
            .expect("list");
        list.resources
            .into_iter()
            .map(|r| (r.name, r.owner))
            .collect::<BTreeMap<String, String>>()
    };
    assert_eq!(names(api.clone()).await.len(), 1, "the min");
    // Four jobs wait, through every node: three get a vm (two created for them), one waits.
    let mut jobs = Vec::new();
    for (i, id) in cluster.running().iter().cycle().take(4).enumerate() {
        let c = Client::connect_with_timeout(&[cluster.endpoint(*id)], Duration::from_secs(70))
            .expect("client");
        jobs.push(tokio::spawn(async move {
            let owner = format!("job-{i}");
            let reply = c
                .pool_acquire_wait("vm", "free", "busy", &owner, "", Duration::from_secs(60))
                .await
                .expect("acquire");
            (owner, reply.resource.expect("resource").name)
        }));
    }
    let held = wait_for("three vms leased", Duration::from_secs(20), || {
        let api = api.clone();
        async move {
            let n = names(api).await;
            (n.values().filter(|o| !o.is_empty()).count() == 3).then_some(n)
        }
    })
    .await;
    assert_eq!(held.len(), 3, "never more than the max: {held:?}");
    // One job releases: the fourth gets its vm.
    let (first_owner, first_vm) = held
        .iter()
        .next()
        .map(|(n, o)| (o.clone(), n.clone()))
        .expect("one");
    api.pool_release(&first_vm, &first_owner, "free")
        .await
        .expect("release");
    let mut leases = BTreeMap::new();
    for job in jobs {
        let (owner, vm) = job.await.expect("job");
        leases.insert(owner, vm);
    }
    assert_eq!(leases.len(), 4);
    // The max drops to 1: as the jobs release, the pool shrinks to one.
    config(1, "");
    steward_cli(
        &endpoint,
        Some(&dir_text),
        &["pool", "sync", "-f", "pool.yaml"],
    )
    .await;
    for (owner, vm) in &leases {
        if *owner == first_owner {
            continue;
        }
        api.pool_release(vm, owner, "free").await.expect("release");
    }
    let left = names(api.clone()).await;
    assert_eq!(left.len(), 1, "{left:?}");
    // A 1 s lifespan: the leader's reaper deletes the unowned vm and the min brings a new one.
    config(1, "  lifespan: 1s\n");
    steward_cli(
        &endpoint,
        Some(&dir_text),
        &["pool", "sync", "-f", "pool.yaml"],
    )
    .await;
    let old: Vec<String> = left.into_keys().collect();
    wait_for(
        "a vm renewed after its lifespan",
        Duration::from_secs(20),
        || {
            let api = api.clone();
            let old = old.clone();
            async move {
                let now: Vec<String> = names(api).await.into_keys().collect();
                (now.len() == 1 && now != old).then_some(())
            }
        },
    )
    .await;
}
